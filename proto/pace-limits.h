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

#define PACE_DEFAULT_RUNTIME_DIR "/run/pace"
#define PACE_DEFAULT_CONFIG "/etc/pace/pace.json"
#define PACE_SOCKET_NAME "broker.sock"
#define PACE_TABLE_NAME "table"
#define PACE_DEFAULT_SOCKET PACE_DEFAULT_RUNTIME_DIR "/" PACE_SOCKET_NAME
