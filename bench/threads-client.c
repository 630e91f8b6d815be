/* SPDX-License-Identifier: MIT */
/* threads-client: a reserved client with many threads, for bench/threads.
 * It starts one spinning thread, reserves itself (process scope) through
 * libpace, and once the dispatcher has touched it (pinned its main thread
 * to the reservation's CPU) moves its main thread to --create-cpu and there
 * either
 *   - creates threads until the process has --threads in all (main +
 *     spinner + sleepers); the sleepers block forever and run on small
 *     stacks carved out of one mapping (one VMA, not two per thread), or
 *   - with --churn LIVE, runs a thread that keeps LIVE short-lived threads
 *     alive: each sleeps --life and exits, and a new one is born as soon as
 *     the oldest one's life is over (LIVE births per --life); the creating
 *     thread moves itself back to --create-cpu whenever the dispatcher has
 *     pinned it to the reservation's CPU.
 * Creating them on another CPU keeps the creation out of the measured CPU
 * (and out of reach of a dispatcher that may be using most of it).
 * The spinner is created before the reservation, so it is among the first
 * threads the dispatcher lists. Then it prints
 *
 *   ready THREADS SPINNER_TID PERIOD_NS BUDGET_NS CPU
 *
 * and on every SIGUSR1
 *
 *   stats CREATED PROCESS_CPU_NS
 *
 * (threads created so far, the process's CPU clock). SIGTERM, SIGINT or
 * --hold (and an alarm shortly after) ends it. On failure it prints
 * "error MESSAGE" and exits 1.
 *
 *   threads-client --period 20ms --util-ppm 100000 --cpu 1 --threads 10000 [--create-cpu 0]
 *                  [--churn 8 --life 1ms] [--stack-kib 32] [--hold 60s]
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <pace/pace.h>

#include "bench-util.h"
#include "macro.h"
#include "parse-util.h"

static atomic_uint_fast64_t created;
static atomic_int spinner_tid;
static volatile uint64_t spin_sink;

static uint64_t churn_life_ns;
static unsigned churn_target;
static int create_cpu_g = -1;

static void *spinner(void *arg) {
        atomic_store(&spinner_tid, (int) syscall(SYS_gettid));
        for (;;)
                for (int i = 0; i < 1000000; i++)
                        spin_sink += (uint64_t) i;
        return NULL;
}

static void *sleeper(void *arg) {
        for (;;)
                pause(); /* every signal is blocked: never returns */
        return NULL;
}

static void *churn_one(void *arg) {
        struct timespec ts = { .tv_sec = (time_t) (churn_life_ns / NSEC_PER_SEC),
                               .tv_nsec = (long) (churn_life_ns % NSEC_PER_SEC) };
        while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) == EINTR)
                ;
        return NULL;
}

static bool only_cpu(int cpu);
static int pin_self(int cpu);

/* Keeps churn_target threads alive, each for churn_life_ns: a new one is
 * born when the oldest one's life is over, whether or not it has exited
 * yet (one pinned to the reservation's CPU may wait there for its turn to
 * exit), so the birth rate, churn_target per churn_life_ns, does not
 * depend on the measured CPU. The dispatcher pins this thread to that CPU
 * when it first moves it; it moves itself back to create_cpu_g (a client
 * may re-pin its own threads). */
static void *churner(void *arg) {
        pthread_attr_t attr;
        uint64_t *born = calloc(churn_target, sizeof(uint64_t));
        if (!born)
                return NULL;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, (size_t) arg);
        for (unsigned i = 0;; i = (i + 1) % churn_target) {
                uint64_t at = born[i] + churn_life_ns;
                struct timespec ts = { .tv_sec = (time_t) (at / NSEC_PER_SEC), .tv_nsec = (long) (at % NSEC_PER_SEC) };
                while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
                        ;
                if (create_cpu_g >= 0 && !only_cpu(create_cpu_g))
                        (void) pin_self(create_cpu_g);
                pthread_t t;
                born[i] = monotonic_ns();
                if (pthread_create(&t, &attr, churn_one, NULL) == 0)
                        atomic_fetch_add(&created, 1);
        }
        return NULL;
}

static bool only_cpu(int cpu) {
        cpu_set_t set;
        if (sched_getaffinity(0, sizeof(set), &set) < 0)
                return false;
        return CPU_COUNT(&set) == 1 && CPU_ISSET(cpu, &set);
}

static int pin_self(int cpu) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        return sched_setaffinity(0, sizeof(set), &set) < 0 ? -errno : 0;
}

static _Noreturn void fail(const char *what, int err) {
        printf("error %s: %s\n", what, strerror(err));
        fflush(stdout);
        _exit(1);
}

typedef struct Args {
        pace_reserve_params params;
        uint32_t threads, churn, stack_kib;
        int create_cpu;
        uint64_t life_ns, hold_ns;
} Args;

static void parse_argv(int argc, char **argv, Args *ret) {
        static const char usage[] = "Usage: threads-client [--period DUR] [--util-ppm PPM] [--cpu N] [--threads N] "
                                    "[--create-cpu N] [--churn LIVE] [--life DUR] [--stack-kib K] [--hold DUR]\n";
        Args a = {
                .params = { .period_ns = 20 * NSEC_PER_MSEC, .utilization_ppm = 100000, .cpu = 1 },
                .threads = 32,
                .stack_kib = 32,
                .create_cpu = 0,
                .life_ns = NSEC_PER_MSEC,
                .hold_ns = 60 * NSEC_PER_SEC,
        };
        const BenchOption options[] = {
                BENCH_RESERVE_OPTIONS(&a.params),
                BENCH_OPT_UINT32("threads", &a.threads, 2, 1000000),
                BENCH_OPT_CPU("create-cpu", &a.create_cpu),
                BENCH_OPT_UINT32("churn", &a.churn, 0, 1000),
                BENCH_OPT_DURATION("life", &a.life_ns),
                BENCH_OPT_UINT32("stack-kib", &a.stack_kib, 16, 8192),
                BENCH_OPT_DURATION("hold", &a.hold_ns),
        };

        bench_parse_argv(argc, argv, usage, options, ELEMENTSOF(options));
        *ret = a;
}

/* --stack-kib, at least what the C library allows, in whole pages. */
static size_t thread_stack_size(uint32_t stack_kib) {
        size_t page = (size_t) sysconf(_SC_PAGESIZE);
        size_t stack = (size_t) stack_kib * 1024;
        long min_stack = sysconf(_SC_THREAD_STACK_MIN);

        if (min_stack > 0 && stack < (size_t) min_stack)
                stack = ((size_t) min_stack + page - 1) / page * page;
        return stack;
}

/* The spinner and the churner: threads that run code of their own, so
 * never on less than 64 KiB of stack. */
static void start_thread(void *(*fn)(void *), void *arg, size_t stack, const char *what) {
        pthread_t t;
        pthread_attr_t attr;
        int r;

        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, MAX(stack, (size_t) 64 * 1024));
        r = pthread_create(&t, &attr, fn, arg);
        if (r != 0)
                fail(what, r);
        pthread_attr_destroy(&attr);
        atomic_fetch_add(&created, 1);
}

static int reserve_self(const pace_reserve_params *params, pace_grant *ret) {
        pace *p = NULL;
        int r;

        r = pace_connect(NULL, &p);
        if (r < 0) {
                printf("error connect: %s\n", pace_strerror(r));
                return r;
        }
        r = pace_reserve(p, params, ret);
        if (r < 0) {
                const char *m = pace_last_message();
                printf("error reserve: %s\n", m ? m : pace_strerror(r));
                return r;
        }
        pace_close(p);
        return 0;
}

/* The dispatcher pins a thread to its reservation's CPU once, at first
 * touch, and never again: wait for that (up to 3 s), then go elsewhere to
 * create the rest. */
static void move_after_first_touch(int cpu, int create_cpu) {
        uint64_t deadline = monotonic_ns() + 3 * NSEC_PER_SEC;
        int r;

        while (!only_cpu(cpu) && monotonic_ns() < deadline)
                usleep(1000);
        if (!only_cpu(cpu))
                fail("the dispatcher never touched the main thread", ETIMEDOUT);
        if (create_cpu != cpu && (r = pin_self(create_cpu)) < 0)
                fail("sched_setaffinity", -r);
}

/* n threads that block forever, on stacks carved out of one mapping. */
static int start_sleepers(size_t n, size_t stack) {
        pthread_attr_t attr;
        char *stacks = NULL;
        int r;

        if (n > 0) {
                stacks = mmap(NULL, n * stack, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
                if (stacks == MAP_FAILED)
                        fail("mmap (stacks)", errno);
        }
        pthread_attr_init(&attr);
        for (size_t i = 0; i < n; i++) {
                pthread_t t;
                pthread_attr_setstack(&attr, stacks + i * stack, stack);
                r = pthread_create(&t, &attr, sleeper, NULL);
                if (r != 0) {
                        printf("error pthread_create (sleeper %zu of %zu): %s\n", i + 1, n, strerror(r));
                        return -r;
                }
                atomic_fetch_add(&created, 1);
        }
        pthread_attr_destroy(&attr);
        return 0;
}

/* Answers SIGUSR1 with a stats line until hold_ns is over or another
 * signal comes. */
static void serve(uint64_t hold_ns, const sigset_t *signals) {
        uint64_t end = monotonic_ns() + hold_ns;

        for (;;) {
                siginfo_t si;
                uint64_t now = monotonic_ns();
                if (now >= end)
                        break;
                struct timespec until = { .tv_sec = (time_t) ((end - now) / NSEC_PER_SEC),
                                          .tv_nsec = (long) ((end - now) % NSEC_PER_SEC) };
                int sig = sigtimedwait(signals, &si, &until);
                if (sig == SIGUSR1) {
                        printf("stats %" PRIu64 " %" PRIu64 "\n", (uint64_t) atomic_load(&created),
                               clock_ns(CLOCK_PROCESS_CPUTIME_ID));
                        continue;
                }
                if (sig < 0 && (errno == EINTR || errno == EAGAIN))
                        continue;
                break; /* SIGTERM, SIGINT, SIGALRM, anything else */
        }
}

static int run(const Args *a) {
        size_t stack = thread_stack_size(a->stack_kib);
        sigset_t all;
        pace_grant g;
        int r;

        (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
        setvbuf(stdout, NULL, _IOLBF, 0);

        /* Every thread blocks every signal; the main thread takes them with
         * sigwaitinfo(). The alarm bounds the run even if nobody stops it. */
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, NULL);
        alarm((unsigned) (a->hold_ns / NSEC_PER_SEC) + 5);

        start_thread(spinner, NULL, stack, "pthread_create (spinner)");
        r = reserve_self(&a->params, &g);
        if (r < 0)
                return r;
        move_after_first_touch(g.cpu, a->create_cpu);

        if (a->churn > 0) {
                churn_target = a->churn;
                churn_life_ns = a->life_ns;
                create_cpu_g = a->create_cpu;
                start_thread(churner, (void *) stack, stack, "pthread_create (churner)");
        } else {
                r = start_sleepers(a->threads - 2, stack);
                if (r < 0)
                        return r;
        }
        while (atomic_load(&spinner_tid) == 0)
                usleep(1000);
        printf("ready %" PRIu32 " %d %" PRIu64 " %" PRIu64 " %d\n", a->churn > 0 ? 0 : a->threads,
               atomic_load(&spinner_tid), g.period_ns, g.budget_ns, g.cpu);

        serve(a->hold_ns, &all);
        return 0;
}

int main(int argc, char **argv) {
        Args args;

        parse_argv(argc, argv, &args);
        if (run(&args) < 0)
                return 1;
        /* exit_group: the kernel ends every thread. */
        _exit(0);
}
