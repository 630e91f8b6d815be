/* SPDX-License-Identifier: MIT */
#pragma once

/* How library code hands a line worth logging to whoever embeds it: it never
 * prints itself (the daemons' main.c choose where lines go, common/log.h).
 * One shape for the broker, its server and the dispatcher's parts: the
 * embedder's userdata, a syslog LOG_* priority, one line without a newline. */

#include <stdarg.h>
#include <stdio.h>

#include "macro.h"

typedef void (*LogSink)(void *userdata, int priority, const char *message);

/* Longest line a sink is handed; longer ones are cut. */
#define LOG_SINK_LINE_MAX 1024

/* Formats one line and hands it to sink; a NULL sink drops it. */
_printf_(4, 5) static inline void log_sinkf(LogSink sink, void *userdata, int priority, const char *fmt, ...) {
        char line[LOG_SINK_LINE_MAX];
        va_list ap;

        if (!sink)
                return;
        va_start(ap, fmt);
        vsnprintf(line, sizeof(line), fmt, ap);
        va_end(ap);
        sink(userdata, priority, line);
}
