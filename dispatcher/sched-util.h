/* SPDX-License-Identifier: MIT */
#pragma once

/* Thin wrappers over the scheduling system calls the dispatcher needs.
 * glibc 2.36 (Debian 12) has no sched_setattr(), so they are made by
 * syscall() with the kernel's layout from sched-attr.h. */

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "sched-attr.h"

#ifndef SCHED_RESET_ON_FORK
#define SCHED_RESET_ON_FORK 0x40000000
#endif
#define PACE_SCHED_FLAG_RESET_ON_FORK 0x01ULL

/* The priorities of README.md, "Architecture": the dispatcher preempts the reservations it
 * runs, and reservations preempt every ordinary real-time user below them. */
#define PACE_DISPATCHER_PRIORITY 99
#define PACE_RUNNING_PRIORITY 98
/* PACE_SERVER_PRIORITY (97, pace-table.h): a budget server outside its own
 * slots, below every owner's running priority. */
#include "pace-table.h"
_Static_assert(PACE_SERVER_PRIORITY < PACE_RUNNING_PRIORITY, "a server never preempts a slot's owner");
#define PACE_WAITING_NICE_VALUE 19

int sched_attr_get(pid_t tid, PaceSchedAttr *ret);
int sched_attr_set(pid_t tid, const PaceSchedAttr *attr);

/* The attributes the dispatcher hands out. */
void sched_attr_running(PaceSchedAttr *ret);
/* SCHED_FIFO priority (PACE_RUNNING_PRIORITY, or a server's
 * PACE_SERVER_PRIORITY), reset on fork. */
void sched_attr_running_at(int priority, PaceSchedAttr *ret);
void sched_attr_waiting_nice(PaceSchedAttr *ret);
/* Where no cpu controller weighs a reservation's waiting members down but
 * their group counts what they take between runs against the budget
 * (held_leak_charged()), they wait at SCHED_IDLE, reset on fork: weight 3
 * against nice 19's 15. Measured here beside a nice-0 spinner on one CPU
 * (3 s each): 32 spinners at nice 19 took 32.1% of what the two had, at
 * SCHED_IDLE 8.5%; 8 of them 10.7% and 2.3%. On the unified-only view the
 * soak's hogs fell to 17% beside a 32-thread client waiting at nice 19,
 * whose time between runs was more than its whole budget, so the charge
 * could not take it back. A parked thread's attributes, at nice 19. */
void sched_attr_waiting_idle(PaceSchedAttr *ret);
/* Sets a waiting policy. SCHED_IDLE is reached through nice 19: on this
 * kernel (6.18, EEVDF) a thread set from SCHED_FIFO straight to SCHED_IDLE
 * takes far more than its weight, measured beside a nice-0 spinner on one
 * CPU with 2 ms of FIFO 98 in every 20 ms (200 periods): one such thread
 * took 29.0% (the hog 69.2%), 24 of them 94.4% (the hog 2.9%). Through
 * nice 19 the same took 9.9% and 15.5% (at nice 19 alone, 10.9% and
 * 32.4%): a fair policy first places the thread among the fair ones at
 * the weight it had, and SCHED_IDLE then only reweighs it. One system call
 * more per thread, only where members wait at SCHED_IDLE. */
int sched_attr_set_waiting(pid_t tid, const PaceSchedAttr *waiting);
/* What a thread past a reservation's capacity waits at (held.c): SCHED_IDLE,
 * reset on fork. Weight 3 against nice 19's 15: on a host where no cpu
 * controller weighs a reservation's members down, 60 of them at nice 19
 * took half the free time from a nice-0 process; parked, they take a
 * sixth of what they took. */
void sched_attr_parked(PaceSchedAttr *ret);
bool sched_attr_is_parked(const PaceSchedAttr *a);
/* What we may have given it: our running priorities, or a waiting policy
 * (nice 19, SCHED_IDLE; a thread born to a member waiting at SCHED_IDLE
 * keeps it without the flag). A thread that chose one of these itself
 * looks the same, which is why the registry takes its process's main
 * thread's state for it. */
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
