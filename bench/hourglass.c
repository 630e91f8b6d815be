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
#include "sched-attr.h"


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

typedef struct Args {
        uint64_t duration_ns, warmup_ns, window_ns, gap_ns;
        uint64_t dl_runtime, dl_period; /* dl_period 0: no SCHED_DEADLINE */
        int cpu;                        /* -1: not pinned */
        uint32_t fifo;                  /* 0: no SCHED_FIFO */
        const char *label, *runs_path;
} Args;

static void read_deadline(const char *option, const char *value, void *userdata) {
        Args *a = userdata;

        if (parse_deadline(value, &a->dl_runtime, &a->dl_period) < 0)
                bench_arg_refuse(option, value, "RUNTIME/PERIOD, e.g. 30ms/50ms");
}

static void parse_argv(int argc, char **argv, Args *ret) {
        static const char usage[] = "Usage: hourglass [--cpu N] [--duration D] [--warmup D] [--window D] [--gap D]\n"
                                    "                 [--fifo PRIO | --deadline RUNTIME/PERIOD] [--label NAME]\n"
                                    "                 [--runs FILE]\n";
        Args a = {
                .duration_ns = 4 * NSEC_PER_SEC,
                .warmup_ns = NSEC_PER_SEC,
                .gap_ns = 10 * NSEC_PER_USEC,
                .cpu = -1,
                .label = "hourglass",
        };
        const BenchOption options[] = {
                BENCH_OPT_CPU("cpu", &a.cpu),
                BENCH_OPT_DURATION("duration", &a.duration_ns),
                BENCH_OPT_DURATION("warmup", &a.warmup_ns),
                BENCH_OPT_DURATION("window", &a.window_ns),
                BENCH_OPT_DURATION("gap", &a.gap_ns),
                BENCH_OPT_UINT32("fifo", &a.fifo, 1, 97),
                BENCH_OPT_CUSTOM("deadline", read_deadline, &a),
                BENCH_OPT_STRING("label", &a.label),
                BENCH_OPT_STRING("runs", &a.runs_path),
        };

        bench_parse_argv(argc, argv, usage, options, ELEMENTSOF(options));
        *ret = a;
}

/* The CPU and the policy it was asked to run at. */
static int set_scheduling(const Args *a) {
        if (a->cpu >= 0) {
                cpu_set_t set;
                CPU_ZERO(&set);
                CPU_SET(a->cpu, &set);
                if (sched_setaffinity(0, sizeof(set), &set) < 0) {
                        fprintf(stderr, "hourglass: cannot pin to CPU %d: %m\n", a->cpu);
                        return -errno;
                }
        }
        if (a->fifo > 0) {
                struct sched_param sp = { .sched_priority = (int) a->fifo };
                if (sched_setscheduler(0, SCHED_FIFO, &sp) < 0) {
                        fprintf(stderr, "hourglass: SCHED_FIFO %" PRIu32 ": %m\n", a->fifo);
                        return -errno;
                }
        }
        if (a->dl_period > 0) {
                PaceSchedAttr attr = {
                        .size = sizeof(attr),
                        .sched_policy = SCHED_DEADLINE,
                        .sched_runtime = a->dl_runtime,
                        .sched_deadline = a->dl_period,
                        .sched_period = a->dl_period,
                };
                if (syscall(SYS_sched_setattr, 0, &attr, 0) < 0) {
                        fprintf(stderr, "hourglass: SCHED_DEADLINE %" PRIu64 "/%" PRIu64 " ns: %m%s\n", a->dl_runtime,
                                a->dl_period,
                                errno == EPERM && a->cpu >= 0
                                        ? " (a pinned deadline task needs its own root domain, or admission "
                                          "control off: sched_rt_runtime_us = -1)"
                                        : "");
                        return -errno;
                }
        }
        return 0;
}

/* When it ran in the measured time [t0, t1]: runs[0..n_runs), and the
 * gaps between them, gaps[0..n_runs - 1). */
typedef struct Recording {
        uint64_t t0, t1, cpu_used;
        Run *runs;
        uint64_t *gaps;
        size_t cap, n_runs, overflow;
} Recording;

static void record(uint64_t warmup_ns, uint64_t duration_ns, uint64_t gap_ns, Recording *rec) {
        Run *runs = rec->runs;
        uint64_t *gaps = rec->gaps;
        size_t cap = rec->cap, n = 0, overflow = 0;
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
        rec->cpu_used = clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
        runs[n].end = t;
        /* The measured time is [t0, t1] exactly, wherever its own runs fall:
         * one that was starved across t0 or t1 must not start or end its
         * window where it happened to run (that would count a whole burst
         * too many when its gaps are long). */
        for (size_t i = 0; i <= n; i++) {
                runs[i].start = MIN(runs[i].start, t1);
                runs[i].end = MIN(runs[i].end, t1);
        }
        rec->t0 = t0;
        rec->t1 = t1;
        rec->n_runs = n + 1;
        rec->overflow = overflow;
}

static int write_runs(const char *path, const Recording *rec) {
        FILE *f = fopen(path, "we");

        if (!f) {
                fprintf(stderr, "hourglass: cannot write %s: %m\n", path);
                return -errno;
        }
        fprintf(f, "%" PRIu64 " %" PRIu64 "\n", rec->t0, rec->t1);
        for (size_t i = 0; i < rec->n_runs; i++)
                if (rec->runs[i].end > rec->runs[i].start)
                        fprintf(f, "%" PRIu64 " %" PRIu64 "\n", rec->runs[i].start, rec->runs[i].end);
        if (fclose(f) != 0) {
                fprintf(stderr, "hourglass: cannot write %s: %m\n", path);
                return -errno;
        }
        return 0;
}

/* The summary line; sorts the gaps. */
static void print_summary(const Args *a, Recording *rec) {
        size_t n_runs = rec->n_runs, n_gaps = n_runs - 1;
        uint64_t *gaps = rec->gaps, ran = 0, over_1ms = 0, longest = 0, wmin = 0, wmax = 0;

        for (size_t i = 0; i < n_runs; i++)
                ran += rec->runs[i].end - rec->runs[i].start;
        for (size_t i = 0; i < n_gaps; i++) {
                longest = MAX(longest, gaps[i]);
                over_1ms += gaps[i] > NSEC_PER_MSEC;
        }
        qsort(gaps, n_gaps, sizeof(uint64_t), cmp_u64);
        uint64_t p99 = n_gaps ? gaps[MIN((size_t) (0.99 * (double) (n_gaps - 1) + 0.5), n_gaps - 1)] : 0;
        if (a->window_ns > 0)
                window_extremes(rec->runs, n_runs, rec->t0, rec->t1, a->window_ns, &wmin, &wmax);

        double span = (double) (rec->t1 - rec->t0);
        printf("label=%s share=%.5f cpu_share=%.5f longest_gap_us=%.1f gaps_over_1ms=%" PRIu64 " gap_p99_us=%.1f"
               " runs=%zu win_ms=%.3f win_min_ms=%.3f win_max_ms=%.3f overflow=%zu\n",
               a->label, (double) ran / span, (double) rec->cpu_used / span, (double) longest / 1e3, over_1ms,
               (double) p99 / 1e3, n_runs, (double) a->window_ns / 1e6, (double) wmin / 1e6, (double) wmax / 1e6,
               rec->overflow);
}

static int run(const Args *a) {
        int r;

        /* The bound: whatever happens, a real-time spinner ends. */
        alarm((unsigned) ((a->duration_ns + a->warmup_ns) / NSEC_PER_SEC) + 5);

        r = set_scheduling(a);
        if (r < 0)
                return r;

        size_t cap = (size_t) (a->duration_ns / NSEC_PER_MSEC) * 20 + 1024;
        _cleanup_free_ Run *runs = calloc(cap, sizeof(Run));
        _cleanup_free_ uint64_t *gaps = calloc(cap, sizeof(uint64_t));
        if (!runs || !gaps)
                return -ENOMEM;
        Recording rec = { .runs = runs, .gaps = gaps, .cap = cap };
        record(a->warmup_ns, a->duration_ns, a->gap_ns, &rec);

        if (a->runs_path && (r = write_runs(a->runs_path, &rec)) < 0)
                return r;
        print_summary(a, &rec);
        return 0;
}

int main(int argc, char **argv) {
        Args args;

        parse_argv(argc, argv, &args);
        return run(&args) < 0 ? 1 : 0;
}
