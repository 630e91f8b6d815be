/* SPDX-License-Identifier: MIT */
#pragma once

/* Limits someone else set on a process through its cgroups, which a
 * reservation would lift: the dispatcher moves reserved processes into
 * groups of its own (dispatcher/group.h), and every level it takes a
 * process out of stops applying. Which levels those are:
 *
 *   cgroup v1 (hybrid hosts)  the cpu hierarchy's, all below its root
 *                              (cpu.cfs_quota_us); the other v1 hierarchies
 *                              pace moves through carry no limits it drops
 *                              (cpuacct), or only narrower ones (cpuset:
 *                              the reservation's CPUs, within the process's
 *                              affinity).
 *   unified only               every level below the root; under systemd
 *                              (a path through *.slice) only those below
 *                              the last slice, since the scope pace asks
 *                              for sits in that slice, and not pids.max,
 *                              which systemd sets on every unit, the scope
 *                              included (DefaultTasksMax=).
 *
 * Core code: no logging; reads files under a root given by the caller. */

#include <stddef.h>
#include <sys/types.h>

/* From the text of the process's /proc/PID/cgroup, and the cgroup file
 * systems under sys_cgroup ("/sys/fs/cgroup"): 1 with a sentence naming the
 * first such limit in ret ("cgroup /a/b sets cpu.max to 10000 100000"), 0
 * if there is none, negative errno if the text cannot be read. */
int cgroup_limit_lifted(const char *sys_cgroup, const char *proc_cgroup_text, char *ret, size_t size);
/* The same for a process by pid, read from /proc (ret may be NULL): 0 also
 * when its cgroup file cannot be read (gone). */
int cgroup_limit_lifted_pid(const char *sys_cgroup, pid_t pid, char *ret, size_t size);
