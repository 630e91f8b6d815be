/* SPDX-License-Identifier: MIT */
#pragma once

/* The broker's state and request handling, apart from any socket: a request
 * arrives as bytes with the kernel's word on who sent it, and leaves as a
 * reply. server.c owns sockets and the event loop; the fuzzer and the tests
 * drive this directly. */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "config.h"
#include "log-sink.h"
#include "plan.h"
#include "table-shm.h"

typedef struct Broker Broker;

/* Who is asking, from SO_PEERCRED / SO_PEERPIDFD, never from the message. */
#define BROKER_PEER_MAX_GROUPS 64

typedef struct BrokerPeer {
        pid_t pid;
        uid_t uid;
        gid_t gid;
        int pidfd; /* -1 if the kernel could not give one */
        /* Supplementary groups (SO_PEERGROUPS); beyond the first 64 a user
         * is judged by these and its primary group. */
        size_t n_groups;
        gid_t groups[BROKER_PEER_MAX_GROUPS];
        /* When the request arrived (CLOCK_MONOTONIC): the rate limit's clock. */
        uint64_t now_ns;
} BrokerPeer;

/* How a live reservation's end is noticed: the broker asks its embedder to
 * watch a pidfd and to call broker_process_exited() once it turns readable. */
typedef struct BrokerHooks {
        void *userdata;
        /* Returns 0 or negative errno; *ret_watch is handed back to unwatch. */
        int (*watch_pidfd)(void *userdata, int pidfd, uint64_t id, void **ret_watch);
        void (*unwatch)(void *userdata, void *watch);
        /* One line of log (NULL: none wanted). */
        LogSink log;
        /* Re-read the configuration and apply it with broker_reload(); on
         * refusal a sentence in why. NULL: reloading is not offered. */
        int (*reload)(void *userdata, char *why, size_t why_size);
} BrokerHooks;

typedef struct BrokerOptions {
        const PaceConfig *config; /* cpus resolved */
        int runtime_dir_fd;       /* where the table is created; -1: no table (fuzzing) */
        const char *proc_root;    /* "/proc" */
        /* Where the cgroup file systems are: a target held by a limit there
         * that a reservation would lift is refused. NULL: /sys/fs/cgroup. */
        const char *cgroup_root;
        /* Who besides root may ask on behalf of another process (pace-rtkit's
         * uid, the broker's own); 0: root alone. Never a uid that other
         * daemons share (nobody): whoever runs as it could speak for anyone,
         * root's processes included. */
        uid_t delegate_uid;
        BrokerHooks hooks;
} BrokerOptions;

int broker_new(const BrokerOptions *options, Broker **ret);
Broker *broker_free(Broker *b);
static inline void broker_freep(Broker **b) {
        broker_free(*b);
}

/* Decodes one request and produces a reply: the answer, or an Error reply
 * for a refusal (bad input, no room, not allowed, a failure before anything
 * changed). A negative return means no reply could be built (-ENOMEM,
 * -EMSGSIZE): the embedder logs it and drops the client, who cannot know
 * whether a change took effect. */
int broker_handle(Broker *b, const BrokerPeer *peer, const uint8_t *request, size_t request_size, uint8_t **ret_reply,
                  size_t *ret_reply_size);

/* The reply to a client that could not be served (e.g. too many connections). */
int broker_error_reply(int code, const char *message, uint8_t **ret_reply, size_t *ret_reply_size);

/* The process behind reservation `id` has exited: free its slots. */
void broker_process_exited(Broker *b, uint64_t id);

/* Applies a new configuration, or refuses it (-EBUSY, with why) if the live
 * reservations would violate it (a CPU no longer managed, a smaller limit, a
 * different slot...); nothing changes then. The caller has parsed it. */
int broker_reload(Broker *b, const PaceConfig *config, char *why, size_t why_size);

/* The online CPUs changed (hotplug): reservations on a CPU that went offline
 * move to another CPU if one has room, else they are dropped; each with a
 * log line. */
void broker_cpus_online(Broker *b, const int32_t *online, size_t n_online);

/* Drops every reservation and nice level. Returns how many reservations
 * there were. */
size_t broker_reset(Broker *b);
/* Drops what was granted on behalf of others, and every nice level
 * (RealtimeKit1's ResetKnown). Returns how many reservations. */
size_t broker_reset_on_behalf(Broker *b);

/* Once a second: ends the thread reservations and nice levels whose thread
 * exited while its process lives on. */
void broker_tick(Broker *b);

size_t broker_n_reservations(const Broker *b);
uint64_t broker_generation(const Broker *b);
