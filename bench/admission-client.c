/* SPDX-License-Identifier: MIT */
/* admission-client: the broker's request latency for bench/admission. Run as
 * root (which may reserve other processes and is exempt from the per-user
 * limits). It forks LIVE sleeping children and reserves each of them (so
 * the broker holds LIVE reservations), then times PAIRS reserve+release
 * round trips for one more child on one connection, one request at a time.
 * Prints, all times in ns:
 *   live LIVE fill_ns TOTAL pairs N p50 P50 p90 P90 p99 P99 max MAX elapsed_ns E
 * and with --samples FILE writes one pair's latency a line.
 *
 *   admission-client --live 100 --pairs 2000 --period 1200ms --util-ppm 800 --cpu 1 [--duration 5s]
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <pace/pace.h>

#include "bench-util.h"
#include "macro.h"
#include "parse-util.h"

static pid_t spawn_sleeper(void) {
        pid_t pid = fork();
        if (pid == 0) {
                (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (getppid() == 1)
                        _exit(1);
                for (;;)
                        pause();
        }
        return pid;
}

static pid_t *children;
static size_t n_children;

static void kill_children(void) {
        for (size_t i = 0; i < n_children; i++)
                kill(children[i], SIGKILL);
        for (size_t i = 0; i < n_children; i++)
                while (waitpid(children[i], NULL, 0) < 0 && errno == EINTR)
                        ;
        n_children = 0;
}

int main(int argc, char **argv) {
        static const struct option options[] = {
                { "live", required_argument, NULL, 'l' },
                { "pairs", required_argument, NULL, 'n' },
                { "period", required_argument, NULL, 'p' },
                { "util-ppm", required_argument, NULL, 'u' },
                { "cpu", required_argument, NULL, 'c' },
                { "duration", required_argument, NULL, 'd' },
                { "samples", required_argument, NULL, 's' },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        pace_reserve_params params = { .period_ns = 1200 * NSEC_PER_MSEC, .utilization_ppm = 800, .cpu = -1 };
        uint32_t live = 0, pairs = 1000;
        uint64_t duration_ns = 10 * NSEC_PER_SEC;
        const char *samples_path = NULL;
        int c, r;

        while ((c = getopt_long(argc, argv, "l:n:p:u:c:d:s:h", options, NULL)) >= 0)
                switch (c) {
                case 'l':
                        if (parse_uint32(optarg, &live) < 0 || live > 1023) {
                                fprintf(stderr, "admission-client: --live %s: expected 0..1023\n", optarg);
                                return 2;
                        }
                        break;
                case 'n':
                        if (parse_uint32(optarg, &pairs) < 0 || pairs == 0) {
                                fprintf(stderr, "admission-client: --pairs %s: expected a positive integer\n", optarg);
                                return 2;
                        }
                        break;
                case 'p':
                        if (parse_duration_ns(optarg, &params.period_ns) < 0) {
                                fprintf(stderr, "admission-client: --period %s: expected a duration\n", optarg);
                                return 2;
                        }
                        break;
                case 'u':
                        if (parse_uint32(optarg, &params.utilization_ppm) < 0) {
                                fprintf(stderr, "admission-client: --util-ppm %s: expected an integer\n", optarg);
                                return 2;
                        }
                        break;
                case 'c': {
                        uint32_t v;
                        if (parse_uint32(optarg, &v) < 0 || v > 1023) {
                                fprintf(stderr, "admission-client: --cpu %s: expected a CPU number\n", optarg);
                                return 2;
                        }
                        params.cpu = (int) v;
                        break;
                }
                case 'd':
                        if (parse_duration_ns(optarg, &duration_ns) < 0) {
                                fprintf(stderr, "admission-client: --duration %s: expected a duration\n", optarg);
                                return 2;
                        }
                        break;
                case 's':
                        samples_path = optarg;
                        break;
                case 'h':
                        printf("Usage: admission-client [--live N] [--pairs N] [--period DUR] [--util-ppm PPM] "
                               "[--cpu N] [--duration DUR] [--samples FILE]\n");
                        return 0;
                default:
                        return 2;
                }

        children = calloc(live + 1, sizeof(pid_t));
        _cleanup_free_ uint64_t *lat = calloc(pairs, sizeof(uint64_t));
        if (!children || !lat)
                return 1;
        pace *p = NULL;
        r = pace_connect(NULL, &p);
        if (r < 0) {
                fprintf(stderr, "admission-client: connect: %s\n", pace_strerror(r));
                return 1;
        }

        int ret = 1;
        uint64_t fill_start = monotonic_ns();
        for (uint32_t i = 0; i < live + 1; i++) {
                pid_t pid = spawn_sleeper();
                if (pid < 0) {
                        fprintf(stderr, "admission-client: fork: %m\n");
                        goto finish;
                }
                children[n_children++] = pid;
                if (i == live)
                        break; /* the spare: reserved and released below */
                pace_grant g;
                pace_reserve_params q = params;
                q.pid = pid;
                r = pace_reserve(p, &q, &g);
                if (r < 0) {
                        const char *m = pace_last_message();
                        fprintf(stderr, "admission-client: reservation %" PRIu32 " of %" PRIu32 " refused: %s\n", i + 1,
                                live, m ? m : pace_strerror(r));
                        goto finish;
                }
        }
        uint64_t fill_ns = monotonic_ns() - fill_start;

        pace_reserve_params q = params;
        q.pid = children[live];
        size_t n = 0;
        uint64_t start = monotonic_ns();
        for (; n < pairs; n++) {
                uint64_t t0 = monotonic_ns();
                if (t0 - start > duration_ns)
                        break;
                pace_grant g;
                r = pace_reserve(p, &q, &g);
                if (r < 0) {
                        const char *m = pace_last_message();
                        fprintf(stderr, "admission-client: reserve: %s\n", m ? m : pace_strerror(r));
                        goto finish;
                }
                r = pace_release(p, g.id);
                if (r < 0) {
                        fprintf(stderr, "admission-client: release: %s\n", pace_strerror(r));
                        goto finish;
                }
                lat[n] = monotonic_ns() - t0;
        }
        uint64_t elapsed = monotonic_ns() - start;

        if (samples_path) {
                FILE *f = fopen(samples_path, "we");
                if (!f) {
                        fprintf(stderr, "admission-client: cannot write %s: %m\n", samples_path);
                        goto finish;
                }
                for (size_t i = 0; i < n; i++)
                        fprintf(f, "%" PRIu64 "\n", lat[i]);
                fclose(f);
        }
        qsort(lat, n, sizeof(uint64_t), cmp_u64);
        printf("live %" PRIu32 " fill_ns %" PRIu64 " pairs %zu p50 %" PRIu64 " p90 %" PRIu64 " p99 %" PRIu64
               " max %" PRIu64 " elapsed_ns %" PRIu64 "\n",
               live, fill_ns, n, bench_percentile(lat, n, 0.5), bench_percentile(lat, n, 0.9), bench_percentile(lat, n, 0.99),
               n ? lat[n - 1] : 0, elapsed);
        ret = 0;
finish:
        /* The reservations end with their processes. */
        kill_children();
        pace_close(p);
        free(children);
        return ret;
}
