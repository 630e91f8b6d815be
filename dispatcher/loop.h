/* SPDX-License-Identifier: MIT */
#pragma once

/* One managed CPU's dispatch loop: a thread pinned to the CPU at SCHED_FIFO
 * 99 that follows the frame in force, demoting the owner whose run ends
 * and promoting the one whose run starts, and adopts a new table only at a
 * frame boundary (see README.md, "Threads and wake-ups" and "Table
 * swaps"). It never writes to the log itself: its messages go through the
 * shared log ring, which the main thread drains. */

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "frame.h"
#include "held.h"
#include "log-ring.h"
#include "pace-stats.h"
#include "stall.h"

/* Interrupts a loop's sleep (futex or clock_nanosleep) so it looks at the
 * stop flag, the reader epoch and the configuration. */
#define LOOP_KICK_SIGNAL SIGUSR1
#define LOOP_STACK_SIZE (256u * 1024u)
/* How many free intervals ahead a loop weighs when servers ask for free
 * time; beyond them it counts no free time (it takes less, never more). */
#define LOOP_FREE_AHEAD 128u

/* What a loop runs, made by the main thread (keeper.c) from one checked
 * table and never changed once handed over: this CPU's reservations with
 * their grants, and the frame as runs of one owner each. */
typedef struct PlanEntry {
        Held *held;
        uint32_t period_slots, budget_slots;
        bool server;
} PlanEntry;

#define LOOP_PLAN_NONE 3u
#define LOOP_PLAN_WORD(cur, waiting) ((uint32_t) (cur) | (uint32_t) (waiting) << 2)
#define LOOP_PLAN_CUR(word) ((word) & 3u)
#define LOOP_PLAN_WAITING(word) (((word) >> 2) & 3u)

typedef struct LoopPlan {
        uint64_t gen; /* the table generation it comes from */
        PlanEntry *entries;
        size_t n_entries;
        /* Slot value (table index + 1) → Held, NULL for free slots and
         * for owners whose slots count as free (gone, ignored). */
        Held **by_owner;
        FrameRun *runs;
        uint32_t n_runs, frame_slots;
        /* The table slot the rotated frame begins at. Every CPU keeps one
         * global grid: table slot = (CLOCK_MONOTONIC / slot) mod frame, so
         * the pieces of a split reservation line up across CPUs and a
         * table swap never shifts anyone's slots in time. */
        uint32_t rot;
} LoopPlan;

/* Everything the loops and the main thread both see. The main thread
 * writes the handovers (plans, configs and config_gen, stop); each loop
 * takes them up at a point of its own choosing and says so in its acked_*
 * words. */
typedef struct LoopShared {
        /* What the loops validate tables against: configs[config_live],
         * switched at each CPU's next frame boundary after a reload. */
        PaceConfig configs[2];
        _Atomic unsigned config_live;
        _Atomic uint64_t config_gen;

        _Atomic uint32_t epoch_word; /* futex of idle loops: bumped at every handover */
        _Atomic bool stop;
        _Atomic uint32_t hang_word; /* never woken: where a wedged loop waits */

        /* Set before the loops start and kept until they are gone. */
        LogRing *log;
        PaceStatsFile *stats; /* NULL: no accounting file */
        /* The monitor's view of the loops (stall.h); NULL: no monitor. */
        StallPage *stall;
        /* Test hook: spun at every change of owner, to raise what a change
         * costs (PACE_DISPATCHER_TEST_CHANGE_SPIN_US); 0 otherwise. */
        uint64_t test_change_spin_ns;
} LoopShared;

typedef enum LoopState {
        LOOP_STARTING,
        LOOP_RUNNING,
        LOOP_EXITED,
} LoopState;

/* The loop's last promotions, for the main thread's reading of lent
 * priority (lending.h). */
#define LOOP_PROMOTED_RING 16

typedef struct CpuLoop {
        LoopShared *shared;
        int32_t cpu;
        uint32_t index; /* among the dispatcher's loops: its PaceStatsCpu */
        pthread_t thread;
        /* Its thread id, and its last promotions, each with the instant it
         * began: a member already blocked on a PI lock when the loop
         * promotes it lends its priority in the loop's name (the kernel
         * raises the boost from the sched_setattr() call), and the main
         * thread finds the member's reservation here. Two stores a
         * promotion, no system call. */
        _Atomic pid_t tid;
        struct {
                _Atomic(struct Held *) held;
                _Atomic uint64_t ns;
        } promoted[LOOP_PROMOTED_RING];
        _Atomic unsigned promoted_next;
        bool created;
        _Atomic int state;
        /* The plan handover, three buffers and one word: the buffer the
         * loop runs (bits 0-1) and the one waiting for it (bits 2-3;
         * LOOP_PLAN_NONE: none). The main thread fills a buffer that is
         * neither and makes it the waiting one with a compare-and-swap (one
         * that was still waiting is free again); the loop, at a frame
         * boundary or when idle, makes the waiting one its own the same way.
         * So the newest table always goes out at once, and no buffer is
         * written while it may be read. */
        LoopPlan plans[3];
        _Atomic uint32_t plan_word;
        /* Bumped when the loop enters and leaves every sleep, and on every
         * idle pass: what the watchdog (watchdog.h) looks at. */
        _Atomic uint64_t beats;
        _Atomic uint64_t acked_config;
        _Atomic int hang; /* test hook: a LoopHang at the next chance */
        StallSlot *stall; /* this loop's word in the monitor's page, or NULL */

        /* Everything below belongs to the dispatch thread. */
        HeldContext ctx;
        const PaceConfig *config; /* the one in force on this CPU */
        uint64_t config_gen;
        const LoopPlan *cur;      /* in force (NULL: none yet) */

        /* The main thread's (keeper.c): every Held it made for this CPU
         * and has not freed yet. */
        Held **owned;
        size_t n_owned;

        /* Budget servers (server.h) of the plan in force, and what their
         * priorities depend on: the run in force (its table owner, or
         * free). */
        Held **servers;
        size_t n_servers;
        Held *run_owner;
        bool run_free;
        /* Free time (server.h): the last instant non-real-time work surely
         * had the CPU; the free interval under way (0: none) and the
         * servers' summed usage when it began; until when servers may
         * hold a priority in it. free_ahead: scratch for the free
         * intervals ahead. */
        uint64_t nonrt_turn_ns, free_since_ns, free_since_usage, free_take_until_ns;
        uint64_t free_ahead[LOOP_FREE_AHEAD][2];
        /* How late its timer wakes it, and how long the reading before a
         * change takes (without, with a period's end): together, how long
         * before a change of owner the loop wakes (loop.c). */
        uint64_t late_ns, prep_ns[2];
        /* What a change of owner costs this thread (proto/pace-stats.h):
         * the window under way (since when, its CPU time then, the changes
         * so far) and the last windows' costs per change. */
        uint64_t cost_since_ns, cost_since_cpu_ns, cost_changes;
        uint64_t cost_windows[PACE_STATS_COST_WINDOWS];
        unsigned cost_next;
} CpuLoop;

/* Allocates every buffer the loop will ever use (a dispatch thread under
 * mlockall must not fault or allocate at SCHED_FIFO 99 for its tables and
 * runs). max_frame_slots: the longest frame the configuration allows. */
int loop_init(CpuLoop *l, LoopShared *shared, uint32_t index, int32_t cpu, uint32_t max_frame_slots);
/* Frees them; the thread must be gone (or never started). */
void loop_done(CpuLoop *l);
/* What one loop locks in memory (its buffers and stack), for the
 * RLIMIT_MEMLOCK the dispatcher asks for. */
uint64_t loop_memory_needs(uint32_t max_frame_slots);

/* The kick's handler, installed without SA_RESTART, so a kick ends a futex
 * wait or a clock_nanosleep. The signal must stay blocked in every thread
 * but the loops (they unblock it themselves). */
int loop_setup_kick(void);

/* Starts the dispatch thread, pinned to l->cpu at SCHED_FIFO
 * PACE_DISPATCHER_PRIORITY, holding processes with ctx. Returns
 * pthread_create()'s error as -errno (-EPERM: no real-time runtime;
 * -EINVAL: the CPU is not online). */
int loop_start(CpuLoop *l, const HeldContext *ctx);
/* Started and not yet exited. */
bool loop_running(const CpuLoop *l);
bool loop_exited(const CpuLoop *l);
void loop_kick(CpuLoop *l);
/* Joins an exited thread (0, also if none was started); -EBUSY if it still
 * runs (wedged: its memory must then be left alone). */
int loop_join(CpuLoop *l);

/* Whether the loop has taken up the configuration of generation gen, or a
 * later one. */
bool loop_acked_config(const CpuLoop *l, uint64_t gen);
uint64_t loop_beats(const CpuLoop *l);
/* Test hooks: at its next promotion or idle pass the loop stops for good. */
typedef enum LoopHang {
        LOOP_HANG_NONE,
        /* Blocked on a futex, without beats, and telling the monitor it is
         * idle: a wedge only systemd's watchdog can see. */
        LOOP_HANG_WEDGE,
        /* Spinning at SCHED_FIFO 99 without advancing, like a loop that
         * livelocks in the kernel: what the monitor's stall check is for. */
        LOOP_HANG_SPIN,
} LoopHang;
void loop_hang(CpuLoop *l, LoopHang how);

/* Wakes every idle loop, so it looks at its plan, the configuration and
 * the stop flag. */
void loop_shared_wake_idle(LoopShared *s);
