/* SPDX-License-Identifier: MIT */
/* pace-broker over a real socket, what one request gets: a grant, a status,
 * or a clear error that changes nothing. */
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

static PaceTableBuffer table_before, table_after; /* large: off the stack */

TEST(reserve_status_release_roundtrip) {
        BrokerInstance b;
        pace_grant g;
        pace_status_report *st = NULL;

        pace *p = broker_start_connected(&b, HARNESS_PROTOCOL_CONFIG);
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
        broker_stop_connected(&b, p);
}

TEST(bad_requests_get_clear_errors_and_change_nothing) {
        BrokerInstance b;
        pace_grant g;
        size_t n;

        pace *p = broker_start_connected(&b, HARNESS_PROTOCOL_CONFIG);
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
                Pace__Request req;
                Pace__ReserveRequest res;
                uint8_t buf[256];
                raw_reserve_init(&req, &res, 50 * NSEC_PER_MSEC, 100000);
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
                Pace__Request req;
                Pace__ReserveRequest res;
                raw_reserve_init(&req, &res, bad[i].period_ns, bad[i].ppm);
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
        assert_broker_log_contains(&b, "refused");
        broker_stop_connected(&b, p);
}

TEST(a_thread_id_is_refused_as_not_a_process) {
        BrokerInstance b;
        pace_grant g;
        _Atomic pid_t tid;

        pthread_t thread = park_thread(&tid);
        pace *p = broker_start_connected(&b, HARNESS_PROTOCOL_CONFIG);
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 100000, .pid = tid, .cpu = -1 };
        ASSERT_ERR(pace_reserve(p, &params, &g), PACE_E_INVALID_ARGUMENT);
        ASSERT_CONTAINS(pace_last_message(), "is a thread, not a process");
        unpark_thread(thread);
        broker_stop_connected(&b, p);
}

/* Above what is free (not above the cap): refused, saying what is free,
 * and the table stays as it was. */
TEST(a_request_above_what_is_free_is_refused_and_changes_nothing) {
        BrokerInstance b;
        pace_grant a, g;
        size_t n;

        pid_t ka = fork_paused(), kb = fork_paused();
        pace *p = broker_start_connected(&b, HARNESS_PROTOCOL_CONFIG);
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

        pid_t kids[] = { ka, kb };
        reap_children(kids, ELEMENTSOF(kids));
        broker_stop_connected(&b, p);
}

static void *park_forever(void *arg) {
        pause();
        return NULL;
}

static int start_seven_threads(void) {
        pthread_t t;

        for (int i = 0; i < 7; i++)
                pthread_create(&t, NULL, park_forever, NULL);
        return 0;
}

TEST(a_process_with_too_many_threads_is_refused) {
        BrokerInstance b;
        pace_grant g;

        pid_t kid = fork_paused_after(start_seven_threads);
        pace *p = broker_start_connected(&b, "{ \"max_threads_per_reservation\": 4 }");
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 100000, .pid = kid, .cpu = -1 };
        ASSERT_ERR(pace_reserve(p, &params, &g), PACE_E_LIMIT_EXCEEDED);
        ASSERT_CONTAINS(pace_last_message(), "has 8 threads");
        ASSERT_CONTAINS(pace_last_message(), "max_threads_per_reservation");
        /* The caller itself, with its one or two threads, is fine. */
        params.pid = 0;
        ASSERT_OK(pace_reserve(p, &params, &g));
        reap_children(&kid, 1);
        broker_stop_connected(&b, p);
}

TEST(broker_wide_limits_have_keys_and_clear_errors) {
        BrokerInstance b;
        pace_grant g;
        pid_t kids[3];

        for (int i = 0; i < 3; i++)
                kids[i] = fork_paused();
        pace *p = broker_start_connected(&b, "{ \"max_reservations\": 2, \"max_message_bytes\": 256 }");
        for (int i = 0; i < 3; i++) {
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
        reap_children(kids, ELEMENTSOF(kids));
        broker_stop_connected(&b, p);
}

TEST_MAIN()
