/* SPDX-License-Identifier: MIT */
#pragma once

/* The processes a dispatch thread holds: identity, their threads, the
 * original scheduling state of every thread it touched, and (strict mode)
 * the group that freezes them. Core code: returns negative errno, never logs. */

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "acct.h"
#include "config.h"
#include "freezer-v1.h"
#include "group.h"
#include "pace-table.h"
#include "sched-util.h"
#include "server.h"
#include "tree.h"

typedef struct ThreadRegistry ThreadRegistry;
typedef struct RegistryEntry RegistryEntry;

/* Original state of every thread any dispatch thread changed, shared by all
 * of them: one process may hold reservations on several CPUs, and the state
 * to restore is whatever it had before the first of them touched it. */
int thread_registry_new(ThreadRegistry **ret);
ThreadRegistry *thread_registry_free(ThreadRegistry *reg);
/* Threads currently held (tests and the exit path). */
size_t thread_registry_size(ThreadRegistry *reg);

typedef struct HeldContext {
        ThreadRegistry *registry;
        PaceWaiting waiting;
        int cpu;
        /* max_threads_per_reservation: threads past it are not moved, so a
         * client with a thousand threads cannot make the dispatcher eat the
         * CPU at SCHED_FIFO 99. 0: no limit. */
        uint32_t max_threads;
        /* Strict mode on the v1 freezer (freezer-v1.h); NULL: none, or
         * the unified hierarchy, where each group freezes itself. */
        const FreezerV1 *freezer;
        /* Reservation groups (group.h); NULL: members are found in
         * /proc/PID/task and accounted per thread. */
        GroupSet *groups;
        /* Trees without a group: their descendants, listed by the main
         * thread (tree.h). */
        TreeSet *trees;
        /* An eventfd the main thread watches: written when a group comes
         * into use, so its periodic housekeeping runs only while there
         * are groups. */
        int housekeeping_fd;
} HeldContext;

typedef struct HeldThread {
        pid_t tid;
        RegistryEntry *entry;
} HeldThread;

typedef struct Held {
        uint64_t id;
        pid_t pid;
        uint64_t start_time;
        int pidfd;
        int procfd; /* /proc/PID, pinned to this process: stale once it exits */
        int taskfd; /* /proc/PID/task: lists its threads, and only its own */
        int listfd; /* the same, for liveness listings (taskfd keeps the scan's place) */
        bool gone;
        bool running;
        /* A member ran somewhere else than its CPU: never promoted again. */
        bool revoked;
        /* The highest FIFO/RR priority the process may give itself
         * (proc_rt_priority_ceiling()): a policy above it was ours. */
        uint32_t rt_ceiling;
        /* Where its members may run (a CPU list for the cpuset): this
         * reservation's CPU, or every CPU of a split reservation's pieces. */
        char cpus[64];
        uint64_t next_group_scan_ns;
        uint64_t next_task_scan_ns; /* next look at /proc/PID/task for new threads */
        uint64_t next_live_list_ns; /* a process too large for one listing: when to try one again */
        unsigned rotation; /* which held thread is promoted first next time */
        bool main_orig_set;
        PaceSchedAttr main_orig;
        HeldThread *threads;
        size_t n_threads, n_allocated;
        /* Strict mode: its v1 freezer group, or on the unified hierarchy
         * its reservation group's cgroup.freeze (-EBADF: none yet). */
        FreezerV1Group *freezer;
        int freeze_fd;
        /* What it covers (PACE_TABLE_SCOPE_*) and, for a thread, which. */
        uint32_t scope;
        pid_t tid;
        Group *group;
        int group_error; /* why the group could not be used (0: fine or not tried) */
        TreeWatch *tree; /* a tree's descendants where no group holds them */
        uid_t uid;       /* the process's owner: a descendant must have the same */
        bool group_logged;
        /* Owned by the dispatch loop (dispatcher.c): the grant, and what
         * the reservation received (acct.h). */
        uint32_t period_slots, budget_slots;
        struct PaceStatsEntry *stats;
        Acct acct;
        /* owned by the dispatch loop: whether the current/next table uses it */
        bool mark;
        bool logged;
        /* Threads left alone at the last scan, past max_threads. */
        uint32_t threads_skipped;
        bool limit_logged;
        /* Owned by the dispatch loop: a budget server (PACE_RES_SERVER,
         * server.h), its window, and the SCHED_FIFO priority it holds now
         * (0: waiting). */
        bool server;
        ServerBudget srv;
        int srv_priority;
        uint64_t srv_usage; /* the members' usage at the last look */
        /* The runnable probe's first look (held_any_runnable()): the stat
         * file of the thread it last found runnable, kept open. */
        int stat_fd;
        pid_t stat_tid;
        bool logged_unconfined;
} Held;

/* Checks that the reservation names a live, ordinary process with the
 * table's start time, owned (real, effective, saved and file-system uid) by
 * the table's uid; a table uid of 0 (root asked) may name any process, but
 * a process that is root in any of those uids only if allow_root. -ESRCH:
 * no such process (or it exited during the check); -ESTALE: the pid
 * belongs to another process now; -EPERM: pid 1 or a kernel thread;
 * -EACCES: another owner than the table says; -EDQUOT: a root process
 * and !allow_root. */
int held_new(const PaceTableReservation *res, bool allow_root, Held **ret);
/* A second pid held_new() refuses like its own (-EPERM): the monitor
 * process that watches this dispatcher. 0: none. */
void held_protect_pid(pid_t pid);
pid_t held_protected_pid(void);
/* Promotes every thread of the process it holds, and looks for new ones
 * in a bounded slice of /proc/PID/task (or the group's list) each time, so
 * the cost never grows with the process's thread count. -ESRCH once the
 * process has exited (the Held is then inert), -EPERM once revoked. */
int held_promote(Held *h, const HeldContext *ctx);
/* The same at another SCHED_FIFO priority: a budget server's
 * PACE_SERVER_PRIORITY outside its own slots (server.h). */
int held_promote_at(Held *h, const HeldContext *ctx, int priority);
/* To the waiting policy (or frozen, in strict mode). Where no cpuset
 * confines the members, a member found outside its CPU revokes the
 * reservation (h->revoked): it ran at our priority elsewhere. */
int held_demote(Held *h, const HeldContext *ctx);
/* Restores every thread it touched to its original state and undoes the
 * freezer group. Accepts NULL. */
Held *held_free(Held *h, const HeldContext *ctx);

/* CPU time the members received on ctx->cpu: the group's accounting, or
 * without a group the sum of its threads' schedstat (threads that exited
 * take theirs with them). */
int held_usage_ns(Held *h, const HeldContext *ctx, uint64_t *ret);
/* Whether any held thread is runnable (state R) right now: called at the
 * end of a slot, it tells a client that wanted more from one that blocked. */
bool held_any_runnable(Held *h);
/* Whether the run of run_ns about to start is to be skipped: the members
 * already had budget_ns in this period, counting what they took between
 * their runs (acct_budget_spent()). Only for a whole reservation with a
 * group that does not weigh its waiting members down (the unified
 * hierarchy without the cpu controller, v1 without a cpu hierarchy apart):
 * there 8 nice-19 spinners took 5 points of the free share. */
bool held_budget_spent(Held *h, const HeldContext *ctx, uint64_t budget_ns, uint64_t run_ns);

/* Whether a reservation group holds the members now, and whether a cpuset
 * holds them to the reservation's one CPU. */
bool held_grouped(const Held *h);
bool held_confined(const Held *h);
/* A thread reservation's one thread still has affinity to ctx's CPU alone
 * (what confines it where no cpuset can: a single thread of a v2 host).
 * A thread that moved itself away revokes the reservation, as at the end
 * of a run. */
bool held_thread_stays(Held *h, const HeldContext *ctx);

/* A reservation that failed its identity check: kept (inert) so that the
 * same reservation in later tables is recognised and not reported again. */
int held_new_inert(const PaceTableReservation *res, Held **ret);
