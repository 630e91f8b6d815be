/* SPDX-License-Identifier: MIT */
/* soak-client: the workloads tests/integration/test-soak-churn.c runs under
 * pace-run, one mode a process. Each ends itself after its lifetime (default
 * 60 s, --lifetime S), so one the test loses track of does not spin for long.
 *
 *   soak-client [--lifetime S] spin                  one thread that never blocks
 *   soak-client [--lifetime S] threads N             N threads that never block
 *   soak-client [--lifetime S] periodic PERIOD WORK  every PERIOD us, WORK us of CPU
 *   soak-client [--lifetime S] sleep                 blocks until killed
 *   soak-client [--lifetime S] burst MS              MS ms of CPU, then exits: a
 *                                                    short-lived member of a tree
 *
 * --linger MS --parent PID (before the mode): once its parent PID is gone
 * (a tree's shell killed), it stops spinning, sleeps MS ms and exits: an orphan that
 * outlives its tree for a while without taking CPU from anyone, so a test
 * can see whether it is still real-time then without the orphan competing
 * with what the test measures.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "parse-util.h"
#include "spin-util.h"

static atomic_bool orphaned;
static uint32_t linger_ms;

static void on_orphaned(int sig) {
        (void) sig;
        atomic_store(&orphaned, true);
}

/* Called where a spinner looks up: sleeps out its linger once orphaned. */
static void maybe_linger(void) {
        if (!atomic_load_explicit(&orphaned, memory_order_relaxed))
                return;
        struct timespec ts = { .tv_sec = linger_ms / 1000, .tv_nsec = (long) (linger_ms % 1000) * 1000000L };
        while (nanosleep(&ts, &ts) < 0)
                ;
        _exit(0);
}

static uint64_t cpu_now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return (uint64_t) ts.tv_sec * 1000000000ULL + (uint64_t) ts.tv_nsec;
}

/* Spins until this thread has used ns of CPU: work that takes as long as the
 * scheduler makes it, not a wall-clock loop. */
static void burn_ns(uint64_t ns) {
        uint64_t end = cpu_now_ns() + ns;
        while (cpu_now_ns() < end)
                maybe_linger();
}

static void *spin(void *arg) {
        volatile unsigned long sink = 0;
        (void) arg;
        for (;;) {
                if ((++sink & 0xffff) == 0)
                        maybe_linger();
        }
        return NULL;
}

static int periodic(uint32_t period_us, uint32_t work_us) {
        struct timespec next;
        clock_gettime(CLOCK_MONOTONIC, &next);
        for (;;) {
                burn_ns((uint64_t) work_us * 1000);
                next.tv_nsec += (long) period_us * 1000;
                while (next.tv_nsec >= 1000000000L) {
                        next.tv_nsec -= 1000000000L;
                        next.tv_sec++;
                }
                /* Late (a waiting period outlasted ours): start again from now,
                 * as a frame-driven program drops the frames it missed. */
                struct timespec now;
                clock_gettime(CLOCK_MONOTONIC, &now);
                if (now.tv_sec > next.tv_sec || (now.tv_sec == next.tv_sec && now.tv_nsec > next.tv_nsec))
                        next = now;
                clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
        }
        return 0;
}

static int usage(void) {
        fprintf(stderr, "usage: soak-client [--lifetime S] [--linger MS --parent PID] spin | threads N (1..1024) | periodic "
                        "PERIOD_US WORK_US | sleep | burst MS\n");
        return 2;
}

int main(int argc, char **argv) {
        uint32_t lifetime = 60, a = 0, b = 0, parent = 0;
        int i = 1;

        for (; i + 1 < argc && strncmp(argv[i], "--", 2) == 0; i += 2) {
                if (strcmp(argv[i], "--lifetime") == 0) {
                        if (parse_uint32(argv[i + 1], &lifetime) < 0 || lifetime == 0 || lifetime > 86400)
                                return usage();
                } else if (strcmp(argv[i], "--linger") == 0) {
                        if (parse_uint32(argv[i + 1], &linger_ms) < 0 || linger_ms == 0 || linger_ms > 60000)
                                return usage();
                } else if (strcmp(argv[i], "--parent") == 0) {
                        if (parse_uint32(argv[i + 1], &parent) < 0 || parent == 0)
                                return usage();
                } else
                        return usage();
        }
        if (i >= argc)
                return usage();
        alarm(lifetime);
        if ((linger_ms > 0) != (parent > 0))
                return usage();
        if (linger_ms > 0) {
                signal(SIGUSR1, on_orphaned);
                prctl(PR_SET_PDEATHSIG, SIGUSR1);
                /* Gone before the signal was armed. */
                if (getppid() != (pid_t) parent)
                        on_orphaned(SIGUSR1);
        }
        const char *mode = argv[i];
        int rest = argc - i - 1;
        char **args = argv + i + 1;

        if (strcmp(mode, "spin") == 0 && rest == 0)
                spin(NULL);
        else if (strcmp(mode, "sleep") == 0 && rest == 0)
                for (;;)
                        pause();
        else if (strcmp(mode, "burst") == 0 && rest == 1 && parse_uint32(args[0], &a) == 0 && a > 0 && a <= 10000) {
                burn_ns((uint64_t) a * 1000000);
                return 0;
        } else if (strcmp(mode, "periodic") == 0 && rest == 2 && parse_uint32(args[0], &a) == 0 &&
                   parse_uint32(args[1], &b) == 0 && a > 0 && a <= 10000000 && b < a)
                return periodic(a, b);
        else if (strcmp(mode, "threads") == 0 && rest == 1 && parse_uint32(args[0], &a) == 0 && a > 0 && a <= 1024) {
                /* The main thread is one of the N. */
                if (spin_util_start_threads("soak-client", 1, a, spin) < 0)
                        return 1;
                spin(NULL);
        }
        return usage();
}
