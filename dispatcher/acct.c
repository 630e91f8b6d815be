/* SPDX-License-Identifier: MIT */
#include "acct.h"
#include "macro.h"
#include "stats-seqlock.h"

#define ACCT_RAN_THROUGH_SLACK_NS 100000ull

void acct_period_end(Acct *a, uint64_t usage_ns, uint64_t now_ns, uint64_t budget_ns, bool runnable,
                     uint64_t window_min_ns) {
        if (!a->started) {
                a->started = true;
                a->base = a->period_start = a->win_usage = usage_ns;
                a->win_ns = now_ns;
                return;
        }
        uint64_t used = usage_ns - a->period_start;
        a->periods++;
        if (used * 20 < budget_ns * 19)
                a->blocked++;
        if (runnable)
                a->wanted_more++;
        a->period_start = usage_ns;
        /* Whole periods of at least window_min_ns: /proc/PID/stat counts in
         * 10 ms units, so an independent check over a shorter window could
         * not tell a point. */
        if (now_ns - a->win_ns >= window_min_ns) {
                a->window_ns = now_ns - a->win_ns;
                a->delivered_ns = usage_ns - a->win_usage;
                a->win_ns = now_ns;
                a->win_usage = usage_ns;
        }
}

bool acct_ran_through(uint64_t usage_from, uint64_t usage_to, uint64_t from_ns, uint64_t to_ns) {
        if (to_ns <= from_ns || usage_to < usage_from)
                return false;
        uint64_t elapsed = to_ns - from_ns, ran = usage_to - usage_from;
        uint64_t slack = MAX(elapsed / 8, ACCT_RAN_THROUGH_SLACK_NS);
        return ran + slack >= elapsed;
}

bool acct_budget_spent(const Acct *a, uint64_t usage_ns, uint64_t budget_ns, uint64_t run_ns) {
        if (!a->started || usage_ns < a->period_start)
                return false;
        uint64_t used = usage_ns - a->period_start;
        return used >= budget_ns || budget_ns - used < run_ns / 2;
}

void acct_publish(const Acct *a, uint32_t threads, uint64_t usage_ns, uint64_t now_ns, PaceStatsEntry *e) {
        stats_entry_write_begin(e);
        e->threads = threads;
        e->cpu_time_ns = usage_ns - a->base;
        e->window_ns = a->window_ns;
        e->delivered_ns = a->delivered_ns;
        e->periods = a->periods;
        e->periods_blocked = a->blocked;
        e->periods_wanted_more = a->wanted_more;
        e->updated_ns = now_ns;
        stats_entry_write_end(e);
}
