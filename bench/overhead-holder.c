/* SPDX-License-Identifier: MIT */
/* overhead-holder: holds N reservations on one CPU for bench/overhead. It
 * forks N children; each gives itself THREADS-1 extra (blocked) threads,
 * reserves itself through libpace and then spins (--spin) or sleeps until
 * it is killed. The parent prints one line per refusal and then
 *   ready N GRANTED PERIOD_NS BUDGET_NS
 * on stdout (the first child's grant), and holds until SIGTERM/SIGINT or
 * --hold expires; then it kills its children and waits for them.
 * --scope tree: each child reserves its process tree instead of itself, and
 * first forks one process of its own (one thread, blocked in pause(), dying
 * with it), so the tree the dispatcher follows really has a descendant.
 *
 *   overhead-holder --count 16 --period 32ms --util 1562ppm --cpu 1 [--threads 64] [--spin] [--hold 60s]
 *                   [--scope process|tree]
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <pace/pace.h>

#include "bench-util.h"
#include "macro.h"

typedef struct HolderReply {
        int err;
        uint64_t period_ns;
        uint64_t budget_ns;
        int cpu;
        char message[200];
} HolderReply;

static volatile sig_atomic_t stop;
static volatile uint64_t spin_sink;

static void on_signal(int sig) {
        stop = 1;
}

static void *blocked_thread(void *arg) {
        for (;;)
                pause();
        return NULL;
}

/* For --scope tree: one process of our own, blocked in pause() and dying
 * with us, so the tree the dispatcher follows really has a descendant. */
static int fork_descendant(void) {
        pid_t me = getpid(), kid = fork();

        if (kid < 0)
                return -errno;
        if (kid == 0) {
                (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (getppid() != me)
                        _exit(1);
                for (;;)
                        pause();
        }
        return 0;
}

/* The child: threads, reservation, report, then hold until killed. */
static _Noreturn void child_main(int fd, const pace_reserve_params *params, unsigned threads, bool spin) {
        HolderReply reply = { .err = 0 };
        pace *p = NULL;
        int r;

        (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() == 1)
                _exit(1);
        if (params->scope == PACE_SCOPE_TREE) {
                r = fork_descendant();
                if (r < 0) {
                        reply.err = r;
                        snprintf(reply.message, sizeof(reply.message), "fork: %s", strerror(-r));
                        goto report;
                }
        }
        for (unsigned i = 1; i < threads; i++) {
                pthread_t t;
                r = -pthread_create(&t, NULL, blocked_thread, NULL);
                if (r < 0) {
                        reply.err = r;
                        snprintf(reply.message, sizeof(reply.message), "pthread_create: %s", strerror(-r));
                        goto report;
                }
        }
        r = pace_connect(NULL, &p);
        if (r < 0) {
                reply.err = r;
                snprintf(reply.message, sizeof(reply.message), "connect: %s", pace_strerror(r));
                goto report;
        }
        pace_grant g;
        r = pace_reserve(p, params, &g);
        if (r < 0) {
                const char *m = pace_last_message();
                reply.err = r;
                snprintf(reply.message, sizeof(reply.message), "%s", m ? m : pace_strerror(r));
        } else {
                reply.period_ns = g.period_ns;
                reply.budget_ns = g.budget_ns;
                reply.cpu = g.cpu;
        }
        pace_close(p);
report:
        if (write(fd, &reply, sizeof(reply)) != (ssize_t) sizeof(reply))
                _exit(1);
        close(fd);
        if (reply.err < 0)
                _exit(1);
        for (;;) {
                if (spin)
                        for (int i = 0; i < 1000000; i++)
                                spin_sink += (uint64_t) i;
                else
                        pause();
        }
}

typedef struct Args {
        pace_reserve_params params;
        uint32_t count, threads;
        uint64_t hold_ns;
        bool spin;
} Args;

static void parse_argv(int argc, char **argv, Args *ret) {
        static const char usage[] = "Usage: overhead-holder --count N --period DUR --util-ppm PPM [--cpu N] [--threads N] "
                                    "[--spin] [--hold DUR] [--scope process|tree]\n";
        static const char *const scopes[] = { "process", "tree", NULL };
        Args a = {
                .params = { .period_ns = 10 * NSEC_PER_MSEC, .utilization_ppm = 10000, .cpu = -1 },
                .count = 1,
                .threads = 1,
                .hold_ns = 60 * NSEC_PER_SEC,
        };
        unsigned scope = 0;
        const BenchOption options[] = {
                BENCH_OPT_UINT32("count", &a.count, 1, 1024),
                BENCH_RESERVE_OPTIONS(&a.params),
                BENCH_OPT_UINT32("threads", &a.threads, 1, 1024),
                BENCH_OPT_FLAG("spin", &a.spin),
                BENCH_OPT_DURATION("hold", &a.hold_ns),
                BENCH_OPT_CHOICE("scope", &scope, scopes),
        };

        bench_parse_argv(argc, argv, usage, options, ELEMENTSOF(options));
        a.params.scope = scope == 0 ? PACE_SCOPE_PROCESS : PACE_SCOPE_TREE;
        *ret = a;
}

/* Forks holder i and waits for its answer, printing a refusal as it comes.
 * 0 with *ret_pid (to be killed later) whether or not it was granted:
 * ret_reply->err says which. */
static int spawn_holder(const Args *a, uint32_t i, pid_t *ret_pid, HolderReply *ret_reply) {
        HolderReply reply;
        ssize_t n;
        int fd;

        pid_t pid = bench_fork_pipe(true, &fd);
        if (pid < 0)
                return pid;
        if (pid == 0)
                child_main(fd, &a->params, a->threads, a->spin);
        do
                n = read(fd, &reply, sizeof(reply));
        while (n < 0 && errno == EINTR && !stop);
        close(fd);
        if (n != (ssize_t) sizeof(reply)) {
                printf("refused %" PRIu32 " child died\n", i);
                reply.err = -ECHILD;
        } else if (reply.err < 0)
                printf("refused %" PRIu32 " %s\n", i, reply.message);
        *ret_pid = pid;
        *ret_reply = reply;
        return 0;
}

static void end_holders(const pid_t *pids, uint32_t n, bool tree) {
        for (uint32_t i = 0; i < n; i++)
                kill(pids[i], SIGKILL);
        for (uint32_t i = 0; i < n; i++)
                while (waitpid(pids[i], NULL, 0) < 0 && errno == EINTR)
                        ;
        /* Tree scope: the children's own children came to us (subreaper)
         * and die of their PR_SET_PDEATHSIG; in strict mode only once the
         * dispatcher has thawed them, so give that a moment. */
        if (tree) {
                stop = 0;
                alarm(3);
                while (!stop && (waitpid(-1, NULL, 0) >= 0 || errno == EINTR))
                        ;
        }
}

static int run(const Args *a) {
        struct sigaction sa = { .sa_handler = on_signal };
        bool tree = a->params.scope == PACE_SCOPE_TREE;
        uint32_t granted = 0, started = 0;
        HolderReply first = { .err = 0 };
        int r = 0;

        if (tree)
                (void) prctl(PR_SET_CHILD_SUBREAPER, 1);
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGALRM, &sa, NULL);

        _cleanup_free_ pid_t *pids = calloc(a->count, sizeof(pid_t));
        if (!pids)
                return -ENOMEM;
        /* One child at a time: reservations are admitted in a fixed order.
         * One that cannot even be started ends the filling, not the run:
         * what was granted is held all the same. */
        for (uint32_t i = 0; i < a->count && !stop; i++) {
                HolderReply reply = { .err = 0 };
                r = spawn_holder(a, i, &pids[started], &reply);
                if (r < 0)
                        break;
                started++;
                if (reply.err == 0 && granted++ == 0)
                        first = reply;
        }
        printf("ready %" PRIu32 " %" PRIu32 " %" PRIu64 " %" PRIu64 " %d\n", a->count, granted, first.period_ns,
               first.budget_ns, first.cpu);
        fflush(stdout);

        alarm((unsigned) (a->hold_ns / NSEC_PER_SEC) + 1);
        while (!stop)
                pause();
        end_holders(pids, started, tree);
        return r;
}

int main(int argc, char **argv) {
        Args args;

        parse_argv(argc, argv, &args);
        return run(&args) < 0 ? 1 : 0;
}
