/* SPDX-License-Identifier: MIT */
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


/* The server that keeps non-real-time work going: Gq free slots in every G.
 * EDF may put those Gq anywhere in their window, so two windows back to back
 * can leave 2(G - Gq) busy slots; pick the cheapest (G, Gq) that keeps that
 * within the configured gap, preferring longer G for fewer switches. */
static void choose_server(uint32_t share_ppm, uint32_t max_gap, uint32_t *ret_period, uint32_t *ret_budget) {
        uint32_t best_g = 1, best_q = 1;

        for (uint32_t g = 1; g <= max_gap + 1; g++) {
                uint32_t q = ceil_div_ppm(g, share_ppm);
                if (q == 0)
                        q = 1;
                if (q > g || 2 * (g - q) > max_gap)
                        continue;
                /* q/g <= best_q/best_g, ties to the longer period. */
                if ((uint64_t) q * best_g <= (uint64_t) best_q * g) {
                        best_g = g;
                        best_q = q;
                }
        }
        *ret_period = best_g;
        *ret_budget = best_q;
}

int plan_new(const PaceConfig *config, Plan **ret) {
        _cleanup_(plan_freep) Plan *p = NULL;

        if (config->n_cpus == 0 || config->n_cpus > PACE_MAX_CPUS || config->slot_ns == 0)
                return -EINVAL;

        p = calloc(1, sizeof(*p));
        if (!p)
                return -ENOMEM;
        p->config = *config;
        p->max_frame_slots = pace_config_frame_slots(config);
        p->max_gap_slots = (uint32_t) (config->non_rt_max_gap_ns / config->slot_ns);
        p->cap_ppm = PPM - config->non_rt_share_ppm;
        if (p->max_frame_slots == 0 || p->max_frame_slots > PACE_MAX_FRAME_SLOTS)
                return -EINVAL;
        /* Every CPU's longest frame must fit the table's slot array. */
        if ((uint64_t) p->max_frame_slots * config->n_cpus > PACE_TABLE_MAX_SLOTS)
                return -E2BIG;
        choose_server(config->non_rt_share_ppm, p->max_gap_slots, &p->server_period, &p->server_budget);

        p->periods = calloc(p->max_frame_slots, sizeof(uint32_t));
        p->scratch = calloc(p->max_frame_slots, sizeof(uint32_t));
        if (!p->periods || !p->scratch)
                return -ENOMEM;
        for (uint32_t d = 1; d <= p->max_frame_slots; d++)
                if (p->max_frame_slots % d == 0)
                        p->periods[p->n_periods++] = d;

        p->n_cpus = config->n_cpus;
        for (uint32_t i = 0; i < p->n_cpus; i++) {
                p->cpus[i].cpu = config->cpus[i];
                p->cpus[i].switch_cost_ns = config->switch_cost_ns;
                p->cpus[i].slots = calloc(p->max_frame_slots, sizeof(uint32_t));
                if (!p->cpus[i].slots)
                        return -ENOMEM;
        }
        *ret = TAKE_PTR(p);
        return 0;
}

Plan *plan_free(Plan *p) {
        if (!p)
                return NULL;
        for (uint32_t i = 0; i < p->n_cpus; i++)
                free(p->cpus[i].slots);
        for (uint32_t i = 0; i < PACE_MAX_CPUS; i++)
                free(p->split_scratch[i]);
        free(p->periods);
        free(p->scratch);
        free(p);
        return NULL;
}

void plan_server(const Plan *p, uint32_t *ret_period_slots, uint32_t *ret_budget_slots) {
        *ret_period_slots = p->server_period;
        *ret_budget_slots = p->server_budget;
}

uint32_t plan_kind_flags(PlanKind kind) {
        switch (kind) {
        case PLAN_KIND_SERVER:
                return PACE_RES_SERVER;
        case PLAN_KIND_ALIGNED:
                return PACE_RES_ALIGNED;
        default:
                return 0;
        }
}

PlanKind plan_flags_kind(uint32_t flags) {
        if (flags & PACE_RES_SERVER)
                return PLAN_KIND_SERVER;
        if (flags & PACE_RES_ALIGNED)
                return PLAN_KIND_ALIGNED;
        return PLAN_KIND_SLOTS;
}

void plan_add_entry(Plan *p, const PlanEntry *e) {
        id_index_add(&p->by_id, e->id, p->n_entries);
        p->entries[p->n_entries++] = *e;
}

/* An admitted request's entry (or one piece of it) on cpu. */
PlanEntry plan_entry_for_request(const PlanRequest *req, int32_t cpu, uint32_t period_slots, uint32_t budget_slots,
                                 uint32_t flags) {
        return (PlanEntry) {
                .id = req->id,
                .pid = req->pid,
                .start_time = req->start_time,
                .uid = req->uid,
                .cpu = cpu,
                .requested_period_ns = req->period_ns,
                .requested_utilization_ppm = req->utilization_ppm,
                .scope = req->scope,
                .tid = req->tid,
                .period_slots = period_slots,
                .budget_slots = budget_slots,
                .flags = flags | (req->on_behalf ? PACE_RES_ON_BEHALF : 0),
        };
}

const char *plan_kind_name(PlanKind kind) {
        switch (kind) {
        case PLAN_KIND_SERVER:
                return "server";
        case PLAN_KIND_ALIGNED:
                return "aligned";
        default:
                return "slots";
        }
}

static uint32_t cpu_reserved_ppm(const PlanCpu *c) {
        if (c->frame_slots == 0)
                return 0;
        return (uint32_t) ((uint64_t) frame_busy_slots(c->slots, c->frame_slots) * PPM / c->frame_slots);
}

static uint64_t user_granted_ppm(const Plan *p, uid_t uid, uint32_t *ret_count) {
        uint64_t sum;

        FRAME_USER_TOTALS(p->entries, p->n_entries, uid, ret_count, &sum);
        return sum;
}

/* The CPUs to try, as indices into p->cpus: the one asked for, or worst
 * fit (the emptiest first keeps free time balanced) among those the target
 * may run on; a split takes its CPUs from this order too. */
static uint32_t placement_order(const Plan *p, const PlanRequest *req, uint32_t order[static PACE_MAX_CPUS]) {
        uint32_t n = 0;

        if (req->cpu >= 0) {
                order[n++] = (uint32_t) cpu_index(p, req->cpu);
                return n;
        }
        for (uint32_t i = 0; i < p->n_cpus; i++)
                if (cpu_allowed(req, p->cpus[i].cpu))
                        order[n++] = i;
        for (uint32_t i = 1; i < n; i++)
                for (uint32_t j = i; j > 0; j--) {
                        uint32_t r1 = cpu_reserved_ppm(&p->cpus[order[j - 1]]);
                        uint32_t r2 = cpu_reserved_ppm(&p->cpus[order[j]]);
                        if (r1 <= r2)
                                break;
                        uint32_t t = order[j];
                        order[j] = order[j - 1];
                        order[j - 1] = t;
                }
        return n;
}

/* Why a request found no room, in terms the user can act on: what it costs
 * in whole slots (priced alone in p's scratch), what the user may still
 * hold, what is free where. */
static int explain_no_room(Plan *p, const PlanRequest *req, bool unsplittable, bool over_quota,
                           uint64_t user_ppm, const uint32_t *order, uint32_t n_order, char *why, size_t why_size) {
        char a[32], b[32];
        uint32_t cheapest_ppm, cheapest_budget = 0, cheapest_period = 0;
        plan_cheapest_cover(p, req, &cheapest_ppm, &cheapest_budget, &cheapest_period);
        char asked[96];
        snprintf(asked, sizeof(asked), "%s every %s", format_ppm(a, sizeof(a), req->utilization_ppm),
                 format_duration(b, sizeof(b), req->period_ns));
        if (cheapest_ppm == UINT32_MAX && !over_quota) {
                explain(why, why_size, "%s cannot be granted: in whole slots of %s the smallest grant that covers it "
                        "is more than the %s of a CPU that can be reserved (non_rt_share); ask for a longer period",
                        asked, format_duration(a, sizeof(a), p->config.slot_ns), format_ppm(b, sizeof(b), p->cap_ppm));
                return PLAN_REFUSED_NO_ROOM;
        }
        if (over_quota) {
                explain(why, why_size, "uid %u already holds %s of CPU time; %s, which in whole slots is %s, would "
                        "pass the per-user limit of %s (max_utilization_per_user)", (unsigned) req->uid,
                        format_ppm(a, sizeof(a), (uint32_t) user_ppm), asked,
                        format_ppm(b, sizeof(b), cheapest_ppm),
                        format_ppm((char[32]) {}, 32, p->config.max_utilization_per_user_ppm));
                return PLAN_REFUSED_USER_LIMIT;
        }
        char list[256] = "", rounded[96] = "", within[128] = "", outside[128] = "";
        size_t len = 0;
        /* Free time on CPUs the target may not use is no use to it: say
         * that the list leaves them out, and which. */
        uint64_t excluded = req->allowed_cpus ? plan_managed_mask(p, false) & ~req->allowed_cpus : 0;
        if (excluded && req->cpu < 0) {
                char who[64], set[256];
                plan_format_target(who, sizeof(who), req);
                snprintf(within, sizeof(within), " on the CPUs %s may run on", who);
                snprintf(outside, sizeof(outside), "; %s %s %s outside its affinity", plan_cpus_word(excluded),
                         format_cpu_mask(set, sizeof(set), excluded),
                         __builtin_popcountll(excluded) == 1 ? "is" : "are");
        }
        for (uint32_t o = 0; o < n_order && len < sizeof(list); o++) {
                const PlanCpu *c = &p->cpus[order[o]];
                uint32_t reserved = cpu_reserved_ppm(c);
                len += (size_t) snprintf(list + len, sizeof(list) - len, "%sCPU %" PRId32 ": %s free", o ? ", " : "",
                                         c->cpu, format_ppm(a, sizeof(a), reserved < p->cap_ppm ? p->cap_ppm - reserved : 0));
        }
        if ((uint64_t) cheapest_ppm * 1000 > (uint64_t) req->utilization_ppm * 1005)
                snprintf(rounded, sizeof(rounded), "; in whole slots that is at least %" PRIu32 " of every %" PRIu32
                         " (%s)", cheapest_budget, cheapest_period, format_ppm(a, sizeof(a), cheapest_ppm));
        char whole[512] = "";
        size_t whole_len = 0;
        if (unsplittable)
                whole_len = (size_t) snprintf(whole, sizeof(whole), "; a%s %s reservation is never split over CPUs "
                                              "(%s), so one CPU must hold all of it: ask for less, or for kind "
                                              "slots, which may be split",
                                              req->kind == PLAN_KIND_ALIGNED ? "n" : "", plan_kind_name(req->kind),
                                              req->kind == PLAN_KIND_SERVER
                                                      ? "its budget is spent wherever its threads run"
                                                      : "its budget is one block");
        /* Free time in total is not enough for a block: say what is. */
        if (req->kind == PLAN_KIND_ALIGNED && whole_len < sizeof(whole))
                snprintf(whole + whole_len, sizeof(whole) - whole_len, "; an aligned budget needs one stretch of "
                         "free slots in every period, which spread reservations may not leave");
        if (unsplittable) {
                char who[64];
                if (within[0])
                        snprintf(within, sizeof(within), " on any one of the CPUs %s may run on",
                                 plan_format_target(who, sizeof(who), req));
                else
                        snprintf(within, sizeof(within), " on any one CPU");
        }
        explain(why, why_size, "not enough free CPU time for %s%s%s (%s; free time also pays the dispatcher's "
                "switch costs%s)%s%s", asked, within, rounded, list,
                req->kind == PLAN_KIND_SERVER ? ", a server's own included" : "", outside, whole);
        return PLAN_REFUSED_NO_ROOM;
}

/* On one CPU, exactly: periods from the longest the request allows
 * downwards, and for each every CPU in order[], so an exact grant on any
 * CPU beats a rounded one. A shorter period can fit where a longer one's
 * slots collide with what is there already; it then needs a larger budget
 * to cover every window of the requested period. 0 when placed, 1 when
 * nothing fits (*over_quota if the user's limit stopped a budget). */
static int place_on_one_cpu(Plan *p, const PlanRequest *req, const uint32_t *order, uint32_t n_order,
                            uint64_t user_ppm, PlanEntry *ret_entry, bool *over_quota) {
        uint64_t slot_ns = p->config.slot_ns;
        uint32_t owner = p->n_entries + 1;
        bool tried_a_period = false;

        for (uint32_t pi = p->n_periods; pi-- > 0;) {
                uint32_t cand = p->periods[pi];
                if ((uint64_t) cand * slot_ns > req->period_ns)
                        continue;
                /* An aligned client releases one job per period at the
                 * block's start: a shorter period would cut its budget in
                 * pieces that many periods apart. Only the requested
                 * period, rounded down to the grid. */
                if (req->kind == PLAN_KIND_ALIGNED && tried_a_period)
                        break;
                tried_a_period = true;
                for (uint32_t o = 0; o < n_order; o++) {
                        PlanCpu *c = &p->cpus[order[o]];

                        if (c->offline)
                                continue;
                        for (uint32_t budget = ceil_div_ppm(cand, req->utilization_ppm); budget <= cand; budget++) {
                                uint32_t granted = (uint32_t) ((uint64_t) budget * PPM / cand);
                                uint32_t frame;
                                bool window_short;

                                if (granted > p->cap_ppm)
                                        break;
                                if (req->uid != 0 && user_ppm + granted > p->config.max_utilization_per_user_ppm) {
                                        *over_quota = true;
                                        break;
                                }
                                if (plan_try_cpu(p, c, order[o], req, cand, budget, owner, &frame, &window_short) < 0) {
                                        if (window_short)
                                                continue;
                                        break;
                                }

                                memcpy(c->slots, p->scratch, frame * sizeof(uint32_t));
                                c->frame_slots = frame;
                                PlanEntry e = plan_entry_for_request(req, c->cpu, cand, budget,
                                                                     plan_kind_flags(req->kind));
                                plan_add_entry(p, &e);
                                if (ret_entry)
                                        *ret_entry = e;
                                return 0;
                        }
                }
        }
        return 1;
}

/* The per-user limits, before any placement: the count, and the least the
 * request could cost. */
static int check_user_limits(const Plan *p, const PlanRequest *req, uint32_t period, uint64_t user_ppm,
                             uint32_t user_count, char *why, size_t why_size) {
        uint32_t min_budget = ceil_div_ppm(period, req->utilization_ppm);
        char a[32], b[32];

        if (req->uid == 0)
                return 0;
        if (user_count >= p->config.max_reservations_per_user) {
                explain(why, why_size, "uid %u already holds %" PRIu32 " reservations, the per-user limit "
                        "(max_reservations_per_user)", (unsigned) req->uid, user_count);
                return PLAN_REFUSED_USER_LIMIT;
        }
        if (user_ppm + (uint64_t) min_budget * PPM / period > p->config.max_utilization_per_user_ppm) {
                explain(why, why_size, "uid %u already holds %s of CPU time; %s more would pass the per-user "
                        "limit of %s (max_utilization_per_user)", (unsigned) req->uid,
                        format_ppm(a, sizeof(a), (uint32_t) user_ppm),
                        format_ppm(b, sizeof(b), (uint32_t) ((uint64_t) min_budget * PPM / period)),
                        format_ppm((char[32]) {}, 32, p->config.max_utilization_per_user_ppm));
                return PLAN_REFUSED_USER_LIMIT;
        }
        return 0;
}

int plan_admit(Plan *p, const PlanRequest *req, PlanEntry *ret_entry, char *why, size_t why_size) {
        uint32_t order[PACE_MAX_CPUS], n_order, period = 0, user_count;
        bool over_quota = false;
        uint64_t user_ppm;
        int r;

        r = plan_validate(p, req, why, why_size);
        if (r != 0)
                return r;
        if (p->n_entries >= PACE_MAX_RESERVATIONS) {
                explain(why, why_size, "the broker holds %u reservations, its limit", PACE_MAX_RESERVATIONS);
                return PLAN_REFUSED_BROKER_LIMIT;
        }
        for (uint32_t i = 0; i < p->n_periods; i++)
                if ((uint64_t) p->periods[i] * p->config.slot_ns <= req->period_ns)
                        period = p->periods[i];
        user_ppm = user_granted_ppm(p, req->uid, &user_count);
        r = check_user_limits(p, req, period, user_ppm, user_count, why, why_size);
        if (r != 0)
                return r;

        n_order = placement_order(p, req, order);
        r = place_on_one_cpu(p, req, order, n_order, user_ppm, ret_entry, &over_quota);
        if (r <= 0)
                return r;
        /* No single CPU has room: split over several, if the client let us
         * choose and the pieces fit under the same rules. Not a server (its
         * budget is spent wherever its threads run, and pieces on other CPUs
         * could not know what is left) nor an aligned one (pieces are no
         * block). */
        if (req->kind == PLAN_KIND_SLOTS && req->cpu < 0 && n_order >= 2 &&
            p->n_entries + n_order <= PACE_MAX_RESERVATIONS) {
                r = plan_place_split(p, req, order, n_order, user_ppm, ret_entry, &over_quota);
                if (r <= 0)
                        return r;
        }
        bool unsplittable = req->kind != PLAN_KIND_SLOTS && req->cpu < 0 && n_order >= 2;
        return explain_no_room(p, req, unsplittable, over_quota, user_ppm, order, n_order, why, why_size);
}

int plan_clone(const Plan *p, Plan **ret) {
        _cleanup_(plan_freep) Plan *c = NULL;
        int r;

        r = plan_new(&p->config, &c);
        if (r < 0)
                return r;
        for (uint32_t i = 0; i < p->n_cpus; i++) {
                uint32_t *slots = c->cpus[i].slots;
                c->cpus[i] = p->cpus[i];
                c->cpus[i].slots = slots;
                memcpy(slots, p->cpus[i].slots, p->max_frame_slots * sizeof(uint32_t));
        }
        c->n_entries = p->n_entries;
        memcpy(c->entries, p->entries, p->n_entries * sizeof(PlanEntry));
        /* The same entries at the same places: the same index. */
        c->by_id = p->by_id;
        *ret = TAKE_PTR(c);
        return 0;
}

int plan_set_cpu_online(Plan *p, int32_t cpu, bool online) {
        int idx = cpu_index(p, cpu);
        if (idx < 0)
                return -ENODEV;
        p->cpus[idx].offline = !online;
        return 0;
}

bool plan_cpu_online(const Plan *p, int32_t cpu) {
        int idx = cpu_index(p, cpu);
        return idx >= 0 && !p->cpus[idx].offline;
}

/* Removes the entry at index i: its slots freed, the last entry moved into
 * its place, its CPU's frame shrunk to the lcm of what is left there. */
static void remove_entry(Plan *p, uint32_t i) {
        PlanCpu *c = &p->cpus[cpu_index(p, p->entries[i].cpu)];
        uint32_t last = p->n_entries - 1;

        for (uint32_t s = 0; s < c->frame_slots; s++)
                if (c->slots[s] == i + 1)
                        c->slots[s] = 0;

        /* Keep entries dense: the last one takes index i. */
        if (i != last) {
                PlanCpu *lc = &p->cpus[cpu_index(p, p->entries[last].cpu)];
                for (uint32_t s = 0; s < lc->frame_slots; s++)
                        if (lc->slots[s] == last + 1)
                                lc->slots[s] = i + 1;
                p->entries[i] = p->entries[last];
        }
        p->n_entries--;

        /* Each remaining pattern repeats with its own period, so the frame
         * can shrink to their lcm without moving a slot. Only a budget
         * server's charge does not shrink in proportion (it is rounded up
         * per frame): where the shorter frame would fail for that, the
         * longer one stays, which passed with more reserved. */
        uint32_t frame = 0;
        for (uint32_t j = 0; j < p->n_entries; j++)
                if (p->entries[j].cpu == c->cpu)
                        frame = lcm_u32(frame, p->entries[j].period_slots);
        if (frame > 0 && !plan_frame_ok(p, c->slots, frame, c->cpu, 0))
                frame = c->frame_slots;
        for (uint32_t s = frame; s < c->frame_slots; s++)
                c->slots[s] = 0;
        c->frame_slots = frame;
}

int plan_remove(Plan *p, uint64_t id) {
        bool found = false;

        for (uint32_t i = 0; i < p->n_entries;) {
                if (p->entries[i].id != id) {
                        i++;
                        continue;
                }
                remove_entry(p, i);
                found = true;
        }
        if (!found)
                return -ENOENT;
        /* remove_entry() moved the last entries into the gaps. */
        id_index_rebuild(&p->by_id, p->entries, p->n_entries, sizeof(PlanEntry), offsetof(PlanEntry, id));
        return 0;
}

bool plan_on_offline_cpu(const Plan *p, uint64_t id) {
        for (uint32_t i = 0; i < p->n_entries; i++)
                if (p->entries[i].id == id && p->cpus[cpu_index(p, p->entries[i].cpu)].offline)
                        return true;
        return false;
}

const PlanEntry *plan_find(const Plan *p, uint64_t id) {
        uint32_t i;

        return id_index_find(&p->by_id, id, &i) == 0 ? &p->entries[i] : NULL;
}

size_t plan_n_entries(const Plan *p) {
        return p->n_entries;
}

const PlanEntry *plan_entry(const Plan *p, size_t i) {
        return i < p->n_entries ? &p->entries[i] : NULL;
}

size_t plan_n_cpus(const Plan *p) {
        return p->n_cpus;
}

void plan_cpu_info(const Plan *p, size_t i, PlanCpuInfo *ret) {
        const PlanCpu *c = &p->cpus[i];
        uint32_t reserved = cpu_reserved_ppm(c);

        *ret = (PlanCpuInfo) {
                .cpu = c->cpu,
                .frame_slots = c->frame_slots,
                .reserved_ppm = reserved,
                .free_ppm = reserved < p->cap_ppm ? p->cap_ppm - reserved : 0,
                .switch_cost_ns = c->switch_cost_ns,
        };
}

int plan_charge_switch_cost(Plan *p, int32_t cpu, uint64_t measured_ns) {
        int i = cpu_index(p, cpu);

        if (i < 0)
                return -ENOENT;
        uint64_t charge = MAX(measured_ns, p->config.switch_cost_ns);
        if (p->cpus[i].switch_cost_ns == charge)
                return 0;
        p->cpus[i].switch_cost_ns = charge;
        return 1;
}

int plan_phase(const Plan *p, uint64_t id, uint32_t *ret_phase_slots) {
        uint32_t period = 0, owned_mask_len;
        bool found = false;

        for (uint32_t i = 0; i < p->n_entries; i++)
                if (p->entries[i].id == id) {
                        period = p->entries[i].period_slots;
                        found = true;
                }
        if (!found || period == 0)
                return -ENOENT;
        /* A server's windows start at multiples of its period: its budget
         * is there from that instant, whatever its slots look like. */
        const PlanEntry *e = plan_find(p, id);
        if (e->flags & PACE_RES_SERVER) {
                *ret_phase_slots = 0;
                return 0;
        }

        /* The frame is a multiple of the period and starts on a multiple of
         * the frame, so slot s of any frame sits at offset s % period of a
         * period; pieces on other CPUs fill in their own offsets. */
        owned_mask_len = period;
        _cleanup_free_ bool *owned = calloc(owned_mask_len, sizeof(bool));
        if (!owned)
                return -ENOMEM;
        for (uint32_t c = 0; c < p->n_cpus; c++) {
                const PlanCpu *pc = &p->cpus[c];
                for (uint32_t s = 0; s < pc->frame_slots; s++) {
                        uint32_t o = pc->slots[s];
                        if (o != 0 && p->entries[o - 1].id == id)
                                owned[s % period] = true;
                }
        }

        /* The longest cyclic run of unowned offsets; the allocation starts
         * right after it. */
        uint32_t best_len = 0, best_start = 0;
        for (uint32_t s = 0; s < period; s++) {
                if (owned[s] || !owned[(s + period - 1) % period])
                        continue;
                /* s starts a free run */
                uint32_t len = 0;
                while (len < period && !owned[(s + len) % period])
                        len++;
                if (len > best_len) {
                        best_len = len;
                        best_start = s;
                }
        }
        *ret_phase_slots = best_len == 0 ? 0 : (best_start + best_len) % period;
        return 0;
}

void plan_export(const Plan *p, PaceTableBuffer *out) {
        uint32_t next = 0;

        out->slot_ns = p->config.slot_ns;
        out->n_cpus = p->n_cpus;
        out->n_reservations = p->n_entries;
        for (uint32_t i = 0; i < p->n_cpus; i++) {
                const PlanCpu *c = &p->cpus[i];
                out->cpus[i] = (PaceTableCpu) {
                        .cpu = c->cpu,
                        .frame_slots = c->frame_slots,
                        .first_slot = next,
                };
                for (uint32_t s = 0; s < c->frame_slots; s++)
                        out->slots[next + s] = (uint16_t) c->slots[s];
                next += c->frame_slots;
        }
        out->n_slots = next;
        for (uint32_t i = 0; i < p->n_entries; i++) {
                const PlanEntry *e = &p->entries[i];
                out->reservations[i] = (PaceTableReservation) {
                        .id = e->id,
                        .pid = e->pid,
                        .uid = (uint32_t) e->uid,
                        .start_time = e->start_time,
                        .cpu = e->cpu,
                        .period_slots = e->period_slots,
                        .budget_slots = e->budget_slots,
                        .requested_period_ns = e->requested_period_ns,
                        .requested_utilization_ppm = e->requested_utilization_ppm,
                        .flags = e->flags,
                        .scope = e->scope,
                        .tid = e->tid,
                };
        }
}

int plan_restore(Plan *p, const PaceTableBuffer *old, const bool *keep) {
        uint32_t map[PACE_MAX_RESERVATIONS];

        if (p->n_entries != 0 || old->n_reservations > PACE_MAX_RESERVATIONS || old->n_cpus > PACE_MAX_CPUS)
                return -EINVAL;

        /* Entries first, so old indexes can be mapped to new ones. */
        for (uint32_t i = 0; i < old->n_reservations; i++) {
                const PaceTableReservation *r = &old->reservations[i];
                map[i] = 0;
                if (!keep[i] || cpu_index(p, r->cpu) < 0)
                        continue;
                plan_add_entry(p, &(PlanEntry) {
                        .id = r->id,
                        .pid = r->pid,
                        .start_time = r->start_time,
                        .uid = (uid_t) r->uid,
                        .cpu = r->cpu,
                        .requested_period_ns = r->requested_period_ns,
                        .requested_utilization_ppm = r->requested_utilization_ppm,
                        .period_slots = r->period_slots,
                        .budget_slots = r->budget_slots,
                        .flags = r->flags,
                        .scope = r->scope,
                        .tid = r->tid,
                });
                map[i] = p->n_entries;
        }

        /* The very same slots: a reservation adopted by a new broker must not
         * move, or a window spanning the switch could come up short. */
        for (uint32_t c = 0; c < old->n_cpus; c++) {
                const PaceTableCpu *oc = &old->cpus[c];
                int idx = cpu_index(p, oc->cpu);
                if (idx < 0 || oc->frame_slots > p->max_frame_slots)
                        continue;
                PlanCpu *pc = &p->cpus[idx];
                uint32_t frame = 0;
                for (uint32_t j = 0; j < p->n_entries; j++)
                        if (p->entries[j].cpu == pc->cpu)
                                frame = lcm_u32(frame, p->entries[j].period_slots);
                /* The lcm of what is kept, unless a budget server's charge,
                 * rounded per frame, fails at that length: then the frame
                 * the table had (as in remove_entry()). */
                for (int pass = 0; pass < 2; pass++) {
                        for (uint32_t s = 0; s < frame && frame <= oc->frame_slots; s++) {
                                uint16_t owner = old->slots[oc->first_slot + s];
                                pc->slots[s] = owner == PACE_SLOT_FREE || owner > old->n_reservations ? 0
                                                                                                       : map[owner - 1];
                        }
                        if (frame == 0 || frame == oc->frame_slots || frame > oc->frame_slots ||
                            plan_frame_ok(p, pc->slots, frame, pc->cpu, 0))
                                break;
                        frame = oc->frame_slots;
                }
                pc->frame_slots = frame;
        }
        return 0;
}
