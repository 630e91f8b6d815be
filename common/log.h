/* SPDX-License-Identifier: MIT */
#pragma once

/* For the daemons' main.c only: library code returns errors, callers log. */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <syslog.h>

#include "macro.h"

/* Under systemd (JOURNAL_STREAM set) each line carries a "<N>" priority
 * prefix the journal understands; by hand, a plain program-name prefix. */
static inline void log_line(const char *program, int priority, const char *message) {
        static int journal = -1;
        if (journal < 0)
                journal = getenv("JOURNAL_STREAM") != NULL;
        if (journal)
                fprintf(stderr, "<%d>%s\n", priority, message);
        else
                fprintf(stderr, "%s: %s\n", program, message);
}

_printf_(3, 4) static inline void log_fmt(const char *program, int priority, const char *fmt, ...) {
        char line[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(line, sizeof(line), fmt, ap);
        va_end(ap);
        log_line(program, priority, line);
}
