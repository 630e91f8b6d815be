/* SPDX-License-Identifier: MIT */
/* switch-floor: the least a user-space dispatcher can cost per change of
 * slot owner on this machine, for bench/switch-cost. A SCHED_FIFO 99
 * thread pinned to --cpu sleeps to absolute deadlines every --interval
 * (clock_nanosleep, as pace's dispatch loop does) and at each wake-up hands
 * the CPU from one of two children to the other: every thread of the one
 * whose turn ends to SCHED_OTHER nice 19, every thread of the next to
 * SCHED_FIFO 98, one sched_setattr each, as pace does in "nice" mode. Each
 * child has --threads threads, pinned to the same CPU: one CPU-bound, the
 * others blocked. It prints
 *
 *   wakeups=N cpu_ns=T ns_per_wakeup=X
 *
 * from its own thread CPU clock. The children are killed and waited for
 * before it exits; an alarm bounds the whole run.
 *
 *   switch-floor [--cpu 1] [--interval 1333us] [--duration 3s] [--threads 1]
 */
#include <errno.h>
#include <dirent.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench-util.h"
#include "macro.h"
#include "sched-util.h"

static int pin(int cpu) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        return sched_setaffinity(0, sizeof(set), &set) < 0 ? -errno : 0;
}

#define MAX_THREADS 256

static void *blocked(void *arg) {
        for (;;)
                pause();
        return NULL;
}

static _Noreturn void child_main(int cpu, int threads) {
        (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
        (void) pin(cpu);
        for (int i = 1; i < threads; i++) {
                pthread_t t;
                (void) pthread_create(&t, NULL, blocked, NULL);
        }
        for (;;)
                ;
}

/* The thread ids of pid, once all threads are there. */
static int child_tids(pid_t pid, int threads, pid_t *ret) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/task", (int) pid);
        for (int tries = 0; tries < 1000; tries++) {
                DIR *d = opendir(path);
                struct dirent *de;
                int n = 0;
                if (!d)
                        return -errno;
                while ((de = readdir(d)) && n < MAX_THREADS)
                        if (de->d_name[0] >= '0' && de->d_name[0] <= '9')
                                ret[n++] = (pid_t) atoi(de->d_name);
                closedir(d);
                if (n >= threads)
                        return n;
                usleep(1000);
        }
        return -ETIMEDOUT;
}

typedef struct Args {
        int cpu;
        uint32_t threads;
        uint64_t interval_ns, duration_ns;
} Args;

static void parse_argv(int argc, char **argv, Args *ret) {
        static const char usage[] = "Usage: switch-floor [--cpu N] [--interval D] [--duration D] [--threads N]\n";
        Args a = {
                .cpu = 1,
                .threads = 1,
                .interval_ns = 1333 * NSEC_PER_USEC,
                .duration_ns = 3 * NSEC_PER_SEC,
        };
        const BenchOption options[] = {
                BENCH_OPT_CPU("cpu", &a.cpu),
                BENCH_OPT_DURATION("interval", &a.interval_ns),
                BENCH_OPT_DURATION("duration", &a.duration_ns),
                BENCH_OPT_UINT32("threads", &a.threads, 1, MAX_THREADS),
        };

        bench_parse_argv(argc, argv, usage, options, ELEMENTSOF(options));
        *ret = a;
}

/* Every interval_ns for duration_ns, the CPU goes from one child's threads
 * to the other's; the number of wake-ups. */
static uint64_t alternate(pid_t tids[2][MAX_THREADS], const int n[2], uint64_t interval_ns, uint64_t duration_ns) {
        PaceSchedAttr running, waiting;
        uint64_t next = clock_ns(CLOCK_MONOTONIC) + interval_ns, end = next + duration_ns, w = 0;

        sched_attr_running_at(98, &running);
        sched_attr_waiting_nice(&waiting);
        for (; next < end; next += interval_ns, w++) {
                struct timespec ts = { .tv_sec = (time_t) (next / NSEC_PER_SEC),
                                       .tv_nsec = (long) (next % NSEC_PER_SEC) };
                while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
                        ;
                int from = (int) (w % 2), to = 1 - from;
                for (int i = 0; i < n[from]; i++)
                        (void) sched_attr_set(tids[from][i], &waiting);
                for (int i = 0; i < n[to]; i++)
                        (void) sched_attr_set(tids[to][i], &running);
        }
        return w;
}

/* child[] is filled in as they are forked, also when this fails, so that
 * main() kills them whatever happens. */
static int run(const Args *a, pid_t child[2]) {
        pid_t tids[2][MAX_THREADS];
        int n[2] = {}, r = 0;

        for (int k = 0; k < 2; k++) {
                child[k] = fork();
                if (child[k] < 0)
                        return -errno;
                if (child[k] == 0)
                        child_main(a->cpu, (int) a->threads);
                n[k] = child_tids(child[k], (int) a->threads, tids[k]);
                if (n[k] < 0)
                        r = n[k];
        }
        struct sched_param sp = { .sched_priority = 99 };
        if (r < 0 || pin(a->cpu) < 0 || sched_setscheduler(0, SCHED_FIFO | SCHED_RESET_ON_FORK, &sp) < 0) {
                r = r < 0 ? r : -errno;
                fprintf(stderr, "switch-floor: cannot set up (children's threads, or SCHED_FIFO 99 on CPU %d): %s\n",
                        a->cpu, strerror(-r));
                return r;
        }

        uint64_t cpu0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        uint64_t w = alternate(tids, n, a->interval_ns, a->duration_ns);
        uint64_t cpu_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
        printf("wakeups=%" PRIu64 " cpu_ns=%" PRIu64 " ns_per_wakeup=%" PRIu64 "\n", w, cpu_ns, w ? cpu_ns / w : 0);
        return 0;
}

int main(int argc, char **argv) {
        pid_t child[2] = { -1, -1 };
        Args args;
        int r;

        parse_argv(argc, argv, &args);
        alarm((unsigned) (args.duration_ns / NSEC_PER_SEC) + 10);
        r = run(&args, child);
        /* Killed at whatever policy: nothing outlives this program. */
        for (int k = 0; k < 2; k++)
                if (child[k] > 0) {
                        kill(child[k], SIGKILL);
                        waitpid(child[k], NULL, 0);
                }
        return r < 0 ? 1 : 0;
}
