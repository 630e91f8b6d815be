/* SPDX-License-Identifier: MIT */
#pragma once

/* The processes the dispatcher holds: identity, their threads, the original
 * scheduling state of every thread it touched, and the group that holds,
 * accounts and (strict mode) freezes them.
 *
 * A Held has two sides, and each function below belongs to one:
 * - the main thread (SCHED_OTHER) does everything that looks anything up:
 *   it checks the identity (held_new()), creates and enters groups and
 *   freezer groups (held_prepare()), lists and registers threads, opening a
 *   handle of each (held_keep()), and restores and frees (held_free());
 * - the dispatch loop (SCHED_FIFO 99) only executes (held_promote_at(),
 *   held_demote(), the accounting reads): system calls on thread ids and on
 *   descriptors opened in advance, no path, no allocation, no lock, nothing
 *   that grows with the client beyond max_threads_per_reservation.
 * Registered threads travel to the loop, and the ones it lets go travel
 * back, through two single-producer rings (spsc.h).
 *
 * Core code: returns negative errno, never logs. */

#include <poll.h>
#include <stdatomic.h>
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
#include "spsc.h"
#include "tree.h"

typedef struct ThreadRegistry ThreadRegistry;
typedef struct RegistryEntry RegistryEntry;

/* Original state of every thread the dispatcher changed: one process may
 * hold reservations on several CPUs, and the state to restore is whatever
 * it had before the first of them touched it. Main thread only. */
int thread_registry_new(ThreadRegistry **ret);
ThreadRegistry *thread_registry_free(ThreadRegistry *reg);
/* Threads currently held (tests and the exit path). */
size_t thread_registry_size(ThreadRegistry *reg);
/* The first touch records the thread's state. A thread that already looks
 * like our work (FIFO 98, or nice 19 after being born to a waiting parent)
 * cannot tell us its real original: take the process's main thread's, or
 * plain SCHED_OTHER, so restoring never leaves anything real-time. */
int thread_registry_acquire(ThreadRegistry *reg, pid_t tid, pid_t tgid, const PaceSchedAttr *fallback,
                            uint32_t rt_ceiling, int cpu, int *proc_pidfd, RegistryEntry **ret);
/* Drops one reference; the last puts the thread back to its recorded
 * policy and affinity (restore: it is still the thread registered) and
 * closes its handles. */
void thread_registry_release(ThreadRegistry *reg, RegistryEntry *e, bool restore);

typedef struct HeldContext {
        ThreadRegistry *registry;
        PaceWaiting waiting;
        int cpu;
        /* max_threads_per_reservation: threads past it are not moved, so a
         * client with a thousand threads cannot make the dispatcher eat the
         * CPU at SCHED_FIFO 99. */
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
        /* An eventfd the main thread watches: written by a loop that saw
         * threads come and go (held_keep() is then due at once), and when
         * a group comes into use. */
        int housekeeping_fd;
} HeldContext;

/* What a registered thread looks like to the loop: its id and the handles
 * the main thread opened for it. Read-only once handed over. */
struct RegistryEntry {
        pid_t tid;
        pid_t tgid;
        unsigned refs;
        PaceSchedAttr orig;
        bool affinity_saved;
        cpu_set_t orig_affinity;
        /* The CPU it is held to now: a split reservation's pieces move it. */
        _Atomic int pinned_cpu;
        /* A tree's other process (not the one the table names): a pidfd of
         * it, so a pid that changes hands is never taken for it. -1 else. */
        int proc_pidfd;
        /* A pidfd of the thread itself (PIDFD_THREAD, Linux 6.9), readable
         * once it has exited: the loop's check that an id is still ours,
         * with no lookup. -1 where the kernel has none: then the main
         * thread's look marks it gone (dead), and until then an id is at
         * worst a thread that exited within the last look's interval. */
        int thread_pidfd;
        _Atomic bool dead;
        /* Without a group, its schedstat (accounting), opened by the main
         * thread. Never its stat: reading that waits on a lock a starved
         * exec holds (README.md, "What runs at SCHED_FIFO 99"). */
        int schedstat_fd;
        RegistryEntry *next;
};

/* Threads past a reservation's capacity the main thread puts at the
 * waiting policy, at most (the rest keep their own). */
#define HELD_PARKED_MAX 1024u

typedef struct HeldThread {
        pid_t tid;
        RegistryEntry *entry;
} HeldThread;

typedef struct Held {
        /* Identity, set by held_new() and never changed. */
        uint64_t id;
        pid_t pid;
        uint64_t start_time;
        uint32_t scope; /* PACE_TABLE_SCOPE_* */
        pid_t tid;      /* a thread scope's thread */
        uid_t uid;      /* the process's owner: a descendant must have the same */
        uint32_t rt_ceiling; /* the highest FIFO/RR priority it may give itself */
        int cpu;        /* this piece's */
        /* Where its members may run (a CPU list for the cpuset): this
         * reservation's CPU, or every CPU of a split reservation's pieces. */
        char cpus[64];
        int pidfd;      /* the loop polls it: readable once the process exited */
        uint32_t capacity; /* threads it can hold: max_threads_per_reservation when made */

        /* The main thread's. */
        int procfd; /* /proc/PID, pinned to this process: stale once it exits */
        int taskfd; /* /proc/PID/task: lists its threads, and only its own */
        Group *group;
        int group_error;
        bool group_logged;
        TreeWatch *tree;
        FreezerV1Group *freezer;
        bool main_orig_set;
        PaceSchedAttr main_orig;
        /* Every entry registered for it and not yet handed back. */
        RegistryEntry **mine;
        size_t n_mine;
        uint64_t next_keep_ns;
        _Atomic uint32_t threads_skipped; /* past capacity at the last look (the loop logs it) */
        bool limit_logged;
        /* Threads past capacity, put once at the waiting policy (held.c,
         * held_park()), and what they had. */
        struct HeldParked *parked;
        size_t n_parked;
        bool inert;   /* failed its identity check: never promoted */
        bool kept;    /* keeper_collect()'s mark: a plan still names it */
        bool thread_taken; /* a thread scope's thread was registered once */
        bool stood_down;   /* held_stand_down() done */
        /* Threads found in the real-time class behind their policy and put
         * back since the caller last took the count. */
        unsigned put_back;

        /* Between the two. */
        SpscRing incoming; /* main → loop: RegistryEntry * */
        SpscRing dropped;  /* loop → main: RegistryEntry * */
        /* Set by the main thread once the members are where they will be
         * held (their group entered, a delegated scope settled, strict
         * mode's freezer in place): promoted only then. */
        _Atomic bool ready;
        _Atomic int ready_error; /* why it never will be (0: it may) */
        int freeze_fd;           /* strict mode on the unified hierarchy; set before ready */
        _Atomic bool gone;       /* its process (a thread scope: its thread) exited */
        /* The newest plan no longer names it (released, or the broker
         * dropped it): the loop promotes it no more and demotes it at its
         * next change, without waiting for the frame boundary where it
         * takes that plan. */
        _Atomic bool leaving;
        _Atomic bool grouped;    /* a group holds the members (set before ready) */
        _Atomic bool confined;   /* a cpuset of its one CPU holds them */
        _Atomic bool begun;      /* members wait at nice 19 from registration on (held_settle()) */

        /* The loop's. */
        HeldThread *threads;
        struct pollfd *pfds; /* threads[i]'s pidfd at pfds[i] */
        size_t n_threads;
        bool running;
        bool revoked; /* a member ran somewhere else than its CPU */
        pid_t revoked_tid;       /* which member, for the log */
        uint64_t revoked_cpus; /* the CPUs it was found allowed (0-63) */
        unsigned rotation;
        bool logged;
        bool logged_unconfined;
        bool churned; /* asked for a look since the last promotion */
        /* The grant, and what the reservation received (acct.h). */
        uint32_t period_slots, budget_slots;
        struct PaceStatsEntry *stats; /* claimed by the main thread */
        Acct acct;
        /* A budget server (PACE_RES_SERVER, server.h), its window, and the
         * SCHED_FIFO priority it holds now (0: waiting). */
        bool server;
        ServerBudget srv;
        int srv_priority;
        uint64_t srv_usage; /* the members' usage at the last look */
        /* What its members lent through priority-inheritance locks so far
         * (lending.h): added by the main thread, counted by the loop as
         * usage of the budget. */
        _Atomic uint64_t lent_ns;
        bool lent_logged; /* main thread */
        /* The run that closes its period (a slots reservation's): when it
         * began and the members' usage then, or that it was skipped, its
         * budget already spent; loop_period_end() tells from these whether
         * they still wanted the CPU (acct_ran_through()). */
        enum { HELD_CLOSE_UNKNOWN, HELD_CLOSE_READ, HELD_CLOSE_SKIPPED } close;
        uint64_t close_from_ns, close_from_usage;
} Held;

/* Main thread. Checks that the reservation names a live, ordinary process
 * with the table's start time, owned (real, effective, saved and file-system
 * uid) by the table's uid; a table uid of 0 (root asked) may name any
 * process, but a process that is root in any of those uids only if
 * allow_root. 0 and *ret; a HeldRefusal where the table names a process it
 * must not touch; a negative errno where it could not tell (-ESRCH: no such
 * process, or it exited during the check; -EBADMSG: its /proc status or
 * limits unreadable). capacity: the threads it may hold
 * (max_threads_per_reservation). */
int held_new(const PaceTableReservation *res, bool allow_root, uint32_t capacity, Held **ret);

/* Why the dispatcher will not do what the table names to a process
 * (held_new(): hold it; nice_set_apply(): renice it): positive, so never
 * taken for a failure; each with its sentence (held_refusal_to_string()). */
typedef enum HeldRefusal {
        HELD_REFUSED_PROTECTED = 1, /* pid 1, a kernel thread, the dispatcher or its monitor */
        HELD_REFUSED_STALE,         /* the pid belongs to another process now */
        HELD_REFUSED_OTHER_OWNER,   /* another user's than the table's */
        HELD_REFUSED_ROOT,          /* root's, and reserve_root_processes is off */
        HELD_REFUSED_REALTIME,      /* nice only: the thread is real-time, and keeps its policy */
} HeldRefusal;

/* The sentence for a HeldRefusal, or for one of held_new()'s failures
 * (negative errno). Never NULL. */
const char *held_refusal_to_string(int r);
/* A reservation that failed its identity check: kept (inert) so that the
 * same reservation in later tables is recognised and not reported again. */
int held_new_inert(const PaceTableReservation *res, Held **ret);
/* A second pid held_new() refuses like its own (HELD_REFUSED_PROTECTED): the monitor
 * process that watches this dispatcher. 0: none. */
void held_protect_pid(pid_t pid);
pid_t held_protected_pid(void);
/* Main thread: puts the members where they will be held (the group, the
 * freezer group, the tree's watch) and registers its first threads. Called
 * again while it is not ready (a delegated scope still settling). */
void held_prepare(Held *h, const HeldContext *ctx);
/* Main thread: takes back what the loop let go, marks gone what exited,
 * and registers new threads (bounded by capacity) for the loop to take.
 * Returns the number of new ones. */
size_t held_keep(Held *h, const HeldContext *ctx);
/* Main thread: the reservation is over (its process exited, or the newest
 * plan drops it, h->leaving): every thread registered for it that is
 * real-time goes to the waiting policy now, once. The loop, which promotes
 * it no more, demotes it too at its next change; a promotion under way at
 * this very moment lasts at most to the end of its run. */
void held_stand_down(Held *h, const HeldContext *ctx);
/* Main thread, once no loop refers to h any more: restores every thread it
 * registered to its original state, leaves its groups, closes and frees.
 * Accepts NULL. */
Held *held_free(Held *h, const HeldContext *ctx);

/* Loop. Promotes every thread the main thread has registered, starting one
 * further along each time. -ESRCH once the process has exited, -EPERM once
 * revoked, -EAGAIN while it is not ready (held_prepare()). */
int held_promote_at(Held *h, const HeldContext *ctx, int priority);
/* Loop. To the waiting policy (or frozen, in strict mode). Where no cpuset
 * confines the members, a member found outside its CPU revokes the
 * reservation (h->revoked): it ran at our priority elsewhere. */
int held_demote(Held *h, const HeldContext *ctx);
/* Loop. CPU time the members received on ctx->cpu: the group's accounting,
 * or without a group the sum of its threads' schedstat (threads that
 * exited take theirs with them). */
int held_usage_ns(Held *h, const HeldContext *ctx, uint64_t *ret);
/* Loop. Whether the run of run_ns about to start is to be skipped: the
 * members already had budget_ns in this period, counting what they took
 * between their runs (acct_budget_spent()). Only for a whole reservation
 * with a group that does not weigh its waiting members down. The group's
 * usage it read goes to ret_usage (untouched where it read none), which is
 * held_usage_ns()'s figure for a grouped reservation. */
bool held_budget_spent(Held *h, const HeldContext *ctx, uint64_t budget_ns, uint64_t run_ns, uint64_t *ret_usage);
/* Whether a reservation group holds the members now, and whether a cpuset
 * holds them to the reservation's one CPU. */
bool held_grouped(const Held *h);
bool held_confined(const Held *h);
/* Whether what the members take between their runs is counted against the
 * budget (a whole reservation's group that does not weigh its waiting
 * members down): then they wait at SCHED_IDLE, else at nice 19. */
bool held_leak_charged(const Held *h, const HeldContext *ctx);
/* The waiting policy of h's members (not strict mode's freeze). */
void held_waiting_attr(const Held *h, const HeldContext *ctx, PaceSchedAttr *ret);
/* Loop. A thread reservation's one thread still has affinity to ctx's CPU
 * alone (what confines it where no cpuset can: a single thread of a v2
 * host). A thread that moved itself away revokes the reservation. */
bool held_thread_stays(Held *h, const HeldContext *ctx);
