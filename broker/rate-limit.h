/* SPDX-License-Identifier: MIT */
#pragma once

/* The per-uid request rate limit: a token bucket per uid, refilled at
 * `per_second` requests a second and holding at most one second's worth, so
 * a quiet user may send a burst of `per_second` at once. Pure: the caller
 * passes the clock (CLOCK_MONOTONIC, in ns) and the rate, which a reload may
 * change between calls. A fixed number of buckets, so that many uids cannot
 * make the broker allocate: when all are taken, the least recently used one
 * is given to the newcomer, which starts with a full bucket, as does a uid
 * that comes back after being pushed out. */

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define RATE_LIMIT_BUCKETS 256

typedef struct RateBucket {
        uid_t uid;
        bool used;
        uint64_t tokens_ppm; /* in millionths of a request */
        uint64_t last_ns;
} RateBucket;

typedef struct RateLimit {
        RateBucket buckets[RATE_LIMIT_BUCKETS];
} RateLimit;

/* Whether uid may send another request at now_ns; takes a token if so. A
 * clock that goes backwards refills nothing (the bucket keeps its time). */
bool rate_limit_take(RateLimit *rl, uint32_t per_second, uid_t uid, uint64_t now_ns);
