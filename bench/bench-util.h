/* SPDX-License-Identifier: MIT */
#pragma once

/* What every bench/ probe measures with: one clock reading and one
 * percentile rule, so their figures are comparable; and how they read their
 * options, so that a mistyped value is refused the same way by all. */

#include <stddef.h>
#include <stdint.h>
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

/* Option values. The bench/ programs are small command-line tools, so these
 * do not hand a failure back to the caller: a bad value ends the program
 * here, with one line on stderr naming the program, the option, the value
 * and what the option takes, and exit status 2, the status a refusal by
 * getopt_long() gets too. A benchmark script then stops at the mistake
 * instead of measuring something it did not ask for. */
_printf_(3, 4) _Noreturn void bench_arg_refuse(const char *option, const char *value, const char *expected, ...);

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
