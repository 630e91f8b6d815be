/* SPDX-License-Identifier: MIT */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "group.h"

/* Asks the system manager (systemd, over the system bus or its private
 * socket) for a transient scope "pace-ID-PID.scope" holding req->pid and
 * those of its descendants group_enter() would move (owned by exactly
 * req->uid, within req->max_threads): Delegate=yes (the subtree below it is
 * ours), in the slice of pid's unit and PartOf= that unit, so stopping the
 * unit still stops the reserved program; CollectMode=inactive-or-failed;
 * CPUWeight=req->cpu_weight unless 0 (the scope's weight against its
 * siblings is the manager's to set, not ours to write). Waits up to a
 * second for pid to be in it (not at all once it exited: -ESRCH); the
 * scope's cgroup path (e.g. /system.slice/pace-3-4242.scope) and the one
 * pid came from into ret. -EOPNOTSUPP for a process that a user's manager
 * runs (its units are not the system manager's to move from); -EPERM, with
 * ret->why, for one whose unit has a sandbox in its cgroup (IPAddressDeny=,
 * DevicePolicy=, SocketBind*=, ...) that a scope outside it would lift.
 * The dispatcher's edge: libsystemd here, never in the core library. */
int scope_make(void *userdata, const GroupScopeRequest *req, GroupScopeAnswer *ret);
/* What scope_make() calls while it waits on the manager (the watchdog's
 * look); NULL: nothing. */
void scope_set_tick(void *userdata, void (*tick)(void *tick_userdata), void *tick_userdata);
