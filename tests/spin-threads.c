/* SPDX-License-Identifier: MIT */
/* spin-threads: a client that tries to take more CPU than it was granted by
 * being many: N threads that never block. For tests that run it under
 * pace-run (tests/vm/checks), so that what the whole process gets can be
 * held against the grant. It prints "spinning N" once every thread runs
 * (which may take long where the grant is all it gets: watch
 * /proc/PID/status instead)
 * and ends itself after SECONDS (default 60), so a test that loses track
 * of it leaves nothing spinning for long.
 *
 *   spin-threads N [SECONDS]
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "parse-util.h"
#include "spin-util.h"

/* All start together once all exist: spinners born one by one would starve
 * the thread creating the rest (under a reservation, outside its runs, the
 * process as a whole gets next to nothing, shared by all its threads). */
static pthread_barrier_t all_born;

static void *spin(void *arg) {
        volatile unsigned long sink = 0;

        (void) arg;
        pthread_barrier_wait(&all_born);
        for (;;)
                sink++;
        return NULL;
}

int main(int argc, char **argv) {
        uint32_t n, seconds = 60;

        if (argc < 2 || argc > 3 || parse_uint32(argv[1], &n) < 0 || n == 0 || n > 100000 ||
            (argc == 3 && (parse_uint32(argv[2], &seconds) < 0 || seconds == 0 || seconds > 3600))) {
                fprintf(stderr, "usage: spin-threads N (1..100000) [SECONDS (1..3600, default 60)]\n");
                return 2;
        }
        pthread_barrier_init(&all_born, NULL, n + 1);
        if (spin_util_start_threads("spin-threads", 0, n, spin) < 0)
                return 1;
        pthread_barrier_wait(&all_born);
        printf("spinning %u\n", n);
        fflush(stdout);
        sleep(seconds);
        return 0;
}
