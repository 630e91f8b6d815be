/* SPDX-License-Identifier: MIT */
#pragma once

/* libpace: ask pace-broker for soft real-time CPU reservations.
 *
 * Every function returns 0 (or a positive count) on success and a negative
 * value on failure: either a negative errno (transport and argument errors) or
 * one of the PACE_E_* codes below (the broker said no). pace_strerror() turns
 * either into words; pace_last_message() returns the broker's own explanation
 * of the calling thread's last refusal, which names what to change.
 *
 * A handle may be used from several threads: calls on one handle are
 * serialised. Handles must not be shared across fork(). */

#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PACE_E_BASE 1000
/* Broker refusals: -(PACE_E_BASE + code of pace.proto's ErrorCode). */
#define PACE_E_MALFORMED (-(PACE_E_BASE + 1))
#define PACE_E_UNSUPPORTED_VERSION (-(PACE_E_BASE + 2))
#define PACE_E_INVALID_ARGUMENT (-(PACE_E_BASE + 3))
#define PACE_E_NO_CAPACITY (-(PACE_E_BASE + 4))
#define PACE_E_NO_SUCH_PROCESS (-(PACE_E_BASE + 5))
#define PACE_E_PERMISSION_DENIED (-(PACE_E_BASE + 6))
#define PACE_E_NO_SUCH_RESERVATION (-(PACE_E_BASE + 7))
#define PACE_E_LIMIT_EXCEEDED (-(PACE_E_BASE + 8))
#define PACE_E_INTERNAL (-(PACE_E_BASE + 9))
#define PACE_E_BUSY (-(PACE_E_BASE + 10))
/* The broker's reply could not be decoded or did not answer the request. */
#define PACE_E_PROTOCOL (-(PACE_E_BASE + 100))

typedef struct pace pace;

/* What a reservation covers. Threads created later, and (tree) processes
 * forked later, are covered from their creation. */
typedef enum pace_scope {
        PACE_SCOPE_PROCESS = 0, /* every thread of the process (the default) */
        PACE_SCOPE_THREAD = 1,  /* one thread: pace_reserve_params.tid */
        PACE_SCOPE_TREE = 2,    /* the process and all its descendants */
} pace_scope;

/* What kind of reservation; the numbers are pace.proto's Kind. */
typedef enum pace_kind {
        /* pace_reserve(): slots, which is what brokers before kinds grant;
         * pace_modify(): the kind the reservation has. */
        PACE_KIND_DEFAULT = 0,
        /* The budget spread over the period in the dispatch table's slots
         * (60% of 50 ms: 6 of every 10 slots). */
        PACE_KIND_SLOTS = 1,
        /* A budget server: in each window of its period (windows start at
         * multiples of the period, so phase_ns is 0) its threads run the
         * moment they are runnable while budget is left, and wait once it
         * is spent. For programs that wake when they must, not on a grid.
         * Never split over CPUs. */
        PACE_KIND_SERVER = 2,
        /* The budget in one block from the start of each window of the
         * period (phase_ns), broken only by the free slots the
         * administrator's non_rt_max_gap forces: a job released there by
         * pace_wait_next_allocation() finishes one budget later. Never
         * split over CPUs. */
        PACE_KIND_ALIGNED = 3,
} pace_kind;

/* Zero-initialise it (designated initialisers do): kind, the newest field,
 * lives where older headers left padding, so on 64-bit targets the
 * structure's size and every other offset are those of libpace 0.1. */
typedef struct pace_reserve_params {
        uint64_t period_ns;       /* > 0 */
        uint32_t utilization_ppm; /* parts per million of one CPU, 1..1000000 */
        pid_t pid;                /* 0: the calling process */
        /* -1: let the broker choose, among the CPUs the target may run on
         * (its CPU affinity: the main thread's, or the thread's for
         * PACE_SCOPE_THREAD; the broker reads it from the kernel). A CPU
         * outside that affinity is refused (PACE_E_INVALID_ARGUMENT). The
         * grant's cpu (and split_cpus) says where it landed. */
        int cpu;
        pace_scope scope;
        pid_t tid;                /* PACE_SCOPE_THREAD: a thread of pid; 0 with pid 0: the calling thread */
        pace_kind kind;           /* PACE_KIND_DEFAULT: see there */
} pace_reserve_params;

/* What a reservation really received, measured by the dispatcher (cgroup CPU
 * accounting) at the end of each of its periods. */
typedef struct pace_accounting {
        int valid;                    /* 0: no report yet (or no dispatcher) */
        uint64_t window_ns;           /* whole periods, about the last 2 seconds */
        uint64_t delivered_ns;        /* CPU time received in that window */
        uint64_t cpu_time_ns;         /* since the reservation began */
        uint64_t periods;             /* periods completed */
        uint64_t periods_blocked;     /* used less than the budget: it blocked */
        uint64_t periods_wanted_more; /* ran through the run that closed the period */
} pace_accounting;

typedef struct pace_grant {
        uint64_t id;
        pid_t pid;
        uid_t uid;
        int cpu;
        /* What was granted: never PACE_KIND_DEFAULT (a broker that predates
         * kinds grants slots, and says nothing). In padding older headers
         * had here: on 64-bit targets no other offset moved. */
        pace_kind kind;
        uint64_t period_ns;  /* granted: the requested period rounded down to the table's grid */
        uint64_t budget_ns;  /* CPU time guaranteed in every granted period */
        uint64_t slot_ns;
        uint64_t requested_period_ns;
        uint32_t requested_utilization_ppm;
        pace_scope scope;
        pid_t tid;         /* PACE_SCOPE_THREAD */
        uint32_t threads;  /* covered: at the grant; in a status report, at the last promotion */
        /* An allocation starts at every CLOCK_MONOTONIC time t with
         * t % period_ns == phase_ns (see pace_next_allocation()). */
        uint64_t phase_ns;
        pace_accounting accounting; /* status reports only */
        /* A reservation split over CPUs, in a grant reply: bit N set for
         * each CPU N that holds a piece (`cpu` is the first one's). 0 when
         * it lives on `cpu` alone, and in status reports, which list each
         * piece as an entry of its own, with the same id. */
        uint64_t split_cpus;
} pace_grant;

typedef struct pace_cpu_status {
        int cpu;
        uint32_t reserved_ppm;
        uint32_t free_ppm;
        uint64_t frame_ns;
} pace_cpu_status;

typedef struct pace_nice_level {
        pid_t pid;
        pid_t tid;
        int nice;
} pace_nice_level;

typedef struct pace_status_report {
        uint32_t non_rt_share_ppm;
        uint64_t generation;
        size_t n_reservations;
        pace_grant *reservations;
        size_t n_cpus;
        pace_cpu_status *cpus;
        /* n_reservations flags (NULL if none), 1 where that reservation was
         * granted on behalf of its process by a delegate: RealtimeKit1 calls
         * through pace-rtkit. Kept apart so pace_grant keeps its layout. */
        uint8_t *on_behalf;
        /* Threads held at a nice level (RealtimeKit1's
         * MakeThreadHighPriority). */
        size_t n_nice_levels;
        pace_nice_level *nice_levels;
} pace_status_report;

/* Periodic clients. The start (CLOCK_MONOTONIC, ns) of the grant's first
 * allocation at or after now_ns: for PACE_KIND_ALIGNED the start of its
 * block, for PACE_KIND_SERVER the start of its window (where its budget is
 * replenished), for PACE_KIND_SLOTS its first slot after its longest
 * stretch without one. */
uint64_t pace_next_allocation(const pace_grant *grant, uint64_t now_ns);
/* Sleeps until the start of the grant's next allocation, so that a frame's
 * work begins with its whole budget ahead. ret_start_ns (may be NULL): the
 * start it slept to. -EINTR when a signal interrupted the sleep, -EINVAL for
 * a grant without a period. */
int pace_wait_next_allocation(const pace_grant *grant, uint64_t *ret_start_ns);

/* socket_path NULL: $PACE_SOCKET, else /run/pace/broker.sock. */
int pace_connect(const char *socket_path, pace **ret);
void pace_close(pace *p);

int pace_reserve(pace *p, const pace_reserve_params *params, pace_grant *ret_grant);
int pace_release(pace *p, uint64_t id);
/* New parameters for a live reservation (params->pid, ->scope and ->tid are
 * ignored): admitted as a new request with the reservation's own time
 * counted free, and swapped in at once; refused, the reservation stays as it
 * was. params->kind: PACE_KIND_DEFAULT keeps the kind, any other changes it
 * (admitted like any change; the grant's phase_ns may move with it). It
 * stays on its CPU (params->cpu: -1 or that CPU), which must still be in the
 * target's CPU affinity; a split reservation cannot be changed: release and
 * reserve again. */
int pace_modify(pace *p, uint64_t id, const pace_reserve_params *params, pace_grant *ret_grant);
int pace_status(pace *p, pace_status_report **ret);
void pace_status_report_free(pace_status_report *report);

/* Administrator requests, root only. pace_reload: the broker re-reads its
 * configuration, or refuses one the live reservations would violate (and
 * keeps the old). pace_reset: every reservation is dropped. On success
 * pace_last_message() holds the broker's summary. */
int pace_reload(pace *p);
int pace_reset(pace *p);

const char *pace_strerror(int err);
/* The broker's message for this thread's last refused call (or, after
 * pace_reload/pace_reset, its summary), or NULL. Valid until the thread's
 * next libpace call. */
const char *pace_last_message(void);

/* The socket path pace_connect(NULL) would use. */
const char *pace_default_socket(void);

#ifdef __cplusplus
}
#endif
