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

int main(int argc, char **argv) {
        static const struct option options[] = {
                { "reps", required_argument, NULL, 'r' },
                { "frames", required_argument, NULL, 'f' },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        uint32_t reps = 50;
        char frames_buf[256] = "100,1200,6000,12000,60000";
        int c;

        while ((c = getopt_long(argc, argv, "r:f:h", options, NULL)) >= 0)
                switch (c) {
                case 'r':
                        if (parse_uint32(optarg, &reps) < 0 || reps == 0 || reps > 100000) {
                                fprintf(stderr, "admission-plan: --reps %s: expected 1..100000\n", optarg);
                                return 2;
                        }
                        break;
                case 'f':
                        snprintf(frames_buf, sizeof(frames_buf), "%s", optarg);
                        break;
                case 'h':
                        printf("Usage: admission-plan [--reps N] [--frames MS,MS,...]\n");
                        return 0;
                default:
                        return 2;
                }

        _cleanup_free_ uint64_t *t_admit = calloc(reps, sizeof(uint64_t));
        _cleanup_free_ uint64_t *t_export = calloc(reps, sizeof(uint64_t));
        _cleanup_free_ uint64_t *t_check = calloc(reps, sizeof(uint64_t));
        _cleanup_free_ uint64_t *t_remove = calloc(reps, sizeof(uint64_t));
        if (!t_admit || !t_export || !t_check || !t_remove)
                return 1;

        char *save = NULL;
        for (char *tok = strtok_r(frames_buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                uint32_t frame_ms;
                if (parse_uint32(tok, &frame_ms) < 0 || frame_ms < 20 || frame_ms > 60000) {
                        fprintf(stderr, "admission-plan: frame %s: expected 20..60000 ms\n", tok);
                        return 2;
                }
                PaceConfig config;
                pace_config_init(&config);
                config.slot_ns = NSEC_PER_MSEC;
                config.max_frame_ns = (uint64_t) frame_ms * NSEC_PER_MSEC;
                config.cpus_set = true;
                config.n_cpus = 1;
                config.cpus[0] = 0;

                _cleanup_(plan_freep) Plan *p = NULL;
                int r = plan_new(&config, &p);
                if (r < 0) {
                        fprintf(stderr, "admission-plan: plan_new: %s\n", strerror(-r));
                        return 1;
                }
                uint32_t live;
                fill(p, frame_ms, &live);

                char why[256];
                uint32_t done = 0;
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
                                return 1;
                        }
                        memset(&table, 0, sizeof(table));
                        uint64_t t2 = monotonic_ns();
                        plan_export(p, &table);
                        uint64_t t3 = monotonic_ns();
                        r = table_check(&table, &config, why, sizeof(why));
                        uint64_t t4 = monotonic_ns();
                        if (r < 0) {
                                fprintf(stderr, "admission-plan: frame %" PRIu32 " ms: table refused: %s\n", frame_ms,
                                        why);
                                return 1;
                        }
                        (void) plan_remove(p, req.id);
                        uint64_t t5 = monotonic_ns();
                        t_admit[done] = t1 - t0;
                        t_export[done] = t3 - t2;
                        t_check[done] = t4 - t3;
                        t_remove[done] = t5 - t4;
                        done++;
                }
                printf("frame_ms %" PRIu32 " live %" PRIu32 " reps %" PRIu32, frame_ms, live, done);
                printf(" admit p50 %" PRIu64 " p99 %" PRIu64, percentile(t_admit, done, 0.5),
                       percentile(t_admit, done, 0.99));
                printf(" export p50 %" PRIu64 " p99 %" PRIu64, percentile(t_export, done, 0.5),
                       percentile(t_export, done, 0.99));
                printf(" check p50 %" PRIu64 " p99 %" PRIu64, percentile(t_check, done, 0.5),
                       percentile(t_check, done, 0.99));
                printf(" remove p50 %" PRIu64 " p99 %" PRIu64 "\n", percentile(t_remove, done, 0.5),
                       percentile(t_remove, done, 0.99));
                fflush(stdout);
        }
        return 0;
}
