/* SPDX-License-Identifier: MIT */
/* pace-broker over a real socket: a change of a reservation is a new
 * admission, all or nothing, that keeps its CPU, scope and thread. */
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
        pace_grant a, bb, g;
        pace_status_report *st = NULL;

        pid_t ka = fork_paused(), kb = fork_paused();
        pace *p = broker_start_connected(&b, HARNESS_PROTOCOL_CONFIG);
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

        pid_t kids[] = { ka, kb };
        reap_children(kids, ELEMENTSOF(kids));
        broker_stop_connected(&b, p);
}

/* A change is applied where the reservation is, at one frame boundary of
 * one CPU: moving it, or changing a split one, is refused and changes
 * nothing (the CPUs' frame boundaries differ, so old and new could both be
 * in force for up to a frame: paper 003's Defect 1). */
TEST(a_change_stays_on_the_reservations_cpu) {
        BrokerInstance b;
        pace_grant a, c0, c1, split, g;
        size_t n;

        if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
                TEST_SKIP("needs 2 CPUs");
        pid_t ka = fork_paused(), k0 = fork_paused(), k1 = fork_paused(), ks = fork_paused();
        pace *p = broker_start_connected(&b, HARNESS_PROTOCOL_CONFIG);
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

        pid_t kids[] = { ka, k0, k1, ks };
        reap_children(kids, ELEMENTSOF(kids));
        broker_stop_connected(&b, p);
}

/* A change of parameters never changes whom a reservation covers: two
 * thread-scope reservations on one process stay two thread-scope
 * reservations (were they turned into process scope, the next table would
 * hold one process twice and be refused). */
TEST(modify_keeps_the_scope_and_thread) {
        BrokerInstance b;
        pace_grant a, t, g;
        pace_status_report *st = NULL;
        _Atomic pid_t tid;

        pthread_t thread = park_thread(&tid);
        pace *p = broker_start_connected(&b, HARNESS_PROTOCOL_CONFIG);
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

        unpark_thread(thread);
        broker_stop_connected(&b, p);
}

TEST_MAIN()
