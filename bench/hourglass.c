/* SPDX-License-Identifier: MIT */
/* hourglass: a CPU-bound process that records when it runs (paper 000's
 * "hourglass"). It spins reading CLOCK_MONOTONIC; any jump between two
 * readings longer than --gap is time it did not run. After --warmup it
 * measures for --duration and prints one line:
 *
 *   label=NAME share=S cpu_share=S longest_gap_us=G gaps_over_1ms=N
 *   gap_p99_us=G runs=N win_ms=W win_min_ms=A win_max_ms=B
 *
 * share: the time it observed itself running over the measured time;
 * cpu_share: its CPU clock over the same time (what the kernel charged);
 * longest_gap_us: its longest starvation; win_min/win_max: the least and
 * most running time in any window of --window (sliding, every start), e.g.
 * the supply of a reservation in every window of its period.
 *
 * --runs FILE also writes when it ran: a first line "T0 T1" (the measured
 * time), then one line "START END" per run, in CLOCK_MONOTONIC ns, so the
 * runs of several hourglasses on one CPU can be merged (bench/response:
 * the longest time none of them ran is the CPU's non-real-time gap).
 *
 * The same program is the reserved client (under pace-run, or with
 * --deadline RUNTIME/PERIOD: SCHED_DEADLINE with deadline = period), the
 * SCHED_FIFO hog (--fifo PRIO) and the competing SCHED_OTHER process. It
 * always ends by itself: --duration, and an alarm shortly after as a bound.
 *
 *   hourglass [--cpu N] [--duration 4s] [--warmup 1s] [--window 50ms] [--gap 10us]
 *             [--fifo PRIO | --deadline 30ms/50ms] [--label NAME] [--runs FILE]
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "bench-util.h"
#include "macro.h"
#include "parse-util.h"

#ifndef SCHED_DEADLINE
#define SCHED_DEADLINE 6
#endif

/* The kernel's struct sched_attr, under a name of our own (glibc 2.36 has
 * no sched_setattr). */
typedef struct HgSchedAttr {
        uint32_t size;
        uint32_t sched_policy;
        uint64_t sched_flags;
        int32_t sched_nice;
        uint32_t sched_priority;
        uint64_t sched_runtime;
        uint64_t sched_deadline;
        uint64_t sched_period;
} HgSchedAttr;

typedef struct Run {
        uint64_t start, end;
} Run;

/* Running time in [runs[0].start, x], with prefix[i] = running time of
 * runs before i. */
static uint64_t supply(const Run *runs, const uint64_t *prefix, size_t n, uint64_t x) {
        size_t lo = 0, hi = n;

        /* The last run with start <= x. */
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (runs[mid].start <= x)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        if (lo == 0)
                return 0;
        const Run *r = &runs[lo - 1];
        return prefix[lo - 1] + MIN(x, r->end) - r->start;
}

static void window_extremes(const Run *runs, size_t n, uint64_t t0, uint64_t t1, uint64_t w, uint64_t *ret_min,
                            uint64_t *ret_max) {
        _cleanup_free_ uint64_t *prefix = calloc(n + 1, sizeof(uint64_t));
        uint64_t lo = UINT64_MAX, hi = 0;

        *ret_min = *ret_max = 0;
        if (!prefix || n == 0 || t1 < t0 + w)
                return;
        for (size_t i = 0; i < n; i++)
                prefix[i + 1] = prefix[i] + runs[i].end - runs[i].start;
        /* f(t) = S(t + w) - S(t) is piecewise linear; its extremes lie where
         * t or t + w meets a run's start or end, or at the ends of [t0, t1 - w]. */
        for (size_t i = 0; i <= n; i++) {
                uint64_t cand[4];
                size_t k = 0;
                if (i == n) {
                        cand[k++] = t0;
                        cand[k++] = t1 - w;
                } else {
                        cand[k++] = runs[i].start;
                        cand[k++] = runs[i].end;
                        if (runs[i].start >= w)
                                cand[k++] = runs[i].start - w;
                        if (runs[i].end >= w)
                                cand[k++] = runs[i].end - w;
                }
                for (size_t j = 0; j < k; j++) {
                        uint64_t t = cand[j];
                        if (t < t0 || t > t1 - w)
                                continue;
                        uint64_t v = supply(runs, prefix, n, t + w) - supply(runs, prefix, n, t);
                        lo = MIN(lo, v);
                        hi = MAX(hi, v);
                }
        }
        *ret_min = lo == UINT64_MAX ? 0 : lo;
        *ret_max = hi;
}

static int parse_deadline(const char *s, uint64_t *ret_runtime, uint64_t *ret_period) {
        _cleanup_free_ char *copy = strdup(s);
        char *slash;

        if (!copy)
                return -ENOMEM;
        slash = strchr(copy, '/');
        if (!slash)
                return -EINVAL;
        *slash = '\0';
        if (parse_duration_ns(copy, ret_runtime) < 0 || parse_duration_ns(slash + 1, ret_period) < 0)
                return -EINVAL;
        return *ret_runtime <= *ret_period ? 0 : -EINVAL;
}

int main(int argc, char **argv) {
        static const struct option options[] = {
                { "cpu", required_argument, NULL, 'c' },
                { "duration", required_argument, NULL, 'd' },
                { "warmup", required_argument, NULL, 'w' },
                { "window", required_argument, NULL, 'W' },
                { "gap", required_argument, NULL, 'g' },
                { "fifo", required_argument, NULL, 'f' },
                { "deadline", required_argument, NULL, 'D' },
                { "label", required_argument, NULL, 'l' },
                { "runs", required_argument, NULL, 'r' },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        uint64_t duration_ns = 4 * NSEC_PER_SEC, warmup_ns = NSEC_PER_SEC, window_ns = 0, gap_ns = 10 * NSEC_PER_USEC;
        uint64_t dl_runtime = 0, dl_period = 0;
        uint32_t cpu = UINT32_MAX, fifo = 0;
        const char *label = "hourglass", *runs_path = NULL;
        int c;

        while ((c = getopt_long(argc, argv, "c:d:w:W:g:f:D:l:r:h", options, NULL)) >= 0)
                switch (c) {
                case 'c':
                        if (parse_uint32(optarg, &cpu) < 0 || cpu >= CPU_SETSIZE) {
                                fprintf(stderr, "hourglass: bad CPU number '%s'\n", optarg);
                                return 2;
                        }
                        break;
                case 'd':
                case 'w':
                case 'W':
                case 'g': {
                        uint64_t *v = c == 'd' ? &duration_ns : c == 'w' ? &warmup_ns : c == 'W' ? &window_ns : &gap_ns;
                        if (parse_duration_ns(optarg, v) < 0) {
                                fprintf(stderr, "hourglass: bad duration '%s'\n", optarg);
                                return 2;
                        }
                        break;
                }
                case 'f':
                        if (parse_uint32(optarg, &fifo) < 0 || fifo < 1 || fifo > 97) {
                                fprintf(stderr, "hourglass: --fifo %s: expected 1..97\n", optarg);
                                return 2;
                        }
                        break;
                case 'D':
                        if (parse_deadline(optarg, &dl_runtime, &dl_period) < 0) {
                                fprintf(stderr, "hourglass: --deadline %s: expected RUNTIME/PERIOD, e.g. 30ms/50ms\n",
                                        optarg);
                                return 2;
                        }
                        break;
                case 'l':
                        label = optarg;
                        break;
                case 'r':
                        runs_path = optarg;
                        break;
                case 'h':
                        printf("Usage: hourglass [--cpu N] [--duration D] [--warmup D] [--window D] [--gap D]\n"
                               "                 [--fifo PRIO | --deadline RUNTIME/PERIOD] [--label NAME]\n"
                               "                 [--runs FILE]\n");
                        return 0;
                default:
                        return 2;
                }

        /* The bound: whatever happens, a real-time spinner ends. */
        alarm((unsigned) ((duration_ns + warmup_ns) / NSEC_PER_SEC) + 5);

        if (cpu != UINT32_MAX) {
                cpu_set_t set;
                CPU_ZERO(&set);
                CPU_SET(cpu, &set);
                if (sched_setaffinity(0, sizeof(set), &set) < 0) {
                        fprintf(stderr, "hourglass: cannot pin to CPU %" PRIu32 ": %m\n", cpu);
                        return 1;
                }
        }
        if (fifo > 0) {
                struct sched_param sp = { .sched_priority = (int) fifo };
                if (sched_setscheduler(0, SCHED_FIFO, &sp) < 0) {
                        fprintf(stderr, "hourglass: SCHED_FIFO %" PRIu32 ": %m\n", fifo);
                        return 1;
                }
        }
        if (dl_period > 0) {
                HgSchedAttr a = {
                        .size = sizeof(a),
                        .sched_policy = SCHED_DEADLINE,
                        .sched_runtime = dl_runtime,
                        .sched_deadline = dl_period,
                        .sched_period = dl_period,
                };
                if (syscall(SYS_sched_setattr, 0, &a, 0) < 0) {
                        fprintf(stderr, "hourglass: SCHED_DEADLINE %" PRIu64 "/%" PRIu64 " ns: %m%s\n", dl_runtime,
                                dl_period,
                                errno == EPERM && cpu != UINT32_MAX
                                        ? " (a pinned deadline task needs its own root domain, or admission "
                                          "control off: sched_rt_runtime_us = -1)"
                                        : "");
                        return 1;
                }
        }

        size_t cap = (size_t) (duration_ns / NSEC_PER_MSEC) * 20 + 1024, n = 0, overflow = 0;
        _cleanup_free_ Run *runs = calloc(cap, sizeof(Run));
        _cleanup_free_ uint64_t *gaps = calloc(cap, sizeof(uint64_t));
        if (!runs || !gaps)
                return 1;

        uint64_t t0 = clock_ns(CLOCK_MONOTONIC) + warmup_ns, t1 = t0 + duration_ns, prev, t;
        while ((prev = clock_ns(CLOCK_MONOTONIC)) < t0)
                ;
        uint64_t cpu0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        runs[0].start = prev;
        for (;;) {
                t = clock_ns(CLOCK_MONOTONIC);
                if (t - prev > gap_ns) {
                        if (n + 1 < cap) {
                                runs[n].end = prev;
                                gaps[n] = t - prev;
                                runs[++n].start = t;
                        } else
                                overflow++;
                }
                prev = t;
                if (t >= t1)
                        break;
        }
        uint64_t cpu_used = clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
        runs[n].end = t;
        size_t n_runs = n + 1, n_gaps = n;
        /* The measured time is [t0, t1] exactly, wherever its own runs fall:
         * one that was starved across t0 or t1 must not start or end its
         * window where it happened to run (that would count a whole burst
         * too many when its gaps are long). */
        for (size_t i = 0; i < n_runs; i++) {
                runs[i].start = MIN(runs[i].start, t1);
                runs[i].end = MIN(runs[i].end, t1);
        }

        uint64_t ran = 0, over_1ms = 0, longest = 0;
        for (size_t i = 0; i < n_runs; i++)
                ran += runs[i].end - runs[i].start;
        for (size_t i = 0; i < n_gaps; i++) {
                longest = MAX(longest, gaps[i]);
                over_1ms += gaps[i] > NSEC_PER_MSEC;
        }
        qsort(gaps, n_gaps, sizeof(uint64_t), cmp_u64);
        uint64_t p99 = n_gaps ? gaps[MIN((size_t) (0.99 * (double) (n_gaps - 1) + 0.5), n_gaps - 1)] : 0;

        if (runs_path) {
                FILE *f = fopen(runs_path, "we");
                if (!f) {
                        fprintf(stderr, "hourglass: cannot write %s: %m\n", runs_path);
                        return 1;
                }
                fprintf(f, "%" PRIu64 " %" PRIu64 "\n", t0, t1);
                for (size_t i = 0; i < n_runs; i++)
                        if (runs[i].end > runs[i].start)
                                fprintf(f, "%" PRIu64 " %" PRIu64 "\n", runs[i].start, runs[i].end);
                if (fclose(f) != 0) {
                        fprintf(stderr, "hourglass: cannot write %s: %m\n", runs_path);
                        return 1;
                }
        }

        uint64_t wmin = 0, wmax = 0;
        if (window_ns > 0)
                window_extremes(runs, n_runs, t0, t1, window_ns, &wmin, &wmax);

        double span = (double) (t1 - t0);
        printf("label=%s share=%.5f cpu_share=%.5f longest_gap_us=%.1f gaps_over_1ms=%" PRIu64 " gap_p99_us=%.1f"
               " runs=%zu win_ms=%.3f win_min_ms=%.3f win_max_ms=%.3f overflow=%zu\n",
               label, (double) ran / span, (double) cpu_used / span, (double) longest / 1e3, over_1ms,
               (double) p99 / 1e3, n_runs, (double) window_ns / 1e6, (double) wmin / 1e6, (double) wmax / 1e6,
               overflow);
        return 0;
}
