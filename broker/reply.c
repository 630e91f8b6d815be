/* SPDX-License-Identifier: MIT */
/* Replies. Each builder packs a complete Response; the caller frees it.
 * And refusals, which broker_handle() packs. */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "broker-internal.h"

int pack_response(Pace__Response *resp, uint8_t **ret, size_t *ret_size) {
        size_t size = pace__response__get_packed_size(resp);
        uint8_t *buf;

        if (size > PACE_MAX_MESSAGE_SIZE)
                return -EMSGSIZE;
        buf = malloc(size ? size : 1);
        if (!buf)
                return -ENOMEM;
        pace__response__pack(resp, buf);
        *ret = buf;
        *ret_size = size;
        return 0;
}

int broker_error_reply(int code, const char *message, uint8_t **ret_reply, size_t *ret_reply_size) {
        Pace__Response resp = PACE__RESPONSE__INIT;
        Pace__Error err = PACE__ERROR__INIT;

        err.code = (Pace__ErrorCode) code;
        err.message = (char *) message;
        resp.version = PACE_PROTOCOL_VERSION;
        resp.body_case = PACE__RESPONSE__BODY_ERROR;
        resp.error = &err;
        return pack_response(&resp, ret_reply, ret_reply_size);
}

int refuse(Refusal *ret, Pace__ErrorCode code, const char *fmt, ...) {
        va_list ap;

        assert(code > 0);
        va_start(ap, fmt);
        vsnprintf(ret->message, sizeof(ret->message), fmt, ap);
        va_end(ap);
        ret->code = code;
        return (int) code;
}

/* pace.proto's Kind and the planner's: the wire has an "unspecified" 0,
 * which never reaches the planner. */
static Pace__Kind wire_kind(PlanKind kind) {
        switch (kind) {
        case PLAN_KIND_SERVER:
                return PACE__KIND__KIND_SERVER;
        case PLAN_KIND_ALIGNED:
                return PACE__KIND__KIND_ALIGNED;
        default:
                return PACE__KIND__KIND_SLOTS;
        }
}

void grant_from_entry(const Broker *b, const PlanEntry *e, Pace__Grant *g) {
        pace__grant__init(g);
        g->id = e->id;
        g->pid = e->pid;
        g->uid = (uint32_t) e->uid;
        g->cpu = e->cpu;
        g->period_ns = (uint64_t) e->period_slots * b->config.slot_ns;
        g->budget_ns = (uint64_t) e->budget_slots * b->config.slot_ns;
        g->slot_ns = b->config.slot_ns;
        g->requested_period_ns = e->requested_period_ns;
        g->requested_utilization_ppm = e->requested_utilization_ppm;
        g->has_scope = true;
        g->scope = (Pace__Scope) e->scope;
        g->has_kind = true;
        g->kind = wire_kind(plan_flags_kind(e->flags));
        if (e->scope == PACE_TABLE_SCOPE_THREAD) {
                g->has_tid = true;
                g->tid = e->tid;
        }
        uint32_t phase;
        if (plan_phase(b->plan, e->id, &phase) == 0) {
                g->has_phase_ns = true;
                g->phase_ns = (uint64_t) phase * b->config.slot_ns;
        }
        const Reservation *res = lookup_reservation(b, e->id);
        if (res && res->threads > 0) {
                g->has_threads = true;
                g->threads = res->threads;
        }
        if (e->flags & PACE_RES_ON_BEHALF) {
                g->has_on_behalf = true;
                g->on_behalf = true;
        }
}

void grant_add_pieces(const Broker *b, uint64_t id, Pace__Grant *g, GrantPieces *store) {
        size_t n = 0;

        for (size_t i = 0; i < plan_n_entries(b->plan) && n < PACE_MAX_CPUS; i++) {
                const PlanEntry *e = plan_entry(b->plan, i);
                if (e->id != id || !(e->flags & PACE_RES_PIECE))
                        continue;
                pace__piece__init(&store->piece[n]);
                store->piece[n].cpu = e->cpu;
                store->piece[n].budget_ns = (uint64_t) e->budget_slots * b->config.slot_ns;
                store->ptr[n] = &store->piece[n];
                n++;
        }
        if (n > 1) {
                g->n_pieces = n;
                g->pieces = store->ptr;
        }
}

/* "CPU 1" or, split, "CPUs 0+1": from a grant with its pieces added. */
const char *format_grant_cpus(const Pace__Grant *g, char *buf, size_t size) {
        size_t used;

        if (g->n_pieces < 2) {
                snprintf(buf, size, "CPU %" PRIi32, g->cpu);
                return buf;
        }
        used = (size_t) snprintf(buf, size, "CPUs ");
        for (size_t i = 0; i < g->n_pieces && used < size; i++)
                used += (size_t) snprintf(buf + used, size - used, "%s%" PRIi32, i ? "+" : "", g->pieces[i]->cpu);
        return buf;
}

int grant_reply(Broker *b, const PlanEntry *entry, uint8_t **reply, size_t *reply_size) {
        Pace__Response resp = PACE__RESPONSE__INIT;
        Pace__Grant grant;
        GrantPieces pieces;

        grant_from_entry(b, entry, &grant);
        grant_add_pieces(b, entry->id, &grant, &pieces);
        resp.version = PACE_PROTOCOL_VERSION;
        resp.body_case = PACE__RESPONSE__BODY_GRANT;
        resp.grant = &grant;
        return pack_response(&resp, reply, reply_size);
}

int admin_reply(uint8_t **reply, size_t *reply_size, const char *message) {
        Pace__Response resp = PACE__RESPONSE__INIT;
        Pace__AdminReply admin = PACE__ADMIN_REPLY__INIT;

        admin.message = (char *) message;
        resp.version = PACE_PROTOCOL_VERSION;
        resp.body_case = PACE__RESPONSE__BODY_ADMIN;
        resp.admin = &admin;
        return pack_response(&resp, reply, reply_size);
}

Pace__ErrorCode plan_refusal_code(PlanRefusal r) {
        switch (r) {
        case PLAN_REFUSED_RANGE:
        case PLAN_REFUSED_CPU:
                return PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT;
        case PLAN_REFUSED_USER_LIMIT:
        case PLAN_REFUSED_BROKER_LIMIT:
                return PACE__ERROR_CODE__ERROR_LIMIT_EXCEEDED;
        case PLAN_REFUSED_NO_ROOM:
                return PACE__ERROR_CODE__ERROR_NO_CAPACITY;
        }
        return PACE__ERROR_CODE__ERROR_INTERNAL;
}
