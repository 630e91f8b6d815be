/* SPDX-License-Identifier: MIT */
#pragma once

/* Where an id sits in a dense array (the planner's entries, the broker's
 * reservations), found without a scan: both are looked up by id on every
 * request, and often once per element of the other, which a scan made
 * quadratic. An open-addressing hash with linear probing: it holds the ids
 * of at most PACE_MAX_RESERVATIONS elements in twice as many slots, so it
 * is never more than half full and a lookup touches a slot or two. It lives
 * inside its owner (no allocation), so a struct copy copies it.
 *
 * It answers what a scan from the start would: an id added again (the
 * pieces of a split reservation share theirs) keeps its first position, so
 * adding in array order finds the first. It has no removal on purpose: the
 * arrays fill a removed element's place with their last one, which moves
 * another id too, and rebuilding from the array (id_index_clear(), then
 * id_index_add() in order) costs no more than a removal already does there
 * and cannot leave a position behind that the array no longer has. */

#include <stddef.h>
#include <stdint.h>

#include "pace-limits.h"

#define ID_INDEX_BITS 11u
#define ID_INDEX_SLOTS (1u << ID_INDEX_BITS)
_Static_assert(ID_INDEX_SLOTS >= 2 * PACE_MAX_RESERVATIONS, "an id index stays at most half full");

typedef struct IdIndex {
        uint64_t id[ID_INDEX_SLOTS];
        uint32_t at[ID_INDEX_SLOTS]; /* 0: empty, else 1 + the position */
} IdIndex;

/* Empty. (A zeroed IdIndex is empty too.) */
void id_index_clear(IdIndex *x);

/* id is at pos, unless it was added before. At most PACE_MAX_RESERVATIONS
 * distinct ids between clears. */
void id_index_add(IdIndex *x, uint64_t id, uint32_t pos);

/* Cleared, then each of the n elements of an array added in order: the id
 * of element i is the uint64_t at id_offset in its stride bytes. What an
 * array's owner does after it moved an element (see above). */
void id_index_rebuild(IdIndex *x, const void *array, size_t n, size_t stride, size_t id_offset);

/* 0 with the position id was first added with, or -ENOENT. */
int id_index_find(const IdIndex *x, uint64_t id, uint32_t *ret_pos);
