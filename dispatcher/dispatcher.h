/* SPDX-License-Identifier: MIT */
#pragma once

/* pace-dispatcher's core: one SCHED_FIFO 99 thread per managed CPU that
 * enforces the broker's dispatch table, and the main-thread watcher that
 * finds the table file (see dispatcher/README.md). Never logs itself:
 * messages reach the caller's log function, from the main thread only. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <syslog.h>
#include <sys/types.h>

#include "config.h"
#include "group.h"
#include "log-sink.h"

typedef struct Dispatcher Dispatcher;

/* config->cpus may be unset (all online CPUs): resolved here. Blocks
 * SIGTERM, SIGINT and SIGUSR1 in the calling thread (signals are handled
 * by dispatcher_run()). */
int dispatcher_new(const PaceConfig *config, const char *runtime_dir, Dispatcher **ret, char *why, size_t why_size);

/* Locks memory, checks that real-time scheduling can work (explaining in
 * why when it cannot), and starts the dispatch threads. */
int dispatcher_start(Dispatcher *d, char *why, size_t why_size);

typedef struct DispatcherRunOptions {
        LogSink log;
        /* SIGHUP: reads the configuration again (the same validation as at
         * start); on failure -errno and a sentence in why. NULL: SIGHUP
         * only logs. */
        int (*load_config)(void *userdata, PaceConfig *ret, char *why, size_t why_size);
        /* sd_watchdog_enabled()'s interval (0: none). watchdog_ping is
         * called from the main thread, only after every dispatch loop has
         * shown progress since the previous call. */
        uint64_t watchdog_ns;
        void (*watchdog_ping)(void *userdata);
        /* What SIGUSR2 does to every dispatch loop (LoopHang: wedged, a
         * test of systemd's watchdog, or spinning, a test of the monitor's
         * stall check). LOOP_HANG_NONE: SIGUSR2 is logged and ignored. */
        int test_hooks;
        /* Called on SIGTERM/SIGINT before the loops stop: an orderly stop
         * (the monitor then does not take the exit for a crash). May be
         * NULL. */
        void (*stopping)(void *userdata);
        /* Under a manager on the unified hierarchy: asks it (from the main
         * thread) for a delegated scope holding pid's tree; see
         * group_set_housekeep(). NULL: no scopes, members found in /proc. */
        GroupMakeScope make_scope;
        /* Hands make_scope the main thread's watchdog look (tick(), with
         * tick_userdata), for it to call while it waits on the manager: a
         * busy manager has taken over 2 s (WatchdogSec) to answer. May be
         * NULL. */
        void (*set_scope_tick)(void *userdata, void (*tick)(void *tick_userdata), void *tick_userdata);
        /* Where tracefs is mounted, for the tracing instance that tells
         * priority lent through PI locks (lending.h). NULL:
         * /sys/kernel/tracing. */
        const char *tracefs;
        void *userdata;
} DispatcherRunOptions;

/* Sweeps what a dead predecessor left (threads at the running priority,
 * frozen groups), then watches the runtime directory for the table, relays
 * the dispatch threads' messages, reloads on SIGHUP and feeds the watchdog,
 * until SIGTERM or SIGINT. On SIGABRT (the watchdog's signal) it demotes
 * every thread of the table's processes and dies of SIGABRT. */
int dispatcher_run(Dispatcher *d, const DispatcherRunOptions *options);

/* What the dispatcher needs of RLIMIT_MEMLOCK, RLIMIT_NOFILE and
 * RLIMIT_NPROC, for privileges_drop(). */
void dispatcher_resource_needs(const Dispatcher *d, uint64_t *ret_memlock, uint64_t *ret_files, uint64_t *ret_min_files,
                               uint64_t *ret_threads);

/* Stops the dispatch threads, which first restore every thread they
 * changed and undo their cgroups. Accepts NULL. */
Dispatcher *dispatcher_free(Dispatcher *d);

static inline void dispatcher_freep(Dispatcher **d) {
        dispatcher_free(*d);
}

/* The accounting file (pace-stats.h) in runtime_dir: created, or taken
 * over from an earlier run if it is a regular file of root's with one link
 * (else replaced), sized and cleared. Called before privileges are dropped:
 * the runtime directory belongs to the broker's user and becomes read-only
 * for the dispatcher afterwards. *ret_fd stays open for every later
 * dispatcher (the monitor's restarts). */
int dispatcher_stats_open(const char *runtime_dir, int *ret_fd);
/* Maps it; entries are claimed as reservations are adopted. */
int dispatcher_use_stats(Dispatcher *d, int fd);

/* Test hook, before dispatcher_start(): every change of owner spins ns
 * more, so a test can raise what the loops measure a change to cost. */
void dispatcher_set_test_change_spin(Dispatcher *d, uint64_t ns);
/* Managed CPUs after resolution. */
const PaceConfig *dispatcher_config(const Dispatcher *d);
