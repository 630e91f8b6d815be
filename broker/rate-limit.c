/* SPDX-License-Identifier: MIT */
#include "macro.h"
#include "rate-limit.h"

bool rate_limit_take(RateLimit *rl, uint32_t per_second, uid_t uid, uint64_t now_ns) {
        uint64_t rate = per_second, cap = rate * PPM;
        RateBucket *bucket = NULL, *oldest = &rl->buckets[0];

        for (size_t i = 0; i < RATE_LIMIT_BUCKETS; i++) {
                RateBucket *r = &rl->buckets[i];
                if (r->used && r->uid == uid) {
                        bucket = r;
                        break;
                }
                if (!r->used || (oldest->used && r->last_ns < oldest->last_ns))
                        oldest = r;
        }
        if (!bucket) {
                bucket = oldest;
                *bucket = (RateBucket) { .uid = uid, .used = true, .tokens_ppm = cap, .last_ns = now_ns };
        }
        if (now_ns > bucket->last_ns) {
                /* elapsed ns * rate / 1e9 requests, in ppm: elapsed * rate / 1000.
                 * A second or more fills the bucket, and keeps the product
                 * from overflowing after a long silence. */
                uint64_t elapsed = now_ns - bucket->last_ns;
                uint64_t refill = elapsed >= NSEC_PER_SEC ? cap : elapsed * rate / 1000;
                bucket->tokens_ppm = MIN(cap, bucket->tokens_ppm + refill);
                bucket->last_ns = now_ns;
        }
        if (bucket->tokens_ppm < PPM)
                return false;
        bucket->tokens_ppm -= PPM;
        return true;
}
