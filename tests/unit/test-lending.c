/* SPDX-License-Identifier: MIT */
/* The reading of the kernel's sched_pi_setprio and sched_setattr events
 * (dispatcher/lending.c): who lent pace's priority to whom, and for how
 * long, from trace_pipe's text. */
#include <string.h>
#include <sys/types.h>

#include "lending.h"
#include "macro.h"
#include "test.h"

typedef struct Charged {
        pid_t raiser, owner;
        uint64_t raised_ns, ns;
        unsigned calls;
} Charged;

static void charged(void *userdata, pid_t raiser, uint64_t raised_ns, pid_t owner, uint64_t ns) {
        Charged *c = userdata;
        c->raiser = raiser;
        c->raised_ns = raised_ns;
        c->owner = owner;
        c->ns += ns;
        c->calls++;
}

static bool boosted_answer;
static bool still_boosted(void *userdata, pid_t owner) {
        return boosted_answer;
}

static void feed(Lending *l, const char *text, Charged *c) {
        lending_feed(l, text, strlen(text), charged, c);
}

TEST(a_lending_from_its_boost_to_its_end_is_charged_to_the_waiter) {
        Lending *l = NULL;
        Charged c = {};

        ASSERT_OK(lending_new(&l));
        /* A name with a space, a dash and brackets, as tasks may have. */
        feed(l, "  my app-[x] 2-4242    [001] d..3. 100.000100: sched_pi_setprio: comm=own er pid=4243 oldprio=120 "
                "newprio=1\n", &c);
        ASSERT_EQ(lending_active(l), 1);
        ASSERT_EQ(c.calls, 0);
        feed(l, "  own er-4243    [000] d..3. 100.002600: sched_pi_setprio: comm=own er pid=4243 oldprio=1 newprio=120\n",
             &c);
        ASSERT_EQ(lending_active(l), 0);
        ASSERT_EQ(c.calls, 1);
        ASSERT_EQ(c.raiser, 4242);
        ASSERT_EQ(c.raised_ns, 100000100000ULL);
        ASSERT_EQ(c.owner, 4243);
        ASSERT_EQ(c.ns, 2500000);
        lending_free(l);
}

TEST(a_boost_raised_by_a_promotion_names_the_loop_and_when) {
        Lending *l = NULL;
        Charged c = {};

        ASSERT_OK(lending_new(&l));
        /* The loop (tid 77) promotes a member that is blocked on a PI lock
         * already: the boost is raised in the loop's context, and the time
         * finds the promotion in the loop's record (dispatcher.c). Other
         * events in the pipe are skipped. */
        feed(l, " pace-dispatcher-77 [001] ..... 5.000000: sys_sched_setattr(pid: 0x1092, uattr: 0x7f00, flags: 0)\n"
                " pace-dispatcher-77 [001] d..3. 5.000010: sched_pi_setprio: comm=x pid=9 oldprio=120 newprio=2\n",
             &c);
        /* A boost to a priority not ours is not followed. */
        feed(l, "  a-5 [000] d..3. 5.000020: sched_pi_setprio: comm=y pid=10 oldprio=120 newprio=89\n", &c);
        ASSERT_EQ(lending_active(l), 1);
        /* Ongoing: charged up to now, and kept while the owner is boosted. */
        boosted_answer = true;
        lending_charge_ongoing(l, 5001010000ULL, charged, still_boosted, &c);
        ASSERT_EQ(c.calls, 1);
        ASSERT_EQ(c.raiser, 77);
        ASSERT_EQ(c.raised_ns, 5000010000ULL);
        ASSERT_EQ(c.owner, 9);
        ASSERT_EQ(c.ns, 1000000);
        ASSERT_EQ(lending_active(l), 1);
        /* Its end lost: dropped once the owner runs unboosted. */
        boosted_answer = false;
        lending_charge_ongoing(l, 5002010000ULL, charged, still_boosted, &c);
        ASSERT_EQ(c.ns, 2000000);
        ASSERT_EQ(lending_active(l), 0);
        lending_free(l);
}

TEST(a_line_split_between_reads_is_read_whole_and_garbage_is_skipped) {
        Lending *l = NULL;
        Charged c = {};
        const char *line = "  w-300 [001] d..3. 7.000000: sched_pi_setprio: comm=o pid=301 oldprio=120 newprio=1\n"
                           "  o-301 [001] d..3. 7.000500: sched_pi_setprio: comm=o pid=301 oldprio=1 newprio=120\n";

        ASSERT_OK(lending_new(&l));
        feed(l, "CPU:1 [LOST 12 EVENTS]\n", &c);
        feed(l, "garbage without an event\n: sched_pi_setprio: pid=1\n", &c);
        for (size_t i = 0; i < strlen(line); i += 7) {
                char piece[8] = "";
                memcpy(piece, line + i, MIN((size_t) 7, strlen(line) - i));
                feed(l, piece, &c);
        }
        ASSERT_EQ(c.calls, 1);
        ASSERT_EQ(c.raiser, 300);
        ASSERT_EQ(c.ns, 500000);
        ASSERT_EQ(lending_active(l), 0);
        lending_free(l);
}

TEST_MAIN()
