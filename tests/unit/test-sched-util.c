/* SPDX-License-Identifier: MIT */
/* Telling, from a thread's /proc stat line, that the kernel runs it in the
 * real-time class while its policy says otherwise (a child born as its
 * parent was first promoted), whatever its name holds; and putting such a
 * thread back, which a plain call with its own policy would not do. */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

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

TEST(a_real_time_priority_behind_a_non_real_time_policy_is_leaked) {
        char buf[512];

        /* SCHED_OTHER at nice 0: priority 20. */
        stat_line("spin", 20, SCHED_OTHER, buf, sizeof(buf));
        ASSERT_FALSE(sched_stat_class_leaked(buf));
        /* SCHED_FIFO 98: priority -99, and that is its policy. */
        stat_line("spin", -99, SCHED_FIFO, buf, sizeof(buf));
        ASSERT_FALSE(sched_stat_class_leaked(buf));
        stat_line("spin", -99, SCHED_OTHER, buf, sizeof(buf));
        ASSERT_TRUE(sched_stat_class_leaked(buf));
        stat_line("spin", -2, SCHED_BATCH, buf, sizeof(buf));
        ASSERT_TRUE(sched_stat_class_leaked(buf));
        stat_line("spin", -99, SCHED_RR, buf, sizeof(buf));
        ASSERT_FALSE(sched_stat_class_leaked(buf));
}

TEST(a_name_with_spaces_and_parentheses_does_not_shift_the_fields) {
        char buf[512];

        /* A client names its threads: ") 1 2 -99" must not be read as fields. */
        stat_line(") -99 -99 0 (", 20, SCHED_OTHER, buf, sizeof(buf));
        ASSERT_FALSE(sched_stat_class_leaked(buf));
        stat_line("a (b) c", -99, SCHED_OTHER, buf, sizeof(buf));
        ASSERT_TRUE(sched_stat_class_leaked(buf));
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
