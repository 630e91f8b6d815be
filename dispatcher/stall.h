/* SPDX-License-Identifier: MIT */
#pragma once

/* How the monitor sees a dispatch loop that stopped advancing: a page of
 * shared memory the monitor maps before it forks, where each loop says by
 * when it will next be back (its next wake-up plus STALL_GRACE_NS). A loop
 * stuck anywhere, in the kernel included (a /proc lookup that livelocks,
 * ../notes/realtime-path.md), lets its word fall behind the clock; the
 * monitor then demotes it and every client, kills the process and starts
 * a new one. Loops and monitor only store and load words: nothing here
 * locks, allocates or makes a system call. */

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "pace-limits.h"
#include "time-util.h"

/* How far past its next wake-up a loop may be before it counts as stuck:
 * what it does between two sleeps (a promotion of up to
 * max_threads_per_reservation threads, a plan taken) takes well under a
 * millisecond on this VM, but a guest under software emulation (the vm
 * test's) runs its timers tens of ms late; a VM paused by its host is told
 * apart by looking twice (STALL_RECHECK_NS). Detection within 100-200 ms
 * (a kernel livelock lasted minutes) costs the monitor about one wake-up
 * per STALL_GRACE_NS while some loop is active, none while all idle. */
#define STALL_GRACE_NS (100 * NSEC_PER_MSEC)
#define STALL_RECHECK_NS (10 * NSEC_PER_MSEC)
/* A loop asleep without a deadline (no frame on its CPU). */
#define STALL_IDLE UINT64_MAX

typedef struct StallSlot {
        _Atomic uint64_t due_ns;
        _Atomic int32_t tid;
        _Atomic int32_t cpu;
} StallSlot;

typedef struct StallPage {
        StallSlot slot[PACE_MAX_CPUS];
        /* An eventfd of the monitor's: a loop that leaves its idle sleep
         * writes to it, so the monitor needs no timer while all sleep. */
        int wake_fd;
} StallPage;

/* Shared, zeroed, survives fork() (the monitor's, before it forks). */
int stall_page_new(StallPage **ret);
StallPage *stall_page_free(StallPage *p);
void stall_page_reset(StallPage *p);

/* The page the monitor handed to this process (NULL: no monitor). */
StallPage *stall_page_inherited(void);
void stall_page_set_inherited(StallPage *p);

/* The loop's side. */
void stall_slot_start(StallSlot *s, pid_t tid, int32_t cpu);
static inline void stall_slot_due(StallSlot *s, uint64_t due_ns) {
        if (s)
                atomic_store_explicit(&s->due_ns, due_ns, memory_order_relaxed);
}
/* Leaving an idle sleep: the next due, and the monitor woken (one write). */
void stall_slot_active(StallSlot *s, int wake_fd, uint64_t now);

/* What the guard did about a stuck loop. */
typedef struct StallReport {
        pid_t child;      /* the dispatcher it belonged to */
        pid_t tid;        /* the loop found stuck */
        int32_t cpu;
        uint64_t late_ns; /* how long since it last advanced */
        unsigned demoted; /* the child's loop threads put to SCHED_OTHER */
} StallReport;

/* The guard: a thread of the monitor's at SCHED_DEADLINE, which runs before
 * every SCHED_FIFO thread, so that a loop stuck at FIFO 99 on every CPU at
 * once cannot keep it from running, as it would keep the monitor's own
 * FIFO 99 thread. It sleeps on the page's eventfd while every loop sleeps
 * without a deadline, and looks once about every STALL_GRACE_NS while any
 * is active. On a stuck loop it puts every loop thread of the child (those
 * in the page that tgkill() confirms are the child's) to SCHED_OTHER and
 * wakes the monitor through stall_guard_fd(), which then kills the child
 * and sweeps, at FIFO 99, now that nothing above it holds a CPU. It takes
 * its policy when first given a child (where the kernel refuses a deadline
 * reservation, FIFO 99, and says so in stall_guard_policy()). */
typedef struct StallGuard StallGuard;
/* Its thread's name (ps -L, /proc/PID/task/TID/comm). */
#define STALL_GUARD_NAME "pace-stallguard"
int stall_guard_start(StallPage *p, StallGuard **ret);
/* The child to watch (0: none, e.g. while it exits or before it is ready). */
void stall_guard_watch(StallGuard *g, pid_t child);
/* Readable once a report is waiting. */
int stall_guard_fd(const StallGuard *g);
/* 1 and the report, or 0 if none is waiting. */
int stall_guard_take(StallGuard *g, StallReport *ret);
/* "SCHED_DEADLINE (...)" or what it runs at instead, and why. */
const char *stall_guard_policy(const StallGuard *g);

/* The monitor's side (pure: unit tested). strikes[] remembers, per slot,
 * the due it last found overdue: a loop is stuck when the same due is found
 * overdue twice, STALL_RECHECK_NS apart. Returns the index of a stuck slot
 * or -1; *ret_next is when to look again (STALL_IDLE: no active loop). */
int stall_find(const StallPage *p, uint64_t now, uint64_t strikes[PACE_MAX_CPUS], uint64_t *ret_next);
