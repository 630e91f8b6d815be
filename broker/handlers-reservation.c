/* SPDX-License-Identifier: MIT */
/* Reserve, release and modify: the requests that grant, end and change a
 * reservation. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>

#include "broker-internal.h"
#include "macro.h"
#include "parse-util.h"
#include "proc-util.h"

/* What a reserve request covers, once the peer may reserve it: what its
 * PlanRequest and its Reservation are made of. One struct because they all
 * come out of the one check, valid together or not at all. Owns pidfd,
 * which held the process through that check, so that none of it can be
 * about a process that reused the pid. */
typedef struct ResolvedTarget {
        pid_t pid;
        ProcInfo info;
        int pidfd;
        uint32_t scope; /* PACE_TABLE_SCOPE_* */
        pid_t tid;      /* the thread scope's thread, else 0 */
        uint32_t threads; /* at the grant: Reservation.threads */
        uint64_t allowed_cpus; /* from the kernel (read_allowed_cpus()) */
} ResolvedTarget;

static void resolved_target_done(ResolvedTarget *t) {
        if (!t)
                return;
        t->pidfd = safe_close(t->pidfd);
}

/* Opens the target and checks it is one the peer may reserve: 0 with
 * *ret_target, a refusal (> 0, in *ret_refusal) or a negative errno. */
static int resolve_target(Broker *b, const BrokerPeer *peer, const Pace__ReserveRequest *req,
                          ResolvedTarget *ret_target, Refusal *ret_refusal) {
        _cleanup_close_ int pidfd = -EBADF;
        pid_t pid = req->has_pid ? req->pid : peer->pid;
        ProcInfo info;
        uint64_t allowed_cpus;
        int r;

        if (req->has_pid && req->pid <= 0)
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT,
                              "pid %" PRIi32 " is not a process id; leave pid out to reserve the calling process",
                              req->pid);
        if (pid == 1)
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_PERMISSION_DENIED,
                              "pid 1 (init) can never be reserved");
        uint32_t scope = req->has_scope ? (uint32_t) req->scope : PACE_TABLE_SCOPE_PROCESS;
        if (scope > PACE_TABLE_SCOPE_TREE)
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT,
                              "scope %" PRIu32 " does not exist: use process (0), thread (1) or tree (2)",
                              scope);
        if (scope == PACE_TABLE_SCOPE_THREAD && (!req->has_tid || req->tid <= 0))
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT,
                              "the thread scope needs the thread's id (tid), a positive number; "
                              "got %s", req->has_tid ? "a non-positive one" : "none");
        if (scope != PACE_TABLE_SCOPE_THREAD && req->has_tid)
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT,
                              "a thread id (tid %" PRIi32 ") belongs only with the thread scope", req->tid);

        r = open_target(b, peer, pid, !req->has_pid && peer->pidfd >= 0, 0, &reserve_words, &pidfd, &info,
                        NULL, ret_refusal);
        if (r != 0)
                return r;
        /* Whose it is before anything grows with it: a tree's count reads a
         * file per thread, and any pid may be named (issue 26: another
         * user's status request waited 8.5 s behind tree requests for
         * 20,000-thread strangers). */
        r = target_permitted(b, peer, pid, &info, &reserve_words, ret_refusal);
        if (r != 0)
                return r;
        uint32_t threads = 1;
        if (scope == PACE_TABLE_SCOPE_THREAD) {
                char task[96];
                struct stat st;
                snprintf(task, sizeof(task), "%s/%" PRIi32 "/task/%" PRIi32, b->proc_root, (int32_t) pid, req->tid);
                if (stat(task, &st) < 0)
                        return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_NO_SUCH_PROCESS,
                                      "pid %" PRIi32 " has no thread %" PRIi32, (int32_t) pid, req->tid);
        } else if ((scope == PACE_TABLE_SCOPE_TREE ? proc_count_tree_threads(b->proc_root, pid,
                                                                             b->config.max_threads_per_reservation,
                                                                             4096, &threads)
                                                   : proc_count_threads(b->proc_root, pid, &threads)) == 0 &&
                   threads > b->config.max_threads_per_reservation)
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_LIMIT_EXCEEDED,
                              "pid %" PRIi32 " has %s%" PRIu32 " threads%s; a reservation covers at most %" PRIu32
                              " (max_threads_per_reservation): the dispatcher moves each of them at every "
                              "switch", (int32_t) pid, scope == PACE_TABLE_SCOPE_TREE ? "at least " : "", threads,
                              scope == PACE_TABLE_SCOPE_TREE ? " with its descendants" : "",
                              b->config.max_threads_per_reservation);
        r = target_limits_kept(b, pid, scope, req->tid, ret_refusal);
        if (r != 0)
                return r;
        for (size_t i = 0; i < b->n_reservations; i++) {
                const PlanEntry *e = plan_find(b->plan, b->reservations[i].id);
                /* Same pid, even with another start time: that one's exit
                 * is about to be noticed, and the table holds one
                 * reservation per pid (or one per thread of it). */
                if (e && e->pid == pid && e->scope == PACE_TABLE_SCOPE_THREAD && scope == PACE_TABLE_SCOPE_THREAD &&
                    e->tid == req->tid)
                        return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT,
                                      "thread %" PRIi32 " of pid %" PRIi32 " already holds reservation %" PRIu64
                                      "; release it first", req->tid, (int32_t) pid, e->id);
                if (e && e->pid == pid && e->scope == PACE_TABLE_SCOPE_THREAD && scope == PACE_TABLE_SCOPE_THREAD)
                        continue;
                if (e && e->pid == pid)
                        return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT,
                                      "pid %" PRIi32 " already holds reservation %" PRIu64
                                      "; release it first (one reservation per process)",
                                      (int32_t) pid, e->id);
        }
        r = read_allowed_cpus(b, pid, scope, req->tid, pidfd, &allowed_cpus, ret_refusal);
        if (r != 0)
                return r;
        *ret_target = (ResolvedTarget) {
                .pid = pid,
                .info = info,
                .pidfd = TAKE_FD(pidfd),
                .scope = scope,
                .tid = scope == PACE_TABLE_SCOPE_THREAD ? req->tid : 0,
                .threads = threads,
                .allowed_cpus = allowed_cpus,
        };
        return 0;
}

/* The reservation a release or change names, if the peer may touch it: 0
 * with *ret_res, or a refusal (> 0, in *ret_refusal). */
static int owned_reservation(Broker *b, const BrokerPeer *peer, uint64_t id, const char *verb, Reservation **ret_res,
                             Refusal *ret_refusal) {
        Reservation *res = find_reservation(b, id);

        if (!res)
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_NO_SUCH_RESERVATION,
                              "no reservation with id %" PRIu64 " (pacectl status lists them)", id);
        if (peer->uid != 0 && peer->uid != res->owner_uid)
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_PERMISSION_DENIED,
                              "reservation %" PRIu64 " belongs to uid %u; uid %u may %s only its own", id,
                              (unsigned) res->owner_uid, (unsigned) peer->uid, verb);
        *ret_res = res;
        return 0;
}

/* The kind a request asks for: `absent` when the field is missing or
 * unspecified (slots for a new reservation, the reservation's own for a
 * change). A value the protocol does not define is refused, naming the
 * field: protobuf-c passes any number through an enum field. Returns 0 with
 * *ret, or a refusal (> 0, in *ret_refusal). */
static int request_kind(bool has_kind, int kind, PlanKind absent, const char *absent_means, PlanKind *ret,
                        Refusal *ret_refusal) {
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
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT,
                              "kind %d does not exist: use slots (1), server (2) or aligned (3), or leave "
                              "kind out for %s", kind, absent_means);
        }
}

/* A CPU field outside any machine's range: a refusal (> 0, in *ret_refusal). */
static int bad_cpu_field(bool has_cpu, int32_t cpu, Refusal *ret_refusal) {
        if (!has_cpu || (cpu >= 0 && cpu < (int32_t) PACE_MAX_CPUS))
                return 0;
        return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT,
                      "CPU %" PRIi32 " does not exist; leave cpu out to let the broker choose", cpu);
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

/* The grant's log line names the CPUs as the reply will. */
static void log_grant(Broker *b, const BrokerPeer *peer, bool on_behalf, const PlanEntry *entry) {
        char p1[32], p2[32], u1[32], where[256];
        Pace__Grant grant;
        GrantPieces pieces;

        grant_from_entry(b, entry, &grant);
        grant_add_pieces(b, entry->id, &grant, &pieces);
        broker_log(b, LOG_INFO, "reservation %" PRIu64 ": uid %u pid %" PRIi32 "%s on %s, %s, %s every %s"
                   " (asked %s every %s)", entry->id, (unsigned) peer->uid, (int32_t) entry->pid,
                   on_behalf ? " (on its behalf)" : "",
                   format_grant_cpus(&grant, where, sizeof(where)), plan_kind_name(plan_flags_kind(entry->flags)),
                   format_duration(p1, sizeof(p1), (uint64_t) entry->budget_slots * b->config.slot_ns),
                   format_duration(p2, sizeof(p2), (uint64_t) entry->period_slots * b->config.slot_ns),
                   format_ppm(u1, sizeof(u1), entry->requested_utilization_ppm),
                   format_duration((char[32]) {}, 32, entry->requested_period_ns));
}

/* The planner said no (r > 0) or failed (r < 0, before anything changed):
 * either is logged and answered, a refusal in the planner's words. */
static int plan_refused(Broker *b, const BrokerPeer *peer, int r, const char *why, Refusal *ret_refusal) {
        if (r < 0) {
                broker_log(b, LOG_ERR, "uid %u pid %" PRIi32 ": cannot plan the reservation: %s", (unsigned) peer->uid,
                           (int32_t) peer->pid, strerror(-r));
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_INTERNAL, "the broker cannot plan the "
                              "reservation: %s", strerror(-r));
        }
        broker_log(b, LOG_INFO, "uid %u pid %" PRIi32 ": refused: %s", (unsigned) peer->uid, (int32_t) peer->pid, why);
        return refuse(ret_refusal, plan_refusal_code(r), "%s", why);
}

int handle_reserve(Broker *b, const BrokerPeer *peer, bool on_behalf, const Pace__ReserveRequest *req,
                   uint8_t **reply, size_t *reply_size, Refusal *ret_refusal) {
        _cleanup_(resolved_target_done) ResolvedTarget target = { .pidfd = -EBADF };
        char why[512] = "";
        PlanEntry entry;
        int r;

        PlanKind kind = PLAN_KIND_SLOTS;
        r = bad_cpu_field(req->has_cpu, req->cpu, ret_refusal);
        if (r == 0)
                r = request_kind(req->has_kind, (int) req->kind, PLAN_KIND_SLOTS, "slots", &kind, ret_refusal);
        if (r != 0)
                return r;
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
        if (r != 0)
                return plan_refused(b, peer, r, why, ret_refusal);

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
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_LIMIT_EXCEEDED,
                              "the broker holds %zu reservations, its limit (max_reservations); try again when "
                              "some have ended", b->n_reservations);

        r = resolve_target(b, peer, req, &target, ret_refusal);
        if (r != 0)
                return r;

        preq.pid = target.pid;
        preq.start_time = target.info.start_time;
        preq.scope = target.scope;
        preq.tid = target.tid;
        preq.allowed_cpus = target.allowed_cpus;
        broker_charge_measured_costs(b);
        r = plan_admit(b->plan, &preq, &entry, why, sizeof(why));
        if (r != 0)
                return plan_refused(b, peer, r, why, ret_refusal);

        uint64_t thread_start_time = 0;
        if (preq.scope == PACE_TABLE_SCOPE_THREAD)
                (void) proc_thread_start_time(b->proc_root, target.pid, preq.tid, &thread_start_time);
        Reservation *res = &b->reservations[b->n_reservations];
        *res = (Reservation) {
                .id = entry.id,
                .owner_uid = peer->uid,
                .pidfd = TAKE_FD(target.pidfd),
                .threads = target.threads,
                .allowed_cpus = target.allowed_cpus,
                .tid = preq.tid,
                .thread_start_time = thread_start_time,
        };
        if (b->hooks.watch_pidfd) {
                r = b->hooks.watch_pidfd(b->hooks.userdata, res->pidfd, res->id, &res->watch);
                if (r < 0) {
                        (void) plan_remove(b->plan, entry.id);
                        safe_close(res->pidfd);
                        return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_INTERNAL,
                                      "cannot watch pid %" PRIi32 ": %s", (int32_t) target.pid, strerror(-r));
                }
        }
        add_reservation(b);
        b->next_id++;
        broker_publish(b);

        log_grant(b, peer, on_behalf, &entry);
        return grant_reply(b, &entry, reply, reply_size);
}

int handle_release(Broker *b, const BrokerPeer *peer, const Pace__ReleaseRequest *req, uint8_t **reply,
                   size_t *reply_size, Refusal *ret_refusal) {
        Reservation *res;
        int r = owned_reservation(b, peer, req->id, "release", &res, ret_refusal);

        if (r != 0)
                return r;

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

int handle_modify(Broker *b, const BrokerPeer *peer, const Pace__ModifyRequest *req, uint8_t **reply,
                  size_t *reply_size, Refusal *ret_refusal) {
        Reservation *res;
        char why[512] = "";
        PlanEntry entry;
        int r;

        r = owned_reservation(b, peer, req->id, "change", &res, ret_refusal);
        if (r == 0)
                r = bad_cpu_field(req->has_cpu, req->cpu, ret_refusal);
        if (r != 0)
                return r;
        const PlanEntry *old = plan_find(b->plan, req->id);
        /* Absent: the kind it has. */
        PlanKind kind = PLAN_KIND_SLOTS;
        r = request_kind(req->has_kind, (int) req->kind, plan_flags_kind(old->flags), "the reservation's own", &kind,
                         ret_refusal);
        if (r != 0)
                return r;

        /* Each CPU's dispatch thread swaps tables at its own frame boundary,
         * and those differ between CPUs: a change that moved a reservation
         * (or changed the pieces of a split one) could hold old and new
         * slots at once for up to a frame. On one CPU the swap is a single
         * frame boundary, so a change stays where the reservation is. */
        if (old->flags & PACE_RES_PIECE)
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT,
                              "reservation %" PRIu64 " is split over CPUs, and its pieces cannot all change at "
                              "one instant; release it and reserve again; the reservation stays as it was",
                              req->id);
        if (req->has_cpu && req->cpu != old->cpu)
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT,
                              "reservation %" PRIu64 " lives on CPU %" PRIi32 " and a change stays there (old "
                              "and new would both be in force for up to a frame while CPUs swap tables); to "
                              "move it to CPU %" PRIi32 ", release it and reserve again; the reservation stays "
                              "as it was", req->id, old->cpu, req->cpu);
        /* The CPU must still be one the target may run on: its owner may
         * have changed the affinity since the grant. (While the dispatcher
         * holds the threads, it has pinned them to this very CPU.) */
        uint64_t allowed_cpus;
        r = read_allowed_cpus(b, old->pid, old->scope, old->tid, res->pidfd, &allowed_cpus, ret_refusal);
        if (r != 0)
                return r;
        if (old->cpu >= 64 || !(allowed_cpus & (UINT64_C(1) << old->cpu))) {
                char set[256];
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT,
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
        if (r == 0)
                r = replan(b, req->id, &preq, &entry, why, sizeof(why));
        if (r < 0) /* the plan is replaced only if replan() succeeds */
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_INTERNAL, "the broker cannot plan the change: "
                              "%s; the reservation stays as it was", strerror(-r));
        if (r > 0) {
                broker_log(b, LOG_INFO, "reservation %" PRIu64 ": change refused, it stays as it was: %s", req->id, why);
                return refuse(ret_refusal, plan_refusal_code(r), "%s; the reservation stays as it was", why);
        }
        broker_publish(b);
        broker_log(b, LOG_INFO, "reservation %" PRIu64 " changed by uid %u: CPU %" PRIi32 ", %s, %" PRIu32
                   " of every %" PRIu32 " slots", req->id, (unsigned) peer->uid, entry.cpu,
                   plan_kind_name(plan_flags_kind(entry.flags)), entry.budget_slots, entry.period_slots);
        /* Never split (refused above), so the reply has no pieces. */
        return grant_reply(b, &entry, reply, reply_size);
}
