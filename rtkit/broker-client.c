/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>

#include "broker-client.h"
#include "macro.h"
#include "pace-limits.h"
#include "socket-util.h"

struct BrokerClient {
        char *path;
        uint64_t timeout_usec;
        int fd;
        /* One byte more than any valid message, so an oversized one shows. */
        uint8_t buf[PACE_MAX_MESSAGE_SIZE + 1];
};

int broker_client_new(const char *path, uint64_t timeout_usec, BrokerClient **ret) {
        BrokerClient *c;

        if (!path || !*path || strlen(path) >= sizeof(((struct sockaddr_un *) NULL)->sun_path))
                return -EINVAL;
        if (timeout_usec == 0)
                return -EINVAL;
        c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        c->path = strdup(path);
        if (!c->path) {
                free(c);
                return -ENOMEM;
        }
        c->timeout_usec = timeout_usec;
        c->fd = -EBADF;
        *ret = c;
        return 0;
}

BrokerClient *broker_client_free(BrokerClient *c) {
        if (!c)
                return NULL;
        safe_close(c->fd);
        free(c->path);
        free(c);
        return NULL;
}

const char *broker_client_path(const BrokerClient *c) {
        return c->path;
}

static int connect_broker(BrokerClient *c) {
        return seqpacket_connect(c->path, c->timeout_usec, &c->fd);
}

static void disconnect(BrokerClient *c) {
        c->fd = safe_close(c->fd);
}

/* Between requests the broker sends nothing: anything readable on an idle
 * connection is its end (the broker dropped us) or an error. */
static bool connection_gone(int fd) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        return poll(&p, 1, 0) != 0;
}

/* Signs that the broker closed the connection before it read the request:
 * worth one new connection. */
static bool closed_by_peer(int r) {
        return r == -EPIPE || r == -ECONNRESET || r == -ENOTCONN;
}

static int send_request(BrokerClient *c, size_t size) {
        ssize_t n;

        do
                n = send(c->fd, c->buf, size, MSG_NOSIGNAL);
        while (n < 0 && errno == EINTR);
        if (n < 0)
                return errno == EAGAIN ? -ETIMEDOUT : negative_errno();
        if ((size_t) n != size)
                return -EIO;
        return 0;
}

static int receive_reply(BrokerClient *c, size_t *ret_size) {
        ssize_t n;

        do
                n = recv(c->fd, c->buf, sizeof(c->buf), MSG_TRUNC);
        while (n < 0 && errno == EINTR);
        if (n < 0)
                return errno == EAGAIN ? -ETIMEDOUT : negative_errno();
        if (n == 0)
                return -ECONNRESET; /* end of stream: no answer will come */
        if ((size_t) n > PACE_MAX_MESSAGE_SIZE)
                return -EPROTO;
        *ret_size = (size_t) n;
        return 0;
}

int broker_client_exchange(void *client, const Pace__Request *req, Pace__Response **ret) {
        BrokerClient *c = client;
        Pace__Response *resp;
        size_t size, got = 0;
        int r = 0;

        size = pace__request__get_packed_size(req);
        if (size > PACE_MAX_MESSAGE_SIZE)
                return -EMSGSIZE;

        for (int attempt = 0; attempt < 2; attempt++) {
                if (c->fd >= 0 && connection_gone(c->fd))
                        disconnect(c);
                if (c->fd < 0) {
                        r = connect_broker(c);
                        if (r < 0)
                                return r;
                }
                pace__request__pack(req, c->buf);
                r = send_request(c, size);
                if (r == 0)
                        r = receive_reply(c, &got);
                if (r == 0)
                        break;
                /* A late answer would be taken for the next request's: after
                 * any failure the connection goes. */
                disconnect(c);
                /* The broker went away under us (idle timeout, restart):
                 * once more on a new connection. A request it did read and
                 * then died on is safe to repeat: a second reservation of a
                 * thread on its behalf returns the first, a nice level
                 * replaces itself. */
                if (!closed_by_peer(r))
                        return r;
        }
        if (r < 0)
                return r;

        resp = pace__response__unpack(NULL, got, c->buf);
        if (!resp)
                return -EPROTO;
        *ret = resp;
        return 0;
}
