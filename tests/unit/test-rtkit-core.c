/* SPDX-License-Identifier: MIT */
/* pace-rtkit's core without a bus or a broker: what it refuses itself, what
 * it asks the broker, and how the broker's answers become rtkit's errors. */
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "broker-client.h"
#include "macro.h"
#include "pace-limits.h"
#include "rtkit-core.h"
#include "test.h"

/* The fake broker: remembers the last request and answers as told. */
typedef struct Fake {
        int calls;
        int transport_error;          /* returned instead of an answer */
        Pace__ErrorCode error_code;   /* 0: success of the expected kind */
        const char *error_message;
        Pace__Request *last;          /* decoded copy of what was sent */
} Fake;

static int fake_exchange(void *userdata, const Pace__Request *req, Pace__Response **ret) {
        Fake *f = userdata;
        uint8_t buf[PACE_MAX_MESSAGE_SIZE];
        size_t n;

        f->calls++;
        if (f->last)
                pace__request__free_unpacked(f->last, NULL);
        /* Through the wire format, so the request is shown to encode. */
        n = pace__request__pack(req, buf);
        f->last = pace__request__unpack(NULL, n, buf);
        ASSERT_TRUE(f->last);
        if (f->transport_error)
                return f->transport_error;

        Pace__Response resp = PACE__RESPONSE__INIT;
        Pace__Error error = PACE__ERROR__INIT;
        Pace__Grant grant = PACE__GRANT__INIT;
        Pace__NiceReply nice = PACE__NICE_REPLY__INIT;
        Pace__AdminReply admin = PACE__ADMIN_REPLY__INIT;
        resp.version = PACE_PROTOCOL_VERSION;
        if (f->error_code) {
                error.code = f->error_code;
                error.message = (char *) (f->error_message ?: "refused");
                resp.body_case = PACE__RESPONSE__BODY_ERROR;
                resp.error = &error;
        } else if (req->body_case == PACE__REQUEST__BODY_RESERVE) {
                grant.id = 7;
                grant.pid = req->reserve->pid;
                resp.body_case = PACE__RESPONSE__BODY_GRANT;
                resp.grant = &grant;
        } else if (req->body_case == PACE__REQUEST__BODY_NICE) {
                nice.pid = req->nice->pid;
                nice.tid = req->nice->tid;
                nice.nice = req->nice->nice;
                resp.body_case = PACE__RESPONSE__BODY_NICE;
                resp.nice = &nice;
        } else {
                admin.message = (char *) "reset";
                resp.body_case = PACE__RESPONSE__BODY_ADMIN;
                resp.admin = &admin;
        }
        n = pace__response__pack(&resp, buf);
        *ret = pace__response__unpack(NULL, n, buf);
        ASSERT_TRUE(*ret);
        return 0;
}

static PaceConfig config;
static Fake fake;
static RtkitCore core;
static const RtkitCaller caller = { .uid = 1000, .pid = 4242, .start_time = 123456 };

static void setup(void) {
        if (fake.last)
                pace__request__free_unpacked(fake.last, NULL);
        fake = (Fake) {};
        pace_config_init(&config);
        core = (RtkitCore) { .config = &config, .exchange = fake_exchange, .userdata = &fake,
                             .broker_path = "/run/pace/broker.sock" };
}

TEST(realtime_builds_a_thread_reservation_on_behalf) {
        RtkitError e;

        setup();
        ASSERT_OK(rtkit_make_realtime(&core, &caller, false, 0, 4243, 10, &e));
        ASSERT_EQ(fake.calls, 1);
        Pace__Request *r = fake.last;
        ASSERT_EQ(r->version, PACE_PROTOCOL_VERSION);
        ASSERT_EQ(r->body_case, PACE__REQUEST__BODY_RESERVE);
        ASSERT_TRUE(r->reserve->has_pid && r->reserve->has_tid && r->reserve->has_scope && r->reserve->has_kind);
        ASSERT_EQ(r->reserve->pid, 4242);
        ASSERT_EQ(r->reserve->tid, 4243);
        ASSERT_EQ(r->reserve->scope, PACE__SCOPE__SCOPE_THREAD);
        ASSERT_EQ(r->reserve->kind, PACE__KIND__KIND_SERVER);
        ASSERT_EQ(r->reserve->period_ns, config.rtkit_period_ns);
        ASSERT_EQ(r->reserve->utilization_ppm, config.rtkit_utilization_ppm);
        ASSERT_TRUE(r->on_behalf_of);
        ASSERT_EQ(r->on_behalf_of->uid, 1000);
        ASSERT_EQ(r->on_behalf_of->pid, 4242);
        ASSERT_EQ(r->on_behalf_of->start_time, 123456);
}

TEST(thread_zero_is_the_main_thread) {
        RtkitError e;

        setup();
        ASSERT_OK(rtkit_make_realtime(&core, &caller, false, 0, 0, 1, &e));
        ASSERT_EQ(fake.last->reserve->tid, 4242);
        ASSERT_OK(rtkit_make_realtime(&core, &caller, true, 777, 0, 1, &e));
        ASSERT_EQ(fake.last->reserve->pid, 777);
        ASSERT_EQ(fake.last->reserve->tid, 777);
        ASSERT_EQ(fake.last->on_behalf_of->pid, 4242); /* the caller stays the caller */
        ASSERT_OK(rtkit_make_high_priority(&core, &caller, true, 778, 0, -5, &e));
        ASSERT_EQ(fake.last->nice->pid, 778);
        ASSERT_EQ(fake.last->nice->tid, 778);
}

TEST(without_pid_the_process_argument_is_ignored) {
        RtkitError e;

        setup();
        ASSERT_OK(rtkit_make_realtime(&core, &caller, false, 99, 4250, 5, &e));
        ASSERT_EQ(fake.last->reserve->pid, 4242);
}

TEST(slots_kind_from_config) {
        RtkitError e;

        setup();
        config.rtkit_kind = PACE_RTKIT_KIND_SLOTS;
        config.rtkit_period_ns = 5 * NSEC_PER_MSEC;
        config.rtkit_utilization_ppm = 250000;
        ASSERT_OK(rtkit_make_realtime(&core, &caller, false, 0, 0, 5, &e));
        ASSERT_EQ(fake.last->reserve->kind, PACE__KIND__KIND_SLOTS);
        ASSERT_EQ(fake.last->reserve->period_ns, 5 * NSEC_PER_MSEC);
        ASSERT_EQ(fake.last->reserve->utilization_ppm, 250000);
}

/* Asks, for the caller's own thread, for a real-time priority (or with
 * nice for a nice level): refused with the rtkit error name and a message
 * that contains says (NULL: not checked). A failure names the value. */
static void assert_refused(bool nice, int64_t value, const char *name, const char *says) {
        const char *what = nice ? "nice level" : "priority";
        RtkitError e;
        int r = nice ? rtkit_make_high_priority(&core, &caller, false, 0, 0, (int32_t) value, &e)
                     : rtkit_make_realtime(&core, &caller, false, 0, 0, (uint32_t) value, &e);

        if (r >= 0)
                TEST_FAIL_("%s %" PRIi64 " was not refused", what, value);
        if (!e.name || strcmp(e.name, name) != 0)
                TEST_FAIL_("%s %" PRIi64 ": %s, not %s", what, value, e.name ?: "(null)", name);
        if (says && !strstr(e.message, says))
                TEST_FAIL_("%s %" PRIi64 ": \"%s\" does not contain \"%s\"", what, value, e.message, says);
}

TEST(priorities_as_rtkit) {
        RtkitError e;

        setup();
        assert_refused(false, 0, RTKIT_ERROR_FAILED, "priority 0");
        assert_refused(false, 100, RTKIT_ERROR_FAILED, NULL);
        assert_refused(false, UINT32_MAX, RTKIT_ERROR_FAILED, NULL);
        assert_refused(false, 21, RTKIT_ERROR_ACCESS_DENIED, "MaxRealtimePriority 20");
        ASSERT_EQ(fake.calls, 0); /* none of them reached the broker */
        ASSERT_OK(rtkit_make_realtime(&core, &caller, false, 0, 0, 20, &e));
        ASSERT_OK(rtkit_make_realtime(&core, &caller, false, 0, 0, 1, &e));
        config.rtkit_max_realtime_priority = 98;
        ASSERT_OK(rtkit_make_realtime(&core, &caller, false, 0, 0, 98, &e));
        assert_refused(false, 99, RTKIT_ERROR_ACCESS_DENIED, NULL);
}

TEST(nice_levels_as_rtkit) {
        RtkitError e;

        setup();
        assert_refused(true, -21, RTKIT_ERROR_FAILED, NULL);
        assert_refused(true, 20, RTKIT_ERROR_FAILED, NULL);
        assert_refused(true, INT32_MIN, RTKIT_ERROR_FAILED, NULL);
        assert_refused(true, -16, RTKIT_ERROR_ACCESS_DENIED, "MinNiceLevel -15");
        ASSERT_EQ(fake.calls, 0);
        ASSERT_OK(rtkit_make_high_priority(&core, &caller, false, 0, 4243, -15, &e));
        ASSERT_EQ(fake.last->body_case, PACE__REQUEST__BODY_NICE);
        ASSERT_EQ(fake.last->nice->pid, 4242);
        ASSERT_EQ(fake.last->nice->tid, 4243);
        ASSERT_EQ(fake.last->nice->nice, -15);
        ASSERT_EQ(fake.last->on_behalf_of->uid, 1000);
        ASSERT_OK(rtkit_make_high_priority(&core, &caller, false, 0, 0, 19, &e));
}

TEST(ids_that_are_not_pids) {
        RtkitError e;

        setup();
        ASSERT_TRUE(rtkit_make_realtime(&core, &caller, true, 0, 0, 5, &e) < 0);
        ASSERT_STREQ(e.name, RTKIT_ERROR_FAILED);
        ASSERT_CONTAINS(e.message, "process 0");
        ASSERT_TRUE(rtkit_make_realtime(&core, &caller, true, (uint64_t) INT32_MAX + 1, 0, 5, &e) < 0);
        ASSERT_CONTAINS(e.message, "process 2147483648");
        /* rtkit would cast this to pid 1: pace refuses it. */
        ASSERT_TRUE(rtkit_make_realtime(&core, &caller, true, (1ULL << 32) + 1, 0, 5, &e) < 0);
        ASSERT_TRUE(rtkit_make_realtime(&core, &caller, false, 0, UINT64_MAX, 5, &e) < 0);
        ASSERT_STREQ(e.name, RTKIT_ERROR_FAILED);
        ASSERT_CONTAINS(e.message, "thread 18446744073709551615");
        ASSERT_TRUE(rtkit_make_high_priority(&core, &caller, true, 12, (uint64_t) INT32_MAX + 5, 0, &e) < 0);
        ASSERT_CONTAINS(e.message, "thread");
        ASSERT_EQ(fake.calls, 0);
}

TEST(broker_errors_map_to_rtkit_names) {
        static const struct {
                Pace__ErrorCode code;
                const char *name;
        } map[] = {
                { PACE__ERROR_CODE__ERROR_PERMISSION_DENIED, RTKIT_ERROR_ACCESS_DENIED },
                { PACE__ERROR_CODE__ERROR_LIMIT_EXCEEDED, RTKIT_ERROR_ACCESS_DENIED },
                { PACE__ERROR_CODE__ERROR_NO_CAPACITY, RTKIT_ERROR_ACCESS_DENIED },
                { PACE__ERROR_CODE__ERROR_BUSY, RTKIT_ERROR_ACCESS_DENIED },
                { PACE__ERROR_CODE__ERROR_NO_SUCH_PROCESS, RTKIT_ERROR_FAILED },
                { PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT, RTKIT_ERROR_FAILED },
                { PACE__ERROR_CODE__ERROR_INTERNAL, RTKIT_ERROR_FAILED },
                { PACE__ERROR_CODE__ERROR_MALFORMED, RTKIT_ERROR_FAILED },
                { PACE__ERROR_CODE__ERROR_NO_SUCH_RESERVATION, RTKIT_ERROR_FAILED },
                { 99, RTKIT_ERROR_FAILED }, /* a code from a newer broker */
        };
        RtkitError e;

        for (size_t i = 0; i < ELEMENTSOF(map); i++) {
                setup();
                fake.error_code = map[i].code;
                fake.error_message = "the broker's own sentence";
                ASSERT_TRUE(rtkit_make_realtime(&core, &caller, false, 0, 0, 5, &e) < 0);
                ASSERT_STREQ(e.name, map[i].name);
                ASSERT_STREQ(e.message, "the broker's own sentence");
                ASSERT_TRUE(rtkit_make_high_priority(&core, &caller, false, 0, 0, 5, &e) < 0);
                ASSERT_STREQ(e.name, map[i].name);
        }
}

TEST(broker_away) {
        RtkitError e;

        setup();
        fake.transport_error = -ETIMEDOUT;
        ASSERT_TRUE(rtkit_make_realtime(&core, &caller, false, 0, 0, 5, &e) < 0);
        ASSERT_STREQ(e.name, RTKIT_ERROR_FAILED);
        ASSERT_CONTAINS(e.message, "pace-broker is not answering at /run/pace/broker.sock");
        fake.transport_error = -ECONNREFUSED;
        ASSERT_TRUE(rtkit_make_high_priority(&core, &caller, false, 0, 0, 5, &e) < 0);
        ASSERT_CONTAINS(e.message, "not answering");
        fake.transport_error = -ENOMEM;
        ASSERT_TRUE(rtkit_make_realtime(&core, &caller, false, 0, 0, 5, &e) < 0);
        ASSERT_STREQ(e.name, RTKIT_ERROR_NO_MEMORY);
}

TEST(reset_is_roots_and_on_behalf_only) {
        RtkitError e;
        RtkitCaller root = { .uid = 0, .pid = 1, .start_time = 1 };

        setup();
        ASSERT_ERR(rtkit_reset(&core, &caller, "ResetKnown", &e), -EPERM);
        ASSERT_STREQ(e.name, RTKIT_ERROR_ACCESS_DENIED);
        ASSERT_CONTAINS(e.message, "ResetKnown");
        ASSERT_EQ(fake.calls, 0);
        ASSERT_ERR(rtkit_check_root(&caller, "Exit", &e), -EPERM);
        ASSERT_STREQ(e.name, RTKIT_ERROR_ACCESS_DENIED);
        ASSERT_OK(rtkit_check_root(&root, "Exit", &e));

        ASSERT_OK(rtkit_reset(&core, &root, "ResetAll", &e));
        ASSERT_EQ(fake.last->body_case, PACE__REQUEST__BODY_RESET);
        ASSERT_TRUE(fake.last->reset->has_only_on_behalf && fake.last->reset->only_on_behalf);
        ASSERT_TRUE(fake.last->on_behalf_of == NULL); /* pace-rtkit asks as itself */
}

/* The real client against a fake broker socket that hangs up on idle
 * connections, as the broker does after client_timeout_ms. */
typedef struct Listener {
        int fd;
        int served;
        int drop_after_each; /* close each connection after one answer */
} Listener;

static void *serve(void *userdata) {
        Listener *l = userdata;
        for (;;) {
                int c = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);
                if (c < 0)
                        return NULL;
                for (;;) {
                        uint8_t buf[PACE_MAX_MESSAGE_SIZE];
                        ssize_t n = recv(c, buf, sizeof(buf), 0);
                        if (n <= 0)
                                break;
                        Pace__Request *req = pace__request__unpack(NULL, (size_t) n, buf);
                        Pace__Response resp = PACE__RESPONSE__INIT;
                        Pace__AdminReply admin = PACE__ADMIN_REPLY__INIT;
                        admin.message = (char *) "ok";
                        resp.version = PACE_PROTOCOL_VERSION;
                        resp.body_case = PACE__RESPONSE__BODY_ADMIN;
                        resp.admin = &admin;
                        size_t m = pace__response__pack(&resp, buf);
                        if (req)
                                pace__request__free_unpacked(req, NULL);
                        __atomic_add_fetch(&l->served, 1, __ATOMIC_SEQ_CST);
                        (void) send(c, buf, m, MSG_NOSIGNAL);
                        if (l->drop_after_each)
                                break;
                }
                close(c);
        }
}

TEST(broker_client_reconnects_after_the_broker_hangs_up) {
        char dir[64], path[80];
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        Listener l = { .drop_after_each = 1 };
        _cleanup_(broker_client_freep) BrokerClient *c = NULL;
        pthread_t thread;
        int dfd = test_temp_dir("rtkit-client", dir, sizeof(dir));

        close(dfd);
        snprintf(path, sizeof(path), "%s/broker.sock", dir);
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
        l.fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        ASSERT_OK(l.fd);
        ASSERT_OK(bind(l.fd, (struct sockaddr *) &sa, sizeof(sa)));
        ASSERT_OK(listen(l.fd, 8));
        ASSERT_EQ(pthread_create(&thread, NULL, serve, &l), 0);

        ASSERT_OK(broker_client_new(path, 2000000, &c));
        ASSERT_STREQ(broker_client_path(c), path);
        Pace__Request req = PACE__REQUEST__INIT;
        Pace__StatusRequest status = PACE__STATUS_REQUEST__INIT;
        req.version = PACE_PROTOCOL_VERSION;
        req.body_case = PACE__REQUEST__BODY_STATUS;
        req.status = &status;
        for (int i = 0; i < 3; i++) {
                Pace__Response *resp = NULL;
                /* Let the hang-up arrive first, as after an idle timeout. */
                usleep(20000);
                ASSERT_OK(broker_client_exchange(c, &req, &resp));
                ASSERT_EQ(resp->body_case, PACE__RESPONSE__BODY_ADMIN);
                pace__response__free_unpacked(resp, NULL);
        }
        ASSERT_EQ(__atomic_load_n(&l.served, __ATOMIC_SEQ_CST), 3);

        /* No broker at all: an error, promptly. */
        shutdown(l.fd, SHUT_RDWR);
        close(l.fd);
        pthread_join(thread, NULL);
        unlink(path);
        Pace__Response *resp = NULL;
        usleep(20000);
        int r = broker_client_exchange(c, &req, &resp);
        ASSERT_TRUE(r == -ENOENT || r == -ECONNREFUSED);
        rmdir(dir);
}

TEST(broker_client_times_out) {
        char dir[64], path[80];
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        _cleanup_(broker_client_freep) BrokerClient *c = NULL;
        _cleanup_close_ int fd = -EBADF;
        int dfd = test_temp_dir("rtkit-client", dir, sizeof(dir));

        close(dfd);
        snprintf(path, sizeof(path), "%s/broker.sock", dir);
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
        /* Listens, never answers. */
        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        ASSERT_OK(fd);
        ASSERT_OK(bind(fd, (struct sockaddr *) &sa, sizeof(sa)));
        ASSERT_OK(listen(fd, 8));
        ASSERT_OK(broker_client_new(path, 200000, &c));
        Pace__Request req = PACE__REQUEST__INIT;
        Pace__StatusRequest status = PACE__STATUS_REQUEST__INIT;
        req.version = PACE_PROTOCOL_VERSION;
        req.body_case = PACE__REQUEST__BODY_STATUS;
        req.status = &status;
        Pace__Response *resp = NULL;
        ASSERT_ERR(broker_client_exchange(c, &req, &resp), -ETIMEDOUT);
        unlink(path);
        rmdir(dir);
}

TEST_MAIN()
