/* SPDX-License-Identifier: MIT */
/* One CPU's dispatch loop, at SCHED_FIFO 99. It only executes the plan the
 * main thread made (keeper.c); everything that looks anything up is done
 * there, at SCHED_OTHER (../shared/notes/realtime-path.md; README.md, "What
 * runs at SCHED_FIFO 99"). The system calls this thread makes, all of them,
 * and why:
 * - clock_nanosleep, clock_gettime (vDSO): sleeping to each change of owner;
 * - futex (FUTEX_WAIT on a private word): sleeping while idle, and inside
 *   the log ring's priority-inheritance mutex (log-ring.c);
 * - sched_setattr, sched_getaffinity, sched_setaffinity on the registered
 *   threads' ids: the promotions and demotions themselves (held-run.c);
 * - ppoll and poll of pidfds opened by the main thread: that a process or a
 *   thread is still the one registered, before its id is used;
 * - pread of /proc schedstat and cgroup accounting files and pwrite of
 *   freezer files, through descriptors opened by the main thread: usage
 *   (never a thread's stat: it can wait on a lock a starved exec holds),
 *   strict mode;
 * - write to two eventfds: the main thread's (threads came or went) and the
 *   monitor's (this loop left its idle sleep, stall.h);
 * - clock_gettime(CLOCK_THREAD_CPUTIME_ID), once every 2 s of dispatching:
 *   what a change of owner costs this thread, for the broker's admission
 *   (loop_count_change()).
 * No path is opened or looked up, nothing is allocated or freed, no lock is
 * taken that a lower thread holds without priority inheritance, and the
 * work per change is bounded by max_threads_per_reservation. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "loop-internal.h"
#include "loop.h"
#include "macro.h"
#include "pace-limits.h"
#include "sched-util.h"
#include "stats-file.h"
#include "time-util.h"

/* The delivered figure covers whole periods of at least this long. */
#define ACCT_WINDOW_NS (2 * NSEC_PER_SEC)
static void on_kick(int sig) {
}

/* A dispatch thread never writes to the log itself (log-ring.h). */
void loop_log(CpuLoop *l, int priority, const char *fmt, ...) {
        va_list ap;

        va_start(ap, fmt);
        (void) log_ring_pushv(l->shared->log, priority, fmt, ap);
        va_end(ap);
}

static long futex_private(_Atomic uint32_t *word, int op, uint32_t val) {
        return syscall(SYS_futex, word, op | FUTEX_PRIVATE_FLAG, val, NULL, NULL, 0);
}

/* Called where a new configuration may take over: at a frame boundary or
 * while idle, so no window is validated against two configurations. */
static void loop_sync_config(CpuLoop *l) {
        LoopShared *s = l->shared;
        uint64_t gen = atomic_load(&s->config_gen);

        if (gen == l->config_gen)
                return;
        l->config = &s->configs[atomic_load(&s->config_live)];
        l->config_gen = gen;
        atomic_store(&l->acked_config, gen);
}

/* Test hook (SIGUSR2 with test hooks on): blocks forever in place without
 * spinning, like a deadlocked loop, and without ever bumping beats. Taken
 * right after a promotion (or while idle), so the owner of the slot stays
 * at SCHED_FIFO 98: the case the watchdog exists for. */
static void loop_maybe_hang(CpuLoop *l) {
        switch (atomic_load_explicit(&l->hang, memory_order_relaxed)) {
        case LOOP_HANG_WEDGE:
                stall_slot_due(l->stall, STALL_IDLE);
                for (;;)
                        (void) futex_private(&l->shared->hang_word, FUTEX_WAIT, atomic_load(&l->shared->hang_word));
        case LOOP_HANG_SPIN:
                for (;;)
                        atomic_signal_fence(memory_order_seq_cst);
        default:
                return;
        }
}

/* The start of the run that closes h's period, at the change t, read a few
 * us before it (its members wait and cannot run on this CPU while this
 * thread does): their usage so far, so that the period's end can tell
 * whether they ran through the run (loop_period_end()). promoted: the run
 * is theirs; false when it is skipped because the period's budget is
 * already spent. A server's periods are told apart by its own budget.
 * read_usage: their usage already read at this change (UINT64_MAX: none). */
static void loop_close_begins(CpuLoop *l, Held *h, uint64_t t, bool promoted, uint64_t read_usage) {
        uint64_t u = read_usage;

        h->close = promoted ? HELD_CLOSE_UNKNOWN : HELD_CLOSE_SKIPPED;
        if (!promoted || h->server || !h->stats || !h->acct.started ||
            (u == UINT64_MAX && held_usage_ns(h, &l->ctx, &u) < 0))
                return;
        h->close_from_ns = t;
        h->close_from_usage = u;
        h->close = HELD_CLOSE_READ;
}

/* The end of the owner's period (its closing run just ended, it is not yet
 * demoted): what it used in the period, whether it still wanted the CPU,
 * and every second or so a delivered figure over whole periods. Whether it
 * wanted more comes from usage alone, never from a thread's state: a
 * server that spent its window's budget, a slots reservation whose closing
 * run was skipped (its budget spent while waiting) or that ran through it. */
static void loop_period_end(CpuLoop *l, Held *h, uint64_t t) {
        uint64_t u;

        if (h->gone || !h->stats || held_usage_ns(h, &l->ctx, &u) < 0)
                return;
        bool counted = h->acct.started, wanted;
        if (h->server)
                wanted = h->srv.exhausted;
        else
                wanted = h->close == HELD_CLOSE_SKIPPED ||
                         (h->close == HELD_CLOSE_READ &&
                          acct_ran_through(h->close_from_usage, u, h->close_from_ns, monotonic_ns()));
        h->close = HELD_CLOSE_UNKNOWN;
        acct_period_end(&h->acct, u, t, (uint64_t) h->budget_slots * l->config->slot_ns, counted && wanted,
                        ACCT_WINDOW_NS);
        if (counted)
                stats_file_publish(h->stats, &h->acct, (uint32_t) h->n_threads, u, t);
}

/* Takes the plan waiting for this loop, if any: the runs, the grants into
 * the Helds (the loop's own fields), and the budget servers. What the last
 * plan held and this one does not is the main thread's to restore and
 * free once it sees the switch; the caller has demoted whoever this loop
 * promoted. Returns 1 if a new plan is in force. */
static int loop_take_plan(CpuLoop *l) {
        uint32_t w = atomic_load_explicit(&l->plan_word, memory_order_acquire);

        for (;;) {
                uint32_t waiting = LOOP_PLAN_WAITING(w);
                if (waiting == LOOP_PLAN_NONE)
                        return 0;
                /* On failure w is reloaded: a newer plan replaced it. */
                if (atomic_compare_exchange_weak_explicit(&l->plan_word, &w,
                                                          LOOP_PLAN_WORD(waiting, LOOP_PLAN_NONE),
                                                          memory_order_acq_rel, memory_order_acquire))
                        break;
        }
        const LoopPlan *p = &l->plans[LOOP_PLAN_WAITING(w)];
        for (size_t i = 0; i < p->n_entries; i++) {
                Held *h = p->entries[i].held;
                h->period_slots = p->entries[i].period_slots;
                h->budget_slots = p->entries[i].budget_slots;
                h->server = p->entries[i].server;
        }
        l->n_servers = 0;
        for (size_t i = 0; i < p->n_entries; i++) {
                Held *h = p->entries[i].held;
                if (h->server && !atomic_load(&h->gone))
                        l->servers[l->n_servers++] = h;
        }
        l->cur = p;
        loop_log(l, LOG_INFO,
                 "CPU %" PRIi32 ": table generation %" PRIu64 " in force: %zu reservation(s), frame of %" PRIu32
                 " slots, %" PRIu32 " wake-ups per frame",
                 l->cpu, p->gen, p->n_entries, p->frame_slots, p->n_runs);
        return 1;
}

static bool loop_plan_waiting(const CpuLoop *l) {
        return LOOP_PLAN_WAITING(atomic_load_explicit(&l->plan_word, memory_order_acquire)) != LOOP_PLAN_NONE;
}

/* Absolute deadlines: a late wake-up never shifts the slots after it. */
static int loop_sleep_until(CpuLoop *l, uint64_t t) {
        struct timespec ts = { .tv_sec = (time_t) (t / NSEC_PER_SEC), .tv_nsec = (long) (t % NSEC_PER_SEC) };

        for (;;) {
                atomic_fetch_add_explicit(&l->beats, 1, memory_order_relaxed);
                stall_slot_due(l->stall, MAX(t, monotonic_ns()) + STALL_GRACE_NS);
                int r = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
                stall_slot_due(l->stall, monotonic_ns() + STALL_GRACE_NS);
                atomic_fetch_add_explicit(&l->beats, 1, memory_order_relaxed);
                if (r == 0)
                        return 0;
                if (r != EINTR)
                        return -r;
                if (loop_stopping(l))
                        return -ECANCELED;
        }
}

/* Promotes to to priority, and says once why it could not. */
int loop_promote(CpuLoop *l, Held *to, int priority) {
        /* At SCHED_FIFO 99, why: a member blocked on a PI lock lends its
         * new priority from inside this call, in our name, and only this
         * record lets the main thread charge that to its reservation
         * (lending.h). Three relaxed stores and a vDSO clock read, before
         * the call, so that the boost's time stamp comes after it. */
        unsigned k = atomic_fetch_add_explicit(&l->promoted_next, 1, memory_order_relaxed) % LOOP_PROMOTED_RING;
        atomic_store_explicit(&l->promoted[k].ns, 0, memory_order_relaxed);
        atomic_store_explicit(&l->promoted[k].held, to, memory_order_relaxed);
        atomic_store_explicit(&l->promoted[k].ns, monotonic_ns(), memory_order_release);
        int r = held_promote_at(to, &l->ctx, priority);
        /* -EAGAIN: the reservation waits for its group (a scope the
         * main thread is asking the manager for): not an error yet. */
        if (r < 0 && r != -EAGAIN && !to->logged) {
                to->logged = true;
                if (r == -ESRCH)
                        loop_log(l, LOG_INFO,
                                 "CPU %" PRIi32 ": pid %" PRIi32 " (reservation %" PRIu64
                                 ") exited; its slots stay idle until the table drops it",
                                 l->cpu, to->pid, to->id);
                else if (r == -EPERM && to->revoked)
                        loop_log(l, LOG_WARNING,
                                 "CPU %" PRIi32 ": thread %" PRIi32 " of pid %" PRIi32 " (reservation %" PRIu64
                                 ") left CPU %" PRIi32 " while it ran at our priority (allowed CPUs 0x%" PRIx64
                                 " when looked at); the reservation is no longer promoted",
                                 l->cpu, to->revoked_tid, to->pid, to->id, l->cpu, to->revoked_cpus);
                else
                        loop_log(l, LOG_ERR,
                                 "CPU %" PRIi32 ": cannot promote pid %" PRIi32 " (reservation %" PRIu64
                                 "): %s (%s)", l->cpu, to->pid, to->id, strerrorname_np(-r) ?: "unknown error",
                                 strerrordesc_np(-r) ?: "?");
        }
        if (to->threads_skipped > 0 && !to->limit_logged) {
                to->limit_logged = true;
                loop_log(l, LOG_WARNING,
                         "CPU %" PRIi32 ": pid %" PRIi32 " (reservation %" PRIu64 ") has %" PRIu32
                         " threads past max_threads_per_reservation (%" PRIu32 "); they are not moved",
                         l->cpu, to->pid, to->id, to->threads_skipped, l->ctx.max_threads);
        }
        loop_maybe_hang(l);
        return r;
}

static void loop_switch(CpuLoop *l, Held *from, Held *to) {
        /* Dying (SIGABRT, SIGTERM): promote no one any more, whatever the
         * table says; the main thread may be demoting everyone right now. */
        if (to && loop_stopping(l))
                to = NULL;
        if (from == to)
                return;
        if (from)
                (void) held_demote(from, &l->ctx);
        if (to)
                (void) loop_promote(l, to, PACE_RUNNING_PRIORITY);
}

static uint64_t thread_cpu_ns(void) {
        struct timespec ts;
        if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) < 0)
                return 0;
        return (uint64_t) ts.tv_sec * NSEC_PER_SEC + (uint64_t) ts.tv_nsec;
}

/* One change of owner (or a server's look, which wakes the loop the same
 * way) done. Every ACCT_WINDOW_NS: this thread's CPU time in the window
 * over the changes in it, published with the most of the last
 * PACE_STATS_COST_WINDOWS windows, which the broker charges per switch
 * where it is more than switch_cost_us: so the free share holds on a
 * machine slower than the one the default was measured on, and with
 * reservations of many threads (each change moves all of them). */
static void loop_count_change(CpuLoop *l, uint64_t now) {
        if (l->shared->test_change_spin_ns > 0) {
                uint64_t until = now + l->shared->test_change_spin_ns;
                while ((now = monotonic_ns()) < until)
                        ;
        }
        l->cost_changes++;
        if (l->cost_since_ns > 0 && now - l->cost_since_ns < ACCT_WINDOW_NS)
                return;
        uint64_t cpu_ns = thread_cpu_ns();
        if (l->cost_since_ns > 0 && l->shared->stats && cpu_ns >= l->cost_since_cpu_ns) {
                uint64_t spent = cpu_ns - l->cost_since_cpu_ns, most = 0;
                l->cost_windows[l->cost_next++ % PACE_STATS_COST_WINDOWS] = spent / l->cost_changes;
                for (unsigned i = 0; i < PACE_STATS_COST_WINDOWS; i++)
                        most = MAX(most, l->cost_windows[i]);
                stats_file_publish_cost(l->shared->stats, l->index, l->cpu, now - l->cost_since_ns, l->cost_changes,
                                        spent, most, now);
        }
        l->cost_since_ns = now;
        l->cost_since_cpu_ns = cpu_ns;
        l->cost_changes = 0;
}

/* Sleeps until t, doing the servers' looks that fall due before it. */
static int loop_sleep_serving(CpuLoop *l, uint64_t t) {
        for (;;) {
                uint64_t next = t;
                for (size_t i = 0; i < l->n_servers; i++)
                        if (l->servers[i]->srv.next_look_ns > 0)
                                next = MIN(next, l->servers[i]->srv.next_look_ns);
                int r = loop_sleep_until(l, next);
                if (r < 0 || next == t)
                        return r;
                uint64_t now = monotonic_ns();
                loop_servers_look(l, now);
                loop_count_change(l, now);
        }
}

/* How early a loop wakes before a change of owner: the kernel's timer
 * wake-up (13-15 us median here, cyclictest's figure) and the looking a
 * change needs (the ending period's usage, the usage as a period's closing
 * run starts, the next owner's budget) are done before the boundary, so that at it only the
 * demotion and the promotion sit between the boundary and the client
 * running. The margin is how late the timer wakes the loop (up a step when
 * it was later, down a larger step when not: it settles near the 35th
 * percentile, and one late wake-up moves it by one step only) plus how long
 * the looking took at the last few changes of the same kind (closing a
 * period or not: the first reads more). So most changes spin not at all or
 * for a few us. */
#define LOOP_EARLY_INITIAL_NS (20 * NSEC_PER_USEC)
#define LOOP_EARLY_MAX_NS (60 * NSEC_PER_USEC)
#define LOOP_EARLY_UP_NS 350
#define LOOP_EARLY_DOWN_NS 650

/* Spins to t, the change of owner; woken at t - early at woke. Learns
 * how late wake-ups come and how long the reading of this kind of change
 * took. */
static void loop_spin_until(CpuLoop *l, uint64_t t, uint64_t early, uint64_t woke, bool kind) {
        uint64_t now = monotonic_ns(), target = t > early ? t - early : 0;
        uint64_t late = woke > target ? woke - target : 0, prep = now > woke ? now - woke : 0;

        if (late > l->late_ns)
                l->late_ns = MIN(l->late_ns + LOOP_EARLY_UP_NS, LOOP_EARLY_MAX_NS);
        else if (l->late_ns >= LOOP_EARLY_DOWN_NS)
                l->late_ns -= LOOP_EARLY_DOWN_NS;
        /* An average over the last 8 or so of its kind. */
        l->prep_ns[kind] = l->prep_ns[kind] - l->prep_ns[kind] / 8 + MIN(prep, LOOP_EARLY_MAX_NS) / 8;
        while (now < t && !loop_stopping(l))
                now = monotonic_ns();
}

/* Where the global grid stands at time t for the frame in force: when the
 * current rotated frame began, and which run covers t. */
static void loop_locate(const CpuLoop *l, uint64_t t, uint64_t *ret_frame_start, uint32_t *ret_k) {
        uint64_t slot_ns = l->config->slot_ns, g = t / slot_ns;
        uint32_t off;

        frame_locate(l->cur->runs, l->cur->n_runs, l->cur->frame_slots, l->cur->rot, g, &off, ret_k);
        *ret_frame_start = (g - off) * slot_ns;
}

/* Runs the frame in force until the table empties this CPU or we stop. */
static void loop_active(CpuLoop *l) {
        uint64_t slot_ns = l->config->slot_ns;
        uint64_t frame_start;
        /* prev: whom the last run promoted; last: whose run it was in the
         * table, promoted or not (a run skipped by held_budget_spent()
         * still ends its owner's period). */
        Held *prev = NULL, *last = NULL;
        bool last_closes = false;
        uint32_t k;

        /* Join the grid where it stands: the run under way is entered at
         * once, not a frame later. Non-real-time work counts as having
         * just had its turn. */
        l->nonrt_turn_ns = monotonic_ns();
        l->free_since_ns = 0;
        loop_locate(l, l->nonrt_turn_ns, &frame_start, &k);
        for (;;) {
                uint64_t t = frame_start + (uint64_t) l->cur->runs[k].start * slot_ns;
                /* Whether the change will close a period (more reading). */
                bool kind = last && last_closes && last != l->cur->by_owner[l->cur->runs[k].owner];
                /* A change to a free run promotes nobody: no client waits
                 * for it, so no spinning to it either. */
                uint64_t early = l->cur->by_owner[l->cur->runs[k].owner] ? MIN(l->late_ns + l->prep_ns[kind], LOOP_EARLY_MAX_NS) : 0;

                if (loop_sleep_serving(l, t > early ? t - early : 0) < 0)
                        break;
                uint64_t woke = monotonic_ns();

                if (k == 0) {
                        /* Frame boundary: the only place a new plan may take
                         * over, so no reservation loses slots of a window
                         * that straddles the swap. */
                        loop_sync_config(l);
                        if (loop_plan_waiting(l)) {
                                /* Whoever owned the last run is done anyway
                                 * (runs are rotated): demoted before the plan
                                 * changes hands, so the main thread may
                                 * restore and free what the new one drops. */
                                if (last && last_closes)
                                        loop_period_end(l, last, t);
                                loop_spin_until(l, t, early, woke, kind);
                                loop_switch(l, prev, NULL);
                                loop_servers_demote(l);
                                prev = last = NULL;
                                (void) loop_take_plan(l);
                                if (l->cur->n_runs == 0)
                                        return;
                                /* Same grid, new frame: carry on wherever it
                                 * stands now. */
                                loop_locate(l, t, &frame_start, &k);
                        }
                        uint64_t frame_ns = (uint64_t) l->cur->frame_slots * slot_ns, now = monotonic_ns();
                        if (now > t + frame_ns) {
                                /* Stalled (a VM pause): rejoin the grid now
                                 * rather than replay the missed slots. */
                                loop_locate(l, now, &frame_start, &k);
                        }
                }

                Held *owner = l->cur->by_owner[l->cur->runs[k].owner];
                /* Read a few us before t: the ending owner runs on until
                 * then, and its next period starts from this same reading,
                 * so what it received over its periods still adds up. */
                if (last && last_closes && last != owner)
                        loop_period_end(l, last, t);
                last = owner;
                last_closes = l->cur->runs[k].closes;
                uint32_t run_end = frame_run_end(l->cur->runs, l->cur->n_runs, l->cur->frame_slots, k);
                Held *next = owner && !owner->server ? owner : NULL;
                /* Where it reads the group's usage, the closing run's start
                 * takes that reading too: one read a run, not two. */
                uint64_t usage = UINT64_MAX;
                if (next && held_budget_spent(next, &l->ctx, (uint64_t) next->budget_slots * slot_ns,
                                              (uint64_t) (run_end - l->cur->runs[k].start) * slot_ns, &usage))
                        next = NULL;
                if (owner && last_closes)
                        loop_close_begins(l, owner, t, next != NULL, usage);
                loop_spin_until(l, t, early, woke, kind);
                /* A server's own run is the servers' business. */
                loop_servers_at_run(l, t, owner, k, frame_start);
                owner = next;
                loop_switch(l, prev, owner);
                loop_count_change(l, monotonic_ns());
                prev = owner;
                if (++k == l->cur->n_runs) {
                        k = 0;
                        frame_start += (uint64_t) l->cur->frame_slots * slot_ns;
                }
        }
        loop_switch(l, prev, NULL);
        loop_servers_demote(l);
}

/* Out of a sleep without a deadline: from here on the monitor watches
 * (stall.h). One eventfd write wakes it, since nothing else would while
 * every loop slept. */
static void loop_stall_watched(CpuLoop *l) {
        LoopShared *s = l->shared;

        stall_slot_active(l->stall, s->stall ? s->stall->wake_fd : -EBADF, monotonic_ns());
}

/* Sleeps, without any periodic wake-up, until a table gives this CPU a
 * frame. Returns false when stopping. */
static bool loop_idle(CpuLoop *l) {
        LoopShared *s = l->shared;

        for (;;) {
                /* Read before looking: a handover after this bumps the word
                 * and the futex wait below returns at once. */
                uint32_t word = atomic_load(&s->epoch_word);

                atomic_fetch_add_explicit(&l->beats, 1, memory_order_relaxed);
                loop_maybe_hang(l);
                if (loop_stopping(l))
                        return false;
                loop_sync_config(l);
                if (loop_take_plan(l) > 0 && l->cur->n_runs > 0)
                        return true;
                stall_slot_due(l->stall, STALL_IDLE);
                (void) futex_private(&s->epoch_word, FUTEX_WAIT, word);
                loop_stall_watched(l);
        }
}

static void *loop_main(void *userdata) {
        CpuLoop *l = userdata;
        sigset_t kick;

        sigemptyset(&kick);
        sigaddset(&kick, LOOP_KICK_SIGNAL);
        pthread_sigmask(SIG_UNBLOCK, &kick, NULL);
        atomic_store(&l->tid, gettid());
        if (l->shared->stall) {
                l->stall = &l->shared->stall->slot[l->cpu];
                stall_slot_start(l->stall, gettid(), l->cpu);
                loop_stall_watched(l);
        }
        atomic_store(&l->state, LOOP_RUNNING);

        while (loop_idle(l)) {
                loop_active(l);
                if (loop_stopping(l))
                        break;
        }

        stall_slot_due(l->stall, STALL_IDLE);
        atomic_store(&l->state, LOOP_EXITED);
        return NULL;
}

int loop_init(CpuLoop *l, LoopShared *shared, uint32_t index, int32_t cpu, uint32_t max_frame_slots) {
        l->shared = shared;
        l->index = index;
        l->late_ns = LOOP_EARLY_INITIAL_NS;
        l->cpu = cpu;
        l->config = &shared->configs[0];
        atomic_init(&l->plan_word, LOOP_PLAN_WORD(LOOP_PLAN_NONE, LOOP_PLAN_NONE));
        for (size_t i = 0; i < ELEMENTSOF(l->plans); i++) {
                LoopPlan *p = &l->plans[i];
                p->entries = calloc(PACE_MAX_RESERVATIONS, sizeof(PlanEntry));
                p->by_owner = calloc(PACE_MAX_RESERVATIONS + 1, sizeof(Held *));
                p->runs = calloc(max_frame_slots + 1, sizeof(FrameRun));
                if (!p->entries || !p->by_owner || !p->runs)
                        return -ENOMEM;
        }
        l->owned = calloc(2 * PACE_MAX_RESERVATIONS, sizeof(Held *));
        l->servers = calloc(PACE_MAX_RESERVATIONS, sizeof(Held *));
        if (!l->owned || !l->servers)
                return -ENOMEM;
        return 0;
}

void loop_done(CpuLoop *l) {
        for (size_t i = 0; i < ELEMENTSOF(l->plans); i++) {
                free(l->plans[i].entries);
                free(l->plans[i].by_owner);
                free(l->plans[i].runs);
        }
        free(l->owned);
        free(l->servers);
}

uint64_t loop_memory_needs(uint32_t max_frame_slots) {
        return 3 * ((uint64_t) max_frame_slots + 1) * sizeof(FrameRun) +
               3 * (uint64_t) PACE_MAX_RESERVATIONS * (sizeof(PlanEntry) + sizeof(Held *)) +
               3 * ((uint64_t) PACE_MAX_RESERVATIONS + 1) * sizeof(Held *) + LOOP_STACK_SIZE + 2 * 4096;
}

int loop_setup_kick(void) {
        /* No SA_RESTART: a kick must end the futex wait or nanosleep. */
        struct sigaction sa = { .sa_handler = on_kick };

        sigemptyset(&sa.sa_mask);
        if (sigaction(LOOP_KICK_SIGNAL, &sa, NULL) < 0)
                return negative_errno();
        return 0;
}

int loop_start(CpuLoop *l, const HeldContext *ctx) {
        struct sched_param sp = { .sched_priority = PACE_DISPATCHER_PRIORITY };
        pthread_attr_t attr;
        cpu_set_t set;
        int r;

        l->ctx = *ctx;
        CPU_ZERO(&set);
        CPU_SET(l->cpu, &set);
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, LOOP_STACK_SIZE);
        pthread_attr_setaffinity_np(&attr, sizeof(set), &set);
        pthread_attr_setinheritsched(&attr, PTHREAD_EXPLICIT_SCHED);
        pthread_attr_setschedpolicy(&attr, SCHED_FIFO);
        pthread_attr_setschedparam(&attr, &sp);
        r = -pthread_create(&l->thread, &attr, loop_main, l);
        pthread_attr_destroy(&attr);
        if (r < 0)
                return r;
        l->created = true;
        return 0;
}

bool loop_running(const CpuLoop *l) {
        return l->created && atomic_load(&l->state) != LOOP_EXITED;
}

bool loop_exited(const CpuLoop *l) {
        return atomic_load(&l->state) == LOOP_EXITED;
}

void loop_kick(CpuLoop *l) {
        (void) pthread_kill(l->thread, LOOP_KICK_SIGNAL);
}

int loop_join(CpuLoop *l) {
        if (!l->created)
                return 0;
        if (!loop_exited(l))
                return -EBUSY;
        pthread_join(l->thread, NULL);
        l->created = false;
        return 0;
}

bool loop_acked_config(const CpuLoop *l, uint64_t gen) {
        return atomic_load(&l->acked_config) >= gen;
}

uint64_t loop_beats(const CpuLoop *l) {
        return atomic_load(&l->beats);
}

void loop_hang(CpuLoop *l, LoopHang how) {
        atomic_store(&l->hang, (int) how);
}

void loop_shared_wake_idle(LoopShared *s) {
        atomic_fetch_add(&s->epoch_word, 1);
        (void) futex_private(&s->epoch_word, FUTEX_WAKE, INT_MAX);
}
