/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "stats-file.h"
#include "stats-seqlock.h"
#include "time-util.h"

int stats_file_open(const char *runtime_dir, int *ret_fd) {
        _cleanup_close_ int dfd = open(runtime_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        _cleanup_close_ int fd = -EBADF;
        struct stat st;

        if (dfd < 0)
                return negative_errno();
        /* The directory is the broker's: whatever it left under the name is
         * not ours to trust (a symlink, a file of its own, a hard link). */
        fd = openat(dfd, PACE_STATS_NAME, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != 0 || st.st_nlink != 1))
                fd = safe_close(fd);
        if (fd < 0) {
                (void) unlinkat(dfd, PACE_STATS_NAME, 0);
                fd = openat(dfd, PACE_STATS_NAME, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
                if (fd < 0)
                        return negative_errno();
        }
        if (fchmod(fd, 0644) < 0 || ftruncate(fd, 0) < 0 || ftruncate(fd, sizeof(PaceStatsFile)) < 0)
                return negative_errno();
        *ret_fd = TAKE_FD(fd);
        return 0;
}

int stats_file_map(int fd, PaceStatsFile **ret) {
        PaceStatsFile *f = mmap(NULL, sizeof(PaceStatsFile), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

        if (f == MAP_FAILED)
                return negative_errno();
        /* A restarted dispatcher starts from nothing: its Helds are new. */
        memset(f, 0, sizeof(*f));
        f->version = PACE_STATS_VERSION;
        f->n_entries = PACE_STATS_MAX_ENTRIES;
        f->dispatcher_pid = getpid();
        /* The broker trusts the entries only once it sees the magic. */
        atomic_thread_fence(memory_order_release);
        f->magic = PACE_STATS_MAGIC;
        *ret = f;
        return 0;
}

PaceStatsFile *stats_file_unmap(PaceStatsFile *f) {
        if (f)
                munmap(f, sizeof(PaceStatsFile));
        return NULL;
}

int stats_file_claim(PaceStatsFile *f, uint64_t id, int32_t cpu, PaceStatsEntry **ret) {
        for (uint32_t i = 0; i < PACE_STATS_MAX_ENTRIES; i++) {
                PaceStatsEntry *e = &f->entries[i];
                uint32_t expected = 0;
                /* Dispatch threads of several CPUs claim at once. */
                if (!atomic_compare_exchange_strong(&e->claimed, &expected, 1))
                        continue;
                stats_entry_write_begin(e);
                e->id = id;
                e->cpu = cpu;
                e->threads = 0;
                e->cpu_time_ns = e->window_ns = e->delivered_ns = 0;
                e->periods = e->periods_blocked = e->periods_wanted_more = 0;
                e->updated_ns = monotonic_ns();
                stats_entry_write_end(e);
                *ret = e;
                return 0;
        }
        return -ENOSPC;
}

void stats_file_publish(PaceStatsEntry *e, const Acct *a, uint32_t threads, uint64_t usage_ns, uint64_t now) {
        acct_publish(a, threads, usage_ns, now, e);
}

void stats_file_release(PaceStatsEntry *e) {
        stats_entry_write_begin(e);
        e->id = 0;
        stats_entry_write_end(e);
        atomic_store(&e->claimed, 0);
}

void stats_file_publish_cost(PaceStatsFile *f, uint32_t index, int32_t cpu, uint64_t window_ns, uint64_t changes,
                             uint64_t cpu_time_ns, uint64_t cost_max_ns, uint64_t now) {
        PaceStatsCpu *c;

        if (index >= PACE_MAX_CPUS)
                return;
        c = &f->cpus[index];
        stats_seq_write_begin(&c->seq);
        c->cpu = cpu;
        c->window_ns = window_ns;
        c->changes = changes;
        c->cpu_time_ns = cpu_time_ns;
        c->cost_ns = changes ? cpu_time_ns / changes : 0;
        c->cost_max_ns = cost_max_ns;
        c->updated_ns = now;
        stats_seq_write_end(&c->seq);
}
