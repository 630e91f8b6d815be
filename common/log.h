/* SPDX-License-Identifier: MIT */
#pragma once

/* For the daemons' main.c only: library code returns errors, callers log.
 * Priorities are syslog's LOG_* everywhere. */

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <syslog.h>

#include "macro.h"

/* Whether stderr is the journal (systemd sets JOURNAL_STREAM): then each
 * line carries a "<N>" priority prefix the journal understands, which on a
 * terminal would only be noise. */
static inline bool log_to_journal(void) {
        static int journal = -1;
        if (journal < 0)
                journal = getenv("JOURNAL_STREAM") != NULL;
        return journal;
}

/* pace-broker and pace-rtkit: "<N>message" under the journal, which names
 * the unit itself; by hand, a plain program-name prefix. */
static inline void log_line(const char *program, int priority, const char *message) {
        if (log_to_journal())
                fprintf(stderr, "<%d>%s\n", priority, message);
        else
                fprintf(stderr, "%s: %s\n", program, message);
}

/* pace-dispatcher: "program: " under the journal too, and "error: " or
 * "warning: " before errors and warnings. Its lines have always read so,
 * and people and scripts search them for that. */
static inline void log_line_worded(const char *program, int priority, const char *message) {
        const char *word = priority <= LOG_ERR ? "error: " : priority == LOG_WARNING ? "warning: " : "";

        if (log_to_journal())
                fprintf(stderr, "<%d>%s: %s%s\n", priority, program, word, message);
        else
                fprintf(stderr, "%s: %s%s\n", program, word, message);
}

/* One formatted line through log_line or log_line_worded. */
_printf_(4, 0) static inline void log_vfmt(void (*line_fn)(const char *, int, const char *), const char *program,
                                           int priority, const char *fmt, va_list ap) {
        char line[1024];
        vsnprintf(line, sizeof(line), fmt, ap);
        line_fn(program, priority, line);
}

_printf_(3, 4) static inline void log_fmt(const char *program, int priority, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        log_vfmt(log_line, program, priority, fmt, ap);
        va_end(ap);
}

_printf_(3, 4) static inline void log_fmt_worded(const char *program, int priority, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        log_vfmt(log_line_worded, program, priority, fmt, ap);
        va_end(ap);
}
