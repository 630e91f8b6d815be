/* SPDX-License-Identifier: MIT */
/* The whole stack on the real kernel: pace-broker (as a uid of its own) admits through
 * pace-run, publishes the table, pace-dispatcher enforces it. Root only;
 * every process it starts is pinned to CPU 1, bounded in time and reaped.
 *
 * Here: reservations over two CPUs: split, placed apart, and the client's
 * affinity while reserved and after. */
#include <dirent.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/mman.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "broker-harness.h"
#include "cpu-share.h"
#include "macro.h"
#include "pace/pace.h"
#include "proc-util.h"
#include "stack-harness.h"
#include "test.h"

/* A two-threaded client split over both CPUs records, per thread, when it
 * ran and on which CPU: a run ends at any gap of more than 50 us in its own
 * progress (an hourglass on itself) or at a change of CPU. */
#define SPLIT_RUN_NS (4ULL * NSEC_PER_SEC)

#define SPLIT_MAX_RUNS 20000

#define SPLIT_GAP_NS 50000ULL

typedef struct SplitRun {
        uint64_t start, end;
        int cpu;
} SplitRun;

typedef struct SplitLog {
        _Atomic int go;
        _Atomic int reserved;
        uint64_t t_start;
        _Atomic unsigned n[2];
        SplitRun runs[2][SPLIT_MAX_RUNS];
} SplitLog;

static SplitLog *split_log;

static void *split_thread(void *arg) {
        int me = (int) (intptr_t) arg;
        while (!atomic_load(&split_log->go))
                ;
        uint64_t begin = monotonic_ns(), last = begin, end = split_log->t_start + SPLIT_RUN_NS;
        int cpu = sched_getcpu();
        for (;;) {
                uint64_t t = monotonic_ns();
                int c = sched_getcpu();
                bool done = t > end;
                if (t - last > SPLIT_GAP_NS || c != cpu || done) {
                        unsigned n = split_log->n[me];
                        if (n < SPLIT_MAX_RUNS) {
                                split_log->runs[me][n] = (SplitRun) { begin, last, cpu };
                                atomic_store(&split_log->n[me], n + 1);
                        }
                        begin = t;
                        cpu = c;
                }
                last = t;
                if (done)
                        return NULL;
        }
}

static void split_client(const char *socket) {
        pace *p = NULL;
        pace_grant g;
        pthread_t th[2];
        cpu_set_t all;

        /* Free to run anywhere: where it runs is the dispatcher's doing. */
        CPU_ZERO(&all);
        CPU_SET(0, &all);
        CPU_SET(1, &all);
        sched_setaffinity(0, sizeof(all), &all);
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 600000, .cpu = -1 };
        if (pace_connect(socket, &p) < 0 || pace_reserve(p, &params, &g) < 0)
                _exit(3);
        pace_close(p);
        atomic_store(&split_log->reserved, 1);
        for (int i = 0; i < 2; i++)
                pthread_create(&th[i], NULL, split_thread, (void *) (intptr_t) i);
        usleep(300 * 1000);
        split_log->t_start = monotonic_ns();
        atomic_store(&split_log->go, 1);
        for (int i = 0; i < 2; i++)
                pthread_join(th[i], NULL);
        _exit(0);
}

static void sleeper_fn(const void *arg) {
        pause();
}

/* For spawn_on(): says it is running (a byte on the fd *arg), then sleeps. */
static void ready_sleeper(const void *arg) {
        if (write(*(const int *) arg, "x", 1) != 1)
                _exit(1);
        sleeper_fn(NULL);
}

/* Time the two threads ran at the same instant on different CPUs. */
static uint64_t cross_cpu_overlap_ns(const SplitLog *log) {
        uint64_t total = 0;
        for (unsigned i = 0; i < log->n[0]; i++)
                for (unsigned j = 0; j < log->n[1]; j++) {
                        const SplitRun *a = &log->runs[0][i], *b = &log->runs[1][j];
                        if (a->cpu == b->cpu)
                                continue;
                        uint64_t lo = MAX(a->start, b->start), hi = MIN(a->end, b->end);
                        if (hi > lo)
                                total += hi - lo;
                }
        return total;
}

/* What one run of the split scenario saw. "others" is, per CPU, what
 * neither the client, its CPU's hog nor the idle task had over the client's
 * life (the dispatcher's switches, interrupts, the host's steal, anyone
 * else's tests): the client counts its own runs, so a neighbour's load on
 * this shared VM shows as a smaller grant, and a window where others took
 * much is measured again rather than blamed on pace (tests/cpu-share.h). */
typedef struct SplitResult {
        int status;
        unsigned pieces;
        double piece_share[2], on_cpu[2], others[2], stolen[2], overlap_ms;
} SplitResult;

/* The client's time on `cpu` within [t0, t1], in ns. */
static uint64_t split_time_on(const SplitLog *log, int cpu, uint64_t t0, uint64_t t1) {
        uint64_t total = 0;
        for (int th = 0; th < 2; th++)
                for (unsigned i = 0; i < log->n[th]; i++) {
                        const SplitRun *r = &log->runs[th][i];
                        uint64_t lo = MAX(r->start, t0), hi = MIN(r->end, t1);
                        if (r->cpu == cpu && hi > lo)
                                total += hi - lo;
                }
        return total;
}

static void split_run(SplitResult *ret) {
        Stack s = {};
        pace *p = NULL;
        pace_grant g;
        pace_status_report *st = NULL;
        SplitResult res = {};

        memset(split_log, 0, sizeof(*split_log));
        stack_start_with(&s, "{ \"slot_us\": 1000, \"cpus\": [0, 1], \"reserve_root_processes\": true }");

        /* 25% taken on each CPU by sleepers: 50% is left on each, so 60%
         * fits no single CPU. A SCHED_OTHER hog on each CPU competes. */
        pid_t sleepers[2], hogs[2];
        int ready[2];
        ASSERT_OK(pipe(ready));
        ASSERT_OK(pace_connect(s.broker.socket, &p));
        for (int c = 0; c < 2; c++) {
                /* Pinned to its own CPU before it is reserved: placement
                 * keeps to a process's affinity (spawn() would pin it to
                 * CPU 1). */
                sleepers[c] = spawn_on(c, ready_sleeper, &ready[1]);
                char x;
                ASSERT_EQ(read(ready[0], &x, 1), 1);
                pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 250000,
                                               .pid = sleepers[c], .cpu = c };
                ASSERT_OK(pace_reserve(p, &params, &g));
        }
        for (int c = 0; c < 2; c++) {
                hogs[c] = spawn_on(c, hog, NULL);
        }
        pid_t client = fork();
        ASSERT_OK(client);
        if (client == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                alarm(CHILD_LIFETIME_S);
                split_client(s.broker.socket);
        }
        for (int i = 0; i < 300 && !split_log->reserved; i++)
                sleep_ms(10);
        ASSERT_TRUE(split_log->reserved);
        ASSERT_OK(pace_status(p, &st));
        for (size_t i = 0; i < st->n_reservations; i++)
                if (st->reservations[i].pid == client && st->reservations[i].cpu >= 0 && st->reservations[i].cpu < 2) {
                        res.pieces++;
                        res.piece_share[st->reservations[i].cpu] =
                                100.0 * (double) st->reservations[i].budget_ns / (double) st->reservations[i].period_ns;
                }
        pace_status_report_free(st);

        /* The window: from the threads' start to the client's exit. */
        for (int i = 0; i < 3000 && !atomic_load(&split_log->go); i++)
                sleep_ms(1);
        uint64_t t0 = monotonic_ns(), hog0[2], idle0[2], steal0[2];
        for (int c = 0; c < 2; c++) {
                hog0[c] = share_cpu_time_ns(hogs[c]);
                idle0[c] = share_cpu_idle_ns(c);
                steal0[c] = share_cpu_stat_ns(c, 7);
        }
        ASSERT_EQ(waitpid(client, &res.status, 0), client);
        uint64_t t1 = monotonic_ns();
        for (int c = 0; c < 2; c++) {
                double window = (double) (t1 - t0);
                double client_share = 100.0 * (double) split_time_on(split_log, c, t0, t1) / window;
                double hog_share = 100.0 * (double) (share_cpu_time_ns(hogs[c]) - hog0[c]) / window;
                double idle = 100.0 * (double) (share_cpu_idle_ns(c) - idle0[c]) / window;
                double stolen = 100.0 * (double) (share_cpu_stat_ns(c, 7) - steal0[c]) / window;
                res.others[c] = MAX(100.0 - client_share - hog_share - idle, stolen);
                res.stolen[c] = stolen;
        }
        for (int c = 0; c < 2; c++) {
                reap(hogs[c]);
                reap(sleepers[c]);
        }
        pace_close(p);
        stack_stop(&s);
        close(ready[0]);
        close(ready[1]);

        for (int c = 0; c < 2; c++)
                res.on_cpu[c] = 100.0 * (double) split_time_on(split_log, c, 0, UINT64_MAX) / (double) SPLIT_RUN_NS;
        res.overlap_ms = (double) cross_cpu_overlap_ns(split_log) / 1e6;
        printf("  split 60%% into %u pieces (CPU 0 %.0f%%, CPU 1 %.0f%%); ran %.2f%% on CPU 0 and %.2f%% on CPU 1, "
               "%.2f%% in all over 4 s; on both CPUs at once: %.3f ms; others took %.2f and %.2f points, "
               "the host's steal %.2f and %.2f\n",
               res.pieces, res.piece_share[0], res.piece_share[1], res.on_cpu[0], res.on_cpu[1],
               res.on_cpu[0] + res.on_cpu[1], res.overlap_ms, res.others[0], res.others[1], res.stolen[0], res.stolen[1]);
        *ret = res;
}

TEST(a_split_reservation_runs_on_both_cpus_never_at_once) {
        SplitResult res = {};

        if (skip())
                TEST_SKIP("needs root, 2 CPUs and the built daemons");
        split_log = mmap(NULL, sizeof(SplitLog), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        ASSERT_TRUE(split_log != MAP_FAILED);
        /* As share_measure(): others take 0.9-2.3 points here (the
         * dispatcher switches at every 1 ms slot on both CPUs); above 2.5 on
         * either CPU the run is not ours, and is run again, at most three
         * runs in all, and the quietest is judged. Only the lower bound on
         * the grant is weakened by foreign load, but every bound is checked
         * on the same run. */
        double best_others = 1e9;
        for (unsigned attempt = 0; attempt < 3; attempt++) {
                SplitResult run;
                split_run(&run);
                double others = MAX(run.others[0], run.others[1]);
                if (others < best_others) {
                        best_others = others;
                        res = run;
                }
                if (others <= 2.5)
                        break;
                printf("  the CPUs were busy with something else: running again\n");
        }
        munmap(split_log, sizeof(SplitLog));

        ASSERT_TRUE(WIFEXITED(res.status) && WEXITSTATUS(res.status) == 0);
        ASSERT_EQ(res.pieces, 2);
        /* The whole grant, within 2 points; each CPU gave about its piece
         * (3 points: the nice-19 leftovers of the free time land on
         * whichever CPU the threads were last pinned to). Only the lower
         * bounds give way to what others took above the dispatcher's own
         * 2.3 points (the host's steal, a neighbour's load: on this shared
         * VM 3-9 points on a bad day, and the client lost up to as much of
         * its runs), never the upper ones. A piece whose loop stopped
         * promoting loses 20 points or more. */
        double foreign[2];
        for (int c = 0; c < 2; c++)
                foreign[c] = MAX(res.others[c] - 2.3, 0.0);
        ASSERT_CMP(res.on_cpu[0] + res.on_cpu[1], >=, 58.0 - foreign[0] - foreign[1]);
        ASSERT_CMP(res.on_cpu[0] + res.on_cpu[1], <=, 62.0);
        for (int c = 0; c < 2; c++) {
                ASSERT_CMP(res.on_cpu[c], >=, res.piece_share[c] - 3.0 - foreign[c]);
                ASSERT_CMP(res.on_cpu[c], <=, res.piece_share[c] + 3.0);
        }
        /* Never on two CPUs at the same instant: both threads follow the
         * pieces, and a free slot separates them. 1 ms allows for the
         * timestamps' own jitter at the 4 CPU changes per frame. */
        ASSERT_CMP(res.overlap_ms, <=, 1.0);
}

TEST(two_seventy_percent_reservations_land_on_different_cpus) {
        Stack s = {};
        pace *p = NULL;
        pace_status_report *st = NULL;
        int32_t cpu_of[2] = { -1, -1 };

        if (skip())
                TEST_SKIP("needs root, 2 CPUs and the built daemons");
        stack_start_with(&s, "{ \"slot_us\": 1000, \"cpus\": [0, 1], \"reserve_root_processes\": true }");

        pid_t clients[2], hogs[2];
        for (int i = 0; i < 2; i++) {
                clients[i] = fork();
                ASSERT_OK(clients[i]);
                if (clients[i] == 0) {
                        prctl(PR_SET_PDEATHSIG, SIGKILL);
                        alarm(CHILD_LIFETIME_S);
                        setenv("PACE_SOCKET", s.broker.socket, 1);
                        /* Free to run on either CPU: placement keeps to a
                         * process's affinity, and this one inherited the
                         * test's. */
                        cpu_set_t both;
                        CPU_ZERO(&both);
                        CPU_SET(0, &both);
                        CPU_SET(1, &both);
                        sched_setaffinity(0, sizeof(both), &both);
                        const char *pace_run = getenv("PACE_RUN");
                        execl(pace_run, pace_run, "--quiet", "--kind", "slots", "--period", "50ms", "--util", "70%", "--", "/bin/sh", "-c",
                              "while :; do :; done", (char *) NULL);
                        _exit(127);
                }
                await_reservations(s.broker.socket, (size_t) i + 1);
        }
        for (int c = 0; c < 2; c++) {
                hogs[c] = spawn_on(c, hog, NULL);
        }
        ASSERT_OK(pace_connect(s.broker.socket, &p));
        ASSERT_OK(pace_status(p, &st));
        ASSERT_EQ(st->n_reservations, 2);
        for (size_t i = 0; i < st->n_reservations; i++)
                for (int k = 0; k < 2; k++)
                        if (st->reservations[i].pid == clients[k])
                                cpu_of[k] = st->reservations[i].cpu;
        pace_status_report_free(st);
        pace_close(p);
        ASSERT_TRUE(cpu_of[0] >= 0 && cpu_of[1] >= 0);
        ASSERT_NE(cpu_of[0], cpu_of[1]);
        sleep_ms(500);

        /* Per CPU: its client and its hog. */
        double sh[2][3], foreign[2];
        for (int k = 0; k < 2; k++) {
                int c = cpu_of[k];
                share_measure(c, (pid_t[]) { clients[k], hogs[c], dispatcher_child(&s) }, 3, 3000, sh[k]);
                foreign[k] = share_foreign();
                printf("  CPU %d: reserved 70%% got %.2f%%, SCHED_OTHER hog %.2f%%\n", c, sh[k][0], sh[k][1]);
        }
        for (int k = 0; k < 2; k++) {
                reap(clients[k]);
                reap(hogs[k]);
        }
        stack_stop(&s);
        /* Lower bounds give way to what others took (share_foreign()). */
        for (int k = 0; k < 2; k++) {
                ASSERT_CMP(sh[k][0], >=, 68.0 - foreign[k]);
                ASSERT_CMP(sh[k][0], <=, 72.0);
                /* Free share 30%, less 2 points, less the switch costs the
                 * admission charged (10 switches per 50 ms at 30 us), less
                 * what others may take in a window share_measure() keeps
                 * (1.5 points; share_foreign() is what they took beyond):
                 * 27.31 and 25.9 against 27.4 on noisy runs before. */
                ASSERT_CMP(sh[k][1], >=, 30.0 - 2.0 - 0.6 - SHARE_OTHERS_KEPT - foreign[k]);
        }
}

TEST(affinity_is_pinned_while_reserved_and_restored_after) {
        Stack s = {};
        pace *p = NULL;
        pace_grant g;
        cpu_set_t set, before;

        STACK_START_OR_SKIP(&s);
        pid_t kid = spawn_on(-1, sleeper_fn, NULL);
        /* Set here, not in the child: no race with the check below. */
        CPU_ZERO(&set);
        CPU_SET(0, &set);
        CPU_SET(1, &set);
        ASSERT_OK(sched_setaffinity(kid, sizeof(set), &set));
        ASSERT_OK(sched_getaffinity(kid, sizeof(before), &before));
        ASSERT_EQ(CPU_COUNT(&before), 2);

        ASSERT_OK(pace_connect(s.broker.socket, &p));
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 300000, .pid = kid, .cpu = 1 };
        ASSERT_OK(pace_reserve(p, &params, &g));
        bool pinned = false;
        for (int i = 0; i < 200 && !pinned; i++) {
                ASSERT_OK(sched_getaffinity(kid, sizeof(set), &set));
                pinned = CPU_COUNT(&set) == 1 && CPU_ISSET(1, &set);
                sleep_ms(5);
        }
        ASSERT_TRUE(pinned);

        ASSERT_OK(pace_release(p, g.id));
        bool restored = false;
        for (int i = 0; i < 200 && !restored; i++) {
                ASSERT_OK(sched_getaffinity(kid, sizeof(set), &set));
                restored = CPU_EQUAL(&set, &before);
                sleep_ms(5);
        }
        ASSERT_TRUE(restored);
        pace_close(p);
        reap(kid);
        stack_stop(&s);
}

TEST_MAIN()
