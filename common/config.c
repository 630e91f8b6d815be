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

#include "config-internal.h"
#include "explain.h"
#include "macro.h"

/* A config file is a few hundred bytes; anything near this is a mistake (or an
 * attack on a daemon that reads it before dropping privileges). */
#define CONFIG_MAX_SIZE (1024u * 1024u)

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

/* Reads an integer-valued key, refusing fractions and out-of-range values. */
static int get_integer(const cJSON *item, const KeyDef *def, int64_t *ret, char *why, size_t why_size) {
        double v;

        if (!cJSON_IsNumber(item))
                return config_error_wrong_type(why, why_size, def, "an integer", item);
        v = item->valuedouble;
        /* The bound keeps the cast defined; every integer key has a far smaller range. */
        if (!(v > -1e15 && v < 1e15) || v != (double) (int64_t) v) {
                if (v > -1e15 && v < 1e15)
                        return config_error_wrong_type(why, why_size, def, "an integer", item);
                return config_error_out_of_range(why, why_size, def, v);
        }
        if (v < def->min || v > def->max)
                return config_error_out_of_range(why, why_size, def, v);

        *ret = (int64_t) v;
        return 0;
}

static int get_number(const cJSON *item, const KeyDef *def, double *ret, char *why, size_t why_size) {
        double v;

        if (!cJSON_IsNumber(item))
                return config_error_wrong_type(why, why_size, def, "a number", item);
        v = item->valuedouble;
        /* Written so that NaN (which JSON cannot express, but still) fails too. */
        if (!(def->min_exclusive ? v > def->min : v >= def->min) || !(v <= def->max))
                return config_error_out_of_range(why, why_size, def, v);

        *ret = v;
        return 0;
}

static int get_choice(const cJSON *item, const KeyDef *def, int *ret, char *why, size_t why_size) {
        char q[QUOTE_MAX * 4 + 16], allowed[128];

        if (!cJSON_IsString(item))
                return config_error_wrong_type(why, why_size, def, "a string", item);
        for (int i = 0; def->choices[i]; i++)
                if (strcmp(item->valuestring, def->choices[i]) == 0) {
                        *ret = i;
                        return 0;
                }

        return config_error(why, why_size, "\"%s\": %s is not allowed; allowed: %s", def->name,
                            config_quote(q, sizeof(q), item->valuestring), config_describe_allowed(allowed, sizeof(allowed), def));
}

static int get_bool(const cJSON *item, const KeyDef *def, bool *ret, char *why, size_t why_size) {
        if (!cJSON_IsBool(item))
                return config_error_wrong_type(why, why_size, def, "true or false", item);
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
                return config_error_wrong_type(why, why_size, def, "an array", item);
        if (!item->child)
                return config_error(why, why_size, "\"%s\": [] is empty; allowed: %s (leave the key out to use all online CPUs)",
                                    def->name, config_describe_allowed(allowed, sizeof(allowed), def));

        cJSON_ArrayForEach(e, item) {
                double v;

                if (!cJSON_IsNumber(e) || (e->valuedouble > -1e15 && e->valuedouble < 1e15 &&
                                           e->valuedouble != (double) (int64_t) e->valuedouble))
                        return config_error(why, why_size, "\"%s\"[%d]: expected an integer, got %s; allowed: %s",
                                            def->name, index,
                                            cJSON_IsNumber(e) ? config_format_number(value, sizeof(value), e->valuedouble)
                                                              : config_describe_value(value, sizeof(value), e),
                                            config_describe_allowed(allowed, sizeof(allowed), def));
                v = e->valuedouble;
                if (!(v >= 0 && v <= def->max))
                        return config_error(why, why_size, "\"%s\"[%d]: %s is out of range; allowed: %s", def->name,
                                            index, config_format_number(value, sizeof(value), v),
                                            config_describe_allowed(allowed, sizeof(allowed), def));
                /* Distinct values in 0..63 cannot exceed 64 entries, so a duplicate
                 * is found before any count limit could matter. */
                if (mask & (UINT64_C(1) << (unsigned) v))
                        return config_error(why, why_size, "\"%s\": CPU %u is listed twice; allowed: %s", def->name,
                                            (unsigned) v, config_describe_allowed(allowed, sizeof(allowed), def));
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
                return config_error_wrong_type(why, why_size, def, "an array", item);
        if (!item->child)
                return config_error(why, why_size, "\"%s\": [] would let only root ask; allowed: %s (leave the key out "
                                    "to let every local user ask)", def->name,
                                    config_describe_allowed(allowed, sizeof(allowed), def));
        cJSON_ArrayForEach(e, item) {
                uint32_t gid;

                if (n >= PACE_MAX_ALLOWED_GROUPS)
                        return config_error(why, why_size, "\"%s\": more than %u groups; allowed: %s", def->name,
                                            PACE_MAX_ALLOWED_GROUPS, config_describe_allowed(allowed, sizeof(allowed), def));
                if (cJSON_IsString(e)) {
                        struct group *g = getgrnam(e->valuestring);
                        if (!g)
                                return config_error(why, why_size, "\"%s\"[%d]: group %s does not exist; allowed: %s",
                                                    def->name, index, config_quote(value, sizeof(value), e->valuestring),
                                                    config_describe_allowed(allowed, sizeof(allowed), def));
                        gid = (uint32_t) g->gr_gid;
                } else if (cJSON_IsNumber(e) && e->valuedouble >= 0 && e->valuedouble < 4294967295.0 &&
                           e->valuedouble == (double) (uint32_t) e->valuedouble) {
                        gid = (uint32_t) e->valuedouble;
                } else
                        return config_error(why, why_size, "\"%s\"[%d]: expected a group name or gid, got %s; allowed: %s",
                                            def->name, index,
                                            cJSON_IsNumber(e) ? config_format_number(value, sizeof(value), e->valuedouble)
                                                              : config_describe_value(value, sizeof(value), e),
                                            config_describe_allowed(allowed, sizeof(allowed), def));
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
                                    config_format_number(a, sizeof(a), raw[KEY_MAX_FRAME_MS]), frame_default,
                                    config_format_number(b, sizeof(b), raw[KEY_SLOT_US]), slot_default, x);
        }

        if (frame_us / slot_us > PACE_MAX_FRAME_SLOTS)
                return config_error(why, why_size,
                                    "\"max_frame_ms\": %s%s with \"slot_us\": %s%s makes %" PRIu64 " slots per frame; "
                                    "allowed: at most %u slots per frame (raise slot_us or lower max_frame_ms)",
                                    config_format_number(a, sizeof(a), raw[KEY_MAX_FRAME_MS]), frame_default,
                                    config_format_number(b, sizeof(b), raw[KEY_SLOT_US]), slot_default,
                                    frame_us / slot_us, PACE_MAX_FRAME_SLOTS);

        /* One free slot in every gap is all the dispatcher can promise; a gap of a
         * single slot would leave no room for any reservation between free slots. */
        if (c->non_rt_max_gap_ns < 2 * c->slot_ns)
                return config_error(why, why_size,
                                    "\"non_rt_max_gap_ms\": %s%s is shorter than two slots of \"slot_us\": %s%s; "
                                    "allowed: at least %s (milliseconds)",
                                    config_format_number(a, sizeof(a), raw[KEY_NON_RT_MAX_GAP_MS]), gap_default,
                                    config_format_number(b, sizeof(b), raw[KEY_SLOT_US]), slot_default,
                                    format_ns_as_ms(y, sizeof(y), 2 * c->slot_ns));

        /* Only max_connections lowered: the default per-user cap follows it
         * (pace_config_parse clamps); one written down must fit. */
        if (c->max_connections_per_user > c->max_connections && given[KEY_MAX_CONNECTIONS_PER_USER])
                return config_error(why, why_size,
                                    "\"max_connections_per_user\": %s is more than \"max_connections\": %s%s; "
                                    "allowed: at most max_connections",
                                    config_format_number(a, sizeof(a), raw[KEY_MAX_CONNECTIONS_PER_USER]),
                                    config_format_number(b, sizeof(b), (double) c->max_connections),
                                    given[KEY_MAX_CONNECTIONS] ? "" : " (default)");

        /* A grant rounds the period down to whole slots: one shorter than a
         * slot would be refused at every call. */
        if (c->rtkit_period_ns < c->slot_ns && given[KEY_RTKIT_PERIOD_US])
                return config_error(why, why_size,
                                    "\"rtkit_period_us\": %s%s is shorter than \"slot_us\": %s%s; "
                                    "allowed: at least one slot",
                                    config_format_number(a, sizeof(a), raw[KEY_RTKIT_PERIOD_US]), "",
                                    config_format_number(b, sizeof(b), raw[KEY_SLOT_US]), slot_default);

        if (c->max_frame_ns < c->non_rt_max_gap_ns)
                return config_error(why, why_size,
                                    "\"max_frame_ms\": %s%s is shorter than \"non_rt_max_gap_ms\": %s%s; "
                                    "allowed: a frame at least as long as the gap",
                                    config_format_number(a, sizeof(a), raw[KEY_MAX_FRAME_MS]), frame_default,
                                    config_format_number(b, sizeof(b), raw[KEY_NON_RT_MAX_GAP_MS]), gap_default);

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
                        return config_error_unknown_key(why, why_size, item->string, keys, _KEY_MAX);

                /* cJSON keeps both copies of a repeated key; which one counts would be
                 * a guess, so neither does. */
                if (given[id])
                        return config_error(why, why_size, "duplicate key %s; allowed: each key at most once",
                                            config_quote(q, sizeof(q), item->string));
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
        r = config_parse_json_object(text, size, &root, &copy, why, why_size);
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
