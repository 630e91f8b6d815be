/* SPDX-License-Identifier: MIT */
/* Telling, from a thread's /proc stat line, that the kernel runs it in the
 * real-time class while its policy says otherwise (a child born as its
 * parent was first promoted), whatever its name holds; and putting such a
 * thread back, which a plain call with its own policy would not do. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "macro.h"
#include "proc-util.h"
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

/* A /proc sched file as the kernel writes it (the lines around the two
 * read, shortened), with the thread's name on the first line. */
static void sched_text(const char *comm, long prio, long policy, char *buf, size_t size) {
        snprintf(buf, size,
                 "%s (4242, #threads: 1)\n"
                 "-------------------------------------------------------------------\n"
                 "se.exec_start                                :      80506777.162808\n"
                 "nr_switches                                  :                    1\n"
                 "policy                                       :                    %ld\n"
                 "prio                                         :                  %ld\n"
                 "clock-delta                                  :                   50\n"
                 "mm->numa_scan_seq                            :                    0\n",
                 comm, policy, prio);
}

/* prio as the sched file shows it: 100 + 20 + nice for SCHED_OTHER, 99 -
 * the real-time priority in the real-time class, -1 for SCHED_DEADLINE.
 * A client names its threads: a name that looks like the file's lines
 * (newlines and all, 15 bytes at most) must not change the answer. */
static const struct {
        const char *comm;
        long prio, policy;
        bool leaked;
} sched_cases[] = {
        { "spin", 120, SCHED_OTHER, false },
        { "spin", 0, SCHED_FIFO, false },
        { "spin", 0, SCHED_RR, false },
        { "spin", -1, SCHED_DEADLINE, false },
        { "spin", 0, SCHED_OTHER, true },
        { "spin", 97, SCHED_BATCH, true },
        { "spin", 139, SCHED_IDLE, false },
        { "\nprio :0\npolicy:0", 120, SCHED_OTHER, false },
        { "\nprio : 120\n", 1, SCHED_OTHER, true },
        { "\npolicy : 1\n", 1, SCHED_OTHER, true },
};

TEST(the_sched_file_tells_a_leaked_class_as_stat_does_whatever_the_name) {
        char buf[1024];

        for (size_t i = 0; i < ELEMENTSOF(sched_cases); i++) {
                sched_text(sched_cases[i].comm, sched_cases[i].prio, sched_cases[i].policy, buf, sizeof(buf));
                if (sched_sched_class_leaked(buf) != sched_cases[i].leaked)
                        TEST_FAIL_("case %zu (prio %ld, policy %ld): leaked should be %s", i, sched_cases[i].prio,
                                   sched_cases[i].policy, sched_cases[i].leaked ? "true" : "false");
        }
        ASSERT_FALSE(sched_sched_class_leaked(""));
        ASSERT_FALSE(sched_sched_class_leaked("spin (4242, #threads: 1)\nprio : 0\n"));
        ASSERT_FALSE(sched_sched_class_leaked("spin (4242, #threads: 1)\npolicy : 0\nprio : x\n"));
}

TEST(our_own_thread_is_read_from_its_sched_file_and_not_leaked) {
        pid_t tid = (pid_t) syscall(SYS_gettid);
        char path[64], text[4096];

        /* This kernel has the file (the dispatcher falls back to stat where
         * one has not), and it names our policy and class. */
        snprintf(path, sizeof(path), "/proc/%d/task/%d/sched", (int) getpid(), (int) tid);
        ASSERT_OK(read_small_file(path, text, sizeof(text)));
        ASSERT_TRUE(strstr(text, "\npolicy "));
        ASSERT_TRUE(strstr(text, "\nprio "));
        ASSERT_EQ(sched_thread_class_leaked(getpid(), tid), 0);
        ASSERT_EQ(sched_thread_class_leaked(getpid(), 0x7ffffff0), -ESRCH);
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

TEST(what_only_a_dispatcher_sets_is_told_from_what_a_client_sets) {
        PaceSchedAttr a;

        sched_attr_running(&a);
        ASSERT_TRUE(sched_attr_is_ours(&a));
        ASSERT_FALSE(sched_attr_is_parked(&a));
        sched_attr_waiting_nice(&a);
        ASSERT_TRUE(sched_attr_is_ours(&a));
        ASSERT_FALSE(sched_attr_is_parked(&a));
        /* Waiting at SCHED_IDLE looks like parked (the registry then gives
         * it SCHED_OTHER back); a child born to it keeps SCHED_IDLE without
         * the flag, which may be its own choice too. */
        sched_attr_waiting_idle(&a);
        ASSERT_TRUE(sched_attr_is_ours(&a));
        ASSERT_TRUE(sched_attr_is_parked(&a));
        a.sched_flags = 0;
        ASSERT_TRUE(sched_attr_is_ours(&a));
        ASSERT_FALSE(sched_attr_is_parked(&a));
        ASSERT_FALSE(sched_attr_is_ours(&(PaceSchedAttr) { .sched_policy = SCHED_OTHER }));
        ASSERT_FALSE(sched_attr_is_ours(&(PaceSchedAttr) { .sched_policy = SCHED_OTHER, .sched_nice = 10 }));
        ASSERT_FALSE(sched_attr_is_ours(&(PaceSchedAttr) { .sched_policy = SCHED_FIFO, .sched_priority = 50 }));
        ASSERT_FALSE(sched_attr_is_ours(&(PaceSchedAttr) { .sched_policy = SCHED_BATCH }));
}

static void *set_waiting_idle(void *arg) {
        PaceSchedAttr waiting, now;
        pid_t tid = (pid_t) syscall(SYS_gettid);

        sched_attr_waiting_idle(&waiting);
        *(int *) arg = sched_attr_set_waiting(tid, &waiting);
        /* At nice 19 too: what pace-run looks for to know it is held. */
        if (*(int *) arg == 0 && sched_attr_get(tid, &now) == 0 &&
            (!sched_attr_is_parked(&now) || now.sched_nice != PACE_WAITING_NICE_VALUE))
                *(int *) arg = -EINVAL;
        return NULL;
}

TEST(a_waiting_policy_of_sched_idle_is_set_whole) {
        pthread_t t;
        int r = 1;

        /* On a thread of its own: SCHED_IDLE cannot be left without
         * privilege, and this thread must not be left there. */
        ASSERT_EQ(pthread_create(&t, NULL, set_waiting_idle, &r), 0);
        ASSERT_EQ(pthread_join(t, NULL), 0);
        ASSERT_OK(r);
}

TEST_MAIN()
