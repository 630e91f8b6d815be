/* SPDX-License-Identifier: MIT */
#pragma once

/* Validation of a dispatch table against limits the checker holds itself.
 * This is the dispatcher's trust boundary (DESIGN.md invariant 3) and the
 * definition of invariants 1 and 2 at the table level; the broker's tests use
 * the same code as their property oracle. */

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "pace-table.h"

/* config->cpus must list the managed CPUs (resolved by the caller when the
 * file left "cpus" out). Returns 0 if the table is acceptable, else -EBADMSG
 * with a one-line reason in err. Never reads outside *t. */
int table_check(const PaceTableBuffer *t, const PaceConfig *config, char *err, size_t err_size);

/* Smallest number of slots `owner` holds in any window of `window` consecutive
 * slots of the cyclic frame (the frame repeats forever). window <= frame. */
uint32_t frame_min_supply(const uint16_t *slots, uint32_t frame_slots, uint16_t owner, uint32_t window);

/* Longest run of consecutive owned (non-free) slots in the cyclic frame;
 * frame_slots if no slot is free. */
uint32_t frame_max_busy_run(const uint16_t *slots, uint32_t frame_slots);

/* Ownership changes per frame: the dispatcher's wake-ups (cyclic). */
uint32_t frame_switches(const uint16_t *slots, uint32_t frame_slots);

/* What one budget server (PACE_RES_SERVER) of period_slots costs the
 * dispatcher per frame of frame_slots, in switches (switch_cost_ns each):
 * in each window of its period a promotion and a demotion, two more for
 * each time it must step aside for non-real-time work (at most one per
 * non_rt_max_gap of the window, and one more), and one budget check per
 * slot at most, counted as a quarter of a switch (a wake-up and one usage
 * read, no policy change). Rounded up. Servers take no free time for now
 * (dispatcher/loop.c), so the yields' part is spare. */
uint32_t frame_server_switches(uint32_t period_slots, uint32_t frame_slots, const PaceConfig *config);

/* Whether the free time of a frame, less what the dispatcher costs at its
 * switches, covers the non-real-time share. */
int frame_free_share_ok(uint32_t free_slots, uint32_t switches, uint32_t frame_slots, const PaceConfig *config);
