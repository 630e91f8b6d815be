/* SPDX-License-Identifier: MIT */
#pragma once

/* What the bench/ programs share: one clock reading and one percentile
 * rule, so that their figures are comparable; one way to read a command
 * line, so that a mistake is refused the same way by all; and the few
 * system chores more than one of them does. */

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "macro.h"
#include "time-util.h"

/* The q-quantile (0..1) of n sorted values, nearest rank; 0 when empty. */
static inline uint64_t bench_percentile(const uint64_t *sorted, size_t n, double q) {
        if (n == 0)
                return 0;
        size_t i = (size_t) (q * (double) (n - 1) + 0.5);
        return sorted[MIN(i, n - 1)];
}

/* The command line. The bench/ programs are small command-line tools, so
 * these do not hand a mistake back to the caller: a command line that
 * cannot run ends the program here, with one line on stderr that starts
 * with the program's name, and exit status 2, as getopt_long()'s own
 * refusals do. A benchmark script then stops at the mistake instead of
 * measuring something it did not ask for. */

/* getopt_long(), with --help ('h': usage to stdout, exit 0) and an unknown
 * option or a missing value (exit 2, getopt_long() has said which) handled
 * here. Otherwise the option's val, -1 at the end. */
int bench_getopt(int argc, char **argv, const char *shortopts, const struct option *options, const char *usage);
/* "PROG: MESSAGE", exit 2: options that do not go together, or one that is missing. */
_printf_(1, 2) _Noreturn void bench_usage_error(const char *fmt, ...);
/* "PROG: OPTION VALUE: expected EXPECTED", exit 2. */
_printf_(3, 4) _Noreturn void bench_arg_refuse(const char *option, const char *value, const char *expected, ...);

/* A program's options as one table, each row naming the option, how its
 * value is read and where it goes, so that an option is declared once
 * rather than in getopt's array, its short-option string and a switch.
 * Only long options (and -h) are taken: the scripts use no other. */
typedef enum BenchArgKind {
        BENCH_ARG_DURATION,    /* u64, bench_arg_duration() */
        BENCH_ARG_UTILIZATION, /* u32, bench_arg_utilization() */
        BENCH_ARG_UINT32,      /* u32, bench_arg_uint32() with min, max */
        BENCH_ARG_CPU,         /* cpu, bench_arg_cpu() */
        BENCH_ARG_CHOICE,      /* choice, bench_arg_choice() with choices */
        BENCH_ARG_STRING,      /* string: the value as given */
        BENCH_ARG_FLAG,        /* flag: set, the option takes no value */
        BENCH_ARG_CUSTOM,      /* parse(option, value, userdata), which refuses a bad value itself */
} BenchArgKind;

typedef struct BenchOption {
        const char *name; /* without its dashes */
        BenchArgKind kind;
        /* One pointer per kind, so that a row pointing at a field of the
         * wrong type does not compile. */
        union {
                uint64_t *u64;
                uint32_t *u32;
                int *cpu;
                unsigned *choice;
                const char **string;
                bool *flag;
                void *userdata;
        };
        uint32_t min, max;
        const char *const *choices;
        void (*parse)(const char *option, const char *value, void *userdata);
} BenchOption;

#define BENCH_OPT_DURATION(n, p) { .name = (n), .kind = BENCH_ARG_DURATION, .u64 = (p) }
#define BENCH_OPT_UTILIZATION(n, p) { .name = (n), .kind = BENCH_ARG_UTILIZATION, .u32 = (p) }
#define BENCH_OPT_UINT32(n, p, lo, hi) { .name = (n), .kind = BENCH_ARG_UINT32, .u32 = (p), .min = (lo), .max = (hi) }
#define BENCH_OPT_CPU(n, p) { .name = (n), .kind = BENCH_ARG_CPU, .cpu = (p) }
#define BENCH_OPT_CHOICE(n, p, c) { .name = (n), .kind = BENCH_ARG_CHOICE, .choice = (p), .choices = (c) }
#define BENCH_OPT_STRING(n, p) { .name = (n), .kind = BENCH_ARG_STRING, .string = (p) }
#define BENCH_OPT_FLAG(n, p) { .name = (n), .kind = BENCH_ARG_FLAG, .flag = (p) }
#define BENCH_OPT_CUSTOM(n, f, u) { .name = (n), .kind = BENCH_ARG_CUSTOM, .parse = (f), .userdata = (u) }

/* The reservation the libpace clients ask for (a pace_reserve_params *p;
 * named by its fields so that this header needs no libpace): --period,
 * --util-ppm (any whole number: it is the broker that checks it) and
 * --cpu. */
#define BENCH_RESERVE_OPTIONS(p)                                                \
        BENCH_OPT_DURATION("period", &(p)->period_ns),                          \
        BENCH_OPT_UINT32("util-ppm", &(p)->utilization_ppm, 0, UINT32_MAX),     \
        BENCH_OPT_CPU("cpu", &(p)->cpu)

/* Reads the command line into the places options name, with --help as
 * bench_getopt() has it; a bad value ends the program as below. */
void bench_parse_argv(int argc, char **argv, const char *usage, const BenchOption *options, size_t n_options);

/* Option values; a bad one is refused as bench_arg_refuse() does. */

/* parse_duration_ns(): a unit is required, zero is refused. */
uint64_t bench_arg_duration(const char *option, const char *value);
/* parse_utilization_ppm(): "60%" or "0.6", in ppm. */
uint32_t bench_arg_utilization(const char *option, const char *value);
/* A decimal number in min..max. */
uint32_t bench_arg_uint32(const char *option, const char *value, uint32_t min, uint32_t max);
/* A CPU number that fits a cpu_set_t. */
int bench_arg_cpu(const char *option, const char *value);
/* The index of value in choices (NULL-terminated). */
unsigned bench_arg_choice(const char *option, const char *value, const char *const *choices);

/* fork() with a pipe between parent and child, one way: the child writes
 * and the parent reads if child_writes, else the other way round. *ret_fd
 * is this side's end, in the parent and in the child; the other end is
 * closed. The pid as fork() returns it, or a negative errno. */
pid_t bench_fork_pipe(bool child_writes, int *ret_fd);

/* One value a line to path, e.g. samples for a plot. 0, or a negative
 * errno once the failure is said on stderr. */
int bench_write_samples(const char *path, const uint64_t *values, size_t n);
