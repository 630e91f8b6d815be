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

#include "macro.h"
#include "parse-util.h"
#include "sched-util.h"

static uint64_t clock_ns(clockid_t c) {
        struct timespec ts;
        clock_gettime(c, &ts);
        return (uint64_t) ts.tv_sec * NSEC_PER_SEC + (uint64_t) ts.tv_nsec;
}

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

int main(int argc, char **argv) {
        static const struct option options[] = {
                { "cpu", required_argument, NULL, 'c' },
                { "interval", required_argument, NULL, 'i' },
                { "duration", required_argument, NULL, 'd' },
                { "threads", required_argument, NULL, 't' },
                {}
        };
        uint64_t interval_ns = 1333 * NSEC_PER_USEC, duration_ns = 3 * NSEC_PER_SEC;
        int cpu = 1, threads = 1, c;

        while ((c = getopt_long(argc, argv, "c:i:d:t:", options, NULL)) >= 0)
                switch (c) {
                case 'c':
                        cpu = atoi(optarg);
                        break;
                case 'i':
                        if (parse_duration_ns(optarg, &interval_ns) < 0 || interval_ns == 0) {
                                fprintf(stderr, "switch-floor: --interval %s: expected a duration\n", optarg);
                                return 2;
                        }
                        break;
                case 'd':
                        if (parse_duration_ns(optarg, &duration_ns) < 0) {
                                fprintf(stderr, "switch-floor: --duration %s: expected a duration\n", optarg);
                                return 2;
                        }
                        break;
                case 't':
                        threads = atoi(optarg);
                        if (threads < 1 || threads > MAX_THREADS) {
                                fprintf(stderr, "switch-floor: --threads %s: expected 1..%d\n", optarg, MAX_THREADS);
                                return 2;
                        }
                        break;
                default:
                        return 2;
                }
        alarm((unsigned) (duration_ns / NSEC_PER_SEC) + 10);

        pid_t child[2] = { -1, -1 };
        pid_t tids[2][MAX_THREADS];
        int n[2] = {}, r = 0;
        for (int k = 0; k < 2; k++) {
                child[k] = fork();
                if (child[k] < 0)
                        return 1;
                if (child[k] == 0)
                        child_main(cpu, threads);
                n[k] = child_tids(child[k], threads, tids[k]);
                if (n[k] < 0)
                        r = n[k];
        }
        struct sched_param sp = { .sched_priority = 99 };
        if (r < 0 || pin(cpu) < 0 || sched_setscheduler(0, SCHED_FIFO | SCHED_RESET_ON_FORK, &sp) < 0) {
                fprintf(stderr, "switch-floor: cannot set up (children's threads, or SCHED_FIFO 99 on CPU %d): %s\n",
                        cpu, strerror(r < 0 ? -r : errno));
                r = 1;
                goto out;
        }
        PaceSchedAttr running, waiting;
        sched_attr_running_at(98, &running);
        sched_attr_waiting_nice(&waiting);

        uint64_t next = clock_ns(CLOCK_MONOTONIC) + interval_ns, end = next + duration_ns, w = 0;
        uint64_t cpu0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
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
        uint64_t cpu_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
        printf("wakeups=%" PRIu64 " cpu_ns=%" PRIu64 " ns_per_wakeup=%" PRIu64 "\n", w, cpu_ns, w ? cpu_ns / w : 0);
out:
        /* Killed at whatever policy: nothing outlives this program. */
        for (int k = 0; k < 2; k++)
                if (child[k] > 0) {
                        kill(child[k], SIGKILL);
                        waitpid(child[k], NULL, 0);
                }
        return r;
}
