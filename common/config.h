/* SPDX-License-Identifier: MIT */
#pragma once

/* pace.json: read by both daemons. The dispatcher reads it itself rather than
 * trusting anything the broker says about limits (README.md, "Guarantees",
 * invariant 3). */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pace-limits.h"

#define PACE_MAX_ALLOWED_GROUPS 32u

typedef enum PacePolicy {
        PACE_POLICY_EDF,
        PACE_POLICY_RM,
} PacePolicy;

typedef enum PaceWaiting {
        PACE_WAITING_NICE,   /* demoted to SCHED_OTHER nice 19 between slots */
        PACE_WAITING_FREEZE, /* strict: frozen (cgroup freezer) between slots */
} PaceWaiting;

/* The reservation kind RealtimeKit1 grants (pace.proto's Kind). */
typedef enum PaceRtkitKind {
        PACE_RTKIT_KIND_SERVER,
        PACE_RTKIT_KIND_SLOTS,
} PaceRtkitKind;

typedef struct PaceConfig {
        uint32_t non_rt_share_ppm;          /* "non_rt_share": 0.05..0.95, default 0.25 */
        uint64_t slot_ns;                   /* "slot_us": 50..100000 us, default 1000 */
        uint64_t non_rt_max_gap_ns;         /* "non_rt_max_gap_ms": default 20, >= 2 slots */
        PacePolicy policy;                  /* "policy": "edf" (default) | "rm" */
        uint64_t max_frame_ns;              /* "max_frame_ms": default 1200, a multiple of the slot */
        uint32_t max_reservations_per_user; /* default 16, 1..PACE_MAX_RESERVATIONS */
        uint32_t max_utilization_per_user_ppm; /* "max_utilization_per_user": default 1.0 */
        uint32_t max_connections;           /* default 256, 1..65536 */
        uint64_t client_timeout_ns;         /* "client_timeout_ms": idle clients are dropped, default 10000 */
        uint64_t switch_cost_ns;            /* "switch_cost_us": charged per ownership change, default 55 */
        PaceWaiting waiting;                /* "waiting": "nice" (default) | "freeze" */
        uint32_t max_connections_per_user;  /* default 64, 1..65536, at most max_connections */
        uint32_t max_requests_per_second;   /* per user (root exempt), default 50, 1..100000 */
        /* Threads the dispatcher moves per reservation: each costs two system
         * calls at every switch, so this bounds the dispatcher's own time. */
        uint32_t max_threads_per_reservation; /* default 32, 1..1024 */
        uint32_t max_reservations;          /* broker-wide, default and at most PACE_MAX_RESERVATIONS */
        uint32_t max_message_bytes;         /* a request's size, 256..PACE_MAX_MESSAGE_SIZE (default) */
        /* "reserve_root_processes": whether a process that runs as root (any
         * of its real, effective, saved or file-system uids 0) may hold a
         * reservation. Off by default: the dispatcher cannot tell root's
         * request from a compromised broker's, which could otherwise make
         * any root daemon real-time, pinned, nice 19 or frozen. */
        bool reserve_root_processes;
        /* "allowed_groups": names or gids; unset means every local user may
         * ask. Root may always. */
        bool allowed_groups_set;
        uint32_t n_allowed_groups;
        uint32_t allowed_groups[PACE_MAX_ALLOWED_GROUPS];
        /* RealtimeKit1 (pace-rtkit): what a caller that names only a
         * priority gets. */
        bool rtkit;                         /* "rtkit": serve org.freedesktop.RealtimeKit1, default true */
        uint64_t rtkit_period_ns;           /* "rtkit_period_us": default 10000 */
        uint32_t rtkit_utilization_ppm;     /* "rtkit_utilization": default 0.1 */
        PaceRtkitKind rtkit_kind;           /* "rtkit_kind": "server" (default) | "slots" */
        int32_t rtkit_max_realtime_priority; /* MaxRealtimePriority: 1..98, default 20 */
        int32_t rtkit_min_nice_level;       /* MinNiceLevel: -20..19, default -15 */
        int64_t rtkit_rttime_usec_max;      /* RTTimeUSecMax: default 200000 */
        bool cpus_set;                      /* "cpus" given; otherwise all online CPUs */
        uint32_t n_cpus;
        int32_t cpus[PACE_MAX_CPUS];        /* ascending, no duplicates */
} PaceConfig;

void pace_config_init(PaceConfig *config);

/* Parses a JSON document. On failure returns -EINVAL and, in why (if not
 * NULL), a sentence naming the key, the value, and what is allowed
 * (with line and column for syntax errors). *config is written only on success. */
/* Keys the document leaves out take their defaults (pace_config_init()), not
 * whatever *config held before. size is exact: the text need not be
 * NUL-terminated, and a NUL byte inside it is a syntax error. why (if wanted;
 * 1024 bytes hold every message) is emptied on entry. -ENOMEM if out of
 * memory. */
int pace_config_parse(const char *text, size_t size, PaceConfig *config, char *why, size_t why_size);

/* Reads and parses a file. -ENOENT if it does not exist (callers decide whether
 * defaults are acceptable), other negative errno for I/O errors; -EINVAL on bad
 * content, with why as above (prefixed with the path). */
/* Files over 1 MiB are refused with -EFBIG, also with a message in why; for
 * other I/O errors why stays empty (use strerror). */
int pace_config_load(const char *path, PaceConfig *config, char *why, size_t why_size);

/* Slots in the longest frame the config allows. */
static inline uint32_t pace_config_frame_slots(const PaceConfig *config) {
        return (uint32_t) (config->max_frame_ns / config->slot_ns);
}
