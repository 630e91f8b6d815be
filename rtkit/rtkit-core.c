/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "macro.h"
#include "pace-limits.h"
#include "proto-cleanup.h"
#include "rtkit-core.h"

/* rtkit asks sched_get_priority_min/max(SCHED_RR): 1..99 on Linux. */
#define RTKIT_PRIORITY_MIN 1u
#define RTKIT_PRIORITY_MAX 99u

_printf_(3, 4) static int fail(RtkitError *e, const char *name, const char *fmt, ...) {
        va_list ap;

        e->name = name;
        va_start(ap, fmt);
        vsnprintf(e->message, sizeof(e->message), fmt, ap);
        va_end(ap);
        if (strcmp(name, RTKIT_ERROR_ACCESS_DENIED) == 0)
                return -EPERM;
        if (strcmp(name, RTKIT_ERROR_NO_MEMORY) == 0)
                return -ENOMEM;
        return -EINVAL;
}

static void clear(RtkitError *e) {
        e->name = NULL;
        e->message[0] = '\0';
}

const char *rtkit_error_name_for_code(Pace__ErrorCode code) {
        switch (code) {
        /* What rtkit reports as EPERM (not the caller's process, priority
         * above the cap) or EBUSY (too many requests): the caller may not
         * have it. No capacity left is the same answer to the caller:
         * asking again will not help until something changes. */
        case PACE__ERROR_CODE__ERROR_PERMISSION_DENIED:
        case PACE__ERROR_CODE__ERROR_LIMIT_EXCEEDED:
        case PACE__ERROR_CODE__ERROR_NO_CAPACITY:
        case PACE__ERROR_CODE__ERROR_BUSY:
                return RTKIT_ERROR_ACCESS_DENIED;
        default:
                return RTKIT_ERROR_FAILED;
        }
}

/* A D-Bus "t" that names a process or thread: pids are positive ints. */
static int check_id(uint64_t value, const char *what, RtkitError *e) {
        if (value == 0 || value > INT32_MAX)
                return fail(e, RTKIT_ERROR_FAILED, "%s %" PRIu64 " is not a valid %s id", what, value, what);
        return 0;
}

/* What MakeThreadRealtime and MakeThreadHighPriority check alike, in
 * rtkit's order, after clearing *e: the target, the caller's own process
 * unless WithPID named one and its main thread when thread is 0 (as rtkit
 * does); then the method's own argument (what: a priority or a nice level),
 * which must be one the kernel takes, min..max. */
static int check_thread_call(const RtkitCaller *caller, bool with_pid, uint64_t process, uint64_t thread,
                             const char *what, int64_t value, int64_t min, int64_t max, pid_t *ret_pid,
                             pid_t *ret_tid, RtkitError *e) {
        pid_t pid = caller->pid;
        int r;

        clear(e);
        if (with_pid) {
                r = check_id(process, "process", e);
                if (r < 0)
                        return r;
                pid = (pid_t) process;
        }
        if (thread != 0) {
                r = check_id(thread, "thread", e);
                if (r < 0)
                        return r;
        }
        if (value < min || value > max)
                return fail(e, RTKIT_ERROR_FAILED, "%s %" PRIi64 " is outside %" PRIi64 "..%" PRIi64, what, value,
                            min, max);
        *ret_pid = pid;
        *ret_tid = thread == 0 ? pid : (pid_t) thread;
        return 0;
}

/* One request, one answer: 0 when the reply is `expected`, else an error
 * with the broker's own sentence, or one about the broker being away. */
static int exchange(const RtkitCore *core, const Pace__Request *req, Pace__Response__BodyCase expected,
                    RtkitError *e) {
        _cleanup_(pace_response_freep) Pace__Response *resp = NULL;
        const char *path = core->broker_path ?: PACE_DEFAULT_SOCKET;
        int r;

        r = core->exchange(core->userdata, req, &resp);
        if (r == -ENOMEM)
                return fail(e, RTKIT_ERROR_NO_MEMORY, "out of memory");
        if (r < 0)
                return fail(e, RTKIT_ERROR_FAILED, "pace-broker is not answering at %s: %s", path, strerror(-r)),
                       r;
        if (!resp)
                return fail(e, RTKIT_ERROR_FAILED, "pace-broker at %s gave no answer", path);

        if (resp->body_case == PACE__RESPONSE__BODY_ERROR && resp->error) {
                const char *message = resp->error->message;
                return fail(e, rtkit_error_name_for_code(resp->error->code), "%s",
                            message && *message ? message : "pace-broker refused the request");
        }
        if (resp->version != PACE_PROTOCOL_VERSION || resp->body_case != expected)
                return fail(e, RTKIT_ERROR_FAILED, "pace-broker at %s gave an answer this pace-rtkit does not "
                            "understand (protocol version %" PRIu32 ")", path, resp->version),
                       -EPROTO;
        return 0;
}

/* Sends req on behalf of caller: the broker checks the caller, not the
 * delegate, against its rules. */
static int exchange_for(const RtkitCore *core, const RtkitCaller *caller, Pace__Request *req,
                        Pace__Response__BodyCase expected, RtkitError *ret_error) {
        Pace__Caller who = PACE__CALLER__INIT;

        who.uid = (uint32_t) caller->uid;
        who.pid = (int32_t) caller->pid;
        who.start_time = caller->start_time;
        req->version = PACE_PROTOCOL_VERSION;
        req->on_behalf_of = &who;
        int r = exchange(core, req, expected, ret_error);
        req->on_behalf_of = NULL; /* who does not outlive this call */
        return r;
}

int rtkit_make_realtime(const RtkitCore *core, const RtkitCaller *caller, bool with_pid, uint64_t process,
                        uint64_t thread, uint32_t priority, RtkitError *ret_error) {
        Pace__Request req = PACE__REQUEST__INIT;
        Pace__ReserveRequest body = PACE__RESERVE_REQUEST__INIT;
        pid_t pid, tid;
        int r;

        r = check_thread_call(caller, with_pid, process, thread, "priority", priority, RTKIT_PRIORITY_MIN,
                              RTKIT_PRIORITY_MAX, &pid, &tid, ret_error);
        if (r < 0)
                return r;
        if ((int64_t) priority > (int64_t) core->config->rtkit_max_realtime_priority)
                return fail(ret_error, RTKIT_ERROR_ACCESS_DENIED,
                            "priority %" PRIu32 " is above MaxRealtimePriority %" PRIi32, priority,
                            core->config->rtkit_max_realtime_priority);

        /* The priority is not passed on: under pace a thread runs at the
         * dispatcher's running priority within its budget, and what it gets
         * is the administrator's rtkit_period_us and rtkit_utilization. */
        body.period_ns = core->config->rtkit_period_ns;
        body.utilization_ppm = core->config->rtkit_utilization_ppm;
        body.has_pid = true;
        body.pid = (int32_t) pid;
        body.has_scope = true;
        body.scope = PACE__SCOPE__SCOPE_THREAD;
        body.has_tid = true;
        body.tid = (int32_t) tid;
        body.has_kind = true;
        body.kind = core->config->rtkit_kind == PACE_RTKIT_KIND_SLOTS ? PACE__KIND__KIND_SLOTS
                                                                      : PACE__KIND__KIND_SERVER;
        req.body_case = PACE__REQUEST__BODY_RESERVE;
        req.reserve = &body;
        return exchange_for(core, caller, &req, PACE__RESPONSE__BODY_GRANT, ret_error);
}

int rtkit_make_high_priority(const RtkitCore *core, const RtkitCaller *caller, bool with_pid, uint64_t process,
                             uint64_t thread, int32_t nice, RtkitError *ret_error) {
        Pace__Request req = PACE__REQUEST__INIT;
        Pace__NiceRequest body = PACE__NICE_REQUEST__INIT;
        pid_t pid, tid;
        int r;

        r = check_thread_call(caller, with_pid, process, thread, "nice level", nice, PRIO_MIN, PRIO_MAX - 1, &pid,
                              &tid, ret_error);
        if (r < 0)
                return r;
        if (nice < core->config->rtkit_min_nice_level)
                return fail(ret_error, RTKIT_ERROR_ACCESS_DENIED, "nice level %" PRIi32 " is below MinNiceLevel %" PRIi32,
                            nice, core->config->rtkit_min_nice_level);

        body.has_pid = true;
        body.pid = (int32_t) pid;
        body.tid = (int32_t) tid;
        body.nice = nice;
        req.body_case = PACE__REQUEST__BODY_NICE;
        req.nice = &body;
        return exchange_for(core, caller, &req, PACE__RESPONSE__BODY_NICE, ret_error);
}

int rtkit_check_root(const RtkitCaller *caller, const char *method, RtkitError *ret_error) {
        clear(ret_error);
        if (caller->uid != 0)
                return fail(ret_error, RTKIT_ERROR_ACCESS_DENIED, "%s is for root only", method);
        return 0;
}

int rtkit_reset(const RtkitCore *core, const RtkitCaller *caller, const char *method, RtkitError *ret_error) {
        Pace__Request req = PACE__REQUEST__INIT;
        Pace__ResetRequest body = PACE__RESET_REQUEST__INIT;
        int r;

        r = rtkit_check_root(caller, method, ret_error);
        if (r < 0)
                return r;

        /* Sent as pace-rtkit itself, a delegate, not on anyone's behalf: the
         * broker allows a delegate this one reset and no other. */
        body.has_only_on_behalf = true;
        body.only_on_behalf = true;
        req.version = PACE_PROTOCOL_VERSION;
        req.body_case = PACE__REQUEST__BODY_RESET;
        req.reset = &body;

        return exchange(core, &req, PACE__RESPONSE__BODY_ADMIN, ret_error);
}
