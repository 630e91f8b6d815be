/* SPDX-License-Identifier: MIT */
/* pace-broker over a real socket, who may ask for what: other users, groups,
 * root's processes, rate limits, and the broker's own privileges. */
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

static int try_reserve_target(const char *socket, pid_t target, uint64_t id) {
        pace *p = NULL;
        pace_grant g;
        if (pace_connect(socket, &p) < 0)
                return 10;
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 100000, .pid = target, .cpu = -1 };
        int r = pace_reserve(p, &params, &g);
        const char *msg = pace_last_message();
        pace_close(p);
        if (r == PACE_E_PERMISSION_DENIED && msg && strstr(msg, "may reserve only its own"))
                return 0;
        return 11;
}

static int try_release(const char *socket, pid_t target, uint64_t id) {
        pace *p = NULL;
        if (pace_connect(socket, &p) < 0)
                return 10;
        int r = pace_release(p, id);
        const char *msg = pace_last_message();
        pace_close(p);
        if (r == PACE_E_PERMISSION_DENIED && msg && strstr(msg, "may release only its own"))
                return 0;
        return 11;
}

/* Two reservations for itself and a child are fine, a third passes
 * max_reservations_per_user = 2. */
static int try_user_limits(const char *socket, pid_t target, uint64_t id) {
        pace *p = NULL;
        pace_grant g;
        pid_t kids[2];
        int rc = 0;

        for (int i = 0; i < 2; i++) {
                kids[i] = fork();
                if (kids[i] == 0) {
                        prctl(PR_SET_PDEATHSIG, SIGKILL);
                        pause();
                        _exit(0);
                }
        }
        if (pace_connect(socket, &p) < 0)
                return 10;
        pace_reserve_params params = { .period_ns = 100 * NSEC_PER_MSEC, .utilization_ppm = 100000, .cpu = -1 };
        if (pace_reserve(p, &params, &g) < 0)
                rc = 12;
        params.pid = kids[0];
        if (!rc && pace_reserve(p, &params, &g) < 0)
                rc = 13;
        params.pid = kids[1];
        if (!rc && (pace_reserve(p, &params, &g) != PACE_E_LIMIT_EXCEEDED ||
                    !strstr(pace_last_message(), "max_reservations_per_user")))
                rc = 14;
        pace_close(p);
        for (int i = 0; i < 2; i++) {
                kill(kids[i], SIGKILL);
                waitpid(kids[i], NULL, 0);
        }
        return rc;
}

/* Children of another user, for root to reserve: with its uid only, or
 * with its gid and no supplementary groups too. */
static int set_other_uid(void) {
        return setuid(HARNESS_OTHER_UID) < 0 ? 1 : 0;
}

static int become_other_user(void) {
        return setgroups(0, NULL) < 0 || setgid(HARNESS_OTHER_UID) < 0 || setuid(HARNESS_OTHER_UID) < 0 ? 2 : 0;
}

TEST(other_users_cannot_touch_what_is_not_theirs) {
        BrokerInstance b;
        pace_grant g;
        size_t n;

        if (skip_unless_root())
                TEST_SKIP("needs root to act as a second user");
        pace *p = broker_start_connected(&b, HARNESS_PROTOCOL_CONFIG);
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 200000, .cpu = -1 };
        ASSERT_OK(pace_reserve(p, &params, &g));
        uint64_t gen = status_generation(p, &n);

        ASSERT_EQ(as_other_user(try_reserve_target, b.socket, getpid(), 0), 0);
        ASSERT_EQ(as_other_user(try_release, b.socket, 0, g.id), 0);
        ASSERT_EQ(status_generation(p, &n), gen);
        ASSERT_EQ(n, 1);

        ASSERT_EQ(as_other_user(try_user_limits, b.socket, 0, 0), 0);
        /* The other user's reservations died with its processes. */
        for (int i = 0; i < 100; i++) {
                status_generation(p, &n);
                if (n == 1)
                        break;
                sleep_ms(10);
        }
        ASSERT_EQ(n, 1);

        /* Root may reserve another user's process. */
        pid_t kid = fork_paused_after(set_other_uid);
        params.pid = kid;
        params.utilization_ppm = 100000;
        ASSERT_OK(pace_reserve(p, &params, &g));
        ASSERT_EQ(g.pid, kid);
        reap_children(&kid, 1);
        broker_stop_connected(&b, p);
}

static int try_status_and_reserve_denied_by_group(const char *socket, pid_t target, uint64_t id) {
        pace *p = NULL;
        pace_grant g;
        pace_status_report *st = NULL;
        if (pace_connect(socket, &p) < 0)
                return 10;
        /* Status is read-only and open to all. */
        if (pace_status(p, &st) < 0)
                return 11;
        pace_status_report_free(st);
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 100000, .cpu = -1 };
        int r = pace_reserve(p, &params, &g);
        const char *msg = pace_last_message();
        int rc = r == PACE_E_PERMISSION_DENIED && msg && strstr(msg, "allowed_groups") ? 0 : 12;
        pace_close(p);
        return rc;
}

static int try_rate_limit(const char *socket, pid_t target, uint64_t id) {
        pace *p = NULL;
        pace_status_report *st = NULL;
        int limited = 0, served = 0;
        if (pace_connect(socket, &p) < 0)
                return 10;
        /* max_requests_per_second = 5: a burst of 20 cannot all pass. The
         * bucket holds 5 and refills at 5 a second while the burst runs
         * (a few ms, longer on a slow machine): at most that many more. */
        uint64_t t0 = monotonic_ns();
        for (int i = 0; i < 20; i++) {
                int r = pace_status(p, &st);
                if (r == 0) {
                        served++;
                        pace_status_report_free(st);
                } else if (r == PACE_E_LIMIT_EXCEEDED && strstr(pace_last_message(), "max_requests_per_second"))
                        limited++;
        }
        int refilled = (int) ((monotonic_ns() - t0) * 5 / NSEC_PER_SEC) + 1;
        pace_close(p);
        return served >= 1 && served <= 5 + refilled && served + limited == 20 ? 0 : 20 + served;
}

static int try_connection_cap(const char *socket, pid_t target, uint64_t id) {
        int fds[4];
        uint8_t buf[512];
        for (int i = 0; i < 4; i++)
                fds[i] = broker_raw_connect(socket);
        /* max_connections_per_user = 3: the fourth is refused. */
        ssize_t n = recv(fds[3], buf, sizeof(buf), 0);
        if (n <= 0)
                return 30;
        Pace__Response *resp = pace__response__unpack(NULL, (size_t) n, buf);
        int rc = resp && resp->body_case == PACE__RESPONSE__BODY_ERROR && resp->error->code == PACE__ERROR_CODE__ERROR_BUSY &&
                                 strstr(resp->error->message, "max_connections_per_user")
                         ? 0
                         : 31;
        if (resp)
                pace__response__free_unpacked(resp, NULL);
        for (int i = 0; i < 4; i++)
                close(fds[i]);
        return rc;
}

static int try_admin(const char *socket, pid_t target, uint64_t id) {
        pace *p = NULL;
        if (pace_connect(socket, &p) < 0)
                return 10;
        int r1 = pace_reset(p);
        int r2 = pace_reload(p);
        pace_close(p);
        return r1 == PACE_E_PERMISSION_DENIED && r2 == PACE_E_PERMISSION_DENIED ? 0 : 40;
}

TEST(who_may_ask_and_how_often) {
        BrokerInstance b;
        pace *p = NULL;
        size_t n;

        if (skip_unless_root())
                TEST_SKIP("needs root to act as a second user");
        ASSERT_OK(broker_start(&b, "{ \"allowed_groups\": [\"root\"], \"max_requests_per_second\": 5,"
                                   "  \"max_connections_per_user\": 3 }"));
        ASSERT_EQ(as_other_user(try_status_and_reserve_denied_by_group, b.socket, 0, 0), 0);
        /* The other user's status was served and its reserve refused: the
         * rate limit is per user, so wait for its bucket to refill. */
        sleep_ms(1100);
        ASSERT_EQ(as_other_user(try_rate_limit, b.socket, 0, 0), 0);
        ASSERT_EQ(as_other_user(try_connection_cap, b.socket, 0, 0), 0);
        sleep_ms(1100);
        ASSERT_EQ(as_other_user(try_admin, b.socket, 0, 0), 0);
        /* Root is exempt from all of it. */
        ASSERT_OK(pace_connect(b.socket, &p));
        for (int i = 0; i < 30; i++)
                status_generation(p, &n);
        broker_stop_connected(&b, p);
}

/* A field of /proc/PID/status, e.g. "Uid:", as the rest of its line. */
static bool status_field(pid_t pid, const char *field, char *ret, size_t size) {
        char path[64], line[256];
        bool found = false;
        snprintf(path, sizeof(path), "/proc/%d/status", (int) pid);
        FILE *f = fopen(path, "re");
        while (f && !found && fgets(line, sizeof(line), f))
                if (strncmp(line, field, strlen(field)) == 0) {
                        const char *v = line + strlen(field);
                        v += strspn(v, " \t");
                        snprintf(ret, size, "%.*s", (int) strcspn(v, "\n"), v);
                        found = true;
                }
        if (f)
                fclose(f);
        return found;
}

/* Started as root by hand, the broker drops everything itself: another
 * user, no capabilities in any set, no_new_privs; and still serves, and
 * still replaces its table in the directory it was given. */
TEST(a_broker_started_as_root_drops_to_an_unprivileged_user) {
        BrokerInstance b;
        pace *p = NULL;
        pace_grant g;
        char v[256];

        if (skip_unless_root())
                TEST_SKIP("needs root");
        ASSERT_OK(broker_start_as_root(&b, HARNESS_PROTOCOL_CONFIG));
        ASSERT_OK(pace_connect(b.socket, &p));
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 100000, .cpu = -1 };
        ASSERT_OK(pace_reserve(p, &params, &g));
        ASSERT_OK(pace_release(p, g.id));
        pace_close(p);

        unsigned ruid = 0, euid = 0, suid = 0, fsuid = 0;
        ASSERT_TRUE(status_field(b.pid, "Uid:", v, sizeof(v)));
        ASSERT_EQ(sscanf(v, "%u %u %u %u", &ruid, &euid, &suid, &fsuid), 4);
        printf("  broker uids %s", v);
        ASSERT_NE(ruid, 0u);
        ASSERT_NE(euid, 0u);
        ASSERT_NE(suid, 0u);
        ASSERT_TRUE(status_field(b.pid, "Gid:", v, sizeof(v)));
        printf("; gids %s", v);
        ASSERT_NE(strncmp(v, "0\t", 2), 0);
        static const char *const sets[] = { "CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:" };
        for (size_t i = 0; i < ELEMENTSOF(sets); i++) {
                ASSERT_TRUE(status_field(b.pid, sets[i], v, sizeof(v)));
                printf("; %s %s", sets[i], v);
                ASSERT_EQ(strtoull(v, NULL, 16), 0ULL);
        }
        ASSERT_TRUE(status_field(b.pid, "NoNewPrivs:", v, sizeof(v)));
        printf("; NoNewPrivs %s\n", v);
        ASSERT_EQ(strcmp(v, "1"), 0);
        assert_broker_log_contains(&b, "now running as");
        ASSERT_EQ(broker_stop(&b), 0);
}

/* Root's processes are reservable only with the administrator's consent:
 * the dispatcher could not tell root's request from a compromised broker's.
 * The refusal names the key; an ordinary user's process is unaffected. */
TEST(root_processes_need_reserve_root_processes) {
        BrokerInstance b;
        pace_grant g;

        if (geteuid() != 0)
                TEST_SKIP("needs root: the target must run as root, the other as another user");
        pace *p = broker_start_connected(&b, "{ \"reserve_root_processes\": false }");
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 100000, .cpu = -1 };
        ASSERT_ERR(pace_reserve(p, &params, &g), PACE_E_PERMISSION_DENIED);
        ASSERT_CONTAINS(pace_last_message(), "runs as root");
        ASSERT_CONTAINS(pace_last_message(), "\"reserve_root_processes\": true");

        /* A process of an ordinary user, reserved by root: fine. */
        pid_t kid = fork_paused_after(become_other_user);
        params.pid = kid;
        ASSERT_OK(pace_reserve(p, &params, &g));
        reap_children(&kid, 1);
        broker_stop_connected(&b, p);
}

TEST_MAIN()
