/* SPDX-License-Identifier: MIT */
/* A slots reservation split over several CPUs, where the client let the
 * broker: the cheapest cover of the share by pieces that each fit a CPU. */
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

/* The smallest grant that covers every window of the request on a CPU with
 * nothing else on it: what the request costs in whole slots, whatever else
 * is reserved. UINT32_MAX if nothing within the reservable share does. */
void plan_cheapest_cover(Plan *p, const PlanRequest *req, uint32_t *ret_ppm, uint32_t *ret_budget,
                         uint32_t *ret_period) {
        const PlanCpu empty = { .cpu = -1 };

        *ret_ppm = UINT32_MAX;
        for (uint32_t pi = 0; pi < p->n_periods; pi++) {
                uint32_t cand = p->periods[pi], frame;
                bool short_window;
                if ((uint64_t) cand * p->config.slot_ns > req->period_ns)
                        break;
                /* Aligned: only the requested period, rounded down. */
                if (req->kind == PLAN_KIND_ALIGNED && pi + 1 < p->n_periods &&
                    (uint64_t) p->periods[pi + 1] * p->config.slot_ns <= req->period_ns)
                        continue;
                for (uint32_t budget = ceil_div_ppm(cand, req->utilization_ppm); budget <= cand; budget++) {
                        uint32_t granted = (uint32_t) ((uint64_t) budget * PPM / cand);
                        if (granted > p->cap_ppm || granted >= *ret_ppm)
                                break;
                        if (plan_try_cpu(p, &empty, 0, req, cand, budget, UINT32_MAX, &frame, &short_window) == 0) {
                                *ret_ppm = granted;
                                *ret_budget = budget;
                                *ret_period = cand;
                                break;
                        }
                        if (!short_window)
                                break;
                }
        }
}

/* Semi-partitioned placement: `budget` slots in every `period`, as pieces on
 * the CPUs in order[], walking the period slot by slot. A piece continues
 * on its CPU while it can; when it cannot, that slot stays free and the next
 * slot may start a piece elsewhere, so the process never changes CPU
 * without a free slot (the validator's rule) and never runs on two CPUs at
 * once. Every CPU's own limits and the combined supply in every window of
 * the requested period are checked before anything is committed. */
static int try_split(Plan *p, const PlanRequest *req, uint32_t period, uint32_t budget, const uint32_t *order,
                     uint32_t n_order, PlanEntry *ret_entry, bool *ret_window_short) {
        uint32_t frame[PACE_MAX_CPUS], pieces[PACE_MAX_CPUS] = { 0 };
        int32_t *on = calloc(period, sizeof(int32_t));
        uint32_t given = 0, used = 0, span = 1;
        int r = -ENOSPC;

        *ret_window_short = false;
        if (!on)
                return -ENOMEM;
        for (uint32_t t = 0; t < period; t++)
                on[t] = -1; /* the walk may stop early: unvisited slots are unused */
        for (uint32_t o = 0; o < n_order; o++) {
                const PlanCpu *c = &p->cpus[order[o]];
                if (!p->split_scratch[o]) {
                        p->split_scratch[o] = calloc(p->max_frame_slots, sizeof(uint32_t));
                        if (!p->split_scratch[o]) {
                                free(on);
                                return -ENOMEM;
                        }
                }
                frame[o] = lcm_u32(c->frame_slots, period);
                for (uint32_t i = 0; i < frame[o]; i++)
                        p->split_scratch[o][i] = c->frame_slots ? c->slots[i % c->frame_slots] : 0;
        }

        for (uint32_t t = 0; t < period && given < budget; t++) {
                int32_t prev = t > 0 ? on[t - 1] : -1;
                for (uint32_t o = 0; o < n_order; o++) {
                        uint32_t *s = p->split_scratch[o], owner = p->n_entries + 1 + o;
                        bool usable = !p->cpus[order[o]].offline && (prev < 0 || prev == (int32_t) o);

                        for (uint32_t k = t; usable && k < frame[o]; k += period)
                                usable = s[k] == 0;
                        if (!usable)
                                continue;
                        for (uint32_t k = t; k < frame[o]; k += period)
                                s[k] = owner;
                        /* Not where it would make a busy run too long for
                         * the non-RT work on that CPU. */
                        if (plan_busy_run_through(s, frame[o], t) > p->max_gap_slots) {
                                for (uint32_t k = t; k < frame[o]; k += period)
                                        s[k] = 0;
                                continue;
                        }
                        on[t] = (int32_t) o;
                        pieces[o]++;
                        given++;
                        break;
                }
        }
        /* The period wraps around: the same rule at its seam. */
        if (given < budget || (on[0] >= 0 && on[period - 1] >= 0 && on[0] != on[period - 1]))
                goto out;

        for (uint32_t o = 0; o < n_order; o++) {
                if (pieces[o] == 0)
                        continue;
                used++;
                span = lcm_u32(span, frame[o]);
                /* The budget servers already there are charged at the
                 * frame the piece gives that CPU. */
                if (!plan_frame_ok(p, p->split_scratch[o], frame[o], p->cpus[order[o]].cpu, 0))
                        goto out;
        }
        if (used < 2 || span > p->max_frame_slots)
                goto out;

        /* The pieces together, on one timeline: every requested window. */
        for (uint32_t g = 0; g < span; g++) {
                p->scratch[g] = 0;
                for (uint32_t o = 0; o < n_order; o++)
                        if (pieces[o] && p->split_scratch[o][g % frame[o]] == p->n_entries + 1 + o)
                                p->scratch[g] = 1;
        }
        uint64_t need = (uint64_t) (((unsigned __int128) req->period_ns * req->utilization_ppm + PPM - 1) / PPM);
        if (frame_min_supply_ns(p->scratch, span, 1, p->config.slot_ns, req->period_ns) < need) {
                *ret_window_short = true;
                goto out;
        }

        /* Commit: one entry per CPU used, owners renumbered densely. */
        uint32_t base = p->n_entries;
        for (uint32_t o = 0; o < n_order; o++) {
                if (pieces[o] == 0)
                        continue;
                PlanCpu *c = &p->cpus[order[o]];
                uint32_t tmp_owner = base + 1 + o, owner = p->n_entries + 1;
                for (uint32_t i = 0; i < frame[o]; i++)
                        c->slots[i] = p->split_scratch[o][i] == tmp_owner ? owner : p->split_scratch[o][i];
                c->frame_slots = frame[o];
                PlanEntry e = plan_entry_for_request(req, c->cpu, period, pieces[o], PACE_RES_PIECE);
                plan_add_entry(p, &e);
        }
        if (ret_entry) {
                *ret_entry = p->entries[base];
                ret_entry->budget_slots = budget;
        }
        r = 0;
out:
        free(on);
        return r;
}

/* Split over several CPUs (the slots kind only, when the client let the
 * broker choose): 0 when placed, 1 when no split fits, -ENOMEM. */
int plan_place_split(Plan *p, const PlanRequest *req, const uint32_t *order, uint32_t n_order, uint64_t user_ppm,
                     PlanEntry *ret_entry, bool *over_quota) {
        uint64_t slot_ns = p->config.slot_ns;

        for (uint32_t pi = p->n_periods; pi-- > 0;) {
                uint32_t cand = p->periods[pi];
                if ((uint64_t) cand * slot_ns > req->period_ns)
                        continue;
                for (uint32_t budget = ceil_div_ppm(cand, req->utilization_ppm); budget <= cand; budget++) {
                        uint32_t granted = (uint32_t) ((uint64_t) budget * PPM / cand);
                        bool window_short;
                        if (req->uid != 0 && user_ppm + granted > p->config.max_utilization_per_user_ppm) {
                                *over_quota = true;
                                break;
                        }
                        int r = try_split(p, req, cand, budget, order, n_order, ret_entry, &window_short);
                        if (r == 0 || r == -ENOMEM)
                                return r;
                        if (!window_short)
                                break;
                }
        }
        return 1;
}
