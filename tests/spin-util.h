/* SPDX-License-Identifier: MIT */
#pragma once

/* What the spinning helper programs (spin-threads, soak-client) share:
 * starting many threads at once. */

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Threads number first + 1 to n (of n), each running fn, with small
 * stacks: a thousand threads need not cost 8 GiB of address space. The
 * first ones are the caller's own (soak-client's main thread is one of its
 * N). 0, or a negative errno once the thread that could not be made is
 * said on stderr as "PROGRAM: thread K of N: ...". */
static inline int spin_util_start_threads(const char *program, uint32_t first, uint32_t n, void *(*fn)(void *)) {
        pthread_attr_t attr;

        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, 64 * 1024);
        for (uint32_t i = first; i < n; i++) {
                pthread_t t;
                int r = pthread_create(&t, &attr, fn, NULL);
                if (r != 0) {
                        fprintf(stderr, "%s: thread %u of %u: %s\n", program, i + 1, n, strerror(r));
                        pthread_attr_destroy(&attr);
                        return -r;
                }
        }
        pthread_attr_destroy(&attr);
        return 0;
}
