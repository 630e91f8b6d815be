/* SPDX-License-Identifier: MIT */
#pragma once

/* A tree-scope reservation's descendants where no reservation group can
 * hold them (a cgroup-v2 host, or v1 without cpuacct): the main thread walks
 * the process tree (/proc/P/task/T/children) every so often, at
 * SCHED_OTHER, and hands the dispatch loop a copy of what it found, so the
 * loop's cost never grows with the tree. Children that leave the tree
 * (reparented to init by a double fork) are not followed.
 *
 * Core code: returns negative errno, never logs. */

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct TreeSet TreeSet;
typedef struct TreeWatch TreeWatch;

/* At most this many threads of descendants are listed per tree. */
#define TREE_WATCH_MAX_THREADS 256u

typedef struct TreeMember {
        pid_t tid, tgid;
} TreeMember;

int tree_set_new(TreeSet **ret);
/* Every watch must have been released. Accepts NULL. */
TreeSet *tree_set_free(TreeSet *s);

/* The watch of reservation id's tree rooted at pid (pidfd: the root's, not
 * taken over), shared by the pieces of a split reservation. */
int tree_watch_acquire(TreeSet *s, uint64_t id, pid_t pid, int pidfd, TreeWatch **ret);
void tree_watch_release(TreeSet *s, TreeWatch *w);

/* The descendants' threads as last listed (not the root's own): a copy. */
size_t tree_watch_members(TreeWatch *w, TreeMember *ret, size_t max);

/* Main thread: lists every watched tree again. Returns how many trees are
 * watched. */
size_t tree_set_housekeep(TreeSet *s);
