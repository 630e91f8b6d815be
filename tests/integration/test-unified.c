/* SPDX-License-Identifier: MIT */
/* The whole stack with the dispatcher on a unified-only view of cgroups (a
 * private mount namespace with cgroup2 at /sys/fs/cgroup, as on every
 * current distribution, less the controllers this host binds to v1): its
 * reservation groups live on the unified hierarchy (cgroup.threads,
 * cpu.stat, cgroup.freeze), and without a cpuset confinement takes its
 * checked path. Root only; every process is pinned to CPU 1, bounded in time
 * and reaped by pid. */
#include <dirent.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker-harness.h"
#include "cpu-share.h"
#include "macro.h"
#include "pace/pace.h"
#include "proc-util.h"
#include "stack-harness.h"
#include "test.h"

/* pace-run (tree scope by default) -- sh: 4 spinners at once, 4 more a
 * second later, when the reservation has long been in force. */
static void reserved_tree_of_eight(const void *arg) {
        const char *pace_run = getenv("PACE_RUN");
        setenv("PACE_SOCKET", stack_socket, 1);
        execl(pace_run, pace_run, "--quiet", "--kind", "slots", "--period", "50ms", "--util", "50%", "--cpu", "1", "--",
              "/bin/sh",
              "-c",
              "spin() { while :; do :; done; }; spin & spin & spin & spin & sleep 1; spin & spin & spin & spin & wait",
              (char *) NULL);
        _exit(127);
}

static uint64_t tree_cpu_ns(pid_t root, size_t *ret_n) {
        pid_t kids[64];
        size_t n = 0;
        uint64_t sum = share_cpu_time_ns(root);
        (void) proc_list_descendants("/proc", root, kids, ELEMENTSOF(kids), &n);
        for (size_t i = 0; i < MIN(n, ELEMENTSOF(kids)); i++)
                sum += share_cpu_time_ns(kids[i]);
        *ret_n = n;
        return sum;
}

TEST(a_tree_on_a_unified_host_gets_its_grant_with_children_started_later) {
        Stack s = { .unified_only = true };

        STACK_START_OR_SKIP(&s);
        char line[1024];
        /* Groups on the unified hierarchy: the dispatcher is in its root
         * cgroup here, and no manager owns it. */
        ASSERT_EQ(dispatcher_log_line(&s, "reservation groups in /sys/fs/cgroup/pace.", line, sizeof(line)), 1);
        printf("  %s", line);

        pid_t other = spawn(hog, NULL);
        pid_t client = spawn(reserved_tree_of_eight, NULL);
        await_reservations(stack_socket, 1);
        sleep_ms(2000); /* the second four are a second old */

        /* Over 3 s: the tree's processes (the shell and its 8 children,
         * died ones excepted) against the hog. */
        size_t n = 0;
        double best_tree = 0, best_hog = 0, best_others = 1e9;
        for (int attempt = 0; attempt < 3 && best_others > 1.5; attempt++) {
                uint64_t t0 = monotonic_ns(), c0 = tree_cpu_ns(client, &n), h0 = share_cpu_time_ns(other);
                uint64_t i0 = share_cpu_idle_ns(STACK_CPU);
                sleep_ms(3000);
                uint64_t t1 = monotonic_ns(), c1 = tree_cpu_ns(client, &n), h1 = share_cpu_time_ns(other);
                uint64_t i1 = share_cpu_idle_ns(STACK_CPU);
                double tree = 100.0 * (double) (c1 - c0) / (double) (t1 - t0);
                double hg = 100.0 * (double) (h1 - h0) / (double) (t1 - t0);
                double idle = 100.0 * (double) (i1 - i0) / (double) (t1 - t0);
                double others = 100.0 - tree - hg - idle;
                if (others < best_others) {
                        best_others = others;
                        best_tree = tree;
                        best_hog = hg;
                }
        }
        printf("  granted 50%% to a tree of %zu processes below pace-run's shell: the tree got %.2f%%, the "
               "hog %.2f%% (others %.2f)\n", n, best_tree, best_hog, best_others);
        /* What pacectl status says it delivered (the group's cpu.stat over
         * whole periods, about 2 s). */
        pace_grant g = {};
        for (int i = 0; i < 300 && !(stack_find_reservation(stack_socket, 0, &g) && g.accounting.valid); i++)
                sleep_ms(10);
        double delivered = g.accounting.valid && g.accounting.window_ns > 0 ?
                                   100.0 * (double) g.accounting.delivered_ns / (double) g.accounting.window_ns :
                                   -1;
        printf("  pacectl status: delivered %.2f%% over %.0f ms, %u threads\n", delivered,
               (double) g.accounting.window_ns / 1e6, g.threads);
        reap_tree(client);
        reap(other);
        await_no_reservations(stack_socket);
        stack_stop(&s);

        ASSERT_CMP(n, >=, 8u);
        /* Without the tree's children the grant would reach the shell
         * alone, which sleeps: about 0. Without a cpu controller to weigh
         * them down, 8 waiting spinners at nice 19 took 5 points of the
         * free time on top of their runs (weight 8 x 15 against the hog's
         * 1024: 10.5% of the free 50), 53.6% in all; the dispatcher now
         * counts that time against their budget and skips runs. */
        ASSERT_CMP(best_tree, >=, 48.0);
        ASSERT_CMP(best_tree, <=, 52.0);
        /* The report counts the whole tree (the group), not the shell,
         * which sleeps and would report about 0. Its window is the last 2 s
         * or so of whole periods before the query, not the 5 s measured,
         * and over 2 s the tree's share moves by a few points (the loop
         * skips or keeps a whole run per period): 51.63% was reported
         * beside 49.28% measured. Hence 4 points. */
        ASSERT_CMP(delivered, >=, best_tree - 4.0);
        ASSERT_CMP(delivered, <=, best_tree + 4.0);
}

/* A process of MANY_WAITERS spinning threads (pinned to CPU 1 by spawn(),
 * all under the default max_threads_per_reservation of 32) that reserves
 * 10% of every 20 ms for itself. */
#define MANY_WAITERS 24

static void *spinning_thread(void *arg) {
        for (;;)
                ;
        return NULL;
}

static void small_grant_many_threads(const void *arg) {
        pace *p = NULL;
        pace_grant g;
        pace_reserve_params params = { .period_ns = 20 * NSEC_PER_MSEC, .utilization_ppm = 100000,
                                       .cpu = STACK_CPU, .scope = PACE_SCOPE_PROCESS, .kind = PACE_KIND_SLOTS };
        pthread_t t;

        if (pace_connect(stack_socket, &p) < 0 || pace_reserve(p, &params, &g) < 0)
                _exit(3);
        for (int i = 0; i < MANY_WAITERS - 1; i++)
                if (pthread_create(&t, NULL, spinning_thread, NULL) != 0)
                        _exit(4);
        spinning_thread(NULL);
}

TEST(many_waiting_threads_of_a_small_grant_leave_the_free_time_to_others) {
        Stack s = { .unified_only = true };
        double got[2];

        STACK_START_OR_SKIP(&s);
        pid_t other = spawn(hog, NULL);
        pid_t client = spawn_reserved(&s, small_grant_many_threads, NULL, 1);
        sleep_ms(1500); /* every thread registered and waiting */
        /* Looked at from the other CPU, the most of ten looks 50 ms apart:
         * a look that lands in one of their runs (2 ms in 20) finds them
         * all at SCHED_FIFO, and one from their CPU is late by a run. */
        int waiting_idle = 0;
        cpu_set_t anywhere;
        ASSERT_OK(sched_getaffinity(0, sizeof(anywhere), &anywhere));
        pin(0);
        for (int i = 0; i < 10; i++, sleep_ms(50))
                waiting_idle = MAX(waiting_idle, (int) threads_at_policy(client, SCHED_IDLE));
        ASSERT_OK(sched_setaffinity(0, sizeof(anywhere), &anywhere));
        share_measure(STACK_CPU, (pid_t[]) { client, other }, 2, 3000, got);
        /* The dispatcher stops first: it gives every thread back what it
         * had, never SCHED_IDLE, which none of them chose. */
        ASSERT_EQ(stack_stop_dispatcher(&s), 0);
        int idle_after = (int) threads_at_policy(client, SCHED_IDLE);
        int other_after = (int) threads_at_policy(client, SCHED_OTHER);
        printf("  %d spinning threads granted 10%% of 20 ms beside a hog: they got %.2f%%, the hog %.2f%% "
               "(others %.2f); %d of them at SCHED_IDLE when looked at; after the dispatcher stopped %d at "
               "SCHED_IDLE, %d at SCHED_OTHER\n", MANY_WAITERS, got[0], got[1], share_last_others, waiting_idle,
               idle_after, other_after);
        reap(client);
        reap(other);
        ASSERT_EQ(broker_stop(&s.broker), 0);

        /* No cpu controller weighs them down here. Waiting at nice 19
         * (weight 24 x 15 against the hog's 1024) they took 26% of the
         * free time, about 23 points, more than their whole budget, so
         * counting it against the budget could not give it back: the hog
         * had about 73%. At SCHED_IDLE (24 x 3) they take about 6 points,
         * which the charge takes back from their runs: about 10-12% in
         * all, and the hog the rest less the dispatcher's few points. The
         * bounds sit halfway between. */
        ASSERT_CMP(got[0], <=, 17.0 + share_foreign());
        ASSERT_CMP(got[1], >=, 80.0 - share_foreign());
        ASSERT_CMP(waiting_idle, >=, MANY_WAITERS / 2);
        ASSERT_EQ(idle_after, 0);
        ASSERT_EQ(other_after, MANY_WAITERS);
}

/* The unified hierarchy as this host mounts it beside v1: the same
 * cgroups the dispatcher's private view shows at /sys/fs/cgroup. */
#define HOST_UNIFIED "/sys/fs/cgroup/unified"

static size_t pace_dirs_on_unified(char *ret_first, size_t size) {
        size_t n = 0;
        DIR *d = opendir(HOST_UNIFIED);
        for (struct dirent *de; d && (de = readdir(d));)
                if (strncmp(de->d_name, "pace.", 5) == 0) {
                        if (n++ == 0 && ret_first)
                                snprintf(ret_first, size, "%s/%s", HOST_UNIFIED, de->d_name);
                }
        if (d)
                closedir(d);
        return n;
}

/* pace-run --period 50ms --util 60% --cpu 1 -- a spinner */
static void reserved_spinner(const void *arg) {
        const char *pace_run = getenv("PACE_RUN");
        setenv("PACE_SOCKET", stack_socket, 1);
        execl(pace_run, pace_run, "--quiet", "--kind", "slots", "--period", "50ms", "--util", "60%", "--cpu", "1", "--",
              "/bin/sh",
              "-c", "while :; do :; done", (char *) NULL);
        _exit(127);
}

TEST(strict_mode_on_a_unified_host_holds_a_spinner_to_its_grant) {
        Stack s = { .unified_only = true };
        double sh[2];

        if (skip())
                TEST_SKIP("needs root, 2 CPUs and the built daemons");
        if (access(HOST_UNIFIED "/cgroup.procs", F_OK) < 0)
                TEST_SKIP("the host does not mount the unified hierarchy beside v1 (" HOST_UNIFIED ")");
        size_t before = pace_dirs_on_unified(NULL, 0);
        stack_start_with(&s, "{ \"slot_us\": 1000, \"cpus\": [1], \"waiting\": \"freeze\" }");
        pid_t other = spawn(hog, NULL);
        pid_t client = spawn(reserved_spinner, NULL);
        await_reservations(stack_socket, 1);
        sleep_ms(500);

        /* Its group on the unified hierarchy, frozen between its slots. */
        char base[512] = "", events[700], line[64];
        ASSERT_EQ(pace_dirs_on_unified(base, sizeof(base)), before + 1);
        unsigned frozen = 0, samples = 0;
        DIR *d = opendir(base);
        ASSERT_TRUE(d != NULL);
        events[0] = '\0';
        for (struct dirent *de; (de = readdir(d));)
                if (strncmp(de->d_name, "res-", 4) == 0)
                        snprintf(events, sizeof(events), "%s/%s/cgroup.events", base, de->d_name);
        closedir(d);
        ASSERT_TRUE(events[0] != '\0');
        pin(0);
        for (uint64_t end = monotonic_ns() + NSEC_PER_SEC; monotonic_ns() < end; samples++) {
                FILE *f = fopen(events, "re");
                while (f && fgets(line, sizeof(line), f))
                        frozen += strcmp(line, "frozen 1\n") == 0;
                if (f)
                        fclose(f);
                sleep_ms(1);
        }
        share_measure(STACK_CPU, (pid_t[]) { client, other }, 2, 3000, sh);
        printf("  strict mode on the unified hierarchy: group frozen in %u of %u samples; reserved 60%% got %.2f%%, "
               "SCHED_OTHER hog %.2f%%\n", frozen, samples, sh[0], sh[1]);
        reap_tree(client);
        reap(other);
        await_no_reservations(stack_socket);
        stack_stop(&s);
        ASSERT_EQ(pace_dirs_on_unified(NULL, 0), before);
        /* 40% of the time outside its slots: frozen in most samples (a
         * sample taken as the dispatcher flips it can miss). */
        ASSERT_CMP(frozen, >, samples / 4);
        /* Within a point of its grant: frozen between its slots it gets
         * none of the free time (nice mode leaks about half a point). A
         * freeze or thaw on the unified hierarchy takes effect when the
         * task next returns to user space, which costs each run a little
         * (measured 58.97% with 2.2 points of foreign load on the CPU);
         * half a point more for that noise below. */
        ASSERT_CMP(sh[0], >=, 58.5 - share_foreign());
        ASSERT_CMP(sh[0], <=, 61.0);
}

TEST_MAIN()
