/* SPDX-License-Identifier: MIT */
/* Reload and reset, root's (and, for what was granted on others' behalf,
 * the delegate's) administration of the broker. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>

#include "broker-internal.h"

int handle_admin(Broker *b, const BrokerPeer *peer, const Pace__Request *req, uint8_t **reply, size_t *reply_size,
                 Refusal *ret_refusal) {
        int body = req->body_case;
        char message[1024] = "";

        /* ResetKnown: what was granted on others' behalf, which a delegate
         * (pace-rtkit, for root's call) may drop as well as root. */
        if (body == PACE__REQUEST__BODY_RESET && req->reset->has_only_on_behalf && req->reset->only_on_behalf) {
                if (peer->uid != 0 && peer->uid != b->delegate_uid)
                        return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_PERMISSION_DENIED,
                                      "only root and pace's own services may drop what was granted on "
                                      "others' behalf");
                size_t n = broker_reset_on_behalf(b);
                broker_log(b, LOG_NOTICE, "reset of on-behalf grants by pid %" PRIi32 ": %zu reservation(s) "
                           "and every nice level dropped", (int32_t) peer->pid, n);
                snprintf(message, sizeof(message), "%zu reservation(s) dropped", n);
                return admin_reply(reply, reply_size, message);
        }
        if (peer->uid != 0)
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_PERMISSION_DENIED,
                              "only root may %s the broker", body == PACE__REQUEST__BODY_RESET ? "reset" : "reload");
        if (body == PACE__REQUEST__BODY_RESET) {
                size_t n = broker_reset(b);
                broker_log(b, LOG_NOTICE, "reset by pid %" PRIi32 ": %zu reservation(s) dropped", (int32_t) peer->pid, n);
                snprintf(message, sizeof(message), "%zu reservation(s) dropped", n);
                return admin_reply(reply, reply_size, message);
        }
        if (!b->hooks.reload)
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_INTERNAL,
                              "this broker cannot reload its configuration");
        int r = b->hooks.reload(b->hooks.userdata, message, sizeof(message));
        if (r < 0)
                broker_log(b, LOG_ERR, "reload refused, the old configuration stays (asked by pid %" PRIi32 "): %s",
                           (int32_t) peer->pid, message[0] ? message : strerror(-r));
        else
                broker_log(b, LOG_INFO, "reloaded on request of pid %" PRIi32, (int32_t) peer->pid);
        if (r < 0)
                return refuse(ret_refusal,
                              r == -EBUSY || r == -EINVAL ? PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT
                                                          : PACE__ERROR_CODE__ERROR_INTERNAL,
                              "reload refused, the old configuration stays: %s", message[0] ? message : strerror(-r));
        return admin_reply(reply, reply_size, "configuration reloaded");
}
