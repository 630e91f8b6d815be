/* SPDX-License-Identifier: MIT */
#pragma once

/* What reservations really received: written by pace-dispatcher (the only
 * one that sees every period end), read by pace-broker for status replies.
 * A file in the runtime directory, created by the dispatcher before it drops
 * its privileges and owned by root, so the broker can read but never write
 * it. The broker trusts it no more than the dispatcher trusts the table: it
 * only displays it, and checks every field it shows (pace-stats readers take
 * an entry only if its sequence word is even and unchanged across the copy,
 * and its id names a live reservation).
 *
 * One entry per reservation piece a dispatch thread holds; each entry has a
 * single writer (the dispatch thread of its CPU), so a per-entry seqlock is
 * all the synchronisation there is. */

#include <stdatomic.h>
#include <stdint.h>

#include "pace-limits.h"

#define PACE_STATS_MAGIC 0x3154535043415045ULL /* "EPACPST1" */
#define PACE_STATS_VERSION 2u
#define PACE_STATS_NAME "stats"
/* Pieces in two generations of the table at once, while loops adopt. */
#define PACE_STATS_MAX_ENTRIES (2u * PACE_MAX_RESERVATIONS)

typedef struct PaceStatsEntry {
        _Atomic uint32_t seq; /* odd while written */
        _Atomic uint32_t claimed; /* owned by a dispatch thread */
        uint64_t id;          /* reservation id; 0: unused */
        int32_t cpu;
        uint32_t threads;     /* threads moved at the last promotion */
        uint64_t cpu_time_ns; /* on this CPU since adoption */
        uint64_t window_ns;   /* whole periods, about the last 2 seconds; 0: none yet */
        uint64_t delivered_ns;
        uint64_t periods;
        uint64_t periods_blocked;
        uint64_t periods_wanted_more;
        uint64_t updated_ns;  /* CLOCK_MONOTONIC of the last update */
} PaceStatsEntry;

/* What a dispatch thread costs per change of slot owner, measured as it
 * runs: its own CPU time over a window divided by the changes it made in
 * it (the wake-up, the spin to the boundary, the demotions and promotions).
 * The broker charges admission at least cost_max_ns per switch on that
 * CPU. One per dispatch thread, written by it alone, under the same
 * seqlock as the entries. */
typedef struct PaceStatsCpu {
        _Atomic uint32_t seq; /* odd while written */
        int32_t cpu;          /* the CPU; meaningful once updated_ns is set */
        uint64_t window_ns;   /* the last window's length */
        uint64_t changes;     /* changes of owner in it */
        uint64_t cpu_time_ns; /* the dispatch thread's CPU time in it */
        uint64_t cost_ns;     /* per change, in it */
        uint64_t cost_max_ns; /* per change, the most of the last PACE_STATS_COST_WINDOWS windows */
        uint64_t updated_ns;  /* CLOCK_MONOTONIC of the last update; 0: none yet */
} PaceStatsCpu;

/* How many windows (of about 2 s) cost_max_ns looks back over. */
#define PACE_STATS_COST_WINDOWS 16u

typedef struct PaceStatsFile {
        uint64_t magic;
        uint32_t version;
        uint32_t n_entries;
        int32_t dispatcher_pid;
        uint32_t reserved;
        PaceStatsEntry entries[PACE_STATS_MAX_ENTRIES];
        /* By dispatch thread (the dispatcher's managed CPUs, in order). */
        PaceStatsCpu cpus[PACE_MAX_CPUS];
} PaceStatsFile;
