/* SPDX-License-Identifier: MIT */

/* pacectl: look at and manage pace reservations.
 *
 * Exit codes are part of the interface, so that scripts can tell a refusal
 * (the broker answered no) from a broken setup (no broker to ask). */

#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "macro.h"
#include "pace-build-config.h"
#include "pace-limits.h"
#include "pace/pace.h"
#include "parse-util.h"
#include "table-shm.h"

enum {
        EXIT_OK = 0,
        EXIT_REFUSED = 1,
        EXIT_USAGE = 2,
        EXIT_TRANSPORT = 3,
};

typedef enum Command {
        COMMAND_STATUS,
        COMMAND_RESERVE,
        COMMAND_RELEASE,
        COMMAND_TABLE,
        COMMAND_RELOAD,
        COMMAND_RESET,
        COMMAND_MODIFY,
        COMMAND_TOP,
} Command;

/* top: the broker allows each user max_requests_per_second (50 by default);
 * ten a second leaves room for everything else the user runs. */
#define TOP_MIN_INTERVAL_NS (100 * NSEC_PER_MSEC)
#define TOP_DEFAULT_INTERVAL_NS NSEC_PER_SEC

typedef struct Args {
        const char *socket_path;
        bool json;
        Command command;
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


DEFINE_TRIVIAL_CLEANUP_FUNC(pace *, pace_close);
DEFINE_TRIVIAL_CLEANUP_FUNC(pace_status_report *, pace_status_report_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(FILE *, fclose);

static bool streq(const char *a, const char *b) {
        return strcmp(a, b) == 0;
}

static void help(void) {
        printf("Usage: %1$s [OPTIONS] status\n"
               "       %1$s [OPTIONS] top [-d INTERVAL] [-n COUNT]\n"
               "       %1$s [OPTIONS] reserve --period DURATION --util SHARE [--pid PID] [--cpu N]\n"
               "                              [--scope SCOPE] [--tid TID] [--kind KIND]\n"
               "       %1$s [OPTIONS] modify ID --period DURATION --util SHARE [--cpu N] [--kind KIND]\n"
               "       %1$s [OPTIONS] release ID\n"
               "       %1$s [OPTIONS] table\n"
               "       %1$s [OPTIONS] reload | reset         (root)\n"
               "\n"
               "Show and manage pace soft real-time CPU reservations.\n"
               "\n"
               "Commands:\n"
               "  status              list every reservation (requested, granted and delivered\n"
               "                      share) and each CPU's reserved and free share\n"
               "  top                 the same, refreshed in place like top(1); q quits\n"
               "  reserve             reserve SHARE of a CPU in every DURATION for a process\n"
               "  modify ID           new period, share (and kind) for a live reservation, all or\n"
               "                      nothing\n"
               "  release ID          end the reservation with this id\n"
               "  table               draw the dispatch table the broker published (it lives\n"
               "                      next to the socket): one letter per reservation, '.' free\n"
               "  reload              root: the broker re-reads its configuration; refused, and\n"
               "                      the old one kept, if the live reservations would violate it\n"
               "  reset               root: drop every reservation\n"
               "\n"
               "Options:\n"
               "  -s, --socket PATH   broker socket (default: $PACE_SOCKET, else %2$s)\n"
               "  -j, --json          print machine-readable JSON\n"
               "  -p, --period DUR    reserve: period, with a unit: 50ms, 250us, 1.5ms, 1s\n"
               "  -u, --util SHARE    reserve: share of one CPU per period: 60%% or 0.6\n"
               "      --pid PID       reserve: for this process (default: pacectl itself, which\n"
               "                      ends the reservation as soon as pacectl exits)\n"
               "      --cpu N         reserve: on this CPU (default: the broker chooses)\n"
               "      --scope SCOPE   reserve: process (default: all its threads), tree (it and\n"
               "                      its descendants) or thread (one thread: --tid)\n"
               "      --tid TID       reserve: the thread, of --pid, for --scope thread\n"
               "      --kind KIND     reserve: slots (default: the budget spread over the\n"
               "                      period), server (runs whenever it has budget left) or\n"
               "                      aligned (the budget in one piece at the start of each\n"
               "                      period); modify: change to it (default: keep the kind)\n"
               "  -d, --interval DUR  top: time between refreshes, seconds (0.5) or with a unit\n"
               "                      (500ms); default 1s, at least 100ms\n"
               "  -n, --iterations N  top: stop after N refreshes (default: until q or Ctrl-C)\n"
               "  -h, --help          show this help\n"
               "  -V, --version       show the version\n"
               "\n"
               "Exit status: 0 success, 1 refused by the broker, 2 usage error,\n"
               "3 broker unreachable or not answering properly.\n",
               cli_program, PACE_DEFAULT_SOCKET);
}

/* Release ids are 64-bit; parse-util has no parser that wide. Digits only, so
 * "-1" or " 7" are not silently read as something else. */
static int parse_id(const char *s, uint64_t *ret) {
        uint64_t v = 0;

        if (!s || !*s)
                return -EINVAL;
        for (; *s; s++) {
                unsigned d;

                if (*s < '0' || *s > '9')
                        return -EINVAL;
                d = (unsigned) (*s - '0');
                if (v > (UINT64_MAX - d) / 10)
                        return -ERANGE;
                v = v * 10 + d;
        }
        *ret = v;
        return 0;
}

/* top(1)'s -d takes seconds without a unit ("0.5"); a duration with a unit
 * ("500ms") reads as everywhere else in pace. */
static int parse_interval(const char *s, uint64_t *ret) {
        uint64_t v;
        int r;

        r = parse_duration_ns(s, &v);
        if (r == -EINVAL && *s && strlen(s) < 64 && s[strspn(s, "0123456789.")] == '\0') {
                char with_unit[72];

                snprintf(with_unit, sizeof(with_unit), "%ss", s);
                r = parse_duration_ns(with_unit, &v);
        }
        if (r < 0)
                return cli_usage_error("invalid --interval '%s': expected seconds, e.g. 0.5, or a duration "
                                       "with a unit, e.g. 500ms", s);
        if (v < TOP_MIN_INTERVAL_NS)
                return cli_usage_error("--interval '%s' is too short: at least 100ms, since the broker "
                                       "limits how often a user may ask", s);
        *ret = v;
        return 0;
}

static int parse_args(int argc, char *argv[], Args *args) {
        enum {
                ARG_PID = 0x100,
                ARG_CPU,
                ARG_SCOPE,
                ARG_TID,
                ARG_KIND,
        };
        static const struct option options[] = {
                { "socket",  required_argument, NULL, 's'     },
                { "json",    no_argument,       NULL, 'j'     },
                { "period",  required_argument, NULL, 'p'     },
                { "util",    required_argument, NULL, 'u'     },
                { "pid",     required_argument, NULL, ARG_PID },
                { "cpu",     required_argument, NULL, ARG_CPU },
                { "scope",   required_argument, NULL, ARG_SCOPE },
                { "tid",     required_argument, NULL, ARG_TID },
                { "kind",    required_argument, NULL, ARG_KIND },
                { "interval", required_argument, NULL, 'd'   },
                { "iterations", required_argument, NULL, 'n' },
                { "help",    no_argument,       NULL, 'h'     },
                { "version", no_argument,       NULL, 'V'     },
                {}
        };
        _cleanup_free_ char **positional = NULL;
        size_t n_positional = 0;
        int c, r;

        positional = calloc((size_t) argc + 1, sizeof(char *));
        if (!positional) {
                fprintf(stderr, "%s: out of memory\n", cli_program);
                return -ENOMEM;
        }

        *args = (Args) {
                .reserve = { .pid = 0, .cpu = -1 },
                .interval_ns = TOP_DEFAULT_INTERVAL_NS,
        };

        /* The leading '-' hands over the command and its arguments in order,
         * so that options may come before or after the command (and
         * POSIXLY_CORRECT does not change that). */
        /* getopt's own messages would name the program by its full path and
         * not say how to get help. */
        opterr = 0;
        while ((c = getopt_long(argc, argv, "-:s:jp:u:d:n:hV", options, NULL)) >= 0) {
                switch (c) {
                case 1:
                        positional[n_positional++] = optarg;
                        break;
                case 's':
                        if (!*optarg)
                                return cli_usage_error("--socket needs a path");
                        args->socket_path = optarg;
                        break;
                case 'j':
                        args->json = true;
                        break;
                case 'p':
                        r = cli_parse_period("--period", optarg, &args->reserve.period_ns);
                        if (r < 0)
                                return r;
                        args->have_period = true;
                        if (!args->reserve_option)
                                args->reserve_option = "--period";
                        break;
                case 'u':
                        r = cli_parse_util("--util", optarg, &args->reserve.utilization_ppm);
                        if (r < 0)
                                return r;
                        args->have_util = true;
                        if (!args->reserve_option)
                                args->reserve_option = "--util";
                        break;
                case ARG_PID:
                        r = cli_parse_pid("--pid", optarg, &args->reserve.pid);
                        if (r < 0)
                                return r;
                        if (!args->reserve_option)
                                args->reserve_option = "--pid";
                        break;
                case ARG_CPU:
                        r = cli_parse_cpu("--cpu", optarg, &args->reserve.cpu);
                        if (r < 0)
                                return r;
                        if (!args->reserve_option)
                                args->reserve_option = "--cpu";
                        break;
                case ARG_SCOPE:
                        r = cli_parse_scope("--scope", optarg, &args->reserve.scope);
                        if (r < 0)
                                return r;
                        args->have_scope = true;
                        if (!args->reserve_option)
                                args->reserve_option = "--scope";
                        break;
                case ARG_TID:
                        r = cli_parse_pid("--tid", optarg, &args->reserve.tid);
                        if (r < 0)
                                return r;
                        if (!args->reserve_option)
                                args->reserve_option = "--tid";
                        break;
                case ARG_KIND:
                        r = cli_parse_kind("--kind", optarg, &args->reserve.kind);
                        if (r < 0)
                                return r;
                        args->have_kind = true;
                        if (!args->reserve_option)
                                args->reserve_option = "--kind";
                        break;
                case 'd':
                        r = parse_interval(optarg, &args->interval_ns);
                        if (r < 0)
                                return r;
                        if (!args->top_option)
                                args->top_option = "--interval";
                        break;
                case 'n':
                        if (parse_uint32(optarg, &args->iterations) < 0 || args->iterations == 0)
                                return cli_usage_error("invalid --iterations '%s': expected how many refreshes "
                                                       "to show (1, 2, ...)", optarg);
                        if (!args->top_option)
                                args->top_option = "--iterations";
                        break;
                case 'h':
                        help();
                        return 1;
                case 'V':
                        printf("%s (pace) %s\n", cli_program, PACE_VERSION);
                        return 1;
                case ':':
                case '?':
                        return cli_getopt_failure(c, argv, "jhV");
                default:
                        abort();
                }
        }
        /* Whatever follows "--" is positional too. */
        while (optind < argc)
                positional[n_positional++] = argv[optind++];

        if (n_positional == 0)
                return cli_usage_error("missing command: expected status, top, reserve, modify or release");

        if (streq(positional[0], "status")) {
                args->command = COMMAND_STATUS;
                if (n_positional > 1)
                        return cli_usage_error("status takes no arguments, got '%s'", positional[1]);
        } else if (streq(positional[0], "top")) {
                args->command = COMMAND_TOP;
                if (n_positional > 1)
                        return cli_usage_error("top takes options only, got '%s'", positional[1]);
                if (args->json)
                        return cli_usage_error("--json does not apply to top: use 'status --json' "
                                               "in a loop for a program to read");
        } else if (streq(positional[0], "reserve")) {
                args->command = COMMAND_RESERVE;
                if (n_positional > 1)
                        return cli_usage_error("reserve takes options only, got '%s'", positional[1]);
                if (!args->have_period || !args->have_util)
                        return cli_usage_error("reserve needs both --period and --util, "
                                           "e.g. --period 50ms --util 60%%");
                /* A thread id says which scope is meant. */
                if (args->reserve.tid != 0 && !args->have_scope)
                        args->reserve.scope = PACE_SCOPE_THREAD;
                if (args->reserve.tid != 0 && args->reserve.scope != PACE_SCOPE_THREAD)
                        return cli_usage_error("--tid applies to --scope thread only, not --scope %s",
                                               cli_scope_name(args->reserve.scope));
                if (args->reserve.scope == PACE_SCOPE_THREAD && args->reserve.pid != 0 && args->reserve.tid == 0)
                        return cli_usage_error("--scope thread with --pid needs --tid: which of the "
                                               "process's threads");
        } else if (streq(positional[0], "release")) {
                args->command = COMMAND_RELEASE;
                if (n_positional < 2)
                        return cli_usage_error("release needs the reservation's ID (see '%s status')", cli_program);
                if (n_positional > 2)
                        return cli_usage_error("release takes one ID, got also '%s'", positional[2]);
                r = parse_id(positional[1], &args->release_id);
                if (r < 0)
                        return cli_usage_error("invalid reservation ID '%s': expected a number as shown "
                                           "by '%s status'", positional[1], cli_program);
        } else if (streq(positional[0], "modify")) {
                args->command = COMMAND_MODIFY;
                if (n_positional != 2)
                        return cli_usage_error("modify needs the reservation's ID and --period and --util, "
                                               "e.g. modify 3 --period 50ms --util 40%%");
                r = parse_id(positional[1], &args->release_id);
                if (r < 0)
                        return cli_usage_error("invalid reservation ID '%s': expected a number as shown "
                                               "by '%s status'", positional[1], cli_program);
                if (!args->have_period || !args->have_util)
                        return cli_usage_error("modify needs both --period and --util, e.g. --period 50ms --util 40%%");
                if (args->reserve.pid != 0)
                        return cli_usage_error("--pid does not apply to modify: a reservation keeps its process");
                if (args->have_scope || args->reserve.tid != 0)
                        return cli_usage_error("%s does not apply to modify: what a reservation covers is "
                                               "fixed when it is made", args->have_scope ? "--scope" : "--tid");
        } else if (streq(positional[0], "reload") || streq(positional[0], "reset")) {
                args->command = streq(positional[0], "reload") ? COMMAND_RELOAD : COMMAND_RESET;
                if (n_positional > 1)
                        return cli_usage_error("%s takes no arguments, got '%s'", positional[0], positional[1]);
        } else if (streq(positional[0], "table")) {
                args->command = COMMAND_TABLE;
                if (n_positional > 1)
                        return cli_usage_error("table takes no arguments, got '%s'", positional[1]);
        } else
                return cli_usage_error("unknown command '%s': expected status, top, reserve, modify, release, table, "
                                       "reload or reset", positional[0]);

        if (args->command != COMMAND_RESERVE && args->command != COMMAND_MODIFY && args->reserve_option)
                return cli_usage_error("%s only applies to the reserve and modify commands", args->reserve_option);
        if (args->command != COMMAND_TOP && args->top_option)
                return cli_usage_error("%s only applies to the top command", args->top_option);

        return 0;
}

/* The share of a CPU a grant really gets, which rounding may have moved away
 * from the requested one. */
static uint32_t granted_ppm(const pace_grant *g) {
        unsigned __int128 v;

        if (g->period_ns == 0)
                return 0;
        v = ((unsigned __int128) g->budget_ns * PPM + g->period_ns / 2) / g->period_ns;
        return v > UINT32_MAX ? UINT32_MAX : (uint32_t) v;
}

/* The share of one CPU delivered in the accounting window, in ppm; not
 * capped, since whatever the dispatcher measured is the answer. */
static double delivered_ppm(const pace_accounting *a) {
        if (a->window_ns == 0)
                return 0;
        return (double) (((unsigned __int128) a->delivered_ns * PPM + a->window_ns / 2) / a->window_ns);
}

/* Aligned plain-text tables: every cell is short (numbers, durations,
 * percentages), so a fixed cell size keeps this simple. */
#define CELL_MAX 32

typedef struct Table {
        size_t n_columns;
        const char *const *headers;
        const bool *right_align;
        size_t n_rows;
        char (*cells)[CELL_MAX];
} Table;

static int table_new(size_t n_columns, const char *const *headers, const bool *right_align, size_t n_rows,
                     Table *ret) {
        *ret = (Table) {
                .n_columns = n_columns,
                .headers = headers,
                .right_align = right_align,
                .n_rows = n_rows,
                .cells = calloc(MAX(n_rows, 1u) * n_columns, CELL_MAX),
        };
        return ret->cells ? 0 : -ENOMEM;
}

static char *table_cell(Table *t, size_t row, size_t column) {
        return t->cells[row * t->n_columns + column];
}

static void table_print_row(FILE *f, const Table *t, const size_t *widths, const char *const *row) {
        for (size_t c = 0; c < t->n_columns; c++) {
                bool last = c + 1 == t->n_columns;
                int w = (int) widths[c];

                if (t->right_align[c])
                        fprintf(f, "%*s", w, row[c]);
                else if (last)
                        fputs(row[c], f);
                else
                        fprintf(f, "%-*s", w, row[c]);
                fputs(last ? "\n" : "  ", f);
        }
}

static void table_print(FILE *f, Table *t) {
        size_t widths[16] = {};
        const char *row[16];

        if (t->n_columns > ELEMENTSOF(widths))
                abort();

        for (size_t c = 0; c < t->n_columns; c++) {
                widths[c] = strlen(t->headers[c]);
                for (size_t r = 0; r < t->n_rows; r++)
                        widths[c] = MAX(widths[c], strlen(table_cell(t, r, c)));
        }

        table_print_row(f, t, widths, t->headers);
        for (size_t r = 0; r < t->n_rows; r++) {
                for (size_t c = 0; c < t->n_columns; c++)
                        row[c] = table_cell(t, r, c);
                table_print_row(f, t, widths, row);
        }
}

/* The cells below are filled with snprintf into CELL_MAX bytes; every value
 * fits, and a cut cell is better than no table. */
#define CELL(t, r, c, ...) ((void) snprintf(table_cell((t), (r), (c)), CELL_MAX, __VA_ARGS__))

/* "59.8%": the share of one CPU that ns out of window_ns is, always with one
 * decimal so that a column of them lines up; "-" without a window. */
static const char *format_share(char *buf, size_t size, uint64_t ns, uint64_t window_ns) {
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

static const char *format_delivered(char *buf, size_t size, const pace_grant *g) {
        if (!g->accounting.valid)
                return format_share(buf, size, 0, 0);
        return format_share(buf, size, g->accounting.delivered_ns, g->accounting.window_ns);
}

/* A dispatcher's counter, or "-" before its first report. */
static const char *format_count(char *buf, size_t size, const pace_grant *g, uint64_t v) {
        if (!g->accounting.valid)
                snprintf(buf, size, "-");
        else
                snprintf(buf, size, "%" PRIu64, v);
        return buf;
}

static const char *format_scope(char *buf, size_t size, const pace_grant *g) {
        if (g->scope == PACE_SCOPE_THREAD && g->tid > 0)
                snprintf(buf, size, "thread %d", (int) g->tid);
        else
                snprintf(buf, size, "%s", cli_scope_name(g->scope));
        return buf;
}

/* 0 is what a broker that does not count threads sends. */
static const char *format_threads(char *buf, size_t size, const pace_grant *g) {
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

static int print_cpus(FILE *f, const pace_status_report *s, bool with_bar) {
        static const char *const cpu_headers[] = { "CPU", "RESERVED", "FREE", "FRAME", "# reserved . free" };
        static const bool cpu_right[] = { true, true, true, false, false };
        _cleanup_free_ char (*cells)[CELL_MAX] = NULL;
        Table t;

        if (s->n_cpus == 0) {
                fprintf(f, "No CPUs are managed by the broker.\n");
                return 0;
        }

        if (table_new(ELEMENTSOF(cpu_headers) - !with_bar, cpu_headers, cpu_right, s->n_cpus, &t) < 0)
                return -ENOMEM;
        cells = t.cells;

        for (size_t i = 0; i < s->n_cpus; i++) {
                const pace_cpu_status *c = &s->cpus[i];

                CELL(&t, i, 0, "%d", c->cpu);
                format_ppm(table_cell(&t, i, 1), CELL_MAX, c->reserved_ppm);
                format_ppm(table_cell(&t, i, 2), CELL_MAX, c->free_ppm);
                if (c->frame_ns == 0)
                        CELL(&t, i, 3, "-");
                else
                        format_duration(table_cell(&t, i, 3), CELL_MAX, c->frame_ns);
                if (with_bar)
                        format_cpu_bar(table_cell(&t, i, 4), CELL_MAX, c);
        }
        table_print(f, &t);
        return 0;
}

static int print_status_text(FILE *f, const pace_status_report *s) {
        /* Two tables rather than one of 16 columns: what each reservation is
         * (fits 80 columns), then what it was asked, given and really got,
         * side by side. */
        static const char *const reservation_headers[] = {
                "ID", "PID", "UID", "CPU", "KIND", "SCOPE", "THREADS", "REQ PERIOD", "PERIOD", "BUDGET", "SLOT",
        };
        static const bool reservation_right[] = {
                true, true, true, true, false, false, true, false, false, false, false,
        };
        static const char *const util_headers[] = {
                "ID", "REQUESTED", "GRANTED", "DELIVERED", "PERIODS", "BLOCKED", "WANTED MORE",
        };
        static const bool util_right[] = { true, true, true, true, true, true, true };
        _cleanup_free_ char (*reservation_cells)[CELL_MAX] = NULL;
        _cleanup_free_ char (*util_cells)[CELL_MAX] = NULL;
        Table t, u;
        char buf[CELL_MAX];

        if (s->n_reservations == 0)
                fprintf(f, "No reservations.\n");
        else {
                if (table_new(ELEMENTSOF(reservation_headers), reservation_headers, reservation_right,
                              s->n_reservations, &t) < 0)
                        return -ENOMEM;
                reservation_cells = t.cells;
                if (table_new(ELEMENTSOF(util_headers), util_headers, util_right, s->n_reservations, &u) < 0)
                        return -ENOMEM;
                util_cells = u.cells;

                for (size_t i = 0; i < s->n_reservations; i++) {
                        const pace_grant *g = &s->reservations[i];
                        const pace_accounting *a = &g->accounting;

                        CELL(&t, i, 0, "%" PRIu64, g->id);
                        CELL(&t, i, 1, "%d", (int) g->pid);
                        CELL(&t, i, 2, "%u", (unsigned) g->uid);
                        CELL(&t, i, 3, "%d", g->cpu);
                        /* "rtkit": asked through RealtimeKit1, not by the process itself. */
                        CELL(&t, i, 4, "%s%s", cli_kind_name(g->kind),
                             s->on_behalf && s->on_behalf[i] ? "/rtkit" : "");
                        format_scope(table_cell(&t, i, 5), CELL_MAX, g);
                        format_threads(table_cell(&t, i, 6), CELL_MAX, g);
                        format_duration(table_cell(&t, i, 7), CELL_MAX, g->requested_period_ns);
                        format_duration(table_cell(&t, i, 8), CELL_MAX, g->period_ns);
                        format_duration(table_cell(&t, i, 9), CELL_MAX, g->budget_ns);
                        format_duration(table_cell(&t, i, 10), CELL_MAX, g->slot_ns);

                        CELL(&u, i, 0, "%" PRIu64, g->id);
                        format_ppm(table_cell(&u, i, 1), CELL_MAX, g->requested_utilization_ppm);
                        format_ppm(table_cell(&u, i, 2), CELL_MAX, granted_ppm(g));
                        format_delivered(table_cell(&u, i, 3), CELL_MAX, g);
                        format_count(table_cell(&u, i, 4), CELL_MAX, g, a->periods);
                        format_count(table_cell(&u, i, 5), CELL_MAX, g, a->periods_blocked);
                        format_count(table_cell(&u, i, 6), CELL_MAX, g, a->periods_wanted_more);
                }
                table_print(f, &t);
                fputc('\n', f);
                table_print(f, &u);
                fprintf(f, "DELIVERED: CPU time received over the last whole periods (about 2s)%s.\n",
                        any_without_accounting(s) ? "; '-': no report from pace-dispatcher yet" : "");
        }

        if (s->n_nice_levels > 0) {
                fprintf(f, "\nNice levels (RealtimeKit1):");
                for (size_t i = 0; i < s->n_nice_levels; i++)
                        fprintf(f, " thread %d of pid %d at %d%s", (int) s->nice_levels[i].tid,
                                (int) s->nice_levels[i].pid, s->nice_levels[i].nice,
                                i + 1 < s->n_nice_levels ? ";" : ".\n");
        }

        fputc('\n', f);
        if (print_cpus(f, s, false) < 0)
                return -ENOMEM;

        fprintf(f, "\nNon-real-time share: %s of every CPU, never reserved.\n",
                format_ppm(buf, sizeof(buf), s->non_rt_share_ppm));
        return 0;
}

DEFINE_TRIVIAL_CLEANUP_FUNC(cJSON *, cJSON_Delete);

/* Numbers are raw nanoseconds and ppm, exact for a program to compute with. A
 * double holds integers up to 2^53 exactly: 104 days in ns, far beyond any
 * period. */
static bool json_add(cJSON *o, const char *name, double value) {
        return cJSON_AddNumberToObject(o, name, value) != NULL;
}

static cJSON *json_grant(const pace_grant *g) {
        _cleanup_(cJSON_Deletep) cJSON *o = cJSON_CreateObject();

        if (!o)
                return NULL;
        if (!json_add(o, "id", (double) g->id) ||
            !json_add(o, "pid", g->pid) ||
            !json_add(o, "uid", g->uid) ||
            !json_add(o, "cpu", g->cpu) ||
            !json_add(o, "requested_period_ns", (double) g->requested_period_ns) ||
            !json_add(o, "requested_utilization_ppm", g->requested_utilization_ppm) ||
            !json_add(o, "period_ns", (double) g->period_ns) ||
            !json_add(o, "budget_ns", (double) g->budget_ns) ||
            !json_add(o, "utilization_ppm", granted_ppm(g)) ||
            !json_add(o, "slot_ns", (double) g->slot_ns) ||
            !cJSON_AddStringToObject(o, "kind", cli_kind_name(g->kind)) ||
            !cJSON_AddStringToObject(o, "scope", cli_scope_name(g->scope)) ||
            !json_add(o, "tid", g->tid) ||
            !json_add(o, "threads", g->threads) ||
            !json_add(o, "phase_ns", (double) g->phase_ns))
                return NULL;
        /* Every CPU it lives on: [cpu], or a split one's pieces. */
        cJSON *cpus = cJSON_AddArrayToObject(o, "cpus");
        if (!cpus)
                return NULL;
        for (unsigned cpu = 0; cpu < 64; cpu++)
                if (g->split_cpus ? (g->split_cpus & (UINT64_C(1) << cpu)) != 0 : (int) cpu == g->cpu)
                        if (!cJSON_AddItemToArray(cpus, cJSON_CreateNumber(cpu)))
                                return NULL;

        /* null, not 0, before the dispatcher's first report: "nothing
         * delivered" and "nothing known" are different answers. */
        if (!g->accounting.valid) {
                if (!cJSON_AddNullToObject(o, "delivered_utilization_ppm") ||
                    !cJSON_AddNullToObject(o, "accounting"))
                        return NULL;
        } else {
                const pace_accounting *a = &g->accounting;
                cJSON *e;

                if (!json_add(o, "delivered_utilization_ppm", delivered_ppm(a)))
                        return NULL;
                e = cJSON_AddObjectToObject(o, "accounting");
                if (!e ||
                    !json_add(e, "window_ns", (double) a->window_ns) ||
                    !json_add(e, "delivered_ns", (double) a->delivered_ns) ||
                    !json_add(e, "cpu_time_ns", (double) a->cpu_time_ns) ||
                    !json_add(e, "periods", (double) a->periods) ||
                    !json_add(e, "periods_blocked", (double) a->periods_blocked) ||
                    !json_add(e, "periods_wanted_more", (double) a->periods_wanted_more))
                        return NULL;
        }
        return TAKE_PTR(o);
}

static cJSON *json_status(const pace_status_report *s) {
        _cleanup_(cJSON_Deletep) cJSON *o = cJSON_CreateObject();
        cJSON *reservations, *cpus;

        if (!o)
                return NULL;
        if (!json_add(o, "generation", (double) s->generation) ||
            !json_add(o, "non_rt_share_ppm", s->non_rt_share_ppm))
                return NULL;

        reservations = cJSON_AddArrayToObject(o, "reservations");
        if (!reservations)
                return NULL;
        for (size_t i = 0; i < s->n_reservations; i++) {
                cJSON *g = json_grant(&s->reservations[i]);

                if (!g || !cJSON_AddItemToArray(reservations, g)) {
                        cJSON_Delete(g);
                        return NULL;
                }
                if (!cJSON_AddBoolToObject(g, "on_behalf", s->on_behalf && s->on_behalf[i]))
                        return NULL;
        }

        cJSON *nice = cJSON_AddArrayToObject(o, "nice_levels");
        if (!nice)
                return NULL;
        for (size_t i = 0; i < s->n_nice_levels; i++) {
                cJSON *e = cJSON_CreateObject();
                if (!e || !cJSON_AddItemToArray(nice, e)) {
                        cJSON_Delete(e);
                        return NULL;
                }
                if (!json_add(e, "pid", s->nice_levels[i].pid) || !json_add(e, "tid", s->nice_levels[i].tid) ||
                    !json_add(e, "nice", s->nice_levels[i].nice))
                        return NULL;
        }

        cpus = cJSON_AddArrayToObject(o, "cpus");
        if (!cpus)
                return NULL;
        for (size_t i = 0; i < s->n_cpus; i++) {
                const pace_cpu_status *c = &s->cpus[i];
                cJSON *e = cJSON_CreateObject();

                if (!e || !cJSON_AddItemToArray(cpus, e)) {
                        cJSON_Delete(e);
                        return NULL;
                }
                if (!json_add(e, "cpu", c->cpu) ||
                    !json_add(e, "reserved_ppm", c->reserved_ppm) ||
                    !json_add(e, "free_ppm", c->free_ppm) ||
                    !json_add(e, "frame_ns", (double) c->frame_ns))
                        return NULL;
        }

        return TAKE_PTR(o);
}

static int print_json(cJSON *o) {
        _cleanup_free_ char *text = NULL;

        if (!o)
                return -ENOMEM;
        text = cJSON_Print(o);
        if (!text)
                return -ENOMEM;
        puts(text);
        return 0;
}

static void print_grant_text(const pace_grant *g) {
        char util[CELL_MAX], budget[CELL_MAX], period[CELL_MAX], slot[CELL_MAX];
        char req_util[CELL_MAX], req_period[CELL_MAX];

        char scope[CELL_MAX];

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

/* Reports a failed call and returns the exit code it deserves. */
static int report_failure(const char *what, const char *socket_path, int r) {
        const char *m = pace_last_message();

        if (cli_is_refusal(r)) {
                fprintf(stderr, "%s: %s refused: %s\n", cli_program, what, m ? m : pace_strerror(r));
                return EXIT_REFUSED;
        }
        if (r == -ENOMEM) {
                fprintf(stderr, "%s: out of memory\n", cli_program);
                return EXIT_TRANSPORT;
        }
        fprintf(stderr, "%s: %s failed talking to pace-broker at %s: %s\n", cli_program, what, socket_path,
                pace_strerror(r));
        return EXIT_TRANSPORT;
}

static int report_output_failure(int r) {
        fprintf(stderr, "%s: cannot format the output: %s\n", cli_program, pace_strerror(r));
        return EXIT_TRANSPORT;
}

static int do_status(pace *p, const Args *args, const char *socket_path) {
        _cleanup_(pace_status_report_freep) pace_status_report *s = NULL;
        int r;

        r = pace_status(p, &s);
        if (r < 0)
                return report_failure("status", socket_path, r);

        if (args->json) {
                _cleanup_(cJSON_Deletep) cJSON *o = json_status(s);

                r = print_json(o);
        } else
                r = print_status_text(stdout, s);
        if (r < 0)
                return report_output_failure(r);
        return EXIT_OK;
}

static int print_grant(const Args *args, const pace_grant *g) {
        if (args->json) {
                _cleanup_(cJSON_Deletep) cJSON *o = json_grant(g);
                int r = print_json(o);
                if (r < 0)
                        return report_output_failure(r);
        } else
                print_grant_text(g);
        return EXIT_OK;
}

static int do_reserve(pace *p, const Args *args, const char *socket_path) {
        pace_grant g;
        int r;

        if (args->reserve.pid == 0)
                fprintf(stderr, "%s: note: without --pid the reservation is for pacectl itself and ends "
                                "as soon as it exits (use pace-run to run a command reserved).\n",
                        cli_program);

        r = pace_reserve(p, &args->reserve, &g);
        if (r < 0)
                return report_failure("reserve", socket_path, r);
        return print_grant(args, &g);
}

static int do_modify(pace *p, const Args *args, const char *socket_path) {
        pace_grant g;
        int r = pace_modify(p, args->release_id, &args->reserve, &g);

        if (r < 0)
                return report_failure("modify", socket_path, r);
        return print_grant(args, &g);
}

static int do_release(pace *p, const Args *args, const char *socket_path) {
        int r;

        r = pace_release(p, args->release_id);
        if (r < 0)
                return report_failure("release", socket_path, r);

        if (args->json) {
                _cleanup_(cJSON_Deletep) cJSON *o = cJSON_CreateObject();

                if (o && !json_add(o, "released", (double) args->release_id))
                        o = (cJSON_Delete(o), NULL);
                r = print_json(o);
                if (r < 0)
                        return report_output_failure(r);
        } else
                printf("Released reservation %" PRIu64 ".\n", args->release_id);
        return EXIT_OK;
}

static int do_admin(pace *p, const Args *args, const char *socket_path) {
        const char *what = args->command == COMMAND_RELOAD ? "reload" : "reset";
        int r = args->command == COMMAND_RELOAD ? pace_reload(p) : pace_reset(p);

        if (r < 0)
                return report_failure(what, socket_path, r);
        printf("%s\n", pace_last_message() ?: "done");
        return EXIT_OK;
}

/* The published table, drawn: enough to see where the free time is. */
static int do_table(const char *socket_path) {
        _cleanup_(table_reader_freep) TableReader *reader = NULL;
        _cleanup_free_ PaceTableBuffer *t = NULL;
        _cleanup_free_ char *dir = strdup(socket_path);
        char path[PATH_MAX];
        uint64_t gen;
        int r;

        if (!dir)
                return EXIT_TRANSPORT;
        char *slash = strrchr(dir, '/');
        if (slash)
                *slash = '\0';
        snprintf(path, sizeof(path), "%s/%s", slash ? dir : ".", PACE_TABLE_NAME);

        t = malloc(sizeof(*t));
        if (!t)
                return EXIT_TRANSPORT;
        r = table_reader_open(path, &reader);
        if (r >= 0)
                for (int tries = 0; tries < 100; tries++) {
                        r = table_reader_snapshot(reader, t, &gen);
                        if (r != -EAGAIN)
                                break;
                }
        if (r < 0) {
                fprintf(stderr, "%s: cannot read the dispatch table %s: %s\n", cli_program, path, strerror(-r));
                return EXIT_TRANSPORT;
        }
        if (t->n_cpus > PACE_MAX_CPUS || t->n_reservations > PACE_MAX_RESERVATIONS || t->n_slots > PACE_TABLE_MAX_SLOTS) {
                fprintf(stderr, "%s: %s is not a valid table\n", cli_program, path);
                return EXIT_TRANSPORT;
        }

        char slot[32];
        printf("generation %" PRIu64 ", slot %s, %" PRIu32 " reservation(s)\n", gen,
               format_duration(slot, sizeof(slot), t->slot_ns), t->n_reservations);
        for (uint32_t i = 0; i < t->n_reservations; i++) {
                const PaceTableReservation *res = &t->reservations[i];
                printf("  %c  id %" PRIu64 ", pid %" PRIi32 ", CPU %" PRIi32 ", %" PRIu32 " of every %" PRIu32 " slots\n",
                       "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"[i % 52], res->id, res->pid, res->cpu,
                       res->budget_slots, res->period_slots);
        }
        for (uint32_t c = 0; c < t->n_cpus; c++) {
                const PaceTableCpu *cpu = &t->cpus[c];
                if (cpu->frame_slots == 0 || (uint64_t) cpu->first_slot + cpu->frame_slots > t->n_slots) {
                        printf("CPU %" PRIi32 ": nothing reserved\n", cpu->cpu);
                        continue;
                }
                printf("CPU %" PRIi32 ": frame of %" PRIu32 " slots\n", cpu->cpu, cpu->frame_slots);
                for (uint32_t s = 0; s < cpu->frame_slots; s++) {
                        uint16_t owner = t->slots[cpu->first_slot + s];
                        if (s % 50 == 0)
                                printf("  %5" PRIu32 " ", s);
                        putchar(owner == PACE_SLOT_FREE ? '.' :
                                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"[(owner - 1) % 52]);
                        if (s % 50 == 49 || s + 1 == cpu->frame_slots)
                                putchar('\n');
                        else if (s % 10 == 9)
                                putchar(' ');
                }
        }
        return EXIT_OK;
}

/* pacectl top: the status, refreshed in place like top(1).
 *
 * Signals are taken through a signalfd rather than handlers: the loop already
 * waits in poll() for the next refresh and for keys, so a resize, Ctrl-C or
 * Ctrl-Z is one more event there, handled in ordinary code that may touch the
 * terminal. That is also what makes sure the terminal leaves raw mode on every
 * way out but SIGKILL. */

#define TOP_LEGEND "DELIVERED: the last whole periods (about 2s); NOW: since the previous refresh."

typedef struct TopSample {
        uint64_t id;
        uint64_t cpu_time_ns;
} TopSample;

typedef struct Top {
        const Args *args;
        pace *p;
        const char *socket_path;

        bool tty_out;         /* redraw in place, cut to the window */
        bool raw_in;          /* stdin is in raw mode: keys are read */
        bool poll_in;         /* stdin still worth polling (no EOF yet) */
        bool cursor_hidden;
        bool clear_screen;    /* the next frame starts on a cleared screen */
        struct termios saved_termios;
        int signal_fd;
        bool mask_saved;
        sigset_t saved_mask;
        unsigned rows, cols;  /* 0: unknown */

        pace_status_report *report; /* the last one, redrawn on a resize */
        char error[512];            /* the last refresh's failure, shown instead */
        uint64_t refreshed_ns;
        /* CPU time since the previous refresh, per reservation of report;
         * UINT64_MAX where there is nothing to compare with. */
        uint64_t *recent_ns;
        uint64_t recent_window_ns;
        TopSample *samples;
        size_t n_samples;
        unsigned frames;
} Top;

typedef enum TopEvent {
        TOP_REFRESH,
        TOP_REDRAW,
        TOP_QUIT,
} TopEvent;

static uint64_t monotonic_ns(void) {
        struct timespec ts;

        (void) clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * NSEC_PER_SEC + (uint64_t) ts.tv_nsec;
}

static int write_all(int fd, const char *buf, size_t size) {
        while (size > 0) {
                ssize_t n = write(fd, buf, size);

                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return negative_errno();
                }
                buf += n;
                size -= (size_t) n;
        }
        return 0;
}

static void top_read_window_size(Top *t) {
        struct winsize ws = {};

        t->rows = t->cols = 0;
        if (t->tty_out && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) >= 0) {
                t->rows = ws.ws_row;
                t->cols = ws.ws_col;
        }
}

/* Keys arrive one by one and unechoed; ISIG stays, so that Ctrl-C and
 * Ctrl-Z still become signals (which the signalfd then reports). */
static void top_terminal_raw(Top *t) {
        struct termios raw;

        if (!t->raw_in)
                return;
        raw = t->saved_termios;
        raw.c_lflag &= ~(tcflag_t) (ICANON | ECHO);
        raw.c_cc[VMIN] = 1;
        raw.c_cc[VTIME] = 0;
        (void) tcsetattr(STDIN_FILENO, TCSANOW, &raw);
}

static void top_terminal_restore(Top *t) {
        if (t->cursor_hidden) {
                (void) write_all(STDOUT_FILENO, "\033[?25h", strlen("\033[?25h"));
                t->cursor_hidden = false;
        }
        if (t->raw_in)
                (void) tcsetattr(STDIN_FILENO, TCSANOW, &t->saved_termios);
}

static void top_done(Top *t) {
        top_terminal_restore(t);
        t->signal_fd = safe_close(t->signal_fd);
        if (t->mask_saved)
                (void) sigprocmask(SIG_SETMASK, &t->saved_mask, NULL);
        pace_status_report_free(t->report);
        free(t->recent_ns);
        free(t->samples);
}

static int top_init(Top *t) {
        static const int signals[] = { SIGINT, SIGTERM, SIGHUP, SIGWINCH, SIGTSTP };
        sigset_t mask;

        /* A reader that goes away (pacectl top | head) ends the loop through
         * a failed write, which then restores the terminal, instead of
         * killing pacectl with the terminal still raw. */
        if (signal(SIGPIPE, SIG_IGN) == SIG_ERR)
                return negative_errno();

        sigemptyset(&mask);
        for (size_t i = 0; i < ELEMENTSOF(signals); i++)
                sigaddset(&mask, signals[i]);
        if (sigprocmask(SIG_BLOCK, &mask, &t->saved_mask) < 0)
                return negative_errno();
        t->mask_saved = true;
        t->signal_fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
        if (t->signal_fd < 0)
                return negative_errno();

        t->tty_out = isatty(STDOUT_FILENO);
        t->clear_screen = true;
        top_read_window_size(t);

        /* Only in the foreground: a background job changing the terminal's
         * mode would be stopped by SIGTTOU. */
        if (isatty(STDIN_FILENO) && tcgetpgrp(STDIN_FILENO) == getpgrp() &&
            tcgetattr(STDIN_FILENO, &t->saved_termios) >= 0) {
                t->raw_in = true;
                t->poll_in = true;
                top_terminal_raw(t);
        }
        return 0;
}

/* Ctrl-Z: give the shell its terminal back as it was, stop, and take raw
 * mode again when continued. */
static void top_suspend(Top *t) {
        top_terminal_restore(t);
        (void) kill(getpid(), SIGSTOP);
        top_terminal_raw(t);
        top_read_window_size(t);
        t->clear_screen = true;
}

static const TopSample *top_find_sample(const Top *t, uint64_t id) {
        for (size_t i = 0; i < t->n_samples; i++)
                if (t->samples[i].id == id)
                        return &t->samples[i];
        return NULL;
}

/* Asks for a new status; a failure after the first is shown in the frame
 * and retried at the next refresh (libpace reconnects by itself), so that a
 * broker restart does not end the view. */
static int top_refresh(Top *t) {
        _cleanup_(pace_status_report_freep) pace_status_report *s = NULL;
        _cleanup_free_ uint64_t *recent = NULL;
        _cleanup_free_ TopSample *samples = NULL;
        size_t n_samples = 0;
        uint64_t now;
        int r;

        r = pace_status(t->p, &s);
        now = monotonic_ns();
        if (r < 0) {
                const char *m = pace_last_message();

                snprintf(t->error, sizeof(t->error), "status %s: %s (retrying every refresh)",
                         cli_is_refusal(r) ? "refused" : "failed", m ? m : pace_strerror(r));
                return r;
        }
        t->error[0] = '\0';

        recent = calloc(MAX(s->n_reservations, 1u), sizeof(*recent));
        samples = calloc(MAX(s->n_reservations, 1u), sizeof(*samples));
        if (!recent || !samples)
                return -ENOMEM;

        for (size_t i = 0; i < s->n_reservations; i++) {
                const pace_grant *g = &s->reservations[i];
                const TopSample *prev = top_find_sample(t, g->id);

                recent[i] = UINT64_MAX;
                if (!g->accounting.valid)
                        continue;
                /* A counter that went back is a new reservation under an old
                 * id (a broker restart) and says nothing about this interval. */
                if (prev && g->accounting.cpu_time_ns >= prev->cpu_time_ns)
                        recent[i] = g->accounting.cpu_time_ns - prev->cpu_time_ns;
                samples[n_samples++] = (TopSample) { .id = g->id, .cpu_time_ns = g->accounting.cpu_time_ns };
        }

        pace_status_report_free(t->report);
        t->report = TAKE_PTR(s);
        free(t->recent_ns);
        t->recent_ns = TAKE_PTR(recent);
        free(t->samples);
        t->samples = TAKE_PTR(samples);
        t->n_samples = n_samples;
        t->recent_window_ns = t->refreshed_ns > 0 ? now - t->refreshed_ns : 0;
        t->refreshed_ns = now;
        return 0;
}

static int top_print_reservations(FILE *f, const Top *t) {
        /* The status's two tables in one line per reservation, without what
         * does not change (uid, budget, slot): a live view is read across. */
        static const char *const headers[] = {
                "ID", "PID", "KIND", "SCOPE", "THREADS", "CPU", "PERIOD", "REQUESTED", "GRANTED", "DELIVERED",
                "NOW", "PERIODS", "BLOCKED", "WANTED MORE",
        };
        static const bool right[] = {
                true, true, false, false, true, true, false, true, true, true, true, true, true, true,
        };
        const pace_status_report *s = t->report;
        _cleanup_free_ char (*cells)[CELL_MAX] = NULL;
        Table tab;

        if (s->n_reservations == 0) {
                fprintf(f, "No reservations.\n");
                return 0;
        }

        if (table_new(ELEMENTSOF(headers), headers, right, s->n_reservations, &tab) < 0)
                return -ENOMEM;
        cells = tab.cells;

        for (size_t i = 0; i < s->n_reservations; i++) {
                const pace_grant *g = &s->reservations[i];
                const pace_accounting *a = &g->accounting;

                CELL(&tab, i, 0, "%" PRIu64, g->id);
                CELL(&tab, i, 1, "%d", (int) g->pid);
                CELL(&tab, i, 2, "%s", cli_kind_name(g->kind));
                format_scope(table_cell(&tab, i, 3), CELL_MAX, g);
                format_threads(table_cell(&tab, i, 4), CELL_MAX, g);
                CELL(&tab, i, 5, "%d", g->cpu);
                format_duration(table_cell(&tab, i, 6), CELL_MAX, g->period_ns);
                format_ppm(table_cell(&tab, i, 7), CELL_MAX, g->requested_utilization_ppm);
                format_ppm(table_cell(&tab, i, 8), CELL_MAX, granted_ppm(g));
                format_delivered(table_cell(&tab, i, 9), CELL_MAX, g);
                if (t->recent_ns[i] == UINT64_MAX)
                        CELL(&tab, i, 10, "-");
                else
                        format_share(table_cell(&tab, i, 10), CELL_MAX, t->recent_ns[i], t->recent_window_ns);
                format_count(table_cell(&tab, i, 11), CELL_MAX, g, a->periods);
                format_count(table_cell(&tab, i, 12), CELL_MAX, g, a->periods_blocked);
                format_count(table_cell(&tab, i, 13), CELL_MAX, g, a->periods_wanted_more);
        }
        table_print(f, &tab);
        return 0;
}

static int top_render(FILE *f, const Top *t) {
        char clock[16] = "", interval[CELL_MAX], share[CELL_MAX];
        struct tm tm;
        time_t now = time(NULL);

        if (localtime_r(&now, &tm))
                strftime(clock, sizeof(clock), "%H:%M:%S", &tm);
        fprintf(f, "pacectl top - %s - refresh every %s%s\n", clock,
                format_duration(interval, sizeof(interval), t->args->interval_ns),
                t->raw_in ? ", q to quit" : "");

        if (t->error[0]) {
                fprintf(f, "%s: %s\n", cli_program, t->error);
                return 0;
        }

        fprintf(f, "%zu reservation%s, non-real-time share %s of every CPU, table generation %" PRIu64 "\n\n",
                t->report->n_reservations, t->report->n_reservations == 1 ? "" : "s",
                format_ppm(share, sizeof(share), t->report->non_rt_share_ppm), t->report->generation);
        if (print_cpus(f, t->report, true) < 0)
                return -ENOMEM;
        fputc('\n', f);
        if (top_print_reservations(f, t) < 0)
                return -ENOMEM;
        if (t->report->n_reservations > 0)
                fprintf(f, "%s\n", TOP_LEGEND);
        return 0;
}

/* On a terminal: home, then each line cleared to its end and cut to the
 * window, then the rest of the screen cleared: no flicker, and nothing of a
 * longer previous frame left over. Elsewhere: frames one after another,
 * separated by a blank line. */
static int top_show(Top *t) {
        _cleanup_free_ char *frame = NULL, *out = NULL;
        _cleanup_(fclosep) FILE *f = NULL, *o = NULL;
        size_t frame_size = 0, out_size = 0;
        int r;

        f = open_memstream(&frame, &frame_size);
        if (!f)
                return -ENOMEM;
        r = top_render(f, t);
        if (r < 0)
                return r;
        if (fflush(f) != 0)
                return -ENOMEM;

        if (!t->tty_out) {
                r = t->frames > 0 ? write_all(STDOUT_FILENO, "\n", 1) : 0;
                if (r >= 0)
                        r = write_all(STDOUT_FILENO, frame, frame_size);
                t->frames++;
                return r;
        }

        o = open_memstream(&out, &out_size);
        if (!o)
                return -ENOMEM;
        if (!t->cursor_hidden) {
                fputs("\033[?25l", o);
                t->cursor_hidden = true;
        }
        fputs(t->clear_screen ? "\033[H\033[2J" : "\033[H", o);
        t->clear_screen = false;

        /* One row less than the window: a newline on its last row would
         * scroll the frame's first line away. */
        unsigned row = 0;
        for (const char *line = frame; line < frame + frame_size;) {
                const char *end = memchr(line, '\n', (size_t) (frame + frame_size - line));
                size_t len = end ? (size_t) (end - line) : (size_t) (frame + frame_size - line);

                if (t->rows > 0 && row + 1 >= t->rows)
                        break;
                fwrite(line, 1, t->cols > 0 ? MIN(len, (size_t) t->cols) : len, o);
                fputs("\033[K\n", o);
                row++;
                line += len + 1;
        }
        fputs("\033[J", o);
        if (fflush(o) != 0)
                return -ENOMEM;

        t->frames++;
        return write_all(STDOUT_FILENO, out, out_size);
}

static TopEvent top_on_signal(Top *t) {
        struct signalfd_siginfo si;

        while (read(t->signal_fd, &si, sizeof(si)) == (ssize_t) sizeof(si))
                switch (si.ssi_signo) {
                case SIGWINCH:
                        top_read_window_size(t);
                        /* Lines the old window wrapped are on the screen
                         * in places the next frame does not write. */
                        t->clear_screen = true;
                        return TOP_REDRAW;
                case SIGTSTP:
                        top_suspend(t);
                        return TOP_REDRAW;
                default: /* SIGINT, SIGTERM, SIGHUP */
                        return TOP_QUIT;
                }
        return TOP_REDRAW;
}

static TopEvent top_on_key(Top *t) {
        char keys[64];
        ssize_t n = read(STDIN_FILENO, keys, sizeof(keys));

        if (n <= 0) {
                /* End of input (a hung-up terminal): nothing more to read,
                 * and polling it again would spin. */
                if (n == 0 || (errno != EINTR && errno != EAGAIN))
                        t->poll_in = false;
                return TOP_REDRAW;
        }
        for (ssize_t i = 0; i < n; i++)
                if (keys[i] == 'q' || keys[i] == 'Q')
                        return TOP_QUIT;
        for (ssize_t i = 0; i < n; i++)
                if (keys[i] == ' ')
                        return TOP_REFRESH;
        return TOP_REDRAW;
}

/* Waits for the refresh due at deadline_ns, or an event before it. */
static TopEvent top_wait(Top *t, uint64_t deadline_ns) {
        for (;;) {
                struct pollfd pfd[2] = {
                        { .fd = t->signal_fd, .events = POLLIN },
                        { .fd = STDIN_FILENO, .events = POLLIN },
                };
                uint64_t now = monotonic_ns();
                TopEvent e;
                int n;

                if (now >= deadline_ns)
                        return TOP_REFRESH;

                n = poll(pfd, t->poll_in ? 2 : 1,
                         (int) MIN((deadline_ns - now + NSEC_PER_MSEC - 1) / NSEC_PER_MSEC, (uint64_t) INT_MAX));
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return TOP_QUIT;
                }
                if (pfd[0].revents) {
                        e = top_on_signal(t);
                        if (e != TOP_REDRAW || t->tty_out)
                                return e;
                }
                if (t->poll_in && pfd[1].revents) {
                        e = top_on_key(t);
                        if (e != TOP_REDRAW)
                                return e;
                }
        }
}

/* A failed write: the reader went away (as with `| head`, not an error
 * worth a word) or the output is broken. */
static int top_output_failure(int r) {
        if (r == -EPIPE)
                return EXIT_OK;
        if (r == -ENOMEM)
                return report_output_failure(r);
        fprintf(stderr, "%s: cannot write the output: %s\n", cli_program, strerror(-r));
        return EXIT_TRANSPORT;
}

static int do_top(pace *p, const Args *args, const char *socket_path) {
        _cleanup_(top_done) Top t = {
                .args = args,
                .p = p,
                .socket_path = socket_path,
                .signal_fd = -EBADF,
        };
        unsigned shown = 0;
        int r;

        /* Before the terminal is touched: a broker that cannot be asked at
         * all is reported like any other command's failure. */
        r = top_refresh(&t);
        if (r < 0)
                return report_failure("status", socket_path, r);

        r = top_init(&t);
        if (r < 0) {
                fprintf(stderr, "%s: cannot set up the terminal: %s\n", cli_program, strerror(-r));
                return EXIT_TRANSPORT;
        }

        for (;;) {
                TopEvent e;

                r = top_show(&t);
                if (r < 0)
                        return top_output_failure(r);
                if (args->iterations > 0 && ++shown >= args->iterations)
                        return EXIT_OK;

                for (;;) {
                        e = top_wait(&t, t.refreshed_ns + args->interval_ns);
                        if (e != TOP_REDRAW)
                                break;
                        r = top_show(&t);
                        if (r < 0)
                                return top_output_failure(r);
                }
                if (e == TOP_QUIT)
                        return EXIT_OK;

                r = top_refresh(&t);
                if (r == -ENOMEM)
                        return report_output_failure(r);
                if (r < 0)
                        /* The next deadline counts from now, not from the
                         * last good refresh, or a dead broker would be asked
                         * in a tight loop. */
                        t.refreshed_ns = monotonic_ns();
        }
}

static int run(const Args *args) {
        const char *socket_path = args->socket_path ? args->socket_path : pace_default_socket();
        _cleanup_(pace_closep) pace *p = NULL;
        int r;

        if (args->command == COMMAND_TABLE)
                return do_table(socket_path);

        r = pace_connect(socket_path, &p);
        if (r < 0) {
                fprintf(stderr, "%s: cannot connect to pace-broker at %s: %s\n", cli_program, socket_path,
                        pace_strerror(r));
                if (args->socket_path)
                        fprintf(stderr, "Is pace-broker running and listening on that socket?\n");
                else
                        fprintf(stderr, "Is pace-broker running? Set PACE_SOCKET or use --socket "
                                        "if it listens elsewhere.\n");
                return EXIT_TRANSPORT;
        }

        switch (args->command) {
        case COMMAND_STATUS:
                return do_status(p, args, socket_path);
        case COMMAND_RESERVE:
                return do_reserve(p, args, socket_path);
        case COMMAND_RELEASE:
                return do_release(p, args, socket_path);
        case COMMAND_RELOAD:
        case COMMAND_RESET:
                return do_admin(p, args, socket_path);
        case COMMAND_MODIFY:
                return do_modify(p, args, socket_path);
        case COMMAND_TOP:
                return do_top(p, args, socket_path);
        case COMMAND_TABLE:
                break;
        }
        abort();
}

int main(int argc, char *argv[]) {
        Args args;
        int r;

        cli_program = "pacectl";

        r = parse_args(argc, argv, &args);
        if (r < 0)
                r = r == -ENOMEM ? EXIT_TRANSPORT : EXIT_USAGE;
        else if (r > 0)
                r = EXIT_OK;
        else
                r = run(&args);

        /* A status piped into a full disk must not look like success. */
        if (fflush(stdout) != 0 || ferror(stdout)) {
                fprintf(stderr, "%s: cannot write the output: %s\n", cli_program, strerror(errno));
                if (r == EXIT_OK)
                        r = EXIT_TRANSPORT;
        }
        return r;
}
