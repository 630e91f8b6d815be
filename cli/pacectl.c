/* SPDX-License-Identifier: MIT */

/* pacectl: look at and manage pace reservations. Each verb is a row of
 * verbs[]: how its arguments are checked and what it runs. */

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "macro.h"
#include "pace-build-config.h"
#include "pace-limits.h"
#include "pacectl.h"
#include "parse-util.h"
#include "table-shm.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(pace *, pace_close);

enum {
        ARG_PID = 0x100,
        ARG_CPU,
        ARG_SCOPE,
        ARG_TID,
        ARG_KIND,
};

typedef enum VerbFlags {
        VERB_CONNECT = 1 << 0,         /* asks the broker over its socket */
        VERB_RESERVE_OPTIONS = 1 << 1, /* takes --period, --util, --pid, --cpu, ... */
        VERB_TOP_OPTIONS = 1 << 2,     /* takes --interval, --iterations */
} VerbFlags;

typedef struct Verb Verb;
struct Verb {
        const char *name;
        /* Checks the positional arguments after the verb (and the options
         * that go together), filling in args. */
        int (*parse)(const Verb *v, Args *args, char **argv, size_t argc);
        /* p is NULL without VERB_CONNECT. Returns an exit code. */
        int (*run)(pace *p, const Args *args, const char *socket_path);
        VerbFlags flags;
};

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

/* Reports a failed call and returns the exit code it deserves. */
int report_failure(const char *what, const char *socket_path, int r) {
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

int report_output_failure(int r) {
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
                _cleanup_(cJSON_Deletep) cJSON *o = json_released(args->release_id);

                r = print_json(o);
                if (r < 0)
                        return report_output_failure(r);
        } else
                printf("Released reservation %" PRIu64 ".\n", args->release_id);
        return EXIT_OK;
}

/* reload and reset: root's, and the broker's answer is all there is to say. */
static int do_admin(const char *what, int r, const char *socket_path) {
        if (r < 0)
                return report_failure(what, socket_path, r);
        printf("%s\n", pace_last_message() ?: "done");
        return EXIT_OK;
}

static int do_reload(pace *p, const Args *args, const char *socket_path) {
        return do_admin("reload", pace_reload(p), socket_path);
}

static int do_reset(pace *p, const Args *args, const char *socket_path) {
        return do_admin("reset", pace_reset(p), socket_path);
}

/* The published table, drawn: enough to see where the free time is. The
 * one command that reads the broker's shared memory instead of asking over
 * the socket: see docs/hacking.md, "pacectl table", for why. */
static int do_table(pace *p, const Args *args, const char *socket_path) {
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
                r = table_reader_snapshot_retry(reader, t, &gen);
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

/* The first option seen that only some verbs take, to name it if the verb
 * is not one of them. */
static void note_option(const char **first, const char *name) {
        if (!*first)
                *first = name;
}

static int parse_option(int c, char **argv, Args *args) {
        switch (c) {
        case 's':
                if (!*optarg)
                        return cli_usage_error("--socket needs a path");
                args->socket_path = optarg;
                return 0;
        case 'j':
                args->json = true;
                return 0;
        case 'p':
                note_option(&args->reserve_option, "--period");
                args->have_period = true;
                return cli_parse_period("--period", optarg, &args->reserve.period_ns);
        case 'u':
                note_option(&args->reserve_option, "--util");
                args->have_util = true;
                return cli_parse_util("--util", optarg, &args->reserve.utilization_ppm);
        case ARG_PID:
                note_option(&args->reserve_option, "--pid");
                return cli_parse_pid("--pid", optarg, &args->reserve.pid);
        case ARG_CPU:
                note_option(&args->reserve_option, "--cpu");
                return cli_parse_cpu("--cpu", optarg, &args->reserve.cpu);
        case ARG_SCOPE:
                note_option(&args->reserve_option, "--scope");
                args->have_scope = true;
                return cli_parse_scope("--scope", optarg, &args->reserve.scope);
        case ARG_TID:
                note_option(&args->reserve_option, "--tid");
                return cli_parse_pid("--tid", optarg, &args->reserve.tid);
        case ARG_KIND:
                note_option(&args->reserve_option, "--kind");
                args->have_kind = true;
                return cli_parse_kind("--kind", optarg, &args->reserve.kind);
        case 'd':
                note_option(&args->top_option, "--interval");
                return parse_interval(optarg, &args->interval_ns);
        case 'n':
                note_option(&args->top_option, "--iterations");
                if (parse_uint32(optarg, &args->iterations) < 0 || args->iterations == 0)
                        return cli_usage_error("invalid --iterations '%s': expected how many refreshes "
                                               "to show (1, 2, ...)", optarg);
                return 0;
        default:
                return cli_common_option(c, argv, help, "jhV");
        }
}

/* What follows a verb: its positional arguments (argv, argc of them), and
 * the options that only make sense together. */
static int parse_no_arguments(const Verb *v, Args *args, char **argv, size_t argc) {
        if (argc > 0)
                return cli_usage_error("%s takes no arguments, got '%s'", v->name, argv[0]);
        return 0;
}

static int parse_top(const Verb *v, Args *args, char **argv, size_t argc) {
        if (argc > 0)
                return cli_usage_error("top takes options only, got '%s'", argv[0]);
        if (args->json)
                return cli_usage_error("--json does not apply to top: use 'status --json' "
                                       "in a loop for a program to read");
        return 0;
}

static int parse_reserve(const Verb *v, Args *args, char **argv, size_t argc) {
        if (argc > 0)
                return cli_usage_error("reserve takes options only, got '%s'", argv[0]);
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
        return 0;
}

static int parse_reservation_id(const char *s, uint64_t *ret) {
        if (parse_id(s, ret) < 0)
                return cli_usage_error("invalid reservation ID '%s': expected a number as shown "
                                       "by '%s status'", s, cli_program);
        return 0;
}

static int parse_release(const Verb *v, Args *args, char **argv, size_t argc) {
        if (argc < 1)
                return cli_usage_error("release needs the reservation's ID (see '%s status')", cli_program);
        if (argc > 1)
                return cli_usage_error("release takes one ID, got also '%s'", argv[1]);
        return parse_reservation_id(argv[0], &args->release_id);
}

static int parse_modify(const Verb *v, Args *args, char **argv, size_t argc) {
        int r;

        if (argc != 1)
                return cli_usage_error("modify needs the reservation's ID and --period and --util, "
                                       "e.g. modify 3 --period 50ms --util 40%%");
        r = parse_reservation_id(argv[0], &args->release_id);
        if (r < 0)
                return r;
        if (!args->have_period || !args->have_util)
                return cli_usage_error("modify needs both --period and --util, e.g. --period 50ms --util 40%%");
        if (args->reserve.pid != 0)
                return cli_usage_error("--pid does not apply to modify: a reservation keeps its process");
        if (args->have_scope || args->reserve.tid != 0)
                return cli_usage_error("%s does not apply to modify: what a reservation covers is "
                                       "fixed when it is made", args->have_scope ? "--scope" : "--tid");
        return 0;
}

static const Verb verbs[] = {
        { "status",  parse_no_arguments, do_status,  VERB_CONNECT },
        { "top",     parse_top,          do_top,     VERB_CONNECT | VERB_TOP_OPTIONS },
        { "reserve", parse_reserve,      do_reserve, VERB_CONNECT | VERB_RESERVE_OPTIONS },
        { "modify",  parse_modify,       do_modify,  VERB_CONNECT | VERB_RESERVE_OPTIONS },
        { "release", parse_release,      do_release, VERB_CONNECT },
        { "table",   parse_no_arguments, do_table,   0 },
        { "reload",  parse_no_arguments, do_reload,  VERB_CONNECT },
        { "reset",   parse_no_arguments, do_reset,   VERB_CONNECT },
};

static const Verb *find_verb(const char *name) {
        for (size_t i = 0; i < ELEMENTSOF(verbs); i++)
                if (streq(verbs[i].name, name))
                        return &verbs[i];
        return NULL;
}

/* 0 and the verb to run, 1 when there is nothing to run (--help,
 * --version), or a negative errno after a usage error was printed. */
static int parse_argv(int argc, char *argv[], Args *args, const Verb **ret_verb) {
        static const struct option options[] = {
                { "socket",     required_argument, NULL, 's'       },
                { "json",       no_argument,       NULL, 'j'       },
                { "period",     required_argument, NULL, 'p'       },
                { "util",       required_argument, NULL, 'u'       },
                { "pid",        required_argument, NULL, ARG_PID   },
                { "cpu",        required_argument, NULL, ARG_CPU   },
                { "scope",      required_argument, NULL, ARG_SCOPE },
                { "tid",        required_argument, NULL, ARG_TID   },
                { "kind",       required_argument, NULL, ARG_KIND  },
                { "interval",   required_argument, NULL, 'd'       },
                { "iterations", required_argument, NULL, 'n'       },
                { "help",       no_argument,       NULL, 'h'       },
                { "version",    no_argument,       NULL, 'V'       },
                {}
        };
        _cleanup_free_ char **positional = NULL;
        size_t n_positional = 0;
        const Verb *verb;
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

        /* The leading '-' hands over the verb and its arguments in order,
         * so that options may come before or after the verb (and
         * POSIXLY_CORRECT does not change that). getopt's own messages
         * would name the program by its full path and not say how to get
         * help. */
        opterr = 0;
        while ((c = getopt_long(argc, argv, "-:s:jp:u:d:n:hV", options, NULL)) >= 0) {
                if (c == 1) {
                        positional[n_positional++] = optarg;
                        continue;
                }
                r = parse_option(c, argv, args);
                if (r != 0)
                        return r;
        }
        /* Whatever follows "--" is positional too. */
        while (optind < argc)
                positional[n_positional++] = argv[optind++];

        if (n_positional == 0)
                return cli_usage_error("missing command: expected status, top, reserve, modify or release");
        verb = find_verb(positional[0]);
        if (!verb)
                return cli_usage_error("unknown command '%s': expected status, top, reserve, modify, release, table, "
                                       "reload or reset", positional[0]);
        r = verb->parse(verb, args, positional + 1, n_positional - 1);
        if (r < 0)
                return r;

        if (!(verb->flags & VERB_RESERVE_OPTIONS) && args->reserve_option)
                return cli_usage_error("%s only applies to the reserve and modify commands", args->reserve_option);
        if (!(verb->flags & VERB_TOP_OPTIONS) && args->top_option)
                return cli_usage_error("%s only applies to the top command", args->top_option);

        *ret_verb = verb;
        return 0;
}

static int run(const Verb *verb, const Args *args) {
        const char *socket_path = args->socket_path ? args->socket_path : pace_default_socket();
        _cleanup_(pace_closep) pace *p = NULL;
        int r;

        if (!(verb->flags & VERB_CONNECT))
                return verb->run(NULL, args, socket_path);

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
        return verb->run(p, args, socket_path);
}

int main(int argc, char *argv[]) {
        const Verb *verb = NULL;
        Args args;
        int r;

        cli_program = "pacectl";

        r = parse_argv(argc, argv, &args, &verb);
        if (r < 0)
                r = r == -ENOMEM ? EXIT_TRANSPORT : EXIT_USAGE;
        else if (r > 0)
                r = EXIT_OK;
        else
                r = run(verb, &args);

        /* A status piped into a full disk must not look like success. */
        if (fflush(stdout) != 0 || ferror(stdout)) {
                fprintf(stderr, "%s: cannot write the output: %s\n", cli_program, strerror(errno));
                if (r == EXIT_OK)
                        r = EXIT_TRANSPORT;
        }
        return r;
}

