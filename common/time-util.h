/* SPDX-License-Identifier: MIT */
#pragma once

#include <stdint.h>
#include <time.h>

#include "macro.h"

static inline uint64_t timespec_ns(const struct timespec *ts) {
        return (uint64_t) ts->tv_sec * NSEC_PER_SEC + (uint64_t) ts->tv_nsec;
}

/* A clock in ns. clock_gettime() fails only for a clock id that does not
 * exist, a bug at the caller: 0 then. */
static inline uint64_t clock_ns(clockid_t id) {
        struct timespec ts;

        if (clock_gettime(id, &ts) < 0)
                return 0;
        return timespec_ns(&ts);
}

/* CLOCK_MONOTONIC in ns: every deadline, interval and stamp pace keeps. */
static inline uint64_t monotonic_ns(void) {
        return clock_ns(CLOCK_MONOTONIC);
}
