/* SPDX-License-Identifier: MIT */
/* Telling, from a thread's /proc stat line, that the kernel runs it in the
 * real-time class while its policy says otherwise (a child born as its
 * parent was first promoted), whatever its name holds; and putting such a
 * thread back, which a plain call with its own policy would not do. */
#include <pthread.h>
#include <stdbool.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "macro.h"
#include "sched-util.h"
#include "test.h"

/* A stat line: tid, comm, state, then fields 4.. with priority (18) and
 * policy (41) as given, every other field 0. */
static void stat_line(const char *comm, long priority, long policy, char *buf, size_t size) {
        int n = snprintf(buf, size, "4242 (%s) R", comm);
        for (unsigned field = 4; field <= 52; field++)
                n += snprintf(buf + n, size - (size_t) n, " %ld",
                              field == 18 ? priority : field == 41 ? policy : 0L);
}

/* Priority as /proc shows it: nice + 20 for SCHED_OTHER, -1 - the
 * real-time priority in the real-time class. A client names its threads,
 * so a name must never shift the fields. */
static const struct {
        const char *comm;
        long priority, policy;
        bool leaked;
} stat_cases[] = {
        { "spin", 20, SCHED_OTHER, false },
        { "spin", -99, SCHED_FIFO, false },
        { "spin", -99, SCHED_RR, false },
        { "spin", -99, SCHED_OTHER, true },
        { "spin", -2, SCHED_BATCH, true },
        { ") -99 -99 0 (", 20, SCHED_OTHER, false },
        { "a (b) c", -99, SCHED_OTHER, true },
};

TEST(a_real_time_priority_behind_a_non_real_time_policy_is_leaked) {
        char buf[512];

        for (size_t i = 0; i < ELEMENTSOF(stat_cases); i++) {
                stat_line(stat_cases[i].comm, stat_cases[i].priority, stat_cases[i].policy, buf, sizeof(buf));
                if (sched_stat_class_leaked(buf) != stat_cases[i].leaked)
                        TEST_FAIL_("case %zu (\"%s\", priority %ld, policy %ld): leaked should be %s", i,
                                   stat_cases[i].comm, stat_cases[i].priority, stat_cases[i].policy,
                                   stat_cases[i].leaked ? "true" : "false");
        }
}

TEST(a_line_cut_short_is_not_leaked) {
        ASSERT_FALSE(sched_stat_class_leaked(""));
        ASSERT_FALSE(sched_stat_class_leaked("4242 (spin) R 1 2 3"));
        ASSERT_FALSE(sched_stat_class_leaked("no parenthesis at all"));
}

TEST(reclass_keeps_the_policy_nice_level_and_flag) {
        PaceSchedAttr before, after;
        pid_t tid = (pid_t) syscall(SYS_gettid);

        /* Our own thread: nice 5, reset-on-fork (no privilege needed to
         * lower one's own priority or to set the flag). */
        before = (PaceSchedAttr) { .sched_policy = SCHED_OTHER, .sched_nice = 5,
                                   .sched_flags = PACE_SCHED_FLAG_RESET_ON_FORK };
        ASSERT_OK(sched_attr_set(tid, &before));
        ASSERT_OK(sched_attr_reclass(tid));
        ASSERT_OK(sched_attr_get(tid, &after));
        ASSERT_EQ(after.sched_policy, SCHED_OTHER);
        ASSERT_EQ(after.sched_nice, 5);
        ASSERT_TRUE(after.sched_flags & PACE_SCHED_FLAG_RESET_ON_FORK);
}

TEST_MAIN()
