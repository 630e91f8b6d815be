/* SPDX-License-Identifier: MIT */
/* The whole stack on the real kernel: pace-broker (as a uid of its own) admits through
 * pace-run, publishes the table, pace-dispatcher enforces it. Root only;
 * every process it starts is pinned to CPU 1, bounded in time and reaped.
 *
 * Here: the daemons stopping or crashing, and clients churning: a
 * reservation outlives a broker crash, and nothing stays real-time. */
#include <dirent.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/mman.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "broker-harness.h"
#include "cpu-share.h"
#include "macro.h"
#include "pace/pace.h"
#include "proc-util.h"
#include "stack-harness.h"
#include "test.h"

/* The client's share over ms, less what others on the CPU took beyond
 * what share_measure() allows (share_foreign()): the host's steal comes
 * out of a reserved client's time as well, so a lower bound on a grant
 * credits it. */
static double share_over(const Stack *s, pid_t client, pid_t other, unsigned ms, double *ret_foreign) {
        double shares[3];
        share_measure(STACK_CPU, (pid_t[]) { client, other, s->dispatcher }, 3, ms, shares);
        *ret_foreign = share_foreign();
        return shares[0];
}

/* The broker crashes: the dispatcher keeps enforcing the last table; the
 * restarted broker adopts the reservation in its very slots. */
TEST(a_broker_crash_does_not_interrupt_a_reservation) {
        Stack s = {};
        STACK_START_OR_SKIP(&s);

        pid_t other = spawn(hog, NULL);
        pid_t client = spawn_reserved(&s, reserved_hog, "60%", 1);
        sleep_ms(300);
        double foreign_before, foreign_outage, foreign_after;
        double before = share_over(&s, client, other, 2000, &foreign_before);

        kill(s.broker.pid, SIGKILL);
        waitpid(s.broker.pid, NULL, 0);
        s.broker.pid = 0;
        double outage = share_over(&s, client, other, 2000, &foreign_outage);

        ASSERT_OK(broker_restart(&s.broker, SIGKILL));
        ASSERT_EQ(n_reservations(s.broker.socket), 1);
        sleep_ms(200);
        double after = share_over(&s, client, other, 2000, &foreign_after);
        printf("  reserved 60%%: %.2f%% before, %.2f%% with the broker dead, %.2f%% after its restart "
               "(others took %.1f / %.1f / %.1f points beyond the allowance)\n",
               before, outage, after, foreign_before, foreign_outage, foreign_after);
        ASSERT_CMP(outage, >=, 58.0 - foreign_outage);
        ASSERT_CMP(outage, <=, 62.0);
        ASSERT_CMP(after, >=, 58.0 - foreign_after);
        ASSERT_CMP(after, <=, 62.0);

        reap(client);
        reap(other);
        stack_stop(&s);
}

TEST(stopping_the_dispatcher_leaves_nothing_realtime) {
        Stack s = {};
        STACK_START_OR_SKIP(&s);

        pid_t client = spawn(reserved_hog, "50%");
        pid_t other = spawn(hog, NULL);
        await_reservations(s.broker.socket, 1);
        /* Catch it inside a slot, then stop the dispatcher. */
        bool seen = false;
        for (int i = 0; i < 1000 && !seen; i++) {
                seen = any_thread_realtime(client);
                if (!seen)
                        sleep_ms(1);
        }
        ASSERT_TRUE(seen);
        ASSERT_EQ(stack_stop_dispatcher(&s), 0);
        for (int i = 0; i < 50; i++) {
                ASSERT_FALSE(any_thread_realtime(client));
                sleep_ms(2);
        }
        /* The broker keeps the reservation (the dispatcher may come back);
         * the client merely runs as an ordinary process meanwhile. */
        ASSERT_EQ(n_reservations(s.broker.socket), 1);
        reap(client);
        reap(other);
        ASSERT_EQ(broker_stop(&s.broker), 0);
}

/* Every real-time thread on the machine (SCHED_FIFO, SCHED_RR or
 * SCHED_DEADLINE), as tids, sorted; at most `max`. */
static size_t realtime_threads(pid_t *ret, size_t max) {
        size_t n = 0;
        DIR *procs = opendir("/proc");
        ASSERT_TRUE(procs);
        for (struct dirent *p; (p = readdir(procs));) {
                int pid = atoi(p->d_name);
                char path[64];
                if (pid <= 0)
                        continue;
                snprintf(path, sizeof(path), "/proc/%d/task", pid);
                DIR *tasks = opendir(path);
                for (struct dirent *t; tasks && (t = readdir(tasks));) {
                        int tid = atoi(t->d_name), pol = tid > 0 ? policy_of(tid) : -1;
                        if ((pol == SCHED_FIFO || pol == SCHED_RR || pol == 6 /* SCHED_DEADLINE */) && n < max)
                                ret[n++] = tid;
                }
                if (tasks)
                        closedir(tasks);
        }
        closedir(procs);
        return n;
}

/* The thread's process (its Tgid), or 0 if it is gone. */
static pid_t tgid_of(pid_t tid) {
        char path[64], line[128];
        long tgid = 0;
        snprintf(path, sizeof(path), "/proc/%d/status", (int) tid);
        FILE *f = fopen(path, "re");
        while (f && fgets(line, sizeof(line), f))
                if (sscanf(line, "Tgid: %ld", &tgid) == 1)
                        break;
        if (f)
                fclose(f);
        return (pid_t) tgid;
}

/* Clients churning reserve/spin/release on the real dispatcher: once they
 * are gone, no thread anywhere is real-time that was not before (the
 * dispatcher's own aside), and no reservation group is left, while the
 * dispatcher still runs. */
static void churn_client(const void *arg) {
        const char *socket = arg;
        uint64_t state = (uint64_t) getpid() * 0x9e3779b97f4a7c15ULL;
        pace *p = NULL;
        if (pace_connect(socket, &p) < 0)
                _exit(3);
        for (int i = 0; i < 40; i++) {
                state = state * 6364136223846793005ULL + 1442695040888963407ULL;
                pace_reserve_params params = { .period_ns = (5 + (state >> 33) % 96) * NSEC_PER_MSEC,
                                               .utilization_ppm = 20000 + (uint32_t) ((state >> 17) % 300000),
                                               .cpu = -1 };
                pace_grant g;
                if (pace_reserve(p, &params, &g) < 0)
                        continue; /* refused: the others hold too much */
                for (uint64_t end = monotonic_ns() + ((state >> 40) % 30) * NSEC_PER_MSEC; monotonic_ns() < end;)
                        ;
                if (i == 39)
                        _exit(0); /* die holding the last one: the pidfd frees it */
                if (pace_release(p, g.id) < 0)
                        _exit(4);
        }
        _exit(0);
}

TEST(churn_on_the_real_dispatcher_leaves_nothing_realtime) {
        enum { CLIENTS = 8, ROUNDS = 4, MAX_RT = 4096 };
        static pid_t before[MAX_RT], after[MAX_RT];
        Stack s = {};
        char base[320] = "";

        STACK_START_OR_SKIP(&s);
        pid_t child = dispatcher_child(&s);
        ASSERT_TRUE(child > 0);
        size_t n_before = realtime_threads(before, MAX_RT);

        unsigned started = 0;
        for (int round = 0; round < ROUNDS; round++) {
                pid_t kids[CLIENTS];
                for (int k = 0; k < CLIENTS; k++, started++) {
                        kids[k] = fork();
                        ASSERT_OK(kids[k]);
                        if (kids[k] == 0) {
                                prctl(PR_SET_PDEATHSIG, SIGKILL);
                                alarm(CHILD_LIFETIME_S);
                                churn_client(s.broker.socket);
                        }
                }
                for (int k = 0; k < CLIENTS; k++) {
                        int status;
                        ASSERT_EQ(waitpid(kids[k], &status, 0), kids[k]);
                        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
                }
        }
        await_no_reservations(s.broker.socket);
        sleep_ms(300); /* the dispatcher adopts the empty table at a frame boundary (at most 100 ms here) */

        size_t n_after = realtime_threads(after, MAX_RT), stray = 0;
        for (size_t i = 0; i < n_after; i++) {
                pid_t owner = tgid_of(after[i]);
                if (tid_listed(before, n_before, after[i]) || owner == s.dispatcher || owner == child || owner == 0)
                        continue;
                printf("  thread %d of process %d is real-time after the churn\n", (int) after[i], (int) owner);
                stray++;
        }
        unsigned groups = 0;
        if (pace_groups_left(&s, base, sizeof(base)) > 0 && base[0]) {
                DIR *d = opendir(base);
                for (struct dirent *de; d && (de = readdir(d));)
                        groups += strncmp(de->d_name, "res-", 4) == 0;
                if (d)
                        closedir(d);
        }
        printf("  %u clients x 40 reserve/spin/release cycles (each dies holding its last): %zu stray real-time "
               "threads, %u reservation groups left, dispatcher %s\n", started, stray, groups,
               kill(child, 0) == 0 ? "still running" : "GONE");
        ASSERT_EQ(kill(child, 0), 0);
        ASSERT_EQ(stray, 0);
        ASSERT_EQ(groups, 0);
        stack_stop(&s);
}

TEST_MAIN()
