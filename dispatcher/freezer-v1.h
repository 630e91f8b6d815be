/* SPDX-License-Identifier: MIT */
#pragma once

/* Strict mode ("waiting": "freeze") on the cgroup v1 freezer hierarchy: the
 * whole backend, so it can be read alone. A dispatcher instance owns
 * <mount>/pace.<hash> (FreezerV1); each reservation it holds gets
 * pace.<hash>/res-<id> (FreezerV1Group), frozen between its slots. The
 * unified hierarchy's strict mode is its reservation group's cgroup.freeze
 * (group-unified.c). Core code: returns negative errno, never logs.
 *
 * Thread safety: a FreezerV1 is written only by open and anchor, before
 * the dispatch threads exist; they then share it read-only. A
 * FreezerV1Group belongs to one dispatch thread. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "macro.h"

typedef struct FreezerV1 FreezerV1;
typedef struct FreezerV1Group FreezerV1Group;

/* Where the v1 freezer hierarchy is mounted, from proc_root's
 * self/mountinfo. -EOPNOTSUPP if it is not. */
int freezer_v1_find_root(const char *proc_root, char *ret_path, size_t size);

/* The freezer hierarchy's pace.<name> directory for instance name (see
 * sweep_instance_name()); nothing is created. -EOPNOTSUPP without a v1
 * freezer. Used as it is by the monitor, which only sweeps. */
int freezer_v1_open(const char *proc_root, const char *name, FreezerV1 **ret);
/* The instance's directory, with an empty group "anchor" in it kept frozen
 * until freezer_v1_close(): the v1 freezer flips a static key (kernel text
 * patching, IPIs to every CPU) whenever the number of frozen groups goes
 * between 0 and 1, which made every slot switch cost ~120 µs; with the
 * anchor it never reaches 0. */
int freezer_v1_anchor(FreezerV1 *f);
/* The hierarchy's mount (it must stay writable in the read-only view) and
 * the instance's directory below it. */
const char *freezer_v1_root(const FreezerV1 *f);
const char *freezer_v1_base(const FreezerV1 *f);
/* Thaws and removes the anchor and the instance's directory, whoever made
 * them: a dispatcher the monitor replaced made them, and the instance ends
 * with whoever closes last (what is still in use refuses to go). Accepts
 * NULL. */
FreezerV1 *freezer_v1_close(FreezerV1 *f);
DEFINE_TRIVIAL_CLEANUP_FUNC(FreezerV1 *, freezer_v1_close);

/* Every res-* group of the instance thawed (anchor excepted) and, if remove,
 * its processes moved to the hierarchy's root and the group removed: what a
 * dead dispatcher left, so nothing stays frozen because it died. Returns
 * how many groups were found; 0 for NULL. */
unsigned freezer_v1_sweep(const FreezerV1 *f, bool remove);

/* One reservation's group, made at its first promotion: procfd is the
 * process's /proc/PID (where it came from is read from its "cgroup"), and
 * id the process (its whole thread group, through cgroup.procs: threads
 * and children created later are born inside) or, if thread, the one
 * thread (tasks). All or nothing: on failure nothing is left made. */
int freezer_v1_enter(const FreezerV1 *f, uint64_t id, int procfd, pid_t member, bool thread,
                     FreezerV1Group **ret);
/* FROZEN or THAWED, through a freezer.state kept open: a slot switch pays
 * one write. */
int freezer_v1_freeze(FreezerV1Group *g, bool frozen);
/* Thawed, every process in it (children the client forked too) back where
 * the member came from, or to the root if that group is gone, and the
 * group removed. Accepts NULL. */
FreezerV1Group *freezer_v1_leave(FreezerV1Group *g);

/* The group's directory (<base>/res-<id>). */
int freezer_v1_group_path(const FreezerV1 *f, uint64_t id, char *ret, size_t size);
