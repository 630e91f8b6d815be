/* SPDX-License-Identifier: MIT */
/* The ring that carries the dispatch threads' messages to the main thread:
 * order, the count of what did not fit, and a drain running beside a
 * writer on another thread. */
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>

#include "log-ring.h"
#include "test.h"

#define MAX_SEEN 256

typedef struct Seen {
        unsigned n;
        int priorities[MAX_SEEN];
        char messages[MAX_SEEN][LOG_MESSAGE_MAX];
} Seen;

static void collect(void *userdata, int priority, const char *message) {
        Seen *s = userdata;

        if (s->n >= MAX_SEEN)
                TEST_FAIL_("more messages than expected");
        s->priorities[s->n] = priority;
        snprintf(s->messages[s->n], LOG_MESSAGE_MAX, "%s", message);
        s->n++;
}

static bool readable(const LogRing *ring) {
        struct pollfd p = { .fd = log_ring_fd(ring), .events = POLLIN };
        return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

TEST(messages_come_out_in_order_with_their_levels) {
        _cleanup_(log_ring_freep) LogRing *ring = NULL;
        Seen seen = {};

        ASSERT_OK(log_ring_new(&ring));
        ASSERT_FALSE(readable(ring));
        ASSERT_OK(log_ring_push(ring, LOG_INFO, "first %d", 1));
        ASSERT_OK(log_ring_push(ring, LOG_ERR, "second %s", "two"));
        ASSERT_OK(log_ring_push(ring, LOG_WARNING, "third"));
        /* The main thread sleeps in poll(): a push must wake it. */
        ASSERT_TRUE(readable(ring));

        ASSERT_EQ(log_ring_drain(ring, collect, &seen), 3);
        ASSERT_EQ(seen.n, 3u);
        ASSERT_STREQ(seen.messages[0], "first 1");
        ASSERT_EQ(seen.priorities[0], LOG_INFO);
        ASSERT_STREQ(seen.messages[1], "second two");
        ASSERT_EQ(seen.priorities[1], LOG_ERR);
        ASSERT_STREQ(seen.messages[2], "third");
        ASSERT_EQ(seen.priorities[2], LOG_WARNING);
        ASSERT_FALSE(readable(ring));

        /* Nothing left, nothing dropped: a second drain says nothing. */
        ASSERT_EQ(log_ring_drain(ring, collect, &seen), 0);
        ASSERT_EQ(seen.n, 3u);
}

TEST(a_full_ring_drops_and_the_drain_says_how_many) {
        _cleanup_(log_ring_freep) LogRing *ring = NULL;
        Seen seen = {};

        ASSERT_OK(log_ring_new(&ring));
        for (unsigned i = 0; i < LOG_RING_SIZE; i++)
                ASSERT_OK(log_ring_push(ring, LOG_INFO, "message %u", i));
        for (unsigned i = 0; i < 5; i++)
                ASSERT_ERR(log_ring_push(ring, LOG_ERR, "lost %u", i), -ENOBUFS);

        ASSERT_EQ(log_ring_drain(ring, collect, &seen), (int) LOG_RING_SIZE);
        ASSERT_EQ(seen.n, LOG_RING_SIZE + 1);
        for (unsigned i = 0; i < LOG_RING_SIZE; i++) {
                char expected[32];
                snprintf(expected, sizeof(expected), "message %u", i);
                ASSERT_STREQ(seen.messages[i], expected);
        }
        ASSERT_STREQ(seen.messages[LOG_RING_SIZE], "5 log messages dropped");
        ASSERT_EQ(seen.priorities[LOG_RING_SIZE], LOG_WARNING);

        /* The count starts again from zero, and there is room again. */
        seen.n = 0;
        ASSERT_OK(log_ring_push(ring, LOG_INFO, "after"));
        ASSERT_EQ(log_ring_drain(ring, collect, &seen), 1);
        ASSERT_EQ(seen.n, 1u);
        ASSERT_STREQ(seen.messages[0], "after");
}

TEST(a_long_message_is_cut_not_overrun) {
        _cleanup_(log_ring_freep) LogRing *ring = NULL;
        char long_message[2 * LOG_MESSAGE_MAX];
        Seen seen = {};

        memset(long_message, 'x', sizeof(long_message) - 1);
        long_message[sizeof(long_message) - 1] = '\0';
        ASSERT_OK(log_ring_new(&ring));
        ASSERT_OK(log_ring_push(ring, LOG_INFO, "%s", long_message));
        ASSERT_EQ(log_ring_drain(ring, collect, &seen), 1);
        ASSERT_EQ(strlen(seen.messages[0]), LOG_MESSAGE_MAX - 1);
}

#define THREAD_MESSAGES 20000u

typedef struct Writer {
        LogRing *ring;
        atomic_bool done;
        unsigned dropped;
} Writer;

static void *write_many(void *userdata) {
        Writer *w = userdata;

        for (unsigned i = 0; i < THREAD_MESSAGES; i++)
                if (log_ring_push(w->ring, LOG_INFO, "%u", i) == -ENOBUFS)
                        w->dropped++;
        atomic_store(&w->done, true);
        return NULL;
}

typedef struct Order {
        unsigned received, dropped_reported;
        long last;
        bool ordered;
} Order;

static void check_order(void *userdata, int priority, const char *message) {
        Order *o = userdata;
        unsigned n;

        if (priority == LOG_WARNING && sscanf(message, "%u log messages dropped", &n) == 1) {
                o->dropped_reported += n;
                return;
        }
        long v = strtol(message, NULL, 10);
        if (v <= o->last)
                o->ordered = false;
        o->last = v;
        o->received++;
}

TEST(a_drain_beside_a_writing_thread_loses_nothing_uncounted) {
        _cleanup_(log_ring_freep) LogRing *ring = NULL;
        Order order = { .last = -1, .ordered = true };
        pthread_t thread;

        ASSERT_OK(log_ring_new(&ring));
        Writer w = { .ring = ring };
        ASSERT_EQ(pthread_create(&thread, NULL, write_many, &w), 0);
        /* As the main thread does: sleep in poll() until woken, drain. */
        while (!atomic_load(&w.done)) {
                struct pollfd p = { .fd = log_ring_fd(ring), .events = POLLIN };
                ASSERT_TRUE(poll(&p, 1, 1000) >= 0);
                ASSERT_OK(log_ring_drain(ring, check_order, &order));
        }
        ASSERT_EQ(pthread_join(thread, NULL), 0);
        ASSERT_OK(log_ring_drain(ring, check_order, &order));

        ASSERT_TRUE(order.ordered);
        ASSERT_EQ(order.dropped_reported, w.dropped);
        ASSERT_EQ(order.received + order.dropped_reported, THREAD_MESSAGES);
        ASSERT_TRUE(order.received >= LOG_RING_SIZE);
        printf("  %u received, %u dropped\n", order.received, order.dropped_reported);
}

TEST_MAIN()
