/* SPDX-License-Identifier: MIT */
/* Requests on behalf of another process (what pace-rtkit sends for a
 * RealtimeKit1 caller) and nice levels, over a real broker socket: only a
 * delegate may speak for someone, the process it names must be the one it
 * says, and everything is judged as if that process had asked: ownership,
 * per-user limits, rate limits. As root the broker runs as a uid of its own (HARNESS_BROKER_UID), so root
 * is a delegate and uid OTHER_UID is not. */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "broker-harness.h"
#include "macro.h"
#include "pace-limits.h"
#include "pace.pb-c.h"
#include "proc-util.h"
#include "test.h"

#define CALLER_UID 60001
#define OTHER_UID 60002

static const char *config_default =
        "{ \"slot_us\": 1000, \"non_rt_share\": 0.25, \"max_reservations_per_user\": 4,"
        "  \"max_requests_per_second\": 1000 }";

static int raw_connect(const char *path) {
        int fd = broker_raw_connect(path);
        ASSERT_CMP(fd, >=, 0);
        return fd;
}

/* A case (test.h's TEST) with callers of several uids, so as root only.
 * Its body gets a broker started with config (b) and root's connection to
 * it (fd: as root, the test is a delegate), both closed after the body. */
#define ON_BEHALF_TEST(name, config)                                                      \
        static void on_behalf_test_##name(BrokerInstance *b, int fd);                     \
        TEST(name) {                                                                      \
                BrokerInstance b_;                                                        \
                if (geteuid() != 0)                                                       \
                        TEST_SKIP("needs root: callers of several uids");                 \
                ASSERT_OK(broker_start(&b_, config));                                     \
                int fd_ = raw_connect(b_.socket);                                         \
                on_behalf_test_##name(&b_, fd_);                                          \
                close(fd_);                                                               \
                broker_stop(&b_);                                                         \
        }                                                                                 \
        static void on_behalf_test_##name(BrokerInstance *b, int fd)

static Pace__Response *exchange(int fd, Pace__Request *req) {
        static uint8_t reply[PACE_MAX_MESSAGE_SIZE];
        uint8_t buf[1024];

        req->version = PACE_PROTOCOL_VERSION;
        size_t n = pace__request__pack(req, buf);
        ASSERT_EQ(send(fd, buf, n, MSG_NOSIGNAL), (ssize_t) n);
        ssize_t got = recv(fd, reply, sizeof(reply), 0);
        ASSERT_CMP(got, >, 0);
        Pace__Response *resp = pace__response__unpack(NULL, (size_t) got, reply);
        ASSERT_TRUE(resp);
        return resp;
}

static void assert_error(Pace__Response *resp, Pace__ErrorCode code, const char *says) {
        if (resp->body_case != PACE__RESPONSE__BODY_ERROR)
                TEST_FAIL_("expected error %d (%s), got reply body %d", code, says, resp->body_case);
        if (resp->error->code != code)
                TEST_FAIL_("expected error %d, got %d: %s", code, resp->error->code, resp->error->message);
        ASSERT_CONTAINS(resp->error->message, says);
        pace__response__free_unpacked(resp, NULL);
}

/* A process of uid that sleeps; with_thread: it also runs a second thread
 * for thread_ms (0: for ever) and writes the thread's tid to a pipe. */
typedef struct Child {
        pid_t pid;
        pid_t tid; /* the second thread, or the main thread */
} Child;

static unsigned child_thread_ms;
static int child_pipe;

static void *child_thread(void *arg) {
        pid_t tid = gettid();
        ASSERT_EQ(write(child_pipe, &tid, sizeof(tid)), (ssize_t) sizeof(tid));
        if (child_thread_ms > 0)
                sleep_ms(child_thread_ms);
        else
                for (;;)
                        pause();
        return NULL;
}

static Child child_start(uid_t uid, bool with_thread, unsigned thread_ms) {
        int p[2];
        ASSERT_OK(pipe2(p, O_CLOEXEC));
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                close(p[0]);
                if (setresgid(uid, uid, uid) < 0 || setresuid(uid, uid, uid) < 0)
                        _exit(1);
                if (with_thread) {
                        pthread_t t;
                        child_pipe = p[1];
                        child_thread_ms = thread_ms;
                        if (pthread_create(&t, NULL, child_thread, NULL) != 0)
                                _exit(1);
                } else {
                        pid_t self = getpid();
                        if (write(p[1], &self, sizeof(self)) != sizeof(self))
                                _exit(1);
                }
                /* Bounded: never outlives a test that lost track of it. */
                sleep(60);
                _exit(0);
        }
        close(p[1]);
        Child c = { .pid = pid };
        ASSERT_EQ(read(p[0], &c.tid, sizeof(c.tid)), (ssize_t) sizeof(c.tid));
        close(p[0]);
        return c;
}

static void child_stop(const Child *c) {
        kill(c->pid, SIGKILL);
        waitpid(c->pid, NULL, 0);
}

static uint64_t start_time_of(pid_t pid) {
        ProcInfo info;
        ASSERT_OK(proc_info_read("/proc", pid, &info));
        return info.start_time;
}

/* A thread reservation request for tid of pid, on behalf of caller. */
typedef struct OnBehalf {
        Pace__Request req;
        Pace__ReserveRequest reserve;
        Pace__NiceRequest nice;
        Pace__Caller caller;
} OnBehalf;

static void on_behalf_init(OnBehalf *o, uid_t uid, pid_t caller, pid_t pid, pid_t tid) {
        pace__request__init(&o->req);
        pace__caller__init(&o->caller);
        o->caller.uid = uid;
        o->caller.pid = caller;
        o->caller.start_time = start_time_of(caller);
        o->req.on_behalf_of = &o->caller;
        pace__reserve_request__init(&o->reserve);
        o->reserve.period_ns = 10 * NSEC_PER_MSEC;
        o->reserve.utilization_ppm = 100000;
        o->reserve.has_pid = true;
        o->reserve.pid = pid;
        o->reserve.has_scope = true;
        o->reserve.scope = PACE__SCOPE__SCOPE_THREAD;
        o->reserve.has_tid = true;
        o->reserve.tid = tid;
        o->reserve.has_kind = true;
        o->reserve.kind = PACE__KIND__KIND_SERVER;
        o->req.body_case = PACE__REQUEST__BODY_RESERVE;
        o->req.reserve = &o->reserve;
        pace__nice_request__init(&o->nice);
}

static void on_behalf_nice(OnBehalf *o, int32_t nice) {
        o->nice.has_pid = true;
        o->nice.pid = o->reserve.pid;
        o->nice.tid = o->reserve.tid;
        o->nice.nice = nice;
        o->req.body_case = PACE__REQUEST__BODY_NICE;
        o->req.nice = &o->nice;
}

static Pace__StatusReply *status(int fd, Pace__Response **ret_resp) {
        Pace__Request req = PACE__REQUEST__INIT;
        Pace__StatusRequest st = PACE__STATUS_REQUEST__INIT;
        req.body_case = PACE__REQUEST__BODY_STATUS;
        req.status = &st;
        Pace__Response *resp = exchange(fd, &req);
        ASSERT_EQ(resp->body_case, PACE__RESPONSE__BODY_STATUS);
        *ret_resp = resp;
        return resp->status;
}

static size_t n_reservations(int fd) {
        Pace__Response *resp;
        size_t n = status(fd, &resp)->n_reservations;
        pace__response__free_unpacked(resp, NULL);
        return n;
}

static uint64_t grant_id(Pace__Response *resp) {
        if (resp->body_case != PACE__RESPONSE__BODY_GRANT)
                TEST_FAIL_("expected a grant, got %s",
                           resp->body_case == PACE__RESPONSE__BODY_ERROR ? resp->error->message : "another reply");
        uint64_t id = resp->grant->id;
        pace__response__free_unpacked(resp, NULL);
        return id;
}

/* Sends req from a forked child running as uid: the reply's error code, or
 * 0 for a grant. */
static int exchange_as(uid_t uid, const char *socket_path, Pace__Request *req, char *ret_message, size_t size) {
        int p;
        pid_t pid = test_fork_pipe(&p);
        if (pid == 0) {
                if (setresgid(uid, uid, uid) < 0 || setresuid(uid, uid, uid) < 0)
                        _exit(1);
                int fd = raw_connect(socket_path);
                Pace__Response *resp = exchange(fd, req);
                char out[600] = "";
                int code = resp->body_case == PACE__RESPONSE__BODY_ERROR ? (int) resp->error->code : 0;
                snprintf(out, sizeof(out), "%d %s", code,
                         resp->body_case == PACE__RESPONSE__BODY_ERROR ? resp->error->message : "ok");
                if (write(p, out, strlen(out)) < 0)
                        _exit(1);
                _exit(0);
        }
        char out[600] = "";
        ssize_t n = read(p, out, sizeof(out) - 1);
        close(p);
        int status_code;
        ASSERT_EQ(waitpid(pid, &status_code, 0), pid);
        ASSERT_TRUE(n > 0);
        out[n] = '\0';
        char *sp = strchr(out, ' ');
        ASSERT_TRUE(sp);
        snprintf(ret_message, size, "%s", sp + 1);
        return atoi(out);
}

ON_BEHALF_TEST(only_a_delegate_speaks_for_another, config_default) {
        Child c = child_start(CALLER_UID, false, 0);
        char msg[600];

        /* An ordinary user naming itself as the caller: still refused. */
        OnBehalf o;
        on_behalf_init(&o, CALLER_UID, c.pid, c.pid, c.tid);
        ASSERT_EQ(exchange_as(CALLER_UID, b->socket, &o.req, msg, sizeof(msg)),
                  PACE__ERROR_CODE__ERROR_PERMISSION_DENIED);
        ASSERT_CONTAINS(msg, "may not ask on behalf of another process");
        ASSERT_EQ(n_reservations(fd), 0);

        /* Root, the delegate, for the same caller: granted in its name. */
        Pace__Response *resp = exchange(fd, &o.req);
        ASSERT_EQ(resp->body_case, PACE__RESPONSE__BODY_GRANT);
        ASSERT_EQ(resp->grant->uid, CALLER_UID);
        ASSERT_EQ(resp->grant->pid, c.pid);
        ASSERT_EQ(resp->grant->tid, c.tid);
        ASSERT_TRUE(resp->grant->has_on_behalf && resp->grant->on_behalf);
        uint64_t id = grant_id(resp);

        /* Asked again (rtkit callers do): the same grant, nothing new. */
        ASSERT_EQ(grant_id(exchange(fd, &o.req)), id);
        ASSERT_EQ(n_reservations(fd), 1);
        Pace__Response *st_resp;
        Pace__StatusReply *st = status(fd, &st_resp);
        ASSERT_EQ(st->n_reservations, 1);
        ASSERT_TRUE(st->reservations[0]->has_on_behalf && st->reservations[0]->on_behalf);
        pace__response__free_unpacked(st_resp, NULL);

        /* Reload and reset are never done for a caller. */
        Pace__ResetRequest reset = PACE__RESET_REQUEST__INIT;
        o.req.body_case = PACE__REQUEST__BODY_RESET;
        o.req.reset = &reset;
        assert_error(exchange(fd, &o.req), PACE__ERROR_CODE__ERROR_PERMISSION_DENIED,
                     "never asked on behalf of another process");
        ASSERT_EQ(n_reservations(fd), 1);

        child_stop(&c);
}

/* Issue 26, case 1: with no user pace the broker runs as nobody, as many
 * daemons do; taking nobody's word let any of them reserve for root's
 * processes (a root spinner made SCHED_FIFO 98 and pinned). Nobody is never
 * a delegate; a uid of the broker's own (user pace, pace-rtkit's) is. */
TEST(nobody_is_never_a_delegate_but_the_brokers_own_user_is) {
        BrokerInstance b;
        char msg[600];

        if (geteuid() != 0)
                TEST_SKIP("needs root: callers of several uids");
        Child victim = child_start(0, false, 0);
        OnBehalf o;
        on_behalf_init(&o, 0, victim.pid, victim.pid, victim.tid);

        ASSERT_OK(broker_start_as(&b, config_default, 65534));
        ASSERT_EQ(exchange_as(65534, b.socket, &o.req, msg, sizeof(msg)), PACE__ERROR_CODE__ERROR_PERMISSION_DENIED);
        ASSERT_CONTAINS(msg, "only root may");
        assert_broker_log_contains(&b, "on behalf of others may ask: root alone: uid 65534 (nobody)");
        int fd = raw_connect(b.socket);
        ASSERT_EQ(n_reservations(fd), 0);
        close(fd);
        broker_stop(&b);

        ASSERT_OK(broker_start_as(&b, config_default, HARNESS_BROKER_UID));
        assert_broker_log_contains(&b, "on behalf of others may ask: root and uid 60099");
        ASSERT_EQ(exchange_as(HARNESS_BROKER_UID, b.socket, &o.req, msg, sizeof(msg)), 0);
        fd = raw_connect(b.socket);
        ASSERT_EQ(n_reservations(fd), 1);
        close(fd);
        broker_stop(&b);
        child_stop(&victim);
}

ON_BEHALF_TEST(the_named_caller_must_be_who_the_delegate_says, config_default) {
        Child c = child_start(CALLER_UID, false, 0);
        Child other = child_start(OTHER_UID, false, 0);
        OnBehalf o;

        /* Another start time: the pid now names another process. */
        on_behalf_init(&o, CALLER_UID, c.pid, c.pid, c.tid);
        o.caller.start_time++;
        assert_error(exchange(fd, &o.req), PACE__ERROR_CODE__ERROR_NO_SUCH_PROCESS, "has exited");

        /* A uid the process does not run as. */
        on_behalf_init(&o, OTHER_UID, c.pid, c.pid, c.tid);
        assert_error(exchange(fd, &o.req), PACE__ERROR_CODE__ERROR_PERMISSION_DENIED, "does not run as uid 60002");

        /* The caller asks for another user's thread: its own rights, not
         * the delegate's (root's), decide. */
        on_behalf_init(&o, CALLER_UID, c.pid, other.pid, other.tid);
        assert_error(exchange(fd, &o.req), PACE__ERROR_CODE__ERROR_PERMISSION_DENIED,
                     "uid 60001 may reserve only its own processes");

        /* A dead caller. */
        Child gone = child_start(CALLER_UID, false, 0);
        on_behalf_init(&o, CALLER_UID, gone.pid, c.pid, c.tid);
        child_stop(&gone);
        assert_error(exchange(fd, &o.req), PACE__ERROR_CODE__ERROR_NO_SUCH_PROCESS, "has exited");

        ASSERT_EQ(n_reservations(fd), 0);

        child_stop(&c);
        child_stop(&other);
}

ON_BEHALF_TEST(rate_limit_counts_each_caller, "{ \"max_requests_per_second\": 5 }") {
        Child c = child_start(CALLER_UID, false, 0);
        Child other = child_start(OTHER_UID, false, 0);
        OnBehalf o;
        int refused = 0;

        /* Nice levels out of range: each is a request that changes nothing,
         * and costs the caller a token all the same. */
        on_behalf_init(&o, CALLER_UID, c.pid, c.pid, c.tid);
        on_behalf_nice(&o, 25);
        for (int i = 0; i < 20; i++) {
                Pace__Response *resp = exchange(fd, &o.req);
                ASSERT_EQ(resp->body_case, PACE__RESPONSE__BODY_ERROR);
                if (resp->error->code == PACE__ERROR_CODE__ERROR_LIMIT_EXCEEDED) {
                        ASSERT_CONTAINS(resp->error->message, "uid 60001 sends more than 5 requests per second");
                        refused++;
                } else
                        ASSERT_EQ(resp->error->code, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT);
                pace__response__free_unpacked(resp, NULL);
        }
        ASSERT_CMP(refused, >=, 10);

        /* Another caller through the same delegate is not lumped in. */
        on_behalf_init(&o, OTHER_UID, other.pid, other.pid, other.tid);
        grant_id(exchange(fd, &o.req));

        child_stop(&c);
        child_stop(&other);
}

ON_BEHALF_TEST(nice_levels, "{ \"rtkit_min_nice_level\": -10 }") {
        Child c = child_start(CALLER_UID, true, 0);
        Child other = child_start(OTHER_UID, false, 0);
        OnBehalf o;

        on_behalf_init(&o, CALLER_UID, c.pid, c.pid, c.tid);
        on_behalf_nice(&o, -11);
        assert_error(exchange(fd, &o.req), PACE__ERROR_CODE__ERROR_PERMISSION_DENIED,
                     "nice level -11 is below -10, the lowest pace grants (rtkit_min_nice_level)");
        on_behalf_nice(&o, 20);
        assert_error(exchange(fd, &o.req), PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT, "does not exist");
        o.reserve.tid = 999999;
        on_behalf_nice(&o, -5);
        assert_error(exchange(fd, &o.req), PACE__ERROR_CODE__ERROR_NO_SUCH_PROCESS, "has no thread 999999");
        on_behalf_init(&o, CALLER_UID, c.pid, other.pid, other.tid);
        on_behalf_nice(&o, -5);
        assert_error(exchange(fd, &o.req), PACE__ERROR_CODE__ERROR_PERMISSION_DENIED,
                     "may renice only its own threads");

        on_behalf_init(&o, CALLER_UID, c.pid, c.pid, c.tid);
        on_behalf_nice(&o, -10);
        Pace__Response *resp = exchange(fd, &o.req);
        ASSERT_EQ(resp->body_case, PACE__RESPONSE__BODY_NICE);
        ASSERT_EQ(resp->nice->tid, c.tid);
        ASSERT_EQ(resp->nice->nice, -10);
        pace__response__free_unpacked(resp, NULL);
        /* A second level for the thread replaces the first. */
        on_behalf_nice(&o, -3);
        resp = exchange(fd, &o.req);
        ASSERT_EQ(resp->body_case, PACE__RESPONSE__BODY_NICE);
        pace__response__free_unpacked(resp, NULL);

        Pace__StatusReply *st = status(fd, &resp);
        ASSERT_EQ(st->n_nice_levels, 1);
        ASSERT_EQ(st->nice_levels[0]->tid, c.tid);
        ASSERT_EQ(st->nice_levels[0]->nice, -3);
        pace__response__free_unpacked(resp, NULL);

        /* Gone with its process (noticed on the broker's one-second beat). */
        child_stop(&c);
        size_t left = 1;
        for (int i = 0; i < 40 && left > 0; i++) {
                sleep_ms(100);
                st = status(fd, &resp);
                left = st->n_nice_levels;
                pace__response__free_unpacked(resp, NULL);
        }
        ASSERT_EQ(left, 0);

        child_stop(&other);
}

ON_BEHALF_TEST(a_thread_reservation_ends_with_its_thread, config_default) {
        /* The thread lives 500 ms; its process lives on. */
        Child c = child_start(CALLER_UID, true, 500);
        OnBehalf o;

        on_behalf_init(&o, CALLER_UID, c.pid, c.pid, c.tid);
        grant_id(exchange(fd, &o.req));
        ASSERT_EQ(n_reservations(fd), 1);
        size_t n = 1;
        for (int i = 0; i < 40 && n > 0; i++) {
                sleep_ms(100);
                n = n_reservations(fd);
        }
        ASSERT_EQ(n, 0);
        ASSERT_EQ(kill(c.pid, 0), 0); /* the process is still there */
        assert_broker_log_contains(b, "exited");

        child_stop(&c);
}

ON_BEHALF_TEST(reset_known_drops_only_what_was_asked_on_behalf, config_default) {
        Child c = child_start(CALLER_UID, true, 0);
        Child plain = child_start(CALLER_UID, false, 0);
        OnBehalf o;

        on_behalf_init(&o, CALLER_UID, c.pid, c.pid, c.tid);
        grant_id(exchange(fd, &o.req));
        on_behalf_nice(&o, -5);
        pace__response__free_unpacked(exchange(fd, &o.req), NULL);

        /* Root's own reservation for another process, not on its behalf. */
        Pace__Request req = PACE__REQUEST__INIT;
        Pace__ReserveRequest reserve = PACE__RESERVE_REQUEST__INIT;
        reserve.period_ns = 50 * NSEC_PER_MSEC;
        reserve.utilization_ppm = 200000;
        reserve.has_pid = true;
        reserve.pid = plain.pid;
        req.body_case = PACE__REQUEST__BODY_RESERVE;
        req.reserve = &reserve;
        uint64_t kept = grant_id(exchange(fd, &req));
        ASSERT_EQ(n_reservations(fd), 2);

        /* Not for an ordinary user, even with the flag. */
        Pace__ResetRequest reset = PACE__RESET_REQUEST__INIT;
        reset.has_only_on_behalf = true;
        reset.only_on_behalf = true;
        req.body_case = PACE__REQUEST__BODY_RESET;
        req.reset = &reset;
        char msg[600];
        ASSERT_EQ(exchange_as(CALLER_UID, b->socket, &req, msg, sizeof(msg)),
                  PACE__ERROR_CODE__ERROR_PERMISSION_DENIED);
        ASSERT_EQ(n_reservations(fd), 2);

        Pace__Response *resp = exchange(fd, &req);
        ASSERT_EQ(resp->body_case, PACE__RESPONSE__BODY_ADMIN);
        ASSERT_CONTAINS(resp->admin->message, "1 reservation(s) dropped");
        pace__response__free_unpacked(resp, NULL);
        Pace__StatusReply *st = status(fd, &resp);
        ASSERT_EQ(st->n_reservations, 1);
        ASSERT_EQ(st->reservations[0]->id, kept);
        ASSERT_EQ(st->n_nice_levels, 0);
        pace__response__free_unpacked(resp, NULL);

        child_stop(&c);
        child_stop(&plain);
}

TEST_MAIN()
