/* SPDX-License-Identifier: MIT */
/* Nice levels the dispatcher holds a thread at (RealtimeKit1's
 * MakeThreadHighPriority). */
#include <errno.h>
#include <inttypes.h>
#include <syslog.h>

#include "broker-internal.h"
#include "macro.h"

static size_t nice_levels_of(const Broker *b, uid_t uid) {
        size_t n = 0;
        for (size_t i = 0; i < b->n_nice; i++)
                n += b->nice[i].uid == uid;
        return n;
}

int handle_nice(Broker *b, const BrokerPeer *peer, const Pace__NiceRequest *req, uint8_t **reply,
                size_t *reply_size, Refusal *ret_refusal) {
        _cleanup_close_ int pidfd = -EBADF;
        pid_t pid = req->has_pid ? req->pid : peer->pid;
        uint64_t thread_start_time;
        ProcInfo info;
        int r;

        if (req->nice < -20 || req->nice > 19)
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT,
                              "nice level %" PRIi32 " does not exist; nice levels go from -20 to 19", req->nice);
        if (req->nice < b->config.rtkit_min_nice_level)
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_PERMISSION_DENIED,
                              "nice level %" PRIi32 " is below %" PRIi32 ", the lowest pace grants "
                              "(rtkit_min_nice_level)", req->nice, b->config.rtkit_min_nice_level);
        if (pid <= 0 || req->tid <= 0)
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT,
                              "pid %" PRIi32 " and tid %" PRIi32 " must both be positive", (int32_t) pid,
                              req->tid);
        if (pid == 1)
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_PERMISSION_DENIED,
                              "pid 1 (init) is never reniced");

        r = open_target(b, peer, pid, false, req->tid, &nice_words, &pidfd, &info, &thread_start_time,
                        ret_refusal);
        if (r == 0)
                r = target_permitted(b, peer, pid, &info, &nice_words, ret_refusal);
        if (r != 0)
                return r;

        /* One level per thread: a second request replaces the first. */
        size_t slot = b->n_nice;
        for (size_t i = 0; i < b->n_nice; i++)
                if (b->nice[i].tid == req->tid)
                        slot = i;
        if (slot == b->n_nice) {
                if (b->n_nice >= PACE_MAX_NICE_THREADS)
                        return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_LIMIT_EXCEEDED,
                                      "%u threads hold a nice level from pace, its limit; try again when "
                                      "some have ended", PACE_MAX_NICE_THREADS);
                if (peer->uid != 0 && nice_levels_of(b, peer->uid) >= b->config.max_reservations_per_user)
                        return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_LIMIT_EXCEEDED,
                                      "uid %u holds nice levels for %zu threads, its limit "
                                      "(max_reservations_per_user)", (unsigned) peer->uid,
                                      nice_levels_of(b, peer->uid));
                b->n_nice++;
        } else
                safe_close(b->nice[slot].pidfd);
        b->nice[slot] = (NiceLevel) {
                .pid = pid,
                .tid = req->tid,
                .start_time = info.start_time,
                .thread_start_time = thread_start_time,
                .uid = peer->uid,
                .nice = req->nice,
                .pidfd = TAKE_FD(pidfd),
        };
        broker_publish(b);
        broker_log(b, LOG_INFO, "nice %" PRIi32 " for thread %" PRIi32 " of pid %" PRIi32 " (uid %u)", req->nice,
                   req->tid, (int32_t) pid, (unsigned) peer->uid);

        Pace__Response resp = PACE__RESPONSE__INIT;
        Pace__NiceReply nr = PACE__NICE_REPLY__INIT;
        nr.pid = pid;
        nr.tid = req->tid;
        nr.nice = req->nice;
        resp.version = PACE_PROTOCOL_VERSION;
        resp.body_case = PACE__RESPONSE__BODY_NICE;
        resp.nice = &nr;
        return pack_response(&resp, reply, reply_size);
}
