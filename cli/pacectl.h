/* SPDX-License-Identifier: MIT */
#pragma once

/* pacectl's parts: pacectl.c (verbs, options, the calls), pacectl-text.c
 * and pacectl-json.c (the two ways a result is shown), pacectl-top.c (the
 * live view). */

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "format-table.h"
#include "macro.h"
#include "pace/pace.h"

/* Exit codes are part of the interface, so that scripts can tell a refusal
 * (the broker answered no) from a broken setup (no broker to ask). */
enum {
        EXIT_OK = 0,
        EXIT_REFUSED = 1,
        EXIT_USAGE = 2,
        EXIT_TRANSPORT = 3,
};

/* top: the broker allows each user max_requests_per_second (50 by default);
 * ten a second leaves room for everything else the user runs. */
#define TOP_MIN_INTERVAL_NS (100 * NSEC_PER_MSEC)
#define TOP_DEFAULT_INTERVAL_NS NSEC_PER_SEC

typedef struct Args {
        const char *socket_path;
        bool json;
        uint64_t release_id;
        pace_reserve_params reserve;
        /* The first reserve-only option seen, to name it if the command is not reserve. */
        const char *reserve_option;
        bool have_period, have_util, have_scope;
        /* --kind: what reserve asks for (absent: slots), what modify
         * changes to (absent: the kind it has). */
        bool have_kind;
        /* top */
        uint64_t interval_ns;
        uint32_t iterations; /* 0: until told to stop */
        const char *top_option;
} Args;

DEFINE_TRIVIAL_CLEANUP_FUNC(pace_status_report *, pace_status_report_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(cJSON *, cJSON_Delete);

/* The share of a CPU a grant really gets, which rounding may have moved away
 * from the requested one. */
static inline uint32_t granted_ppm(const pace_grant *g) {
        unsigned __int128 v;

        if (g->period_ns == 0)
                return 0;
        v = ((unsigned __int128) g->budget_ns * PPM + g->period_ns / 2) / g->period_ns;
        return v > UINT32_MAX ? UINT32_MAX : (uint32_t) v;
}

/* pacectl.c: a failed call reported, and the exit code it deserves. */
int report_failure(const char *what, const char *socket_path, int r);
int report_output_failure(int r);

/* pacectl-text.c: cells of the status tables. Each writes at most size
 * bytes into buf and returns buf. */
const char *format_share(char *buf, size_t size, uint64_t ns, uint64_t window_ns);
const char *format_delivered(char *buf, size_t size, const pace_grant *g);
const char *format_count(char *buf, size_t size, const pace_grant *g, uint64_t v);
const char *format_scope(char *buf, size_t size, const pace_grant *g);
const char *format_threads(char *buf, size_t size, const pace_grant *g);
/* The CPUs table; with_bar adds a picture of each CPU's share. */
int print_cpus(FILE *f, const pace_status_report *s, bool with_bar);
int print_status_text(FILE *f, const pace_status_report *s);
void print_grant_text(const pace_grant *g);

/* pacectl-json.c: NULL when out of memory. */
cJSON *json_grant(const pace_grant *g);
cJSON *json_status(const pace_status_report *s);
cJSON *json_released(uint64_t id);
/* Prints and frees nothing: -ENOMEM for a NULL object. */
int print_json(const cJSON *o);

/* pacectl-top.c */
int do_top(pace *p, const Args *args, const char *socket_path);
