/* SPDX-License-Identifier: MIT */
#pragma once

/* What a reservation received, period by period, and the figures the broker
 * shows in `pacectl status` (through the stats file, pace-stats.h). Pure
 * arithmetic plus the stats entry's seqlock: unit tested without
 * privileges; the dispatch loop feeds it the usage it reads. */

#include <stdbool.h>
#include <stdint.h>

#include "pace-stats.h"

typedef struct Acct {
        bool started;
        uint64_t base;         /* usage when accounting began */
        uint64_t period_start; /* usage at the start of the current period */
        uint64_t win_usage, win_ns; /* usage and time at the start of the window */
        uint64_t periods, blocked, wanted_more;
        uint64_t window_ns, delivered_ns; /* the last whole window */
} Acct;

/* The end of a period at time now_ns with the members' total usage_ns so
 * far. A period counts as blocked when it used under 95% of budget_ns (the
 * switches themselves take some of every run), as wanted-more when the
 * members still wanted the CPU at its end (acct_ran_through()). Every window_min_ns or so, the
 * delivered figure over whole periods is renewed. The first call only
 * starts the count. */
void acct_period_end(Acct *a, uint64_t usage_ns, uint64_t now_ns, uint64_t budget_ns, bool runnable,
                     uint64_t window_min_ns);

/* Whether the members ran through the whole of a run: from its start at
 * from_ns, when their usage was usage_from, to to_ns, when it was usage_to,
 * they missed at most an eighth of it (at least 100 us: the promotion, the
 * loop's early wake-up before the next change, interrupts). One CPU's run:
 * the members cannot have used more than its length. Tells a client that
 * was still runnable when its period's last run ended from one that
 * blocked, from usage alone: reading a thread's state (/proc/TID/stat) can
 * wait on a lock its starved owner holds (README.md, "What runs at
 * SCHED_FIFO 99"). */
bool acct_ran_through(uint64_t usage_from, uint64_t usage_to, uint64_t from_ns, uint64_t to_ns);

/* Whether a run of run_ns should be skipped because the members already
 * had their budget_ns in the current period, counting what they took
 * while waiting (usage_ns: their total so far). Used where nothing holds
 * waiting members down (no cpu weight for their group): many nice-19
 * threads otherwise take a visible part of the free time on top of their
 * runs. A run is skipped when less than half of it is left, so the
 * rounding errs both ways by at most half a run and does not add up.
 * Never before the first period end (nothing to count from). */
bool acct_budget_spent(const Acct *a, uint64_t usage_ns, uint64_t budget_ns, uint64_t run_ns);

/* Writes a's figures to e (under its seqlock). */
void acct_publish(const Acct *a, uint32_t threads, uint64_t usage_ns, uint64_t now_ns, PaceStatsEntry *e);
