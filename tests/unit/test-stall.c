/* SPDX-License-Identifier: MIT */
/* The monitor's stall check (dispatcher/stall.h), on words set by hand:
 * when a loop counts as stuck, and when to look again. */
#include "stall.h"
#include "test.h"

#define MS NSEC_PER_MSEC

static StallPage *page(void) {
        StallPage *p = NULL;

        ASSERT_OK(stall_page_new(&p));
        stall_page_reset(p);
        return p;
}

TEST(idle_or_absent_loops_are_never_stuck_and_need_no_timer) {
        StallPage *p = page();
        uint64_t strikes[PACE_MAX_CPUS] = {}, next = 0;

        stall_slot_start(&p->slot[1], 4242, 1);
        ASSERT_EQ(stall_find(p, 1000 * MS, strikes, &next), -1);
        ASSERT_EQ(next, STALL_IDLE);
        stall_page_free(p);
}

TEST(a_loop_on_time_is_looked_at_when_its_word_falls_due) {
        StallPage *p = page();
        uint64_t strikes[PACE_MAX_CPUS] = {}, next = 0;

        stall_slot_start(&p->slot[0], 100, 0);
        stall_slot_start(&p->slot[1], 101, 1);
        stall_slot_due(&p->slot[0], 50 * MS);
        stall_slot_due(&p->slot[1], 30 * MS);
        ASSERT_EQ(stall_find(p, 10 * MS, strikes, &next), -1);
        ASSERT_EQ(next, 30 * MS);
        stall_page_free(p);
}

/* Once overdue is a VM its host paused (its loops run the moment it
 * resumes): a second look STALL_RECHECK_NS later decides. */
TEST(overdue_twice_with_the_same_word_is_stuck) {
        StallPage *p = page();
        uint64_t strikes[PACE_MAX_CPUS] = {}, next = 0;

        stall_slot_start(&p->slot[3], 103, 3);
        stall_slot_due(&p->slot[3], 20 * MS);
        ASSERT_EQ(stall_find(p, 25 * MS, strikes, &next), -1);
        ASSERT_EQ(next, 25 * MS + STALL_RECHECK_NS);
        ASSERT_EQ(stall_find(p, next, strikes, &next), 3);
        stall_page_free(p);
}

TEST(a_loop_that_moved_between_looks_is_not_stuck) {
        StallPage *p = page();
        uint64_t strikes[PACE_MAX_CPUS] = {}, next = 0;

        stall_slot_start(&p->slot[0], 100, 0);
        stall_slot_due(&p->slot[0], 20 * MS);
        ASSERT_EQ(stall_find(p, 21 * MS, strikes, &next), -1);
        /* It ran when the VM resumed: a new word, due later. */
        stall_slot_due(&p->slot[0], 21 * MS + STALL_GRACE_NS);
        ASSERT_EQ(stall_find(p, 23 * MS, strikes, &next), -1);
        ASSERT_EQ(next, 21 * MS + STALL_GRACE_NS);
        /* Overdue again later, with a word never seen overdue: one strike. */
        stall_slot_due(&p->slot[0], 30 * MS);
        ASSERT_EQ(stall_find(p, 31 * MS, strikes, &next), -1);
        ASSERT_EQ(stall_find(p, 34 * MS, strikes, &next), 0);
        stall_page_free(p);
}

/* A loop that goes idle between two looks is forgotten, strike and all. */
TEST(going_idle_clears_the_strike) {
        StallPage *p = page();
        uint64_t strikes[PACE_MAX_CPUS] = {}, next = 0;

        stall_slot_start(&p->slot[2], 102, 2);
        stall_slot_due(&p->slot[2], 20 * MS);
        ASSERT_EQ(stall_find(p, 21 * MS, strikes, &next), -1);
        stall_slot_due(&p->slot[2], STALL_IDLE);
        ASSERT_EQ(stall_find(p, 23 * MS, strikes, &next), -1);
        ASSERT_EQ(next, STALL_IDLE);
        stall_slot_due(&p->slot[2], 20 * MS);
        ASSERT_EQ(stall_find(p, 24 * MS, strikes, &next), -1);
        stall_page_free(p);
}

TEST_MAIN();
