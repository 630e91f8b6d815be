/* SPDX-License-Identifier: MIT */
#pragma once

/* What every bench/ probe measures with: one clock reading and one
 * percentile rule, so their figures are comparable. */

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
