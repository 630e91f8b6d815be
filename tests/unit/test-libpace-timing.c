/* SPDX-License-Identifier: MIT */
/* libpace's clock: when the next allocation starts, and waiting for it. */
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "macro.h"
#include "pace-limits.h"
#include "pace.pb-c.h"
#include "pace/pace.h"
#include "test.h"

static uint64_t next_at(uint64_t period, uint64_t phase, uint64_t now) {
        pace_grant g = { .period_ns = period, .phase_ns = phase };

        return pace_next_allocation(&g, now);
}

TEST(next_allocation_arithmetic) {
        const uint64_t M = UINT64_MAX;

        /* 50 ms period, allocations at 10 ms past each multiple. */
        ASSERT_EQ(next_at(50, 10, 0), 10);
        ASSERT_EQ(next_at(50, 10, 9), 10);
        ASSERT_EQ(next_at(50, 10, 10), 10); /* exactly on a start: that start */
        ASSERT_EQ(next_at(50, 10, 11), 60);
        ASSERT_EQ(next_at(50, 10, 49), 60);
        ASSERT_EQ(next_at(50, 10, 50), 60);
        ASSERT_EQ(next_at(50, 10, 60), 60);
        ASSERT_EQ(next_at(50, 10, 1000000), 1000010);

        /* Phase 0: the multiples of the period. */
        ASSERT_EQ(next_at(50, 0, 0), 0);
        ASSERT_EQ(next_at(50, 0, 1), 50);
        ASSERT_EQ(next_at(50, 0, 100), 100);
        ASSERT_EQ(next_at(50, 0, 101), 150);

        /* The last phase of the period. */
        ASSERT_EQ(next_at(50, 49, 49), 49);
        ASSERT_EQ(next_at(50, 49, 50), 99);

        /* Realistic values: 40 ms period, 12.345 ms phase, a day of uptime. */
        ASSERT_TRUE(next_at(40000000, 12345000, UINT64_C(86400000000000) + 1) ==
                    UINT64_C(86400000000000) + 12345000);

        /* A phase of a period or more (a confused broker) still gives a
         * start on the grid. */
        ASSERT_EQ(next_at(50, 60, 0), 10);
        ASSERT_EQ(next_at(50, 60, 11), 60);

        /* No period: nothing to wait for. */
        ASSERT_EQ(next_at(0, 10, 12345), 12345);
        ASSERT_TRUE(pace_next_allocation(NULL, 777) == 777);

        /* Huge values: neither the steps nor the sum may wrap. */
        ASSERT_TRUE(next_at(M, M - 1, 0) == M - 1);
        ASSERT_TRUE(next_at(M, M - 1, M - 1) == M - 1);
        ASSERT_TRUE(next_at(M, 0, M - 1) == M); /* M % M == 0 */
        ASSERT_TRUE(next_at(M, 0, M) == M);
        ASSERT_TRUE(next_at(M, 5, M - 1) == M); /* the next is past the end: saturates */
        ASSERT_TRUE(next_at(M - 1, M - 2, 1) == M - 2);
        ASSERT_TRUE(next_at(UINT64_C(1) << 63, (UINT64_C(1) << 63) - 1, (UINT64_C(1) << 63) + 1) == M);
        ASSERT_TRUE(next_at(UINT64_C(1) << 63, 1, (UINT64_C(1) << 63) + 2) == M); /* 2^64 + 1 saturates */
        ASSERT_TRUE(next_at(UINT64_C(1) << 63, 0, M) == M);
        ASSERT_TRUE(next_at(1, 0, M) == M);
        ASSERT_TRUE(next_at(1, 0, 12345) == 12345);
        ASSERT_TRUE(next_at(10, 3, M - 4) == M - 2); /* M is 5 modulo 10 */
}

static uint64_t monotonic_ns(void) {
        struct timespec ts;

        ASSERT_OK(clock_gettime(CLOCK_MONOTONIC, &ts));
        return (uint64_t) ts.tv_sec * NSEC_PER_SEC + (uint64_t) ts.tv_nsec;
}

/* A unit test on a shared VM: returning early is a bug, returning late by
 * less than this is scheduling noise. */
#define WAIT_LATE_TOLERANCE_NS (50 * NSEC_PER_MSEC)

TEST(wait_next_allocation_sleeps_to_the_start) {
        pace_grant g = { .period_ns = 20 * NSEC_PER_MSEC, .phase_ns = 7 * NSEC_PER_MSEC };

        for (unsigned i = 0; i < 10; i++) {
                uint64_t before, after, start = 0;

                before = monotonic_ns();
                ASSERT_OK(pace_wait_next_allocation(&g, &start));
                after = monotonic_ns();

                ASSERT_EQ(start % g.period_ns, g.phase_ns);
                ASSERT_CMP(start, >=, before);
                ASSERT_CMP(start - before, <=, g.period_ns);
                ASSERT_CMP(after, >=, start);
                ASSERT_CMP(after - start, <, WAIT_LATE_TOLERANCE_NS);
        }

        /* A long period with the start far ahead, to see that it is really
         * waited for and not rounded to something near. */
        g = (pace_grant) { .period_ns = 10 * NSEC_PER_SEC };
        g.phase_ns = (monotonic_ns() + 150 * NSEC_PER_MSEC) % g.period_ns;
        uint64_t before = monotonic_ns(), start = 0;
        ASSERT_OK(pace_wait_next_allocation(&g, &start));
        uint64_t after = monotonic_ns();
        ASSERT_CMP(start - before, <=, 150 * NSEC_PER_MSEC);
        ASSERT_CMP(start - before, >=, 100 * NSEC_PER_MSEC);
        ASSERT_CMP(after, >=, start);
        ASSERT_CMP(after - start, <, WAIT_LATE_TOLERANCE_NS);

        /* ret_start_ns may be NULL. */
        g = (pace_grant) { .period_ns = 5 * NSEC_PER_MSEC, .phase_ns = 1 };
        ASSERT_OK(pace_wait_next_allocation(&g, NULL));

        g = (pace_grant) {};
        ASSERT_ERR(pace_wait_next_allocation(&g, &start), -EINVAL);
        ASSERT_ERR(pace_wait_next_allocation(NULL, &start), -EINVAL);
}

static void on_alarm(int sig) {
}

TEST(wait_next_allocation_reports_eintr) {
        struct sigaction sa = { .sa_handler = on_alarm, .sa_flags = SA_RESTART }, old;
        /* Repeating: a one-shot that fired before the sleep began would
         * leave it to sleep the half hour. */
        struct itimerval it = { .it_value = { .tv_usec = 50000 }, .it_interval = { .tv_usec = 50000 } };
        const struct itimerval off = {};
        pace_grant g = { .period_ns = 3600 * NSEC_PER_SEC };
        uint64_t before, start = 12345;

        /* The next start half an hour away; a signal cuts the sleep short,
         * even with SA_RESTART (clock_nanosleep is never restarted). */
        g.phase_ns = (monotonic_ns() + 1800 * NSEC_PER_SEC) % g.period_ns;
        ASSERT_OK(sigaction(SIGALRM, &sa, &old));
        ASSERT_OK(setitimer(ITIMER_REAL, &it, NULL));
        before = monotonic_ns();
        ASSERT_ERR(pace_wait_next_allocation(&g, &start), -EINTR);
        ASSERT_CMP(monotonic_ns() - before, <, 10 * NSEC_PER_SEC);
        ASSERT_EQ(start, 12345);
        ASSERT_OK(setitimer(ITIMER_REAL, &off, NULL));
        ASSERT_OK(sigaction(SIGALRM, &old, NULL));
}

TEST_MAIN()
