/* SPDX-License-Identifier: MIT */
#pragma once
/* What plan.c, plan-layout.c, plan-split.c and plan-validate.c share: the
 * Plan itself and the helpers each calls in another. */
#include <stdbool.h>
#include <stdint.h>

#include "frame-math.h"
#include "id-index.h"
#include "plan.h"

typedef struct PlanCpu {
        int32_t cpu;
        bool offline;
        /* What a switch is charged here: switch_cost_us, or more where the
         * dispatcher measured itself dearer (plan_charge_switch_cost()). */
        uint64_t switch_cost_ns;
        uint32_t frame_slots; /* 0: nothing reserved */
        /* Owner of each slot: 0 free, else 1 + index into Plan.entries.
         * Sized for the longest frame. */
        uint32_t *slots;
} PlanCpu;

struct Plan {
        PaceConfig config;
        uint32_t max_frame_slots;
        uint32_t max_gap_slots;
        uint32_t cap_ppm; /* 1 - non_rt_share */
        uint32_t server_period;
        uint32_t server_budget;
        /* Divisors of max_frame_slots, ascending: the periods a grant can have. */
        uint32_t n_periods;
        uint32_t *periods;
        /* Scratch for trial placements, sized like a frame; one per CPU for
         * split placements, allocated on first use. */
        uint32_t *scratch;
        uint32_t *split_scratch[PACE_MAX_CPUS];
        uint32_t n_cpus;
        PlanCpu cpus[PACE_MAX_CPUS];
        uint32_t n_entries;
        PlanEntry entries[PACE_MAX_RESERVATIONS];
        /* plan_find()'s way into entries[]: the first entry of each id (a
         * split's first piece). Kept here, beside what it indexes, so that
         * every copy of a plan carries its own and the planner stays
         * usable without the broker. Entries are added only through
         * plan_add_entry() and taken out only by plan_remove(), which keep
         * it. */
        IdIndex by_id;
};

static inline uint32_t ceil_div_ppm(uint64_t x, uint32_t ppm) {
        return (uint32_t) (((unsigned __int128) x * ppm + PPM - 1) / PPM);
}

static inline int cpu_index(const Plan *p, int32_t cpu) {
        for (uint32_t i = 0; i < p->n_cpus; i++)
                if (p->cpus[i].cpu == cpu)
                        return (int) i;
        return -1;
}

/* Whether the request may be placed on this CPU (allowed_cpus, 0: any). */
static inline bool cpu_allowed(const PlanRequest *req, int32_t cpu) {
        return req->allowed_cpus == 0 || (cpu >= 0 && cpu < 64 && (req->allowed_cpus & (UINT64_C(1) << cpu)) != 0);
}

/* Consecutive busy slots around t in a cyclic frame, counting t itself. */
uint32_t plan_busy_run_through(const uint32_t *s, uint32_t frame, uint32_t t);

/* Whether a CPU's frame keeps invariant 2: the free time, less the
 * dispatcher's switches (owner changes plus what its budget servers cost,
 * an extra one of `extra_server_period` included when non-zero), covers the
 * non-real-time share, and no busy run passes non_rt_max_gap. */
bool plan_frame_ok(const Plan *p, const uint32_t *s, uint32_t frame, int32_t cpu, uint32_t extra_server_period);

/* Tries (period, budget) on one CPU in scratch; 0 and the new frame length if
 * it fits with every guarantee intact. */
int plan_try_cpu(Plan *p, const PlanCpu *c, uint32_t cpu_index, const PlanRequest *req, uint32_t period,
                 uint32_t budget, uint32_t owner, uint32_t *ret_frame, bool *ret_window_short);

/* Appends e to the entries (there is room: callers check n_entries). */
void plan_add_entry(Plan *p, const PlanEntry *e);

/* An admitted request's entry (or one piece of it) on cpu. */
PlanEntry plan_entry_for_request(const PlanRequest *req, int32_t cpu, uint32_t period_slots, uint32_t budget_slots,
                                 uint32_t flags);

/* The managed CPUs as a mask (those numbered below 64, the only ones a mask
 * can name), optionally only the online ones. */
uint64_t plan_managed_mask(const Plan *p, bool online_only);

/* Whose affinity restricts a request, for refusals: "pid 4242" or "thread
 * 4243 of pid 4242" (a thread-scope reservation follows its thread's). */
const char *plan_format_target(char *buf, size_t size, const PlanRequest *req);

const char *plan_cpus_word(uint64_t mask);

/* The smallest grant that covers every window of the request on a CPU with
 * nothing else on it: what the request costs in whole slots, whatever else
 * is reserved. UINT32_MAX if nothing within the reservable share does. */
void plan_cheapest_cover(Plan *p, const PlanRequest *req, uint32_t *ret_ppm, uint32_t *ret_budget,
                         uint32_t *ret_period);

/* Split over several CPUs (the slots kind only, when the client let the
 * broker choose): 0 when placed, 1 when no split fits, -ENOMEM. */
int plan_place_split(Plan *p, const PlanRequest *req, const uint32_t *order, uint32_t n_order, uint64_t user_ppm,
                     PlanEntry *ret_entry, bool *over_quota);
