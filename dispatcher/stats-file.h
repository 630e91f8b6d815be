/* SPDX-License-Identifier: MIT */
#pragma once

/* The accounting file (proto/pace-stats.h) the broker reads for `pacectl
 * status`: what each reservation piece really received. The dispatcher
 * creates it in the runtime directory before dropping its privileges, maps
 * it read-write, and each dispatch thread claims one entry per piece it
 * holds, publishes into it at period ends and releases it. Never logs. */

#include <stdint.h>

#include "acct.h"
#include "macro.h"
#include "pace-stats.h"

/* PACE_STATS_NAME in runtime_dir, opened read-write: taken over from an
 * earlier run only if it is a regular file of root's with one link (the
 * directory is the broker's, so anything else under the name may be its
 * own file, a link to one, or a symlink: removed and created anew), then
 * sized and cleared. */
int stats_file_open(const char *runtime_dir, int *ret_fd);

/* Maps fd (from stats_file_open()) and resets it: no entries claimed, the
 * header naming this process. */
int stats_file_map(int fd, PaceStatsFile **ret);
PaceStatsFile *stats_file_unmap(PaceStatsFile *f);
DEFINE_TRIVIAL_CLEANUP_FUNC(PaceStatsFile *, stats_file_unmap);

/* A free entry for piece (id, cpu), zeroed apart from those; any thread.
 * -ENOSPC when every entry is taken (the piece then goes unaccounted). */
int stats_file_claim(PaceStatsFile *f, uint64_t id, int32_t cpu, PaceStatsEntry **ret);
/* a's figures into the entry, under its seqlock (acct.h); only by the
 * thread that claimed it. */
void stats_file_publish(PaceStatsEntry *e, const Acct *a, uint32_t threads, uint64_t usage_ns, uint64_t now);
/* The entry is free again; readers see id 0 first. */
void stats_file_release(PaceStatsEntry *e);

/* Dispatch thread `index`'s cost per change (proto/pace-stats.h), under its
 * seqlock; only by that thread. */
void stats_file_publish_cost(PaceStatsFile *f, uint32_t index, int32_t cpu, uint64_t window_ns, uint64_t changes,
                             uint64_t cpu_time_ns, uint64_t cost_max_ns, uint64_t now);
