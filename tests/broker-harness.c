/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "broker-harness.h"
#include "pace-limits.h"
#include "table-shm.h"
#include "test.h"

/* Brokers still running when a test exits (a failed assertion calls exit()):
 * stopped, by pid, and their directories removed, so a failure leaves no
 * process and no /tmp/pace-test-* behind. Copies, not pointers: the
 * BrokerInstance lives on a stack frame that may be gone. */
#define HARNESS_MAX_BROKERS 16
static struct {
        pid_t pid;
        char dir[256];
} live[HARNESS_MAX_BROKERS];

void harness_remove_dir(const char *dir) {
        char cmd[400];

        if (strncmp(dir, "/tmp/pace-test-", 15) != 0 || strchr(dir, '\''))
                return;
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        if (system(cmd) != 0)
                fprintf(stderr, "could not remove %s\n", dir);
}

static pid_t registered_by;

static void stop_leftovers(void) {
        /* Not in a forked child that exits: the brokers are the parent's. */
        if (getpid() != registered_by)
                return;
        for (size_t i = 0; i < HARNESS_MAX_BROKERS; i++) {
                /* Only while it is still our unreaped child: a pid a test
                 * already reaped may belong to someone else by now. */
                if (live[i].pid > 0 && waitpid(live[i].pid, NULL, WNOHANG) == 0) {
                        kill(live[i].pid, SIGKILL);
                        waitpid(live[i].pid, NULL, 0);
                }
                if (live[i].dir[0])
                        harness_remove_dir(live[i].dir);
                live[i].pid = 0;
                live[i].dir[0] = '\0';
        }
}

static void track(const BrokerInstance *b) {
        static bool registered;
        size_t free_slot = HARNESS_MAX_BROKERS;

        if (!registered) {
                registered_by = getpid();
                registered = atexit(stop_leftovers) == 0;
        }
        for (size_t i = 0; i < HARNESS_MAX_BROKERS; i++) {
                if (strcmp(live[i].dir, b->dir) == 0) {
                        live[i].pid = b->pid;
                        return;
                }
                if (!live[i].dir[0] && free_slot == HARNESS_MAX_BROKERS)
                        free_slot = i;
        }
        if (free_slot < HARNESS_MAX_BROKERS) {
                live[free_slot].pid = b->pid;
                snprintf(live[free_slot].dir, sizeof(live[free_slot].dir), "%s", b->dir);
        }
}

static void untrack(const BrokerInstance *b) {
        for (size_t i = 0; i < HARNESS_MAX_BROKERS; i++)
                if (strcmp(live[i].dir, b->dir) == 0) {
                        live[i].pid = 0;
                        live[i].dir[0] = '\0';
                }
}

void harness_redirect_output(const char *log) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        int null = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (fd >= 0)
                dup2(fd, STDERR_FILENO);
        /* Test runners wait for stdout to close: a daemon must not hold it. */
        if (null >= 0) {
                dup2(null, STDIN_FILENO);
                dup2(null, STDOUT_FILENO);
        }
}

int broker_launch(BrokerInstance *b) {
        const char *exe = getenv("PACE_BROKER");

        b->pid = fork();
        if (b->pid < 0)
                return -errno;
        if (b->pid == 0) {
                harness_redirect_output(b->log);
                if (geteuid() == 0 && !b->keep_root && (setgroups(0, NULL) < 0 || setgid(b->run_as) < 0 ||
                                       setuid(b->run_as) < 0))
                        _exit(126);
                /* After setuid, which clears it: a test that dies takes its broker along. */
                prctl(PR_SET_PDEATHSIG, SIGTERM);
                if (getppid() == 1)
                        _exit(125);
                if (b->with_config)
                        execl(exe, exe, "--verbose", "--config", b->config, "--runtime-dir", b->dir, (char *) NULL);
                else
                        execl(exe, exe, "--verbose", "--runtime-dir", b->dir, (char *) NULL);
                _exit(127);
        }
        track(b);
        return 0;
}

static int broker_spawn(BrokerInstance *b) {
        int r = broker_launch(b);
        if (r < 0)
                return r;

        /* Ready when the socket exists (the broker renames it into place
         * once it listens); give up after 5 s. */
        for (int i = 0; i < 500; i++) {
                struct stat st;
                int status;
                if (stat(b->socket, &st) == 0)
                        return 0;
                if (waitpid(b->pid, &status, WNOHANG) == b->pid) {
                        b->pid = 0;
                        track(b);
                        return -ECHILD;
                }
                nanosleep(&(struct timespec) { .tv_nsec = 10 * 1000 * 1000 }, NULL);
        }
        return -ETIMEDOUT;
}

static int broker_prepare_full(BrokerInstance *b, const char *config_json, bool keep_root, uid_t run_as) {
        const char *exe = getenv("PACE_BROKER");
        int r;

        memset(b, 0, sizeof(*b));
        b->keep_root = keep_root;
        b->run_as = run_as;
        if (!exe)
                return -ENOENT;
        snprintf(b->dir, sizeof(b->dir), "/tmp/pace-test-XXXXXX");
        if (!mkdtemp(b->dir))
                return -errno;
        track(b);
        chmod(b->dir, 0755);
        snprintf(b->socket, sizeof(b->socket), "%s/broker.sock", b->dir);
        snprintf(b->config, sizeof(b->config), "%s/pace.json", b->dir);
        snprintf(b->log, sizeof(b->log), "%s/broker.log", b->dir);
        if (config_json) {
                /* The suites' clients are mostly the test itself, as root:
                 * root's processes are reservable only where the file says
                 * so. A test about that key writes it itself. */
                char *json = NULL;
                const char *open_brace = strchr(config_json, '{');
                if (!strstr(config_json, "reserve_root_processes") && open_brace) {
                        const char *rest = open_brace + 1 + strspn(open_brace + 1, " \n\t");
                        if (asprintf(&json, "%.*s{ \"reserve_root_processes\": true%s%s",
                                     (int) (open_brace - config_json), config_json, *rest == '}' ? " " : ", ",
                                     rest) < 0)
                                return -ENOMEM;
                }
                r = test_write_text(b->config, json ?: config_json);
                free(json);
                if (r < 0)
                        return r;
        }
        if (geteuid() == 0 && !keep_root && chown(b->dir, run_as, run_as) < 0)
                return -errno;
        b->with_config = config_json != NULL;
        return 0;
}

int broker_prepare(BrokerInstance *b, const char *config_json) {
        return broker_prepare_full(b, config_json, false, HARNESS_BROKER_UID);
}

static int broker_start_full(BrokerInstance *b, const char *config_json, bool keep_root, uid_t run_as) {
        int r = broker_prepare_full(b, config_json, keep_root, run_as);
        if (r < 0)
                return r;
        return broker_spawn(b);
}

int broker_start(BrokerInstance *b, const char *config_json) {
        return broker_start_full(b, config_json, false, HARNESS_BROKER_UID);
}

int broker_start_as(BrokerInstance *b, const char *config_json, uid_t uid) {
        return broker_start_full(b, config_json, false, uid);
}

int broker_start_as_root(BrokerInstance *b, const char *config_json) {
        return broker_start_full(b, config_json, true, 0);
}

int broker_restart(BrokerInstance *b, int sig) {
        int status;

        if (b->pid > 0) {
                kill(b->pid, sig);
                waitpid(b->pid, &status, 0);
                b->pid = 0;
                track(b);
        }
        /* The socket of the dead broker is still there: wait for a new one. */
        unlink(b->socket);
        return broker_spawn(b);
}

int broker_stop(BrokerInstance *b) {
        int status = 0;

        if (b->pid > 0) {
                /* Up to 20 s: under ASan, LeakSanitizer scans the whole
                 * heap at exit, and after the soak that is 120 MB. */
                kill(b->pid, SIGTERM);
                for (int i = 0; i < 2000; i++) {
                        if (waitpid(b->pid, &status, WNOHANG) == b->pid)
                                break;
                        if (i == 1999) {
                                kill(b->pid, SIGKILL);
                                waitpid(b->pid, &status, 0);
                        }
                        nanosleep(&(struct timespec) { .tv_nsec = 10 * 1000 * 1000 }, NULL);
                }
                b->pid = 0;
        }
        if (b->dir[0])
                harness_remove_dir(b->dir);
        untrack(b);
        return status;
}

char *broker_log(const BrokerInstance *b) {
        FILE *f = fopen(b->log, "re");
        char *buf;
        size_t n;

        if (!f)
                return strdup("");
        buf = calloc(1, 1 << 20);
        if (!buf) {
                fclose(f);
                return NULL;
        }
        n = fread(buf, 1, (1 << 20) - 1, f);
        buf[n] = '\0';
        fclose(f);
        return buf;
}

void assert_broker_log_contains(const BrokerInstance *b, const char *needle) {
        /* The broker writes its log as it goes: a line about its start may
         * land a moment after its socket is ready (an ASan build on a busy
         * host once read an empty log). Up to 2 s for it to appear. */
        char *log = NULL;
        for (int i = 0; i < 200; i++) {
                free(log);
                log = broker_log(b);
                if (!log || strstr(log, needle))
                        break;
                usleep(10000);
        }
        ASSERT_CONTAINS(log, needle);
        free(log);
}

int broker_raw_connect(const char *path) {
        struct sockaddr_un addr = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path);
        if (connect(fd, (struct sockaddr *) &addr, sizeof(addr)) < 0) {
                int r = -errno;
                close(fd);
                return r;
        }
        struct timeval tv = { .tv_sec = 5 };
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        return fd;
}

void sleep_ms(unsigned ms) {
        nanosleep(&(struct timespec) { .tv_sec = ms / 1000, .tv_nsec = (long) (ms % 1000) * 1000000L }, NULL);
}

bool skip_unless_root(void) {
        return geteuid() != 0;
}

Pace__Response *raw_exchange(int fd, const void *buf, size_t size) {
        static uint8_t reply[PACE_MAX_MESSAGE_SIZE];
        if (send(fd, buf, size, MSG_NOSIGNAL) != (ssize_t) size)
                return NULL;
        ssize_t n = recv(fd, reply, sizeof(reply), 0);
        if (n <= 0)
                return NULL;
        return pace__response__unpack(NULL, (size_t) n, reply);
}

Pace__Response *raw_request(int fd, Pace__Request *req) {
        uint8_t buf[1024];
        size_t n = pace__request__pack(req, buf);
        return raw_exchange(fd, buf, n);
}

void assert_error_reply(Pace__Response *resp, Pace__ErrorCode code, const char *says) {
        ASSERT_TRUE(resp);
        ASSERT_EQ(resp->version, PACE_PROTOCOL_VERSION);
        ASSERT_EQ(resp->body_case, PACE__RESPONSE__BODY_ERROR);
        ASSERT_EQ(resp->error->code, code);
        ASSERT_CONTAINS(resp->error->message, says);
        pace__response__free_unpacked(resp, NULL);
}

pace *broker_start_connected(BrokerInstance *b, const char *config_json) {
        pace *p = NULL;

        ASSERT_OK(broker_start(b, config_json));
        ASSERT_OK(pace_connect(b->socket, &p));
        return p;
}

void broker_stop_connected(BrokerInstance *b, pace *p) {
        pace_close(p);
        ASSERT_EQ(broker_stop(b), 0);
}

void raw_reserve_init(Pace__Request *req, Pace__ReserveRequest *res, uint64_t period_ns, uint32_t ppm) {
        pace__request__init(req);
        pace__reserve_request__init(res);
        req->version = 1;
        req->body_case = PACE__REQUEST__BODY_RESERVE;
        req->reserve = res;
        res->period_ns = period_ns;
        res->utilization_ppm = ppm;
}

uint64_t status_generation(pace *p, size_t *ret_n) {
        pace_status_report *st = NULL;
        ASSERT_OK(pace_status(p, &st));
        uint64_t gen = st->generation;
        if (ret_n)
                *ret_n = st->n_reservations;
        pace_status_report_free(st);
        return gen;
}

size_t await_reservation_count(pace *p, size_t want) {
        size_t n;

        status_generation(p, &n);
        for (int i = 0; i < 300 && n != want; i++) {
                sleep_ms(10);
                status_generation(p, &n);
        }
        return n;
}

int as_other_user(int (*fn)(const char *socket, pid_t target, uint64_t id), const char *socket, pid_t target,
                  uint64_t id) {
        pid_t pid = fork();
        ASSERT_OK(pid);
        if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (setgroups(0, NULL) < 0 || setgid(HARNESS_OTHER_UID) < 0 || setuid(HARNESS_OTHER_UID) < 0)
                        _exit(99);
                _exit(fn(socket, target, id));
        }
        int status;
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        ASSERT_TRUE(WIFEXITED(status));
        return WEXITSTATUS(status);
}

void *park(void *arg) {
        _Atomic pid_t *tid = arg;
        *tid = gettid();
        pause();
        return NULL;
}

pthread_t park_thread(_Atomic pid_t *ret_tid) {
        pthread_t thread;

        *ret_tid = 0;
        ASSERT_EQ(pthread_create(&thread, NULL, park, (void *) ret_tid), 0);
        while (*ret_tid == 0)
                sleep_ms(1);
        return thread;
}

void unpark_thread(pthread_t thread) {
        pthread_cancel(thread);
        pthread_join(thread, NULL);
}

pid_t fork_paused(void) {
        pid_t pid = fork();
        ASSERT_OK(pid);
        if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                pause();
                _exit(0);
        }
        return pid;
}

pid_t fork_paused_after(int (*prepare)(void)) {
        int ready[2];
        char c;

        ASSERT_OK(pipe2(ready, O_CLOEXEC));
        pid_t pid = fork();
        ASSERT_OK(pid);
        if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                close(ready[0]);
                int r = prepare();
                if (r != 0)
                        _exit(r);
                if (write(ready[1], "x", 1) != 1)
                        _exit(1);
                pause();
                _exit(0);
        }
        close(ready[1]);
        /* A child that failed to prepare closes the pipe unwritten. */
        if (read(ready[0], &c, 1) != 1) {
                int status = 0;
                waitpid(pid, &status, 0);
                TEST_FAIL_("a child failed to prepare: exit status %d", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        }
        close(ready[0]);
        return pid;
}

void reap_children(const pid_t *pids, size_t n) {
        for (size_t i = 0; i < n; i++) {
                kill(pids[i], SIGKILL);
                waitpid(pids[i], NULL, 0);
        }
}

void read_table(const BrokerInstance *b, PaceTableBuffer *out) {
        char path[320];
        TableReader *r = NULL;
        snprintf(path, sizeof(path), "%s/table", b->dir);
        ASSERT_OK(table_reader_open(path, &r));
        int rr;
        for (int i = 0; i < 100 && (rr = table_reader_snapshot(r, out, NULL)) == -EAGAIN; i++)
                ;
        ASSERT_OK(rr);
        table_reader_free(r);
}
