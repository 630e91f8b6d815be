/* SPDX-License-Identifier: MIT */
#pragma once

/* Shared by the dispatcher's integration tests: a private runtime
 * directory and config, the real pace-dispatcher binary ($PACE_DISPATCHER),
 * tables crafted with TableWriter, and CPU-bound children pinned to CPU 1.
 *
 * Every process started here is remembered by pid and killed by pid; every
 * child arms its own alarm() and the dispatcher gets PR_SET_PDEATHSIG, so a
 * test that dies still leaves nothing running. */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "macro.h"
#include "pace-stats.h"
#include "pace-table.h"
#include "proc-util.h"
#include "table-shm.h"
#include "test.h"
#include "time-util.h"

#define TEST_CPU 1
#define TEST_SYSTEM_CPU 0
#define CHILD_LIFETIME_S 40
#define MAX_CHILDREN 16

typedef struct DispatchEnv {
        char dir[64];
        char config[96];
        char log[96];
        int dirfd;
        pid_t dispatcher;
        TableWriter *writer;
        pid_t children[MAX_CHILDREN];
        unsigned n_children;
} DispatchEnv;

void test_sleep_ms(unsigned ms);

void pin_self(int cpu);

/* Root, CPU 1 present, and SCHED_FIFO actually granted to this process (a
 * cgroup with cpu.rt_runtime_us = 0 refuses it even to root). */
const char *dispatch_unsupported(void);

#define DISPATCH_REQUIRE()                                                                \
        do {                                                                              \
                const char *why_ = dispatch_unsupported();                                \
                if (why_)                                                                 \
                        TEST_SKIP("%s", why_);                                            \
        } while (0)

void env_init(DispatchEnv *e, const char *config_json);

void env_create_table(DispatchEnv *e);

bool env_log_contains(DispatchEnv *e, const char *needle);

bool env_wait_log(DispatchEnv *e, const char *needle, unsigned timeout_ms);

void env_dump_log(DispatchEnv *e);

/* Starts the real binary; returns its pid without waiting for it. */
pid_t env_spawn_dispatcher(DispatchEnv *e, const char *cgroup_procs);

void env_start(DispatchEnv *e);

/* e->dispatcher is the monitor (dispatcher/monitor.c); the dispatcher
 * proper, with the dispatch threads, is its only child. 0 while there is
 * none (between a crash and the restart). */
pid_t monitor_child(pid_t monitor);

pid_t env_dispatcher_child(const DispatchEnv *e);

/* waitpid with a deadline; -1 if still running after it. */
int wait_exit(pid_t pid, unsigned timeout_ms);

/* SIGTERM and the exit status (the dispatcher restores before it exits). */
int env_stop_dispatcher(DispatchEnv *e);

void env_kill_child(DispatchEnv *e, pid_t pid);

void env_cleanup(DispatchEnv *e);

void busy_forever(void);

/* A CPU-bound child on CPU 1 at the given nice value. */
pid_t env_spawn_hog(DispatchEnv *e, int nice_value);
/* The same on the given CPU; -1: where the test runs, as env_spawn_hog(). */
pid_t env_spawn_hog_on(DispatchEnv *e, int cpu, int nice_value);

uint64_t start_time_of(pid_t pid);

uint64_t cpu_time_ns(pid_t pid);

typedef struct TestReservation {
        pid_t pid;
        uint64_t start_time; /* 0: read it from /proc */
        uint32_t period_slots;
        uint32_t budget_slots;
        char letter; /* its slots in the pattern */
        uint32_t uid; /* who asked, as the table says */
        uint32_t flags; /* PACE_RES_SERVER or 0 */
} TestReservation;

/* Publishes one table for CPU 1: pattern holds one character per slot,
 * '.' free, otherwise the letter of a reservation. An empty pattern
 * publishes CPU 1 with no frame. */
uint64_t env_publish(DispatchEnv *e, uint64_t slot_ns, const char *pattern, const TestReservation *res,
                     unsigned n_res);

/* 60% of 50 ms at 1 ms slots, in two runs of 15 so no busy run exceeds the
 * default non_rt_max_gap of 20 ms. */
#define PATTERN_60_OF_50 "AAAAAAAAAAAAAAA..........AAAAAAAAAAAAAAA.........."
/* 60% of 5 slots of 10 ms (busy runs of at most 2 slots = 20 ms). */
#define PATTERN_3_OF_5 "AA.A."
/* 30% (A) + 40% (B) of 50 ms: busy runs of 18 and 17 slots. */
#define PATTERN_30_40_OF_50 "AAAAAAAABBBBBBBBBB.......AAAAAAABBBBBBBBBB........"

int policy_of(pid_t tid);

/* Samples a thread's policy from CPU 0 (the sampler must not compete with
 * the CPU it watches: a FIFO client there would hide its own state) every
 * `every_us` for `ms`; returns the fraction of samples at SCHED_FIFO. */
double sample_fifo_fraction(pid_t tid, unsigned ms, unsigned every_us, unsigned *ret_samples);

bool wait_for_fifo(pid_t tid, unsigned timeout_ms);

#define CONFIG_1MS "{ \"slot_us\": 1000, \"cpus\": [1], \"reserve_root_processes\": true }"
#define CONFIG_10MS "{ \"slot_us\": 10000, \"cpus\": [1], \"reserve_root_processes\": true }"
#define CONFIG_1MS_FREEZE "{ \"slot_us\": 1000, \"cpus\": [1], \"waiting\": \"freeze\", \"reserve_root_processes\": true }"
