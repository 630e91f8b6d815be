/* SPDX-License-Identifier: MIT */
#pragma once

/* _cleanup_() helpers for decoded protocol messages, for whoever links the
 * generated pace.pb-c code (the broker, libpace, pace-rtkit). */

#include "pace.pb-c.h"

static inline void pace_request_freep(Pace__Request **req) {
        if (*req)
                pace__request__free_unpacked(*req, NULL);
}

static inline void pace_response_freep(Pace__Response **resp) {
        if (*resp)
                pace__response__free_unpacked(*resp, NULL);
}
