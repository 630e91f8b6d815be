/* SPDX-License-Identifier: MIT */
#pragma once

/* pace-oci-hook's logic: the container's state as an OCI runtime hands it
 * to a hook on stdin, the reservation its annotation asks for, and the
 * broker request made of the two. Pure: no system calls, no logging
 * (tests/unit/test-oci-hook.c, fuzz-oci-state.c). main.c reads the state,
 * the process and the answer. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "pace.pb-c.h"

/* The annotation a container asks with, e.g.
 * io.pace.reservation=period=20ms,util=30%,cpu=1,kind=server,required */
#define OCI_ANNOTATION "io.pace.reservation"
/* The largest state read from stdin: a state is well under a page, but
 * its annotations are the container owner's to fill. */
#define OCI_STATE_MAX (256u * 1024u)

typedef struct OciReservation {
        uint64_t period_ns;
        uint32_t utilization_ppm;
        int32_t cpu;  /* -1: the broker chooses */
        Pace__Kind kind; /* KIND_UNSPECIFIED: the broker's default (slots) */
        /* The container must not start without it: a refusal fails the
         * hook, and with it the start. */
        bool required;
} OciReservation;

typedef struct OciState {
        char id[256];
        char status[32]; /* "creating", "created", "running", "stopped" */
        pid_t pid;       /* the container's init on the host; 0 if none */
        bool annotated;  /* OCI_ANNOTATION is there: want holds it */
        OciReservation want;
} OciState;

/* The annotation's value: key=value pairs separated by commas (or ';' or
 * spaces: podman's --annotation splits at commas), period and util
 * required (parse_duration_ns(), parse_utilization_ppm()), cpu (a number)
 * and kind (slots, server, aligned) optional, and the bare word required.
 * 0 and *ret, or -EINVAL with the pair at fault named in why. */
int oci_reservation_parse(const char *value, OciReservation *ret, char *why, size_t why_size);

/* The state JSON (size bytes, not NUL-terminated) into *ret: 0, or -EINVAL
 * with why (not JSON, a field of the wrong type, a bad annotation). */
int oci_state_parse(const char *json, size_t size, OciState *ret, char *why, size_t why_size);

/* The request for want, for the whole tree of process pid, made on behalf of
 * that process (uid and start_time as the kernel has them): the broker judges
 * it as if the container's init had asked itself. The request points into
 * body and caller, which the caller owns. */
void oci_request_build(const OciReservation *want, pid_t pid, uid_t uid, uint64_t start_time, Pace__Request *req,
                       Pace__ReserveRequest *body, Pace__Caller *caller);
