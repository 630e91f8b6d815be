/* SPDX-License-Identifier: MIT */
/* The budget servers' side of a dispatch loop (loop-internal.h): at each
 * change of owner and at each look a server's budget asks for, what each
 * server on this CPU may hold (server.h's rules, fed the members' measured
 * usage), and how much of the free time ahead servers may take before
 * non-real-time work's turn is due. SCHED_FIFO 99, under loop.c's rules:
 * system calls only through held-run.c, on handles opened in advance. */
#include <inttypes.h>
#include <stdlib.h>

#include "loop-internal.h"
#include "server.h"
#include "time-util.h"

/* Server h to priority (0: its waiting policy). */
static void loop_server_set(CpuLoop *l, Held *h, int priority) {
        if (loop_stopping(l))
                priority = 0;
        if (h->srv_priority == priority)
                return;
        if (priority == 0) {
                (void) held_demote(h, &l->ctx);
                h->srv_priority = 0;
        } else if (loop_promote(l, h, priority) >= 0) {
                h->srv_priority = priority;
        }
}

/* The members' usage now, into h->srv_usage. */
static void loop_server_usage(CpuLoop *l, Held *h, uint64_t now) {
        uint64_t u;

        /* Unreadable (a group not yet entered): as if it ran all along. */
        if (held_usage_ns(h, &l->ctx, &u) < 0)
                u = h->srv.last_usage + (now > h->srv.last_look_ns ? now - h->srv.last_look_ns : 0);
        else
                /* What an owner ran at the priority a member lent it is
                 * the server's too (lending.h): one atomic load, and the
                 * sum only grows, as the budget look expects. */
                u += atomic_load_explicit(&h->lent_ns, memory_order_relaxed);
        h->srv_usage = u;
}

/* What server h may hold now, in the run in force (h->srv_usage fresh):
 * nothing once its window's budget is spent; in its own slots the running
 * priority (they back its budget); in another owner's slots the server
 * priority, below the owner's; in free time the server priority until the
 * instant the free-time rule (server.h) sets. */
static int loop_server_priority(CpuLoop *l, Held *h, uint64_t now) {
        uint64_t slot_ns = l->config->slot_ns;

        if (h->gone || h->revoked || atomic_load_explicit(&h->leaving, memory_order_relaxed)) {
                h->srv.next_look_ns = 0; /* nothing to look at any more */
                return 0;
        }
        if (!server_budget_look(&h->srv, now, (uint64_t) h->period_slots * slot_ns,
                                (uint64_t) h->budget_slots * slot_ns, h->srv_usage, h->srv_priority > 0, slot_ns))
                return 0;
        if (l->run_owner == h)
                return PACE_RUNNING_PRIORITY;
        /* Outside its own slots only where the kernel keeps it honest: a
         * group's usage, which no member can shrink by exiting (a thread's
         * schedstat goes with it), and a cpuset, so a member cannot take
         * the server priority to another CPU between two looks. A thread
         * reservation needs neither: its one thread's schedstat ends only
         * with the thread, and its affinity is looked at every look (a
         * cgroup v2 host has no group for a thread: RealtimeKit1's
         * reservations). Elsewhere a server is a slots reservation. */
        if ((!held_grouped(h) || !held_confined(h)) && !held_thread_stays(h, &l->ctx)) {
                if (!h->logged_unconfined) {
                        h->logged_unconfined = true;
                        loop_log(l, LOG_WARNING,
                                 "CPU %" PRIi32 ": pid %" PRIi32 " (reservation %" PRIu64 ") is a budget server but "
                                 "no reservation group with a cpuset holds it; it runs in its own slots only",
                                 l->cpu, h->pid, h->id);
                }
                h->srv.next_look_ns = h->srv.window_end_ns;
                return 0;
        }
        if (l->run_free) {
                /* Strict mode keeps servers out of free time: frozen for
                 * non-real-time work's turn, with the same reserve as nice
                 * mode, a gap probe still saw 22.1 and 24.3 ms beside a
                 * 36 ms job now and then (non_rt_max_gap 20 ms), cause not
                 * found; nice mode stayed at 12.7-14.5 ms. */
                if (l->ctx.waiting == PACE_WAITING_FREEZE || now >= l->free_take_until_ns) {
                        /* Non-real-time work's turn: the next run's start
                         * looks again. */
                        h->srv.next_look_ns = h->srv.window_end_ns;
                        return 0;
                }
                h->srv.next_look_ns = MIN(h->srv.next_look_ns, l->free_take_until_ns);
        }
        return PACE_SERVER_PRIORITY;
}

/* What non-real-time work needs of the free time ahead before its turn
 * is due (server.h): a turn, and for every server that was not seen idle
 * what it may run on for once held back at nice 19. */
#define SERVER_FREE_TURN_NS (1 * NSEC_PER_MSEC)
#define SERVER_HELD_LAG_NS (6 * NSEC_PER_MSEC)
/* What the dispatcher's own wake-ups and interrupts may take of a free
 * interval, and how much earlier than non_rt_max_gap the turn is due. */
#define SERVER_FREE_MARGIN_NS (250 * NSEC_PER_USEC)

static uint64_t loop_free_reserve(const CpuLoop *l) {
        uint64_t r = SERVER_FREE_TURN_NS;

        for (size_t i = 0; i < l->n_servers; i++)
                if (!l->servers[i]->srv.seen_idle)
                        r += SERVER_HELD_LAG_NS;
        return r;
}

/* Until when servers may hold a priority in the free run k (of the frame
 * that began at frame_start), which starts at t: the free intervals ahead,
 * up to non-real-time work's next turn, must keep the reserve. */
static uint64_t loop_free_take_until(CpuLoop *l, uint64_t t, uint32_t k, uint64_t frame_start) {
        uint64_t slot_ns = l->config->slot_ns, frame_ns = (uint64_t) l->cur->frame_slots * slot_ns;
        uint64_t due = l->nonrt_turn_ns + l->config->non_rt_max_gap_ns;
        uint64_t deadline = due > SERVER_FREE_MARGIN_NS ? due - SERVER_FREE_MARGIN_NS : 0, looked = t;
        size_t n = 0;

        if (l->cur->n_runs == 0 || deadline <= t)
                return 0;
        for (uint32_t j = k, steps = 0; looked < deadline; steps++) {
                /* Seen no further: no free time counted beyond. */
                if (n == LOOP_FREE_AHEAD || steps == 4 * LOOP_FREE_AHEAD) {
                        deadline = looked;
                        break;
                }
                uint32_t end = frame_run_end(l->cur->runs, l->cur->n_runs, l->cur->frame_slots, j);
                uint64_t s = frame_start + (uint64_t) l->cur->runs[j].start * slot_ns, e = frame_start + (uint64_t) end * slot_ns;
                if (!l->cur->by_owner[l->cur->runs[j].owner]) {
                        if (n > 0 && l->free_ahead[n - 1][1] == s)
                                l->free_ahead[n - 1][1] = e;
                        else {
                                l->free_ahead[n][0] = s;
                                l->free_ahead[n][1] = e;
                                n++;
                        }
                }
                looked = e;
                if (++j == l->cur->n_runs) {
                        j = 0;
                        frame_start += frame_ns;
                }
        }
        uint64_t until;
        return server_free_take_until((const uint64_t (*)[2]) l->free_ahead, n, t, deadline, loop_free_reserve(l),
                                      &until) ?
                       until :
                       0;
}

/* The servers' usage summed (h->srv_usage fresh). */
static uint64_t loop_servers_usage_sum(const CpuLoop *l) {
        uint64_t sum = 0;

        for (size_t i = 0; i < l->n_servers; i++)
                sum += l->servers[i]->srv_usage;
        return sum;
}

void loop_servers_at_run(CpuLoop *l, uint64_t t, Held *owner, uint32_t k, uint64_t frame_start) {
        l->run_owner = owner;
        l->run_free = owner == NULL;
        if (l->n_servers == 0)
                return;
        for (size_t i = 0; i < l->n_servers; i++)
                loop_server_usage(l, l->servers[i], t);
        uint64_t usage = loop_servers_usage_sum(l);
        /* The free interval that just ended: what the servers did not take
         * of it was non-real-time work's (usage that went back: they took
         * all of it). */
        if (l->free_since_ns > 0 && t > l->free_since_ns) {
                uint64_t taken = usage >= l->free_since_usage ? usage - l->free_since_usage : t - l->free_since_ns;
                l->nonrt_turn_ns = server_free_turn(l->nonrt_turn_ns, l->free_since_ns, t, taken, SERVER_FREE_MARGIN_NS);
        }
        l->free_since_ns = l->run_free ? t : 0;
        l->free_since_usage = usage;
        l->free_take_until_ns = l->run_free ? loop_free_take_until(l, t, k, frame_start) : 0;
        for (size_t i = 0; i < l->n_servers; i++)
                loop_server_set(l, l->servers[i], loop_server_priority(l, l->servers[i], t));
}

void loop_servers_look(CpuLoop *l, uint64_t now) {
        for (size_t i = 0; i < l->n_servers; i++) {
                Held *h = l->servers[i];
                if (h->srv.next_look_ns == 0 || h->srv.next_look_ns > now)
                        continue;
                loop_server_usage(l, h, now);
                loop_server_set(l, h, loop_server_priority(l, h, now));
        }
}

void loop_servers_demote(CpuLoop *l) {
        for (size_t i = 0; i < l->n_servers; i++)
                loop_server_set(l, l->servers[i], 0);
        l->run_free = false;
        l->run_owner = NULL;
        /* A free interval across a table swap earns no turn. */
        l->free_since_ns = 0;
        l->free_take_until_ns = 0;
}
