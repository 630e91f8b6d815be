/* SPDX-License-Identifier: MIT */
#pragma once

/* pace-rtkit's connection to pace-broker: one persistent SOCK_SEQPACKET
 * connection, one datagram per message. The broker drops clients that stay
 * idle (client_timeout_ms), and a desktop's calls come minutes apart, so a
 * connection found closed is opened again, once, transparently. */

#include <stdint.h>

#include "pace.pb-c.h"

typedef struct BrokerClient BrokerClient;

/* path: the broker's socket. timeout_usec bounds each connect, send and
 * receive (a broker that hangs must not hang the bus service for long). No
 * connection is made until the first exchange. */
int broker_client_new(const char *path, uint64_t timeout_usec, BrokerClient **ret);
BrokerClient *broker_client_free(BrokerClient *c);
static inline void broker_client_freep(BrokerClient **c) {
        if (*c)
                broker_client_free(*c);
}

/* Sends req and decodes the answer into *ret (free with
 * pace__response__free_unpacked). -ETIMEDOUT when the broker does not
 * answer in time, -EPROTO for an answer that does not decode, other
 * negative errno when it cannot be reached. Matches RtkitExchange, with the
 * client as userdata. */
int broker_client_exchange(void *client, const Pace__Request *req, Pace__Response **ret);

const char *broker_client_path(const BrokerClient *c);
