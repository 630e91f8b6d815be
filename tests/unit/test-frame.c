/* SPDX-License-Identifier: MIT */
/* The dispatch loop's pure parts: a frame compiled into runs, where the
 * grid stands, and the per-period accounting. */
#include <string.h>

#include "acct.h"
#include "frame.h"
#include "macro.h"
#include "test.h"

#define MAX_OWNERS 8

typedef struct Compiled {
        FrameRun runs[64];
        uint32_t n, rot;
} Compiled;

static Compiled compile(const uint16_t *slots, uint32_t frame, const bool *live, const uint32_t *period) {
        FrameScratch scratch[MAX_OWNERS];
        Compiled c;
        memset(&c, 0xa5, sizeof(c)); /* nothing may be read unwritten */
        frame_compile(slots, frame, live, period, scratch, c.runs, &c.n, &c.rot);
        return c;
}

/* Expands the runs back into a frame, starting at table slot rot. */
static void expand(const Compiled *c, uint32_t frame, uint16_t *ret) {
        for (uint32_t k = 0; k < c->n; k++) {
                uint32_t end = k + 1 < c->n ? c->runs[k + 1].start : frame;
                for (uint32_t s = c->runs[k].start; s < end; s++)
                        ret[(c->rot + s) % frame] = (uint16_t) c->runs[k].owner;
        }
}

TEST(runs_reproduce_the_frame_and_begin_at_a_change) {
        /* Owner 1 wraps around the frame's end: the rotation must not split
         * its run in two. */
        const uint16_t slots[10] = { 1, 1, 0, 2, 2, 2, 0, 0, 1, 1 };
        bool live[3] = { false, true, true };
        uint32_t period[3] = { 0, 10, 10 };
        uint16_t back[10];

        Compiled c = compile(slots, 10, live, period);
        ASSERT_EQ(c.n, 4u);
        ASSERT_EQ(c.rot, 2u);
        ASSERT_EQ(c.runs[0].start, 0u);
        ASSERT_EQ(c.runs[0].owner, 0u);
        expand(&c, 10, back);
        ASSERT_TRUE(memcmp(back, slots, sizeof(slots)) == 0);
        for (uint32_t k = 1; k < c.n; k++)
                ASSERT_NE(c.runs[k].owner, c.runs[k - 1].owner);
        /* Owner 1's run is 4 slots long across the old frame boundary. */
        for (uint32_t k = 0; k < c.n; k++)
                if (c.runs[k].owner == 1)
                        ASSERT_EQ((k + 1 < c.n ? c.runs[k + 1].start : 10) - c.runs[k].start, 4u);
}

TEST(an_ignored_owner_is_free_time) {
        const uint16_t slots[6] = { 1, 1, 2, 2, 0, 0 };
        bool live[3] = { false, true, false };
        uint32_t period[3] = { 0, 6, 6 };

        Compiled c = compile(slots, 6, live, period);
        /* Owner 2's slots merge with the free ones: one wake-up less. */
        ASSERT_EQ(c.n, 2u);
        for (uint32_t k = 0; k < c.n; k++)
                ASSERT_NE(c.runs[k].owner, 2u);
}

TEST(the_run_before_the_longest_gap_closes_each_period) {
        /* Owner 1, period 5, twice per frame of 10: runs of 2 with gaps of 3. */
        const uint16_t slots[10] = { 1, 1, 0, 0, 0, 1, 1, 0, 0, 0 };
        bool live[2] = { false, true };
        uint32_t period[2] = { 0, 5 };

        Compiled c = compile(slots, 10, live, period);
        unsigned closes = 0;
        for (uint32_t k = 0; k < c.n; k++)
                if (c.runs[k].owner == 1) {
                        ASSERT_EQ(c.runs[k].gap, 3u);
                        closes += c.runs[k].closes;
                }
        ASSERT_EQ(closes, 2u); /* one per period */

        /* Uneven: runs of 1 and 2 with gaps 1 and 6 in a period of 10. */
        const uint16_t uneven[10] = { 1, 0, 1, 1, 0, 0, 0, 0, 0, 0 };
        uint32_t p10[2] = { 0, 10 };
        c = compile(uneven, 10, live, p10);
        closes = 0;
        for (uint32_t k = 0; k < c.n; k++)
                if (c.runs[k].owner == 1 && c.runs[k].closes) {
                        closes++;
                        ASSERT_EQ(c.runs[k].gap, 6u);
                }
        ASSERT_EQ(closes, 1u);
}

TEST(empty_and_single_owner_frames) {
        const uint16_t free_slots[4] = { 0, 0, 0, 0 };
        const uint16_t one[4] = { 1, 1, 1, 1 };
        bool live[2] = { false, true };
        uint32_t period[2] = { 0, 4 };

        Compiled c = compile(free_slots, 4, live, period);
        ASSERT_EQ(c.n, 0u);
        ASSERT_EQ(c.rot, 0u);
        c = compile(one, 4, live, period);
        ASSERT_EQ(c.n, 1u);
        ASSERT_EQ(c.runs[0].owner, 1u);
}

TEST(locate_finds_the_run_under_way) {
        const uint16_t slots[10] = { 1, 1, 0, 2, 2, 2, 0, 0, 1, 1 };
        bool live[3] = { false, true, true };
        uint32_t period[3] = { 0, 10, 10 };
        Compiled c = compile(slots, 10, live, period);

        /* Every global slot maps to the run whose owner the table names. */
        for (uint64_t g = 1000; g < 1030; g++) {
                uint32_t off, k;
                frame_locate(c.runs, c.n, 10, c.rot, g, &off, &k);
                ASSERT_EQ((uint64_t) (off + c.rot) % 10, g % 10);
                ASSERT_EQ(c.runs[k].owner, (uint32_t) slots[g % 10]);
        }
}

TEST(accounting_counts_whole_periods) {
        Acct a = {};
        const uint64_t ms = NSEC_PER_MSEC, budget = 10 * ms;

        acct_period_end(&a, 1000 * ms, 0, budget, true, 2000 * ms);
        ASSERT_TRUE(a.started);
        ASSERT_EQ(a.periods, 0u); /* the first end only starts the count */
        uint64_t usage = 1000 * ms;
        for (int p = 1; p <= 100; p++) {
                /* Every 4th period used 9 ms of 10: blocked (under 95%). */
                usage += p % 4 == 0 ? 9 * ms : 10 * ms;
                acct_period_end(&a, usage, (uint64_t) p * 50 * ms, budget, p % 2 == 0, 2000 * ms);
        }
        ASSERT_EQ(a.periods, 100u);
        ASSERT_EQ(a.blocked, 25u);
        ASSERT_EQ(a.wanted_more, 50u);
        /* Windows close at 2 s (period 40) and 4 s (period 80). */
        ASSERT_EQ(a.window_ns, 2000 * ms);
        ASSERT_EQ(a.delivered_ns, 30 * 10 * ms + 10 * 9 * ms);

        PaceStatsEntry e = {};
        acct_publish(&a, 3, usage, 5000 * ms, &e);
        ASSERT_EQ(e.seq % 2, 0u);
        ASSERT_EQ(e.seq, 2u);
        ASSERT_EQ(e.threads, 3u);
        ASSERT_EQ(e.cpu_time_ns, usage - 1000 * ms);
        ASSERT_EQ(e.periods_blocked, 25u);
        ASSERT_EQ(e.delivered_ns, a.delivered_ns);
}

TEST(wanting_more_is_running_through_the_closing_run) {
        const uint64_t us = NSEC_PER_USEC, ms = NSEC_PER_MSEC;

        /* A 1 ms run: a spinner loses its promotion and the loop's early
         * wake-up (tens of us) and still ran through it. */
        ASSERT_TRUE(acct_ran_through(5 * ms, 5 * ms + 940 * us, 100 * ms, 101 * ms));
        ASSERT_TRUE(acct_ran_through(5 * ms, 5 * ms + 900 * us, 100 * ms, 101 * ms));
        /* One that blocked 200 us before its end did not want more. */
        ASSERT_FALSE(acct_ran_through(5 * ms, 5 * ms + 800 * us, 100 * ms, 101 * ms));
        ASSERT_FALSE(acct_ran_through(5 * ms, 5 * ms, 100 * ms, 101 * ms));
        /* The slack is an eighth of a long run: 10 ms, 1.25 ms. */
        ASSERT_TRUE(acct_ran_through(0, 8800 * us, 0, 10 * ms));
        ASSERT_FALSE(acct_ran_through(0, 8700 * us, 0, 10 * ms));
        /* A short run keeps 100 us of slack. */
        ASSERT_TRUE(acct_ran_through(0, 160 * us, 0, 250 * us));
        ASSERT_FALSE(acct_ran_through(0, 140 * us, 0, 250 * us));
        /* Usage that went back, or no time: nothing to tell. */
        ASSERT_FALSE(acct_ran_through(5 * ms, 4 * ms, 0, ms));
        ASSERT_FALSE(acct_ran_through(0, ms, ms, ms));
}

TEST(a_run_is_skipped_once_the_period_budget_is_used_up_waiting_time_included) {
        Acct a = {};
        const uint64_t ms = NSEC_PER_MSEC, budget = 25 * ms, run = 1 * ms;

        /* Nothing to count from before the first period end. */
        ASSERT_FALSE(acct_budget_spent(&a, 500 * ms, budget, run));
        acct_period_end(&a, 100 * ms, 0, budget, true, 2000 * ms);
        ASSERT_FALSE(acct_budget_spent(&a, 100 * ms, budget, run));
        ASSERT_FALSE(acct_budget_spent(&a, 124 * ms, budget, run)); /* a whole run left */
        ASSERT_FALSE(acct_budget_spent(&a, 124 * ms + run / 2, budget, run)); /* half of one */
        ASSERT_TRUE(acct_budget_spent(&a, 124 * ms + run / 2 + 1, budget, run));
        ASSERT_TRUE(acct_budget_spent(&a, 125 * ms, budget, run));
        ASSERT_TRUE(acct_budget_spent(&a, 180 * ms, budget, run)); /* leaked far past it */
        /* A long run is skipped only when less than half of it is left. */
        ASSERT_FALSE(acct_budget_spent(&a, 110 * ms, budget, 20 * ms));
        ASSERT_TRUE(acct_budget_spent(&a, 116 * ms, budget, 20 * ms));
        /* The next period counts afresh. */
        acct_period_end(&a, 130 * ms, 50 * ms, budget, true, 2000 * ms);
        ASSERT_FALSE(acct_budget_spent(&a, 130 * ms, budget, run));
        /* A usage below the period's start (a group that was replaced)
         * never blocks a run. */
        ASSERT_FALSE(acct_budget_spent(&a, 10 * ms, budget, run));
}

TEST_MAIN()
