/* SPDX-License-Identifier: MIT */
/* broker_handle() in-process, with fake hooks: bytes in, one reply out,
 * and what the broker holds and asks its embedder afterwards. The protocol
 * suite proves the same over a socket; here each path is pinned down
 * without one: a refusal (from the planner, the rate limit, the target
 * checks) becomes one Error reply in its own words, a grant is watched and
 * ends with its process, and a hook that fails leaves nothing behind. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker.h"
#include "macro.h"
#include "pace.pb-c.h"
#include "test.h"

#define MAX_WATCHES 8

typedef struct FakeEmbedder {
        int watch_error; /* what watch_pidfd answers: 0, or a negative errno */
        size_t n_watched, n_unwatched;
        uint64_t watched_id[MAX_WATCHES];
        char last_log[512];
        int last_priority;
} FakeEmbedder;

static int fake_watch(void *userdata, int pidfd, uint64_t id, void **ret_watch) {
        FakeEmbedder *f = userdata;

        if (f->watch_error < 0)
                return f->watch_error;
        ASSERT_TRUE(pidfd >= 0);
        ASSERT_TRUE(f->n_watched < MAX_WATCHES);
        f->watched_id[f->n_watched++] = id;
        *ret_watch = f; /* anything non-NULL: handed back to unwatch */
        return 0;
}

static void fake_unwatch(void *userdata, void *watch) {
        FakeEmbedder *f = userdata;

        ASSERT_TRUE(watch == f);
        f->n_unwatched++;
}

static void fake_log(void *userdata, int priority, const char *message) {
        FakeEmbedder *f = userdata;

        snprintf(f->last_log, sizeof(f->last_log), "%s", message);
        f->last_priority = priority;
}

/* One managed CPU, so that what one grant takes is what the next cannot
 * have. This process is the target: it runs as root under CI, hence the
 * key. */
static Broker *broker_for(FakeEmbedder *f, uint32_t max_requests_per_second) {
        Broker *b = NULL;
        PaceConfig config;

        pace_config_init(&config);
        config.n_cpus = 1;
        config.cpus[0] = 0;
        config.cpus_set = true;
        config.reserve_root_processes = true;
        if (max_requests_per_second)
                config.max_requests_per_second = max_requests_per_second;
        BrokerOptions options = {
                .config = &config,
                .runtime_dir_fd = -1,
                .proc_root = "/proc",
                /* The test speaks as itself for others (self_peer()). */
                .delegate_uid = getuid(),
                .hooks = {
                        .userdata = f,
                        .watch_pidfd = fake_watch,
                        .unwatch = fake_unwatch,
                        .log = fake_log,
                },
        };
        ASSERT_OK(broker_new(&options, &b));
        return b;
}

static BrokerPeer self_peer(void) {
        return (BrokerPeer) { .pid = getpid(), .uid = getuid(), .gid = getgid(), .pidfd = -1, .now_ns = 1 };
}

/* The reply to raw bytes; the caller frees it. */
static Pace__Response *exchange_bytes(Broker *b, const BrokerPeer *peer, const uint8_t *bytes, size_t size) {
        _cleanup_free_ uint8_t *reply = NULL;
        size_t reply_size = 0;

        ASSERT_OK(broker_handle(b, peer, bytes, size, &reply, &reply_size));
        Pace__Response *resp = pace__response__unpack(NULL, reply_size, reply);
        ASSERT_TRUE(resp);
        ASSERT_EQ(resp->version, 1);
        return resp;
}

static Pace__Response *exchange(Broker *b, const BrokerPeer *peer, Pace__Request *req) {
        uint8_t buf[1024];
        size_t size = pace__request__get_packed_size(req);

        ASSERT_TRUE(size <= sizeof(buf));
        pace__request__pack(req, buf);
        return exchange_bytes(b, peer, buf, size);
}

static Pace__Response *reserve(Broker *b, const BrokerPeer *peer, uint64_t period_ns, uint32_t utilization_ppm) {
        Pace__Request req = PACE__REQUEST__INIT;
        Pace__ReserveRequest r = PACE__RESERVE_REQUEST__INIT;

        r.period_ns = period_ns;
        r.utilization_ppm = utilization_ppm;
        req.version = 1;
        req.body_case = PACE__REQUEST__BODY_RESERVE;
        req.reserve = &r;
        return exchange(b, peer, &req);
}

/* resp is an Error with this code whose message says `says`; frees it. */
static void assert_refused(Pace__Response *resp, Pace__ErrorCode code, const char *says) {
        ASSERT_EQ(resp->body_case, PACE__RESPONSE__BODY_ERROR);
        if (resp->error->code != code)
                TEST_FAIL_("error %d (\"%s\"), expected %d", resp->error->code, resp->error->message, code);
        ASSERT_CONTAINS(resp->error->message, says);
        pace__response__free_unpacked(resp, NULL);
}

/* resp is a Grant; returns its id and frees it. */
static uint64_t assert_granted(Pace__Response *resp) {
        if (resp->body_case != PACE__RESPONSE__BODY_GRANT)
                TEST_FAIL_("not granted: %s", resp->body_case == PACE__RESPONSE__BODY_ERROR ? resp->error->message : "?");
        uint64_t id = resp->grant->id;
        pace__response__free_unpacked(resp, NULL);
        return id;
}

TEST(a_planner_refusal_is_one_error_reply_in_the_planners_words) {
        FakeEmbedder f = {};
        _cleanup_(broker_freep) Broker *b = broker_for(&f, 0);
        BrokerPeer peer = self_peer();

        /* More than non_rt_share leaves: no capacity, however empty. */
        assert_refused(reserve(b, &peer, 50 * NSEC_PER_MSEC, 990000), PACE__ERROR_CODE__ERROR_NO_CAPACITY,
                       "non_rt_share");
        ASSERT_CONTAINS(f.last_log, "refused: ");
        ASSERT_CONTAINS(f.last_log, "non_rt_share");
        /* Out of range: an argument error, not a capacity one. */
        assert_refused(reserve(b, &peer, 500 * NSEC_PER_USEC, 100000), PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT,
                       "shorter than one slot");
        ASSERT_EQ(broker_n_reservations(b), 0);
        ASSERT_EQ(f.n_watched, 0);
}

TEST(a_grant_is_watched_and_ends_with_its_process) {
        FakeEmbedder f = {};
        _cleanup_(broker_freep) Broker *b = broker_for(&f, 0);
        BrokerPeer peer = self_peer();

        uint64_t id = assert_granted(reserve(b, &peer, 50 * NSEC_PER_MSEC, 100000));
        ASSERT_EQ(broker_n_reservations(b), 1);
        ASSERT_EQ(f.n_watched, 1);
        ASSERT_EQ(f.watched_id[0], id);
        ASSERT_CONTAINS(f.last_log, "reservation ");
        /* One reservation per process: the second is refused by name. */
        assert_refused(reserve(b, &peer, 50 * NSEC_PER_MSEC, 100000), PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT,
                       "already holds reservation");

        broker_process_exited(b, id);
        ASSERT_EQ(broker_n_reservations(b), 0);
        ASSERT_EQ(f.n_unwatched, 1);
}

TEST(a_watch_that_fails_leaves_nothing_granted) {
        FakeEmbedder f = { .watch_error = -EMFILE };
        _cleanup_(broker_freep) Broker *b = broker_for(&f, 0);
        BrokerPeer peer = self_peer();

        assert_refused(reserve(b, &peer, 50 * NSEC_PER_MSEC, 500000), PACE__ERROR_CODE__ERROR_INTERNAL,
                       "cannot watch");
        ASSERT_EQ(broker_n_reservations(b), 0);
        /* Its slots were given back: on the one CPU, a second 50% fits
         * only if the first is gone from the plan too. */
        f.watch_error = 0;
        assert_granted(reserve(b, &peer, 50 * NSEC_PER_MSEC, 500000));
        ASSERT_EQ(broker_n_reservations(b), 1);
}

TEST(garbage_costs_tokens_and_the_limit_names_itself) {
        FakeEmbedder f = {};
        _cleanup_(broker_freep) Broker *b = broker_for(&f, 3);
        BrokerPeer peer = self_peer();
        static const uint8_t garbage[] = "\xff\xff\xff\xff not protobuf";

        peer.uid = 4242; /* root is never limited */
        for (int i = 0; i < 3; i++)
                assert_refused(exchange_bytes(b, &peer, garbage, sizeof(garbage)), PACE__ERROR_CODE__ERROR_MALFORMED,
                               "not a valid pace.Request");
        assert_refused(exchange_bytes(b, &peer, garbage, sizeof(garbage)), PACE__ERROR_CODE__ERROR_LIMIT_EXCEEDED,
                       "max_requests_per_second");
        /* Another user has a bucket of its own. */
        BrokerPeer other = peer;
        other.uid = 4243;
        assert_refused(exchange_bytes(b, &other, garbage, sizeof(garbage)), PACE__ERROR_CODE__ERROR_MALFORMED,
                       "not a valid pace.Request");
        /* A second later the bucket has refilled. */
        peer.now_ns += NSEC_PER_SEC;
        assert_refused(exchange_bytes(b, &peer, garbage, sizeof(garbage)), PACE__ERROR_CODE__ERROR_MALFORMED,
                       "not a valid pace.Request");
}

TEST(version_and_body_are_checked_before_any_handler) {
        FakeEmbedder f = {};
        _cleanup_(broker_freep) Broker *b = broker_for(&f, 0);
        BrokerPeer peer = self_peer();
        Pace__Request req = PACE__REQUEST__INIT;

        req.version = 2;
        assert_refused(exchange(b, &peer, &req), PACE__ERROR_CODE__ERROR_UNSUPPORTED_VERSION, "version 2");
        req.version = 1;
        assert_refused(exchange(b, &peer, &req), PACE__ERROR_CODE__ERROR_MALFORMED, "no body");
        assert_refused(exchange_bytes(b, &peer, NULL, 0), PACE__ERROR_CODE__ERROR_MALFORMED, "empty message");
}

TEST(a_delegate_speaks_only_for_a_live_process_and_only_if_it_is_one) {
        FakeEmbedder f = {};
        _cleanup_(broker_freep) Broker *b = broker_for(&f, 0);
        BrokerPeer delegate = self_peer();
        Pace__Request req = PACE__REQUEST__INIT;
        Pace__ReserveRequest r = PACE__RESERVE_REQUEST__INIT;
        Pace__Caller caller = PACE__CALLER__INIT;

        /* A process that has come and gone: its pid names no one. */
        pid_t child = fork();
        ASSERT_TRUE(child >= 0);
        if (child == 0)
                _exit(0);
        ASSERT_EQ(waitpid(child, NULL, 0), child);

        r.period_ns = 50 * NSEC_PER_MSEC;
        r.utilization_ppm = 100000;
        caller.pid = child;
        caller.uid = getuid();
        req.version = 1;
        req.body_case = PACE__REQUEST__BODY_RESERVE;
        req.reserve = &r;
        req.on_behalf_of = &caller;
        assert_refused(exchange(b, &delegate, &req), PACE__ERROR_CODE__ERROR_NO_SUCH_PROCESS, "has exited");

        /* Only root and the broker's own uid may delegate at all. */
        BrokerPeer stranger = delegate;
        stranger.uid = 4242;
        caller.pid = getpid();
        assert_refused(exchange(b, &stranger, &req), PACE__ERROR_CODE__ERROR_PERMISSION_DENIED,
                       "may not ask on behalf of another process");
        ASSERT_EQ(broker_n_reservations(b), 0);
}

TEST_MAIN()
