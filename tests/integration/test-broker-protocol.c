/* SPDX-License-Identifier: MIT */
/* pace-broker over a real socket: every bad input gets a clear
 * error and changes nothing; reservations die with their process. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <grp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "broker-harness.h"
#include "macro.h"
#include "pace-limits.h"
#include "table-shm.h"
#include "pace.pb-c.h"
#include "pace/pace.h"
#include "test.h"
#include "time-util.h"

#define OTHER_UID 60001 /* an ordinary user with no reservations of its own */

static const char *config_default =
        "{ \"slot_us\": 1000, \"non_rt_share\": 0.25, \"max_connections\": 64, \"client_timeout_ms\": 400,"
        "  \"max_reservations_per_user\": 2, \"max_utilization_per_user\": 0.9 }";


static void sleep_ms(unsigned ms) {
        nanosleep(&(struct timespec) { .tv_sec = ms / 1000, .tv_nsec = (long) (ms % 1000) * 1000000L }, NULL);
}

/* Sends raw bytes, returns the decoded reply (caller frees) or NULL. */
static Pace__Response *raw_exchange(int fd, const void *buf, size_t size) {
        static uint8_t reply[PACE_MAX_MESSAGE_SIZE];
        if (send(fd, buf, size, MSG_NOSIGNAL) != (ssize_t) size)
                return NULL;
        ssize_t n = recv(fd, reply, sizeof(reply), 0);
        if (n <= 0)
                return NULL;
        return pace__response__unpack(NULL, (size_t) n, reply);
}

static Pace__Response *raw_request(int fd, Pace__Request *req) {
        uint8_t buf[1024];
        size_t n = pace__request__pack(req, buf);
        return raw_exchange(fd, buf, n);
}

static void assert_error_reply(Pace__Response *resp, Pace__ErrorCode code, const char *says) {
        ASSERT_TRUE(resp);
        ASSERT_EQ(resp->version, PACE_PROTOCOL_VERSION);
        ASSERT_EQ(resp->body_case, PACE__RESPONSE__BODY_ERROR);
        ASSERT_EQ(resp->error->code, code);
        ASSERT_CONTAINS(resp->error->message, says);
        pace__response__free_unpacked(resp, NULL);
}

static uint64_t status_generation(pace *p, size_t *ret_n) {
        pace_status_report *st = NULL;
        ASSERT_OK(pace_status(p, &st));
        uint64_t gen = st->generation;
        if (ret_n)
                *ret_n = st->n_reservations;
        pace_status_report_free(st);
        return gen;
}

static bool skip_unless_root(void) {
        return geteuid() != 0;
}

TEST(reserve_status_release_roundtrip) {
        BrokerInstance b;
        pace *p = NULL;
        pace_grant g;
        pace_status_report *st = NULL;

        ASSERT_OK(broker_start(&b, config_default));
        ASSERT_OK(pace_connect(b.socket, &p));
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 600000, .cpu = -1 };
        ASSERT_OK(pace_reserve(p, &params, &g));
        ASSERT_EQ(g.pid, getpid());
        ASSERT_EQ(g.uid, getuid());
        ASSERT_EQ(g.period_ns, 50 * NSEC_PER_MSEC);
        ASSERT_EQ(g.budget_ns, 30 * NSEC_PER_MSEC);
        ASSERT_EQ(g.slot_ns, NSEC_PER_MSEC);
        ASSERT_EQ(g.requested_utilization_ppm, 600000);

        ASSERT_OK(pace_status(p, &st));
        ASSERT_EQ(st->n_reservations, 1);
        ASSERT_EQ(st->reservations[0].id, g.id);
        ASSERT_EQ(st->reservations[0].pid, getpid());
        ASSERT_EQ(st->reservations[0].cpu, g.cpu);
        ASSERT_EQ(st->non_rt_share_ppm, 250000);
        ASSERT_CMP(st->n_cpus, >=, 1);
        bool found = false;
        for (size_t i = 0; i < st->n_cpus; i++)
                if (st->cpus[i].cpu == g.cpu) {
                        found = true;
                        ASSERT_EQ(st->cpus[i].reserved_ppm, 600000);
                        ASSERT_EQ(st->cpus[i].free_ppm, 150000);
                        ASSERT_EQ(st->cpus[i].frame_ns, 50 * NSEC_PER_MSEC);
                }
        ASSERT_TRUE(found);
        pace_status_report_free(st);

        ASSERT_OK(pace_release(p, g.id));
        size_t n;
        status_generation(p, &n);
        ASSERT_EQ(n, 0);
        ASSERT_ERR(pace_release(p, g.id), PACE_E_NO_SUCH_RESERVATION);
        ASSERT_CONTAINS(pace_last_message(), "no reservation with id");
        pace_close(p);
        ASSERT_EQ(broker_stop(&b), 0);
}

TEST(bad_requests_get_clear_errors_and_change_nothing) {
        BrokerInstance b;
        pace *p = NULL;
        pace_grant g;
        size_t n;

        ASSERT_OK(broker_start(&b, config_default));
        ASSERT_OK(pace_connect(b.socket, &p));
        pace_reserve_params ok = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 300000, .cpu = -1 };
        ASSERT_OK(pace_reserve(p, &ok, &g));
        uint64_t gen = status_generation(p, &n);
        ASSERT_EQ(n, 1);

        int fd = broker_raw_connect(b.socket);
        ASSERT_OK(fd);

        /* Garbage, truncated, empty, oversized. */
        assert_error_reply(raw_exchange(fd, "\xff\xff\xff\xff garbage", 13), PACE__ERROR_CODE__ERROR_MALFORMED,
                           "not a valid pace.Request");
        {
                Pace__Request req = PACE__REQUEST__INIT;
                Pace__ReserveRequest res = PACE__RESERVE_REQUEST__INIT;
                uint8_t buf[256];
                req.version = 1;
                req.body_case = PACE__REQUEST__BODY_RESERVE;
                req.reserve = &res;
                res.period_ns = 50 * NSEC_PER_MSEC;
                res.utilization_ppm = 100000;
                size_t full = pace__request__pack(&req, buf);
                assert_error_reply(raw_exchange(fd, buf, full - 2), PACE__ERROR_CODE__ERROR_MALFORMED,
                                   "not a valid pace.Request");
        }
        assert_error_reply(raw_exchange(fd, "", 0), PACE__ERROR_CODE__ERROR_MALFORMED, "empty message");
        {
                size_t big = PACE_MAX_MESSAGE_SIZE + 4096;
                _cleanup_free_ uint8_t *junk = calloc(1, big);
                int sndbuf = 4 * 1024 * 1024;
                setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
                assert_error_reply(raw_exchange(fd, junk, big), PACE__ERROR_CODE__ERROR_MALFORMED, "larger than");
        }

        /* Unknown version, no body. */
        {
                Pace__Request req = PACE__REQUEST__INIT;
                Pace__StatusRequest sr = PACE__STATUS_REQUEST__INIT;
                req.version = 2;
                req.body_case = PACE__REQUEST__BODY_STATUS;
                req.status = &sr;
                assert_error_reply(raw_request(fd, &req), PACE__ERROR_CODE__ERROR_UNSUPPORTED_VERSION,
                                   "version 2 is not supported");
                req.version = 1;
                req.body_case = PACE__REQUEST__BODY__NOT_SET;
                assert_error_reply(raw_request(fd, &req), PACE__ERROR_CODE__ERROR_MALFORMED, "no body");
        }

        /* Absurd numbers. */
        struct {
                uint64_t period_ns;
                uint32_t ppm;
                bool has_pid;
                int32_t pid;
                bool has_cpu;
                int32_t cpu;
                Pace__ErrorCode code;
                const char *says;
        } bad[] = {
                { 0, 100000, false, 0, false, 0, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT, "shorter than one slot" },
                { 999999, 100000, false, 0, false, 0, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT, "shorter than one slot" },
                { 2 * NSEC_PER_SEC, 100000, false, 0, false, 0, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT, "longer than the longest frame" },
                { UINT64_MAX, 100000, false, 0, false, 0, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT, "longer than the longest frame" },
                { 50 * NSEC_PER_MSEC, 0, false, 0, false, 0, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT, "out of range" },
                { 50 * NSEC_PER_MSEC, 1000001, false, 0, false, 0, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT, "out of range" },
                { 50 * NSEC_PER_MSEC, UINT32_MAX, false, 0, false, 0, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT, "out of range" },
                { 50 * NSEC_PER_MSEC, 900000, false, 0, false, 0, PACE__ERROR_CODE__ERROR_NO_CAPACITY, "non_rt_share" },
                { 50 * NSEC_PER_MSEC, 100000, true, -5, false, 0, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT, "not a process id" },
                { 50 * NSEC_PER_MSEC, 100000, true, 0, false, 0, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT, "not a process id" },
                { 50 * NSEC_PER_MSEC, 100000, true, 1, false, 0, PACE__ERROR_CODE__ERROR_PERMISSION_DENIED, "pid 1" },
                { 50 * NSEC_PER_MSEC, 100000, true, 2, false, 0, PACE__ERROR_CODE__ERROR_PERMISSION_DENIED, "kernel thread" },
                { 50 * NSEC_PER_MSEC, 100000, true, INT32_MAX, false, 0, PACE__ERROR_CODE__ERROR_NO_SUCH_PROCESS, "no process with pid" },
                { 50 * NSEC_PER_MSEC, 100000, false, 0, true, 63, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT, "not managed" },
                { 50 * NSEC_PER_MSEC, 100000, false, 0, true, -1, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT, "does not exist" },
                { 50 * NSEC_PER_MSEC, 100000, false, 0, true, 100000, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT, "does not exist" },
                /* The caller already holds one. */
                { 50 * NSEC_PER_MSEC, 100000, false, 0, false, 0, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT, "already holds" },
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                Pace__Request req = PACE__REQUEST__INIT;
                Pace__ReserveRequest res = PACE__RESERVE_REQUEST__INIT;
                req.version = 1;
                req.body_case = PACE__REQUEST__BODY_RESERVE;
                req.reserve = &res;
                res.period_ns = bad[i].period_ns;
                res.utilization_ppm = bad[i].ppm;
                res.has_pid = bad[i].has_pid;
                res.pid = bad[i].pid;
                res.has_cpu = bad[i].has_cpu;
                res.cpu = bad[i].cpu;
                printf("  bad request %zu: expects \"%s\"\n", i, bad[i].says);
                assert_error_reply(raw_request(fd, &req), bad[i].code, bad[i].says);
        }

        /* Unknown reservation id. */
        {
                Pace__Request req = PACE__REQUEST__INIT;
                Pace__ReleaseRequest rel = PACE__RELEASE_REQUEST__INIT;
                req.version = 1;
                req.body_case = PACE__REQUEST__BODY_RELEASE;
                req.release = &rel;
                rel.id = 424242;
                assert_error_reply(raw_request(fd, &req), PACE__ERROR_CODE__ERROR_NO_SUCH_RESERVATION, "424242");
        }

        /* Nothing changed: same table generation, same single reservation,
         * and the connection still works. */
        ASSERT_EQ(status_generation(p, &n), gen);
        ASSERT_EQ(n, 1);
        close(fd);
        pace_close(p);
        char *log = broker_log(&b);
        ASSERT_CONTAINS(log, "refused");
        free(log);
        ASSERT_EQ(broker_stop(&b), 0);
}

/* Runs fn in a child that has dropped to OTHER_UID; returns its exit code. */
static int as_other_user(int (*fn)(const char *socket, pid_t target, uint64_t id), const char *socket, pid_t target,
                         uint64_t id) {
        pid_t pid = fork();
        ASSERT_OK(pid);
        if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (setgroups(0, NULL) < 0 || setgid(OTHER_UID) < 0 || setuid(OTHER_UID) < 0)
                        _exit(99);
                _exit(fn(socket, target, id));
        }
        int status;
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        ASSERT_TRUE(WIFEXITED(status));
        return WEXITSTATUS(status);
}

static int try_reserve_target(const char *socket, pid_t target, uint64_t id) {
        pace *p = NULL;
        pace_grant g;
        if (pace_connect(socket, &p) < 0)
                return 10;
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 100000, .pid = target, .cpu = -1 };
        int r = pace_reserve(p, &params, &g);
        const char *msg = pace_last_message();
        pace_close(p);
        if (r == PACE_E_PERMISSION_DENIED && msg && strstr(msg, "may reserve only its own"))
                return 0;
        return 11;
}

static int try_release(const char *socket, pid_t target, uint64_t id) {
        pace *p = NULL;
        if (pace_connect(socket, &p) < 0)
                return 10;
        int r = pace_release(p, id);
        const char *msg = pace_last_message();
        pace_close(p);
        if (r == PACE_E_PERMISSION_DENIED && msg && strstr(msg, "may release only its own"))
                return 0;
        return 11;
}

/* Two reservations for itself and a child are fine, a third passes
 * max_reservations_per_user = 2. */
static int try_user_limits(const char *socket, pid_t target, uint64_t id) {
        pace *p = NULL;
        pace_grant g;
        pid_t kids[2];
        int rc = 0;

        for (int i = 0; i < 2; i++) {
                kids[i] = fork();
                if (kids[i] == 0) {
                        prctl(PR_SET_PDEATHSIG, SIGKILL);
                        pause();
                        _exit(0);
                }
        }
        if (pace_connect(socket, &p) < 0)
                return 10;
        pace_reserve_params params = { .period_ns = 100 * NSEC_PER_MSEC, .utilization_ppm = 100000, .cpu = -1 };
        if (pace_reserve(p, &params, &g) < 0)
                rc = 12;
        params.pid = kids[0];
        if (!rc && pace_reserve(p, &params, &g) < 0)
                rc = 13;
        params.pid = kids[1];
        if (!rc && (pace_reserve(p, &params, &g) != PACE_E_LIMIT_EXCEEDED ||
                    !strstr(pace_last_message(), "max_reservations_per_user")))
                rc = 14;
        pace_close(p);
        for (int i = 0; i < 2; i++) {
                kill(kids[i], SIGKILL);
                waitpid(kids[i], NULL, 0);
        }
        return rc;
}

TEST(other_users_cannot_touch_what_is_not_theirs) {
        BrokerInstance b;
        pace *p = NULL;
        pace_grant g;
        size_t n;

        if (skip_unless_root())
                TEST_SKIP("needs root to act as a second user");
        ASSERT_OK(broker_start(&b, config_default));
        ASSERT_OK(pace_connect(b.socket, &p));
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 200000, .cpu = -1 };
        ASSERT_OK(pace_reserve(p, &params, &g));
        uint64_t gen = status_generation(p, &n);

        ASSERT_EQ(as_other_user(try_reserve_target, b.socket, getpid(), 0), 0);
        ASSERT_EQ(as_other_user(try_release, b.socket, 0, g.id), 0);
        ASSERT_EQ(status_generation(p, &n), gen);
        ASSERT_EQ(n, 1);

        ASSERT_EQ(as_other_user(try_user_limits, b.socket, 0, 0), 0);
        /* The other user's reservations died with its processes. */
        for (int i = 0; i < 100; i++) {
                status_generation(p, &n);
                if (n == 1)
                        break;
                sleep_ms(10);
        }
        ASSERT_EQ(n, 1);

        /* Root may reserve another user's process. */
        pid_t kid = fork();
        ASSERT_OK(kid);
        if (kid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (setuid(OTHER_UID) < 0)
                        _exit(1);
                pause();
                _exit(0);
        }
        sleep_ms(50);
        params.pid = kid;
        params.utilization_ppm = 100000;
        ASSERT_OK(pace_reserve(p, &params, &g));
        ASSERT_EQ(g.pid, kid);
        kill(kid, SIGKILL);
        waitpid(kid, NULL, 0);
        pace_close(p);
        ASSERT_EQ(broker_stop(&b), 0);
}

/* The broker holds a pidfd per reservation and frees it when that fires.
 * "Within one frame" (50 ms here) is asserted on the median of five
 * deaths, so one stall of this shared VM cannot fail it; any single one
 * over a second would mean the pidfd is not what frees it. */
TEST(reservation_dies_with_its_process_within_a_frame) {
        enum { ROUNDS = 5 };
        BrokerInstance b;
        pace *p = NULL;
        size_t n;
        uint64_t took[ROUNDS];

        ASSERT_OK(broker_start(&b, config_default));
        ASSERT_OK(pace_connect(b.socket, &p));
        for (int round = 0; round < ROUNDS; round++) {
                int pipefd[2];
                ASSERT_OK(pipe(pipefd));
                pid_t kid = fork();
                ASSERT_OK(kid);
                if (kid == 0) {
                        pace *kp = NULL;
                        pace_grant g;
                        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 400000,
                                                       .cpu = -1 };
                        close(pipefd[0]);
                        if (pace_connect(b.socket, &kp) < 0 || pace_reserve(kp, &params, &g) < 0)
                                _exit(1);
                        /* The connection is not what holds the reservation. */
                        pace_close(kp);
                        char c = 'x';
                        if (write(pipefd[1], &c, 1) != 1)
                                _exit(2);
                        pause();
                        _exit(0);
                }
                close(pipefd[1]);
                char c;
                ASSERT_EQ(read(pipefd[0], &c, 1), 1);
                close(pipefd[0]);
                status_generation(p, &n);
                ASSERT_EQ(n, 1);

                kill(kid, SIGKILL);
                int status;
                waitpid(kid, &status, 0);
                uint64_t t0 = monotonic_ns();
                for (;;) {
                        status_generation(p, &n);
                        if (n == 0)
                                break;
                        ASSERT_CMP(monotonic_ns() - t0, <, 1000 * NSEC_PER_MSEC);
                        usleep(200);
                }
                took[round] = monotonic_ns() - t0;
        }
        qsort(took, ROUNDS, sizeof(took[0]), cmp_u64);
        printf("  freed %.2f ms (median of %d; %.2f-%.2f) after the process was reaped\n", (double) took[ROUNDS / 2] / 1e6,
               ROUNDS, (double) took[0] / 1e6, (double) took[ROUNDS - 1] / 1e6);
        ASSERT_CMP(took[ROUNDS / 2], <, 50 * NSEC_PER_MSEC);
        pace_close(p);
        ASSERT_EQ(broker_stop(&b), 0);
}

TEST(client_dying_mid_request_does_not_hurt_the_broker) {
        BrokerInstance b;
        pace *p = NULL;
        size_t n;

        ASSERT_OK(broker_start(&b, config_default));
        for (int round = 0; round < 20; round++) {
                pid_t kid = fork();
                ASSERT_OK(kid);
                if (kid == 0) {
                        Pace__Request req = PACE__REQUEST__INIT;
                        Pace__ReserveRequest res = PACE__RESERVE_REQUEST__INIT;
                        uint8_t buf[128];
                        int fd = broker_raw_connect(b.socket);
                        req.version = 1;
                        req.body_case = PACE__REQUEST__BODY_RESERVE;
                        req.reserve = &res;
                        res.period_ns = 20 * NSEC_PER_MSEC;
                        res.utilization_ppm = 100000;
                        size_t len = pace__request__pack(&req, buf);
                        /* Send and die at once, without reading the reply. */
                        if (send(fd, buf, len, 0) < 0)
                                _exit(1);
                        _exit(0);
                }
                waitpid(kid, NULL, 0);
        }
        ASSERT_OK(pace_connect(b.socket, &p));
        for (int i = 0; i < 200; i++) {
                status_generation(p, &n);
                if (n == 0)
                        break;
                sleep_ms(5);
        }
        ASSERT_EQ(n, 0);
        pace_close(p);
        ASSERT_EQ(broker_stop(&b), 0);
}

TEST(silent_and_flooding_clients_do_not_block_others) {
        BrokerInstance b;
        pace *p = NULL;
        size_t n;
        struct rlimit rl;
        enum { FLOOD = 1000 };
        static int fds[FLOOD];

        ASSERT_OK(getrlimit(RLIMIT_NOFILE, &rl));
        if (rl.rlim_cur < FLOOD + 64) {
                rl.rlim_cur = MIN(rl.rlim_max, (rlim_t) FLOOD + 64);
                (void) setrlimit(RLIMIT_NOFILE, &rl);
        }
        ASSERT_OK(broker_start(&b, config_default));

        /* One client connects and says nothing. */
        int silent = broker_raw_connect(b.socket);
        ASSERT_OK(silent);
        ASSERT_OK(pace_connect(b.socket, &p));
        uint64_t t0 = monotonic_ns();
        status_generation(p, &n);
        ASSERT_CMP(monotonic_ns() - t0, <, 2000 * NSEC_PER_MSEC);
        pace_close(p);

        /* The silent one is dropped after client_timeout_ms (400 ms). */
        char c;
        struct timeval tv = { .tv_sec = 3 };
        setsockopt(silent, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        ASSERT_EQ(recv(silent, &c, 1, 0), 0);
        close(silent);

        /* A thousand connections against max_connections = 64: the rest get a
         * clear refusal, and a well-behaved client is still served. With a
         * long idle timeout, so no accepted one is dropped (freeing a place
         * for one that should be refused) while a slow broker (ASan) is
         * still working through the flood. */
        ASSERT_EQ(broker_stop(&b), 0);
        ASSERT_OK(broker_start(&b, "{ \"slot_us\": 1000, \"max_connections\": 64, \"client_timeout_ms\": 30000 }"));
        size_t opened = 0;
        for (; opened < FLOOD; opened++) {
                fds[opened] = broker_raw_connect(b.socket);
                if (fds[opened] < 0)
                        break;
        }
        ASSERT_CMP(opened, >=, 200);
        /* Until every refusal is in, or 5 s. */
        size_t busy = 0;
        static bool answered[FLOOD];
        memset(answered, 0, sizeof(answered));
        for (uint64_t until = monotonic_ns() + 5 * NSEC_PER_SEC; busy < opened - 64 && monotonic_ns() < until;) {
                for (size_t i = 0; i < opened; i++) {
                        uint8_t buf[1024];
                        if (answered[i])
                                continue;
                        ssize_t len = recv(fds[i], buf, sizeof(buf), MSG_DONTWAIT);
                        if (len >= 0)
                                answered[i] = true;
                        if (len > 0) {
                                Pace__Response *resp = pace__response__unpack(NULL, (size_t) len, buf);
                                ASSERT_TRUE(resp);
                                ASSERT_EQ(resp->body_case, PACE__RESPONSE__BODY_ERROR);
                                ASSERT_EQ(resp->error->code, PACE__ERROR_CODE__ERROR_BUSY);
                                ASSERT_CONTAINS(resp->error->message, "max_connections");
                                pace__response__free_unpacked(resp, NULL);
                                busy++;
                        }
                }
                sleep_ms(20);
        }
        printf("  %zu connections opened, %zu refused as busy\n", opened, busy);
        ASSERT_CMP(busy, >=, opened - 64);
        for (size_t i = 0; i < opened; i++)
                close(fds[i]);
        sleep_ms(100);
        ASSERT_OK(pace_connect(b.socket, &p));
        t0 = monotonic_ns();
        status_generation(p, &n);
        ASSERT_CMP(monotonic_ns() - t0, <, 2000 * NSEC_PER_MSEC);
        pace_close(p);
        ASSERT_EQ(broker_stop(&b), 0);
}

TEST(bad_config_refuses_to_start_and_says_why) {
        BrokerInstance b;
        int r = broker_start(&b, "{ \"non_rt_share\": 0.01 }");
        ASSERT_ERR(r, -ECHILD);
        char *log = broker_log(&b);
        ASSERT_CONTAINS(log, "non_rt_share");
        ASSERT_CONTAINS(log, "0.05");
        free(log);
        broker_stop(&b);

        r = broker_start(&b, "{ \"slot_us\": 1000,\n  \"policy\": \"fifo\" }");
        ASSERT_ERR(r, -ECHILD);
        log = broker_log(&b);
        ASSERT_CONTAINS(log, "policy");
        free(log);
        broker_stop(&b);

        /* No config file at all: built-in defaults. */
        ASSERT_OK(broker_start(&b, NULL));
        ASSERT_EQ(broker_stop(&b), 0);
}

/* A client that finds the socket can connect to it: the broker's socket
 * appears under its name only once it listens. Before, it was bound under
 * its name and listened a few system calls later; a client (the CI's soak
 * test, once) that came in between got ECONNREFUSED. inotify wakes this
 * test the moment the name appears, so it lands in any such window far
 * more often than a polling client would. */
TEST(the_socket_appears_only_when_it_accepts) {
        unsigned refused = 0, runs = 40;

        for (unsigned i = 0; i < runs; i++) {
                BrokerInstance b;
                char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
                bool seen = false;

                ASSERT_OK(broker_prepare(&b, config_default));
                int in = inotify_init1(IN_CLOEXEC);
                ASSERT_OK(in);
                ASSERT_OK(inotify_add_watch(in, b.dir, IN_CREATE | IN_MOVED_TO));
                ASSERT_OK(broker_launch(&b));
                while (!seen) {
                        struct pollfd pfd = { .fd = in, .events = POLLIN };
                        ASSERT_EQ(poll(&pfd, 1, 5000), 1);
                        ssize_t n = read(in, buf, sizeof(buf));
                        ASSERT_CMP(n, >, 0);
                        for (char *e = buf; e < buf + n;) {
                                const struct inotify_event *ev = (const struct inotify_event *) e;
                                if (ev->len && strcmp(ev->name, "broker.sock") == 0)
                                        seen = true;
                                e += sizeof(*ev) + ev->len;
                        }
                }
                int fd = broker_raw_connect(b.socket);
                if (fd == -ECONNREFUSED)
                        refused++;
                else
                        ASSERT_OK(fd);
                if (fd >= 0)
                        close(fd);
                close(in);
                ASSERT_EQ(broker_stop(&b), 0);
        }
        printf("  %u of %u connects at the moment the socket appeared were refused\n", refused, runs);
        ASSERT_EQ(refused, 0);
}

/* A second broker started on a live one's runtime directory (by hand,
 * beside the service) must not take its socket: it refuses to start, and
 * the first goes on serving. */
TEST(a_second_broker_does_not_take_a_live_ones_socket) {
        BrokerInstance b;
        pace *p = NULL;
        size_t n;
        int status;

        ASSERT_OK(broker_start(&b, config_default));
        pid_t second = fork();
        ASSERT_OK(second);
        if (second == 0) {
                char log[320];
                snprintf(log, sizeof(log), "%s/second.log", b.dir);
                int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
                if (fd >= 0)
                        dup2(fd, STDERR_FILENO);
                if (geteuid() == 0 && (setgroups(0, NULL) < 0 || setgid(HARNESS_BROKER_UID) < 0 ||
                                       setuid(HARNESS_BROKER_UID) < 0))
                        _exit(126);
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                execl(getenv("PACE_BROKER"), "pace-broker", "--config", b.config, "--runtime-dir", b.dir, (char *) NULL);
                _exit(127);
        }
        pid_t w = 0;
        for (int i = 0; i < 500 && w == 0; i++) {
                w = waitpid(second, &status, WNOHANG);
                if (w == 0)
                        sleep_ms(10);
        }
        if (w == 0) {
                kill(second, SIGKILL);
                waitpid(second, NULL, 0);
                TEST_FAIL_("a second broker started on a live one's runtime directory");
        }
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1);
        char path[320], text[512] = "";
        snprintf(path, sizeof(path), "%s/second.log", b.dir);
        FILE *f = fopen(path, "re");
        ASSERT_TRUE(f);
        size_t len = fread(text, 1, sizeof(text) - 1, f);
        text[len] = '\0';
        fclose(f);
        ASSERT_CONTAINS(text, "another broker is serving");
        ASSERT_OK(pace_connect(b.socket, &p));
        status_generation(p, &n);
        pace_close(p);
        ASSERT_EQ(broker_stop(&b), 0);
}

static void *park(void *arg) {
        _Atomic pid_t *tid = arg;
        *tid = gettid();
        pause();
        return NULL;
}

static pid_t spawn_sleeper(void) {
        pid_t pid = fork();
        ASSERT_OK(pid);
        if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                pause();
                _exit(0);
        }
        return pid;
}

static PaceTableBuffer table_before, table_after;

static void read_table(const BrokerInstance *b, PaceTableBuffer *out) {
        char path[320];
        TableReader *r = NULL;
        snprintf(path, sizeof(path), "%s/table", b->dir);
        ASSERT_OK(table_reader_open(path, &r));
        int rr;
        for (int i = 0; i < 100 && (rr = table_reader_snapshot(r, out, NULL)) == -EAGAIN; i++)
                ;
        ASSERT_OK(rr);
        table_reader_free(r);
}

/* A broker that crashes and is restarted keeps what it granted: the same
 * ids, owners and slots; reservations of processes that died meanwhile are
 * dropped; the adopted ones still end with their process. */
TEST(a_restarted_broker_adopts_the_reservations_in_force) {
        BrokerInstance b;
        pace *p = NULL;
        pace_grant g1, g2, g3;
        pace_status_report *st = NULL;

        ASSERT_OK(broker_start(&b, config_default));
        pid_t keeper = spawn_sleeper(), goner = spawn_sleeper(), third = spawn_sleeper();
        ASSERT_OK(pace_connect(b.socket, &p));
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 300000, .pid = keeper, .cpu = 1 };
        ASSERT_OK(pace_reserve(p, &params, &g1));
        params.pid = goner;
        params.period_ns = 40 * NSEC_PER_MSEC;
        params.utilization_ppm = 200000;
        ASSERT_OK(pace_reserve(p, &params, &g2));
        pace_close(p);
        read_table(&b, &table_before);

        /* The broker dies hard; during the outage one client dies too. */
        kill(b.pid, SIGKILL);
        waitpid(b.pid, NULL, 0);
        b.pid = 0;
        kill(goner, SIGKILL);
        waitpid(goner, NULL, 0);
        uint64_t restarted = monotonic_ns();
        ASSERT_OK(broker_restart(&b, SIGKILL));

        /* The dead one's reservation is gone by the first answer, well
         * within the 1 s asked for (the start-up includes it). */
        ASSERT_OK(pace_connect(b.socket, &p));
        ASSERT_OK(pace_status(p, &st));
        uint64_t answered = monotonic_ns() - restarted;
        printf("  restarted broker answered %.1f ms after the restart began, %zu reservation(s) adopted\n",
               (double) answered / 1e6, st->n_reservations);
        ASSERT_CMP(answered, <, NSEC_PER_SEC);
        ASSERT_EQ(st->n_reservations, 1);
        ASSERT_EQ(st->reservations[0].id, g1.id);
        ASSERT_EQ(st->reservations[0].pid, keeper);
        ASSERT_EQ(st->reservations[0].uid, getuid());
        ASSERT_EQ(st->reservations[0].cpu, 1);
        ASSERT_EQ(st->reservations[0].budget_ns, g1.budget_ns);
        ASSERT_EQ(st->reservations[0].period_ns, g1.period_ns);
        ASSERT_EQ(st->reservations[0].requested_utilization_ppm, 300000);
        ASSERT_EQ(st->reservations[0].requested_period_ns, 50 * NSEC_PER_MSEC);
        pace_status_report_free(st);

        /* Not a slot moved: the keeper's slots in the new table are those
         * it had (the frame may have shrunk to its own period). */
        read_table(&b, &table_after);
        ASSERT_EQ(table_after.n_reservations, 1);
        uint32_t frame = 0;
        for (uint32_t c = 0; c < table_after.n_cpus; c++)
                if (table_after.cpus[c].cpu == 1)
                        frame = table_after.cpus[c].frame_slots;
        ASSERT_EQ(frame, 50);
        uint16_t keeper_old = 0;
        for (uint32_t i = 0; i < table_before.n_reservations; i++)
                if (table_before.reservations[i].id == g1.id)
                        keeper_old = (uint16_t) (i + 1);
        uint32_t first_before = 0, first_after = 0;
        for (uint32_t c = 0; c < table_before.n_cpus; c++)
                if (table_before.cpus[c].cpu == 1)
                        first_before = table_before.cpus[c].first_slot;
        for (uint32_t c = 0; c < table_after.n_cpus; c++)
                if (table_after.cpus[c].cpu == 1)
                        first_after = table_after.cpus[c].first_slot;
        for (uint32_t s = 0; s < frame; s++)
                ASSERT_EQ(table_after.slots[first_after + s] == 1, table_before.slots[first_before + s] == keeper_old);

        /* New requests work at once, with fresh ids. */
        params.pid = third;
        ASSERT_OK(pace_reserve(p, &params, &g3));
        ASSERT_CMP(g3.id, >, g2.id);

        /* The adopted reservation still dies with its process. */
        kill(keeper, SIGKILL);
        waitpid(keeper, NULL, 0);
        size_t n = 2;
        for (int i = 0; i < 200 && n != 1; i++) {
                status_generation(p, &n);
                sleep_ms(5);
        }
        ASSERT_EQ(n, 1);
        pace_close(p);
        kill(third, SIGKILL);
        waitpid(third, NULL, 0);
        char *log = broker_log(&b);
        ASSERT_CONTAINS(log, "not adopted: process");
        ASSERT_CONTAINS(log, "adopted 1 reservation(s)");
        free(log);
        ASSERT_EQ(broker_stop(&b), 0);
}

/* Reservation kinds over the wire. */
static const char *config_kinds =
        "{ \"slot_us\": 1000, \"non_rt_share\": 0.25, \"max_reservations_per_user\": 8,"
        "  \"max_utilization_per_user\": 1.5 }";

/* A reserve request as a client that predates kinds sends it, or with a
 * kind of any number. */
static Pace__Response *raw_reserve(int fd, pid_t pid, int32_t cpu, uint32_t ppm, bool has_kind, int kind) {
        Pace__Request req = PACE__REQUEST__INIT;
        Pace__ReserveRequest res = PACE__RESERVE_REQUEST__INIT;
        req.version = 1;
        req.body_case = PACE__REQUEST__BODY_RESERVE;
        req.reserve = &res;
        res.period_ns = 50 * NSEC_PER_MSEC;
        res.utilization_ppm = ppm;
        res.has_pid = pid > 0;
        res.pid = pid;
        res.has_cpu = cpu >= 0;
        res.cpu = cpu;
        res.has_kind = has_kind;
        res.kind = (Pace__Kind) kind;
        return raw_request(fd, &req);
}

static uint32_t table_flags_of(const PaceTableBuffer *t, uint64_t id) {
        for (uint32_t i = 0; i < t->n_reservations; i++)
                if (t->reservations[i].id == id)
                        return t->reservations[i].flags;
        TEST_FAIL_("reservation %" PRIu64 " is not in the table", id);
        return 0;
}

static pace_kind status_kind_of(pace *p, uint64_t id) {
        pace_status_report *st = NULL;
        pace_kind kind = PACE_KIND_DEFAULT;
        ASSERT_OK(pace_status(p, &st));
        for (size_t i = 0; i < st->n_reservations; i++)
                if (st->reservations[i].id == id)
                        kind = st->reservations[i].kind;
        pace_status_report_free(st);
        return kind;
}

/* Each kind is granted as asked, said in the grant and in status, and
 * written into the table; a client that sends no kind gets slots, as
 * before kinds; a restarted broker keeps every kind. */
TEST(each_kind_is_granted_and_shown) {
        BrokerInstance b;
        pace *p = NULL;
        pace_grant slots, server, aligned;

        ASSERT_OK(broker_start(&b, config_kinds));
        pid_t k1 = spawn_sleeper(), k2 = spawn_sleeper(), k3 = spawn_sleeper(), k4 = spawn_sleeper();
        ASSERT_OK(pace_connect(b.socket, &p));
        /* All on CPU 0, the block first: spread slots leave no stretch of
         * ten free slots for a block placed after them. */
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 200000, .pid = k3,
                                       .cpu = 0, .kind = PACE_KIND_ALIGNED };
        ASSERT_OK(pace_reserve(p, &params, &aligned));
        ASSERT_EQ(aligned.kind, PACE_KIND_ALIGNED);
        ASSERT_EQ(aligned.period_ns, 50 * NSEC_PER_MSEC);
        ASSERT_EQ(aligned.budget_ns, 10 * NSEC_PER_MSEC);
        params.pid = k1;
        params.kind = PACE_KIND_SLOTS;
        ASSERT_OK(pace_reserve(p, &params, &slots));
        ASSERT_EQ(slots.kind, PACE_KIND_SLOTS);
        params.pid = k2;
        params.kind = PACE_KIND_SERVER;
        ASSERT_OK(pace_reserve(p, &params, &server));
        ASSERT_EQ(server.kind, PACE_KIND_SERVER);
        ASSERT_EQ(server.phase_ns, 0u); /* its windows start at multiples of its period */

        /* The table: the flags, and the aligned budget in one piece from
         * the phase the grant names. */
        read_table(&b, &table_after);
        ASSERT_EQ(table_flags_of(&table_after, slots.id), 0u);
        ASSERT_EQ(table_flags_of(&table_after, server.id), PACE_RES_SERVER);
        ASSERT_EQ(table_flags_of(&table_after, aligned.id), PACE_RES_ALIGNED);
        uint16_t owner = 0;
        for (uint32_t i = 0; i < table_after.n_reservations; i++)
                if (table_after.reservations[i].id == aligned.id)
                        owner = (uint16_t) (i + 1);
        const PaceTableCpu *cpu0 = NULL;
        for (uint32_t c = 0; c < table_after.n_cpus; c++)
                if (table_after.cpus[c].cpu == 0)
                        cpu0 = &table_after.cpus[c];
        ASSERT_TRUE(cpu0 != NULL);
        uint32_t phase = (uint32_t) (aligned.phase_ns / NSEC_PER_MSEC);
        for (uint32_t k = 0; k < 50; k++)
                ASSERT_EQ(table_after.slots[cpu0->first_slot + (phase + k) % cpu0->frame_slots] == owner, k < 10);

        /* A client that predates kinds: no field, slots granted and said. */
        int fd = broker_raw_connect(b.socket);
        ASSERT_OK(fd);
        /* 5%: beside the three 20% ones CPU 0 has room for that much at
         * the default switch charge. */
        Pace__Response *resp = raw_reserve(fd, k4, 0, 50000, false, 0);
        ASSERT_TRUE(resp);
        ASSERT_EQ(resp->body_case, PACE__RESPONSE__BODY_GRANT);
        ASSERT_TRUE(resp->grant->has_kind);
        ASSERT_EQ(resp->grant->kind, PACE__KIND__KIND_SLOTS);
        uint64_t old_client = resp->grant->id;
        pace__response__free_unpacked(resp, NULL);
        close(fd);
        ASSERT_EQ(status_kind_of(p, old_client), PACE_KIND_SLOTS);
        read_table(&b, &table_after);
        ASSERT_EQ(table_flags_of(&table_after, old_client), 0u);

        /* Status says each one's kind. */
        ASSERT_EQ(status_kind_of(p, slots.id), PACE_KIND_SLOTS);
        ASSERT_EQ(status_kind_of(p, server.id), PACE_KIND_SERVER);
        ASSERT_EQ(status_kind_of(p, aligned.id), PACE_KIND_ALIGNED);

        /* A crash and a restart: the new broker reads the kinds back from
         * the table. */
        pace_close(p);
        ASSERT_OK(broker_restart(&b, SIGKILL));
        ASSERT_OK(pace_connect(b.socket, &p));
        ASSERT_EQ(status_kind_of(p, slots.id), PACE_KIND_SLOTS);
        ASSERT_EQ(status_kind_of(p, server.id), PACE_KIND_SERVER);
        ASSERT_EQ(status_kind_of(p, aligned.id), PACE_KIND_ALIGNED);

        pace_close(p);
        pid_t kids[] = { k1, k2, k3, k4 };
        for (size_t i = 0; i < ELEMENTSOF(kids); i++) {
                kill(kids[i], SIGKILL);
                waitpid(kids[i], NULL, 0);
        }
        ASSERT_EQ(broker_stop(&b), 0);
}

/* A kind the protocol does not define is refused, naming the field, and
 * changes nothing; in a reserve and in a modify. */
TEST(a_bad_kind_is_refused_and_changes_nothing) {
        BrokerInstance b;
        pace *p = NULL;
        pace_grant g;
        size_t n;

        ASSERT_OK(broker_start(&b, config_kinds));
        pid_t k = spawn_sleeper();
        ASSERT_OK(pace_connect(b.socket, &p));
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 200000, .pid = k,
                                       .cpu = -1, .kind = PACE_KIND_SERVER };
        ASSERT_OK(pace_reserve(p, &params, &g));
        read_table(&b, &table_before);
        uint64_t gen = status_generation(p, &n);
        ASSERT_EQ(n, 1);

        int fd = broker_raw_connect(b.socket);
        ASSERT_OK(fd);
        static const int bad[] = { 4, 9, -1, INT32_MAX };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                char says[96];
                snprintf(says, sizeof(says), "kind %d does not exist: use slots (1), server (2) or aligned (3)",
                         bad[i]);
                assert_error_reply(raw_reserve(fd, getpid(), -1, 100000, true, bad[i]),
                                   PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT, says);
        }
        {
                Pace__Request req = PACE__REQUEST__INIT;
                Pace__ModifyRequest mod = PACE__MODIFY_REQUEST__INIT;
                req.version = 1;
                req.body_case = PACE__REQUEST__BODY_MODIFY;
                req.modify = &mod;
                mod.id = g.id;
                mod.period_ns = 50 * NSEC_PER_MSEC;
                mod.utilization_ppm = 300000;
                mod.has_kind = true;
                mod.kind = (Pace__Kind) 7;
                assert_error_reply(raw_request(fd, &req), PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT,
                                   "kind 7 does not exist: use slots (1), server (2) or aligned (3), or leave kind "
                                   "out for the reservation's own");
        }
        close(fd);

        ASSERT_EQ(status_generation(p, &n), gen);
        ASSERT_EQ(n, 1);
        ASSERT_EQ(status_kind_of(p, g.id), PACE_KIND_SERVER);
        read_table(&b, &table_after);
        ASSERT_EQ(memcmp(&table_before, &table_after, sizeof(table_before)), 0);

        pace_close(p);
        kill(k, SIGKILL);
        waitpid(k, NULL, 0);
        ASSERT_EQ(broker_stop(&b), 0);
}

/* A change keeps the kind unless it names one; naming one changes it (and
 * the table's flags) in the same all-or-nothing swap. */
TEST(modify_keeps_or_changes_the_kind) {
        BrokerInstance b;
        pace *p = NULL;
        pace_grant g, m;

        ASSERT_OK(broker_start(&b, config_kinds));
        pid_t k = spawn_sleeper();
        ASSERT_OK(pace_connect(b.socket, &p));
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 200000, .pid = k,
                                       .cpu = -1, .kind = PACE_KIND_SERVER };
        ASSERT_OK(pace_reserve(p, &params, &g));

        /* No kind (as from a client that predates kinds): still a server. */
        params.kind = PACE_KIND_DEFAULT;
        params.utilization_ppm = 300000;
        ASSERT_OK(pace_modify(p, g.id, &params, &m));
        ASSERT_EQ(m.kind, PACE_KIND_SERVER);
        ASSERT_EQ(m.budget_ns, 15 * NSEC_PER_MSEC);
        ASSERT_EQ(status_kind_of(p, g.id), PACE_KIND_SERVER);
        read_table(&b, &table_after);
        ASSERT_EQ(table_flags_of(&table_after, g.id), PACE_RES_SERVER);

        /* Named: aligned now, its budget one block from its phase. */
        params.kind = PACE_KIND_ALIGNED;
        ASSERT_OK(pace_modify(p, g.id, &params, &m));
        ASSERT_EQ(m.kind, PACE_KIND_ALIGNED);
        ASSERT_EQ(status_kind_of(p, g.id), PACE_KIND_ALIGNED);
        read_table(&b, &table_after);
        ASSERT_EQ(table_flags_of(&table_after, g.id), PACE_RES_ALIGNED);

        /* And back to slots. */
        params.kind = PACE_KIND_SLOTS;
        ASSERT_OK(pace_modify(p, g.id, &params, &m));
        ASSERT_EQ(m.kind, PACE_KIND_SLOTS);
        read_table(&b, &table_after);
        ASSERT_EQ(table_flags_of(&table_after, g.id), 0u);

        pace_close(p);
        kill(k, SIGKILL);
        waitpid(k, NULL, 0);
        ASSERT_EQ(broker_stop(&b), 0);
}

TEST(a_thread_id_is_refused_as_not_a_process) {
        BrokerInstance b;
        pace *p = NULL;
        pace_grant g;
        pthread_t thread;
        _Atomic pid_t tid = 0;

        ASSERT_OK(broker_start(&b, config_default));
        ASSERT_EQ(pthread_create(&thread, NULL, park, (void *) &tid), 0);
        while (tid == 0)
                sleep_ms(1);
        ASSERT_OK(pace_connect(b.socket, &p));
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 100000, .pid = tid, .cpu = -1 };
        ASSERT_ERR(pace_reserve(p, &params, &g), PACE_E_INVALID_ARGUMENT);
        ASSERT_CONTAINS(pace_last_message(), "is a thread, not a process");
        pace_close(p);
        pthread_cancel(thread);
        pthread_join(thread, NULL);
        ASSERT_EQ(broker_stop(&b), 0);
}

static int write_config(const BrokerInstance *b, const char *json) {
        FILE *f = fopen(b->config, "we");
        if (!f)
                return -errno;
        fputs(json, f);
        return fclose(f) == 0 ? 0 : -errno;
}

static int try_status_and_reserve_denied_by_group(const char *socket, pid_t target, uint64_t id) {
        pace *p = NULL;
        pace_grant g;
        pace_status_report *st = NULL;
        if (pace_connect(socket, &p) < 0)
                return 10;
        /* Status is read-only and open to all. */
        if (pace_status(p, &st) < 0)
                return 11;
        pace_status_report_free(st);
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 100000, .cpu = -1 };
        int r = pace_reserve(p, &params, &g);
        const char *msg = pace_last_message();
        int rc = r == PACE_E_PERMISSION_DENIED && msg && strstr(msg, "allowed_groups") ? 0 : 12;
        pace_close(p);
        return rc;
}

static int try_rate_limit(const char *socket, pid_t target, uint64_t id) {
        pace *p = NULL;
        pace_status_report *st = NULL;
        int limited = 0, served = 0;
        if (pace_connect(socket, &p) < 0)
                return 10;
        /* max_requests_per_second = 5: a burst of 20 cannot all pass. The
         * bucket holds 5 and refills at 5 a second while the burst runs
         * (a few ms, longer on a slow machine): at most that many more. */
        uint64_t t0 = monotonic_ns();
        for (int i = 0; i < 20; i++) {
                int r = pace_status(p, &st);
                if (r == 0) {
                        served++;
                        pace_status_report_free(st);
                } else if (r == PACE_E_LIMIT_EXCEEDED && strstr(pace_last_message(), "max_requests_per_second"))
                        limited++;
        }
        int refilled = (int) ((monotonic_ns() - t0) * 5 / NSEC_PER_SEC) + 1;
        pace_close(p);
        return served >= 1 && served <= 5 + refilled && served + limited == 20 ? 0 : 20 + served;
}

static int try_connection_cap(const char *socket, pid_t target, uint64_t id) {
        int fds[4];
        uint8_t buf[512];
        for (int i = 0; i < 4; i++)
                fds[i] = broker_raw_connect(socket);
        /* max_connections_per_user = 3: the fourth is refused. */
        ssize_t n = recv(fds[3], buf, sizeof(buf), 0);
        if (n <= 0)
                return 30;
        Pace__Response *resp = pace__response__unpack(NULL, (size_t) n, buf);
        int rc = resp && resp->body_case == PACE__RESPONSE__BODY_ERROR && resp->error->code == PACE__ERROR_CODE__ERROR_BUSY &&
                                 strstr(resp->error->message, "max_connections_per_user")
                         ? 0
                         : 31;
        if (resp)
                pace__response__free_unpacked(resp, NULL);
        for (int i = 0; i < 4; i++)
                close(fds[i]);
        return rc;
}

static int try_admin(const char *socket, pid_t target, uint64_t id) {
        pace *p = NULL;
        if (pace_connect(socket, &p) < 0)
                return 10;
        int r1 = pace_reset(p);
        int r2 = pace_reload(p);
        pace_close(p);
        return r1 == PACE_E_PERMISSION_DENIED && r2 == PACE_E_PERMISSION_DENIED ? 0 : 40;
}

TEST(who_may_ask_and_how_often) {
        BrokerInstance b;
        pace *p = NULL;
        size_t n;

        if (skip_unless_root())
                TEST_SKIP("needs root to act as a second user");
        ASSERT_OK(broker_start(&b, "{ \"allowed_groups\": [\"root\"], \"max_requests_per_second\": 5,"
                                   "  \"max_connections_per_user\": 3 }"));
        ASSERT_EQ(as_other_user(try_status_and_reserve_denied_by_group, b.socket, 0, 0), 0);
        /* The other user's status was served and its reserve refused: the
         * rate limit is per user, so wait for its bucket to refill. */
        sleep_ms(1100);
        ASSERT_EQ(as_other_user(try_rate_limit, b.socket, 0, 0), 0);
        ASSERT_EQ(as_other_user(try_connection_cap, b.socket, 0, 0), 0);
        sleep_ms(1100);
        ASSERT_EQ(as_other_user(try_admin, b.socket, 0, 0), 0);
        /* Root is exempt from all of it. */
        ASSERT_OK(pace_connect(b.socket, &p));
        for (int i = 0; i < 30; i++)
                status_generation(p, &n);
        pace_close(p);
        ASSERT_EQ(broker_stop(&b), 0);
}

TEST(reload_applies_a_valid_config_and_refuses_one_the_reservations_break) {
        BrokerInstance b;
        pace *p = NULL;
        pace_grant g;
        pace_status_report *st = NULL;
        size_t n;

        ASSERT_OK(broker_start(&b, config_default));
        pid_t kid = spawn_sleeper();
        ASSERT_OK(pace_connect(b.socket, &p));
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 600000, .pid = kid, .cpu = 1 };
        ASSERT_OK(pace_reserve(p, &params, &g));

        /* Valid: a larger non-RT share that the 60% still fits under. */
        ASSERT_OK(write_config(&b, "{ \"non_rt_share\": 0.3 }"));
        ASSERT_OK(pace_reload(p));
        ASSERT_CONTAINS(pace_last_message(), "reloaded");
        ASSERT_OK(pace_status(p, &st));
        ASSERT_EQ(st->non_rt_share_ppm, 300000);
        ASSERT_EQ(st->n_reservations, 1);
        pace_status_report_free(st);

        /* Violated by the live reservation: 60% no longer fits under 1 - 0.5. */
        ASSERT_OK(write_config(&b, "{ \"non_rt_share\": 0.5 }"));
        ASSERT_ERR(pace_reload(p), PACE_E_INVALID_ARGUMENT);
        ASSERT_CONTAINS(pace_last_message(), "reload refused");
        ASSERT_CONTAINS(pace_last_message(), "non-real-time share");
        /* Not even parseable. */
        ASSERT_OK(write_config(&b, "{ \"non_rt_share\": \"lots\" }"));
        ASSERT_ERR(pace_reload(p), PACE_E_INVALID_ARGUMENT);
        ASSERT_CONTAINS(pace_last_message(), "non_rt_share");
        /* A CPU the reservation lives on is no longer managed. */
        ASSERT_OK(write_config(&b, "{ \"cpus\": [0] }"));
        ASSERT_ERR(pace_reload(p), PACE_E_INVALID_ARGUMENT);
        ASSERT_CONTAINS(pace_last_message(), "CPU 1, which the new configuration does not manage");

        /* Nothing was dropped, and the last good configuration is in force. */
        ASSERT_OK(pace_status(p, &st));
        ASSERT_EQ(st->non_rt_share_ppm, 300000);
        ASSERT_EQ(st->n_reservations, 1);
        pace_status_report_free(st);

        /* The same through SIGHUP, as systemctl reload does it. */
        ASSERT_OK(write_config(&b, "{ \"non_rt_share\": 0.2 }"));
        ASSERT_OK(kill(b.pid, SIGHUP));
        for (int i = 0; i < 200; i++) {
                ASSERT_OK(pace_status(p, &st));
                uint32_t share = st->non_rt_share_ppm;
                pace_status_report_free(st);
                if (share == 200000)
                        break;
                ASSERT_TRUE(i < 199);
                sleep_ms(5);
        }
        char *log = broker_log(&b);
        ASSERT_CONTAINS(log, "reload refused, the old configuration stays");
        ASSERT_CONTAINS(log, "reloaded");
        free(log);

        /* Reset drops everything. */
        ASSERT_OK(pace_reset(p));
        ASSERT_CONTAINS(pace_last_message(), "1 reservation(s) dropped");
        status_generation(p, &n);
        ASSERT_EQ(n, 0);
        pace_close(p);
        kill(kid, SIGKILL);
        waitpid(kid, NULL, 0);
        ASSERT_EQ(broker_stop(&b), 0);
}

static int try_modify(const char *socket, pid_t target, uint64_t id) {
        pace *p = NULL;
        pace_grant g;
        if (pace_connect(socket, &p) < 0)
                return 10;
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 100000, .cpu = -1 };
        int r = pace_modify(p, id, &params, &g);
        const char *msg = pace_last_message();
        pace_close(p);
        return r == PACE_E_PERMISSION_DENIED && msg && strstr(msg, "may change only its own") ? 0 : 11;
}

TEST(modify_is_a_new_admission_all_or_nothing) {
        BrokerInstance b;
        pace *p = NULL;
        pace_grant a, bb, g;
        pace_status_report *st = NULL;

        ASSERT_OK(broker_start(&b, config_default));
        pid_t ka = spawn_sleeper(), kb = spawn_sleeper();
        ASSERT_OK(pace_connect(b.socket, &p));
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 600000, .pid = ka, .cpu = 1 };
        ASSERT_OK(pace_reserve(p, &params, &a));

        /* 70% fits only because A's own 60% counts as free. One table
         * change: never old and new at once. */
        uint64_t gen = status_generation(p, NULL);
        params.utilization_ppm = 700000;
        ASSERT_OK(pace_modify(p, a.id, &params, &g));
        ASSERT_EQ(g.id, a.id);
        ASSERT_EQ(g.pid, ka);
        ASSERT_EQ(g.budget_ns, 35 * NSEC_PER_MSEC);
        ASSERT_EQ(status_generation(p, NULL), gen + 1);

        /* Back to 60%, and B takes 10% beside it: 80% would not fit. */
        params.utilization_ppm = 600000;
        ASSERT_OK(pace_modify(p, a.id, &params, &g));
        params.pid = kb;
        params.utilization_ppm = 100000;
        ASSERT_OK(pace_reserve(p, &params, &bb));
        gen = status_generation(p, NULL);
        params.utilization_ppm = 700000;
        ASSERT_ERR(pace_modify(p, a.id, &params, &g), PACE_E_NO_CAPACITY);
        ASSERT_CONTAINS(pace_last_message(), "stays as it was");
        ASSERT_EQ(status_generation(p, NULL), gen);
        ASSERT_OK(pace_status(p, &st));
        for (size_t i = 0; i < st->n_reservations; i++)
                if (st->reservations[i].id == a.id)
                        ASSERT_EQ(st->reservations[i].budget_ns, 30 * NSEC_PER_MSEC);
        pace_status_report_free(st);

        /* Bad values, unknown ids, someone else's: refused, nothing changes. */
        params.utilization_ppm = 2000000;
        ASSERT_ERR(pace_modify(p, a.id, &params, &g), -EINVAL); /* libpace refuses before sending */
        ASSERT_CONTAINS(pace_last_message(), "reserve each thread");
        params.utilization_ppm = 100000;
        params.period_ns = 100;
        ASSERT_ERR(pace_modify(p, a.id, &params, &g), PACE_E_INVALID_ARGUMENT);
        ASSERT_CONTAINS(pace_last_message(), "shorter than one slot");
        params.period_ns = 50 * NSEC_PER_MSEC;
        ASSERT_ERR(pace_modify(p, 999, &params, &g), PACE_E_NO_SUCH_RESERVATION);
        if (!skip_unless_root())
                ASSERT_EQ(as_other_user(try_modify, b.socket, 0, a.id), 0);
        ASSERT_EQ(status_generation(p, NULL), gen);

        pace_close(p);
        kill(ka, SIGKILL);
        kill(kb, SIGKILL);
        waitpid(ka, NULL, 0);
        waitpid(kb, NULL, 0);
        ASSERT_EQ(broker_stop(&b), 0);
}

/* A field of /proc/PID/status, e.g. "Uid:", as the rest of its line. */
static bool status_field(pid_t pid, const char *field, char *ret, size_t size) {
        char path[64], line[256];
        bool found = false;
        snprintf(path, sizeof(path), "/proc/%d/status", (int) pid);
        FILE *f = fopen(path, "re");
        while (f && !found && fgets(line, sizeof(line), f))
                if (strncmp(line, field, strlen(field)) == 0) {
                        const char *v = line + strlen(field);
                        v += strspn(v, " \t");
                        snprintf(ret, size, "%.*s", (int) strcspn(v, "\n"), v);
                        found = true;
                }
        if (f)
                fclose(f);
        return found;
}

/* Started as root by hand, the broker drops everything itself: another
 * user, no capabilities in any set, no_new_privs; and still serves, and
 * still replaces its table in the directory it was given. */
TEST(a_broker_started_as_root_drops_to_an_unprivileged_user) {
        BrokerInstance b;
        pace *p = NULL;
        pace_grant g;
        char v[256];

        if (skip_unless_root())
                TEST_SKIP("needs root");
        ASSERT_OK(broker_start_as_root(&b, config_default));
        ASSERT_OK(pace_connect(b.socket, &p));
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 100000, .cpu = -1 };
        ASSERT_OK(pace_reserve(p, &params, &g));
        ASSERT_OK(pace_release(p, g.id));
        pace_close(p);

        unsigned ruid = 0, euid = 0, suid = 0, fsuid = 0;
        ASSERT_TRUE(status_field(b.pid, "Uid:", v, sizeof(v)));
        ASSERT_EQ(sscanf(v, "%u %u %u %u", &ruid, &euid, &suid, &fsuid), 4);
        printf("  broker uids %s", v);
        ASSERT_NE(ruid, 0u);
        ASSERT_NE(euid, 0u);
        ASSERT_NE(suid, 0u);
        ASSERT_TRUE(status_field(b.pid, "Gid:", v, sizeof(v)));
        printf("; gids %s", v);
        ASSERT_NE(strncmp(v, "0\t", 2), 0);
        static const char *const sets[] = { "CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:" };
        for (size_t i = 0; i < ELEMENTSOF(sets); i++) {
                ASSERT_TRUE(status_field(b.pid, sets[i], v, sizeof(v)));
                printf("; %s %s", sets[i], v);
                ASSERT_EQ(strtoull(v, NULL, 16), 0ULL);
        }
        ASSERT_TRUE(status_field(b.pid, "NoNewPrivs:", v, sizeof(v)));
        printf("; NoNewPrivs %s\n", v);
        ASSERT_EQ(strcmp(v, "1"), 0);
        char *log = broker_log(&b);
        ASSERT_CONTAINS(log, "now running as");
        free(log);
        ASSERT_EQ(broker_stop(&b), 0);
}

/* Above what is free (not above the cap): refused, saying what is free,
 * and the table stays as it was. */
TEST(a_request_above_what_is_free_is_refused_and_changes_nothing) {
        BrokerInstance b;
        pace *p = NULL;
        pace_grant a, g;
        size_t n;

        ASSERT_OK(broker_start(&b, config_default));
        pid_t ka = spawn_sleeper(), kb = spawn_sleeper();
        ASSERT_OK(pace_connect(b.socket, &p));
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 600000, .pid = ka, .cpu = 1 };
        ASSERT_OK(pace_reserve(p, &params, &a));
        read_table(&b, &table_before);
        uint64_t gen = status_generation(p, NULL);

        params.pid = kb;
        params.utilization_ppm = 300000; /* 60 + 30 < 100, but over the 75% left beside the non-RT share */
        ASSERT_ERR(pace_reserve(p, &params, &g), PACE_E_NO_CAPACITY);
        ASSERT_CONTAINS(pace_last_message(), "not enough free CPU time");
        ASSERT_CONTAINS(pace_last_message(), "CPU 1:");
        ASSERT_EQ(status_generation(p, &n), gen);
        ASSERT_EQ(n, 1);
        read_table(&b, &table_after);
        ASSERT_EQ(memcmp(&table_before, &table_after, sizeof(table_before)), 0);
        /* What is free still fits. */
        params.utilization_ppm = 100000;
        ASSERT_OK(pace_reserve(p, &params, &g));

        pace_close(p);
        kill(ka, SIGKILL);
        kill(kb, SIGKILL);
        waitpid(ka, NULL, 0);
        waitpid(kb, NULL, 0);
        ASSERT_EQ(broker_stop(&b), 0);
}

/* A change is applied where the reservation is, at one frame boundary of
 * one CPU: moving it, or changing a split one, is refused and changes
 * nothing (the CPUs' frame boundaries differ, so old and new could both be
 * in force for up to a frame: paper 003's Defect 1). */
TEST(a_change_stays_on_the_reservations_cpu) {
        BrokerInstance b;
        pace *p = NULL;
        pace_grant a, c0, c1, split, g;
        size_t n;

        ASSERT_OK(broker_start(&b, config_default));
        if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
                broker_stop(&b);
                TEST_SKIP("needs 2 CPUs");
        }
        pid_t ka = spawn_sleeper(), k0 = spawn_sleeper(), k1 = spawn_sleeper(), ks = spawn_sleeper();
        ASSERT_OK(pace_connect(b.socket, &p));
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 100000, .pid = ka, .cpu = 1 };
        ASSERT_OK(pace_reserve(p, &params, &a));
        uint64_t gen = status_generation(p, &n);

        params.cpu = 0;
        ASSERT_ERR(pace_modify(p, a.id, &params, &g), PACE_E_INVALID_ARGUMENT);
        ASSERT_CONTAINS(pace_last_message(), "release it and reserve again");
        ASSERT_CONTAINS(pace_last_message(), "stays as it was");
        ASSERT_EQ(status_generation(p, NULL), gen);
        /* Not naming a CPU: it stays on CPU 1 even where CPU 0 is emptier. */
        params.cpu = -1;
        params.utilization_ppm = 200000;
        ASSERT_OK(pace_modify(p, a.id, &params, &g));
        ASSERT_EQ(g.cpu, 1);
        ASSERT_OK(pace_release(p, a.id));

        /* A split one: 25% on each CPU leaves 50% each, 60% is split. */
        params.utilization_ppm = 250000;
        params.pid = k0;
        params.cpu = 0;
        ASSERT_OK(pace_reserve(p, &params, &c0));
        params.pid = k1;
        params.cpu = 1;
        ASSERT_OK(pace_reserve(p, &params, &c1));
        params.pid = ks;
        params.cpu = -1;
        params.utilization_ppm = 600000;
        ASSERT_OK(pace_reserve(p, &params, &split));
        /* The reply says where it lives: both CPUs, the first piece's
         * named as its cpu; the others each on one CPU. */
        ASSERT_EQ(split.split_cpus, 0x3);
        ASSERT_TRUE(split.cpu == 0 || split.cpu == 1);
        ASSERT_EQ(c0.split_cpus, 0);
        ASSERT_EQ(c1.split_cpus, 0);
        gen = status_generation(p, &n);
        ASSERT_EQ(n, 4); /* two pieces are listed apart */
        params.utilization_ppm = 550000;
        ASSERT_ERR(pace_modify(p, split.id, &params, &g), PACE_E_INVALID_ARGUMENT);
        ASSERT_CONTAINS(pace_last_message(), "split over CPUs");
        ASSERT_EQ(status_generation(p, NULL), gen);

        pace_close(p);
        pid_t kids[] = { ka, k0, k1, ks };
        for (size_t i = 0; i < ELEMENTSOF(kids); i++) {
                kill(kids[i], SIGKILL);
                waitpid(kids[i], NULL, 0);
        }
        ASSERT_EQ(broker_stop(&b), 0);
}

/* A change of parameters never changes whom a reservation covers: two
 * thread-scope reservations on one process stay two thread-scope
 * reservations (were they turned into process scope, the next table would
 * hold one process twice and be refused). */
TEST(modify_keeps_the_scope_and_thread) {
        BrokerInstance b;
        pace *p = NULL;
        pace_grant a, t, g;
        pace_status_report *st = NULL;
        pthread_t thread;
        _Atomic pid_t tid = 0;

        ASSERT_OK(broker_start(&b, config_default));
        ASSERT_EQ(pthread_create(&thread, NULL, park, (void *) &tid), 0);
        while (tid == 0)
                sleep_ms(1);
        ASSERT_OK(pace_connect(b.socket, &p));
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 100000, .cpu = -1,
                                       .scope = PACE_SCOPE_THREAD, .tid = gettid() };
        ASSERT_OK(pace_reserve(p, &params, &a));
        params.tid = tid;
        ASSERT_OK(pace_reserve(p, &params, &t));
        uint64_t gen = status_generation(p, NULL);

        params.utilization_ppm = 200000;
        ASSERT_OK(pace_modify(p, t.id, &params, &g));
        ASSERT_EQ(g.scope, PACE_SCOPE_THREAD);
        ASSERT_EQ(g.tid, tid);
        ASSERT_EQ(g.budget_ns, 10 * NSEC_PER_MSEC);
        ASSERT_EQ(status_generation(p, NULL), gen + 1);
        ASSERT_OK(pace_status(p, &st));
        ASSERT_EQ(st->n_reservations, 2);
        for (size_t i = 0; i < st->n_reservations; i++) {
                ASSERT_EQ(st->reservations[i].scope, PACE_SCOPE_THREAD);
                ASSERT_EQ(st->reservations[i].tid, st->reservations[i].id == t.id ? tid : gettid());
        }
        pace_status_report_free(st);
        /* And the broker still publishes: another change goes through. */
        params.utilization_ppm = 300000;
        ASSERT_OK(pace_modify(p, a.id, &params, &g));
        ASSERT_EQ(g.tid, gettid());
        ASSERT_EQ(status_generation(p, NULL), gen + 2);

        pace_close(p);
        pthread_cancel(thread);
        pthread_join(thread, NULL);
        ASSERT_EQ(broker_stop(&b), 0);
}

/* CPU hotplug, played with a stand-in for /sys/devices/system/cpu/online. */
TEST(a_cpu_going_offline_moves_or_drops_its_reservations_loudly) {
        BrokerInstance b;
        pace *p = NULL;
        pace_grant a, c, d, g;
        pace_status_report *st = NULL;
        char online[] = "/tmp/pace-online-XXXXXX";
        int fd = mkstemp(online);
        ASSERT_OK(fd);
        ASSERT_EQ(write(fd, "0-1\n", 4), 4);
        close(fd);
        chmod(online, 0644);
        setenv("PACE_TEST_CPU_ONLINE", online, 1);
        int r = broker_start(&b, config_default);
        unsetenv("PACE_TEST_CPU_ONLINE");
        ASSERT_OK(r);

        pid_t ka = spawn_sleeper(), kc = spawn_sleeper(), kd = spawn_sleeper();
        ASSERT_OK(pace_connect(b.socket, &p));
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 300000, .pid = ka, .cpu = 1 };
        ASSERT_OK(pace_reserve(p, &params, &a));
        params.pid = kc;
        params.cpu = 0;
        params.utilization_ppm = 300000;
        ASSERT_OK(pace_reserve(p, &params, &c));
        params.pid = kd;
        params.cpu = 1;
        params.utilization_ppm = 400000;
        ASSERT_OK(pace_reserve(p, &params, &d));

        /* CPU 1 goes: A (30%) moves to CPU 0 beside C (30%); D (40%) then
         * fits nowhere and is dropped, with a log line saying so. */
        fd = open(online, O_WRONLY | O_TRUNC);
        ASSERT_EQ(write(fd, "0\n", 2), 2);
        close(fd);
        size_t n = 3;
        for (int i = 0; i < 300 && n != 2; i++) {
                status_generation(p, &n);
                sleep_ms(10);
        }
        ASSERT_EQ(n, 2);
        ASSERT_OK(pace_status(p, &st));
        for (size_t i = 0; i < st->n_reservations; i++)
                ASSERT_EQ(st->reservations[i].cpu, 0);
        pace_status_report_free(st);
        char *log = broker_log(&b);
        ASSERT_CONTAINS(log, "CPU 1 went offline");
        ASSERT_CONTAINS(log, "moved from CPU 1 (offline) to CPU 0");
        ASSERT_CONTAINS(log, "dropped: CPU 1 went offline and no online CPU has room");
        free(log);

        /* Asking for the offline CPU says so; when it returns, it is used. */
        params.utilization_ppm = 100000;
        ASSERT_ERR(pace_reserve(p, &params, &g), PACE_E_INVALID_ARGUMENT);
        ASSERT_CONTAINS(pace_last_message(), "CPU 1 is offline");
        fd = open(online, O_WRONLY | O_TRUNC);
        ASSERT_EQ(write(fd, "0-1\n", 4), 4);
        close(fd);
        for (int i = 0; i < 300; i++) {
                if (pace_reserve(p, &params, &g) == 0)
                        break;
                ASSERT_TRUE(i < 299);
                sleep_ms(10);
        }
        ASSERT_EQ(g.cpu, 1);

        pace_close(p);
        kill(ka, SIGKILL);
        kill(kc, SIGKILL);
        kill(kd, SIGKILL);
        waitpid(ka, NULL, 0);
        waitpid(kc, NULL, 0);
        waitpid(kd, NULL, 0);
        unlink(online);
        ASSERT_EQ(broker_stop(&b), 0);
}

/* The "hostile clients" issue: `taskset -c 1 pace-run ...` was reserved on
 * CPU 0 and moved there. The broker reads the target's affinity itself and
 * places only within it. */
static const char *config_two_cpus = "{ \"slot_us\": 1000, \"non_rt_share\": 0.25, \"cpus\": [0, 1] }";

static void set_affinity(pid_t pid, uint64_t mask) {
        cpu_set_t set;
        CPU_ZERO(&set);
        for (unsigned c = 0; c < 64; c++)
                if (mask & (UINT64_C(1) << c))
                        CPU_SET(c, &set);
        ASSERT_OK(sched_setaffinity(pid, sizeof(set), &set));
}

static bool skip_unless_two_cpus(void) {
        cpu_set_t set;
        return sched_getaffinity(0, sizeof(set), &set) < 0 || !CPU_ISSET(0, &set) || !CPU_ISSET(1, &set);
}

TEST(placement_stays_within_the_targets_affinity) {
        BrokerInstance b;
        pace *p = NULL;
        pace_grant f0, f1, g;
        char expect[256];

        if (skip_unless_two_cpus())
                TEST_SKIP("needs CPUs 0 and 1");
        ASSERT_OK(broker_start(&b, config_two_cpus));
        /* CPU 1 fuller than CPU 0: worst fit alone would pick CPU 0. */
        pid_t k0 = spawn_sleeper(), k1 = spawn_sleeper(), kt = spawn_sleeper();
        ASSERT_OK(pace_connect(b.socket, &p));
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 100000, .pid = k0, .cpu = 0 };
        ASSERT_OK(pace_reserve(p, &params, &f0));
        params = (pace_reserve_params) { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 300000, .pid = k1, .cpu = 1 };
        ASSERT_OK(pace_reserve(p, &params, &f1));
        params = (pace_reserve_params) { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 300000, .pid = kt, .cpu = -1 };
        ASSERT_OK(pace_reserve(p, &params, &g));
        ASSERT_EQ(g.cpu, 0);
        ASSERT_OK(pace_release(p, g.id));

        /* The caller itself, pinned to CPU 1 before it asks (the kernel's
         * pidfd of the connection). In a child: the test's own affinity
         * stays as it was. */
        pid_t kid = fork();
        ASSERT_OK(kid);
        if (kid == 0) {
                pace *cp = NULL;
                pace_grant cg;
                set_affinity(0, 0x2);
                ASSERT_OK(pace_connect(b.socket, &cp));
                pace_reserve_params mine = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 300000, .cpu = -1 };
                ASSERT_OK(pace_reserve(cp, &mine, &cg));
                ASSERT_EQ(cg.cpu, 1);
                ASSERT_EQ(cg.split_cpus, 0);
                ASSERT_OK(pace_release(cp, cg.id));
                /* Naming a CPU outside it is refused, saying which and why. */
                mine.cpu = 0;
                ASSERT_ERR(pace_reserve(cp, &mine, &cg), PACE_E_INVALID_ARGUMENT);
                char want[160];
                snprintf(want, sizeof(want), "CPU 0 is outside pid %d's allowed CPUs (1); name one of them or "
                         "change its affinity", (int) getpid());
                ASSERT_STREQ(pace_last_message(), want);
                pace_close(cp);
                _exit(0);
        }
        int status;
        ASSERT_EQ(waitpid(kid, &status, 0), kid);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);

        /* Another process of the caller's, by pid: its affinity, not the
         * caller's. */
        set_affinity(kt, 0x2);
        ASSERT_OK(pace_reserve(p, &params, &g));
        ASSERT_EQ(g.cpu, 1);
        pace_status_report *st = NULL;
        ASSERT_OK(pace_status(p, &st));
        bool listed = false;
        for (size_t i = 0; i < st->n_reservations; i++)
                if (st->reservations[i].id == g.id) {
                        listed = true;
                        ASSERT_EQ(st->reservations[i].cpu, 1);
                }
        ASSERT_TRUE(listed);
        pace_status_report_free(st);

        /* A change keeps within it too: once the owner moves the process
         * off CPU 1, a change there is refused and nothing changes. */
        uint64_t gen = status_generation(p, NULL);
        set_affinity(kt, 0x1);
        params.utilization_ppm = 200000;
        ASSERT_ERR(pace_modify(p, g.id, &params, &g), PACE_E_INVALID_ARGUMENT);
        snprintf(expect, sizeof(expect), "lives on CPU 1, which is outside the CPUs pid %d may run on now (0)",
                 (int) kt);
        ASSERT_CONTAINS(pace_last_message(), expect);
        ASSERT_CONTAINS(pace_last_message(), "the reservation stays as it was");
        ASSERT_EQ(status_generation(p, NULL), gen);
        set_affinity(kt, 0x3);
        ASSERT_OK(pace_modify(p, g.id, &params, &g));
        ASSERT_EQ(g.cpu, 1);
        ASSERT_OK(pace_release(p, g.id));

        /* No room on the allowed CPU: the usual refusal, for that CPU. */
        set_affinity(kt, 0x2);
        params.utilization_ppm = 500000;
        ASSERT_ERR(pace_reserve(p, &params, &g), PACE_E_NO_CAPACITY);
        snprintf(expect, sizeof(expect), "on the CPUs pid %d may run on (CPU 1: 45%% free;", (int) kt);
        ASSERT_CONTAINS(pace_last_message(), expect);
        ASSERT_CONTAINS(pace_last_message(), "CPU 0 is outside its affinity");

        /* A thread-scope reservation follows the thread's own affinity. */
        pthread_t thread;
        _Atomic pid_t tid = 0;
        ASSERT_EQ(pthread_create(&thread, NULL, park, (void *) &tid), 0);
        while (tid == 0)
                sleep_ms(1);
        set_affinity(tid, 0x2);
        params = (pace_reserve_params) { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 100000, .cpu = -1,
                                         .scope = PACE_SCOPE_THREAD, .tid = tid };
        ASSERT_OK(pace_reserve(p, &params, &g));
        ASSERT_EQ(g.cpu, 1);
        params.tid = gettid(); /* the main thread may run on both: worst fit */
        ASSERT_OK(pace_reserve(p, &params, &g));
        ASSERT_EQ(g.cpu, 0);

        pace_close(p);
        pthread_cancel(thread);
        pthread_join(thread, NULL);
        pid_t kids[] = { k0, k1, kt };
        for (size_t i = 0; i < ELEMENTSOF(kids); i++) {
                kill(kids[i], SIGKILL);
                waitpid(kids[i], NULL, 0);
        }
        ASSERT_EQ(broker_stop(&b), 0);
}

/* A reservation moved off a CPU that went offline stays within the affinity
 * its process had at the grant: one allowed only the lost CPU is dropped,
 * not moved onto a CPU its owner ruled out. */
/* 25% taken on each of two CPUs leaves 50% free on each: 60% as slots is
 * split over both, but a server or aligned reservation is never split, and
 * its refusal says so and what to ask instead, and changes nothing. */
TEST(a_server_that_would_have_to_be_split_is_refused) {
        BrokerInstance b;
        pace *p = NULL;
        pace_grant c0, c1, g;
        size_t n;

        if (skip_unless_two_cpus())
                TEST_SKIP("needs CPUs 0 and 1");
        ASSERT_OK(broker_start(&b, config_two_cpus));
        pid_t k0 = spawn_sleeper(), k1 = spawn_sleeper(), ks = spawn_sleeper();
        ASSERT_OK(pace_connect(b.socket, &p));
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 250000, .pid = k0,
                                       .cpu = 0 };
        ASSERT_OK(pace_reserve(p, &params, &c0));
        params.pid = k1;
        params.cpu = 1;
        ASSERT_OK(pace_reserve(p, &params, &c1));
        read_table(&b, &table_before);
        uint64_t gen = status_generation(p, &n);

        params.pid = ks;
        params.cpu = -1;
        params.utilization_ppm = 600000;
        params.kind = PACE_KIND_SERVER;
        ASSERT_ERR(pace_reserve(p, &params, &g), PACE_E_NO_CAPACITY);
        ASSERT_CONTAINS(pace_last_message(), "not enough free CPU time for 60% every 50ms on any one CPU");
        ASSERT_CONTAINS(pace_last_message(), "a server reservation is never split over CPUs");
        ASSERT_CONTAINS(pace_last_message(), "ask for less, or for kind slots, which may be split");
        params.kind = PACE_KIND_ALIGNED;
        ASSERT_ERR(pace_reserve(p, &params, &g), PACE_E_NO_CAPACITY);
        ASSERT_CONTAINS(pace_last_message(), "an aligned reservation is never split over CPUs");
        ASSERT_EQ(status_generation(p, &n), gen);
        ASSERT_EQ(n, 2);
        read_table(&b, &table_after);
        ASSERT_EQ(memcmp(&table_before, &table_after, sizeof(table_before)), 0);

        /* The same request as slots is split over both. */
        params.kind = PACE_KIND_SLOTS;
        ASSERT_OK(pace_reserve(p, &params, &g));
        ASSERT_EQ(g.split_cpus, 0x3);
        ASSERT_EQ(g.kind, PACE_KIND_SLOTS);

        pace_close(p);
        pid_t kids[] = { k0, k1, ks };
        for (size_t i = 0; i < ELEMENTSOF(kids); i++) {
                kill(kids[i], SIGKILL);
                waitpid(kids[i], NULL, 0);
        }
        ASSERT_EQ(broker_stop(&b), 0);
}

TEST(a_move_off_an_offline_cpu_stays_within_the_affinity) {
        BrokerInstance b;
        pace *p = NULL;
        pace_grant a, c;
        char online[] = "/tmp/pace-online-XXXXXX";

        if (skip_unless_two_cpus())
                TEST_SKIP("needs CPUs 0 and 1");
        int fd = mkstemp(online);
        ASSERT_OK(fd);
        ASSERT_EQ(write(fd, "0-1\n", 4), 4);
        close(fd);
        chmod(online, 0644);
        setenv("PACE_TEST_CPU_ONLINE", online, 1);
        int r = broker_start(&b, config_two_cpus);
        unsetenv("PACE_TEST_CPU_ONLINE");
        ASSERT_OK(r);

        pid_t ka = spawn_sleeper(), kc = spawn_sleeper();
        set_affinity(ka, 0x2);
        ASSERT_OK(pace_connect(b.socket, &p));
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 100000, .pid = ka, .cpu = -1 };
        ASSERT_OK(pace_reserve(p, &params, &a));
        ASSERT_EQ(a.cpu, 1);
        params.pid = kc;
        params.cpu = 1;
        ASSERT_OK(pace_reserve(p, &params, &c));

        fd = open(online, O_WRONLY | O_TRUNC);
        ASSERT_EQ(write(fd, "0\n", 2), 2);
        close(fd);
        size_t n = 2;
        for (int i = 0; i < 300 && n != 1; i++) {
                status_generation(p, &n);
                sleep_ms(10);
        }
        ASSERT_EQ(n, 1);
        pace_status_report *st = NULL;
        ASSERT_OK(pace_status(p, &st));
        ASSERT_EQ(st->reservations[0].id, c.id);
        ASSERT_EQ(st->reservations[0].cpu, 0);
        pace_status_report_free(st);
        char *log = broker_log(&b);
        char expect[160];
        snprintf(expect, sizeof(expect), "reservation %" PRIu64 " of pid %d dropped: CPU 1 went offline", a.id,
                 (int) ka);
        ASSERT_CONTAINS(log, expect);
        free(log);

        pace_close(p);
        kill(ka, SIGKILL);
        kill(kc, SIGKILL);
        waitpid(ka, NULL, 0);
        waitpid(kc, NULL, 0);
        unlink(online);
        ASSERT_EQ(broker_stop(&b), 0);
}

static void *park_forever(void *arg) {
        pause();
        return NULL;
}

TEST(a_process_with_too_many_threads_is_refused) {
        BrokerInstance b;
        pace *p = NULL;
        pace_grant g;
        int pipefd[2];

        ASSERT_OK(broker_start(&b, "{ \"max_threads_per_reservation\": 4 }"));
        ASSERT_OK(pipe(pipefd));
        pid_t kid = fork();
        ASSERT_OK(kid);
        if (kid == 0) {
                pthread_t t;
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                for (int i = 0; i < 7; i++)
                        pthread_create(&t, NULL, park_forever, NULL);
                if (write(pipefd[1], "x", 1) != 1)
                        _exit(1);
                pause();
                _exit(0);
        }
        char c;
        ASSERT_EQ(read(pipefd[0], &c, 1), 1);
        ASSERT_OK(pace_connect(b.socket, &p));
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 100000, .pid = kid, .cpu = -1 };
        ASSERT_ERR(pace_reserve(p, &params, &g), PACE_E_LIMIT_EXCEEDED);
        ASSERT_CONTAINS(pace_last_message(), "has 8 threads");
        ASSERT_CONTAINS(pace_last_message(), "max_threads_per_reservation");
        /* The caller itself, with its one or two threads, is fine. */
        params.pid = 0;
        ASSERT_OK(pace_reserve(p, &params, &g));
        pace_close(p);
        kill(kid, SIGKILL);
        waitpid(kid, NULL, 0);
        close(pipefd[0]);
        close(pipefd[1]);
        ASSERT_EQ(broker_stop(&b), 0);
}

TEST(broker_wide_limits_have_keys_and_clear_errors) {
        BrokerInstance b;
        pace *p = NULL;
        pace_grant g;
        pid_t kids[3];

        ASSERT_OK(broker_start(&b, "{ \"max_reservations\": 2, \"max_message_bytes\": 256 }"));
        ASSERT_OK(pace_connect(b.socket, &p));
        for (int i = 0; i < 3; i++) {
                kids[i] = spawn_sleeper();
                pace_reserve_params params = { .period_ns = 100 * NSEC_PER_MSEC, .utilization_ppm = 50000, .pid = kids[i],
                                               .cpu = -1 };
                int r = pace_reserve(p, &params, &g);
                if (i < 2)
                        ASSERT_OK(r);
                else {
                        ASSERT_ERR(r, PACE_E_LIMIT_EXCEEDED);
                        ASSERT_CONTAINS(pace_last_message(), "max_reservations");
                }
        }
        uint64_t gen = status_generation(p, NULL);
        int fd = broker_raw_connect(b.socket);
        ASSERT_OK(fd);
        uint8_t big[300];
        memset(big, 0x5a, sizeof(big));
        assert_error_reply(raw_exchange(fd, big, sizeof(big)), PACE__ERROR_CODE__ERROR_MALFORMED, "max_message_bytes");
        ASSERT_EQ(status_generation(p, NULL), gen);
        close(fd);
        pace_close(p);
        for (int i = 0; i < 3; i++) {
                kill(kids[i], SIGKILL);
                waitpid(kids[i], NULL, 0);
        }
        ASSERT_EQ(broker_stop(&b), 0);
}

TEST(socket_activation_is_used_when_offered) {
        const char *activate = "/usr/bin/systemd-socket-activate";
        char dir[] = "/tmp/pace-test-XXXXXX", sock[300], table[300], cmd[400];
        pace *p = NULL;
        size_t n;
        struct stat st;

        if (access(activate, X_OK) < 0)
                TEST_SKIP("%s not installed", activate);
        ASSERT_TRUE(mkdtemp(dir));
        snprintf(sock, sizeof(sock), "%s/activated.sock", dir);
        snprintf(table, sizeof(table), "%s/table", dir);

        pid_t pid = fork();
        ASSERT_OK(pid);
        if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGTERM);
                int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
                dup2(null, STDOUT_FILENO);
                dup2(null, STDERR_FILENO);
                execl(activate, activate, "--seqpacket", "-l", sock, getenv("PACE_BROKER"), "--runtime-dir", dir,
                      (char *) NULL);
                _exit(127);
        }
        for (int i = 0; i < 500 && stat(sock, &st) < 0; i++)
                sleep_ms(10);
        /* The broker only starts with the first connection, and must then
         * serve on the socket it was handed, not create its own. */
        ASSERT_ERR(stat(table, &st) < 0 ? -errno : 0, -ENOENT);
        /* systemd-socket-activate binds before it listens: the name can
         * be there a moment before a connect is taken. */
        int r = pace_connect(sock, &p);
        for (int i = 0; i < 200 && r == -ECONNREFUSED; i++) {
                sleep_ms(10);
                r = pace_connect(sock, &p);
        }
        ASSERT_OK(r);
        status_generation(p, &n);
        ASSERT_EQ(n, 0);
        ASSERT_OK(stat(table, &st));
        char own[300];
        snprintf(own, sizeof(own), "%s/broker.sock", dir);
        ASSERT_ERR(stat(own, &st) < 0 ? -errno : 0, -ENOENT);
        pace_close(p);

        kill(pid, SIGTERM);
        int status;
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        ASSERT_TRUE(WIFEXITED(status));
        ASSERT_EQ(WEXITSTATUS(status), 0);
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        ASSERT_EQ(system(cmd), 0);
}

TEST_MAIN()

/* Root's processes are reservable only with the administrator's consent:
 * the dispatcher could not tell root's request from a compromised broker's.
 * The refusal names the key; an ordinary user's process is unaffected. */
TEST(root_processes_need_reserve_root_processes) {
        BrokerInstance b;
        pace *p = NULL;
        pace_grant g;
        int pipefd[2];

        if (geteuid() != 0)
                TEST_SKIP("needs root: the target must run as root, the other as another user");
        ASSERT_OK(broker_start(&b, "{ \"reserve_root_processes\": false }"));
        ASSERT_OK(pace_connect(b.socket, &p));
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 100000, .cpu = -1 };
        ASSERT_ERR(pace_reserve(p, &params, &g), PACE_E_PERMISSION_DENIED);
        ASSERT_CONTAINS(pace_last_message(), "runs as root");
        ASSERT_CONTAINS(pace_last_message(), "\"reserve_root_processes\": true");

        /* A process of an ordinary user, reserved by root: fine. */
        ASSERT_OK(pipe(pipefd));
        pid_t kid = fork();
        ASSERT_OK(kid);
        if (kid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (setgroups(0, NULL) < 0 || setgid(OTHER_UID) < 0 || setuid(OTHER_UID) < 0)
                        _exit(2);
                if (write(pipefd[1], "x", 1) != 1)
                        _exit(1);
                pause();
                _exit(0);
        }
        char c;
        ASSERT_EQ(read(pipefd[0], &c, 1), 1);
        params.pid = kid;
        ASSERT_OK(pace_reserve(p, &params, &g));
        pace_close(p);
        kill(kid, SIGKILL);
        waitpid(kid, NULL, 0);
        close(pipefd[0]);
        close(pipefd[1]);
        ASSERT_EQ(broker_stop(&b), 0);
}
