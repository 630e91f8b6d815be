/* SPDX-License-Identifier: MIT */
/* libFuzzer harness for table_check(), the dispatcher's trust boundary:
 * whatever bytes the broker (or anyone who can write the table file) puts
 * in a buffer, the check must neither crash nor read outside the buffer.
 *
 * Input: first byte even → the rest is the raw buffer image, truncated or
 * zero-padded to sizeof(PaceTableBuffer) (what a scribbled mapping looks
 * like). Odd → a compact form that reaches the reservations and slots with
 * short inputs: slot_ns (u64), n_cpus, n_reservations, n_slots (u32 each),
 * then that many PaceTableCpu and PaceTableReservation records (as far as
 * the input goes), then u16 slot owners. Counts are not clamped: the check
 * must refuse absurd ones itself. */

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "config.h"
#include "table-check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static PaceTableBuffer buffer;

static size_t take(void *dst, size_t want, const uint8_t **data, size_t *size) {
        size_t n = want < *size ? want : *size;
        memcpy(dst, *data, n);
        *data += n;
        *size -= n;
        return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static PaceConfig config;
        static int initialized;
        char why[256];

        if (!initialized) {
                pace_config_init(&config);
                config.cpus_set = true;
                config.n_cpus = 2;
                config.cpus[0] = 0;
                config.cpus[1] = 1;
                initialized = 1;
        }
        if (size == 0)
                return 0;

        memset(&buffer, 0, sizeof(buffer));
        uint8_t mode = data[0];
        data++;
        size--;

        if ((mode & 1) == 0) {
                take(&buffer, sizeof(buffer), &data, &size);
        } else {
                uint64_t slot_ns = 0;
                uint32_t counts[3] = {};

                take(&slot_ns, sizeof(slot_ns), &data, &size);
                take(counts, sizeof(counts), &data, &size);
                buffer.slot_ns = slot_ns;
                buffer.n_cpus = counts[0];
                buffer.n_reservations = counts[1];
                buffer.n_slots = counts[2];
                for (uint32_t i = 0; i < counts[0] && i < PACE_MAX_CPUS && size > 0; i++)
                        take(&buffer.cpus[i], sizeof(buffer.cpus[i]), &data, &size);
                for (uint32_t i = 0; i < counts[1] && i < PACE_MAX_RESERVATIONS && size > 0; i++)
                        take(&buffer.reservations[i], sizeof(buffer.reservations[i]), &data, &size);
                take(buffer.slots, sizeof(buffer.slots), &data, &size);
        }

        why[0] = '\0';
        if (table_check(&buffer, &config, why, sizeof(why)) < 0 && why[0] == '\0')
                __builtin_trap(); /* a refusal must say why */
        return 0;
}
