/* SPDX-License-Identifier: MIT */
/* pace-broker over a real socket: which CPU a reservation goes to, within
 * its target's affinity, and where it goes when that CPU goes offline. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <grp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "broker-harness.h"
#include "macro.h"
#include "pace-limits.h"
#include "table-shm.h"
#include "pace.pb-c.h"
#include "pace/pace.h"
#include "test.h"
#include "time-util.h"

static PaceTableBuffer table_before, table_after; /* large: off the stack */

/* Writes the stand-in's list of online CPUs, e.g. "0-1\n". */
static void set_online(const char *path, const char *cpus) {
        int fd = open(path, O_WRONLY | O_TRUNC);
        ASSERT_OK(fd);
        ASSERT_EQ(write(fd, cpus, strlen(cpus)), (ssize_t) strlen(cpus));
        close(fd);
}

/* CPU hotplug, played with a stand-in for /sys/devices/system/cpu/online:
 * a broker started with config that reads it from online (a template
 * "/tmp/pace-online-XXXXXX", made a file that lists CPUs 0 and 1). */
static pace *broker_start_with_online(BrokerInstance *b, const char *config, char *online) {
        int fd = mkstemp(online);
        ASSERT_OK(fd);
        ASSERT_EQ(write(fd, "0-1\n", 4), 4);
        close(fd);
        chmod(online, 0644);
        setenv("PACE_TEST_CPU_ONLINE", online, 1);
        int r = broker_start(b, config);
        unsetenv("PACE_TEST_CPU_ONLINE");
        ASSERT_OK(r);

        pace *p = NULL;
        ASSERT_OK(pace_connect(b->socket, &p));
        return p;
}

TEST(a_cpu_going_offline_moves_or_drops_its_reservations_loudly) {
        BrokerInstance b;
        pace_grant a, c, d, g;
        pace_status_report *st = NULL;
        char online[] = "/tmp/pace-online-XXXXXX";

        pid_t ka = fork_paused(), kc = fork_paused(), kd = fork_paused();
        pace *p = broker_start_with_online(&b, HARNESS_PROTOCOL_CONFIG, online);
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 300000, .pid = ka, .cpu = 1 };
        ASSERT_OK(pace_reserve(p, &params, &a));
        params.pid = kc;
        params.cpu = 0;
        params.utilization_ppm = 300000;
        ASSERT_OK(pace_reserve(p, &params, &c));
        params.pid = kd;
        params.cpu = 1;
        params.utilization_ppm = 400000;
        ASSERT_OK(pace_reserve(p, &params, &d));

        /* CPU 1 goes: A (30%) moves to CPU 0 beside C (30%); D (40%) then
         * fits nowhere and is dropped, with a log line saying so. */
        set_online(online, "0\n");
        size_t n = await_reservation_count(p, 2);
        ASSERT_EQ(n, 2);
        ASSERT_OK(pace_status(p, &st));
        for (size_t i = 0; i < st->n_reservations; i++)
                ASSERT_EQ(st->reservations[i].cpu, 0);
        pace_status_report_free(st);
        char *log = broker_log(&b);
        ASSERT_CONTAINS(log, "CPU 1 went offline");
        ASSERT_CONTAINS(log, "moved from CPU 1 (offline) to CPU 0");
        ASSERT_CONTAINS(log, "dropped: CPU 1 went offline and no online CPU has room");
        free(log);

        /* Asking for the offline CPU says so; when it returns, it is used. */
        params.utilization_ppm = 100000;
        ASSERT_ERR(pace_reserve(p, &params, &g), PACE_E_INVALID_ARGUMENT);
        ASSERT_CONTAINS(pace_last_message(), "CPU 1 is offline");
        set_online(online, "0-1\n");
        for (int i = 0; i < 300; i++) {
                if (pace_reserve(p, &params, &g) == 0)
                        break;
                ASSERT_TRUE(i < 299);
                sleep_ms(10);
        }
        ASSERT_EQ(g.cpu, 1);

        pid_t kids[] = { ka, kc, kd };
        reap_children(kids, ELEMENTSOF(kids));
        unlink(online);
        broker_stop_connected(&b, p);
}

/* The "hostile clients" issue: `taskset -c 1 pace-run ...` was reserved on
 * CPU 0 and moved there. The broker reads the target's affinity itself and
 * places only within it. */
static const char *config_two_cpus = "{ \"slot_us\": 1000, \"non_rt_share\": 0.25, \"cpus\": [0, 1] }";

static void set_affinity(pid_t pid, uint64_t mask) {
        cpu_set_t set;
        CPU_ZERO(&set);
        for (unsigned c = 0; c < 64; c++)
                if (mask & (UINT64_C(1) << c))
                        CPU_SET(c, &set);
        ASSERT_OK(sched_setaffinity(pid, sizeof(set), &set));
}

static bool skip_unless_two_cpus(void) {
        cpu_set_t set;
        return sched_getaffinity(0, sizeof(set), &set) < 0 || !CPU_ISSET(0, &set) || !CPU_ISSET(1, &set);
}

TEST(placement_stays_within_the_targets_affinity) {
        BrokerInstance b;
        pace_grant f0, f1, g;
        char expect[256];

        if (skip_unless_two_cpus())
                TEST_SKIP("needs CPUs 0 and 1");
        pid_t k0 = fork_paused(), k1 = fork_paused(), kt = fork_paused();
        pace *p = broker_start_connected(&b, config_two_cpus);
        /* CPU 1 fuller than CPU 0: worst fit alone would pick CPU 0. */
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 100000, .pid = k0, .cpu = 0 };
        ASSERT_OK(pace_reserve(p, &params, &f0));
        params = (pace_reserve_params) { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 300000, .pid = k1, .cpu = 1 };
        ASSERT_OK(pace_reserve(p, &params, &f1));
        params = (pace_reserve_params) { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 300000, .pid = kt, .cpu = -1 };
        ASSERT_OK(pace_reserve(p, &params, &g));
        ASSERT_EQ(g.cpu, 0);
        ASSERT_OK(pace_release(p, g.id));

        /* The caller itself, pinned to CPU 1 before it asks (the kernel's
         * pidfd of the connection). In a child: the test's own affinity
         * stays as it was. */
        pid_t kid = fork();
        ASSERT_OK(kid);
        if (kid == 0) {
                pace *cp = NULL;
                pace_grant cg;
                set_affinity(0, 0x2);
                ASSERT_OK(pace_connect(b.socket, &cp));
                pace_reserve_params mine = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 300000, .cpu = -1 };
                ASSERT_OK(pace_reserve(cp, &mine, &cg));
                ASSERT_EQ(cg.cpu, 1);
                ASSERT_EQ(cg.split_cpus, 0);
                ASSERT_OK(pace_release(cp, cg.id));
                /* Naming a CPU outside it is refused, saying which and why. */
                mine.cpu = 0;
                ASSERT_ERR(pace_reserve(cp, &mine, &cg), PACE_E_INVALID_ARGUMENT);
                char want[160];
                snprintf(want, sizeof(want), "CPU 0 is outside pid %d's allowed CPUs (1); name one of them or "
                         "change its affinity", (int) getpid());
                ASSERT_STREQ(pace_last_message(), want);
                pace_close(cp);
                _exit(0);
        }
        int status;
        ASSERT_EQ(waitpid(kid, &status, 0), kid);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);

        /* Another process of the caller's, by pid: its affinity, not the
         * caller's. */
        set_affinity(kt, 0x2);
        ASSERT_OK(pace_reserve(p, &params, &g));
        ASSERT_EQ(g.cpu, 1);
        pace_status_report *st = NULL;
        ASSERT_OK(pace_status(p, &st));
        bool listed = false;
        for (size_t i = 0; i < st->n_reservations; i++)
                if (st->reservations[i].id == g.id) {
                        listed = true;
                        ASSERT_EQ(st->reservations[i].cpu, 1);
                }
        ASSERT_TRUE(listed);
        pace_status_report_free(st);

        /* A change keeps within it too: once the owner moves the process
         * off CPU 1, a change there is refused and nothing changes. */
        uint64_t gen = status_generation(p, NULL);
        set_affinity(kt, 0x1);
        params.utilization_ppm = 200000;
        ASSERT_ERR(pace_modify(p, g.id, &params, &g), PACE_E_INVALID_ARGUMENT);
        snprintf(expect, sizeof(expect), "lives on CPU 1, which is outside the CPUs pid %d may run on now (0)",
                 (int) kt);
        ASSERT_CONTAINS(pace_last_message(), expect);
        ASSERT_CONTAINS(pace_last_message(), "the reservation stays as it was");
        ASSERT_EQ(status_generation(p, NULL), gen);
        set_affinity(kt, 0x3);
        ASSERT_OK(pace_modify(p, g.id, &params, &g));
        ASSERT_EQ(g.cpu, 1);
        ASSERT_OK(pace_release(p, g.id));

        /* No room on the allowed CPU: the usual refusal, for that CPU. */
        set_affinity(kt, 0x2);
        params.utilization_ppm = 500000;
        ASSERT_ERR(pace_reserve(p, &params, &g), PACE_E_NO_CAPACITY);
        snprintf(expect, sizeof(expect), "on the CPUs pid %d may run on (CPU 1: 45%% free;", (int) kt);
        ASSERT_CONTAINS(pace_last_message(), expect);
        ASSERT_CONTAINS(pace_last_message(), "CPU 0 is outside its affinity");

        /* A thread-scope reservation follows the thread's own affinity. */
        _Atomic pid_t tid;
        pthread_t thread = park_thread(&tid);
        set_affinity(tid, 0x2);
        params = (pace_reserve_params) { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 100000, .cpu = -1,
                                         .scope = PACE_SCOPE_THREAD, .tid = tid };
        ASSERT_OK(pace_reserve(p, &params, &g));
        ASSERT_EQ(g.cpu, 1);
        params.tid = gettid(); /* the main thread may run on both: worst fit */
        ASSERT_OK(pace_reserve(p, &params, &g));
        ASSERT_EQ(g.cpu, 0);

        unpark_thread(thread);
        pid_t kids[] = { k0, k1, kt };
        reap_children(kids, ELEMENTSOF(kids));
        broker_stop_connected(&b, p);
}

/* 25% taken on each of two CPUs leaves 50% free on each: 60% as slots is
 * split over both, but a server or aligned reservation is never split, and
 * its refusal says so and what to ask instead, and changes nothing. */
TEST(a_server_that_would_have_to_be_split_is_refused) {
        BrokerInstance b;
        pace_grant c0, c1, g;
        size_t n;

        if (skip_unless_two_cpus())
                TEST_SKIP("needs CPUs 0 and 1");
        pid_t k0 = fork_paused(), k1 = fork_paused(), ks = fork_paused();
        pace *p = broker_start_connected(&b, config_two_cpus);
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 250000, .pid = k0,
                                       .cpu = 0 };
        ASSERT_OK(pace_reserve(p, &params, &c0));
        params.pid = k1;
        params.cpu = 1;
        ASSERT_OK(pace_reserve(p, &params, &c1));
        read_table(&b, &table_before);
        uint64_t gen = status_generation(p, &n);

        params.pid = ks;
        params.cpu = -1;
        params.utilization_ppm = 600000;
        params.kind = PACE_KIND_SERVER;
        ASSERT_ERR(pace_reserve(p, &params, &g), PACE_E_NO_CAPACITY);
        ASSERT_CONTAINS(pace_last_message(), "not enough free CPU time for 60% every 50ms on any one CPU");
        ASSERT_CONTAINS(pace_last_message(), "a server reservation is never split over CPUs");
        ASSERT_CONTAINS(pace_last_message(), "ask for less, or for kind slots, which may be split");
        params.kind = PACE_KIND_ALIGNED;
        ASSERT_ERR(pace_reserve(p, &params, &g), PACE_E_NO_CAPACITY);
        ASSERT_CONTAINS(pace_last_message(), "an aligned reservation is never split over CPUs");
        ASSERT_EQ(status_generation(p, &n), gen);
        ASSERT_EQ(n, 2);
        read_table(&b, &table_after);
        ASSERT_EQ(memcmp(&table_before, &table_after, sizeof(table_before)), 0);

        /* The same request as slots is split over both. */
        params.kind = PACE_KIND_SLOTS;
        ASSERT_OK(pace_reserve(p, &params, &g));
        ASSERT_EQ(g.split_cpus, 0x3);
        ASSERT_EQ(g.kind, PACE_KIND_SLOTS);

        pid_t kids[] = { k0, k1, ks };
        reap_children(kids, ELEMENTSOF(kids));
        broker_stop_connected(&b, p);
}

/* A reservation moved off a CPU that went offline stays within the affinity
 * its process had at the grant: one allowed only the lost CPU is dropped,
 * not moved onto a CPU its owner ruled out. */
TEST(a_move_off_an_offline_cpu_stays_within_the_affinity) {
        BrokerInstance b;
        pace_grant a, c;
        char online[] = "/tmp/pace-online-XXXXXX";

        if (skip_unless_two_cpus())
                TEST_SKIP("needs CPUs 0 and 1");
        pid_t ka = fork_paused(), kc = fork_paused();
        set_affinity(ka, 0x2);
        pace *p = broker_start_with_online(&b, config_two_cpus, online);
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 100000, .pid = ka, .cpu = -1 };
        ASSERT_OK(pace_reserve(p, &params, &a));
        ASSERT_EQ(a.cpu, 1);
        params.pid = kc;
        params.cpu = 1;
        ASSERT_OK(pace_reserve(p, &params, &c));

        set_online(online, "0\n");
        size_t n = await_reservation_count(p, 1);
        ASSERT_EQ(n, 1);
        pace_status_report *st = NULL;
        ASSERT_OK(pace_status(p, &st));
        ASSERT_EQ(st->reservations[0].id, c.id);
        ASSERT_EQ(st->reservations[0].cpu, 0);
        pace_status_report_free(st);
        char *log = broker_log(&b);
        char expect[160];
        snprintf(expect, sizeof(expect), "reservation %" PRIu64 " of pid %d dropped: CPU 1 went offline", a.id,
                 (int) ka);
        ASSERT_CONTAINS(log, expect);
        free(log);

        pid_t kids[] = { ka, kc };
        reap_children(kids, ELEMENTSOF(kids));
        unlink(online);
        broker_stop_connected(&b, p);
}

TEST_MAIN()
