/* SPDX-License-Identifier: MIT */
#pragma once

/* Reads of the shared table mapping that survive the file shrinking under
 * it. The broker owns the file and may truncate it at any time; touching a
 * page past the new end raises SIGBUS, which would kill the dispatcher
 * with a slot owner still promoted. Each read below runs under a
 * sigsetjmp guard and turns the fault into -EFAULT. */

#include <stdint.h>

#include "table-shm.h"

/* The SIGBUS handler, for the whole process (any thread may read the
 * mapping). Idempotent; call before the first guarded read. A SIGBUS
 * outside a guarded read still kills the process as it would have. */
int table_guard_install(void);

/* table_reader_snapshot(), or -EFAULT if the mapping broke. */
int table_guard_snapshot(const TableReader *r, PaceTableBuffer *out, uint64_t *ret_gen);
/* table_reader_generation(), or -EFAULT. */
int table_guard_generation(const TableReader *r, uint64_t *ret);
/* table_reader_wait() without a timeout (0, or -EINTR on a signal), or
 * -EFAULT. */
int table_guard_wait(const TableReader *r, uint64_t seen);
