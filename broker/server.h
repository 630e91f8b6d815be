/* SPDX-License-Identifier: MIT */
#pragma once

/* The broker's socket side: accepts clients on a SOCK_SEQPACKET listening
 * socket, reads the kernel's word on who they are, passes each datagram to
 * broker_handle() and sends the reply. Event loop: sd-event, because it gives
 * io, timer and signal sources with one ownership model, and systemd's own
 * small daemons show it holding up; the core stays testable as it takes
 * plain fds. */

#include <systemd/sd-event.h>

#include "broker.h"
#include "config.h"
#include "log-sink.h"

typedef struct Server Server;

typedef struct ServerOptions {
        const PaceConfig *config;
        int listen_fd;      /* taken over; listening AF_UNIX SOCK_SEQPACKET */
        int runtime_dir_fd; /* borrowed */
        const char *proc_root;
        void *log_userdata;
        LogSink log;
        /* Where the online CPUs are listed, polled every second for hotplug
         * (NULL: /sys/devices/system/cpu/online). */
        const char *cpu_online_path;
        uid_t delegate_uid; /* BrokerOptions.delegate_uid */
        /* Reads the configuration anew (for reloads); NULL: no reloading. */
        int (*load_config)(void *userdata, PaceConfig *ret, char *why, size_t why_size);
} ServerOptions;

int server_new(sd_event *event, const ServerOptions *options, Server **ret);
Server *server_free(Server *s);
static inline void server_freep(Server **s) {
        server_free(*s);
}

/* Re-reads the configuration and applies it, or refuses it with why and
 * keeps the old one (SIGHUP, and root's reload request). */
int server_reload(Server *s, char *why, size_t why_size);

size_t server_n_connections(const Server *s);
Broker *server_broker(Server *s);
