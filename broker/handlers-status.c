/* SPDX-License-Identifier: MIT */
/* The status request: every grant with the dispatcher's accounting of it
 * (read from its stats file), every CPU, every nice level. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "broker-internal.h"
#include "macro.h"
#include "pace-stats.h"
#include "stats-seqlock.h"

/* A thread count the dispatcher reports is shown up to this. */
#define PACE_MAX_THREADS_REPORTED 65536u

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
                if (src->id != id)
                        continue;
                if (!stats_entry_read(src, 4, &e) || e.id != id || e.window_ns == 0)
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

int handle_status(Broker *b, uint8_t **reply, size_t *reply_size) {
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
        broker_stats_refresh(b);
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
