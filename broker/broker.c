/* SPDX-License-Identifier: MIT */
/* The broker's state and its lifecycle: creation (adopting what a previous
 * broker left in the table, adopt.c), publication of the table, reservations that
 * end (process or thread exit, CPU hotplug, reset) and configuration
 * reload. The requests themselves are handled in request.c and the
 * handlers-*.c files. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <syslog.h>
#include <unistd.h>

#include "broker-internal.h"
#include "macro.h"
#include "proc-util.h"
#include "table-check.h"

void broker_publish(Broker *b) {
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
        b->delegate_uid = options->delegate_uid;
        b->proc_root = strdup(options->proc_root ? options->proc_root : "/proc");
        b->cgroup_root = strdup(options->cgroup_root ? options->cgroup_root : "/sys/fs/cgroup");
        if (!b->proc_root || !b->cgroup_root)
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
                broker_publish(b);
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
        free(b->cgroup_root);
        free(b);
        return NULL;
}

size_t broker_n_reservations(const Broker *b) {
        return b->n_reservations;
}

uint64_t broker_generation(const Broker *b) {
        return b->table ? table_writer_generation(b->table) : 0;
}

const Reservation *lookup_reservation(const Broker *b, uint64_t id) {
        uint32_t i;

        return id_index_find(&b->reservation_by_id, id, &i) == 0 ? &b->reservations[i] : NULL;
}

Reservation *find_reservation(Broker *b, uint64_t id) {
        /* As strchr() does: the caller's own Broker, so its own element. */
        return (Reservation *) lookup_reservation(b, id);
}

void add_reservation(Broker *b) {
        id_index_add(&b->reservation_by_id, b->reservations[b->n_reservations].id, (uint32_t) b->n_reservations);
        b->n_reservations++;
}

void drop_reservation(Broker *b, Reservation *res) {
        size_t i = (size_t) (res - b->reservations);

        (void) plan_remove(b->plan, res->id);
        if (b->hooks.unwatch && res->watch)
                b->hooks.unwatch(b->hooks.userdata, res->watch);
        safe_close(res->pidfd);
        b->reservations[i] = b->reservations[--b->n_reservations];
        /* The last one took its place (id-index.h: rebuilt, not patched). */
        id_index_rebuild(&b->reservation_by_id, b->reservations, b->n_reservations, sizeof(Reservation),
                         offsetof(Reservation, id));
        broker_publish(b);
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

void drop_nice(Broker *b, size_t i) {
        safe_close(b->nice[i].pidfd);
        b->nice[i] = b->nice[--b->n_nice];
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
                broker_publish(b);
}

/* Removes id and admits req in a copy of the plan; the plan is replaced only
 * if that worked. 0, a PlanRefusal (> 0, with why) or a negative errno. */
int replan(Broker *b, uint64_t id, const PlanRequest *req, PlanEntry *ret_entry, char *why, size_t why_size) {
        _cleanup_(plan_freep) Plan *next = NULL;
        int r;

        broker_charge_measured_costs(b);
        r = plan_clone(b->plan, &next);
        if (r < 0)
                return r;
        r = plan_remove(next, id);
        if (r < 0)
                return r;
        r = plan_admit(next, req, ret_entry, why, why_size);
        if (r != 0)
                return r;
        plan_free(b->plan);
        b->plan = TAKE_PTR(next);
        return 0;
}

/* The request that would admit an existing reservation again as it was
 * asked for: who it covers (scope, thread) never changes with a modify or a
 * move, only what it gets and where. */
PlanRequest request_for_entry(const PlanEntry *e) {
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
                if (replan(b, e->id, &preq, &moved, why, sizeof(why)) == 0) {
                        broker_log(b, LOG_WARNING, "reservation %" PRIu64 " moved from CPU %" PRIi32 " (offline) to CPU %"
                                   PRIi32, moved.id, from, moved.cpu);
                        i++;
                        continue;
                }
                broker_log(b, LOG_WARNING, "reservation %" PRIu64 " of pid %" PRIi32 " dropped: CPU %" PRIi32
                           " went offline and no online CPU has room (%s)", b->reservations[i].id, preq.pid, from, why);
                drop_reservation(b, &b->reservations[i]);
        }
        broker_publish(b);
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
        broker_publish(b);
        return 0;
}

size_t broker_reset(Broker *b) {
        size_t n = b->n_reservations;
        while (b->n_reservations > 0)
                drop_reservation(b, &b->reservations[b->n_reservations - 1]);
        while (b->n_nice > 0)
                drop_nice(b, b->n_nice - 1);
        broker_publish(b);
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
        broker_publish(b);
        return n;
}
