/* SPDX-License-Identifier: MIT */
#pragma once

/* Nice levels from the table (RealtimeKit1's MakeThreadHighPriority, asked
 * through the broker): the main thread gives each thread named there
 * SCHED_OTHER at its nice level, once, after checking it against the
 * kernel's word (the table is the broker's, and the broker's user is not
 * trusted), and puts the thread back once the entry has gone. */

#include <stdbool.h>
#include <stddef.h>

#include "pace-table.h"

typedef struct NiceSet NiceSet;

int nice_set_new(NiceSet **ret);
/* Puts every thread it changed back first. */
NiceSet *nice_set_free(NiceSet *s);
static inline void nice_set_freep(NiceSet **s) {
        nice_set_free(*s);
}

/* Brings the threads in line with t, a table that passed table_check()
 * (which holds nice to the configuration's floor). allow_root: the
 * configuration's reserve_root_processes. Returns how many threads were
 * changed or put back; a level that cannot be applied (a process that is
 * not the entry's, a thread that is real-time...) is skipped, and the
 * reason for the last such one is in why (empty if none). */
size_t nice_set_apply(NiceSet *s, const PaceTableBuffer *t, bool allow_root, char *why, size_t why_size);

size_t nice_set_size(const NiceSet *s);
