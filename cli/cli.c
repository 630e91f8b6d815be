/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "pace-build-config.h"
#include "pace/pace.h"
#include "parse-util.h"

const char *cli_program = "pace";

int cli_usage_error(const char *format, ...) {
        va_list ap;

        fprintf(stderr, "%s: ", cli_program);
        va_start(ap, format);
        vfprintf(stderr, format, ap);
        va_end(ap);
        fprintf(stderr, "\nTry '%s --help' for more information.\n", cli_program);
        return -EINVAL;
}

int cli_getopt_failure(int c, char **argv, const char *valueless) {
        const char *arg = argv[optind - 1];
        bool is_long = strncmp(arg, "--", 2) == 0;

        if (c == ':')
                return is_long ? cli_usage_error("option '%s' needs a value", arg)
                               : cli_usage_error("option '-%c' needs a value", optopt);
        if (optopt == 0)
                return cli_usage_error("unknown option '%s'", arg);
        /* A known long option given a value it does not take (--json=yes):
         * getopt reports its short name. */
        if (is_long && strchr(valueless, optopt))
                return cli_usage_error("option '%s' takes no value", arg);
        return cli_usage_error("unknown option '-%c'", optopt);
}

int cli_common_option(int c, char **argv, void (*help)(void), const char *valueless) {
        switch (c) {
        case 'h':
                help();
                return 1;
        case 'V':
                printf("%s (pace) %s\n", cli_program, PACE_VERSION);
                return 1;
        case ':':
        case '?':
                return cli_getopt_failure(c, argv, valueless);
        default:
                abort();
        }
}

/* A parser's answer r for option's value s as a usage error: -ERANGE (well
 * formed, but outside what is allowed) says the range, any other failure
 * what was expected. */
static int parse_failure(int r, const char *option, const char *s, const char *range, const char *expected) {
        if (r == -ERANGE)
                return cli_usage_error("%s '%s' is out of range: %s", option, s, range);
        if (r < 0)
                return cli_usage_error("invalid %s '%s': expected %s", option, s, expected);
        return 0;
}

int cli_parse_period(const char *option, const char *s, uint64_t *ret) {
        return parse_failure(parse_duration_ns(s, ret), option, s,
                             "it must be more than 0 and at most about 584 years",
                             "a duration with a unit, e.g. 50ms, 250us, 1.5ms or 1s");
}

int cli_parse_util(const char *option, const char *s, uint32_t *ret) {
        return parse_failure(parse_utilization_ppm(s, ret), option, s,
                             "it must be more than 0% and at most 100% (one whole CPU); a reservation runs "
                             "on one CPU at a time, so for more, split the work over processes or threads "
                             "and reserve each (pace-run --scope thread, or one pace-run per process)",
                             "a percentage such as 60% or a fraction of one CPU such as 0.6");
}

int cli_parse_pid(const char *option, const char *s, pid_t *ret) {
        if (parse_pid(s, ret) < 0)
                return cli_usage_error("invalid %s '%s': expected a process id (a positive number)", option, s);
        return 0;
}

int cli_parse_cpu(const char *option, const char *s, int *ret) {
        uint32_t v;

        if (parse_uint32(s, &v) < 0 || v > INT_MAX)
                return cli_usage_error("invalid %s '%s': expected a CPU number (0, 1, ...)", option, s);
        *ret = (int) v;
        return 0;
}

static const char *const scope_names[] = {
        [PACE_SCOPE_PROCESS] = "process",
        [PACE_SCOPE_THREAD] = "thread",
        [PACE_SCOPE_TREE] = "tree",
};

int cli_parse_scope(const char *option, const char *s, pace_scope *ret) {
        for (size_t i = 0; i < ELEMENTSOF(scope_names); i++)
                if (strcmp(s, scope_names[i]) == 0) {
                        *ret = (pace_scope) i;
                        return 0;
                }
        return cli_usage_error("invalid %s '%s': expected thread, process or tree", option, s);
}

const char *cli_scope_name(pace_scope scope) {
        if ((unsigned) scope >= ELEMENTSOF(scope_names))
                return "?";
        return scope_names[scope];
}

static const char *const kind_names[] = {
        [PACE_KIND_DEFAULT] = "default",
        [PACE_KIND_SLOTS] = "slots",
        [PACE_KIND_SERVER] = "server",
        [PACE_KIND_ALIGNED] = "aligned",
};

int cli_parse_kind(const char *option, const char *s, pace_kind *ret) {
        /* "default" is no word to ask with: it means different things to
         * reserve and modify, and leaving the option out says it. */
        for (size_t i = PACE_KIND_SLOTS; i < ELEMENTSOF(kind_names); i++)
                if (strcmp(s, kind_names[i]) == 0) {
                        *ret = (pace_kind) i;
                        return 0;
                }
        return cli_usage_error("invalid %s '%s': expected slots (the budget spread over the period), server "
                               "(runs whenever it has budget left) or aligned (the budget in one piece at the "
                               "start of each period)", option, s);
}

const char *cli_kind_name(pace_kind kind) {
        if ((unsigned) kind >= ELEMENTSOF(kind_names))
                return "?";
        return kind_names[kind];
}

bool cli_is_refusal(int r) {
        return r <= -(PACE_E_BASE + 1) && r > PACE_E_PROTOCOL;
}

char *cli_format_cpus(char *buf, size_t size, const pace_grant *g) {
        size_t used;
        unsigned n = 0;

        if (!g->split_cpus) {
                snprintf(buf, size, "CPU %d", g->cpu);
                return buf;
        }
        used = (size_t) snprintf(buf, size, "CPUs ");
        for (unsigned cpu = 0; cpu < 64; cpu++)
                if ((g->split_cpus & (UINT64_C(1) << cpu)) && used < size)
                        used += (size_t) snprintf(buf + used, size - used, "%s%u", n++ ? "+" : "", cpu);
        return buf;
}
