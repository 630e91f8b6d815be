/* SPDX-License-Identifier: MIT */
/* libFuzzer: arbitrary text as trace_pipe's, split at an arbitrary point.
 * Task names in it are anyone's to choose; the reader must never read out
 * of bounds, follow more lendings than it keeps, or charge a time that
 * goes backwards (a charge is a difference of two time stamps, and must
 * never wrap). */
#include <stdint.h>
#include <stdlib.h>

#include "lending.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void charged(void *userdata, pid_t raiser, uint64_t raised_ns, pid_t owner, uint64_t ns) {
        /* Nothing lasts longer than the largest time stamp the text can
         * hold ends; a wrapped difference would be close to 2^64. */
        if (ns > UINT64_MAX / 2)
                abort();
}

static bool boosted(void *userdata, pid_t owner) {
        return owner & 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        Lending *l = NULL;

        if (lending_new(&l) < 0)
                abort();
        size_t split = size > 0 ? data[0] % (size + 1) : 0;
        lending_feed(l, (const char *) data, split, charged, NULL);
        lending_feed(l, (const char *) data + split, size - split, charged, NULL);
        lending_charge_ongoing(l, UINT64_MAX / 4, charged, boosted, NULL);
        if (lending_active(l) > 128)
                abort();
        lending_free(l);
        return 0;
}
