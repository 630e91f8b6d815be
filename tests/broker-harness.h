/* SPDX-License-Identifier: MIT */
#pragma once

/* Starts a real pace-broker (path in $PACE_BROKER) in a private runtime
 * directory with a given configuration, and stops it again. When the test
 * runs as root the broker runs as an unprivileged uid, which proves it needs
 * no privileges. */

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "pace-table.h"
#include "pace.pb-c.h"
#include "pace/pace.h"

/* A uid of the broker's own, as user pace would be: the broker trusts it as
 * a delegate. Not nobody, whom it never trusts (issue 26). */
#define HARNESS_BROKER_UID 60099

typedef struct BrokerInstance {
        pid_t pid;
        char dir[256];
        char socket[300];
        char config[300];
        char log[300];
        int with_config;
        int keep_root; /* run as root is: the broker drops its privileges itself */
        uid_t run_as;  /* as root: the uid it runs as (HARNESS_BROKER_UID) */
} BrokerInstance;

/* A broker that is still running when the test exits, e.g. after a failed
 * assertion, is killed by its pid and its directory removed. */

/* config_json NULL: no --config at all (built-in defaults). */
int broker_start(BrokerInstance *b, const char *config_json);
/* As broker_start(), but a root caller starts the broker as uid. */
int broker_start_as(BrokerInstance *b, const char *config_json, uid_t uid);
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
/* Fails the test, showing the log, unless the broker's stderr so far contains needle. */
void assert_broker_log_contains(const BrokerInstance *b, const char *needle);
/* In a daemon's child before exec: stderr appended to log, stdin and
 * stdout on /dev/null. */
void harness_redirect_output(const char *log);
/* rm -rf dir, if it is a /tmp/pace-test-* directory (a quote in it: nothing). */
void harness_remove_dir(const char *dir);

/* What the protocol tests (tests/integration/test-broker-*.c) share. */

/* An ordinary user with no reservations of its own. */
#define HARNESS_OTHER_UID 60001

/* Small limits, so that a test reaches them in a few requests. */
#define HARNESS_PROTOCOL_CONFIG                                                                   \
        "{ \"slot_us\": 1000, \"non_rt_share\": 0.25, \"max_connections\": 64, \"client_timeout_ms\": 400," \
        "  \"max_reservations_per_user\": 2, \"max_utilization_per_user\": 0.9 }"

void sleep_ms(unsigned ms);
/* Whether a test that needs root must skip. */
bool skip_unless_root(void);

/* Sends raw bytes on fd, returns the decoded reply (caller frees) or NULL. */
Pace__Response *raw_exchange(int fd, const void *buf, size_t size);
/* The same for a request, packed. */
Pace__Response *raw_request(int fd, Pace__Request *req);
/* resp is an error of this code whose message contains says; frees it. */
void assert_error_reply(Pace__Response *resp, Pace__ErrorCode code, const char *says);
/* The broker's status generation (and in ret_n its count of reservations). */
uint64_t status_generation(pace *p, size_t *ret_n);
/* Polls p's status (for up to 3 s) until it lists want reservations: how
 * many it lists at the end. */
size_t await_reservation_count(pace *p, size_t want);

/* broker_start() with config_json, which must succeed, and a libpace handle
 * on its socket: the start of most protocol tests. A test that wants
 * children of its own forks them first, so that none holds the handle's
 * connection. */
pace *broker_start_connected(BrokerInstance *b, const char *config_json);
/* Closes p and stops b, which must exit 0: the end of those tests. */
void broker_stop_connected(BrokerInstance *b, pace *p);
/* A version-1 reserve request as a raw client sends it, req carrying res:
 * period_ns and ppm set, everything else absent for the caller to fill. */
void raw_reserve_init(Pace__Request *req, Pace__ReserveRequest *res, uint64_t period_ns, uint32_t ppm);

/* Runs fn in a child that has dropped to HARNESS_OTHER_UID; returns its
 * exit code. */
int as_other_user(int (*fn)(const char *socket, pid_t target, uint64_t id), const char *socket, pid_t target,
                  uint64_t id);
/* A pthread body that stores its tid in *(_Atomic pid_t *) arg and waits
 * for a signal forever. */
void *park(void *arg);
/* A thread in park(), started once it has stored its tid in *ret_tid. */
pthread_t park_thread(_Atomic pid_t *ret_tid);
/* Cancels and joins a park_thread(). */
void unpark_thread(pthread_t thread);
/* A child that waits for a signal forever (and dies with its parent). */
pid_t fork_paused(void);
/* The same, once prepare (run in the child first) has returned 0; the
 * child exits with prepare's value otherwise, which fails the test. */
pid_t fork_paused_after(int (*prepare)(void));
/* SIGKILL and waitpid() for each of n children. */
void reap_children(const pid_t *pids, size_t n);
/* A snapshot of broker b's shared table. */
void read_table(const BrokerInstance *b, PaceTableBuffer *out);
