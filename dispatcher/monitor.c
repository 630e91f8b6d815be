/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-event.h>

#include "held.h"
#include "macro.h"
#include "group.h"
#include "lending.h"
#include "monitor.h"
#include "pace-limits.h"
#include "proc-util.h"
#include "sched-util.h"
#include "stall.h"
#include "sweep.h"
#include "time-util.h"

#ifndef PIDFD_THREAD
#define PIDFD_THREAD O_EXCL /* linux/pidfd.h, kernel 6.9 */
#endif

/* The dispatch threads plus, in case, the main thread. */
#define MAX_WATCHED (PACE_MAX_CPUS + 1u)
#define MAX_RESTARTS_KEPT 64u
/* A dispatcher that died (not one stopping in order) and is still exiting
 * after this is left to exit on its own: see watch_child(). */
#define EXIT_SLOW_MS 2000
/* Dead dispatchers still exiting, reaped when they are done. */
#define MAX_DYING 4u

typedef struct Dying {
        pid_t pid;
        int pidfd;
        uint64_t since_ns; /* when its death was noticed */
        bool exited;       /* a zombie already: only the reaping is left */
        sd_event_source *source; /* while watch_deaths() runs */
} Dying;

typedef struct Monitor {
        const MonitorOptions *o;
        char table_path[PATH_MAX];
        PaceTableBuffer *scratch;
        int sfd;
        pid_t child;
        int pidfd;
        int ready_fd;
        sd_event *event; /* while watch_deaths() runs */
        sd_event_source *threads[MAX_WATCHED]; /* each owns its pidfd */
        pid_t thread_tids[MAX_WATCHED];
        /* Each dispatch thread's stat and syscall files, opened while it
         * is alive and well: read when it is found stuck, they say where
         * (its state, and the system call it is in), with no lookup then. */
        int thread_stat_fds[MAX_WATCHED], thread_syscall_fds[MAX_WATCHED];
        char stall_where[160];
        unsigned n_threads;
        /* The loops' words (stall.h), shared with every child, and the
         * thread that watches them above every SCHED_FIFO thread. */
        StallPage *page;
        StallGuard *guard;
        /* This child was killed for a stuck loop: what the guard saw. */
        bool stalled;
        StallReport stall;
        bool ready;       /* this child said MONITOR_READY */
        bool ever_ready;  /* some child did: later deaths are crashes, not start-up errors */
        bool orderly;     /* this child said MONITOR_STOPPING */
        bool stopping;    /* we were told to stop (SIGTERM, SIGINT, SIGABRT) */
        bool abort_after; /* SIGABRT: die of it once the child is swept */
        bool realtime;
        bool no_thread_pidfd;
        int fail;         /* exit status forced by the monitor itself, 0: none */
        /* This child's death, if it was swept. */
        bool swept;
        int sweep_error;
        unsigned demoted, groups;
        uint64_t sweep_ns;
        /* Its passes: the groups' members (FIFO 99), the table's processes,
         * the groups again, the freezer (SCHED_OTHER): said when it was slow. */
        uint64_t pass_ns[4];
        uint64_t restarts[MAX_RESTARTS_KEPT];
        unsigned n_restarts;
        Dying dying[MAX_DYING];
        unsigned n_dying;
} Monitor;

/* A sweep or a removal this slow says where its time went. */
#define SWEEP_SLOW_NS (100 * NSEC_PER_MSEC)

/* The monitor's own policy once a child is ready. Its children (the
 * dispatchers) start as SCHED_OTHER: their main thread, which logs, must
 * not be real-time. */
static const PaceSchedAttr monitor_realtime = {
        .size = sizeof(PaceSchedAttr),
        .sched_policy = SCHED_FIFO,
        .sched_priority = PACE_DISPATCHER_PRIORITY,
        .sched_flags = PACE_SCHED_FLAG_RESET_ON_FORK,
};

/* Reaps pid (ret_status may be NULL) at SCHED_OTHER. Reaping a process
 * makes the kernel drop its /proc entries (release_task() ->
 * d_invalidate() -> d_walk()), and that walk waits, spinning, for whoever
 * else is pruning the same entries: at FIFO 99 it kept its CPU from that
 * task, and reaping a killed dispatcher spun for 0.95 s under the soak's
 * churn (perf: d_walk under wait4), until RT throttling let the other run.
 * Returns how long it took. */
static uint64_t reap(const Monitor *m, pid_t pid, int *ret_status) {
        const PaceSchedAttr other = { .size = sizeof(PaceSchedAttr), .sched_policy = SCHED_OTHER,
                                      .sched_flags = PACE_SCHED_FLAG_RESET_ON_FORK };
        uint64_t t0 = monotonic_ns();
        int status = 0;

        if (m->realtime)
                (void) sched_attr_set(0, &other);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
        if (m->realtime)
                (void) sched_attr_set(0, &monitor_realtime);
        if (ret_status)
                *ret_status = status;
        return monotonic_ns() - t0;
}

/* Every line says it is the monitor's: fmt is a literal. */
#define mlog(m, priority, fmt, ...) \
        log_sinkf((m)->o->log, (m)->o->userdata, (priority), "monitor: " fmt, ##__VA_ARGS__)

static void close_threads(Monitor *m) {
        for (unsigned i = 0; i < m->n_threads; i++) {
                m->threads[i] = sd_event_source_disable_unref(m->threads[i]);
                m->thread_stat_fds[i] = safe_close(m->thread_stat_fds[i]);
                m->thread_syscall_fds[i] = safe_close(m->thread_syscall_fds[i]);
        }
        m->n_threads = 0;
}

/* "state R, 12 ms user, 345 ms system, system call 'running'" and the
 * like, for thread i: whether it was stuck running or sleeping, and in the
 * kernel or not. The system call only where the kernel lets us read it
 * (ptrace access: CAP_SYS_PTRACE). */
static void describe_thread(const Monitor *m, unsigned i, char *buf, size_t size) {
        char stat[512] = "", sys[128] = "", state = '?';
        unsigned long long utime = 0, stime = 0;
        long hz = sysconf(_SC_CLK_TCK);
        ssize_t n;

        n = m->thread_stat_fds[i] >= 0 ? pread(m->thread_stat_fds[i], stat, sizeof(stat) - 1, 0) : -1;
        stat[MAX(n, 0)] = '\0';
        n = m->thread_syscall_fds[i] >= 0 ? pread(m->thread_syscall_fds[i], sys, sizeof(sys) - 1, 0) : -1;
        sys[MAX(n, 0)] = '\0';
        sys[strcspn(sys, "\n")] = '\0';
        /* Fields 3 (state), 14 and 15 (utime, stime) follow the last ')'
         * of the name. */
        const char *close = strrchr(stat, ')');
        if (close)
                (void) sscanf(close + 1, " %c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu %llu", &state, &utime,
                              &stime);
        hz = hz > 0 ? hz : 100;
        snprintf(buf, size, "state %c, %llu ms user, %llu ms system, system call '%s'", state,
                 utime * 1000ULL / (unsigned long long) hz, stime * 1000ULL / (unsigned long long) hz,
                 sys[0] ? sys : "unknown");
}

static int spawn_child(Monitor *m) {
        pid_t parent = getpid(), pid;
        int p[2], r;

        if (pipe2(p, O_CLOEXEC) < 0)
                return negative_errno();
        pid = fork();
        if (pid < 0) {
                r = negative_errno();
                close(p[0]);
                close(p[1]);
                return r;
        }
        if (pid == 0) {
                sigset_t none;
                const char *w;

                close(p[0]);
                safe_close(m->sfd);
                sigemptyset(&none);
                sigprocmask(SIG_SETMASK, &none, NULL);
                signal(SIGABRT, SIG_DFL);
                /* Without its monitor nothing would demote its clients after
                 * a crash: stop in order (restoring everyone) instead. */
                if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 || getppid() != parent)
                        _exit(EXIT_FAILURE);
                /* A crash must end the process at once: with a core dump
                 * (a pipe in core_pattern ignores RLIMIT_CORE 0) the other
                 * threads wait in exit_mm() until the dump is written, and
                 * so would our view of their exit. */
                if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
                        _exit(EXIT_FAILURE);
                held_protect_pid(parent);
                stall_page_set_inherited(m->page);
                /* sd_watchdog_enabled() only answers the pid systemd named;
                 * the pings come from here (NotifyAccess=all). */
                w = getenv("WATCHDOG_PID");
                if (w && strtol(w, NULL, 10) == (long) parent) {
                        char pidtext[32];
                        snprintf(pidtext, sizeof(pidtext), "%d", (int) getpid());
                        (void) setenv("WATCHDOG_PID", pidtext, 1);
                }
                _exit(m->o->child(p[1], m->o->userdata));
        }
        close(p[1]);
        m->child = pid;
        m->ready_fd = p[0];
        m->ready = false;
        m->orderly = false;
        m->swept = false;
        m->stalled = false;
        r = pidfd_open_checked(pid, &m->pidfd);
        if (r < 0) {
                /* No pidfd (kernel < 5.3): we could not watch it. */
                kill(pid, SIGTERM);
                (void) waitpid(pid, NULL, 0);
                m->ready_fd = safe_close(m->ready_fd);
                return r;
        }
        return 0;
}

static int on_died(sd_event_source *s, int fd, uint32_t revents, void *userdata);
static int sweep_now(Monitor *m, unsigned *ret_demoted, unsigned *ret_groups, uint64_t *ret_ns);

/* A pidfd of each dispatch thread (PIDFD_THREAD): after a SIGKILL the
 * process pidfd turns readable only once every thread has exited, and the
 * main thread is SCHED_OTHER: with a reserved client left at SCHED_FIFO 98
 * on every CPU it would wait for RT throttling (up to 50 ms of every
 * second, i.e. most of a second). The dispatch threads run at SCHED_FIFO
 * 99 and are gone within microseconds; nothing but them ever promotes. */
static void watch_threads(Monitor *m) {
        char path[64];
        DIR *dir;

        snprintf(path, sizeof(path), "/proc/%d/task", (int) m->child);
        dir = opendir(path);
        if (!dir)
                return;
        for (struct dirent *de; (de = readdir(dir)) && m->n_threads < MAX_WATCHED;) {
                char *end;
                long tid = strtol(de->d_name, &end, 10);
                if (*end != '\0' || tid <= 0 || tid == m->child)
                        continue;
                int fd = (int) syscall(SYS_pidfd_open, (pid_t) tid, PIDFD_THREAD);
                if (fd < 0) {
                        if (errno == EINVAL && !m->no_thread_pidfd) {
                                m->no_thread_pidfd = true;
                                mlog(m, LOG_WARNING,
                                     "this kernel has no PIDFD_THREAD (Linux 6.9): a killed dispatcher is noticed "
                                     "only when its last thread has exited, which a client at SCHED_FIFO 98 on "
                                     "every CPU can delay by up to the RT throttling period");
                        }
                        if (errno == EINVAL)
                                break;
                        continue;
                }
                if (sd_event_add_io(m->event, &m->threads[m->n_threads], fd, EPOLLIN, on_died, m) < 0) {
                        safe_close(fd);
                        continue;
                }
                (void) sd_event_source_set_io_fd_own(m->threads[m->n_threads], true);
                char file[96];
                snprintf(file, sizeof(file), "/proc/%d/task/%ld/stat", (int) m->child, tid);
                m->thread_stat_fds[m->n_threads] = open(file, O_RDONLY | O_CLOEXEC);
                snprintf(file, sizeof(file), "/proc/%d/task/%ld/syscall", (int) m->child, tid);
                m->thread_syscall_fds[m->n_threads] = open(file, O_RDONLY | O_CLOEXEC);
                m->thread_tids[m->n_threads++] = (pid_t) tid;
        }
        closedir(dir);
}

static void on_ready(Monitor *m) {
        int r;

        m->ready = true;
        m->ever_ready = true;
        /* Only now: a dispatcher that cannot get SCHED_FIFO explains why
         * (rt-check.c) and exits, and that explanation is worth more than
         * ours. */
        if (!m->realtime) {
                r = sched_attr_set(0, &monitor_realtime);
                if (r < 0) {
                        mlog(m, LOG_ERR, "cannot run at SCHED_FIFO %d: %s; stopping the dispatcher",
                             PACE_DISPATCHER_PRIORITY, strerror(-r));
                        m->fail = EXIT_FAILURE;
                        m->stopping = true;
                        kill(m->child, SIGTERM);
                        return;
                }
                m->realtime = true;
        }
        watch_threads(m);
        stall_guard_watch(m->guard, m->child);
        mlog(m, LOG_INFO, "watching dispatcher pid %d (%u dispatch thread(s)) at SCHED_FIFO %d; stalls at %s",
             (int) m->child, m->n_threads, PACE_DISPATCHER_PRIORITY, stall_guard_policy(m->guard));
        /* The predecessors that were left to be reaped (on_dying_exited()). */
        for (unsigned i = 0; i < m->n_dying; i++)
                if (m->dying[i].source)
                        (void) sd_event_source_set_enabled(m->dying[i].source, SD_EVENT_ON);
}

/* The guard (stall.h) found a loop that stopped advancing and put the
 * child's dispatch threads to SCHED_OTHER, so we can run: whatever held
 * the loop, in the kernel included, runs too, and a thread with SIGKILL
 * pending ends once it is back from the kernel. The process is killed and
 * every client it may have left real-time demoted, before anything is
 * logged; every thread we listed ourselves is demoted again, in case. */
static int on_stall_notice(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        const PaceSchedAttr other = { .sched_policy = SCHED_OTHER };
        Monitor *m = userdata;
        StallReport report;

        if (stall_guard_take(m->guard, &report) <= 0 || report.child != m->child)
                return 0;
        m->stalled = true;
        m->stall = report;
        snprintf(m->stall_where, sizeof(m->stall_where), "not one of ours");
        for (unsigned i = 0; i < m->n_threads; i++)
                if (m->thread_tids[i] == report.tid)
                        describe_thread(m, i, m->stall_where, sizeof(m->stall_where));
        (void) kill(m->child, SIGKILL);
        for (unsigned i = 0; i < m->n_threads; i++)
                (void) sched_attr_set(m->thread_tids[i], &other);
        m->sweep_error = sweep_now(m, &m->demoted, &m->groups, &m->sweep_ns);
        m->swept = true;
        return sd_event_exit(m->event, 0);
}

static int read_ready(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Monitor *m = userdata;
        char buf[16];
        ssize_t n = read(fd, buf, sizeof(buf));

        if (n <= 0) {
                if (n == 0 || errno != EINTR) {
                        (void) sd_event_source_set_enabled(s, SD_EVENT_OFF);
                        m->ready_fd = safe_close(m->ready_fd);
                }
                return 0;
        }
        for (ssize_t i = 0; i < n; i++) {
                if (buf[i] == MONITOR_READY && !m->ready)
                        on_ready(m);
                else if (buf[i] == MONITOR_STOPPING) {
                        /* Its dispatch threads exit now, in order. */
                        m->orderly = true;
                        close_threads(m);
                }
        }
        return 0;
}

/* Returns 1 if a signal was read, 0 if none was pending. */
static int read_signal(Monitor *m) {
        struct signalfd_siginfo si;

        if (read(m->sfd, &si, sizeof(si)) != sizeof(si))
                return 0;
        switch (si.ssi_signo) {
        case SIGTERM:
        case SIGINT:
        case SIGABRT:
                m->stopping = true;
                if (si.ssi_signo == SIGABRT)
                        m->abort_after = true;
                break;
        default: /* SIGHUP (reload), SIGUSR2 (test hook): the dispatcher's */
                break;
        }
        if (m->child > 0)
                (void) kill(m->child, (int) si.ssi_signo);
        return 1;
}

/* The time-critical part: straight after the wake-up, before any logging.
 * The freezer groups are thawed even when the table cannot be read. */
/* At SCHED_FIFO 99 only what looks nothing up in /proc: the groups' own
 * members at our priorities, through their lists and sched_getattr(). The
 * rest (the table's processes and their threads, the limits and stat files
 * that tell a priority a process could give itself) at SCHED_OTHER: a /proc
 * lookup of a client that is exiting spins in the kernel above the task it
 * waits for (../shared/notes/realtime-path.md), and under the soak's churn
 * a sweep at FIFO 99 once took 12.4 s, every reservation waiting. What the
 * first pass missed (a member outside any group) may then be kept at FIFO
 * 98 on its CPU: the full pass runs on the other CPU, or in what RT
 * throttling leaves, and finishes within about a second. */
static int sweep_now(Monitor *m, unsigned *ret_demoted, unsigned *ret_groups, uint64_t *ret_ns) {
        /* Not above nice 0 either: a /proc lookup of an exiting process
         * waits, spinning, for whoever else prunes its entries (reap()),
         * and a higher weight only keeps that task from finishing. */
        const PaceSchedAttr other = { .size = sizeof(PaceSchedAttr), .sched_policy = SCHED_OTHER,
                                      .sched_flags = PACE_SCHED_FLAG_RESET_ON_FORK };
        uint64_t t0 = monotonic_ns(), t[4];
        unsigned quick;
        int r;

        *ret_demoted = 0;
        quick = sweep_demote_groups_quick(m->o->group_base);
        t[0] = monotonic_ns();
        if (m->realtime)
                (void) sched_attr_set(0, &other);
        r = sweep_table_file(m->table_path, m->scratch, ret_demoted);
        t[1] = monotonic_ns();
        *ret_demoted += quick + sweep_demote_groups(m->o->group_base);
        t[2] = monotonic_ns();
        *ret_groups = freezer_v1_sweep(m->o->freezer, false);
        t[3] = monotonic_ns();
        if (m->realtime)
                (void) sched_attr_set(0, &monitor_realtime);
        for (unsigned i = 0; i < 4; i++)
                m->pass_ns[i] = t[i] - (i == 0 ? t0 : t[i - 1]);
        *ret_ns = monotonic_ns() - t0;
        return r;
}

static int on_signal(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        (void) read_signal(userdata);
        return 0;
}

/* A dispatch thread or the process is gone. A thread's source exists only
 * until the child announced an orderly stop. */
static int on_died(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Monitor *m = userdata;

        if (!m->orderly) {
                m->sweep_error = sweep_now(m, &m->demoted, &m->groups, &m->sweep_ns);
                m->swept = true;
        }
        return sd_event_exit(sd_event_source_get_event(s), 0);
}

/* A dead dispatcher left exiting (watch_child()) has exited: reaped. */
static int on_dying_exited(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Monitor *m = userdata;

        for (unsigned i = 0; i < m->n_dying; i++) {
                Dying *d = &m->dying[i];
                if (d->pidfd != fd)
                        continue;
                /* Not before the successor has said it is ready: until then
                 * the stall guard does not watch it, and a slow reaping
                 * would hold that up (on_ready() turns this on again). */
                if (d->exited && !m->ready) {
                        (void) sd_event_source_set_enabled(s, SD_EVENT_OFF);
                        return 0;
                }
                uint64_t took = reap(m, d->pid, NULL);
                if (!d->exited)
                        mlog(m, LOG_INFO, "the dispatcher pid %d that died before has exited, %" PRIu64
                             " ms after its death", (int) d->pid,
                             (uint64_t) ((monotonic_ns() - d->since_ns) / NSEC_PER_MSEC));
                else if (took >= SWEEP_SLOW_NS)
                        mlog(m, LOG_INFO, "reaping the dispatcher pid %d that died before took %" PRIu64 " ms (the "
                             "kernel's clean-up of its /proc entries), its successor already at work",
                             (int) d->pid, (uint64_t) (took / NSEC_PER_MSEC));
                (void) sd_event_source_set_enabled(s, SD_EVENT_OFF);
                safe_close(d->pidfd);
                m->dying[i] = m->dying[--m->n_dying];
                break;
        }
        return 0;
}

/* Until a dispatch thread or the process is gone. Of what one wake-up
 * brings the pipe comes first (an orderly stop announces itself before
 * any thread exits), then a death, then a signal. */
static int watch_deaths(Monitor *m) {
        _cleanup_(sd_event_unrefp) sd_event *e = NULL;
        _cleanup_(sd_event_source_unrefp) sd_event_source *sig = NULL, *ready = NULL, *child = NULL,
                                          *stall = NULL;
        sd_event_source *dying[MAX_DYING] = {};
        int r;

        r = sd_event_new(&e);
        if (r < 0)
                return r;
        /* Added first, released last: on_dying_exited() may close the fd. */
        for (unsigned i = 0; i < m->n_dying; i++) {
                (void) sd_event_add_io(e, &dying[i], m->dying[i].pidfd, EPOLLIN, on_dying_exited, m);
                m->dying[i].source = dying[i];
        }
        r = sd_event_add_io(e, &sig, m->sfd, EPOLLIN, on_signal, m);
        if (r < 0)
                return r;
        (void) sd_event_source_set_priority(sig, SD_EVENT_PRIORITY_IDLE);
        r = sd_event_add_io(e, &ready, m->ready_fd, EPOLLIN, read_ready, m);
        if (r < 0)
                return r;
        (void) sd_event_source_set_priority(ready, SD_EVENT_PRIORITY_IMPORTANT);
        r = sd_event_add_io(e, &child, m->pidfd, EPOLLIN, on_died, m);
        if (r < 0)
                return r;
        r = sd_event_add_io(e, &stall, stall_guard_fd(m->guard), EPOLLIN, on_stall_notice, m);
        if (r < 0)
                return r;
        (void) sd_event_source_set_priority(stall, SD_EVENT_PRIORITY_IMPORTANT);
        m->event = e;
        r = sd_event_loop(e);
        stall_guard_watch(m->guard, 0);
        close_threads(m);
        m->event = NULL;
        for (unsigned i = 0; i < MAX_DYING; i++)
                sd_event_source_disable_unref(dying[i]);
        for (unsigned i = 0; i < m->n_dying; i++)
                m->dying[i].source = NULL;
        return r;
}

/* Whether the child, dead, may be reaped after its successor starts: a
 * crash we swept (one stopping in order, or with us, is waited for: its
 * status decides what comes next), while there is room to remember it. */
static bool may_reap_later(const Monitor *m) {
        return m->swept && !m->orderly && !m->stopping && m->n_dying < MAX_DYING;
}

/* Until the child has died; then sweeps (unless it stopped in order) and
 * reaps it. Returns its wait status. */
static int watch_child(Monitor *m) {
        int r, status = 0;

        /* Should the loop fail, nothing can be watched any more: wait for
         * the exit as after a death, unswept. */
        r = watch_deaths(m);
        if (r < 0)
                mlog(m, LOG_ERR, "cannot watch dispatcher pid %d: %s", (int) m->child, strerror(-r));

        /* The main thread may still be exiting (it is SCHED_OTHER, and its
         * memory is locked): nothing of it can promote any more, since its
         * dispatch threads are gone (or, stalled, were put to SCHED_OTHER
         * and killed) and it never promotes. One that died and is still at
         * it after EXIT_SLOW_MS is left to finish on its own and reaped
         * later (on_dying_exited()), so that dispatching resumes: once, a
         * SIGKILLed dispatcher's last thread took 21.6 s to exit under the
         * soak test's churn, and every reservation waited for it; a thread
         * stuck in the kernel may take longer. One stopping in order, or
         * with us, is waited for: its exit status decides what comes next. */
        uint64_t t0 = monotonic_ns();
        bool slow = false, left = false;
        for (;;) {
                struct pollfd p = { .fd = m->pidfd, .events = POLLIN };
                r = poll(&p, 1, slow ? -1 : EXIT_SLOW_MS);
                if (r > 0)
                        break;
                if (r == 0 && !slow) {
                        slow = true;
                        left = may_reap_later(m);
                        mlog(m, LOG_WARNING, "dispatcher pid %d still exiting after %d ms%s", (int) m->child,
                             EXIT_SLOW_MS, left ? ": left to exit on its own, reaped when it has" : "");
                        if (left)
                                break;
                }
                if (r < 0 && errno != EINTR)
                        break;
        }
        uint64_t exit_ns = monotonic_ns() - t0;
        /* A crash that has exited is reaped later, once its successor
         * runs (reap() says why), its wait status read without reaping. */
        siginfo_t si = {};
        bool zombie = !left && may_reap_later(m) &&
                      waitid((idtype_t) P_PIDFD, (id_t) m->pidfd, &si, WEXITED | WNOWAIT) == 0 && si.si_pid == m->child;
        if (left || zombie) {
                m->dying[m->n_dying++] = (Dying) { .pid = m->child, .pidfd = m->pidfd, .since_ns = t0,
                                                   .exited = zombie };
                m->pidfd = -EBADF;
                /* As a wait status: killed by SIGKILL, or what it died of. */
                status = !zombie ? SIGKILL : si.si_code == CLD_EXITED ? (si.si_status & 0xff) << 8 : si.si_status & 0x7f;
        } else
                (void) reap(m, m->child, &status);
        m->pidfd = safe_close(m->pidfd);
        m->ready_fd = safe_close(m->ready_fd);

        if (m->stalled)
                mlog(m, LOG_ERR,
                     "dispatch thread %d (CPU %" PRIi32 ") had not advanced for %" PRIu64 " ms (stuck, e.g. in the "
                     "kernel; when found: %s): %u dispatch thread(s) put to SCHED_OTHER so that whatever holds "
                     "them can run, dispatcher pid %d killed",
                     (int) m->stall.tid, m->stall.cpu, (uint64_t) (m->stall.late_ns / NSEC_PER_MSEC), m->stall_where,
                     m->stall.demoted, (int) m->child);
        if (m->swept) {
                char how[64], exited[64];
                if (left)
                        snprintf(how, sizeof(how), "died");
                else if (WIFSIGNALED(status))
                        snprintf(how, sizeof(how), "died of signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
                else
                        snprintf(how, sizeof(how), "exited with status %d", WEXITSTATUS(status));
                snprintf(exited, sizeof(exited), left ? "still exiting after %" PRIu64 " ms" :
                                                        "its last thread exited %" PRIu64 " ms later",
                         (uint64_t) (exit_ns / NSEC_PER_MSEC));
                if (m->sweep_error < 0 && m->sweep_error != -ENOENT)
                        mlog(m, LOG_ERR, "dispatcher pid %d %s; cannot read the table %s: %s",
                             (int) m->child, how, m->table_path, strerror(-m->sweep_error));
                else
                        mlog(m, m->demoted > 0 ? LOG_WARNING : LOG_INFO,
                             "dispatcher pid %d %s; %u thread(s) demoted from SCHED_FIFO %d to SCHED_OTHER, %u "
                             "freezer group(s) thawed, %" PRIu64 " us after noticing; %s",
                             (int) m->child, how, m->demoted, PACE_RUNNING_PRIORITY, m->groups,
                             (uint64_t) (m->sweep_ns / NSEC_PER_USEC), exited);
                if (m->sweep_ns >= SWEEP_SLOW_NS)
                        mlog(m, LOG_WARNING, "the sweep was slow: %" PRIu64 " us on the groups' members, %" PRIu64
                             " us on the table's processes, %" PRIu64 " us on the groups again, %" PRIu64
                             " us on the freezer", (uint64_t) (m->pass_ns[0] / NSEC_PER_USEC),
                             (uint64_t) (m->pass_ns[1] / NSEC_PER_USEC), (uint64_t) (m->pass_ns[2] / NSEC_PER_USEC),
                             (uint64_t) (m->pass_ns[3] / NSEC_PER_USEC));
                uint64_t t0_remove = monotonic_ns();
                (void) freezer_v1_sweep(m->o->freezer, true);
                if (m->o->group_name)
                        (void) group_set_remove(m->o->group_name);
                uint64_t remove_ns = monotonic_ns() - t0_remove;
                if (remove_ns >= SWEEP_SLOW_NS)
                        mlog(m, LOG_WARNING, "removing its groups took %" PRIu64 " ms", (uint64_t) (remove_ns / NSEC_PER_MSEC));
                /* Its tracing instance (lending.h), which it removes only
                 * when it stops in order. Only removed, never touched: one
                 * a live dispatcher holds cannot be (EBUSY). */
                (void) lending_trace_sweep(LENDING_TRACEFS);
        }
        m->child = 0;
        return status;
}

/* More than max_restarts within the window: a dispatcher that dies at
 * once would otherwise be restarted forever. */
static bool may_restart(Monitor *m) {
        uint64_t now = monotonic_ns();
        unsigned max = MIN(m->o->max_restarts, MAX_RESTARTS_KEPT), kept = 0;

        for (unsigned i = 0; i < m->n_restarts; i++)
                if (now - m->restarts[i] < m->o->restart_window_ns)
                        m->restarts[kept++] = m->restarts[i];
        m->n_restarts = kept;
        if (kept >= max)
                return false;
        m->restarts[m->n_restarts++] = now;
        return true;
}

static int exit_code(int status) {
        if (WIFEXITED(status))
                return WEXITSTATUS(status);
        return EXIT_FAILURE;
}

int monitor_run(const MonitorOptions *o) {
        Monitor m = { .o = o, .sfd = -EBADF, .pidfd = -EBADF, .ready_fd = -EBADF };
        sigset_t mask;
        int r, status;

        snprintf(m.table_path, sizeof(m.table_path), "%s/%s", o->runtime_dir, PACE_TABLE_NAME);
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGHUP);
        sigaddset(&mask, SIGABRT);
        sigaddset(&mask, SIGUSR2);
        sigprocmask(SIG_BLOCK, &mask, NULL);
        m.sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
        m.scratch = calloc(1, sizeof(PaceTableBuffer));
        if (m.sfd < 0 || !m.scratch) {
                mlog(&m, LOG_ERR, "cannot start: %s", strerror(m.sfd < 0 ? errno : ENOMEM));
                return EXIT_FAILURE;
        }
        /* Before any fork: every child shares the page. */
        r = stall_page_new(&m.page);
        if (r >= 0)
                r = stall_guard_start(m.page, &m.guard);
        if (r < 0) {
                mlog(&m, LOG_ERR, "cannot set up the stall check: %s", strerror(-r));
                return EXIT_FAILURE;
        }
        /* A page fault between the wake-up and the last demotion would be
         * time the clients keep real-time. */
        if (mlockall(MCL_CURRENT | MCL_FUTURE) < 0) {
                mlog(&m, LOG_ERR, "cannot lock memory (mlockall): %s", strerror(errno));
                return EXIT_FAILURE;
        }

        for (;;) {
                stall_page_reset(m.page);
                r = spawn_child(&m);
                if (r < 0) {
                        mlog(&m, LOG_ERR, "cannot start a dispatcher: %s", strerror(-r));
                        return EXIT_FAILURE;
                }
                status = watch_child(&m);
                /* A SIGTERM or SIGABRT that came with the death (systemd
                 * signals the whole cgroup) decides what comes next. */
                while (read_signal(&m) > 0)
                        ;
                if (m.abort_after) {
                        signal(SIGABRT, SIG_DFL);
                        sigemptyset(&mask);
                        sigaddset(&mask, SIGABRT);
                        sigprocmask(SIG_UNBLOCK, &mask, NULL);
                        raise(SIGABRT);
                        return EXIT_FAILURE;
                }
                if (m.fail)
                        return m.fail;
                if (m.stopping)
                        return exit_code(status);
                if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
                        return EXIT_SUCCESS; /* stopped in order: by hand, or with us by systemd */
                if (!m.ever_ready)
                        return exit_code(status) ?: EXIT_FAILURE; /* a start-up error: it said why */
                if (!may_restart(&m)) {
                        mlog(&m, LOG_ERR,
                             "the dispatcher died %u times within %" PRIu64 " s; giving up (nothing is left "
                             "real-time)", o->max_restarts + 1, (uint64_t) (o->restart_window_ns / NSEC_PER_SEC));
                        return EXIT_FAILURE;
                }
                mlog(&m, LOG_INFO, "starting a new dispatcher (restart %u within %" PRIu64 " s)",
                     m.n_restarts, (uint64_t) (o->restart_window_ns / NSEC_PER_SEC));
        }
}
