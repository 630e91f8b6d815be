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

static uint64_t churn_life_ns = NSEC_PER_MSEC;
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

int main(int argc, char **argv) {
        static const struct option options[] = {
                { "period", required_argument, NULL, 'p' },
                { "util-ppm", required_argument, NULL, 'u' },
                { "cpu", required_argument, NULL, 'c' },
                { "threads", required_argument, NULL, 't' },
                { "create-cpu", required_argument, NULL, 'C' },
                { "churn", required_argument, NULL, 'n' },
                { "life", required_argument, NULL, 'l' },
                { "stack-kib", required_argument, NULL, 's' },
                { "hold", required_argument, NULL, 'H' },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        pace_reserve_params params = { .period_ns = 20 * NSEC_PER_MSEC, .utilization_ppm = 100000, .cpu = 1 };
        uint32_t threads = 32, create_cpu = 0, churn = 0, stack_kib = 32, cpu = 1;
        uint64_t hold_ns = 60 * NSEC_PER_SEC;
        int c, r;

        while ((c = getopt_long(argc, argv, "p:u:c:t:C:n:l:s:H:h", options, NULL)) >= 0)
                switch (c) {
                case 'p':
                        if (parse_duration_ns(optarg, &params.period_ns) < 0)
                                goto bad;
                        break;
                case 'u':
                        if (parse_uint32(optarg, &params.utilization_ppm) < 0)
                                goto bad;
                        break;
                case 'c':
                        if (parse_uint32(optarg, &cpu) < 0 || cpu >= CPU_SETSIZE)
                                goto bad;
                        params.cpu = (int) cpu;
                        break;
                case 't':
                        if (parse_uint32(optarg, &threads) < 0 || threads < 2 || threads > 1000000)
                                goto bad;
                        break;
                case 'C':
                        if (parse_uint32(optarg, &create_cpu) < 0 || create_cpu >= CPU_SETSIZE)
                                goto bad;
                        break;
                case 'n':
                        if (parse_uint32(optarg, &churn) < 0 || churn > 1000)
                                goto bad;
                        break;
                case 'l':
                        if (parse_duration_ns(optarg, &churn_life_ns) < 0)
                                goto bad;
                        break;
                case 's':
                        if (parse_uint32(optarg, &stack_kib) < 0 || stack_kib < 16 || stack_kib > 8192)
                                goto bad;
                        break;
                case 'H':
                        if (parse_duration_ns(optarg, &hold_ns) < 0)
                                goto bad;
                        break;
                case 'h':
                        printf("Usage: threads-client [--period DUR] [--util-ppm PPM] [--cpu N] [--threads N] "
                               "[--create-cpu N] [--churn LIVE] [--life DUR] [--stack-kib K] [--hold DUR]\n");
                        return 0;
                default:
                        return 2;
                bad:
                        fprintf(stderr, "threads-client: -%c %s: bad value (see --help)\n", c, optarg);
                        return 2;
                }

        (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
        setvbuf(stdout, NULL, _IOLBF, 0);

        /* Every thread blocks every signal; the main thread takes them with
         * sigwaitinfo(). The alarm bounds the run even if nobody stops it. */
        sigset_t all;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, NULL);
        alarm((unsigned) (hold_ns / NSEC_PER_SEC) + 5);

        size_t page = (size_t) sysconf(_SC_PAGESIZE);
        size_t stack = (size_t) stack_kib * 1024;
        long min_stack = sysconf(_SC_THREAD_STACK_MIN);
        if (min_stack > 0 && stack < (size_t) min_stack)
                stack = ((size_t) min_stack + page - 1) / page * page;

        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, MAX(stack, (size_t) 64 * 1024));
        r = pthread_create(&t, &attr, spinner, NULL);
        if (r != 0)
                fail("pthread_create (spinner)", r);
        pthread_attr_destroy(&attr);
        atomic_fetch_add(&created, 1);

        pace *p = NULL;
        pace_grant g;
        r = pace_connect(NULL, &p);
        if (r < 0) {
                printf("error connect: %s\n", pace_strerror(r));
                return 1;
        }
        r = pace_reserve(p, &params, &g);
        if (r < 0) {
                const char *m = pace_last_message();
                printf("error reserve: %s\n", m ? m : pace_strerror(r));
                return 1;
        }
        pace_close(p);

        /* The dispatcher pins a thread to its reservation's CPU once, at
         * first touch, and never again: wait for that (up to 3 s), then go
         * elsewhere to create the rest. */
        uint64_t deadline = monotonic_ns() + 3 * NSEC_PER_SEC;
        while (!only_cpu(g.cpu) && monotonic_ns() < deadline)
                usleep(1000);
        if (!only_cpu(g.cpu))
                fail("the dispatcher never touched the main thread", ETIMEDOUT);
        if (create_cpu != (uint32_t) g.cpu && (r = pin_self((int) create_cpu)) < 0)
                fail("sched_setaffinity", -r);

        if (churn > 0) {
                churn_target = churn;
                create_cpu_g = (int) create_cpu;
                pthread_attr_init(&attr);
                pthread_attr_setstacksize(&attr, MAX(stack, (size_t) 64 * 1024));
                r = pthread_create(&t, &attr, churner, (void *) stack);
                if (r != 0)
                        fail("pthread_create (churner)", r);
                pthread_attr_destroy(&attr);
                atomic_fetch_add(&created, 1);
        } else {
                size_t n = threads - 2;
                char *stacks = NULL;
                if (n > 0) {
                        stacks = mmap(NULL, n * stack, PROT_READ | PROT_WRITE,
                                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
                        if (stacks == MAP_FAILED)
                                fail("mmap (stacks)", errno);
                }
                pthread_attr_init(&attr);
                for (size_t i = 0; i < n; i++) {
                        pthread_attr_setstack(&attr, stacks + i * stack, stack);
                        r = pthread_create(&t, &attr, sleeper, NULL);
                        if (r != 0) {
                                printf("error pthread_create (sleeper %zu of %zu): %s\n", i + 1, n, strerror(r));
                                return 1;
                        }
                        atomic_fetch_add(&created, 1);
                }
                pthread_attr_destroy(&attr);
        }
        while (atomic_load(&spinner_tid) == 0)
                usleep(1000);
        printf("ready %" PRIu32 " %d %" PRIu64 " %" PRIu64 " %d\n", churn > 0 ? 0 : threads,
               atomic_load(&spinner_tid), g.period_ns, g.budget_ns, g.cpu);

        struct timespec until;
        uint64_t end = monotonic_ns() + hold_ns;
        for (;;) {
                siginfo_t si;
                uint64_t now = monotonic_ns();
                if (now >= end)
                        break;
                until.tv_sec = (time_t) ((end - now) / NSEC_PER_SEC);
                until.tv_nsec = (long) ((end - now) % NSEC_PER_SEC);
                int sig = sigtimedwait(&all, &si, &until);
                if (sig == SIGUSR1) {
                        printf("stats %" PRIu64 " %" PRIu64 "\n", (uint64_t) atomic_load(&created),
                               clock_ns(CLOCK_PROCESS_CPUTIME_ID));
                        continue;
                }
                if (sig < 0 && (errno == EINTR || errno == EAGAIN))
                        continue;
                break; /* SIGTERM, SIGINT, SIGALRM, anything else */
        }
        /* exit_group: the kernel ends every thread. */
        _exit(0);
}
