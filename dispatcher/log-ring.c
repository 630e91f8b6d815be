/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "log-ring.h"
#include "sched-util.h"

struct LogRing {
        pthread_mutex_t lock;
        /* Free-running: head - tail messages wait, at index % LOG_RING_SIZE. */
        unsigned head, tail, dropped;
        int priorities[LOG_RING_SIZE]; /* syslog's LOG_* */
        char messages[LOG_RING_SIZE][LOG_MESSAGE_MAX];
        int efd;
};

int log_ring_new(LogRing **ret) {
        LogRing *ring = calloc(1, sizeof(*ring));

        if (!ring)
                return -ENOMEM;
        /* Non-blocking: a writer must not wait even if the counter were to
         * saturate, and the drain must not wait on an empty one. */
        ring->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (ring->efd < 0) {
                int r = negative_errno();
                free(ring);
                return r;
        }
        pi_mutex_init(&ring->lock);
        *ret = ring;
        return 0;
}

LogRing *log_ring_free(LogRing *ring) {
        if (!ring)
                return NULL;
        safe_close(ring->efd);
        pthread_mutex_destroy(&ring->lock);
        free(ring);
        return NULL;
}

int log_ring_fd(const LogRing *ring) {
        return ring->efd;
}

int log_ring_pushv(LogRing *ring, int priority, const char *fmt, va_list ap) {
        int r = 0;

        pthread_mutex_lock(&ring->lock);
        if (ring->head - ring->tail >= LOG_RING_SIZE) {
                ring->dropped++;
                r = -ENOBUFS;
        } else {
                unsigned i = ring->head++ % LOG_RING_SIZE;
                ring->priorities[i] = priority;
                vsnprintf(ring->messages[i], LOG_MESSAGE_MAX, fmt, ap);
        }
        pthread_mutex_unlock(&ring->lock);
        /* Also when dropped: the drain is what reports the loss. */
        uint64_t one = 1;
        (void) !write(ring->efd, &one, sizeof(one));
        return r;
}

int log_ring_push(LogRing *ring, int priority, const char *fmt, ...) {
        va_list ap;

        va_start(ap, fmt);
        int r = log_ring_pushv(ring, priority, fmt, ap);
        va_end(ap);
        return r;
}

int log_ring_drain(LogRing *ring, LogSink log_fn, void *userdata) {
        char message[LOG_MESSAGE_MAX];
        int n = 0;
        uint64_t v;

        /* Reset before emptying: a push after this wakes the next drain. */
        (void) !read(ring->efd, &v, sizeof(v));
        for (;;) {
                int priority;
                unsigned dropped;

                pthread_mutex_lock(&ring->lock);
                if (ring->tail == ring->head) {
                        dropped = ring->dropped;
                        ring->dropped = 0;
                        pthread_mutex_unlock(&ring->lock);
                        if (dropped > 0) {
                                snprintf(message, sizeof(message), "%u log messages dropped", dropped);
                                log_fn(userdata, LOG_WARNING, message);
                        }
                        return n;
                }
                unsigned i = ring->tail++ % LOG_RING_SIZE;
                priority = ring->priorities[i];
                memcpy(message, ring->messages[i], sizeof(message));
                pthread_mutex_unlock(&ring->lock);
                log_fn(userdata, priority, message);
                n++;
        }
}
