/* SPDX-License-Identifier: MIT */
/* libFuzzer: arbitrary bytes as the state a runtime hands the hook (and,
 * through it, the annotation a container's owner writes). Every input is
 * parsed or refused with a reason; a parsed one builds a request whose
 * values are in the ranges the annotation's parser promises. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hook-core.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        Pace__Request req;
        Pace__ReserveRequest body;
        Pace__Caller caller;
        char why[600] = "";
        OciState s;

        if (oci_state_parse((const char *) data, size, &s, why, sizeof(why)) < 0) {
                if (why[0] == '\0')
                        abort(); /* a refusal always says why */
                return 0;
        }
        if (!s.annotated)
                return 0;
        if (s.want.period_ns == 0 || s.want.utilization_ppm == 0 || s.want.utilization_ppm > 1000000 ||
            s.want.cpu < -1 || strlen(s.id) >= sizeof(s.id))
                abort();
        oci_request_build(&s.want, s.pid, 1000, 1, &req, &body, &caller);
        if (req.reserve != &body || req.on_behalf_of != &caller || body.scope != PACE__SCOPE__SCOPE_TREE)
                abort();
        return 0;
}
