/* SPDX-License-Identifier: MIT */
#pragma once

/* Connecting to the broker's socket, for libpace and pace-rtkit alike.
 * Header-only: libpace links none of common's code (common_headers_dep). */

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>

#include "macro.h"

/* A SOCK_SEQPACKET connection to path, whose sends and receives (and the
 * connect itself) give up after timeout_usec. -EINVAL for an empty path,
 * -ENAMETOOLONG for one that does not fit, -ETIMEDOUT if the listener's
 * backlog stayed full. */
static inline int seqpacket_connect(const char *path, uint64_t timeout_usec, int *ret_fd) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        struct timeval tv = {
                .tv_sec = (time_t) (timeout_usec / 1000000),
                .tv_usec = (suseconds_t) (timeout_usec % 1000000),
        };
        _cleanup_close_ int fd = -EBADF;
        size_t len = strlen(path);

        if (len == 0)
                return -EINVAL;
        if (len >= sizeof(sa.sun_path))
                return -ENAMETOOLONG;
        memcpy(sa.sun_path, path, len + 1);

        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return negative_errno();
        /* The send timeout also bounds connect() on a full listen backlog. */
        if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0)
                return negative_errno();
        if (connect(fd, (const struct sockaddr *) &sa, (socklen_t) (offsetof(struct sockaddr_un, sun_path) + len + 1)) < 0)
                return errno == EAGAIN || errno == EINPROGRESS ? -ETIMEDOUT : negative_errno();
        *ret_fd = TAKE_FD(fd);
        return 0;
}
