/* SPDX-License-Identifier: MIT */
#pragma once

/* A fake broker for libpace's unit tests: a listening SOCK_SEQPACKET
 * socket in a temporary directory, served by a thread that decodes each
 * request with protobuf-c and answers the way the current test scripts it
 * to (FakeMode). */

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "pace-limits.h"
#include "pace.pb-c.h"
#include "pace/pace.h"

#define FAKE_CLOSE ((ssize_t) -1)
#define FAKE_SILENT ((ssize_t) -2)
#define FAKE_MAX_CONNS 16
/* Bigger than any legal message, so oversized replies can be built. */
#define FAKE_REPLY_MAX (256u * 1024u)
#define FAKE_MAX_BATCH 8

typedef enum FakeMode {
        MODE_ECHO,          /* answer like a broker that says yes */
        MODE_FIXED_GRANT,   /* a grant with every field distinct */
        MODE_ERROR,         /* error_code + error_message, in error_version */
        MODE_WRONG_BODY,    /* a well-formed reply of the wrong kind */
        MODE_WRONG_RELEASE, /* "released" naming another id */
        MODE_NO_BODY,
        MODE_WRONG_VERSION,
        MODE_GARBAGE,
        MODE_OVERSIZED,     /* a valid Response, one byte over the limit */
        MODE_MAX_SIZE,      /* a valid Response of exactly the limit */
        MODE_STATUS_TOO_MANY,
        MODE_STATUS_EMPTY,
        MODE_CLOSE,         /* hang up without answering */
        MODE_SILENT,        /* never answer */
        MODE_CONCURRENT,    /* per-request answers for the threading test */
} FakeMode;

typedef struct FakeBroker {
        char dir[64];
        char path[128];
        int listen_fd;
        int stop_pipe[2];
        pthread_t thread;

        pthread_mutex_t lock;
        FakeMode mode;
        uint32_t error_code;
        uint32_t error_version;
        const char *error_message;
        bool close_on_accept;
        unsigned reply_delay_us;

        unsigned n_requests;
        unsigned n_accepted;
        unsigned n_closed;
        unsigned max_outstanding; /* most requests seen queued at once on a connection */
        uint8_t last_request[PACE_MAX_MESSAGE_SIZE];
        size_t last_request_size;

        Pace__Request *last_decoded; /* the test thread's, from fake_broker_last_request() */
} FakeBroker;

/* A broker on a new socket (b->path), answering in mode. */
void fake_broker_start(FakeBroker *b, FakeMode mode);

/* Stops the thread and removes the socket and its directory. */
void fake_broker_stop(FakeBroker *b);
/* fake_broker_start(), and a libpace connection to it (fails the test if
 * there is none). */
pace *fake_broker_connect(FakeBroker *b, FakeMode mode);
/* Closes p, then fake_broker_stop(). */
void fake_broker_disconnect(FakeBroker *b, pace *p);

void fake_broker_set_mode(FakeBroker *b, FakeMode mode);

void fake_broker_set_error(FakeBroker *b, uint32_t version, uint32_t code, const char *message);

unsigned fake_broker_get(FakeBroker *b, const unsigned *counter);

/* The last request as the broker decoded it. It stays valid until the next
 * call or fake_broker_stop(), which free it: a test reads one request after
 * another without freeing each. */
Pace__Request *fake_broker_last_request(FakeBroker *b);

/* A case (test.h's TEST) run against a fake broker: its body gets the broker
 * b, started in mode, and a libpace handle p on it, both closed after the
 * body returns. */
#define FAKE_BROKER_TEST(name, mode)                                                      \
        static void fake_broker_test_##name(FakeBroker *b, pace *p);                      \
        TEST(name) {                                                                      \
                FakeBroker b_;                                                            \
                pace *p_ = fake_broker_connect(&b_, mode);                                \
                fake_broker_test_##name(&b_, p_);                                         \
                fake_broker_disconnect(&b_, p_);                                          \
        }                                                                                 \
        static void fake_broker_test_##name(FakeBroker *b, pace *p)

/* What most reserve tests ask for: 60% of a 50 ms period, on any CPU. */
extern const pace_reserve_params default_params;
