/* SPDX-License-Identifier: MIT */
#pragma once

/* Arithmetic on cyclic frames of slots, shared by the planner
 * (broker/plan.c, which builds frames of uint32_t owners) and the validator
 * (common/table-check.c, which reads the table's uint16_t owners): what one
 * admits must be what the other counts, so both count with the same code.
 * In both, 0 (PACE_SLOT_FREE) is a free slot and a frame repeats forever. */

#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "macro.h"

uint64_t gcd_u64(uint64_t a, uint64_t b);
/* 0 stands for "no frame yet": lcm_u64(0, b) is b. */
uint64_t lcm_u64(uint64_t a, uint64_t b);
static inline uint32_t lcm_u32(uint32_t a, uint32_t b) {
        /* Frames are bounded by PACE_MAX_FRAME_SLOTS, so callers' lcms fit. */
        return (uint32_t) lcm_u64(a, b);
}

/* A reservation's utilization in ppm, floored: per-user limits add these up
 * on both sides, so there is no rounding slack between admission and check. */
static inline uint64_t slots_ppm(uint32_t budget_slots, uint32_t period_slots) {
        return (uint64_t) budget_slots * PPM / period_slots;
}

/* Ownership changes per frame: the dispatcher's wake-ups (cyclic). */
uint32_t frame_switches_u16(const uint16_t *slots, uint32_t frame_slots);
uint32_t frame_switches_u32(const uint32_t *slots, uint32_t frame_slots);
/* Owned (non-free) slots in the frame. */
uint32_t frame_busy_slots_u16(const uint16_t *slots, uint32_t frame_slots);
uint32_t frame_busy_slots_u32(const uint32_t *slots, uint32_t frame_slots);
/* Longest run of consecutive owned slots in the cyclic frame; frame_slots
 * if no slot is free. */
uint32_t frame_max_busy_run_u16(const uint16_t *slots, uint32_t frame_slots);
uint32_t frame_max_busy_run_u32(const uint32_t *slots, uint32_t frame_slots);

#define FRAME_GENERIC(name, slots)                                                      \
        _Generic((slots),                                                               \
                 uint16_t *: name##_u16, const uint16_t *: name##_u16,                  \
                 uint32_t *: name##_u32, const uint32_t *: name##_u32)
#define frame_switches(slots, n) FRAME_GENERIC(frame_switches, slots)(slots, n)
#define frame_busy_slots(slots, n) FRAME_GENERIC(frame_busy_slots, slots)(slots, n)
#define frame_max_busy_run(slots, n) FRAME_GENERIC(frame_max_busy_run, slots)(slots, n)

/* Smallest number of slots `owner` holds in any window of `window`
 * consecutive slots of the cyclic frame. window <= frame. */
uint32_t frame_min_supply(const uint16_t *slots, uint32_t frame_slots, uint16_t owner, uint32_t window);

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
bool frame_free_share_ok(uint32_t free_slots, uint32_t switches, uint32_t frame_slots, const PaceConfig *config);
/* The same at switch_cost_ns a switch instead of the configured cost: the
 * broker's charge on a CPU whose dispatcher measured itself dearer. */
bool frame_free_share_ok_at(uint32_t free_slots, uint32_t switches, uint32_t frame_slots, const PaceConfig *config,
                            uint64_t switch_cost_ns);

/* How many reservations user `who` holds and their utilization in ppm, as
 * the planner admits and the validator checks them: the pieces of a
 * reservation split over CPUs (entries sharing an id) count once, and
 * utilization is the sum of every entry's slots_ppm(). `entries` is any
 * array of structs with id, uid, budget_slots and period_slots (PlanEntry,
 * PaceTableReservation). */
#define FRAME_USER_TOTALS(entries, n, who, ret_count, ret_ppm)                          \
        do {                                                                            \
                uint32_t _count = 0;                                                    \
                uint64_t _ppm = 0;                                                      \
                for (uint32_t _i = 0; _i < (n); _i++) {                                 \
                        bool _first = true;                                             \
                        if ((entries)[_i].uid != (who))                                 \
                                continue;                                               \
                        _ppm += slots_ppm((entries)[_i].budget_slots, (entries)[_i].period_slots); \
                        for (uint32_t _j = 0; _j < _i; _j++)                            \
                                _first &= (entries)[_j].id != (entries)[_i].id;         \
                        _count += _first;                                               \
                }                                                                       \
                *(ret_count) = _count;                                                  \
                *(ret_ppm) = _ppm;                                                      \
        } while (0)
