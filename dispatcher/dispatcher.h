/* SPDX-License-Identifier: MIT */
#pragma once

/* pace-dispatcher's core: one SCHED_FIFO 99 thread per managed CPU that
 * enforces the broker's dispatch table, and the main-thread watcher that
 * finds the table file (see dispatcher/README.md). Never logs itself:
 * messages reach the caller's log function, from the main thread only. */

#include <stddef.h>

#include "config.h"

typedef struct Dispatcher Dispatcher;

typedef enum DispatcherLogLevel {
        DISPATCHER_LOG_ERROR,
        DISPATCHER_LOG_WARNING,
        DISPATCHER_LOG_INFO,
} DispatcherLogLevel;

typedef void (*DispatcherLogFn)(DispatcherLogLevel level, const char *message, void *userdata);

/* config->cpus may be unset (all online CPUs): resolved here. Blocks
 * SIGTERM, SIGINT and SIGUSR1 in the calling thread (signals are handled
 * by dispatcher_run()). */
int dispatcher_new(const PaceConfig *config, const char *runtime_dir, Dispatcher **ret, char *err, size_t err_size);

/* Locks memory, checks that real-time scheduling can work (explaining in
 * err when it cannot), and starts the dispatch threads. */
int dispatcher_start(Dispatcher *d, char *err, size_t err_size);

/* Watches the runtime directory for the table and relays the dispatch
 * threads' messages, until SIGTERM or SIGINT. */
int dispatcher_run(Dispatcher *d, DispatcherLogFn log_fn, void *userdata);

/* Stops the dispatch threads, which first restore every thread they
 * changed and undo their cgroups. Accepts NULL. */
Dispatcher *dispatcher_free(Dispatcher *d);

static inline void dispatcher_freep(Dispatcher **d) {
        dispatcher_free(*d);
}

/* Managed CPUs after resolution. */
const PaceConfig *dispatcher_config(const Dispatcher *d);
