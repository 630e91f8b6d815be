/* SPDX-License-Identifier: MIT */
#pragma once

/* A ring of pointers between exactly one producer and one consumer thread,
 * without locks: how the main thread hands a dispatch loop the threads it
 * registered, and the loop hands back the ones it let go, so that the loop
 * neither allocates nor frees nor waits (notes/realtime-path.md). The slots
 * are allocated once, before either side uses the ring. */

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct SpscRing {
        _Atomic uint32_t head; /* next to pop: the consumer's */
        _Atomic uint32_t tail; /* next to push: the producer's */
        uint32_t mask;
        void **slots;
} SpscRing;

/* Room for at least n pointers. */
static inline int spsc_init(SpscRing *r, uint32_t n) {
        uint32_t size = 1;

        while (size < n)
                size <<= 1;
        r->slots = calloc(size, sizeof(void *));
        if (!r->slots)
                return -ENOMEM;
        r->mask = size - 1;
        atomic_init(&r->head, 0);
        atomic_init(&r->tail, 0);
        return 0;
}

static inline void spsc_done(SpscRing *r) {
        free(r->slots);
        r->slots = NULL;
}

/* The producer's: false when full. */
static inline bool spsc_push(SpscRing *r, void *p) {
        uint32_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);

        if (tail - atomic_load_explicit(&r->head, memory_order_acquire) > r->mask)
                return false;
        r->slots[tail & r->mask] = p;
        atomic_store_explicit(&r->tail, tail + 1, memory_order_release);
        return true;
}

/* The consumer's: NULL when empty. */
static inline void *spsc_pop(SpscRing *r) {
        uint32_t head = atomic_load_explicit(&r->head, memory_order_relaxed);

        if (head == atomic_load_explicit(&r->tail, memory_order_acquire))
                return NULL;
        void *p = r->slots[head & r->mask];
        atomic_store_explicit(&r->head, head + 1, memory_order_release);
        return p;
}
