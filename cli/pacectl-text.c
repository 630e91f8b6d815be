/* SPDX-License-Identifier: MIT */

/* pacectl's output for people: aligned tables and sentences. What a
 * program reads is pacectl-json.c's. */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "cli.h"
#include "pacectl.h"
#include "parse-util.h"

/* "59.8%": the share of one CPU that ns out of window_ns is, always with one
 * decimal so that a column of them lines up; "-" without a window. */
const char *format_share(char *buf, size_t size, uint64_t ns, uint64_t window_ns) {
        unsigned __int128 permille;

        if (window_ns == 0) {
                snprintf(buf, size, "-");
                return buf;
        }
        permille = ((unsigned __int128) ns * 1000 + window_ns / 2) / window_ns;
        if (permille > UINT32_MAX)
                permille = UINT32_MAX;
        snprintf(buf, size, "%" PRIu32 ".%" PRIu32 "%%", (uint32_t) permille / 10, (uint32_t) permille % 10);
        return buf;
}

const char *format_delivered(char *buf, size_t size, const pace_grant *g) {
        if (!g->accounting.valid)
                return format_share(buf, size, 0, 0);
        return format_share(buf, size, g->accounting.delivered_ns, g->accounting.window_ns);
}

/* A dispatcher's counter, or "-" before its first report. */
const char *format_count(char *buf, size_t size, const pace_grant *g, uint64_t v) {
        if (!g->accounting.valid)
                snprintf(buf, size, "-");
        else
                snprintf(buf, size, "%" PRIu64, v);
        return buf;
}

const char *format_scope(char *buf, size_t size, const pace_grant *g) {
        if (g->scope == PACE_SCOPE_THREAD && g->tid > 0)
                snprintf(buf, size, "thread %d", (int) g->tid);
        else
                snprintf(buf, size, "%s", cli_scope_name(g->scope));
        return buf;
}

/* 0 is what a broker that does not count threads sends. */
const char *format_threads(char *buf, size_t size, const pace_grant *g) {
        if (g->threads == 0)
                snprintf(buf, size, "-");
        else
                snprintf(buf, size, "%" PRIu32, g->threads);
        return buf;
}

static bool any_without_accounting(const pace_status_report *s) {
        for (size_t i = 0; i < s->n_reservations; i++)
                if (!s->reservations[i].accounting.valid)
                        return true;
        return false;
}

/* A 20-character picture of a CPU: '#' reserved, '.' free, ' ' the rest
 * (the non-real-time share and the dispatcher's switching cost). */
static const char *format_cpu_bar(char *buf, size_t size, const pace_cpu_status *c) {
        enum { WIDTH = 20 };
        uint32_t reserved = MIN(c->reserved_ppm, PPM), free_ppm = MIN(c->free_ppm, PPM - reserved);
        unsigned n_reserved = (unsigned) (((uint64_t) reserved * WIDTH + PPM / 2) / PPM);
        unsigned n_free = (unsigned) (((uint64_t) (reserved + free_ppm) * WIDTH + PPM / 2) / PPM) - n_reserved;
        char bar[WIDTH + 1];

        for (unsigned i = 0; i < WIDTH; i++)
                bar[i] = i < n_reserved ? '#' : i < n_reserved + n_free ? '.' : ' ';
        bar[WIDTH] = '\0';
        snprintf(buf, size, "[%s]", bar);
        return buf;
}

int print_cpus(FILE *f, const pace_status_report *s, bool with_bar) {
        static const TableColumn columns[] = {
                { "CPU", true }, { "RESERVED", true }, { "FREE", true }, { "FRAME" }, { "# reserved . free" },
        };
        _cleanup_(table_freep) Table *t = NULL;

        if (s->n_cpus == 0) {
                fprintf(f, "No CPUs are managed by the broker.\n");
                return 0;
        }

        if (table_new(columns, ELEMENTSOF(columns) - !with_bar, s->n_cpus, &t) < 0)
                return -ENOMEM;
        for (size_t i = 0; i < s->n_cpus; i++) {
                const pace_cpu_status *c = &s->cpus[i];

                table_printf(t, i, 0, "%d", c->cpu);
                format_ppm(table_cell(t, i, 1), TABLE_CELL_MAX, c->reserved_ppm);
                format_ppm(table_cell(t, i, 2), TABLE_CELL_MAX, c->free_ppm);
                if (c->frame_ns == 0)
                        table_printf(t, i, 3, "-");
                else
                        format_duration(table_cell(t, i, 3), TABLE_CELL_MAX, c->frame_ns);
                if (with_bar)
                        format_cpu_bar(table_cell(t, i, 4), TABLE_CELL_MAX, c);
        }
        table_print(t, f);
        return 0;
}

int print_status_text(FILE *f, const pace_status_report *s) {
        /* Two tables rather than one of 16 columns: what each reservation is
         * (fits 80 columns), then what it was asked, given and really got,
         * side by side. */
        static const TableColumn reservation_columns[] = {
                { "ID", true }, { "PID", true }, { "UID", true }, { "CPU", true }, { "KIND" }, { "SCOPE" },
                { "THREADS", true }, { "REQ PERIOD" }, { "PERIOD" }, { "BUDGET" }, { "SLOT" },
        };
        static const TableColumn util_columns[] = {
                { "ID", true }, { "REQUESTED", true }, { "GRANTED", true }, { "DELIVERED", true },
                { "PERIODS", true }, { "BLOCKED", true }, { "WANTED MORE", true },
        };
        _cleanup_(table_freep) Table *t = NULL, *u = NULL;
        char buf[TABLE_CELL_MAX];

        if (s->n_reservations == 0)
                fprintf(f, "No reservations.\n");
        else {
                if (table_new(reservation_columns, ELEMENTSOF(reservation_columns), s->n_reservations, &t) < 0 ||
                    table_new(util_columns, ELEMENTSOF(util_columns), s->n_reservations, &u) < 0)
                        return -ENOMEM;

                for (size_t i = 0; i < s->n_reservations; i++) {
                        const pace_grant *g = &s->reservations[i];
                        const pace_accounting *a = &g->accounting;

                        table_printf(t, i, 0, "%" PRIu64, g->id);
                        table_printf(t, i, 1, "%d", (int) g->pid);
                        table_printf(t, i, 2, "%u", (unsigned) g->uid);
                        table_printf(t, i, 3, "%d", g->cpu);
                        /* "rtkit": asked through RealtimeKit1, not by the process itself. */
                        table_printf(t, i, 4, "%s%s", cli_kind_name(g->kind),
                                     s->on_behalf && s->on_behalf[i] ? "/rtkit" : "");
                        format_scope(table_cell(t, i, 5), TABLE_CELL_MAX, g);
                        format_threads(table_cell(t, i, 6), TABLE_CELL_MAX, g);
                        format_duration(table_cell(t, i, 7), TABLE_CELL_MAX, g->requested_period_ns);
                        format_duration(table_cell(t, i, 8), TABLE_CELL_MAX, g->period_ns);
                        format_duration(table_cell(t, i, 9), TABLE_CELL_MAX, g->budget_ns);
                        format_duration(table_cell(t, i, 10), TABLE_CELL_MAX, g->slot_ns);

                        table_printf(u, i, 0, "%" PRIu64, g->id);
                        format_ppm(table_cell(u, i, 1), TABLE_CELL_MAX, g->requested_utilization_ppm);
                        format_ppm(table_cell(u, i, 2), TABLE_CELL_MAX, granted_ppm(g));
                        format_delivered(table_cell(u, i, 3), TABLE_CELL_MAX, g);
                        format_count(table_cell(u, i, 4), TABLE_CELL_MAX, g, a->periods);
                        format_count(table_cell(u, i, 5), TABLE_CELL_MAX, g, a->periods_blocked);
                        format_count(table_cell(u, i, 6), TABLE_CELL_MAX, g, a->periods_wanted_more);
                }
                table_print(t, f);
                fputc('\n', f);
                table_print(u, f);
                fprintf(f, "DELIVERED: CPU time received over the last whole periods (about 2s)%s.\n",
                        any_without_accounting(s) ? "; '-': no report from pace-dispatcher yet" : "");
        }

        fputc('\n', f);
        if (s->n_nice_levels > 0) {
                fprintf(f, "\nNice levels (RealtimeKit1):");
                for (size_t i = 0; i < s->n_nice_levels; i++)
                        fprintf(f, " thread %d of pid %d at %d%s", (int) s->nice_levels[i].tid,
                                (int) s->nice_levels[i].pid, s->nice_levels[i].nice,
                                i + 1 < s->n_nice_levels ? ";" : ".\n");
        }
        if (print_cpus(f, s, false) < 0)
                return -ENOMEM;

        fprintf(f, "\nNon-real-time share: %s of every CPU, never reserved.\n",
                format_ppm(buf, sizeof(buf), s->non_rt_share_ppm));
        return 0;
}

void print_grant_text(const pace_grant *g) {
        char util[TABLE_CELL_MAX], budget[TABLE_CELL_MAX], period[TABLE_CELL_MAX], slot[TABLE_CELL_MAX];
        char req_util[TABLE_CELL_MAX], req_period[TABLE_CELL_MAX];

        char scope[TABLE_CELL_MAX];

        char where[256];
        printf("Reservation %" PRIu64 ": %s of %s for pid %d, %s in every %s (slot %s, kind %s, scope %s",
               g->id, format_ppm(util, sizeof(util), granted_ppm(g)), cli_format_cpus(where, sizeof(where), g),
               (int) g->pid,
               format_duration(budget, sizeof(budget), g->budget_ns),
               format_duration(period, sizeof(period), g->period_ns),
               format_duration(slot, sizeof(slot), g->slot_ns), cli_kind_name(g->kind),
               format_scope(scope, sizeof(scope), g));
        if (g->threads > 0)
                printf(", %" PRIu32 " thread%s", g->threads, g->threads == 1 ? "" : "s");
        putchar(')');
        if (g->period_ns != g->requested_period_ns || granted_ppm(g) != g->requested_utilization_ppm)
                printf(", requested %s of every %s",
                       format_ppm(req_util, sizeof(req_util), g->requested_utilization_ppm),
                       format_duration(req_period, sizeof(req_period), g->requested_period_ns));
        printf(".\n");
}
