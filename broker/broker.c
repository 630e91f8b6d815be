/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "broker.h"
#include "macro.h"
#include "pace-stats.h"
#include "pace.pb-c.h"
#include "parse-util.h"
#include "proc-util.h"
#include "rate-limit.h"
#include "table-check.h"

/* A thread count the dispatcher reports is shown up to this. */
#define PACE_MAX_THREADS_REPORTED 65536u

typedef struct Reservation {
        uint64_t id;
        uid_t owner_uid; /* who asked: may release it */
        int pidfd;       /* the process it covers; readable once that exits */
        void *watch;
        uint32_t threads; /* covered at the grant */
        /* Its target's CPU affinity at the grant (0: not known, for one
         * adopted from a previous broker): where a move off an offline CPU
         * may take it. Not read again then, because the dispatcher has
         * pinned the threads to the CPU that went away. */
        uint64_t allowed_cpus;
        /* Thread scope: the thread and its start time, so its end is
         * noticed (broker_tick()) even when the tid is reused. 0: not
         * known (adopted). */
        pid_t tid;
        uint64_t thread_start_time;
} Reservation;

/* A nice level the dispatcher holds a thread at (NiceRequest). */
typedef struct NiceLevel {
        pid_t pid;
        pid_t tid;
        uint64_t start_time;
        uint64_t thread_start_time; /* 0: not known (adopted) */
        uid_t uid;
        int32_t nice;
        int pidfd;
} NiceLevel;

struct Broker {
        PaceConfig config;
        RateLimit rate;
        char *proc_root;
        BrokerHooks hooks;
        Plan *plan;
        TableWriter *table;
        uint64_t next_id;
        /* The dispatcher's accounting file (pace-stats.h), mapped read-only
         * while it is the same file; -1/NULL: none seen yet. */
        int runtime_dir_fd;
        const PaceStatsFile *stats;
        dev_t stats_dev;
        ino_t stats_ino;
        size_t n_reservations;
        Reservation reservations[PACE_MAX_RESERVATIONS];
        /* Peers of this uid (the broker's own) and root may ask on behalf
         * of another process: pace-rtkit runs as it. */
        uid_t delegate_uid;
        size_t n_nice;
        NiceLevel nice[PACE_MAX_NICE_THREADS];
};

_printf_(3, 4) static void broker_log(Broker *b, int priority, const char *fmt, ...) {
        char line[512];
        va_list ap;

        if (!b->hooks.log)
                return;
        va_start(ap, fmt);
        vsnprintf(line, sizeof(line), fmt, ap);
        va_end(ap);
        b->hooks.log(b->hooks.userdata, priority, line);
}

static void publish(Broker *b) {
        if (!b->table)
                return;
        PaceTableBuffer *buf = table_writer_begin(b->table);
        plan_export(b->plan, buf);
        buf->next_id = b->next_id;
        buf->n_nice = (uint32_t) b->n_nice;
        for (size_t i = 0; i < b->n_nice; i++)
                buf->nice[i] = (PaceTableNice) {
                        .pid = b->nice[i].pid,
                        .tid = b->nice[i].tid,
                        .start_time = b->nice[i].start_time,
                        .uid = (uint32_t) b->nice[i].uid,
                        .nice = b->nice[i].nice,
                };
        table_writer_publish(b->table);
}

/* Reads the table a previous broker left in the runtime directory and adopts
 * every reservation whose process still lives (same pid, same start time)
 * in exactly its slots. Anything doubtful is dropped with a log line; only
 * allocation failures are errors. */
static int adopt_previous_table(Broker *b, int dir_fd) {
        _cleanup_(table_reader_freep) TableReader *reader = NULL;
        _cleanup_free_ PaceTableBuffer *old = malloc(sizeof(PaceTableBuffer));
        _cleanup_free_ PaceTableBuffer *check = malloc(sizeof(PaceTableBuffer));
        static bool keep[PACE_MAX_RESERVATIONS];
        static int pidfds[PACE_MAX_RESERVATIONS];
        char err[256];
        size_t kept = 0;
        int r;

        if (!old || !check)
                return -ENOMEM;
        r = table_reader_openat(dir_fd, PACE_TABLE_NAME, &reader);
        if (r == -ENOENT)
                return 0;
        if (r < 0) {
                broker_log(b, LOG_WARNING, "previous table not adopted: cannot map it: %s", strerror(-r));
                return 0;
        }
        for (int tries = 0; tries < 100; tries++) {
                r = table_reader_snapshot(reader, old, NULL);
                if (r != -EAGAIN)
                        break;
        }
        if (r == -ENODATA)
                return 0;
        if (r < 0) {
                broker_log(b, LOG_WARNING, "previous table not adopted: cannot read it: %s", strerror(-r));
                return 0;
        }
        /* Written by a broker of the same user, but checked like any table:
         * the configuration may have changed since. */
        if (table_check(old, &b->config, err, sizeof(err)) < 0) {
                broker_log(b, LOG_WARNING, "previous table not adopted: %s", err);
                return 0;
        }

        for (uint32_t i = 0; i < old->n_reservations; i++) {
                const PaceTableReservation *res = &old->reservations[i];
                ProcInfo info;
                bool seen = false;

                keep[i] = false;
                pidfds[i] = -EBADF;
                /* The pieces of a split reservation share their fate (and
                 * one pidfd, held by the first). */
                for (uint32_t j = 0; j < i && !seen; j++)
                        if (old->reservations[j].id == res->id) {
                                keep[i] = keep[j];
                                seen = true;
                        }
                if (seen)
                        continue;
                if (pidfd_open_checked(res->pid, &pidfds[i]) < 0 ||
                    proc_info_read(b->proc_root, res->pid, &info) < 0 || pidfd_alive(pidfds[i]) < 0 ||
                    info.start_time != res->start_time) {
                        broker_log(b, LOG_INFO, "reservation %" PRIu64 " not adopted: process %" PRIi32 " is gone",
                                   res->id, res->pid);
                        pidfds[i] = safe_close(pidfds[i]);
                        continue;
                }
                keep[i] = true;
        }

        b->next_id = MAX(b->next_id, old->next_id);
        for (uint32_t i = 0; i < old->n_reservations; i++)
                b->next_id = MAX(b->next_id, old->reservations[i].id + 1);
        r = plan_restore(b->plan, old, keep);
        if (r >= 0) {
                memset(check, 0, sizeof(*check));
                plan_export(b->plan, check);
                r = table_check(check, &b->config, err, sizeof(err)) < 0 ? -EBADMSG : 0;
        }
        if (r < 0) {
                broker_log(b, LOG_WARNING, "previous table not adopted: %s", r == -EBADMSG ? err : strerror(-r));
                plan_free(b->plan);
                b->plan = NULL;
                for (uint32_t i = 0; i < old->n_reservations; i++)
                        safe_close(pidfds[i]);
                return plan_new(&b->config, &b->plan);
        }

        for (uint32_t i = 0; i < old->n_reservations; i++) {
                const PaceTableReservation *res = &old->reservations[i];
                if (!keep[i] || pidfds[i] < 0)
                        continue; /* gone, or a later piece of one adopted already */
                Reservation *nr = &b->reservations[b->n_reservations];
                *nr = (Reservation) {
                        .id = res->id,
                        .owner_uid = (uid_t) res->uid,
                        .pidfd = pidfds[i],
                        .tid = res->scope == PACE_TABLE_SCOPE_THREAD ? res->tid : 0,
                };
                if (b->hooks.watch_pidfd && b->hooks.watch_pidfd(b->hooks.userdata, nr->pidfd, nr->id, &nr->watch) < 0) {
                        /* Unwatched, it would never end: give it up now. */
                        (void) plan_remove(b->plan, nr->id);
                        safe_close(nr->pidfd);
                        continue;
                }
                b->n_reservations++;
                kept++;
        }
        broker_log(b, LOG_INFO, "adopted %zu reservation(s) from the previous table", kept);

        for (uint32_t i = 0; i < old->n_nice && b->n_nice < PACE_MAX_NICE_THREADS; i++) {
                const PaceTableNice *n = &old->nice[i];
                _cleanup_close_ int pidfd = -EBADF;
                ProcInfo info;

                if (pidfd_open_checked(n->pid, &pidfd) < 0 || proc_info_read(b->proc_root, n->pid, &info) < 0 ||
                    pidfd_alive(pidfd) < 0 || info.start_time != n->start_time)
                        continue; /* the dispatcher puts its thread back by itself */
                b->nice[b->n_nice++] = (NiceLevel) {
                        .pid = n->pid,
                        .tid = n->tid,
                        .start_time = n->start_time,
                        .uid = (uid_t) n->uid,
                        .nice = n->nice,
                        .pidfd = TAKE_FD(pidfd),
                };
        }
        return 0;
}

int broker_new(const BrokerOptions *options, Broker **ret) {
        _cleanup_(broker_freep) Broker *b = NULL;
        int r;

        b = calloc(1, sizeof(*b));
        if (!b)
                return -ENOMEM;
        b->config = *options->config;
        b->hooks = options->hooks;
        b->next_id = 1;
        b->runtime_dir_fd = -EBADF;
        b->delegate_uid = geteuid();
        b->proc_root = strdup(options->proc_root ? options->proc_root : "/proc");
        if (!b->proc_root)
                return -ENOMEM;
        if (options->runtime_dir_fd >= 0) {
                b->runtime_dir_fd = fcntl(options->runtime_dir_fd, F_DUPFD_CLOEXEC, 3);
                if (b->runtime_dir_fd < 0)
                        return negative_errno();
        }

        r = plan_new(&b->config, &b->plan);
        if (r < 0)
                return r;
        if (options->runtime_dir_fd >= 0) {
                /* Before the old table is replaced: a broker that restarts
                 * keeps what its predecessor granted. */
                r = adopt_previous_table(b, options->runtime_dir_fd);
                if (r < 0)
                        return r;
                r = table_writer_new(options->runtime_dir_fd, &b->table);
                if (r < 0)
                        return r;
                /* Publish the empty table at once: the dispatcher then knows
                 * the broker is up and has nothing to do. */
                publish(b);
        }
        *ret = TAKE_PTR(b);
        return 0;
}

Broker *broker_free(Broker *b) {
        if (!b)
                return NULL;
        for (size_t i = 0; i < b->n_reservations; i++) {
                if (b->hooks.unwatch && b->reservations[i].watch)
                        b->hooks.unwatch(b->hooks.userdata, b->reservations[i].watch);
                safe_close(b->reservations[i].pidfd);
        }
        for (size_t i = 0; i < b->n_nice; i++)
                safe_close(b->nice[i].pidfd);
        /* The table stays as it is: the dispatcher keeps enforcing the last
         * good one while the broker is away (it notices dead processes by
         * itself), and a restarted broker picks the reservations up again. */
        table_writer_free(b->table);
        plan_free(b->plan);
        if (b->stats)
                munmap((void *) b->stats, sizeof(PaceStatsFile));
        safe_close(b->runtime_dir_fd);
        free(b->proc_root);
        free(b);
        return NULL;
}

size_t broker_n_reservations(const Broker *b) {
        return b->n_reservations;
}

uint64_t broker_generation(const Broker *b) {
        return b->table ? table_writer_generation(b->table) : 0;
}

static Reservation *find_reservation(Broker *b, uint64_t id) {
        for (size_t i = 0; i < b->n_reservations; i++)
                if (b->reservations[i].id == id)
                        return &b->reservations[i];
        return NULL;
}

static void drop_reservation(Broker *b, Reservation *res) {
        size_t i = (size_t) (res - b->reservations);

        (void) plan_remove(b->plan, res->id);
        if (b->hooks.unwatch && res->watch)
                b->hooks.unwatch(b->hooks.userdata, res->watch);
        safe_close(res->pidfd);
        b->reservations[i] = b->reservations[--b->n_reservations];
        publish(b);
}

void broker_process_exited(Broker *b, uint64_t id) {
        Reservation *res = find_reservation(b, id);
        if (!res)
                return;
        const PlanEntry *e = plan_find(b->plan, id);
        broker_log(b, LOG_INFO, "reservation %" PRIu64 " ended: process %" PRIi32 " exited", id,
                   e ? (int32_t) e->pid : -1);
        drop_reservation(b, res);
}

/* Whether the peer may take another request now; takes a token if so.
 * Root is never limited. */
static bool rate_allows(Broker *b, const BrokerPeer *peer) {
        return peer->uid == 0 || rate_limit_take(&b->rate, b->config.max_requests_per_second, peer->uid, peer->now_ns);
}

/* Root always; otherwise anyone, or members of allowed_groups if set. */
static bool group_allows(const Broker *b, const BrokerPeer *peer) {
        if (peer->uid == 0 || !b->config.allowed_groups_set)
                return true;
        for (uint32_t i = 0; i < b->config.n_allowed_groups; i++) {
                if (b->config.allowed_groups[i] == peer->gid)
                        return true;
                for (size_t j = 0; j < peer->n_groups; j++)
                        if (b->config.allowed_groups[i] == peer->groups[j])
                                return true;
        }
        return false;
}

/* Replies. Each builder packs a complete Response; the caller frees it. */

static int pack_response(Pace__Response *resp, uint8_t **ret, size_t *ret_size) {
        size_t size = pace__response__get_packed_size(resp);
        uint8_t *buf;

        if (size > PACE_MAX_MESSAGE_SIZE)
                return -EMSGSIZE;
        buf = malloc(size ? size : 1);
        if (!buf)
                return -ENOMEM;
        pace__response__pack(resp, buf);
        *ret = buf;
        *ret_size = size;
        return 0;
}

int broker_error_reply(int code, const char *message, uint8_t **ret_reply, size_t *ret_reply_size) {
        Pace__Response resp = PACE__RESPONSE__INIT;
        Pace__Error err = PACE__ERROR__INIT;

        err.code = (Pace__ErrorCode) code;
        err.message = (char *) message;
        resp.version = PACE_PROTOCOL_VERSION;
        resp.body_case = PACE__RESPONSE__BODY_ERROR;
        resp.error = &err;
        return pack_response(&resp, ret_reply, ret_reply_size);
}

_printf_(4, 5) static int error_reply(uint8_t **ret, size_t *ret_size, int code, const char *fmt, ...) {
        char message[512];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(message, sizeof(message), fmt, ap);
        va_end(ap);
        return broker_error_reply(code, message, ret, ret_size);
}

/* pace.proto's Kind and the planner's: the wire has an "unspecified" 0,
 * which never reaches the planner. */
static Pace__Kind wire_kind(PlanKind kind) {
        switch (kind) {
        case PLAN_KIND_SERVER:
                return PACE__KIND__KIND_SERVER;
        case PLAN_KIND_ALIGNED:
                return PACE__KIND__KIND_ALIGNED;
        default:
                return PACE__KIND__KIND_SLOTS;
        }
}

static void grant_from_entry(const Broker *b, const PlanEntry *e, Pace__Grant *g) {
        pace__grant__init(g);
        g->id = e->id;
        g->pid = e->pid;
        g->uid = (uint32_t) e->uid;
        g->cpu = e->cpu;
        g->period_ns = (uint64_t) e->period_slots * b->config.slot_ns;
        g->budget_ns = (uint64_t) e->budget_slots * b->config.slot_ns;
        g->slot_ns = b->config.slot_ns;
        g->requested_period_ns = e->requested_period_ns;
        g->requested_utilization_ppm = e->requested_utilization_ppm;
        g->has_scope = true;
        g->scope = (Pace__Scope) e->scope;
        g->has_kind = true;
        g->kind = wire_kind(plan_flags_kind(e->flags));
        if (e->scope == PACE_TABLE_SCOPE_THREAD) {
                g->has_tid = true;
                g->tid = e->tid;
        }
        uint32_t phase;
        if (plan_phase(b->plan, e->id, &phase) == 0) {
                g->has_phase_ns = true;
                g->phase_ns = (uint64_t) phase * b->config.slot_ns;
        }
        for (size_t i = 0; i < b->n_reservations; i++) {
                if (b->reservations[i].id != e->id)
                        continue;
                if (b->reservations[i].threads > 0) {
                        g->has_threads = true;
                        g->threads = b->reservations[i].threads;
                }
        }
        if (e->flags & PACE_RES_ON_BEHALF) {
                g->has_on_behalf = true;
                g->on_behalf = true;
        }
}

/* A split grant's pieces, for a reserve reply: storage that lives as long
 * as the reply is being packed. (A change is never split: it stays on the
 * reservation's one CPU.) */
typedef struct GrantPieces {
        Pace__Piece piece[PACE_MAX_CPUS];
        Pace__Piece *ptr[PACE_MAX_CPUS];
} GrantPieces;

static void grant_add_pieces(const Broker *b, uint64_t id, Pace__Grant *g, GrantPieces *store) {
        size_t n = 0;

        for (size_t i = 0; i < plan_n_entries(b->plan) && n < PACE_MAX_CPUS; i++) {
                const PlanEntry *e = plan_entry(b->plan, i);
                if (e->id != id || !(e->flags & PACE_RES_PIECE))
                        continue;
                pace__piece__init(&store->piece[n]);
                store->piece[n].cpu = e->cpu;
                store->piece[n].budget_ns = (uint64_t) e->budget_slots * b->config.slot_ns;
                store->ptr[n] = &store->piece[n];
                n++;
        }
        if (n > 1) {
                g->n_pieces = n;
                g->pieces = store->ptr;
        }
}

/* "CPU 1" or, split, "CPUs 0+1": from a grant with its pieces added. */
static const char *format_grant_cpus(const Pace__Grant *g, char *buf, size_t size) {
        size_t used;

        if (g->n_pieces < 2) {
                snprintf(buf, size, "CPU %" PRIi32, g->cpu);
                return buf;
        }
        used = (size_t) snprintf(buf, size, "CPUs ");
        for (size_t i = 0; i < g->n_pieces && used < size; i++)
                used += (size_t) snprintf(buf + used, size - used, "%s%" PRIi32, i ? "+" : "", g->pieces[i]->cpu);
        return buf;
}

static int plan_error_code(int r) {
        switch (r) {
        case -ERANGE:
        case -ENODEV:
                return PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT;
        case -EDQUOT:
        case -E2BIG:
                return PACE__ERROR_CODE__ERROR_LIMIT_EXCEEDED;
        case -ENOSPC:
                return PACE__ERROR_CODE__ERROR_NO_CAPACITY;
        default:
                return PACE__ERROR_CODE__ERROR_INTERNAL;
        }
}

/* Where the target may run: the main thread's CPU affinity for a process or
 * tree, the thread's own for a thread scope; from the kernel, never from the
 * message. Read while the pidfd holds the process and checked against it
 * afterwards, like its identity, so a reused pid cannot lend its affinity.
 * While the dispatcher holds a reservation's threads it has pinned them to
 * its CPU, and it gives them their own affinity back only at its next frame
 * boundary after a release: a process reserved again within that frame is
 * read as pinned to its old CPU.
 * 0 with the mask, or 1 after writing the refusal (or negative errno). */
static int read_allowed_cpus(Broker *b, pid_t pid, uint32_t scope, pid_t tid, int pidfd, uint64_t *ret_mask,
                             uint8_t **reply, size_t *reply_size) {
        bool thread = scope == PACE_TABLE_SCOPE_THREAD;
        uint64_t mask = 0;
        int r, alive;

        r = proc_cpus_allowed(b->proc_root, pid, thread ? tid : pid, &mask);
        alive = pidfd_alive(pidfd);
        if (alive == -ESRCH)
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_NO_SUCH_PROCESS,
                                   "no process with pid %" PRIi32, (int32_t) pid) ?: 1;
        if (r == -ESRCH && thread)
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_NO_SUCH_PROCESS,
                                   "pid %" PRIi32 " has no thread %" PRIi32, (int32_t) pid, tid) ?: 1;
        if (r < 0 || alive < 0)
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_INTERNAL,
                                   "cannot read the CPU affinity of %s %" PRIi32 ": %s", thread ? "thread" : "pid",
                                   (int32_t) (thread ? tid : pid), strerror(r < 0 ? -r : -alive)) ?: 1;
        /* The kernel never leaves a task without a CPU: an empty mask means
         * every CPU it may use is numbered 64 or above. */
        if (mask == 0)
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT,
                                   "%s %" PRIi32 " may run only on CPUs numbered 64 or above, and pace manages CPUs "
                                   "0-63 at most; change its affinity", thread ? "thread" : "pid",
                                   (int32_t) (thread ? tid : pid)) ?: 1;
        *ret_mask = mask;
        return 0;
}

/* How a refused target is described: a reservation and a nice level are
 * checked alike, each refusal in the words of its request. */
typedef struct TargetWords {
        const char *name_process; /* "... is a thread, not a process; <this> its process" */
        const char *kernel;       /* after "pid N is a kernel thread" */
        const char *own;          /* after "uid N may " */
        const char *root;         /* after "pid N runs as root" */
} TargetWords;

static const TargetWords reserve_words = {
        .name_process = "reserve",
        .kernel = "; only user processes can be reserved",
        .own = "reserve only its own processes",
        .root = " (a real, effective, saved or file-system uid 0); root's processes can be reserved only where "
                "pace.json sets \"reserve_root_processes\": true",
};

static const TargetWords nice_words = {
        .name_process = "name",
        .kernel = "",
        .own = "renice only its own threads",
        .root = "; root's threads are reniced only where pace.json sets \"reserve_root_processes\": true",
};

/* Opens process pid and reads what it is: the pidfd first, its identity
 * second, that it still lives third, so all of it is about the process the
 * pidfd holds even if the pid is reused in between. With tid > 0 the
 * thread's start time is read in the same window. For the caller itself
 * (use_peer_pidfd), the kernel's pidfd from the connection is better still.
 * 0 with the pidfd, or 1 after writing the refusal (or negative errno). */
static int open_target(Broker *b, const BrokerPeer *peer, pid_t pid, bool use_peer_pidfd, pid_t tid,
                       const TargetWords *words, int *ret_pidfd, ProcInfo *ret_info,
                       uint64_t *ret_thread_start_time, uint8_t **reply, size_t *reply_size) {
        _cleanup_close_ int pidfd = -EBADF;
        int r;

        if (use_peer_pidfd) {
                pidfd = fcntl(peer->pidfd, F_DUPFD_CLOEXEC, 3);
                if (pidfd < 0)
                        return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_INTERNAL,
                                           "cannot keep a handle on the calling process: %s", strerror(errno)) ?: 1;
        } else {
                r = pidfd_open_checked(pid, &pidfd);
                /* Kernels say EINVAL (older) or ENOENT (6.9+) for a thread
                 * that is not its process's leader. */
                if (r == -EINVAL || r == -ENOENT)
                        return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT,
                                           "%" PRIi32 " is a thread, not a process; %s its process "
                                           "(the Tgid in /proc/%" PRIi32 "/status)", (int32_t) pid,
                                           words->name_process, (int32_t) pid) ?: 1;
                if (r == -ESRCH)
                        return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_NO_SUCH_PROCESS,
                                           "no process with pid %" PRIi32, (int32_t) pid) ?: 1;
                if (r < 0)
                        return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_INTERNAL,
                                           "cannot open pid %" PRIi32 ": %s", (int32_t) pid, strerror(-r)) ?: 1;
        }
        r = proc_info_read(b->proc_root, pid, ret_info);
        if (r == 0 && tid > 0) {
                r = proc_thread_start_time(b->proc_root, pid, tid, ret_thread_start_time);
                if (r == -ESRCH && pidfd_alive(pidfd) == 0)
                        return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_NO_SUCH_PROCESS,
                                           "pid %" PRIi32 " has no thread %" PRIi32, (int32_t) pid, tid) ?: 1;
        }
        if (r == 0)
                r = pidfd_alive(pidfd);
        if (r == -ESRCH)
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_NO_SUCH_PROCESS,
                                   "no process with pid %" PRIi32, (int32_t) pid) ?: 1;
        if (r < 0)
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_INTERNAL,
                                   "cannot read /proc for pid %" PRIi32 ": %s", (int32_t) pid, strerror(-r)) ?: 1;
        *ret_pidfd = TAKE_FD(pidfd);
        return 0;
}

/* Whether the peer may have process pid (as open_target() read it) reserved
 * or reniced: a user process of its own uid (root: anyone's), and root's
 * own processes only where the configuration allows. 0, or 1 after writing
 * the refusal (or negative errno). */
static int target_permitted(Broker *b, const BrokerPeer *peer, pid_t pid, const ProcInfo *info,
                            const TargetWords *words, uint8_t **reply, size_t *reply_size) {
        if (info->kernel_thread)
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_PERMISSION_DENIED,
                                   "pid %" PRIi32 " is a kernel thread%s", (int32_t) pid, words->kernel) ?: 1;
        if (peer->uid != 0 && info->uid != peer->uid)
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_PERMISSION_DENIED,
                                   "pid %" PRIi32 " belongs to uid %u; uid %u may %s", (int32_t) pid,
                                   (unsigned) info->uid, (unsigned) peer->uid, words->own) ?: 1;
        if (info->root && !b->config.reserve_root_processes)
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_PERMISSION_DENIED,
                                   "pid %" PRIi32 " runs as root%s", (int32_t) pid, words->root) ?: 1;
        return 0;
}

/* Opens the target and checks it is one the peer may reserve. On refusal
 * writes a reply and returns 1; on success returns 0 with the pidfd. */
static int resolve_target(Broker *b, const BrokerPeer *peer, const Pace__ReserveRequest *req, pid_t *ret_pid,
                          ProcInfo *ret_info, int *ret_pidfd, uint32_t *ret_threads, uint64_t *ret_allowed_cpus,
                          uint8_t **reply, size_t *reply_size) {
        _cleanup_close_ int pidfd = -EBADF;
        pid_t pid = req->has_pid ? req->pid : peer->pid;
        int r;

        if (req->has_pid && req->pid <= 0)
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT,
                                   "pid %" PRIi32 " is not a process id; leave pid out to reserve the calling process",
                                   req->pid) ?: 1;
        if (pid == 1)
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_PERMISSION_DENIED,
                                   "pid 1 (init) can never be reserved") ?: 1;
        uint32_t scope = req->has_scope ? (uint32_t) req->scope : PACE_TABLE_SCOPE_PROCESS;
        if (scope > PACE_TABLE_SCOPE_TREE)
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT,
                                   "scope %" PRIu32 " does not exist: use process (0), thread (1) or tree (2)",
                                   scope) ?: 1;
        if (scope == PACE_TABLE_SCOPE_THREAD && (!req->has_tid || req->tid <= 0))
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT,
                                   "the thread scope needs the thread's id (tid), a positive number; "
                                   "got %s", req->has_tid ? "a non-positive one" : "none") ?: 1;
        if (scope != PACE_TABLE_SCOPE_THREAD && req->has_tid)
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT,
                                   "a thread id (tid %" PRIi32 ") belongs only with the thread scope", req->tid) ?: 1;

        r = open_target(b, peer, pid, !req->has_pid && peer->pidfd >= 0, 0, &reserve_words, &pidfd, ret_info,
                        NULL, reply, reply_size);
        if (r != 0)
                return r;
        uint32_t threads = 1;
        if (scope == PACE_TABLE_SCOPE_THREAD) {
                char task[96];
                struct stat st;
                snprintf(task, sizeof(task), "%s/%" PRIi32 "/task/%" PRIi32, b->proc_root, (int32_t) pid, req->tid);
                if (stat(task, &st) < 0)
                        return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_NO_SUCH_PROCESS,
                                           "pid %" PRIi32 " has no thread %" PRIi32, (int32_t) pid, req->tid) ?: 1;
        } else if ((scope == PACE_TABLE_SCOPE_TREE ? proc_count_tree_threads(b->proc_root, pid, 4096, &threads)
                                                   : proc_count_threads(b->proc_root, pid, &threads)) == 0 &&
                   threads > b->config.max_threads_per_reservation)
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_LIMIT_EXCEEDED,
                                   "pid %" PRIi32 " has %" PRIu32 " threads%s; a reservation covers at most %" PRIu32
                                   " (max_threads_per_reservation): the dispatcher moves each of them at every "
                                   "switch", (int32_t) pid, threads,
                                   scope == PACE_TABLE_SCOPE_TREE ? " with its descendants" : "",
                                   b->config.max_threads_per_reservation) ?: 1;
        *ret_threads = threads;
        r = target_permitted(b, peer, pid, ret_info, &reserve_words, reply, reply_size);
        if (r != 0)
                return r;
        for (size_t i = 0; i < b->n_reservations; i++) {
                const PlanEntry *e = plan_find(b->plan, b->reservations[i].id);
                /* Same pid, even with another start time: that one's exit
                 * is about to be noticed, and the table holds one
                 * reservation per pid (or one per thread of it). */
                if (e && e->pid == pid && e->scope == PACE_TABLE_SCOPE_THREAD && scope == PACE_TABLE_SCOPE_THREAD &&
                    e->tid == req->tid)
                        return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT,
                                           "thread %" PRIi32 " of pid %" PRIi32 " already holds reservation %" PRIu64
                                           "; release it first", req->tid, (int32_t) pid, e->id) ?: 1;
                if (e && e->pid == pid && e->scope == PACE_TABLE_SCOPE_THREAD && scope == PACE_TABLE_SCOPE_THREAD)
                        continue;
                if (e && e->pid == pid)
                        return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT,
                                           "pid %" PRIi32 " already holds reservation %" PRIu64
                                           "; release it first (one reservation per process)",
                                           (int32_t) pid, e->id) ?: 1;
        }
        r = read_allowed_cpus(b, pid, scope, req->tid, pidfd, ret_allowed_cpus, reply, reply_size);
        if (r != 0)
                return r;
        *ret_pid = pid;
        *ret_pidfd = TAKE_FD(pidfd);
        return 0;
}

/* The reservation a release or change names, if the peer may touch it: 0
 * with *ret_res, or 1 after writing the refusal (or negative errno). */
static int owned_reservation(Broker *b, const BrokerPeer *peer, uint64_t id, const char *verb, Reservation **ret_res,
                             uint8_t **reply, size_t *reply_size) {
        Reservation *res = find_reservation(b, id);

        if (!res)
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_NO_SUCH_RESERVATION,
                                   "no reservation with id %" PRIu64 " (pacectl status lists them)", id) ?: 1;
        if (peer->uid != 0 && peer->uid != res->owner_uid)
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_PERMISSION_DENIED,
                                   "reservation %" PRIu64 " belongs to uid %u; uid %u may %s only its own", id,
                                   (unsigned) res->owner_uid, (unsigned) peer->uid, verb) ?: 1;
        *ret_res = res;
        return 0;
}

/* The kind a request asks for: `absent` when the field is missing or
 * unspecified (slots for a new reservation, the reservation's own for a
 * change). A value the protocol does not define is refused, naming the
 * field: protobuf-c passes any number through an enum field. Returns 0 with
 * *ret, or 1 after writing the refusal (or a negative errno). */
static int request_kind(bool has_kind, int kind, PlanKind absent, const char *absent_means, PlanKind *ret,
                        uint8_t **reply, size_t *reply_size) {
        switch (has_kind ? kind : PACE__KIND__KIND_UNSPECIFIED) {
        case PACE__KIND__KIND_UNSPECIFIED:
                *ret = absent;
                return 0;
        case PACE__KIND__KIND_SLOTS:
                *ret = PLAN_KIND_SLOTS;
                return 0;
        case PACE__KIND__KIND_SERVER:
                *ret = PLAN_KIND_SERVER;
                return 0;
        case PACE__KIND__KIND_ALIGNED:
                *ret = PLAN_KIND_ALIGNED;
                return 0;
        default:
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT,
                                   "kind %d does not exist: use slots (1), server (2) or aligned (3), or leave "
                                   "kind out for %s", kind, absent_means) ?: 1;
        }
}

/* A CPU field outside any machine's range: 1 after writing the refusal. */
static int bad_cpu_field(bool has_cpu, int32_t cpu, uint8_t **reply, size_t *reply_size) {
        if (!has_cpu || (cpu >= 0 && cpu < (int32_t) PACE_MAX_CPUS))
                return 0;
        return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT,
                           "CPU %" PRIi32 " does not exist; leave cpu out to let the broker choose", cpu) ?: 1;
}

/* The on-behalf reservation thread tid of pid already holds for uid, if
 * its process is still the one it was granted to. */
static Reservation *find_on_behalf_thread(Broker *b, pid_t pid, pid_t tid, uid_t uid) {
        for (size_t i = 0; i < b->n_reservations; i++) {
                Reservation *res = &b->reservations[i];
                const PlanEntry *e = plan_find(b->plan, res->id);
                if (e && (e->flags & PACE_RES_ON_BEHALF) && res->owner_uid == uid && e->pid == pid &&
                    e->scope == PACE_TABLE_SCOPE_THREAD && e->tid == tid && pidfd_alive(res->pidfd) == 0)
                        return res;
        }
        return NULL;
}

static int grant_reply(Broker *b, const PlanEntry *entry, uint8_t **reply, size_t *reply_size) {
        Pace__Response resp = PACE__RESPONSE__INIT;
        Pace__Grant grant;
        GrantPieces pieces;

        grant_from_entry(b, entry, &grant);
        grant_add_pieces(b, entry->id, &grant, &pieces);
        resp.version = PACE_PROTOCOL_VERSION;
        resp.body_case = PACE__RESPONSE__BODY_GRANT;
        resp.grant = &grant;
        return pack_response(&resp, reply, reply_size);
}

static int handle_reserve(Broker *b, const BrokerPeer *peer, bool on_behalf, const Pace__ReserveRequest *req,
                          uint8_t **reply, size_t *reply_size) {
        _cleanup_close_ int pidfd = -EBADF;
        char why[512] = "";
        ProcInfo info;
        PlanEntry entry;
        pid_t pid;
        int r;

        PlanKind kind;
        r = bad_cpu_field(req->has_cpu, req->cpu, reply, reply_size);
        if (r == 0)
                r = request_kind(req->has_kind, (int) req->kind, PLAN_KIND_SLOTS, "slots", &kind, reply,
                                 reply_size);
        if (r != 0)
                return r < 0 ? r : 0;
        /* Range errors first: they need no process lookup. */
        PlanRequest preq = {
                .id = b->next_id,
                .uid = peer->uid,
                .period_ns = req->period_ns,
                .utilization_ppm = req->utilization_ppm,
                .cpu = req->has_cpu ? req->cpu : -1,
                .kind = kind,
                .on_behalf = on_behalf,
        };
        r = plan_validate(b->plan, &preq, why, sizeof(why));
        if (r < 0) {
                broker_log(b, LOG_INFO, "uid %u pid %" PRIi32 ": refused: %s", (unsigned) peer->uid,
                           (int32_t) peer->pid, why);
                return error_reply(reply, reply_size, plan_error_code(r), "%s", why);
        }

        /* RealtimeKit1 callers ask again for a thread they were granted
         * (rtkit answers that with success): the same grant, nothing new. */
        if (on_behalf && req->has_scope && req->scope == PACE__SCOPE__SCOPE_THREAD && req->has_tid) {
                Reservation *res = find_on_behalf_thread(b, req->has_pid ? req->pid : peer->pid, req->tid,
                                                         peer->uid);
                const PlanEntry *e = res ? plan_find(b->plan, res->id) : NULL;
                if (e)
                        return grant_reply(b, e, reply, reply_size);
        }

        if (b->n_reservations >= b->config.max_reservations)
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_LIMIT_EXCEEDED,
                                   "the broker holds %zu reservations, its limit (max_reservations); try again when "
                                   "some have ended", b->n_reservations);

        uint32_t threads;
        uint64_t allowed_cpus;
        r = resolve_target(b, peer, req, &pid, &info, &pidfd, &threads, &allowed_cpus, reply, reply_size);
        if (r != 0)
                return r < 0 ? r : 0;

        preq.pid = pid;
        preq.start_time = info.start_time;
        preq.scope = req->has_scope ? (uint32_t) req->scope : PACE_TABLE_SCOPE_PROCESS;
        preq.tid = preq.scope == PACE_TABLE_SCOPE_THREAD ? req->tid : 0;
        preq.allowed_cpus = allowed_cpus;
        r = plan_admit(b->plan, &preq, &entry, why, sizeof(why));
        if (r < 0) {
                broker_log(b, LOG_INFO, "uid %u pid %" PRIi32 ": refused: %s", (unsigned) peer->uid,
                           (int32_t) peer->pid, why);
                return error_reply(reply, reply_size, plan_error_code(r), "%s", why);
        }

        uint64_t thread_start_time = 0;
        if (preq.scope == PACE_TABLE_SCOPE_THREAD)
                (void) proc_thread_start_time(b->proc_root, pid, preq.tid, &thread_start_time);
        Reservation *res = &b->reservations[b->n_reservations];
        *res = (Reservation) {
                .id = entry.id,
                .owner_uid = peer->uid,
                .pidfd = TAKE_FD(pidfd),
                .threads = threads,
                .allowed_cpus = allowed_cpus,
                .tid = preq.tid,
                .thread_start_time = thread_start_time,
        };
        if (b->hooks.watch_pidfd) {
                r = b->hooks.watch_pidfd(b->hooks.userdata, res->pidfd, res->id, &res->watch);
                if (r < 0) {
                        (void) plan_remove(b->plan, entry.id);
                        safe_close(res->pidfd);
                        return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_INTERNAL,
                                           "cannot watch pid %" PRIi32 ": %s", (int32_t) pid, strerror(-r));
                }
        }
        b->n_reservations++;
        b->next_id++;
        publish(b);

        Pace__Response resp = PACE__RESPONSE__INIT;
        Pace__Grant grant;
        GrantPieces pieces;
        grant_from_entry(b, &entry, &grant);
        grant_add_pieces(b, entry.id, &grant, &pieces);
        char p1[32], p2[32], u1[32];
        char where[256];
        broker_log(b, LOG_INFO, "reservation %" PRIu64 ": uid %u pid %" PRIi32 "%s on %s, %s, %s every %s"
                   " (asked %s every %s)", entry.id, (unsigned) peer->uid, (int32_t) pid,
                   on_behalf ? " (on its behalf)" : "",
                   format_grant_cpus(&grant, where, sizeof(where)), plan_kind_name(kind),
                   format_duration(p1, sizeof(p1), (uint64_t) entry.budget_slots * b->config.slot_ns),
                   format_duration(p2, sizeof(p2), (uint64_t) entry.period_slots * b->config.slot_ns),
                   format_ppm(u1, sizeof(u1), entry.requested_utilization_ppm),
                   format_duration((char[32]) {}, 32, entry.requested_period_ns));

        resp.version = PACE_PROTOCOL_VERSION;
        resp.body_case = PACE__RESPONSE__BODY_GRANT;
        resp.grant = &grant;
        return pack_response(&resp, reply, reply_size);
}

static void drop_nice(Broker *b, size_t i) {
        safe_close(b->nice[i].pidfd);
        b->nice[i] = b->nice[--b->n_nice];
}

static size_t nice_levels_of(const Broker *b, uid_t uid) {
        size_t n = 0;
        for (size_t i = 0; i < b->n_nice; i++)
                n += b->nice[i].uid == uid;
        return n;
}

static int handle_nice(Broker *b, const BrokerPeer *peer, const Pace__NiceRequest *req, uint8_t **reply,
                       size_t *reply_size) {
        _cleanup_close_ int pidfd = -EBADF;
        pid_t pid = req->has_pid ? req->pid : peer->pid;
        uint64_t thread_start_time;
        ProcInfo info;
        int r;

        if (req->nice < -20 || req->nice > 19)
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT,
                                   "nice level %" PRIi32 " does not exist; nice levels go from -20 to 19", req->nice);
        if (req->nice < b->config.rtkit_min_nice_level)
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_PERMISSION_DENIED,
                                   "nice level %" PRIi32 " is below %" PRIi32 ", the lowest pace grants "
                                   "(rtkit_min_nice_level)", req->nice, b->config.rtkit_min_nice_level);
        if (pid <= 0 || req->tid <= 0)
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT,
                                   "pid %" PRIi32 " and tid %" PRIi32 " must both be positive", (int32_t) pid,
                                   req->tid);
        if (pid == 1)
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_PERMISSION_DENIED,
                                   "pid 1 (init) is never reniced");

        r = open_target(b, peer, pid, false, req->tid, &nice_words, &pidfd, &info, &thread_start_time, reply,
                        reply_size);
        if (r == 0)
                r = target_permitted(b, peer, pid, &info, &nice_words, reply, reply_size);
        if (r != 0)
                return r < 0 ? r : 0;

        /* One level per thread: a second request replaces the first. */
        size_t slot = b->n_nice;
        for (size_t i = 0; i < b->n_nice; i++)
                if (b->nice[i].tid == req->tid)
                        slot = i;
        if (slot == b->n_nice) {
                if (b->n_nice >= PACE_MAX_NICE_THREADS)
                        return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_LIMIT_EXCEEDED,
                                           "%u threads hold a nice level from pace, its limit; try again when "
                                           "some have ended", PACE_MAX_NICE_THREADS);
                if (peer->uid != 0 && nice_levels_of(b, peer->uid) >= b->config.max_reservations_per_user)
                        return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_LIMIT_EXCEEDED,
                                           "uid %u holds nice levels for %zu threads, its limit "
                                           "(max_reservations_per_user)", (unsigned) peer->uid,
                                           nice_levels_of(b, peer->uid));
                b->n_nice++;
        } else
                safe_close(b->nice[slot].pidfd);
        b->nice[slot] = (NiceLevel) {
                .pid = pid,
                .tid = req->tid,
                .start_time = info.start_time,
                .thread_start_time = thread_start_time,
                .uid = peer->uid,
                .nice = req->nice,
                .pidfd = TAKE_FD(pidfd),
        };
        publish(b);
        broker_log(b, LOG_INFO, "nice %" PRIi32 " for thread %" PRIi32 " of pid %" PRIi32 " (uid %u)", req->nice,
                   req->tid, (int32_t) pid, (unsigned) peer->uid);

        Pace__Response resp = PACE__RESPONSE__INIT;
        Pace__NiceReply nr = PACE__NICE_REPLY__INIT;
        nr.pid = pid;
        nr.tid = req->tid;
        nr.nice = req->nice;
        resp.version = PACE_PROTOCOL_VERSION;
        resp.body_case = PACE__RESPONSE__BODY_NICE;
        resp.nice = &nr;
        return pack_response(&resp, reply, reply_size);
}

void broker_tick(Broker *b) {
        bool changed = false;

        /* Threads end without their process: a thread reservation or nice
         * level would otherwise hold its place until the process exits. */
        for (size_t i = 0; i < b->n_reservations;) {
                Reservation *res = &b->reservations[i];
                const PlanEntry *e = plan_find(b->plan, res->id);
                uint64_t st;
                if (res->tid > 0 && e &&
                    (proc_thread_start_time(b->proc_root, e->pid, res->tid, &st) == -ESRCH ||
                     (res->thread_start_time != 0 && st != res->thread_start_time))) {
                        broker_log(b, LOG_INFO, "reservation %" PRIu64 " ended: thread %" PRIi32 " of pid %" PRIi32
                                   " exited", res->id, (int32_t) res->tid, (int32_t) e->pid);
                        drop_reservation(b, res); /* publishes; the last entry moved to i */
                        continue;
                }
                i++;
        }
        for (size_t i = 0; i < b->n_nice;) {
                NiceLevel *n = &b->nice[i];
                uint64_t st;
                int r = proc_thread_start_time(b->proc_root, n->pid, n->tid, &st);
                if (pidfd_alive(n->pidfd) < 0 || r == -ESRCH || (r == 0 && n->thread_start_time != 0 &&
                                                                 st != n->thread_start_time)) {
                        drop_nice(b, i);
                        changed = true;
                        continue;
                }
                i++;
        }
        if (changed)
                publish(b);
}

/* The peer a delegate speaks for: the process on_behalf_of names, if it
 * lives, started when the delegate says and runs as the uid it says. 0
 * with *ret (its pidfd the caller's to close), or 1 after the refusal. */
static int delegated_peer(Broker *b, const BrokerPeer *delegate, const Pace__Caller *caller, BrokerPeer *ret,
                          uint8_t **reply, size_t *reply_size) {
        _cleanup_close_ int pidfd = -EBADF;
        char path[64], status[4096];
        ProcInfo info;
        ProcOwner owner;
        int r;

        if (delegate->uid != 0 && delegate->uid != b->delegate_uid)
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_PERMISSION_DENIED,
                                   "uid %u may not ask on behalf of another process; only root and pace's own "
                                   "services (uid %u) may", (unsigned) delegate->uid, (unsigned) b->delegate_uid) ?: 1;
        if (caller->pid <= 1)
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT,
                                   "on_behalf_of names pid %" PRIi32 ", not a user process", caller->pid) ?: 1;
        r = pidfd_open_checked(caller->pid, &pidfd);
        if (r >= 0)
                r = proc_info_read(b->proc_root, caller->pid, &info);
        if (r >= 0) {
                snprintf(path, sizeof(path), "%s/%" PRIi32 "/status", b->proc_root, caller->pid);
                r = read_small_file(path, status, sizeof(status));
        }
        if (r >= 0)
                r = pidfd_alive(pidfd);
        if (r >= 0 && info.start_time != caller->start_time)
                r = -ESRCH; /* the pid has been reused since the delegate looked */
        if (r == -ESRCH || r == -EINVAL || r == -ENOENT)
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_NO_SUCH_PROCESS,
                                   "the calling process %" PRIi32 " has exited", caller->pid) ?: 1;
        if (r < 0)
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_INTERNAL,
                                   "cannot read /proc for the calling process %" PRIi32 ": %s", caller->pid,
                                   strerror(-r)) ?: 1;
        /* The bus gives the uid a connection had when it connected: the
         * process's real or effective one. Anything else is a confused or
         * lying delegate. */
        if (proc_status_owner(status, &owner) < 0 ||
            (owner.uids[0] != (uid_t) caller->uid && owner.uids[1] != (uid_t) caller->uid))
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_PERMISSION_DENIED,
                                   "the calling process %" PRIi32 " does not run as uid %" PRIu32, caller->pid,
                                   caller->uid) ?: 1;

        *ret = (BrokerPeer) {
                .pid = caller->pid,
                .uid = (uid_t) caller->uid,
                .pidfd = -EBADF,
                .now_ns = delegate->now_ns,
        };
        if (proc_status_groups(status, &ret->gid, ret->groups, BROKER_PEER_MAX_GROUPS, &ret->n_groups) < 0)
                ret->gid = (gid_t) -1;
        ret->pidfd = TAKE_FD(pidfd);
        return 0;
}

static int handle_release(Broker *b, const BrokerPeer *peer, const Pace__ReleaseRequest *req, uint8_t **reply,
                          size_t *reply_size) {
        Reservation *res;
        int r = owned_reservation(b, peer, req->id, "release", &res, reply, reply_size);

        if (r != 0)
                return r < 0 ? r : 0;

        broker_log(b, LOG_INFO, "reservation %" PRIu64 " released by uid %u", req->id, (unsigned) peer->uid);
        drop_reservation(b, res);

        Pace__Response resp = PACE__RESPONSE__INIT;
        Pace__ReleaseReply released = PACE__RELEASE_REPLY__INIT;
        released.id = req->id;
        resp.version = PACE_PROTOCOL_VERSION;
        resp.body_case = PACE__RESPONSE__BODY_RELEASED;
        resp.released = &released;
        return pack_response(&resp, reply, reply_size);
}

int broker_reload(Broker *b, const PaceConfig *config, char *why, size_t why_size) {
        _cleanup_(plan_freep) Plan *next = NULL;
        _cleanup_free_ PaceTableBuffer *now = calloc(1, sizeof(PaceTableBuffer));
        _cleanup_free_ PaceTableBuffer *then = calloc(1, sizeof(PaceTableBuffer));
        static bool keep[PACE_MAX_RESERVATIONS];
        char err[256];
        int r;

        if (!now || !then)
                return -ENOMEM;
        r = plan_new(config, &next);
        if (r < 0) {
                snprintf(why, why_size, "the new configuration cannot be used: %s", strerror(-r));
                return -EINVAL;
        }
        /* The live reservations, in their very slots, under the new rules. */
        plan_export(b->plan, now);
        for (uint32_t i = 0; i < now->n_reservations; i++)
                keep[i] = true;
        r = plan_restore(next, now, keep);
        if (r < 0)
                return r;
        if (plan_n_entries(next) != plan_n_entries(b->plan)) {
                for (uint32_t i = 0; i < now->n_reservations; i++)
                        if (!plan_find(next, now->reservations[i].id)) {
                                snprintf(why, why_size, "reservation %" PRIu64 " lives on CPU %" PRIi32
                                         ", which the new configuration does not manage",
                                         now->reservations[i].id, now->reservations[i].cpu);
                                break;
                        }
                return -EBUSY;
        }
        plan_export(next, then);
        if (table_check(then, config, err, sizeof(err)) < 0) {
                snprintf(why, why_size, "the %zu live reservation(s) would violate it: %s", plan_n_entries(b->plan),
                         err);
                return -EBUSY;
        }

        plan_free(b->plan);
        b->plan = TAKE_PTR(next);
        b->config = *config;
        publish(b);
        return 0;
}

size_t broker_reset(Broker *b) {
        size_t n = b->n_reservations;
        while (b->n_reservations > 0)
                drop_reservation(b, &b->reservations[b->n_reservations - 1]);
        while (b->n_nice > 0)
                drop_nice(b, b->n_nice - 1);
        publish(b);
        return n;
}

size_t broker_reset_on_behalf(Broker *b) {
        size_t n = 0;
        for (size_t i = b->n_reservations; i > 0; i--) {
                const PlanEntry *e = plan_find(b->plan, b->reservations[i - 1].id);
                if (e && (e->flags & PACE_RES_ON_BEHALF)) {
                        drop_reservation(b, &b->reservations[i - 1]);
                        n++;
                }
        }
        while (b->n_nice > 0)
                drop_nice(b, b->n_nice - 1);
        publish(b);
        return n;
}

static int admin_reply(uint8_t **reply, size_t *reply_size, const char *message) {
        Pace__Response resp = PACE__RESPONSE__INIT;
        Pace__AdminReply admin = PACE__ADMIN_REPLY__INIT;

        admin.message = (char *) message;
        resp.version = PACE_PROTOCOL_VERSION;
        resp.body_case = PACE__RESPONSE__BODY_ADMIN;
        resp.admin = &admin;
        return pack_response(&resp, reply, reply_size);
}

static int handle_admin(Broker *b, const BrokerPeer *peer, const Pace__Request *req, uint8_t **reply,
                        size_t *reply_size) {
        int body = req->body_case;
        char message[512];

        /* ResetKnown: what was granted on others' behalf, which a delegate
         * (pace-rtkit, for root's call) may drop as well as root. */
        if (body == PACE__REQUEST__BODY_RESET && req->reset->has_only_on_behalf && req->reset->only_on_behalf) {
                if (peer->uid != 0 && peer->uid != b->delegate_uid)
                        return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_PERMISSION_DENIED,
                                           "only root and pace's own services may drop what was granted on "
                                           "others' behalf");
                size_t n = broker_reset_on_behalf(b);
                broker_log(b, LOG_NOTICE, "reset of on-behalf grants by pid %" PRIi32 ": %zu reservation(s) "
                           "and every nice level dropped", (int32_t) peer->pid, n);
                snprintf(message, sizeof(message), "%zu reservation(s) dropped", n);
                return admin_reply(reply, reply_size, message);
        }
        if (peer->uid != 0)
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_PERMISSION_DENIED,
                                   "only root may %s the broker", body == PACE__REQUEST__BODY_RESET ? "reset" : "reload");
        if (body == PACE__REQUEST__BODY_RESET) {
                size_t n = broker_reset(b);
                broker_log(b, LOG_NOTICE, "reset by pid %" PRIi32 ": %zu reservation(s) dropped", (int32_t) peer->pid, n);
                snprintf(message, sizeof(message), "%zu reservation(s) dropped", n);
                return admin_reply(reply, reply_size, message);
        }
        if (!b->hooks.reload)
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_INTERNAL,
                                   "this broker cannot reload its configuration");
        int r = b->hooks.reload(b->hooks.userdata, message, sizeof(message));
        if (r < 0)
                broker_log(b, LOG_ERR, "reload refused, the old configuration stays (asked by pid %" PRIi32 "): %s",
                           (int32_t) peer->pid, message);
        else
                broker_log(b, LOG_INFO, "reloaded on request of pid %" PRIi32, (int32_t) peer->pid);
        if (r < 0)
                return error_reply(reply, reply_size,
                                   r == -EBUSY || r == -EINVAL ? PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT
                                                               : PACE__ERROR_CODE__ERROR_INTERNAL,
                                   "reload refused, the old configuration stays: %s", message);
        return admin_reply(reply, reply_size, "configuration reloaded");
}

/* Removes id and admits req in a copy of the plan; the plan is replaced only
 * if that worked. */
static int replan(Broker *b, uint64_t id, const PlanRequest *req, PlanEntry *ret_entry, char *why, size_t why_size) {
        _cleanup_(plan_freep) Plan *next = NULL;
        int r;

        r = plan_clone(b->plan, &next);
        if (r < 0)
                return r;
        r = plan_remove(next, id);
        if (r < 0)
                return r;
        r = plan_admit(next, req, ret_entry, why, why_size);
        if (r < 0)
                return r;
        plan_free(b->plan);
        b->plan = TAKE_PTR(next);
        return 0;
}

/* The request that would admit an existing reservation again as it was
 * asked for: who it covers (scope, thread) never changes with a modify or a
 * move, only what it gets and where. */
static PlanRequest request_for_entry(const PlanEntry *e) {
        return (PlanRequest) {
                .id = e->id,
                .pid = e->pid,
                .start_time = e->start_time,
                .uid = e->uid,
                .period_ns = e->requested_period_ns,
                .utilization_ppm = e->requested_utilization_ppm,
                .cpu = e->cpu,
                .scope = e->scope,
                .tid = e->tid,
                .kind = plan_flags_kind(e->flags),
                .on_behalf = e->flags & PACE_RES_ON_BEHALF,
        };
}

static int handle_modify(Broker *b, const BrokerPeer *peer, const Pace__ModifyRequest *req, uint8_t **reply,
                         size_t *reply_size) {
        Reservation *res;
        char why[512] = "";
        PlanEntry entry;
        int r;

        PlanKind kind = PLAN_KIND_SLOTS;
        r = owned_reservation(b, peer, req->id, "change", &res, reply, reply_size);
        if (r == 0)
                r = bad_cpu_field(req->has_cpu, req->cpu, reply, reply_size);
        /* Absent: the kind it has. */
        if (r == 0)
                r = request_kind(req->has_kind, (int) req->kind, plan_flags_kind(plan_find(b->plan, req->id)->flags),
                                 "the reservation's own", &kind, reply, reply_size);
        if (r != 0)
                return r < 0 ? r : 0;

        /* Each CPU's dispatch thread swaps tables at its own frame boundary,
         * and those differ between CPUs: a change that moved a reservation
         * (or changed the pieces of a split one) could hold old and new
         * slots at once for up to a frame. On one CPU the swap is a single
         * frame boundary, so a change stays where the reservation is. */
        const PlanEntry *old = plan_find(b->plan, req->id);
        if (old->flags & PACE_RES_PIECE)
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT,
                                   "reservation %" PRIu64 " is split over CPUs, and its pieces cannot all change at "
                                   "one instant; release it and reserve again; the reservation stays as it was",
                                   req->id);
        if (req->has_cpu && req->cpu != old->cpu)
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT,
                                   "reservation %" PRIu64 " lives on CPU %" PRIi32 " and a change stays there (old "
                                   "and new would both be in force for up to a frame while CPUs swap tables); to "
                                   "move it to CPU %" PRIi32 ", release it and reserve again; the reservation stays "
                                   "as it was", req->id, old->cpu, req->cpu);
        /* The CPU must still be one the target may run on: its owner may
         * have changed the affinity since the grant. (While the dispatcher
         * holds the threads, it has pinned them to this very CPU.) */
        uint64_t allowed_cpus;
        r = read_allowed_cpus(b, old->pid, old->scope, old->tid, res->pidfd, &allowed_cpus, reply, reply_size);
        if (r != 0)
                return r < 0 ? r : 0;
        if (old->cpu >= 64 || !(allowed_cpus & (UINT64_C(1) << old->cpu))) {
                char set[256];
                return error_reply(reply, reply_size, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT,
                                   "reservation %" PRIu64 " lives on CPU %" PRIi32 ", which is outside the CPUs %s %"
                                   PRIi32 " may run on now (%s), and a change stays on its CPU; release it and "
                                   "reserve again to move it, or let it run on CPU %" PRIi32 " again; the "
                                   "reservation stays as it was",
                                   req->id, old->cpu, old->scope == PACE_TABLE_SCOPE_THREAD ? "thread" : "pid",
                                   (int32_t) (old->scope == PACE_TABLE_SCOPE_THREAD ? old->tid : old->pid),
                                   format_cpu_mask(set, sizeof(set), allowed_cpus), old->cpu);
        }
        PlanRequest preq = request_for_entry(old);
        preq.period_ns = req->period_ns;
        preq.utilization_ppm = req->utilization_ppm;
        preq.kind = kind;
        preq.cpu = old->cpu;
        preq.allowed_cpus = allowed_cpus;
        r = plan_validate(b->plan, &preq, why, sizeof(why));
        if (r >= 0)
                r = replan(b, req->id, &preq, &entry, why, sizeof(why));
        if (r < 0) {
                broker_log(b, LOG_INFO, "reservation %" PRIu64 ": change refused, it stays as it was: %s", req->id, why);
                return error_reply(reply, reply_size, plan_error_code(r), "%s; the reservation stays as it was", why);
        }
        publish(b);
        broker_log(b, LOG_INFO, "reservation %" PRIu64 " changed by uid %u: CPU %" PRIi32 ", %s, %" PRIu32
                   " of every %" PRIu32 " slots", req->id, (unsigned) peer->uid, entry.cpu,
                   plan_kind_name(plan_flags_kind(entry.flags)), entry.budget_slots, entry.period_slots);

        Pace__Response resp = PACE__RESPONSE__INIT;
        Pace__Grant grant;
        grant_from_entry(b, &entry, &grant);
        resp.version = PACE_PROTOCOL_VERSION;
        resp.body_case = PACE__RESPONSE__BODY_GRANT;
        resp.grant = &grant;
        return pack_response(&resp, reply, reply_size);
}

void broker_cpus_online(Broker *b, const int32_t *online, size_t n_online) {
        bool changed = false;

        for (uint32_t i = 0; i < b->config.n_cpus; i++) {
                int32_t cpu = b->config.cpus[i];
                bool up = false;
                for (size_t j = 0; j < n_online; j++)
                        up |= online[j] == cpu;
                if (up == plan_cpu_online(b->plan, cpu))
                        continue;
                (void) plan_set_cpu_online(b->plan, cpu, up);
                broker_log(b, up ? LOG_INFO : LOG_WARNING, "CPU %" PRIi32 " went %s", cpu, up ? "online" : "offline");
                changed = true;
        }
        if (!changed)
                return;

        /* Move whatever lives on an offline CPU; drop what fits nowhere. */
        for (size_t i = 0; i < b->n_reservations;) {
                const PlanEntry *e = plan_find(b->plan, b->reservations[i].id);
                char why[512] = "";
                PlanEntry moved;

                if (!e || !plan_on_offline_cpu(b->plan, e->id)) {
                        i++;
                        continue;
                }
                int32_t from = e->cpu;
                PlanRequest preq = request_for_entry(e);
                preq.cpu = -1;
                preq.allowed_cpus = b->reservations[i].allowed_cpus;
                if (replan(b, e->id, &preq, &moved, why, sizeof(why)) >= 0) {
                        broker_log(b, LOG_WARNING, "reservation %" PRIu64 " moved from CPU %" PRIi32 " (offline) to CPU %"
                                   PRIi32, moved.id, from, moved.cpu);
                        i++;
                        continue;
                }
                broker_log(b, LOG_WARNING, "reservation %" PRIu64 " of pid %" PRIi32 " dropped: CPU %" PRIi32
                           " went offline and no online CPU has room (%s)", b->reservations[i].id, preq.pid, from, why);
                drop_reservation(b, &b->reservations[i]);
        }
        publish(b);
}

/* (Re)maps the dispatcher's accounting file when it is new: another inode
 * means a restarted dispatcher. Only a regular file of root's of the exact
 * size, with the right magic and version, is read. */
static void stats_refresh(Broker *b) {
        struct stat st;

        if (b->runtime_dir_fd < 0)
                return;
        if (fstatat(b->runtime_dir_fd, PACE_STATS_NAME, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode) ||
            st.st_uid != 0 || (uint64_t) st.st_size != sizeof(PaceStatsFile)) {
                if (b->stats)
                        munmap((void *) b->stats, sizeof(PaceStatsFile));
                b->stats = NULL;
                return;
        }
        if (b->stats && st.st_dev == b->stats_dev && st.st_ino == b->stats_ino)
                return;
        if (b->stats)
                munmap((void *) b->stats, sizeof(PaceStatsFile));
        b->stats = NULL;
        _cleanup_close_ int fd = openat(b->runtime_dir_fd, PACE_STATS_NAME, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return;
        void *m = mmap(NULL, sizeof(PaceStatsFile), PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED)
                return;
        b->stats = m;
        b->stats_dev = st.st_dev;
        b->stats_ino = st.st_ino;
}

/* The accounting of reservation id, summed over its pieces; false if the
 * dispatcher has not reported on it. The file is the dispatcher's, but it is
 * read as input all the same: torn copies are skipped, counts clamped. */
static bool stats_collect(const Broker *b, uint64_t id, Pace__Accounting *acc, uint32_t *ret_threads) {
        const PaceStatsFile *f = b->stats;
        bool found = false;
        uint32_t threads = 0;

        if (!f || f->magic != PACE_STATS_MAGIC || f->version != PACE_STATS_VERSION)
                return false;
        pace__accounting__init(acc);
        for (uint32_t i = 0; i < PACE_STATS_MAX_ENTRIES; i++) {
                const PaceStatsEntry *src = &f->entries[i];
                PaceStatsEntry e;
                bool ok = false;
                if (src->id != id)
                        continue;
                for (int attempt = 0; attempt < 4 && !ok; attempt++) {
                        uint32_t s1 = atomic_load_explicit(&((PaceStatsEntry *) src)->seq, memory_order_acquire);
                        if (s1 & 1)
                                continue;
                        memcpy(&e, (const void *) src, sizeof(e));
                        atomic_thread_fence(memory_order_acquire);
                        ok = atomic_load_explicit(&((PaceStatsEntry *) src)->seq, memory_order_relaxed) == s1;
                }
                if (!ok || e.id != id || e.window_ns == 0)
                        continue;
                found = true;
                acc->window_ns = MAX(acc->window_ns, e.window_ns);
                acc->delivered_ns += MIN(e.delivered_ns, e.window_ns);
                acc->cpu_time_ns += e.cpu_time_ns;
                acc->periods = MAX(acc->periods, e.periods);
                acc->periods_blocked += MIN(e.periods_blocked, e.periods);
                acc->periods_wanted_more += MIN(e.periods_wanted_more, e.periods);
                threads = MAX(threads, MIN(e.threads, PACE_MAX_THREADS_REPORTED));
        }
        acc->periods_blocked = MIN(acc->periods_blocked, acc->periods);
        acc->periods_wanted_more = MIN(acc->periods_wanted_more, acc->periods);
        *ret_threads = threads;
        return found;
}

static int handle_status(Broker *b, uint8_t **reply, size_t *reply_size) {
        size_t n = plan_n_entries(b->plan), n_cpus = plan_n_cpus(b->plan);
        _cleanup_free_ Pace__Grant *grants = calloc(n ? n : 1, sizeof(Pace__Grant));
        _cleanup_free_ Pace__Grant **grant_ptrs = calloc(n ? n : 1, sizeof(Pace__Grant *));
        _cleanup_free_ Pace__CpuStatus *cpus = calloc(n_cpus, sizeof(Pace__CpuStatus));
        _cleanup_free_ Pace__CpuStatus **cpu_ptrs = calloc(n_cpus, sizeof(Pace__CpuStatus *));

        if (!grants || !grant_ptrs || !cpus || !cpu_ptrs)
                return -ENOMEM;
        _cleanup_free_ Pace__Accounting *accs = calloc(n ? n : 1, sizeof(Pace__Accounting));
        if (!accs)
                return -ENOMEM;
        stats_refresh(b);
        for (size_t i = 0; i < n; i++) {
                uint32_t threads;
                grant_from_entry(b, plan_entry(b->plan, i), &grants[i]);
                if (stats_collect(b, grants[i].id, &accs[i], &threads)) {
                        grants[i].accounting = &accs[i];
                        if (threads > 0) {
                                grants[i].has_threads = true;
                                grants[i].threads = threads;
                        }
                }
                grant_ptrs[i] = &grants[i];
        }
        for (size_t i = 0; i < n_cpus; i++) {
                PlanCpuInfo info;
                plan_cpu_info(b->plan, i, &info);
                pace__cpu_status__init(&cpus[i]);
                cpus[i].cpu = info.cpu;
                cpus[i].reserved_ppm = info.reserved_ppm;
                cpus[i].free_ppm = info.free_ppm;
                cpus[i].frame_ns = (uint64_t) info.frame_slots * b->config.slot_ns;
                cpu_ptrs[i] = &cpus[i];
        }

        Pace__Response resp = PACE__RESPONSE__INIT;
        Pace__StatusReply status = PACE__STATUS_REPLY__INIT;
        status.n_reservations = n;
        status.reservations = grant_ptrs;
        status.n_cpus = n_cpus;
        status.cpus = cpu_ptrs;
        status.non_rt_share_ppm = b->config.non_rt_share_ppm;
        status.generation = broker_generation(b);
        Pace__NiceReply nice[PACE_MAX_NICE_THREADS], *nice_ptrs[PACE_MAX_NICE_THREADS];
        for (size_t i = 0; i < b->n_nice; i++) {
                pace__nice_reply__init(&nice[i]);
                nice[i].pid = b->nice[i].pid;
                nice[i].tid = b->nice[i].tid;
                nice[i].nice = b->nice[i].nice;
                nice_ptrs[i] = &nice[i];
        }
        status.n_nice_levels = b->n_nice;
        status.nice_levels = nice_ptrs;
        resp.version = PACE_PROTOCOL_VERSION;
        resp.body_case = PACE__RESPONSE__BODY_STATUS;
        resp.status = &status;
        return pack_response(&resp, reply, reply_size);
}

static bool is_delegate(const Broker *b, const BrokerPeer *peer) {
        return peer->uid == 0 || peer->uid == b->delegate_uid;
}

static int rate_refusal(Broker *b, const BrokerPeer *peer, uint8_t **ret_reply, size_t *ret_reply_size) {
        return error_reply(ret_reply, ret_reply_size, PACE__ERROR_CODE__ERROR_LIMIT_EXCEEDED,
                           "uid %u sends more than %" PRIu32 " requests per second (max_requests_per_second); "
                           "slow down", (unsigned) peer->uid, b->config.max_requests_per_second);
}

static int dispatch_request(Broker *b, const BrokerPeer *peer, bool on_behalf, const Pace__Request *req,
                            uint8_t **ret_reply, size_t *ret_reply_size) {
        switch (req->body_case) {
        case PACE__REQUEST__BODY_RESERVE:
        case PACE__REQUEST__BODY_RELEASE:
        case PACE__REQUEST__BODY_MODIFY:
        case PACE__REQUEST__BODY_NICE:
                if (!group_allows(b, peer))
                        return error_reply(ret_reply, ret_reply_size, PACE__ERROR_CODE__ERROR_PERMISSION_DENIED,
                                           "uid %u is in none of the groups allowed to reserve (allowed_groups "
                                           "in the configuration); ask the administrator", (unsigned) peer->uid);
                if (req->body_case == PACE__REQUEST__BODY_RELEASE)
                        return handle_release(b, peer, req->release, ret_reply, ret_reply_size);
                if (req->body_case == PACE__REQUEST__BODY_MODIFY)
                        return handle_modify(b, peer, req->modify, ret_reply, ret_reply_size);
                if (req->body_case == PACE__REQUEST__BODY_NICE)
                        return handle_nice(b, peer, req->nice, ret_reply, ret_reply_size);
                return handle_reserve(b, peer, on_behalf, req->reserve, ret_reply, ret_reply_size);
        case PACE__REQUEST__BODY_STATUS:
                return handle_status(b, ret_reply, ret_reply_size);
        case PACE__REQUEST__BODY_RELOAD:
        case PACE__REQUEST__BODY_RESET:
                /* Administration is the delegate's own business, never
                 * something it does for a caller. */
                if (on_behalf)
                        return error_reply(ret_reply, ret_reply_size, PACE__ERROR_CODE__ERROR_PERMISSION_DENIED,
                                           "reload and reset are never asked on behalf of another process");
                return handle_admin(b, peer, req, ret_reply, ret_reply_size);
        default:
                return error_reply(ret_reply, ret_reply_size, PACE__ERROR_CODE__ERROR_MALFORMED,
                                   "request has no body (reserve, release, modify, nice or status)");
        }
}

int broker_handle(Broker *b, const BrokerPeer *peer, const uint8_t *request, size_t request_size, uint8_t **ret_reply,
                  size_t *ret_reply_size) {
        Pace__Request *req;
        int r;

        /* Before decoding: flooding with garbage costs tokens too. A
         * delegate speaks for many users; each of them is counted once
         * the request says who. */
        if (!is_delegate(b, peer) && !rate_allows(b, peer))
                return rate_refusal(b, peer, ret_reply, ret_reply_size);
        if (request_size == 0)
                return error_reply(ret_reply, ret_reply_size, PACE__ERROR_CODE__ERROR_MALFORMED,
                                   "empty message; expected a pace.Request");
        if (request_size > b->config.max_message_bytes)
                return error_reply(ret_reply, ret_reply_size, PACE__ERROR_CODE__ERROR_MALFORMED,
                                   "message of %zu bytes is larger than the limit of %" PRIu32 " bytes "
                                   "(max_message_bytes)", request_size, b->config.max_message_bytes);

        req = pace__request__unpack(NULL, request_size, request);
        if (!req)
                return error_reply(ret_reply, ret_reply_size, PACE__ERROR_CODE__ERROR_MALFORMED,
                                   "%zu bytes that are not a valid pace.Request message", request_size);

        if (req->version != PACE_PROTOCOL_VERSION)
                r = error_reply(ret_reply, ret_reply_size, PACE__ERROR_CODE__ERROR_UNSUPPORTED_VERSION,
                                "protocol version %" PRIu32 " is not supported; this broker speaks version %u",
                                req->version, PACE_PROTOCOL_VERSION);
        else if (req->on_behalf_of) {
                BrokerPeer caller;
                r = delegated_peer(b, peer, req->on_behalf_of, &caller, ret_reply, ret_reply_size);
                if (r == 0) {
                        if (!rate_allows(b, &caller))
                                r = rate_refusal(b, &caller, ret_reply, ret_reply_size);
                        else
                                r = dispatch_request(b, &caller, true, req, ret_reply, ret_reply_size);
                        safe_close(caller.pidfd);
                } else if (r > 0)
                        r = 0;
        } else if (is_delegate(b, peer) && !rate_allows(b, peer))
                r = rate_refusal(b, peer, ret_reply, ret_reply_size);
        else
                r = dispatch_request(b, peer, false, req, ret_reply, ret_reply_size);
        pace__request__free_unpacked(req, NULL);
        return r;
}
