/* SPDX-License-Identifier: MIT */
/* Hostile clients, and a hostile broker, against the real daemons on the
 * real kernel. Every attack runs as an ordinary user (uid 60001, no
 * RLIMIT_RTPRIO, no groups) through the public interface (libpace over the
 * broker's socket, or, for the broker's user, the table file it owns); what
 * is measured is what the *victim* gets: a SCHED_OTHER hog's share of a
 * CPU, or the scheduling state of a process nobody reserved.
 *
 * Root only; 2 CPUs. Each case arms alarm(), kills everything it started by
 * pid and reaps it, and removes the cgroups it finds left behind.
 *
 * Here: the monitor itself killed: no groups, no demoted client, no runtime
 * left behind, and the next instance removes what a dead one left. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "broker-harness.h"
#include "cpu-share.h"
#include "hostile-harness.h"
#include "macro.h"
#include "pace-table.h"
#include "pace/pace.h"
#include "proc-util.h"
#include "stack-harness.h"
#include "table-shm.h"
#include "test.h"

/* 8. The monitor itself killed: no groups, no demoted client, no runtime
 * left behind. */

#define MAX_GROUPS 16

static const char *const group_roots[] = { "/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpuacct" };

typedef struct GroupNames {
        char name[MAX_GROUPS][256];
        unsigned n;
} GroupNames;

/* This instance's pace.* directories: the top of the paths the client's
 * /proc/PID/cgroup names under pace.* (a name once). Read from the client,
 * not by listing the hierarchies: other instances may come and go there
 * meanwhile (other tests on the machine), and theirs are not ours to judge
 * or remove. */
static void client_pace_groups(pid_t pid, GroupNames *g) {
        char path[64], line[1024];
        g->n = 0;
        snprintf(path, sizeof(path), "/proc/%d/cgroup", (int) pid);
        FILE *f = fopen(path, "re");
        while (f && fgets(line, sizeof(line), f)) {
                char *p = strstr(line, ":/pace.");
                bool dup = false;
                if (!p)
                        continue;
                p += 2;
                p[strcspn(p, "/\n")] = '\0';
                for (unsigned i = 0; i < g->n; i++)
                        dup |= strcmp(g->name[i], p) == 0;
                if (!dup && g->n < MAX_GROUPS)
                        snprintf(g->name[g->n++], sizeof(g->name[0]), "%s", p);
        }
        if (f)
                fclose(f);
}

/* How many of these names still exist in either hierarchy. */
static unsigned groups_present(const GroupNames *g) {
        unsigned n = 0;
        for (unsigned i = 0; i < g->n; i++)
                for (size_t r = 0; r < ELEMENTSOF(group_roots); r++) {
                        char path[PATH_MAX];
                        snprintf(path, sizeof(path), "%s/%s", group_roots[r], g->name[i]);
                        n += access(path, F_OK) == 0;
                }
        return n;
}


static void remove_groups(const GroupNames *g) {
        for (unsigned i = 0; i < g->n; i++)
                for (size_t r = 0; r < ELEMENTSOF(group_roots); r++) {
                        char path[PATH_MAX];
                        snprintf(path, sizeof(path), "%s/%s", group_roots[r], g->name[i]);
                        if (access(path, F_OK) == 0)
                                remove_cgroup_tree(group_roots[r], path);
                }
}

static void spinning_attacker(void) {
        (void) attacker_reserve(20, 300000, PACE_SCOPE_PROCESS, 0);
        spinner_thread(NULL);
}

/* A second instance with a reservation of its own (a reserved hog): its
 * cpu group must get its real-time runtime. The root's runtime (950 ms of
 * 1 s) is all one instance's group asks for, so another live instance on
 * the machine (someone else's test or benchmark) refuses it too: this
 * check needs the machine to itself, as the real-time lock gives it. */
static bool second_instance_refused_runtime(Stack *s2, pid_t *ret_sleeper) {
        pace *p = NULL;
        pace_grant g;
        char line[1024];
        *ret_sleeper = spawn(hog, NULL);
        pace_reserve_params params = { .period_ns = 20 * NSEC_PER_MSEC, .utilization_ppm = 200000,
                                       .pid = *ret_sleeper, .cpu = STACK_CPU };
        ASSERT_OK(pace_connect(s2->broker.socket, &p));
        ASSERT_OK(pace_reserve(p, &params, &g));
        pace_close(p);
        sleep_ms(500);
        int r = dispatcher_log_line(s2, "cannot give the cgroup", line, sizeof(line));
        if (r > 0)
                printf("  second instance: %s", line);
        return r > 0;
}

static bool pidfd_exited(int pidfd, unsigned ms) {
        struct pollfd pfd = { .fd = pidfd, .events = POLLIN };
        return poll(&pfd, 1, (int) ms) == 1;
}

/* How many of the groups are left once none is, or at deadline (monotonic
 * ns), whichever comes first. */
static unsigned groups_left_by(const GroupNames *g, uint64_t deadline) {
        unsigned left = groups_present(g);
        while (left > 0 && monotonic_ns() < deadline) {
                sleep_ms(10);
                left = groups_present(g);
        }
        return left;
}

/* The end of a case, before its assertions: the second instance's
 * dispatcher and both brokers stopped, and the dead instance's groups
 * removed. */
static void stop_both_instances(Stack *s, Stack *s2, const GroupNames *mine) {
        stack_stop(s2);
        ASSERT_EQ(broker_stop(&s->broker), 0);
        remove_groups(mine);
        alarm(0);
}

/* The start of a case: its alarm armed, a stack and a spinning attacker
 * reserved on it, in the pace groups it names in mine (at least one): the
 * attacker, and the stack's dispatch process in *ret_child. */
static pid_t start_grouped_client(Stack *s, GroupNames *mine, pid_t *ret_child) {
        alarm(CASE_ALARM_S);
        pid_t client = start_attacker(s, spinning_attacker);
        sleep_ms(300);
        client_pace_groups(client, mine);
        printf("  the client is in %u pace group(s)%s%s\n", mine->n, mine->n ? ", e.g. " : "",
               mine->n ? mine->name[0] : "");
        ASSERT_CMP(mine->n, >=, 1);
        *ret_child = dispatcher_child(s);
        ASSERT_TRUE(*ret_child > 0);
        return client;
}

TEST(a_killed_monitor_leaves_no_groups_and_no_demoted_client) {
        Stack s = {}, s2 = {};
        GroupNames mine;
        pid_t sleeper = 0;

        if (skip() || !have_cpuacct())
                TEST_SKIP("needs root, 2 CPUs, the built daemons and a v1 cpuacct hierarchy");
        pid_t child, client = start_grouped_client(&s, &mine, &child);
        int pidfd = (int) syscall(SYS_pidfd_open, child, 0);
        ASSERT_TRUE(pidfd >= 0);

        kill(s.dispatcher, SIGKILL);
        waitpid(s.dispatcher, NULL, 0);
        s.dispatcher = 0;
        uint64_t t0 = monotonic_ns();
        bool child_gone = pidfd_exited(pidfd, 3000);
        close(pidfd);
        unsigned left = groups_left_by(&mine, t0 + 3 * NSEC_PER_SEC);
        errno = 0;
        int pol = policy_of(client), nice_value = getpriority(PRIO_PROCESS, (id_t) client);
        printf("  monitor SIGKILLed: dispatch process %s; %u of its group directories left after %.0f ms; the client "
               "is %s, nice %d\n", child_gone ? "exited" : "STILL RUNNING after 3 s", left,
               (double) (monotonic_ns() - t0) / 1e6, pol == SCHED_OTHER ? "SCHED_OTHER" : "real-time", nice_value);

        /* A second instance, on another runtime dir. */
        stack_start(&s2);
        bool refused = second_instance_refused_runtime(&s2, &sleeper);
        reap(client);
        reap(sleeper);
        stop_both_instances(&s, &s2, &mine);
        ASSERT_TRUE(child_gone);
        ASSERT_EQ(left, 0);
        ASSERT_EQ(pol, SCHED_OTHER);
        ASSERT_EQ(nice_value, 0);
        ASSERT_FALSE(refused);
}

TEST(the_next_instance_removes_what_a_dead_one_left) {
        Stack s = {}, s2 = {};
        GroupNames mine;
        pid_t sleeper = 0;

        if (skip() || !have_cpuacct())
                TEST_SKIP("needs root, 2 CPUs, the built daemons and a v1 cpuacct hierarchy");
        pid_t child, client = start_grouped_client(&s, &mine, &child);

        /* Both at once: nothing of that instance can act any more. */
        kill(s.dispatcher, SIGKILL);
        kill(child, SIGKILL);
        waitpid(s.dispatcher, NULL, 0);
        s.dispatcher = 0;
        reap(client);
        sleep_ms(100);
        unsigned at_death = groups_present(&mine);

        /* Another instance, on another runtime dir: within 2 s of its start
         * the dead one's directories are gone (its runtime with them). */
        uint64_t t0 = monotonic_ns();
        stack_start(&s2);
        unsigned left = groups_left_by(&mine, t0 + 2 * NSEC_PER_SEC);
        bool refused = second_instance_refused_runtime(&s2, &sleeper);
        printf("  monitor and dispatch process SIGKILLed: %u group directories left at their death, %u 2 s after "
               "another instance started; it %s its runtime\n", at_death, left, refused ? "was REFUSED" : "got");
        reap(sleeper);
        stop_both_instances(&s, &s2, &mine);
        ASSERT_EQ(left, 0);
        ASSERT_FALSE(refused);
}

TEST_MAIN()
