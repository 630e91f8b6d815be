/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "macro.h"
#include "sched-util.h"
#include "stall.h"

static StallPage *inherited;

int stall_page_new(StallPage **ret) {
        StallPage *p = mmap(NULL, sizeof(StallPage), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
                return negative_errno();
        p->wake_fd = -EBADF;
        *ret = p;
        return 0;
}

StallPage *stall_page_free(StallPage *p) {
        if (p)
                (void) munmap(p, sizeof(StallPage));
        return NULL;
}

void stall_page_reset(StallPage *p) {
        for (size_t i = 0; i < PACE_MAX_CPUS; i++) {
                atomic_store(&p->slot[i].due_ns, STALL_IDLE);
                atomic_store(&p->slot[i].tid, 0);
                atomic_store(&p->slot[i].cpu, -1);
        }
}

StallPage *stall_page_inherited(void) {
        return inherited;
}

void stall_page_set_inherited(StallPage *p) {
        inherited = p;
}

void stall_slot_start(StallSlot *s, pid_t tid, int32_t cpu) {
        if (!s)
                return;
        atomic_store(&s->cpu, cpu);
        atomic_store(&s->due_ns, STALL_IDLE);
        atomic_store(&s->tid, (int32_t) tid);
}

void stall_slot_active(StallSlot *s, int wake_fd, uint64_t now) {
        if (!s)
                return;
        stall_slot_due(s, now + STALL_GRACE_NS);
        if (wake_fd >= 0)
                (void) !write(wake_fd, &(uint64_t) { 1 }, sizeof(uint64_t));
}

int stall_find(const StallPage *p, uint64_t now, uint64_t strikes[PACE_MAX_CPUS], uint64_t *ret_next) {
        uint64_t next = STALL_IDLE;
        int stuck = -1;

        for (size_t i = 0; i < PACE_MAX_CPUS; i++) {
                uint64_t due = atomic_load_explicit(&p->slot[i].due_ns, memory_order_relaxed);
                if (atomic_load_explicit(&p->slot[i].tid, memory_order_relaxed) <= 0 || due == STALL_IDLE) {
                        strikes[i] = 0;
                        continue;
                }
                if (now < due) {
                        strikes[i] = 0;
                        next = MIN(next, due);
                        continue;
                }
                /* Overdue: the same word twice is a loop that did not move
                 * in between; once may be a VM the host paused, whose loops
                 * run the moment it resumes. */
                if (strikes[i] == due) {
                        if (stuck < 0)
                                stuck = (int) i;
                        continue;
                }
                strikes[i] = due;
                next = MIN(next, now + STALL_RECHECK_NS);
        }
        *ret_next = next;
        return stuck;
}

/* The guard's bandwidth as a deadline task: a look costs a few us, and it
 * looks about once per STALL_GRACE_NS; acting on a stall, a few
 * sched_setattr()s. An implicit deadline: with a shorter one than the
 * period, a task that wakes between its deadline and its next period is
 * held until that period (the kernel's rule for constrained deadlines),
 * which made the monitor answer kills 5-18 ms late when it tried one. */
#define GUARD_DL_RUNTIME_NS (500 * NSEC_PER_USEC)
#define GUARD_DL_PERIOD_NS (20 * NSEC_PER_MSEC)

struct StallGuard {
        StallPage *page;
        pthread_t thread;
        _Atomic pid_t child;
        int notify_fd;
        /* Written by the guard before it notifies, read by the monitor
         * after: the eventfd orders them. */
        StallReport report;
        _Atomic bool reported;
        _Atomic pid_t tid;
        char policy[160];
        bool policy_set; /* the monitor's main thread's */
        pid_t watched;   /* the guard's: the child its strikes are about */
        uint64_t strikes[PACE_MAX_CPUS];
};

/* Called by the monitor's main thread, on the guard's id. */
static void guard_take_policy(StallGuard *g) {
        const PaceSchedAttr dl = {
                .sched_policy = SCHED_DEADLINE,
                .sched_runtime = GUARD_DL_RUNTIME_NS,
                .sched_deadline = GUARD_DL_PERIOD_NS,
                .sched_period = GUARD_DL_PERIOD_NS,
        };
        const PaceSchedAttr fifo = { .sched_policy = SCHED_FIFO, .sched_priority = PACE_DISPATCHER_PRIORITY };
        int r;

        pid_t tid = atomic_load(&g->tid);

        g->policy_set = true;
        r = sched_attr_set(tid, &dl);
        if (r == 0) {
                snprintf(g->policy, sizeof(g->policy),
                         "SCHED_DEADLINE (%" PRIu64 " us every %" PRIu64 " ms, above every SCHED_FIFO thread)",
                         (uint64_t) (GUARD_DL_RUNTIME_NS / NSEC_PER_USEC), (uint64_t) (GUARD_DL_PERIOD_NS / NSEC_PER_MSEC));
                return;
        }
        int rf = sched_attr_set(tid, &fifo);
        snprintf(g->policy, sizeof(g->policy),
                 "%s (no SCHED_DEADLINE for it here: %s; a loop stuck on every CPU at once would go unseen)",
                 rf == 0 ? "SCHED_FIFO 99" : "SCHED_OTHER", strerror(-r));
}

/* Puts every loop thread of child in the page to SCHED_OTHER. tgkill()
 * with no signal confirms an id is, right now, a thread of child: the page
 * is the child's word, and it may be dead and its ids reused. */
static unsigned guard_demote_loops(StallGuard *g, pid_t child) {
        const PaceSchedAttr other = { .sched_policy = SCHED_OTHER };
        unsigned n = 0;

        for (size_t i = 0; i < PACE_MAX_CPUS; i++) {
                pid_t tid = atomic_load(&g->page->slot[i].tid);
                if (tid > 0 && syscall(SYS_tgkill, child, tid, 0) == 0 && sched_attr_set(tid, &other) == 0)
                        n++;
        }
        return n;
}

static void *guard_main(void *userdata) {
        StallGuard *g = userdata;

        /* Named by itself: naming another thread writes to /proc, which
         * the dispatcher's view of the file system keeps read-only. */
        (void) prctl(PR_SET_NAME, STALL_GUARD_NAME);
        atomic_store(&g->tid, gettid());
        for (;;) {
                pid_t child = atomic_load(&g->child);
                uint64_t next = STALL_IDLE, now = monotonic_ns();
                int slot = -1;

                if (child != g->watched) {
                        memset(g->strikes, 0, sizeof(g->strikes));
                        g->watched = child;
                }
                if (child > 0 && !atomic_load(&g->reported))
                        slot = stall_find(g->page, now, g->strikes, &next);
                if (slot >= 0 && child == atomic_load(&g->child)) {
                        uint64_t due = atomic_load(&g->page->slot[slot].due_ns);
                        g->report = (StallReport) {
                                .child = child,
                                .tid = atomic_load(&g->page->slot[slot].tid),
                                .cpu = atomic_load(&g->page->slot[slot].cpu),
                                .late_ns = now - due + STALL_GRACE_NS,
                        };
                        g->report.demoted = guard_demote_loops(g, child);
                        atomic_store(&g->reported, true);
                        (void) !write(g->notify_fd, &(uint64_t) { 1 }, sizeof(uint64_t));
                        continue;
                }
                struct pollfd p = { .fd = g->page->wake_fd, .events = POLLIN };
                int timeout = next == STALL_IDLE ? -1 : (int) ((next - MIN(next, now)) / NSEC_PER_MSEC + 1);
                if (poll(&p, 1, timeout) > 0) {
                        uint64_t v;
                        (void) !read(g->page->wake_fd, &v, sizeof(v));
                }
        }
        return NULL;
}

int stall_guard_start(StallPage *p, StallGuard **ret) {
        StallGuard *g = calloc(1, sizeof(*g));
        sigset_t all, old;
        int r;

        if (!g)
                return -ENOMEM;
        g->page = p;
        g->notify_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        p->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (g->notify_fd < 0 || p->wake_fd < 0) {
                r = negative_errno();
                safe_close(g->notify_fd);
                p->wake_fd = safe_close(p->wake_fd);
                free(g);
                return r;
        }
        snprintf(g->policy, sizeof(g->policy), "not yet started");
        /* Every signal goes to the monitor's main thread (its signalfd). */
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old);
        r = -pthread_create(&g->thread, NULL, guard_main, g);
        pthread_sigmask(SIG_SETMASK, &old, NULL);

        if (r < 0) {
                safe_close(g->notify_fd);
                p->wake_fd = safe_close(p->wake_fd);
                free(g);
                return r;
        }
        *ret = g;
        return 0;
}

void stall_guard_watch(StallGuard *g, pid_t child) {
        if (child > 0 && !g->policy_set) {
                /* Its id, once it has started (at once, in practice). */
                for (unsigned i = 0; i < 1000 && atomic_load(&g->tid) == 0; i++)
                        (void) usleep(1000);
                guard_take_policy(g);
        }
        atomic_store(&g->reported, false);
        atomic_store(&g->child, child);
        (void) !write(g->page->wake_fd, &(uint64_t) { 1 }, sizeof(uint64_t));
}

int stall_guard_fd(const StallGuard *g) {
        return g->notify_fd;
}

int stall_guard_take(StallGuard *g, StallReport *ret) {
        uint64_t v;

        (void) !read(g->notify_fd, &v, sizeof(v));
        if (!atomic_load(&g->reported) || atomic_load(&g->child) != g->report.child)
                return 0;
        *ret = g->report;
        /* Acted on: nothing more to watch in this child. */
        atomic_store(&g->child, 0);
        return 1;
}

const char *stall_guard_policy(const StallGuard *g) {
        return g->policy;
}
