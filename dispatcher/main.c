/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <limits.h>
#include <getopt.h>
#include <inttypes.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>

#include "config.h"
#include "daemon-util.h"
#include "dispatcher.h"
#include "freezer-v1.h"
#include "loop.h"
#include "pace-stats.h"
#include "group.h"
#include "log.h"
#include "monitor.h"
#include "macro.h"
#include "pace-build-config.h"
#include "pace-limits.h"
#include "parse-util.h"
#include "privileges.h"
#include "scope.h"
#include "sweep.h"

/* Test-only switch (documented in dispatcher/README.md and
 * pace-dispatcher(8)): SIGUSR2 then wedges the dispatch loops so a boot test
 * can watch the watchdog kill and systemd restart the dispatcher. Only
 * whoever starts the dispatcher sets its environment, so it grants nobody
 * anything; it only makes the dispatcher easier to break on purpose. */
#define TEST_HOOKS_ENV "PACE_DISPATCHER_TEST_HOOKS"
/* Microseconds every change of owner spins in addition (tests only): what
 * the loops measure a change to cost, and so what admission charges, goes
 * up with it. Only the service's own environment can set it. */
#define TEST_CHANGE_SPIN_ENV "PACE_DISPATCHER_TEST_CHANGE_SPIN_US"

#define PROGRAM "pace-dispatcher"

/* The monitor's restart limit: beyond this many restarts in the window it
 * gives up, so a dispatcher that crashes at once is not restarted forever. */
#define MONITOR_MAX_RESTARTS 5u
#define MONITOR_RESTART_WINDOW_NS (10 * NSEC_PER_SEC)

static const char *arg_config = NULL;
static bool arg_monitor = true;

static void log_stderr(void *userdata, int priority, const char *message) {
        log_line_worded(PROGRAM, priority, message);
}

static void watchdog_ping(void *userdata) {
        (void) sd_notify(0, "WATCHDOG=1");
}

/* At start and on SIGHUP: the same file, the same validation. */
static int load_config(void *userdata, PaceConfig *ret, char *why, size_t why_size) {
        int r = daemon_read_config(arg_config, ret, why, why_size);
        if (r > 0)
                log_line_worded(PROGRAM, LOG_INFO, DAEMON_DEFAULTS_NOTE);
        return r < 0 ? r : 0;
}

static void help(void) {
        printf("Usage: pace-dispatcher [--config FILE] [--runtime-dir DIR] [--no-monitor]\n"
               "Enforces pace's dispatch table at SCHED_FIFO %d.\n\n"
               "  --config FILE       configuration (default %s; missing means defaults)\n"
               "  --runtime-dir DIR   where pace-broker publishes the table (default %s)\n"
               "  --no-monitor        no monitor process (a SIGKILL then leaves the slot owner\n"
               "                      real-time until the next start; for debugging)\n"
               "  --version           print the version\n\n"
               "Signals: SIGHUP reloads the configuration, SIGTERM/SIGINT restore every thread and exit.\n",
               99, PACE_DEFAULT_CONFIG, PACE_DEFAULT_RUNTIME_DIR);
}

static void caps_text(uint64_t mask, char *buf, size_t size) {
        buf[0] = '\0';
        if (mask == 0) {
                snprintf(buf, size, "none");
                return;
        }
        for (unsigned c = 0; c < 64; c++)
                if (mask & PACE_CAP_BIT(c))
                        snprintf(buf + strlen(buf), size - strlen(buf), "%s%s", buf[0] ? "," : "",
                                 c == 23 ? "cap_sys_nice" : c == 14 ? "cap_ipc_lock" : c == 1 ? "cap_dac_override" : "other");
}

static void write_byte(int fd, char c) {
        if (fd >= 0)
                (void) !write(fd, &c, 1);
}

static void on_stopping(void *userdata) {
        write_byte(*(int *) userdata, MONITOR_STOPPING);
}

/* The dispatcher proper, on a Dispatcher that dispatcher_new() made and
 * whose privileges are already dropped. Takes ownership of d. ready_fd: the
 * monitor's pipe, or negative without a monitor. */
/* The accounting file, opened before privileges are dropped and kept for
 * every dispatcher the monitor starts. */
static int arg_stats_fd = -EBADF;

static int dispatch(Dispatcher *d_, const char *runtime_dir, int ready_fd) {
        _cleanup_(dispatcher_freep) Dispatcher *d = d_;
        char why[1024] = "";
        int r;

        if (arg_stats_fd >= 0) {
                r = dispatcher_use_stats(d, arg_stats_fd);
                if (r < 0)
                        log_fmt_worded(PROGRAM, LOG_WARNING, "cannot map the accounting file: %s", strerror(-r));
        }

        const char *spin = getenv(TEST_CHANGE_SPIN_ENV);
        uint32_t spin_us = 0;
        if (spin && parse_uint32(spin, &spin_us) >= 0 && spin_us > 0 && spin_us <= 10000) {
                dispatcher_set_test_change_spin(d, (uint64_t) spin_us * NSEC_PER_USEC);
                log_fmt_worded(PROGRAM, LOG_WARNING, TEST_CHANGE_SPIN_ENV "=%" PRIu32 " us: every change of owner "
                               "spins that much longer (tests only)", spin_us);
        }

        r = dispatcher_start(d, why, sizeof(why));
        if (r < 0) {
                log_fmt_worded(PROGRAM, LOG_ERR, "cannot start: %s", why[0] ? why : strerror(-r));
                return EXIT_FAILURE;
        }

        const PaceConfig *used = dispatcher_config(d);
        char cpus[256] = "";
        for (uint32_t i = 0; i < used->n_cpus; i++)
                snprintf(cpus + strlen(cpus), sizeof(cpus) - strlen(cpus), "%s%d", i ? "," : "",
                         (int) used->cpus[i]);
        log_fmt_worded(PROGRAM, LOG_INFO, "running on CPUs %s, slot %llu us, waiting policy %s, table %s/table",
                       cpus, (unsigned long long) (used->slot_ns / 1000),
                       used->waiting == PACE_WAITING_FREEZE ? "freeze" : "nice", runtime_dir);

        uint64_t watchdog_usec = 0;
        if (sd_watchdog_enabled(0, &watchdog_usec) <= 0)
                watchdog_usec = 0;
        write_byte(ready_fd, MONITOR_READY);
        const char *hooks = getenv(TEST_HOOKS_ENV);
        DispatcherRunOptions run = {
                .log = log_stderr,
                .load_config = load_config,
                .watchdog_ns = watchdog_usec * 1000,
                .watchdog_ping = watchdog_ping,
                .test_hooks = !hooks                     ? LOOP_HANG_NONE :
                              strcmp(hooks, "1") == 0    ? LOOP_HANG_WEDGE :
                              strcmp(hooks, "spin") == 0 ? LOOP_HANG_SPIN :
                                                           LOOP_HANG_NONE,
                .stopping = on_stopping,
                .make_scope = scope_make,
                .set_scope_tick = scope_set_tick,
                .userdata = &ready_fd,
        };
        if (run.test_hooks)
                log_line_worded(PROGRAM, LOG_WARNING, run.test_hooks == LOOP_HANG_SPIN ?
                                TEST_HOOKS_ENV "=spin: SIGUSR2 makes the dispatch loops spin (tests only)" :
                                TEST_HOOKS_ENV "=1: SIGUSR2 wedges the dispatch loops (tests only)");
        (void) sd_notify(0, "READY=1\nSTATUS=dispatching");

        r = dispatcher_run(d, &run);
        (void) sd_notify(0, "STOPPING=1");
        if (r < 0) {
                log_line_worded(PROGRAM, LOG_ERR, strerror(-r));
                return EXIT_FAILURE;
        }
        return EXIT_SUCCESS;
}

typedef struct DispatchArgs {
        const PaceConfig *config; /* as the monitor started */
        const char *runtime_dir;
        unsigned runs;
} DispatchArgs;

/* What only a restart of the whole service may change: the monitor's
 * rlimits and capabilities were fitted to the first configuration. */
static bool same_fixed(const PaceConfig *a, const PaceConfig *b) {
        return a->cpus_set == b->cpus_set && a->n_cpus == b->n_cpus &&
               memcmp(a->cpus, b->cpus, a->n_cpus * sizeof(a->cpus[0])) == 0 && a->waiting == b->waiting &&
               a->slot_ns == b->slot_ns && pace_config_frame_slots(a) <= pace_config_frame_slots(b);
}

/* In the monitor's child. A restarted dispatcher reads the configuration
 * again, so a reload (SIGHUP) in force before a crash survives it. */
static int dispatch_child(int ready_fd, void *userdata) {
        DispatchArgs *args = userdata;
        Dispatcher *d = NULL;
        PaceConfig config = *args->config, again;
        char why[1024] = "";
        int r;

        if (args->runs++ > 0) {
                r = load_config(NULL, &again, why, sizeof(why));
                if (r < 0)
                        log_fmt_worded(PROGRAM, LOG_WARNING,
                                       "restart: configuration unreadable now (%s), using the one read at start", why);
                else if (!same_fixed(&again, args->config))
                        log_line_worded(PROGRAM, LOG_WARNING,
                                        "restart: the configuration now changes cpus, waiting, slot_us or raises "
                                        "max_frame_ms; using the one read at start (restart the service for those)");
                else
                        config = again;
                why[0] = '\0';
        }
        r = dispatcher_new(&config, args->runtime_dir, &d, why, sizeof(why));
        if (r < 0) {
                log_line_worded(PROGRAM, LOG_ERR, why[0] ? why : strerror(-r));
                return EXIT_FAILURE;
        }
        return dispatch(d, args->runtime_dir, ready_fd);
}

/* Returns 0 to go on, 1 after --help or --version, or -EINVAL after saying
 * what was wrong. */
static int parse_argv(int argc, char **argv, const char **ret_runtime_dir) {
        static const struct option options[] = {
                { "config", required_argument, NULL, 'c' },
                { "runtime-dir", required_argument, NULL, 'r' },
                { "no-monitor", no_argument, NULL, 'M' },
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, 'V' },
                {},
        };
        int c;

        while ((c = getopt_long(argc, argv, "c:r:h", options, NULL)) >= 0)
                switch (c) {
                case 'c':
                        arg_config = optarg;
                        break;
                case 'r':
                        *ret_runtime_dir = optarg;
                        break;
                case 'M':
                        arg_monitor = false;
                        break;
                case 'h':
                        help();
                        return 1;
                case 'V':
                        printf("pace-dispatcher %s\n", PACE_VERSION);
                        return 1;
                default:
                        return -EINVAL;
                }
        if (optind < argc) {
                fprintf(stderr, "pace-dispatcher: unexpected argument \"%s\"\n", argv[optind]);
                return -EINVAL;
        }
        return 0;
}

/* Reservation groups: the base directory's path, and the mounts that
 * must stay writable in the read-only view. */
typedef struct GroupMounts {
        bool groups, cpu, cpuset;
        char instance_name[64], base[PATH_MAX], mount[PATH_MAX], cpu_mount[PATH_MAX], cpuset_mount[PATH_MAX];
} GroupMounts;

static void find_group_mounts(const char *runtime_dir, GroupMounts *ret) {
        sweep_instance_name(runtime_dir, ret->instance_name, sizeof(ret->instance_name));
        if (group_base_path(ret->instance_name, ret->base, sizeof(ret->base)) < 0)
                return;
        snprintf(ret->mount, sizeof(ret->mount), "%s", ret->base);
        char *slash = strrchr(ret->mount, '/');
        if (slash)
                *slash = '\0';
        ret->groups = true;
        ret->cpu = group_cpu_mount(ret->cpu_mount, sizeof(ret->cpu_mount)) == 0;
        ret->cpuset = group_cpuset_mount(ret->cpuset_mount, sizeof(ret->cpuset_mount)) == 0;
}

static void log_privileges(const PrivilegeReport *report, const PrivilegeLimits *limits) {
        char eff[128], bnd[256];

        caps_text(report->effective, eff, sizeof(eff));
        caps_text(report->bounding, bnd, sizeof(bnd));
        log_fmt_worded(PROGRAM, LOG_INFO,
                       "privileges: uid %u, capabilities %s (bounding set %s%s), no_new_privs, %s, "
                       "locks up to %" PRIu64 " MiB%s, RLIMIT_NOFILE %" PRIu64,
                       (unsigned) getuid(), eff, report->bounding == report->effective ? "the same" : bnd,
                       report->bounding_dropped ? ", dropped here" : "",
                       report->read_only_view ? "file system read-only for it" :
                                                "file system as the service manager set it",
                       limits->memlock_bytes >> 20,
                       report->kept_ipc_lock ?
                               " (RLIMIT_MEMLOCK cannot be raised that far here: CAP_IPC_LOCK kept instead)" :
                               " (RLIMIT_MEMLOCK set to that)",
                       report->files);
}

/* Before any thread exists (capabilities are per thread), and after
 * everything that needs more than the dispatcher keeps. */
static int drop_privileges(Dispatcher *d, const GroupMounts *m, const FreezerV1 *freezer) {
        PrivilegeReport report;
        char why[1024] = "";
        PrivilegeLimits limits = {
                .groups_path = m->groups ? m->mount : NULL,
                .groups_cpu_path = m->cpu ? m->cpu_mount : NULL,
                .groups_cpuset_path = m->cpuset ? m->cpuset_mount : NULL,
                .writable_path = freezer ? freezer_v1_root(freezer) : NULL,
                .tracing_path = access("/sys/kernel/tracing/instances", F_OK) == 0 ? "/sys/kernel/tracing" : NULL,
        };
        int r;

        dispatcher_resource_needs(d, &limits.memlock_bytes, &limits.max_files, &limits.min_files, &limits.max_threads);
        r = privileges_drop(&limits, &report, why, sizeof(why));
        if (r < 0) {
                log_fmt_worded(PROGRAM, LOG_ERR, "cannot start: %s", why[0] ? why : strerror(-r));
                return r;
        }
        log_privileges(&report, &limits);
        return 0;
}

/* The monitor keeps nothing of the dispatcher: each child builds its own
 * from the configuration. */
static int run_monitor(const PaceConfig *config, const char *runtime_dir, const GroupMounts *m, FreezerV1 *freezer) {
        DispatchArgs args = { .config = config, .runtime_dir = runtime_dir };
        MonitorOptions mo = {
                .runtime_dir = runtime_dir,
                .max_restarts = MONITOR_MAX_RESTARTS,
                .restart_window_ns = MONITOR_RESTART_WINDOW_NS,
                .child = dispatch_child,
                .log = log_stderr,
                .userdata = &args,
                .freezer = freezer,
        };
        if (m->groups) {
                mo.group_base = m->base;
                mo.group_name = m->instance_name;
        }
        return monitor_run(&mo);
}

static int run(int argc, char **argv) {
        _cleanup_(dispatcher_freep) Dispatcher *d = NULL;
        const char *runtime_dir = PACE_DEFAULT_RUNTIME_DIR;
        _cleanup_(freezer_v1_closep) FreezerV1 *freezer = NULL;
        GroupMounts mounts = {};
        PaceConfig config;
        char why[1024] = "";
        int r;

        r = parse_argv(argc, argv, &runtime_dir);
        if (r != 0)
                return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;

        /* A write to a reader that is gone (the monitor's pipe after a
         * SIGKILL of the monitor, a journal stream) must not kill the
         * dispatcher on the spot: it has to restore every thread first. */
        (void) signal(SIGPIPE, SIG_IGN);

        r = load_config(NULL, &config, why, sizeof(why));
        if (r < 0) {
                log_line_worded(PROGRAM, LOG_ERR, why);
                return EXIT_FAILURE;
        }

        /* One malloc arena: glibc would otherwise reserve 64 MiB of address
         * space per thread arena, which mlockall(MCL_FUTURE) charges to
         * RLIMIT_MEMLOCK (and fails). The dispatch threads allocate only
         * when a table brings new processes or threads. */
        (void) mallopt(M_ARENA_MAX, 1);

        r = dispatcher_new(&config, runtime_dir, &d, why, sizeof(why));
        if (r < 0) {
                log_line_worded(PROGRAM, LOG_ERR, why[0] ? why : strerror(-r));
                return EXIT_FAILURE;
        }

        /* Created while the broker's runtime directory is still writable
         * for us: it will not be once privileges are dropped. */
        r = dispatcher_stats_open(runtime_dir, &arg_stats_fd);
        if (r < 0)
                log_fmt_worded(PROGRAM, LOG_WARNING, "cannot create %s/%s (accounting for pacectl status): %s",
                               runtime_dir, PACE_STATS_NAME, strerror(-r));

        find_group_mounts(runtime_dir, &mounts);
        /* Strict mode on the v1 freezer: its mount stays writable in the
         * read-only view, and the monitor sweeps the instance's groups. */
        if (config.waiting == PACE_WAITING_FREEZE)
                (void) freezer_v1_open("/proc", mounts.instance_name, &freezer);

        if (drop_privileges(d, &mounts, freezer) < 0)
                return EXIT_FAILURE;
        if (!arg_monitor)
                return dispatch(TAKE_PTR(d), runtime_dir, -EBADF);
        d = dispatcher_free(d);
        return run_monitor(&config, runtime_dir, &mounts, freezer);
}

DAEMON_MAIN(run)
