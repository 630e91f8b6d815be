/* SPDX-License-Identifier: MIT */
#pragma once

/* Messages from the dispatch threads on their way to the log. A thread at
 * SCHED_FIFO 99 must never block on the journal (a slow one would hold it
 * past its slot), so it only copies its message into a bounded ring and
 * pokes an eventfd; the main thread drains the ring into the real log.
 * When the ring is full a message is dropped and counted, and the drain
 * says how many were lost. Never logs itself. */

#include <stdarg.h>
#include <stdbool.h>

#include "dispatcher.h"
#include "macro.h"

#define LOG_RING_SIZE 64u
/* Longer messages are cut to this (with the terminating NUL). */
#define LOG_MESSAGE_MAX 384u

typedef struct LogRing LogRing;

int log_ring_new(LogRing **ret);
LogRing *log_ring_free(LogRing *ring);
DEFINE_TRIVIAL_CLEANUP_FUNC(LogRing *, log_ring_free);

/* Readable when messages wait: what the main thread polls. */
int log_ring_fd(const LogRing *ring);

/* Queues a message without blocking on anything but the ring's own short
 * lock. Returns 0, or -ENOBUFS if the ring was full (the message is
 * counted as dropped). Any thread. */
_printf_(3, 4) int log_ring_push(LogRing *ring, int priority, const char *fmt, ...);
_printf_(3, 0) int log_ring_pushv(LogRing *ring, int priority, const char *fmt, va_list ap);

/* Hands every queued message to log_fn, oldest first, then, if any were
 * dropped since the last drain, a warning "N log messages dropped".
 * log_fn runs without the ring's lock held. Returns the number of queued
 * messages handed over. One thread at a time. */
int log_ring_drain(LogRing *ring, LogSink log_fn, void *userdata);
