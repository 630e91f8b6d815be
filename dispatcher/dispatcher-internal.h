/* SPDX-License-Identifier: MIT */
#pragma once
/* What dispatcher.c, main-loop.c and lending-watch.c share of the
 * Dispatcher: the struct, and the lifecycle's helpers the main loop
 * calls. Main thread only. */
#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "dispatcher.h"
#include "freezer-v1.h"
#include "group.h"
#include "keeper.h"
#include "loop.h"
#include "nice.h"
#include "table-shm.h"
#include "tree.h"
#include "watchdog.h"

struct Dispatcher {
        /* As started: CPUs, waiting policy and slot never change. */
        PaceConfig config;
        /* What the loops see of us, and only that. */
        LoopShared shared;
        char *runtime_dir;
        char *table_path;
        ThreadRegistry *registry;
        char instance_name[64];
        /* Strict mode on the v1 freezer (NULL: not in strict mode, or on
         * the unified hierarchy). */
        FreezerV1 *freezer;
        /* Reservation groups (NULL: not usable here, groups_note says why). */
        GroupSet *groups;
        TreeSet *trees;
        char groups_note[512];
        unsigned dead_instances; /* whose leftovers the start removed */

        CpuLoop *loops;
        uint32_t n_loops;

        /* main thread */
        bool have_table_file;
        dev_t table_dev;
        ino_t table_ino;
        int last_open_error;
        ino_t last_open_error_ino;
        TableReader *leaked[8];
        PaceTableBuffer *scratch; /* main thread: reload checks, sweeps */
        /* The table the loops' plans come from: the last generation that
         * passed the check (a plan a loop had no room for yet is made from
         * it later). */
        PaceTableBuffer *planned;
        uint64_t planned_gen, seen_gen, refused_gen;
        bool have_planned;
        uint64_t look_full_ns, next_look_ns;
        /* The table file in use (main thread), and the watcher: a thread
         * that only waits on the table's generation futex (an fd cannot) and
         * says when it moved through table_efd. */
        TableReader *reader;
        bool reader_broken;
        int table_efd;
        pthread_t watcher;
        bool watcher_created;
        _Atomic(const TableReader *) watch_reader;
        _Atomic uint64_t watch_epoch, watch_acked;
        _Atomic uint32_t watch_word;
        _Atomic bool watch_broken;
        /* The main thread's next look at a generation (its token bucket):
         * the watcher tells it nothing sooner, so a broker that publishes
         * in a loop wakes neither of them more often than that. */
        _Atomic uint64_t watch_not_before_ns;
        Keeper *keeper;
        const DispatcherRunOptions *run; /* while dispatcher_run() runs */
        Watchdog *watchdog;
        /* Nice levels the table asks for (main thread). */
        NiceSet *nice;
        char nice_why[256];

        int housekeeping_efd;
};

#define run_log(o, priority, ...) log_sinkf((o)->log, (o)->userdata, (priority), __VA_ARGS__)

/* Kicks every running loop until done(loop, arg) holds for each, or
 * timeout_ns passes (0: one round). */
void dispatcher_kick_until(Dispatcher *d, bool (*done)(const CpuLoop *l, uint64_t arg), uint64_t arg,
                           uint64_t timeout_ns);
/* For dispatcher_kick_until(): the loop's thread has exited. */
bool dispatcher_loop_gone(const CpuLoop *l, uint64_t unused);
void dispatcher_watcher_stop(Dispatcher *d);
/* Opens the table file if it is new (another inode: a restarted broker) or
 * the current mapping broke. Returns 0 if the file in place is in use. */
int dispatcher_open_table(Dispatcher *d, LogSink log_fn, void *userdata);
/* A copy of the published table in d->scratch. */
int dispatcher_snapshot_published(Dispatcher *d, uint64_t *ret_gen);
/* Demotes the table's threads found at the running priority and thaws
 * freezer groups: at start (a predecessor's leftovers) or on SIGABRT. */
void dispatcher_sweep(Dispatcher *d, const DispatcherRunOptions *o, bool at_start);
/* SIGHUP. */
void dispatcher_reload(Dispatcher *d, const DispatcherRunOptions *o);
