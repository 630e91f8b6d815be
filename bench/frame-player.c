/* SPDX-License-Identifier: MIT */
/* frame-player: the paper's periodic client, in small. Every frame is
 * released at a fixed rate and needs a fixed amount of CPU time (measured on
 * the thread's own CPU clock, so no calibration loop can drift with the
 * machine's speed). It reports, per run: frames, deadline misses (a frame
 * finished after its successor's release), response-time percentiles and
 * the jitter of completion intervals.
 *
 *   frame-player --fps 10 --work 25ms --duration 10s [--csv FILE] [--label NAME]
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench-util.h"
#include "macro.h"
#include "parse-util.h"

/* Where the busy work goes, so the compiler cannot drop it. */
static volatile uint64_t burn_sink;

static void burn_cpu(uint64_t ns) {
        uint64_t until = clock_ns(CLOCK_THREAD_CPUTIME_ID) + ns;
        while (clock_ns(CLOCK_THREAD_CPUTIME_ID) < until)
                for (int i = 0; i < 1000; i++)
                        burn_sink += (uint64_t) i;
}

typedef struct Args {
        uint32_t fps;
        uint64_t work_ns, duration_ns;
        const char *csv_path, *label;
} Args;

static void parse_argv(int argc, char **argv, Args *ret) {
        static const char usage[] = "Usage: frame-player [--fps N] [--work DURATION] [--duration DURATION] [--csv FILE] [--label NAME]\n";
        Args a = {
                .fps = 10,
                .work_ns = 25 * NSEC_PER_MSEC,
                .duration_ns = 10 * NSEC_PER_SEC,
                .label = "frame-player",
        };
        const BenchOption options[] = {
                BENCH_OPT_UINT32("fps", &a.fps, 1, 10000),
                BENCH_OPT_DURATION("work", &a.work_ns),
                BENCH_OPT_DURATION("duration", &a.duration_ns),
                BENCH_OPT_STRING("csv", &a.csv_path),
                BENCH_OPT_STRING("label", &a.label),
        };

        bench_parse_argv(argc, argv, usage, options, ELEMENTSOF(options));
        *ret = a;
}

/* Releases n frames, one every period, and records when each one finished
 * and its response time. */
static void play(uint64_t period, uint64_t work_ns, size_t n, uint64_t *finish, uint64_t *response) {
        uint64_t t0 = clock_ns(CLOCK_MONOTONIC) + 10 * NSEC_PER_MSEC;

        for (size_t k = 0; k < n; k++) {
                uint64_t release = t0 + k * period;
                struct timespec ts = { .tv_sec = (time_t) (release / NSEC_PER_SEC), .tv_nsec = (long) (release % NSEC_PER_SEC) };
                while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
                        ;
                burn_cpu(work_ns);
                finish[k] = clock_ns(CLOCK_MONOTONIC);
                response[k] = finish[k] - release;
        }
}

/* Jitter: spread of the intervals between successive completions, in ms. */
static double jitter_ms(const uint64_t *finish, size_t n) {
        double mean = 0, var = 0;

        for (size_t k = 1; k < n; k++)
                mean += (double) (finish[k] - finish[k - 1]);
        mean /= (double) (n > 1 ? n - 1 : 1);
        for (size_t k = 1; k < n; k++) {
                double d = (double) (finish[k] - finish[k - 1]) - mean;
                var += d * d;
        }
        return sqrt(var / (double) (n > 1 ? n - 1 : 1)) / 1e6;
}

static int write_csv(const char *path, const uint64_t *response, size_t n, uint64_t period) {
        FILE *f = fopen(path, "we");
        if (!f) {
                fprintf(stderr, "frame-player: cannot write %s: %m\n", path);
                return -errno;
        }
        fprintf(f, "frame,release_ms,response_ms,missed\n");
        for (size_t k = 0; k < n; k++)
                fprintf(f, "%zu,%.3f,%.3f,%d\n", k, (double) (k * period) / 1e6, (double) response[k] / 1e6,
                        response[k] > period);
        fclose(f);
        return 0;
}

static int run(const Args *a) {
        uint64_t period = NSEC_PER_SEC / a->fps;
        size_t n = MAX((size_t) (a->duration_ns / period), (size_t) 1);
        _cleanup_free_ uint64_t *response = calloc(n, sizeof(uint64_t));
        _cleanup_free_ uint64_t *finish = calloc(n, sizeof(uint64_t));
        _cleanup_free_ uint64_t *sorted = calloc(n, sizeof(uint64_t));
        size_t missed = 0;

        if (!response || !finish || !sorted)
                return -ENOMEM;
        play(period, a->work_ns, n, finish, response);
        for (size_t k = 0; k < n; k++)
                missed += response[k] > period;

        memcpy(sorted, response, n * sizeof(uint64_t));
        qsort(sorted, n, sizeof(uint64_t), cmp_u64);
        printf("%s: %zu frames, %zu missed (%.1f%%), response p50 %.1f ms, p90 %.1f ms, p99 %.1f ms, max %.1f ms, "
               "jitter %.1f ms\n",
               a->label, n, missed, 100.0 * (double) missed / (double) n, (double) bench_percentile(sorted, n, 0.5) / 1e6,
               (double) bench_percentile(sorted, n, 0.9) / 1e6, (double) bench_percentile(sorted, n, 0.99) / 1e6,
               (double) sorted[n - 1] / 1e6, jitter_ms(finish, n));

        return a->csv_path ? write_csv(a->csv_path, response, n, period) : 0;
}

int main(int argc, char **argv) {
        Args args;

        parse_argv(argc, argv, &args);
        return run(&args) < 0 ? 1 : 0;
}
