/* SPDX-License-Identifier: MIT */
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "explain.h"
#include "hook-core.h"
#include "macro.h"
#include "pace-limits.h"
#include "parse-util.h"

static const struct {
        const char *name;
        Pace__Kind kind;
} kinds[] = {
        { "slots", PACE__KIND__KIND_SLOTS },
        { "server", PACE__KIND__KIND_SERVER },
        { "aligned", PACE__KIND__KIND_ALIGNED },
};

/* One key=value pair (or the bare word "required") into r; have says
 * which keys were seen, so that none is given twice. */
static int pair_parse(char *pair, OciReservation *r, unsigned *have, char *why, size_t why_size) {
        enum { PERIOD = 1, UTIL = 2, CPU = 4, KIND = 8, REQUIRED = 16 };
        char *value = strchr(pair, '=');
        unsigned key;
        int e;

        if (value)
                *value++ = '\0';
        if (strcmp(pair, "required") == 0 && !value)
                key = REQUIRED;
        else if (!value)
                return explain(why, why_size, "\"%s\" is not a key=value pair (keys: period, util, cpu, kind; "
                               "or the word required)", pair), -EINVAL;
        else if (strcmp(pair, "period") == 0)
                key = PERIOD;
        else if (strcmp(pair, "util") == 0)
                key = UTIL;
        else if (strcmp(pair, "cpu") == 0)
                key = CPU;
        else if (strcmp(pair, "kind") == 0)
                key = KIND;
        else
                return explain(why, why_size, "unknown key \"%s\" (keys: period, util, cpu, kind, required)", pair),
                       -EINVAL;
        if (*have & key)
                return explain(why, why_size, "\"%s\" is given twice", pair), -EINVAL;
        *have |= key;

        switch (key) {
        case PERIOD:
                e = parse_duration_ns(value, &r->period_ns);
                if (e < 0)
                        return explain(why, why_size, "period \"%s\" is not a duration with a unit (e.g. 20ms)", value),
                               -EINVAL;
                return 0;
        case UTIL:
                e = parse_utilization_ppm(value, &r->utilization_ppm);
                if (e < 0)
                        return explain(why, why_size, "util \"%s\" is not a share of one CPU above 0 (e.g. 30%%)",
                                       value), -EINVAL;
                return 0;
        case CPU: {
                uint32_t cpu;
                if (parse_uint32(value, &cpu) < 0 || cpu > INT32_MAX)
                        return explain(why, why_size, "cpu \"%s\" is not a CPU number", value), -EINVAL;
                r->cpu = (int32_t) cpu;
                return 0;
        }
        case KIND:
                for (size_t i = 0; i < ELEMENTSOF(kinds); i++)
                        if (strcmp(value, kinds[i].name) == 0) {
                                r->kind = kinds[i].kind;
                                return 0;
                        }
                return explain(why, why_size, "kind \"%s\" is none of slots, server, aligned", value), -EINVAL;
        default:
                r->required = true;
                return 0;
        }
}

int oci_reservation_parse(const char *value, OciReservation *ret, char *why, size_t why_size) {
        OciReservation r = { .cpu = -1, .kind = PACE__KIND__KIND_UNSPECIFIED };
        char buf[512];
        unsigned have = 0;

        if (!value || strlen(value) >= sizeof(buf))
                return explain(why, why_size, "the value is missing or longer than %zu bytes", sizeof(buf) - 1),
                       -EINVAL;
        snprintf(buf, sizeof(buf), "%s", value);
        /* ';' too: podman's --annotation splits its value at commas. */
        for (char *save = NULL, *pair = strtok_r(buf, ",; ", &save); pair; pair = strtok_r(NULL, ",; ", &save)) {
                int e = pair_parse(pair, &r, &have, why, why_size);
                if (e < 0)
                        return e;
        }
        if (!(have & 1) || !(have & 2))
                return explain(why, why_size, "period and util are both needed, e.g. period=20ms,util=30%%"), -EINVAL;
        *ret = r;
        return 0;
}

/* A string member, copied into buf; absent leaves buf empty. */
static int string_member(const cJSON *o, const char *name, char *buf, size_t size, char *why, size_t why_size) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

        buf[0] = '\0';
        if (!v)
                return 0;
        if (!cJSON_IsString(v) || strlen(v->valuestring) >= size)
                return explain(why, why_size, "\"%s\" is not a string of at most %zu bytes", name, size - 1),
                       -EINVAL;
        snprintf(buf, size, "%s", v->valuestring);
        return 0;
}

static int state_from(const cJSON *root, OciState *ret, char *why, size_t why_size) {
        OciState s = { 0 };
        int r;

        if (!cJSON_IsObject(root))
                return explain(why, why_size, "the state is not a JSON object"), -EINVAL;
        r = string_member(root, "id", s.id, sizeof(s.id), why, why_size);
        if (r < 0)
                return r;
        r = string_member(root, "status", s.status, sizeof(s.status), why, why_size);
        if (r < 0)
                return r;
        const cJSON *pid = cJSON_GetObjectItemCaseSensitive(root, "pid");
        if (pid) {
                /* A pid is a positive int; 0 is what a stopped container's
                 * state may carry. */
                if (!cJSON_IsNumber(pid) || pid->valuedouble < 0 || pid->valuedouble > INT32_MAX ||
                    pid->valuedouble != (double) (int32_t) pid->valuedouble)
                        return explain(why, why_size, "\"pid\" is not a process id"), -EINVAL;
                s.pid = (pid_t) pid->valuedouble;
        }
        const cJSON *annotations = cJSON_GetObjectItemCaseSensitive(root, "annotations");
        if (annotations && !cJSON_IsObject(annotations))
                return explain(why, why_size, "\"annotations\" is not an object"), -EINVAL;
        const cJSON *value = cJSON_GetObjectItemCaseSensitive(annotations, OCI_ANNOTATION);
        if (value) {
                char inner[400];
                if (!cJSON_IsString(value))
                        return explain(why, why_size, "annotation %s is not a string", OCI_ANNOTATION), -EINVAL;
                if (oci_reservation_parse(value->valuestring, &s.want, inner, sizeof(inner)) < 0)
                        return explain(why, why_size, "annotation %s=\"%.100s\": %s", OCI_ANNOTATION,
                                       value->valuestring, inner), -EINVAL;
                s.annotated = true;
        }
        *ret = s;
        return 0;
}

int oci_state_parse(const char *json, size_t size, OciState *ret, char *why, size_t why_size) {
        if (size > OCI_STATE_MAX)
                return explain(why, why_size, "the state is over %u bytes", OCI_STATE_MAX), -EINVAL;
        cJSON *root = cJSON_ParseWithLength(json, size);
        if (!root)
                return explain(why, why_size, "the state is not JSON"), -EINVAL;
        int r = state_from(root, ret, why, why_size);
        cJSON_Delete(root);
        return r;
}

void oci_request_build(const OciReservation *want, pid_t pid, uid_t uid, uint64_t start_time, Pace__Request *req,
                       Pace__ReserveRequest *body, Pace__Caller *caller) {
        pace__request__init(req);
        pace__reserve_request__init(body);
        pace__caller__init(caller);
        body->period_ns = want->period_ns;
        body->utilization_ppm = want->utilization_ppm;
        body->has_pid = true;
        body->pid = (int32_t) pid;
        body->has_scope = true;
        body->scope = PACE__SCOPE__SCOPE_TREE;
        if (want->cpu >= 0) {
                body->has_cpu = true;
                body->cpu = want->cpu;
        }
        if (want->kind != PACE__KIND__KIND_UNSPECIFIED) {
                body->has_kind = true;
                body->kind = want->kind;
        }
        caller->uid = (uint32_t) uid;
        caller->pid = (int32_t) pid;
        caller->start_time = start_time;
        req->version = PACE_PROTOCOL_VERSION;
        req->body_case = PACE__REQUEST__BODY_RESERVE;
        req->reserve = body;
        req->on_behalf_of = caller;
}
