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
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
} Command;

typedef struct Args {
        const char *socket_path;
        bool json;
        Command command;
        uint64_t release_id;
        pace_reserve_params reserve;
        /* The first reserve-only option seen, to name it if the command is not reserve. */
        const char *reserve_option;
        bool have_period, have_util;
} Args;


DEFINE_TRIVIAL_CLEANUP_FUNC(pace *, pace_close);
DEFINE_TRIVIAL_CLEANUP_FUNC(pace_status_report *, pace_status_report_free);

static bool streq(const char *a, const char *b) {
        return strcmp(a, b) == 0;
}

static void help(void) {
        printf("Usage: %1$s [OPTIONS] status\n"
               "       %1$s [OPTIONS] reserve --period DURATION --util SHARE [--pid PID] [--cpu N]\n"
               "       %1$s [OPTIONS] modify ID --period DURATION --util SHARE [--cpu N]\n"
               "       %1$s [OPTIONS] release ID\n"
               "       %1$s [OPTIONS] table\n"
               "       %1$s [OPTIONS] reload | reset         (root)\n"
               "\n"
               "Show and manage pace soft real-time CPU reservations.\n"
               "\n"
               "Commands:\n"
               "  status              list every reservation and each CPU's reserved and free share\n"
               "  reserve             reserve SHARE of a CPU in every DURATION for a process\n"
               "  modify ID           new period and share for a live reservation, all or nothing\n"
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

static int parse_args(int argc, char *argv[], Args *args) {
        enum {
                ARG_PID = 0x100,
                ARG_CPU,
        };
        static const struct option options[] = {
                { "socket",  required_argument, NULL, 's'     },
                { "json",    no_argument,       NULL, 'j'     },
                { "period",  required_argument, NULL, 'p'     },
                { "util",    required_argument, NULL, 'u'     },
                { "pid",     required_argument, NULL, ARG_PID },
                { "cpu",     required_argument, NULL, ARG_CPU },
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
        };

        /* The leading '-' hands over the command and its arguments in order,
         * so that options may come before or after the command (and
         * POSIXLY_CORRECT does not change that). */
        /* getopt's own messages would name the program by its full path and
         * not say how to get help. */
        opterr = 0;
        while ((c = getopt_long(argc, argv, "-:s:jp:u:hV", options, NULL)) >= 0) {
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
                case 'h':
                        help();
                        return 1;
                case 'V':
                        printf("%s (pace) %s\n", cli_program, PACE_VERSION);
                        return 1;
                case ':':
                case '?':
                        return cli_getopt_failure(c, argv, "sjpuhV");
                default:
                        abort();
                }
        }
        /* Whatever follows "--" is positional too. */
        while (optind < argc)
                positional[n_positional++] = argv[optind++];

        if (n_positional == 0)
                return cli_usage_error("missing command: expected status, reserve or release");

        if (streq(positional[0], "status")) {
                args->command = COMMAND_STATUS;
                if (n_positional > 1)
                        return cli_usage_error("status takes no arguments, got '%s'", positional[1]);
        } else if (streq(positional[0], "reserve")) {
                args->command = COMMAND_RESERVE;
                if (n_positional > 1)
                        return cli_usage_error("reserve takes options only, got '%s'", positional[1]);
                if (!args->have_period || !args->have_util)
                        return cli_usage_error("reserve needs both --period and --util, "
                                           "e.g. --period 50ms --util 60%%");
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
        } else if (streq(positional[0], "reload") || streq(positional[0], "reset")) {
                args->command = streq(positional[0], "reload") ? COMMAND_RELOAD : COMMAND_RESET;
                if (n_positional > 1)
                        return cli_usage_error("%s takes no arguments, got '%s'", positional[0], positional[1]);
        } else if (streq(positional[0], "table")) {
                args->command = COMMAND_TABLE;
                if (n_positional > 1)
                        return cli_usage_error("table takes no arguments, got '%s'", positional[1]);
        } else
                return cli_usage_error("unknown command '%s': expected status, reserve, modify, release, table, reload or reset", positional[0]);

        if (args->command != COMMAND_RESERVE && args->command != COMMAND_MODIFY && args->reserve_option)
                return cli_usage_error("%s only applies to the reserve and modify commands", args->reserve_option);

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

static void table_print_row(const Table *t, const size_t *widths, const char *const *row) {
        for (size_t c = 0; c < t->n_columns; c++) {
                bool last = c + 1 == t->n_columns;
                int w = (int) widths[c];

                if (t->right_align[c])
                        printf("%*s", w, row[c]);
                else if (last)
                        fputs(row[c], stdout);
                else
                        printf("%-*s", w, row[c]);
                fputs(last ? "\n" : "  ", stdout);
        }
}

static void table_print(Table *t) {
        size_t widths[16] = {};
        const char *row[16];

        if (t->n_columns > ELEMENTSOF(widths))
                abort();

        for (size_t c = 0; c < t->n_columns; c++) {
                widths[c] = strlen(t->headers[c]);
                for (size_t r = 0; r < t->n_rows; r++)
                        widths[c] = MAX(widths[c], strlen(table_cell(t, r, c)));
        }

        table_print_row(t, widths, t->headers);
        for (size_t r = 0; r < t->n_rows; r++) {
                for (size_t c = 0; c < t->n_columns; c++)
                        row[c] = table_cell(t, r, c);
                table_print_row(t, widths, row);
        }
}

static int print_status_text(const pace_status_report *s) {
        static const char *const reservation_headers[] = {
                "ID", "PID", "UID", "CPU", "REQ PERIOD", "REQ UTIL", "PERIOD", "BUDGET", "UTIL", "SLOT",
        };
        static const bool reservation_right[] = {
                true, true, true, true, false, false, false, false, false, false,
        };
        static const char *const cpu_headers[] = { "CPU", "RESERVED", "FREE", "FRAME" };
        static const bool cpu_right[] = { true, false, false, false };
        _cleanup_free_ char (*reservation_cells)[CELL_MAX] = NULL;
        _cleanup_free_ char (*cpu_cells)[CELL_MAX] = NULL;
        Table t;
        char buf[CELL_MAX];

        if (s->n_reservations == 0)
                printf("No reservations.\n");
        else {
                if (table_new(ELEMENTSOF(reservation_headers), reservation_headers, reservation_right,
                              s->n_reservations, &t) < 0)
                        return -ENOMEM;
                reservation_cells = t.cells;

                for (size_t i = 0; i < s->n_reservations; i++) {
                        const pace_grant *g = &s->reservations[i];

                        snprintf(table_cell(&t, i, 0), CELL_MAX, "%" PRIu64, g->id);
                        snprintf(table_cell(&t, i, 1), CELL_MAX, "%d", (int) g->pid);
                        snprintf(table_cell(&t, i, 2), CELL_MAX, "%u", (unsigned) g->uid);
                        snprintf(table_cell(&t, i, 3), CELL_MAX, "%d", g->cpu);
                        format_duration(table_cell(&t, i, 4), CELL_MAX, g->requested_period_ns);
                        format_ppm(table_cell(&t, i, 5), CELL_MAX, g->requested_utilization_ppm);
                        format_duration(table_cell(&t, i, 6), CELL_MAX, g->period_ns);
                        format_duration(table_cell(&t, i, 7), CELL_MAX, g->budget_ns);
                        format_ppm(table_cell(&t, i, 8), CELL_MAX, granted_ppm(g));
                        format_duration(table_cell(&t, i, 9), CELL_MAX, g->slot_ns);
                }
                table_print(&t);
        }

        putchar('\n');
        if (s->n_cpus > 0) {
                if (table_new(ELEMENTSOF(cpu_headers), cpu_headers, cpu_right, s->n_cpus, &t) < 0)
                        return -ENOMEM;
                cpu_cells = t.cells;

                for (size_t i = 0; i < s->n_cpus; i++) {
                        const pace_cpu_status *c = &s->cpus[i];

                        snprintf(table_cell(&t, i, 0), CELL_MAX, "%d", c->cpu);
                        format_ppm(table_cell(&t, i, 1), CELL_MAX, c->reserved_ppm);
                        format_ppm(table_cell(&t, i, 2), CELL_MAX, c->free_ppm);
                        if (c->frame_ns == 0)
                                snprintf(table_cell(&t, i, 3), CELL_MAX, "-");
                        else
                                format_duration(table_cell(&t, i, 3), CELL_MAX, c->frame_ns);
                }
                table_print(&t);
        } else
                printf("No CPUs are managed by the broker.\n");

        printf("\nNon-real-time share: %s of every CPU, never reserved.\n",
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
            !json_add(o, "slot_ns", (double) g->slot_ns))
                return NULL;
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

        printf("Reservation %" PRIu64 ": %s of CPU %d for pid %d, %s in every %s (slot %s)",
               g->id, format_ppm(util, sizeof(util), granted_ppm(g)), g->cpu, (int) g->pid,
               format_duration(budget, sizeof(budget), g->budget_ns),
               format_duration(period, sizeof(period), g->period_ns),
               format_duration(slot, sizeof(slot), g->slot_ns));
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
                r = print_status_text(s);
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
