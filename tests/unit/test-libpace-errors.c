/* SPDX-License-Identifier: MIT */
/* libpace against a fake broker (fake-broker.h): bad arguments, broker
 * errors, and broken, late or missing replies become clear pace errors. */
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

static double now_sec(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

/* Once the broker answers again, so does the handle: over the connection it
 * had, or after reconnecting (connections is how many the broker accepted
 * in all). */
static void assert_answered_again(FakeBroker *b, pace *p, unsigned connections) {
        pace_grant g;

        fake_broker_set_mode(b, MODE_ECHO);
        ASSERT_OK(pace_reserve(p, &default_params, &g));
        ASSERT_EQ(fake_broker_get(b, &b->n_accepted), connections);
}

FAKE_BROKER_TEST(error_codes_map_to_pace_errors, MODE_ECHO) {
        pace_grant g;
        pace_status_report *s = NULL;
        char message[64];

        for (uint32_t code = PACE__ERROR_CODE__ERROR_MALFORMED; code <= PACE__ERROR_CODE__ERROR_BUSY; code++) {
                snprintf(message, sizeof(message), "refusal number %" PRIu32, code);
                fake_broker_set_error(b, PACE_PROTOCOL_VERSION, code, message);

                ASSERT_ERR(pace_reserve(p, &default_params, &g), -(PACE_E_BASE + (int) code));
                ASSERT_STREQ(pace_last_message(), message);
                ASSERT_ERR(pace_release(p, 1), -(PACE_E_BASE + (int) code));
                ASSERT_STREQ(pace_last_message(), message);
                ASSERT_ERR(pace_status(p, &s), -(PACE_E_BASE + (int) code));
                ASSERT_STREQ(pace_last_message(), message);
        }

        /* The named constants agree with the proto's enum. */
        fake_broker_set_error(b, PACE_PROTOCOL_VERSION, PACE__ERROR_CODE__ERROR_NO_CAPACITY, "full");
        ASSERT_ERR(pace_reserve(p, &default_params, &g), PACE_E_NO_CAPACITY);
        fake_broker_set_error(b, PACE_PROTOCOL_VERSION, PACE__ERROR_CODE__ERROR_BUSY, "busy");
        ASSERT_ERR(pace_reserve(p, &default_params, &g), PACE_E_BUSY);
        fake_broker_set_error(b, PACE_PROTOCOL_VERSION, PACE__ERROR_CODE__ERROR_PERMISSION_DENIED, "no");
        ASSERT_ERR(pace_reserve(p, &default_params, &g), PACE_E_PERMISSION_DENIED);

        /* The next successful call forgets the last refusal. */
        fake_broker_set_mode(b, MODE_ECHO);
        ASSERT_OK(pace_reserve(p, &default_params, &g));
        ASSERT_TRUE(pace_last_message() == NULL);
}

FAKE_BROKER_TEST(unknown_error_codes, MODE_ECHO) {
        pace_grant g;

        /* A newer broker's refusal is still a refusal, with its words. */
        fake_broker_set_error(b, PACE_PROTOCOL_VERSION, 42, "something new");
        ASSERT_ERR(pace_reserve(p, &default_params, &g), -(PACE_E_BASE + 42));
        ASSERT_STREQ(pace_last_message(), "something new");
        ASSERT_TRUE(strlen(pace_strerror(-(PACE_E_BASE + 42))) > 0);

        /* "Unspecified" is no answer at all. */
        fake_broker_set_error(b, PACE_PROTOCOL_VERSION, PACE__ERROR_CODE__ERROR_UNSPECIFIED, "what");
        ASSERT_ERR(pace_reserve(p, &default_params, &g), PACE_E_PROTOCOL);
}

FAKE_BROKER_TEST(last_message_is_sanitised_and_bounded, MODE_ECHO) {
        pace_grant g;
        char long_message[4000];
        const char *m;

        fake_broker_set_error(b, PACE_PROTOCOL_VERSION, PACE__ERROR_CODE__ERROR_NO_CAPACITY,
                              "bad \x1b[2Jterminal\r\nline two\tend \xc2\x9b" "31m \xc3\xa9t\xc3\xa9 \x7f");
        ASSERT_ERR(pace_reserve(p, &default_params, &g), PACE_E_NO_CAPACITY);
        ASSERT_STREQ(pace_last_message(), "bad ?[2Jterminal?\nline two\tend ?31m \xc3\xa9t\xc3\xa9 ?");

        /* A two-byte UTF-8 character straddling the cut must not be split. */
        memset(long_message, 'a', sizeof(long_message));
        for (size_t i = 1; i + 1 < sizeof(long_message); i += 2) {
                long_message[i] = (char) 0xC3;
                long_message[i + 1] = (char) 0xA9;
        }
        long_message[sizeof(long_message) - 1] = '\0';
        fake_broker_set_error(b, PACE_PROTOCOL_VERSION, PACE__ERROR_CODE__ERROR_NO_CAPACITY, long_message);
        ASSERT_ERR(pace_reserve(p, &default_params, &g), PACE_E_NO_CAPACITY);
        m = pace_last_message();
        ASSERT_TRUE(m);
        ASSERT_CMP(strlen(m), <, 1024);
        ASSERT_CMP(strlen(m), >, 1000);
        ASSERT_TRUE(strncmp(m, long_message, strlen(m)) == 0);
        ASSERT_EQ((unsigned char) m[strlen(m) - 1], 0xA9);
}

FAKE_BROKER_TEST(mismatched_body_is_protocol_error, MODE_WRONG_BODY) {
        pace_grant g;
        pace_status_report *s = NULL;

        ASSERT_ERR(pace_reserve(p, &default_params, &g), PACE_E_PROTOCOL);
        ASSERT_ERR(pace_release(p, 3), PACE_E_PROTOCOL);
        ASSERT_ERR(pace_status(p, &s), PACE_E_PROTOCOL);
        ASSERT_TRUE(s == NULL);
        ASSERT_TRUE(pace_last_message() == NULL);

        fake_broker_set_mode(b, MODE_NO_BODY);
        ASSERT_ERR(pace_reserve(p, &default_params, &g), PACE_E_PROTOCOL);
}

FAKE_BROKER_TEST(version_is_checked, MODE_WRONG_VERSION) {
        pace_grant g;

        ASSERT_ERR(pace_reserve(p, &default_params, &g), PACE_E_PROTOCOL);

        /* A grant in another version cannot be trusted to mean the same. */
        fake_broker_set_error(b, PACE_PROTOCOL_VERSION + 1, PACE__ERROR_CODE__ERROR_NO_CAPACITY, "full");
        ASSERT_ERR(pace_reserve(p, &default_params, &g), PACE_E_PROTOCOL);
        fake_broker_set_error(b, 0, PACE__ERROR_CODE__ERROR_INTERNAL, "x");
        ASSERT_ERR(pace_reserve(p, &default_params, &g), PACE_E_PROTOCOL);

        /* ...but "I do not speak your version" is understood in any version. */
        fake_broker_set_error(b, PACE_PROTOCOL_VERSION + 1, PACE__ERROR_CODE__ERROR_UNSUPPORTED_VERSION,
                              "speak version 2");
        ASSERT_ERR(pace_reserve(p, &default_params, &g), PACE_E_UNSUPPORTED_VERSION);
        ASSERT_STREQ(pace_last_message(), "speak version 2");
}

FAKE_BROKER_TEST(garbage_reply_is_protocol_error, MODE_GARBAGE) {
        pace_grant g;

        ASSERT_ERR(pace_reserve(p, &default_params, &g), PACE_E_PROTOCOL);
        ASSERT_TRUE(pace_last_message() == NULL);

        /* One bad datagram does not desynchronise the connection. */
        assert_answered_again(b, p, 1);
}

FAKE_BROKER_TEST(oversized_reply_is_protocol_error, MODE_OVERSIZED) {
        pace_grant g;
        const char *m;

        /* Would decode fine if read whole: only the size check can catch it. */
        ASSERT_ERR(pace_reserve(p, &default_params, &g), PACE_E_PROTOCOL);

        /* The largest legal reply is read whole. */
        fake_broker_set_mode(b, MODE_MAX_SIZE);
        ASSERT_ERR(pace_reserve(p, &default_params, &g), PACE_E_INTERNAL);
        m = pace_last_message();
        ASSERT_TRUE(m);
        ASSERT_EQ(m[0], 'x');

        assert_answered_again(b, p, 1);
}

FAKE_BROKER_TEST(broker_closing_without_reply_is_an_error, MODE_CLOSE) {
        pace_grant g;
        double t;
        int r;

        t = now_sec();
        r = pace_reserve(p, &default_params, &g);
        ASSERT_TRUE(r == -ECONNRESET || r == -EPIPE);
        ASSERT_CMP(now_sec() - t, <, 5);

        /* The handle reconnects on its next call. */
        assert_answered_again(b, p, 2);
}

TEST(send_to_closed_broker_does_not_raise_sigpipe) {
        FakeBroker b;
        pace *p = NULL;
        pace_status_report *s = NULL;
        int r;

        fake_broker_start(&b, MODE_ECHO);
        pthread_mutex_lock(&b.lock);
        b.close_on_accept = true;
        pthread_mutex_unlock(&b.lock);
        ASSERT_OK(pace_connect(b.path, &p));

        /* Wait until the broker's end is gone, so that the send itself fails.
         * Were SIGPIPE raised, its default action would kill this test (Linux
         * does not raise it for SOCK_SEQPACKET today, but other kernels and
         * future ones are not bound by that). */
        while (fake_broker_get(&b, &b.n_closed) < 1)
                usleep(1000);

        r = pace_status(p, &s);
        ASSERT_TRUE(r == -EPIPE || r == -ECONNRESET);

        fake_broker_disconnect(&b, p);
}

FAKE_BROKER_TEST(silent_broker_times_out, MODE_SILENT) {
        pace_grant g;
        double t;

        t = now_sec();
        ASSERT_ERR(pace_reserve(p, &default_params, &g), -ETIMEDOUT);
        t = now_sec() - t;
        ASSERT_CMP(t, >, 9);
        ASSERT_CMP(t, <, 20);

        assert_answered_again(b, p, 2);
}

FAKE_BROKER_TEST(arguments_are_validated_before_sending, MODE_ECHO) {
        pace_grant g;
        pace_status_report *s = NULL;
        pace_reserve_params params;

        ASSERT_ERR(pace_reserve(NULL, &default_params, &g), -EINVAL);
        ASSERT_ERR(pace_reserve(p, NULL, &g), -EINVAL);
        ASSERT_ERR(pace_reserve(p, &default_params, NULL), -EINVAL);

        params = default_params;
        params.period_ns = 0;
        ASSERT_ERR(pace_reserve(p, &params, &g), -EINVAL);

        params = default_params;
        params.utilization_ppm = 0;
        ASSERT_ERR(pace_reserve(p, &params, &g), -EINVAL);
        params.utilization_ppm = PPM + 1;
        ASSERT_ERR(pace_reserve(p, &params, &g), -EINVAL);
        params.utilization_ppm = UINT32_MAX;
        ASSERT_ERR(pace_reserve(p, &params, &g), -EINVAL);

        params = default_params;
        params.pid = -1;
        ASSERT_ERR(pace_reserve(p, &params, &g), -EINVAL);
        params.pid = INT_MIN;
        ASSERT_ERR(pace_reserve(p, &params, &g), -EINVAL);

        params = default_params;
        params.cpu = -2;
        ASSERT_ERR(pace_reserve(p, &params, &g), -EINVAL);

        ASSERT_ERR(pace_release(NULL, 1), -EINVAL);
        ASSERT_ERR(pace_status(NULL, &s), -EINVAL);
        ASSERT_ERR(pace_status(p, NULL), -EINVAL);

        ASSERT_EQ(fake_broker_get(b, &b->n_requests), 0);

        /* The edges of the valid ranges do go out. */
        params = default_params;
        params.utilization_ppm = 1;
        ASSERT_OK(pace_reserve(p, &params, &g));
        params.utilization_ppm = PPM;
        ASSERT_OK(pace_reserve(p, &params, &g));
        ASSERT_EQ(fake_broker_get(b, &b->n_requests), 2);
}

FAKE_BROKER_TEST(scope_arguments_are_validated_before_sending, MODE_ECHO) {
        pace_grant g;
        pace_reserve_params params;

        params = default_params;
        params.scope = (pace_scope) 3;
        ASSERT_ERR(pace_reserve(p, &params, &g), -EINVAL);
        params.scope = (pace_scope) -1;
        ASSERT_ERR(pace_reserve(p, &params, &g), -EINVAL);

        /* A tid outside thread scope. */
        params = default_params;
        params.tid = 5;
        ASSERT_ERR(pace_reserve(p, &params, &g), -EINVAL);
        params.scope = PACE_SCOPE_TREE;
        ASSERT_ERR(pace_reserve(p, &params, &g), -EINVAL);

        /* Another process's thread cannot be guessed. */
        params = default_params;
        params.scope = PACE_SCOPE_THREAD;
        params.pid = 42;
        ASSERT_ERR(pace_reserve(p, &params, &g), -EINVAL);

        params = default_params;
        params.scope = PACE_SCOPE_THREAD;
        params.tid = -1;
        ASSERT_ERR(pace_reserve(p, &params, &g), -EINVAL);

        ASSERT_EQ(fake_broker_get(b, &b->n_requests), 0);

        /* Modify never changes what a reservation covers, so it does not
         * look at scope and tid at all. */
        params = default_params;
        params.scope = (pace_scope) 99;
        params.tid = 7;
        params.pid = 3;
        ASSERT_OK(pace_modify(p, 12, &params, &g));
        ASSERT_EQ(g.id, 12);
        ASSERT_EQ(fake_broker_get(b, &b->n_requests), 1);
}

TEST(strerror_covers_every_code) {
        static const int codes[] = {
                PACE_E_MALFORMED,        PACE_E_UNSUPPORTED_VERSION, PACE_E_INVALID_ARGUMENT,
                PACE_E_NO_CAPACITY,      PACE_E_NO_SUCH_PROCESS,     PACE_E_PERMISSION_DENIED,
                PACE_E_NO_SUCH_RESERVATION, PACE_E_LIMIT_EXCEEDED,   PACE_E_INTERNAL,
                PACE_E_BUSY,             PACE_E_PROTOCOL,
        };

        for (size_t i = 0; i < ELEMENTSOF(codes); i++) {
                const char *s = pace_strerror(codes[i]);

                ASSERT_TRUE(s && *s);
                ASSERT_FALSE(strstr(s, "Unknown"));
                for (size_t j = 0; j < i; j++)
                        ASSERT_TRUE(strcmp(s, pace_strerror(codes[j])) != 0);
        }

        ASSERT_STREQ(pace_strerror(-ENOENT), strerrordesc_np(ENOENT));
        ASSERT_STREQ(pace_strerror(-ETIMEDOUT), strerrordesc_np(ETIMEDOUT));
        ASSERT_STREQ(pace_strerror(ECONNREFUSED), strerrordesc_np(ECONNREFUSED));
        ASSERT_TRUE(pace_strerror(0) != NULL);
        ASSERT_TRUE(pace_strerror(INT_MIN) != NULL);
        ASSERT_TRUE(pace_strerror(-999999) != NULL);
}

TEST_MAIN()
