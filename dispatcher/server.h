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
 * its period, aligned to the frame, its threads hold SCHED_FIFO 98 in its
 * own (backing) slots and 97 in other owners' slots while it has budget
 * left, so they run the moment they are runnable there (an owner's 98
 * preempts them: they only use its slot while it is idle). Free time stays
 * non-real-time work's (loop.c says why). The window-aligned replenishment
 * is a deferrable server's rule, whose known fault is back-to-back
 * execution (a budget spent at a window's end and a new one at the next
 * window's start) stealing lower priorities' time. Here it cannot: what
 * others are guaranteed is not a priority level but slots, which run above
 * the server, and free time, which it never takes; the sporadic server's
 * replenishment bookkeeping (paper 000's corrections) buys nothing on top
 * of that. */

#include <stdbool.h>
#include <stdint.h>

typedef struct ServerBudget {
        uint64_t window_end_ns; /* 0: no window yet */
        uint64_t usage_base;    /* the members' usage when the window began */
        uint64_t last_look_ns, last_usage;
        /* When the budget could next run out (or the window ends). */
        uint64_t next_look_ns;
        bool exhausted;
        /* The last look that found it holding a priority found it using
         * under half the time since the look before: it is not spinning,
         * and held back it runs little more (server_free_reserve()). */
        bool seen_idle;
} ServerBudget;

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

/* Free time, and how much of it servers may take.
 *
 * A free run is non-real-time work's by the table, and non_rt_max_gap
 * bounds how long that work may go without the CPU. A server may still
 * run in free time (a thread that wakes there runs at once instead of
 * waiting for a slot) as long as non-real-time work is sure to get the CPU
 * again in time: the loop keeps the last instant it surely had it, and
 * lets servers hold a priority in free time only up to the latest instant
 * after which enough free time is left before that instant plus the gap
 * (the reserve). The reserve covers what a server held back still runs:
 * demoted while runnable, a busy server runs on first for up to about 6 ms
 * (the lag EEVDF owes a task that waited, and a slice run to parity), so a
 * busy server's reserve is that much larger. In strict mode servers stay
 * out of free time (loop.c says why). What the servers took of each free run is measured afterwards,
 * so a reserve that fell short shows: the last turn does not advance, and
 * servers are held back in free time until it does. */

/* Non-real-time work's last sure turn, after a free interval [from, to)
 * of which the servers took taken_ns (held or not): the rest, less margin_ns
 * (the dispatcher's own wake-ups, interrupts), was non-real-time work's,
 * and ended no earlier than to - taken_ns - margin_ns. */
uint64_t server_free_turn(uint64_t last_turn_ns, uint64_t from, uint64_t to, uint64_t taken_ns, uint64_t margin_ns);

/* free[i] = { start, end }: the free intervals ahead, in order. The latest
 * instant x in [from, deadline) such that the free time in [x, deadline)
 * is at least reserve_ns, into *ret; false if there is none (servers must
 * leave free time alone from now on). */
bool server_free_take_until(const uint64_t (*free)[2], size_t n, uint64_t from, uint64_t deadline, uint64_t reserve_ns,
                            uint64_t *ret);
