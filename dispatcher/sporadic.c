/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <string.h>

#include "macro.h"
#include "sporadic.h"

int sporadic_init(Sporadic *s, uint64_t period_ns, uint64_t budget_ns, uint32_t max_repl,
                  uint64_t activation_cost_ns) {
        if (budget_ns == 0 || budget_ns > period_ns || budget_ns > INT64_MAX || max_repl == 0 ||
            max_repl > SPORADIC_MAX_REPL || activation_cost_ns >= budget_ns)
                return -EINVAL;
        *s = (Sporadic) {
                .period_ns = period_ns,
                .budget_ns = budget_ns,
                .activation_cost_ns = activation_cost_ns,
                .max_repl = max_repl,
                .limit = max_repl,
                .capacity_ns = (int64_t) budget_ns,
        };
        return 0;
}

static bool spent(const Sporadic *s) {
        return s->capacity_ns < (int64_t) SPORADIC_FLOOR_NS;
}

/* The activation's own entries are the newest: when the earliest goes,
 * they are at most what is left. */
static void repl_remove_first(Sporadic *s) {
        s->n_repl--;
        memmove(&s->repl[0], &s->repl[1], s->n_repl * sizeof(s->repl[0]));
        s->active_entries = MIN(s->active_entries, s->n_repl);
}

/* The earliest pending replenishment joins the next one, at the next one's
 * (later) time: budget only ever moves later. */
static void repl_coalesce_first_two(Sporadic *s) {
        s->repl[1].amount_ns += s->repl[0].amount_ns;
        repl_remove_first(s);
}

/* Room for one more entry: the runs of the activation under way share its
 * newest entry (at the later time) once the limit's worth are pending;
 * beyond that (the limit lowered under overload), the earliest two join. */
static void repl_make_room(Sporadic *s, uint64_t *amount_ns) {
        while (s->n_repl >= s->limit) {
                if (s->active_entries > 0) {
                        *amount_ns += s->repl[s->n_repl - 1].amount_ns;
                        s->n_repl--;
                        s->active_entries--;
                } else if (s->n_repl >= 2)
                        repl_coalesce_first_two(s);
                else {
                        *amount_ns += s->repl[0].amount_ns;
                        repl_remove_first(s);
                }
        }
}

/* The open run's time comes back one period after it began. Runs begin in
 * order, so its entry is the latest. */
static void run_close(Sporadic *s) {
        uint64_t amount = s->run_used_ns;

        if (!s->run_open)
                return;
        s->run_open = false;
        repl_make_room(s, &amount);
        s->repl[s->n_repl++] = (SporadicRepl) { .at_ns = s->run_since_ns + s->period_ns, .amount_ns = amount };
        s->active_entries++;
}

static void sporadic_charge(Sporadic *s, uint64_t now_ns, uint64_t used_ns) {
        uint64_t interval = s->looked ? now_ns - s->last_look_ns : used_ns;

        if (used_ns == 0) {
                run_close(s);
                return;
        }
        used_ns = MIN(used_ns, (uint64_t) INT64_MAX / 4);
        uint64_t charged = used_ns;
        if (!s->active) {
                s->active = true;
                s->active_entries = 0;
                s->activations++;
                charged += s->activation_cost_ns;
        }
        /* Ran the whole interval after a run that reached the last look:
         * the same run. Otherwise a new one, placed as late as it can
         * have been: ending now; or, if it ran the whole interval, from
         * its start. "Whole" allows a sixteenth for what the dispatcher's
         * own wake-up and a thaw at a look took from it (55-150 us of a
         * 1 ms slot here): without it a server spinning through three
         * slots in a row made three runs of them, and each run's time came
         * back that much later every period, drifting across the slots
         * and breaking into ever smaller pieces (a spinner got 28.4% of a
         * 30% grant). */
        bool whole = used_ns + interval / 16 >= interval;
        if (!(s->run_open && whole)) {
                run_close(s);
                s->run_open = true;
                s->run_since_ns = now_ns - MIN(now_ns, whole ? MAX(interval, used_ns) : used_ns);
                s->run_used_ns = 0;
        }
        s->run_used_ns += charged;
        s->capacity_ns -= (int64_t) charged;
}

static void sporadic_end_activation(Sporadic *s, bool busy) {
        /* Overload: out of budget with work pending, and the budget in
         * pieces too small to be worth a promotion each (under an even
         * share of max_repl): fragmentation locked in (paper 000 §3.3).
         * Pieces a busy server's runs are cut into by others' slots are
         * larger: coalescing those only delays budget (a spinner served
         * in 6 of every 10 ms got 20-22% of a 30% grant so). */
        if (busy && spent(s) && s->n_repl >= 2 && s->repl[0].amount_ns < s->budget_ns / s->max_repl) {
                s->overloads++;
                if (s->limit > 1)
                        s->limit--;
                repl_coalesce_first_two(s);
        } else if (!busy && !spent(s))
                /* Stopped by itself with budget left: light load. */
                s->limit = s->max_repl;
        run_close(s);
        s->active = false;
        s->active_entries = 0;
}

uint64_t sporadic_look(Sporadic *s, uint64_t now_ns, uint64_t used_ns, bool busy) {
        sporadic_charge(s, now_ns, used_ns);
        s->last_look_ns = now_ns;
        s->looked = true;
        if (s->active && (!busy || spent(s)))
                sporadic_end_activation(s, busy);
        while (s->n_repl > 0 && s->repl[0].at_ns <= now_ns) {
                s->capacity_ns += (int64_t) s->repl[0].amount_ns;
                repl_remove_first(s);
        }
        if (spent(s))
                return 0;
        /* A new activation waits for a pending replenishment to come due
         * while the limit's worth are pending. */
        if (!s->active && s->n_repl >= s->limit)
                return 0;
        return (uint64_t) s->capacity_ns;
}

uint64_t sporadic_next_replenishment(const Sporadic *s) {
        return s->n_repl > 0 ? s->repl[0].at_ns : UINT64_MAX;
}
