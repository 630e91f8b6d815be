/* SPDX-License-Identifier: MIT */
#pragma once

/* Dropping what pace-dispatcher does not need, once, before any thread
 * exists (capabilities are per thread: a drop after pthread_create() would
 * leave the dispatch threads with the full set). See dispatcher/README.md,
 * "Privileges", for why the dispatcher keeps uid 0 and which capability
 * covers what. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PACE_CAP_BIT(c) (UINT64_C(1) << (c))

typedef struct PrivilegeLimits {
        uint64_t memlock_bytes; /* RLIMIT_MEMLOCK: what mlockall() will lock */
        uint64_t max_files;     /* RLIMIT_NOFILE: with a handle of every registered thread */
        /* Where the hard limit cannot be raised to max_files (no
         * CAP_SYS_RESOURCE): what is enough without the threads' handles
         * (each then checked by the main thread's looks instead, held.h). */
        uint64_t min_files;
        uint64_t max_threads;   /* RLIMIT_NPROC */
        /* Strict mode: the v1 freezer mount stays writable in the read-only
         * view of the file system. NULL otherwise. */
        const char *writable_path;
        /* Reservation groups: the cpuacct mount stays writable too, and
         * CAP_DAC_OVERRIDE is kept if it is there (its root directory is
         * mode 0555). Without it groups are not used; nothing is refused. */
        const char *groups_path;
        const char *groups_cpu_path; /* the cpu hierarchy's, if separate */
        const char *groups_cpuset_path; /* the cpuset hierarchy's: members are confined there */
        /* tracefs: the dispatcher's tracing instance is made and removed
         * there (dispatcher/lending.h). NULL: none. */
        const char *tracing_path;
} PrivilegeLimits;

typedef struct PrivilegeReport {
        uint64_t effective, permitted, inheritable, ambient, bounding;
        bool read_only_view; /* private mount namespace, everything read-only */
        bool bounding_dropped;
        bool memlock_raised;
        bool kept_ipc_lock; /* RLIMIT_MEMLOCK could not be raised */
        uint64_t files;     /* RLIMIT_NOFILE as set */
} PrivilegeReport;

/* Keeps only CAP_SYS_NICE (effective and permitted; plus CAP_IPC_LOCK if
 * RLIMIT_MEMLOCK cannot be raised to limits->memlock_bytes, and
 * CAP_DAC_OVERRIDE in strict mode, i.e. when writable_path is set), clears the inheritable,
 * ambient and (if CAP_SETPCAP allows) bounding sets, sets NO_NEW_PRIVS and
 * the no-root securebits, caps its own resources, and reads the result back
 * from /proc/self/status. Capabilities already missing are fine unless they
 * are needed: started by systemd with CapabilityBoundingSet=CAP_SYS_NICE
 * this only trims and verifies. -EPERM with a message if more than intended
 * remains or CAP_SYS_NICE is missing; other negative errno on failure. */
int privileges_drop(const PrivilegeLimits *limits, PrivilegeReport *ret_report, char *why, size_t why_size);

/* Capability sets of the calling thread, from /proc/self/status. */
int privileges_read(PrivilegeReport *ret_report);
