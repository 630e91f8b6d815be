/* SPDX-License-Identifier: MIT */
#pragma once

/* The accounting file's per-entry seqlock (proto/pace-stats.h), both halves
 * in one place: the dispatch thread that owns an entry writes it, the
 * broker copies it. The copy is input all the same: the caller still checks
 * every field it shows. */

#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "pace-stats.h"

/* The writer, the record's one dispatch thread: begin, store, end. */
static inline void stats_seq_write_begin(_Atomic uint32_t *seq) {
        atomic_fetch_add_explicit(seq, 1, memory_order_relaxed);
        atomic_thread_fence(memory_order_release);
}

static inline void stats_seq_write_end(_Atomic uint32_t *seq) {
        atomic_fetch_add_explicit(seq, 1, memory_order_release);
}

/* A copy of the size bytes at src, guarded by *seq, that no write
 * overlapped, trying up to `attempts` times: false if every try met a
 * write (the reader skips the record this time). */
static inline bool stats_seq_read(const _Atomic uint32_t *seq, const void *src, size_t size, unsigned attempts,
                                  void *ret) {
        for (unsigned i = 0; i < attempts; i++) {
                uint32_t before = atomic_load_explicit(seq, memory_order_acquire);
                if (before & 1)
                        continue;
                memcpy(ret, src, size);
                atomic_thread_fence(memory_order_acquire);
                if (atomic_load_explicit(seq, memory_order_relaxed) == before)
                        return true;
        }
        return false;
}

static inline void stats_entry_write_begin(PaceStatsEntry *e) {
        stats_seq_write_begin(&e->seq);
}

static inline void stats_entry_write_end(PaceStatsEntry *e) {
        stats_seq_write_end(&e->seq);
}

static inline bool stats_entry_read(const PaceStatsEntry *src, unsigned attempts, PaceStatsEntry *ret) {
        return stats_seq_read(&src->seq, (const void *) src, sizeof(*ret), attempts, ret);
}

static inline bool stats_cpu_read(const PaceStatsCpu *src, unsigned attempts, PaceStatsCpu *ret) {
        return stats_seq_read(&src->seq, (const void *) src, sizeof(*ret), attempts, ret);
}
