/* SPDX-License-Identifier: MIT */
#pragma once

/* Hard limits shared by broker, dispatcher and clients. They bound every buffer
 * and array that crosses a trust boundary; configuration may only tighten them. */

#define PACE_PROTOCOL_VERSION 1u

/* A status reply with PACE_MAX_RESERVATIONS entries must fit. */
#define PACE_MAX_MESSAGE_SIZE (64u * 1024u)

#define PACE_MAX_CPUS 64u
#define PACE_MAX_RESERVATIONS 1024u
/* Threads given a nice level (NiceRequest) at once, broker-wide. */
#define PACE_MAX_NICE_THREADS 256u
#define PACE_MAX_FRAME_SLOTS 65536u

/* Where the build installs them (meson's prefix, sysconfdir, runstatedir),
 * so that daemons built for /usr/local read what their man pages name. */
#include "pace-build-config.h"
#define PACE_DEFAULT_RUNTIME_DIR PACE_RUNTIME_DIR
#define PACE_DEFAULT_CONFIG PACE_CONFIG_FILE
#define PACE_SOCKET_NAME "broker.sock"
#define PACE_TABLE_NAME "table"
#define PACE_DEFAULT_SOCKET PACE_DEFAULT_RUNTIME_DIR "/" PACE_SOCKET_NAME
