/* SPDX-License-Identifier: MIT */
/* Nice levels from the table (nice.c): a level is applied only to the
 * thread the table names as the kernel knows it, a refusal says which rule
 * it broke, and the old level comes back once the entry is gone. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "macro.h"
#include "nice.h"
#include "proc-util.h"
#include "test.h"

static pid_t sleeper(void) {
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                alarm(30);
                for (;;)
                        pause();
        }
        return pid;
}

static void end(pid_t pid) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
}

static uint64_t start_time_of(pid_t pid) {
        char path[64], stat[1024];
        uint64_t start_time;
        unsigned long flags;

        snprintf(path, sizeof(path), "/proc/%d/stat", (int) pid);
        ASSERT_OK(read_small_file(path, stat, sizeof(stat)));
        ASSERT_OK(proc_stat_parse(stat, &start_time, &flags));
        return start_time;
}

/* A table (that passed table_check()) with one nice entry. */
static PaceTableBuffer *table_with(PaceTableNice n) {
        static PaceTableBuffer t;

        memset(&t, 0, sizeof(t));
        t.n_nice = 1;
        t.nice[0] = n;
        return &t;
}

static PaceTableBuffer *empty_table(void) {
        static PaceTableBuffer t;

        memset(&t, 0, sizeof(t));
        return &t;
}

/* The entry is refused, with says in the reason, and nothing changes. */
static void assert_refused(PaceTableNice n, const char *says) {
        NiceSet *s = NULL;
        char why[512];

        ASSERT_OK(nice_set_new(&s));
        errno = 0;
        int before = getpriority(PRIO_PROCESS, (id_t) n.tid);
        ASSERT_EQ(nice_set_apply(s, table_with(n), false, why, sizeof(why)), 0u);
        ASSERT_EQ(nice_set_size(s), 0u);
        ASSERT_CONTAINS(why, says);
        if (n.tid > 1)
                ASSERT_EQ(getpriority(PRIO_PROCESS, (id_t) n.tid), before);
        nice_set_free(s);
}

TEST(pid_1_is_never_reniced) {
        assert_refused((PaceTableNice) { .pid = 1, .tid = 1, .start_time = start_time_of(1), .nice = 5 },
                       "never promoted or reniced");
}

TEST(a_recycled_pid_is_refused_by_its_start_time) {
        pid_t child = sleeper();
        assert_refused((PaceTableNice) { .pid = child, .tid = child, .start_time = start_time_of(child) + 1,
                                         .uid = getuid(), .nice = 5 },
                       "start time differs");
        end(child);
}

TEST(another_users_process_is_refused) {
        pid_t child = sleeper();
        assert_refused((PaceTableNice) { .pid = child, .tid = child, .start_time = start_time_of(child),
                                         .uid = getuid() + 4242, .nice = 5 },
                       "another user");
        end(child);
}

TEST(a_root_process_is_refused_unless_the_configuration_allows_it) {
        if (getuid() != 0)
                TEST_SKIP("the process must run as root");
        pid_t child = sleeper();
        assert_refused((PaceTableNice) { .pid = child, .tid = child, .start_time = start_time_of(child), .uid = 0,
                                         .nice = 5 },
                       "runs as root");
        end(child);
}

TEST(a_level_is_applied_and_given_back_when_the_entry_goes) {
        NiceSet *s = NULL;
        char why[512];
        pid_t child = sleeper();
        PaceTableNice n = { .pid = child, .tid = child, .start_time = start_time_of(child), .uid = getuid(),
                            .nice = 7 };

        ASSERT_OK(nice_set_new(&s));
        /* Root's processes too, here: the test may run as root. */
        ASSERT_EQ(nice_set_apply(s, table_with(n), true, why, sizeof(why)), 1u);
        ASSERT_STREQ(why, "");
        ASSERT_EQ(getpriority(PRIO_PROCESS, (id_t) child), 7);
        /* The same table again changes nothing. */
        ASSERT_EQ(nice_set_apply(s, table_with(n), true, why, sizeof(why)), 0u);
        ASSERT_EQ(nice_set_apply(s, empty_table(), true, why, sizeof(why)), 1u);
        /* Lowering a nice level back takes CAP_SYS_NICE, which the
         * dispatcher has. */
        if (getuid() == 0)
                ASSERT_EQ(getpriority(PRIO_PROCESS, (id_t) child), 0);
        ASSERT_EQ(nice_set_size(s), 0u);
        nice_set_free(s);
        end(child);
}

TEST_MAIN()
