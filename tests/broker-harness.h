/* SPDX-License-Identifier: MIT */
#pragma once

/* Starts a real pace-broker (path in $PACE_BROKER) in a private runtime
 * directory with a given configuration, and stops it again. When the test
 * runs as root the broker runs as an unprivileged uid, which proves it needs
 * no privileges. */

#include <sys/types.h>

#define HARNESS_BROKER_UID 65534 /* nobody */

typedef struct BrokerInstance {
        pid_t pid;
        char dir[256];
        char socket[300];
        char config[300];
        char log[300];
        int with_config;
        int keep_root; /* run as root is: the broker drops its privileges itself */
} BrokerInstance;

/* A broker that is still running when the test exits, e.g. after a failed
 * assertion, is killed by its pid and its directory removed. */

/* config_json NULL: no --config at all (built-in defaults). */
int broker_start(BrokerInstance *b, const char *config_json);
/* As broker_start(), but a root caller starts the broker as root. */
int broker_start_as_root(BrokerInstance *b, const char *config_json);
/* The two halves of broker_start(), for a test that watches the start-up
 * itself: the directory and configuration, then the process (no wait). */
int broker_prepare(BrokerInstance *b, const char *config_json);
int broker_launch(BrokerInstance *b);
/* Sends sig (e.g. SIGKILL), waits, and starts a new broker in the same
 * directory with the same configuration: what a crash and a restart by
 * systemd do. */
int broker_restart(BrokerInstance *b, int sig);
/* SIGTERM, wait, remove the directory. Returns the broker's exit status. */
int broker_stop(BrokerInstance *b);
/* A bare connection to a broker's socket, for tests that send raw or
 * hand-built messages (a 5 s receive timeout): the fd, or -errno. */
int broker_raw_connect(const char *path);
/* The broker's stderr so far (malloc'ed). */
char *broker_log(const BrokerInstance *b);
