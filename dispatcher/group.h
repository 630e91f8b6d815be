/* SPDX-License-Identifier: MIT */
#pragma once

/* Reservation groups, the dispatcher's enforcement backends behind one
 * interface: each reservation's members live in a cgroup of its own, on
 * the unified hierarchy (group-unified.c) or, on a hybrid host, in v1's
 * cpuacct (group-v1.c). Threads and children the members create later are
 * born inside, so the dispatcher finds them by reading the group's lists
 * instead of walking /proc, the group's CPU accounting says what the
 * reservation really received, and where the host offers it the group
 * confines its members to the reservation's CPUs, weighs its waiting
 * members next to nothing, and (unified) freezes them in strict mode.
 * Where neither hierarchy can be used there is no GroupSet: the /proc
 * fallback (held.c, tree.c) finds members itself.
 *
 * Groups are set up and torn down by the main thread; the dispatch
 * threads touch them only through file descriptors opened once, so a
 * promotion reads one small file and allocates nothing.
 *
 * Core code: returns negative errno, never logs. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct GroupSet GroupSet;
typedef struct Group Group;

/* Picks the backend and creates the dispatcher's base group `name`,
 * removing a crashed run's leftovers of the same name first: v1's cpuacct
 * hierarchy (libcgroup) where the host has one; else the unified
 * hierarchy's root if this process lives there (no manager owns it), or
 * delegated scopes under a manager. -EOPNOTSUPP with a sentence in why
 * when groups cannot be used here (no cgroup hierarchy; cpuacct mounted
 * together with cpu under RT_GROUP_SCHED, where every group would need
 * real-time runtime of its own and the kernel caps their sum). A group set
 * made with a limitation (no cpu or cpuset controller, RT_GROUP_SCHED)
 * returns 0 and says it in why. */
/* rt_share_ppm: what reservations may use of each CPU (the rest is the
 * non-real-time share), the real-time runtime the shared cpu group takes
 * under RT_GROUP_SCHED. owner: the process whose life marks the groups as
 * in use (the monitor, or the dispatcher itself without one). */
int group_set_new(const char *name, uint32_t rt_share_ppm, pid_t owner, GroupSet **ret, char *why, size_t why_size);
/* Removes the base group (empty by then: every Group was released). */
GroupSet *group_set_free(GroupSet *s);
/* The hierarchy's mount point, e.g. /sys/fs/cgroup/cpuacct. */
const char *group_set_root(const GroupSet *s);
/* "cgroup v1" or "unified", for messages. */
const char *group_set_backend_name(const GroupSet *s);
/* Whether waiting members sit in a group of the least cpu weight (v1's
 * shared cpu group, or the unified cpu controller's cpu.weight 1). */
bool group_set_weighs(const GroupSet *s);
/* Groups left under the base (for tests and the exit path). */
size_t group_set_count(GroupSet *s);

/* The group of reservation id, created on first use; shared by the pieces of
 * a split reservation (one per CPU), removed when the last lets go. */
int group_acquire(GroupSet *s, uint64_t id, Group **ret);
/* Moves every member back to where the first one came from (or the root if
 * that group is gone) and removes the group once nobody holds it. */
void group_release(GroupSet *s, Group *g);
/* The removal, if nobody is left inside, while references remain (the
 * reservation's process exited, but a loop may still read the group's
 * descriptors, which then fail): the object goes with the last
 * group_release(), which moves out whoever lives on. */
void group_retire(GroupSet *s, Group *g);

/* Whom a group holds. scope as in pace-table.h: the process (all its
 * threads), the one thread, or the process and its descendants. A tree's
 * other processes are moved in only if owned by exactly uid and held by no
 * cgroup limit of their own; the walk that finds them reads the children
 * of processes only while the threads it looks at stay within max_threads
 * (proc_list_owned_descendants()). cpus (a kernel CPU
 * list, e.g. "1" or "0-1"): where the host has a cpuset hierarchy, the
 * members are also confined to these CPUs, which they cannot leave by
 * sched_setaffinity(). NULL: not confined. */
typedef struct GroupMembers {
        pid_t pid, tid;
        uint32_t scope;
        uid_t uid;
        uint32_t max_threads;
        const char *cpus;
} GroupMembers;
/* Moves the members in, once. */
int group_enter(GroupSet *s, Group *g, const GroupMembers *m);
bool group_entered(const Group *g);
/* A delegated group whose scope the main thread is still asking for or
 * moving the members into (no promotion meanwhile: held_promote()). */
bool group_settling(const Group *g);
/* Whether the groups are on the unified hierarchy (a cgroup-v2-only host).
 * There a group has no per-CPU usage, no thread-scope member (v2 moves
 * whole processes), and it freezes itself: group_freeze_fd() opens its
 * cgroup.freeze for strict mode. */
bool group_set_unified(const GroupSet *s);
int group_freeze_fd(Group *g);
/* Whether the members sit in a cpuset of the reservation's CPUs. */
bool group_confined(const Group *g);
/* Whether the members' waiting time is weighed down by a cpu controller
 * (v1's shared cpu group, or cpu.weight 1). */
bool group_weighed(const Group *g);
/* Whether this host lets groups confine members with a cpuset. */
bool group_set_confines(const GroupSet *s);
/* Moves out what was born inside but is not a member: other processes
 * (process scope: children it forked), other threads (thread scope), a
 * tree's processes owned by anyone but its owner. */
int group_evict_strangers(GroupSet *s, Group *g);
/* (returns how many were moved out) */
/* A tree group's thread ids as group_set_housekeep() last listed them (at
 * most 256), into tids[max]: a copy, never a read of the kernel's list. */
int group_list_threads(Group *g, pid_t *tids, size_t max, size_t *ret_n);
/* The main thread's periodic work, off the real-time path: moves
 * strangers out of process- and thread-scope groups and lists the members
 * of tree groups. Returns how many groups there are. */
/* Delegated mode: asks the manager for a delegated scope holding pid and
 * those of its descendants that may move with it (as group_enter() moves
 * them: uid, max_threads), for reservation id, weighing cpu_weight against
 * its siblings (0: the manager's default). */
typedef struct GroupScopeRequest {
        pid_t pid;
        uid_t uid;
        uint32_t max_threads;
        uint64_t id, cpu_weight;
} GroupScopeRequest;
/* The scope's cgroup path (from the hierarchy's root, e.g.
 * /user.slice/pace-7-4242.scope), and the one the process came from, where
 * its members go back at the release (its unit's). A refusal (negative
 * errno) may say why in a sentence. */
typedef struct GroupScopeAnswer {
        char scope[1024];
        char home[1024];
        char why[512];
} GroupScopeAnswer;
typedef int (*GroupMakeScope)(void *userdata, const GroupScopeRequest *req, GroupScopeAnswer *ret);
/* why: the reason a scope or its group could not be had (left alone otherwise). */
size_t group_set_housekeep(GroupSet *s, GroupMakeScope make_scope, void *userdata, char *why, size_t why_size);
/* Whether groups are subgroups of scopes the manager makes (systemd on a
 * unified-only host): a group is then entered only once the main thread
 * has its scope, and a reservation is not promoted until then (where no
 * scope can be had, it is, with its members found in /proc). */
bool group_set_delegated(const GroupSet *s);
/* CPU time the members received on cpu (cpuacct.usage_percpu), in ns. */
int group_usage_ns(GroupSet *s, Group *g, int cpu, uint64_t *ret);

/* Where group_set_new(name) puts its base group (libcgroup finds the
 * mount): for the monitor, which sweeps and removes it after a crash. */
int group_base_path(const char *name, char *ret, size_t size);
/* Removes the base group `name` and everything under it, tasks to the
 * hierarchy's root. */
int group_set_remove(const char *name);
/* Removes the pace.* groups of instances that are gone (their owner
 * process has exited; see group_set_new()), other than own_name: their
 * members first through demote(base), then each hierarchy's directory,
 * its real-time runtime given back. *ret_n: how many instances. */
int group_sweep_dead(const char *own_name, void (*demote)(const char *base), unsigned *ret_n);
/* The v1 cpu hierarchy's mount when it is separate from cpuacct (the
 * shared cpu group lives there). */
int group_cpu_mount(char *ret, size_t size);
/* The v1 cpuset hierarchy's mount (members are confined there). */
int group_cpuset_mount(char *ret, size_t size);
