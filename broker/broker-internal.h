/* SPDX-License-Identifier: MIT */
#pragma once

/* What the broker's own files share: its state and the helpers its request
 * handlers use. Not for use outside broker/ (broker.h is the interface). */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "broker.h"
#include "id-index.h"
#include "log-sink.h"
#include "macro.h"
#include "pace-stats.h"
#include "pace.pb-c.h"
#include "plan.h"
#include "proc-util.h"
#include "rate-limit.h"

typedef struct Reservation {
        /* Its entries in the plan are plan_find(b->plan, id), an indexed
         * lookup. The id and not a pointer: a change is admitted in a copy
         * of the plan that then replaces it (replan()), a reload builds a
         * new plan, and a removal moves entries, so only the id stays
         * valid. And what the plan holds (pid, scope, CPU, grant) is not
         * copied here, so the two cannot disagree. */
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
        char *cgroup_root;
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
        /* find_reservation()'s way into reservations[]: kept by
         * add_reservation() and drop_reservation(). */
        IdIndex reservation_by_id;
        /* Peers of this uid (the broker's own) and root may ask on behalf
         * of another process: pace-rtkit runs as it. */
        uid_t delegate_uid;
        size_t n_nice;
        NiceLevel nice[PACE_MAX_NICE_THREADS];
};

/* broker.c: state shared by the handlers. */
#define broker_log(b, priority, ...) log_sinkf((b)->hooks.log, (b)->hooks.userdata, (priority), __VA_ARGS__)
/* Writes the plan and the nice levels into the table for the dispatcher. */
void broker_publish(Broker *b);

/* stats.c: (re)maps the dispatcher's accounting file when it is new (a
 * restarted dispatcher); only a regular file of root's of the exact size is
 * read, and only with the right magic and version. */
void broker_stats_refresh(Broker *b);
/* What each dispatch thread measured a change of owner to cost, charged by
 * admission on its CPU where that is more than switch_cost_us (said in the
 * log when the charge changes). Before every admission. */
void broker_charge_measured_costs(Broker *b);
/* The reservation of id, or NULL: by its index, for a Broker one may
 * change or a const one. */
Reservation *find_reservation(Broker *b, uint64_t id);
const Reservation *lookup_reservation(const Broker *b, uint64_t id);
/* Makes the one written at reservations[n_reservations] the broker's. It is
 * written in place so that its watch can be set up before, and given up if
 * that fails. */
void add_reservation(Broker *b);
/* Frees its slots and its pidfd, and publishes. */
void drop_reservation(Broker *b, Reservation *res);
void drop_nice(Broker *b, size_t i);
int replan(Broker *b, uint64_t id, const PlanRequest *req, PlanEntry *ret_entry, char *why, size_t why_size);
PlanRequest request_for_entry(const PlanEntry *e);

/* adopt.c: before the table is first written, what the previous broker
 * left in it (dir_fd: the runtime directory). */
int adopt_previous_table(Broker *b, int dir_fd);

/* A request refused for a reason its sender must read: the protocol's
 * error code and one line saying what to change. Whatever decides fills it
 * with refuse() and returns the code, which is positive: a refusal is an
 * answer, turned into the Error reply in one place (broker_handle()), while
 * a negative errno stays what it is everywhere, a failure of the broker's
 * own. */
typedef struct Refusal {
        Pace__ErrorCode code;
        char message[1024];
} Refusal;
_printf_(3, 4) int refuse(Refusal *ret, Pace__ErrorCode code, const char *fmt, ...);
/* pace.proto's ErrorCode for a plan_admit()/plan_validate() refusal. */
Pace__ErrorCode plan_refusal_code(PlanRefusal r);

/* reply.c */
int pack_response(Pace__Response *resp, uint8_t **ret, size_t *ret_size);
void grant_from_entry(const Broker *b, const PlanEntry *e, Pace__Grant *g);
/* A split grant's pieces, for a reserve reply: storage that lives as long
 * as the reply is being packed. (A change is never split: it stays on the
 * reservation's one CPU.) */
typedef struct GrantPieces {
        Pace__Piece piece[PACE_MAX_CPUS];
        Pace__Piece *ptr[PACE_MAX_CPUS];
} GrantPieces;
void grant_add_pieces(const Broker *b, uint64_t id, Pace__Grant *g, GrantPieces *store);
const char *format_grant_cpus(const Pace__Grant *g, char *buf, size_t size);
/* A Grant reply for entry, with its pieces. */
int grant_reply(Broker *b, const PlanEntry *entry, uint8_t **reply, size_t *reply_size);
int admin_reply(uint8_t **reply, size_t *reply_size, const char *message);

/* target.c. Each returns 0, a refusal (> 0, in *ret_refusal) or a negative
 * errno. */
/* How a refused target is described: a reservation and a nice level are
 * checked alike, each refusal in the words of its request. */
typedef struct TargetWords {
        const char *name_process; /* "... is a thread, not a process; <this> its process" */
        const char *kernel;       /* after "pid N is a kernel thread" */
        const char *own;          /* after "uid N may " */
        const char *root;         /* after "pid N runs as root" */
} TargetWords;
extern const TargetWords reserve_words, nice_words;
int open_target(Broker *b, const BrokerPeer *peer, pid_t pid, bool use_peer_pidfd, pid_t tid,
                const TargetWords *words, int *ret_pidfd, ProcInfo *ret_info, uint64_t *ret_thread_start_time,
                Refusal *ret_refusal);
int target_permitted(Broker *b, const BrokerPeer *peer, pid_t pid, const ProcInfo *info, const TargetWords *words,
                     Refusal *ret_refusal);
/* 0 if reserving pid (thread tid for the thread scope) lifts no limit its
 * cgroups set (common/cgroup-limits.h), else a refusal naming it. */
int target_limits_kept(Broker *b, pid_t pid, uint32_t scope, pid_t tid, Refusal *ret_refusal);
int read_allowed_cpus(Broker *b, pid_t pid, uint32_t scope, pid_t tid, int pidfd, uint64_t *ret_mask,
                      Refusal *ret_refusal);

/* The handlers, called by request.c once the peer may ask at all. Each
 * returns 0 with a reply, a refusal (> 0, in *ret_refusal, for
 * broker_handle() to answer) or a negative errno. */
int handle_reserve(Broker *b, const BrokerPeer *peer, bool on_behalf, const Pace__ReserveRequest *req,
                   uint8_t **reply, size_t *reply_size, Refusal *ret_refusal);
int handle_release(Broker *b, const BrokerPeer *peer, const Pace__ReleaseRequest *req, uint8_t **reply,
                   size_t *reply_size, Refusal *ret_refusal);
int handle_modify(Broker *b, const BrokerPeer *peer, const Pace__ModifyRequest *req, uint8_t **reply,
                  size_t *reply_size, Refusal *ret_refusal);
int handle_nice(Broker *b, const BrokerPeer *peer, const Pace__NiceRequest *req, uint8_t **reply,
                size_t *reply_size, Refusal *ret_refusal);
int handle_status(Broker *b, uint8_t **reply, size_t *reply_size);
int handle_admin(Broker *b, const BrokerPeer *peer, const Pace__Request *req, uint8_t **reply, size_t *reply_size,
                 Refusal *ret_refusal);
