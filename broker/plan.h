/* SPDX-License-Identifier: MIT */
#pragma once

/* Admission control and table building. Pure computation: no I/O, no logging,
 * no clocks; the broker and the tests drive it.
 *
 * Why the table is built the way it is (README.md, "The dispatch table"):
 *  - Periods are rounded down to a divisor of the longest frame (max_frame_ms
 *    in slots; the default 1200 ms is divisible by 50, 40, 30, 25, 20, 16, 10,
 *    8, 5 ... ms), so every CPU's frame is the lcm of its periods and never
 *    longer than max_frame.
 *  - A reservation's slots repeat with its granted period, so every window of
 *    that period holds exactly the budget (invariant 1 asks for "every window",
 *    and with an exact grant that is only possible if the pattern is periodic).
 *  - Admitted reservations never move. A new one only takes free slots, so a
 *    table swap at any frame boundary cannot shorten anyone's window.
 *  - The new reservation's slots are chosen by scheduling it, slot by slot
 *    through one of its periods, against a non-real-time server (period G,
 *    budget Gq, derived from non_rt_share and non_rt_max_gap_ms) under EDF or
 *    RM. That spreads the free time so non-RT work never waits long.
 *  - The result is checked exactly (common/table-check.c) before it is
 *    accepted: free share after the dispatcher's switch costs, longest busy
 *    run, the client's supply in every window of its *requested* period. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "config.h"
#include "pace-table.h"

typedef struct Plan Plan;

/* What kind of reservation (pace.proto's Kind, less its "unspecified"):
 *  - slots: the budget spread over the period, as the builder below lays it
 *    out (the default: zero-initialised requests get it);
 *  - server: a budget server (PACE_RES_SERVER). Its slots are laid out as a
 *    slots reservation's and back it; the dispatcher runs it whenever it has
 *    budget left in the window, which costs switches that admission charges
 *    (frame_server_switches()). Never split over CPUs: its budget is spent
 *    wherever its threads run;
 *  - aligned (PACE_RES_ALIGNED): the budget in one block from the start of
 *    each window of its period (its phase), broken only where non_rt_max_gap
 *    forces a free slot, for clients that wait for their allocation. Never
 *    split either: pieces on several CPUs are no block. */
typedef enum PlanKind {
        PLAN_KIND_SLOTS = 0,
        PLAN_KIND_SERVER = 1,
        PLAN_KIND_ALIGNED = 2,
} PlanKind;

/* The table flags of a kind, and the kind of an entry's flags. */
uint32_t plan_kind_flags(PlanKind kind);
PlanKind plan_flags_kind(uint32_t flags);
/* "slots", "server" or "aligned". */
const char *plan_kind_name(PlanKind kind);

typedef struct PlanRequest {
        uint64_t id;
        pid_t pid;
        uint64_t start_time;
        uid_t uid;
        uint64_t period_ns;
        uint32_t utilization_ppm;
        int32_t cpu; /* -1: any managed CPU */
        uint32_t scope; /* PACE_SCOPE_*: carried into the table */
        pid_t tid;
        /* The CPUs the target may run on (its affinity, which the broker
         * reads from the kernel, never from the message), bit n for CPU n.
         * Placement, the named CPU and every piece of a split stay within
         * them: the dispatcher pins a reserved thread to its CPU, and a CPU
         * its owner ruled out must not be forced on it. 0: no restriction
         * (a request with no process behind it). */
        uint64_t allowed_cpus;
        PlanKind kind;
        /* Granted on behalf of another process (a delegate's request):
         * carried as PACE_RES_ON_BEHALF in the entry's flags and so into
         * the table, where a restarted broker finds it again. Admission
         * does not look at it. */
        bool on_behalf;
} PlanRequest;

typedef struct PlanEntry {
        uint64_t id;
        pid_t pid;
        uint64_t start_time;
        uid_t uid;
        int32_t cpu;
        uint64_t requested_period_ns;
        uint32_t requested_utilization_ppm;
        uint32_t period_slots;
        uint32_t budget_slots;
        /* PACE_RES_PIECE: one piece of a reservation split over CPUs; the
         * pieces share the id and each has its CPU and part of the budget.
         * PACE_RES_SERVER, PACE_RES_ALIGNED: its kind (plan_flags_kind()).
         * PACE_RES_ON_BEHALF: PlanRequest.on_behalf. */
        uint32_t flags;
        uint32_t scope;
        pid_t tid;
} PlanEntry;

typedef struct PlanCpuInfo {
        int32_t cpu;
        uint32_t frame_slots;
        uint32_t reserved_ppm; /* owned slots / frame */
        uint32_t free_ppm;     /* what could still be asked for, before rounding */
        uint64_t switch_cost_ns; /* what admission charges a switch here */
} PlanCpuInfo;

/* config->cpus must already list the managed CPUs. */
int plan_new(const PaceConfig *config, Plan **ret);
Plan *plan_free(Plan *p);
static inline void plan_freep(Plan **p) {
        plan_free(*p);
}

/* Why the planner said no. Positive, so that a negative errno keeps its one
 * meaning (the planner failed: -ENOMEM) and a refusal is never mistaken for
 * one, nor one for a refusal; the broker maps each to the protocol's
 * ErrorCode. */
typedef enum PlanRefusal {
        PLAN_REFUSED_RANGE = 1,    /* period or utilization outside what the configuration allows */
        PLAN_REFUSED_CPU,          /* the CPU asked for is not managed, offline or outside allowed_cpus;
                                    * or no managed (online) CPU is in allowed_cpus */
        PLAN_REFUSED_USER_LIMIT,   /* a per-user limit */
        PLAN_REFUSED_BROKER_LIMIT, /* the broker-wide reservation limit */
        PLAN_REFUSED_NO_ROOM,      /* not enough free time (or no placement that keeps the guarantees) */
} PlanRefusal;

/* Admits the request or leaves the plan untouched: on one CPU if any has
 * room, else (when the request names no CPU, and for the slots kind only)
 * split into pieces on several CPUs whose slots never coincide. A split
 * grant comes back as one entry with the whole budget and the first piece's
 * CPU. Every budget server on a CPU is charged frame_server_switches() at
 * the CPU's (possibly grown) frame, the sum table_check() adds.
 * Returns 0, a PlanRefusal (positive, with a sentence in why[] that says
 * what to change), or a negative errno when the planner itself failed. */
int plan_admit(Plan *p, const PlanRequest *req, PlanEntry *ret_entry, char *why, size_t why_size);

/* The checks of plan_admit() that need no placement: period, utilization
 * and CPU within what the configuration and allowed_cpus allow. 0 or a
 * PlanRefusal, as plan_admit(). */
int plan_validate(const Plan *p, const PlanRequest *req, char *why, size_t why_size);

/* A deep copy, for changes that must be all or nothing. */
int plan_clone(const Plan *p, Plan **ret);

/* CPUs that went offline take no new reservations; their reservations are
 * the caller's to move (plan_admit elsewhere) or drop. */
int plan_set_cpu_online(Plan *p, int32_t cpu, bool online);
bool plan_cpu_online(const Plan *p, int32_t cpu);

/* Removes the reservation (all its pieces). -ENOENT if no such id. */
int plan_remove(Plan *p, uint64_t id);

/* Whether any piece of the reservation lives on an offline CPU. */
bool plan_on_offline_cpu(const Plan *p, uint64_t id);

/* The first entry of the reservation (of a split one, its first piece, as
 * plan_entry() orders them), or NULL; by an index, not a scan: the broker
 * asks once per reservation in loops over all of them. */
const PlanEntry *plan_find(const Plan *p, uint64_t id);
size_t plan_n_entries(const Plan *p);
const PlanEntry *plan_entry(const Plan *p, size_t i);
size_t plan_n_cpus(const Plan *p);
void plan_cpu_info(const Plan *p, size_t i, PlanCpuInfo *ret);
/* Admission on cpu charges a switch measured_ns from now on, or
 * switch_cost_us where that is more: 1 if the charge changed, 0 if not,
 * -ENOENT for a CPU not managed. Grants in force stay; a CPU whose frame
 * no longer keeps the free share at the new charge takes nothing new until
 * enough is released. */
int plan_charge_switch_cost(Plan *p, int32_t cpu, uint64_t measured_ns);

/* Takes over the reservations of a table published earlier (by a broker that
 * has since died) whose keep[] is true, in exactly the slots they had. The
 * table must have passed table_check(); the plan must be empty. Callers
 * check the result with table_check() again. */
int plan_restore(Plan *p, const PaceTableBuffer *old, const bool *keep);

/* Writes the whole plan into a (zeroed) table buffer. */
void plan_export(const Plan *p, PaceTableBuffer *out);

/* Where the reservation's allocations start: the offset, in slots from a
 * multiple of its period on the global grid, of the first slot after its
 * longest stretch without any (over all its pieces). For an aligned
 * reservation that is the start of its block (the builder keeps the stretch
 * after the block longer than any gap-forced break in it); for a server, 0:
 * its windows are aligned to the frame, and its budget is replenished at
 * their start. -ENOENT: no such id. */
int plan_phase(const Plan *p, uint64_t id, uint32_t *ret_phase_slots);

/* The non-real-time server the builder schedules against. */
void plan_server(const Plan *p, uint32_t *ret_period_slots, uint32_t *ret_budget_slots);

/* Least CPU time `owner` receives in any window of window_ns (any real start,
 * not only slot boundaries) of the cyclic frame. */
uint64_t frame_min_supply_ns(const uint32_t *slots, uint32_t frame_slots, uint32_t owner, uint64_t slot_ns,
                             uint64_t window_ns);
