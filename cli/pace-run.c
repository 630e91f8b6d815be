/* SPDX-License-Identifier: MIT */

/* pace-run: run a command with a soft real-time CPU reservation, in the
 * manner of chrt(1) and taskset(1).
 *
 * The reservation is made for pace-run's own pid and the command is then
 * exec'd in the same process: the pid, and with it the reservation, carry
 * over. A reservation dies with its process, so there is nothing to clean up
 * when the command exits.
 *
 * The scope says what the reservation covers. The default, tree, covers the
 * command and everything it starts, which is what "run this reserved" means
 * for `pace-run -- sh -c 'a | b'`. Thread scope covers the thread that asks:
 * pace-run has only one, its main thread, and exec keeps that thread and its
 * id, so it becomes the command's main thread.
 *
 * Exit status, as env(1) does it: the command's own, or 126 if it could not
 * be run, 127 if it was not found; before that 1 when the broker refused, 2
 * for a usage error, 3 when the broker could not be reached. */

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "macro.h"
#include "pace-build-config.h"
#include "pace-limits.h"
#include "pace/pace.h"
#include "parse-util.h"
#include "time-util.h"

/* The kind an unmodified program gets when --kind is not given: the one
 * that meets such a program's deadlines best, by bench/response (a
 * server's response times are at SCHED_DEADLINE's median, slots' about
 * 2.4 times it: docs/benchmarks.md). A server is never split over CPUs;
 * where only a split fits, reserve() falls back to slots. */
#define PACE_RUN_DEFAULT_KIND PACE_KIND_SERVER

/* How long pace-run waits for pace-dispatcher to take a grant up before it
 * runs the command anyway. The dispatcher looks for new reservations every
 * 50 ms; under heavy churn (bench/soak) a take-up was seen to need 1.2 s. */
#define PACE_RUN_DEFAULT_WAIT_NS (3 * NSEC_PER_SEC)

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
        bool have_period, have_util, have_kind;
        bool best_effort;
        bool quiet;
        uint64_t wait_ns;
        char **command;
} Args;


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
               "      --scope SCOPE   what the reservation covers: tree (default: the command\n"
               "                      and every process it starts), process (the command's\n"
               "                      threads) or thread (its main thread only)\n"
               "  -k, --kind KIND     slots (the budget spread over the period), server (runs\n"
               "                      the moment it is runnable while budget is left) or\n"
               "                      aligned (the budget in one piece at the start of each\n"
               "                      period, for programs that wait for it); default %3$s\n"
               "  -b, --best-effort   if the reservation cannot be had, warn and run the\n"
               "                      command anyway, without one\n"
               "  -q, --quiet         do not print the grant\n"
               "  -w, --wait DUR      start COMMAND only once pace-dispatcher holds it, waiting\n"
               "                      at most DUR (default 3s; 0: start it at once); after that\n"
               "                      it starts anyway, with a warning\n"
               "  -s, --socket PATH   broker socket (default: $PACE_SOCKET, else %2$s)\n"
               "  -h, --help          show this help\n"
               "  -V, --version       show the version\n"
               "\n"
               "Exit status: that of COMMAND; otherwise 1 if the broker refused, 2 for a usage\n"
               "error, 3 if the broker could not be reached, 126 if COMMAND could not be run,\n"
               "127 if it was not found.\n",
               cli_program, PACE_DEFAULT_SOCKET, cli_kind_name(PACE_RUN_DEFAULT_KIND));
}

enum {
        ARG_SCOPE = 0x100,
};

/* "0", "0ms", "0.0s": a wait may be none, which a period may not. */
static bool is_zero_duration(const char *s) {
        size_t n = strspn(s, "0.");
        if (n == 0 || strspn(s, "0") == 0)
                return false;
        s += n;
        return !*s || strcmp(s, "s") == 0 || strcmp(s, "ms") == 0 || strcmp(s, "us") == 0 || strcmp(s, "ns") == 0;
}

/* One option into args: 0, 1 when the work is done (--help, --version), or
 * a negative value after a usage error has been reported. */
static int parse_option(int c, char *argv[], Args *args) {
        switch (c) {
        case 'p':
                args->have_period = true;
                return cli_parse_period("--period", optarg, &args->reserve.period_ns);
        case 'u':
                args->have_util = true;
                return cli_parse_util("--util", optarg, &args->reserve.utilization_ppm);
        case 'c':
                return cli_parse_cpu("--cpu", optarg, &args->reserve.cpu);
        case ARG_SCOPE:
                return cli_parse_scope("--scope", optarg, &args->reserve.scope);
        case 'k':
                args->have_kind = true;
                return cli_parse_kind("--kind", optarg, &args->reserve.kind);
        case 'b':
                args->best_effort = true;
                return 0;
        case 'q':
                args->quiet = true;
                return 0;
        case 'w':
                if (is_zero_duration(optarg)) {
                        args->wait_ns = 0;
                        return 0;
                }
                return cli_parse_period("--wait", optarg, &args->wait_ns);
        case 's':
                if (!*optarg)
                        return cli_usage_error("--socket needs a path");
                args->socket_path = optarg;
                return 0;
        default:
                return cli_common_option(c, argv, help, "bqhV");
        }
}

/* Returns 0 to go on, 1 when the work is done (--help, --version), or a
 * negative value after a usage error has been reported. */
static int parse_args(int argc, char *argv[], Args *args) {
        static const struct option options[] = {
                { "period",      required_argument, NULL, 'p' },
                { "util",        required_argument, NULL, 'u' },
                { "cpu",         required_argument, NULL, 'c' },
                { "scope",       required_argument, NULL, ARG_SCOPE },
                { "kind",        required_argument, NULL, 'k' },
                { "best-effort", no_argument,       NULL, 'b' },
                { "quiet",       no_argument,       NULL, 'q' },
                { "wait",        required_argument, NULL, 'w' },
                { "socket",      required_argument, NULL, 's' },
                { "help",        no_argument,       NULL, 'h' },
                { "version",     no_argument,       NULL, 'V' },
                {}
        };
        int c, r;

        *args = (Args) {
                .reserve = { .pid = 0, .cpu = -1, .scope = PACE_SCOPE_TREE, .kind = PACE_RUN_DEFAULT_KIND },
                .wait_ns = PACE_RUN_DEFAULT_WAIT_NS,
        };

        /* '+': stop at the command, whose own options are not ours. */
        opterr = 0;
        while ((c = getopt_long(argc, argv, "+:p:u:c:k:bqw:s:hV", options, NULL)) >= 0) {
                r = parse_option(c, argv, args);
                if (r != 0)
                        return r;
        }

        if (!args->have_period || !args->have_util)
                return cli_usage_error("--period and --util are required, e.g. "
                                       "%s --period 50ms --util 60%% -- COMMAND", cli_program);
        if (optind >= argc)
                return cli_usage_error("missing COMMAND to run");

        args->command = argv + optind;
        return 0;
}

static void print_grant(const pace_grant *g, pace_scope requested_scope, pace_kind requested_kind) {
        char util[32], budget[32], period[32], slot[32], req_util[32], req_period[32];
        uint64_t ppm = 0;

        /* Rounding to the table's slots may have moved the share away from
         * the request: show what is really guaranteed. */
        if (g->period_ns > 0)
                ppm = (uint64_t) (((unsigned __int128) g->budget_ns * PPM + g->period_ns / 2) / g->period_ns);

        char where[256];
        fprintf(stderr, "%s: reserved %s of %s: %s in every %s (slot %s, reservation %" PRIu64
                ", kind %s, scope %s",
                cli_program, format_ppm(util, sizeof(util), (uint32_t) MIN(ppm, (uint64_t) UINT32_MAX)),
                cli_format_cpus(where, sizeof(where), g),
                format_duration(budget, sizeof(budget), g->budget_ns),
                format_duration(period, sizeof(period), g->period_ns),
                format_duration(slot, sizeof(slot), g->slot_ns), g->id, cli_kind_name(g->kind),
                cli_scope_name(g->scope));
        /* 0: a broker that does not count them. */
        if (g->threads > 0)
                fprintf(stderr, ", %" PRIu32 " thread%s", g->threads, g->threads == 1 ? "" : "s");
        fputc(')', stderr);
        if (g->period_ns != g->requested_period_ns || ppm != g->requested_utilization_ppm)
                fprintf(stderr, "; requested %s of every %s",
                        format_ppm(req_util, sizeof(req_util), g->requested_utilization_ppm),
                        format_duration(req_period, sizeof(req_period), g->requested_period_ns));
        /* A broker that predates scopes grants process scope whatever was
         * asked: the command's children would run unreserved. */
        if (g->scope != requested_scope)
                fprintf(stderr, "; requested scope %s", cli_scope_name(requested_scope));
        /* The same for kinds: a broker that predates them grants slots. */
        if (requested_kind != PACE_KIND_DEFAULT && g->kind != requested_kind)
                fprintf(stderr, "; requested kind %s", cli_kind_name(requested_kind));
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

        fprintf(stderr, "%s: free now:", cli_program);
        for (size_t i = 0; i < s->n_cpus; i++)
                fprintf(stderr, "%s CPU %d %s", i > 0 ? "," : "", s->cpus[i].cpu,
                        format_ppm(share, sizeof(share), s->cpus[i].free_ppm));
        fprintf(stderr, " (the non-real-time share, %s, is never reserved)\n",
                format_ppm(share, sizeof(share), s->non_rt_share_ppm));
}

/* Returns 0 when reserved, else the exit code the failure deserves (which
 * --best-effort may overrule). */
static int reserve(const Args *args, uint64_t *ret_id) {
        const char *socket_path = args->socket_path ? args->socket_path : pace_default_socket();
        _cleanup_(pace_closep) pace *p = NULL;
        pace_grant g;
        int r;

        r = pace_connect(socket_path, &p);
        if (r < 0) {
                fprintf(stderr, "%s: cannot connect to pace-broker at %s: %s\n", cli_program, socket_path,
                        pace_strerror(r));
                if (args->socket_path)
                        fprintf(stderr, "%s: is pace-broker running and listening on that socket?\n",
                                cli_program);
                else
                        fprintf(stderr, "%s: is pace-broker running? Set PACE_SOCKET or use --socket "
                                        "if it listens elsewhere.\n", cli_program);
                return EXIT_TRANSPORT;
        }

        r = pace_reserve(p, &args->reserve, &g);
        bool fell_back = false;
        if (r == PACE_E_NO_CAPACITY && !args->have_kind && args->reserve.kind != PACE_KIND_SLOTS) {
                /* The default kind is never split over CPUs; slots may be.
                 * Asked for no kind in particular, the command is better
                 * off with slots than with nothing. */
                pace_reserve_params slots = args->reserve;
                slots.kind = PACE_KIND_SLOTS;
                r = pace_reserve(p, &slots, &g);
                fell_back = r >= 0;
        }
        if (r >= 0) {
                if (!args->quiet) {
                        print_grant(&g, args->reserve.scope, args->have_kind ? args->reserve.kind : PACE_KIND_DEFAULT);
                        if (fell_back)
                                fprintf(stderr, "%s: no one CPU had room for it as a %s (never split over CPUs), so it "
                                        "is slots; --kind %s asks for that kind or nothing\n", cli_program,
                                        cli_kind_name(args->reserve.kind), cli_kind_name(args->reserve.kind));
                }
                *ret_id = g.id;
                return 0;
        }

        if (!cli_is_refusal(r)) {
                fprintf(stderr, "%s: reserving failed talking to pace-broker at %s: %s\n", cli_program,
                        socket_path, pace_strerror(r));
                return EXIT_TRANSPORT;
        }

        /* Printed before print_free(), whose call replaces the message. */
        fprintf(stderr, "%s: reservation refused: %s\n", cli_program,
                pace_last_message() ? pace_last_message() : pace_strerror(r));
        print_free(p);
        return EXIT_REFUSED;
}

/* The process as pace-dispatcher leaves it once it holds the reservation:
 * at nice 19 between its runs and at SCHED_FIFO during them, in the
 * reservation's cgroup where the host has them. Seen from the inside,
 * because the command inherits it: the threads and processes it starts
 * from then on are born waiting, in the group and on its CPUs. Started
 * before that, they ran at nice 0 on every CPU until the dispatcher found
 * them: a 38-thread client in the soak test took the hogs beside it from
 * 25% down to 6% for a second that way (docs/benchmarks.md, "Soak, fifth
 * stop"). */
typedef struct SelfSched {
        int policy;
        int nice;
        char cgroup[4096];
} SelfSched;

/* The cgroups only where self_taken_up() needs them (started at nice 19):
 * not a /proc read every poll for nothing. */
static void self_sched_read(SelfSched *ret, bool with_cgroup) {
        ret->policy = sched_getscheduler(0);
        if (ret->policy >= 0)
                ret->policy &= ~SCHED_RESET_ON_FORK;
        errno = 0;
        ret->nice = getpriority(PRIO_PROCESS, 0);
        if (errno != 0)
                ret->nice = INT_MIN;
        ret->cgroup[0] = '\0';
        if (!with_cgroup)
                return;
        int fd = open("/proc/self/cgroup", O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
                ssize_t n = read(fd, ret->cgroup, sizeof(ret->cgroup) - 1);
                ret->cgroup[MAX(n, (ssize_t) 0)] = '\0';
                close(fd);
        }
}

static bool self_taken_up(const SelfSched *before, const SelfSched *now) {
        if (now->policy == SCHED_FIFO)
                return true;
        if (before->nice < 19 && now->nice == 19)
                return true;
        /* Started at nice 19 already: the move into the group says it (the
         * nice level follows the move at once). */
        return before->nice == 19 && strcmp(before->cgroup, now->cgroup) != 0;
}

/* Polled every 2 ms: the dispatcher's own rounds are 50 ms apart. */
static bool wait_taken_up(const SelfSched *before, uint64_t timeout_ns) {
        uint64_t deadline = monotonic_ns() + timeout_ns;
        SelfSched now;

        for (;;) {
                self_sched_read(&now, before->nice == 19);
                if (self_taken_up(before, &now))
                        return true;
                if (monotonic_ns() >= deadline)
                        return false;
                (void) nanosleep(&(struct timespec) { .tv_nsec = 2 * NSEC_PER_MSEC }, NULL);
        }
}

int main(int argc, char *argv[]) {
        Args args;
        int r;

        cli_program = "pace-run";

        r = parse_args(argc, argv, &args);
        if (r < 0)
                return EXIT_USAGE;
        if (r > 0)
                return fflush(stdout) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;

        /* Before the request: the dispatcher may take it up at once. */
        SelfSched before;
        self_sched_read(&before, true);

        /* The libpace handle is closed inside reserve(): nothing of it may
         * leak into the command (its socket is close-on-exec regardless). */
        uint64_t id = 0;
        r = reserve(&args, &id);
        if (r != 0) {
                if (!args.best_effort)
                        return r;
                fprintf(stderr, "%s: warning: running %s without a reservation\n", cli_program,
                        args.command[0]);
        } else if (args.wait_ns > 0 && !wait_taken_up(&before, args.wait_ns)) {
                /* Unheld, the command's threads would take from everyone at
                 * their own nice level, on every CPU, until the dispatcher
                 * finds them: at nice 19 they take next to nothing. */
                char wait[32];
                (void) setpriority(PRIO_PROCESS, 0, 19);
                fprintf(stderr, "%s: warning: reservation %" PRIu64 " is granted, but pace-dispatcher has not "
                        "taken it up within %s (is it running?); running %s anyway, at nice 19 until it does\n",
                        cli_program, id, format_duration(wait, sizeof(wait), args.wait_ns), args.command[0]);
        }

        execvp(args.command[0], args.command);

        r = errno;
        fprintf(stderr, "%s: cannot run '%s': %s\n", cli_program, args.command[0], strerror(r));
        return r == ENOENT ? EXIT_NOT_FOUND : EXIT_CANNOT_RUN;
}
