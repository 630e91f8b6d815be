/* SPDX-License-Identifier: MIT */
/* dispatcher_run(): the main thread's events until the dispatcher stops.
 * Finding the table file and taking each checked generation to the loops'
 * plans, relaying the loops' log messages (log-ring.c), the watchdog's
 * looks (watchdog.c), the housekeeping of groups and held threads, the
 * look for threads in the real-time class behind their policy, reloads
 * and signals. At SCHED_OTHER: nothing here is on the loops' path. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
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
#include <time.h>
#include <unistd.h>

#include <systemd/sd-event.h>

#include "dispatcher-internal.h"
#include "lending-watch.h"
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

/* The main thread's events while dispatcher_run() runs. */
typedef struct MainLoop {
        Dispatcher *d;
        const DispatcherRunOptions *o;
        sd_event *event;
        /* Armed from the handlers; the others are the event's own. */
        sd_event_source *log, *check, *retry, *look, *probe, *housekeeping, *class_check, *table, *table_later;
        /* Priority lent through PI locks (NULL without memory for it). */
        LendingWatch *lending;
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
        lending_watch_free(m->lending);
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

        r = dispatcher_snapshot_published(d, ret_gen);
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
        if (lending_watch_active(m->lending))
                lending_watch_take(m->lending);
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
                dispatcher_reload(d, o);
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
                dispatcher_kick_until(d, dispatcher_loop_gone, 0, 0);
                return 0;
        case SIGABRT:
                /* systemd's watchdog (or an admin): a loop may be wedged with
                 * a slot owner promoted, so demote from here, then die as
                 * asked. */
                atomic_store(&d->shared.stop, true);
                dispatcher_sweep(d, o, false);
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
        _cleanup_(main_loop_done) MainLoop m = { .d = d, .o = o, .inotify_fd = -EBADF };
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
        dispatcher_sweep(d, o, true);

        (void) lending_watch_new(m.event, d, o, &m.lending);
        check_soon(&m);
        r = sd_event_loop(m.event);
        if (o->set_scope_tick)
                o->set_scope_tick(o->userdata, NULL, NULL); /* m ends with us */
        if (r < 0)
                return r;

        /* Stop here, not in dispatcher_free(), so the restore messages are
         * still written. */
        atomic_store(&d->shared.stop, true);
        dispatcher_kick_until(d, dispatcher_loop_gone, 0, 5 * NSEC_PER_SEC);
        dispatcher_watcher_stop(d);
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
