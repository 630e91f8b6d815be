/* SPDX-License-Identifier: MIT */

/* pace-run: run a command with a soft real-time CPU reservation, in the
 * manner of chrt(1) and taskset(1).
 *
 * The reservation is made for pace-run's own pid and the command is then
 * exec'd in the same process: the pid, and with it the reservation, carry
 * over. A reservation dies with its process, so there is nothing to clean up
 * when the command exits.
 *
 * Exit status, as env(1) does it: the command's own, or 126 if it could not
 * be run, 127 if it was not found; before that 1 when the broker refused, 2
 * for a usage error, 3 when the broker could not be reached. */

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

#include "macro.h"
#include "pace-build-config.h"
#include "pace-limits.h"
#include "pace/pace.h"
#include "parse-util.h"

enum {
        EXIT_REFUSED = 1,
        EXIT_USAGE = 2,
        EXIT_TRANSPORT = 3,
        EXIT_CANNOT_RUN = 126,
        EXIT_NOT_FOUND = 127,
};

typedef struct Args {
        const char *socket_path;
        pace_reserve_params reserve;
        bool have_period, have_util;
        bool best_effort;
        bool quiet;
        char **command;
} Args;

static const char *program_name = "pace-run";

DEFINE_TRIVIAL_CLEANUP_FUNC(pace *, pace_close);
DEFINE_TRIVIAL_CLEANUP_FUNC(pace_status_report *, pace_status_report_free);

static void help(void) {
        printf("Usage: %1$s [OPTIONS] --period DURATION --util SHARE [--] COMMAND [ARGS...]\n"
               "\n"
               "Run COMMAND with a soft real-time CPU reservation: SHARE of one CPU in every\n"
               "DURATION, guaranteed by pace-broker. The reservation lasts as long as the\n"
               "command's process.\n"
               "\n"
               "Options:\n"
               "  -p, --period DUR    period, with a unit: 50ms, 250us, 1.5ms, 1s\n"
               "  -u, --util SHARE    share of one CPU in every period: 60%% or 0.6\n"
               "  -c, --cpu N         reserve on CPU N (default: the broker chooses)\n"
               "  -b, --best-effort   if the reservation cannot be had, warn and run the\n"
               "                      command anyway, without one\n"
               "  -q, --quiet         do not print the grant\n"
               "  -s, --socket PATH   broker socket (default: $PACE_SOCKET, else %2$s)\n"
               "  -h, --help          show this help\n"
               "  -V, --version       show the version\n"
               "\n"
               "Exit status: that of COMMAND; otherwise 1 if the broker refused, 2 for a usage\n"
               "error, 3 if the broker could not be reached, 126 if COMMAND could not be run,\n"
               "127 if it was not found.\n",
               program_name, PACE_DEFAULT_SOCKET);
}

_printf_(1, 2) static int usage_error(const char *format, ...) {
        va_list ap;

        fprintf(stderr, "%s: ", program_name);
        va_start(ap, format);
        vfprintf(stderr, format, ap);
        va_end(ap);
        fprintf(stderr, "\nTry '%s --help' for more information.\n", program_name);
        return -EINVAL;
}

static bool is_refusal(int r) {
        return r <= -(PACE_E_BASE + 1) && r > PACE_E_PROTOCOL;
}

/* Returns 0 to go on, 1 when the work is done (--help, --version), or a
 * negative value after a usage error has been reported. */
static int parse_args(int argc, char *argv[], Args *args) {
        static const struct option options[] = {
                { "period",      required_argument, NULL, 'p' },
                { "util",        required_argument, NULL, 'u' },
                { "cpu",         required_argument, NULL, 'c' },
                { "best-effort", no_argument,       NULL, 'b' },
                { "quiet",       no_argument,       NULL, 'q' },
                { "socket",      required_argument, NULL, 's' },
                { "help",        no_argument,       NULL, 'h' },
                { "version",     no_argument,       NULL, 'V' },
                {}
        };
        uint32_t cpu;
        int c, r;

        *args = (Args) {
                .reserve = { .pid = 0, .cpu = -1 },
        };

        /* '+': stop at the command, whose own options are not ours. */
        opterr = 0;
        while ((c = getopt_long(argc, argv, "+:p:u:c:bqs:hV", options, NULL)) >= 0) {
                switch (c) {
                case 'p':
                        r = parse_duration_ns(optarg, &args->reserve.period_ns);
                        if (r == -ERANGE)
                                return usage_error("--period '%s' is out of range: it must be more than 0 "
                                                   "and at most about 584 years", optarg);
                        if (r < 0)
                                return usage_error("invalid --period '%s': expected a duration with a unit, "
                                                   "e.g. 50ms, 250us, 1.5ms or 1s", optarg);
                        args->have_period = true;
                        break;
                case 'u':
                        r = parse_utilization_ppm(optarg, &args->reserve.utilization_ppm);
                        if (r == -ERANGE)
                                return usage_error("--util '%s' is out of range: it must be more than 0%% "
                                                   "and at most 100%% (one whole CPU)", optarg);
                        if (r < 0)
                                return usage_error("invalid --util '%s': expected a percentage such as 60%% "
                                                   "or a fraction of one CPU such as 0.6", optarg);
                        args->have_util = true;
                        break;
                case 'c':
                        if (parse_uint32(optarg, &cpu) < 0 || cpu > INT_MAX)
                                return usage_error("invalid --cpu '%s': expected a CPU number (0, 1, ...)",
                                                   optarg);
                        args->reserve.cpu = (int) cpu;
                        break;
                case 'b':
                        args->best_effort = true;
                        break;
                case 'q':
                        args->quiet = true;
                        break;
                case 's':
                        if (!*optarg)
                                return usage_error("--socket needs a path");
                        args->socket_path = optarg;
                        break;
                case 'h':
                        help();
                        return 1;
                case 'V':
                        printf("%s (pace) %s\n", program_name, PACE_VERSION);
                        return 1;
                case ':':
                        if (strncmp(argv[optind - 1], "--", 2) == 0)
                                return usage_error("option '%s' needs a value", argv[optind - 1]);
                        return usage_error("option '-%c' needs a value", optopt);
                case '?':
                        if (optopt == 0)
                                return usage_error("unknown option '%s'", argv[optind - 1]);
                        /* A known long option with a value it does not take,
                         * e.g. --quiet=yes: getopt reports its short name. */
                        if (strchr("bqhV", optopt) && strncmp(argv[optind - 1], "--", 2) == 0)
                                return usage_error("option '%s' takes no value", argv[optind - 1]);
                        return usage_error("unknown option '-%c'", optopt);
                default:
                        abort();
                }
        }

        if (!args->have_period || !args->have_util)
                return usage_error("--period and --util are required, e.g. "
                                   "%s --period 50ms --util 60%% -- COMMAND", program_name);
        if (optind >= argc)
                return usage_error("missing COMMAND to run");

        args->command = argv + optind;
        return 0;
}

static void print_grant(const pace_grant *g) {
        char util[32], budget[32], period[32], slot[32], req_util[32], req_period[32];
        uint64_t ppm = 0;

        /* Rounding to the table's slots may have moved the share away from
         * the request: show what is really guaranteed. */
        if (g->period_ns > 0)
                ppm = (uint64_t) (((unsigned __int128) g->budget_ns * PPM + g->period_ns / 2) / g->period_ns);

        fprintf(stderr, "%s: reserved %s of CPU %d: %s in every %s (slot %s, reservation %" PRIu64 ")",
                program_name, format_ppm(util, sizeof(util), (uint32_t) MIN(ppm, (uint64_t) UINT32_MAX)), g->cpu,
                format_duration(budget, sizeof(budget), g->budget_ns),
                format_duration(period, sizeof(period), g->period_ns),
                format_duration(slot, sizeof(slot), g->slot_ns), g->id);
        if (g->period_ns != g->requested_period_ns || ppm != g->requested_utilization_ppm)
                fprintf(stderr, "; requested %s of every %s",
                        format_ppm(req_util, sizeof(req_util), g->requested_utilization_ppm),
                        format_duration(req_period, sizeof(req_period), g->requested_period_ns));
        fputc('\n', stderr);
}

/* After a refusal: what could be had instead, so the user can adjust the
 * request without a separate pacectl call. Best effort: a failure to fetch
 * the status adds nothing to the refusal already printed. */
static void print_free(pace *p) {
        _cleanup_(pace_status_report_freep) pace_status_report *s = NULL;
        char share[32];

        if (pace_status(p, &s) < 0 || s->n_cpus == 0)
                return;

        fprintf(stderr, "%s: free now:", program_name);
        for (size_t i = 0; i < s->n_cpus; i++)
                fprintf(stderr, "%s CPU %d %s", i > 0 ? "," : "", s->cpus[i].cpu,
                        format_ppm(share, sizeof(share), s->cpus[i].free_ppm));
        fprintf(stderr, " (the non-real-time share, %s, is never reserved)\n",
                format_ppm(share, sizeof(share), s->non_rt_share_ppm));
}

/* Returns 0 when reserved, else the exit code the failure deserves (which
 * --best-effort may overrule). */
static int reserve(const Args *args) {
        const char *socket_path = args->socket_path ? args->socket_path : pace_default_socket();
        _cleanup_(pace_closep) pace *p = NULL;
        pace_grant g;
        int r;

        r = pace_connect(socket_path, &p);
        if (r < 0) {
                fprintf(stderr, "%s: cannot connect to pace-broker at %s: %s\n", program_name, socket_path,
                        pace_strerror(r));
                if (args->socket_path)
                        fprintf(stderr, "%s: is pace-broker running and listening on that socket?\n",
                                program_name);
                else
                        fprintf(stderr, "%s: is pace-broker running? Set PACE_SOCKET or use --socket "
                                        "if it listens elsewhere.\n", program_name);
                return EXIT_TRANSPORT;
        }

        r = pace_reserve(p, &args->reserve, &g);
        if (r >= 0) {
                if (!args->quiet)
                        print_grant(&g);
                return 0;
        }

        if (!is_refusal(r)) {
                fprintf(stderr, "%s: reserving failed talking to pace-broker at %s: %s\n", program_name,
                        socket_path, pace_strerror(r));
                return EXIT_TRANSPORT;
        }

        /* Printed before print_free(), whose call replaces the message. */
        fprintf(stderr, "%s: reservation refused: %s\n", program_name,
                pace_last_message() ? pace_last_message() : pace_strerror(r));
        print_free(p);
        return EXIT_REFUSED;
}

int main(int argc, char *argv[]) {
        Args args;
        int r;

        r = parse_args(argc, argv, &args);
        if (r < 0)
                return EXIT_USAGE;
        if (r > 0)
                return fflush(stdout) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;

        /* The libpace handle is closed inside reserve(): nothing of it may
         * leak into the command (its socket is close-on-exec regardless). */
        r = reserve(&args);
        if (r != 0) {
                if (!args.best_effort)
                        return r;
                fprintf(stderr, "%s: warning: running %s without a reservation\n", program_name,
                        args.command[0]);
        }

        execvp(args.command[0], args.command);

        r = errno;
        fprintf(stderr, "%s: cannot run '%s': %s\n", program_name, args.command[0], strerror(r));
        return r == ENOENT ? EXIT_NOT_FOUND : EXIT_CANNOT_RUN;
}
