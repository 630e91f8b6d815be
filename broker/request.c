/* SPDX-License-Identifier: MIT */
/* A request from bytes to reply: its size and version, who is asking
 * (group, rate limit, a delegate speaking for a caller), and which handler
 * answers it. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "broker-internal.h"
#include "macro.h"
#include "proc-util.h"
#include "proto-cleanup.h"

/* Whether the peer may take another request now; takes a token if so.
 * Root is never limited. */
static bool rate_allows(Broker *b, const BrokerPeer *peer) {
        return peer->uid == 0 || rate_limit_take(&b->rate, b->config.max_requests_per_second, peer->uid, peer->now_ns);
}

/* Root always; otherwise anyone, or members of allowed_groups if set. */
static bool group_allows(const Broker *b, const BrokerPeer *peer) {
        if (peer->uid == 0 || !b->config.allowed_groups_set)
                return true;
        for (uint32_t i = 0; i < b->config.n_allowed_groups; i++) {
                if (b->config.allowed_groups[i] == peer->gid)
                        return true;
                for (size_t j = 0; j < peer->n_groups; j++)
                        if (b->config.allowed_groups[i] == peer->groups[j])
                                return true;
        }
        return false;
}

static bool is_delegate(const Broker *b, const BrokerPeer *peer) {
        return peer->uid == 0 || peer->uid == b->delegate_uid;
}

static int rate_refusal(Broker *b, const BrokerPeer *peer, Refusal *ret_refusal) {
        return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_LIMIT_EXCEEDED,
                      "uid %u sends more than %" PRIu32 " requests per second (max_requests_per_second); "
                      "slow down", (unsigned) peer->uid, b->config.max_requests_per_second);
}

/* The peer a delegate speaks for: the process on_behalf_of names, if it
 * lives, started when the delegate says and runs as the uid it says. 0
 * with *ret (its pidfd the caller's to close), or a refusal (> 0, in
 * *ret_refusal). */
static int delegated_peer(Broker *b, const BrokerPeer *delegate, const Pace__Caller *caller, BrokerPeer *ret,
                          Refusal *ret_refusal) {
        _cleanup_close_ int pidfd = -EBADF;
        char path[64], status[4096];
        ProcInfo info;
        ProcOwner owner;
        int r;

        if (!is_delegate(b, delegate)) {
                if (b->delegate_uid == 0)
                        return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_PERMISSION_DENIED,
                                      "uid %u may not ask on behalf of another process; only root may (this broker "
                                      "has no user of its own: run it as user pace)", (unsigned) delegate->uid);
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_PERMISSION_DENIED,
                              "uid %u may not ask on behalf of another process; only root and pace's own "
                              "services (uid %u) may", (unsigned) delegate->uid, (unsigned) b->delegate_uid);
        }
        if (caller->pid <= 1)
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT,
                              "on_behalf_of names pid %" PRIi32 ", not a user process", caller->pid);
        r = pidfd_open_checked(caller->pid, &pidfd);
        if (r >= 0)
                r = proc_info_read(b->proc_root, caller->pid, &info);
        if (r >= 0) {
                snprintf(path, sizeof(path), "%s/%" PRIi32 "/status", b->proc_root, caller->pid);
                r = read_small_file(path, status, sizeof(status));
        }
        if (r >= 0)
                r = pidfd_alive(pidfd);
        if (r >= 0 && info.start_time != caller->start_time)
                r = -ESRCH; /* the pid has been reused since the delegate looked */
        if (r == -ESRCH || r == -EINVAL || r == -ENOENT)
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_NO_SUCH_PROCESS,
                              "the calling process %" PRIi32 " has exited", caller->pid);
        if (r < 0)
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_INTERNAL,
                              "cannot read /proc for the calling process %" PRIi32 ": %s", caller->pid,
                              strerror(-r));
        /* The bus gives the uid a connection had when it connected: the
         * process's real or effective one. Anything else is a confused or
         * lying delegate. */
        if (proc_status_owner(status, &owner) < 0 ||
            (owner.uids[0] != (uid_t) caller->uid && owner.uids[1] != (uid_t) caller->uid))
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_PERMISSION_DENIED,
                              "the calling process %" PRIi32 " does not run as uid %" PRIu32, caller->pid,
                              caller->uid);

        *ret = (BrokerPeer) {
                .pid = caller->pid,
                .uid = (uid_t) caller->uid,
                .pidfd = -EBADF,
                .now_ns = delegate->now_ns,
        };
        if (proc_status_groups(status, &ret->gid, ret->groups, BROKER_PEER_MAX_GROUPS, &ret->n_groups) < 0)
                ret->gid = (gid_t) -1;
        ret->pidfd = TAKE_FD(pidfd);
        return 0;
}

static int dispatch_request(Broker *b, const BrokerPeer *peer, bool on_behalf, const Pace__Request *req,
                            uint8_t **ret_reply, size_t *ret_reply_size, Refusal *ret_refusal) {
        switch (req->body_case) {
        case PACE__REQUEST__BODY_RESERVE:
        case PACE__REQUEST__BODY_RELEASE:
        case PACE__REQUEST__BODY_MODIFY:
        case PACE__REQUEST__BODY_NICE:
                if (!group_allows(b, peer))
                        return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_PERMISSION_DENIED,
                                      "uid %u is in none of the groups allowed to reserve (allowed_groups "
                                      "in the configuration); ask the administrator", (unsigned) peer->uid);
                if (req->body_case == PACE__REQUEST__BODY_RELEASE)
                        return handle_release(b, peer, req->release, ret_reply, ret_reply_size, ret_refusal);
                if (req->body_case == PACE__REQUEST__BODY_MODIFY)
                        return handle_modify(b, peer, req->modify, ret_reply, ret_reply_size, ret_refusal);
                if (req->body_case == PACE__REQUEST__BODY_NICE)
                        return handle_nice(b, peer, req->nice, ret_reply, ret_reply_size, ret_refusal);
                return handle_reserve(b, peer, on_behalf, req->reserve, ret_reply, ret_reply_size, ret_refusal);
        case PACE__REQUEST__BODY_STATUS:
                return handle_status(b, ret_reply, ret_reply_size);
        case PACE__REQUEST__BODY_RELOAD:
        case PACE__REQUEST__BODY_RESET:
                /* Administration is the delegate's own business, never
                 * something it does for a caller. */
                if (on_behalf)
                        return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_PERMISSION_DENIED,
                                      "reload and reset are never asked on behalf of another process");
                return handle_admin(b, peer, req, ret_reply, ret_reply_size, ret_refusal);
        default:
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_MALFORMED,
                              "request has no body (reserve, release, modify, nice or status)");
        }
}

/* Everything up to a handler's answer: 0 with a reply, a refusal (> 0) or
 * a negative errno. */
static int handle_request(Broker *b, const BrokerPeer *peer, const uint8_t *request, size_t request_size,
                          uint8_t **ret_reply, size_t *ret_reply_size, Refusal *ret_refusal) {
        _cleanup_(pace_request_freep) Pace__Request *req = NULL;
        int r;

        /* Before decoding: flooding with garbage costs tokens too. A
         * delegate speaks for many users; each of them is counted once
         * the request says who. */
        if (!is_delegate(b, peer) && !rate_allows(b, peer))
                return rate_refusal(b, peer, ret_refusal);
        if (request_size == 0)
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_MALFORMED, "empty message; expected a pace.Request");
        if (request_size > b->config.max_message_bytes)
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_MALFORMED,
                              "message of %zu bytes is larger than the limit of %" PRIu32 " bytes "
                              "(max_message_bytes)", request_size, b->config.max_message_bytes);

        req = pace__request__unpack(NULL, request_size, request);
        if (!req)
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_MALFORMED,
                              "%zu bytes that are not a valid pace.Request message", request_size);
        if (req->version != PACE_PROTOCOL_VERSION)
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_UNSUPPORTED_VERSION,
                              "protocol version %" PRIu32 " is not supported; this broker speaks version %u",
                              req->version, PACE_PROTOCOL_VERSION);
        if (!req->on_behalf_of) {
                if (is_delegate(b, peer) && !rate_allows(b, peer))
                        return rate_refusal(b, peer, ret_refusal);
                return dispatch_request(b, peer, false, req, ret_reply, ret_reply_size, ret_refusal);
        }

        BrokerPeer caller;
        r = delegated_peer(b, peer, req->on_behalf_of, &caller, ret_refusal);
        if (r != 0)
                return r;
        if (!rate_allows(b, &caller))
                r = rate_refusal(b, &caller, ret_refusal);
        else
                r = dispatch_request(b, &caller, true, req, ret_reply, ret_reply_size, ret_refusal);
        safe_close(caller.pidfd);
        return r;
}

int broker_handle(Broker *b, const BrokerPeer *peer, const uint8_t *request, size_t request_size, uint8_t **ret_reply,
                  size_t *ret_reply_size) {
        Refusal refusal;
        int r;

        /* The one place a refusal becomes an Error reply. A failure comes
         * back as it is: a handler that failed after its change took effect
         * (packing the reply) must not tell the client it was refused, and
         * one that failed before has said so as a refusal itself. */
        r = handle_request(b, peer, request, request_size, ret_reply, ret_reply_size, &refusal);
        if (r <= 0)
                return r;
        return broker_error_reply(refusal.code, refusal.message, ret_reply, ret_reply_size);
}
