/* SPDX-License-Identifier: MIT */
/* The dispatch loop's side of a Held (held.h): at SCHED_FIFO 99 it only
 * executes. Every call here is a system call on a thread id or on a
 * descriptor the main thread opened in advance (sched_setattr,
 * sched_{get,set}affinity, ppoll of pidfds, pread and pwrite of cgroup and
 * /proc files already open, one eventfd write): no path is opened or
 * looked up, nothing is allocated or freed, no lock is taken, and what is
 * done per thread is bounded by the reservation's capacity
 * (max_threads_per_reservation), not by the client's thread count. */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "held.h"
#include "macro.h"
#include "proc-util.h"

/* Gives a thread back to the main thread, which releases it. */
static void held_drop(Held *h, size_t i) {
        RegistryEntry *e = h->threads[i].entry;

        /* Cannot be full (it holds capacity); if it were, the entry stays
         * the main thread's and is released with the reservation. */
        (void) spsc_push(&h->dropped, e);
        h->n_threads--;
        h->threads[i] = h->threads[h->n_threads];
        h->pfds[i] = h->pfds[h->n_threads];
        h->churned = true;
}

/* What the main thread registered since the last time. */
static void held_take_incoming(Held *h) {
        RegistryEntry *e;

        while (h->n_threads < h->capacity && (e = spsc_pop(&h->incoming))) {
                h->threads[h->n_threads] = (HeldThread) { .tid = e->tid, .entry = e };
                h->pfds[h->n_threads] = (struct pollfd) { .fd = e->thread_pidfd, .events = POLLIN };
                h->n_threads++;
        }
}

/* Drops the threads that exited before anything is done to their ids
 * (an id outlives its thread and may become another process's): one ppoll
 * of their pidfds, and the main thread's mark where the kernel has none. */
static void held_drop_dead(Held *h) {
        const struct timespec now = {};

        if (h->n_threads == 0)
                return;
        int n = ppoll(h->pfds, (nfds_t) h->n_threads, &now, NULL);
        for (size_t i = h->n_threads; i-- > 0;)
                if ((n > 0 && (h->pfds[i].revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL))) ||
                    atomic_load_explicit(&h->threads[i].entry->dead, memory_order_relaxed))
                        held_drop(h, i);
}

/* Threads came or went: the main thread looks for new ones at once. */
static void held_ask_keep(Held *h, const HeldContext *ctx) {
        if (!h->churned)
                return;
        h->churned = false;
        if (ctx->housekeeping_fd >= 0)
                (void) !write(ctx->housekeeping_fd, &(uint64_t) { 1 }, sizeof(uint64_t));
}

static bool affinity_is_only(pid_t tid, int cpu) {
        cpu_set_t set;
        if (sched_getaffinity(tid, sizeof(set), &set) < 0)
                return true; /* gone: nothing ran anywhere */
        return CPU_COUNT(&set) == 1 && CPU_ISSET(cpu, &set);
}

/* Thread i of a split reservation belongs to the loop of another piece
 * now: that loop moved it to its CPU and demotes it. */
static bool held_taken_elsewhere(const Held *h, const HeldContext *ctx, size_t i) {
        const RegistryEntry *e = h->threads[i].entry;
        return e->affinity_saved && atomic_load(&e->pinned_cpu) != ctx->cpu;
}

/* Revokes h for what thread i was found allowed, which the log says. */
static void held_revoke(Held *h, size_t i) {
        cpu_set_t set;

        h->revoked = true;
        h->revoked_tid = h->threads[i].tid;
        h->revoked_cpus = 0;
        if (sched_getaffinity(h->revoked_tid, sizeof(set), &set) == 0)
                for (int c = 0; c < 64; c++)
                        if (CPU_ISSET(c, &set))
                                h->revoked_cpus |= UINT64_C(1) << c;
}

/* Promotes one held thread on this CPU. A piece of a split reservation on
 * this CPU first moves the thread here: pieces never coincide and a free
 * slot separates them, so the loop that had it has demoted it by now.
 * Unconfined, the thread may have moved itself while it waited: it is put
 * back before it gets our priority. */
static int held_move_thread(Held *h, const HeldContext *ctx, size_t i, const PaceSchedAttr *running) {
        RegistryEntry *entry = h->threads[i].entry;
        pid_t tid = h->threads[i].tid;

        if (entry->affinity_saved &&
            (atomic_load(&entry->pinned_cpu) != ctx->cpu || (!held_confined(h) && !affinity_is_only(tid, ctx->cpu)))) {
                cpu_set_t set;
                CPU_ZERO(&set);
                CPU_SET(ctx->cpu, &set);
                /* Claimed before it is moved: the loop that had it, late
                 * with its demotion (a vCPU held up by the host), then sees
                 * the thread is ours now, and neither demotes it nor takes
                 * the move for the thread's own (held_demote()). */
                atomic_store(&entry->pinned_cpu, ctx->cpu);
                if (sched_setaffinity(tid, sizeof(set), &set) < 0)
                        return negative_errno();
        }
        return sched_attr_set(tid, running);
}

/* Moves every held thread to the running policy, starting one further
 * along each time. SCHED_FIFO queues each promoted thread behind the ones
 * promoted before it and never time-slices: in a fixed order the first
 * thread would run every slot and, if it never blocks, its siblings would
 * never run inside the reservation. */
static void held_move_rotated(Held *h, const HeldContext *ctx, const PaceSchedAttr *running) {
        size_t n = h->n_threads, start;

        if (n == 0)
                return;
        start = h->rotation++ % n;
        for (size_t k = 0; k < n; k++) {
                size_t i = (start + k) % n;
                if (held_move_thread(h, ctx, i, running) == -ESRCH)
                        h->threads[i].tid = 0;
        }
        for (size_t i = n; i-- > 0;)
                if (h->threads[i].tid == 0)
                        held_drop(h, i);
}

/* Frozen or thawed: the v1 freezer group, or the unified hierarchy's
 * cgroup.freeze. */
static void held_freeze(Held *h, bool frozen) {
        if (h->freezer)
                (void) freezer_v1_freeze(h->freezer, frozen);
        else if (h->freeze_fd >= 0)
                (void) !pwrite(h->freeze_fd, frozen ? "1" : "0", 1, 0);
}

int held_promote_at(Held *h, const HeldContext *ctx, int priority) {
        PaceSchedAttr running;

        if (atomic_load_explicit(&h->gone, memory_order_relaxed))
                return -ESRCH;
        if (atomic_load_explicit(&h->leaving, memory_order_relaxed))
                return -EAGAIN;
        if (h->revoked)
                return -EPERM;
        if (pidfd_alive(h->pidfd) < 0) {
                atomic_store(&h->gone, true);
                return -ESRCH;
        }
        int error = atomic_load_explicit(&h->ready_error, memory_order_relaxed);
        if (error < 0)
                return error;
        /* Not yet where it will be held (a scope the main thread is asking
         * the manager for): not an error yet. */
        if (!atomic_load_explicit(&h->ready, memory_order_acquire))
                return -EAGAIN;

        held_take_incoming(h);
        held_drop_dead(h);
        sched_attr_running_at(priority, &running);
        held_move_rotated(h, ctx, &running);
        /* Thawed last: should the write wait on the freezer's mutex (see
         * held_demote()), the members are still frozen, so its holder gets
         * the CPU. */
        held_freeze(h, false);
        h->running = true;
        held_ask_keep(h, ctx);
        return 0;
}

int held_demote(Held *h, const HeldContext *ctx) {
        PaceSchedAttr waiting;

        if (!h->running)
                return 0;
        h->running = false;

        /* Ids first: a thread that ended in its run must not pass its id's
         * next owner our waiting policy. Newcomers the main thread
         * registered meanwhile were never promoted by us, but are taken
         * now, so that what is held is what the next promotion moves. */
        held_take_incoming(h);
        held_drop_dead(h);

        if (ctx->waiting == PACE_WAITING_FREEZE && (h->freezer || h->freeze_fd >= 0)) {
                /* Its own policy back first, then frozen. The freeze write
                 * takes a kernel mutex without priority inheritance
                 * (cgroup_mutex for cgroup.freeze, freezer_mutex for the v1
                 * freezer), which any task making or removing a cgroup
                 * holds a moment, an ordinary user's in a delegated subtree
                 * too. Preempted on this CPU by this thread, that holder
                 * could not run while the members kept FIFO 98 and this
                 * thread waited: a member would run on past its slot until
                 * the stall guard. Demoted first, they share the CPU with
                 * the holder, which ends its hold. Nothing of theirs runs
                 * in between otherwise: this thread holds their CPU. And a
                 * frozen thread is never left real-time if we die. */
                for (size_t i = h->n_threads; i-- > 0;) {
                        /* With the flag it has had since its first touch. */
                        PaceSchedAttr own = h->threads[i].entry->orig;
                        own.sched_flags |= PACE_SCHED_FLAG_RESET_ON_FORK;
                        if (sched_attr_set(h->threads[i].tid, &own) == -ESRCH)
                                held_drop(h, i);
                }
                held_freeze(h, true);
        } else {
                held_waiting_attr(h, ctx, &waiting);
                for (size_t i = h->n_threads; i-- > 0;)
                        if (!held_taken_elsewhere(h, ctx, i) &&
                            sched_attr_set_waiting(h->threads[i].tid, &waiting) == -ESRCH)
                                held_drop(h, i);
        }

        /* Unconfined, a member can move itself to another CPU while it
         * runs at our priority there; found at the end of its run, it has
         * done so, and the reservation is never promoted again. Unless the
         * loop of another piece claimed it meanwhile (held_move_thread()):
         * the claim is looked at again after the affinity, which it
         * precedes. */
        if (!held_confined(h))
                for (size_t i = 0; i < h->n_threads; i++)
                        if (h->threads[i].entry->affinity_saved && !held_taken_elsewhere(h, ctx, i) &&
                            !affinity_is_only(h->threads[i].tid, ctx->cpu) && !held_taken_elsewhere(h, ctx, i)) {
                                held_revoke(h, i);
                                break;
                        }
        held_ask_keep(h, ctx);
        return 0;
}

bool held_thread_stays(Held *h, const HeldContext *ctx) {
        if (h->scope != PACE_TABLE_SCOPE_THREAD || strchr(h->cpus, ','))
                return false;
        for (size_t i = 0; i < h->n_threads; i++)
                if (!h->threads[i].entry->affinity_saved || !affinity_is_only(h->threads[i].tid, ctx->cpu)) {
                        /* Moved itself away, as at the end of a run. */
                        if (h->threads[i].entry->affinity_saved)
                                held_revoke(h, i);
                        return false;
                }
        return true;
}

/* A small /proc or cgroup file, read whole through fd (opened by the main
 * thread), as a string. An empty read: the thread is gone. */
static int fd_read_text(int fd, char *buf, size_t size) {
        if (fd < 0)
                return -EBADF;
        ssize_t n = pread(fd, buf, size - 1, 0);
        if (n <= 0)
                return n < 0 ? negative_errno() : -ESRCH;
        buf[n] = '\0';
        return 0;
}

/* The first number of such a file. */
static int fd_read_u64(int fd, uint64_t *ret) {
        char buf[64];
        int r = fd_read_text(fd, buf, sizeof(buf));

        if (r < 0)
                return r;
        *ret = strtoull(buf, NULL, 10);
        return 0;
}

int held_usage_ns(Held *h, const HeldContext *ctx, uint64_t *ret) {
        uint64_t sum = 0;

        if (held_grouped(h))
                return group_usage_ns(ctx->groups, h->group, ctx->cpu, ret);
        /* The thread's own figure: /proc/TID/... of a thread that is not
         * the leader would describe its whole process. */
        for (size_t i = 0; i < h->n_threads; i++) {
                uint64_t v;
                if (fd_read_u64(h->threads[i].entry->schedstat_fd, &v) == 0)
                        sum += v;
        }
        *ret = sum;
        return 0;
}

bool held_budget_spent(Held *h, const HeldContext *ctx, uint64_t budget_ns, uint64_t run_ns, uint64_t *ret_usage) {
        uint64_t u;

        if (!held_leak_charged(h, ctx))
                return false;
        if (group_usage_ns(ctx->groups, h->group, ctx->cpu, &u) < 0)
                return false;
        *ret_usage = u;
        return acct_budget_spent(&h->acct, u, budget_ns, run_ns);
}
