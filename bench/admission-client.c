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

static void kill_children(const pid_t *children, size_t n) {
        for (size_t i = 0; i < n; i++)
                kill(children[i], SIGKILL);
        for (size_t i = 0; i < n; i++)
                while (waitpid(children[i], NULL, 0) < 0 && errno == EINTR)
                        ;
}

typedef struct Args {
        pace_reserve_params params;
        uint32_t live, pairs;
        uint64_t duration_ns;
        const char *samples_path;
} Args;

static void parse_argv(int argc, char **argv, Args *ret) {
        static const char usage[] = "Usage: admission-client [--live N] [--pairs N] [--period DUR] [--util-ppm PPM] "
                                    "[--cpu N] [--duration DUR] [--samples FILE]\n";
        Args a = {
                .params = { .period_ns = 1200 * NSEC_PER_MSEC, .utilization_ppm = 800, .cpu = -1 },
                .pairs = 1000,
                .duration_ns = 10 * NSEC_PER_SEC,
        };
        const BenchOption options[] = {
                BENCH_OPT_UINT32("live", &a.live, 0, 1023),
                BENCH_OPT_UINT32("pairs", &a.pairs, 1, UINT32_MAX),
                BENCH_RESERVE_OPTIONS(&a.params),
                BENCH_OPT_DURATION("duration", &a.duration_ns),
                BENCH_OPT_STRING("samples", &a.samples_path),
        };

        bench_parse_argv(argc, argv, usage, options, ELEMENTSOF(options));
        *ret = a;
}

/* live sleeping children, each reserved, and one more, the spare, left
 * for the timed pairs; *n_children counts those forked, also on failure. */
static int fill(pace *p, const pace_reserve_params *params, uint32_t live, pid_t *children, size_t *n_children) {
        for (uint32_t i = 0; i < live + 1; i++) {
                pid_t pid = spawn_sleeper();
                if (pid < 0) {
                        fprintf(stderr, "admission-client: fork: %m\n");
                        return -errno;
                }
                children[(*n_children)++] = pid;
                if (i == live)
                        break; /* the spare: reserved and released by time_pairs() */
                pace_grant g;
                pace_reserve_params q = *params;
                q.pid = pid;
                int r = pace_reserve(p, &q, &g);
                if (r < 0) {
                        const char *m = pace_last_message();
                        fprintf(stderr, "admission-client: reservation %" PRIu32 " of %" PRIu32 " refused: %s\n", i + 1,
                                live, m ? m : pace_strerror(r));
                        return r;
                }
        }
        return 0;
}

/* Up to pairs reserve+release round trips for q, for at most duration_ns;
 * their latencies in lat, their number in *ret_n. */
static int time_pairs(pace *p, const pace_reserve_params *q, uint32_t pairs, uint64_t duration_ns, uint64_t *lat,
                      size_t *ret_n) {
        uint64_t start = monotonic_ns();
        size_t n = 0;
        int r;

        for (; n < pairs; n++) {
                uint64_t t0 = monotonic_ns();
                if (t0 - start > duration_ns)
                        break;
                pace_grant g;
                r = pace_reserve(p, q, &g);
                if (r < 0) {
                        const char *m = pace_last_message();
                        fprintf(stderr, "admission-client: reserve: %s\n", m ? m : pace_strerror(r));
                        return r;
                }
                r = pace_release(p, g.id);
                if (r < 0) {
                        fprintf(stderr, "admission-client: release: %s\n", pace_strerror(r));
                        return r;
                }
                lat[n] = monotonic_ns() - t0;
        }
        *ret_n = n;
        return 0;
}

static int measure(pace *p, const Args *a, pid_t *children, size_t *n_children, uint64_t *lat) {
        size_t n = 0;
        int r;

        uint64_t fill_start = monotonic_ns();
        r = fill(p, &a->params, a->live, children, n_children);
        if (r < 0)
                return r;
        uint64_t fill_ns = monotonic_ns() - fill_start;

        pace_reserve_params q = a->params;
        q.pid = children[a->live];
        uint64_t start = monotonic_ns();
        r = time_pairs(p, &q, a->pairs, a->duration_ns, lat, &n);
        if (r < 0)
                return r;
        uint64_t elapsed = monotonic_ns() - start;

        if (a->samples_path && (r = bench_write_samples(a->samples_path, lat, n)) < 0)
                return r;
        qsort(lat, n, sizeof(uint64_t), cmp_u64);
        printf("live %" PRIu32 " fill_ns %" PRIu64 " pairs %zu p50 %" PRIu64 " p90 %" PRIu64 " p99 %" PRIu64
               " max %" PRIu64 " elapsed_ns %" PRIu64 "\n",
               a->live, fill_ns, n, bench_percentile(lat, n, 0.5), bench_percentile(lat, n, 0.9),
               bench_percentile(lat, n, 0.99), n ? lat[n - 1] : 0, elapsed);
        return 0;
}

static int run(const Args *a) {
        _cleanup_free_ uint64_t *lat = calloc(a->pairs, sizeof(uint64_t));
        _cleanup_free_ pid_t *children = calloc(a->live + 1, sizeof(pid_t));
        size_t n_children = 0;
        pace *p = NULL;
        int r;

        if (!children || !lat)
                return -ENOMEM;
        r = pace_connect(NULL, &p);
        if (r < 0) {
                fprintf(stderr, "admission-client: connect: %s\n", pace_strerror(r));
                return r;
        }
        r = measure(p, a, children, &n_children, lat);
        /* The reservations end with their processes. */
        kill_children(children, n_children);
        pace_close(p);
        return r;
}

int main(int argc, char **argv) {
        Args args;

        parse_argv(argc, argv, &args);
        return run(&args) < 0 ? 1 : 0;
}
