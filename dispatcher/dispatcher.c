/* SPDX-License-Identifier: MIT */
/* The dispatcher's lifecycle: creating the dispatch loops (loop.c) and
 * starting their threads, the table file and the thread that watches its
 * generation, sweeps and reloads; main-loop.c runs the main thread's
 * events (dispatcher_run()). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/futex.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>


#include "dispatcher-internal.h"
#include "nice.h"
#include "freezer-v1.h"
#include "group.h"
#include "held.h"
#include "keeper.h"
#include "log-ring.h"
#include "loop.h"
#include "macro.h"
#include "proc-util.h"
#include "rt-check.h"
#include "sched-util.h"
#include "stall.h"
#include "stats-file.h"
#include "sweep.h"
#include "table-check.h"
#include "table-guard.h"
#include "table-shm.h"
#include "time-util.h"
#include "watchdog.h"



/* Unset "cpus" means every CPU online now. Unlike the broker, a configured
 * CPU that is offline is not refused: a dispatcher the monitor restarts
 * after a CPU went away must still start (the broker moves what was there). */
static int resolve_cpus(PaceConfig *config) {
        char buf[1024];
        int r;

        if (config->cpus_set)
                return 0;
        r = read_small_file("/sys/devices/system/cpu/online", buf, sizeof(buf));
        if (r == -ESRCH) /* how read_small_file() says "no such file", for /proc */
                return -ENOENT;
        if (r < 0)
                return r;
        r = cpu_list_parse(buf, config->cpus, PACE_MAX_CPUS, &config->n_cpus);
        if (r < 0)
                return r;
        config->cpus_set = true;
        return 0;
}

static bool watch_beats(uint32_t i, uint64_t *ret, void *userdata) {
        Dispatcher *d = userdata;

        if (!loop_running(&d->loops[i]))
                return false;
        *ret = loop_beats(&d->loops[i]);
        return true;
}

static void watch_kick(uint32_t i, void *userdata) {
        Dispatcher *d = userdata;

        loop_kick(&d->loops[i]);
}

/* A reservation whose identity check failed, once (it stays inert). */
static void on_ignored(void *userdata, const PaceTableReservation *res, int r) {
        Dispatcher *d = userdata;

        if (d->run)
                log_sinkf(d->run->log, d->run->userdata, LOG_WARNING,
                          "CPU %" PRIi32 ": ignoring reservation %" PRIu64 " of pid %" PRIi32 ": %s", res->cpu, res->id,
                          res->pid, held_refusal_to_string(r));
}

int dispatcher_new(const PaceConfig *config, const char *runtime_dir, Dispatcher **ret, char *why,
                   size_t why_size) {
        _cleanup_(dispatcher_freep) Dispatcher *d = NULL;
        sigset_t mask;
        int r;

        d = calloc(1, sizeof(*d));
        if (!d)
                return -ENOMEM;
        d->housekeeping_efd = d->table_efd = -EBADF;
        d->config = *config;
        r = resolve_cpus(&d->config);
        if (r < 0) {
                snprintf(why, why_size, "cannot read the online CPUs: %s", strerror(-r));
                return r;
        }
        if (d->config.n_cpus == 0) {
                snprintf(why, why_size, "no CPUs to manage");
                return -EINVAL;
        }

        d->runtime_dir = strdup(runtime_dir);
        if (!d->runtime_dir || asprintf(&d->table_path, "%s/%s", runtime_dir, PACE_TABLE_NAME) < 0)
                return -ENOMEM;
        r = log_ring_new(&d->shared.log);
        if (r < 0)
                return r;
        d->shared.stall = stall_page_inherited();
        d->housekeeping_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (d->housekeeping_efd < 0)
                return negative_errno();
        d->table_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (d->table_efd < 0)
                return negative_errno();
        r = thread_registry_new(&d->registry);
        if (r < 0)
                return r;
        r = nice_set_new(&d->nice);
        if (r < 0)
                return r;
        r = tree_set_new(&d->trees);
        if (r < 0)
                return r;

        /* One pace.<hash> group per hierarchy and runtime directory, so a
         * test instance never touches the system's. */
        sweep_instance_name(runtime_dir, d->instance_name, sizeof(d->instance_name));

        d->shared.configs[0] = d->config;
        d->scratch = calloc(1, sizeof(PaceTableBuffer));
        d->planned = calloc(1, sizeof(PaceTableBuffer));
        d->loops = calloc(d->config.n_cpus, sizeof(*d->loops));
        if (!d->loops || !d->scratch || !d->planned)
                return -ENOMEM;
        d->n_loops = d->config.n_cpus;
        r = watchdog_new(d->n_loops, watch_beats, watch_kick, d, &d->watchdog);
        if (r < 0)
                return r;
        uint32_t max_frame = pace_config_frame_slots(&d->config);
        for (uint32_t i = 0; i < d->n_loops; i++) {
                r = loop_init(&d->loops[i], &d->shared, i, d->config.cpus[i], max_frame);
                if (r < 0)
                        return r;
        }
        r = keeper_new(d->shared.stats, on_ignored, d, &d->keeper);
        if (r < 0)
                return r;

        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGHUP);
        sigaddset(&mask, SIGABRT);
        sigaddset(&mask, SIGUSR2);
        sigaddset(&mask, LOOP_KICK_SIGNAL);
        pthread_sigmask(SIG_BLOCK, &mask, NULL);

        r = loop_setup_kick();
        if (r < 0)
                return r;
        r = table_guard_install();
        if (r < 0)
                return r;

        *ret = TAKE_PTR(d);
        return 0;
}

int dispatcher_stats_open(const char *runtime_dir, int *ret_fd) {
        return stats_file_open(runtime_dir, ret_fd);
}

int dispatcher_use_stats(Dispatcher *d, int fd) {
        PaceStatsFile *f;
        int r;

        r = stats_file_map(fd, &f);
        if (r < 0)
                return r;
        stats_file_unmap(d->shared.stats);
        d->shared.stats = f;
        if (d->keeper)
                keeper_set_stats(d->keeper, f);
        return 0;
}

void dispatcher_set_test_change_spin(Dispatcher *d, uint64_t ns) {
        d->shared.test_change_spin_ns = ns;
}

const PaceConfig *dispatcher_config(const Dispatcher *d) {
        return &d->config;
}

void dispatcher_kick_until(Dispatcher *d, bool (*done)(const CpuLoop *l, uint64_t arg), uint64_t arg,
                       uint64_t timeout_ns) {
        uint64_t deadline = monotonic_ns() + timeout_ns;

        for (;;) {
                bool all = true;

                loop_shared_wake_idle(&d->shared);
                for (uint32_t i = 0; i < d->n_loops; i++) {
                        CpuLoop *l = &d->loops[i];
                        if (!loop_running(l) || done(l, arg))
                                continue;
                        all = false;
                        /* The kick can land just before the thread enters
                         * its wait, so repeat it until acknowledged. */
                        loop_kick(l);
                }
                if (all || monotonic_ns() > deadline)
                        return;
                (void) usleep(2000);
        }
}

bool dispatcher_loop_gone(const CpuLoop *l, uint64_t unused) {
        return loop_exited(l);
}

static int watcher_start(Dispatcher *d);

int dispatcher_start(Dispatcher *d, char *why, size_t why_size) {
        int r;

        /* A page fault in the middle of a slot switch would be charged to
         * whoever owns the CPU. */
        if (mlockall(MCL_CURRENT | MCL_FUTURE) < 0) {
                r = negative_errno();
                snprintf(why, why_size, "cannot lock memory (mlockall): %s; the dispatcher needs CAP_IPC_LOCK "
                         "or a large enough RLIMIT_MEMLOCK", strerror(-r));
                return r;
        }
        r = rt_check_privileges(why, why_size);
        if (r < 0)
                return r;
        r = rt_check_cgroup("/proc", "/sys/fs/cgroup", why, why_size);
        if (r < 0)
                return r;

        /* Strict mode on the v1 freezer where the host has one: its anchor
         * is frozen for as long as we run (freezer-v1.h says why). */
        if (d->config.waiting == PACE_WAITING_FREEZE &&
            freezer_v1_open("/proc", d->instance_name, &d->freezer) >= 0) {
                r = freezer_v1_anchor(d->freezer);
                if (r < 0) {
                        snprintf(why, why_size, "cannot create the freezer cgroup %s/anchor: %s",
                                 freezer_v1_base(d->freezer), strerror(-r));
                        return r;
                }
        }

        /* Reservation groups: without them members are found in /proc and
         * accounted per thread, which dispatcher_run() says once. */
        char base[PATH_MAX];
        if (group_base_path(d->instance_name, base, sizeof(base)) == 0)
                (void) sweep_demote_groups(base); /* a crashed run's tree members */
        /* Other instances that died without cleaning up (SIGKILL of both
         * processes): their groups would hold real-time runtime and
         * cpusets for ever. */
        unsigned dead = 0;
        (void) group_sweep_dead(d->instance_name, sweep_demote_groups_void, &dead);
        d->dead_instances = dead;
        pid_t owner = held_protected_pid() > 0 ? held_protected_pid() : getpid();
        r = group_set_new(d->instance_name, PPM - d->config.non_rt_share_ppm, owner, &d->groups, d->groups_note,
                          sizeof(d->groups_note));
        if (r < 0 && !d->groups_note[0])
                snprintf(d->groups_note, sizeof(d->groups_note), "%s", strerror(-r));
        /* Strict mode freezes the v1 freezer's groups or, on the unified
         * hierarchy, each reservation's own group. */
        if (d->config.waiting == PACE_WAITING_FREEZE && !d->freezer && !(d->groups && group_set_unified(d->groups))) {
                snprintf(why, why_size,
                         "\"waiting\": \"freeze\" needs the cgroup v1 freezer or reservation groups on the unified "
                         "hierarchy, and neither is available here (%s); use \"waiting\": \"nice\"",
                         d->groups_note[0] ? d->groups_note : "no v1 freezer is mounted");
                return -EOPNOTSUPP;
        }

        for (uint32_t i = 0; i < d->n_loops; i++) {
                CpuLoop *l = &d->loops[i];
                HeldContext ctx = {
                        .registry = d->registry,
                        .waiting = d->config.waiting,
                        .cpu = l->cpu,
                        .max_threads = d->config.max_threads_per_reservation,
                        .freezer = d->freezer,
                        .groups = d->groups,
                        .trees = d->trees,
                        .housekeeping_fd = d->housekeeping_efd,
                };

                r = loop_start(l, &ctx);
                if (r == -EPERM) {
                        rt_explain_eperm("/proc", "/sys/fs/cgroup", why, why_size);
                        return r;
                }
                if (r == -EINVAL) {
                        snprintf(why, why_size, "cannot start the dispatch thread of CPU %" PRIi32
                                 ": the CPU is not online", l->cpu);
                        return r;
                }
                if (r < 0) {
                        snprintf(why, why_size, "cannot start the dispatch thread of CPU %" PRIi32 ": %s", l->cpu,
                                 strerror(-r));
                        return r;
                }
        }
        r = watcher_start(d);
        if (r < 0) {
                snprintf(why, why_size, "cannot start the table watcher thread: %s", strerror(-r));
                return r;
        }
        return 0;
}

static long futex_private(_Atomic uint32_t *word, int op, uint32_t val) {
        return syscall(SYS_futex, word, op | FUTEX_PRIVATE_FLAG, val, NULL, NULL, 0);
}

/* The watcher: waits on the table's generation futex (the broker wakes it
 * at every publication) and says so through table_efd; nothing else. It
 * reads the mapping under the SIGBUS guard, and a fault marks it broken
 * (the main thread then opens the file again). SCHED_OTHER: it only ever
 * wakes the main thread. */
static void *watcher_main(void *userdata) {
        Dispatcher *d = userdata;
        const TableReader *reader = NULL;
        uint64_t epoch = 0, last = 0;
        sigset_t kick;

        sigemptyset(&kick);
        sigaddset(&kick, LOOP_KICK_SIGNAL);
        pthread_sigmask(SIG_UNBLOCK, &kick, NULL);
        while (!atomic_load(&d->shared.stop)) {
                uint32_t word = atomic_load(&d->watch_word);
                uint64_t e = atomic_load(&d->watch_epoch), gen;

                if (e != epoch) {
                        reader = atomic_load(&d->watch_reader);
                        epoch = e;
                        last = 0;
                        atomic_store(&d->watch_acked, e);
                }
                if (!reader || atomic_load(&d->watch_broken)) {
                        (void) futex_private(&d->watch_word, FUTEX_WAIT, word);
                        continue;
                }
                if (table_guard_generation(reader, &gen) < 0) {
                        atomic_store(&d->watch_broken, true);
                        (void) !write(d->table_efd, &(uint64_t) { 1 }, sizeof(uint64_t));
                        continue;
                }
                if (gen != last) {
                        uint64_t now = monotonic_ns(), not_before = atomic_load(&d->watch_not_before_ns);
                        if (now < not_before) {
                                struct timespec ts = { .tv_sec = (time_t) (not_before / NSEC_PER_SEC),
                                                       .tv_nsec = (long) (not_before % NSEC_PER_SEC) };
                                /* EINTR on a kick: the loop looks again. */
                                (void) clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
                                continue;
                        }
                        last = gen;
                        (void) !write(d->table_efd, &(uint64_t) { 1 }, sizeof(uint64_t));
                }
                /* -EINTR on a kick, -EFAULT if the file shrank (seen above
                 * next time round). */
                (void) table_guard_wait(reader, last);
        }
        return NULL;
}

static void watcher_kick(Dispatcher *d) {
        atomic_fetch_add(&d->watch_word, 1);
        (void) futex_private(&d->watch_word, FUTEX_WAKE, INT_MAX);
        if (d->watcher_created)
                (void) pthread_kill(d->watcher, LOOP_KICK_SIGNAL);
}

/* Hands the watcher a new reader: the kick can land just before it enters
 * its wait, so it is repeated until acknowledged (2 s at most). */
static bool watcher_kick_until_acked(Dispatcher *d, uint64_t epoch) {
        uint64_t deadline = monotonic_ns() + 2 * NSEC_PER_SEC;

        while (d->watcher_created && atomic_load(&d->watch_acked) < epoch) {
                if (monotonic_ns() > deadline)
                        return false;
                watcher_kick(d);
                (void) usleep(2000);
        }
        return true;
}

static int watcher_start(Dispatcher *d) {
        int r = -pthread_create(&d->watcher, NULL, watcher_main, d);
        if (r < 0)
                return r;
        d->watcher_created = true;
        return 0;
}

void dispatcher_watcher_stop(Dispatcher *d) {
        if (!d->watcher_created)
                return;
        atomic_store(&d->shared.stop, true);
        watcher_kick(d);
        /* A kick may land before the wait: the wait is bounded by the next
         * kick, repeated until it has gone. */
        for (unsigned i = 0; i < 2500 && pthread_tryjoin_np(d->watcher, NULL) == EBUSY; i++) {
                watcher_kick(d);
                (void) usleep(2000);
        }
        d->watcher_created = false;
}

/* Opens the table file if it is new (another inode: a restarted broker) or
 * the current mapping broke. Returns 0 if the file in place is in use. */
int dispatcher_open_table(Dispatcher *d, LogSink log_fn, void *userdata) {
        struct stat st, st2;
        TableReader *reader = NULL;
        char message[LOG_MESSAGE_MAX];
        int r;

        if (stat(d->table_path, &st) < 0)
                return negative_errno();
        if (d->have_table_file && st.st_dev == d->table_dev && st.st_ino == d->table_ino && !d->reader_broken &&
            !atomic_load(&d->watch_broken))
                return 0;

        r = table_reader_open(d->table_path, &reader);
        if (r < 0)
                return r;
        if (stat(d->table_path, &st2) < 0 || st2.st_ino != st.st_ino || st2.st_dev != st.st_dev) {
                table_reader_free(reader);
                return -EAGAIN; /* replaced while we opened it: look again */
        }

        /* The watcher waits on the old mapping's futex: it moves to the new
         * one before the old is unmapped. The loops never read a mapping. */
        TableReader *old = d->reader;
        d->reader = reader;
        d->reader_broken = false;
        atomic_store(&d->watch_reader, reader);
        atomic_store(&d->watch_broken, false);
        uint64_t epoch = atomic_fetch_add(&d->watch_epoch, 1) + 1;
        d->have_table_file = true;
        d->table_dev = st.st_dev;
        d->table_ino = st.st_ino;
        d->last_open_error = 0;
        /* A new file counts its generations from 1. */
        d->seen_gen = 0;

        if (watcher_kick_until_acked(d, epoch)) {
                table_reader_free(old);
        } else {
                /* The watcher still might read it: keep the mapping. */
                for (size_t i = 0; i < ELEMENTSOF(d->leaked); i++)
                        if (!d->leaked[i]) {
                                d->leaked[i] = old;
                                break;
                        }
        }
        snprintf(message, sizeof(message), "following table %s (inode %" PRIu64 ")", d->table_path,
                 (uint64_t) st.st_ino);
        log_fn(userdata, LOG_INFO, message);
        return 0;
}


/* A copy of the published table in d->scratch, from the mapping in use or,
 * before there is one, from the file. */
int dispatcher_snapshot_published(Dispatcher *d, uint64_t *ret_gen) {
        _cleanup_(table_reader_freep) TableReader *own = NULL;
        const TableReader *reader = d->reader_broken ? NULL : d->reader;
        int r;

        if (!reader) {
                r = table_reader_open(d->table_path, &own);
                if (r < 0)
                        return r;
                reader = own;
        }
        /* A torn copy means the broker is publishing right now: look again. */
        for (unsigned tries = 0; tries < 100; tries++) {
                r = table_guard_snapshot(reader, d->scratch, ret_gen);
                if (r != -EAGAIN)
                        return r;
                (void) usleep(1000);
        }
        return -EAGAIN;
}

void dispatcher_sweep(Dispatcher *d, const DispatcherRunOptions *o, bool at_start) {
        uint64_t gen = 0;
        unsigned demoted = 0, groups;

        if (at_start) {
                unsigned stuck = sweep_dying_dispatchers();
                if (stuck > 0)
                        run_log(o, LOG_WARNING, "start-up sweep: %u real-time thread(s) of dying dispatchers (killed, "
                                "still in the kernel) put to SCHED_OTHER so that they can finish", stuck);
        }
        if (dispatcher_snapshot_published(d, &gen) == 0)
                demoted = sweep_demote_table(d->scratch);
        /* Strict mode: v1 freezer groups a predecessor left behind are
         * thawed and (at start) emptied into the hierarchy's root and
         * removed, so no process stays frozen because a dispatcher died. */
        groups = freezer_v1_sweep(d->freezer, at_start);
        if (demoted > 0 || groups > 0 || !at_start)
                run_log(o, demoted > 0 ? LOG_WARNING : LOG_INFO,
                        "%s: %u thread(s) of reserved processes found at SCHED_FIFO %d and demoted to SCHED_OTHER"
                        "%s%u freezer group(s) thawed",
                        at_start ? "start-up sweep (a previous dispatcher died without restoring)" :
                                   "dying on SIGABRT",
                        demoted, PACE_RUNNING_PRIORITY, ", ", groups);
}

static bool same_cpus(const PaceConfig *a, const PaceConfig *b) {
        return a->n_cpus == b->n_cpus && memcmp(a->cpus, b->cpus, a->n_cpus * sizeof(a->cpus[0])) == 0;
}

/* SIGHUP: the new file passes the same validation as at start, must not
 * change what only a restart can change, and must accept the table in
 * force; otherwise it is refused whole and the configuration in force
 * stays. Accepted, it takes over on each CPU at its next frame boundary. */
void dispatcher_reload(Dispatcher *d, const DispatcherRunOptions *o) {
        PaceConfig next;
        uint64_t gen = 0;
        char why[1024] = "";
        int r;

        if (!o->load_config) {
                run_log(o, LOG_WARNING, "SIGHUP: no configuration to reload");
                return;
        }
        r = o->load_config(o->userdata, &next, why, sizeof(why));
        if (r < 0) {
                run_log(o, LOG_ERR, "reload refused: %s; the configuration in force stays", why[0] ? why : strerror(-r));
                return;
        }
        r = resolve_cpus(&next);
        if (r < 0) {
                run_log(o, LOG_ERR, "reload refused: cannot read the online CPUs: %s", strerror(-r));
                return;
        }
        const char *fixed = !same_cpus(&next, &d->config) ? "\"cpus\" (one dispatch thread per CPU)" :
                            next.waiting != d->config.waiting ? "\"waiting\"" :
                            next.slot_ns != d->config.slot_ns ? "\"slot_us\" (the table in force is in slots)" :
                            pace_config_frame_slots(&next) > pace_config_frame_slots(&d->config) ?
                                    "\"max_frame_ms\" upwards (run arrays are allocated and locked at start)" :
                                    NULL;
        if (fixed) {
                run_log(o, LOG_ERR,
                        "reload refused: changing %s needs a restart of pace-dispatcher; the configuration in "
                        "force stays", fixed);
                return;
        }
        uint64_t cur = atomic_load(&d->shared.config_gen);
        for (uint32_t i = 0; i < d->n_loops; i++)
                if (loop_running(&d->loops[i]) && !loop_acked_config(&d->loops[i], cur)) {
                        run_log(o, LOG_ERR,
                                "reload refused: the previous reload is not in force on CPU %" PRIi32
                                " yet (it waits for a frame boundary); send SIGHUP again", d->loops[i].cpu);
                        return;
                }
        r = dispatcher_snapshot_published(d, &gen);
        if (r == 0 && table_check(d->scratch, &next, why, sizeof(why)) < 0) {
                run_log(o, LOG_ERR,
                        "reload refused: the table in force (generation %" PRIu64 ") breaks the new configuration: "
                        "%s; the configuration in force stays", gen, why);
                return;
        }

        unsigned live = atomic_load(&d->shared.config_live);
        d->shared.configs[!live] = next;
        atomic_store(&d->shared.config_live, !live);
        uint64_t ngen = atomic_fetch_add(&d->shared.config_gen, 1) + 1;
        /* Idle loops take it at once; active ones at their frame boundary. */
        dispatcher_kick_until(d, loop_acked_config, ngen, 0);
        run_log(o, LOG_INFO, "reloaded the configuration; in force on each CPU from its next frame "
                "boundary");
}

void dispatcher_resource_needs(const Dispatcher *d, uint64_t *ret_memlock, uint64_t *ret_files, uint64_t *ret_min_files,
                               uint64_t *ret_threads) {
        uint64_t per_loop = loop_memory_needs(pace_config_frame_slots(&d->config));
        /* The mapping in use, one being handed over, the ones kept while a
         * thread might still read them, and the main thread's scratch copy. */
        uint64_t tables = (2 + ELEMENTSOF(d->leaked)) * PACE_TABLE_FILE_SIZE + 2 * sizeof(PaceTableBuffer);
        /* Code, libraries, the main stack, and heap for held processes and
         * their threads (measured: 9.3 MiB locked in all, idle on 2 CPUs,
         * of which about 6 MiB are not the buffers counted below). */
        uint64_t base = 12ULL * 1024 * 1024;

        *ret_memlock = base + tables + d->n_loops * per_loop;
        /* Per reserved process a pidfd, a /proc directory and its task
         * directory, (strict) a freezer.state and its group's tasks,
         * cgroup.procs and usage; per registered thread its pidfd and
         * schedstat (the loops' handles, held.h); per nice level a pidfd;
         * per loop a few transient ones; the main thread's event loop
         * (epoll, signalfd, timerfd), inotify, eventfds, stdio, notify
         * socket. */
        uint64_t rest = PACE_MAX_NICE_THREADS + 4ULL * d->n_loops + 32;
        *ret_files = (8ULL + 2ULL * d->config.max_threads_per_reservation) * PACE_MAX_RESERVATIONS + rest;
        *ret_min_files = 8ULL * PACE_MAX_RESERVATIONS + rest;
        /* The loops, the main thread and the table watcher, and the
         * monitor's two (RLIMIT_NPROC counts the uid's tasks). */
        *ret_threads = d->n_loops + 4;
}

Dispatcher *dispatcher_free(Dispatcher *d) {
        if (!d)
                return NULL;

        atomic_store(&d->shared.stop, true);
        dispatcher_kick_until(d, dispatcher_loop_gone, 0, 5 * NSEC_PER_SEC);
        dispatcher_watcher_stop(d);
        /* A wedged loop may still touch its buffers: they stay. */
        for (uint32_t i = 0; i < d->n_loops; i++)
                if (loop_join(&d->loops[i]) == 0) {
                        keeper_release_all(d->keeper, &d->loops[i]);
                        loop_done(&d->loops[i]);
                }
        free(d->loops);
        keeper_free(d->keeper);
        free(d->scratch);
        free(d->planned);
        nice_set_free(d->nice);
        watchdog_free(d->watchdog);
        d->freezer = freezer_v1_close(d->freezer);
        group_set_free(d->groups);
        tree_set_free(d->trees);
        stats_file_unmap(d->shared.stats);
        table_reader_free(d->reader);
        for (size_t i = 0; i < ELEMENTSOF(d->leaked); i++)
                table_reader_free(d->leaked[i]);
        thread_registry_free(d->registry);
        log_ring_free(d->shared.log);
        safe_close(d->housekeeping_efd);
        safe_close(d->table_efd);
        free(d->runtime_dir);
        free(d->table_path);
        free(d);
        return NULL;
}
