/* SPDX-License-Identifier: MIT */
/* pace-broker over a real socket, over time: reservations die with their
 * process, clients that die or stall hurt no one, and the broker's own start,
 * reload, restart and socket. */
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

/* The broker holds a pidfd per reservation and frees it when that fires.
 * "Within one frame" (50 ms here) is asserted on the median of five
 * deaths, so one stall of this shared VM cannot fail it; any single one
 * over a second would mean the pidfd is not what frees it. */
TEST(reservation_dies_with_its_process_within_a_frame) {
        enum { ROUNDS = 5 };
        BrokerInstance b;
        size_t n;
        uint64_t took[ROUNDS];

        pace *p = broker_start_connected(&b, HARNESS_PROTOCOL_CONFIG);
        for (int round = 0; round < ROUNDS; round++) {
                int fd;
                pid_t kid = test_fork_pipe(&fd);
                if (kid == 0) {
                        pace *kp = NULL;
                        pace_grant g;
                        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 400000,
                                                       .cpu = -1 };
                        if (pace_connect(b.socket, &kp) < 0 || pace_reserve(kp, &params, &g) < 0)
                                _exit(1);
                        /* The connection is not what holds the reservation. */
                        pace_close(kp);
                        char c = 'x';
                        if (write(fd, &c, 1) != 1)
                                _exit(2);
                        pause();
                        _exit(0);
                }
                char c;
                ASSERT_EQ(read(fd, &c, 1), 1);
                close(fd);
                status_generation(p, &n);
                ASSERT_EQ(n, 1);

                kill(kid, SIGKILL);
                int status;
                waitpid(kid, &status, 0);
                uint64_t t0 = monotonic_ns();
                for (;;) {
                        status_generation(p, &n);
                        if (n == 0)
                                break;
                        ASSERT_CMP(monotonic_ns() - t0, <, 1000 * NSEC_PER_MSEC);
                        usleep(200);
                }
                took[round] = monotonic_ns() - t0;
        }
        qsort(took, ROUNDS, sizeof(took[0]), cmp_u64);
        printf("  freed %.2f ms (median of %d; %.2f-%.2f) after the process was reaped\n", (double) took[ROUNDS / 2] / 1e6,
               ROUNDS, (double) took[0] / 1e6, (double) took[ROUNDS - 1] / 1e6);
        ASSERT_CMP(took[ROUNDS / 2], <, 50 * NSEC_PER_MSEC);
        broker_stop_connected(&b, p);
}

TEST(client_dying_mid_request_does_not_hurt_the_broker) {
        BrokerInstance b;
        pace *p = NULL;
        size_t n;

        ASSERT_OK(broker_start(&b, HARNESS_PROTOCOL_CONFIG));
        for (int round = 0; round < 20; round++) {
                pid_t kid = fork();
                ASSERT_OK(kid);
                if (kid == 0) {
                        Pace__Request req;
                        Pace__ReserveRequest res;
                        uint8_t buf[128];
                        int fd = broker_raw_connect(b.socket);
                        raw_reserve_init(&req, &res, 20 * NSEC_PER_MSEC, 100000);
                        size_t len = pace__request__pack(&req, buf);
                        /* Send and die at once, without reading the reply. */
                        if (send(fd, buf, len, 0) < 0)
                                _exit(1);
                        _exit(0);
                }
                waitpid(kid, NULL, 0);
        }
        ASSERT_OK(pace_connect(b.socket, &p));
        for (int i = 0; i < 200; i++) {
                status_generation(p, &n);
                if (n == 0)
                        break;
                sleep_ms(5);
        }
        ASSERT_EQ(n, 0);
        broker_stop_connected(&b, p);
}

/* A new client gets its status within 2 s. */
static void assert_served_promptly(const BrokerInstance *b) {
        pace *p = NULL;

        ASSERT_OK(pace_connect(b->socket, &p));
        uint64_t t0 = monotonic_ns();
        status_generation(p, NULL);
        ASSERT_CMP(monotonic_ns() - t0, <, 2000 * NSEC_PER_MSEC);
        pace_close(p);
}

TEST(silent_and_flooding_clients_do_not_block_others) {
        BrokerInstance b;
        struct rlimit rl;
        enum { FLOOD = 1000 };
        static int fds[FLOOD];

        ASSERT_OK(getrlimit(RLIMIT_NOFILE, &rl));
        if (rl.rlim_cur < FLOOD + 64) {
                rl.rlim_cur = MIN(rl.rlim_max, (rlim_t) FLOOD + 64);
                (void) setrlimit(RLIMIT_NOFILE, &rl);
        }
        ASSERT_OK(broker_start(&b, HARNESS_PROTOCOL_CONFIG));

        /* One client connects and says nothing. */
        int silent = broker_raw_connect(b.socket);
        ASSERT_OK(silent);
        assert_served_promptly(&b);

        /* The silent one is dropped after client_timeout_ms (400 ms). */
        char c;
        struct timeval tv = { .tv_sec = 3 };
        setsockopt(silent, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        ASSERT_EQ(recv(silent, &c, 1, 0), 0);
        close(silent);

        /* A thousand connections against max_connections = 64: the rest get a
         * clear refusal, and a well-behaved client is still served. With a
         * long idle timeout, so no accepted one is dropped (freeing a place
         * for one that should be refused) while a slow broker (ASan) is
         * still working through the flood. */
        ASSERT_EQ(broker_stop(&b), 0);
        ASSERT_OK(broker_start(&b, "{ \"slot_us\": 1000, \"max_connections\": 64, \"client_timeout_ms\": 30000 }"));
        size_t opened = 0;
        for (; opened < FLOOD; opened++) {
                fds[opened] = broker_raw_connect(b.socket);
                if (fds[opened] < 0)
                        break;
        }
        ASSERT_CMP(opened, >=, 200);
        /* Until every refusal is in, or 5 s. */
        size_t busy = 0;
        static bool answered[FLOOD];
        memset(answered, 0, sizeof(answered));
        for (uint64_t until = monotonic_ns() + 5 * NSEC_PER_SEC; busy < opened - 64 && monotonic_ns() < until;) {
                for (size_t i = 0; i < opened; i++) {
                        uint8_t buf[1024];
                        if (answered[i])
                                continue;
                        ssize_t len = recv(fds[i], buf, sizeof(buf), MSG_DONTWAIT);
                        if (len >= 0)
                                answered[i] = true;
                        if (len > 0) {
                                Pace__Response *resp = pace__response__unpack(NULL, (size_t) len, buf);
                                ASSERT_TRUE(resp);
                                ASSERT_EQ(resp->body_case, PACE__RESPONSE__BODY_ERROR);
                                ASSERT_EQ(resp->error->code, PACE__ERROR_CODE__ERROR_BUSY);
                                ASSERT_CONTAINS(resp->error->message, "max_connections");
                                pace__response__free_unpacked(resp, NULL);
                                busy++;
                        }
                }
                sleep_ms(20);
        }
        printf("  %zu connections opened, %zu refused as busy\n", opened, busy);
        ASSERT_CMP(busy, >=, opened - 64);
        for (size_t i = 0; i < opened; i++)
                close(fds[i]);
        sleep_ms(100);
        assert_served_promptly(&b);
        ASSERT_EQ(broker_stop(&b), 0);
}

TEST(bad_config_refuses_to_start_and_says_why) {
        BrokerInstance b;
        int r = broker_start(&b, "{ \"non_rt_share\": 0.01 }");
        ASSERT_ERR(r, -ECHILD);
        char *log = broker_log(&b);
        ASSERT_CONTAINS(log, "non_rt_share");
        ASSERT_CONTAINS(log, "0.05");
        free(log);
        broker_stop(&b);

        r = broker_start(&b, "{ \"slot_us\": 1000,\n  \"policy\": \"fifo\" }");
        ASSERT_ERR(r, -ECHILD);
        log = broker_log(&b);
        ASSERT_CONTAINS(log, "policy");
        free(log);
        broker_stop(&b);

        /* No config file at all: built-in defaults. */
        ASSERT_OK(broker_start(&b, NULL));
        ASSERT_EQ(broker_stop(&b), 0);
}

/* A client that finds the socket can connect to it: the broker's socket
 * appears under its name only once it listens. Before, it was bound under
 * its name and listened a few system calls later; a client (the CI's soak
 * test, once) that came in between got ECONNREFUSED. inotify wakes this
 * test the moment the name appears, so it lands in any such window far
 * more often than a polling client would. */
TEST(the_socket_appears_only_when_it_accepts) {
        unsigned refused = 0, runs = 40;

        for (unsigned i = 0; i < runs; i++) {
                BrokerInstance b;
                char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
                bool seen = false;

                ASSERT_OK(broker_prepare(&b, HARNESS_PROTOCOL_CONFIG));
                int in = inotify_init1(IN_CLOEXEC);
                ASSERT_OK(in);
                ASSERT_OK(inotify_add_watch(in, b.dir, IN_CREATE | IN_MOVED_TO));
                ASSERT_OK(broker_launch(&b));
                while (!seen) {
                        struct pollfd pfd = { .fd = in, .events = POLLIN };
                        ASSERT_EQ(poll(&pfd, 1, 5000), 1);
                        ssize_t n = read(in, buf, sizeof(buf));
                        ASSERT_CMP(n, >, 0);
                        for (char *e = buf; e < buf + n;) {
                                const struct inotify_event *ev = (const struct inotify_event *) e;
                                if (ev->len && strcmp(ev->name, "broker.sock") == 0)
                                        seen = true;
                                e += sizeof(*ev) + ev->len;
                        }
                }
                int fd = broker_raw_connect(b.socket);
                if (fd == -ECONNREFUSED)
                        refused++;
                else
                        ASSERT_OK(fd);
                if (fd >= 0)
                        close(fd);
                close(in);
                ASSERT_EQ(broker_stop(&b), 0);
        }
        printf("  %u of %u connects at the moment the socket appeared were refused\n", refused, runs);
        ASSERT_EQ(refused, 0);
}

/* A second broker started on a live one's runtime directory (by hand,
 * beside the service) must not take its socket: it refuses to start, and
 * the first goes on serving. */
TEST(a_second_broker_does_not_take_a_live_ones_socket) {
        BrokerInstance b;
        pace *p = NULL;
        size_t n;
        int status;

        ASSERT_OK(broker_start(&b, HARNESS_PROTOCOL_CONFIG));
        pid_t second = fork();
        ASSERT_OK(second);
        if (second == 0) {
                char log[320];
                snprintf(log, sizeof(log), "%s/second.log", b.dir);
                int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
                if (fd >= 0)
                        dup2(fd, STDERR_FILENO);
                if (geteuid() == 0 && (setgroups(0, NULL) < 0 || setgid(HARNESS_BROKER_UID) < 0 ||
                                       setuid(HARNESS_BROKER_UID) < 0))
                        _exit(126);
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                execl(getenv("PACE_BROKER"), "pace-broker", "--config", b.config, "--runtime-dir", b.dir, (char *) NULL);
                _exit(127);
        }
        pid_t w = 0;
        for (int i = 0; i < 500 && w == 0; i++) {
                w = waitpid(second, &status, WNOHANG);
                if (w == 0)
                        sleep_ms(10);
        }
        if (w == 0) {
                kill(second, SIGKILL);
                waitpid(second, NULL, 0);
                TEST_FAIL_("a second broker started on a live one's runtime directory");
        }
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1);
        char path[320], text[512] = "";
        snprintf(path, sizeof(path), "%s/second.log", b.dir);
        FILE *f = fopen(path, "re");
        ASSERT_TRUE(f);
        size_t len = fread(text, 1, sizeof(text) - 1, f);
        text[len] = '\0';
        fclose(f);
        ASSERT_CONTAINS(text, "another broker is serving");
        ASSERT_OK(pace_connect(b.socket, &p));
        status_generation(p, &n);
        pace_close(p);
        ASSERT_EQ(broker_stop(&b), 0);
}

/* A broker that crashes and is restarted keeps what it granted: the same
 * ids, owners and slots; reservations of processes that died meanwhile are
 * dropped; the adopted ones still end with their process. */
TEST(a_restarted_broker_adopts_the_reservations_in_force) {
        BrokerInstance b;
        pace_grant g1, g2, g3;
        pace_status_report *st = NULL;

        pid_t keeper = fork_paused(), goner = fork_paused(), third = fork_paused();
        pace *p = broker_start_connected(&b, HARNESS_PROTOCOL_CONFIG);
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 300000, .pid = keeper, .cpu = 1 };
        ASSERT_OK(pace_reserve(p, &params, &g1));
        params.pid = goner;
        params.period_ns = 40 * NSEC_PER_MSEC;
        params.utilization_ppm = 200000;
        ASSERT_OK(pace_reserve(p, &params, &g2));
        pace_close(p);
        read_table(&b, &table_before);

        /* The broker dies hard; during the outage one client dies too. */
        kill(b.pid, SIGKILL);
        waitpid(b.pid, NULL, 0);
        b.pid = 0;
        reap_children(&goner, 1);
        uint64_t restarted = monotonic_ns();
        ASSERT_OK(broker_restart(&b, SIGKILL));

        /* The dead one's reservation is gone by the first answer, well
         * within the 1 s asked for (the start-up includes it). */
        ASSERT_OK(pace_connect(b.socket, &p));
        ASSERT_OK(pace_status(p, &st));
        uint64_t answered = monotonic_ns() - restarted;
        printf("  restarted broker answered %.1f ms after the restart began, %zu reservation(s) adopted\n",
               (double) answered / 1e6, st->n_reservations);
        ASSERT_CMP(answered, <, NSEC_PER_SEC);
        ASSERT_EQ(st->n_reservations, 1);
        ASSERT_EQ(st->reservations[0].id, g1.id);
        ASSERT_EQ(st->reservations[0].pid, keeper);
        ASSERT_EQ(st->reservations[0].uid, getuid());
        ASSERT_EQ(st->reservations[0].cpu, 1);
        ASSERT_EQ(st->reservations[0].budget_ns, g1.budget_ns);
        ASSERT_EQ(st->reservations[0].period_ns, g1.period_ns);
        ASSERT_EQ(st->reservations[0].requested_utilization_ppm, 300000);
        ASSERT_EQ(st->reservations[0].requested_period_ns, 50 * NSEC_PER_MSEC);
        pace_status_report_free(st);

        /* Not a slot moved: the keeper's slots in the new table are those
         * it had (the frame may have shrunk to its own period). */
        read_table(&b, &table_after);
        ASSERT_EQ(table_after.n_reservations, 1);
        uint32_t frame = 0;
        for (uint32_t c = 0; c < table_after.n_cpus; c++)
                if (table_after.cpus[c].cpu == 1)
                        frame = table_after.cpus[c].frame_slots;
        ASSERT_EQ(frame, 50);
        uint16_t keeper_old = 0;
        for (uint32_t i = 0; i < table_before.n_reservations; i++)
                if (table_before.reservations[i].id == g1.id)
                        keeper_old = (uint16_t) (i + 1);
        uint32_t first_before = 0, first_after = 0;
        for (uint32_t c = 0; c < table_before.n_cpus; c++)
                if (table_before.cpus[c].cpu == 1)
                        first_before = table_before.cpus[c].first_slot;
        for (uint32_t c = 0; c < table_after.n_cpus; c++)
                if (table_after.cpus[c].cpu == 1)
                        first_after = table_after.cpus[c].first_slot;
        for (uint32_t s = 0; s < frame; s++)
                ASSERT_EQ(table_after.slots[first_after + s] == 1, table_before.slots[first_before + s] == keeper_old);

        /* New requests work at once, with fresh ids. */
        params.pid = third;
        ASSERT_OK(pace_reserve(p, &params, &g3));
        ASSERT_CMP(g3.id, >, g2.id);

        /* The adopted reservation still dies with its process. */
        reap_children(&keeper, 1);
        size_t n = 2;
        for (int i = 0; i < 200 && n != 1; i++) {
                status_generation(p, &n);
                sleep_ms(5);
        }
        ASSERT_EQ(n, 1);
        reap_children(&third, 1);
        char *log = broker_log(&b);
        ASSERT_CONTAINS(log, "not adopted: process");
        ASSERT_CONTAINS(log, "adopted 1 reservation(s)");
        free(log);
        broker_stop_connected(&b, p);
}

static int write_config(const BrokerInstance *b, const char *json) {
        FILE *f = fopen(b->config, "we");
        if (!f)
                return -errno;
        fputs(json, f);
        return fclose(f) == 0 ? 0 : -errno;
}

TEST(reload_applies_a_valid_config_and_refuses_one_the_reservations_break) {
        BrokerInstance b;
        pace_grant g;
        pace_status_report *st = NULL;
        size_t n;

        pid_t kid = fork_paused();
        pace *p = broker_start_connected(&b, HARNESS_PROTOCOL_CONFIG);
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 600000, .pid = kid, .cpu = 1 };
        ASSERT_OK(pace_reserve(p, &params, &g));

        /* Valid: a larger non-RT share that the 60% still fits under. */
        ASSERT_OK(write_config(&b, "{ \"non_rt_share\": 0.3 }"));
        ASSERT_OK(pace_reload(p));
        ASSERT_CONTAINS(pace_last_message(), "reloaded");
        ASSERT_OK(pace_status(p, &st));
        ASSERT_EQ(st->non_rt_share_ppm, 300000);
        ASSERT_EQ(st->n_reservations, 1);
        pace_status_report_free(st);

        /* Violated by the live reservation: 60% no longer fits under 1 - 0.5. */
        ASSERT_OK(write_config(&b, "{ \"non_rt_share\": 0.5 }"));
        ASSERT_ERR(pace_reload(p), PACE_E_INVALID_ARGUMENT);
        ASSERT_CONTAINS(pace_last_message(), "reload refused");
        ASSERT_CONTAINS(pace_last_message(), "non-real-time share");
        /* Not even parseable. */
        ASSERT_OK(write_config(&b, "{ \"non_rt_share\": \"lots\" }"));
        ASSERT_ERR(pace_reload(p), PACE_E_INVALID_ARGUMENT);
        ASSERT_CONTAINS(pace_last_message(), "non_rt_share");
        /* A CPU the reservation lives on is no longer managed. */
        ASSERT_OK(write_config(&b, "{ \"cpus\": [0] }"));
        ASSERT_ERR(pace_reload(p), PACE_E_INVALID_ARGUMENT);
        ASSERT_CONTAINS(pace_last_message(), "CPU 1, which the new configuration does not manage");

        /* Nothing was dropped, and the last good configuration is in force. */
        ASSERT_OK(pace_status(p, &st));
        ASSERT_EQ(st->non_rt_share_ppm, 300000);
        ASSERT_EQ(st->n_reservations, 1);
        pace_status_report_free(st);

        /* The same through SIGHUP, as systemctl reload does it. */
        ASSERT_OK(write_config(&b, "{ \"non_rt_share\": 0.2 }"));
        ASSERT_OK(kill(b.pid, SIGHUP));
        for (int i = 0; i < 200; i++) {
                ASSERT_OK(pace_status(p, &st));
                uint32_t share = st->non_rt_share_ppm;
                pace_status_report_free(st);
                if (share == 200000)
                        break;
                ASSERT_TRUE(i < 199);
                sleep_ms(5);
        }
        char *log = broker_log(&b);
        ASSERT_CONTAINS(log, "reload refused, the old configuration stays");
        ASSERT_CONTAINS(log, "reloaded");
        free(log);

        /* Reset drops everything. */
        ASSERT_OK(pace_reset(p));
        ASSERT_CONTAINS(pace_last_message(), "1 reservation(s) dropped");
        status_generation(p, &n);
        ASSERT_EQ(n, 0);
        reap_children(&kid, 1);
        broker_stop_connected(&b, p);
}

TEST(socket_activation_is_used_when_offered) {
        const char *activate = "/usr/bin/systemd-socket-activate";
        char dir[] = "/tmp/pace-test-XXXXXX", sock[300], table[300], cmd[400];
        pace *p = NULL;
        size_t n;
        struct stat st;

        if (access(activate, X_OK) < 0)
                TEST_SKIP("%s not installed", activate);
        ASSERT_TRUE(mkdtemp(dir));
        snprintf(sock, sizeof(sock), "%s/activated.sock", dir);
        snprintf(table, sizeof(table), "%s/table", dir);

        pid_t pid = fork();
        ASSERT_OK(pid);
        if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGTERM);
                int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
                dup2(null, STDOUT_FILENO);
                dup2(null, STDERR_FILENO);
                execl(activate, activate, "--seqpacket", "-l", sock, getenv("PACE_BROKER"), "--runtime-dir", dir,
                      (char *) NULL);
                _exit(127);
        }
        for (int i = 0; i < 500 && stat(sock, &st) < 0; i++)
                sleep_ms(10);
        /* The broker only starts with the first connection, and must then
         * serve on the socket it was handed, not create its own. */
        ASSERT_ERR(stat(table, &st) < 0 ? -errno : 0, -ENOENT);
        /* systemd-socket-activate binds before it listens: the name can
         * be there a moment before a connect is taken. */
        int r = pace_connect(sock, &p);
        for (int i = 0; i < 200 && r == -ECONNREFUSED; i++) {
                sleep_ms(10);
                r = pace_connect(sock, &p);
        }
        ASSERT_OK(r);
        status_generation(p, &n);
        ASSERT_EQ(n, 0);
        ASSERT_OK(stat(table, &st));
        char own[300];
        snprintf(own, sizeof(own), "%s/broker.sock", dir);
        ASSERT_ERR(stat(own, &st) < 0 ? -errno : 0, -ENOENT);
        pace_close(p);

        kill(pid, SIGTERM);
        int status;
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        ASSERT_TRUE(WIFEXITED(status));
        ASSERT_EQ(WEXITSTATUS(status), 0);
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        ASSERT_EQ(system(cmd), 0);
}

TEST_MAIN()
