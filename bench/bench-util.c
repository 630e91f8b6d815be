/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench-util.h"
#include "parse-util.h"

int bench_getopt(int argc, char **argv, const char *shortopts, const struct option *options, const char *usage) {
        int c = getopt_long(argc, argv, shortopts, options, NULL);

        if (c == 'h') {
                fputs(usage, stdout);
                exit(0);
        }
        if (c == '?' || c == ':')
                exit(2);
        return c;
}

_Noreturn void bench_usage_error(const char *fmt, ...) {
        va_list ap;

        /* The name it was started by, as getopt_long() names it. */
        fprintf(stderr, "%s: ", program_invocation_short_name);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
        exit(2);
}

_Noreturn void bench_arg_refuse(const char *option, const char *value, const char *expected, ...) {
        char what[256];
        va_list ap;

        va_start(ap, expected);
        vsnprintf(what, sizeof(what), expected, ap);
        va_end(ap);
        bench_usage_error("%s %s: expected %s", option, value, what);
}

uint64_t bench_arg_duration(const char *option, const char *value) {
        uint64_t ns;

        if (parse_duration_ns(value, &ns) < 0)
                bench_arg_refuse(option, value, "a duration above 0 with its unit, such as 10ms, 250us or 1.5s");
        return ns;
}

uint32_t bench_arg_utilization(const char *option, const char *value) {
        uint32_t ppm;

        if (parse_utilization_ppm(value, &ppm) < 0)
                bench_arg_refuse(option, value, "a share of one CPU, such as 60%% or 0.6 (above 0, at most 100%%)");
        return ppm;
}

uint32_t bench_arg_uint32(const char *option, const char *value, uint32_t min, uint32_t max) {
        uint32_t v;

        if (parse_uint32(value, &v) < 0 || v < min || v > max) {
                if (max != UINT32_MAX)
                        bench_arg_refuse(option, value, "a whole number from %u to %u", min, max);
                if (min > 0)
                        bench_arg_refuse(option, value, "a whole number of at least %u", min);
                bench_arg_refuse(option, value, "a whole number");
        }
        return v;
}

int bench_arg_cpu(const char *option, const char *value) {
        uint32_t cpu;

        if (parse_uint32(value, &cpu) < 0 || cpu >= CPU_SETSIZE)
                bench_arg_refuse(option, value, "a CPU number from 0 to %d", CPU_SETSIZE - 1);
        return (int) cpu;
}

unsigned bench_arg_choice(const char *option, const char *value, const char *const *choices) {
        char list[256] = "";

        for (unsigned i = 0; choices[i]; i++) {
                if (strcmp(value, choices[i]) == 0)
                        return i;
                snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", i > 0 ? " or " : "", choices[i]);
        }
        bench_arg_refuse(option, value, "%s", list);
}

/* Above any character, so that no option's val is taken for -h. */
#define BENCH_OPTION_VAL_BASE 256
#define BENCH_MAX_OPTIONS 32

static void bench_read_option(const BenchOption *o, const char *value) {
        char option[64];

        snprintf(option, sizeof(option), "--%s", o->name);
        switch (o->kind) {
        case BENCH_ARG_DURATION:
                *o->u64 = bench_arg_duration(option, value);
                break;
        case BENCH_ARG_UTILIZATION:
                *o->u32 = bench_arg_utilization(option, value);
                break;
        case BENCH_ARG_UINT32:
                *o->u32 = bench_arg_uint32(option, value, o->min, o->max);
                break;
        case BENCH_ARG_CPU:
                *o->cpu = bench_arg_cpu(option, value);
                break;
        case BENCH_ARG_CHOICE:
                *o->choice = bench_arg_choice(option, value, o->choices);
                break;
        case BENCH_ARG_STRING:
                *o->string = value;
                break;
        case BENCH_ARG_FLAG:
                *o->flag = true;
                break;
        case BENCH_ARG_CUSTOM:
                o->parse(option, value, o->userdata);
                break;
        }
}

void bench_parse_argv(int argc, char **argv, const char *usage, const BenchOption *options, size_t n_options) {
        struct option longopts[BENCH_MAX_OPTIONS + 2] = {};
        int c;

        /* A programming error, not a user's: the table is the program's own. */
        if (n_options > BENCH_MAX_OPTIONS)
                abort();
        for (size_t i = 0; i < n_options; i++)
                longopts[i] = (struct option) {
                        .name = options[i].name,
                        .has_arg = options[i].kind == BENCH_ARG_FLAG ? no_argument : required_argument,
                        .val = BENCH_OPTION_VAL_BASE + (int) i,
                };
        longopts[n_options] = (struct option) { .name = "help", .has_arg = no_argument, .val = 'h' };

        while ((c = bench_getopt(argc, argv, "h", longopts, usage)) >= 0)
                if (c >= BENCH_OPTION_VAL_BASE && c < BENCH_OPTION_VAL_BASE + (int) n_options)
                        bench_read_option(&options[c - BENCH_OPTION_VAL_BASE], optarg);
}

pid_t bench_fork_pipe(bool child_writes, int *ret_fd) {
        int fds[2];

        if (pipe2(fds, O_CLOEXEC) < 0)
                return -errno;
        int child_end = child_writes ? fds[1] : fds[0], parent_end = child_writes ? fds[0] : fds[1];
        pid_t pid = fork();
        if (pid < 0) {
                int r = -errno;
                close(fds[0]);
                close(fds[1]);
                return r;
        }
        close(pid == 0 ? parent_end : child_end);
        *ret_fd = pid == 0 ? child_end : parent_end;
        return pid;
}

int bench_write_samples(const char *path, const uint64_t *values, size_t n) {
        FILE *f = fopen(path, "we");
        int r;

        if (!f)
                goto fail;
        for (size_t i = 0; i < n; i++)
                fprintf(f, "%" PRIu64 "\n", values[i]);
        if (fclose(f) != 0)
                goto fail;
        return 0;
fail:
        r = negative_errno();
        fprintf(stderr, "%s: cannot write %s: %s\n", program_invocation_short_name, path, strerror(-r));
        return r;
}
