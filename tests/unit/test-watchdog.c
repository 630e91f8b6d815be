/* SPDX-License-Identifier: MIT */
/* The watchdog's decisions, on counts set by hand: no threads, no timers. */
#include "test.h"
#include "watchdog.h"

#define N 3

typedef struct Loops {
        uint64_t beats[N];
        bool running[N];
        unsigned kicks[N];
} Loops;

static bool beats(uint32_t i, uint64_t *ret, void *userdata) {
        Loops *l = userdata;

        if (!l->running[i])
                return false;
        *ret = l->beats[i];
        return true;
}

static void kick(uint32_t i, void *userdata) {
        Loops *l = userdata;

        l->kicks[i]++;
}

static Watchdog *make(Loops *l) {
        Watchdog *w = NULL;

        for (unsigned i = 0; i < N; i++)
                l->running[i] = true;
        ASSERT_OK(watchdog_new(N, beats, kick, l, &w));
        return w;
}

static void advance_all(Loops *l) {
        for (unsigned i = 0; i < N; i++)
                l->beats[i] += 2;
}

/* Every loop but the quiet one goes on beating. */
static void advance_all_but(Loops *l, unsigned quiet) {
        for (unsigned i = 0; i < N; i++)
                if (i != quiet)
                        l->beats[i]++;
}

static unsigned total_kicks(const Loops *l) {
        unsigned n = 0;
        for (unsigned i = 0; i < N; i++)
                n += l->kicks[i];
        return n;
}

TEST(every_loop_advanced_means_ping_without_kicks) {
        Loops l = {};
        _cleanup_(watchdog_freep) Watchdog *w = make(&l);
        uint64_t stalled;

        for (unsigned round = 0; round < 3; round++) {
                advance_all(&l);
                ASSERT_EQ(watchdog_look(w, 1000 + round, &stalled), WATCHDOG_PING);
                ASSERT_EQ(stalled, 0u);
        }
        ASSERT_EQ(total_kicks(&l), 0u);
}

TEST(a_quiet_loop_is_kicked_and_an_answer_means_ping) {
        Loops l = {};
        _cleanup_(watchdog_freep) Watchdog *w = make(&l);
        uint64_t stalled;

        /* An idle loop sleeps without waking: its count stands still. */
        advance_all(&l);
        ASSERT_EQ(watchdog_look(w, 0, &stalled), WATCHDOG_PING);
        advance_all_but(&l, 1);
        ASSERT_EQ(watchdog_look(w, 10, &stalled), WATCHDOG_PROBE);
        ASSERT_EQ(l.kicks[1], 1u);
        ASSERT_EQ(total_kicks(&l), 1u);
        ASSERT_TRUE(watchdog_loop_stalled(w, 1));
        ASSERT_FALSE(watchdog_loop_stalled(w, 0));

        /* The kick woke it: it went round and slept again (and the active
         * ones went on waking at their changes of owner). */
        advance_all(&l);
        ASSERT_EQ(watchdog_probe(w, 10 + WATCHDOG_PROBE_NS, &stalled), WATCHDOG_PING);
        ASSERT_EQ(stalled, 0u);
        ASSERT_FALSE(watchdog_loop_stalled(w, 1));
        /* A probe never kicks. */
        ASSERT_EQ(total_kicks(&l), 1u);
}

TEST(no_answer_to_a_kick_means_stalled_reported_once_until_it_moves) {
        Loops l = {};
        _cleanup_(watchdog_freep) Watchdog *w = make(&l);
        uint64_t stalled, t = 1000;

        advance_all(&l);
        ASSERT_EQ(watchdog_look(w, t, &stalled), WATCHDOG_PING);

        /* Loop 2 wedges; the others keep going. */
        advance_all_but(&l, 2);
        ASSERT_EQ(watchdog_look(w, t += 500, &stalled), WATCHDOG_PROBE);
        ASSERT_EQ(l.kicks[2], 1u);
        advance_all_but(&l, 2);
        uint64_t found = t += WATCHDOG_PROBE_NS;
        ASSERT_EQ(watchdog_probe(w, found, &stalled), WATCHDOG_STALLED);
        ASSERT_TRUE(watchdog_loop_stalled(w, 2));
        ASSERT_FALSE(watchdog_loop_stalled(w, 0));
        ASSERT_FALSE(watchdog_loop_stalled(w, 1));

        /* Still wedged at the next round: kicked again, not reported again. */
        advance_all_but(&l, 2);
        ASSERT_EQ(watchdog_look(w, t += 500, &stalled), WATCHDOG_PROBE);
        ASSERT_EQ(l.kicks[2], 2u);
        advance_all_but(&l, 2);
        ASSERT_EQ(watchdog_probe(w, t += WATCHDOG_PROBE_NS, &stalled), WATCHDOG_STILL_STALLED);
        ASSERT_TRUE(watchdog_loop_stalled(w, 2));

        /* It moves again: a ping, with how long the stall lasted. */
        advance_all(&l);
        ASSERT_EQ(watchdog_look(w, t += 500, &stalled), WATCHDOG_RECOVERED);
        ASSERT_EQ(stalled, t - found);
        advance_all(&l);
        ASSERT_EQ(watchdog_look(w, t += 500, &stalled), WATCHDOG_PING);
        ASSERT_EQ(stalled, 0u);

        /* A new stall is reported again. */
        ASSERT_EQ(watchdog_look(w, t += 500, &stalled), WATCHDOG_PROBE);
        ASSERT_EQ(watchdog_probe(w, t += WATCHDOG_PROBE_NS, &stalled), WATCHDOG_STALLED);
}

TEST(a_loop_that_does_not_run_is_neither_waited_for_nor_kicked) {
        Loops l = {};
        _cleanup_(watchdog_freep) Watchdog *w = make(&l);
        uint64_t stalled;

        l.running[1] = false;
        advance_all_but(&l, 1);
        ASSERT_EQ(watchdog_look(w, 0, &stalled), WATCHDOG_PING);
        ASSERT_EQ(total_kicks(&l), 0u);
        ASSERT_FALSE(watchdog_loop_stalled(w, 1));

        /* One that exits while it was being probed is no longer stalled. */
        ASSERT_EQ(watchdog_look(w, 10, &stalled), WATCHDOG_PROBE);
        ASSERT_TRUE(watchdog_loop_stalled(w, 0));
        l.running[0] = false;
        l.beats[2]++;
        ASSERT_EQ(watchdog_probe(w, 20, &stalled), WATCHDOG_PING);
        ASSERT_FALSE(watchdog_loop_stalled(w, 0));
}

TEST(looks_come_four_times_an_interval_but_leave_room_for_a_probe) {
        ASSERT_EQ(watchdog_look_interval(2 * NSEC_PER_SEC), 500 * NSEC_PER_MSEC);
        ASSERT_EQ(watchdog_look_interval(100 * NSEC_PER_MSEC), 2 * WATCHDOG_PROBE_NS);
}

TEST_MAIN()
