/* SPDX-License-Identifier: MIT */
#include "macro.h"
#include "server.h"

bool server_budget_look(ServerBudget *b, uint64_t now_ns, uint64_t window_ns, uint64_t budget_ns, uint64_t usage,
                        bool held, uint64_t min_look_ns) {
        if (window_ns == 0) {
                b->exhausted = true;
                b->next_look_ns = UINT64_MAX;
                return false;
        }
        if (now_ns >= b->window_end_ns) {
                b->window_end_ns = now_ns / window_ns * window_ns + window_ns;
                b->usage_base = usage;
                b->last_look_ns = now_ns;
                b->last_usage = usage;
                b->exhausted = false;
        }
        /* Usage that goes back (a group made anew) cannot be told from a
         * member that hid what it took: spent until the next window, which
         * counts from wherever usage then stands. */
        if (usage < b->last_usage) {
                b->usage_base = b->last_usage = usage;
                b->exhausted = true;
        }
        uint64_t used = usage - b->usage_base;
        if (b->exhausted || used + SERVER_BUDGET_FLOOR_NS >= budget_ns) {
                b->exhausted = true;
                b->next_look_ns = b->window_end_ns;
                return false;
        }
        uint64_t left = budget_ns - used;
        uint64_t since = now_ns - b->last_look_ns;
        uint64_t took = usage >= b->last_usage ? usage - b->last_usage : 0;
        bool idle = held && since > 0 && 2 * took < since;
        if (held && since > 0)
                b->seen_idle = idle;
        uint64_t step = idle ? MAX(left, min_look_ns) : left;

        b->last_look_ns = now_ns;
        b->last_usage = usage;
        b->next_look_ns = MIN(now_ns + step, b->window_end_ns);
        return true;
}

uint64_t server_free_turn(uint64_t last_turn_ns, uint64_t from, uint64_t to, uint64_t taken_ns, uint64_t margin_ns) {
        if (to <= from || to - from <= taken_ns + margin_ns)
                return last_turn_ns;
        return MAX(last_turn_ns, to - taken_ns - margin_ns);
}

bool server_free_take_until(const uint64_t (*free)[2], size_t n, uint64_t from, uint64_t deadline, uint64_t reserve_ns,
                            uint64_t *ret) {
        uint64_t have = 0;

        for (size_t i = n; i-- > 0;) {
                uint64_t s = MAX(free[i][0], from), e = MIN(free[i][1], deadline);
                if (e <= s)
                        continue;
                if (have + (e - s) >= reserve_ns) {
                        *ret = e - (reserve_ns - have);
                        return *ret > from;
                }
                have += e - s;
        }
        return false;
}
