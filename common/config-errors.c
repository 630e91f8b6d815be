/* SPDX-License-Identifier: MIT */
/* The configuration's refusals: what was found, quoted safely, what is
 * allowed, and the key that was probably meant. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "config-internal.h"
#include "explain.h"
#include "macro.h"

/* A refusal of the document: the explanation in why (if wanted), -EINVAL. */
#define config_error(why, why_size, ...) (explain((why), (why_size), __VA_ARGS__), -EINVAL)

/* JSON-style quoting, non-ASCII and control bytes as \xNN, long strings cut:
 * messages end up in the journal and on terminals. */
const char *config_quote(char *buf, size_t size, const char *s) {
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
const char *config_format_number(char *buf, size_t size, double v) {
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

const char *config_json_type_name(const cJSON *item) {
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
const char *config_describe_value(char *buf, size_t size, const cJSON *item) {
        char v[QUOTE_MAX * 4 + 16];

        if (cJSON_IsString(item))
                snprintf(buf, size, "a string (%s)", config_quote(v, sizeof(v), item->valuestring));
        else if (cJSON_IsNumber(item))
                snprintf(buf, size, "a number (%s)", config_format_number(v, sizeof(v), item->valuedouble));
        else if (cJSON_IsBool(item))
                snprintf(buf, size, "a boolean (%s)", cJSON_IsTrue(item) ? "true" : "false");
        else
                snprintf(buf, size, "%s", config_json_type_name(item));
        return buf;
}

const char *config_describe_allowed(char *buf, size_t size, const KeyDef *def) {
        char lo[32], hi[32];

        switch (def->kind) {
        case KIND_INTEGER:
                snprintf(buf, size, "an integer from %s to %s%s",
                         config_format_number(lo, sizeof(lo), def->min), config_format_number(hi, sizeof(hi), def->max),
                         def->unit ?: "");
                break;
        case KIND_NUMBER:
                if (def->min_exclusive)
                        snprintf(buf, size, "a number greater than %s and at most %s%s",
                                 config_format_number(lo, sizeof(lo), def->min),
                                 config_format_number(hi, sizeof(hi), def->max), def->unit ?: "");
                else
                        snprintf(buf, size, "a number from %s to %s%s",
                                 config_format_number(lo, sizeof(lo), def->min),
                                 config_format_number(hi, sizeof(hi), def->max), def->unit ?: "");
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

int config_error_wrong_type(char *why, size_t why_size, const KeyDef *def, const char *expected, const cJSON *item) {
        char value[QUOTE_MAX * 4 + 32], allowed[128];

        /* A number with a fraction where an integer belongs reads better as just the number. */
        if (cJSON_IsNumber(item))
                config_format_number(value, sizeof(value), item->valuedouble);
        else
                config_describe_value(value, sizeof(value), item);

        return config_error(why, why_size, "\"%s\": expected %s, got %s; allowed: %s", def->name, expected, value,
                            config_describe_allowed(allowed, sizeof(allowed), def));
}

int config_error_out_of_range(char *why, size_t why_size, const KeyDef *def, double v) {
        char value[32], allowed[128];

        return config_error(why, why_size, "\"%s\": %s is out of range; allowed: %s", def->name,
                            config_format_number(value, sizeof(value), v), config_describe_allowed(allowed, sizeof(allowed), def));
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

int config_error_unknown_key(char *why, size_t why_size, const char *key, const KeyDef *keys, size_t n_keys) {
        char q[QUOTE_MAX * 4 + 16], known[1024], hint[96] = "";
        unsigned best = 3; /* more than two edits away is not a typo */
        size_t n = 0;

        for (size_t i = 0; i < n_keys; i++) {
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

        return config_error(why, why_size, "unknown key %s (known keys: %s)%s", config_quote(q, sizeof(q), key), known, hint);
}
