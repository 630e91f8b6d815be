/* SPDX-License-Identifier: MIT */
#pragma once

/* A CPU's frame, compiled into runs: maximal stretches of slots with one
 * owner, which is all the dispatch loop needs to know (it wakes only where
 * ownership changes). Pure: no system calls, no allocation, so it is unit
 * tested without privileges and runs on the dispatch thread at adoption. */

#include <stdbool.h>
#include <stdint.h>

typedef struct FrameRun {
        uint32_t start; /* slot offset in the rotated frame */
        /* The table's reservation index + 1 (its slot value); 0: free. */
        uint32_t owner;
        /* Free slots (for this owner) from its end to the owner's next run. */
        uint32_t gap;
        /* Its owner's last run of its period, the one before its longest
         * gap: its end closes the period's accounting. */
        bool closes;
} FrameRun;

/* Per owner, while compiling: index owner (slot value). */
typedef struct FrameScratch {
        uint32_t first, next, maxgap, close;
} FrameScratch;

/* slots[frame] holds slot values (0 free, else reservation index + 1).
 * live[owner] false: that owner's slots count as free (an ignored or
 * exited reservation: no wake-up for them). period_slots[owner]: its
 * granted period, for finding the run that closes each period. live,
 * period_slots and scratch have an entry for every slot value present.
 * The runs go to out (frame + 1 entries at most), rotated to begin where
 * ownership changes, so a frame boundary is always a wake-up and no run
 * straddles one; *ret_rot is the table slot the rotated frame begins at.
 * A frame with one owner throughout (which table_check() forbids) or none
 * gives one run from slot 0. */
void frame_compile(const uint16_t *slots, uint32_t frame, const bool *live, const uint32_t *period_slots,
                   FrameScratch *scratch, FrameRun *out, uint32_t *ret_n, uint32_t *ret_rot);

/* Where run k of n_runs ends: the next run's start, or the frame's end. */
static inline uint32_t frame_run_end(const FrameRun *runs, uint32_t n_runs, uint32_t frame, uint32_t k) {
        return k + 1 < n_runs ? runs[k + 1].start : frame;
}

/* Where the global grid stands at slot g (CLOCK_MONOTONIC / slot) for a
 * compiled frame: the offset into the rotated frame and the run that
 * covers it. */
void frame_locate(const FrameRun *runs, uint32_t n_runs, uint32_t frame, uint32_t rot, uint64_t g,
                  uint32_t *ret_offset, uint32_t *ret_run);
