/* SPDX-License-Identifier: MIT */
#pragma once

/* The whole stack for integration tests on the real kernel: a pace-broker
 * (tests/broker-harness.h) and the real pace-dispatcher ($PACE_DISPATCHER)
 * on its runtime directory, plus the small process helpers the tests around
 * them share. Every process started here is killed by pid and reaped; the
 * dispatcher gets PR_SET_PDEATHSIG(SIGTERM), children SIGKILL and their own
 * alarm, so a failed assertion leaves nothing running. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "broker-harness.h"
#include "pace/pace.h"
#include "time-util.h"

/* The CPU spawn() pins its children to (the tests leave CPU 0 to the
 * system and their own samplers). */
#define STACK_CPU 1
/* Every child's alarm(): bounds a child whose parent failed to reap it. */
#define CHILD_LIFETIME_S 30
#define STACK_DEFAULT_CONFIG "{ \"slot_us\": 1000, \"cpus\": [1] }"

typedef struct Stack {
        BrokerInstance broker;
        pid_t dispatcher; /* the monitor (main pid); its only child dispatches */
        /* Start the dispatcher in a mount namespace of its own without the
         * v1 cpu and cpuacct hierarchies: it then runs without reservation
         * groups, as on a cgroup v2 host. */
        bool hide_cgroup_v1;
        /* Start it in a mount namespace where /sys/fs/cgroup is the unified
         * hierarchy alone, as on every current distribution (without its
         * controllers, which this host binds to v1). */
        bool unified_only;
} Stack;

/* The socket of the last stack started: for children forked later. */
extern const char *stack_socket;

void pin(int cpu);
/* The policy without the SCHED_RESET_ON_FORK flag the kernel ORs into it. */
int policy_of(pid_t tid);
/* How many of a process's threads have policy (reset-on-fork aside); 0
 * once it is gone. */
unsigned threads_at_policy(pid_t pid, int policy);
/* Whether any thread of a process is real-time (SCHED_FIFO or SCHED_RR). */
bool any_thread_realtime(pid_t pid);

/* Forks a child pinned to STACK_CPU that runs fn(arg) and exits. */
pid_t spawn(void (*fn)(const void *), const void *arg);
/* The same on cpu (-1: where the test may run). */
pid_t spawn_on(int cpu, void (*fn)(const void *), const void *arg);
/* A CPU-bound loop, for spawn(). */
void hog(const void *arg);
/* SIGKILL and waitpid; nothing for pid <= 0. */
void reap(pid_t pid);
/* The same, and SIGKILL to each of its descendants, by pid (a shell's
 * children outlive it otherwise, and hold meson's pipe). */
void reap_tree(pid_t pid);
/* A thread's own CPU time so far (ns), from its schedstat. */
uint64_t thread_cpu_ns(pid_t pid, pid_t tid);

/* Root, the three daemons' paths from meson, and 2 CPUs; else skip. */
bool skip(void);

/* Looks for needle in the dispatcher's log: 1 and its first line with it
 * in ret_line (may be NULL), 0 if no line has it, -errno if there is no
 * log to read. */
int dispatcher_log_line(const Stack *s, const char *needle, char *ret_line, size_t size);
/* A broker (as nobody) with this configuration, then the dispatcher. */
void stack_start_with(Stack *s, const char *json);
/* The same with STACK_DEFAULT_CONFIG. */
void stack_start(Stack *s);
/* The start of most cases: skip the case (test.h's TEST_SKIP, which returns
 * from it) where skip() says the host cannot run it, else stack_start(s). */
#define STACK_START_OR_SKIP(s)                                                            \
        do {                                                                              \
                if (skip())                                                               \
                        TEST_SKIP("needs root, 2 CPUs and the built daemons");            \
                stack_start(s);                                                           \
        } while (0)
/* The dispatcher on s->broker's directory and configuration: waits for its
 * monitor to watch the dispatch process, then half a second. */
void stack_start_dispatcher(Stack *s);
/* The same, without failing the test: whether it came up. Where it did not,
 * s->dispatcher is still the pid started (maybe exited, not reaped). */
bool stack_try_start_dispatcher(Stack *s);
/* SIGTERM and wait up to 5 s; the exit status, -1 if not an exit. */
int stack_stop_dispatcher(Stack *s);
/* stack_stop_dispatcher(), then broker_stop(): the end of a case, which
 * fails unless both exit 0. */
void stack_stop(Stack *s);
/* The dispatch process (the monitor's only child), or 0. */
pid_t dispatcher_child(const Stack *s);

size_t n_reservations(const char *socket);
/* Waits up to 3 s for the broker to list at least n reservations. */
void await_reservations(const char *socket, size_t n);
/* spawn(fn, arg), a client that reserves, then waits for s's broker to
 * list n reservations; fails unless it lists exactly n. The client. */
pid_t spawn_reserved(const Stack *s, void (*fn)(const void *), const void *arg, size_t n);
/* The broker's status entry of reservation id (0: the first listed), as
 * pacectl status shows it. */
bool stack_find_reservation(const char *socket, uint64_t id, pace_grant *ret);
/* Waits up to 3 s for the broker to list none (their processes died). */
void await_no_reservations(const char *socket);

/* The pace.<hash> directories of the cpuacct and cpu hierarchies: how many
 * exist (0 when clean); the cpuacct one's path in ret_base (may be NULL). */
unsigned pace_groups_left(const Stack *s, char *ret_base, size_t size);
bool have_cpuacct(void);

/* For spawn(): pace-run --period 50ms --util ARG --cpu 1 (ARG a string such
 * as "60%") -- sh -c 'while :; do :; done', on stack_socket. */
void reserved_hog(const void *arg);
/* Whether tid is one of the n in list. */
bool tid_listed(const pid_t *list, size_t n, pid_t tid);
/* Removes cgroup tree path under root, its tasks moved to root first. */
void remove_cgroup_tree(const char *root, const char *path);
