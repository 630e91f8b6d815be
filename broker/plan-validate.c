/* SPDX-License-Identifier: MIT */
/* Whether a request can be asked at all, before any placement: its target,
 * its CPUs and affinity, period and share within what this broker offers. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "explain.h"
#include "frame-math.h"
#include "macro.h"
#include "parse-util.h"
#include "plan-internal.h"
#include "table-check.h"

/* The managed CPUs as a mask (those numbered below 64, the only ones a mask
 * can name), optionally only the online ones. */
uint64_t plan_managed_mask(const Plan *p, bool online_only) {
        uint64_t m = 0;

        for (uint32_t i = 0; i < p->n_cpus; i++)
                if (p->cpus[i].cpu >= 0 && p->cpus[i].cpu < 64 && !(online_only && p->cpus[i].offline))
                        m |= UINT64_C(1) << p->cpus[i].cpu;
        return m;
}

/* Whose affinity restricts a request, for refusals: "pid 4242" or "thread
 * 4243 of pid 4242" (a thread-scope reservation follows its thread's). */
const char *plan_format_target(char *buf, size_t size, const PlanRequest *req) {
        if (req->scope == PACE_TABLE_SCOPE_THREAD)
                snprintf(buf, size, "thread %" PRIi32 " of pid %" PRIi32, (int32_t) req->tid, (int32_t) req->pid);
        else
                snprintf(buf, size, "pid %" PRIi32, (int32_t) req->pid);
        return buf;
}

const char *plan_cpus_word(uint64_t mask) {
        return __builtin_popcountll(mask) == 1 ? "CPU" : "CPUs";
}

/* The request's affinity against the managed CPUs: some managed (and, unless
 * it names a CPU, online) CPU must be allowed, and a named CPU must be. */
static int validate_affinity(const Plan *p, const PlanRequest *req, char *why, size_t why_size) {
        uint64_t usable = req->allowed_cpus & plan_managed_mask(p, false);
        char who[64], set[256], managed[256];

        if (req->allowed_cpus == 0)
                return 0;
        plan_format_target(who, sizeof(who), req);
        if (usable == 0) {
                explain(why, why_size, "%s may run only on %s %s (its CPU affinity), and pace manages none of them "
                        "(it manages %s %s); change its affinity to include one of those", who,
                        plan_cpus_word(req->allowed_cpus), format_cpu_mask(set, sizeof(set), req->allowed_cpus),
                        plan_cpus_word(plan_managed_mask(p, false)),
                        format_cpu_mask(managed, sizeof(managed), plan_managed_mask(p, false)));
                return PLAN_REFUSED_CPU;
        }
        if (req->cpu >= 0 && !cpu_allowed(req, req->cpu)) {
                explain(why, why_size, "CPU %" PRId32 " is outside %s's allowed CPUs (%s); name one of them or "
                        "change its affinity", req->cpu, who, format_cpu_mask(set, sizeof(set), usable));
                return PLAN_REFUSED_CPU;
        }
        if (req->cpu < 0 && (usable & plan_managed_mask(p, true)) == 0) {
                explain(why, why_size, "the %s %s may run on that pace manages (%s) %s offline; change its "
                        "affinity to include an online one", plan_cpus_word(usable), who,
                        format_cpu_mask(set, sizeof(set), usable), __builtin_popcountll(usable) == 1 ? "is" : "are");
                return PLAN_REFUSED_CPU;
        }
        return 0;
}

int plan_validate(const Plan *p, const PlanRequest *req, char *why, size_t why_size) {
        char a[32], b[32];
        uint64_t slot_ns = p->config.slot_ns;

        if (req->period_ns < slot_ns) {
                explain(why, why_size, "period %s is shorter than one slot (%s); ask for at least %s",
                        format_duration(a, sizeof(a), req->period_ns), format_duration(b, sizeof(b), slot_ns),
                        b);
                return PLAN_REFUSED_RANGE;
        }
        if (req->period_ns > p->config.max_frame_ns) {
                explain(why, why_size, "period %s is longer than the longest frame (%s, max_frame_ms)",
                        format_duration(a, sizeof(a), req->period_ns),
                        format_duration(b, sizeof(b), p->config.max_frame_ns));
                return PLAN_REFUSED_RANGE;
        }
        if (req->utilization_ppm == 0 || req->utilization_ppm > PPM) {
                explain(why, why_size, "utilization %" PRIu32 " ppm is out of range; allowed: 1 to %u ppm (0.0001%% to 100%%)%s",
                        req->utilization_ppm, PPM,
                        req->utilization_ppm > PPM ? ": a reservation holds at most one CPU at a time; for more, "
                                                     "split the work over processes and reserve each" : "");
                return PLAN_REFUSED_RANGE;
        }
        if (req->utilization_ppm > p->cap_ppm) {
                explain(why, why_size, "%s of a CPU can never be granted: non_rt_share keeps %s of every CPU for "
                        "other work, so at most %s (less the dispatcher's switch costs) can be reserved",
                        format_ppm(a, sizeof(a), req->utilization_ppm),
                        format_ppm(b, sizeof(b), p->config.non_rt_share_ppm),
                        format_ppm((char[32]) {}, 32, p->cap_ppm));
                return PLAN_REFUSED_NO_ROOM;
        }
        if (req->cpu >= 0 && cpu_index(p, req->cpu) >= 0 && p->cpus[cpu_index(p, req->cpu)].offline) {
                explain(why, why_size, "CPU %" PRId32 " is offline; leave the CPU out or name an online one", req->cpu);
                return PLAN_REFUSED_CPU;
        }
        if (req->cpu >= 0 && cpu_index(p, req->cpu) < 0) {
                explain(why, why_size, "CPU %" PRId32 " is not managed by pace (see \"cpus\" in the configuration)",
                        req->cpu);
                return PLAN_REFUSED_CPU;
        }
        return validate_affinity(p, req, why, why_size);
}
