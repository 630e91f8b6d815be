/* SPDX-License-Identifier: MIT */
#pragma once

/* Validation of a dispatch table against limits the checker holds itself.
 * This is the dispatcher's trust boundary (invariant 3 in README.md) and the
 * definition of invariants 1 and 2 at the table level; the broker's tests use
 * the same code as their property oracle. */

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "frame-math.h"
#include "pace-table.h"

/* config->cpus must list the managed CPUs (resolved by the caller when the
 * file left "cpus" out). Returns 0 if the table is acceptable, else -EBADMSG
 * with a one-line reason in why. Never reads outside *t. */
int table_check(const PaceTableBuffer *t, const PaceConfig *config, char *why, size_t why_size);
