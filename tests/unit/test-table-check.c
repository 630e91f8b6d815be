/* SPDX-License-Identifier: MIT */
/* The dispatcher's trust boundary: every way a table can break a bound is
 * refused whole, with a reason; a sound table is accepted. */
#include <string.h>

#include "config.h"
#include "macro.h"
#include "table-check.h"
#include "test.h"

static PaceTableBuffer t;
static PaceConfig config;

/* Every table here but the random ones is checked against a configuration
 * that manages CPUs 0 and 1; it starts empty, at that slot length. */
static void empty_table(void) {
        pace_config_init(&config);
        config.cpus_set = true;
        config.n_cpus = 2;
        config.cpus[0] = 0;
        config.cpus[1] = 1;
        memset(&t, 0, sizeof(t));
        t.slot_ns = config.slot_ns;
}

/* One CPU (1) with a 50-slot frame: reservation A (pid 4242, uid 1000) holds
 * 6 of every 10 slots, the rest is free. Sound by construction. */
static void sound_table(void) {
        empty_table();
        config.max_utilization_per_user_ppm = 700000;
        t.n_cpus = 1;
        t.cpus[0] = (PaceTableCpu) { .cpu = 1, .frame_slots = 50, .first_slot = 0 };
        t.n_slots = 50;
        t.n_reservations = 1;
        t.reservations[0] = (PaceTableReservation) { .id = 7, .pid = 4242, .uid = 1000, .start_time = 99, .cpu = 1,
                                                     .period_slots = 50, .budget_slots = 30 };
        for (uint32_t s = 0; s < 50; s++)
                t.slots[s] = s % 10 < 6 ? 1 : PACE_SLOT_FREE;
}

/* The table as it stands is refused, with a reason that contains says. The
 * failure names the case by its line and its change: the assertion's own
 * line is always this function's. */
static void assert_refused_at(int line, const char *change, const char *says) {
        char err[256] = "";
        int r = table_check(&t, &config, err, sizeof(err));

        if (r != -EBADMSG)
                TEST_FAIL_("line %d, %s: table_check() returned %d, not -EBADMSG", line, change, r);
        if (!strstr(err, says))
                TEST_FAIL_("line %d, %s: the refusal \"%s\" does not contain \"%s\"", line, change, err,
                           says);
}

#define assert_refused(says) assert_refused_at(__LINE__, "after the changes above", says)

/* Most cases break one bound of a table built afresh: build it with setup,
 * make the change, expect the refusal. */
#define ASSERT_REFUSED_AFTER(setup, change, says)                                         \
        do {                                                                              \
                setup();                                                                  \
                change;                                                                   \
                assert_refused_at(__LINE__, "after " #change, says);                      \
        } while (0)

/* The table as it stands is accepted; what names the case. */
static void assert_accepted(const char *what) {
        char err[256] = "";

        if (table_check(&t, &config, err, sizeof(err)) < 0)
                TEST_FAIL_("%s refused: %s", what, err);
}

TEST(sound_table_is_accepted) {
        sound_table();
        assert_accepted("the sound table");
}

TEST(sizes_and_cpus) {
        ASSERT_REFUSED_AFTER(sound_table, t.slot_ns = 2 * config.slot_ns, "slot is");
        ASSERT_REFUSED_AFTER(sound_table, t.n_cpus = 3, "CPUs, at most 2");
        ASSERT_REFUSED_AFTER(sound_table, t.n_reservations = PACE_MAX_RESERVATIONS + 1, "reservations, limit");
        ASSERT_REFUSED_AFTER(sound_table, t.n_slots = PACE_TABLE_MAX_SLOTS + 1, "slots, limit");
        ASSERT_REFUSED_AFTER(sound_table, t.cpus[0].cpu = 5, "CPU 5 is not managed");
        ASSERT_REFUSED_AFTER(sound_table, (t.n_cpus = 2, t.cpus[1] = t.cpus[0]), "listed twice");
        ASSERT_REFUSED_AFTER(sound_table, t.cpus[0].frame_slots = 7, "does not divide the longest frame");
        ASSERT_REFUSED_AFTER(sound_table, t.cpus[0].first_slot = 3, "frame starts at slot 3");
        ASSERT_REFUSED_AFTER(sound_table, t.n_slots = 40, "frame runs past");
        ASSERT_REFUSED_AFTER(sound_table, t.n_slots = 60, "the frames cover 50");
        /* An overflow must not wrap into range. */
        ASSERT_REFUSED_AFTER(sound_table, t.cpus[0].first_slot = UINT32_MAX - 10, "frame starts at slot");
}

TEST(reservations) {
        ASSERT_REFUSED_AFTER(sound_table, t.reservations[0].id = 0, "has id 0");
        ASSERT_REFUSED_AFTER(sound_table, t.reservations[0].pid = 1, "pid 1 is not allowed");
        ASSERT_REFUSED_AFTER(sound_table, t.reservations[0].pid = -5, "pid -5 is not allowed");
        ASSERT_REFUSED_AFTER(sound_table, t.reservations[0].cpu = 0, "CPU 0 has no frame");
        ASSERT_REFUSED_AFTER(sound_table, t.reservations[0].period_slots = 0, "does not divide its CPU's frame");
        ASSERT_REFUSED_AFTER(sound_table, t.reservations[0].period_slots = 20, "does not divide its CPU's frame");
        ASSERT_REFUSED_AFTER(sound_table, t.reservations[0].budget_slots = 51, "budget of 51 slots");
        ASSERT_REFUSED_AFTER(sound_table, t.reservations[0].flags = 0x10, "unknown flags");
}

TEST(owners_and_exact_grants) {
        /* Reservation 2 does not exist. */
        ASSERT_REFUSED_AFTER(sound_table, t.slots[9] = 2, "owner 2 does not exist");
        ASSERT_REFUSED_AFTER(sound_table, t.slots[9] = UINT16_MAX, "does not exist");
        /* 31 slots held, 30 granted; then 29 held. */
        ASSERT_REFUSED_AFTER(sound_table, t.slots[9] = 1, "holds 31 slots per frame, granted 30");
        ASSERT_REFUSED_AFTER(sound_table, t.slots[0] = PACE_SLOT_FREE, "granted 30");
        sound_table();
        /* 30 slots, but bunched: some window of 50 would still hold 30
         * (the frame is 50), so use period 10 budget 6 and move one slot. */
        t.reservations[0].period_slots = 10;
        t.reservations[0].budget_slots = 6;
        t.slots[5] = PACE_SLOT_FREE;
        t.slots[6] = 1;
        t.slots[15] = PACE_SLOT_FREE;
        t.slots[17] = 1;
        assert_refused("in some window of its period");
}

TEST(another_cpu_cannot_borrow_a_reservation) {
        sound_table();
        t.n_cpus = 2;
        t.cpus[1] = (PaceTableCpu) { .cpu = 0, .frame_slots = 10, .first_slot = 50 };
        t.n_slots = 60;
        t.slots[50] = 1; /* reservation on CPU 1 given a slot on CPU 0 */
        assert_refused("belongs to CPU 1");
}

TEST(budget_servers) {
        sound_table();
        t.reservations[0].flags = PACE_RES_SERVER;
        assert_accepted("a sound server");

        /* A server's budget is spent wherever it runs: never in pieces. */
        t.reservations[0].flags = PACE_RES_SERVER | PACE_RES_PIECE;
        assert_refused("cannot be split");
        t.reservations[0].flags = 0x10;
        assert_refused("unknown flags");

        /* Its wake-ups are charged: at 0.5 ms a switch, the slot layout
         * alone costs 10 switches (5 ms of the 20 ms free, 12.5 ms
         * needed: fits); as a server, in its one 50-slot window: 2, twice
         * 4 yields (20 ms gap), 50 checks at a quarter: 23 more. */
        sound_table();
        config.switch_cost_ns = NSEC_PER_MSEC / 2;
        assert_accepted("the slot reservation");
        ASSERT_EQ(frame_server_switches(50, 50, &config), 23u);
        /* 10-slot windows, 5 a frame: each 2 + twice 2 yields + 10 quarters,
         * 42.5 in all, rounded up. */
        ASSERT_EQ(frame_server_switches(10, 50, &config), 43u);
        t.reservations[0].flags = PACE_RES_SERVER;
        assert_refused("after dispatch costs");
}

TEST(free_share_and_gaps) {
        sound_table();
        /* 8 of 10: only 20% free, below 25%. */
        t.reservations[0].period_slots = 10;
        t.reservations[0].budget_slots = 8;
        for (uint32_t s = 0; s < 50; s++)
                t.slots[s] = s % 10 < 8 ? 1 : PACE_SLOT_FREE;
        config.max_utilization_per_user_ppm = PPM;
        assert_refused("below the non-real-time share");
        sound_table();
        /* 30 slots in one block: a gap of 30 > 20 ms. */
        for (uint32_t s = 0; s < 50; s++)
                t.slots[s] = s < 30 ? 1 : PACE_SLOT_FREE;
        assert_refused("consecutive reserved slots");
        sound_table();
        /* Switch costs count: 60% spread as 1-slot runs is 60 switches per
         * 50 ms frame; at 1 ms each, nothing of the 40% free is left. */
        t.reservations[0].period_slots = 5;
        t.reservations[0].budget_slots = 3;
        for (uint32_t s = 0; s < 50; s++)
                t.slots[s] = (s % 5 == 0 || s % 5 == 2 || s % 5 == 4) ? 1 : PACE_SLOT_FREE;
        config.switch_cost_ns = NSEC_PER_MSEC;
        assert_refused("after dispatch costs");
}

TEST(per_user_limits_without_slack_and_one_reservation_per_process) {
        /* Two reservations of uid 1000, each 1 of every 2 slots: 100% against
         * a 50% limit. Once let through by a rounding allowance. */
        empty_table();
        config.non_rt_share_ppm = 50000;
        config.switch_cost_ns = 0;
        config.max_utilization_per_user_ppm = 500000;
        t.n_cpus = 2;
        t.cpus[0] = (PaceTableCpu) { .cpu = 0, .frame_slots = 2, .first_slot = 0 };
        t.cpus[1] = (PaceTableCpu) { .cpu = 1, .frame_slots = 2, .first_slot = 2 };
        t.n_slots = 4;
        t.n_reservations = 2;
        t.reservations[0] = (PaceTableReservation) { .id = 1, .pid = 500, .uid = 1000, .cpu = 0, .period_slots = 2, .budget_slots = 1 };
        t.reservations[1] = (PaceTableReservation) { .id = 2, .pid = 501, .uid = 1000, .cpu = 1, .period_slots = 2, .budget_slots = 1 };
        t.slots[0] = 1;
        t.slots[2] = 2;
        assert_refused("uid 1000 holds 1000000 ppm, limit 500000 ppm");

        /* The same process on both CPUs. */
        config.max_utilization_per_user_ppm = PPM;
        t.reservations[1].pid = 500;
        assert_refused("pid 500 holds reservations 1 and 2");

        /* One reservation per thread is fine, the same thread twice or a
         * thread beside its whole process is not. */
        t.reservations[0].scope = t.reservations[1].scope = PACE_TABLE_SCOPE_THREAD;
        t.reservations[0].tid = 500;
        t.reservations[1].tid = 502;
        assert_accepted("a reservation for each of two threads");
        t.reservations[1].tid = 500;
        assert_refused("pid 500 holds reservations 1 and 2");
        t.reservations[1].scope = PACE_TABLE_SCOPE_PROCESS;
        t.reservations[1].tid = 0;
        assert_refused("pid 500 holds reservations 1 and 2");
        t.reservations[0].scope = t.reservations[1].scope = PACE_TABLE_SCOPE_PROCESS;
        t.reservations[0].tid = t.reservations[1].tid = 0;

        /* Count limit. */
        t.reservations[1].pid = 501;
        config.max_reservations_per_user = 1;
        assert_refused("holds 2 reservations, limit 1");
}

TEST(scopes_are_checked) {
        ASSERT_REFUSED_AFTER(sound_table, t.reservations[0].scope = 3, "unknown scope 3");
        ASSERT_REFUSED_AFTER(sound_table, t.reservations[0].scope = PACE_TABLE_SCOPE_THREAD,
                             "thread id 0 does not fit its scope");
        ASSERT_REFUSED_AFTER(sound_table, t.reservations[0].tid = 4243, "thread id 4243 does not fit its scope");
        sound_table();
        t.reservations[0].scope = PACE_TABLE_SCOPE_TREE;
        assert_accepted("a tree-scoped reservation");
}

/* A reservation split over CPUs 0 and 1: period 10, 3 slots on CPU 0 at
 * 0..2 and 3 on CPU 1 at 5..7, free slots between the pieces. */
static void split_table(void) {
        empty_table();
        t.n_cpus = 2;
        t.cpus[0] = (PaceTableCpu) { .cpu = 0, .frame_slots = 10, .first_slot = 0 };
        t.cpus[1] = (PaceTableCpu) { .cpu = 1, .frame_slots = 10, .first_slot = 10 };
        t.n_slots = 20;
        t.n_reservations = 2;
        for (uint32_t i = 0; i < 2; i++)
                t.reservations[i] = (PaceTableReservation) { .id = 9, .pid = 777, .uid = 1000, .start_time = 5,
                                                             .cpu = (int32_t) i, .period_slots = 10,
                                                             .budget_slots = 3, .flags = PACE_RES_PIECE };
        for (uint32_t s = 0; s < 3; s++) {
                t.slots[s] = 1;
                t.slots[10 + 5 + s] = 2;
        }
}

TEST(split_reservations) {
        split_table();
        assert_accepted("a sound split");

        /* Both pieces at slot 5: the process would run twice at once. */
        ASSERT_REFUSED_AFTER(split_table, (t.slots[5] = 1, t.slots[2] = 0), "two pieces at slot 5 at once");
        /* CPU 1's piece (slots 3..7 of its frame) right after CPU 0's: no
         * free slot to migrate in. */
        ASSERT_REFUSED_AFTER(split_table, (t.slots[18] = 0, t.slots[13] = 2, t.slots[14] = 2),
                             "changes CPU at slot 3 without a free slot");
        /* Pieces that disagree on the process. */
        ASSERT_REFUSED_AFTER(split_table, t.reservations[1].pid = 778, "disagree");
        /* Two pieces on one CPU. */
        ASSERT_REFUSED_AFTER(split_table, t.reservations[1].cpu = 0, "share a CPU");
        /* A lone piece. */
        ASSERT_REFUSED_AFTER(split_table, t.reservations[1].id = 10, "piece of nothing");
        /* Not flagged as pieces: a plain duplicate id. */
        ASSERT_REFUSED_AFTER(split_table, t.reservations[0].flags = 0, "used twice");

        /* Counted once against the per-user number limit. */
        split_table();
        config.max_reservations_per_user = 1;
        assert_accepted("a split under a limit of one reservation");
}

TEST(aligned_reservations) {
        /* The dispatcher ignores the flag, so any sound layout passes,
         * one block at the start of each period included. */
        sound_table();
        t.reservations[0].flags = PACE_RES_ALIGNED;
        assert_accepted("a sound aligned reservation");
        t.reservations[0].period_slots = 10;
        t.reservations[0].budget_slots = 6;
        assert_accepted("an aligned block of 6 in every 10");

        /* One kind per reservation. */
        ASSERT_REFUSED_AFTER(sound_table, t.reservations[0].flags = PACE_RES_ALIGNED | PACE_RES_SERVER,
                             "reservation 7: aligned and budget server at once");
        ASSERT_REFUSED_AFTER(sound_table,
                             t.reservations[0].flags = PACE_RES_ALIGNED | PACE_RES_SERVER | PACE_RES_PIECE,
                             "reservation 7: ");

        /* Pieces of a split reservation cannot be aligned, even when the
         * split itself is sound. */
        split_table();
        assert_accepted("the sound split");
        t.reservations[0].flags |= PACE_RES_ALIGNED;
        t.reservations[1].flags |= PACE_RES_ALIGNED;
        assert_refused("an aligned reservation cannot be split over CPUs");
}

TEST(nice_levels) {
        sound_table();
        t.reservations[0].flags = PACE_RES_ON_BEHALF;
        assert_accepted("a reservation made on behalf");

        sound_table();
        t.n_nice = 2;
        t.nice[0] = (PaceTableNice) { .pid = 100, .tid = 101, .start_time = 5, .uid = 1000, .nice = -15 };
        t.nice[1] = (PaceTableNice) { .pid = 100, .tid = 100, .start_time = 5, .uid = 1000, .nice = 19 };
        assert_accepted("nice levels at both ends of the range");

        /* Below the checker's own floor, whatever the broker believes. */
        t.nice[0].nice = -16;
        assert_refused("-16 is outside -15..19");
        t.nice[0].nice = 20;
        assert_refused("20 is outside");
        t.nice[0].nice = -15;
        t.nice[1].tid = 101;
        assert_refused("thread 101 listed twice");
        t.nice[1].tid = 100;
        t.nice[1].pid = 1;
        assert_refused("is not a user process's thread");
        t.nice[1].pid = 100;
        t.nice[1].tid = 0;
        assert_refused("is not a user process's thread");
        t.nice[1].tid = 100;
        t.n_nice = PACE_MAX_NICE_THREADS + 1;
        assert_refused("nice levels, limit");
}

TEST(garbage_never_crashes_and_is_refused) {
        /* Random bytes, many times: refused, no out-of-bounds read (ASan). */
        uint64_t state = 0x1234567;
        pace_config_init(&config);
        config.cpus_set = true;
        config.n_cpus = 1;
        config.cpus[0] = 0;
        for (int round = 0; round < 200; round++) {
                uint8_t *bytes = (uint8_t *) &t;
                for (size_t i = 0; i < offsetof(PaceTableBuffer, slots) + 256; i++) {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        bytes[i] = (uint8_t) state;
                }
                t.slot_ns = config.slot_ns; /* get past the first check now and then */
                if (round % 2)
                        t.n_cpus = 1;
                ASSERT_EQ(table_check(&t, &config, NULL, 0), -EBADMSG);
        }
}

TEST_MAIN()
