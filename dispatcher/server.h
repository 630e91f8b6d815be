/* SPDX-License-Identifier: MIT */
#pragma once

/* The budget server's rules (PACE_RES_SERVER), pure: no system calls, unit
 * tested without privileges; the dispatch loop (loop.c) feeds them the
 * members' measured usage and acts on the answers.
 *
 * Why these rules. A reservation whose budget is spread over its period
 * (slots) makes a job that needs most of its budget finish near its
 * period's end; SCHED_DEADLINE's CBS hands the budget out the moment the job
 * arrives. A server does the same within a slot table: in each window of
 * its period, aligned to the frame, its threads hold SCHED_FIFO 97 while it
 * has budget left, so they run the moment they are runnable wherever no
 * owner's SCHED_FIFO 98 runs; in its own (backing) slots it holds 98. The
 * window-aligned replenishment is a deferrable server's rule, whose known
 * fault is back-to-back execution (a budget spent at a window's end and a
 * new one at the next window's start) stealing lower priorities' time. Here
 * it cannot: what others are guaranteed is not a priority level but slots —
 * an owner's slots run at 98 above the server, and free time is taken only
 * as far as non_rt_max_gap allows (server_may_take_free()) and only as much
 * as the server's own backing slots, which it then leaves free, give back
 * within the same window. So in every window of its period the free time is
 * at least the table's, and every owner still gets its slots; the sporadic
 * server's replenishment bookkeeping (paper 000's corrections) buys nothing
 * on top of that. */

#include <stdbool.h>
#include <stdint.h>

typedef struct ServerBudget {
        uint64_t window_end_ns; /* 0: no window yet */
        uint64_t usage_base;    /* the members' usage when the window began */
        uint64_t last_look_ns, last_usage;
        /* When the budget could next run out (or the window ends). */
        uint64_t next_look_ns;
        bool exhausted;
} ServerBudget;

/* Of a free run a server held but did not use up, this much is taken to
 * have gone to the dispatcher and interrupts rather than to non-real-time
 * work (the dispatcher's own wake-ups in a run cost tens of us each): only
 * what is left beyond it counts as non-real-time work's turn. */
#define SERVER_FREE_MARGIN_NS 250000ull

/* Below this much budget left, the server counts as spent: a look for less
 * would cost more than it saves. */
#define SERVER_BUDGET_FLOOR_NS 50000ull

/* A look at time now_ns, with the members' total usage so far. Windows are
 * window_ns long and aligned to multiples of it on CLOCK_MONOTONIC (the
 * frame's grid); the first look in a window replenishes the budget. Returns
 * whether budget is left, and sets b->next_look_ns: the instant the rest
 * would run out if the members ran from now on without a break — so a busy
 * server is demoted as it runs out, not a look later — but never sooner
 * than min_look_ns from now if the members held a priority since the last
 * look (held) and ran less than half of that time: an idle server is looked
 * at once a slot at most, and can then overrun by less than min_look_ns.
 * One that was held back (demoted: it could not have run) may run from now
 * on, so it gets the exact instant. Never past the window's end. */
bool server_budget_look(ServerBudget *b, uint64_t now_ns, uint64_t window_ns, uint64_t budget_ns, uint64_t usage,
                        bool held, uint64_t min_look_ns);

/* Whether a server may run in a free stretch that begins at or after
 * last_free_end_ns (the end of the last free time left to non-real-time
 * work) when the next free stretch after it begins at next_free_ns: only if
 * non-real-time work then waits at most max_gap_ns. */
bool server_may_take_free(uint64_t last_free_end_ns, uint64_t next_free_ns, uint64_t max_gap_ns);
