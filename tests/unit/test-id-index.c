/* SPDX-License-Identifier: MIT */
/* The lookup by id the planner and the broker share (broker/id-index.c):
 * what a scan from the start of the array would find, at its fullest too. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "id-index.h"
#include "macro.h"
#include "test.h"

static IdIndex x; /* large: keep it off the stack */

TEST(an_id_is_found_where_it_was_first_added) {
        uint32_t pos;

        id_index_clear(&x);
        ASSERT_ERR(id_index_find(&x, 7, &pos), -ENOENT);
        id_index_add(&x, 7, 3);
        id_index_add(&x, 0, 4); /* 0 is an id like any other */
        id_index_add(&x, 7, 5); /* a later piece of the same reservation */
        ASSERT_OK(id_index_find(&x, 7, &pos));
        ASSERT_EQ(pos, 3u);
        ASSERT_OK(id_index_find(&x, 0, &pos));
        ASSERT_EQ(pos, 4u);
        ASSERT_ERR(id_index_find(&x, 8, &pos), -ENOENT);

        id_index_clear(&x);
        ASSERT_ERR(id_index_find(&x, 7, &pos), -ENOENT);
        ASSERT_ERR(id_index_find(&x, 0, &pos), -ENOENT);
}

/* As many ids as a plan or a broker can hold, counted up as the broker
 * gives them out and spread wide as adopted ones may be. */
TEST(every_id_of_a_full_array_is_found) {
        static const uint64_t strides[] = { 1, 2048, UINT64_C(0x9E3779B97F4A7C15) };
        uint32_t pos;

        for (size_t k = 0; k < ELEMENTSOF(strides); k++) {
                id_index_clear(&x);
                for (uint32_t i = 0; i < PACE_MAX_RESERVATIONS; i++)
                        id_index_add(&x, 1 + i * strides[k], i);
                for (uint32_t i = 0; i < PACE_MAX_RESERVATIONS; i++) {
                        ASSERT_OK(id_index_find(&x, 1 + i * strides[k], &pos));
                        ASSERT_EQ(pos, i);
                }
                ASSERT_ERR(id_index_find(&x, 1 + PACE_MAX_RESERVATIONS * strides[k], &pos), -ENOENT);
        }
}

/* An array whose last element took a removed one's place: the rebuilt
 * index finds every id where it is now, the removed one nowhere, and a
 * repeated id (a split reservation's pieces) at its first place. */
TEST(a_rebuilt_index_follows_the_array) {
        struct element {
                uint32_t pad;
                uint64_t id;
                char name[3];
        } a[] = { { 0, 10, "a" }, { 0, 11, "b" }, { 0, 12, "c" }, { 0, 11, "d" }, { 0, 13, "e" } };
        size_t n = ELEMENTSOF(a);
        uint32_t pos;

        id_index_rebuild(&x, a, n, sizeof(a[0]), offsetof(struct element, id));
        ASSERT_OK(id_index_find(&x, 11, &pos));
        ASSERT_EQ(pos, 1u);
        a[0] = a[--n]; /* 10 removed, 13 moved to 0 */
        id_index_rebuild(&x, a, n, sizeof(a[0]), offsetof(struct element, id));
        ASSERT_ERR(id_index_find(&x, 10, &pos), -ENOENT);
        ASSERT_OK(id_index_find(&x, 13, &pos));
        ASSERT_EQ(pos, 0u);
        ASSERT_OK(id_index_find(&x, 12, &pos));
        ASSERT_EQ(pos, 2u);
        ASSERT_OK(id_index_find(&x, 11, &pos));
        ASSERT_EQ(pos, 1u);
        id_index_rebuild(&x, a, 0, sizeof(a[0]), offsetof(struct element, id));
        ASSERT_ERR(id_index_find(&x, 13, &pos), -ENOENT);
}

TEST_MAIN()
