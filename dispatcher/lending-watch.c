/* SPDX-License-Identifier: MIT */
/* The main thread's side of priority lending (lending.h): our tracing
 * instance, opened at start or taken over from a predecessor that is still
 * exiting, its events fed to the Lending ledger, and what a reservation's
 * member lent charged to that reservation. */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <systemd/sd-event.h>

#include "dispatcher-internal.h"
#include "lending-watch.h"
#include "lending.h"
#include "macro.h"
#include "time-util.h"

struct LendingWatch {
        sd_event *event;
        Dispatcher *d;
        const DispatcherRunOptions *o;
        const char *tracefs;
        /* The instance's trace_pipe (-EBADF: not ours yet, or none). */
        int fd;
        sd_event_source *io, *takeover;
        Lending *lending;
};

/* The reservation that lent: the one with raiser among its registered
 * members, or, where raiser is a dispatch loop (it promoted a member that
 * was blocked already), the one it promoted last before raised_ns. Only
 * ever one of the loops' own (a pointer from the ring is compared, never
 * followed, until found among them). */
static Held *lending_lender(Dispatcher *d, pid_t raiser, uint64_t raised_ns, CpuLoop **ret_loop) {
        for (uint32_t i = 0; i < d->n_loops; i++) {
                CpuLoop *l = &d->loops[i];
                for (size_t k = 0; k < l->n_owned; k++)
                        for (size_t j = 0; j < l->owned[k]->n_mine; j++)
                                if (l->owned[k]->mine[j]->tid == raiser) {
                                        *ret_loop = l;
                                        return l->owned[k];
                                }
        }
        for (uint32_t i = 0; i < d->n_loops; i++) {
                CpuLoop *l = &d->loops[i];
                if (atomic_load(&l->tid) != raiser)
                        continue;
                const struct Held *best = NULL;
                uint64_t best_ns = 0;
                for (unsigned k = 0; k < LOOP_PROMOTED_RING; k++) {
                        uint64_t t = atomic_load_explicit(&l->promoted[k].ns, memory_order_acquire);
                        const struct Held *h = atomic_load_explicit(&l->promoted[k].held, memory_order_relaxed);
                        if (t != 0 && t <= raised_ns && t >= best_ns) {
                                best = h;
                                best_ns = t;
                        }
                }
                for (size_t k = 0; best && k < l->n_owned; k++)
                        if (l->owned[k] == best) {
                                *ret_loop = l;
                                return l->owned[k];
                        }
        }
        return NULL;
}

static void lending_charged(void *userdata, pid_t raiser, uint64_t raised_ns, pid_t owner, uint64_t ns) {
        LendingWatch *w = userdata;
        Dispatcher *d = w->d;
        CpuLoop *l = NULL;
        Held *h = lending_lender(d, raiser, raised_ns, &l);

        if (!h)
                return;
        /* Lent to one of its own registered members: counted as theirs. */
        for (size_t j = 0; j < h->n_mine; j++)
                if (h->mine[j]->tid == owner)
                        return;
        atomic_fetch_add_explicit(&h->lent_ns, ns, memory_order_relaxed);
        if (!h->lent_logged && d->run) {
                h->lent_logged = true;
                run_log(d->run, LOG_NOTICE,
                        "CPU %" PRIi32 ": pid %" PRIi32 " (reservation %" PRIu64 ") lent its priority to task %" PRIi32
                        " through a priority-inheritance lock; what that task runs so is charged to %s",
                        l->cpu, h->pid, h->id, owner,
                        h->server ? "the reservation's budget" :
                                    "nothing (a slots reservation lends only in its own slots)");
        }
}

static bool lending_owner_boosted(void *userdata, pid_t owner) {
        return lending_task_boosted(owner);
}

void lending_watch_take(LendingWatch *w) {
        char buf[16384];

        /* Bounded: a flood of events waits for the next wake-up. */
        for (int i = 0; i < 8; i++) {
                ssize_t n = read(w->fd, buf, sizeof(buf));
                if (n <= 0)
                        break;
                lending_feed(w->lending, buf, (size_t) n, lending_charged, w);
        }
        lending_charge_ongoing(w->lending, monotonic_ns(), lending_charged, lending_owner_boosted, w);
}

static int on_lending(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        lending_watch_take(userdata);
        return 0;
}

/* How often the instance a dying predecessor still holds is tried again. */
#define LENDING_TAKEOVER_NS (500 * NSEC_PER_MSEC)

/* Our tracing instance, opened and watched. */
static int lending_open(LendingWatch *w) {
        int r = lending_trace_open(w->tracefs, w->d->instance_name, &w->fd);

        if (r >= 0)
                r = sd_event_add_io(w->event, &w->io, w->fd, EPOLLIN, on_lending, w);
        if (r < 0 && w->fd >= 0) {
                w->fd = safe_close(w->fd);
                lending_trace_remove(w->tracefs, w->d->instance_name);
        }
        return r;
}

static void lending_said(LendingWatch *w, int r, bool takeover) {
        const char *tracefs = w->tracefs;

        if (r == -EEXIST && !takeover)
                run_log(w->o, LOG_WARNING,
                        "the tracing instance %s/instances/%s is still held by a dispatcher that is exiting: "
                        "priority a budget server's member lends through a priority-inheritance lock is not "
                        "charged to the server until it is gone and this one takes the instance over",
                        tracefs, w->d->instance_name);
        else if (r < 0 && r != -EEXIST)
                run_log(w->o, LOG_WARNING,
                        "no tracing instance in %s (%s): priority a budget server's member lends through a "
                        "priority-inheritance lock is not charged to the server (docs/security.md)", tracefs,
                        strerror(-r));
        else if (r >= 0)
                run_log(w->o, LOG_INFO, "priority lent through priority-inheritance locks is charged to the "
                        "lender's budget (sched_pi_setprio, in %s/instances/%s%s)", tracefs, w->d->instance_name,
                        takeover ? ", taken over from the dispatcher before" : "");
}

/* A predecessor SIGKILLed with its monitor may still be exiting (its
 * threads stuck in the kernel) with its trace_pipe open: the instance,
 * which has our name, cannot be removed until it is gone, and once it is
 * gone nobody else would remove it. So it is tried again until it is ours. */
static int on_lending_takeover(sd_event_source *s, uint64_t usec, void *userdata) {
        LendingWatch *w = userdata;
        int r = lending_open(w);

        if (r == -EEXIST) {
                (void) sd_event_source_set_time_relative(s, LENDING_TAKEOVER_NS / NSEC_PER_USEC);
                (void) sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
        } else
                lending_said(w, r, true);
        return 0;
}

int lending_watch_new(sd_event *event, Dispatcher *d, const DispatcherRunOptions *o, LendingWatch **ret) {
        _cleanup_(lending_watch_freep) LendingWatch *w = calloc(1, sizeof(*w));
        int r;

        if (!w)
                return -ENOMEM;
        *w = (LendingWatch) { .event = event, .d = d, .o = o, .fd = -EBADF,
                              .tracefs = o->tracefs ?: LENDING_TRACEFS };
        r = lending_new(&w->lending);
        if (r < 0)
                return r;
        /* Dead instances' (a SIGKILL leaves its instance behind; a live
         * one's cannot be removed). */
        (void) lending_trace_sweep(w->tracefs);
        r = lending_open(w);
        lending_said(w, r, false);
        if (r == -EEXIST)
                (void) sd_event_add_time_relative(event, &w->takeover, CLOCK_MONOTONIC,
                                                  LENDING_TAKEOVER_NS / NSEC_PER_USEC, 1, on_lending_takeover, w);
        *ret = TAKE_PTR(w);
        return 0;
}

bool lending_watch_active(const LendingWatch *w) {
        return w && lending_active(w->lending) > 0;
}

LendingWatch *lending_watch_free(LendingWatch *w) {
        if (!w)
                return NULL;
        sd_event_source_disable_unref(w->io);
        sd_event_source_disable_unref(w->takeover);
        safe_close(w->fd);
        /* Ours, or a predecessor's we were still waiting to take over (it
         * has our name, and it may be gone by now). */
        lending_trace_remove(w->tracefs, w->d->instance_name);
        lending_free(w->lending);
        free(w);
        return NULL;
}
