/* SPDX-License-Identifier: MIT */
#pragma once

/* What group.c shares with the enforcement backends behind it, and nothing
 * else includes. group.c keeps what every backend does the same way (the
 * reservation's Group, its reference count, reading its member lists at
 * bounded cost, the main thread's housekeeping); a backend is one file
 * that says where a group lives and how members get in, out, confined,
 * accounted and frozen:
 *
 *   group-v1.c        the v1 cpuacct hierarchy, with v1 cpu and cpuset
 *                     beside it (hybrid hosts)
 *   group-unified.c   the unified hierarchy: groups of our own at its root
 *                     (no manager owns it), or "pace" subgroups of the
 *                     delegated scopes systemd makes for reserved trees
 *
 * Without either, there is no GroupSet at all: members are found in /proc
 * (held.c, tree.c) and held to their CPU by affinity alone. */

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "group.h"

#define GROUP_CANDIDATES_MAX 256
/* Descendants moved with a tree-scope reservation as it settles (main
 * thread): the broker admitted the tree with at most
 * max_threads_per_reservation (32 by default) threads in all, so more
 * processes than this were forked since, and are left where they are. */
#define GROUP_TREE_MAX 64

enum { LIST_TASKS, LIST_PROCS };

typedef struct GroupBackend GroupBackend;

struct Group {
        Group *next;
        /* Delegated mode: waiting for the main thread to get a scope from
         * the manager; entered is set (release) once ready. */
        bool pending;
        uint64_t id;
        unsigned refs;
        bool entered;
        /* Emptied and removed before the last reference went (its process
         * exited): only the object is left, for a loop that may still read
         * its descriptors. */
        bool retired;
        uint32_t scope;
        pid_t pid, tid;
        /* Who owns the members, and how many threads a tree's moves carry
         * (GroupMembers). */
        uid_t uid;
        uint32_t max_threads;
        char cpus[64]; /* the reservation's CPUs (a kernel list), "" if unconfined */
        char dir[PATH_MAX + 64];
        /* Where the members came from, relative to the hierarchy's root
         * (delegated: the scope they were gathered from). */
        char orig[PATH_MAX];
        /* Delegated: the cgroup of the unit they came from, where they go
         * back; "" elsewhere. */
        char home[1024];
        /* v1 only: the same in the cpu hierarchy ("" if none); the
         * reservation's cpuset (pace.<hash>/res-<id> in the cpuset
         * hierarchy, "" if none) and where the members came from there. */
        char cpu_orig[PATH_MAX];
        char cpuset_dir[PATH_MAX + 64];
        char cpuset_orig[PATH_MAX];
        /* Members held to cpus by the group (a cpuset of exactly them), and
         * their waiting time weighed down by a cpu controller. */
        bool confined, weighed;
        /* The group's directory, its usage file, and its two lists:
         * reopened when older than LIST_REFRESH_NS (see group.c), under
         * list_lock because a split reservation's loops share the group. */
        int dir_fd, usage_fd;
        pthread_mutex_t list_lock;
        int list_fd[2];
        uint64_t list_opened_ns[2];
        /* A tree's threads as the main thread last listed them
         * (group_set_housekeep()): reading a v1 list makes the kernel walk
         * and sort every task in the group, which must never happen at
         * SCHED_FIFO 99 on a client's say-so. */
        pthread_mutex_t cand_lock;
        pid_t cand[GROUP_CANDIDATES_MAX];
        size_t n_cand;
};

struct GroupSet {
        const GroupBackend *backend;
        pthread_mutex_t lock;
        /* Released groups whose directories could not be removed yet (a
         * member not yet reaped keeps a cgroup busy): removal is tried
         * again at every housekeeping round and at the end. Main thread. */
        Group *graves;
        /* Unified and managed (systemd): groups are "pace" subgroups of a
         * delegated transient scope the manager creates for each reserved
         * tree (group_set_housekeep()'s make_scope), never cgroups of
         * ours beside its units. */
        bool delegated;
        char root[PATH_MAX];
        char name[128];
        char base[PATH_MAX];
        /* v1: the cpu hierarchy's pace.<hash>, shared by every reservation:
         * cpu.shares 2, so waiting members (nice 19, but many threads) take
         * next to nothing from the free time, and under RT_GROUP_SCHED the
         * real-time runtime SCHED_FIFO needs there. "" when not used. */
        char cpu_root[PATH_MAX];
        char cpu_base[PATH_MAX];
        /* v1: the cpuset hierarchy's pace.<hash>: each reservation's
         * members are confined to its CPUs there, so a member cannot move
         * itself (or, through priority inheritance, a sibling) to a CPU
         * whose frame does not account for it. "" when the host has none. */
        char cpuset_root[PATH_MAX];
        char cpuset_base[PATH_MAX];
        char cpuset_mems[256];
        /* unified: the controllers our groups get (cpu: a weight of 1 for
         * the waiting members; cpuset: confinement), enabled down to base. */
        bool use_cpu, use_cpuset;
        /* What we enabled in the root's cgroup.subtree_control, given back
         * at the end: "+cpu", "+cpuset", or "". */
        char root_enabled[2][8];
        char owner_dir[PATH_MAX + 96];
        Group *groups;
};

struct GroupBackend {
        const char *name;
        /* The two lists' file names, by LIST_TASKS / LIST_PROCS. */
        const char *list_file[2];
        /* The group's directory (g->dir) made and opened (dir_fd, usage_fd);
         * delegated groups are made later, by housekeep. */
        int (*create)(GroupSet *s, Group *g);
        /* Moves the members in (proc_cgroup: the member's /proc/…/cgroup). */
        int (*enter)(GroupSet *s, Group *g, const char *proc_cgroup);
        /* One process or thread (file: a list_file) back where the members
         * came from, or to the root if that group is gone; to_root: to the
         * root anyway (whoever it is, it did not come from there). */
        void (*move_out)(const GroupSet *s, const Group *g, const char *file, pid_t id, bool to_root);
        /* The emptied group's directories removed: 0 once every one of
         * them is gone, -EBUSY while one still holds a member (an exiting
         * task the kernel has not let go of yet). */
        int (*destroy)(GroupSet *s, Group *g);
        /* The members' CPU time on cpu, in ns. */
        int (*usage_ns)(Group *g, int cpu, uint64_t *ret);
        /* Main thread, each housekeeping round, before the lists are read. */
        void (*housekeep)(GroupSet *s, Group *g, GroupMakeScope make_scope, void *userdata, char *why,
                          size_t why_size);
        /* res-* directories under the set's bases that no Group of ours
         * owns, emptied and removed (group_sweep_stale_dir() on each base);
         * how many are still there. Main thread. */
        size_t (*sweep_stale)(GroupSet *s);
        /* The set's own directories removed (every Group released). */
        void (*set_free)(GroupSet *s);

        /* Set-less, for group_set_new() and for the sweeps and the monitor
         * (no GroupSet: another instance's leftovers, or our own after a
         * crash). */
        /* A set of this backend: -EOPNOTSUPP with no sentence in why where
         * the host does not offer it at all (the next backend is tried),
         * with one where it does but cannot be used. */
        int (*set_new)(const char *name, uint32_t rt_share_ppm, pid_t owner, GroupSet **ret, char *why,
                       size_t why_size);
        /* The hierarchy's root in ret where this host has it: 0, or
         * -EOPNOTSUPP. new_groups: where groups of ours may also be made
         * (unified: only with this process at its root, no manager owning
         * it); otherwise where leftovers may be. */
        int (*hierarchy)(bool new_groups, char *ret, size_t size);
        /* Instance name's groups under root (hierarchy()'s) removed, their
         * tasks moved to the roots first. */
        int (*remove_instance)(const char *root, const char *name);
};

extern const GroupBackend group_backend_v1;
extern const GroupBackend group_backend_unified;

/* Shared helpers (group.c). */
GroupSet *group_set_alloc(const GroupBackend *backend, const char *root, const char *name);
void group_owner_mark(GroupSet *s, pid_t owner);
int group_write_id(const char *dir, const char *file, pid_t id);
/* One process or thread (file: a list file) back to orig under root, or
 * to root itself if that group is gone. */
void group_move_back(const char *root, const char *orig, const char *file, pid_t id);
/* Where a task sits, from its /proc/…/cgroup file: in the v1 hierarchy of
 * controller, or (NULL) on the unified hierarchy. */
int group_read_orig(const char *proc_path, const char *controller, char *ret, size_t size);
/* A tree's members, listed for group_list_threads(). */
void group_refresh_candidates(GroupSet *s, Group *g);
/* Every process listed in dir's cgroup.procs written into root's (a
 * hierarchy's root, or any group there): how many were listed. */
size_t group_empty_into(const char *dir, const char *root);
/* Whether dir (a path) is gone or could be removed now. */
bool group_dir_removed(const char *dir);
/* Each res-<id> group in base whose id is no Group of s (live or waiting
 * to be removed): its processes moved to root, then the directory
 * removed; and each owner marker of a dead instance. A predecessor with our name whose groups could not all go
 * (SIGKILLed while a member was still exiting) leaves these, and nothing
 * else would ever remove them: the base could not go either. Returns how
 * many are still there. Main thread. */
size_t group_sweep_stale_dir(GroupSet *s, const char *base, const char *root);

#define GROUP_UNIFIED_ROOT "/sys/fs/cgroup"

/* A tree's other processes into g, as GroupMembers says who may go
 * (move_in: the backend's move of one process). One that exited between
 * its check and its move may have left its number to anyone: that number
 * is moved to the root again. Main thread. */
void group_move_descendants(GroupSet *s, Group *g, int (*move_in)(GroupSet *s, Group *g, pid_t pid));
