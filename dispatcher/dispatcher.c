/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "dispatcher.h"
#include "frame.h"
#include "group.h"
#include "held.h"
#include "log-ring.h"
#include "pace-stats.h"
#include "macro.h"
#include "rt-check.h"
#include "sched-util.h"
#include "stats-file.h"
#include "sweep.h"
#include "table-check.h"
#include "table-guard.h"
#include "table-shm.h"
#include "watchdog.h"

/* The signal that interrupts a dispatch thread's sleep (futex or
 * clock_nanosleep) so it looks at the stop flag and the reader epoch. */
#define KICK_SIGNAL SIGUSR1
#define LOOP_STACK_SIZE (256u * 1024u)
/* The delivered figure covers whole periods of at least this long. */
#define ACCT_WINDOW_NS (2 * NSEC_PER_SEC)
/* A header written through mmap raises no inotify event: after the file
 * appears, look again this often, this many times. */
#define OPEN_RETRY_NS (10 * NSEC_PER_MSEC)
/* A new generation is copied and checked at SCHED_FIFO 99 (about 20 us for
 * a small table, hundreds for a full one). Whoever writes the table could
 * publish in a loop and make that our whole life: each loop looks through a
 * token bucket, a burst of TABLE_LOOK_BURST looks (a few grants and
 * releases in a row are adopted at once), then one per
 * TABLE_LOOK_INTERVAL_NS, whatever the generation does. */
#define TABLE_LOOK_BURST 4u
#define TABLE_LOOK_INTERVAL_NS (50 * NSEC_PER_MSEC)
/* The main thread tidies the reservation groups this often while there are
 * any (group_set_housekeep()): what a tree's new members wait at most to
 * be found, and how long a stranger may sit in a group. */
#define HOUSEKEEPING_NS (50 * NSEC_PER_MSEC)
#define OPEN_RETRIES 300u

typedef enum LoopState {
        LOOP_STARTING,
        LOOP_RUNNING,
        LOOP_EXITED,
} LoopState;

typedef struct CpuLoop {
        Dispatcher *d;
        int32_t cpu;
        pthread_t thread;
        bool created;
        _Atomic int state;
        _Atomic uint64_t acked_epoch;
        /* Bumped when the loop enters and leaves every sleep, and on every
         * idle pass: what the watchdog (watchdog.h) looks at. */
        _Atomic uint64_t beats;
        _Atomic uint64_t acked_config;
        _Atomic bool hang; /* test hook: wedge at the next chance */

        /* Everything below belongs to the dispatch thread. */
        HeldContext ctx;
        const PaceConfig *config; /* the one in force on this CPU */
        uint64_t config_gen;
        const TableReader *reader;
        bool reader_broken;
        uint64_t epoch;
        uint64_t seen_gen;  /* last generation looked at, accepted or not */
        /* The look bucket: full (TABLE_LOOK_BURST) at look_full_ns; the next
         * look may happen at next_look_ns. */
        uint64_t look_full_ns, next_look_ns;
        uint64_t table_gen; /* generation in force */
        PaceTableBuffer *cur, *spare;
        Held **held, **next_held;
        size_t n_held;
        /* Slot value (table index + 1) → Held, for the runs in force and
         * for the ones being built; and frame_compile()'s inputs. */
        Held **by_owner, **next_by_owner;
        bool *owner_live;
        uint32_t *owner_period;
        FrameScratch *owner_scratch;
        FrameRun *runs, *next_runs;
        uint32_t n_runs, frame_slots;
        /* The table slot the rotated frame begins at. Every CPU keeps one
         * global grid: table slot = (CLOCK_MONOTONIC / slot) mod frame, so
         * the pieces of a split reservation line up across CPUs and a
         * table swap never shifts anyone's slots in time. */
        uint32_t rot;
} CpuLoop;

struct Dispatcher {
        /* As started: CPUs, waiting policy and slot never change. */
        PaceConfig config;
        /* What the loops validate tables against: configs[config_live],
         * switched at each CPU's next frame boundary after a reload. */
        PaceConfig configs[2];
        _Atomic unsigned config_live;
        _Atomic uint64_t config_gen;
        char *runtime_dir;
        char *table_path;
        ThreadRegistry *registry;
        char freezer_name[64];
        char freezer_root[512];
        char freezer_base[PATH_MAX];
        bool freezer;
        /* Reservation groups (NULL: not usable here, groups_note says why)
         * and the accounting file the broker reads (NULL: none). */
        GroupSet *groups;
        TreeSet *trees;
        char groups_note[512];
        unsigned dead_instances; /* whose leftovers the start removed */
        PaceStatsFile *stats;

        CpuLoop *loops;
        uint32_t n_loops;

        _Atomic(const TableReader *) reader;
        _Atomic uint64_t epoch;
        _Atomic uint32_t epoch_word; /* futex for threads without a reader */
        _Atomic bool stop;
        _Atomic uint32_t hang_word; /* never woken: where a wedged loop waits */
        _Atomic uint64_t broken_epoch;
        _Atomic uint64_t refused_gen;

        /* main thread */
        bool have_table_file;
        dev_t table_dev;
        ino_t table_ino;
        int last_open_error;
        ino_t last_open_error_ino;
        TableReader *leaked[8];
        PaceTableBuffer *scratch; /* main thread: reload checks, sweeps */
        Watchdog *watchdog;

        LogRing *log;
        int housekeeping_efd;
};

static void on_kick(int sig) {
}

static uint64_t now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * NSEC_PER_SEC + (uint64_t) ts.tv_nsec;
}

static long futex_private(_Atomic uint32_t *word, int op, uint32_t val) {
        return syscall(SYS_futex, word, op | FUTEX_PRIVATE_FLAG, val, NULL, NULL, 0);
}

_printf_(3, 4) static void dlog(Dispatcher *d, DispatcherLogLevel level, const char *fmt, ...) {
        va_list ap;

        /* Dispatch threads must never block on the journal: they queue, the
         * main thread writes. */
        va_start(ap, fmt);
        (void) log_ring_pushv(d->log, level, fmt, ap);
        va_end(ap);
}

static void loop_sync_epoch(CpuLoop *l) {
        Dispatcher *d = l->d;
        uint64_t e = atomic_load(&d->epoch);

        if (e == l->epoch)
                return;
        l->reader = atomic_load(&d->reader);
        l->epoch = e;
        l->reader_broken = false;
        /* A new file counts its generations from 1 again. */
        l->seen_gen = 0;
        atomic_store(&l->acked_epoch, e);
}

/* Called where a new configuration may take over: at a frame boundary or
 * while idle, so no window is validated against two configurations. */
static void loop_sync_config(CpuLoop *l) {
        Dispatcher *d = l->d;
        uint64_t gen = atomic_load(&d->config_gen);

        if (gen == l->config_gen)
                return;
        l->config = &d->configs[atomic_load(&d->config_live)];
        l->ctx.max_threads = l->config->max_threads_per_reservation;
        l->config_gen = gen;
        atomic_store(&l->acked_config, gen);
}

/* Test hook (SIGUSR2 with test hooks on): blocks forever in place without
 * spinning, like a deadlocked loop, and without ever bumping beats. Taken
 * right after a promotion (or while idle), so the owner of the slot stays
 * at SCHED_FIFO 98: the case the watchdog exists for. */
static void loop_maybe_hang(CpuLoop *l) {
        if (!atomic_load_explicit(&l->hang, memory_order_relaxed))
                return;
        for (;;)
                (void) futex_private(&l->d->hang_word, FUTEX_WAIT, atomic_load(&l->d->hang_word));
}

static void loop_reader_fault(CpuLoop *l) {
        Dispatcher *d = l->d;

        l->reader_broken = true;
        if (atomic_exchange(&d->broken_epoch, l->epoch) != l->epoch)
                dlog(d, DISPATCHER_LOG_WARNING,
                     "CPU %" PRIi32 ": the table file shrank under its mapping (SIGBUS while reading it); "
                     "keeping generation %" PRIu64 " until a new table file appears",
                     l->cpu, l->table_gen);
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

static void loop_free_held(CpuLoop *l, Held *h) {
        if (h->stats)
                stats_file_release(h->stats);
        held_free(h, &l->ctx);
}

/* The end of the owner's period (its closing run just ended, it is not yet
 * demoted): what it used in the period, whether it still wanted the CPU,
 * and every second or so a delivered figure over whole periods. */
static void loop_period_end(CpuLoop *l, Held *h, uint64_t t) {
        uint64_t u;

        if (h->gone || !h->stats || held_usage_ns(h, &l->ctx, &u) < 0)
                return;
        bool counted = h->acct.started;
        acct_period_end(&h->acct, u, t, (uint64_t) h->budget_slots * l->config->slot_ns,
                        counted && held_any_runnable(h), ACCT_WINDOW_NS);
        if (counted)
                stats_file_publish(h->stats, &h->acct, (uint32_t) h->n_threads, u, t);
}

/* Every CPU the pieces of reservation id sit on, as a kernel CPU list: its
 * members may run there and nowhere else. */
static void held_cpus_of(const PaceTableBuffer *t, uint64_t id, char *ret, size_t size) {
        bool on[PACE_MAX_CPUS] = {};
        size_t n = 0;

        for (uint32_t i = 0; i < MIN(t->n_reservations, PACE_MAX_RESERVATIONS); i++)
                if (t->reservations[i].id == id && t->reservations[i].cpu >= 0 &&
                    t->reservations[i].cpu < (int32_t) PACE_MAX_CPUS)
                        on[t->reservations[i].cpu] = true;
        ret[0] = '\0';
        for (int32_t c = 0; c < (int32_t) PACE_MAX_CPUS; c++)
                if (on[c]) {
                        int k = snprintf(ret + n, size - n, "%s%" PRIi32, n ? "," : "", c);
                        if (k < 0 || (size_t) k >= size - n)
                                break;
                        n += (size_t) k;
                }
}

static Held *loop_find_held(CpuLoop *l, const PaceTableReservation *res) {
        for (size_t i = 0; i < l->n_held; i++) {
                Held *h = l->held[i];
                if (h->id == res->id && h->pid == res->pid && h->start_time == res->start_time)
                        return h;
        }
        return NULL;
}

/* Adopts l->spare (validated) as the table in force: carries over the
 * processes both tables name, identifies new ones, restores the ones that
 * left, and lays out this CPU's frame as runs of one owner each. */
static int loop_adopt(CpuLoop *l, uint64_t gen) {
        Dispatcher *d = l->d;
        const PaceTableBuffer *t = l->spare;
        const PaceTableCpu *tc = NULL;
        size_t n_next = 0;
        int r;

        for (uint32_t c = 0; c < t->n_cpus; c++)
                if (t->cpus[c].cpu == l->cpu)
                        tc = &t->cpus[c];

        for (size_t i = 0; i < l->n_held; i++)
                l->held[i]->mark = false;

        for (uint32_t i = 0; i < t->n_reservations; i++) {
                const PaceTableReservation *res = &t->reservations[i];
                Held *h;

                l->next_by_owner[i + 1] = NULL;
                l->owner_live[i + 1] = false;
                if (res->cpu != l->cpu)
                        continue;
                h = loop_find_held(l, res);
                if (!h) {
                        r = held_new(res, l->config->reserve_root_processes, &h);
                        if (r < 0) {
                                dlog(d, DISPATCHER_LOG_WARNING,
                                     "CPU %" PRIi32 ": ignoring reservation %" PRIu64 " of pid %" PRIi32 ": %s",
                                     l->cpu, res->id, res->pid, identity_problem(r));
                                r = held_new_inert(res, &h);
                                if (r < 0)
                                        return r;
                        } else {
                                /* Full: the piece goes unaccounted. */
                                if (d->stats)
                                        (void) stats_file_claim(d->stats, h->id, l->cpu, &h->stats);
                                held_cpus_of(t, res->id, h->cpus, sizeof(h->cpus));
                        }
                }
                h->period_slots = res->period_slots;
                h->budget_slots = res->budget_slots;
                h->mark = true;
                l->next_by_owner[i + 1] = h;
                l->owner_live[i + 1] = !h->gone;
                l->owner_period[i + 1] = h->period_slots;
                l->next_held[n_next++] = h;
        }

        for (size_t i = 0; i < l->n_held; i++)
                if (!l->held[i]->mark)
                        loop_free_held(l, l->held[i]);

        Held **swap = l->held;
        l->held = l->next_held;
        l->next_held = swap;
        l->n_held = n_next;

        uint32_t frame = tc ? tc->frame_slots : 0, n = 0, rot = 0;
        if (tc)
                frame_compile(&t->slots[tc->first_slot], frame, l->owner_live, l->owner_period, l->owner_scratch,
                              l->next_runs, &n, &rot);
        FrameRun *runs = l->runs;
        l->runs = l->next_runs;
        l->next_runs = runs;
        Held **owners = l->by_owner;
        l->by_owner = l->next_by_owner;
        l->next_by_owner = owners;
        l->n_runs = n;
        l->frame_slots = frame;
        l->rot = rot;

        PaceTableBuffer *b = l->cur;
        l->cur = l->spare;
        l->spare = b;
        l->table_gen = gen;

        dlog(d, DISPATCHER_LOG_INFO,
             "CPU %" PRIi32 ": table generation %" PRIu64 " in force: %zu reservation(s), frame of %" PRIu32
             " slots, %" PRIu32 " wake-ups per frame",
             l->cpu, gen, l->n_held, frame, n);
        return 0;
}

/* Looks at the published table if its generation is new. Returns 1 if a
 * new table is now in force, 0 if not. */
static int loop_consider(CpuLoop *l) {
        Dispatcher *d = l->d;
        char err[256];
        uint64_t gen = 0, seen;
        int r;

        if (!l->reader || l->reader_broken)
                return 0;
        if (table_guard_generation(l->reader, &seen) < 0) {
                loop_reader_fault(l);
                return 0;
        }
        if (seen == l->seen_gen)
                return 0;
        uint64_t now = now_ns();
        if (now < l->next_look_ns)
                return 0; /* looked at later: the generation stays unseen */
        /* One token spent: the bucket is full again one interval later
         * than it would have been, and empty while that is more than a
         * burst away. */
        uint64_t burst_ns = (uint64_t) (TABLE_LOOK_BURST - 1) * TABLE_LOOK_INTERVAL_NS;
        l->look_full_ns = MAX(l->look_full_ns, now) + TABLE_LOOK_INTERVAL_NS;
        l->next_look_ns = l->look_full_ns > now + burst_ns ? l->look_full_ns - burst_ns : 0;

        r = table_guard_snapshot(l->reader, l->spare, &gen);
        if (r == -EFAULT) {
                loop_reader_fault(l);
                return 0;
        }
        if (r < 0) {
                /* Nothing yet, or torn: the writer bumps the generation when
                 * done, which is what we wait for next. */
                l->seen_gen = seen;
                return 0;
        }
        l->seen_gen = gen;

        r = table_check(l->spare, l->config, err, sizeof(err));
        if (r < 0) {
                if (atomic_exchange(&d->refused_gen, gen) != gen)
                        dlog(d, DISPATCHER_LOG_ERROR,
                             "refusing table generation %" PRIu64 ": %s; generation %" PRIu64 " stays in force",
                             gen, err, l->table_gen);
                return 0;
        }
        r = loop_adopt(l, gen);
        if (r < 0) {
                dlog(d, DISPATCHER_LOG_ERROR, "CPU %" PRIi32 ": cannot adopt table generation %" PRIu64 ": %s",
                     l->cpu, gen, strerror(-r));
                return 0;
        }
        return 1;
}

static bool loop_stopping(CpuLoop *l) {
        return atomic_load_explicit(&l->d->stop, memory_order_relaxed);
}

/* Absolute deadlines: a late wake-up never shifts the slots after it. */
static int loop_sleep_until(CpuLoop *l, uint64_t t) {
        struct timespec ts = { .tv_sec = (time_t) (t / NSEC_PER_SEC), .tv_nsec = (long) (t % NSEC_PER_SEC) };

        for (;;) {
                atomic_fetch_add_explicit(&l->beats, 1, memory_order_relaxed);
                int r = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
                atomic_fetch_add_explicit(&l->beats, 1, memory_order_relaxed);
                if (r == 0)
                        return 0;
                if (r != EINTR)
                        return -r;
                if (loop_stopping(l))
                        return -ECANCELED;
                loop_sync_epoch(l);
        }
}

static void loop_switch(CpuLoop *l, Held *from, Held *to) {
        /* Dying (SIGABRT, SIGTERM): promote no one any more, whatever the
         * table says; the main thread may be demoting everyone right now. */
        if (to && loop_stopping(l))
                to = NULL;
        if (from == to)
                return;
        if (from)
                (void) held_demote(from, &l->ctx);
        if (to) {
                int r = held_promote(to, &l->ctx);
                /* -EAGAIN: strict mode waits for its group (a scope the main
                 * thread is asking the manager for): not an error yet. */
                if (r < 0 && r != -EAGAIN && !to->logged) {
                        to->logged = true;
                        if (r == -ESRCH)
                                dlog(l->d, DISPATCHER_LOG_INFO,
                                     "CPU %" PRIi32 ": pid %" PRIi32 " (reservation %" PRIu64
                                     ") exited; its slots stay idle until the table drops it",
                                     l->cpu, to->pid, to->id);
                        else if (r == -EPERM && to->revoked)
                                dlog(l->d, DISPATCHER_LOG_WARNING,
                                     "CPU %" PRIi32 ": a thread of pid %" PRIi32 " (reservation %" PRIu64
                                     ") left CPU %" PRIi32 " while it ran at our priority; the reservation is "
                                     "no longer promoted", l->cpu, to->pid, to->id, l->cpu);
                        else
                                dlog(l->d, DISPATCHER_LOG_ERROR,
                                     "CPU %" PRIi32 ": cannot promote pid %" PRIi32 " (reservation %" PRIu64 "): %s",
                                     l->cpu, to->pid, to->id, strerror(-r));
                }
                if (to->threads_skipped > 0 && !to->limit_logged) {
                        to->limit_logged = true;
                        dlog(l->d, DISPATCHER_LOG_WARNING,
                             "CPU %" PRIi32 ": pid %" PRIi32 " (reservation %" PRIu64 ") has %" PRIu32
                             " threads past max_threads_per_reservation (%" PRIu32 "); they are not moved",
                             l->cpu, to->pid, to->id, to->threads_skipped, l->ctx.max_threads);
                }
                loop_maybe_hang(l);
        }
}

/* Where the global grid stands at time t for the frame in force: when the
 * current rotated frame began, and which run covers t. */
static void loop_locate(const CpuLoop *l, uint64_t t, uint64_t *ret_frame_start, uint32_t *ret_k) {
        uint64_t slot_ns = l->config->slot_ns, g = t / slot_ns;
        uint32_t off;

        frame_locate(l->runs, l->n_runs, l->frame_slots, l->rot, g, &off, ret_k);
        *ret_frame_start = (g - off) * slot_ns;
}

/* Runs the frame in force until the table empties this CPU or we stop. */
static void loop_active(CpuLoop *l) {
        uint64_t slot_ns = l->config->slot_ns;
        uint64_t frame_start;
        Held *prev = NULL;
        bool prev_closes = false;
        uint32_t k;

        /* Join the grid where it stands: the run under way is entered at
         * once, not a frame later. */
        loop_locate(l, now_ns(), &frame_start, &k);
        for (;;) {
                uint64_t t = frame_start + (uint64_t) l->runs[k].start * slot_ns;

                if (loop_sleep_until(l, t) < 0)
                        break;

                if (k == 0) {
                        /* Frame boundary: the only place a new table may take
                         * over, so no reservation loses slots of a window
                         * that straddles the swap. */
                        loop_sync_epoch(l);
                        loop_sync_config(l);
                        uint64_t gen;
                        bool fresh = l->reader && !l->reader_broken &&
                                     table_guard_generation(l->reader, &gen) == 0 && gen != l->seen_gen &&
                                     now_ns() >= l->next_look_ns;
                        if (fresh) {
                                /* Whoever owned the last run is done anyway
                                 * (runs are rotated); demote before the copy
                                 * and check so it gets no extra time. */
                                if (prev && prev_closes)
                                        loop_period_end(l, prev, t);
                                loop_switch(l, prev, NULL);
                                prev = NULL;
                                if (loop_consider(l) > 0) {
                                        if (l->n_runs == 0)
                                                return;
                                        /* Same grid, new frame: carry on
                                         * wherever it stands now. */
                                        loop_locate(l, t, &frame_start, &k);
                                }
                        }
                        uint64_t frame_ns = (uint64_t) l->frame_slots * slot_ns, now = now_ns();
                        if (now > t + frame_ns) {
                                /* Stalled (a VM pause): rejoin the grid now
                                 * rather than replay the missed slots. */
                                loop_locate(l, now, &frame_start, &k);
                        }
                }

                Held *owner = l->by_owner[l->runs[k].owner];
                if (prev && prev_closes && prev != owner)
                        loop_period_end(l, prev, t);
                loop_switch(l, prev, owner);
                prev = owner;
                prev_closes = l->runs[k].closes;
                if (++k == l->n_runs) {
                        k = 0;
                        frame_start += (uint64_t) l->frame_slots * slot_ns;
                }
        }
        loop_switch(l, prev, NULL);
}

/* Sleeps, without any periodic wake-up, until a table gives this CPU a
 * frame. Returns false when stopping. */
static bool loop_idle(CpuLoop *l) {
        Dispatcher *d = l->d;

        for (;;) {
                /* Read before looking: a change after this bumps the word
                 * and the futex wait below returns at once. */
                uint32_t word = atomic_load(&d->epoch_word);

                atomic_fetch_add_explicit(&l->beats, 1, memory_order_relaxed);
                loop_maybe_hang(l);
                if (loop_stopping(l))
                        return false;
                loop_sync_epoch(l);
                loop_sync_config(l);
                if (l->reader && !l->reader_broken) {
                        if (loop_consider(l) > 0 && l->n_runs > 0)
                                return true;
                        if (l->reader_broken)
                                continue;
                        uint64_t gen;
                        if (table_guard_generation(l->reader, &gen) == 0 && gen != l->seen_gen) {
                                /* New, but too soon after the last look. */
                                (void) loop_sleep_until(l, l->next_look_ns);
                                continue;
                        }
                        /* -EINTR on a kick, -EFAULT if the file shrank. */
                        if (table_guard_wait(l->reader, l->seen_gen) == -EFAULT)
                                loop_reader_fault(l);
                } else {
                        (void) futex_private(&d->epoch_word, FUTEX_WAIT, word);
                }
        }
}

static void *loop_main(void *userdata) {
        CpuLoop *l = userdata;
        sigset_t kick;

        sigemptyset(&kick);
        sigaddset(&kick, KICK_SIGNAL);
        pthread_sigmask(SIG_UNBLOCK, &kick, NULL);
        atomic_store(&l->state, LOOP_RUNNING);

        while (loop_idle(l)) {
                loop_active(l);
                if (loop_stopping(l))
                        break;
        }

        for (size_t i = 0; i < l->n_held; i++)
                loop_free_held(l, l->held[i]);
        l->n_held = 0;
        atomic_store(&l->state, LOOP_EXITED);
        return NULL;
}

static int resolve_cpus(PaceConfig *config) {
        char buf[1024];
        FILE *f;
        int r;

        if (config->cpus_set)
                return 0;
        f = fopen("/sys/devices/system/cpu/online", "re");
        if (!f)
                return negative_errno();
        if (!fgets(buf, sizeof(buf), f)) {
                fclose(f);
                return -EIO;
        }
        fclose(f);
        r = cpulist_parse(buf, config->cpus, PACE_MAX_CPUS, &config->n_cpus);
        if (r < 0)
                return r;
        config->cpus_set = true;
        return 0;
}

static bool watch_beats(uint32_t i, uint64_t *ret, void *userdata) {
        Dispatcher *d = userdata;
        CpuLoop *l = &d->loops[i];

        if (!l->created || atomic_load(&l->state) == LOOP_EXITED)
                return false;
        *ret = atomic_load(&l->beats);
        return true;
}

static void watch_kick(uint32_t i, void *userdata) {
        Dispatcher *d = userdata;

        (void) pthread_kill(d->loops[i].thread, KICK_SIGNAL);
}

int dispatcher_new(const PaceConfig *config, const char *runtime_dir, Dispatcher **ret, char *err,
                   size_t err_size) {
        _cleanup_(dispatcher_freep) Dispatcher *d = NULL;
        struct sigaction sa = {};
        sigset_t mask;
        int r;

        d = calloc(1, sizeof(*d));
        if (!d)
                return -ENOMEM;
        d->housekeeping_efd = -EBADF;
        d->config = *config;
        r = resolve_cpus(&d->config);
        if (r < 0) {
                snprintf(err, err_size, "cannot read the online CPUs: %s", strerror(-r));
                return r;
        }
        if (d->config.n_cpus == 0) {
                snprintf(err, err_size, "no CPUs to manage");
                return -EINVAL;
        }

        d->runtime_dir = strdup(runtime_dir);
        if (!d->runtime_dir || asprintf(&d->table_path, "%s/%s", runtime_dir, PACE_TABLE_NAME) < 0)
                return -ENOMEM;
        r = log_ring_new(&d->log);
        if (r < 0)
                return r;
        d->housekeeping_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (d->housekeeping_efd < 0)
                return negative_errno();
        r = thread_registry_new(&d->registry);
        if (r < 0)
                return r;
        r = tree_set_new(&d->trees);
        if (r < 0)
                return r;

        /* One pace.<hash> freezer group per runtime directory, so a test
         * instance never touches the system's. */
        sweep_freezer_name(runtime_dir, d->freezer_name, sizeof(d->freezer_name));

        d->configs[0] = d->config;
        d->scratch = calloc(1, sizeof(PaceTableBuffer));
        d->loops = calloc(d->config.n_cpus, sizeof(*d->loops));
        if (!d->loops || !d->scratch)
                return -ENOMEM;
        d->n_loops = d->config.n_cpus;
        r = watchdog_new(d->n_loops, watch_beats, watch_kick, d, &d->watchdog);
        if (r < 0)
                return r;
        uint32_t max_frame = pace_config_frame_slots(&d->config);
        for (uint32_t i = 0; i < d->n_loops; i++) {
                CpuLoop *l = &d->loops[i];
                l->d = d;
                l->cpu = d->config.cpus[i];
                l->config = &d->configs[0];
                l->cur = calloc(1, sizeof(PaceTableBuffer));
                l->spare = calloc(1, sizeof(PaceTableBuffer));
                l->held = calloc(PACE_MAX_RESERVATIONS, sizeof(Held *));
                l->next_held = calloc(PACE_MAX_RESERVATIONS, sizeof(Held *));
                l->by_owner = calloc(PACE_MAX_RESERVATIONS + 1, sizeof(Held *));
                l->next_by_owner = calloc(PACE_MAX_RESERVATIONS + 1, sizeof(Held *));
                l->owner_live = calloc(PACE_MAX_RESERVATIONS + 1, sizeof(bool));
                l->owner_period = calloc(PACE_MAX_RESERVATIONS + 1, sizeof(uint32_t));
                l->owner_scratch = calloc(PACE_MAX_RESERVATIONS + 1, sizeof(FrameScratch));
                l->runs = calloc(max_frame + 1, sizeof(FrameRun));
                l->next_runs = calloc(max_frame + 1, sizeof(FrameRun));
                if (!l->cur || !l->spare || !l->held || !l->next_held || !l->by_owner || !l->next_by_owner ||
                    !l->owner_live || !l->owner_period || !l->owner_scratch || !l->runs || !l->next_runs)
                        return -ENOMEM;
        }

        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGHUP);
        sigaddset(&mask, SIGABRT);
        sigaddset(&mask, SIGUSR2);
        sigaddset(&mask, KICK_SIGNAL);
        pthread_sigmask(SIG_BLOCK, &mask, NULL);

        /* No SA_RESTART: a kick must end the futex wait or nanosleep. */
        sa.sa_handler = on_kick;
        sigemptyset(&sa.sa_mask);
        if (sigaction(KICK_SIGNAL, &sa, NULL) < 0)
                return negative_errno();
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
        stats_file_unmap(d->stats);
        d->stats = f;
        return 0;
}

const PaceConfig *dispatcher_config(const Dispatcher *d) {
        return &d->config;
}

static void kick_until(Dispatcher *d, bool (*done)(CpuLoop *l, uint64_t arg), uint64_t arg, uint64_t timeout_ns) {
        uint64_t deadline = now_ns() + timeout_ns;

        for (;;) {
                bool all = true;

                atomic_fetch_add(&d->epoch_word, 1);
                (void) futex_private(&d->epoch_word, FUTEX_WAKE, INT_MAX);
                for (uint32_t i = 0; i < d->n_loops; i++) {
                        CpuLoop *l = &d->loops[i];
                        if (!l->created || atomic_load(&l->state) == LOOP_EXITED || done(l, arg))
                                continue;
                        all = false;
                        /* The kick can land just before the thread enters
                         * its wait, so repeat it until acknowledged. */
                        (void) pthread_kill(l->thread, KICK_SIGNAL);
                }
                if (all || now_ns() > deadline)
                        return;
                (void) usleep(2000);
        }
}

static bool loop_acked(CpuLoop *l, uint64_t epoch) {
        return atomic_load(&l->acked_epoch) >= epoch;
}

static bool loop_exited(CpuLoop *l, uint64_t unused) {
        return atomic_load(&l->state) == LOOP_EXITED;
}

/* The v1 freezer flips a static key (kernel text patching, IPIs to every
 * CPU) whenever the number of frozen groups goes between 0 and 1. An empty
 * group kept frozen while we run keeps it from ever reaching 0, which cut
 * the cost of a strict-mode switch from ~120 µs to the nice mode's level
 * (see README.md). */
static int freezer_anchor(Dispatcher *d, bool on) {
        char path[PATH_MAX + 32];
        int fd;

        snprintf(path, sizeof(path), "%s/anchor", d->freezer_base);
        if (!on) {
                snprintf(path, sizeof(path), "%s/anchor/freezer.state", d->freezer_base);
                fd = open(path, O_WRONLY | O_CLOEXEC);
                if (fd >= 0) {
                        (void) !write(fd, "THAWED", 6);
                        close(fd);
                }
                snprintf(path, sizeof(path), "%s/anchor", d->freezer_base);
                (void) rmdir(path);
                return 0;
        }
        if (mkdir(d->freezer_base, 0755) < 0 && errno != EEXIST)
                return negative_errno();
        if (mkdir(path, 0755) < 0 && errno != EEXIST)
                return negative_errno();
        snprintf(path, sizeof(path), "%s/anchor/freezer.state", d->freezer_base);
        fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        if (write(fd, "FROZEN", 6) < 0) {
                int r = negative_errno();
                close(fd);
                return r;
        }
        close(fd);
        return 0;
}

int dispatcher_start(Dispatcher *d, char *err, size_t err_size) {
        int r;

        /* A page fault in the middle of a slot switch would be charged to
         * whoever owns the CPU. */
        if (mlockall(MCL_CURRENT | MCL_FUTURE) < 0) {
                r = negative_errno();
                snprintf(err, err_size, "cannot lock memory (mlockall): %s; the dispatcher needs CAP_IPC_LOCK "
                         "or a large enough RLIMIT_MEMLOCK", strerror(-r));
                return r;
        }
        r = rt_check_privileges(err, err_size);
        if (r < 0)
                return r;
        r = rt_check_cgroup("/proc", "/sys/fs/cgroup", err, err_size);
        if (r < 0)
                return r;

        bool v1_freezer = false;
        if (d->config.waiting == PACE_WAITING_FREEZE &&
            rt_find_freezer("/proc", d->freezer_root, sizeof(d->freezer_root)) >= 0) {
                v1_freezer = true;
                snprintf(d->freezer_base, sizeof(d->freezer_base), "%s/%s", d->freezer_root, d->freezer_name);
                d->freezer = true;
                r = freezer_anchor(d, true);
                if (r < 0) {
                        snprintf(err, err_size, "cannot create the freezer cgroup %s/anchor: %s", d->freezer_base,
                                 strerror(-r));
                        return r;
                }
        }

        /* Reservation groups: without them members are found in /proc and
         * accounted per thread, which dispatcher_run() says once. */
        char base[PATH_MAX];
        if (group_base_path(d->freezer_name, base, sizeof(base)) == 0)
                (void) sweep_demote_groups(base); /* a crashed run's tree members */
        /* Other instances that died without cleaning up (SIGKILL of both
         * processes): their groups would hold real-time runtime and
         * cpusets for ever. */
        unsigned dead = 0;
        (void) group_sweep_dead(d->freezer_name, sweep_demote_groups_void, &dead);
        d->dead_instances = dead;
        pid_t owner = held_protected_pid() > 0 ? held_protected_pid() : getpid();
        r = group_set_new(d->freezer_name, PPM - d->config.non_rt_share_ppm, owner, &d->groups, d->groups_note,
                          sizeof(d->groups_note));
        if (r < 0 && !d->groups_note[0])
                snprintf(d->groups_note, sizeof(d->groups_note), "%s", strerror(-r));
        /* Strict mode freezes the v1 freezer's groups or, on the unified
         * hierarchy, each reservation's own group. */
        if (d->config.waiting == PACE_WAITING_FREEZE && !v1_freezer && !(d->groups && group_set_unified(d->groups))) {
                snprintf(err, err_size,
                         "\"waiting\": \"freeze\" needs the cgroup v1 freezer or reservation groups on the unified "
                         "hierarchy, and neither is available here (%s); use \"waiting\": \"nice\"",
                         d->groups_note[0] ? d->groups_note : "no v1 freezer is mounted");
                return -EOPNOTSUPP;
        }

        for (uint32_t i = 0; i < d->n_loops; i++) {
                CpuLoop *l = &d->loops[i];
                pthread_attr_t attr;
                struct sched_param sp = { .sched_priority = PACE_DISPATCHER_PRIORITY };
                cpu_set_t set;

                l->ctx = (HeldContext) {
                        .registry = d->registry,
                        .waiting = d->config.waiting,
                        .cpu = l->cpu,
                        .max_threads = d->config.max_threads_per_reservation,
                        .freezer_root = d->freezer ? d->freezer_root : NULL,
                        .freezer_base = d->freezer ? d->freezer_base : NULL,
                        .groups = d->groups,
                        .trees = d->trees,
                        .housekeeping_fd = d->housekeeping_efd,
                };
                CPU_ZERO(&set);
                CPU_SET(l->cpu, &set);
                pthread_attr_init(&attr);
                pthread_attr_setstacksize(&attr, LOOP_STACK_SIZE);
                pthread_attr_setaffinity_np(&attr, sizeof(set), &set);
                pthread_attr_setinheritsched(&attr, PTHREAD_EXPLICIT_SCHED);
                pthread_attr_setschedpolicy(&attr, SCHED_FIFO);
                pthread_attr_setschedparam(&attr, &sp);
                r = -pthread_create(&l->thread, &attr, loop_main, l);
                pthread_attr_destroy(&attr);
                if (r == -EPERM) {
                        rt_explain_eperm("/proc", "/sys/fs/cgroup", err, err_size);
                        return r;
                }
                if (r == -EINVAL) {
                        snprintf(err, err_size, "cannot start the dispatch thread of CPU %" PRIi32
                                 ": the CPU is not online", l->cpu);
                        return r;
                }
                if (r < 0) {
                        snprintf(err, err_size, "cannot start the dispatch thread of CPU %" PRIi32 ": %s", l->cpu,
                                 strerror(-r));
                        return r;
                }
                l->created = true;
        }
        return 0;
}

/* Opens the table file if it is new (another inode: a restarted broker) or
 * the current mapping broke. Returns 0 if the file in place is in use. */
static int dispatcher_open_table(Dispatcher *d, DispatcherLogFn log_fn, void *userdata) {
        struct stat st, st2;
        TableReader *reader = NULL;
        char message[LOG_MESSAGE_MAX];
        int r;

        if (stat(d->table_path, &st) < 0)
                return negative_errno();
        if (d->have_table_file && st.st_dev == d->table_dev && st.st_ino == d->table_ino &&
            atomic_load(&d->broken_epoch) != atomic_load(&d->epoch))
                return 0;

        r = table_reader_open(d->table_path, &reader);
        if (r < 0)
                return r;
        if (stat(d->table_path, &st2) < 0 || st2.st_ino != st.st_ino || st2.st_dev != st.st_dev) {
                table_reader_free(reader);
                return -EAGAIN; /* replaced while we opened it: look again */
        }

        const TableReader *old = atomic_load(&d->reader);
        atomic_store(&d->reader, reader);
        uint64_t epoch = atomic_fetch_add(&d->epoch, 1) + 1;
        d->have_table_file = true;
        d->table_dev = st.st_dev;
        d->table_ino = st.st_ino;
        d->last_open_error = 0;

        kick_until(d, loop_acked, epoch, 2 * NSEC_PER_SEC);
        bool all = true;
        for (uint32_t i = 0; i < d->n_loops; i++)
                if (d->loops[i].created && atomic_load(&d->loops[i].state) != LOOP_EXITED &&
                    !loop_acked(&d->loops[i], epoch))
                        all = false;
        if (all) {
                table_reader_free((TableReader *) old);
        } else {
                /* A thread still might read it: keep the mapping. */
                for (size_t i = 0; i < ELEMENTSOF(d->leaked); i++)
                        if (!d->leaked[i]) {
                                d->leaked[i] = (TableReader *) old;
                                break;
                        }
        }
        snprintf(message, sizeof(message), "following table %s (inode %" PRIu64 ")", d->table_path,
                 (uint64_t) st.st_ino);
        log_fn(DISPATCHER_LOG_INFO, message, userdata);
        return 0;
}

static void arm_timer(int tfd, uint64_t ns) {
        struct itimerspec its = {
                .it_value = { .tv_sec = (time_t) (ns / NSEC_PER_SEC), .tv_nsec = (long) (ns % NSEC_PER_SEC) },
        };
        (void) timerfd_settime(tfd, 0, &its, NULL);
}

_printf_(3, 4) static void run_log(const DispatcherRunOptions *o, DispatcherLogLevel level, const char *fmt, ...) {
        char message[LOG_MESSAGE_MAX];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(message, sizeof(message), fmt, ap);
        va_end(ap);
        o->log(level, message, o->userdata);
}

/* A copy of the published table in d->scratch, from the mapping in use or,
 * before there is one, from the file. */
static int snapshot_published(Dispatcher *d, uint64_t *ret_gen) {
        _cleanup_(table_reader_freep) TableReader *own = NULL;
        const TableReader *reader = atomic_load(&d->reader);
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

/* Strict mode: reservation groups a predecessor left behind are thawed
 * and (at start) emptied into the hierarchy's root and removed, so no
 * process stays frozen because a dispatcher died. */
static unsigned freezer_leftovers(Dispatcher *d, bool remove) {
        return d->freezer ? sweep_freezer(d->freezer_root, d->freezer_base, remove) : 0;
}

static void sweep(Dispatcher *d, const DispatcherRunOptions *o, bool at_start) {
        uint64_t gen = 0;
        unsigned demoted = 0, groups;

        if (snapshot_published(d, &gen) == 0)
                demoted = sweep_demote_table(d->scratch);
        groups = freezer_leftovers(d, at_start);
        if (demoted > 0 || groups > 0 || !at_start)
                run_log(o, demoted > 0 ? DISPATCHER_LOG_WARNING : DISPATCHER_LOG_INFO,
                        "%s: %u thread(s) of reserved processes found at SCHED_FIFO %d and demoted to SCHED_OTHER"
                        "%s%u freezer group(s) thawed",
                        at_start ? "start-up sweep (a previous dispatcher died without restoring)" :
                                   "dying on SIGABRT",
                        demoted, PACE_RUNNING_PRIORITY, ", ", groups);
}

static bool loop_config_acked(CpuLoop *l, uint64_t gen) {
        return atomic_load(&l->acked_config) >= gen;
}

static bool same_cpus(const PaceConfig *a, const PaceConfig *b) {
        return a->n_cpus == b->n_cpus && memcmp(a->cpus, b->cpus, a->n_cpus * sizeof(a->cpus[0])) == 0;
}

/* SIGHUP: the new file passes the same validation as at start, must not
 * change what only a restart can change, and must accept the table in
 * force; otherwise it is refused whole and the configuration in force
 * stays. Accepted, it takes over on each CPU at its next frame boundary. */
static void reload(Dispatcher *d, const DispatcherRunOptions *o) {
        _cleanup_free_ char *error = NULL;
        PaceConfig next;
        uint64_t gen = 0;
        char err[512];
        int r;

        if (!o->load_config) {
                run_log(o, DISPATCHER_LOG_WARNING, "SIGHUP: no configuration to reload");
                return;
        }
        r = o->load_config(&next, &error, o->userdata);
        if (r < 0) {
                run_log(o, DISPATCHER_LOG_ERROR, "reload refused: %s; the configuration in force stays",
                        error ?: strerror(-r));
                return;
        }
        r = resolve_cpus(&next);
        if (r < 0) {
                run_log(o, DISPATCHER_LOG_ERROR, "reload refused: cannot read the online CPUs: %s", strerror(-r));
                return;
        }
        const char *fixed = !same_cpus(&next, &d->config) ? "\"cpus\" (one dispatch thread per CPU)" :
                            next.waiting != d->config.waiting ? "\"waiting\"" :
                            next.slot_ns != d->config.slot_ns ? "\"slot_us\" (the table in force is in slots)" :
                            pace_config_frame_slots(&next) > pace_config_frame_slots(&d->config) ?
                                    "\"max_frame_ms\" upwards (run arrays are allocated and locked at start)" :
                                    NULL;
        if (fixed) {
                run_log(o, DISPATCHER_LOG_ERROR,
                        "reload refused: changing %s needs a restart of pace-dispatcher; the configuration in "
                        "force stays", fixed);
                return;
        }
        uint64_t cur = atomic_load(&d->config_gen);
        for (uint32_t i = 0; i < d->n_loops; i++)
                if (d->loops[i].created && atomic_load(&d->loops[i].state) != LOOP_EXITED &&
                    !loop_config_acked(&d->loops[i], cur)) {
                        run_log(o, DISPATCHER_LOG_ERROR,
                                "reload refused: the previous reload is not in force on CPU %" PRIi32
                                " yet (it waits for a frame boundary); send SIGHUP again", d->loops[i].cpu);
                        return;
                }
        r = snapshot_published(d, &gen);
        if (r == 0 && table_check(d->scratch, &next, err, sizeof(err)) < 0) {
                run_log(o, DISPATCHER_LOG_ERROR,
                        "reload refused: the table in force (generation %" PRIu64 ") breaks the new configuration: "
                        "%s; the configuration in force stays", gen, err);
                return;
        }

        unsigned live = atomic_load(&d->config_live);
        d->configs[!live] = next;
        atomic_store(&d->config_live, !live);
        uint64_t ngen = atomic_fetch_add(&d->config_gen, 1) + 1;
        /* Idle loops take it at once; active ones at their frame boundary. */
        kick_until(d, loop_config_acked, ngen, 0);
        run_log(o, DISPATCHER_LOG_INFO, "reloaded the configuration; in force on each CPU from its next frame "
                "boundary");
}

/* A look (probe false) or a probe of the watchdog: the ping when every loop
 * advances, a probe soon when one did not, the log when that lasts. */
static void watch(Dispatcher *d, const DispatcherRunOptions *o, bool probe, int pfd) {
        uint64_t stalled_ns;

        switch (probe ? watchdog_probe(d->watchdog, now_ns(), &stalled_ns) :
                        watchdog_look(d->watchdog, now_ns(), &stalled_ns)) {
        case WATCHDOG_RECOVERED:
                run_log(o, DISPATCHER_LOG_INFO, "every dispatch loop advances again after %" PRIu64 " ms",
                        (uint64_t) (stalled_ns / NSEC_PER_MSEC));
                o->watchdog_ping(o->userdata);
                break;
        case WATCHDOG_PING:
                o->watchdog_ping(o->userdata);
                break;
        case WATCHDOG_PROBE:
                arm_timer(pfd, WATCHDOG_PROBE_NS);
                break;
        case WATCHDOG_STALLED:
                for (uint32_t i = 0; i < d->n_loops; i++)
                        if (watchdog_loop_stalled(d->watchdog, i))
                                run_log(o, DISPATCHER_LOG_ERROR,
                                        "the dispatch loop of CPU %" PRIi32 " does not advance (kicked, no answer "
                                        "within %llu ms); withholding the watchdog ping",
                                        d->loops[i].cpu, (unsigned long long) (WATCHDOG_PROBE_NS / NSEC_PER_MSEC));
                break;
        case WATCHDOG_STILL_STALLED:
                break;
        }
}

int dispatcher_run(Dispatcher *d, const DispatcherRunOptions *o) {
        _cleanup_close_ int sfd = -EBADF, ifd = -EBADF, tfd = -EBADF, wfd = -EBADF, pfd = -EBADF, hfd = -EBADF;
        DispatcherLogFn log_fn = o->log;
        void *userdata = o->userdata;
        char message[LOG_MESSAGE_MAX];
        unsigned retries = 0;
        sigset_t mask;
        int r;

        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGHUP);
        sigaddset(&mask, SIGABRT);
        sigaddset(&mask, SIGUSR2);
        sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
        if (sfd < 0)
                return negative_errno();
        tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        hfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        if (tfd < 0 || hfd < 0)
                return negative_errno();
        if (d->groups && group_set_delegated(d->groups))
                run_log(o, o->make_scope ? DISPATCHER_LOG_INFO : DISPATCHER_LOG_WARNING,
                        "on the unified hierarchy under a manager: %s",
                        o->make_scope ? "each reserved process gets a delegated scope from systemd (PartOf= its "
                                        "own unit), with a subgroup of ours for its members, accounting and strict "
                                        "mode; until it exists, and where it cannot be had, members are found in "
                                        "/proc" :
                                        "no way to ask the manager for scopes: members are found in /proc");
        else if (d->groups)
                run_log(o, d->groups_note[0] ? DISPATCHER_LOG_WARNING : DISPATCHER_LOG_INFO,
                        "reservation groups in %s/%s: members found and accounted by cgroup%s%s",
                        group_set_root(d->groups), d->freezer_name, d->groups_note[0] ? "; " : "", d->groups_note);
        else
                run_log(o, DISPATCHER_LOG_WARNING, "reservation groups unavailable (%s): members are found in "
                        "/proc/PID/task, a tree's descendants by walking /proc every 50 ms (one that leaves the "
                        "tree by a double fork is not followed), accounting reads each thread's schedstat, and "
                        "members are held to their CPU by affinity checked around every run", d->groups_note);
        if (d->dead_instances > 0)
                run_log(o, DISPATCHER_LOG_WARNING, "removed the cgroups of %u dispatcher instance(s) that died "
                        "without cleaning up", d->dead_instances);
        if (!d->stats)
                run_log(o, DISPATCHER_LOG_WARNING, "no accounting file in the runtime directory: pacectl status "
                        "shows no delivered utilization");
        if (o->watchdog_ns > 0 && o->watchdog_ping) {
                uint64_t every = watchdog_look_interval(o->watchdog_ns);
                struct itimerspec its = {
                        .it_value = { .tv_sec = (time_t) (every / NSEC_PER_SEC),
                                      .tv_nsec = (long) (every % NSEC_PER_SEC) },
                        .it_interval = { .tv_sec = (time_t) (every / NSEC_PER_SEC),
                                         .tv_nsec = (long) (every % NSEC_PER_SEC) },
                };
                wfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
                pfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
                if (wfd < 0 || pfd < 0 || timerfd_settime(wfd, 0, &its, NULL) < 0)
                        return negative_errno();
                run_log(o, DISPATCHER_LOG_INFO, "watchdog: every %" PRIu64 " ms, WATCHDOG=1 only when every "
                        "dispatch loop has advanced", (uint64_t) (every / NSEC_PER_MSEC));
        }
        ifd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
        if (ifd < 0)
                return negative_errno();
        if (inotify_add_watch(ifd, d->runtime_dir,
                              IN_CREATE | IN_MOVED_TO | IN_MODIFY | IN_CLOSE_WRITE | IN_ATTRIB | IN_ONLYDIR) < 0) {
                r = negative_errno();
                snprintf(message, sizeof(message), "cannot watch the runtime directory %s: %s", d->runtime_dir,
                         strerror(-r));
                log_fn(DISPATCHER_LOG_ERROR, message, userdata);
                return r;
        }

        /* Before the loops see any table: nothing of ours is running yet. */
        sweep(d, o, true);

        bool check = true;
        for (;;) {
                struct pollfd p[] = {
                        { .fd = sfd, .events = POLLIN },
                        { .fd = ifd, .events = POLLIN },
                        { .fd = tfd, .events = POLLIN },
                        { .fd = log_ring_fd(d->log), .events = POLLIN },
                        { .fd = wfd, .events = POLLIN },
                        { .fd = pfd, .events = POLLIN },
                        { .fd = d->housekeeping_efd, .events = POLLIN },
                        { .fd = hfd, .events = POLLIN },
                };

                if (check) {
                        check = false;
                        r = dispatcher_open_table(d, log_fn, userdata);
                        if (r == 0 || r == -ENOENT) {
                                retries = 0;
                        } else if (r != -EMEDIUMTYPE && ++retries < OPEN_RETRIES) {
                                /* (A FIFO or a directory never turns into a
                                 * table: said at once, below.) */
                                /* Probably a broker still writing the header. */
                                arm_timer(tfd, OPEN_RETRY_NS);
                        } else if (r != d->last_open_error || d->last_open_error_ino != d->table_ino) {
                                d->last_open_error = r;
                                d->last_open_error_ino = d->table_ino;
                                snprintf(message, sizeof(message), "cannot use table %s: %s; waiting for a new one",
                                         d->table_path,
                                         r == -EBADMSG ? "not a pace table (size or magic)" :
                                         r == -EMEDIUMTYPE ? "not a regular file" :
                                         r == -EPROTO ? "table version or layout differs from this dispatcher's" :
                                         strerror(-r));
                                log_fn(DISPATCHER_LOG_WARNING, message, userdata);
                                retries = 0;
                        }
                }

                if (poll(p, ELEMENTSOF(p), -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        return negative_errno();
                }
                if (p[3].revents & POLLIN)
                        (void) log_ring_drain(d->log, log_fn, userdata);
                if (p[0].revents & POLLIN) {
                        struct signalfd_siginfo si;
                        if (read(sfd, &si, sizeof(si)) != sizeof(si))
                                continue;
                        if (si.ssi_signo == SIGHUP) {
                                reload(d, o);
                                continue;
                        }
                        if (si.ssi_signo == SIGUSR2) {
                                if (!o->test_hooks) {
                                        run_log(o, DISPATCHER_LOG_WARNING, "SIGUSR2 ignored (test hooks are off)");
                                        continue;
                                }
                                run_log(o, DISPATCHER_LOG_WARNING,
                                        "test hook (SIGUSR2): wedging every dispatch loop at its next promotion "
                                        "or wake-up; the watchdog should kill this process");
                                for (uint32_t i = 0; i < d->n_loops; i++)
                                        atomic_store(&d->loops[i].hang, true);
                                kick_until(d, loop_exited, 0, 0);
                                continue;
                        }
                        if (si.ssi_signo == SIGABRT) {
                                /* systemd's watchdog (or an admin): a loop may
                                 * be wedged with a slot owner promoted, so
                                 * demote from here, then die as asked. */
                                atomic_store(&d->stop, true);
                                sweep(d, o, false);
                                (void) log_ring_drain(d->log, log_fn, userdata);
                                signal(SIGABRT, SIG_DFL);
                                sigemptyset(&mask);
                                sigaddset(&mask, SIGABRT);
                                pthread_sigmask(SIG_UNBLOCK, &mask, NULL);
                                raise(SIGABRT);
                                _exit(EXIT_FAILURE);
                        }
                        if (o->stopping)
                                o->stopping(userdata);
                        snprintf(message, sizeof(message), "%s received, restoring every thread and exiting",
                                 strsignal((int) si.ssi_signo));
                        log_fn(DISPATCHER_LOG_INFO, message, userdata);
                        break;
                }
                if (p[1].revents & POLLIN) {
                        char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
                        ssize_t n;
                        while ((n = read(ifd, buf, sizeof(buf))) > 0)
                                for (char *q = buf; q < buf + n;) {
                                        struct inotify_event *ev = (struct inotify_event *) q;
                                        q += sizeof(*ev) + ev->len;
                                        if (ev->mask & IN_Q_OVERFLOW ||
                                            (ev->len > 0 && strcmp(ev->name, PACE_TABLE_NAME) == 0))
                                                check = true;
                                }
                        if (check)
                                retries = 0;
                }
                if (p[2].revents & POLLIN) {
                        uint64_t v;
                        (void) !read(tfd, &v, sizeof(v));
                        check = true;
                }
                if (p[4].revents & POLLIN) {
                        uint64_t v;
                        (void) !read(wfd, &v, sizeof(v));
                        watch(d, o, false, pfd);
                }
                if (p[5].revents & POLLIN) {
                        uint64_t v;
                        (void) !read(pfd, &v, sizeof(v));
                        watch(d, o, true, pfd);
                }
                if (p[6].revents & POLLIN) {
                        uint64_t v;
                        (void) !read(d->housekeeping_efd, &v, sizeof(v));
                        arm_timer(hfd, HOUSEKEEPING_NS);
                }
                if (p[7].revents & POLLIN) {
                        uint64_t v;
                        (void) !read(hfd, &v, sizeof(v));
                        /* Periodic only while there are groups: an idle
                         * dispatcher wakes for nothing. A v1 list costs the
                         * kernel every task in the group, so a client with
                         * thousands of threads stretches the interval: the
                         * work stays under 2% of a CPU (the next round waits
                         * 50 times what this one took). */
                        uint64_t started = now_ns();
                        char why[512] = "";
                        size_t watched = (d->groups ? group_set_housekeep(d->groups, o->make_scope, o->userdata, why,
                                                                          sizeof(why)) : 0) +
                                         tree_set_housekeep(d->trees);
                        if (why[0])
                                run_log(o, DISPATCHER_LOG_WARNING, "%s; the reservation's members are found in "
                                        "/proc", why);
                        if (watched > 0)
                                arm_timer(hfd, MAX(HOUSEKEEPING_NS, 50 * (now_ns() - started)));
                }
        }

        /* Stop here, not in dispatcher_free(), so the restore messages are
         * still written. */
        atomic_store(&d->stop, true);
        kick_until(d, loop_exited, 0, 5 * NSEC_PER_SEC);
        for (uint32_t i = 0; i < d->n_loops; i++)
                if (d->loops[i].created && atomic_load(&d->loops[i].state) == LOOP_EXITED) {
                        pthread_join(d->loops[i].thread, NULL);
                        d->loops[i].created = false;
                }
        (void) log_ring_drain(d->log, log_fn, userdata);
        return 0;
}

void dispatcher_resource_needs(const Dispatcher *d, uint64_t *ret_memlock, uint64_t *ret_files,
                               uint64_t *ret_threads) {
        uint64_t per_loop = 2 * sizeof(PaceTableBuffer) +
                            2 * ((uint64_t) pace_config_frame_slots(&d->config) + 1) * sizeof(FrameRun) +
                            4 * ((uint64_t) PACE_MAX_RESERVATIONS + 1) * sizeof(Held *) +
                            ((uint64_t) PACE_MAX_RESERVATIONS + 1) *
                                    (sizeof(bool) + sizeof(uint32_t) + sizeof(FrameScratch)) +
                            LOOP_STACK_SIZE + 2 * 4096;
        /* The mapping in use, one being handed over, the ones kept while a
         * thread might still read them, and the main thread's scratch copy. */
        uint64_t tables = (2 + ELEMENTSOF(d->leaked)) * PACE_TABLE_FILE_SIZE + sizeof(PaceTableBuffer);
        /* Code, libraries, the main stack, and heap for held processes and
         * their threads (measured: 9.3 MiB locked in all, idle on 2 CPUs,
         * of which about 6 MiB are not the buffers counted below). */
        uint64_t base = 12ULL * 1024 * 1024;

        *ret_memlock = base + tables + d->n_loops * per_loop;
        /* Per reserved process a pidfd, a /proc directory, (strict) a
         * freezer.state and its group's tasks, cgroup.procs and usage; per loop a few transient ones; the main thread's
         * signalfd, inotify, timers, eventfd, stdio, notify socket. */
        *ret_files = 6ULL * PACE_MAX_RESERVATIONS + 4ULL * d->n_loops + 32;
        *ret_threads = d->n_loops + 1;
}

Dispatcher *dispatcher_free(Dispatcher *d) {
        if (!d)
                return NULL;

        atomic_store(&d->stop, true);
        kick_until(d, loop_exited, 0, 5 * NSEC_PER_SEC);
        for (uint32_t i = 0; i < d->n_loops; i++) {
                CpuLoop *l = &d->loops[i];
                if (l->created && atomic_load(&l->state) == LOOP_EXITED)
                        pthread_join(l->thread, NULL);
                else if (l->created)
                        continue; /* wedged: leave its memory alone */
                free(l->cur);
                free(l->spare);
                free(l->held);
                free(l->next_held);
                free(l->by_owner);
                free(l->next_by_owner);
                free(l->owner_live);
                free(l->owner_period);
                free(l->owner_scratch);
                free(l->runs);
                free(l->next_runs);
        }
        free(d->loops);
        free(d->scratch);
        watchdog_free(d->watchdog);
        if (d->freezer) {
                (void) freezer_anchor(d, false);
                (void) rmdir(d->freezer_base);
        }
        group_set_free(d->groups);
        tree_set_free(d->trees);
        stats_file_unmap(d->stats);
        table_reader_free((TableReader *) atomic_load(&d->reader));
        for (size_t i = 0; i < ELEMENTSOF(d->leaked); i++)
                table_reader_free(d->leaked[i]);
        thread_registry_free(d->registry);
        log_ring_free(d->log);
        safe_close(d->housekeeping_efd);
        free(d->runtime_dir);
        free(d->table_path);
        free(d);
        return NULL;
}
