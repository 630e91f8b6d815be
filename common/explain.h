/* SPDX-License-Identifier: MIT */
#pragma once

/* Where a refusal is decided, its one-line explanation is written into the
 * caller's why[] (docs/hacking.md, "Errors and logging"); the caller logs
 * it or replies with it, never rephrases it. */

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include "macro.h"

/* NULL or size 0: the caller wants no explanation. */
_printf_(3, 4) static inline void explain(char *why, size_t why_size, const char *fmt, ...) {
        va_list ap;

        if (!why || why_size == 0)
                return;
        va_start(ap, fmt);
        vsnprintf(why, why_size, fmt, ap);
        va_end(ap);
}
