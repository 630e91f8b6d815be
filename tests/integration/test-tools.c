/* SPDX-License-Identifier: MIT */
/* pacectl and pace-run as a user runs them, against a real broker. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "broker-harness.h"
#include "macro.h"
#include "pace/pace.h"
#include "test.h"
#include "time-util.h"

static const char *config_json = "{ \"slot_us\": 1000, \"non_rt_share\": 0.25 }";

/* What the last run_tool() printed on stdout and stderr, for the test to
 * check; the next run frees it. */
static char *out, *err;

/* Runs argv with PACE_SOCKET set, its output captured in out and err;
 * returns the exit status (or 128 + signal). */
static int run_tool(const char *socket, const char *const argv[]) {
        char out_path[] = "/tmp/pace-tool-out-XXXXXX", err_path[] = "/tmp/pace-tool-err-XXXXXX";
        int out_fd = mkstemp(out_path), err_fd = mkstemp(err_path), status;
        ASSERT_OK(out_fd);
        ASSERT_OK(err_fd);
        free(out);
        free(err);
        out = err = NULL;
        pid_t pid = fork();
        ASSERT_OK(pid);
        if (pid == 0) {
                dup2(out_fd, STDOUT_FILENO);
                dup2(err_fd, STDERR_FILENO);
                setenv("PACE_SOCKET", socket, 1);
                execv(argv[0], (char *const *) argv);
                _exit(127);
        }
        alarm(30);
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        alarm(0);
        for (int i = 0; i < 2; i++) {
                int fd = i == 0 ? out_fd : err_fd;
                off_t size = lseek(fd, 0, SEEK_END);
                char *buf = calloc(1, (size_t) size + 1);
                ASSERT_TRUE(buf);
                ASSERT_EQ(pread(fd, buf, (size_t) size, 0), size);
                *(i == 0 ? &out : &err) = buf;
                close(fd);
        }
        unlink(out_path);
        unlink(err_path);
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static pid_t spawn_sleeper(void) {
        pid_t pid = fork();
        ASSERT_OK(pid);
        if (pid == 0) {
                execl("/bin/sleep", "sleep", "30", (char *) NULL);
                _exit(127);
        }
        return pid;
}

static void reap(pid_t pid) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
}

/* A broker with config_json, a sleeping child, and a connection (in *ret_p)
 * that reserved the child with params (its pid filled in): the child. */
static pid_t start_reserving_sleeper(BrokerInstance *b, pace **ret_p, pace_reserve_params *params, pace_grant *ret_g) {
        pid_t sleeper = spawn_sleeper();
        *ret_p = broker_start_connected(b, config_json);
        params->pid = sleeper;
        ASSERT_OK(pace_reserve(*ret_p, params, ret_g));
        return sleeper;
}

/* What start_reserving_sleeper() started, stopped; the broker exits 0. */
static void stop_reserving_sleeper(BrokerInstance *b, pace *p, pid_t sleeper) {
        reap(sleeper);
        broker_stop_connected(b, p);
}

/* pacectl --json status on socket, parsed (free with cJSON_Delete()). */
static cJSON *pacectl_json_status(const char *socket) {
        const char *pacectl = getenv("PACECTL");

        ASSERT_EQ(run_tool(socket, (const char *[]) { pacectl, "--json", "status", NULL }), 0);
        cJSON *root = cJSON_Parse(out);
        ASSERT_TRUE(root);
        return root;
}

TEST(pacectl_status_text_and_json) {
        BrokerInstance b;
        pace *p = NULL;
        pace_grant g;
        const char *pacectl = getenv("PACECTL");
        ASSERT_TRUE(pacectl);

        pace_status_report *st = NULL;

        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 600000, .cpu = 1 };
        pid_t sleeper = start_reserving_sleeper(&b, &p, &params, &g);

        ASSERT_EQ(run_tool(b.socket, (const char *[]) { pacectl, "status", NULL }), 0);
        char pidstr[32];
        snprintf(pidstr, sizeof(pidstr), "%d", (int) sleeper);
        ASSERT_CONTAINS(out, pidstr);
        ASSERT_CONTAINS(out, "60%");
        ASSERT_CONTAINS(out, "50ms");
        ASSERT_CONTAINS(out, "30ms");
        ASSERT_CONTAINS(out, "Non-real-time share: 25%");

        cJSON *root = pacectl_json_status(b.socket);
        cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "reservations");
        ASSERT_TRUE(cJSON_IsArray(list));
        ASSERT_EQ(cJSON_GetArraySize(list), 1);
        cJSON *r0 = cJSON_GetArrayItem(list, 0);
        ASSERT_EQ(cJSON_GetObjectItemCaseSensitive(r0, "pid")->valuedouble, sleeper);
        ASSERT_EQ(cJSON_GetObjectItemCaseSensitive(r0, "cpu")->valuedouble, 1);
        ASSERT_EQ(cJSON_GetObjectItemCaseSensitive(r0, "budget_ns")->valuedouble, 30 * NSEC_PER_MSEC);
        ASSERT_EQ(cJSON_GetObjectItemCaseSensitive(r0, "uid")->valuedouble, getuid());
        /* Each CPU's free share as the broker reports it; CPU 1 holds 60% of
         * its 75%, so under 15% is left there and more than that elsewhere. */
        ASSERT_OK(pace_status(p, &st));
        cJSON *cpus = cJSON_GetObjectItemCaseSensitive(root, "cpus");
        ASSERT_TRUE(cJSON_IsArray(cpus));
        ASSERT_EQ((size_t) cJSON_GetArraySize(cpus), st->n_cpus);
        for (size_t i = 0; i < st->n_cpus; i++) {
                cJSON *c = cJSON_GetArrayItem(cpus, (int) i);
                ASSERT_EQ(cJSON_GetObjectItemCaseSensitive(c, "cpu")->valuedouble, st->cpus[i].cpu);
                ASSERT_EQ(cJSON_GetObjectItemCaseSensitive(c, "free_ppm")->valuedouble, st->cpus[i].free_ppm);
                if (st->cpus[i].cpu == 1)
                        ASSERT_CMP(st->cpus[i].free_ppm, <=, 150000u);
                else
                        ASSERT_CMP(st->cpus[i].free_ppm, >, 150000u);
        }
        pace_status_report_free(st);
        cJSON_Delete(root);

        /* --socket wins over a wrong $PACE_SOCKET. */
        ASSERT_EQ(run_tool("/nonexistent/broker.sock",
                           (const char *[]) { pacectl, "--socket", b.socket, "status", NULL }), 0);
        ASSERT_CONTAINS(out, pidstr);
        char uidstr[32];
        snprintf(uidstr, sizeof(uidstr), " %u ", (unsigned) getuid());
        ASSERT_CONTAINS(out, uidstr);

        /* The table as drawn: 30 of 50 slots are A. */
        ASSERT_EQ(run_tool(b.socket, (const char *[]) { pacectl, "table", NULL }), 0);
        ASSERT_CONTAINS(out, "30 of every 50 slots");
        const char *drawn = strstr(out, "frame of 50 slots\n");
        ASSERT_TRUE(drawn);
        unsigned a = 0, dots = 0;
        for (const char *c = drawn + strlen("frame of 50 slots\n"); *c; c++) {
                a += *c == 'A';
                dots += *c == '.';
        }
        ASSERT_EQ(a, 30);
        ASSERT_EQ(dots, 20);

        /* Bad use is a usage error that says what is wrong. */
        ASSERT_EQ(run_tool(b.socket, (const char *[]) { pacectl, "frobnicate", NULL }), 2);
        ASSERT_CONTAINS(err, "unknown command 'frobnicate'");
        ASSERT_EQ(run_tool(b.socket, (const char *[]) { pacectl, "release", "12x", NULL }), 2);
        ASSERT_CONTAINS(err, "12x");
        ASSERT_EQ(run_tool("/nonexistent/broker.sock", (const char *[]) { pacectl, "status", NULL }), 3);
        ASSERT_CONTAINS(err, "/nonexistent/broker.sock");

        /* pacectl release ID ends it. */
        char idstr[32];
        snprintf(idstr, sizeof(idstr), "%" PRIu64, g.id);
        ASSERT_EQ(run_tool(b.socket, (const char *[]) { pacectl, "release", idstr, NULL }), 0);
        ASSERT_OK(pace_status(p, &st));
        ASSERT_EQ(st->n_reservations, 0);
        pace_status_report_free(st);
        ASSERT_EQ(run_tool(b.socket, (const char *[]) { pacectl, "release", idstr, NULL }), 1);
        ASSERT_CONTAINS(err, idstr);

        stop_reserving_sleeper(&b, p, sleeper);
}

TEST(pace_run_granted_runs_the_command_under_its_reservation) {
        BrokerInstance b;
        const char *pace_run = getenv("PACE_RUN");
        ASSERT_TRUE(pace_run);

        ASSERT_OK(broker_start(&b, config_json));
        /* The command asks the broker, from inside, whether its own pid
         * holds a reservation: proof that exec kept the pid and the grant. */
        char script[512];
        snprintf(script, sizeof(script), "%s --json status | grep -q \"\\\"pid\\\":[[:space:]]*$$\" && echo reserved-as-$$",
                 getenv("PACECTL"));
        int rc = run_tool(b.socket, (const char *[]) { pace_run, "--wait", "0", "--period", "40ms", "--util", "25%", "--", "/bin/sh", "-c",
                                                       script, NULL });
        ASSERT_EQ(rc, 0);
        ASSERT_CONTAINS(out, "reserved-as-");
        ASSERT_CONTAINS(err, "40ms");
        ASSERT_EQ(broker_stop(&b), 0);
}

/* No dispatcher here: the grant is never taken up. pace-run waits as long
 * as --wait says, then runs the command anyway, at nice 19 (unheld, it
 * would take from everyone), and says why; a bad --wait is a usage error
 * and nothing runs. (That it waits for a dispatcher that does take it up:
 * test-end-to-end-scopes.) */
TEST(pace_run_without_a_dispatcher_waits_then_warns) {
        BrokerInstance b;
        const char *pace_run = getenv("PACE_RUN");

        ASSERT_OK(broker_start(&b, config_json));
        uint64_t start = monotonic_ns();
        int rc = run_tool(b.socket, (const char *[]) { pace_run, "-q", "--wait", "300ms", "--period", "40ms", "--util", "25%",
                                                       "--", "/usr/bin/nice", NULL });
        uint64_t took = monotonic_ns() - start;
        ASSERT_EQ(rc, 0);
        ASSERT_STREQ(out, "19\n");
        ASSERT_CONTAINS(err, "has not taken it up within 300ms (is it running?); running /usr/bin/nice anyway, at nice 19");
        ASSERT_CMP(took, >=, 300 * NSEC_PER_MSEC);

        rc = run_tool(b.socket, (const char *[]) { pace_run, "--wait", "soon", "--period", "40ms", "--util", "25%", "--",
                                                   "/bin/echo", "ran", NULL });
        ASSERT_EQ(rc, 2);
        ASSERT_CONTAINS(err, "invalid --wait 'soon'");
        ASSERT_STREQ(out, "");
        ASSERT_EQ(broker_stop(&b), 0);
}

/* The reply says where a reservation lives, every CPU of a split
 * one too. 25% held on each CPU leaves 50% on each: 60% fits only split. */
TEST(tools_name_every_cpu_of_a_split_reservation) {
        BrokerInstance b;
        char pid_text[3][16];
        const char *pacectl = getenv("PACECTL"), *pace_run = getenv("PACE_RUN");
        pid_t kids[3];
        ASSERT_TRUE(pacectl && pace_run);

        ASSERT_OK(broker_start(&b, config_json));
        for (int i = 0; i < 3; i++) {
                kids[i] = spawn_sleeper();
                snprintf(pid_text[i], sizeof(pid_text[i]), "%d", (int) kids[i]);
        }
        for (int i = 0; i < 2; i++) {
                ASSERT_EQ(run_tool(b.socket, (const char *[]) { pacectl, "reserve", "--period", "50ms", "--util", "25%",
                                                               "--pid", pid_text[i], "--cpu", i ? "1" : "0", NULL }),
                          0);
                ASSERT_CONTAINS(out, i ? "of CPU 1 for" : "of CPU 0 for");
        }

        ASSERT_EQ(run_tool(b.socket, (const char *[]) { pacectl, "--json", "reserve", "--period", "50ms", "--util",
                                                       "60%", "--pid", pid_text[2], NULL }), 0);
        cJSON *j = cJSON_Parse(out);
        ASSERT_TRUE(j);
        const cJSON *cpus = cJSON_GetObjectItemCaseSensitive(j, "cpus");
        ASSERT_TRUE(cJSON_IsArray(cpus));
        ASSERT_EQ(cJSON_GetArraySize(cpus), 2);
        ASSERT_EQ(cJSON_GetArrayItem(cpus, 0)->valueint, 0);
        ASSERT_EQ(cJSON_GetArrayItem(cpus, 1)->valueint, 1);
        char id[32];
        snprintf(id, sizeof(id), "%.0f", cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(j, "id")));
        cJSON_Delete(j);
        /* Released at once (a dead process's would be freed a moment after
         * its death), so pace-run finds the same room. */
        ASSERT_EQ(run_tool(b.socket, (const char *[]) { pacectl, "release", id, NULL }), 0);

        /* Asked for a server, it is a server or nothing: none is split. */
        ASSERT_EQ(run_tool(b.socket, (const char *[]) { pace_run, "--wait", "0", "--kind", "server", "--period", "50ms", "--util", "60%",
                                                       "--", "/bin/echo", "ran", NULL }), 1);
        ASSERT_CONTAINS(err, "never split over CPUs");
        ASSERT_STREQ(out, "");

        /* Asked for no kind, the default server does not fit on one CPU:
         * pace-run takes slots, split, and says why. */
        ASSERT_EQ(run_tool(b.socket, (const char *[]) { pace_run, "--wait", "0", "--period", "50ms", "--util", "60%", "--", "/bin/true",
                                                       NULL }), 0);
        ASSERT_CONTAINS(err, "reserved 60% of CPUs 0+1:");
        ASSERT_CONTAINS(err, "kind slots");
        ASSERT_CONTAINS(err, "no one CPU had room for it as a server");
        ASSERT_FALSE(strstr(err, "requested kind"));

        for (int i = 0; i < 3; i++)
                reap(kids[i]);
        ASSERT_EQ(broker_stop(&b), 0);
}

TEST(pace_run_refused_says_why_and_does_not_run) {
        BrokerInstance b;
        const char *pace_run = getenv("PACE_RUN");
        char marker[] = "/tmp/pace-run-marker-XXXXXX";

        ASSERT_OK(broker_start(&b, config_json));
        int fd = mkstemp(marker);
        ASSERT_OK(fd);
        close(fd);
        unlink(marker);

        /* 80% is more than 1 - non_rt_share on any CPU. */
        int rc = run_tool(b.socket, (const char *[]) { pace_run, "--wait", "0", "--period", "50ms", "--util", "80%", "--",
                                                       "/usr/bin/touch", marker, NULL });
        ASSERT_NE(rc, 0);
        ASSERT_CONTAINS(err, "non_rt_share");
        ASSERT_CONTAINS(err, "free");
        struct stat st;
        ASSERT_ERR(stat(marker, &st) < 0 ? -errno : 0, -ENOENT);

        /* --best-effort runs it anyway, unreserved, and says so. */
        rc = run_tool(b.socket, (const char *[]) { pace_run, "--wait", "0", "--best-effort", "--period", "50ms", "--util", "80%", "--",
                                             "/usr/bin/touch", marker, NULL });
        ASSERT_EQ(rc, 0);
        ASSERT_OK(stat(marker, &st));
        unlink(marker);

        /* Bad values: usage error naming the option. */
        rc = run_tool(b.socket, (const char *[]) { pace_run, "--wait", "0", "--period", "50", "--util", "60%", "--", "/bin/true",
                                                   NULL });
        ASSERT_EQ(rc, 2);
        ASSERT_CONTAINS(err, "--period");
        rc = run_tool(b.socket, (const char *[]) { pace_run, "--wait", "0", "--period", "50ms", "--util", "160%", "--", "/bin/true",
                                                   NULL });
        ASSERT_EQ(rc, 2);
        ASSERT_CONTAINS(err, "--util");
        ASSERT_CONTAINS(err, "--scope thread"); /* how to ask for more than one CPU instead */
        /* --socket wins over $PACE_SOCKET, for pace-run too. */
        rc = run_tool("/nonexistent/broker.sock", (const char *[]) { pace_run, "--wait", "0", "--socket", b.socket, "--period", "50ms",
                                                                   "--util", "10%", "--", "/bin/true", NULL });
        ASSERT_EQ(rc, 0);
        ASSERT_EQ(broker_stop(&b), 0);
}

static unsigned count_occurrences(const char *haystack, const char *needle) {
        unsigned n = 0;

        for (const char *p = strstr(haystack, needle); p; p = strstr(p + 1, needle))
                n++;
        return n;
}

static double now_sec(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static cJSON *json_first_reservation(cJSON *root) {
        cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "reservations");

        ASSERT_TRUE(cJSON_IsArray(list));
        ASSERT_CMP(cJSON_GetArraySize(list), >=, 1);
        return cJSON_GetArrayItem(list, 0);
}

TEST(pacectl_status_new_columns) {
        BrokerInstance b;
        pace *p = NULL;
        pace_grant g;
        const char *pacectl = getenv("PACECTL");

        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 600000, .cpu = -1 };
        pid_t sleeper = start_reserving_sleeper(&b, &p, &params, &g);

        ASSERT_EQ(run_tool(b.socket, (const char *[]) { pacectl, "status", NULL }), 0);
        ASSERT_CONTAINS(out, "SCOPE");
        ASSERT_CONTAINS(out, "THREADS");
        ASSERT_CONTAINS(out, "REQUESTED");
        ASSERT_CONTAINS(out, "GRANTED");
        ASSERT_CONTAINS(out, "DELIVERED");
        ASSERT_CONTAINS(out, "PERIODS");
        ASSERT_CONTAINS(out, "BLOCKED");
        ASSERT_CONTAINS(out, "WANTED MORE");
        ASSERT_CONTAINS(out, "process");
        /* No dispatcher here, so no accounting: shown as unknown, not 0. */
        ASSERT_CONTAINS(out, "no report from pace-dispatcher yet");
        ASSERT_FALSE(strstr(out, "0.0%"));
        /* Readable on a terminal: no line wider than 120 columns. */
        for (const char *line = out; *line;) {
                const char *end = strchr(line, '\n');
                size_t len = end ? (size_t) (end - line) : strlen(line);

                ASSERT_CMP(len, <=, 120);
                line += len + (end ? 1 : 0);
        }

        cJSON *root = pacectl_json_status(b.socket);
        cJSON *r0 = json_first_reservation(root);
        ASSERT_TRUE(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(r0, "scope")));
        ASSERT_STREQ(cJSON_GetObjectItemCaseSensitive(r0, "scope")->valuestring, "process");
        ASSERT_TRUE(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(r0, "threads")));
        ASSERT_TRUE(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(r0, "phase_ns")));
        ASSERT_TRUE(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(r0, "requested_utilization_ppm")));
        ASSERT_TRUE(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(r0, "utilization_ppm")));
        ASSERT_TRUE(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(r0, "delivered_utilization_ppm")));
        ASSERT_TRUE(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(r0, "accounting")));
        cJSON_Delete(root);

        stop_reserving_sleeper(&b, p, sleeper);
}

/* Needs the broker to echo the scope and count the threads. */
TEST(pacectl_status_shows_scope_and_threads_from_broker) {
        BrokerInstance b;
        pace *p = NULL;
        pace_grant g;
        const char *pacectl = getenv("PACECTL");

        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 200000,
                                       .cpu = -1, .scope = PACE_SCOPE_TREE };
        pid_t sleeper = start_reserving_sleeper(&b, &p, &params, &g);
        ASSERT_EQ(g.scope, PACE_SCOPE_TREE);
        ASSERT_EQ(g.threads, 1);
        ASSERT_CMP(g.phase_ns, <, g.period_ns);

        ASSERT_EQ(run_tool(b.socket, (const char *[]) { pacectl, "status", NULL }), 0);
        ASSERT_CONTAINS(out, "tree");

        cJSON *root = pacectl_json_status(b.socket);
        cJSON *r0 = json_first_reservation(root);
        ASSERT_STREQ(cJSON_GetObjectItemCaseSensitive(r0, "scope")->valuestring, "tree");
        ASSERT_EQ(cJSON_GetObjectItemCaseSensitive(r0, "threads")->valuedouble, 1);
        cJSON_Delete(root);

        stop_reserving_sleeper(&b, p, sleeper);
}

TEST(pacectl_top_prints_frames) {
        BrokerInstance b;
        pace *p = NULL;
        pace_grant g;
        const char *pacectl = getenv("PACECTL");
        char row[64];
        double t;

        pace_reserve_params params = { .period_ns = 40 * NSEC_PER_MSEC, .utilization_ppm = 250000, .cpu = -1 };
        pid_t sleeper = start_reserving_sleeper(&b, &p, &params, &g);

        /* Not a terminal: frames one after another, a blank line between,
         * no escape sequences; -n ends it; the interval is waited. */
        t = now_sec();
        ASSERT_EQ(run_tool(b.socket, (const char *[]) { pacectl, "top", "-n", "2", "-d", "0.3", NULL }), 0);
        t = now_sec() - t;
        ASSERT_CMP(t, >=, 0.3);
        ASSERT_EQ(count_occurrences(out, "pacectl top - "), 2);
        ASSERT_EQ(count_occurrences(out, "\n\npacectl top - "), 1);
        ASSERT_TRUE(strncmp(out, "pacectl top - ", strlen("pacectl top - ")) == 0);
        ASSERT_FALSE(strchr(out, '\033'));
        snprintf(row, sizeof(row), "%" PRIu64 "  %d  ", g.id, (int) sleeper);
        ASSERT_EQ(count_occurrences(out, row), 2);
        ASSERT_EQ(count_occurrences(out, "WANTED MORE"), 2);
        ASSERT_EQ(count_occurrences(out, "RESERVED"), 2);
        ASSERT_CONTAINS(out, "25%");
        ASSERT_STREQ(err, "");

        /* --interval with a unit, and one frame. */
        ASSERT_EQ(run_tool(b.socket, (const char *[]) { pacectl, "top", "--interval", "200ms", "--iterations", "1",
                                                       NULL }), 0);
        ASSERT_EQ(count_occurrences(out, "pacectl top - "), 1);
        ASSERT_CONTAINS(out, "every 200ms");

        /* Usage errors name the value. */
        ASSERT_EQ(run_tool(b.socket, (const char *[]) { pacectl, "top", "-d", "soon", NULL }), 2);
        ASSERT_CONTAINS(err, "'soon'");
        ASSERT_EQ(run_tool(b.socket, (const char *[]) { pacectl, "top", "-n", "0", NULL }), 2);
        ASSERT_CONTAINS(err, "--iterations '0'");
        ASSERT_EQ(run_tool(b.socket, (const char *[]) { pacectl, "status", "-n", "2", NULL }), 2);
        ASSERT_CONTAINS(err, "only applies to the top command");

        /* A broker that cannot be reached is reported like for status. */
        ASSERT_EQ(run_tool("/nonexistent/broker.sock", (const char *[]) { pacectl, "top", "-n", "1", NULL }), 3);
        ASSERT_CONTAINS(err, "/nonexistent/broker.sock");

        stop_reserving_sleeper(&b, p, sleeper);
}

TEST(pace_run_scope_option) {
        BrokerInstance b;
        const char *pace_run = getenv("PACE_RUN");
        int rc;

        ASSERT_OK(broker_start(&b, config_json));

        /* A bad scope is a usage error naming the value; nothing runs. */
        rc = run_tool(b.socket, (const char *[]) { pace_run, "--wait", "0", "--scope", "threads", "--period", "40ms", "--util", "10%", "--",
                                             "/bin/echo", "ran", NULL });
        ASSERT_EQ(rc, 2);
        ASSERT_CONTAINS(err, "--scope 'threads'");
        ASSERT_CONTAINS(err, "thread, process or tree");
        ASSERT_STREQ(out, "");

        rc = run_tool(b.socket, (const char *[]) { pace_run, "--wait", "0", "--period", "40ms", "--util", "10%", "--scope", NULL });
        ASSERT_EQ(rc, 2);
        ASSERT_CONTAINS(err, "--scope");

        /* Each scope is accepted, and the grant line says which one was had. */
        static const char *const scopes[] = { "process", "thread", "tree" };
        for (size_t i = 0; i < ELEMENTSOF(scopes); i++) {
                rc = run_tool(b.socket, (const char *[]) { pace_run, "--wait", "0", "--scope", scopes[i], "--period", "40ms", "--util", "10%",
                                                     "--", "/bin/echo", "ran", NULL });
                ASSERT_EQ(rc, 0);
                ASSERT_STREQ(out, "ran\n");
                ASSERT_CONTAINS(err, "scope ");
        }

        /* --quiet says nothing about the grant. */
        rc = run_tool(b.socket, (const char *[]) { pace_run, "--wait", "0", "-q", "--scope", "process", "--period", "40ms", "--util", "10%",
                                             "--", "/bin/true", NULL });
        ASSERT_EQ(rc, 0);
        ASSERT_STREQ(err, "");

        ASSERT_EQ(broker_stop(&b), 0);
}

/* Needs the broker to grant the scope asked for and count threads. */
TEST(pace_run_scope_is_granted_as_asked) {
        BrokerInstance b;
        const char *pace_run = getenv("PACE_RUN");
        char script[512];
        int rc;

        ASSERT_OK(broker_start(&b, config_json));

        /* The default is tree, and the command sees its reservation as one. */
        snprintf(script, sizeof(script),
                 "%s --json status | grep -q '\"scope\":[[:space:]]*\"tree\"' && echo tree-as-$$", getenv("PACECTL"));
        rc = run_tool(b.socket, (const char *[]) { pace_run, "--wait", "0", "--period", "40ms", "--util", "10%", "--", "/bin/sh", "-c",
                                             script, NULL });
        ASSERT_EQ(rc, 0);
        ASSERT_CONTAINS(out, "tree-as-");
        ASSERT_CONTAINS(err, "scope tree, 1 thread)");
        ASSERT_FALSE(strstr(err, "requested scope"));

        rc = run_tool(b.socket, (const char *[]) { pace_run, "--wait", "0", "--scope", "thread", "--period", "40ms", "--util", "10%", "--",
                                             "/bin/true", NULL });
        ASSERT_EQ(rc, 0);
        ASSERT_CONTAINS(err, "scope thread");
        ASSERT_FALSE(strstr(err, "requested scope"));

        ASSERT_EQ(broker_stop(&b), 0);
}

/* pace-run --kind (-k) asks for a kind and says which was had; a
 * bad one is a usage error and nothing runs; without it the default is
 * server. pacectl shows each reservation's kind in status (text and JSON)
 * and in top, and modify keeps the kind unless --kind names another. */
TEST(kinds_from_pace_run_and_pacectl) {
        BrokerInstance b;
        const char *pace_run = getenv("PACE_RUN"), *pacectl = getenv("PACECTL");
        char script[512];
        int rc;

        ASSERT_OK(broker_start(&b, config_json));

        rc = run_tool(b.socket, (const char *[]) { pace_run, "--wait", "0", "--kind", "deadline", "-p", "40ms", "-u", "10%", "--",
                                             "/bin/echo", "ran", NULL });
        ASSERT_EQ(rc, 2);
        ASSERT_CONTAINS(err, "invalid --kind 'deadline': expected slots");
        ASSERT_CONTAINS(err, "server");
        ASSERT_CONTAINS(err, "aligned");
        ASSERT_STREQ(out, "");

        /* The default, and each kind by its long and short option; the
         * command sees its own reservation listed with that kind. */
        static const struct {
                const char *option, *value, *shown;
        } runs[] = {
                { NULL, NULL, "server" },
                { "--kind", "slots", "slots" },
                { "-k", "server", "server" },
                { "--kind", "aligned", "aligned" },
        };
        for (size_t i = 0; i < ELEMENTSOF(runs); i++) {
                snprintf(script, sizeof(script),
                         "%s status | grep -q ' %s ' && %s --json status | grep -q '\"kind\":[[:space:]]*\"%s\"' "
                         "&& echo listed", pacectl, runs[i].shown, pacectl, runs[i].shown);
                const char *argv_default[] = { pace_run, "--wait", "0", "-p", "40ms", "-u", "10%", "--", "/bin/sh", "-c", script,
                                               NULL };
                const char *argv_kind[] = { pace_run, "--wait", "0", runs[i].option, runs[i].value, "-p", "40ms", "-u", "10%", "--",
                                            "/bin/sh", "-c", script, NULL };
                rc = run_tool(b.socket, runs[i].option ? argv_kind : argv_default);
                ASSERT_EQ(rc, 0);
                ASSERT_STREQ(out, "listed\n");
                char says[64];
                snprintf(says, sizeof(says), "kind %s, scope tree", runs[i].shown);
                ASSERT_CONTAINS(err, says);
                ASSERT_FALSE(strstr(err, "requested kind"));
        }

        /* pacectl reserve --kind, top, and modify keeping or changing it. */
        pid_t sleeper = spawn_sleeper();
        char pid[16];
        snprintf(pid, sizeof(pid), "%d", (int) sleeper);
        rc = run_tool(b.socket, (const char *[]) { pacectl, "--json", "reserve", "--pid", pid, "-p", "50ms", "-u", "20%",
                                             "--kind", "server", NULL });
        ASSERT_EQ(rc, 0);
        cJSON *root = cJSON_Parse(out);
        ASSERT_TRUE(root);
        ASSERT_STREQ(cJSON_GetObjectItemCaseSensitive(root, "kind")->valuestring, "server");
        char id[32];
        snprintf(id, sizeof(id), "%.0f", cJSON_GetObjectItemCaseSensitive(root, "id")->valuedouble);
        cJSON_Delete(root);

        rc = run_tool(b.socket, (const char *[]) { pacectl, "top", "-n", "1", NULL });
        ASSERT_EQ(rc, 0);
        ASSERT_CONTAINS(out, "KIND");
        ASSERT_CONTAINS(out, " server ");

        rc = run_tool(b.socket, (const char *[]) { pacectl, "modify", id, "-p", "50ms", "-u", "30%", NULL });
        ASSERT_EQ(rc, 0);
        ASSERT_CONTAINS(out, "kind server");
        rc = run_tool(b.socket, (const char *[]) { pacectl, "modify", id, "-p", "50ms", "-u", "30%", "--kind", "aligned",
                                             NULL });
        ASSERT_EQ(rc, 0);
        ASSERT_CONTAINS(out, "kind aligned");
        rc = run_tool(b.socket, (const char *[]) { pacectl, "status", NULL });
        ASSERT_EQ(rc, 0);
        ASSERT_CONTAINS(out, "KIND");
        ASSERT_CONTAINS(out, " aligned ");

        /* --kind is for reserve and modify only. */
        rc = run_tool(b.socket, (const char *[]) { pacectl, "status", "--kind", "server", NULL });
        ASSERT_EQ(rc, 2);
        ASSERT_CONTAINS(err, "--kind only applies to the reserve and modify commands");

        reap(sleeper);
        ASSERT_EQ(broker_stop(&b), 0);
}

/* The "hostile clients" issue: `taskset -c 1 pace-run ...` must reserve on
 * CPU 1, say so, and be listed there; naming CPU 0 is refused with why.
 * CPU 1 is made fuller than CPU 0, so worst fit alone would pick CPU 0. */
TEST(pace_run_under_taskset_stays_on_the_allowed_cpu) {
        BrokerInstance b;
        pace_grant g;
        const char *pace_run = getenv("PACE_RUN"), *pacectl = getenv("PACECTL"), *taskset = "/usr/bin/taskset";
        cpu_set_t set;
        ASSERT_TRUE(pace_run && pacectl);

        if (access(taskset, X_OK) < 0)
                TEST_SKIP("no %s", taskset);
        if (sched_getaffinity(0, sizeof(set), &set) < 0 || !CPU_ISSET(0, &set) || !CPU_ISSET(1, &set))
                TEST_SKIP("needs CPUs 0 and 1");
        pid_t k0 = spawn_sleeper(), k1 = spawn_sleeper();
        pace *p = broker_start_connected(&b, "{ \"slot_us\": 1000, \"non_rt_share\": 0.25, \"cpus\": [0, 1] }");
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 100000, .pid = k0, .cpu = 0 };
        ASSERT_OK(pace_reserve(p, &params, &g));
        params = (pace_reserve_params) { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 200000, .pid = k1, .cpu = 1 };
        ASSERT_OK(pace_reserve(p, &params, &g));

        /* The command lists the reservations while it holds its own. */
        char script[512];
        snprintf(script, sizeof(script), "%s status && %s --json status", pacectl, pacectl);
        ASSERT_EQ(run_tool(b.socket, (const char *[]) { taskset, "-c", "1", pace_run, "-p", "50ms", "-u", "30%", "--",
                                                       "/bin/sh", "-c", script, NULL }), 0);
        ASSERT_CONTAINS(err, "reserved 30% of CPU 1:");
        /* pacectl status: the text table has its row, the JSON its CPU. */
        char *json = strchr(out, '{');
        ASSERT_TRUE(json);
        cJSON *root = cJSON_Parse(json);
        ASSERT_TRUE(root);
        const cJSON *r, *list = cJSON_GetObjectItemCaseSensitive(root, "reservations");
        unsigned found = 0;
        cJSON_ArrayForEach(r, list) {
                if (cJSON_GetObjectItemCaseSensitive(r, "requested_utilization_ppm")->valuedouble != 300000)
                        continue;
                found++;
                ASSERT_EQ(cJSON_GetObjectItemCaseSensitive(r, "cpu")->valueint, 1);
                const cJSON *cpus = cJSON_GetObjectItemCaseSensitive(r, "cpus");
                ASSERT_EQ(cJSON_GetArraySize(cpus), 1);
                ASSERT_EQ(cJSON_GetArrayItem(cpus, 0)->valueint, 1);
                /* The text table, before the JSON: its row (ID PID UID
                 * CPU ...) names CPU 1 too. */
                int pid = (int) cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(r, "pid"));
                bool row = false;
                for (const char *line = out; line && line < json;) {
                        unsigned long id;
                        unsigned uid;
                        int row_pid, row_cpu;
                        if (sscanf(line, "%lu %d %u %d", &id, &row_pid, &uid, &row_cpu) == 4 && row_pid == pid) {
                                ASSERT_EQ(row_cpu, 1);
                                row = true;
                        }
                        line = strchr(line, '\n');
                        line = line ? line + 1 : NULL;
                }
                ASSERT_TRUE(row);
        }
        ASSERT_EQ(found, 1);
        cJSON_Delete(root);

        /* Naming a CPU outside the affinity: refused, the command not run. */
        ASSERT_EQ(run_tool(b.socket, (const char *[]) { taskset, "-c", "1", pace_run, "-p", "50ms", "-u", "30%",
                                                       "--cpu", "0", "--", "/bin/echo", "ran", NULL }), 1);
        ASSERT_CONTAINS(err, "reservation refused: CPU 0 is outside pid ");
        ASSERT_CONTAINS(err, "'s allowed CPUs (1); name one of them or change its affinity");
        ASSERT_TRUE(!strstr(out, "ran"));

        reap(k0);
        reap(k1);
        broker_stop_connected(&b, p);
}

TEST_MAIN()
