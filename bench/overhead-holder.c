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
#include <fcntl.h>
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

#include "macro.h"
#include "parse-util.h"

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

/* The child: threads, reservation, report, then hold until killed. */
static _Noreturn void child_main(int fd, const pace_reserve_params *params, unsigned threads, bool spin) {
        HolderReply reply = { .err = 0 };
        pace *p = NULL;
        int r;

        (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() == 1)
                _exit(1);
        if (params->scope == PACE_SCOPE_TREE) {
                pid_t me = getpid(), kid = fork();
                if (kid == 0) {
                        (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
                        if (getppid() != me)
                                _exit(1);
                        for (;;)
                                pause();
                }
                if (kid < 0) {
                        reply.err = -errno;
                        snprintf(reply.message, sizeof(reply.message), "fork: %s", strerror(errno));
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

int main(int argc, char **argv) {
        static const struct option options[] = {
                { "count", required_argument, NULL, 'n' },
                { "period", required_argument, NULL, 'p' },
                { "util-ppm", required_argument, NULL, 'u' },
                { "cpu", required_argument, NULL, 'c' },
                { "threads", required_argument, NULL, 't' },
                { "spin", no_argument, NULL, 's' },
                { "hold", required_argument, NULL, 'H' },
                { "scope", required_argument, NULL, 'S' },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        pace_reserve_params params = { .period_ns = 10 * NSEC_PER_MSEC, .utilization_ppm = 10000, .cpu = -1 };
        uint32_t count = 1, threads = 1;
        uint64_t hold_ns = 60 * NSEC_PER_SEC;
        bool spin = false;
        int c;

        while ((c = getopt_long(argc, argv, "n:p:u:c:t:sH:S:h", options, NULL)) >= 0)
                switch (c) {
                case 'n':
                        if (parse_uint32(optarg, &count) < 0 || count == 0 || count > 1024) {
                                fprintf(stderr, "overhead-holder: --count %s: expected 1..1024\n", optarg);
                                return 2;
                        }
                        break;
                case 'p':
                        if (parse_duration_ns(optarg, &params.period_ns) < 0) {
                                fprintf(stderr, "overhead-holder: --period %s: expected a duration\n", optarg);
                                return 2;
                        }
                        break;
                case 'u':
                        if (parse_uint32(optarg, &params.utilization_ppm) < 0) {
                                fprintf(stderr, "overhead-holder: --util-ppm %s: expected an integer\n", optarg);
                                return 2;
                        }
                        break;
                case 'c': {
                        uint32_t v;
                        if (parse_uint32(optarg, &v) < 0 || v > 1023) {
                                fprintf(stderr, "overhead-holder: --cpu %s: expected a CPU number\n", optarg);
                                return 2;
                        }
                        params.cpu = (int) v;
                        break;
                }
                case 't':
                        if (parse_uint32(optarg, &threads) < 0 || threads == 0 || threads > 1024) {
                                fprintf(stderr, "overhead-holder: --threads %s: expected 1..1024\n", optarg);
                                return 2;
                        }
                        break;
                case 's':
                        spin = true;
                        break;
                case 'H':
                        if (parse_duration_ns(optarg, &hold_ns) < 0) {
                                fprintf(stderr, "overhead-holder: --hold %s: expected a duration\n", optarg);
                                return 2;
                        }
                        break;
                case 'S':
                        if (strcmp(optarg, "process") == 0)
                                params.scope = PACE_SCOPE_PROCESS;
                        else if (strcmp(optarg, "tree") == 0)
                                params.scope = PACE_SCOPE_TREE;
                        else {
                                fprintf(stderr, "overhead-holder: --scope %s: expected process or tree\n", optarg);
                                return 2;
                        }
                        break;
                case 'h':
                        printf("Usage: overhead-holder --count N --period DUR --util-ppm PPM [--cpu N] [--threads N] "
                               "[--spin] [--hold DUR] [--scope process|tree]\n");
                        return 0;
                default:
                        return 2;
                }

        struct sigaction sa = { .sa_handler = on_signal };
        if (params.scope == PACE_SCOPE_TREE)
                (void) prctl(PR_SET_CHILD_SUBREAPER, 1);
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGALRM, &sa, NULL);

        _cleanup_free_ pid_t *pids = calloc(count, sizeof(pid_t));
        if (!pids)
                return 1;
        uint32_t granted = 0, started = 0;
        HolderReply first = { .err = 0 };
        int ret = 0;

        /* One child at a time: reservations are admitted in a fixed order. */
        for (uint32_t i = 0; i < count && !stop; i++) {
                int fds[2];
                if (pipe2(fds, O_CLOEXEC) < 0) {
                        ret = 1;
                        break;
                }
                pid_t pid = fork();
                if (pid < 0) {
                        close(fds[0]);
                        close(fds[1]);
                        ret = 1;
                        break;
                }
                if (pid == 0) {
                        close(fds[0]);
                        child_main(fds[1], &params, threads, spin);
                }
                close(fds[1]);
                pids[started++] = pid;
                HolderReply reply;
                ssize_t n;
                do
                        n = read(fds[0], &reply, sizeof(reply));
                while (n < 0 && errno == EINTR && !stop);
                close(fds[0]);
                if (n != (ssize_t) sizeof(reply)) {
                        printf("refused %" PRIu32 " child died\n", i);
                        continue;
                }
                if (reply.err < 0) {
                        printf("refused %" PRIu32 " %s\n", i, reply.message);
                        continue;
                }
                if (granted++ == 0)
                        first = reply;
        }
        printf("ready %" PRIu32 " %" PRIu32 " %" PRIu64 " %" PRIu64 " %d\n", count, granted, first.period_ns,
               first.budget_ns, first.cpu);
        fflush(stdout);

        alarm((unsigned) (hold_ns / NSEC_PER_SEC) + 1);
        while (!stop)
                pause();

        for (uint32_t i = 0; i < started; i++)
                kill(pids[i], SIGKILL);
        for (uint32_t i = 0; i < started; i++)
                while (waitpid(pids[i], NULL, 0) < 0 && errno == EINTR)
                        ;
        /* Tree scope: the children's own children came to us (subreaper)
         * and die of their PR_SET_PDEATHSIG; in strict mode only once the
         * dispatcher has thawed them, so give that a moment. */
        if (params.scope == PACE_SCOPE_TREE) {
                stop = 0;
                alarm(3);
                while (!stop && (waitpid(-1, NULL, 0) >= 0 || errno == EINTR))
                        ;
        }
        return ret;
}
