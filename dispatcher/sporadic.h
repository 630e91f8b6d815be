/* SPDX-License-Identifier: MIT */
#pragma once

/* Sporadic-server replenishment (issue 27; paper 000, §3), pure: no system
 * calls, property tested without privileges (tests/unit/test-sporadic.c).
 * Not yet what the dispatch loop uses: server.h's window rule still is.
 * Wired in (branch wip/sporadic-loop), a spinning 30%-of-50-ms server in
 * strict mode got 28.6-28.8% where the window rule gives 29.96-29.98%
 * (issue 27's sixth-stop note says why), so the loop keeps the window
 * rule until it does not cost servers their budget.
 *
 * Why. A server whose whole budget comes back at each multiple of its
 * period (a deferrable server) can run a budget at a window's end and the
 * next at the following window's start: twice its budget in one period's
 * length, and its response is tied to the grid, not to when work arrives.
 * A sporadic server gives back what it used one period after the instant it
 * began to use it, so in every window of one period it has at most its
 * budget (the sliding-window constraint), and work that arrives while it
 * has budget runs at once.
 *
 * How the dispatch loop feeds it: at each look, what the members ran since
 * the last one, and whether they still want to run (busy). What comes back
 * when is decided per run, a stretch the members ran without a break: a
 * run's time comes back one period after the run began. A run's whole time
 * may come back at its start plus a period only because it ran without a
 * break (it cannot use it again faster than it used it); time run in
 * pieces, around an owner's slots above it, would let a server run a
 * budget late in one window and again early in the next, so a look that
 * finds the members ran less than the whole interval starts a new run.
 * The loop knows neither where in an interval such a piece ran, so it is
 * taken to have run at the latest it can have (ending at the look): its
 * time comes back no earlier than it would at its true place, which only
 * ever delays budget. Property tested: in every window of one period the
 * members run at most the budget, whoever preempts them.
 *
 * An activation is a stretch in which the members use budget until they
 * stop or it is spent: a promotion, and its switches. Replenishments
 * pending are at most `limit` (max_repl at most): a new activation does not
 * begin while `limit` are pending, and the runs of one activation share its
 * entries once there is no room (a later run's entry takes in the one
 * before, at the later time), so each activation holds at least one entry
 * for a period and a server causes at most `limit` activations, and twice
 * as many switches, in any window of one period.
 *
 * Under overload (paper 000, §3.3): when the budget runs out while the
 * members still want to run, and it is in the limit's worth of pieces
 * (fragmentation locked in), the two earliest pending replenishments are
 * coalesced into the later one's time and the limit drops by one, so a
 * burst of tiny jobs ends up served in fewer, longer runs (polling-like as
 * far as the pieces stay locked in), instead of spending the budget on
 * switches. When the server stops by itself with budget left (light load),
 * the limit is max_repl again. Coalescing only moves budget later, so the
 * constraint holds across the change. A budget in fewer pieces than the
 * limit is not coalesced: those are runs that others' slots cut, and
 * joining them only delays budget (a spinner served in 6 of every 10 ms
 * got 21.6% of a 30% grant when every overload coalesced).
 *
 * Each activation can be charged a fixed cost (the switches it causes,
 * paper 000, §3.1): taken from its budget at its start and given back with
 * its replenishment, so a server of many short activations runs less, and
 * the others on its CPU never pay for its switches. */

#include <stdbool.h>
#include <stdint.h>

#define SPORADIC_MAX_REPL 16u

/* Below this much capacity the server counts as spent: a promotion for
 * less would cost about as much as it gives (server.h's floor). */
#define SPORADIC_FLOOR_NS 50000ull

typedef struct SporadicRepl {
        uint64_t at_ns, amount_ns;
} SporadicRepl;

typedef struct Sporadic {
        uint64_t period_ns, budget_ns, activation_cost_ns;
        uint32_t max_repl, limit;
        /* Pending replenishments, earliest first. */
        SporadicRepl repl[SPORADIC_MAX_REPL];
        uint32_t n_repl;
        /* What may be used now; below zero after an overrun (the loop
         * demotes at a look, so the members may run a little past it),
         * which later replenishments pay off first. */
        int64_t capacity_ns;
        uint64_t last_look_ns;
        bool looked;
        /* The activation under way, and the run under way in it: since
         * when, and what it used; how many entries its runs posted. */
        bool active, run_open;
        uint64_t run_since_ns, run_used_ns;
        uint32_t active_entries;
        /* Counters, for stats and tests. */
        uint64_t activations, overloads;
} Sporadic;

/* A server of budget_ns in every period_ns, with at most max_repl (1 to
 * SPORADIC_MAX_REPL) pending replenishments, each activation charged
 * activation_cost_ns. Starts with its whole budget. -EINVAL if the budget
 * is zero or over the period, or max_repl out of range. */
int sporadic_init(Sporadic *s, uint64_t period_ns, uint64_t budget_ns, uint32_t max_repl,
                  uint64_t activation_cost_ns);

/* A look at now_ns (never earlier than the last): the members ran used_ns
 * since the last look, and busy tells whether they were still running or
 * runnable at its end. Charges what ran, ends the activation if they
 * stopped or the budget ran out, gives back what is due by now_ns, and
 * returns the capacity the members may use from now on: 0 when spent (below
 * SPORADIC_FLOOR_NS), or when a new activation may not begin yet (limit
 * pending, or capacity still owed after an overrun). */
uint64_t sporadic_look(Sporadic *s, uint64_t now_ns, uint64_t used_ns, bool busy);

/* When the capacity next grows: the earliest pending replenishment, or
 * UINT64_MAX if none is pending. A spent server is looked at then. */
uint64_t sporadic_next_replenishment(const Sporadic *s);
