/* SPDX-License-Identifier: MIT */
#pragma once

/* What the two halves of a dispatch loop share: loop.c, the sequence of
 * changes of owner, and loop-servers.c, the budget servers' side of each
 * change (server.h's rules applied to the members' measured usage). Both
 * run only on the loop's thread, at SCHED_FIFO 99, under loop.c's rules. */

#include "loop.h"
#include "macro.h"

static inline bool loop_stopping(CpuLoop *l) {
        return atomic_load_explicit(&l->shared->stop, memory_order_relaxed);
}

/* Queued in the log ring for the main thread: a loop never writes to the
 * log itself (log-ring.h). */
_printf_(3, 4) void loop_log(CpuLoop *l, int priority, const char *fmt, ...);
/* Promotes to to priority, and says once why it could not. */
int loop_promote(CpuLoop *l, Held *to, int priority);

/* Run k of the frame that began at frame_start starts at t with table
 * owner owner (a server's own run included; NULL: free). */
void loop_servers_at_run(CpuLoop *l, uint64_t t, Held *owner, uint32_t k, uint64_t frame_start);
/* A server's look falls due within a run: its budget ran out, a new
 * window began, or its time in this free run is up. */
void loop_servers_look(CpuLoop *l, uint64_t now);
/* Every server to its waiting policy, and no free interval carried over. */
void loop_servers_demote(CpuLoop *l);
