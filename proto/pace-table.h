/* SPDX-License-Identifier: MIT */
#pragma once

/* The dispatch table: the one contract between pace-broker (writer, unprivileged)
 * and pace-dispatcher (reader, privileged). It lives in a file in the runtime
 * directory that both map: the broker read-write, the dispatcher read-only.
 *
 * Layout: one header page, then two buffers. The broker fills the buffer the
 * dispatcher is not using, then publishes it by bumping the header's generation
 * (a double buffer with a generation counter). Each buffer also carries its own
 * sequence word, which is 0 while the buffer is being written, so a reader that
 * copies a buffer and finds its sequence changed knows the copy is torn and
 * keeps its last good table (a seqlock).
 *
 * Nothing in here is trusted by the dispatcher: every count, index and CPU
 * number is validated (common/table-check.h) against the dispatcher's own copy
 * of the limits before a single thread's policy is changed. */

#include <stdatomic.h>
#include <stdint.h>

#include "pace-limits.h"

#define PACE_TABLE_MAGIC 0x31454341504bULL /* "KPACE1" */
#define PACE_TABLE_VERSION 3u

/* Total slots of all CPUs' frames in one buffer. */
#define PACE_TABLE_MAX_SLOTS (256u * 1024u)

/* PaceTableReservation.flags: this entry is one piece of a reservation split
 * over CPUs (semi-partitioned). All pieces share id, pid, start time, uid
 * and period; each has its own CPU and budget; together they hold the whole
 * budget in every window of the period, never two at the same instant, and
 * with at least one free slot whenever the process changes CPU. */
#define PACE_RES_PIECE 0x1u

/* PaceTableReservation.flags: a budget server. Its slots are laid out as any
 * reservation's, but they only back it: in each window of its period (frame-
 * aligned) its threads hold a real-time priority whenever it has budget
 * left, so they run the moment they are runnable in its own slots and in
 * slots their owners leave idle (never in free ones); measured
 * consumption demotes them when the budget is spent, and the slots it did
 * not need go to non-real-time work. Never together with PACE_RES_PIECE. */
#define PACE_RES_SERVER 0x2u

/* The server priority: below the running priority, so a server never takes
 * a slot's time from the reservation that owns it. */
#define PACE_SERVER_PRIORITY 97

/* PaceTableReservation.flags: an aligned reservation. Its slots hold its
 * budget in one piece from the start of each window of its period (the
 * phase a client's pace_wait_next_allocation() sleeps to), broken only by
 * the free slots non_rt_max_gap forces. The dispatcher runs it like any
 * other reservation; the flag tells a restarted broker what the client asked
 * for. Never together with PACE_RES_SERVER (a server's slots only back it)
 * or PACE_RES_PIECE (pieces on other CPUs could not be one block). */
#define PACE_RES_ALIGNED 0x4u
/* PaceTableReservation.flags: granted on behalf of another process (a
 * delegate's request, RealtimeKit1): unused by the dispatcher, kept so that
 * a restarted broker still knows which ones ResetKnown drops. */
#define PACE_RES_ON_BEHALF 0x8u

/* PaceTableReservation.scope: what the reservation covers (pace.proto's
 * Scope). The dispatcher keeps the members in a cgroup of the reservation's
 * own and moves out whatever does not belong: other processes (process
 * scope), other threads (thread scope). */
#define PACE_TABLE_SCOPE_PROCESS 0u
#define PACE_TABLE_SCOPE_THREAD 1u
#define PACE_TABLE_SCOPE_TREE 2u

/* Slot owner value for a slot no reservation owns: non-real-time work runs. */
#define PACE_SLOT_FREE 0u

typedef struct PaceTableReservation {
        uint64_t id;
        /* Process the reservation covers, and its start time (field 22 of
         * /proc/PID/stat, clock ticks after boot): the pair names one process
         * even after the pid is reused. */
        int32_t pid;
        uint32_t uid;
        uint64_t start_time;
        int32_t cpu;
        uint32_t period_slots;
        uint32_t budget_slots;
        uint32_t flags; /* PACE_RES_PIECE, PACE_RES_SERVER, PACE_RES_ALIGNED or 0 */
        /* What was asked for: unused by the dispatcher, kept so a restarted
         * broker can adopt the reservation without losing it. */
        uint64_t requested_period_ns;
        uint32_t requested_utilization_ppm;
        uint32_t scope; /* PACE_SCOPE_* */
        /* PACE_TABLE_SCOPE_THREAD: the thread, of process pid; else 0. */
        int32_t tid;
        uint32_t reserved;
} PaceTableReservation;

/* A nice level for one thread (pace.proto's NiceRequest). The dispatcher
 * sets SCHED_OTHER with it once, after checking that thread tid belongs to
 * process pid started at start_time and running as uid, and that nice is
 * not below its own configuration's rtkit_min_nice_level; it puts the old
 * policy and nice back once the entry is gone from the table. */
typedef struct PaceTableNice {
        int32_t pid;
        int32_t tid;
        uint64_t start_time;
        uint32_t uid;
        int32_t nice;
} PaceTableNice;

typedef struct PaceTableCpu {
        int32_t cpu;
        /* Slots in this CPU's repeating frame; 0 when nothing is reserved on it
         * (the dispatcher then sleeps without periodic wake-ups). */
        uint32_t frame_slots;
        /* Index into PaceTableBuffer.slots of this frame's first slot. */
        uint32_t first_slot;
        uint32_t reserved;
} PaceTableCpu;

typedef struct PaceTableBuffer {
        _Atomic uint64_t seq;
        uint64_t slot_ns;
        uint32_t n_cpus;
        uint32_t n_reservations;
        uint32_t n_slots;
        uint32_t n_nice;
        /* The broker's next reservation id: ids are never reused, not even
         * across a broker restart. Unused by the dispatcher. */
        uint64_t next_id;
        PaceTableCpu cpus[PACE_MAX_CPUS];
        PaceTableReservation reservations[PACE_MAX_RESERVATIONS];
        PaceTableNice nice[PACE_MAX_NICE_THREADS];
        /* Owner of each slot: PACE_SLOT_FREE, or 1 + an index into reservations[]. */
        uint16_t slots[PACE_TABLE_MAX_SLOTS];
} PaceTableBuffer;

#define PACE_TABLE_HEADER_SIZE 4096u

typedef struct PaceTableHeader {
        uint64_t magic;
        uint32_t version;
        uint32_t header_size;
        uint64_t buffer_size;
        /* Published generation; the live buffer is buffers[generation & 1].
         * 0: nothing published yet. */
        _Atomic uint64_t generation;
        /* Low 32 bits of generation, as a futex word: an idle dispatcher waits
         * on it, the broker wakes it after publishing. */
        _Atomic uint32_t generation_futex;
        int32_t broker_pid;
} PaceTableHeader;

_Static_assert(sizeof(PaceTableHeader) <= PACE_TABLE_HEADER_SIZE, "header fits its page");
_Static_assert(PACE_MAX_RESERVATIONS < UINT16_MAX, "slot owners fit uint16_t");

#define PACE_TABLE_FILE_SIZE ((uint64_t) PACE_TABLE_HEADER_SIZE + 2u * sizeof(PaceTableBuffer))

static inline PaceTableBuffer *pace_table_buffer(void *base, unsigned idx) {
        return (PaceTableBuffer *) ((char *) base + PACE_TABLE_HEADER_SIZE + (uint64_t) idx * sizeof(PaceTableBuffer));
}
