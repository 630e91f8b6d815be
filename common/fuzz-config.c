/* SPDX-License-Identifier: MIT */
/* libFuzzer harness for the config parser: any bytes at all must give either a
 * config or one message, never a crash, a leak or a read outside the input. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "macro.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char error[1024] = "";
        _cleanup_free_ char *copy = NULL;
        PaceConfig config, before;
        int r;

        /* An exactly sized heap copy, so ASan sees any read past the end. */
        copy = malloc(size ? size : 1);
        if (!copy)
                return 0;
        if (size)
                memcpy(copy, data, size);

        memset(&config, 0x5a, sizeof(config));
        before = config;

        r = pace_config_parse(copy, size, &config, error, sizeof(error));
        if (r == 0) {
                /* What the parser accepts must hold the invariants the daemons rely on. */
                if (error[0] || config.slot_ns == 0 || config.max_frame_ns % config.slot_ns != 0 ||
                    pace_config_frame_slots(&config) > PACE_MAX_FRAME_SLOTS ||
                    config.non_rt_max_gap_ns < 2 * config.slot_ns || config.max_frame_ns < config.non_rt_max_gap_ns ||
                    config.non_rt_share_ppm < 50000 || config.non_rt_share_ppm > 950000 ||
                    config.n_cpus > PACE_MAX_CPUS || (config.cpus_set && config.n_cpus == 0))
                        abort();
                for (uint32_t i = 1; i < config.n_cpus; i++)
                        if (config.cpus[i - 1] >= config.cpus[i])
                                abort();
        } else {
                /* Failure: one message (unless out of memory) and nothing written. */
                if ((r == -EINVAL && !error[0]) || memcmp(&config, &before, sizeof(config)) != 0)
                        abort();
        }

        return 0;
}
