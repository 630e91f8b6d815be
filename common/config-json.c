/* SPDX-License-Identifier: MIT */
/* The configuration document as JSON: one object of unique keys, and where
 * a syntax error is (line and column), which cJSON does not say. */
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


/* The document as a cJSON object, or a refusal that says where its syntax
 * fails. *ret_copy is the terminated copy cJSON parsed (the caller frees
 * both). */
int config_parse_json_object(const char *text, size_t size, cJSON **ret_root, char **ret_copy, char *why,
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
                                    config_json_type_name(*ret_root));
        return 0;
}
