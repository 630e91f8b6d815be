/* SPDX-License-Identifier: MIT */
/* admission-plan: how the broker's table building grows with the frame, for
 * bench/admission. Links the broker's own planner (broker/plan.c) and the
 * dispatcher's validator (common/table-check.c), no daemons. For each frame
 * length (max_frame_ms, 1 ms slots, one CPU) it admits a fixed mix of
 * reservations whose periods make the frame that long, then times, REPS
 * times: admitting one more reservation (plan_admit: placement and the exact
 * checks), writing the table (plan_export), validating it as the dispatcher
 * does at adoption (table_check), and removing it again (plan_remove).
 * One line per frame:
 *   frame_ms F live N reps R admit p50 P p99 P export p50 P p99 P check p50 P p99 P remove p50 P p99 P
 * (times in ns).
 *
 *   admission-plan [--reps 50] [--frames 100,1200,6000,12000,60000]
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config.h"
#include "bench-util.h"
#include "macro.h"
#include "parse-util.h"
#include "plan.h"
#include "table-check.h"

static PaceTableBuffer table; /* large: keep it off the stack */

static uint64_t percentile(uint64_t *v, size_t n, double q) {
        qsort(v, n, sizeof(uint64_t), cmp_u64);
        return bench_percentile(v, n, q);
}

/* The background mix: (period as a fraction of the frame or in ms, ppm). */
static int fill(Plan *p, uint64_t frame_ms, uint32_t *ret_live) {
        static const struct {
                uint64_t period_ms; /* 0: the whole frame */
                uint32_t ppm;
        } mix[] = {
                { 0, 20000 }, { 0, 10000 }, { 50, 100000 }, { 40, 100000 }, { 20, 50000 },
                { 10, 100000 }, { 0, 30000 }, { 25, 80000 },
        };
        char why[256];
        uint32_t live = 0;

        for (size_t i = 0; i < ELEMENTSOF(mix); i++) {
                uint64_t period_ms = mix[i].period_ms ? MIN(mix[i].period_ms, frame_ms) : frame_ms;
                PlanRequest req = {
                        .id = i + 1,
                        .pid = (pid_t) (1000 + i),
                        .start_time = 1,
                        .uid = 0,
                        .period_ns = period_ms * NSEC_PER_MSEC,
                        .utilization_ppm = mix[i].ppm,
                        .cpu = 0,
                };
                PlanEntry e;
                if (plan_admit(p, &req, &e, why, sizeof(why)) == 0)
                        live++;
        }
        *ret_live = live;
        return 0;
}

#define MAX_FRAMES 64

typedef struct Args {
        uint32_t reps;
        uint32_t frames_ms[MAX_FRAMES];
        size_t n_frames;
} Args;

/* "100,1200": every frame length checked before the first is measured. */
static int parse_frames(const char *s, Args *a) {
        char buf[256], *save = NULL;

        if (snprintf(buf, sizeof(buf), "%s", s) >= (int) sizeof(buf))
                return -EINVAL;
        a->n_frames = 0;
        for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                uint32_t v;
                if (a->n_frames >= MAX_FRAMES || parse_uint32(tok, &v) < 0 || v < 20 || v > 60000)
                        return -EINVAL;
                a->frames_ms[a->n_frames++] = v;
        }
        return a->n_frames > 0 ? 0 : -EINVAL;
}

static void read_frames(const char *option, const char *value, void *userdata) {
        if (parse_frames(value, userdata) < 0)
                bench_arg_refuse(option, value, "up to %d frame lengths in ms from 20 to 60000, such as 100,1200",
                                 MAX_FRAMES);
}

static void parse_argv(int argc, char **argv, Args *ret) {
        static const char usage[] = "Usage: admission-plan [--reps N] [--frames MS,MS,...]\n";
        Args a = {
                .reps = 50,
                .frames_ms = { 100, 1200, 6000, 12000, 60000 },
                .n_frames = 5,
        };
        const BenchOption options[] = {
                BENCH_OPT_UINT32("reps", &a.reps, 1, 100000),
                BENCH_OPT_CUSTOM("frames", read_frames, &a),
        };

        bench_parse_argv(argc, argv, usage, options, ELEMENTSOF(options));
        *ret = a;
}

/* Per repetition, in ns. */
typedef struct Timings {
        uint64_t *admit, *export, *check, *remove;
} Timings;

/* One CPU, 1 ms slots, frames up to frame_ms. */
static void frame_config(uint32_t frame_ms, PaceConfig *ret) {
        pace_config_init(ret);
        ret->slot_ns = NSEC_PER_MSEC;
        ret->max_frame_ns = (uint64_t) frame_ms * NSEC_PER_MSEC;
        ret->cpus_set = true;
        ret->n_cpus = 1;
        ret->cpus[0] = 0;
}

/* Admits, exports, checks and removes one reservation, reps times. */
static int time_steps(Plan *p, const PaceConfig *config, uint32_t frame_ms, uint32_t reps, Timings *t) {
        char why[256];
        int r;

        for (uint32_t k = 0; k < reps; k++) {
                PlanRequest req = {
                        .id = 100 + k,
                        .pid = 5000,
                        .start_time = 1,
                        .uid = 0,
                        .period_ns = (uint64_t) frame_ms * NSEC_PER_MSEC,
                        .utilization_ppm = 10000,
                        .cpu = 0,
                };
                PlanEntry e;
                uint64_t t0 = monotonic_ns();
                r = plan_admit(p, &req, &e, why, sizeof(why));
                uint64_t t1 = monotonic_ns();
                if (r != 0) {
                        fprintf(stderr, "admission-plan: frame %" PRIu32 " ms: %s\n", frame_ms, why);
                        /* A refusal (> 0) ends the run as an error does. */
                        return r < 0 ? r : -ENOSPC;
                }
                memset(&table, 0, sizeof(table));
                uint64_t t2 = monotonic_ns();
                plan_export(p, &table);
                uint64_t t3 = monotonic_ns();
                r = table_check(&table, config, why, sizeof(why));
                uint64_t t4 = monotonic_ns();
                if (r < 0) {
                        fprintf(stderr, "admission-plan: frame %" PRIu32 " ms: table refused: %s\n", frame_ms, why);
                        return r;
                }
                (void) plan_remove(p, req.id);
                uint64_t t5 = monotonic_ns();
                t->admit[k] = t1 - t0;
                t->export[k] = t3 - t2;
                t->check[k] = t4 - t3;
                t->remove[k] = t5 - t4;
        }
        return 0;
}

/* One line for one frame length. */
static int measure_frame(uint32_t frame_ms, uint32_t reps, Timings *t) {
        _cleanup_(plan_freep) Plan *p = NULL;
        PaceConfig config;
        uint32_t live;
        int r;

        frame_config(frame_ms, &config);
        r = plan_new(&config, &p);
        if (r < 0) {
                fprintf(stderr, "admission-plan: plan_new: %s\n", strerror(-r));
                return r;
        }
        fill(p, frame_ms, &live);
        r = time_steps(p, &config, frame_ms, reps, t);
        if (r < 0)
                return r;

        printf("frame_ms %" PRIu32 " live %" PRIu32 " reps %" PRIu32, frame_ms, live, reps);
        printf(" admit p50 %" PRIu64 " p99 %" PRIu64, percentile(t->admit, reps, 0.5), percentile(t->admit, reps, 0.99));
        printf(" export p50 %" PRIu64 " p99 %" PRIu64, percentile(t->export, reps, 0.5),
               percentile(t->export, reps, 0.99));
        printf(" check p50 %" PRIu64 " p99 %" PRIu64, percentile(t->check, reps, 0.5), percentile(t->check, reps, 0.99));
        printf(" remove p50 %" PRIu64 " p99 %" PRIu64 "\n", percentile(t->remove, reps, 0.5),
               percentile(t->remove, reps, 0.99));
        fflush(stdout);
        return 0;
}

static int run(const Args *a) {
        _cleanup_free_ uint64_t *t_admit = calloc(a->reps, sizeof(uint64_t));
        _cleanup_free_ uint64_t *t_export = calloc(a->reps, sizeof(uint64_t));
        _cleanup_free_ uint64_t *t_check = calloc(a->reps, sizeof(uint64_t));
        _cleanup_free_ uint64_t *t_remove = calloc(a->reps, sizeof(uint64_t));
        Timings t = { .admit = t_admit, .export = t_export, .check = t_check, .remove = t_remove };
        int r;

        if (!t_admit || !t_export || !t_check || !t_remove)
                return -ENOMEM;
        for (size_t i = 0; i < a->n_frames; i++) {
                r = measure_frame(a->frames_ms[i], a->reps, &t);
                if (r < 0)
                        return r;
        }
        return 0;
}

int main(int argc, char **argv) {
        Args args;

        parse_argv(argc, argv, &args);
        return run(&args) < 0 ? 1 : 0;
}
