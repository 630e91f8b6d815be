/* SPDX-License-Identifier: MIT */
/* The dispatcher's accounting file (proto/pace-stats.h), read-only: mapped
 * when it is new, and what each dispatch thread measured a change of owner
 * to cost, charged by admission where that is more than switch_cost_us. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include "broker-internal.h"
#include "macro.h"
#include "pace-stats.h"
#include "stats-seqlock.h"

/* A measured cost above this is not believed (a slot's worth: a dispatcher
 * that slow could not dispatch at all); the charge stays as it was. */
#define COST_BELIEVABLE_MAX_NS(b) ((b)->config.slot_ns)

/* (Re)maps the dispatcher's accounting file when it is new: another inode
 * means a restarted dispatcher. Only a regular file of root's of the exact
 * size, with the right magic and version, is read. */
void broker_stats_refresh(Broker *b) {
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

void broker_charge_measured_costs(Broker *b) {
        broker_stats_refresh(b);
        const PaceStatsFile *f = b->stats;
        if (!f || f->magic != PACE_STATS_MAGIC || f->version != PACE_STATS_VERSION)
                return;
        for (uint32_t i = 0; i < PACE_MAX_CPUS; i++) {
                PaceStatsCpu c;
                if (!stats_cpu_read(&f->cpus[i], 4, &c) || c.updated_ns == 0 || c.changes == 0)
                        continue;
                if (c.cost_max_ns > COST_BELIEVABLE_MAX_NS(b))
                        continue;
                /* The charge changed: up to what was measured, or (within
                 * the configured cost) back down to that from above it. */
                if (plan_charge_switch_cost(b->plan, c.cpu, c.cost_max_ns) <= 0)
                        continue;
                uint64_t configured = b->config.switch_cost_ns, configured_us = configured / NSEC_PER_USEC;
                uint64_t cost_us = c.cost_max_ns / NSEC_PER_USEC, cpu_us = c.cpu_time_ns / NSEC_PER_USEC;
                if (c.cost_max_ns > configured)
                        broker_log(b, LOG_WARNING,
                                   "CPU %" PRIi32 ": the dispatcher measures %" PRIu64 " us per change of owner "
                                   "(the most of its last windows; %" PRIu64 " changes, %" PRIu64 " us of CPU in "
                                   "the last), more than switch_cost_us %" PRIu64 ": admission charges %" PRIu64
                                   " us a switch there from now on",
                                   c.cpu, cost_us, c.changes, cpu_us, configured_us, cost_us);
                else
                        broker_log(b, LOG_INFO,
                                   "CPU %" PRIi32 ": the dispatcher measures %" PRIu64 " us per change of owner "
                                   "again, within switch_cost_us: admission charges %" PRIu64 " us a switch there",
                                   c.cpu, cost_us, configured_us);
        }
}
