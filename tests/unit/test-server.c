/* SPDX-License-Identifier: MIT */
/* The budget server's rules (dispatcher/server.h): when a window's budget
 * is replenished and spent, when the loop must look again, and when free
 * time may be taken. Times in ms for reading; the rules work in ns. */
#include "macro.h"
#include "server.h"
#include "test.h"

#define MS NSEC_PER_MSEC
#define US NSEC_PER_USEC

static const uint64_t window = 50 * MS, budget = 15 * MS, min_look = 1 * MS;

TEST(a_spinner_runs_out_exactly_when_its_budget_would) {
        ServerBudget b = {};

        /* First look in the window at 100 ms: full budget, and the next
         * look when 15 ms of running would have spent it. */
        ASSERT_TRUE(server_budget_look(&b, 100 * MS, window, budget, 7 * MS, true, min_look));
        ASSERT_EQ(b.next_look_ns, 115 * MS);
        /* It ran all along: spent, looked at again when the window ends. */
        ASSERT_FALSE(server_budget_look(&b, 115 * MS, window, budget, 22 * MS, true, min_look));
        ASSERT_EQ(b.next_look_ns, 150 * MS);
        /* Spent stays spent until then, even if usage were read wrong. */
        ASSERT_FALSE(server_budget_look(&b, 149 * MS, window, budget, 22 * MS, true, min_look));
        /* The next window replenishes, counting from its own usage. */
        ASSERT_TRUE(server_budget_look(&b, 150 * MS, window, budget, 22 * MS, true, min_look));
        ASSERT_EQ(b.next_look_ns, 165 * MS);
}

TEST(a_preempted_spinner_is_looked_at_again_when_the_rest_would_run_out) {
        ServerBudget b = {};

        ASSERT_TRUE(server_budget_look(&b, 100 * MS, window, budget, 0, true, min_look));
        /* An owner's slots took 5 of the 15 ms: 5 ms left, busy, so the
         * next look is exactly 5 ms on (no slot's rounding). */
        ASSERT_TRUE(server_budget_look(&b, 115 * MS, window, budget, 10 * MS, true, min_look));
        ASSERT_EQ(b.next_look_ns, 120 * MS);
        /* 4.96 ms of the 5: less than the floor left, spent. */
        ASSERT_FALSE(server_budget_look(&b, 120 * MS, window, budget, 14 * MS + 960 * US, true, min_look));
}

TEST(an_idle_server_is_looked_at_once_a_slot_at_most) {
        ServerBudget b = {};

        ASSERT_TRUE(server_budget_look(&b, 100 * MS, window, budget, 0, true, min_look));
        /* It took 14.5 ms, then blocked: 0.5 ms left. Not busy since the
         * last look (14.5 of 15 ms counts as busy, so take a quieter
         * history): */
        ASSERT_TRUE(server_budget_look(&b, 115 * MS, window, budget, 3 * MS, true, min_look));
        ASSERT_EQ(b.next_look_ns, 127 * MS); /* 12 ms left, idle: 12 ms */
        ASSERT_TRUE(server_budget_look(&b, 127 * MS, window, budget, 14 * MS + 500 * US, true, min_look));
        /* Busy since the last look (11.5 of 12 ms): the exact 0.5 ms. */
        ASSERT_EQ(b.next_look_ns, 127 * MS + 500 * US);
        ASSERT_TRUE(server_budget_look(&b, 127 * MS + 500 * US, window, budget, 14 * MS + 500 * US, true, min_look));
        /* Idle now with 0.5 ms left: not every 0.5 ms, but a slot on. */
        ASSERT_EQ(b.next_look_ns, 128 * MS + 500 * US);
}

TEST(a_server_held_back_gets_the_exact_instant) {
        ServerBudget b = {};

        ASSERT_TRUE(server_budget_look(&b, 100 * MS, window, budget, 0, true, min_look));
        /* 0.1 ms left, and it was demoted since the last look (free time
         * it could not take): it took nothing because it could not, and
         * from now on it may spin. Looked at when the 0.1 ms is gone, not
         * a slot later. */
        ASSERT_TRUE(server_budget_look(&b, 140 * MS, window, budget, 14 * MS + 900 * US, true, min_look));
        ASSERT_TRUE(server_budget_look(&b, 145 * MS, window, budget, 14 * MS + 900 * US, false, min_look));
        ASSERT_EQ(b.next_look_ns, 145 * MS + 100 * US);
        /* The same look had it been free to run all along: a slot on. */
        ServerBudget c = b;
        ASSERT_TRUE(server_budget_look(&c, 146 * MS, window, budget, 14 * MS + 900 * US, true, min_look));
        ASSERT_EQ(c.next_look_ns, 147 * MS);
}

TEST(a_look_never_lies_past_the_window_end) {
        ServerBudget b = {};

        ASSERT_TRUE(server_budget_look(&b, 140 * MS, window, budget, 0, true, min_look));
        ASSERT_EQ(b.window_end_ns, 150 * MS);
        ASSERT_EQ(b.next_look_ns, 150 * MS);
}

TEST(windows_skipped_while_asleep_replenish_once) {
        ServerBudget b = {};

        ASSERT_TRUE(server_budget_look(&b, 100 * MS, window, budget, 0, true, min_look));
        ASSERT_FALSE(server_budget_look(&b, 120 * MS, window, budget, 15 * MS, true, min_look));
        /* Three windows later: one full budget, the window it is in. */
        ASSERT_TRUE(server_budget_look(&b, 260 * MS, window, budget, 15 * MS, true, min_look));
        ASSERT_EQ(b.window_end_ns, 300 * MS);
        ASSERT_EQ(b.next_look_ns, 275 * MS);
}

TEST(usage_that_goes_back_spends_the_window) {
        ServerBudget b = {};

        ASSERT_TRUE(server_budget_look(&b, 100 * MS, window, budget, 40 * MS, true, min_look));
        /* Less than before: a member hiding what it took (or a group made
         * anew). Nothing more in this window... */
        ASSERT_FALSE(server_budget_look(&b, 105 * MS, window, budget, 1 * MS, true, min_look));
        ASSERT_EQ(b.next_look_ns, 150 * MS);
        /* ...and the next counts from where usage then stands. */
        ASSERT_TRUE(server_budget_look(&b, 150 * MS, window, budget, 2 * MS, true, min_look));
        ASSERT_FALSE(server_budget_look(&b, 165 * MS, window, budget, 17 * MS, true, min_look));
}

TEST(no_window_no_budget) {
        ServerBudget b = {};
        ASSERT_FALSE(server_budget_look(&b, 100 * MS, 0, budget, 0, true, min_look));
}

TEST(a_look_says_whether_a_held_server_was_idle) {
        ServerBudget b = {};

        /* Never looked at while held: counts as busy. */
        ASSERT_FALSE(b.seen_idle);
        ASSERT_TRUE(server_budget_look(&b, 100 * MS, window, budget, 0, true, min_look));
        /* 1 of 5 ms while held: idle. */
        ASSERT_TRUE(server_budget_look(&b, 105 * MS, window, budget, 1 * MS, true, min_look));
        ASSERT_TRUE(b.seen_idle);
        /* Held back, it could not show either way: it stays idle. */
        ASSERT_TRUE(server_budget_look(&b, 107 * MS, window, budget, 1 * MS + 100 * US, false, min_look));
        ASSERT_TRUE(b.seen_idle);
        /* 3 of 4 ms while held: busy. */
        ASSERT_TRUE(server_budget_look(&b, 111 * MS, window, budget, 4 * MS + 100 * US, true, min_look));
        ASSERT_FALSE(b.seen_idle);
}

TEST(non_real_time_work_had_its_turn_unless_servers_took_the_run) {
        /* A 1 ms free run of which servers took 0.2 ms: the rest, less the
         * margin, was non-real-time work's; it ended no earlier than
         * 200 + 250 us before the run's end. */
        ASSERT_EQ(server_free_turn(0, 10 * MS, 11 * MS, 200 * US, 250 * US), 11 * MS - 450 * US);
        /* They took all but the margin: no turn; the last one stands. */
        ASSERT_EQ(server_free_turn(3 * MS, 10 * MS, 11 * MS, 750 * US, 250 * US), 3 * MS);
        ASSERT_EQ(server_free_turn(3 * MS, 10 * MS, 11 * MS, 2 * MS, 250 * US), 3 * MS);
        /* Never backwards, and an empty interval earns nothing. */
        ASSERT_EQ(server_free_turn(20 * MS, 10 * MS, 11 * MS, 0, 250 * US), 20 * MS);
        ASSERT_EQ(server_free_turn(3 * MS, 11 * MS, 11 * MS, 0, 0), 3 * MS);
}

TEST(servers_take_free_time_only_while_the_reserve_stays_ahead) {
        /* Free from 10 to 12, 15 to 16 and 18 to 25 ms. */
        const uint64_t free[][2] = { { 10 * MS, 12 * MS }, { 15 * MS, 16 * MS }, { 18 * MS, 25 * MS } };
        uint64_t until = 0;

        /* Turn due at 20 ms, 2 ms of free time reserved: 18-20 is it, so
         * everything before 18 ms may go to servers. */
        ASSERT_TRUE(server_free_take_until(free, 3, 10 * MS, 20 * MS, 2 * MS, &until));
        ASSERT_EQ(until, 18 * MS);
        /* 3 ms reserved: 18-20 and the whole of 15-16: until 15 ms. */
        ASSERT_TRUE(server_free_take_until(free, 3, 10 * MS, 20 * MS, 3 * MS, &until));
        ASSERT_EQ(until, 15 * MS);
        /* 3.5 ms: half of 10-12 too. */
        ASSERT_TRUE(server_free_take_until(free, 3, 10 * MS, 20 * MS, 3500 * US, &until));
        ASSERT_EQ(until, 11500 * US);
        /* 5 ms: all of it from now on is the reserve: nothing to take. */
        ASSERT_FALSE(server_free_take_until(free, 3, 10 * MS, 20 * MS, 5 * MS, &until));
        /* More than there is before the turn: nothing either. */
        ASSERT_FALSE(server_free_take_until(free, 3, 10 * MS, 20 * MS, 6 * MS, &until));
        /* Only what lies after from counts: from 11 ms, 4 ms is too much. */
        ASSERT_FALSE(server_free_take_until(free, 3, 11 * MS, 20 * MS, 4 * MS, &until));
        /* A turn due far ahead leaves the whole first run to servers. */
        ASSERT_TRUE(server_free_take_until(free, 3, 10 * MS, 40 * MS, 2 * MS, &until));
        ASSERT_EQ(until, 23 * MS);
        /* No free time ahead: nothing. */
        ASSERT_FALSE(server_free_take_until(free, 0, 10 * MS, 20 * MS, 1 * MS, &until));
}

TEST_MAIN()
