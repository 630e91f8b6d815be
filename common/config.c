/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <grp.h>

#include "config.h"
#include "explain.h"
#include "macro.h"

/* A config file is a few hundred bytes; anything near this is a mistake (or an
 * attack on a daemon that reads it before dropping privileges). */
#define CONFIG_MAX_SIZE (1024u * 1024u)

/* Messages quote at most this much of a user-supplied string, so a 1 MiB key
 * cannot turn into a 1 MiB log line. */
#define QUOTE_MAX 48

typedef enum KeyId {
        KEY_COMMENT,
        KEY_NON_RT_SHARE,
        KEY_SLOT_US,
        KEY_NON_RT_MAX_GAP_MS,
        KEY_POLICY,
        KEY_MAX_FRAME_MS,
        KEY_MAX_RESERVATIONS_PER_USER,
        KEY_MAX_UTILIZATION_PER_USER,
        KEY_MAX_CONNECTIONS,
        KEY_CLIENT_TIMEOUT_MS,
        KEY_SWITCH_COST_US,
        KEY_WAITING,
        KEY_CPUS,
        KEY_MAX_CONNECTIONS_PER_USER,
        KEY_MAX_REQUESTS_PER_SECOND,
        KEY_ALLOWED_GROUPS,
        KEY_MAX_THREADS_PER_RESERVATION,
        KEY_MAX_RESERVATIONS,
        KEY_MAX_MESSAGE_BYTES,
        KEY_RESERVE_ROOT_PROCESSES,
        KEY_RTKIT,
        KEY_RTKIT_PERIOD_US,
        KEY_RTKIT_UTILIZATION,
        KEY_RTKIT_KIND,
        KEY_RTKIT_MAX_REALTIME_PRIORITY,
        KEY_RTKIT_MIN_NICE_LEVEL,
        KEY_RTKIT_RTTIME_USEC_MAX,
        _KEY_MAX,
} KeyId;

typedef enum KeyKind {
        KIND_ANY,     /* "$comment": documentation, never interpreted */
        KIND_INTEGER,
        KIND_NUMBER,
        KIND_CHOICE,
        KIND_CPUS,
        KIND_GROUPS,
        KIND_BOOL,
} KeyKind;

typedef struct KeyDef {
        const char *name;
        KeyKind kind;
        double min, max;
        bool min_exclusive;
        const char *unit;             /* appended to the allowed range, for the reader */
        const char *const *choices;   /* KIND_CHOICE: index is the enum value */
} KeyDef;

static const char *const policy_names[] = {
        [PACE_POLICY_EDF] = "edf",
        [PACE_POLICY_RM] = "rm",
        NULL,
};

static const char *const waiting_names[] = {
        [PACE_WAITING_NICE] = "nice",
        [PACE_WAITING_FREEZE] = "freeze",
        NULL,
};

static const char *const rtkit_kind_names[] = {
        [PACE_RTKIT_KIND_SERVER] = "server",
        [PACE_RTKIT_KIND_SLOTS] = "slots",
        NULL,
};

static const KeyDef keys[_KEY_MAX] = {
        [KEY_COMMENT] = { "$comment", KIND_ANY, 0, 0, false, NULL, NULL },
        /* Below 5% the kernel's RT throttling and the fair server no longer have
         * the room they need (config/README.md). */
        [KEY_NON_RT_SHARE] = { "non_rt_share", KIND_NUMBER, 0.05, 0.95, false, NULL, NULL },
        [KEY_SLOT_US] = { "slot_us", KIND_INTEGER, 50, 100000, false, " (microseconds)", NULL },
        [KEY_NON_RT_MAX_GAP_MS] = { "non_rt_max_gap_ms", KIND_NUMBER, 0, 60000, true, " (milliseconds)", NULL },
        [KEY_POLICY] = { "policy", KIND_CHOICE, 0, 0, false, NULL, policy_names },
        [KEY_MAX_FRAME_MS] = { "max_frame_ms", KIND_INTEGER, 1, 60000, false, " (milliseconds)", NULL },
        [KEY_MAX_RESERVATIONS_PER_USER] = { "max_reservations_per_user", KIND_INTEGER, 1, PACE_MAX_RESERVATIONS, false, NULL, NULL },
        [KEY_MAX_UTILIZATION_PER_USER] = { "max_utilization_per_user", KIND_NUMBER, 0.01, 64, false, " (CPUs)", NULL },
        [KEY_MAX_CONNECTIONS] = { "max_connections", KIND_INTEGER, 1, 65536, false, NULL, NULL },
        [KEY_CLIENT_TIMEOUT_MS] = { "client_timeout_ms", KIND_INTEGER, 100, 3600000, false, " (milliseconds)", NULL },
        [KEY_SWITCH_COST_US] = { "switch_cost_us", KIND_NUMBER, 0, 1000, false, " (microseconds)", NULL },
        [KEY_WAITING] = { "waiting", KIND_CHOICE, 0, 0, false, NULL, waiting_names },
        [KEY_CPUS] = { "cpus", KIND_CPUS, 0, PACE_MAX_CPUS - 1, false, NULL, NULL },
        [KEY_MAX_CONNECTIONS_PER_USER] = { "max_connections_per_user", KIND_INTEGER, 1, 65536, false, NULL, NULL },
        [KEY_MAX_REQUESTS_PER_SECOND] = { "max_requests_per_second", KIND_INTEGER, 1, 100000, false, " (per user)", NULL },
        [KEY_ALLOWED_GROUPS] = { "allowed_groups", KIND_GROUPS, 0, 0, false, NULL, NULL },
        [KEY_MAX_THREADS_PER_RESERVATION] = { "max_threads_per_reservation", KIND_INTEGER, 1, 1024, false, NULL, NULL },
        [KEY_MAX_RESERVATIONS] = { "max_reservations", KIND_INTEGER, 1, PACE_MAX_RESERVATIONS, false, NULL, NULL },
        [KEY_MAX_MESSAGE_BYTES] = { "max_message_bytes", KIND_INTEGER, 256, PACE_MAX_MESSAGE_SIZE, false, NULL, NULL },
        [KEY_RESERVE_ROOT_PROCESSES] = { "reserve_root_processes", KIND_BOOL, 0, 0, false, NULL, NULL },
        [KEY_RTKIT] = { "rtkit", KIND_BOOL, 0, 0, false, NULL, NULL },
        [KEY_RTKIT_PERIOD_US] = { "rtkit_period_us", KIND_INTEGER, 100, 1000000, false, " (microseconds)", NULL },
        [KEY_RTKIT_UTILIZATION] = { "rtkit_utilization", KIND_NUMBER, 0.001, 0.95, false, NULL, NULL },
        [KEY_RTKIT_KIND] = { "rtkit_kind", KIND_CHOICE, 0, 0, false, NULL, rtkit_kind_names },
        /* 99 is the dispatcher's own; a client may never be told it gets it. */
        [KEY_RTKIT_MAX_REALTIME_PRIORITY] = { "rtkit_max_realtime_priority", KIND_INTEGER, 1, 98, false, NULL, NULL },
        [KEY_RTKIT_MIN_NICE_LEVEL] = { "rtkit_min_nice_level", KIND_INTEGER, -20, 19, false, NULL, NULL },
        [KEY_RTKIT_RTTIME_USEC_MAX] = { "rtkit_rttime_usec_max", KIND_INTEGER, 1000, 3600000000.0, false,
                                        " (microseconds)", NULL },
};

void pace_config_init(PaceConfig *config) {
        *config = (PaceConfig) {
                .non_rt_share_ppm = 250000,
                .slot_ns = 1000 * NSEC_PER_USEC,
                .non_rt_max_gap_ns = 20 * NSEC_PER_MSEC,
                .policy = PACE_POLICY_EDF,
                .max_frame_ns = 1200 * NSEC_PER_MSEC,
                .max_reservations_per_user = 16,
                .max_utilization_per_user_ppm = PPM,
                .max_connections = 256,
                .client_timeout_ns = 10000 * NSEC_PER_MSEC,
                .switch_cost_ns = 75 * NSEC_PER_USEC,
                .waiting = PACE_WAITING_NICE,
                .max_connections_per_user = 64,
                .max_requests_per_second = 50,
                .max_threads_per_reservation = 32,
                .max_reservations = PACE_MAX_RESERVATIONS,
                .max_message_bytes = PACE_MAX_MESSAGE_SIZE,
                .reserve_root_processes = false,
                .rtkit = true,
                /* Audio: PipeWire's quantum is 5-21 ms and its cycle takes a
                 * fraction of a millisecond; 1 ms in every 10 ms holds bursts
                 * well beyond that and admits a few such threads per CPU. */
                .rtkit_period_ns = 10000 * NSEC_PER_USEC,
                .rtkit_utilization_ppm = 100000,
                .rtkit_kind = PACE_RTKIT_KIND_SERVER,
                .rtkit_max_realtime_priority = 20,
                .rtkit_min_nice_level = -15,
                .rtkit_rttime_usec_max = 200000,
                .allowed_groups_set = false,
                .cpus_set = false,
                .n_cpus = 0,
        };
}

/* A refusal of the document: the explanation in why (if wanted), -EINVAL. */
#define config_error(why, why_size, ...) (explain((why), (why_size), __VA_ARGS__), -EINVAL)

/* JSON-style quoting, non-ASCII and control bytes as \xNN, long strings cut:
 * messages end up in the journal and on terminals. */
static const char *quote(char *buf, size_t size, const char *s) {
        size_t n = 0, i;

        buf[n++] = '"';
        for (i = 0; s[i] && n + 8 < size; i++) {
                unsigned char c = (unsigned char) s[i];

                if (i >= QUOTE_MAX)
                        break;
                if (c == '"' || c == '\\')
                        n += (size_t) snprintf(buf + n, size - n, "\\%c", c);
                else if (c < 0x20 || c >= 0x7f)
                        n += (size_t) snprintf(buf + n, size - n, "\\x%02x", c);
                else
                        buf[n++] = (char) c;
        }
        buf[n++] = '"';
        if (s[i] && n + 4 <= size) {
                memcpy(buf + n, "...", 3);
                n += 3;
        }
        buf[n] = '\0';
        return buf;
}

/* Shortest text that reads back as the same double, without exponents for
 * ordinary integers ("1000", not "1e+03"). */
static const char *format_number(char *buf, size_t size, double v) {
        if (v > -1e15 && v < 1e15 && v == (double) (int64_t) v)
                snprintf(buf, size, "%" PRIi64, (int64_t) v);
        else if (v > 1e308 || v < -1e308)
                /* Only overflowing literals like 1e999 get here, as infinity. */
                snprintf(buf, size, "%s", v > 0 ? "a number beyond 1e308" : "a number below -1e308");
        else {
                snprintf(buf, size, "%.15g", v);
                if (strtod(buf, NULL) != v)
                        snprintf(buf, size, "%.17g", v);
        }
        return buf;
}

static const char *json_type_name(const cJSON *item) {
        if (cJSON_IsString(item))
                return "a string";
        if (cJSON_IsNumber(item))
                return "a number";
        if (cJSON_IsBool(item))
                return "a boolean";
        if (cJSON_IsNull(item))
                return "null";
        if (cJSON_IsArray(item))
                return "an array";
        if (cJSON_IsObject(item))
                return "an object";
        return "an unknown value";
}

/* "a string (\"1000\")": the type and, where short, the value itself. */
static const char *describe_value(char *buf, size_t size, const cJSON *item) {
        char v[QUOTE_MAX * 4 + 16];

        if (cJSON_IsString(item))
                snprintf(buf, size, "a string (%s)", quote(v, sizeof(v), item->valuestring));
        else if (cJSON_IsNumber(item))
                snprintf(buf, size, "a number (%s)", format_number(v, sizeof(v), item->valuedouble));
        else if (cJSON_IsBool(item))
                snprintf(buf, size, "a boolean (%s)", cJSON_IsTrue(item) ? "true" : "false");
        else
                snprintf(buf, size, "%s", json_type_name(item));
        return buf;
}

static const char *describe_allowed(char *buf, size_t size, const KeyDef *def) {
        char lo[32], hi[32];

        switch (def->kind) {
        case KIND_INTEGER:
                snprintf(buf, size, "an integer from %s to %s%s",
                         format_number(lo, sizeof(lo), def->min), format_number(hi, sizeof(hi), def->max),
                         def->unit ?: "");
                break;
        case KIND_NUMBER:
                if (def->min_exclusive)
                        snprintf(buf, size, "a number greater than %s and at most %s%s",
                                 format_number(lo, sizeof(lo), def->min),
                                 format_number(hi, sizeof(hi), def->max), def->unit ?: "");
                else
                        snprintf(buf, size, "a number from %s to %s%s",
                                 format_number(lo, sizeof(lo), def->min),
                                 format_number(hi, sizeof(hi), def->max), def->unit ?: "");
                break;
        case KIND_CHOICE: {
                size_t n = 0;

                buf[0] = '\0';
                for (size_t i = 0; def->choices[i] && n < size; i++)
                        n += (size_t) snprintf(buf + n, size - n, "%s\"%s\"",
                                               i == 0 ? "" : def->choices[i + 1] ? ", " : " or ",
                                               def->choices[i]);
                break;
        }
        case KIND_CPUS:
                snprintf(buf, size, "an array of 1 to %u distinct CPU numbers from 0 to %u",
                         PACE_MAX_CPUS, PACE_MAX_CPUS - 1);
                break;
        case KIND_GROUPS:
                snprintf(buf, size, "an array of 1 to %u existing group names or numeric gids",
                         PACE_MAX_ALLOWED_GROUPS);
                break;
        case KIND_BOOL:
                snprintf(buf, size, "true or false");
                break;
        case KIND_ANY:
        default:
                snprintf(buf, size, "anything");
                break;
        }
        return buf;
}

static int error_wrong_type(char *why, size_t why_size, const KeyDef *def, const char *expected, const cJSON *item) {
        char value[QUOTE_MAX * 4 + 32], allowed[128];

        /* A number with a fraction where an integer belongs reads better as just the number. */
        if (cJSON_IsNumber(item))
                format_number(value, sizeof(value), item->valuedouble);
        else
                describe_value(value, sizeof(value), item);

        return config_error(why, why_size, "\"%s\": expected %s, got %s; allowed: %s", def->name, expected, value,
                            describe_allowed(allowed, sizeof(allowed), def));
}

static int error_out_of_range(char *why, size_t why_size, const KeyDef *def, double v) {
        char value[32], allowed[128];

        return config_error(why, why_size, "\"%s\": %s is out of range; allowed: %s", def->name,
                            format_number(value, sizeof(value), v), describe_allowed(allowed, sizeof(allowed), def));
}

static unsigned edit_distance(const char *a, const char *b) {
        unsigned row[64], la = (unsigned) strlen(a), lb = (unsigned) strlen(b);

        /* Only ever asked about short keys; longer ones are no typo of ours. */
        if (la >= ELEMENTSOF(row) || lb >= ELEMENTSOF(row))
                return UINT32_MAX;

        for (unsigned j = 0; j <= lb; j++)
                row[j] = j;
        for (unsigned i = 1; i <= la; i++) {
                unsigned diag = row[0];

                row[0] = i;
                for (unsigned j = 1; j <= lb; j++) {
                        unsigned up = row[j];
                        unsigned best = diag + (a[i - 1] != b[j - 1]);

                        best = MIN(best, up + 1);
                        best = MIN(best, row[j - 1] + 1);
                        row[j] = best;
                        diag = up;
                }
        }
        return row[lb];
}

static int error_unknown_key(char *why, size_t why_size, const char *key) {
        char q[QUOTE_MAX * 4 + 16], known[1024], hint[96] = "";
        unsigned best = 3; /* more than two edits away is not a typo */
        size_t n = 0;

        for (size_t i = 0; i < _KEY_MAX; i++) {
                unsigned d = edit_distance(key, keys[i].name);

                /* Never past the end, should the list outgrow the buffer. */
                if (n < sizeof(known))
                        n += (size_t) snprintf(known + n, sizeof(known) - n, "%s%s", i == 0 ? "" : ", ",
                                               keys[i].name);
                if (d < best) {
                        best = d;
                        snprintf(hint, sizeof(hint), "; did you mean \"%s\"?", keys[i].name);
                }
        }

        return config_error(why, why_size, "unknown key %s (known keys: %s)%s", quote(q, sizeof(q), key), known, hint);
}

/* Reads an integer-valued key, refusing fractions and out-of-range values. */
static int get_integer(const cJSON *item, const KeyDef *def, int64_t *ret, char *why, size_t why_size) {
        double v;

        if (!cJSON_IsNumber(item))
                return error_wrong_type(why, why_size, def, "an integer", item);
        v = item->valuedouble;
        /* The bound keeps the cast defined; every integer key has a far smaller range. */
        if (!(v > -1e15 && v < 1e15) || v != (double) (int64_t) v) {
                if (v > -1e15 && v < 1e15)
                        return error_wrong_type(why, why_size, def, "an integer", item);
                return error_out_of_range(why, why_size, def, v);
        }
        if (v < def->min || v > def->max)
                return error_out_of_range(why, why_size, def, v);

        *ret = (int64_t) v;
        return 0;
}

static int get_number(const cJSON *item, const KeyDef *def, double *ret, char *why, size_t why_size) {
        double v;

        if (!cJSON_IsNumber(item))
                return error_wrong_type(why, why_size, def, "a number", item);
        v = item->valuedouble;
        /* Written so that NaN (which JSON cannot express, but still) fails too. */
        if (!(def->min_exclusive ? v > def->min : v >= def->min) || !(v <= def->max))
                return error_out_of_range(why, why_size, def, v);

        *ret = v;
        return 0;
}

static int get_choice(const cJSON *item, const KeyDef *def, int *ret, char *why, size_t why_size) {
        char q[QUOTE_MAX * 4 + 16], allowed[128];

        if (!cJSON_IsString(item))
                return error_wrong_type(why, why_size, def, "a string", item);
        for (int i = 0; def->choices[i]; i++)
                if (strcmp(item->valuestring, def->choices[i]) == 0) {
                        *ret = i;
                        return 0;
                }

        return config_error(why, why_size, "\"%s\": %s is not allowed; allowed: %s", def->name,
                            quote(q, sizeof(q), item->valuestring), describe_allowed(allowed, sizeof(allowed), def));
}

static int get_bool(const cJSON *item, const KeyDef *def, bool *ret, char *why, size_t why_size) {
        if (!cJSON_IsBool(item))
                return error_wrong_type(why, why_size, def, "true or false", item);
        *ret = cJSON_IsTrue(item);
        return 0;
}

static int get_cpus(const cJSON *item, const KeyDef *def, PaceConfig *c, char *why, size_t why_size) {
        char allowed[128], value[QUOTE_MAX * 4 + 32];
        uint64_t mask = 0;
        const cJSON *e;
        int index = 0;

        _Static_assert(PACE_MAX_CPUS <= 64, "the CPU set is kept in a 64-bit mask");

        if (!cJSON_IsArray(item))
                return error_wrong_type(why, why_size, def, "an array", item);
        if (!item->child)
                return config_error(why, why_size, "\"%s\": [] is empty; allowed: %s (leave the key out to use all online CPUs)",
                                    def->name, describe_allowed(allowed, sizeof(allowed), def));

        cJSON_ArrayForEach(e, item) {
                double v;

                if (!cJSON_IsNumber(e) || (e->valuedouble > -1e15 && e->valuedouble < 1e15 &&
                                           e->valuedouble != (double) (int64_t) e->valuedouble))
                        return config_error(why, why_size, "\"%s\"[%d]: expected an integer, got %s; allowed: %s",
                                            def->name, index,
                                            cJSON_IsNumber(e) ? format_number(value, sizeof(value), e->valuedouble)
                                                              : describe_value(value, sizeof(value), e),
                                            describe_allowed(allowed, sizeof(allowed), def));
                v = e->valuedouble;
                if (!(v >= 0 && v <= def->max))
                        return config_error(why, why_size, "\"%s\"[%d]: %s is out of range; allowed: %s", def->name,
                                            index, format_number(value, sizeof(value), v),
                                            describe_allowed(allowed, sizeof(allowed), def));
                /* Distinct values in 0..63 cannot exceed 64 entries, so a duplicate
                 * is found before any count limit could matter. */
                if (mask & (UINT64_C(1) << (unsigned) v))
                        return config_error(why, why_size, "\"%s\": CPU %u is listed twice; allowed: %s", def->name,
                                            (unsigned) v, describe_allowed(allowed, sizeof(allowed), def));
                mask |= UINT64_C(1) << (unsigned) v;
                index++;
        }

        c->cpus_set = true;
        c->n_cpus = 0;
        for (unsigned cpu = 0; cpu < PACE_MAX_CPUS; cpu++)
                if (mask & (UINT64_C(1) << cpu))
                        c->cpus[c->n_cpus++] = (int32_t) cpu;
        return 0;
}

/* Group names are resolved once, here: a name that does not exist is a
 * mistake worth refusing to start over, not a silent "nobody may ask". */
static int get_groups(const cJSON *item, const KeyDef *def, PaceConfig *c, char *why, size_t why_size) {
        char allowed[128], value[QUOTE_MAX * 4 + 32];
        const cJSON *e;
        uint32_t n = 0;
        int index = 0;

        if (!cJSON_IsArray(item))
                return error_wrong_type(why, why_size, def, "an array", item);
        if (!item->child)
                return config_error(why, why_size, "\"%s\": [] would let only root ask; allowed: %s (leave the key out "
                                    "to let every local user ask)", def->name,
                                    describe_allowed(allowed, sizeof(allowed), def));
        cJSON_ArrayForEach(e, item) {
                uint32_t gid;

                if (n >= PACE_MAX_ALLOWED_GROUPS)
                        return config_error(why, why_size, "\"%s\": more than %u groups; allowed: %s", def->name,
                                            PACE_MAX_ALLOWED_GROUPS, describe_allowed(allowed, sizeof(allowed), def));
                if (cJSON_IsString(e)) {
                        struct group *g = getgrnam(e->valuestring);
                        if (!g)
                                return config_error(why, why_size, "\"%s\"[%d]: group %s does not exist; allowed: %s",
                                                    def->name, index, quote(value, sizeof(value), e->valuestring),
                                                    describe_allowed(allowed, sizeof(allowed), def));
                        gid = (uint32_t) g->gr_gid;
                } else if (cJSON_IsNumber(e) && e->valuedouble >= 0 && e->valuedouble < 4294967295.0 &&
                           e->valuedouble == (double) (uint32_t) e->valuedouble) {
                        gid = (uint32_t) e->valuedouble;
                } else
                        return config_error(why, why_size, "\"%s\"[%d]: expected a group name or gid, got %s; allowed: %s",
                                            def->name, index,
                                            cJSON_IsNumber(e) ? format_number(value, sizeof(value), e->valuedouble)
                                                              : describe_value(value, sizeof(value), e),
                                            describe_allowed(allowed, sizeof(allowed), def));
                c->allowed_groups[n++] = gid;
                index++;
        }
        c->allowed_groups_set = true;
        c->n_allowed_groups = n;
        return 0;
}

/* Rounds a non-negative, range-checked double to the nearest integer. */
static uint64_t round_u64(double v) {
        return (uint64_t) (v + 0.5);
}

static int parse_key(KeyId id, const cJSON *item, PaceConfig *c, double *raw, char *why, size_t why_size) {
        const KeyDef *def = &keys[id];
        int64_t i = 0;
        double d = 0;
        int choice = 0, r;

        switch (def->kind) {
        case KIND_ANY:
                return 0;
        case KIND_INTEGER:
                r = get_integer(item, def, &i, why, why_size);
                d = (double) i;
                break;
        case KIND_NUMBER:
                r = get_number(item, def, &d, why, why_size);
                break;
        case KIND_CHOICE:
                r = get_choice(item, def, &choice, why, why_size);
                break;
        case KIND_CPUS:
                return get_cpus(item, def, c, why, why_size);
        case KIND_GROUPS:
                return get_groups(item, def, c, why, why_size);
        case KIND_BOOL:
                if (id == KEY_RESERVE_ROOT_PROCESSES)
                        return get_bool(item, def, &c->reserve_root_processes, why, why_size);
                if (id == KEY_RTKIT)
                        return get_bool(item, def, &c->rtkit, why, why_size);
                return -EINVAL;
        default:
                return -EINVAL;
        }
        if (r < 0)
                return r;
        raw[id] = d;

        switch (id) {
        case KEY_NON_RT_SHARE:
                c->non_rt_share_ppm = (uint32_t) round_u64(d * PPM);
                break;
        case KEY_SLOT_US:
                c->slot_ns = (uint64_t) i * NSEC_PER_USEC;
                break;
        case KEY_NON_RT_MAX_GAP_MS:
                c->non_rt_max_gap_ns = round_u64(d * (double) NSEC_PER_MSEC);
                break;
        case KEY_POLICY:
                c->policy = (PacePolicy) choice;
                break;
        case KEY_MAX_FRAME_MS:
                c->max_frame_ns = (uint64_t) i * NSEC_PER_MSEC;
                break;
        case KEY_MAX_RESERVATIONS_PER_USER:
                c->max_reservations_per_user = (uint32_t) i;
                break;
        case KEY_MAX_UTILIZATION_PER_USER:
                c->max_utilization_per_user_ppm = (uint32_t) round_u64(d * PPM);
                break;
        case KEY_MAX_CONNECTIONS:
                c->max_connections = (uint32_t) i;
                break;
        case KEY_CLIENT_TIMEOUT_MS:
                c->client_timeout_ns = (uint64_t) i * NSEC_PER_MSEC;
                break;
        case KEY_SWITCH_COST_US:
                c->switch_cost_ns = round_u64(d * (double) NSEC_PER_USEC);
                break;
        case KEY_WAITING:
                c->waiting = (PaceWaiting) choice;
                break;
        case KEY_MAX_CONNECTIONS_PER_USER:
                c->max_connections_per_user = (uint32_t) i;
                break;
        case KEY_MAX_REQUESTS_PER_SECOND:
                c->max_requests_per_second = (uint32_t) i;
                break;
        case KEY_MAX_THREADS_PER_RESERVATION:
                c->max_threads_per_reservation = (uint32_t) i;
                break;
        case KEY_MAX_RESERVATIONS:
                c->max_reservations = (uint32_t) i;
                break;
        case KEY_MAX_MESSAGE_BYTES:
                c->max_message_bytes = (uint32_t) i;
                break;
        case KEY_RTKIT_PERIOD_US:
                c->rtkit_period_ns = (uint64_t) i * NSEC_PER_USEC;
                break;
        case KEY_RTKIT_UTILIZATION:
                c->rtkit_utilization_ppm = (uint32_t) round_u64(d * PPM);
                break;
        case KEY_RTKIT_KIND:
                c->rtkit_kind = (PaceRtkitKind) choice;
                break;
        case KEY_RTKIT_MAX_REALTIME_PRIORITY:
                c->rtkit_max_realtime_priority = (int32_t) i;
                break;
        case KEY_RTKIT_MIN_NICE_LEVEL:
                c->rtkit_min_nice_level = (int32_t) i;
                break;
        case KEY_RTKIT_RTTIME_USEC_MAX:
                c->rtkit_rttime_usec_max = i;
                break;
        default:
                return -EINVAL;
        }
        return 0;
}

static uint64_t gcd_u64(uint64_t a, uint64_t b) {
        while (b) {
                uint64_t t = a % b;
                a = b;
                b = t;
        }
        return a;
}

/* Milliseconds with up to six decimals, exact: "2", "0.1", "0.05". */
static const char *format_ns_as_ms(char *buf, size_t size, uint64_t ns) {
        uint64_t frac = ns % NSEC_PER_MSEC;
        int digits = 6;

        if (frac == 0) {
                snprintf(buf, size, "%" PRIu64, (uint64_t) (ns / NSEC_PER_MSEC));
                return buf;
        }
        while (frac % 10 == 0) {
                frac /= 10;
                digits--;
        }
        snprintf(buf, size, "%" PRIu64 ".%0*" PRIu64, (uint64_t) (ns / NSEC_PER_MSEC), digits, frac);
        return buf;
}

/* Rules that tie keys together, checked once every key has its final value.
 * given[] marks values that came from the file, so a message can say when the
 * other side of a conflict is a default the administrator never wrote down. */
static int check_cross_keys(const PaceConfig *c, const double *raw, const bool *given, char *why, size_t why_size) {
        char a[32], b[32], x[64], y[32];
        uint64_t frame_us = c->max_frame_ns / NSEC_PER_USEC, slot_us = c->slot_ns / NSEC_PER_USEC;
        const char *frame_default = given[KEY_MAX_FRAME_MS] ? "" : " (default)";
        const char *slot_default = given[KEY_SLOT_US] ? "" : " (default)";
        const char *gap_default = given[KEY_NON_RT_MAX_GAP_MS] ? "" : " (default)";

        if (frame_us % slot_us != 0) {
                /* Frames are whole milliseconds, so the valid ones are multiples of lcm(slot, 1 ms). */
                uint64_t step = slot_us / gcd_u64(slot_us, 1000) * 1000;
                uint64_t lower = frame_us / step * step, upper = lower + step;

                if (lower > 0)
                        snprintf(x, sizeof(x), "%" PRIu64 " or %" PRIu64, lower / 1000, upper / 1000);
                else
                        snprintf(x, sizeof(x), "%" PRIu64, upper / 1000);
                return config_error(why, why_size,
                                    "\"max_frame_ms\": %s%s is not a whole multiple of \"slot_us\": %s%s; "
                                    "allowed: a frame that is a whole number of slots, e.g. %s",
                                    format_number(a, sizeof(a), raw[KEY_MAX_FRAME_MS]), frame_default,
                                    format_number(b, sizeof(b), raw[KEY_SLOT_US]), slot_default, x);
        }

        if (frame_us / slot_us > PACE_MAX_FRAME_SLOTS)
                return config_error(why, why_size,
                                    "\"max_frame_ms\": %s%s with \"slot_us\": %s%s makes %" PRIu64 " slots per frame; "
                                    "allowed: at most %u slots per frame (raise slot_us or lower max_frame_ms)",
                                    format_number(a, sizeof(a), raw[KEY_MAX_FRAME_MS]), frame_default,
                                    format_number(b, sizeof(b), raw[KEY_SLOT_US]), slot_default,
                                    frame_us / slot_us, PACE_MAX_FRAME_SLOTS);

        /* One free slot in every gap is all the dispatcher can promise; a gap of a
         * single slot would leave no room for any reservation between free slots. */
        if (c->non_rt_max_gap_ns < 2 * c->slot_ns)
                return config_error(why, why_size,
                                    "\"non_rt_max_gap_ms\": %s%s is shorter than two slots of \"slot_us\": %s%s; "
                                    "allowed: at least %s (milliseconds)",
                                    format_number(a, sizeof(a), raw[KEY_NON_RT_MAX_GAP_MS]), gap_default,
                                    format_number(b, sizeof(b), raw[KEY_SLOT_US]), slot_default,
                                    format_ns_as_ms(y, sizeof(y), 2 * c->slot_ns));

        /* Only max_connections lowered: the default per-user cap follows it
         * (pace_config_parse clamps); one written down must fit. */
        if (c->max_connections_per_user > c->max_connections && given[KEY_MAX_CONNECTIONS_PER_USER])
                return config_error(why, why_size,
                                    "\"max_connections_per_user\": %s is more than \"max_connections\": %s%s; "
                                    "allowed: at most max_connections",
                                    format_number(a, sizeof(a), raw[KEY_MAX_CONNECTIONS_PER_USER]),
                                    format_number(b, sizeof(b), (double) c->max_connections),
                                    given[KEY_MAX_CONNECTIONS] ? "" : " (default)");

        /* A grant rounds the period down to whole slots: one shorter than a
         * slot would be refused at every call. */
        if (c->rtkit_period_ns < c->slot_ns && given[KEY_RTKIT_PERIOD_US])
                return config_error(why, why_size,
                                    "\"rtkit_period_us\": %s%s is shorter than \"slot_us\": %s%s; "
                                    "allowed: at least one slot",
                                    format_number(a, sizeof(a), raw[KEY_RTKIT_PERIOD_US]), "",
                                    format_number(b, sizeof(b), raw[KEY_SLOT_US]), slot_default);

        if (c->max_frame_ns < c->non_rt_max_gap_ns)
                return config_error(why, why_size,
                                    "\"max_frame_ms\": %s%s is shorter than \"non_rt_max_gap_ms\": %s%s; "
                                    "allowed: a frame at least as long as the gap",
                                    format_number(a, sizeof(a), raw[KEY_MAX_FRAME_MS]), frame_default,
                                    format_number(b, sizeof(b), raw[KEY_NON_RT_MAX_GAP_MS]), gap_default);

        return 0;
}

/* 1-based line and byte column of offset in text, as editors count them. */
static void line_column(const char *text, size_t offset, unsigned *ret_line, unsigned *ret_column) {
        unsigned line = 1, column = 1;

        for (size_t i = 0; i < offset; i++)
                if (text[i] == '\n') {
                        line++;
                        column = 1;
                } else
                        column++;
        *ret_line = line;
        *ret_column = column;
}

static bool is_json_space(char c) {
        return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* The lexical state just before offset pos: whether that is inside a string,
 * and whether the innermost open container is an object. cJSON gives up beyond
 * its nesting limit, so a few thousand levels is all an error position can be
 * inside; deeper, the container is taken to be an array. */
static void scan_to(const char *text, size_t pos, bool *ret_in_string, bool *ret_in_object) {
        uint64_t is_object[64] = {}; /* one bit per nesting level */
        size_t depth = 0;
        bool in_string = false;

        for (size_t i = 0; i < pos; i++) {
                char c = text[i];

                if (in_string) {
                        if (c == '\\')
                                i++;
                        else if (c == '"')
                                in_string = false;
                } else if (c == '"')
                        in_string = true;
                else if (c == '{' || c == '[') {
                        if (depth < 64 * 64) {
                                if (c == '{')
                                        is_object[depth / 64] |= UINT64_C(1) << (depth % 64);
                                else
                                        is_object[depth / 64] &= ~(UINT64_C(1) << (depth % 64));
                        }
                        depth++;
                } else if ((c == '}' || c == ']') && depth > 0)
                        depth--;
        }

        *ret_in_string = in_string;
        *ret_in_object = depth > 0 && depth <= 64 * 64 &&
                         (is_object[(depth - 1) / 64] & (UINT64_C(1) << ((depth - 1) % 64)));
}

/* Where a syntax error really is. cJSON reports the offset where it gave up,
 * which is exact except inside strings: for a missing key (`{"a": 1,,}`) it
 * points one byte past the culprit, and for a string that never ends it points
 * just after the opening quote. Both are recognisable from the text before. */
static size_t syntax_error_offset(const char *text, size_t size, size_t reported, const char **ret_what) {
        size_t at = MIN(reported, size + 1), i;
        bool in_string, in_object;

        if (at > 0 && text[at - 1] == '"') {
                scan_to(text, at - 1, &in_string, &in_object);
                /* An opening quote with no closing one after it. */
                if (!in_string) {
                        for (i = at; i < size && text[i] != '"'; i++)
                                if (text[i] == '\\')
                                        i++;
                        if (i >= size) {
                                *ret_what = "unterminated string";
                                return at - 1;
                        }
                }
        } else if (at > 0 && !is_json_space(text[at - 1])) {
                /* A key was expected if the culprit follows a '{', or a ',' inside an object. */
                for (i = at - 1; i > 0 && is_json_space(text[i - 1]); i--)
                        ;
                if (i > 0 && text[i - 1] == '{')
                        at--;
                else if (i > 0 && text[i - 1] == ',') {
                        scan_to(text, i - 1, &in_string, &in_object);
                        if (!in_string && in_object)
                                at--;
                }
        }

        if (at >= size) {
                *ret_what = "unexpected end of input";
                return size;
        }
        return at;
}

static void cjson_deletep(cJSON **p) {
        cJSON_Delete(*p);
}

/* The document as a cJSON object, or a refusal that says where its syntax
 * fails. *ret_copy is the terminated copy cJSON parsed (the caller frees
 * both). */
static int parse_json_object(const char *text, size_t size, cJSON **ret_root, char **ret_copy, char *why,
                             size_t why_size) {
        const char *end = NULL, *nul;
        unsigned line, column;
        char *copy;
        size_t i;

        for (i = 0; i < size && is_json_space(text[i]); i++)
                ;
        if (i == size)
                return config_error(why, why_size, "the document is empty; allowed: a JSON object such as {}");

        /* JSON has no place for NUL, and cJSON's strings would silently end there. */
        nul = memchr(text, '\0', size);
        if (nul) {
                line_column(text, (size_t) (nul - text), &line, &column);
                return config_error(why, why_size, "syntax error at line %u, column %u: NUL byte in the document",
                                    line, column);
        }

        /* cJSON gets a terminated copy whose length includes the NUL, so it can
         * never read past the caller's buffer and stops on the NUL at the end:
         * an error there means the input ended early. */
        copy = *ret_copy = malloc(size + 1);
        if (!copy)
                return -ENOMEM;
        memcpy(copy, text, size);
        copy[size] = '\0';

        /* cJSON cannot tell us when it ran out of memory; that case is reported
         * as a syntax error, which is wrong but harmless. */
        *ret_root = cJSON_ParseWithLengthOpts(copy, size + 1, &end, false);
        if (!*ret_root) {
                const char *what = NULL;
                size_t at;

                at = syntax_error_offset(copy, size, end && end >= copy ? (size_t) (end - copy) : 0, &what);
                line_column(copy, at, &line, &column);
                return config_error(why, why_size, "syntax error at line %u, column %u%s%s", line, column,
                                    what ? ": " : "", what ?: "");
        }

        /* Whatever follows the value may only be whitespace. */
        i = end && end >= copy && end <= copy + size ? (size_t) (end - copy) : size;
        while (i < size && is_json_space(copy[i]))
                i++;
        if (i < size) {
                line_column(copy, i, &line, &column);
                return config_error(why, why_size,
                                    "syntax error at line %u, column %u: unexpected text after the top-level object",
                                    line, column);
        }

        if (!cJSON_IsObject(*ret_root))
                return config_error(why, why_size, "the top level must be a JSON object, got %s; allowed: {\"key\": value, ...}",
                                    json_type_name(*ret_root));
        return 0;
}

/* Each key of the object into c (raw: the numbers as written, given: which
 * keys were), refusing unknown and repeated keys. */
static int parse_keys(const cJSON *root, PaceConfig *c, double *raw, bool *given, char *why, size_t why_size) {
        const cJSON *item;
        int r;

        cJSON_ArrayForEach(item, root) {
                char q[QUOTE_MAX * 4 + 16];
                KeyId id;

                for (id = 0; id < _KEY_MAX; id++)
                        if (strcmp(item->string, keys[id].name) == 0)
                                break;
                if (id == _KEY_MAX)
                        return error_unknown_key(why, why_size, item->string);

                /* cJSON keeps both copies of a repeated key; which one counts would be
                 * a guess, so neither does. */
                if (given[id])
                        return config_error(why, why_size, "duplicate key %s; allowed: each key at most once",
                                            quote(q, sizeof(q), item->string));
                given[id] = true;

                r = parse_key(id, item, c, raw, why, why_size);
                if (r < 0)
                        return r;
        }
        return 0;
}

int pace_config_parse(const char *text, size_t size, PaceConfig *config, char *why, size_t why_size) {
        _cleanup_(cjson_deletep) cJSON *root = NULL;
        _cleanup_free_ char *copy = NULL;
        double raw[_KEY_MAX] = {
                [KEY_SLOT_US] = 1000,
                [KEY_NON_RT_MAX_GAP_MS] = 20,
                [KEY_MAX_FRAME_MS] = 1200,
                [KEY_RTKIT_PERIOD_US] = 10000,
        };
        bool given[_KEY_MAX] = {};
        PaceConfig c;
        int r;

        if (why && why_size > 0)
                why[0] = '\0';
        if (!text && size > 0)
                return -EINVAL;
        r = parse_json_object(text, size, &root, &copy, why, why_size);
        if (r < 0)
                return r;

        pace_config_init(&c);
        r = parse_keys(root, &c, raw, given, why, why_size);
        if (r < 0)
                return r;
        /* The default RealtimeKit1 period follows long slots up. */
        if (!given[KEY_RTKIT_PERIOD_US] && c.rtkit_period_ns < c.slot_ns)
                c.rtkit_period_ns = c.slot_ns;
        r = check_cross_keys(&c, raw, given, why, why_size);
        if (r < 0)
                return r;
        if (c.max_connections_per_user > c.max_connections)
                c.max_connections_per_user = c.max_connections;

        *config = c;
        return 0;
}

/* Prefixes why with the path. Out of memory, the message without the path
 * is still better than none, so r is returned either way. */
static int prefix_why(char *why, size_t why_size, const char *path, int r) {
        _cleanup_free_ char *m = NULL;

        if (!why || why_size == 0 || !why[0])
                return r;
        m = strdup(why);
        if (m)
                explain(why, why_size, "%s: %s", path, m);
        return r;
}

static int read_file(int fd, const char *path, char **ret_text, size_t *ret_size, char *why, size_t why_size) {
        _cleanup_free_ char *buf = NULL;
        size_t size = 0, allocated = 0;
        struct stat st;

        if (fstat(fd, &st) < 0)
                return negative_errno();
        if (S_ISDIR(st.st_mode))
                return -EISDIR;
        /* st_size is only a hint (0 for /proc files and pipes): the read loop
         * below enforces the limit too. */
        if (S_ISREG(st.st_mode) && (uint64_t) st.st_size > CONFIG_MAX_SIZE) {
                explain(why, why_size, "%s: file is %" PRIu64 " bytes; allowed: at most %u bytes (1 MiB)", path,
                        (uint64_t) st.st_size, CONFIG_MAX_SIZE);
                return -EFBIG;
        }

        for (;;) {
                ssize_t n;

                if (size == allocated) {
                        size_t want = allocated == 0 ? 4096 : allocated * 2;
                        char *p;

                        /* One byte over the limit is enough to know the file is too big. */
                        want = MIN(want, (size_t) CONFIG_MAX_SIZE + 1);
                        if (want == allocated) {
                                explain(why, why_size, "%s: file is larger than %u bytes; allowed: at most %u bytes "
                                        "(1 MiB)", path, CONFIG_MAX_SIZE, CONFIG_MAX_SIZE);
                                return -EFBIG;
                        }
                        p = realloc(buf, want);
                        if (!p)
                                return -ENOMEM;
                        buf = p;
                        allocated = want;
                }

                n = read(fd, buf + size, allocated - size);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return negative_errno();
                }
                if (n == 0)
                        break;
                size += (size_t) n;
        }

        *ret_text = TAKE_PTR(buf);
        *ret_size = size;
        return 0;
}

int pace_config_load(const char *path, PaceConfig *config, char *why, size_t why_size) {
        _cleanup_free_ char *text = NULL;
        _cleanup_close_ int fd = -EBADF;
        size_t size = 0;
        int r;

        if (why && why_size > 0)
                why[0] = '\0';
        if (!path)
                return -EINVAL;

        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return negative_errno();

        r = read_file(fd, path, &text, &size, why, why_size);
        if (r < 0)
                return r;

        r = pace_config_parse(text, size, config, why, why_size);
        if (r == -EINVAL)
                return prefix_why(why, why_size, path, r);
        return r;
}
