/* SPDX-License-Identifier: MIT */
/* Laying a reservation's budget out in a CPU's frame: the orbits of its
 * period's residue classes, an aligned block, the leftover slots, and
 * whether the frame that results keeps the guarantees (invariant 2, the
 * minimum supply over any window). */
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

/* Consecutive busy slots around t in a cyclic frame, counting t itself. */
uint32_t plan_busy_run_through(const uint32_t *s, uint32_t frame, uint32_t t) {
        uint32_t n = 1;
        for (uint32_t k = 1; k < frame && s[(t + frame - k) % frame] != 0; k++)
                n++;
        for (uint32_t k = 1; k < frame && s[(t + k) % frame] != 0; k++)
                n++;
        return MIN(n, frame);
}

/* What the budget servers on `cpu` cost the dispatcher in a frame of `frame`
 * slots, in switches: each one's frame_server_switches() at that frame, the
 * very sum table_check() adds, so a table the planner accepts is never one
 * the dispatcher refuses. The frame is the one being checked, not the CPU's
 * current one: when a new period makes it grow, every server's charge is
 * counted again at the new length (its own rounding included). */
static uint32_t servers_switches(const Plan *p, int32_t cpu, uint32_t frame) {
        uint64_t sum = 0;

        for (uint32_t i = 0; i < p->n_entries; i++)
                if (p->entries[i].cpu == cpu && (p->entries[i].flags & PACE_RES_SERVER))
                        sum += frame_server_switches(p->entries[i].period_slots, frame, &p->config);
        return (uint32_t) MIN(sum, (uint64_t) UINT32_MAX);
}

uint64_t frame_min_supply_ns(const uint32_t *slots, uint32_t frame_slots, uint32_t owner, uint64_t slot_ns,
                             uint64_t window_ns) {
        uint64_t frame_ns = (uint64_t) frame_slots * slot_ns;
        uint64_t whole_frames, rest_ns, n, f, per_frame, best = UINT64_MAX;

        if (frame_slots == 0)
                return 0;
        per_frame = 0;
        for (uint32_t i = 0; i < frame_slots; i++)
                per_frame += slots[i] == owner;

        whole_frames = window_ns / frame_ns;
        rest_ns = window_ns % frame_ns;
        n = rest_ns / slot_ns; /* whole slots, < frame_slots */
        f = rest_ns % slot_ns; /* the part-slot at either end */

        /* The supply of a window is piecewise linear in its start, so its
         * minimum is at a start or an end on a slot boundary. */
        uint64_t run = 0;
        for (uint64_t i = 0; i < n; i++)
                run += slots[i] == owner;
        for (uint32_t s = 0; s < frame_slots; s++) {
                /* run = owned slots in [s, s+n) */
                uint64_t head = run * slot_ns + (slots[(s + n) % frame_slots] == owner ? f : 0);
                uint64_t tail = run * slot_ns +
                                (slots[(s + frame_slots - 1) % frame_slots] == owner ? f : 0);
                best = MIN(best, MIN(head, tail));
                run -= slots[s] == owner;
                run += slots[(s + n) % frame_slots] == owner;
        }
        return whole_frames * per_frame * slot_ns + best;
}

/* Gives the orbit of offset t (t + k*step over the frame, all free) to
 * owner, unless that makes a busy run longer than non_rt_max_gap somewhere:
 * then the orbit stays free and false is returned. A placement that never
 * needs this would have passed the gap check anyway (runs only grow), so it
 * changes nothing there; where it is needed it keeps the free slots that
 * break busy runs (an aligned block's among them) instead of refusing. */
static bool take_orbit(const Plan *p, uint32_t *slots, uint32_t frame, uint32_t t, uint32_t step, uint32_t owner) {
        for (uint32_t k = t; k < frame; k += step)
                slots[k] = owner;
        for (uint32_t k = t; k < frame; k += step)
                if (plan_busy_run_through(slots, frame, k) > p->max_gap_slots) {
                        for (uint32_t j = t; j < frame; j += step)
                                slots[j] = 0;
                        return false;
                }
        return true;
}

/* Gives `want` slots to the new reservation, deciding offset by offset
 * through [0, span) where each decision applies to the offset's whole orbit
 * (o + k*span over the frame). Each free offset goes either to the
 * reservation or to the non-RT server, by EDF (earlier deadline) or RM
 * (shorter period); the server wins ties, since its deadline protects everyone
 * else. An offset is usable only if its whole orbit is free. */
static uint32_t assign(const Plan *p, uint32_t *slots, uint32_t frame, uint32_t span, uint32_t want, uint32_t owner,
                       uint32_t phase) {
        uint32_t given = 0, server_window = UINT32_MAX, server_got = 0;
        uint32_t G = p->server_period, Gq = p->server_budget;

        /* Time is walked from `phase` on: CPUs start their placements at
         * different points of the base, so their free time falls at
         * different instants and a reservation split over CPUs can use it. */
        for (uint32_t u = 0; u < span && given < want; u++) {
                uint32_t t = (u + phase) % span;
                bool usable = true;

                if (u / G != server_window) {
                        server_window = u / G;
                        server_got = 0;
                }
                for (uint32_t k = t; k < frame; k += span)
                        if (slots[k] != 0) {
                                usable = false;
                                break;
                        }
                if (!usable) {
                        if (slots[t] == 0)
                                server_got++; /* stays free all the same */
                        continue;
                }

                bool to_server;
                if (server_got >= Gq)
                        to_server = false;
                else if (p->config.policy == PACE_POLICY_RM)
                        to_server = G <= span;
                else
                        to_server = (server_window + 1) * (uint64_t) G <= span;

                if (to_server || !take_orbit(p, slots, frame, t, span, owner)) {
                        server_got++;
                        continue;
                }
                given++;
        }
        return given;
}

/* The base a pattern of `period` repeats on: its largest divisor that is at
 * most half the non-RT gap. Folding every reservation onto such a short base
 * makes patterns of different periods (50, 40, 30 ms ...) interleave by
 * residue class instead of colliding, and keeps non-RT gaps short. */
static uint32_t fold_base(const Plan *p, uint32_t period) {
        uint32_t limit = MAX(p->max_gap_slots / 2, 1u);
        for (uint32_t b = MIN(period, limit); b > 1; b--)
                if (period % b == 0)
                        return b;
        return 1;
}

/* The slots a budget leaves over after whole classes: taken class by class
 * (offsets cls, cls + base, cls + 2 base ...), so they fill one residue class
 * before touching the next and leave the other classes whole for
 * reservations of other periods. Within a class they are evenly spaced. */
static uint32_t assign_leftover(const Plan *p, uint32_t *slots, uint32_t frame, uint32_t period, uint32_t base,
                                uint32_t want, uint32_t owner, uint32_t phase) {
        uint32_t given = 0;

        for (uint32_t c = 0; c < base && given < want; c++)
                for (uint32_t t = (c + phase) % base; t < period && given < want; t += base) {
                        bool usable = true;
                        for (uint32_t k = t; k < frame; k += period)
                                if (slots[k] != 0) {
                                        usable = false;
                                        break;
                                }
                        if (!usable || !take_orbit(p, slots, frame, t, period, owner))
                                continue;
                        given++;
                }
        return given;
}

/* Places `budget` slots in every `period`: whole residue classes of the fold
 * base first (identical in every base window, chosen against the non-RT
 * server), the leftover class by class. Writes the reservation into `slots`
 * (length frame). */
static int place(const Plan *p, uint32_t *slots, uint32_t frame, uint32_t period, uint32_t budget, uint32_t owner,
                 uint32_t cpu_index) {
        uint32_t base = fold_base(p, period);
        uint32_t per_base = budget / (period / base);
        uint32_t phase = (uint32_t) ((uint64_t) cpu_index * base / p->n_cpus);
        uint32_t given;

        given = assign(p, slots, frame, base, per_base, owner, phase) * (period / base);
        given += assign_leftover(p, slots, frame, period, base, budget - given, owner, phase);
        return given == budget ? 0 : -ENOSPC;
}

/* An aligned reservation's block at offset `start` of its period, in
 * every repetition of the period in the frame: `budget` owned offsets in a
 * row, with a free offset (a break) only where owning it would make a busy
 * run longer than non_rt_max_gap somewhere in the frame. Breaking as late
 * as the gap allows gives the fewest breaks a block from `start` can have.
 * The block must not meet another reservation's slot, nor a second break
 * right after one (the gap would be forced by others' slots, not by the
 * block), and with breaks the free stretch after it must be longer than a
 * break, so that plan_phase() finds the block's start. Returns the number
 * of breaks with the block written into slots, or -ENOSPC with slots as
 * they were. */
static int place_block(const Plan *p, uint32_t *slots, uint32_t frame, uint32_t period, uint32_t budget,
                       uint32_t owner, uint32_t start) {
        uint32_t given = 0, breaks = 0, span = 0;
        bool last_was_break = false;

        for (; given < budget; span++) {
                uint32_t t = (start + span) % period;
                bool usable = span < period, too_long = false;

                for (uint32_t k = t; usable && k < frame; k += period)
                        usable = slots[k] == 0;
                if (!usable)
                        goto undo;
                for (uint32_t k = t; k < frame; k += period)
                        slots[k] = owner;
                for (uint32_t k = t; !too_long && k < frame; k += period)
                        too_long = plan_busy_run_through(slots, frame, k) > p->max_gap_slots;
                if (!too_long) {
                        given++;
                        last_was_break = false;
                        continue;
                }
                for (uint32_t k = t; k < frame; k += period)
                        slots[k] = 0;
                /* A block starts with an owned slot: a break first would
                 * put its start elsewhere (that start is tried on its own). */
                if (last_was_break || given == 0)
                        goto undo;
                last_was_break = true;
                breaks++;
        }
        if (breaks > 0 && period - span < 2)
                goto undo;
        return (int) breaks;

undo:
        for (uint32_t i = 0; i < span && i < period; i++)
                for (uint32_t k = (start + i) % period; k < frame; k += period)
                        if (slots[k] == owner)
                                slots[k] = 0;
        return -ENOSPC;
}

/* The aligned layout: of all starts in the period, one whose block needs
 * the fewest breaks (the first such, for a table that depends on nothing
 * but the requests). A start that reaches the least any block of this
 * budget needs, one break per non_rt_max_gap, ends the search. */
static int place_aligned(const Plan *p, uint32_t *slots, uint32_t frame, uint32_t period, uint32_t budget,
                         uint32_t owner) {
        uint32_t gap = MAX(p->max_gap_slots, 1u);
        uint32_t least = budget > gap ? (budget + gap - 1) / gap - 1 : 0;
        int best = -1, best_breaks = INT32_MAX;

        for (uint32_t start = 0; start < period; start++) {
                int r = place_block(p, slots, frame, period, budget, owner, start);
                if (r < 0)
                        continue;
                /* Undo: the search goes on over a clean frame. */
                for (uint32_t k = 0; k < frame; k++)
                        if (slots[k] == owner)
                                slots[k] = 0;
                if (r < best_breaks) {
                        best = (int) start;
                        best_breaks = r;
                }
                if ((uint32_t) r <= least)
                        break;
        }
        if (best < 0)
                return -ENOSPC;
        return place_block(p, slots, frame, period, budget, owner, (uint32_t) best) < 0 ? -ENOSPC : 0;
}

/* Whether a CPU's frame keeps invariant 2: the free time, less the
 * dispatcher's switches (owner changes plus what its budget servers cost,
 * an extra one of `extra_server_period` included when non-zero), covers the
 * non-real-time share, and no busy run passes non_rt_max_gap. */
bool plan_frame_ok(const Plan *p, const uint32_t *s, uint32_t frame, int32_t cpu, uint32_t extra_server_period) {
        uint32_t free_slots = frame - frame_busy_slots(s, frame);
        uint64_t switches = servers_switches(p, cpu, frame);

        if (extra_server_period)
                switches += frame_server_switches(extra_server_period, frame, &p->config);
        switches += frame_switches(s, frame);
        int i = cpu_index(p, cpu);
        uint64_t cost = i >= 0 ? p->cpus[i].switch_cost_ns : p->config.switch_cost_ns;
        if (!frame_free_share_ok_at(free_slots, (uint32_t) MIN(switches, (uint64_t) UINT32_MAX), frame, &p->config,
                                    cost))
                return false;
        return frame_max_busy_run(s, frame) <= p->max_gap_slots;
}

/* Tries (period, budget) on one CPU in scratch; 0 and the new frame length if
 * it fits with every guarantee intact. */
int plan_try_cpu(Plan *p, const PlanCpu *c, uint32_t cpu_index, const PlanRequest *req, uint32_t period,
                 uint32_t budget, uint32_t owner, uint32_t *ret_frame, bool *ret_window_short) {
        uint32_t frame = lcm_u32(c->frame_slots, period);
        uint32_t *s = p->scratch;
        int r;

        *ret_window_short = false;
        if (frame > p->max_frame_slots)
                return -ENOSPC; /* cannot happen with divisor periods; belt and braces */
        for (uint32_t i = 0; i < frame; i++)
                s[i] = c->frame_slots ? c->slots[i % c->frame_slots] : 0;

        if (req->kind == PLAN_KIND_ALIGNED)
                r = place_aligned(p, s, frame, period, budget, owner);
        else
                r = place(p, s, frame, period, budget, owner, cpu_index);
        if (r < 0)
                return r;

        if (!plan_frame_ok(p, s, frame, c->cpu, req->kind == PLAN_KIND_SERVER ? period : 0))
                return -ENOSPC;

        uint64_t need = (uint64_t) (((unsigned __int128) req->period_ns * req->utilization_ppm + PPM - 1) / PPM);
        if (frame_min_supply_ns(s, frame, owner, p->config.slot_ns, req->period_ns) < need) {
                *ret_window_short = true;
                return -ENOSPC;
        }
        *ret_frame = frame;
        return 0;
}
