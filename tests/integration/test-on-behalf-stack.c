/* SPDX-License-Identifier: MIT */
/* What a request on behalf of another process (pace-rtkit's, for a
 * RealtimeKit1 caller) does on the real kernel, through the real broker and
 * dispatcher: a nice level is set on the named thread and taken back; a
 * thread's budget server runs on a host that has no group for a single
 * thread (cgroup v2), held to its budget. */
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "macro.h"
#include "pace-limits.h"
#include "pace.pb-c.h"
#include "proc-util.h"
#include "stack-harness.h"
#include "test.h"
#include "time-util.h"

#define CALLER_UID 60001

/* Sends req (as root: a delegate) on behalf of pid (running as uid); the
 * reply body, which must not be an error. */
static int raw_connect(const char *path) {
        int fd = broker_raw_connect(path);
        ASSERT_CMP(fd, >=, 0);
        return fd;
}

static Pace__Response *ask_on_behalf(const char *socket_path, Pace__Request *req, uid_t uid, pid_t pid) {
        static uint8_t reply[PACE_MAX_MESSAGE_SIZE];
        Pace__Caller caller = PACE__CALLER__INIT;
        ProcInfo info;
        uint8_t buf[1024];

        ASSERT_OK(proc_info_read("/proc", pid, &info));
        caller.uid = uid;
        caller.pid = pid;
        caller.start_time = info.start_time;
        req->version = PACE_PROTOCOL_VERSION;
        req->on_behalf_of = &caller;
        size_t n = pace__request__pack(req, buf);
        int fd = raw_connect(socket_path);
        ASSERT_EQ(send(fd, buf, n, MSG_NOSIGNAL), (ssize_t) n);
        ssize_t got = recv(fd, reply, sizeof(reply), 0);
        close(fd);
        req->on_behalf_of = NULL;
        ASSERT_CMP(got, >, 0);
        Pace__Response *resp = pace__response__unpack(NULL, (size_t) got, reply);
        ASSERT_TRUE(resp);
        if (resp->body_case == PACE__RESPONSE__BODY_ERROR)
                TEST_FAIL_("refused: %s", resp->error->message);
        return resp;
}

/* A child of CALLER_UID whose second thread spins (spin) or sleeps, and
 * sends its tid through a pipe. */
static int child_pipe;
static bool child_spins;

static void *child_thread(void *arg) {
        pid_t tid = gettid();
        if (write(child_pipe, &tid, sizeof(tid)) != sizeof(tid))
                _exit(1);
        for (;;)
                if (!child_spins)
                        pause();
        return NULL;
}

static void child_main(const void *arg) {
        pthread_t t;
        if (setresgid(CALLER_UID, CALLER_UID, CALLER_UID) < 0 || setresuid(CALLER_UID, CALLER_UID, CALLER_UID) < 0)
                _exit(1);
        if (pthread_create(&t, NULL, child_thread, NULL) != 0)
                _exit(1);
        for (;;)
                pause();
}

static pid_t start_child(bool spins, pid_t *ret_tid) {
        int p[2];
        ASSERT_OK(pipe(p));
        child_pipe = p[1];
        child_spins = spins;
        pid_t pid = spawn(child_main, NULL);
        close(p[1]);
        ASSERT_EQ(read(p[0], ret_tid, sizeof(*ret_tid)), (ssize_t) sizeof(*ret_tid));
        close(p[0]);
        return pid;
}

/* Field 19 of /proc/PID/task/TID/stat. */
static int nice_of(pid_t pid, pid_t tid) {
        char path[96], buf[1024];
        snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", pid, tid);
        ASSERT_OK(read_small_file(path, buf, sizeof(buf)));
        const char *p = strrchr(buf, ')');
        ASSERT_TRUE(p);
        int field = 2, nice = 0;
        for (p++; *p && field < 19; p++)
                if (*p == ' ' && ++field == 19)
                        nice = atoi(p + 1);
        return nice;
}

static bool wait_nice(pid_t pid, pid_t tid, int want) {
        for (int i = 0; i < 40; i++) {
                if (nice_of(pid, tid) == want)
                        return true;
                sleep_ms(50);
        }
        return false;
}

TEST(nice_level_set_by_the_dispatcher_and_taken_back) {
        if (skip())
                return;
        Stack s = {};
        stack_start(&s);
        pid_t tid;
        pid_t child = start_child(false, &tid);
        ASSERT_EQ(nice_of(child, tid), 0);

        Pace__Request req = PACE__REQUEST__INIT;
        Pace__NiceRequest nice = PACE__NICE_REQUEST__INIT;
        nice.has_pid = true;
        nice.pid = child;
        nice.tid = tid;
        nice.nice = -7;
        req.body_case = PACE__REQUEST__BODY_NICE;
        req.nice = &nice;
        pace__response__free_unpacked(ask_on_behalf(s.broker.socket, &req, CALLER_UID, child), NULL);
        /* An unprivileged user cannot do this to itself: the dispatcher did. */
        ASSERT_TRUE(wait_nice(child, tid, -7));
        ASSERT_EQ(policy_of(tid), SCHED_OTHER);
        ASSERT_EQ(nice_of(child, child), 0); /* the other thread is untouched */

        /* ResetKnown's request: the level goes, the thread gets its own back. */
        Pace__ResetRequest reset = PACE__RESET_REQUEST__INIT;
        reset.has_only_on_behalf = true;
        reset.only_on_behalf = true;
        req.body_case = PACE__REQUEST__BODY_RESET;
        req.reset = &reset;
        req.version = PACE_PROTOCOL_VERSION;
        uint8_t buf[256], reply[4096];
        size_t n = pace__request__pack(&req, buf);
        int fd = raw_connect(s.broker.socket);
        ASSERT_EQ(send(fd, buf, n, MSG_NOSIGNAL), (ssize_t) n);
        ASSERT_CMP(recv(fd, reply, sizeof(reply), 0), >, 0);
        close(fd);
        ASSERT_TRUE(wait_nice(child, tid, 0));

        reap(child);
        stack_stop_dispatcher(&s);
        broker_stop(&s.broker);
}

TEST(thread_server_on_a_host_without_a_group_for_it) {
        if (skip())
                return;
        Stack s = { .unified_only = true };
        stack_start(&s);
        pid_t tid;
        pid_t child = start_child(true, &tid);
        pid_t hogger = spawn(hog, NULL);

        Pace__Request req = PACE__REQUEST__INIT;
        Pace__ReserveRequest reserve = PACE__RESERVE_REQUEST__INIT;
        reserve.period_ns = 10 * NSEC_PER_MSEC;
        reserve.utilization_ppm = 300000;
        reserve.has_pid = true;
        reserve.pid = child;
        reserve.has_scope = true;
        reserve.scope = PACE__SCOPE__SCOPE_THREAD;
        reserve.has_tid = true;
        reserve.tid = tid;
        reserve.has_kind = true;
        reserve.kind = PACE__KIND__KIND_SERVER;
        reserve.has_cpu = true;
        reserve.cpu = STACK_CPU;
        req.body_case = PACE__REQUEST__BODY_RESERVE;
        req.reserve = &reserve;
        Pace__Response *resp = ask_on_behalf(s.broker.socket, &req, CALLER_UID, child);
        ASSERT_EQ(resp->body_case, PACE__RESPONSE__BODY_GRANT);
        ASSERT_EQ(resp->grant->kind, PACE__KIND__KIND_SERVER);
        pace__response__free_unpacked(resp, NULL);

        sleep_ms(500);
        unsigned fifo = 0;
        uint64_t c0 = thread_cpu_ns(child, tid), t0 = monotonic_ns();
        for (int i = 0; i < 200; i++) {
                fifo += policy_of(tid) == SCHED_FIFO;
                sleep_ms(10);
        }
        double share = (double) (thread_cpu_ns(child, tid) - c0) / (double) (monotonic_ns() - t0);
        printf("  spinning thread beside a hog: %.1f%% of CPU %d for a 30%% budget server; SCHED_FIFO in %u of 200 "
               "samples\n", share * 100, STACK_CPU, fifo);
        ASSERT_CMP(fifo, >, 0);
        /* Its budget and no more; under a hog at nice 0 it gets about half
         * the rest besides, as SCHED_OTHER in free time (nice 19 when
         * waiting: little). The upper bound is what a budget server that
         * overran would show. */
        ASSERT_CMP(share, >, 0.25);
        ASSERT_CMP(share, <, 0.45);
        /* A server, not slots: the dispatcher never fell back. */
        ASSERT_EQ(dispatcher_log_line(&s, "runs in its own slots only", NULL, 0), 0);

        reap(hogger);
        reap(child);
        stack_stop_dispatcher(&s);
        broker_stop(&s.broker);
}

TEST_MAIN()
