/* SPDX-License-Identifier: MIT */
/* The broker's per-uid rate limit (broker/rate-limit.c): what a user may
 * send at once, how fast that comes back, and that users do not share. */
#include <string.h>

#include "macro.h"
#include "rate-limit.h"
#include "test.h"

#define T0 (1000 * NSEC_PER_SEC) /* any start: the clock is monotonic, not zero */

/* How many requests uid gets through at `now`, trying `tries` times. */
static unsigned take_n(RateLimit *rl, uint32_t rate, uid_t uid, uint64_t now, unsigned tries) {
        unsigned n = 0;
        for (unsigned i = 0; i < tries; i++)
                n += rate_limit_take(rl, rate, uid, now);
        return n;
}

TEST(a_new_uid_gets_a_burst_of_one_seconds_worth) {
        RateLimit rl = {};
        ASSERT_EQ(take_n(&rl, 10, 1000, T0, 100), 10u);
        ASSERT_FALSE(rate_limit_take(&rl, 10, 1000, T0));
}

TEST(tokens_come_back_at_the_rate) {
        RateLimit rl = {};
        ASSERT_EQ(take_n(&rl, 10, 1000, T0, 10), 10u);
        /* One request per 100 ms: not before, and exactly one then. */
        ASSERT_FALSE(rate_limit_take(&rl, 10, 1000, T0 + 99 * NSEC_PER_MSEC));
        ASSERT_TRUE(rate_limit_take(&rl, 10, 1000, T0 + 100 * NSEC_PER_MSEC));
        ASSERT_FALSE(rate_limit_take(&rl, 10, 1000, T0 + 100 * NSEC_PER_MSEC));
        /* Fractions add up: five 20 ms steps make one more request. */
        for (int i = 1; i < 5; i++)
                ASSERT_FALSE(rate_limit_take(&rl, 10, 1000, T0 + (100 + 20 * i) * NSEC_PER_MSEC));
        ASSERT_TRUE(rate_limit_take(&rl, 10, 1000, T0 + 200 * NSEC_PER_MSEC));
        /* Half a second: five. */
        ASSERT_EQ(take_n(&rl, 10, 1000, T0 + 700 * NSEC_PER_MSEC, 100), 5u);
}

TEST(the_bucket_never_holds_more_than_a_second) {
        RateLimit rl = {};
        ASSERT_EQ(take_n(&rl, 10, 1000, T0, 10), 10u);
        /* An hour of silence (also: no overflow in the refill). */
        ASSERT_EQ(take_n(&rl, 10, 1000, T0 + 3600 * NSEC_PER_SEC, 100), 10u);
        ASSERT_EQ(take_n(&rl, 10, 1000, UINT64_MAX, 100), 10u);
}

TEST(uids_do_not_share_a_bucket) {
        RateLimit rl = {};
        ASSERT_EQ(take_n(&rl, 5, 1000, T0, 100), 5u);
        ASSERT_EQ(take_n(&rl, 5, 1001, T0, 100), 5u);
        ASSERT_FALSE(rate_limit_take(&rl, 5, 1000, T0));
        ASSERT_FALSE(rate_limit_take(&rl, 5, 1001, T0));
        /* Root's uid is a uid like any other here: exempting it is policy,
         * the caller's. */
        ASSERT_EQ(take_n(&rl, 5, 0, T0, 100), 5u);
}

TEST(a_clock_going_backwards_refills_nothing) {
        RateLimit rl = {};
        ASSERT_EQ(take_n(&rl, 10, 1000, T0, 10), 10u);
        ASSERT_FALSE(rate_limit_take(&rl, 10, 1000, T0 - 5 * NSEC_PER_SEC));
        ASSERT_FALSE(rate_limit_take(&rl, 10, 1000, T0 - 1));
        /* And the bucket kept its own time: refills count from T0. */
        ASSERT_FALSE(rate_limit_take(&rl, 10, 1000, T0 + 99 * NSEC_PER_MSEC));
        ASSERT_TRUE(rate_limit_take(&rl, 10, 1000, T0 + 100 * NSEC_PER_MSEC));
}

TEST(many_uids_push_out_the_least_recently_used) {
        RateLimit rl = {};
        /* uid 1 spends its burst, then every bucket fills with others, each
         * more recent than uid 1. */
        ASSERT_EQ(take_n(&rl, 2, 1, T0, 2), 2u);
        ASSERT_FALSE(rate_limit_take(&rl, 2, 1, T0));
        for (uid_t u = 2; u < 2 + RATE_LIMIT_BUCKETS - 1; u++)
                ASSERT_TRUE(rate_limit_take(&rl, 2, u, T0 + u));
        /* Still tracked: nothing was pushed out yet. */
        ASSERT_FALSE(rate_limit_take(&rl, 2, 1, T0 + 1));
        /* One more uid takes uid 1's bucket... */
        ASSERT_TRUE(rate_limit_take(&rl, 2, 5000, T0 + 5000));
        /* ...while the recent ones keep theirs (one token left each). */
        ASSERT_TRUE(rate_limit_take(&rl, 2, 2, T0 + 5000));
        ASSERT_FALSE(rate_limit_take(&rl, 2, 2, T0 + 5000));
}

TEST(a_lower_rate_after_a_reload_caps_the_bucket) {
        RateLimit rl = {};
        ASSERT_EQ(take_n(&rl, 100, 1000, T0, 1), 1u);
        /* 99 tokens saved at the old rate; the new cap is 2 once refilled. */
        ASSERT_EQ(take_n(&rl, 2, 1000, T0 + NSEC_PER_MSEC, 100), 2u);
}

TEST_MAIN()
