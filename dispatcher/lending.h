/* SPDX-License-Identifier: MIT */
#pragma once

/* Priority that reserved threads lend through priority-inheritance locks.
 *
 * A member that blocks on a PI futex lends the owner its priority: the
 * owner runs at SCHED_FIFO 97 or 98, on any CPU, while the member uses no
 * CPU time at all, so a budget measured on members never runs out (issue
 * 26, case 2: a hog beside the lender kept 7% against a 5% grant). The
 * kernel says when it happens: its sched_pi_setprio event names the task
 * boosted, to what, and (as the task that raised the event) the waiter
 * whose priority it got, unless the boost came from a change of a blocked
 * waiter's priority: then the raiser is the dispatch loop that promoted
 * it, and the loop's record of its promotions names the reservation. The
 * dispatcher enables that one event, filtered to pace's priorities, in a
 * tracing instance of its own, and charges each lent interval to the
 * waiter's reservation as if the waiter had run it.
 *
 * The waiter's side cannot be seen without CAP_SYS_PTRACE (its wchan), and
 * the owner may be in any process: the event is the one view that needs
 * neither. Creating the instance needs uid 0 and a writable tracefs, no
 * capability.
 *
 * Core code: returns negative errno, never logs. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The kernel's priorities (0 most urgent) of SCHED_FIFO 99, 98 and 97:
 * a boost to one of them comes from the dispatcher's own threads or from a
 * reserved member (PACE_RUNNING_PRIORITY, PACE_SERVER_PRIORITY). */
#define LENDING_PACE_PRIO_MAX 2

typedef struct Lending Lending;

/* Called for every interval lent: ns of CPU priority given away to the
 * task owner. raiser raised the boost at raised_ns: the waiter, which
 * blocked at its priority, or whoever changed a blocked waiter's priority
 * then (a dispatch loop promoting it). */
typedef void (*LendingCharge)(void *userdata, pid_t raiser, uint64_t raised_ns, pid_t owner, uint64_t ns);
/* Whether task owner still runs at one of pace's priorities by a boost:
 * what ends a lending whose end the trace lost. */
typedef bool (*LendingStillBoosted)(void *userdata, pid_t owner);

int lending_new(Lending **ret);
Lending *lending_free(Lending *l);

/* Text read from the instance's trace_pipe (any piece of it: a line split
 * between two reads is kept until its end comes). Lines other than the
 * event, and events that are not about pace's priorities, are skipped. */
void lending_feed(Lending *l, const char *text, size_t len, LendingCharge charge, void *userdata);
/* Charges every lending still going on up to now_ns, and drops those whose
 * owner is no longer boosted (still_boosted NULL: keeps them). */
void lending_charge_ongoing(Lending *l, uint64_t now_ns, LendingCharge charge, LendingStillBoosted still_boosted,
                            void *userdata);
/* Lendings in progress (for tests and the log). */
size_t lending_active(const Lending *l);

/* The tracing instance name under tracefs ("/sys/kernel/tracing"), made
 * anew (a dead predecessor's of the same name removed first) with the one
 * event, CLOCK_MONOTONIC time stamps and a small buffer: its trace_pipe,
 * non-blocking, into *ret_fd. -ENOENT where there is no tracefs. */
int lending_trace_open(const char *tracefs, const char *name, int *ret_fd);
/* The instance removed (its trace_pipe must be closed first). */
void lending_trace_remove(const char *tracefs, const char *name);
/* Every pace.<16 hex digits> instance that a dead dispatcher left (SIGKILL
 * leaves it): the kernel refuses to remove one whose trace_pipe a live
 * dispatcher holds open (EBUSY), so that one stays. How many went. */
unsigned lending_trace_sweep(const char *tracefs);

#define LENDING_TRACEFS "/sys/kernel/tracing"
/* Whether a task runs at one of pace's priorities now, more urgent than
 * its own policy gives it (/proc/TID/stat: the priority it runs at, field
 * 18, against its policy and real-time priority, 41 and 40). For
 * LendingStillBoosted. */
bool lending_task_boosted(pid_t tid);
