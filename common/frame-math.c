/* SPDX-License-Identifier: MIT */
#include "frame-math.h"
#include "macro.h"
#include "pace-table.h"

uint64_t gcd_u64(uint64_t a, uint64_t b) {
        while (b) {
                uint64_t t = a % b;
                a = b;
                b = t;
        }
        return a;
}

uint64_t lcm_u64(uint64_t a, uint64_t b) {
        if (a == 0)
                return b;
        if (b == 0)
                return a;
        return a / gcd_u64(a, b) * b;
}

/* One body per slot width: the planner's frames hold uint32_t owners, the
 * table's uint16_t. */
#define DEFINE_FRAME_SCANS(suffix, type)                                                 \
        uint32_t frame_switches_##suffix(const type *slots, uint32_t frame_slots) {      \
                uint32_t n = 0;                                                          \
                for (uint32_t i = 0; i < frame_slots; i++)                               \
                        n += slots[i] != slots[(i + 1) % frame_slots];                   \
                return n;                                                                \
        }                                                                                \
                                                                                         \
        uint32_t frame_busy_slots_##suffix(const type *slots, uint32_t frame_slots) {    \
                uint32_t n = 0;                                                          \
                for (uint32_t i = 0; i < frame_slots; i++)                               \
                        n += slots[i] != PACE_SLOT_FREE;                                 \
                return n;                                                                \
        }                                                                                \
                                                                                         \
        uint32_t frame_max_busy_run_##suffix(const type *slots, uint32_t frame_slots) {  \
                uint32_t first_free = UINT32_MAX, run = 0, longest = 0;                  \
                for (uint32_t i = 0; i < frame_slots; i++)                               \
                        if (slots[i] == PACE_SLOT_FREE) {                                \
                                first_free = i;                                          \
                                break;                                                   \
                        }                                                                \
                if (first_free == UINT32_MAX)                                            \
                        return frame_slots;                                              \
                /* Start just after a free slot so that wrapped runs are whole. */       \
                for (uint32_t k = 1; k <= frame_slots; k++) {                            \
                        uint32_t i = (first_free + k) % frame_slots;                     \
                        if (slots[i] == PACE_SLOT_FREE)                                  \
                                run = 0;                                                 \
                        else                                                             \
                                longest = MAX(longest, ++run);                           \
                }                                                                        \
                return longest;                                                          \
        }

DEFINE_FRAME_SCANS(u16, uint16_t)
DEFINE_FRAME_SCANS(u32, uint32_t)

uint32_t frame_min_supply(const uint16_t *slots, uint32_t frame_slots, uint16_t owner, uint32_t window) {
        uint32_t held = 0, min;

        if (frame_slots == 0 || window == 0)
                return 0;
        if (window > frame_slots)
                window = frame_slots;

        /* Sliding window over the cyclic frame: O(frame). */
        for (uint32_t i = 0; i < window; i++)
                held += slots[i] == owner;
        min = held;
        for (uint32_t start = 1; start < frame_slots; start++) {
                held -= slots[start - 1] == owner;
                held += slots[(start + window - 1) % frame_slots] == owner;
                min = MIN(min, held);
        }
        return min;
}

uint32_t frame_server_switches(uint32_t period_slots, uint32_t frame_slots, const PaceConfig *config) {
        uint64_t gap = config->non_rt_max_gap_ns ? config->non_rt_max_gap_ns : config->slot_ns;
        uint64_t period_ns = (uint64_t) period_slots * config->slot_ns;
        uint64_t yields = (period_ns + gap - 1) / gap + 1;
        uint64_t per_window_quarters = 4 * (2 + 2 * yields) + period_slots;

        if (period_slots == 0)
                return 0;
        uint64_t quarters = per_window_quarters * (frame_slots / period_slots);
        return (uint32_t) MIN((quarters + 3) / 4, (uint64_t) UINT32_MAX);
}

bool frame_free_share_ok(uint32_t free_slots, uint32_t switches, uint32_t frame_slots, const PaceConfig *config) {
        return frame_free_share_ok_at(free_slots, switches, frame_slots, config, config->switch_cost_ns);
}

bool frame_free_share_ok_at(uint32_t free_slots, uint32_t switches, uint32_t frame_slots, const PaceConfig *config,
                            uint64_t switch_cost_ns) {
        /* In ns, 128-bit free: a frame is at most 65536 slots of 100 ms. */
        unsigned __int128 free_ns = (unsigned __int128) free_slots * config->slot_ns;
        unsigned __int128 cost_ns = (unsigned __int128) switches * switch_cost_ns;
        unsigned __int128 frame_ns = (unsigned __int128) frame_slots * config->slot_ns;

        if (free_ns < cost_ns)
                return false;
        return (free_ns - cost_ns) * PPM >= frame_ns * config->non_rt_share_ppm;
}
