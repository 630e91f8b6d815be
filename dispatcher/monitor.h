/* SPDX-License-Identifier: MIT */
#pragma once

/* The monitor: pace-dispatcher's first process, which forks the real
 * dispatcher and, the moment that dies for any reason but an orderly stop,
 * demotes every reserved thread it left real-time and starts a new one (see
 * dispatcher/README.md, "Monitor"). */

#include <stdint.h>

#include "dispatcher.h"
#include "freezer-v1.h"

/* What the child writes to its ready_fd. */
#define MONITOR_READY 'R' /* the dispatch threads exist */
#define MONITOR_STOPPING 'S' /* SIGTERM/SIGINT: restoring, then exit 0 */

typedef struct MonitorOptions {
        const char *runtime_dir;
        /* Strict mode on the v1 freezer: the instance's groups there, thawed
         * at once after a crash and removed once the child is gone; NULL
         * otherwise. */
        const FreezerV1 *freezer;
        /* Reservation groups (group.h): the base directory whose members
         * are demoted at once after a crash, and the name to remove once
         * the child is gone. NULL: none. */
        const char *group_base;
        const char *group_name;
        /* More than max_restarts restarts within restart_window_ns: give up
         * and exit non-zero (a dispatcher that crashes at once would
         * otherwise be restarted forever). */
        unsigned max_restarts;
        uint64_t restart_window_ns;
        /* Runs in the forked child and returns its exit status. It writes
         * MONITOR_READY to ready_fd once its dispatch threads run and
         * MONITOR_STOPPING when it begins an orderly stop. The child starts
         * with every signal unblocked and default dispositions, no
         * capabilities beyond the monitor's, and its own pid in
         * WATCHDOG_PID if the monitor's was there. */
        int (*child)(int ready_fd, void *userdata);
        LogSink log;
        void *userdata;
} MonitorOptions;

/* Runs the monitor until the dispatcher stops for good. Returns the exit
 * status for the process: the last child's (0 after an orderly stop), or
 * non-zero when it gave up. On SIGABRT it dies of SIGABRT once the child is
 * gone and swept. Never returns in the child. */
int monitor_run(const MonitorOptions *o);
