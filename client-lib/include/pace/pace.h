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

typedef struct pace_reserve_params {
        uint64_t period_ns;       /* > 0 */
        uint32_t utilization_ppm; /* parts per million of one CPU, 1..1000000 */
        pid_t pid;                /* 0: the calling process */
        int cpu;                  /* -1: let the broker choose */
} pace_reserve_params;

typedef struct pace_grant {
        uint64_t id;
        pid_t pid;
        uid_t uid;
        int cpu;
        uint64_t period_ns;  /* granted: the requested period rounded down to the table's grid */
        uint64_t budget_ns;  /* CPU time guaranteed in every granted period */
        uint64_t slot_ns;
        uint64_t requested_period_ns;
        uint32_t requested_utilization_ppm;
} pace_grant;

typedef struct pace_cpu_status {
        int cpu;
        uint32_t reserved_ppm;
        uint32_t free_ppm;
        uint64_t frame_ns;
} pace_cpu_status;

typedef struct pace_status_report {
        uint32_t non_rt_share_ppm;
        uint64_t generation;
        size_t n_reservations;
        pace_grant *reservations;
        size_t n_cpus;
        pace_cpu_status *cpus;
} pace_status_report;

/* socket_path NULL: $PACE_SOCKET, else /run/pace/broker.sock. */
int pace_connect(const char *socket_path, pace **ret);
void pace_close(pace *p);

int pace_reserve(pace *p, const pace_reserve_params *params, pace_grant *ret_grant);
int pace_release(pace *p, uint64_t id);
/* New parameters for a live reservation (params->pid is ignored): admitted
 * as a new request with the reservation's own time counted free, and
 * swapped in at once; refused, the reservation stays as it was. */
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
