/* SPDX-License-Identifier: MIT */
#pragma once

/* Undoing what a dead dispatcher left behind: threads of reserved processes
 * still at the running priority, and the unified hierarchy's frozen groups
 * (the v1 freezer's are freezer_v1_sweep()'s). Shared by
 * the dispatcher's start-up sweep, its SIGABRT path and the monitor process
 * (monitor.c), which runs it the moment a dispatcher dies. Core code:
 * returns negative errno, never logs. */

#include <stdbool.h>
#include <stddef.h>

#include "pace-table.h"

/* Every thread of the table's processes (identity checked like a promotion:
 * pid, start time, never pid 1, a kernel thread or ourselves) that sits at
 * SCHED_FIFO/RR PACE_RUNNING_PRIORITY goes to SCHED_OTHER. Returns how many
 * threads were demoted. */
unsigned sweep_demote_table(const PaceTableBuffer *t);

/* While dispatching: a thread of the table's processes (and a tree's
 * descendants) that the kernel runs in the real-time class behind a
 * non-real-time policy (sched_stat_class_leaked(): a child born as its
 * parent was promoted) is put back in its own class; the policies the
 * dispatcher hands out are left alone. allow_root: the configuration's
 * reserve_root_processes. A look reads the stat files of at most budget
 * threads, from the *cursor-th of the walk on, and moves *cursor on (to 0
 * once the walk is covered), so that a client with thousands of threads
 * is covered over several looks, each of bounded cost. Returns how many
 * were put back. */
unsigned sweep_reclass_table(const PaceTableBuffer *t, bool allow_root, unsigned budget, unsigned *cursor);

/* Every thread in the res-* groups under group_base (group.h: a tree's
 * descendants, which the table does not name) at SCHED_FIFO/RR
 * PACE_RUNNING_PRIORITY goes to SCHED_OTHER. Returns how many. */
unsigned sweep_demote_groups(const char *group_base);
/* The first pass of a sweep at SCHED_FIFO 99 (the monitor's): every thread
 * in the res-* groups under group_base at SCHED_FIFO/RR
 * PACE_RUNNING_PRIORITY or PACE_SERVER_PRIORITY goes to SCHED_OTHER, with
 * no lookup in /proc: only the groups' own lists are opened (cgroupfs), and
 * each thread is looked at through sched_getattr(). A /proc lookup of a
 * process that is exiting can spin in the kernel at that priority
 * (../shared/notes/realtime-path.md); the full sweep, which reads the
 * threads' limits and stat files, comes after, at SCHED_OTHER. Returns how
 * many it demoted. */
unsigned sweep_demote_groups_quick(const char *group_base);
/* The same, as a callback (group_sweep_dead()). */
void sweep_demote_groups_void(const char *group_base);

/* Reads both buffers of the table file at path with pread() (no mapping, so
 * a file the broker truncates cannot raise SIGBUS here) into *scratch, one
 * after the other, and demotes what each names. Both, not only the
 * published one: the table in force in a dead dispatcher may be the older
 * buffer (a newer one refused, or not yet adopted at a frame boundary).
 * Only the part up to the slots is read: the sweep needs the reservations.
 * Returns the number of threads demoted, or -errno if the file cannot be
 * read or is not a pace table (-EBADMSG, -EPROTO). */
int sweep_table_file(const char *path, PaceTableBuffer *scratch, unsigned *ret_demoted);

/* Threads of a dispatcher that is dying but not yet gone (a zombie whose
 * thread is stuck in the kernel at SCHED_FIFO 99, with SIGKILL pending:
 * what a kill of the monitor and its child together can leave, with no
 * monitor to demote it) go to SCHED_OTHER, so that whatever holds them can
 * run and they can finish dying. A process counts if it is named
 * pace-dispatcher, belongs to uid 0 in all four uids (which only root can
 * make) and has SIGKILL pending or an exited main thread; never self nor
 * the monitor. Returns how many threads. */
unsigned sweep_dying_dispatchers(void);

/* The dispatcher instance's name for a runtime directory: pace.<hash of
 * runtime_dir>, its directory in every cgroup hierarchy it uses (reservation
 * groups, the v1 freezer), so a test instance never touches the system's. */
void sweep_instance_name(const char *runtime_dir, char *ret, size_t size);
