/* SPDX-License-Identifier: MIT */
/* pace-rtkit: org.freedesktop.RealtimeKit1 on the system bus, answered by
 * pace. Edge code only: arguments, configuration, the bus, the caller's
 * identity; what a call means is rtkit-core.c's, and whether it is granted
 * is pace-broker's. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <systemd/sd-bus.h>
#include <systemd/sd-daemon.h>
#include <systemd/sd-event.h>
#include <unistd.h>

#include "broker-client.h"
#include "config.h"
#include "daemon-util.h"
#include "log.h"
#include "macro.h"
#include "pace-build-config.h"
#include "pace-limits.h"
#include "proc-util.h"
#include "rtkit-core.h"

#define PROGRAM "pace-rtkit"
#define RTKIT_NAME "org.freedesktop.RealtimeKit1"
#define RTKIT_PATH "/org/freedesktop/RealtimeKit1"
#define RTKIT_INTERFACE "org.freedesktop.RealtimeKit1"
/* Each step with the broker (connect, send, receive): the bus service
 * answers one call at a time, so a broker that hangs may hold it this long. */
#define BROKER_TIMEOUT_USEC (2 * 1000000ULL)

#ifndef HAVE_SD_BUS_CREDS_PIDFD
#define HAVE_SD_BUS_CREDS_PIDFD 0
#endif

static DaemonArgs arg = { .runtime_dir = PACE_DEFAULT_RUNTIME_DIR };

typedef struct Service {
        PaceConfig config;
        BrokerClient *broker;
        RtkitCore core;
        sd_event *event;
        bool exit_requested;
} Service;


static void help(void) {
        printf("Usage: " PROGRAM " [OPTIONS]\n\n"
               "Serves org.freedesktop.RealtimeKit1 on the system bus: programs that ask\n"
               "rtkit for real-time threads get pace reservations instead.\n\n"
               "  --config FILE        configuration (default " PACE_DEFAULT_CONFIG ";\n"
               "                       built-in defaults if that file does not exist)\n"
               "  --runtime-dir DIR    where pace-broker's socket is (default " PACE_DEFAULT_RUNTIME_DIR ")\n"
               "  -v, --verbose        also log every call and refusal\n"
               "  -h, --help           this text\n"
               "      --version        version\n\n"
               "The system bus is the one DBUS_SYSTEM_BUS_ADDRESS names, else the default.\n");
}

static int load_config(PaceConfig *config) {
        char why[1024];
        int r = daemon_read_config(arg.config, config, why, sizeof(why));
        if (r < 0)
                log_fmt(PROGRAM, LOG_ERR, "refusing to start: %s", why);
        else if (r > 0)
                log_line(PROGRAM, LOG_INFO, DAEMON_DEFAULTS_NOTE);
        return r < 0 ? r : 0;
}

/* Who sent m, as the bus daemon knows it. The start time comes from
 * /proc/PID/stat, which by itself could be a newer process's that reused
 * the pid: it counts only if the sender is shown to be alive after it was
 * read, by its pidfd where the bus hands one out, else by asking the bus
 * again (a unique name is never reused, and the connection goes with its
 * process). */
static int get_caller(sd_bus_message *m, RtkitCaller *ret, sd_bus_error *error) {
        _cleanup_(sd_bus_creds_unrefp) sd_bus_creds *creds = NULL;
        uint64_t mask = SD_BUS_CREDS_PID | SD_BUS_CREDS_EUID;
        pid_t pid = 0;
        uid_t euid = 0;
        ProcInfo info;
        int r;

#if HAVE_SD_BUS_CREDS_PIDFD
        mask |= SD_BUS_CREDS_PIDFD;
#endif
        r = sd_bus_query_sender_creds(m, mask, &creds);
        if (r < 0)
                return sd_bus_error_setf(error, RTKIT_ERROR_FAILED, "cannot learn who is calling: %s", strerror(-r));
        r = sd_bus_creds_get_pid(creds, &pid);
        if (r >= 0)
                r = sd_bus_creds_get_euid(creds, &euid);
        if (r < 0)
                return sd_bus_error_setf(error, RTKIT_ERROR_FAILED,
                                         "the bus does not say who is calling (pid and uid): %s", strerror(-r));

        r = proc_info_read("/proc", pid, &info);
        if (r < 0)
                return sd_bus_error_setf(error, RTKIT_ERROR_FAILED, "cannot read process %d: %s", (int) pid,
                                         strerror(-r));

#if HAVE_SD_BUS_CREDS_PIDFD
        _cleanup_close_ int pidfd = -EBADF;
        if (sd_bus_creds_get_pidfd_dup(creds, &pidfd) >= 0) {
                if (pidfd_alive(pidfd) < 0)
                        return sd_bus_error_setf(error, RTKIT_ERROR_FAILED, "process %d is gone", (int) pid);
                goto verified;
        }
#endif
        {
                _cleanup_(sd_bus_creds_unrefp) sd_bus_creds *again = NULL;
                pid_t pid_again = 0;

                r = sd_bus_query_sender_creds(m, SD_BUS_CREDS_PID, &again);
                if (r >= 0)
                        r = sd_bus_creds_get_pid(again, &pid_again);
                if (r < 0 || pid_again != pid)
                        return sd_bus_error_setf(error, RTKIT_ERROR_FAILED, "process %d is gone", (int) pid);
        }
#if HAVE_SD_BUS_CREDS_PIDFD
verified:
#endif
        *ret = (RtkitCaller) { .uid = euid, .pid = pid, .start_time = info.start_time };
        return 0;
}

static int reply_refusal(sd_bus_message *m, const RtkitCaller *caller, const RtkitError *e, sd_bus_error *error) {
        if (arg.verbose)
                log_fmt(PROGRAM, LOG_DEBUG, "%s from process %d (uid %u) refused: %s: %s",
                        sd_bus_message_get_member(m), (int) caller->pid, (unsigned) caller->uid, e->name, e->message);
        return sd_bus_error_set(error, e->name, e->message);
}

/* The arguments of a MakeThread* call, whose *WithPID form names the
 * process (else it is the caller's own) and whose last argument (priority
 * or nice level, of D-Bus type last_type) is the method's own; and who
 * calls. Returns 1 with with_pid set, 0 without, or a negative errno (an
 * sd-bus error set). */
static int read_thread_call(sd_bus_message *m, char last_type, void *ret_last, uint64_t *ret_process,
                            uint64_t *ret_thread, RtkitCaller *ret_caller, sd_bus_error *error) {
        const char *member = sd_bus_message_get_member(m);
        size_t n = strlen(member);
        bool with_pid = n > strlen("WithPID") && strcmp(member + n - strlen("WithPID"), "WithPID") == 0;
        int r;

        *ret_process = 0;
        r = with_pid ? sd_bus_message_read(m, "tt", ret_process, ret_thread) : sd_bus_message_read(m, "t", ret_thread);
        if (r >= 0)
                r = sd_bus_message_read_basic(m, last_type, ret_last);
        if (r < 0)
                return r;
        r = get_caller(m, ret_caller, error);
        if (r < 0)
                return r;
        return with_pid;
}

/* MakeThreadRealtime and MakeThreadHighPriority (each also WithPID): one
 * call but for its last argument, a priority or a nice level, and what is
 * logged of it (every reservation; a nice level with --verbose only). */
static int make_thread(sd_bus_message *m, Service *s, bool realtime, sd_bus_error *error) {
        union {
                uint32_t priority; /* MakeThreadRealtime's "u" */
                int32_t nice;      /* MakeThreadHighPriority's "i" */
        } last = {};
        uint64_t process = 0, thread = 0;
        RtkitCaller caller;
        RtkitError e;
        int r;

        r = read_thread_call(m, realtime ? SD_BUS_TYPE_UINT32 : SD_BUS_TYPE_INT32, &last, &process, &thread, &caller,
                             error);
        if (r < 0)
                return r;
        bool with_pid = r > 0;
        r = realtime ? rtkit_make_realtime(&s->core, &caller, with_pid, process, thread, last.priority, &e) :
                       rtkit_make_high_priority(&s->core, &caller, with_pid, process, thread, last.nice, &e);
        if (r < 0)
                return reply_refusal(m, &caller, &e, error);
        int pid = with_pid ? (int) process : (int) caller.pid;
        if (realtime)
                log_fmt(PROGRAM, LOG_INFO,
                        "reserved thread %" PRIu64 " of process %d for uid %u (asked for RT priority %" PRIu32 ")",
                        thread ?: (uint64_t) pid, pid, (unsigned) caller.uid, last.priority);
        else if (arg.verbose)
                log_fmt(PROGRAM, LOG_DEBUG, "nice %" PRIi32 " for thread %" PRIu64 " of process %d (uid %u)",
                        last.nice, thread, pid, (unsigned) caller.uid);
        return sd_bus_reply_method_return(m, NULL);
}

static int method_make_realtime(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return make_thread(m, userdata, true, error);
}

static int method_make_high_priority(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return make_thread(m, userdata, false, error);
}

/* ResetKnown and ResetAll: the same for pace (see rtkit-core.h). */
static int method_reset(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Service *s = userdata;
        RtkitCaller caller;
        RtkitError e;
        int r;

        r = get_caller(m, &caller, error);
        if (r < 0)
                return r;
        r = rtkit_reset(&s->core, &caller, sd_bus_message_get_member(m), &e);
        if (r < 0)
                return reply_refusal(m, &caller, &e, error);
        log_fmt(PROGRAM, LOG_INFO, "%s: dropped every reservation and nice level made through RealtimeKit1",
                sd_bus_message_get_member(m));
        return sd_bus_reply_method_return(m, NULL);
}

static int method_exit(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Service *s = userdata;
        RtkitCaller caller;
        RtkitError e;
        int r;

        r = get_caller(m, &caller, error);
        if (r < 0)
                return r;
        r = rtkit_check_root(&caller, "Exit", &e);
        if (r < 0)
                return reply_refusal(m, &caller, &e, error);
        r = sd_bus_reply_method_return(m, NULL);
        if (r < 0)
                return r;
        /* The reply is flushed when the bus is closed after the loop. */
        log_fmt(PROGRAM, LOG_INFO, "Exit called by process %d; leaving", (int) caller.pid);
        s->exit_requested = true;
        return sd_event_exit(s->event, 0);
}

static const sd_bus_vtable rtkit_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_PROPERTY("RTTimeUSecMax", "x", NULL, offsetof(Service, config.rtkit_rttime_usec_max),
                        SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("MaxRealtimePriority", "i", NULL, offsetof(Service, config.rtkit_max_realtime_priority),
                        SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("MinNiceLevel", "i", NULL, offsetof(Service, config.rtkit_min_nice_level),
                        SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_METHOD_WITH_NAMES("MakeThreadRealtime", "tu", SD_BUS_PARAM(thread) SD_BUS_PARAM(priority), "",
                                 , method_make_realtime, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_NAMES("MakeThreadRealtimeWithPID", "ttu",
                                 SD_BUS_PARAM(process) SD_BUS_PARAM(thread) SD_BUS_PARAM(priority), "", ,
                                 method_make_realtime, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_NAMES("MakeThreadHighPriority", "ti", SD_BUS_PARAM(thread) SD_BUS_PARAM(priority), "",
                                 , method_make_high_priority, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_NAMES("MakeThreadHighPriorityWithPID", "tti",
                                 SD_BUS_PARAM(process) SD_BUS_PARAM(thread) SD_BUS_PARAM(priority), "", ,
                                 method_make_high_priority, SD_BUS_VTABLE_UNPRIVILEGED),
        /* UNPRIVILEGED here too: sd-bus's own check for the others would
         * compare the caller with our uid (pace) or read its capabilities
         * from /proc; the rule is "root only", checked on the bus daemon's
         * word in rtkit_check_root(), besides the bus policy. */
        SD_BUS_METHOD("ResetKnown", "", "", method_reset, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD("ResetAll", "", "", method_reset, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD("Exit", "", "", method_exit, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_VTABLE_END
};

/* The name is taken: say by whom, so the administrator knows what to stop. */
static void log_name_taken(sd_bus *bus) {
        _cleanup_(sd_bus_creds_unrefp) sd_bus_creds *creds = NULL;
        const char *unique = NULL;
        pid_t pid = 0;
        char comm_path[64], comm[64] = "";

        if (sd_bus_get_name_creds(bus, RTKIT_NAME, SD_BUS_CREDS_PID | SD_BUS_CREDS_UNIQUE_NAME, &creds) >= 0) {
                (void) sd_bus_creds_get_unique_name(creds, &unique);
                (void) sd_bus_creds_get_pid(creds, &pid);
        }
        if (pid > 0) {
                snprintf(comm_path, sizeof(comm_path), "/proc/%d/comm", (int) pid);
                if (read_small_file(comm_path, comm, sizeof(comm)) >= 0)
                        comm[strcspn(comm, "\n")] = '\0';
        }
        if (pid > 0)
                log_fmt(PROGRAM, LOG_ERR, RTKIT_NAME " is already owned by %s (process %d%s%s); stop it first "
                        "(systemctl stop rtkit-daemon) or set \"rtkit\": false in pace.json",
                        unique ?: "another connection", (int) pid, *comm ? ", " : "", comm);
        else
                log_fmt(PROGRAM, LOG_ERR, RTKIT_NAME " is already owned by %s; stop it first (systemctl stop "
                        "rtkit-daemon) or set \"rtkit\": false in pace.json", unique ?: "another program");
}

static int run(int argc, char **argv) {
        _cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
        _cleanup_(sd_event_unrefp) sd_event *event = NULL;
        _cleanup_(broker_client_freep) BrokerClient *broker = NULL;
        _cleanup_free_ Service *s = NULL;
        char socket_path[4096];
        int r;

        r = daemon_parse_argv(argc, argv, PROGRAM, help, /* with_user= */ false, &arg);
        if (r <= 0)
                return r < 0 ? 2 : 0;

        sigset_t mask;
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigprocmask(SIG_BLOCK, &mask, NULL);
        signal(SIGPIPE, SIG_IGN);

        s = calloc(1, sizeof(*s));
        if (!s)
                return log_fmt(PROGRAM, LOG_ERR, "out of memory"), 1;
        if (load_config(&s->config) < 0)
                return 1;
        if (!s->config.rtkit) {
                log_fmt(PROGRAM, LOG_INFO, "\"rtkit\" is false in %s: leaving " RTKIT_NAME " to rtkit",
                        arg.config ?: PACE_DEFAULT_CONFIG);
                return 0;
        }

        if ((size_t) snprintf(socket_path, sizeof(socket_path), "%s/%s", arg.runtime_dir, PACE_SOCKET_NAME) >=
            sizeof(socket_path))
                return log_fmt(PROGRAM, LOG_ERR, "runtime directory %s is too long", arg.runtime_dir), 1;
        r = broker_client_new(socket_path, BROKER_TIMEOUT_USEC, &broker);
        if (r < 0)
                return log_fmt(PROGRAM, LOG_ERR, "cannot use %s: %s", socket_path, strerror(-r)), 1;
        s->broker = broker;
        s->core = (RtkitCore) {
                .config = &s->config,
                .exchange = broker_client_exchange,
                .userdata = broker,
                .broker_path = broker_client_path(broker),
        };

        r = sd_event_default(&event);
        if (r < 0)
                return log_fmt(PROGRAM, LOG_ERR, "cannot create the event loop: %s", strerror(-r)), 1;
        s->event = event;
        (void) sd_event_add_signal(event, NULL, SIGTERM, NULL, NULL);
        (void) sd_event_add_signal(event, NULL, SIGINT, NULL, NULL);

        r = sd_bus_open_system(&bus);
        if (r < 0)
                return log_fmt(PROGRAM, LOG_ERR, "cannot connect to the system bus: %s", strerror(-r)), 1;
        (void) sd_bus_set_description(bus, PROGRAM);
        r = sd_bus_add_object_vtable(bus, NULL, RTKIT_PATH, RTKIT_INTERFACE, rtkit_vtable, s);
        if (r < 0)
                return log_fmt(PROGRAM, LOG_ERR, "cannot register " RTKIT_PATH ": %s", strerror(-r)), 1;
        r = sd_bus_attach_event(bus, event, SD_EVENT_PRIORITY_NORMAL);
        if (r < 0)
                return log_fmt(PROGRAM, LOG_ERR, "cannot attach the bus to the event loop: %s", strerror(-r)), 1;
        /* If the bus daemon goes, there is no one left to serve. */
        (void) sd_bus_set_exit_on_disconnect(bus, true);

        r = sd_bus_request_name(bus, RTKIT_NAME, 0);
        if (r == -EEXIST) {
                log_name_taken(bus);
                return 1;
        }
        if (r < 0)
                return log_fmt(PROGRAM, LOG_ERR, "cannot own " RTKIT_NAME ": %s%s", strerror(-r),
                               r == -EACCES ? " (the bus policy, pace-rtkit.conf, lets only root and user pace "
                                              "own it)" : ""), 1;

        log_fmt(PROGRAM, LOG_INFO, "serving " RTKIT_NAME " for pace-broker at %s: %s reservations of %.1f%% "
                "every %" PRIu64 " us", socket_path,
                s->config.rtkit_kind == PACE_RTKIT_KIND_SLOTS ? "slot" : "server",
                s->config.rtkit_utilization_ppm / 10000.0, (uint64_t) (s->config.rtkit_period_ns / NSEC_PER_USEC));
        (void) sd_notify(0, "READY=1\nSTATUS=Serving " RTKIT_NAME);

        r = sd_event_loop(event);
        (void) sd_notify(0, "STOPPING=1");
        if (r < 0)
                return log_fmt(PROGRAM, LOG_ERR, "event loop failed: %s", strerror(-r)), 1;
        /* Signals and Exit end the loop with 0; sd-bus ends it with
         * EXIT_FAILURE when the bus daemon disconnects us. */
        if (r > 0) {
                log_fmt(PROGRAM, LOG_ERR, "the system bus went away");
                return 1;
        }
        return 0;
}

DAEMON_MAIN(run)
