/* SPDX-License-Identifier: MIT */
#pragma once

/* The RealtimeKit1 methods without the bus: who asks and what they ask for
 * in, a pace Request to the broker and a D-Bus error (name and sentence) out.
 * pace-rtkit decides nothing about who gets what: the broker judges every
 * request as if the caller had sent it itself (Request.on_behalf_of), so the
 * ownership rules, per-user and rate limits, allowed_groups and admission
 * are the ones every other pace client meets. This layer only refuses what
 * rtkit refuses before it looks at a process (out-of-range priorities and
 * nice levels, root-only methods) and maps the broker's answer to the error
 * names rtkit's clients know. */

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "config.h"
#include "pace.pb-c.h"

/* The error names rtkit answers with (rtkit maps EPERM, EACCES and EBUSY
 * to AccessDenied, ENOMEM to NoMemory and everything else to Failed). */
#define RTKIT_ERROR_FAILED "org.freedesktop.DBus.Error.Failed"
#define RTKIT_ERROR_ACCESS_DENIED "org.freedesktop.DBus.Error.AccessDenied"
#define RTKIT_ERROR_NO_MEMORY "org.freedesktop.DBus.Error.NoMemory"

/* The calling process as the bus daemon vouches for it: the pid and
 * effective uid of the connection, and the start time read from
 * /proc/PID/stat while that connection was known to be alive. */
typedef struct RtkitCaller {
        uid_t uid;
        pid_t pid;
        uint64_t start_time;
} RtkitCaller;

/* A refusal: a D-Bus error name (one of the RTKIT_ERROR_* strings) and a
 * sentence for the caller. */
typedef struct RtkitError {
        const char *name;
        char message[512];
} RtkitError;

/* Sends req to the broker and returns its decoded reply in *ret (freed by
 * the caller with pace__response__free_unpacked). Negative errno when the
 * broker cannot be reached or does not answer. */
typedef int (*RtkitExchange)(void *userdata, const Pace__Request *req, Pace__Response **ret);

typedef struct RtkitCore {
        const PaceConfig *config;
        RtkitExchange exchange;
        void *userdata;
        /* For messages: where the broker is expected ("pace-broker is not
         * answering at PATH"). */
        const char *broker_path;
} RtkitCore;

/* MakeThreadRealtime (with_pid false: process is ignored, the caller's own
 * process is the target) and MakeThreadRealtimeWithPID. thread 0 is the
 * process's main thread. priority is checked against 1..99 and
 * MaxRealtimePriority like rtkit does; the reservation itself is sized by
 * rtkit_period_us and rtkit_utilization, not by the priority. Returns 0 on
 * success, else a negative errno and *ret_error. */
int rtkit_make_realtime(const RtkitCore *core, const RtkitCaller *caller, bool with_pid, uint64_t process,
                        uint64_t thread, uint32_t priority, RtkitError *ret_error);

/* MakeThreadHighPriority[WithPID]: a nice level, -20..19 and not below
 * MinNiceLevel. */
int rtkit_make_high_priority(const RtkitCore *core, const RtkitCaller *caller, bool with_pid, uint64_t process,
                             uint64_t thread, int32_t nice, RtkitError *ret_error);

/* ResetKnown and ResetAll: root only. Both drop what pace granted through
 * RealtimeKit1 (every on-behalf reservation and every nice level); pace does
 * not touch threads it never changed, which rtkit's ResetAll would.
 * method names the D-Bus method for the refusal's sentence. */
int rtkit_reset(const RtkitCore *core, const RtkitCaller *caller, const char *method, RtkitError *ret_error);

/* Exit and the resets are for root alone, whatever the bus policy says:
 * 0 for a root caller, else -EPERM and an AccessDenied *ret_error. */
int rtkit_check_root(const RtkitCaller *caller, const char *method, RtkitError *ret_error);

/* The D-Bus error name for a broker ErrorCode. */
const char *rtkit_error_name_for_code(Pace__ErrorCode code);
