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

/* Replies. Each builder packs a complete Response; the caller frees it. */

static bool is_delegate(const Broker *b, const BrokerPeer *peer) {
        return peer->uid == 0 || peer->uid == b->delegate_uid;
}

static int rate_refusal(Broker *b, const BrokerPeer *peer, uint8_t **ret_reply, size_t *ret_reply_size) {
        return error_reply(ret_reply, ret_reply_size, PACE__ERROR_CODE__ERROR_LIMIT_EXCEEDED,
                           "uid %u sends more than %" PRIu32 " requests per second (max_requests_per_second); "
                           "slow down", (unsigned) peer->uid, b->config.max_requests_per_second);
}

/* The peer a delegate speaks for: the process on_behalf_of names, if it
 * lives, started when the delegate says and runs as the uid it says. 0
 * with *ret (its pidfd the caller's to close), or 1 after the refusal. */
static int delegated_peer(Broker *b, const BrokerPeer *delegate, const Pace__Caller *caller, BrokerPeer *ret,
                          uint8_t **reply, size_t *reply_size) {
        _cleanup_close_ int pidfd = -EBADF;
        char path[64], status[4096];
        ProcInfo info;
        ProcOwner owner;
        int r;

        if (delegate->uid != 0 && delegate->uid != b->delegate_uid)
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_PERMISSION_DENIED,
                                   "uid %u may not ask on behalf of another process; only root and pace's own "
                                   "services (uid %u) may", (unsigned) delegate->uid, (unsigned) b->delegate_uid) ?: 1;
        if (caller->pid <= 1)
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT,
                                   "on_behalf_of names pid %" PRIi32 ", not a user process", caller->pid) ?: 1;
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
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_NO_SUCH_PROCESS,
                                   "the calling process %" PRIi32 " has exited", caller->pid) ?: 1;
        if (r < 0)
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_INTERNAL,
                                   "cannot read /proc for the calling process %" PRIi32 ": %s", caller->pid,
                                   strerror(-r)) ?: 1;
        /* The bus gives the uid a connection had when it connected: the
         * process's real or effective one. Anything else is a confused or
         * lying delegate. */
        if (proc_status_owner(status, &owner) < 0 ||
            (owner.uids[0] != (uid_t) caller->uid && owner.uids[1] != (uid_t) caller->uid))
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_PERMISSION_DENIED,
                                   "the calling process %" PRIi32 " does not run as uid %" PRIu32, caller->pid,
                                   caller->uid) ?: 1;

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
                            uint8_t **ret_reply, size_t *ret_reply_size) {
        switch (req->body_case) {
        case PACE__REQUEST__BODY_RESERVE:
        case PACE__REQUEST__BODY_RELEASE:
        case PACE__REQUEST__BODY_MODIFY:
        case PACE__REQUEST__BODY_NICE:
                if (!group_allows(b, peer))
                        return error_reply(ret_reply, ret_reply_size, PACE__ERROR_CODE__ERROR_PERMISSION_DENIED,
                                           "uid %u is in none of the groups allowed to reserve (allowed_groups "
                                           "in the configuration); ask the administrator", (unsigned) peer->uid);
                if (req->body_case == PACE__REQUEST__BODY_RELEASE)
                        return handle_release(b, peer, req->release, ret_reply, ret_reply_size);
                if (req->body_case == PACE__REQUEST__BODY_MODIFY)
                        return handle_modify(b, peer, req->modify, ret_reply, ret_reply_size);
                if (req->body_case == PACE__REQUEST__BODY_NICE)
                        return handle_nice(b, peer, req->nice, ret_reply, ret_reply_size);
                return handle_reserve(b, peer, on_behalf, req->reserve, ret_reply, ret_reply_size);
        case PACE__REQUEST__BODY_STATUS:
                return handle_status(b, ret_reply, ret_reply_size);
        case PACE__REQUEST__BODY_RELOAD:
        case PACE__REQUEST__BODY_RESET:
                /* Administration is the delegate's own business, never
                 * something it does for a caller. */
                if (on_behalf)
                        return error_reply(ret_reply, ret_reply_size, PACE__ERROR_CODE__ERROR_PERMISSION_DENIED,
                                           "reload and reset are never asked on behalf of another process");
                return handle_admin(b, peer, req, ret_reply, ret_reply_size);
        default:
                return error_reply(ret_reply, ret_reply_size, PACE__ERROR_CODE__ERROR_MALFORMED,
                                   "request has no body (reserve, release, modify, nice or status)");
        }
}

int broker_handle(Broker *b, const BrokerPeer *peer, const uint8_t *request, size_t request_size, uint8_t **ret_reply,
                  size_t *ret_reply_size) {
        Pace__Request *req;
        int r;

        /* Before decoding: flooding with garbage costs tokens too. A
         * delegate speaks for many users; each of them is counted once
         * the request says who. */
        if (!is_delegate(b, peer) && !rate_allows(b, peer))
                return rate_refusal(b, peer, ret_reply, ret_reply_size);
        if (request_size == 0)
                return error_reply(ret_reply, ret_reply_size, PACE__ERROR_CODE__ERROR_MALFORMED,
                                   "empty message; expected a pace.Request");
        if (request_size > b->config.max_message_bytes)
                return error_reply(ret_reply, ret_reply_size, PACE__ERROR_CODE__ERROR_MALFORMED,
                                   "message of %zu bytes is larger than the limit of %" PRIu32 " bytes "
                                   "(max_message_bytes)", request_size, b->config.max_message_bytes);

        req = pace__request__unpack(NULL, request_size, request);
        if (!req)
                return error_reply(ret_reply, ret_reply_size, PACE__ERROR_CODE__ERROR_MALFORMED,
                                   "%zu bytes that are not a valid pace.Request message", request_size);

        if (req->version != PACE_PROTOCOL_VERSION)
                r = error_reply(ret_reply, ret_reply_size, PACE__ERROR_CODE__ERROR_UNSUPPORTED_VERSION,
                                "protocol version %" PRIu32 " is not supported; this broker speaks version %u",
                                req->version, PACE_PROTOCOL_VERSION);
        else if (req->on_behalf_of) {
                BrokerPeer caller;
                r = delegated_peer(b, peer, req->on_behalf_of, &caller, ret_reply, ret_reply_size);
                if (r == 0) {
                        if (!rate_allows(b, &caller))
                                r = rate_refusal(b, &caller, ret_reply, ret_reply_size);
                        else
                                r = dispatch_request(b, &caller, true, req, ret_reply, ret_reply_size);
                        safe_close(caller.pidfd);
                } else if (r > 0)
                        r = 0;
        } else if (is_delegate(b, peer) && !rate_allows(b, peer))
                r = rate_refusal(b, peer, ret_reply, ret_reply_size);
        else
                r = dispatch_request(b, peer, false, req, ret_reply, ret_reply_size);
        pace__request__free_unpacked(req, NULL);
        return r;
}
