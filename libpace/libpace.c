/* SPDX-License-Identifier: MIT */

/* libpace: the client side of the pace wire protocol (proto/pace.proto).
 *
 * One request, one reply, each a single SOCK_SEQPACKET datagram. The protocol
 * carries no request ids, so a handle is only usable while requests and replies
 * stay paired: that is why calls on one handle are serialised by a mutex, and
 * why a connection whose pairing is in doubt (a timed-out reply may still
 * arrive later, the broker may have gone away) is dropped and re-established on
 * the next call rather than reused. Reconnecting is harmless because a
 * reservation belongs to its process, not to the connection.
 *
 * Library code never prints; the broker's explanation of a refusal is handed to
 * the caller through pace_last_message(). */

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "macro.h"
#include "pace-limits.h"
#include "pace.pb-c.h"
#include "pace/pace.h"
#include "proto-cleanup.h"
#include "socket-util.h"
#include "time-util.h"

#define REPLY_TIMEOUT_USEC ((uint64_t) PACE_REPLY_TIMEOUT_SEC * 1000000)

#define _public_ __attribute__((visibility("default")))

/* pace_kind is sent as it is: its numbers are the wire's. */
_Static_assert((int) PACE_KIND_DEFAULT == (int) PACE__KIND__KIND_UNSPECIFIED &&
               (int) PACE_KIND_SLOTS == (int) PACE__KIND__KIND_SLOTS &&
               (int) PACE_KIND_SERVER == (int) PACE__KIND__KIND_SERVER &&
               (int) PACE_KIND_ALIGNED == (int) PACE__KIND__KIND_ALIGNED,
               "pace_kind follows pace.proto's Kind");
#if defined(__LP64__)
/* Programs built against libpace 0.1's header pass and receive these
 * structures: kind went into padding, nothing else moved. */
_Static_assert(sizeof(pace_reserve_params) == 32 && offsetof(pace_reserve_params, tid) == 24,
               "pace_reserve_params keeps its 0.1 layout");
_Static_assert(sizeof(pace_grant) == 144 && offsetof(pace_grant, period_ns) == 24 &&
               offsetof(pace_grant, accounting) == 80 && offsetof(pace_grant, split_cpus) == 136,
               "pace_grant keeps its 0.1 layout");
#endif

/* Long enough for the broker to answer under load, short enough that a wedged
 * broker cannot freeze a client forever. */
#define PACE_REPLY_TIMEOUT_SEC 10

/* Error codes below this are refusals (mapped to -(PACE_E_BASE + code));
 * anything else would collide with PACE_E_PROTOCOL. */
#define PACE_ERROR_CODE_LIMIT 100

/* Room for any message a user can act on. Kept in a fixed thread-local buffer
 * rather than malloc'd so that nothing leaks when a thread exits and nothing
 * dangles if the library is unloaded. */
#define PACE_LAST_MESSAGE_MAX 1024

struct pace {
        pthread_mutex_t lock;
        int fd; /* -EBADF: not connected, reconnect on next call */
        char *path;
        /* One more byte than the largest legal message, so that an oversized
         * reply shows as a full buffer even where MSG_TRUNC is not reported. */
        uint8_t buf[PACE_MAX_MESSAGE_SIZE + 1];
};

static _Thread_local char last_message_buf[PACE_LAST_MESSAGE_MAX];
static _Thread_local bool last_message_set;

static void clear_last_message(void) {
        last_message_set = false;
        last_message_buf[0] = '\0';
}

/* The text ends up on users' terminals: control characters (an escape
 * sequence from a confused or hostile broker) are neutralised here, once, so
 * that no caller has to remember to. */
static void set_last_message(const char *m) {
        size_t n, j = 0;

        if (!m) {
                clear_last_message();
                return;
        }

        n = strlen(m);
        if (n >= sizeof(last_message_buf)) {
                n = sizeof(last_message_buf) - 1;
                /* Do not cut a UTF-8 sequence in half. */
                while (n > 0 && ((unsigned char) m[n] & 0xC0) == 0x80)
                        n--;
        }

        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char) m[i];

                if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7F)
                        c = '?';
                else if (c == 0xC2 && i + 1 < n && (unsigned char) m[i + 1] >= 0x80 &&
                         (unsigned char) m[i + 1] <= 0x9F) {
                        /* U+0080..U+009F, the C1 controls: CSI among them. */
                        last_message_buf[j++] = '?';
                        i++;
                        continue;
                }
                last_message_buf[j++] = (char) c;
        }
        last_message_buf[j] = '\0';
        last_message_set = true;
}

/* Refused before anything is sent; the message says how to ask instead,
 * as the broker's own refusals do. */
static int utilization_out_of_range(uint32_t ppm) {
        char m[256];

        if (ppm == 0)
                snprintf(m, sizeof(m), "utilization 0: a reservation needs some CPU time");
        else
                snprintf(m, sizeof(m), "utilization %" PRIu32 " ppm is more than one CPU: a reservation runs on one "
                         "CPU at a time; for more, reserve each thread (PACE_SCOPE_THREAD) or process separately",
                         ppm);
        set_last_message(m);
        return -EINVAL;
}

/* The enum's storage may hold any int a caller put there (or, from a
 * program built against a header without kinds, whatever its padding held):
 * refused before anything is sent, with a message as the broker's. */
static int kind_out_of_range(pace_kind kind) {
        char m[160];

        snprintf(m, sizeof(m), "kind %d does not exist: use PACE_KIND_SLOTS, PACE_KIND_SERVER, PACE_KIND_ALIGNED "
                 "or PACE_KIND_DEFAULT", (int) kind);
        set_last_message(m);
        return -EINVAL;
}

/* Absent means slots to a broker (as to one that predates kinds) on a
 * reservation, and "keep it" on a change: only a chosen kind is sent. */
static void set_wire_kind(pace_kind kind, protobuf_c_boolean *ret_has, Pace__Kind *ret_kind) {
        *ret_has = kind != PACE_KIND_DEFAULT;
        *ret_kind = (Pace__Kind) kind;
}

_public_ const char *pace_last_message(void) {
        return last_message_set ? last_message_buf : NULL;
}

_public_ const char *pace_default_socket(void) {
        /* secure_getenv: a set-uid program linking libpace must not be pointed
         * at a socket of the invoking user's choosing. */
        const char *e = secure_getenv("PACE_SOCKET");

        return e && *e ? e : PACE_DEFAULT_SOCKET;
}

_public_ void pace_close(pace *p) {
        if (!p)
                return;

        safe_close(p->fd);
        pthread_mutex_destroy(&p->lock);
        free(p->path);
        free(p);
}

DEFINE_TRIVIAL_CLEANUP_FUNC(pace *, pace_close);

_public_ int pace_connect(const char *socket_path, pace **ret) {
        _cleanup_(pace_closep) pace *p = NULL;
        int r;

        clear_last_message();

        if (!ret)
                return -EINVAL;

        if (!socket_path)
                socket_path = pace_default_socket();

        p = calloc(1, sizeof(*p));
        if (!p)
                return -ENOMEM;
        p->fd = -EBADF;

        r = pthread_mutex_init(&p->lock, NULL);
        if (r != 0) {
                free(TAKE_PTR(p));
                return -r;
        }

        p->path = strdup(socket_path);
        if (!p->path)
                return -ENOMEM;

        /* Connect now, so that a missing broker is reported by pace_connect()
         * and not by whichever call happens to come first. */
        r = seqpacket_connect(p->path, REPLY_TIMEOUT_USEC, &p->fd);
        if (r < 0)
                return r;

        *ret = TAKE_PTR(p);
        return 0;
}

static void disconnect(pace *p) {
        p->fd = safe_close(p->fd);
}

/* Called with p->lock held. */
static int send_request(pace *p, const Pace__Request *req) {
        size_t size;
        ssize_t n;

        size = pace__request__get_packed_size(req);
        if (size > PACE_MAX_MESSAGE_SIZE)
                return -EMSGSIZE;
        pace__request__pack(req, p->buf);

        do
                n = send(p->fd, p->buf, size, MSG_NOSIGNAL);
        while (n < 0 && errno == EINTR);
        if (n < 0) {
                int r = errno == EAGAIN ? -ETIMEDOUT : negative_errno();

                disconnect(p);
                return r;
        }
        if ((size_t) n != size) {
                /* Cannot happen on a SOCK_SEQPACKET socket; if it does, the
                 * broker saw half a request and the connection is useless. */
                disconnect(p);
                return -EIO;
        }

        return 0;
}

/* Called with p->lock held. Returns the datagram's size. */
static int receive_reply(pace *p, size_t *ret_size) {
        struct iovec iov = { .iov_base = p->buf, .iov_len = sizeof(p->buf) };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
        ssize_t n;

        do
                n = recvmsg(p->fd, &mh, 0);
        while (n < 0 && errno == EINTR);
        if (n < 0) {
                /* A late reply would be taken for the answer to the next
                 * request: the connection must go. */
                int r = errno == EAGAIN ? -ETIMEDOUT : negative_errno();

                disconnect(p);
                return r;
        }
        if (n == 0) {
                /* End of stream (an empty datagram is no valid Response
                 * either): the broker went away without answering. */
                disconnect(p);
                return -ECONNRESET;
        }

        /* The rest of an oversized datagram was discarded by the kernel, so
         * the pairing still holds and the connection may stay. */
        if ((mh.msg_flags & MSG_TRUNC) || (size_t) n > PACE_MAX_MESSAGE_SIZE)
                return PACE_E_PROTOCOL;

        *ret_size = (size_t) n;
        return 0;
}

/* Sends req and decodes the reply. Only transport and decoding are checked
 * here; whether the reply answers the request is check_response()'s job. */
static int exchange(pace *p, const Pace__Request *req, Pace__Response **ret) {
        Pace__Response *resp = NULL;
        size_t size = 0;
        int r;

        pthread_mutex_lock(&p->lock);

        if (p->fd < 0) {
                r = seqpacket_connect(p->path, REPLY_TIMEOUT_USEC, &p->fd);
                if (r < 0)
                        goto finish;
        }

        r = send_request(p, req);
        if (r < 0)
                goto finish;

        r = receive_reply(p, &size);
        if (r < 0)
                goto finish;

        resp = pace__response__unpack(NULL, size, p->buf);
        if (!resp)
                r = PACE_E_PROTOCOL;

finish:
        pthread_mutex_unlock(&p->lock);

        if (r < 0)
                return r;
        *ret = resp;
        return 0;
}

static int map_error(const Pace__Error *e) {
        /* The message is kept even for codes this library does not know, so
         * that a newer broker's refusal still explains itself. */
        set_last_message(e->message);

        if (e->code <= 0 || e->code >= PACE_ERROR_CODE_LIMIT)
                return PACE_E_PROTOCOL;
        return -(PACE_E_BASE + (int) e->code);
}

static int check_response(const Pace__Response *resp, Pace__Response__BodyCase expected) {
        if (resp->body_case == PACE__RESPONSE__BODY_ERROR) {
                if (!resp->error)
                        return PACE_E_PROTOCOL;
                /* A broker that does not speak our version answers in its own
                 * version; that refusal is the one worth reporting. */
                if (resp->version != PACE_PROTOCOL_VERSION &&
                    resp->error->code != PACE__ERROR_CODE__ERROR_UNSUPPORTED_VERSION)
                        return PACE_E_PROTOCOL;
                return map_error(resp->error);
        }

        if (resp->version != PACE_PROTOCOL_VERSION)
                return PACE_E_PROTOCOL;
        if (resp->body_case != expected)
                return PACE_E_PROTOCOL;

        switch (expected) {
        case PACE__RESPONSE__BODY_GRANT:
                return resp->grant ? 0 : PACE_E_PROTOCOL;
        case PACE__RESPONSE__BODY_RELEASED:
                return resp->released ? 0 : PACE_E_PROTOCOL;
        case PACE__RESPONSE__BODY_STATUS:
                return resp->status ? 0 : PACE_E_PROTOCOL;
        case PACE__RESPONSE__BODY_ADMIN:
                return resp->admin && resp->admin->message ? 0 : PACE_E_PROTOCOL;
        default:
                return PACE_E_PROTOCOL;
        }
}

static void grant_from_wire(const Pace__Grant *g, pace_grant *ret) {
        /* Absent optional fields read as 0, which is what a broker that does
         * not know them means: process scope, no count, no report yet. A scope
         * this library does not know is passed on rather than refused: a
         * status lists other clients' reservations, and one newer kind must
         * not hide all the others. */
        *ret = (pace_grant) {
                .id = g->id,
                .pid = (pid_t) g->pid,
                .uid = (uid_t) g->uid,
                .cpu = g->cpu,
                /* Absent: a broker that predates kinds, which grants slots. */
                .kind = g->has_kind ? (pace_kind) g->kind : PACE_KIND_SLOTS,
                .period_ns = g->period_ns,
                .budget_ns = g->budget_ns,
                .slot_ns = g->slot_ns,
                .requested_period_ns = g->requested_period_ns,
                .requested_utilization_ppm = g->requested_utilization_ppm,
                .scope = g->has_scope ? (pace_scope) g->scope : PACE_SCOPE_PROCESS,
                .tid = g->has_tid ? (pid_t) g->tid : 0,
                .threads = g->has_threads ? g->threads : 0,
                .phase_ns = g->has_phase_ns ? g->phase_ns : 0,
        };

        /* CPU numbers outside 0..63 cannot be managed CPUs: ignored. */
        for (size_t i = 0; g->n_pieces > 1 && i < g->n_pieces; i++)
                if (g->pieces[i]->cpu >= 0 && g->pieces[i]->cpu < 64)
                        ret->split_cpus |= UINT64_C(1) << g->pieces[i]->cpu;

        if (g->accounting)
                ret->accounting = (pace_accounting) {
                        .valid = 1,
                        .window_ns = g->accounting->window_ns,
                        .delivered_ns = g->accounting->delivered_ns,
                        .cpu_time_ns = g->accounting->cpu_time_ns,
                        .periods = g->accounting->periods,
                        .periods_blocked = g->accounting->periods_blocked,
                        .periods_wanted_more = g->accounting->periods_wanted_more,
                };
}

/* Sends a request answered by a grant; expected_id 0: any. */
static int grant_exchange(pace *p, const Pace__Request *req, uint64_t expected_id, pace_grant *ret_grant) {
        _cleanup_(pace_response_freep) Pace__Response *resp = NULL;
        int r;

        r = exchange(p, req, &resp);
        if (r < 0)
                return r;
        r = check_response(resp, PACE__RESPONSE__BODY_GRANT);
        if (r < 0)
                return r;
        /* A grant for another reservation would be a broker bug. */
        if (expected_id != 0 && resp->grant->id != expected_id)
                return PACE_E_PROTOCOL;
        grant_from_wire(resp->grant, ret_grant);
        return 0;
}

_public_ int pace_reserve(pace *p, const pace_reserve_params *params, pace_grant *ret_grant) {
        Pace__Request req = PACE__REQUEST__INIT;
        Pace__ReserveRequest body = PACE__RESERVE_REQUEST__INIT;
        pid_t pid, tid;

        clear_last_message();

        if (!p || !params || !ret_grant)
                return -EINVAL;
        if (params->period_ns == 0)
                return -EINVAL;
        if (params->utilization_ppm < 1 || params->utilization_ppm > PPM)
                return utilization_out_of_range(params->utilization_ppm);
        if (params->pid < 0 || params->cpu < -1 || params->tid < 0)
                return -EINVAL;
        /* The enum's storage may hold any int a caller put there. */
        if ((unsigned) params->scope > PACE_SCOPE_TREE)
                return -EINVAL;
        if ((unsigned) params->kind > PACE_KIND_ALIGNED)
                return kind_out_of_range(params->kind);
        /* A thread id outside thread scope would be silently ignored, and a
         * thread of another process cannot be guessed. */
        if (params->tid != 0 && params->scope != PACE_SCOPE_THREAD)
                return -EINVAL;
        if (params->scope == PACE_SCOPE_THREAD && params->pid != 0 && params->tid == 0)
                return -EINVAL;

        pid = params->pid;
        tid = params->tid;
        if (params->scope == PACE_SCOPE_THREAD && pid == 0) {
                /* The broker knows the caller's pid from the kernel but not
                 * which of its threads is asking: that is only known here. A
                 * thread id means something only with its process, so the
                 * pid goes along. */
                pid = getpid();
                if (tid == 0)
                        tid = gettid();
        }

        body.period_ns = params->period_ns;
        body.utilization_ppm = params->utilization_ppm;
        if (pid > 0) {
                body.has_pid = true;
                body.pid = pid;
        }
        /* Absent means process scope, as to a broker that predates scopes. */
        if (params->scope != PACE_SCOPE_PROCESS) {
                body.has_scope = true;
                body.scope = (Pace__Scope) params->scope;
        }
        if (params->scope == PACE_SCOPE_THREAD) {
                body.has_tid = true;
                body.tid = tid;
        }
        if (params->cpu >= 0) {
                body.has_cpu = true;
                body.cpu = params->cpu;
        }
        set_wire_kind(params->kind, &body.has_kind, &body.kind);

        req.version = PACE_PROTOCOL_VERSION;
        req.body_case = PACE__REQUEST__BODY_RESERVE;
        req.reserve = &body;
        return grant_exchange(p, &req, 0, ret_grant);
}

/* params->pid, ->scope and ->tid are not looked at: what a reservation
 * covers is fixed when it is made. Its kind may change. */
_public_ int pace_modify(pace *p, uint64_t id, const pace_reserve_params *params, pace_grant *ret_grant) {
        Pace__Request req = PACE__REQUEST__INIT;
        Pace__ModifyRequest body = PACE__MODIFY_REQUEST__INIT;

        clear_last_message();
        if (!p || !params || !ret_grant || params->period_ns == 0 || params->cpu < -1)
                return -EINVAL;
        if (params->utilization_ppm < 1 || params->utilization_ppm > PPM)
                return utilization_out_of_range(params->utilization_ppm);
        if ((unsigned) params->kind > PACE_KIND_ALIGNED)
                return kind_out_of_range(params->kind);

        body.id = id;
        body.period_ns = params->period_ns;
        body.utilization_ppm = params->utilization_ppm;
        if (params->cpu >= 0) {
                body.has_cpu = true;
                body.cpu = params->cpu;
        }
        set_wire_kind(params->kind, &body.has_kind, &body.kind);
        req.version = PACE_PROTOCOL_VERSION;
        req.body_case = PACE__REQUEST__BODY_MODIFY;
        req.modify = &body;
        return grant_exchange(p, &req, id, ret_grant);
}

_public_ int pace_release(pace *p, uint64_t id) {
        _cleanup_(pace_response_freep) Pace__Response *resp = NULL;
        Pace__Request req = PACE__REQUEST__INIT;
        Pace__ReleaseRequest body = PACE__RELEASE_REQUEST__INIT;
        int r;

        clear_last_message();

        if (!p)
                return -EINVAL;

        body.id = id;
        req.version = PACE_PROTOCOL_VERSION;
        req.body_case = PACE__REQUEST__BODY_RELEASE;
        req.release = &body;

        r = exchange(p, &req, &resp);
        if (r < 0)
                return r;

        r = check_response(resp, PACE__RESPONSE__BODY_RELEASED);
        if (r < 0)
                return r;

        /* Confirming a different reservation would be a broker bug, and the
         * caller must not believe its own is gone. */
        if (resp->released->id != id)
                return PACE_E_PROTOCOL;

        return 0;
}

/* reload and reset: root's requests, answered with a sentence. */
static int admin_request(pace *p, Pace__Request__BodyCase body_case) {
        _cleanup_(pace_response_freep) Pace__Response *resp = NULL;
        Pace__Request req = PACE__REQUEST__INIT;
        Pace__ReloadRequest reload = PACE__RELOAD_REQUEST__INIT;
        Pace__ResetRequest reset = PACE__RESET_REQUEST__INIT;
        int r;

        clear_last_message();
        if (!p)
                return -EINVAL;

        req.version = PACE_PROTOCOL_VERSION;
        req.body_case = body_case;
        if (body_case == PACE__REQUEST__BODY_RELOAD)
                req.reload = &reload;
        else
                req.reset = &reset;

        r = exchange(p, &req, &resp);
        if (r < 0)
                return r;
        r = check_response(resp, PACE__RESPONSE__BODY_ADMIN);
        if (r < 0)
                return r;
        set_last_message(resp->admin->message);
        return 0;
}

_public_ int pace_reload(pace *p) {
        return admin_request(p, PACE__REQUEST__BODY_RELOAD);
}

_public_ int pace_reset(pace *p) {
        return admin_request(p, PACE__REQUEST__BODY_RESET);
}

_public_ void pace_status_report_free(pace_status_report *report) {
        if (!report)
                return;

        free(report->reservations);
        free(report->cpus);
        free(report->on_behalf);
        free(report->nice_levels);
        free(report);
}

DEFINE_TRIVIAL_CLEANUP_FUNC(pace_status_report *, pace_status_report_free);

static int status_from_wire(const Pace__StatusReply *s, pace_status_report **ret) {
        _cleanup_(pace_status_report_freep) pace_status_report *report = NULL;

        /* The limits bound what a well-behaved broker can send; anything
         * beyond them is not a status this client should trust. */
        if (s->n_reservations > PACE_MAX_RESERVATIONS || s->n_cpus > PACE_MAX_CPUS ||
            s->n_nice_levels > PACE_MAX_NICE_THREADS)
                return PACE_E_PROTOCOL;

        report = calloc(1, sizeof(*report));
        if (!report)
                return -ENOMEM;

        report->non_rt_share_ppm = s->non_rt_share_ppm;
        report->generation = s->generation;

        if (s->n_reservations > 0) {
                report->reservations = calloc(s->n_reservations, sizeof(pace_grant));
                report->on_behalf = calloc(s->n_reservations, 1);
                if (!report->reservations || !report->on_behalf)
                        return -ENOMEM;
        }
        for (size_t i = 0; i < s->n_reservations; i++) {
                if (!s->reservations[i])
                        return PACE_E_PROTOCOL;
                grant_from_wire(s->reservations[i], &report->reservations[i]);
                report->on_behalf[i] = s->reservations[i]->has_on_behalf && s->reservations[i]->on_behalf;
        }
        report->n_reservations = s->n_reservations;

        if (s->n_nice_levels > 0) {
                report->nice_levels = calloc(s->n_nice_levels, sizeof(pace_nice_level));
                if (!report->nice_levels)
                        return -ENOMEM;
        }
        for (size_t i = 0; i < s->n_nice_levels; i++) {
                if (!s->nice_levels[i])
                        return PACE_E_PROTOCOL;
                report->nice_levels[i] = (pace_nice_level) {
                        .pid = (pid_t) s->nice_levels[i]->pid,
                        .tid = (pid_t) s->nice_levels[i]->tid,
                        .nice = s->nice_levels[i]->nice,
                };
        }
        report->n_nice_levels = s->n_nice_levels;

        if (s->n_cpus > 0) {
                report->cpus = calloc(s->n_cpus, sizeof(pace_cpu_status));
                if (!report->cpus)
                        return -ENOMEM;
        }
        for (size_t i = 0; i < s->n_cpus; i++) {
                const Pace__CpuStatus *c = s->cpus[i];

                if (!c)
                        return PACE_E_PROTOCOL;
                report->cpus[i] = (pace_cpu_status) {
                        .cpu = c->cpu,
                        .reserved_ppm = c->reserved_ppm,
                        .free_ppm = c->free_ppm,
                        .frame_ns = c->frame_ns,
                };
        }
        report->n_cpus = s->n_cpus;

        *ret = TAKE_PTR(report);
        return 0;
}

_public_ int pace_status(pace *p, pace_status_report **ret) {
        _cleanup_(pace_response_freep) Pace__Response *resp = NULL;
        Pace__Request req = PACE__REQUEST__INIT;
        Pace__StatusRequest body = PACE__STATUS_REQUEST__INIT;
        int r;

        clear_last_message();

        if (!p || !ret)
                return -EINVAL;

        req.version = PACE_PROTOCOL_VERSION;
        req.body_case = PACE__REQUEST__BODY_STATUS;
        req.status = &body;

        r = exchange(p, &req, &resp);
        if (r < 0)
                return r;

        r = check_response(resp, PACE__RESPONSE__BODY_STATUS);
        if (r < 0)
                return r;

        return status_from_wire(resp->status, ret);
}

_public_ uint64_t pace_next_allocation(const pace_grant *grant, uint64_t now_ns) {
        uint64_t period, phase, into, wait;

        if (!grant || grant->period_ns == 0)
                return now_ns;

        period = grant->period_ns;
        /* A broker's phase is below the period; reducing it anyway keeps the
         * result the next start for any value. */
        phase = grant->phase_ns % period;
        into = now_ns % period;
        /* Both differences are below the period, so nothing here can wrap;
         * only the final sum can, near the end of the clock's range. */
        wait = into <= phase ? phase - into : period - (into - phase);
        if (wait > UINT64_MAX - now_ns)
                return UINT64_MAX;
        return now_ns + wait;
}

_public_ int pace_wait_next_allocation(const pace_grant *grant, uint64_t *ret_start_ns) {
        struct timespec ts;
        uint64_t start;
        int r;

        if (!grant || grant->period_ns == 0)
                return -EINVAL;

        if (clock_gettime(CLOCK_MONOTONIC, &ts) < 0)
                return negative_errno();
        start = pace_next_allocation(grant, timespec_ns(&ts));

        /* An absolute deadline: time spent before the sleep begins (being
         * preempted right here) does not push the wake-up later. */
        ts = (struct timespec) {
                .tv_sec = (time_t) (start / NSEC_PER_SEC),
                .tv_nsec = (long) (start % NSEC_PER_SEC),
        };
        r = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
        if (r != 0)
                return -r;

        if (ret_start_ns)
                *ret_start_ns = start;
        return 0;
}

_public_ const char *pace_strerror(int err) {
        const char *s;

        switch (err) {
        case 0:
                return "Success";
        case PACE_E_MALFORMED:
                return "The broker could not decode the request";
        case PACE_E_UNSUPPORTED_VERSION:
                return "The broker does not speak this protocol version";
        case PACE_E_INVALID_ARGUMENT:
                return "The broker rejected an argument as out of range";
        case PACE_E_NO_CAPACITY:
                return "Not enough free CPU time for the reservation";
        case PACE_E_NO_SUCH_PROCESS:
                return "No such process";
        case PACE_E_PERMISSION_DENIED:
                return "Not permitted to reserve for that process";
        case PACE_E_NO_SUCH_RESERVATION:
                return "No such reservation";
        case PACE_E_LIMIT_EXCEEDED:
                return "A reservation limit would be exceeded";
        case PACE_E_INTERNAL:
                return "Internal error in the broker";
        case PACE_E_BUSY:
                return "The broker is busy";
        case PACE_E_PROTOCOL:
                return "Invalid or unexpected reply from the broker";
        }

        if (err < -PACE_E_BASE && err > -(PACE_E_BASE + PACE_ERROR_CODE_LIMIT))
                return "Refused by the broker for a reason this libpace does not know";

        /* strerrordesc_np returns static text, unlike strerror, which may use
         * a per-call buffer and is not required to be thread-safe. */
        if (err == INT_MIN)
                return "Unknown error";
        s = strerrordesc_np(err < 0 ? -err : err);
        return s ? s : "Unknown error";
}
