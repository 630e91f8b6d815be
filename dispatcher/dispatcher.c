/* SPDX-License-Identifier: MIT */
/* The dispatcher's lifecycle and its main thread: creating the dispatch
 * loops (loop.c) and starting their threads, finding and handing over the
 * table file, reloads, sweeps, the watchdog's timers (watchdog.c) and
 * relaying the loops' log messages (log-ring.c), until it stops. */
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
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-event.h>

#include "dispatcher.h"
#include "nice.h"
#include "freezer-v1.h"
#include "group.h"
#include "lending.h"
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

/* A header written through mmap raises no inotify event: after the file
 * appears, look again this often, this many times. */
#define OPEN_RETRY_NS (10 * NSEC_PER_MSEC)
/* The main thread tidies the reservation groups this often while there are
 * any (group_set_housekeep()): what a tree's new members wait at most to
 * be found, and how long a stranger may sit in a group. */
#define HOUSEKEEPING_NS (50 * NSEC_PER_MSEC)
/* The most a slow round stretches the next: a round's time includes
 * asking systemd for delegated scopes (seconds under emulation), and
 * stretched 50 times it once left a tree's later process unfound for the
 * whole of the VM test's 13 s window (its reservation got 0.9% of 30%). */
#define HOUSEKEEPING_MAX_NS (1000 * NSEC_PER_MSEC)
/* How often the reserved processes' threads are looked at for one in the
 * real-time class behind its policy (sweep_reclass_table()): what such a
 * thread can take before it is put back. Stretched to 200 times what a
 * look took, so that the look never costs more than 0.5% of a CPU beside
 * the housekeeping's 2%: listing a 10,000-thread client's task directory
 * up to the look's window takes it about 7 ms, which at 100 times put the
 * dispatcher process at 4.75-6.20% of its CPU in a noisy hour (bound 6). */
#define CLASS_CHECK_NS NSEC_PER_SEC
#define CLASS_CHECK_STRETCH 200
/* Stat files a look reads at most (about 5 us each): a client with more
 * threads is covered over several looks, so no one look costs much. */
#define CLASS_CHECK_THREADS 512u
#define OPEN_RETRIES 300u
/* Looking at a new generation (a copy and a check, hundreds of us for a
 * full table, then the plans) is the main thread's, at SCHED_OTHER; still,
 * whoever writes the table could publish in a loop: a burst of
 * TABLE_LOOK_BURST looks (a few grants and releases in a row are taken at
 * once), then one per TABLE_LOOK_INTERVAL_NS, whatever the generation does. */
#define TABLE_LOOK_BURST 4u
#define TABLE_LOOK_INTERVAL_NS (50 * NSEC_PER_MSEC)
/* A loop that saw threads come or go asks for a keeper round at once; the
 * rounds are at least this far apart. */
#define KEEP_SPACING_NS (2 * NSEC_PER_MSEC)

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

static const char *identity_problem(int r) {
        switch (r) {
        case -ESRCH:
                return "the process does not exist";
        case -ESTALE:
                return "the pid now belongs to another process (start time differs)";
        case -EPERM:
                return "pid 1, kernel threads and the dispatcher itself are never promoted";
        case -EACCES:
                return "the process belongs to another user than the one the table names";
        case -EDQUOT:
                return "the process runs as root (a real, effective, saved or file-system uid 0) and "
                       "\"reserve_root_processes\" is off";
        case -EBADMSG:
                return "its /proc status or limits cannot be read";
        default:
                return strerror(-r);
        }
}

/* A reservation whose identity check failed, once (it stays inert). */
static void on_ignored(void *userdata, const PaceTableReservation *res, int r) {
        Dispatcher *d = userdata;

        if (d->run)
                log_sinkf(d->run->log, d->run->userdata, LOG_WARNING,
                          "CPU %" PRIi32 ": ignoring reservation %" PRIu64 " of pid %" PRIi32 ": %s", res->cpu, res->id,
                          res->pid, identity_problem(r));
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
                r = loop_init(&d->loops[i], &d->shared, d->config.cpus[i], max_frame);
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

const PaceConfig *dispatcher_config(const Dispatcher *d) {
        return &d->config;
}

static void kick_until(Dispatcher *d, bool (*done)(const CpuLoop *l, uint64_t arg), uint64_t arg,
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

static bool loop_gone(const CpuLoop *l, uint64_t unused) {
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

static void watcher_stop(Dispatcher *d) {
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
static int dispatcher_open_table(Dispatcher *d, LogSink log_fn, void *userdata) {
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

#define run_log(o, priority, ...) log_sinkf((o)->log, (o)->userdata, (priority), __VA_ARGS__)

/* A copy of the published table in d->scratch, from the mapping in use or,
 * before there is one, from the file. */
static int snapshot_published(Dispatcher *d, uint64_t *ret_gen) {
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

static void sweep(Dispatcher *d, const DispatcherRunOptions *o, bool at_start) {
        uint64_t gen = 0;
        unsigned demoted = 0, groups;

        if (at_start) {
                unsigned stuck = sweep_dying_dispatchers();
                if (stuck > 0)
                        run_log(o, LOG_WARNING, "start-up sweep: %u real-time thread(s) of dying dispatchers (killed, "
                                "still in the kernel) put to SCHED_OTHER so that they can finish", stuck);
        }
        if (snapshot_published(d, &gen) == 0)
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
static void reload(Dispatcher *d, const DispatcherRunOptions *o) {
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
        r = snapshot_published(d, &gen);
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
        kick_until(d, loop_acked_config, ngen, 0);
        run_log(o, LOG_INFO, "reloaded the configuration; in force on each CPU from its next frame "
                "boundary");
}

/* The main thread's events while dispatcher_run() runs. */
typedef struct MainLoop {
        Dispatcher *d;
        const DispatcherRunOptions *o;
        sd_event *event;
        /* Armed from the handlers; the others are the event's own. */
        sd_event_source *log, *check, *retry, *look, *probe, *housekeeping, *class_check, *table, *table_later;
        /* Priority lent through PI locks (lending.h): the instance's
         * trace_pipe, -1 where it could not be had. */
        sd_event_source *lending_io, *lending_takeover;
        Lending *lending;
        int lending_fd;
        int inotify_fd;
        unsigned retries;
        uint64_t look_every_ns;
        uint64_t tick_next_ns; /* watch_tick()'s next look */
        /* When the next look for threads in the real-time class behind
         * their policy is due (0: none, no reservations). */
        uint64_t class_due_ns;
        unsigned class_cursor; /* where in the walk the next look starts */
        uint64_t keep_next_ns; /* a loop's request for a keeper round waits until then */
} MainLoop;


/* The reservation that lent: the one with raiser among its registered
 * members, or, where raiser is a dispatch loop (it promoted a member that
 * was blocked already), the one it promoted last before raised_ns. Only
 * ever one of the loops' own (a pointer from the ring is compared, never
 * followed, until found among them). */
static Held *lending_lender(Dispatcher *d, pid_t raiser, uint64_t raised_ns, CpuLoop **ret_loop) {
        for (uint32_t i = 0; i < d->n_loops; i++) {
                CpuLoop *l = &d->loops[i];
                for (size_t k = 0; k < l->n_owned; k++)
                        for (size_t j = 0; j < l->owned[k]->n_mine; j++)
                                if (l->owned[k]->mine[j]->tid == raiser) {
                                        *ret_loop = l;
                                        return l->owned[k];
                                }
        }
        for (uint32_t i = 0; i < d->n_loops; i++) {
                CpuLoop *l = &d->loops[i];
                if (atomic_load(&l->tid) != raiser)
                        continue;
                const struct Held *best = NULL;
                uint64_t best_ns = 0;
                for (unsigned k = 0; k < LOOP_PROMOTED_RING; k++) {
                        uint64_t t = atomic_load_explicit(&l->promoted[k].ns, memory_order_acquire);
                        const struct Held *h = atomic_load_explicit(&l->promoted[k].held, memory_order_relaxed);
                        if (t != 0 && t <= raised_ns && t >= best_ns) {
                                best = h;
                                best_ns = t;
                        }
                }
                for (size_t k = 0; best && k < l->n_owned; k++)
                        if (l->owned[k] == best) {
                                *ret_loop = l;
                                return l->owned[k];
                        }
        }
        return NULL;
}

static void lending_charged(void *userdata, pid_t raiser, uint64_t raised_ns, pid_t owner, uint64_t ns) {
        MainLoop *m = userdata;
        Dispatcher *d = m->d;
        CpuLoop *l = NULL;
        Held *h = lending_lender(d, raiser, raised_ns, &l);

        if (!h)
                return;
        /* Lent to one of its own registered members: counted as theirs. */
        for (size_t j = 0; j < h->n_mine; j++)
                if (h->mine[j]->tid == owner)
                        return;
        atomic_fetch_add_explicit(&h->lent_ns, ns, memory_order_relaxed);
        if (!h->lent_logged && d->run) {
                h->lent_logged = true;
                run_log(d->run, LOG_NOTICE,
                        "CPU %" PRIi32 ": pid %" PRIi32 " (reservation %" PRIu64 ") lent its priority to task %" PRIi32
                        " through a priority-inheritance lock; what that task runs so is charged to %s",
                        l->cpu, h->pid, h->id, owner,
                        h->server ? "the reservation's budget" :
                                    "nothing (a slots reservation lends only in its own slots)");
        }
}

static bool lending_owner_boosted(void *userdata, pid_t owner) {
        return lending_task_boosted(owner);
}

static void lending_take(MainLoop *m) {
        char buf[16384];

        /* Bounded: a flood of events waits for the next wake-up. */
        for (int i = 0; i < 8; i++) {
                ssize_t n = read(m->lending_fd, buf, sizeof(buf));
                if (n <= 0)
                        break;
                lending_feed(m->lending, buf, (size_t) n, lending_charged, m);
        }
        lending_charge_ongoing(m->lending, monotonic_ns(), lending_charged, lending_owner_boosted, m);
}

static int on_lending(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        lending_take(userdata);
        return 0;
}

/* How often the instance a dying predecessor still holds is tried again. */
#define LENDING_TAKEOVER_NS (500 * NSEC_PER_MSEC)

static void arm(sd_event_source *s, uint64_t ns);

/* Our tracing instance, opened and watched. */
static int lending_open(MainLoop *m) {
        const char *tracefs = m->o->tracefs ?: LENDING_TRACEFS;
        int r = lending_trace_open(tracefs, m->d->instance_name, &m->lending_fd);

        if (r >= 0)
                r = sd_event_add_io(m->event, &m->lending_io, m->lending_fd, EPOLLIN, on_lending, m);
        if (r < 0 && m->lending_fd >= 0) {
                m->lending_fd = safe_close(m->lending_fd);
                lending_trace_remove(tracefs, m->d->instance_name);
        }
        return r;
}

static void lending_said(MainLoop *m, int r, bool takeover) {
        const char *tracefs = m->o->tracefs ?: LENDING_TRACEFS;

        if (r == -EEXIST && !takeover)
                run_log(m->o, LOG_WARNING,
                        "the tracing instance %s/instances/%s is still held by a dispatcher that is exiting: "
                        "priority a budget server's member lends through a priority-inheritance lock is not "
                        "charged to the server until it is gone and this one takes the instance over",
                        tracefs, m->d->instance_name);
        else if (r < 0 && r != -EEXIST)
                run_log(m->o, LOG_WARNING,
                        "no tracing instance in %s (%s): priority a budget server's member lends through a "
                        "priority-inheritance lock is not charged to the server (docs/security.md)", tracefs,
                        strerror(-r));
        else if (r >= 0)
                run_log(m->o, LOG_INFO, "priority lent through priority-inheritance locks is charged to the "
                        "lender's budget (sched_pi_setprio, in %s/instances/%s%s)", tracefs, m->d->instance_name,
                        takeover ? ", taken over from the dispatcher before" : "");
}

/* A predecessor SIGKILLed with its monitor may still be exiting (its
 * threads stuck in the kernel) with its trace_pipe open: the instance,
 * which has our name, cannot be removed until it is gone, and once it is
 * gone nobody else would remove it. So it is tried again until it is ours. */
static int on_lending_takeover(sd_event_source *s, uint64_t usec, void *userdata) {
        MainLoop *m = userdata;
        int r = lending_open(m);

        if (r == -EEXIST)
                arm(s, LENDING_TAKEOVER_NS);
        else
                lending_said(m, r, true);
        return 0;
}

/* The tracing instance, and a sentence for the start-up log either way. */
static void lending_start(MainLoop *m) {
        /* Dead instances' (a SIGKILL leaves its instance behind; a live
         * one's cannot be removed). */
        (void) lending_trace_sweep(m->o->tracefs ?: LENDING_TRACEFS);
        int r = lending_new(&m->lending);

        if (r >= 0)
                r = lending_open(m);
        lending_said(m, r, false);
        if (r == -EEXIST && sd_event_add_time(m->event, &m->lending_takeover, CLOCK_MONOTONIC, UINT64_MAX, 1,
                                              on_lending_takeover, m) >= 0)
                arm(m->lending_takeover, LENDING_TAKEOVER_NS);
}

static void main_loop_done(MainLoop *m) {
        sd_event_source_disable_unref(m->log);
        sd_event_source_disable_unref(m->check);
        sd_event_source_disable_unref(m->retry);
        sd_event_source_disable_unref(m->look);
        sd_event_source_disable_unref(m->probe);
        sd_event_source_disable_unref(m->housekeeping);
        sd_event_source_disable_unref(m->class_check);
        sd_event_source_disable_unref(m->table);
        sd_event_source_disable_unref(m->table_later);
        sd_event_source_disable_unref(m->lending_io);
        sd_event_source_disable_unref(m->lending_takeover);
        m->lending_fd = safe_close(m->lending_fd);
        /* Ours, or a predecessor's we were still waiting to take over (it
         * has our name, and it may be gone by now). */
        if (m->lending)
                lending_trace_remove(m->o->tracefs ?: LENDING_TRACEFS, m->d->instance_name);
        lending_free(m->lending);
        sd_event_unref(m->event);
        safe_close(m->inotify_fd);
}

/* From now, not from the start of this event loop iteration (what
 * sd_event_source_set_time_relative() counts from): a round of
 * housekeeping waits 50 times what the last one took after it ended. */
static void arm(sd_event_source *s, uint64_t ns) {
        (void) sd_event_source_set_time(s, (monotonic_ns() + ns) / NSEC_PER_USEC);
        (void) sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
}

static int on_log(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        MainLoop *m = userdata;

        (void) log_ring_drain(m->d->shared.log, m->o->log, m->o->userdata);
        return 0;
}

/* Runs after the other events of an iteration, so a burst of inotify
 * events and a retry that fire together open the file once. */
static int on_check(sd_event_source *s, void *userdata) {
        MainLoop *m = userdata;
        Dispatcher *d = m->d;
        const DispatcherRunOptions *o = m->o;
        int r;

        r = dispatcher_open_table(d, o->log, o->userdata);
        if (r == 0 || r == -ENOENT) {
                m->retries = 0;
        } else if (r != -EMEDIUMTYPE && ++m->retries < OPEN_RETRIES) {
                /* (A FIFO or a directory never turns into a table: said at
                 * once, below.) Probably a broker still writing the header. */
                arm(m->retry, OPEN_RETRY_NS);
        } else if (r != d->last_open_error || d->last_open_error_ino != d->table_ino) {
                d->last_open_error = r;
                d->last_open_error_ino = d->table_ino;
                run_log(o, LOG_WARNING, "cannot use table %s: %s; waiting for a new one", d->table_path,
                        r == -EBADMSG ? "not a pace table (size or magic)" :
                        r == -EMEDIUMTYPE ? "not a regular file" :
                        r == -EPROTO ? "table version or layout differs from this dispatcher's" :
                        strerror(-r));
                m->retries = 0;
        }
        return 0;
}

static void check_soon(MainLoop *m) {
        (void) sd_event_source_set_enabled(m->check, SD_EVENT_ONESHOT);
}

static int on_inotify(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        MainLoop *m = userdata;
        char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
        bool table = false;
        ssize_t n;

        while ((n = read(fd, buf, sizeof(buf))) > 0)
                for (char *q = buf; q < buf + n;) {
                        struct inotify_event *ev = (struct inotify_event *) q;
                        q += sizeof(*ev) + ev->len;
                        if (ev->mask & IN_Q_OVERFLOW || (ev->len > 0 && strcmp(ev->name, PACE_TABLE_NAME) == 0))
                                table = true;
                }
        if (table) {
                m->retries = 0;
                check_soon(m);
        }
        return 0;
}

static int on_retry(sd_event_source *s, uint64_t usec, void *userdata) {
        check_soon(userdata);
        return 0;
}

/* A look (probe false) or a probe of the watchdog: the ping when every loop
 * advances, a probe soon when one did not, the log when that lasts. */
static void watch(MainLoop *m, bool probe) {
        Dispatcher *d = m->d;
        const DispatcherRunOptions *o = m->o;
        uint64_t stalled_ns;

        switch (probe ? watchdog_probe(d->watchdog, monotonic_ns(), &stalled_ns) :
                        watchdog_look(d->watchdog, monotonic_ns(), &stalled_ns)) {
        case WATCHDOG_RECOVERED:
                run_log(o, LOG_INFO, "every dispatch loop advances again after %" PRIu64 " ms",
                        (uint64_t) (stalled_ns / NSEC_PER_MSEC));
                o->watchdog_ping(o->userdata);
                break;
        case WATCHDOG_PING:
                o->watchdog_ping(o->userdata);
                break;
        case WATCHDOG_PROBE:
                arm(m->probe, WATCHDOG_PROBE_NS);
                break;
        case WATCHDOG_STALLED:
                for (uint32_t i = 0; i < d->n_loops; i++)
                        if (watchdog_loop_stalled(d->watchdog, i))
                                run_log(o, LOG_ERR,
                                        "the dispatch loop of CPU %" PRIi32 " does not advance (kicked, no answer "
                                        "within %llu ms); withholding the watchdog ping",
                                        d->loops[i].cpu, (unsigned long long) (WATCHDOG_PROBE_NS / NSEC_PER_MSEC));
                break;
        case WATCHDOG_STILL_STALLED:
                break;
        }
}

/* The look, from inside a long call on the main thread (the manager's
 * answer to a scope request): as the look timer would, no more often. */
static void watch_tick(void *userdata) {
        MainLoop *m = userdata;
        uint64_t now = monotonic_ns();

        if (m->look_every_ns == 0 || now < m->tick_next_ns)
                return;
        m->tick_next_ns = now + m->look_every_ns;
        watch(m, false);
}

static int on_look(sd_event_source *s, uint64_t usec, void *userdata) {
        MainLoop *m = userdata;
        uint64_t every_usec = m->look_every_ns / NSEC_PER_USEC, next = usec + every_usec, now = monotonic_ns() / NSEC_PER_USEC;

        /* On a fixed grid, as an interval timer: a late look does not
         * delay the ones after it, and missed ones are not made up. */
        while (next <= now)
                next += every_usec;
        (void) sd_event_source_set_time(s, next);
        (void) sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
        m->tick_next_ns = monotonic_ns() + m->look_every_ns;
        watch(m, false);
        return 0;
}

static int on_probe(sd_event_source *s, uint64_t usec, void *userdata) {
        watch(userdata, true);
        return 0;
}

/* The published table in d->scratch, checked here as the loops check
 * theirs: the main thread trusts the broker no more than they do. 0, or
 * -EBADMSG for a table the check refuses (the loops say why, once), or the
 * snapshot's error. */
static int snapshot_checked(Dispatcher *d, uint64_t *ret_gen) {
        char why[512];
        int r;

        r = snapshot_published(d, ret_gen);
        if (r < 0)
                return r;
        return table_check(d->scratch, &d->config, why, sizeof(why)) < 0 ? -EBADMSG : 0;
}

/* The nice levels of the table the plans come from. */
static void apply_nice(Dispatcher *d, const DispatcherRunOptions *o) {
        char why[256];

        if (!d->have_planned)
                return;
        size_t changed = nice_set_apply(d->nice, d->planned, d->config.reserve_root_processes, why, sizeof(why));
        if (changed > 0)
                run_log(o, LOG_INFO, "table generation %" PRIu64 ": %zu thread(s) at a nice level of "
                        "the table's (%zu changed)", d->planned_gen, nice_set_size(d->nice), changed);
        if (why[0] && strcmp(why, d->nice_why) != 0)
                run_log(o, LOG_WARNING, "table generation %" PRIu64 ": a nice level not applied: %s",
                        d->planned_gen, why);
        snprintf(d->nice_why, sizeof(d->nice_why), "%s", why);
}

static void log_class_put_back(const DispatcherRunOptions *o, unsigned n) {
        run_log(o, LOG_WARNING,
                "%u thread(s) of reserved processes found in the real-time class behind a non-real-time policy "
                "(born as their parent was promoted); put back in their own", n);
}

static bool any_owned(const Dispatcher *d) {
        for (uint32_t i = 0; i < d->n_loops; i++)
                if (d->loops[i].n_owned > 0)
                        return true;
        return false;
}

/* The keeper's round for every loop: what they no longer run freed,
 * threads registered and taken back. */
static void keep_all(Dispatcher *d) {
        unsigned put_back = 0;

        for (uint32_t i = 0; i < d->n_loops; i++) {
                CpuLoop *l = &d->loops[i];
                if (!loop_running(l))
                        continue;
                (void) keeper_collect(d->keeper, l);
                (void) keeper_keep(d->keeper, l, &put_back);
        }
        if (put_back > 0 && d->run)
                log_class_put_back(d->run, put_back);
}

/* A child born as its parent was first promoted runs in the real-time
 * class while its policy says otherwise (held.c, registry_acquire()): the
 * loops see only the threads they hold and the newcomers they register, so
 * the main thread looks at all of them, as the table it checked names
 * them. Only while there are reservations (an idle dispatcher wakes for
 * nothing): sets m->class_due_ns, 0 when there are none. */
static void class_check_run(MainLoop *m) {
        Dispatcher *d = m->d;
        uint64_t gen, started = monotonic_ns();

        m->class_due_ns = 0;
        int r = snapshot_checked(d, &gen);
        if ((r < 0 && r != -EBADMSG) || d->scratch->n_reservations == 0)
                return;
        /* A refused table: looked at again later (the loops keep the one in
         * force). */
        if (r == 0) {
                unsigned n = sweep_reclass_table(d->scratch, d->config.reserve_root_processes, CLASS_CHECK_THREADS,
                                                 &m->class_cursor);
                if (n > 0)
                        log_class_put_back(m->o, n);
        }
        uint64_t now = monotonic_ns();
        m->class_due_ns = now + MAX(CLASS_CHECK_NS, CLASS_CHECK_STRETCH * (now - started));
}

/* Its own timer while the housekeeping is not running; while it is, the
 * housekeeping's rounds carry it (on_housekeeping()), one wake-up fewer. */
static void class_check_schedule(MainLoop *m) {
        if (m->class_due_ns == 0)
                return;
        (void) sd_event_source_set_time(m->class_check, m->class_due_ns / NSEC_PER_USEC);
        (void) sd_event_source_set_enabled(m->class_check, SD_EVENT_ONESHOT);
}

static int on_class_check(sd_event_source *s, uint64_t usec, void *userdata) {
        MainLoop *m = userdata;

        class_check_run(m);
        class_check_schedule(m);
        return 0;
}

/* A group came into use (housekeeping runs periodically from now on), or
 * a loop adopted a table with nice levels, or without the last ones. */
static int on_housekeeping_wanted(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        MainLoop *m = userdata;
        uint64_t v;

        (void) !read(fd, &v, sizeof(v));
        /* Threads came or went (a loop asks), or a group came into use: a
         * look at once, unless the last one was less than ten times its own
         * cost ago (a client that churns threads in every period must not
         * keep the main thread busy either); then the next round brings it. */
        uint64_t now = monotonic_ns();
        if (now >= m->keep_next_ns) {
                keep_all(m->d);
                uint64_t took = monotonic_ns() - now;
                m->keep_next_ns = now + MAX(KEEP_SPACING_NS, 10 * took);
                arm(m->housekeeping, HOUSEKEEPING_NS);
        } else
                arm(m->housekeeping, m->keep_next_ns - now);
        /* A table with reservations: the look starts (again) a second on. */
        if (m->class_due_ns == 0) {
                m->class_due_ns = monotonic_ns() + CLASS_CHECK_NS;
                class_check_schedule(m);
        }
        return 0;
}

static int on_housekeeping(sd_event_source *s, uint64_t usec, void *userdata) {
        MainLoop *m = userdata;
        Dispatcher *d = m->d;
        const DispatcherRunOptions *o = m->o;

        /* Periodic only while there are groups: an idle dispatcher wakes
         * for nothing. A v1 list costs the kernel every task in the group,
         * so a client with thousands of threads stretches the interval: the
         * work stays under 2% of a CPU (the next round waits 50 times what
         * this one took), up to HOUSEKEEPING_MAX_NS: a list that takes over
         * 20 ms then takes more, on this SCHED_OTHER thread. */
        uint64_t started = monotonic_ns();
        char why[512] = "";
        size_t watched = (d->groups ? group_set_housekeep(d->groups, o->make_scope, o->userdata, why, sizeof(why)) :
                                      0) +
                         tree_set_housekeep(d->trees);
        /* Only the lists stretch the rounds: the keeper's own work is
         * spaced per reservation (KEEP_QUIET_NS), and a round slowed by it
         * (registering a restarted dispatcher's clients, say) must not
         * leave a reservation that is not ready waiting a second. */
        uint64_t took = monotonic_ns() - started;
        if (why[0])
                run_log(o, LOG_WARNING, "%s; the reservation's members are found in /proc", why);
        keep_all(d);
        watched += any_owned(d);
        /* A lending with no event yet about its end is charged as it goes
         * (new events wake on_lending()). */
        if (m->lending && lending_active(m->lending) > 0)
                lending_take(m);
        if (m->class_due_ns > 0 && monotonic_ns() >= m->class_due_ns)
                class_check_run(m);
        if (watched > 0) {
                arm(s, MIN(MAX(HOUSEKEEPING_NS, 50 * took), HOUSEKEEPING_MAX_NS));
                /* The next rounds carry the look. */
                (void) sd_event_source_set_enabled(m->class_check, SD_EVENT_OFF);
        } else
                class_check_schedule(m);
        return 0;
}

static const PaceConfig *live_config(Dispatcher *d) {
        return &d->shared.configs[atomic_load(&d->shared.config_live)];
}

static void table_broken(MainLoop *m) {
        Dispatcher *d = m->d;

        if (d->reader_broken)
                return;
        d->reader_broken = true;
        run_log(m->o, LOG_WARNING,
                "the table file shrank under its mapping (SIGBUS while reading it); keeping generation %" PRIu64
                " until a new table file appears", d->planned_gen);
}

/* A new generation (the watcher says so, or a look that had to wait for
 * the bucket): copied and checked once for every CPU, and each loop handed
 * its plan, which it takes at its next frame boundary (an idle one at
 * once). A refused table is logged once; the plans in force stay. */
static void consider(MainLoop *m) {
        Dispatcher *d = m->d;
        const DispatcherRunOptions *o = m->o;
        char why[512];
        uint64_t gen = 0, seen;
        int r;

        if (atomic_load(&d->watch_broken))
                table_broken(m);
        if (!d->reader || d->reader_broken)
                return;
        if (table_guard_generation(d->reader, &seen) < 0) {
                table_broken(m);
                return;
        }
        if (seen == d->seen_gen)
                return;
        uint64_t now = monotonic_ns();
        if (now < d->next_look_ns) {
                arm(m->table_later, d->next_look_ns - now);
                return;
        }
        /* One token spent: the bucket is full again one interval later than
         * it would have been, and empty while that is more than a burst
         * away. */
        uint64_t burst_ns = (uint64_t) (TABLE_LOOK_BURST - 1) * TABLE_LOOK_INTERVAL_NS;
        d->look_full_ns = MAX(d->look_full_ns, now) + TABLE_LOOK_INTERVAL_NS;
        d->next_look_ns = d->look_full_ns > now + burst_ns ? d->look_full_ns - burst_ns : 0;
        atomic_store(&d->watch_not_before_ns, d->next_look_ns);

        r = table_guard_snapshot(d->reader, d->scratch, &gen);
        if (r == -EFAULT) {
                table_broken(m);
                return;
        }
        if (r < 0) {
                /* Nothing yet, or torn: the writer bumps the generation when
                 * done, and the watcher says so. */
                d->seen_gen = seen;
                return;
        }
        d->seen_gen = gen;
        const PaceConfig *config = live_config(d);
        if (table_check(d->scratch, config, why, sizeof(why)) < 0) {
                if (d->refused_gen != gen)
                        run_log(o, LOG_ERR, "refusing table generation %" PRIu64 ": %s; generation %" PRIu64
                                " stays in force", gen, why, d->planned_gen);
                d->refused_gen = gen;
                return;
        }
        PaceTableBuffer *t = d->planned;
        d->planned = d->scratch;
        d->scratch = t;
        d->planned_gen = gen;
        d->have_planned = true;
        for (uint32_t i = 0; i < d->n_loops; i++) {
                CpuLoop *l = &d->loops[i];
                if (!loop_running(l))
                        continue;
                (void) keeper_collect(d->keeper, l);
                r = keeper_plan(d->keeper, l, d->planned, gen, config);
                if (r < 0)
                        run_log(o, LOG_ERR, "CPU %" PRIi32 ": cannot plan table generation %" PRIu64 ": %s", l->cpu,
                                gen, strerror(-r));
        }
        loop_shared_wake_idle(&d->shared);
        apply_nice(d, o);
        if (any_owned(d)) {
                arm(m->housekeeping, HOUSEKEEPING_NS);
                /* A table with reservations: the look starts (again) a
                 * second on. */
                if (m->class_due_ns == 0) {
                        m->class_due_ns = monotonic_ns() + CLASS_CHECK_NS;
                        class_check_schedule(m);
                }
        }
}

static int on_table(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        uint64_t v;

        (void) !read(fd, &v, sizeof(v));
        consider(userdata);
        return 0;
}

static int on_table_later(sd_event_source *s, uint64_t usec, void *userdata) {
        consider(userdata);
        return 0;
}

static int on_signal(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
        MainLoop *m = userdata;
        Dispatcher *d = m->d;
        const DispatcherRunOptions *o = m->o;
        sigset_t mask;

        switch (si->ssi_signo) {
        case SIGHUP:
                reload(d, o);
                return 0;
        case SIGUSR2:
                if (!o->test_hooks) {
                        run_log(o, LOG_WARNING, "SIGUSR2 ignored (test hooks are off)");
                        return 0;
                }
                run_log(o, LOG_WARNING, o->test_hooks == LOOP_HANG_SPIN ?
                        "test hook (SIGUSR2): every dispatch loop spins without advancing from its next promotion "
                        "or wake-up on; the monitor should notice" :
                        "test hook (SIGUSR2): wedging every dispatch loop at its next promotion or wake-up; the "
                        "watchdog should kill this process");
                for (uint32_t i = 0; i < d->n_loops; i++)
                        loop_hang(&d->loops[i], (LoopHang) o->test_hooks);
                kick_until(d, loop_gone, 0, 0);
                return 0;
        case SIGABRT:
                /* systemd's watchdog (or an admin): a loop may be wedged with
                 * a slot owner promoted, so demote from here, then die as
                 * asked. */
                atomic_store(&d->shared.stop, true);
                sweep(d, o, false);
                (void) log_ring_drain(d->shared.log, o->log, o->userdata);
                signal(SIGABRT, SIG_DFL);
                sigemptyset(&mask);
                sigaddset(&mask, SIGABRT);
                pthread_sigmask(SIG_UNBLOCK, &mask, NULL);
                raise(SIGABRT);
                _exit(EXIT_FAILURE);
        default:
                if (o->stopping)
                        o->stopping(o->userdata);
                run_log(o, LOG_INFO, "%s received, restoring every thread and exiting",
                        strsignal((int) si->ssi_signo));
                return sd_event_exit(sd_event_source_get_event(s), 0);
        }
}

/* The signals, the runtime directory, the log ring, the table retries,
 * the watchdog and the housekeeping, on one sd-event loop. */
static int main_loop_setup(MainLoop *m) {
        static const int signals[] = { SIGTERM, SIGINT, SIGHUP, SIGABRT, SIGUSR2 };
        Dispatcher *d = m->d;
        const DispatcherRunOptions *o = m->o;
        int r;

        r = sd_event_new(&m->event);
        if (r < 0)
                return r;
        /* sd-event takes only blocked signals: these are, since
         * dispatcher_new(), in every thread. */
        for (size_t i = 0; i < ELEMENTSOF(signals); i++) {
                r = sd_event_add_signal(m->event, NULL, signals[i], on_signal, m);
                if (r < 0)
                        return r;
        }
        /* The loops' messages go out before whatever the main thread says
         * next, as they were queued first. */
        r = sd_event_add_io(m->event, &m->log, log_ring_fd(d->shared.log), EPOLLIN, on_log, m);
        if (r < 0)
                return r;
        (void) sd_event_source_set_priority(m->log, SD_EVENT_PRIORITY_IMPORTANT);
        r = sd_event_add_io(m->event, NULL, d->housekeeping_efd, EPOLLIN, on_housekeeping_wanted, m);
        if (r < 0)
                return r;
        r = sd_event_add_io(m->event, &m->table, d->table_efd, EPOLLIN, on_table, m);
        if (r < 0)
                return r;
        r = sd_event_add_time(m->event, &m->table_later, CLOCK_MONOTONIC, UINT64_MAX, 1, on_table_later, m);
        if (r < 0)
                return r;
        r = sd_event_add_io(m->event, NULL, m->inotify_fd, EPOLLIN, on_inotify, m);
        if (r < 0)
                return r;
        r = sd_event_add_defer(m->event, &m->check, on_check, m);
        if (r < 0)
                return r;
        (void) sd_event_source_set_priority(m->check, SD_EVENT_PRIORITY_IDLE);
        (void) sd_event_source_set_enabled(m->check, SD_EVENT_OFF);
        /* Timers to the microsecond: sd-event's default accuracy (250 ms)
         * would stretch a 10 ms retry or the 50 ms probe. */
        r = sd_event_add_time(m->event, &m->retry, CLOCK_MONOTONIC, UINT64_MAX, 1, on_retry, m);
        if (r < 0)
                return r;
        r = sd_event_add_time(m->event, &m->housekeeping, CLOCK_MONOTONIC, UINT64_MAX, 1, on_housekeeping, m);
        if (r < 0)
                return r;
        r = sd_event_add_time(m->event, &m->class_check, CLOCK_MONOTONIC, UINT64_MAX, 1, on_class_check, m);
        if (r < 0)
                return r;
        if (o->watchdog_ns > 0 && o->watchdog_ping) {
                m->look_every_ns = watchdog_look_interval(o->watchdog_ns);
                r = sd_event_add_time(m->event, &m->look, CLOCK_MONOTONIC,
                                      (monotonic_ns() + m->look_every_ns) / NSEC_PER_USEC, 1, on_look, m);
                if (r < 0)
                        return r;
                r = sd_event_add_time(m->event, &m->probe, CLOCK_MONOTONIC, UINT64_MAX, 1, on_probe, m);
                if (r < 0)
                        return r;
        }
        return 0;
}

int dispatcher_run(Dispatcher *d, const DispatcherRunOptions *o) {
        _cleanup_(main_loop_done) MainLoop m = { .d = d, .o = o, .inotify_fd = -EBADF, .lending_fd = -EBADF };
        int r;

        d->run = o;
        if (d->groups && group_set_delegated(d->groups) && o->make_scope)
                /* What the subgroups can do here, as for groups of our own
                 * (within LOG_MESSAGE_MAX, the longest case included). */
                run_log(o, group_set_weighs(d->groups) ? LOG_INFO : LOG_WARNING,
                        "on the unified hierarchy under a manager: each reserved tree gets a delegated scope from "
                        "systemd (PartOf= its own unit) with a subgroup of ours: %s, %s; promoted once in it; where "
                        "no scope can be had, members are found in /proc",
                        group_set_weighs(d->groups) ? "waiting members weighed down by the cpu controller" :
                                                      "no cpu controller offered: time taken while waiting counted "
                                                      "against the budget",
                        group_set_confines(d->groups) ? "confined to their CPUs by a cpuset" :
                                                        "affinity checked around every run");
        else if (d->groups && group_set_delegated(d->groups))
                run_log(o, LOG_WARNING, "on the unified hierarchy under a manager: no way to ask the "
                        "manager for scopes: members are found in /proc");
        else if (d->groups)
                run_log(o, d->groups_note[0] ? LOG_WARNING : LOG_INFO,
                        "reservation groups in %s/%s (%s): members found and accounted by cgroup, %s, %s%s%s",
                        group_set_root(d->groups), d->instance_name, group_set_backend_name(d->groups),
                        group_set_weighs(d->groups) ? "waiting members weighed down by the cpu controller" :
                                                      "time taken while waiting counted against the budget",
                        group_set_confines(d->groups) ? "confined to their CPUs by a cpuset" :
                                                        "affinity checked around every run",
                        d->groups_note[0] ? "; " : "", d->groups_note);
        else
                run_log(o, LOG_WARNING, "reservation groups unavailable (%s): members are found in "
                        "/proc/PID/task, a tree's descendants by walking /proc every 50 ms (one that leaves the "
                        "tree by a double fork is not followed), accounting reads each thread's schedstat, and "
                        "members are held to their CPU by affinity checked around every run", d->groups_note);
        if (d->dead_instances > 0)
                run_log(o, LOG_WARNING, "removed the cgroups of %u dispatcher instance(s) that died "
                        "without cleaning up", d->dead_instances);
        if (!d->shared.stats)
                run_log(o, LOG_WARNING, "no accounting file in the runtime directory: pacectl status "
                        "shows no delivered utilization");
        if (o->watchdog_ns > 0 && o->watchdog_ping)
                run_log(o, LOG_INFO, "watchdog: every %" PRIu64 " ms, WATCHDOG=1 only when every "
                        "dispatch loop has advanced", (uint64_t) (watchdog_look_interval(o->watchdog_ns) /
                                                                   NSEC_PER_MSEC));
        m.inotify_fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
        if (m.inotify_fd < 0)
                return negative_errno();
        if (inotify_add_watch(m.inotify_fd, d->runtime_dir,
                              IN_CREATE | IN_MOVED_TO | IN_MODIFY | IN_CLOSE_WRITE | IN_ATTRIB | IN_ONLYDIR) < 0) {
                r = negative_errno();
                run_log(o, LOG_ERR, "cannot watch the runtime directory %s: %s", d->runtime_dir,
                        strerror(-r));
                return r;
        }
        r = main_loop_setup(&m);
        if (r < 0)
                return r;

        if (o->set_scope_tick)
                o->set_scope_tick(o->userdata, watch_tick, &m);

        /* Before the loops see any table: nothing of ours is running yet. */
        sweep(d, o, true);

        lending_start(&m);
        check_soon(&m);
        r = sd_event_loop(m.event);
        if (o->set_scope_tick)
                o->set_scope_tick(o->userdata, NULL, NULL); /* m ends with us */
        if (r < 0)
                return r;

        /* Stop here, not in dispatcher_free(), so the restore messages are
         * still written. */
        atomic_store(&d->shared.stop, true);
        kick_until(d, loop_gone, 0, 5 * NSEC_PER_SEC);
        watcher_stop(d);
        /* The loops demoted whoever they had promoted as they stopped; what
         * they held is restored here, at SCHED_OTHER. A wedged loop's is
         * left alone (it may still touch it). */
        for (uint32_t i = 0; i < d->n_loops; i++)
                if (loop_join(&d->loops[i]) == 0)
                        keeper_release_all(d->keeper, &d->loops[i]);
        (void) log_ring_drain(d->shared.log, o->log, o->userdata);
        d->run = NULL;
        return 0;
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
         * cgroup.procs and usage; per registered thread its pidfd, stat and
         * schedstat (the loops' handles, held.h); per nice level a pidfd;
         * per loop a few transient ones; the main thread's event loop
         * (epoll, signalfd, timerfd), inotify, eventfds, stdio, notify
         * socket. */
        uint64_t rest = PACE_MAX_NICE_THREADS + 4ULL * d->n_loops + 32;
        *ret_files = (8ULL + HELD_STAT_FDS + 2ULL * d->config.max_threads_per_reservation) * PACE_MAX_RESERVATIONS + rest;
        *ret_min_files = 8ULL * PACE_MAX_RESERVATIONS + rest;
        /* The loops, the main thread and the table watcher, and the
         * monitor's two (RLIMIT_NPROC counts the uid's tasks). */
        *ret_threads = d->n_loops + 4;
}

Dispatcher *dispatcher_free(Dispatcher *d) {
        if (!d)
                return NULL;

        atomic_store(&d->shared.stop, true);
        kick_until(d, loop_gone, 0, 5 * NSEC_PER_SEC);
        watcher_stop(d);
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
