/* SPDX-License-Identifier: MIT */
/* pace-broker: the unprivileged half of pace. Edge code only: arguments,
 * configuration, the socket (own or systemd's), sd_notify; the rest lives in
 * server.c and behind broker.h. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/capability.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <systemd/sd-event.h>
#include <unistd.h>

#include "config.h"
#include "daemon-util.h"
#include "log.h"
#include "macro.h"
#include "pace-build-config.h"
#include "pace-limits.h"
#include "proc-util.h"
#include "server.h"

#define PROGRAM "pace-broker"

#if defined(__SANITIZE_ADDRESS__)
#define PACE_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PACE_SANITIZED 1
#endif
#endif
#ifndef PACE_SANITIZED
#define PACE_SANITIZED 0
#endif

static DaemonArgs arg = { .runtime_dir = PACE_DEFAULT_RUNTIME_DIR };

static void log_sink(void *userdata, int priority, const char *message) {
        if (priority >= LOG_DEBUG && !arg.verbose)
                return;
        log_line(PROGRAM, priority, message);
}

static void help(void) {
        printf("Usage: " PROGRAM " [OPTIONS]\n\n"
               "Admits soft real-time CPU reservations and writes pace's dispatch table.\n\n"
               "  --config FILE        configuration (default " PACE_DEFAULT_CONFIG ";\n"
               "                       built-in defaults if that file does not exist)\n"
               "  --runtime-dir DIR    socket and table live here (default " PACE_DEFAULT_RUNTIME_DIR ")\n"
               "  --user NAME          started as root: run as NAME (default pace, else nobody)\n"
               "  -v, --verbose        also log per-connection events\n"
               "  -h, --help           this text\n"
               "      --version        version\n\n"
               "Under systemd, a listening socket passed by socket activation is used\n"
               "instead of creating DIR/" PACE_SOCKET_NAME ".\n");
}

/* Reads and checks the configuration; on failure a sentence in why. */
static int read_config(PaceConfig *config, char *why, size_t why_size) {
        int r;

        r = daemon_read_config(arg.config, config, why, why_size);
        if (r < 0)
                return r;
        if (r > 0)
                log_line(PROGRAM, LOG_INFO, DAEMON_DEFAULTS_NOTE);
        r = config_resolve_cpus(config, "/sys/devices/system/cpu/online", why, why_size);
        if (r < 0 && !why[0])
                snprintf(why, why_size, "%s", strerror(-r));
        return r;
}

static int load_config(PaceConfig *config) {
        char why[1024];
        int r = read_config(config, why, sizeof(why));
        if (r < 0)
                log_fmt(PROGRAM, LOG_ERR, "refusing to start: %s", why);
        return r;
}

static int reload_source(void *userdata, PaceConfig *ret, char *why, size_t why_size) {
        return read_config(ret, why, why_size);
}

static int on_sighup(sd_event_source *src, const struct signalfd_siginfo *si, void *userdata) {
        Server *server = *(Server **) userdata;
        char why[1024] = "";
        int r;

        (void) sd_notify(0, "RELOADING=1\nSTATUS=Reloading the configuration");
        r = server_reload(server, why, sizeof(why));
        if (r < 0)
                log_fmt(PROGRAM, LOG_ERR, "reload refused, the old configuration stays: %s", why);
        else
                log_fmt(PROGRAM, LOG_INFO, "reloaded %s", arg.config ?: PACE_DEFAULT_CONFIG);
        (void) sd_notify(0, "READY=1\nSTATUS=Serving reservations");
        return 0;
}

/* The listening socket: systemd's if socket-activated, else our own. */
static int open_listen_socket(int *ret_fd) {
        _cleanup_close_ int fd = -EBADF;
        struct sockaddr_un addr = { .sun_family = AF_UNIX };
        int n, r;

        n = sd_listen_fds(1);
        if (n < 0)
                return log_fmt(PROGRAM, LOG_ERR, "bad socket activation: %s", strerror(-n)), n;
        if (n > 1)
                return log_fmt(PROGRAM, LOG_ERR, "socket activation passed %d sockets; expected one", n), -EINVAL;
        if (n == 1) {
                r = sd_is_socket_unix(SD_LISTEN_FDS_START, SOCK_SEQPACKET, 1, NULL, 0);
                if (r <= 0)
                        return log_fmt(PROGRAM, LOG_ERR, "the activated socket is not a listening AF_UNIX "
                                       "SOCK_SEQPACKET socket"), -EINVAL;
                /* Activated sockets arrive blocking; the accept loop must
                 * never wait for a second client. */
                int flags = fcntl(SD_LISTEN_FDS_START, F_GETFL);
                if (flags < 0 || fcntl(SD_LISTEN_FDS_START, F_SETFL, flags | O_NONBLOCK) < 0)
                        return negative_errno();
                *ret_fd = SD_LISTEN_FDS_START;
                return 0;
        }

        /* The socket is bound under a temporary name (no longer than the
         * real one, so no runtime directory that worked stops working) and
         * renamed into place once it listens: a client (or a test) that sees
         * broker.sock can connect at once, instead of meeting ECONNREFUSED
         * between bind() and listen(). The rename also replaces a socket a
         * crashed broker left behind, but never a live broker's. */
        char path[sizeof(addr.sun_path)];
        if ((size_t) snprintf(path, sizeof(path), "%s/%s", arg.runtime_dir, PACE_SOCKET_NAME) >= sizeof(path) ||
            (size_t) snprintf(addr.sun_path, sizeof(addr.sun_path), "%s/broker.new", arg.runtime_dir) >=
                    sizeof(addr.sun_path))
                return log_fmt(PROGRAM, LOG_ERR, "runtime directory %s is too long for a socket path",
                               arg.runtime_dir), -ENAMETOOLONG;

        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return negative_errno();
        {
                struct sockaddr_un live = { .sun_family = AF_UNIX };
                _cleanup_close_ int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
                memcpy(live.sun_path, path, sizeof(path));
                /* EAGAIN: its backlog is full, so it is alive too. */
                if (probe >= 0 && (connect(probe, (struct sockaddr *) &live, sizeof(live)) == 0 || errno == EAGAIN))
                        return log_fmt(PROGRAM, LOG_ERR, "another broker is serving %s; stop it first, or give this "
                                       "one another --runtime-dir", path), -EADDRINUSE;
        }
        (void) unlink(addr.sun_path);
        if (bind(fd, (struct sockaddr *) &addr, sizeof(addr)) < 0) {
                r = negative_errno();
                return log_fmt(PROGRAM, LOG_ERR, "cannot bind %s: %s", addr.sun_path, strerror(-r)), r;
        }
        /* Any local user may ask; who gets what is decided per request. */
        if (chmod(addr.sun_path, 0666) < 0 || listen(fd, 128) < 0 || rename(addr.sun_path, path) < 0) {
                r = negative_errno();
                (void) unlink(addr.sun_path);
                return log_fmt(PROGRAM, LOG_ERR, "cannot set up %s: %s", path, strerror(-r)), r;
        }
        *ret_fd = TAKE_FD(fd);
        return 0;
}

/* Each client costs two fds (socket, pidfd) and each reservation one: make
 * sure the configured limits fit, raising the soft limit if need be. */
static int ensure_fd_limit(const PaceConfig *config) {
        struct rlimit rl;
        rlim_t need = (rlim_t) config->max_connections * 2 + PACE_MAX_RESERVATIONS + 64;

        if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
                return negative_errno();
        if (rl.rlim_cur >= need)
                return 0;
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need ? need : rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
                return negative_errno();
        if (rl.rlim_cur < need)
                log_fmt(PROGRAM, LOG_WARNING, "file descriptor limit %llu is below the %llu that max_connections = %u "
                        "and %u reservations can need; clients beyond it will wait",
                        (unsigned long long) rl.rlim_cur, (unsigned long long) need, config->max_connections,
                        PACE_MAX_RESERVATIONS);
        return 0;
}

/* What the broker never needs: new processes, locked memory. A compromised
 * broker gets no further with them. (Not RLIMIT_FSIZE: stderr may be a file,
 * and SIGXFSZ would kill the broker for logging.) */
static int cap_own_resources(void) {
        static const struct {
                int resource;
                rlim_t limit;
                const char *name;
        } caps[] = {
#if !PACE_SANITIZED
                /* LeakSanitizer clones a tracer task at exit: not under it. */
                { RLIMIT_NPROC, 0, "RLIMIT_NPROC" },
#endif
                { RLIMIT_MEMLOCK, 0, "RLIMIT_MEMLOCK" },
        };

        for (size_t i = 0; i < ELEMENTSOF(caps); i++) {
                struct rlimit rl = { .rlim_cur = caps[i].limit, .rlim_max = caps[i].limit };
                if (setrlimit(caps[i].resource, &rl) < 0) {
                        log_fmt(PROGRAM, LOG_WARNING, "cannot set %s: %m", caps[i].name);
                        return negative_errno();
                }
        }
        return 0;
}

DEFINE_TRIVIAL_CLEANUP_FUNC(cap_t, cap_free);

/* The overflow uid, as the kernel calls "nobody": 65534 unless set. */
static uid_t overflow_uid(void) {
        char buf[32];
        if (read_small_file("/proc/sys/kernel/overflowuid", buf, sizeof(buf)) >= 0)
                return (uid_t) strtoul(buf, NULL, 10);
        return 65534;
}

/* Who besides root may ask on behalf of another process: the uid we run
 * as (pace-rtkit runs as user pace too), unless other daemons share it.
 * Many run as nobody, the fallback where there is no user pace: trusting
 * it let any of them reserve for root's processes (issue 26). Returns 0
 * (root alone) then, and says why in ret_why. */
static uid_t delegate_uid_for(uid_t self, char *ret_why, size_t size) {
        const struct passwd *pw = getpwuid(self);

        if (self == 0) {
                snprintf(ret_why, size, "root alone (the broker runs as root)");
                return 0;
        }
        if (self == overflow_uid() || (pw && strcmp(pw->pw_name, "nobody") == 0)) {
                snprintf(ret_why, size, "root alone: uid %u (nobody) is shared with other daemons; run the broker "
                         "as user pace for pace-rtkit", (unsigned) self);
                return 0;
        }
        snprintf(ret_why, size, "root and uid %u (%s)", (unsigned) self, pw ? pw->pw_name : "no name");
        return self;
}

/* Started as root by hand (systemd starts it as User=pace): the broker needs
 * no privilege at all once its socket is bound, so it becomes an ordinary
 * user with no capabilities, an empty bounding set and no_new_privs, and
 * refuses to run if anything is left. The runtime directory is handed to
 * that user when root owns it, so the table can still be replaced. */
static int drop_root(int dir_fd) {
        const char *name = arg.user;
        struct passwd *pw = NULL;
        int r;

        errno = 0;
        if (name)
                pw = getpwnam(name);
        else {
                name = "pace";
                pw = getpwnam(name);
                if (!pw) {
                        name = "nobody";
                        pw = getpwnam(name);
                }
        }
        if (!pw || pw->pw_uid == 0)
                return log_fmt(PROGRAM, LOG_ERR, "started as root, and cannot run as user %s: %s", name,
                               !pw ? "no such user" : "that is root"), -ESRCH;

        struct stat st;
        if (fstat(dir_fd, &st) < 0)
                return negative_errno();
        if (st.st_uid == 0 && fchown(dir_fd, pw->pw_uid, pw->pw_gid) < 0) {
                r = negative_errno();
                return log_fmt(PROGRAM, LOG_ERR, "cannot give %s to user %s: %s", arg.runtime_dir, name,
                               strerror(-r)), r;
        }
        for (cap_value_t c = 0; c <= CAP_LAST_CAP; c++)
                if (cap_drop_bound(c) < 0 && errno != EINVAL) {
                        r = negative_errno();
                        return log_fmt(PROGRAM, LOG_ERR, "cannot empty the capability bounding set: %s",
                                       strerror(-r)), r;
                }
        if (setgroups(0, NULL) < 0 || setresgid(pw->pw_gid, pw->pw_gid, pw->pw_gid) < 0 ||
            setresuid(pw->pw_uid, pw->pw_uid, pw->pw_uid) < 0 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
                r = negative_errno();
                return log_fmt(PROGRAM, LOG_ERR, "cannot become user %s: %s", name, strerror(-r)), r;
        }

#if PACE_SANITIZED
        /* Changing credentials made us undumpable, and LeakSanitizer's
         * tracer must attach at exit. Not in production: another process
         * of this user could then ptrace the broker and use its pidfds. */
        (void) prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
#endif
        /* Trust, but verify: a kernel or libc that left anything behind. */
        _cleanup_(cap_freep) cap_t now = cap_get_proc(), none = cap_init();
        if (!now || !none || cap_compare(now, none) != 0 || cap_get_bound(CAP_SYS_NICE) != 0)
                return log_fmt(PROGRAM, LOG_ERR, "still holding capabilities after becoming user %s", name), -EPERM;
        log_fmt(PROGRAM, LOG_INFO, "started as root; now running as %s (uid %u) with no capabilities", name,
                (unsigned) pw->pw_uid);
        return 0;
}

static int run(int argc, char **argv) {
        _cleanup_(server_freep) Server *server = NULL;
        _cleanup_close_ int dir_fd = -EBADF;
        sd_event *event = NULL;
        PaceConfig config;
        int listen_fd = -1, r;

        r = daemon_parse_argv(argc, argv, PROGRAM, help, /* with_user= */ true, &arg);
        if (r <= 0)
                return r < 0 ? 2 : 0;

        /* Blocked before the socket appears, so a stop requested as soon as
         * a client can see the broker waits for the event loop and ends
         * cleanly instead of killing a half-started broker. */
        sigset_t mask;
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGHUP);
        sigprocmask(SIG_BLOCK, &mask, NULL);

        r = load_config(&config);
        if (r < 0)
                return 1;
        r = ensure_fd_limit(&config);
        if (r < 0)
                log_fmt(PROGRAM, LOG_WARNING, "cannot check the file descriptor limit: %s", strerror(-r));
        (void) cap_own_resources();

        if (mkdir(arg.runtime_dir, 0755) < 0 && errno != EEXIST) {
                log_fmt(PROGRAM, LOG_ERR, "cannot create runtime directory %s: %m", arg.runtime_dir);
                return 1;
        }
        dir_fd = open(arg.runtime_dir, O_DIRECTORY | O_RDONLY | O_CLOEXEC);
        if (dir_fd < 0) {
                log_fmt(PROGRAM, LOG_ERR, "cannot open runtime directory %s: %m", arg.runtime_dir);
                return 1;
        }

        r = open_listen_socket(&listen_fd);
        if (r < 0)
                return 1;
        if (geteuid() == 0 && drop_root(dir_fd) < 0)
                return 1;

        r = sd_event_default(&event);
        if (r < 0) {
                log_fmt(PROGRAM, LOG_ERR, "cannot create the event loop: %s", strerror(-r));
                return 1;
        }

        (void) sd_event_add_signal(event, NULL, SIGTERM, NULL, NULL);
        (void) sd_event_add_signal(event, NULL, SIGINT, NULL, NULL);
        (void) sd_event_add_signal(event, NULL, SIGHUP, on_sighup, &server);
        /* A client that hangs up mid-reply must not kill us. */
        signal(SIGPIPE, SIG_IGN);

        char delegates[200];
        ServerOptions options = {
                .delegate_uid = delegate_uid_for(geteuid(), delegates, sizeof(delegates)),
                .config = &config,
                .listen_fd = listen_fd,
                .runtime_dir_fd = dir_fd,
                .proc_root = "/proc",
                .log = log_sink,
                .load_config = reload_source,
                /* Tests stand in for sysfs to play CPU hotplug safely. */
                .cpu_online_path = getenv("PACE_TEST_CPU_ONLINE"),
        };
        r = server_new(event, &options, &server);
        if (r < 0) {
                log_fmt(PROGRAM, LOG_ERR, "cannot start: %s", strerror(-r));
                sd_event_unref(event);
                return 1;
        }

        char slot[32];
        snprintf(slot, sizeof(slot), "%lluus", (unsigned long long) (config.slot_ns / NSEC_PER_USEC));
        log_fmt(PROGRAM, LOG_INFO, "ready: %s, %u CPU(s), slot %s, non-RT share %u.%02u%%", arg.runtime_dir,
                config.n_cpus, slot, config.non_rt_share_ppm / 10000, (config.non_rt_share_ppm / 100) % 100);
        log_fmt(PROGRAM, LOG_INFO, "on behalf of others may ask: %s", delegates);
        (void) sd_notify(0, "READY=1\nSTATUS=Serving reservations");

        r = sd_event_loop(event);
        (void) sd_notify(0, "STOPPING=1");
        server = server_free(server);
        sd_event_unref(event);
        if (r < 0) {
                log_fmt(PROGRAM, LOG_ERR, "event loop failed: %s", strerror(-r));
                return 1;
        }
        return 0;
}

DAEMON_MAIN(run)
