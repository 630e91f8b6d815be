/* SPDX-License-Identifier: MIT */
#pragma once

/* Thin wrappers over the scheduling system calls the dispatcher needs.
 * glibc 2.36 (Debian 12) has no sched_setattr(), and newer glibc declares
 * its own struct sched_attr, so the kernel ABI layout is spelled out here
 * under a name of our own. */

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#ifndef SCHED_RESET_ON_FORK
#define SCHED_RESET_ON_FORK 0x40000000
#endif
#define PACE_SCHED_FLAG_RESET_ON_FORK 0x01ULL
#ifndef SCHED_DEADLINE
#define SCHED_DEADLINE 6
#endif

/* The priorities of README.md, "Architecture": the dispatcher preempts the reservations it
 * runs, and reservations preempt every ordinary real-time user below them. */
#define PACE_DISPATCHER_PRIORITY 99
#define PACE_RUNNING_PRIORITY 98
/* PACE_SERVER_PRIORITY (97, pace-table.h): a budget server outside its own
 * slots, below every owner's running priority. */
#include "pace-table.h"
_Static_assert(PACE_SERVER_PRIORITY < PACE_RUNNING_PRIORITY, "a server never preempts a slot's owner");
#define PACE_WAITING_NICE_VALUE 19

typedef struct PaceSchedAttr {
        uint32_t size;
        uint32_t sched_policy;
        uint64_t sched_flags;
        int32_t sched_nice;
        uint32_t sched_priority;
        uint64_t sched_runtime;
        uint64_t sched_deadline;
        uint64_t sched_period;
        uint32_t sched_util_min;
        uint32_t sched_util_max;
} PaceSchedAttr;

int sched_attr_get(pid_t tid, PaceSchedAttr *ret);
int sched_attr_set(pid_t tid, const PaceSchedAttr *attr);

/* The attributes the dispatcher hands out. */
void sched_attr_running(PaceSchedAttr *ret);
/* SCHED_FIFO priority (PACE_RUNNING_PRIORITY, or a server's
 * PACE_SERVER_PRIORITY), reset on fork. */
void sched_attr_running_at(int priority, PaceSchedAttr *ret);
void sched_attr_waiting_nice(PaceSchedAttr *ret);
/* What a thread past a reservation's capacity waits at (held.c): SCHED_IDLE,
 * reset on fork. Weight 3 against nice 19's 15: on a host where no cpu
 * controller weighs a reservation's members down, 60 of them at nice 19
 * took half the free time from a nice-0 process; parked, they take a
 * sixth of what they took. */
void sched_attr_parked(PaceSchedAttr *ret);
bool sched_attr_is_parked(const PaceSchedAttr *a);
bool sched_attr_is_ours(const PaceSchedAttr *a);
/* SCHED_FIFO, SCHED_RR or SCHED_DEADLINE. */
bool sched_attr_is_realtime(const PaceSchedAttr *a);
/* Whether a process whose real-time ceiling (proc_rt_priority_ceiling())
 * is ceiling could have given itself a: any non-real-time policy, or a
 * FIFO/RR priority up to the ceiling (an unprivileged thread may always
 * lower its own priority, which is why "below ours" proves nothing). */
bool sched_attr_owner_could_set(const PaceSchedAttr *a, uint32_t ceiling);

/* A thread the kernel runs in the real-time class while its policy says
 * otherwise: clone() copies the parent, reset-on-fork flag included, when
 * it begins, but takes the child's priority from the parent as it stands a
 * moment later, so a parent without the flag that turns SCHED_FIFO in
 * between has such a child (no policy check sees it, and it stays
 * real-time for good). stat is the text of the thread's /proc stat file. */
bool sched_stat_class_leaked(const char *stat);
/* The same from the text of a thread's /proc sched file. */
bool sched_sched_class_leaked(const char *text);
/* The same for thread tid of process tgid, from its /proc sched file (its
 * stat file where there is none): 1 or 0, or a negative errno if it cannot
 * be read (gone). */
int sched_thread_class_leaked(pid_t tgid, pid_t tid);
/* Puts such a thread back in its policy's class: the kernel reconsiders
 * the class only when something changes, so the policy is changed (to
 * SCHED_BATCH, or SCHED_OTHER from BATCH or IDLE) and back, nice level and
 * flags kept. A priority lent through a PI mutex stays: the kernel keeps
 * that across any change. */
int sched_attr_reclass(pid_t tid);

/* Every mutex a dispatch thread (SCHED_FIFO 99) can wait for is also taken
 * by a thread below it (the main thread, the keeper): without priority
 * inheritance a real-time client preempting the holder holds the dispatch
 * thread too, unboundedly (../notes/realtime-path.md). */
void pi_mutex_init(pthread_mutex_t *m);
