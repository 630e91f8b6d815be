/* SPDX-License-Identifier: MIT */
#include <assert.h>
#include <errno.h>
#include <string.h>

#include "id-index.h"

/* Fibonacci hashing: ids are mostly consecutive (the broker counts them
 * up), and the multiply spreads neighbours over the whole table. */
static uint32_t slot_of(uint64_t id) {
        return (uint32_t) ((id * UINT64_C(0x9E3779B97F4A7C15)) >> (64 - ID_INDEX_BITS));
}

void id_index_clear(IdIndex *x) {
        /* at[] alone says what is empty; id[] is read only where at[] is set. */
        memset(x->at, 0, sizeof(x->at));
}

void id_index_add(IdIndex *x, uint64_t id, uint32_t pos) {
        uint32_t s = slot_of(id);

        for (uint32_t n = 0; n < ID_INDEX_SLOTS; n++, s = (s + 1) & (ID_INDEX_SLOTS - 1)) {
                if (x->at[s] == 0) {
                        x->id[s] = id;
                        x->at[s] = pos + 1;
                        return;
                }
                if (x->id[s] == id)
                        return;
        }
        assert(!"id index full: more ids than PACE_MAX_RESERVATIONS");
}

void id_index_rebuild(IdIndex *x, const void *array, size_t n, size_t stride, size_t id_offset) {
        const unsigned char *p = array;
        uint64_t id;

        id_index_clear(x);
        for (size_t i = 0; i < n; i++) {
                memcpy(&id, p + i * stride + id_offset, sizeof(id));
                id_index_add(x, id, (uint32_t) i);
        }
}

int id_index_find(const IdIndex *x, uint64_t id, uint32_t *ret_pos) {
        uint32_t s = slot_of(id);

        /* An empty slot ends the run an id would have been put in: nothing
         * is ever taken out of the middle of one. */
        for (uint32_t n = 0; n < ID_INDEX_SLOTS && x->at[s] != 0; n++, s = (s + 1) & (ID_INDEX_SLOTS - 1))
                if (x->id[s] == id) {
                        *ret_pos = x->at[s] - 1;
                        return 0;
                }
        return -ENOENT;
}
