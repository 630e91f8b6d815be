/* SPDX-License-Identifier: MIT */
#pragma once
/* What config.c, config-errors.c and config-json.c share: the keys'
 * definitions and the refusal helpers. */
#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "config.h"
#include "explain.h"

/* Messages quote at most this much of a user-supplied string, so a 1 MiB key
 * cannot turn into a 1 MiB log line. */
#define QUOTE_MAX 48

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

static inline void cjson_deletep(cJSON **p) {
        cJSON_Delete(*p);
}

/* A refusal of the document: the explanation in why (if wanted), -EINVAL. */
#define config_error(why, why_size, ...) (explain((why), (why_size), __VA_ARGS__), -EINVAL)

/* JSON-style quoting, non-ASCII and control bytes as \xNN, long strings cut:
 * messages end up in the journal and on terminals. */
const char *config_quote(char *buf, size_t size, const char *s);

/* Shortest text that reads back as the same double, without exponents for
 * ordinary integers ("1000", not "1e+03"). */
const char *config_format_number(char *buf, size_t size, double v);

const char *config_json_type_name(const cJSON *item);

/* "a string (\"1000\")": the type and, where short, the value itself. */
const char *config_describe_value(char *buf, size_t size, const cJSON *item);

const char *config_describe_allowed(char *buf, size_t size, const KeyDef *def);

int config_error_wrong_type(char *why, size_t why_size, const KeyDef *def, const char *expected, const cJSON *item);

int config_error_out_of_range(char *why, size_t why_size, const KeyDef *def, double v);

int config_error_unknown_key(char *why, size_t why_size, const char *key, const KeyDef *keys, size_t n_keys);

/* The document as a cJSON object, or a refusal that says where its syntax
 * fails. *ret_copy is the terminated copy cJSON parsed (the caller frees
 * both). */
int config_parse_json_object(const char *text, size_t size, cJSON **ret_root, char **ret_copy, char *why,
                             size_t why_size);
