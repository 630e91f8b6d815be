/* SPDX-License-Identifier: MIT */

/* libpace against a fake broker: a listening SOCK_SEQPACKET socket in a
 * temporary directory, served by a thread that decodes each request with
 * protobuf-c and answers the way the current test scripts it to. */

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

#include "macro.h"
#include "pace-limits.h"
#include "pace.pb-c.h"
#include "pace/pace.h"
#include "test.h"

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
} FakeBroker;

static ssize_t pack_response(const Pace__Response *resp, uint8_t *out, size_t size) {
        size_t n = pace__response__get_packed_size(resp);

        if (n > size)
                abort();
        return (ssize_t) pace__response__pack(resp, out);
}

/* Sizes an error message so the packed Response is exactly `target` bytes. The
 * varint length prefix grows with the message, hence the search. */
static ssize_t pack_error_of_size(size_t target, uint8_t *out, size_t size) {
        Pace__Response resp = PACE__RESPONSE__INIT;
        Pace__Error e = PACE__ERROR__INIT;
        _cleanup_free_ char *m = NULL;
        size_t len = target;

        m = malloc(target + 1);
        if (!m)
                abort();
        resp.version = PACE_PROTOCOL_VERSION;
        resp.body_case = PACE__RESPONSE__BODY_ERROR;
        resp.error = &e;
        e.code = PACE__ERROR_CODE__ERROR_INTERNAL;
        e.message = m;

        for (unsigned tries = 0;; tries++) {
                size_t n;

                if (tries > 100)
                        abort();

                memset(m, 'x', len);
                m[len] = '\0';
                n = pace__response__get_packed_size(&resp);
                if (n == target)
                        break;
                if (n > target)
                        len -= MIN(n - target, len);
                else
                        len += target - n;
        }
        return pack_response(&resp, out, size);
}

static void fill_grant(Pace__Grant *g, uint64_t id, int32_t pid, int32_t cpu, uint64_t period_ns,
                       uint32_t ppm) {
        g->id = id;
        g->pid = pid;
        g->cpu = cpu;
        g->period_ns = period_ns;
        g->budget_ns = period_ns / PPM * ppm;
        g->slot_ns = 1000000;
        g->requested_period_ns = period_ns;
        g->requested_utilization_ppm = ppm;
        g->uid = 1000;
}

static ssize_t answer(FakeBroker *b, const Pace__Request *req, uint8_t *out, size_t size) {
        Pace__Response resp = PACE__RESPONSE__INIT;
        Pace__Grant grant = PACE__GRANT__INIT;
        Pace__ReleaseReply released = PACE__RELEASE_REPLY__INIT;
        Pace__StatusReply status = PACE__STATUS_REPLY__INIT;
        Pace__Error error = PACE__ERROR__INIT;
        Pace__Grant g[3] = { PACE__GRANT__INIT, PACE__GRANT__INIT, PACE__GRANT__INIT };
        Pace__Grant *gp[3] = { &g[0], &g[1], &g[2] };
        Pace__CpuStatus c[2] = { PACE__CPU_STATUS__INIT, PACE__CPU_STATUS__INIT };
        Pace__CpuStatus *cp[2] = { &c[0], &c[1] };
        Pace__Accounting accounting = PACE__ACCOUNTING__INIT;
        char message[128];
        FakeMode mode;

        pthread_mutex_lock(&b->lock);
        mode = b->mode;
        pthread_mutex_unlock(&b->lock);

        resp.version = PACE_PROTOCOL_VERSION;

        switch (mode) {
        case MODE_CLOSE:
                return FAKE_CLOSE;
        case MODE_SILENT:
                return FAKE_SILENT;
        case MODE_GARBAGE:
                memset(out, 0xFF, 64);
                return 64;
        case MODE_OVERSIZED:
                return pack_error_of_size(PACE_MAX_MESSAGE_SIZE + 1, out, size);
        case MODE_MAX_SIZE:
                return pack_error_of_size(PACE_MAX_MESSAGE_SIZE, out, size);
        case MODE_ERROR:
                resp.version = b->error_version;
                resp.body_case = PACE__RESPONSE__BODY_ERROR;
                resp.error = &error;
                error.code = (Pace__ErrorCode) b->error_code;
                error.message = (char *) b->error_message;
                return pack_response(&resp, out, size);
        case MODE_NO_BODY:
                return pack_response(&resp, out, size);
        case MODE_WRONG_BODY:
                /* Whatever was asked, answer something else. */
                if (req->body_case == PACE__REQUEST__BODY_STATUS) {
                        fill_grant(&grant, 1, 1, 0, 50000000, 500000);
                        resp.body_case = PACE__RESPONSE__BODY_GRANT;
                        resp.grant = &grant;
                } else {
                        resp.body_case = PACE__RESPONSE__BODY_STATUS;
                        resp.status = &status;
                }
                return pack_response(&resp, out, size);
        case MODE_WRONG_RELEASE:
                released.id = req->release->id + 1;
                resp.body_case = PACE__RESPONSE__BODY_RELEASED;
                resp.released = &released;
                return pack_response(&resp, out, size);
        case MODE_STATUS_TOO_MANY: {
                _cleanup_free_ Pace__Grant **many = calloc(PACE_MAX_RESERVATIONS + 1, sizeof(*many));
                ssize_t n;

                if (!many)
                        abort();
                fill_grant(&grant, 1, 1, 0, 50000000, 1);
                for (size_t i = 0; i <= PACE_MAX_RESERVATIONS; i++)
                        many[i] = &grant;
                status.n_reservations = PACE_MAX_RESERVATIONS + 1;
                status.reservations = many;
                resp.body_case = PACE__RESPONSE__BODY_STATUS;
                resp.status = &status;
                n = pack_response(&resp, out, size);
                return n;
        }
        case MODE_STATUS_EMPTY:
                status.non_rt_share_ppm = 100000;
                status.generation = 1;
                resp.body_case = PACE__RESPONSE__BODY_STATUS;
                resp.status = &status;
                return pack_response(&resp, out, size);
        case MODE_FIXED_GRANT:
                grant = (Pace__Grant) PACE__GRANT__INIT;
                grant.id = UINT64_C(0xFFFFFFFFFFFFFFF0);
                grant.pid = 12345;
                grant.cpu = 7;
                grant.period_ns = 49000000;
                grant.budget_ns = 29000000;
                grant.slot_ns = 1000000;
                grant.requested_period_ns = 50000000;
                grant.requested_utilization_ppm = 600000;
                grant.uid = 4000000000u;
                grant.has_scope = true;
                grant.scope = PACE__SCOPE__SCOPE_TREE;
                grant.has_tid = true;
                grant.tid = 2000000001;
                grant.has_threads = true;
                grant.threads = 4000000001u;
                grant.has_phase_ns = true;
                grant.phase_ns = 48999999;
                grant.has_kind = true;
                grant.kind = PACE__KIND__KIND_ALIGNED;
                resp.body_case = PACE__RESPONSE__BODY_GRANT;
                resp.grant = &grant;
                return pack_response(&resp, out, size);
        case MODE_CONCURRENT:
                /* Refusals are signalled by utilization 999999 and name the
                 * period, so each thread can tell its own message. */
                if (req->body_case == PACE__REQUEST__BODY_RESERVE && req->reserve->utilization_ppm == 999999) {
                        snprintf(message, sizeof(message), "no room for period %" PRIu64, req->reserve->period_ns);
                        resp.body_case = PACE__RESPONSE__BODY_ERROR;
                        resp.error = &error;
                        error.code = PACE__ERROR_CODE__ERROR_NO_CAPACITY;
                        error.message = message;
                        return pack_response(&resp, out, size);
                }
                break;
        case MODE_WRONG_VERSION:
                resp.version = PACE_PROTOCOL_VERSION + 1;
                break;
        case MODE_ECHO:
                break;
        }

        switch (req->body_case) {
        case PACE__REQUEST__BODY_RESERVE:
                fill_grant(&grant, 77, req->reserve->has_pid ? req->reserve->pid : 4242,
                           req->reserve->has_cpu ? req->reserve->cpu : 1, req->reserve->period_ns,
                           req->reserve->utilization_ppm);
                /* What it covers, echoed as a broker does. */
                grant.has_scope = req->reserve->has_scope;
                grant.scope = req->reserve->scope;
                grant.has_tid = req->reserve->has_tid;
                grant.tid = req->reserve->tid;
                grant.has_kind = req->reserve->has_kind;
                grant.kind = req->reserve->kind;
                resp.body_case = PACE__RESPONSE__BODY_GRANT;
                resp.grant = &grant;
                break;
        case PACE__REQUEST__BODY_MODIFY:
                fill_grant(&grant, req->modify->id, 4242, req->modify->has_cpu ? req->modify->cpu : 1,
                           req->modify->period_ns, req->modify->utilization_ppm);
                grant.has_kind = req->modify->has_kind;
                grant.kind = req->modify->kind;
                resp.body_case = PACE__RESPONSE__BODY_GRANT;
                resp.grant = &grant;
                break;
        case PACE__REQUEST__BODY_RELEASE:
                released.id = req->release->id;
                resp.body_case = PACE__RESPONSE__BODY_RELEASED;
                resp.released = &released;
                break;
        case PACE__REQUEST__BODY_STATUS:
                fill_grant(&g[0], 1, 100, 0, 50000000, 600000);
                fill_grant(&g[1], 2, 200, 1, 10000000, 250000);
                fill_grant(&g[2], 3, 300, 1, 20000000, 100000);
                g[2].period_ns = 19000000;
                g[2].uid = 0;
                /* g[0]: every new field, each value distinct; g[1]: none of
                 * them, as an older broker sends; g[2]: a thread. */
                g[0].has_scope = true;
                g[0].scope = PACE__SCOPE__SCOPE_TREE;
                g[0].has_threads = true;
                g[0].threads = 9;
                g[0].has_phase_ns = true;
                g[0].phase_ns = 40000000;
                g[0].accounting = &accounting;
                accounting.window_ns = 1000000001;
                accounting.delivered_ns = 598000002;
                accounting.cpu_time_ns = UINT64_C(0xFFFFFFFFFFFF0003);
                accounting.periods = 20000000004;
                accounting.periods_blocked = 5;
                accounting.periods_wanted_more = 6;
                g[2].has_scope = true;
                g[2].scope = PACE__SCOPE__SCOPE_THREAD;
                g[2].has_tid = true;
                g[2].tid = 301;
                g[2].has_threads = true;
                g[2].threads = 1;
                g[2].has_phase_ns = true;
                g[2].phase_ns = 0;
                c[0].cpu = 0;
                c[0].reserved_ppm = 600000;
                c[0].free_ppm = 300000;
                c[0].frame_ns = 50000000;
                c[1].cpu = 1;
                c[1].reserved_ppm = 350000;
                c[1].free_ppm = 550000;
                c[1].frame_ns = 20000000;
                status.n_reservations = 3;
                status.reservations = gp;
                status.n_cpus = 2;
                status.cpus = cp;
                status.non_rt_share_ppm = 100000;
                status.generation = UINT64_C(1) << 40;
                resp.body_case = PACE__RESPONSE__BODY_STATUS;
                resp.status = &status;
                break;
        default:
                resp.body_case = PACE__RESPONSE__BODY_ERROR;
                resp.error = &error;
                error.code = PACE__ERROR_CODE__ERROR_MALFORMED;
                error.message = (char *) "no body";
                break;
        }
        return pack_response(&resp, out, size);
}

static void fake_count(FakeBroker *b, unsigned *counter) {
        pthread_mutex_lock(&b->lock);
        (*counter)++;
        pthread_mutex_unlock(&b->lock);
}

/* Records and answers one request; FAKE_CLOSE for undecodable input. */
static ssize_t handle_request(FakeBroker *b, const uint8_t *in, size_t n, uint8_t *out) {
        Pace__Request *req;
        ssize_t reply;

        pthread_mutex_lock(&b->lock);
        b->n_requests++;
        b->last_request_size = MIN(n, sizeof(b->last_request));
        memcpy(b->last_request, in, b->last_request_size);
        pthread_mutex_unlock(&b->lock);

        req = pace__request__unpack(NULL, n, in);
        if (!req)
                return FAKE_CLOSE;
        reply = answer(b, req, out, FAKE_REPLY_MAX);
        pace__request__free_unpacked(req, NULL);
        return reply;
}

/* Reads every request already queued on the connection and answers them last
 * first. A client that keeps at most one request outstanding, as a protocol
 * without request ids requires, cannot tell; one that does not gets the wrong
 * replies. Returns false when the connection is to be dropped. */
static bool serve(FakeBroker *b, int fd, uint8_t *in, uint8_t *out) {
        ssize_t replies[FAKE_MAX_BATCH];
        unsigned n_replies = 0, delay;
        bool keep = true;
        ssize_t n;

        n = recv(fd, in, PACE_MAX_MESSAGE_SIZE + 1, 0);
        if (n <= 0)
                return false;
        replies[n_replies] = handle_request(b, in, (size_t) n, out);
        n_replies++;

        pthread_mutex_lock(&b->lock);
        delay = b->reply_delay_us;
        pthread_mutex_unlock(&b->lock);
        if (delay > 0)
                usleep(delay);

        while (n_replies < FAKE_MAX_BATCH) {
                n = recv(fd, in, PACE_MAX_MESSAGE_SIZE + 1, MSG_DONTWAIT);
                if (n < 0)
                        break;
                if (n == 0) {
                        keep = false;
                        break;
                }
                replies[n_replies] = handle_request(b, in, (size_t) n, out + n_replies * FAKE_REPLY_MAX);
                n_replies++;
        }

        pthread_mutex_lock(&b->lock);
        b->max_outstanding = MAX(b->max_outstanding, n_replies);
        pthread_mutex_unlock(&b->lock);

        for (unsigned i = n_replies; i > 0; i--) {
                ssize_t r = replies[i - 1];

                if (r == FAKE_CLOSE)
                        return false;
                if (r == FAKE_SILENT)
                        continue;
                if (send(fd, out + (i - 1) * FAKE_REPLY_MAX, (size_t) r, MSG_NOSIGNAL) != r)
                        return false;
        }
        return keep;
}

static void *fake_broker_thread(void *userdata) {
        FakeBroker *b = userdata;
        struct pollfd pfd[2 + FAKE_MAX_CONNS];
        int conns[FAKE_MAX_CONNS];
        size_t n_conns = 0;
        _cleanup_free_ uint8_t *in = malloc(PACE_MAX_MESSAGE_SIZE + 1);
        _cleanup_free_ uint8_t *out = malloc((size_t) FAKE_MAX_BATCH * FAKE_REPLY_MAX);

        if (!in || !out)
                abort();

        for (;;) {
                pfd[0] = (struct pollfd) { .fd = b->stop_pipe[0], .events = POLLIN };
                pfd[1] = (struct pollfd) { .fd = b->listen_fd, .events = POLLIN };
                for (size_t i = 0; i < n_conns; i++)
                        pfd[2 + i] = (struct pollfd) { .fd = conns[i], .events = POLLIN };

                if (poll(pfd, 2 + n_conns, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        abort();
                }
                if (pfd[0].revents)
                        break;

                for (size_t i = n_conns; i > 0; i--) {
                        if (!pfd[1 + i].revents)
                                continue;
                        if (serve(b, conns[i - 1], in, out))
                                continue;
                        close(conns[i - 1]);
                        conns[i - 1] = conns[--n_conns];
                        fake_count(b, &b->n_closed);
                }

                if (pfd[1].revents) {
                        int fd = accept4(b->listen_fd, NULL, NULL, SOCK_CLOEXEC);
                        bool hang_up;

                        if (fd < 0)
                                continue;
                        fake_count(b, &b->n_accepted);

                        pthread_mutex_lock(&b->lock);
                        hang_up = b->close_on_accept;
                        pthread_mutex_unlock(&b->lock);

                        if (hang_up || n_conns >= FAKE_MAX_CONNS) {
                                close(fd);
                                fake_count(b, &b->n_closed);
                        } else
                                conns[n_conns++] = fd;
                }
        }

        for (size_t i = 0; i < n_conns; i++)
                close(conns[i]);
        return NULL;
}

static void fake_broker_start(FakeBroker *b, FakeMode mode) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };

        *b = (FakeBroker) { .mode = mode, .error_version = PACE_PROTOCOL_VERSION };
        strcpy(b->dir, "/tmp/test-libpace-XXXXXX");
        ASSERT_TRUE(mkdtemp(b->dir));
        snprintf(b->path, sizeof(b->path), "%s/broker.sock", b->dir);
        ASSERT_OK(pthread_mutex_init(&b->lock, NULL));
        ASSERT_OK(pipe2(b->stop_pipe, O_CLOEXEC));

        b->listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        ASSERT_OK(b->listen_fd);
        strcpy(sa.sun_path, b->path);
        ASSERT_OK(bind(b->listen_fd, (struct sockaddr *) &sa, sizeof(sa)));
        ASSERT_OK(listen(b->listen_fd, 16));

        ASSERT_EQ(pthread_create(&b->thread, NULL, fake_broker_thread, b), 0);
}

static void fake_broker_stop(FakeBroker *b) {
        ASSERT_EQ(write(b->stop_pipe[1], "x", 1), 1);
        ASSERT_EQ(pthread_join(b->thread, NULL), 0);
        close(b->stop_pipe[0]);
        close(b->stop_pipe[1]);
        close(b->listen_fd);
        unlink(b->path);
        rmdir(b->dir);
        pthread_mutex_destroy(&b->lock);
}

static void fake_broker_set_mode(FakeBroker *b, FakeMode mode) {
        pthread_mutex_lock(&b->lock);
        b->mode = mode;
        pthread_mutex_unlock(&b->lock);
}

static void fake_broker_set_error(FakeBroker *b, uint32_t version, uint32_t code, const char *message) {
        pthread_mutex_lock(&b->lock);
        b->mode = MODE_ERROR;
        b->error_version = version;
        b->error_code = code;
        b->error_message = message;
        pthread_mutex_unlock(&b->lock);
}

static unsigned fake_broker_get(FakeBroker *b, const unsigned *counter) {
        unsigned v;

        pthread_mutex_lock(&b->lock);
        v = *counter;
        pthread_mutex_unlock(&b->lock);
        return v;
}

/* The last request as the broker decoded it; free with pace__request__free_unpacked. */
static Pace__Request *fake_broker_last_request(FakeBroker *b) {
        Pace__Request *req;

        pthread_mutex_lock(&b->lock);
        req = pace__request__unpack(NULL, b->last_request_size, b->last_request);
        pthread_mutex_unlock(&b->lock);
        ASSERT_TRUE(req);
        return req;
}

static double now_sec(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static const pace_reserve_params default_params = {
        .period_ns = 50000000,
        .utilization_ppm = 600000,
        .pid = 0,
        .cpu = -1,
};

TEST(reserve_request_carries_fields) {
        FakeBroker b;
        pace *p = NULL;
        pace_grant g;
        Pace__Request *req;
        pace_reserve_params params = default_params;

        fake_broker_start(&b, MODE_ECHO);
        ASSERT_OK(pace_connect(b.path, &p));

        /* pid 0 and cpu -1 must leave the fields absent, not zero. */
        ASSERT_OK(pace_reserve(p, &params, &g));
        ASSERT_TRUE(pace_last_message() == NULL);
        req = fake_broker_last_request(&b);
        ASSERT_EQ(req->version, PACE_PROTOCOL_VERSION);
        ASSERT_EQ(req->body_case, PACE__REQUEST__BODY_RESERVE);
        ASSERT_EQ(req->reserve->period_ns, 50000000);
        ASSERT_EQ(req->reserve->utilization_ppm, 600000);
        ASSERT_FALSE(req->reserve->has_pid);
        ASSERT_FALSE(req->reserve->has_cpu);
        ASSERT_FALSE(req->reserve->has_scope);
        ASSERT_FALSE(req->reserve->has_tid);
        ASSERT_FALSE(req->reserve->has_kind);
        pace__request__free_unpacked(req, NULL);
        ASSERT_EQ(g.pid, 4242);
        ASSERT_EQ(g.scope, PACE_SCOPE_PROCESS);
        /* The echo had no kind, as from a broker that predates kinds. */
        ASSERT_EQ(g.kind, PACE_KIND_SLOTS);
        ASSERT_EQ(g.cpu, 1);

        params = (pace_reserve_params) { .period_ns = 1, .utilization_ppm = PPM, .pid = 42, .cpu = 0 };
        ASSERT_OK(pace_reserve(p, &params, &g));
        req = fake_broker_last_request(&b);
        ASSERT_EQ(req->version, PACE_PROTOCOL_VERSION);
        ASSERT_EQ(req->reserve->period_ns, 1);
        ASSERT_EQ(req->reserve->utilization_ppm, PPM);
        ASSERT_TRUE(req->reserve->has_pid);
        ASSERT_EQ(req->reserve->pid, 42);
        ASSERT_TRUE(req->reserve->has_cpu);
        ASSERT_EQ(req->reserve->cpu, 0);
        pace__request__free_unpacked(req, NULL);
        ASSERT_EQ(g.pid, 42);
        ASSERT_EQ(g.cpu, 0);

        ASSERT_EQ(fake_broker_get(&b, &b.n_requests), 2);
        pace_close(p);
        fake_broker_stop(&b);
}

TEST(grant_decoding) {
        FakeBroker b;
        pace *p = NULL;
        pace_grant g;

        fake_broker_start(&b, MODE_FIXED_GRANT);
        ASSERT_OK(pace_connect(b.path, &p));
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

        pace_close(p);
        fake_broker_stop(&b);
}

TEST(release_request_and_reply) {
        FakeBroker b;
        pace *p = NULL;
        Pace__Request *req;

        fake_broker_start(&b, MODE_ECHO);
        ASSERT_OK(pace_connect(b.path, &p));

        ASSERT_OK(pace_release(p, UINT64_C(0x123456789abc)));
        req = fake_broker_last_request(&b);
        ASSERT_EQ(req->version, PACE_PROTOCOL_VERSION);
        ASSERT_EQ(req->body_case, PACE__REQUEST__BODY_RELEASE);
        ASSERT_TRUE(req->release->id == UINT64_C(0x123456789abc));
        pace__request__free_unpacked(req, NULL);

        /* A confirmation for some other reservation is not a confirmation. */
        fake_broker_set_mode(&b, MODE_WRONG_RELEASE);
        ASSERT_ERR(pace_release(p, 5), PACE_E_PROTOCOL);
        ASSERT_TRUE(pace_last_message() == NULL);

        pace_close(p);
        fake_broker_stop(&b);
}

TEST(status_request_and_decoding) {
        FakeBroker b;
        pace *p = NULL;
        pace_status_report *s = NULL;
        Pace__Request *req;

        fake_broker_start(&b, MODE_ECHO);
        ASSERT_OK(pace_connect(b.path, &p));

        ASSERT_OK(pace_status(p, &s));
        req = fake_broker_last_request(&b);
        ASSERT_EQ(req->version, PACE_PROTOCOL_VERSION);
        ASSERT_EQ(req->body_case, PACE__REQUEST__BODY_STATUS);
        pace__request__free_unpacked(req, NULL);

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

        fake_broker_set_mode(&b, MODE_STATUS_EMPTY);
        ASSERT_OK(pace_status(p, &s));
        ASSERT_EQ(s->n_reservations, 0);
        ASSERT_EQ(s->n_cpus, 0);
        ASSERT_EQ(s->non_rt_share_ppm, 100000);
        pace_status_report_free(s);

        pace_close(p);
        fake_broker_stop(&b);
}

TEST(status_beyond_limits_is_refused) {
        FakeBroker b;
        pace *p = NULL;
        pace_status_report *s = NULL;

        fake_broker_start(&b, MODE_STATUS_TOO_MANY);
        ASSERT_OK(pace_connect(b.path, &p));
        ASSERT_ERR(pace_status(p, &s), PACE_E_PROTOCOL);
        ASSERT_TRUE(s == NULL);
        pace_close(p);
        fake_broker_stop(&b);
}

TEST(error_codes_map_to_pace_errors) {
        FakeBroker b;
        pace *p = NULL;
        pace_grant g;
        pace_status_report *s = NULL;
        char message[64];

        fake_broker_start(&b, MODE_ECHO);
        ASSERT_OK(pace_connect(b.path, &p));

        for (uint32_t code = PACE__ERROR_CODE__ERROR_MALFORMED; code <= PACE__ERROR_CODE__ERROR_BUSY; code++) {
                snprintf(message, sizeof(message), "refusal number %" PRIu32, code);
                fake_broker_set_error(&b, PACE_PROTOCOL_VERSION, code, message);

                ASSERT_ERR(pace_reserve(p, &default_params, &g), -(PACE_E_BASE + (int) code));
                ASSERT_STREQ(pace_last_message(), message);
                ASSERT_ERR(pace_release(p, 1), -(PACE_E_BASE + (int) code));
                ASSERT_STREQ(pace_last_message(), message);
                ASSERT_ERR(pace_status(p, &s), -(PACE_E_BASE + (int) code));
                ASSERT_STREQ(pace_last_message(), message);
        }

        /* The named constants agree with the proto's enum. */
        fake_broker_set_error(&b, PACE_PROTOCOL_VERSION, PACE__ERROR_CODE__ERROR_NO_CAPACITY, "full");
        ASSERT_ERR(pace_reserve(p, &default_params, &g), PACE_E_NO_CAPACITY);
        fake_broker_set_error(&b, PACE_PROTOCOL_VERSION, PACE__ERROR_CODE__ERROR_BUSY, "busy");
        ASSERT_ERR(pace_reserve(p, &default_params, &g), PACE_E_BUSY);
        fake_broker_set_error(&b, PACE_PROTOCOL_VERSION, PACE__ERROR_CODE__ERROR_PERMISSION_DENIED, "no");
        ASSERT_ERR(pace_reserve(p, &default_params, &g), PACE_E_PERMISSION_DENIED);

        /* The next successful call forgets the last refusal. */
        fake_broker_set_mode(&b, MODE_ECHO);
        ASSERT_OK(pace_reserve(p, &default_params, &g));
        ASSERT_TRUE(pace_last_message() == NULL);

        pace_close(p);
        fake_broker_stop(&b);
}

TEST(unknown_error_codes) {
        FakeBroker b;
        pace *p = NULL;
        pace_grant g;

        fake_broker_start(&b, MODE_ECHO);
        ASSERT_OK(pace_connect(b.path, &p));

        /* A newer broker's refusal is still a refusal, with its words. */
        fake_broker_set_error(&b, PACE_PROTOCOL_VERSION, 42, "something new");
        ASSERT_ERR(pace_reserve(p, &default_params, &g), -(PACE_E_BASE + 42));
        ASSERT_STREQ(pace_last_message(), "something new");
        ASSERT_TRUE(strlen(pace_strerror(-(PACE_E_BASE + 42))) > 0);

        /* "Unspecified" is no answer at all. */
        fake_broker_set_error(&b, PACE_PROTOCOL_VERSION, PACE__ERROR_CODE__ERROR_UNSPECIFIED, "what");
        ASSERT_ERR(pace_reserve(p, &default_params, &g), PACE_E_PROTOCOL);

        pace_close(p);
        fake_broker_stop(&b);
}

TEST(last_message_is_sanitised_and_bounded) {
        FakeBroker b;
        pace *p = NULL;
        pace_grant g;
        char long_message[4000];
        const char *m;

        fake_broker_start(&b, MODE_ECHO);
        ASSERT_OK(pace_connect(b.path, &p));

        fake_broker_set_error(&b, PACE_PROTOCOL_VERSION, PACE__ERROR_CODE__ERROR_NO_CAPACITY,
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
        fake_broker_set_error(&b, PACE_PROTOCOL_VERSION, PACE__ERROR_CODE__ERROR_NO_CAPACITY, long_message);
        ASSERT_ERR(pace_reserve(p, &default_params, &g), PACE_E_NO_CAPACITY);
        m = pace_last_message();
        ASSERT_TRUE(m);
        ASSERT_CMP(strlen(m), <, 1024);
        ASSERT_CMP(strlen(m), >, 1000);
        ASSERT_TRUE(strncmp(m, long_message, strlen(m)) == 0);
        ASSERT_EQ((unsigned char) m[strlen(m) - 1], 0xA9);

        pace_close(p);
        fake_broker_stop(&b);
}

TEST(mismatched_body_is_protocol_error) {
        FakeBroker b;
        pace *p = NULL;
        pace_grant g;
        pace_status_report *s = NULL;

        fake_broker_start(&b, MODE_WRONG_BODY);
        ASSERT_OK(pace_connect(b.path, &p));

        ASSERT_ERR(pace_reserve(p, &default_params, &g), PACE_E_PROTOCOL);
        ASSERT_ERR(pace_release(p, 3), PACE_E_PROTOCOL);
        ASSERT_ERR(pace_status(p, &s), PACE_E_PROTOCOL);
        ASSERT_TRUE(s == NULL);
        ASSERT_TRUE(pace_last_message() == NULL);

        fake_broker_set_mode(&b, MODE_NO_BODY);
        ASSERT_ERR(pace_reserve(p, &default_params, &g), PACE_E_PROTOCOL);

        pace_close(p);
        fake_broker_stop(&b);
}

TEST(version_is_checked) {
        FakeBroker b;
        pace *p = NULL;
        pace_grant g;

        fake_broker_start(&b, MODE_WRONG_VERSION);
        ASSERT_OK(pace_connect(b.path, &p));
        ASSERT_ERR(pace_reserve(p, &default_params, &g), PACE_E_PROTOCOL);

        /* A grant in another version cannot be trusted to mean the same. */
        fake_broker_set_error(&b, PACE_PROTOCOL_VERSION + 1, PACE__ERROR_CODE__ERROR_NO_CAPACITY, "full");
        ASSERT_ERR(pace_reserve(p, &default_params, &g), PACE_E_PROTOCOL);
        fake_broker_set_error(&b, 0, PACE__ERROR_CODE__ERROR_INTERNAL, "x");
        ASSERT_ERR(pace_reserve(p, &default_params, &g), PACE_E_PROTOCOL);

        /* ...but "I do not speak your version" is understood in any version. */
        fake_broker_set_error(&b, PACE_PROTOCOL_VERSION + 1, PACE__ERROR_CODE__ERROR_UNSUPPORTED_VERSION,
                              "speak version 2");
        ASSERT_ERR(pace_reserve(p, &default_params, &g), PACE_E_UNSUPPORTED_VERSION);
        ASSERT_STREQ(pace_last_message(), "speak version 2");

        pace_close(p);
        fake_broker_stop(&b);
}

TEST(garbage_reply_is_protocol_error) {
        FakeBroker b;
        pace *p = NULL;
        pace_grant g;

        fake_broker_start(&b, MODE_GARBAGE);
        ASSERT_OK(pace_connect(b.path, &p));
        ASSERT_ERR(pace_reserve(p, &default_params, &g), PACE_E_PROTOCOL);
        ASSERT_TRUE(pace_last_message() == NULL);

        /* One bad datagram does not desynchronise the connection. */
        fake_broker_set_mode(&b, MODE_ECHO);
        ASSERT_OK(pace_reserve(p, &default_params, &g));
        ASSERT_EQ(fake_broker_get(&b, &b.n_accepted), 1);

        pace_close(p);
        fake_broker_stop(&b);
}

TEST(oversized_reply_is_protocol_error) {
        FakeBroker b;
        pace *p = NULL;
        pace_grant g;
        const char *m;

        fake_broker_start(&b, MODE_OVERSIZED);
        ASSERT_OK(pace_connect(b.path, &p));

        /* Would decode fine if read whole: only the size check can catch it. */
        ASSERT_ERR(pace_reserve(p, &default_params, &g), PACE_E_PROTOCOL);

        /* The largest legal reply is read whole. */
        fake_broker_set_mode(&b, MODE_MAX_SIZE);
        ASSERT_ERR(pace_reserve(p, &default_params, &g), PACE_E_INTERNAL);
        m = pace_last_message();
        ASSERT_TRUE(m);
        ASSERT_EQ(m[0], 'x');

        fake_broker_set_mode(&b, MODE_ECHO);
        ASSERT_OK(pace_reserve(p, &default_params, &g));
        ASSERT_EQ(fake_broker_get(&b, &b.n_accepted), 1);

        pace_close(p);
        fake_broker_stop(&b);
}

TEST(broker_closing_without_reply_is_an_error) {
        FakeBroker b;
        pace *p = NULL;
        pace_grant g;
        double t;
        int r;

        fake_broker_start(&b, MODE_CLOSE);
        ASSERT_OK(pace_connect(b.path, &p));

        t = now_sec();
        r = pace_reserve(p, &default_params, &g);
        ASSERT_TRUE(r == -ECONNRESET || r == -EPIPE);
        ASSERT_CMP(now_sec() - t, <, 5);

        /* The handle reconnects on its next call. */
        fake_broker_set_mode(&b, MODE_ECHO);
        ASSERT_OK(pace_reserve(p, &default_params, &g));
        ASSERT_EQ(fake_broker_get(&b, &b.n_accepted), 2);

        pace_close(p);
        fake_broker_stop(&b);
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

        pace_close(p);
        fake_broker_stop(&b);
}

TEST(silent_broker_times_out) {
        FakeBroker b;
        pace *p = NULL;
        pace_grant g;
        double t;

        fake_broker_start(&b, MODE_SILENT);
        ASSERT_OK(pace_connect(b.path, &p));

        t = now_sec();
        ASSERT_ERR(pace_reserve(p, &default_params, &g), -ETIMEDOUT);
        t = now_sec() - t;
        ASSERT_CMP(t, >, 9);
        ASSERT_CMP(t, <, 20);

        fake_broker_set_mode(&b, MODE_ECHO);
        ASSERT_OK(pace_reserve(p, &default_params, &g));
        ASSERT_EQ(fake_broker_get(&b, &b.n_accepted), 2);

        pace_close(p);
        fake_broker_stop(&b);
}

TEST(connect_to_missing_socket) {
        char dir[] = "/tmp/test-libpace-XXXXXX";
        char path[128];
        pace *p = NULL;

        ASSERT_TRUE(mkdtemp(dir));
        snprintf(path, sizeof(path), "%s/nothing.sock", dir);
        ASSERT_ERR(pace_connect(path, &p), -ENOENT);
        ASSERT_TRUE(p == NULL);
        ASSERT_OK(rmdir(dir));
}

TEST(connect_to_dead_socket) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        char dir[] = "/tmp/test-libpace-XXXXXX";
        pace *p = NULL;
        int fd;

        /* A socket file nobody listens on, as a crashed broker leaves behind. */
        ASSERT_TRUE(mkdtemp(dir));
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/dead.sock", dir);
        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        ASSERT_OK(fd);
        ASSERT_OK(bind(fd, (struct sockaddr *) &sa, sizeof(sa)));
        ASSERT_OK(close(fd));

        ASSERT_ERR(pace_connect(sa.sun_path, &p), -ECONNREFUSED);
        ASSERT_TRUE(p == NULL);
        ASSERT_OK(unlink(sa.sun_path));
        ASSERT_OK(rmdir(dir));
}

TEST(connect_bad_paths) {
        char path[200];
        pace *p = NULL;

        memset(path, 'a', sizeof(path) - 1);
        path[0] = '/';
        path[sizeof(path) - 1] = '\0';
        ASSERT_ERR(pace_connect(path, &p), -ENAMETOOLONG);

        /* Exactly sun_path's size leaves no room for the terminator. */
        path[sizeof(((struct sockaddr_un *) NULL)->sun_path)] = '\0';
        ASSERT_ERR(pace_connect(path, &p), -ENAMETOOLONG);

        ASSERT_ERR(pace_connect("", &p), -EINVAL);
        ASSERT_ERR(pace_connect("/tmp/x", NULL), -EINVAL);
        ASSERT_TRUE(p == NULL);
}

TEST(connect_socket_is_cloexec) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        char dir[] = "/tmp/test-libpace-XXXXXX";
        bool open_before[1024];
        pace *p = NULL;
        int listen_fd, found = 0;

        ASSERT_TRUE(mkdtemp(dir));
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/b.sock", dir);
        listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        ASSERT_OK(listen_fd);
        ASSERT_OK(bind(listen_fd, (struct sockaddr *) &sa, sizeof(sa)));
        ASSERT_OK(listen(listen_fd, 1));

        for (int fd = 0; fd < (int) ELEMENTSOF(open_before); fd++)
                open_before[fd] = fcntl(fd, F_GETFD) >= 0;

        /* The backlog accepts the connection; nobody needs to call accept(). */
        ASSERT_OK(pace_connect(sa.sun_path, &p));

        for (int fd = 0; fd < (int) ELEMENTSOF(open_before); fd++) {
                int flags;

                if (open_before[fd])
                        continue;
                flags = fcntl(fd, F_GETFD);
                if (flags < 0)
                        continue;
                ASSERT_TRUE(flags & FD_CLOEXEC);
                found++;
        }
        ASSERT_EQ(found, 1);

        pace_close(p);
        close(listen_fd);
        ASSERT_OK(unlink(sa.sun_path));
        ASSERT_OK(rmdir(dir));
}

TEST(pace_socket_env_is_honored) {
        FakeBroker b;
        pace *p = NULL;
        pace_status_report *s = NULL;

        fake_broker_start(&b, MODE_ECHO);

        ASSERT_OK(unsetenv("PACE_SOCKET"));
        ASSERT_STREQ(pace_default_socket(), PACE_DEFAULT_SOCKET);
        ASSERT_OK(setenv("PACE_SOCKET", "", 1));
        ASSERT_STREQ(pace_default_socket(), PACE_DEFAULT_SOCKET);

        ASSERT_OK(setenv("PACE_SOCKET", b.path, 1));
        ASSERT_STREQ(pace_default_socket(), b.path);
        ASSERT_OK(pace_connect(NULL, &p));
        ASSERT_OK(pace_status(p, &s));
        pace_status_report_free(s);
        ASSERT_EQ(fake_broker_get(&b, &b.n_requests), 1);
        pace_close(p);

        /* An explicit path wins over the environment. */
        ASSERT_OK(setenv("PACE_SOCKET", "/nonexistent/broker.sock", 1));
        ASSERT_OK(pace_connect(b.path, &p));
        pace_close(p);
        ASSERT_ERR(pace_connect(NULL, &p), -ENOENT);

        ASSERT_OK(unsetenv("PACE_SOCKET"));
        fake_broker_stop(&b);
}

TEST(arguments_are_validated_before_sending) {
        FakeBroker b;
        pace *p = NULL;
        pace_grant g;
        pace_status_report *s = NULL;
        pace_reserve_params params;

        fake_broker_start(&b, MODE_ECHO);
        ASSERT_OK(pace_connect(b.path, &p));

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

        ASSERT_EQ(fake_broker_get(&b, &b.n_requests), 0);

        /* The edges of the valid ranges do go out. */
        params = default_params;
        params.utilization_ppm = 1;
        ASSERT_OK(pace_reserve(p, &params, &g));
        params.utilization_ppm = PPM;
        ASSERT_OK(pace_reserve(p, &params, &g));
        ASSERT_EQ(fake_broker_get(&b, &b.n_requests), 2);

        pace_close(p);
        fake_broker_stop(&b);
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

TEST(reserve_request_carries_scope_and_tid) {
        FakeBroker b;
        pace *p = NULL;
        pace_grant g;
        Pace__Request *req;
        pace_reserve_params params = default_params;
        ThreadReserve t;
        pthread_t thread;

        fake_broker_start(&b, MODE_ECHO);
        ASSERT_OK(pace_connect(b.path, &p));

        /* Tree and process scope name no thread; the pid stays the
         * broker's to take from the connection. */
        params.scope = PACE_SCOPE_TREE;
        ASSERT_OK(pace_reserve(p, &params, &g));
        req = fake_broker_last_request(&b);
        ASSERT_TRUE(req->reserve->has_scope);
        ASSERT_EQ(req->reserve->scope, PACE__SCOPE__SCOPE_TREE);
        ASSERT_FALSE(req->reserve->has_tid);
        ASSERT_FALSE(req->reserve->has_pid);
        pace__request__free_unpacked(req, NULL);
        ASSERT_EQ(g.scope, PACE_SCOPE_TREE);

        params.scope = PACE_SCOPE_PROCESS;
        params.pid = 42;
        ASSERT_OK(pace_reserve(p, &params, &g));
        req = fake_broker_last_request(&b);
        ASSERT_FALSE(req->reserve->has_scope && req->reserve->scope != PACE__SCOPE__SCOPE_PROCESS);
        ASSERT_FALSE(req->reserve->has_tid);
        ASSERT_EQ(req->reserve->pid, 42);
        pace__request__free_unpacked(req, NULL);

        /* Thread scope, pid 0 and tid 0: the calling thread, which only the
         * client can name. Called from a second thread, so that its tid is
         * not the pid. */
        t = (ThreadReserve) { .p = p, .params = default_params };
        t.params.scope = PACE_SCOPE_THREAD;
        ASSERT_EQ(pthread_create(&thread, NULL, reserve_thread, &t), 0);
        ASSERT_EQ(pthread_join(thread, NULL), 0);
        ASSERT_OK(t.r);
        ASSERT_NE(t.tid, getpid());
        req = fake_broker_last_request(&b);
        ASSERT_TRUE(req->reserve->has_scope);
        ASSERT_EQ(req->reserve->scope, PACE__SCOPE__SCOPE_THREAD);
        ASSERT_TRUE(req->reserve->has_tid);
        ASSERT_EQ(req->reserve->tid, t.tid);
        ASSERT_TRUE(req->reserve->has_pid);
        ASSERT_EQ(req->reserve->pid, getpid());
        pace__request__free_unpacked(req, NULL);
        ASSERT_EQ(t.g.scope, PACE_SCOPE_THREAD);
        ASSERT_EQ(t.g.tid, t.tid);

        /* A named thread of the caller's own process. */
        params = default_params;
        params.scope = PACE_SCOPE_THREAD;
        params.tid = 31337;
        ASSERT_OK(pace_reserve(p, &params, &g));
        req = fake_broker_last_request(&b);
        ASSERT_EQ(req->reserve->tid, 31337);
        ASSERT_EQ(req->reserve->pid, getpid());
        pace__request__free_unpacked(req, NULL);

        /* A named thread of a named process: both go as given. */
        params.pid = 4000;
        params.tid = 4001;
        ASSERT_OK(pace_reserve(p, &params, &g));
        req = fake_broker_last_request(&b);
        ASSERT_EQ(req->reserve->scope, PACE__SCOPE__SCOPE_THREAD);
        ASSERT_EQ(req->reserve->pid, 4000);
        ASSERT_EQ(req->reserve->tid, 4001);
        pace__request__free_unpacked(req, NULL);
        ASSERT_EQ(g.tid, 4001);

        ASSERT_EQ(fake_broker_get(&b, &b.n_requests), 5);
        pace_close(p);
        fake_broker_stop(&b);
}

TEST(scope_arguments_are_validated_before_sending) {
        FakeBroker b;
        pace *p = NULL;
        pace_grant g;
        pace_reserve_params params;

        fake_broker_start(&b, MODE_ECHO);
        ASSERT_OK(pace_connect(b.path, &p));

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

        ASSERT_EQ(fake_broker_get(&b, &b.n_requests), 0);

        /* Modify never changes what a reservation covers, so it does not
         * look at scope and tid at all. */
        params = default_params;
        params.scope = (pace_scope) 99;
        params.tid = 7;
        params.pid = 3;
        ASSERT_OK(pace_modify(p, 12, &params, &g));
        ASSERT_EQ(g.id, 12);
        ASSERT_EQ(fake_broker_get(&b, &b.n_requests), 1);

        pace_close(p);
        fake_broker_stop(&b);
}

/* A chosen kind goes on the wire as it is; the default goes as no field at
 * all (slots to a broker, as before kinds; "keep it" on a change); a kind
 * outside the enum is refused before anything is sent, with a message. */
TEST(kind_travels_and_is_validated) {
        FakeBroker b;
        pace *p = NULL;
        pace_grant g;
        Pace__Request *req;
        pace_reserve_params params = default_params;

        fake_broker_start(&b, MODE_ECHO);
        ASSERT_OK(pace_connect(b.path, &p));

        static const pace_kind kinds[] = { PACE_KIND_SLOTS, PACE_KIND_SERVER, PACE_KIND_ALIGNED };
        for (size_t i = 0; i < ELEMENTSOF(kinds); i++) {
                params.kind = kinds[i];
                ASSERT_OK(pace_reserve(p, &params, &g));
                req = fake_broker_last_request(&b);
                ASSERT_TRUE(req->reserve->has_kind);
                ASSERT_EQ((int) req->reserve->kind, (int) kinds[i]);
                pace__request__free_unpacked(req, NULL);
                ASSERT_EQ(g.kind, kinds[i]);

                ASSERT_OK(pace_modify(p, 5, &params, &g));
                req = fake_broker_last_request(&b);
                ASSERT_TRUE(req->modify->has_kind);
                ASSERT_EQ((int) req->modify->kind, (int) kinds[i]);
                pace__request__free_unpacked(req, NULL);
        }
        params.kind = PACE_KIND_DEFAULT;
        ASSERT_OK(pace_modify(p, 5, &params, &g));
        req = fake_broker_last_request(&b);
        ASSERT_FALSE(req->modify->has_kind);
        pace__request__free_unpacked(req, NULL);
        unsigned sent = fake_broker_get(&b, &b.n_requests);

        params.kind = (pace_kind) 4;
        ASSERT_ERR(pace_reserve(p, &params, &g), -EINVAL);
        ASSERT_STREQ(pace_last_message(), "kind 4 does not exist: use PACE_KIND_SLOTS, PACE_KIND_SERVER, "
                     "PACE_KIND_ALIGNED or PACE_KIND_DEFAULT");
        params.kind = (pace_kind) -1;
        ASSERT_ERR(pace_reserve(p, &params, &g), -EINVAL);
        ASSERT_ERR(pace_modify(p, 5, &params, &g), -EINVAL);
        ASSERT_CONTAINS(pace_last_message(), "kind -1 does not exist");
        ASSERT_EQ(fake_broker_get(&b, &b.n_requests), sent);

        pace_close(p);
        fake_broker_stop(&b);
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

static uint64_t next_at(uint64_t period, uint64_t phase, uint64_t now) {
        pace_grant g = { .period_ns = period, .phase_ns = phase };

        return pace_next_allocation(&g, now);
}

TEST(next_allocation_arithmetic) {
        const uint64_t M = UINT64_MAX;

        /* 50 ms period, allocations at 10 ms past each multiple. */
        ASSERT_EQ(next_at(50, 10, 0), 10);
        ASSERT_EQ(next_at(50, 10, 9), 10);
        ASSERT_EQ(next_at(50, 10, 10), 10); /* exactly on a start: that start */
        ASSERT_EQ(next_at(50, 10, 11), 60);
        ASSERT_EQ(next_at(50, 10, 49), 60);
        ASSERT_EQ(next_at(50, 10, 50), 60);
        ASSERT_EQ(next_at(50, 10, 60), 60);
        ASSERT_EQ(next_at(50, 10, 1000000), 1000010);

        /* Phase 0: the multiples of the period. */
        ASSERT_EQ(next_at(50, 0, 0), 0);
        ASSERT_EQ(next_at(50, 0, 1), 50);
        ASSERT_EQ(next_at(50, 0, 100), 100);
        ASSERT_EQ(next_at(50, 0, 101), 150);

        /* The last phase of the period. */
        ASSERT_EQ(next_at(50, 49, 49), 49);
        ASSERT_EQ(next_at(50, 49, 50), 99);

        /* Realistic values: 40 ms period, 12.345 ms phase, a day of uptime. */
        ASSERT_TRUE(next_at(40000000, 12345000, UINT64_C(86400000000000) + 1) ==
                    UINT64_C(86400000000000) + 12345000);

        /* A phase of a period or more (a confused broker) still gives a
         * start on the grid. */
        ASSERT_EQ(next_at(50, 60, 0), 10);
        ASSERT_EQ(next_at(50, 60, 11), 60);

        /* No period: nothing to wait for. */
        ASSERT_EQ(next_at(0, 10, 12345), 12345);
        ASSERT_TRUE(pace_next_allocation(NULL, 777) == 777);

        /* Huge values: neither the steps nor the sum may wrap. */
        ASSERT_TRUE(next_at(M, M - 1, 0) == M - 1);
        ASSERT_TRUE(next_at(M, M - 1, M - 1) == M - 1);
        ASSERT_TRUE(next_at(M, 0, M - 1) == M); /* M % M == 0 */
        ASSERT_TRUE(next_at(M, 0, M) == M);
        ASSERT_TRUE(next_at(M, 5, M - 1) == M); /* the next is past the end: saturates */
        ASSERT_TRUE(next_at(M - 1, M - 2, 1) == M - 2);
        ASSERT_TRUE(next_at(UINT64_C(1) << 63, (UINT64_C(1) << 63) - 1, (UINT64_C(1) << 63) + 1) == M);
        ASSERT_TRUE(next_at(UINT64_C(1) << 63, 1, (UINT64_C(1) << 63) + 2) == M); /* 2^64 + 1 saturates */
        ASSERT_TRUE(next_at(UINT64_C(1) << 63, 0, M) == M);
        ASSERT_TRUE(next_at(1, 0, M) == M);
        ASSERT_TRUE(next_at(1, 0, 12345) == 12345);
        ASSERT_TRUE(next_at(10, 3, M - 4) == M - 2); /* M is 5 modulo 10 */
}

static uint64_t monotonic_ns(void) {
        struct timespec ts;

        ASSERT_OK(clock_gettime(CLOCK_MONOTONIC, &ts));
        return (uint64_t) ts.tv_sec * NSEC_PER_SEC + (uint64_t) ts.tv_nsec;
}

/* A unit test on a shared VM: returning early is a bug, returning late by
 * less than this is scheduling noise. */
#define WAIT_LATE_TOLERANCE_NS (50 * NSEC_PER_MSEC)

TEST(wait_next_allocation_sleeps_to_the_start) {
        pace_grant g = { .period_ns = 20 * NSEC_PER_MSEC, .phase_ns = 7 * NSEC_PER_MSEC };

        for (unsigned i = 0; i < 10; i++) {
                uint64_t before, after, start = 0;

                before = monotonic_ns();
                ASSERT_OK(pace_wait_next_allocation(&g, &start));
                after = monotonic_ns();

                ASSERT_EQ(start % g.period_ns, g.phase_ns);
                ASSERT_CMP(start, >=, before);
                ASSERT_CMP(start - before, <=, g.period_ns);
                ASSERT_CMP(after, >=, start);
                ASSERT_CMP(after - start, <, WAIT_LATE_TOLERANCE_NS);
        }

        /* A long period with the start far ahead, to see that it is really
         * waited for and not rounded to something near. */
        g = (pace_grant) { .period_ns = 10 * NSEC_PER_SEC };
        g.phase_ns = (monotonic_ns() + 150 * NSEC_PER_MSEC) % g.period_ns;
        uint64_t before = monotonic_ns(), start = 0;
        ASSERT_OK(pace_wait_next_allocation(&g, &start));
        uint64_t after = monotonic_ns();
        ASSERT_CMP(start - before, <=, 150 * NSEC_PER_MSEC);
        ASSERT_CMP(start - before, >=, 100 * NSEC_PER_MSEC);
        ASSERT_CMP(after, >=, start);
        ASSERT_CMP(after - start, <, WAIT_LATE_TOLERANCE_NS);

        /* ret_start_ns may be NULL. */
        g = (pace_grant) { .period_ns = 5 * NSEC_PER_MSEC, .phase_ns = 1 };
        ASSERT_OK(pace_wait_next_allocation(&g, NULL));

        g = (pace_grant) {};
        ASSERT_ERR(pace_wait_next_allocation(&g, &start), -EINVAL);
        ASSERT_ERR(pace_wait_next_allocation(NULL, &start), -EINVAL);
}

static void on_alarm(int sig) {
}

TEST(wait_next_allocation_reports_eintr) {
        struct sigaction sa = { .sa_handler = on_alarm, .sa_flags = SA_RESTART }, old;
        /* Repeating: a one-shot that fired before the sleep began would
         * leave it to sleep the half hour. */
        struct itimerval it = { .it_value = { .tv_usec = 50000 }, .it_interval = { .tv_usec = 50000 } };
        const struct itimerval off = {};
        pace_grant g = { .period_ns = 3600 * NSEC_PER_SEC };
        uint64_t before, start = 12345;

        /* The next start half an hour away; a signal cuts the sleep short,
         * even with SA_RESTART (clock_nanosleep is never restarted). */
        g.phase_ns = (monotonic_ns() + 1800 * NSEC_PER_SEC) % g.period_ns;
        ASSERT_OK(sigaction(SIGALRM, &sa, &old));
        ASSERT_OK(setitimer(ITIMER_REAL, &it, NULL));
        before = monotonic_ns();
        ASSERT_ERR(pace_wait_next_allocation(&g, &start), -EINTR);
        ASSERT_CMP(monotonic_ns() - before, <, 10 * NSEC_PER_SEC);
        ASSERT_EQ(start, 12345);
        ASSERT_OK(setitimer(ITIMER_REAL, &off, NULL));
        ASSERT_OK(sigaction(SIGALRM, &old, NULL));
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

        pace_close(p);
        fake_broker_stop(&b);
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

TEST(destructors_accept_null) {
        pace_close(NULL);
        pace_status_report_free(NULL);
}

TEST_MAIN()
