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
