/* SPDX-License-Identifier: MIT */
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
#include "test.h"

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

/* g as the answer, with the kind the request named (or none), as a broker
 * echoes it. */
static void answer_grant(Pace__Response *resp, Pace__Grant *g, protobuf_c_boolean has_kind, Pace__Kind kind) {
        g->has_kind = has_kind;
        g->kind = kind;
        resp->body_case = PACE__RESPONSE__BODY_GRANT;
        resp->grant = g;
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
                answer_grant(&resp, &grant, req->reserve->has_kind, req->reserve->kind);
                break;
        case PACE__REQUEST__BODY_MODIFY:
                fill_grant(&grant, req->modify->id, 4242, req->modify->has_cpu ? req->modify->cpu : 1,
                           req->modify->period_ns, req->modify->utilization_ppm);
                answer_grant(&resp, &grant, req->modify->has_kind, req->modify->kind);
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

void fake_broker_start(FakeBroker *b, FakeMode mode) {
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

void fake_broker_stop(FakeBroker *b) {
        ASSERT_EQ(write(b->stop_pipe[1], "x", 1), 1);
        ASSERT_EQ(pthread_join(b->thread, NULL), 0);
        close(b->stop_pipe[0]);
        close(b->stop_pipe[1]);
        close(b->listen_fd);
        unlink(b->path);
        rmdir(b->dir);
        pthread_mutex_destroy(&b->lock);
        if (b->last_decoded)
                pace__request__free_unpacked(TAKE_PTR(b->last_decoded), NULL);
}

pace *fake_broker_connect(FakeBroker *b, FakeMode mode) {
        pace *p = NULL;

        fake_broker_start(b, mode);
        ASSERT_OK(pace_connect(b->path, &p));
        return p;
}

void fake_broker_disconnect(FakeBroker *b, pace *p) {
        pace_close(p);
        fake_broker_stop(b);
}

void fake_broker_set_mode(FakeBroker *b, FakeMode mode) {
        pthread_mutex_lock(&b->lock);
        b->mode = mode;
        pthread_mutex_unlock(&b->lock);
}

void fake_broker_set_error(FakeBroker *b, uint32_t version, uint32_t code, const char *message) {
        pthread_mutex_lock(&b->lock);
        b->mode = MODE_ERROR;
        b->error_version = version;
        b->error_code = code;
        b->error_message = message;
        pthread_mutex_unlock(&b->lock);
}

unsigned fake_broker_get(FakeBroker *b, const unsigned *counter) {
        unsigned v;

        pthread_mutex_lock(&b->lock);
        v = *counter;
        pthread_mutex_unlock(&b->lock);
        return v;
}

/* Frees the one decoded before: a test never holds two. */
Pace__Request *fake_broker_last_request(FakeBroker *b) {
        if (b->last_decoded)
                pace__request__free_unpacked(TAKE_PTR(b->last_decoded), NULL);

        pthread_mutex_lock(&b->lock);
        b->last_decoded = pace__request__unpack(NULL, b->last_request_size, b->last_request);
        pthread_mutex_unlock(&b->lock);
        ASSERT_TRUE(b->last_decoded);
        return b->last_decoded;
}

const pace_reserve_params default_params = {
        .period_ns = 50000000,
        .utilization_ppm = 600000,
        .pid = 0,
        .cpu = -1,
};
