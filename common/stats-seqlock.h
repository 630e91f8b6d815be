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

/* The writer, the entry's one dispatch thread: begin, store, end. */
static inline void stats_entry_write_begin(PaceStatsEntry *e) {
        atomic_fetch_add_explicit(&e->seq, 1, memory_order_relaxed);
        atomic_thread_fence(memory_order_release);
}

static inline void stats_entry_write_end(PaceStatsEntry *e) {
        atomic_fetch_add_explicit(&e->seq, 1, memory_order_release);
}

/* A copy of src that no write overlapped, trying up to `attempts` times:
 * false if every try met a write (the reader skips the entry this time). */
static inline bool stats_entry_read(const PaceStatsEntry *src, unsigned attempts, PaceStatsEntry *ret) {
        for (unsigned i = 0; i < attempts; i++) {
                uint32_t seq = atomic_load_explicit(&src->seq, memory_order_acquire);
                if (seq & 1)
                        continue;
                memcpy(ret, (const void *) src, sizeof(*ret));
                atomic_thread_fence(memory_order_acquire);
                if (atomic_load_explicit(&src->seq, memory_order_relaxed) == seq)
                        return true;
        }
        return false;
}
