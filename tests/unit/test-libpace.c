/* SPDX-License-Identifier: MIT */
/* libpace against a fake broker (fake-broker.h): what each call puts on the
 * wire and how it decodes the reply. */
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "fake-broker.h"
#include "macro.h"
#include "pace-limits.h"
#include "pace.pb-c.h"
#include "pace/pace.h"
#include "test.h"

/* call, which must succeed, then the request it put on the wire as the broker
 * decoded it. A macro, so that a failure names the call and its line. */
#define ASSERT_SENT(b, call)                                                              \
        ({                                                                                \
                ASSERT_OK(call);                                                          \
                fake_broker_last_request(b);                                              \
        })

FAKE_BROKER_TEST(reserve_request_carries_fields, MODE_ECHO) {
        pace_grant g;
        Pace__Request *req;
        pace_reserve_params params = default_params;

        /* pid 0 and cpu -1 must leave the fields absent, not zero. */
        req = ASSERT_SENT(b, pace_reserve(p, &params, &g));
        ASSERT_TRUE(pace_last_message() == NULL);
        ASSERT_EQ(req->version, PACE_PROTOCOL_VERSION);
        ASSERT_EQ(req->body_case, PACE__REQUEST__BODY_RESERVE);
        ASSERT_EQ(req->reserve->period_ns, 50000000);
        ASSERT_EQ(req->reserve->utilization_ppm, 600000);
        ASSERT_FALSE(req->reserve->has_pid);
        ASSERT_FALSE(req->reserve->has_cpu);
        ASSERT_FALSE(req->reserve->has_scope);
        ASSERT_FALSE(req->reserve->has_tid);
        ASSERT_FALSE(req->reserve->has_kind);
        ASSERT_EQ(g.pid, 4242);
        ASSERT_EQ(g.scope, PACE_SCOPE_PROCESS);
        /* The echo had no kind, as from a broker that predates kinds. */
        ASSERT_EQ(g.kind, PACE_KIND_SLOTS);
        ASSERT_EQ(g.cpu, 1);

        params = (pace_reserve_params) { .period_ns = 1, .utilization_ppm = PPM, .pid = 42, .cpu = 0 };
        req = ASSERT_SENT(b, pace_reserve(p, &params, &g));
        ASSERT_EQ(req->version, PACE_PROTOCOL_VERSION);
        ASSERT_EQ(req->reserve->period_ns, 1);
        ASSERT_EQ(req->reserve->utilization_ppm, PPM);
        ASSERT_TRUE(req->reserve->has_pid);
        ASSERT_EQ(req->reserve->pid, 42);
        ASSERT_TRUE(req->reserve->has_cpu);
        ASSERT_EQ(req->reserve->cpu, 0);
        ASSERT_EQ(g.pid, 42);
        ASSERT_EQ(g.cpu, 0);

        ASSERT_EQ(fake_broker_get(b, &b->n_requests), 2);
}

FAKE_BROKER_TEST(grant_decoding, MODE_FIXED_GRANT) {
        pace_grant g;

        ASSERT_OK(pace_reserve(p, &default_params, &g));

        ASSERT_TRUE(g.id == UINT64_C(0xFFFFFFFFFFFFFFF0));
        ASSERT_EQ(g.pid, 12345);
        ASSERT_EQ(g.cpu, 7);
        ASSERT_EQ(g.period_ns, 49000000);
        ASSERT_EQ(g.budget_ns, 29000000);
        ASSERT_EQ(g.slot_ns, 1000000);
        ASSERT_EQ(g.requested_period_ns, 50000000);
        ASSERT_EQ(g.requested_utilization_ppm, 600000);
        ASSERT_EQ(g.uid, 4000000000u);
        ASSERT_EQ(g.scope, PACE_SCOPE_TREE);
        ASSERT_EQ(g.tid, 2000000001);
        ASSERT_EQ(g.threads, 4000000001u);
        ASSERT_EQ(g.phase_ns, 48999999);
        ASSERT_EQ(g.kind, PACE_KIND_ALIGNED);
        /* A grant carries no accounting: it is for status reports. */
        ASSERT_EQ(g.accounting.valid, 0);
}

FAKE_BROKER_TEST(release_request_and_reply, MODE_ECHO) {
        Pace__Request *req;

        req = ASSERT_SENT(b, pace_release(p, UINT64_C(0x123456789abc)));
        ASSERT_EQ(req->version, PACE_PROTOCOL_VERSION);
        ASSERT_EQ(req->body_case, PACE__REQUEST__BODY_RELEASE);
        ASSERT_TRUE(req->release->id == UINT64_C(0x123456789abc));

        /* A confirmation for some other reservation is not a confirmation. */
        fake_broker_set_mode(b, MODE_WRONG_RELEASE);
        ASSERT_ERR(pace_release(p, 5), PACE_E_PROTOCOL);
        ASSERT_TRUE(pace_last_message() == NULL);
}

FAKE_BROKER_TEST(status_request_and_decoding, MODE_ECHO) {
        pace_status_report *s = NULL;
        Pace__Request *req;

        req = ASSERT_SENT(b, pace_status(p, &s));
        ASSERT_EQ(req->version, PACE_PROTOCOL_VERSION);
        ASSERT_EQ(req->body_case, PACE__REQUEST__BODY_STATUS);

        ASSERT_EQ(s->non_rt_share_ppm, 100000);
        ASSERT_TRUE(s->generation == UINT64_C(1) << 40);
        ASSERT_EQ(s->n_reservations, 3);
        ASSERT_EQ(s->reservations[0].id, 1);
        ASSERT_EQ(s->reservations[0].pid, 100);
        ASSERT_EQ(s->reservations[0].cpu, 0);
        ASSERT_EQ(s->reservations[0].uid, 1000);
        ASSERT_EQ(s->reservations[0].period_ns, 50000000);
        ASSERT_EQ(s->reservations[0].budget_ns, 30000000);
        ASSERT_EQ(s->reservations[0].requested_utilization_ppm, 600000);
        ASSERT_EQ(s->reservations[0].scope, PACE_SCOPE_TREE);
        ASSERT_EQ(s->reservations[0].tid, 0);
        ASSERT_EQ(s->reservations[0].threads, 9);
        ASSERT_EQ(s->reservations[0].phase_ns, 40000000);
        ASSERT_EQ(s->reservations[0].accounting.valid, 1);
        ASSERT_EQ(s->reservations[0].accounting.window_ns, 1000000001);
        ASSERT_EQ(s->reservations[0].accounting.delivered_ns, 598000002);
        ASSERT_TRUE(s->reservations[0].accounting.cpu_time_ns == UINT64_C(0xFFFFFFFFFFFF0003));
        ASSERT_EQ(s->reservations[0].accounting.periods, 20000000004);
        ASSERT_EQ(s->reservations[0].accounting.periods_blocked, 5);
        ASSERT_EQ(s->reservations[0].accounting.periods_wanted_more, 6);
        /* Absent fields read as the defaults they stand for. */
        ASSERT_EQ(s->reservations[1].scope, PACE_SCOPE_PROCESS);
        ASSERT_EQ(s->reservations[1].tid, 0);
        ASSERT_EQ(s->reservations[1].threads, 0);
        ASSERT_EQ(s->reservations[1].phase_ns, 0);
        ASSERT_EQ(s->reservations[1].accounting.valid, 0);
        ASSERT_EQ(s->reservations[1].accounting.window_ns, 0);
        ASSERT_EQ(s->reservations[1].accounting.periods, 0);
        ASSERT_EQ(s->reservations[2].scope, PACE_SCOPE_THREAD);
        ASSERT_EQ(s->reservations[2].tid, 301);
        ASSERT_EQ(s->reservations[2].threads, 1);
        ASSERT_EQ(s->reservations[2].accounting.valid, 0);
        ASSERT_EQ(s->reservations[1].id, 2);
        ASSERT_EQ(s->reservations[1].cpu, 1);
        ASSERT_EQ(s->reservations[1].budget_ns, 2500000);
        ASSERT_EQ(s->reservations[2].id, 3);
        ASSERT_EQ(s->reservations[2].pid, 300);
        ASSERT_EQ(s->reservations[2].uid, 0);
        ASSERT_EQ(s->reservations[2].period_ns, 19000000);
        ASSERT_EQ(s->reservations[2].requested_period_ns, 20000000);
        ASSERT_EQ(s->n_cpus, 2);
        ASSERT_EQ(s->cpus[0].cpu, 0);
        ASSERT_EQ(s->cpus[0].reserved_ppm, 600000);
        ASSERT_EQ(s->cpus[0].free_ppm, 300000);
        ASSERT_EQ(s->cpus[0].frame_ns, 50000000);
        ASSERT_EQ(s->cpus[1].cpu, 1);
        ASSERT_EQ(s->cpus[1].reserved_ppm, 350000);
        ASSERT_EQ(s->cpus[1].free_ppm, 550000);
        ASSERT_EQ(s->cpus[1].frame_ns, 20000000);
        pace_status_report_free(s);

        fake_broker_set_mode(b, MODE_STATUS_EMPTY);
        ASSERT_OK(pace_status(p, &s));
        ASSERT_EQ(s->n_reservations, 0);
        ASSERT_EQ(s->n_cpus, 0);
        ASSERT_EQ(s->non_rt_share_ppm, 100000);
        pace_status_report_free(s);
}

FAKE_BROKER_TEST(status_beyond_limits_is_refused, MODE_STATUS_TOO_MANY) {
        pace_status_report *s = NULL;

        ASSERT_ERR(pace_status(p, &s), PACE_E_PROTOCOL);
        ASSERT_TRUE(s == NULL);
}

typedef struct ThreadReserve {
        pace *p;
        pace_reserve_params params;
        pid_t tid;
        int r;
        pace_grant g;
} ThreadReserve;

static void *reserve_thread(void *userdata) {
        ThreadReserve *t = userdata;

        t->tid = gettid();
        t->r = pace_reserve(t->p, &t->params, &t->g);
        return NULL;
}

FAKE_BROKER_TEST(reserve_request_carries_scope_and_tid, MODE_ECHO) {
        pace_grant g;
        Pace__Request *req;
        pace_reserve_params params = default_params;
        ThreadReserve t;
        pthread_t thread;

        /* Tree and process scope name no thread; the pid stays the
         * broker's to take from the connection. */
        params.scope = PACE_SCOPE_TREE;
        req = ASSERT_SENT(b, pace_reserve(p, &params, &g));
        ASSERT_TRUE(req->reserve->has_scope);
        ASSERT_EQ(req->reserve->scope, PACE__SCOPE__SCOPE_TREE);
        ASSERT_FALSE(req->reserve->has_tid);
        ASSERT_FALSE(req->reserve->has_pid);
        ASSERT_EQ(g.scope, PACE_SCOPE_TREE);

        params.scope = PACE_SCOPE_PROCESS;
        params.pid = 42;
        req = ASSERT_SENT(b, pace_reserve(p, &params, &g));
        ASSERT_FALSE(req->reserve->has_scope && req->reserve->scope != PACE__SCOPE__SCOPE_PROCESS);
        ASSERT_FALSE(req->reserve->has_tid);
        ASSERT_EQ(req->reserve->pid, 42);

        /* Thread scope, pid 0 and tid 0: the calling thread, which only the
         * client can name. Called from a second thread, so that its tid is
         * not the pid. */
        t = (ThreadReserve) { .p = p, .params = default_params };
        t.params.scope = PACE_SCOPE_THREAD;
        ASSERT_EQ(pthread_create(&thread, NULL, reserve_thread, &t), 0);
        ASSERT_EQ(pthread_join(thread, NULL), 0);
        ASSERT_OK(t.r);
        ASSERT_NE(t.tid, getpid());
        req = fake_broker_last_request(b);
        ASSERT_TRUE(req->reserve->has_scope);
        ASSERT_EQ(req->reserve->scope, PACE__SCOPE__SCOPE_THREAD);
        ASSERT_TRUE(req->reserve->has_tid);
        ASSERT_EQ(req->reserve->tid, t.tid);
        ASSERT_TRUE(req->reserve->has_pid);
        ASSERT_EQ(req->reserve->pid, getpid());
        ASSERT_EQ(t.g.scope, PACE_SCOPE_THREAD);
        ASSERT_EQ(t.g.tid, t.tid);

        /* A named thread of the caller's own process. */
        params = default_params;
        params.scope = PACE_SCOPE_THREAD;
        params.tid = 31337;
        req = ASSERT_SENT(b, pace_reserve(p, &params, &g));
        ASSERT_EQ(req->reserve->tid, 31337);
        ASSERT_EQ(req->reserve->pid, getpid());

        /* A named thread of a named process: both go as given. */
        params.pid = 4000;
        params.tid = 4001;
        req = ASSERT_SENT(b, pace_reserve(p, &params, &g));
        ASSERT_EQ(req->reserve->scope, PACE__SCOPE__SCOPE_THREAD);
        ASSERT_EQ(req->reserve->pid, 4000);
        ASSERT_EQ(req->reserve->tid, 4001);
        ASSERT_EQ(g.tid, 4001);

        ASSERT_EQ(fake_broker_get(b, &b->n_requests), 5);
}

/* A chosen kind goes on the wire as it is; the default goes as no field at
 * all (slots to a broker, as before kinds; "keep it" on a change); a kind
 * outside the enum is refused before anything is sent, with a message. */
FAKE_BROKER_TEST(kind_travels_and_is_validated, MODE_ECHO) {
        pace_grant g;
        Pace__Request *req;
        pace_reserve_params params = default_params;

        static const pace_kind kinds[] = { PACE_KIND_SLOTS, PACE_KIND_SERVER, PACE_KIND_ALIGNED };
        for (size_t i = 0; i < ELEMENTSOF(kinds); i++) {
                params.kind = kinds[i];
                req = ASSERT_SENT(b, pace_reserve(p, &params, &g));
                ASSERT_TRUE(req->reserve->has_kind);
                ASSERT_EQ((int) req->reserve->kind, (int) kinds[i]);
                        ASSERT_EQ(g.kind, kinds[i]);

                req = ASSERT_SENT(b, pace_modify(p, 5, &params, &g));
                ASSERT_TRUE(req->modify->has_kind);
                ASSERT_EQ((int) req->modify->kind, (int) kinds[i]);
                }
        params.kind = PACE_KIND_DEFAULT;
        req = ASSERT_SENT(b, pace_modify(p, 5, &params, &g));
        ASSERT_FALSE(req->modify->has_kind);
        unsigned sent = fake_broker_get(b, &b->n_requests);

        params.kind = (pace_kind) 4;
        ASSERT_ERR(pace_reserve(p, &params, &g), -EINVAL);
        ASSERT_STREQ(pace_last_message(), "kind 4 does not exist: use PACE_KIND_SLOTS, PACE_KIND_SERVER, "
                     "PACE_KIND_ALIGNED or PACE_KIND_DEFAULT");
        params.kind = (pace_kind) -1;
        ASSERT_ERR(pace_reserve(p, &params, &g), -EINVAL);
        ASSERT_ERR(pace_modify(p, 5, &params, &g), -EINVAL);
        ASSERT_CONTAINS(pace_last_message(), "kind -1 does not exist");
        ASSERT_EQ(fake_broker_get(b, &b->n_requests), sent);
}

/* Programs built against libpace 0.1's header pass and receive these: the
 * kind went into padding, and nothing else moved (64-bit targets). */
TEST(structures_keep_their_layout) {
#if defined(__LP64__)
        ASSERT_EQ(sizeof(pace_reserve_params), 32u);
        ASSERT_EQ(offsetof(pace_reserve_params, kind), 28u);
        ASSERT_EQ(sizeof(pace_grant), 144u);
        ASSERT_EQ(offsetof(pace_grant, kind), 20u);
        ASSERT_EQ(offsetof(pace_grant, period_ns), 24u);
        ASSERT_EQ(offsetof(pace_grant, split_cpus), 136u);
#else
        TEST_SKIP("layout pinned for 64-bit targets only");
#endif
}

#define CONCURRENT_THREADS 4

#define CONCURRENT_ROUNDS 150

typedef struct Worker {
        pace *p;
        unsigned index;
        unsigned mismatches;
} Worker;

static void *worker_thread(void *userdata) {
        Worker *w = userdata;

        for (unsigned k = 0; k < CONCURRENT_ROUNDS; k++) {
                uint64_t period = (uint64_t) (w->index + 1) * 1000000000 + k;
                pace_reserve_params params = {
                        .period_ns = period,
                        .utilization_ppm = k % 3 == 0 ? 999999 : 100000 + w->index,
                        .cpu = -1,
                };
                char expected[128];
                pace_grant g;
                int r;

                r = pace_reserve(w->p, &params, &g);
                /* Give the other threads time to overwrite the message, were
                 * it not the calling thread's own. */
                usleep(200);
                if (k % 3 == 0) {
                        const char *m = pace_last_message();

                        snprintf(expected, sizeof(expected), "no room for period %" PRIu64, period);
                        if (r != PACE_E_NO_CAPACITY || !m || strcmp(m, expected) != 0)
                                w->mismatches++;
                } else if (r < 0 || g.requested_period_ns != period ||
                           g.requested_utilization_ppm != params.utilization_ppm || pace_last_message())
                        w->mismatches++;
        }
        return NULL;
}

TEST(threads_sharing_a_handle_get_their_own_replies) {
        FakeBroker b;
        pace *p = NULL;
        pthread_t threads[CONCURRENT_THREADS];
        Worker workers[CONCURRENT_THREADS];

        fake_broker_start(&b, MODE_CONCURRENT);
        /* A slow broker widens the window in which unserialised calls would
         * pick up each other's replies. */
        pthread_mutex_lock(&b.lock);
        b.reply_delay_us = 50;
        pthread_mutex_unlock(&b.lock);
        ASSERT_OK(pace_connect(b.path, &p));

        for (unsigned i = 0; i < CONCURRENT_THREADS; i++) {
                workers[i] = (Worker) { .p = p, .index = i };
                ASSERT_EQ(pthread_create(&threads[i], NULL, worker_thread, &workers[i]), 0);
        }
        for (unsigned i = 0; i < CONCURRENT_THREADS; i++) {
                ASSERT_EQ(pthread_join(threads[i], NULL), 0);
                ASSERT_EQ(workers[i].mismatches, 0);
        }
        ASSERT_EQ(fake_broker_get(&b, &b.n_requests), CONCURRENT_THREADS * CONCURRENT_ROUNDS);
        ASSERT_EQ(fake_broker_get(&b, &b.n_accepted), 1);
        ASSERT_EQ(fake_broker_get(&b, &b.max_outstanding), 1);

        fake_broker_disconnect(&b, p);
}

TEST(destructors_accept_null) {
        pace_close(NULL);
        pace_status_report_free(NULL);
}

TEST_MAIN()
