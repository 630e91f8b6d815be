/* SPDX-License-Identifier: MIT */
/* pace-rtkit on a private "system" bus: a real dbus-daemon with the shipped
 * policy file, a real pace-broker and pace-rtkit, and clients that are
 * forked processes with uids of their own calling through the bus with
 * sd-bus, as PipeWire or a browser would. Every answer is checked for
 * rtkit's error name, and every refusal for leaving the broker's
 * reservations as they were. Root only (other uids, a system bus of our
 * own); skips with 77 without dbus-daemon. */
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <grp.h>
#include <pwd.h>
#include <systemd/sd-bus.h>
#include <time.h>
#include <unistd.h>

#include "broker-harness.h"
#include "macro.h"
#include "pace-limits.h"
#include "pace.pb-c.h"
#include "test.h"

/* dbus-daemon refuses connections from uids that have no user entry, so
 * the clients are two accounts every Debian system has. */
#define CALLER_USER "daemon"
#define OTHER_USER "bin"
static uid_t CALLER_UID, OTHER_UID;

#define RTKIT_NAME "org.freedesktop.RealtimeKit1"
#define RTKIT_PATH "/org/freedesktop/RealtimeKit1"
#define RTKIT_IFACE "org.freedesktop.RealtimeKit1"
#define ACCESS_DENIED "org.freedesktop.DBus.Error.AccessDenied"
#define FAILED "org.freedesktop.DBus.Error.Failed"

static const char *config_default =
        "{ \"slot_us\": 1000, \"non_rt_share\": 0.25, \"max_requests_per_second\": 1000 }";

/* ---- the stack: bus, broker, pace-rtkit ---- */

typedef struct Stack {
        char dir[64];
        char bus_config[128];
        char bus_socket[128];
        char rtkit_log[128];
        pid_t bus_pid;
        pid_t rtkit_pid;
        BrokerInstance broker;
} Stack;

/* For the exit handler: whatever a failed assertion left running. */
static Stack *live_stack;
static pid_t test_main_pid;

static void kill_and_reap(pid_t *pid, int sig, unsigned timeout_ms, int *ret_status) {
        int status = 0;

        if (*pid <= 0)
                return;
        kill(*pid, sig);
        for (unsigned waited = 0;; waited += 10) {
                if (waitpid(*pid, &status, WNOHANG) == *pid)
                        break;
                if (waited >= timeout_ms) {
                        kill(*pid, SIGKILL);
                        waitpid(*pid, &status, 0);
                        break;
                }
                sleep_ms(10);
        }
        if (ret_status)
                *ret_status = status;
        *pid = 0;
}

static int stack_stop(Stack *s) {
        int status = 0;

        kill_and_reap(&s->rtkit_pid, SIGTERM, 5000, &status);
        kill_and_reap(&s->bus_pid, SIGTERM, 5000, NULL);
        if (s->broker.pid > 0 || s->broker.dir[0])
                broker_stop(&s->broker);
        if (s->dir[0])
                harness_remove_dir(s->dir);
        s->dir[0] = '\0';
        live_stack = NULL;
        return status;
}

static void cleanup_at_exit(void) {
        if (getpid() == test_main_pid && live_stack)
                stack_stop(live_stack);
}

static void on_alarm(int sig) {
        static const char msg[] = "test timed out\n";
        (void) !write(STDERR_FILENO, msg, sizeof(msg) - 1);
        exit(EXIT_FAILURE); /* runs cleanup_at_exit: nothing stays behind */
}

static char *read_text(const char *path) {
        FILE *f = fopen(path, "re");
        char *buf = calloc(1, 1 << 16);
        ASSERT_TRUE(buf);
        if (f) {
                size_t n = fread(buf, 1, (1 << 16) - 1, f);
                buf[n] = '\0';
                fclose(f);
        }
        return buf;
}

static bool find_dbus_daemon(char *ret, size_t size) {
        const char *path = getenv("PATH") ?: "/usr/bin:/bin";
        char *copy = strdup(path), *save = NULL;
        bool found = false;

        for (char *d = strtok_r(copy, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
                snprintf(ret, size, "%s/dbus-daemon", d);
                found = access(ret, X_OK) == 0;
        }
        free(copy);
        return found;
}

/* The shipped policy (pace-rtkit.conf) under Debian's system.conf defaults:
 * method calls are denied unless a policy allows them. permissive: a
 * policy that lets anyone call anything, to see pace-rtkit's own checks. */
static void write_bus_config(Stack *s, bool permissive) {
        const char *policy = getenv("PACE_RTKIT_POLICY");
        char *text = NULL;
        char include[512];

        ASSERT_TRUE(policy);
        if (permissive)
                snprintf(include, sizeof(include),
                         "<policy context=\"default\">\n"
                         "  <allow own=\"" RTKIT_NAME "\"/>\n"
                         "  <allow send_destination=\"" RTKIT_NAME "\"/>\n"
                         "</policy>\n");
        else
                snprintf(include, sizeof(include), "<include>%s</include>\n", policy);
        ASSERT_TRUE(asprintf(&text,
                "<!DOCTYPE busconfig PUBLIC \"-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN\"\n"
                " \"http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd\">\n"
                "<busconfig>\n"
                "  <type>system</type>\n"
                "  <listen>unix:path=%s</listen>\n"
                "  <auth>EXTERNAL</auth>\n"
                "  <policy context=\"default\">\n"
                "    <allow user=\"*\"/>\n"
                "    <deny own=\"*\"/>\n"
                "    <deny send_type=\"method_call\"/>\n"
                "    <allow send_type=\"signal\"/>\n"
                "    <allow send_requested_reply=\"true\" send_type=\"method_return\"/>\n"
                "    <allow send_requested_reply=\"true\" send_type=\"error\"/>\n"
                "    <allow receive_type=\"method_call\"/>\n"
                "    <allow receive_type=\"method_return\"/>\n"
                "    <allow receive_type=\"error\"/>\n"
                "    <allow receive_type=\"signal\"/>\n"
                "    <allow send_destination=\"org.freedesktop.DBus\" send_interface=\"org.freedesktop.DBus\"/>\n"
                "    <allow send_destination=\"org.freedesktop.DBus\" send_interface=\"org.freedesktop.DBus.Introspectable\"/>\n"
                "  </policy>\n"
                "%s"
                "</busconfig>\n", s->bus_socket, include) >= 0);
        ASSERT_OK(test_write_text(s->bus_config, text));
        free(text);
}

static void start_bus(Stack *s, const char *exe) {
        int out[2];
        char line[512] = "";
        size_t got = 0;

        ASSERT_OK(pipe2(out, O_CLOEXEC));
        s->bus_pid = fork();
        ASSERT_OK(s->bus_pid);
        if (s->bus_pid == 0) {
                char log[160];
                snprintf(log, sizeof(log), "%s/bus.log", s->dir);
                int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
                int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
                dup2(out[1], STDOUT_FILENO);
                if (fd >= 0)
                        dup2(fd, STDERR_FILENO);
                if (null >= 0)
                        dup2(null, STDIN_FILENO);
                prctl(PR_SET_PDEATHSIG, SIGTERM);
                char arg[200];
                snprintf(arg, sizeof(arg), "--config-file=%s", s->bus_config);
                execl(exe, exe, arg, "--nofork", "--nopidfile", "--print-address", (char *) NULL);
                _exit(127);
        }
        close(out[1]);
        /* Ready once it prints its address, which it does after listening. */
        while (got < sizeof(line) - 1 && !strchr(line, '\n')) {
                struct pollfd p = { .fd = out[0], .events = POLLIN };
                ASSERT_EQ(poll(&p, 1, 10000), 1);
                ssize_t n = read(out[0], line + got, sizeof(line) - 1 - got);
                if (n <= 0) {
                        char *log = NULL;
                        ASSERT_TRUE(asprintf(&log, "%s/bus.log", s->dir) >= 0);
                        TEST_FAIL_("dbus-daemon did not start: %s", read_text(log));
                }
                got += (size_t) n;
                line[got] = '\0';
        }
        close(out[0]);
}

static pid_t launch_rtkit(Stack *s, const char *config) {
        const char *exe = getenv("PACE_RTKIT");
        pid_t pid;

        ASSERT_TRUE(exe);
        pid = fork();
        ASSERT_OK(pid);
        if (pid == 0) {
                harness_redirect_output(s->rtkit_log);
                prctl(PR_SET_PDEATHSIG, SIGTERM);
                execl(exe, exe, "-v", "--config", config, "--runtime-dir", s->broker.dir, (char *) NULL);
                _exit(127);
        }
        return pid;
}

/* Whether name has an owner on the stack's bus (asked as root). */
static bool name_owned(void) {
        sd_bus *bus = NULL;
        int r = sd_bus_open_system(&bus);
        ASSERT_OK(r);
        r = sd_bus_get_name_creds(bus, RTKIT_NAME, 0, NULL);
        sd_bus_flush_close_unref(bus);
        return r >= 0;
}

/* Returns false (and skips) where this test cannot run. */
static bool stack_start_full(Stack *s, const char *config_json, bool permissive) {
        char dbus_daemon[256];

        memset(s, 0, sizeof(*s));
        if (geteuid() != 0) {
                printf("  skip: needs root (clients of other uids, a system bus of its own)\n");
                test_skipped_ = true;
                return false;
        }
        struct passwd *caller = getpwnam(CALLER_USER);
        if (caller)
                CALLER_UID = caller->pw_uid;
        struct passwd *other = getpwnam(OTHER_USER);
        if (other)
                OTHER_UID = other->pw_uid;
        if (!caller || !other || CALLER_UID == 0 || OTHER_UID == 0 || CALLER_UID == OTHER_UID ||
            CALLER_UID == HARNESS_BROKER_UID || OTHER_UID == HARNESS_BROKER_UID) {
                printf("  skip: needs users " CALLER_USER " and " OTHER_USER " (ordinary, distinct uids)\n");
                test_skipped_ = true;
                return false;
        }
        if (!find_dbus_daemon(dbus_daemon, sizeof(dbus_daemon))) {
                printf("  skip: no dbus-daemon on PATH (tools/install-deps installs it)\n");
                test_skipped_ = true;
                return false;
        }
        if (!test_main_pid) {
                test_main_pid = getpid();
                atexit(cleanup_at_exit);
                signal(SIGALRM, on_alarm);
        }
        alarm(120);
        live_stack = s;

        snprintf(s->dir, sizeof(s->dir), "/tmp/pace-test-rtkit-XXXXXX");
        ASSERT_TRUE(mkdtemp(s->dir));
        /* Clients of other uids must reach the bus socket. */
        ASSERT_OK(chmod(s->dir, 0755));
        snprintf(s->bus_config, sizeof(s->bus_config), "%s/bus.conf", s->dir);
        snprintf(s->bus_socket, sizeof(s->bus_socket), "%s/bus.sock", s->dir);
        snprintf(s->rtkit_log, sizeof(s->rtkit_log), "%s/rtkit.log", s->dir);
        write_bus_config(s, permissive);
        start_bus(s, dbus_daemon);
        char address[200];
        snprintf(address, sizeof(address), "unix:path=%s", s->bus_socket);
        ASSERT_OK(setenv("DBUS_SYSTEM_BUS_ADDRESS", address, 1));

        ASSERT_OK(broker_start(&s->broker, config_json));
        /* pace-rtkit runs as root here, which the broker (running as
         * nobody) accepts as a delegate, as it does user pace in
         * production. */
        s->rtkit_pid = launch_rtkit(s, s->broker.config);
        for (int i = 0;; i++) {
                if (name_owned())
                        break;
                int status;
                if (waitpid(s->rtkit_pid, &status, WNOHANG) == s->rtkit_pid) {
                        s->rtkit_pid = 0;
                        TEST_FAIL_("pace-rtkit exited: %s", read_text(s->rtkit_log));
                }
                if (i >= 500)
                        TEST_FAIL_("pace-rtkit did not take " RTKIT_NAME " in 5 s: %s", read_text(s->rtkit_log));
                sleep_ms(10);
        }
        return true;
}

static bool stack_start(Stack *s, const char *config_json) {
        return stack_start_full(s, config_json, false);
}

/* ---- the broker's view, asked directly (as root) ---- */

static Pace__Response *broker_status(const Stack *s) {
        static uint8_t reply[PACE_MAX_MESSAGE_SIZE];
        struct sockaddr_un addr = { .sun_family = AF_UNIX };
        Pace__Request req = PACE__REQUEST__INIT;
        Pace__StatusRequest body = PACE__STATUS_REQUEST__INIT;
        uint8_t buf[256];
        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

        ASSERT_OK(fd);
        ASSERT_CMP(strlen(s->broker.socket), <, sizeof(addr.sun_path));
        memcpy(addr.sun_path, s->broker.socket, strlen(s->broker.socket) + 1);
        ASSERT_OK(connect(fd, (struct sockaddr *) &addr, sizeof(addr)));
        struct timeval tv = { .tv_sec = 5 };
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        req.version = PACE_PROTOCOL_VERSION;
        req.body_case = PACE__REQUEST__BODY_STATUS;
        req.status = &body;
        size_t n = pace__request__pack(&req, buf);
        ASSERT_EQ(send(fd, buf, n, MSG_NOSIGNAL), (ssize_t) n);
        ssize_t got = recv(fd, reply, sizeof(reply), 0);
        ASSERT_CMP(got, >, 0);
        Pace__Response *resp = pace__response__unpack(NULL, (size_t) got, reply);
        ASSERT_TRUE(resp);
        ASSERT_EQ(resp->body_case, PACE__RESPONSE__BODY_STATUS);
        return resp;
}

/* Reservations (pieces counted once, by id) and nice levels the broker holds. */
typedef struct Census {
        size_t reservations;
        size_t on_behalf;
        size_t nice_levels;
} Census;

static Census census(const Stack *s) {
        Pace__Response *resp = broker_status(s);
        Census c = {};
        for (size_t i = 0; i < resp->status->n_reservations; i++) {
                const Pace__Grant *g = resp->status->reservations[i];
                bool seen = false;
                for (size_t j = 0; j < i; j++)
                        seen |= resp->status->reservations[j]->id == g->id;
                if (seen)
                        continue;
                c.reservations++;
                c.on_behalf += g->has_on_behalf && g->on_behalf;
        }
        c.nice_levels = resp->status->n_nice_levels;
        pace__response__free_unpacked(resp, NULL);
        return c;
}

static void assert_unchanged(const Stack *s, const Census *a) {
        Census now = census(s);
        const Census *b = &now;
        if (a->reservations != b->reservations || a->on_behalf != b->on_behalf || a->nice_levels != b->nice_levels)
                TEST_FAIL_("the broker's state changed: %zu/%zu/%zu reservations/on behalf/nice levels, now %zu/%zu/%zu",
                           a->reservations, a->on_behalf, a->nice_levels, b->reservations, b->on_behalf,
                           b->nice_levels);
}

/* The on-behalf thread reservation for tid, if any (its uid in *ret_uid). */
static bool has_thread_reservation(const Stack *s, pid_t tid, uint32_t *ret_uid) {
        Pace__Response *resp = broker_status(s);
        bool found = false;
        for (size_t i = 0; i < resp->status->n_reservations; i++) {
                const Pace__Grant *g = resp->status->reservations[i];
                if (g->has_tid && g->tid == tid && g->has_on_behalf && g->on_behalf) {
                        found = true;
                        if (ret_uid)
                                *ret_uid = g->uid;
                }
        }
        pace__response__free_unpacked(resp, NULL);
        return found;
}

static bool has_nice_level(const Stack *s, pid_t tid, int32_t nice) {
        Pace__Response *resp = broker_status(s);
        bool found = false;
        for (size_t i = 0; i < resp->status->n_nice_levels; i++)
                found |= resp->status->nice_levels[i]->tid == tid && resp->status->nice_levels[i]->nice == nice;
        pace__response__free_unpacked(resp, NULL);
        return found;
}

/* ---- clients: forked processes of a given uid that call over the bus ---- */

typedef enum CommandType {
        CMD_CALL,       /* method with process, thread, value */
        CMD_GET,        /* Properties.Get of name */
        CMD_GET_ALL,    /* Properties.GetAll: "name=value ..." in text */
        CMD_INTROSPECT, /* the XML in text */
        CMD_THREAD,     /* start a thread that sleeps; its tid in value */
} CommandType;

typedef struct Command {
        CommandType type;
        char name[64];
        uint64_t process, thread;
        int64_t value;
} Command;

typedef struct Result {
        int r;
        char error[128];
        char message[512];
        int64_t value;
        char text[8192];
} Result;

typedef struct Client {
        pid_t pid;
        uid_t uid;
        int to_child, from_child;
} Client;

static bool read_full(int fd, void *buf, size_t size, int timeout_ms) {
        size_t got = 0;
        while (got < size) {
                struct pollfd p = { .fd = fd, .events = POLLIN };
                if (timeout_ms >= 0 && poll(&p, 1, timeout_ms) != 1)
                        return false;
                ssize_t n = read(fd, (char *) buf + got, size - got);
                if (n <= 0)
                        return false;
                got += (size_t) n;
        }
        return true;
}

static bool write_full(int fd, const void *buf, size_t size) {
        size_t done = 0;
        while (done < size) {
                ssize_t n = write(fd, (const char *) buf + done, size - done);
                if (n <= 0)
                        return false;
                done += (size_t) n;
        }
        return true;
}

static void *sleeping_thread(void *arg) {
        int *fd = arg;
        pid_t tid = (pid_t) syscall(SYS_gettid);
        (void) !write(*fd, &tid, sizeof(tid));
        for (;;)
                pause();
        return NULL;
}

static void set_error(Result *res, int r, const sd_bus_error *e) {
        res->r = r;
        if (e && e->name)
                snprintf(res->error, sizeof(res->error), "%s", e->name);
        if (e && e->message)
                snprintf(res->message, sizeof(res->message), "%s", e->message);
}

static void do_call(sd_bus *bus, const Command *c, Result *res) {
        sd_bus_error e = SD_BUS_ERROR_NULL;
        sd_bus_message *reply = NULL;
        int r;

        if (strcmp(c->name, "MakeThreadRealtime") == 0)
                r = sd_bus_call_method(bus, RTKIT_NAME, RTKIT_PATH, RTKIT_IFACE, c->name, &e, &reply, "tu",
                                       c->thread, (uint32_t) c->value);
        else if (strcmp(c->name, "MakeThreadRealtimeWithPID") == 0)
                r = sd_bus_call_method(bus, RTKIT_NAME, RTKIT_PATH, RTKIT_IFACE, c->name, &e, &reply, "ttu",
                                       c->process, c->thread, (uint32_t) c->value);
        else if (strcmp(c->name, "MakeThreadHighPriority") == 0)
                r = sd_bus_call_method(bus, RTKIT_NAME, RTKIT_PATH, RTKIT_IFACE, c->name, &e, &reply, "ti",
                                       c->thread, (int32_t) c->value);
        else if (strcmp(c->name, "MakeThreadHighPriorityWithPID") == 0)
                r = sd_bus_call_method(bus, RTKIT_NAME, RTKIT_PATH, RTKIT_IFACE, c->name, &e, &reply, "tti",
                                       c->process, c->thread, (int32_t) c->value);
        else
                r = sd_bus_call_method(bus, RTKIT_NAME, RTKIT_PATH, RTKIT_IFACE, c->name, &e, &reply, "");
        set_error(res, r, &e);
        sd_bus_error_free(&e);
        sd_bus_message_unref(reply);
}

static void do_get(sd_bus *bus, const Command *c, Result *res) {
        sd_bus_error e = SD_BUS_ERROR_NULL;
        int r;

        if (strcmp(c->name, "RTTimeUSecMax") == 0) {
                int64_t v = 0;
                r = sd_bus_get_property_trivial(bus, RTKIT_NAME, RTKIT_PATH, RTKIT_IFACE, c->name, &e, 'x', &v);
                res->value = v;
        } else {
                int32_t v = 0;
                r = sd_bus_get_property_trivial(bus, RTKIT_NAME, RTKIT_PATH, RTKIT_IFACE, c->name, &e, 'i', &v);
                res->value = v;
        }
        set_error(res, r, &e);
        sd_bus_error_free(&e);
}

static void do_get_all(sd_bus *bus, Result *res) {
        sd_bus_error e = SD_BUS_ERROR_NULL;
        sd_bus_message *reply = NULL;
        size_t used = 0;
        int r;

        r = sd_bus_call_method(bus, RTKIT_NAME, RTKIT_PATH, "org.freedesktop.DBus.Properties", "GetAll", &e, &reply,
                               "s", RTKIT_IFACE);
        set_error(res, r, &e);
        sd_bus_error_free(&e);
        if (r < 0)
                return;
        if (sd_bus_message_enter_container(reply, 'a', "{sv}") < 0)
                goto bad;
        while ((r = sd_bus_message_enter_container(reply, 'e', "sv")) > 0) {
                const char *name = NULL, *contents = NULL;
                char type;
                long long v = 0;
                if (sd_bus_message_read(reply, "s", &name) < 0 ||
                    sd_bus_message_peek_type(reply, &type, &contents) < 0 ||
                    sd_bus_message_enter_container(reply, 'v', contents) < 0)
                        goto bad;
                if (strcmp(contents, "x") == 0) {
                        int64_t x;
                        if (sd_bus_message_read(reply, "x", &x) < 0)
                                goto bad;
                        v = x;
                } else if (strcmp(contents, "i") == 0) {
                        int32_t i;
                        if (sd_bus_message_read(reply, "i", &i) < 0)
                                goto bad;
                        v = i;
                } else
                        goto bad;
                used += (size_t) snprintf(res->text + used, sizeof(res->text) - used, "%s=%s:%lld ", name,
                                          contents, v);
                if (sd_bus_message_exit_container(reply) < 0 || sd_bus_message_exit_container(reply) < 0)
                        goto bad;
        }
        sd_bus_message_unref(reply);
        return;
bad:
        res->r = -EBADMSG;
        sd_bus_message_unref(reply);
}

static void do_introspect(sd_bus *bus, Result *res) {
        sd_bus_error e = SD_BUS_ERROR_NULL;
        sd_bus_message *reply = NULL;
        const char *xml = NULL;
        int r;

        r = sd_bus_call_method(bus, RTKIT_NAME, RTKIT_PATH, "org.freedesktop.DBus.Introspectable", "Introspect", &e,
                               &reply, "");
        set_error(res, r, &e);
        sd_bus_error_free(&e);
        if (r >= 0 && sd_bus_message_read(reply, "s", &xml) >= 0)
                snprintf(res->text, sizeof(res->text), "%s", xml);
        sd_bus_message_unref(reply);
}

static _Noreturn void client_main(uid_t uid, int in, int out) {
        sd_bus *bus = NULL;
        int thread_pipe[2];

        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (uid != 0 && (setgroups(0, NULL) < 0 || setresgid(uid, uid, uid) < 0 || setresuid(uid, uid, uid) < 0))
                _exit(126);
        if (pipe2(thread_pipe, O_CLOEXEC) < 0 || sd_bus_open_system(&bus) < 0)
                _exit(125);
        (void) sd_bus_set_method_call_timeout(bus, 10 * 1000000ULL);
        for (;;) {
                Command c;
                Result res;
                if (!read_full(in, &c, sizeof(c), -1))
                        _exit(0);
                memset(&res, 0, sizeof(res));
                switch (c.type) {
                case CMD_CALL:
                        do_call(bus, &c, &res);
                        break;
                case CMD_GET:
                        do_get(bus, &c, &res);
                        break;
                case CMD_GET_ALL:
                        do_get_all(bus, &res);
                        break;
                case CMD_INTROSPECT:
                        do_introspect(bus, &res);
                        break;
                case CMD_THREAD: {
                        pthread_t t;
                        pid_t tid = 0;
                        res.r = -pthread_create(&t, NULL, sleeping_thread, &thread_pipe[1]);
                        if (res.r == 0 && read(thread_pipe[0], &tid, sizeof(tid)) != sizeof(tid))
                                res.r = -EIO;
                        res.value = tid;
                        break;
                }
                }
                if (!write_full(out, &res, sizeof(res)))
                        _exit(0);
        }
}

static Client client_start(uid_t uid) {
        int down[2], up[2];
        Client c = { .uid = uid };

        ASSERT_OK(pipe2(down, O_CLOEXEC));
        ASSERT_OK(pipe2(up, O_CLOEXEC));
        fflush(NULL);
        c.pid = fork();
        ASSERT_OK(c.pid);
        if (c.pid == 0) {
                close(down[1]);
                close(up[0]);
                client_main(uid, down[0], up[1]);
        }
        close(down[0]);
        close(up[1]);
        c.to_child = down[1];
        c.from_child = up[0];
        return c;
}

static Result *client_do(Client *c, const Command *cmd) {
        static Result res;
        if (!write_full(c->to_child, cmd, sizeof(*cmd)) || !read_full(c->from_child, &res, sizeof(res), 15000))
                TEST_FAIL_("client (uid %u) did not answer", (unsigned) c->uid);
        return &res;
}

static Result *call(Client *c, const char *method, uint64_t process, uint64_t thread, int64_t value) {
        Command cmd = { .type = CMD_CALL, .process = process, .thread = thread, .value = value };
        snprintf(cmd.name, sizeof(cmd.name), "%s", method);
        return client_do(c, &cmd);
}

static pid_t client_thread(Client *c) {
        Command cmd = { .type = CMD_THREAD };
        Result *r = client_do(c, &cmd);
        ASSERT_OK(r->r);
        return (pid_t) r->value;
}

static void client_stop(Client *c) {
        if (c->pid <= 0)
                return;
        close(c->to_child);
        close(c->from_child);
        kill_and_reap(&c->pid, SIGKILL, 5000, NULL);
}

#define ASSERT_SUCCESS(res)                                                                           \
        do {                                                                                          \
                const Result *res_ = (res);                                                           \
                if (res_->r < 0)                                                                      \
                        TEST_FAIL_("%s failed: %s: %s", #res, res_->error, res_->message);            \
        } while (0)

#define ASSERT_DBUS_ERROR(res, name)                                                                  \
        do {                                                                                          \
                const Result *res_ = (res);                                                           \
                if (res_->r >= 0)                                                                     \
                        TEST_FAIL_("%s succeeded; expected %s", #res, name);                          \
                if (strcmp(res_->error, name) != 0)                                                   \
                        TEST_FAIL_("%s: expected %s, got %s: %s", #res, name, res_->error, res_->message); \
        } while (0)

/* ---- the cases ---- */

TEST(properties_and_introspection) {
        Stack s;
        if (!stack_start(&s, "{ \"rtkit_max_realtime_priority\": 30, \"rtkit_min_nice_level\": -11,"
                             "  \"rtkit_rttime_usec_max\": 150000 }"))
                return;
        Client c = client_start(CALLER_UID);
        static const struct {
                const char *name;
                int64_t value;
        } props[] = {
                { "RTTimeUSecMax", 150000 },
                { "MaxRealtimePriority", 30 },
                { "MinNiceLevel", -11 },
        };
        for (size_t i = 0; i < ELEMENTSOF(props); i++) {
                Command cmd = { .type = CMD_GET };
                snprintf(cmd.name, sizeof(cmd.name), "%s", props[i].name);
                Result *r = client_do(&c, &cmd);
                ASSERT_SUCCESS(r);
                ASSERT_EQ(r->value, props[i].value);
        }
        Result *r = client_do(&c, &(Command) { .type = CMD_GET_ALL });
        ASSERT_SUCCESS(r);
        ASSERT_CONTAINS(r->text, "RTTimeUSecMax=x:150000 ");
        ASSERT_CONTAINS(r->text, "MaxRealtimePriority=i:30 ");
        ASSERT_CONTAINS(r->text, "MinNiceLevel=i:-11 ");

        r = client_do(&c, &(Command) { .type = CMD_INTROSPECT });
        ASSERT_SUCCESS(r);
        static const char *const methods[] = {
                "MakeThreadRealtime\"", "MakeThreadRealtimeWithPID\"", "MakeThreadHighPriority\"",
                "MakeThreadHighPriorityWithPID\"", "ResetKnown\"", "ResetAll\"", "Exit\"",
        };
        ASSERT_CONTAINS(r->text, "<interface name=\"" RTKIT_IFACE "\">");
        for (size_t i = 0; i < ELEMENTSOF(methods); i++) {
                char needle[96];
                snprintf(needle, sizeof(needle), "<method name=\"%s", methods[i]);
                ASSERT_CONTAINS(r->text, needle);
        }
        ASSERT_CONTAINS(r->text, "<property name=\"RTTimeUSecMax\" type=\"x\" access=\"read\">");
        ASSERT_CONTAINS(r->text, "<property name=\"MaxRealtimePriority\" type=\"i\" access=\"read\">");
        ASSERT_CONTAINS(r->text, "<property name=\"MinNiceLevel\" type=\"i\" access=\"read\">");
        client_stop(&c);
        ASSERT_EQ(stack_stop(&s), 0);
}

TEST(own_thread_becomes_a_reservation_once) {
        Stack s;
        if (!stack_start(&s, config_default))
                return;
        Client c = client_start(CALLER_UID);
        Census before = census(&s);

        /* Thread 0: the caller's main thread, as in rtkit. */
        ASSERT_SUCCESS(call(&c, "MakeThreadRealtime", 0, 0, 10));
        uint32_t uid = 0;
        ASSERT_TRUE(has_thread_reservation(&s, c.pid, &uid));
        ASSERT_EQ(uid, CALLER_UID); /* the caller's reservation, not pace-rtkit's */
        Census once = census(&s);
        ASSERT_EQ(once.reservations, before.reservations + 1);
        ASSERT_EQ(once.on_behalf, before.on_behalf + 1);

        /* Again: success, still one reservation (rtkit answers a repeat too). */
        ASSERT_SUCCESS(call(&c, "MakeThreadRealtime", 0, (uint64_t) c.pid, 10));
        assert_unchanged(&s, &once);

        /* A second thread of its own, named by tid. */
        pid_t tid = client_thread(&c);
        ASSERT_SUCCESS(call(&c, "MakeThreadRealtime", 0, (uint64_t) tid, 20));
        ASSERT_TRUE(has_thread_reservation(&s, tid, NULL));
        ASSERT_EQ(census(&s).reservations, once.reservations + 1);

        /* It ends with the process. */
        client_stop(&c);
        for (int i = 0; i < 300 && census(&s).reservations != before.reservations; i++)
                sleep_ms(10);
        ASSERT_EQ(census(&s).reservations, before.reservations);
        ASSERT_EQ(stack_stop(&s), 0);
}

TEST(with_pid_for_own_other_process) {
        Stack s;
        if (!stack_start(&s, config_default))
                return;
        Client a = client_start(CALLER_UID), b = client_start(CALLER_UID);
        pid_t tid = client_thread(&b);

        ASSERT_SUCCESS(call(&a, "MakeThreadRealtimeWithPID", (uint64_t) b.pid, (uint64_t) tid, 5));
        ASSERT_TRUE(has_thread_reservation(&s, tid, NULL));
        ASSERT_SUCCESS(call(&a, "MakeThreadRealtimeWithPID", (uint64_t) b.pid, 0, 5));
        ASSERT_TRUE(has_thread_reservation(&s, b.pid, NULL));
        ASSERT_SUCCESS(call(&a, "MakeThreadHighPriorityWithPID", (uint64_t) b.pid, 0, -10));
        ASSERT_TRUE(has_nice_level(&s, b.pid, -10));
        ASSERT_SUCCESS(call(&a, "MakeThreadHighPriority", 0, 0, -15)); /* exactly MinNiceLevel */
        ASSERT_TRUE(has_nice_level(&s, a.pid, -15));
        client_stop(&a);
        client_stop(&b);
        ASSERT_EQ(stack_stop(&s), 0);
}

TEST(refusals_as_rtkit_change_nothing) {
        Stack s;
        if (!stack_start(&s, config_default))
                return;
        Client a = client_start(CALLER_UID), a2 = client_start(CALLER_UID), other = client_start(OTHER_UID);
        pid_t other_tid = client_thread(&other);
        /* Something to keep: a reservation and a nice level of a's own. */
        ASSERT_SUCCESS(call(&a, "MakeThreadRealtime", 0, 0, 10));
        ASSERT_SUCCESS(call(&a, "MakeThreadHighPriority", 0, (uint64_t) client_thread(&a), -5));
        Census before = census(&s);
        Result *r;

        /* Another user's process. */
        r = call(&a, "MakeThreadRealtimeWithPID", (uint64_t) other.pid, (uint64_t) other_tid, 5);
        ASSERT_DBUS_ERROR(r, ACCESS_DENIED);
        r = call(&a, "MakeThreadRealtimeWithPID", (uint64_t) other.pid, 0, 5);
        ASSERT_DBUS_ERROR(r, ACCESS_DENIED);
        r = call(&a, "MakeThreadHighPriorityWithPID", (uint64_t) other.pid, 0, 0);
        ASSERT_DBUS_ERROR(r, ACCESS_DENIED);
        assert_unchanged(&s, &before);

        /* A thread of another process without WithPID: not the caller's. */
        r = call(&a, "MakeThreadRealtime", 0, (uint64_t) a2.pid, 5);
        ASSERT_DBUS_ERROR(r, FAILED);
        r = call(&a, "MakeThreadRealtime", 0, (uint64_t) other_tid, 5);
        ASSERT_DBUS_ERROR(r, FAILED);
        r = call(&a, "MakeThreadHighPriority", 0, (uint64_t) a2.pid, 0);
        ASSERT_DBUS_ERROR(r, FAILED);
        assert_unchanged(&s, &before);

        /* A dead pid. */
        pid_t dead = fork();
        ASSERT_OK(dead);
        if (dead == 0)
                _exit(0);
        ASSERT_EQ(waitpid(dead, NULL, 0), dead);
        r = call(&a, "MakeThreadRealtimeWithPID", (uint64_t) dead, 0, 5);
        ASSERT_DBUS_ERROR(r, FAILED);
        r = call(&a, "MakeThreadHighPriorityWithPID", (uint64_t) dead, 0, 0);
        ASSERT_DBUS_ERROR(r, FAILED);
        /* Ids that are no pids at all. */
        r = call(&a, "MakeThreadRealtimeWithPID", 0, 0, 5);
        ASSERT_DBUS_ERROR(r, FAILED);
        ASSERT_CONTAINS(r->message, "process 0");
        r = call(&a, "MakeThreadRealtime", 0, UINT64_MAX, 5);
        ASSERT_DBUS_ERROR(r, FAILED);
        ASSERT_CONTAINS(r->message, "thread");
        assert_unchanged(&s, &before);

        /* Priorities and nice levels out of range or above the caps. */
        ASSERT_DBUS_ERROR(call(&a, "MakeThreadRealtime", 0, 0, 0), FAILED);
        ASSERT_DBUS_ERROR(call(&a, "MakeThreadRealtime", 0, 0, 100), FAILED);
        ASSERT_DBUS_ERROR(call(&a, "MakeThreadRealtime", 0, 0, 21), ACCESS_DENIED);
        ASSERT_DBUS_ERROR(call(&a, "MakeThreadRealtimeWithPID", (uint64_t) a2.pid, 0, 99), ACCESS_DENIED);
        ASSERT_DBUS_ERROR(call(&a, "MakeThreadHighPriority", 0, 0, -16), ACCESS_DENIED);
        ASSERT_DBUS_ERROR(call(&a, "MakeThreadHighPriority", 0, 0, -21), FAILED);
        ASSERT_DBUS_ERROR(call(&a, "MakeThreadHighPriority", 0, 0, 20), FAILED);
        assert_unchanged(&s, &before);

        /* Root-only methods, refused by the shipped bus policy. */
        ASSERT_DBUS_ERROR(call(&a, "ResetKnown", 0, 0, 0), ACCESS_DENIED);
        ASSERT_DBUS_ERROR(call(&a, "ResetAll", 0, 0, 0), ACCESS_DENIED);
        ASSERT_DBUS_ERROR(call(&a, "Exit", 0, 0, 0), ACCESS_DENIED);
        assert_unchanged(&s, &before);
        ASSERT_TRUE(s.rtkit_pid > 0 && waitpid(s.rtkit_pid, NULL, WNOHANG) == 0);

        client_stop(&a);
        client_stop(&a2);
        client_stop(&other);
        ASSERT_EQ(stack_stop(&s), 0);
}

TEST(root_only_methods_refused_by_the_code_too) {
        Stack s;
        /* A bus that lets anyone call anything: pace-rtkit must still say no. */
        if (!stack_start_full(&s, config_default, true))
                return;
        Client a = client_start(CALLER_UID);
        ASSERT_SUCCESS(call(&a, "MakeThreadRealtime", 0, 0, 10));
        Census before = census(&s);
        static const char *const methods[] = { "ResetKnown", "ResetAll", "Exit" };
        for (size_t i = 0; i < ELEMENTSOF(methods); i++) {
                Result *r = call(&a, methods[i], 0, 0, 0);
                ASSERT_DBUS_ERROR(r, ACCESS_DENIED);
                ASSERT_CONTAINS(r->message, "root only");
        }
        assert_unchanged(&s, &before);
        ASSERT_TRUE(waitpid(s.rtkit_pid, NULL, WNOHANG) == 0);
        client_stop(&a);
        ASSERT_EQ(stack_stop(&s), 0);
}

TEST(flood_hits_the_rate_limit) {
        Stack s;
        if (!stack_start(&s, "{ \"max_requests_per_second\": 5 }"))
                return;
        Client a = client_start(CALLER_UID);
        ASSERT_SUCCESS(call(&a, "MakeThreadRealtime", 0, 0, 10));
        Census before = census(&s);
        unsigned ok = 0, denied = 0;
        pid_t tid = client_thread(&a);

        /* New threads' worth of requests, far faster than 5 a second. */
        for (int i = 0; i < 40; i++) {
                Result *r = call(&a, i % 2 ? "MakeThreadRealtime" : "MakeThreadHighPriority", 0, (uint64_t) tid,
                                 i % 2 ? 5 : -1);
                if (r->r >= 0)
                        ok++;
                else if (strcmp(r->error, ACCESS_DENIED) == 0)
                        denied++;
                else
                        TEST_FAIL_("flood call %d: %s: %s", i, r->error, r->message);
        }
        printf("  flood: %u granted, %u refused\n", ok, denied);
        ASSERT_CMP(denied, >, 0);
        ASSERT_CMP(ok, <=, 12);
        /* What was refused left nothing; what got through is at most the one
         * reservation and the one nice level of that thread. */
        Census after = census(&s);
        ASSERT_CMP(after.reservations, <=, before.reservations + 1);
        ASSERT_CMP(after.nice_levels, <=, before.nice_levels + 1);
        /* Another user is not held back by it. */
        Client b = client_start(OTHER_UID);
        ASSERT_SUCCESS(call(&b, "MakeThreadRealtime", 0, 0, 10));
        client_stop(&b);
        client_stop(&a);
        ASSERT_EQ(stack_stop(&s), 0);
}

TEST(reset_known_and_exit_as_root) {
        Stack s;
        if (!stack_start(&s, config_default))
                return;
        Client a = client_start(CALLER_UID), root = client_start(0);
        ASSERT_SUCCESS(call(&a, "MakeThreadRealtime", 0, 0, 10));
        ASSERT_SUCCESS(call(&a, "MakeThreadHighPriority", 0, (uint64_t) client_thread(&a), -3));
        Census with = census(&s);
        ASSERT_EQ(with.on_behalf, 1);
        ASSERT_EQ(with.nice_levels, 1);

        ASSERT_SUCCESS(call(&root, "ResetKnown", 0, 0, 0));
        Census after = census(&s);
        ASSERT_EQ(after.on_behalf, 0);
        ASSERT_EQ(after.nice_levels, 0);
        ASSERT_EQ(after.reservations, with.reservations - 1);

        /* ResetAll does the same for pace; and the caller may ask again. */
        ASSERT_SUCCESS(call(&a, "MakeThreadRealtime", 0, 0, 10));
        ASSERT_EQ(census(&s).on_behalf, 1);
        ASSERT_SUCCESS(call(&root, "ResetAll", 0, 0, 0));
        ASSERT_EQ(census(&s).on_behalf, 0);

        /* Exit: a reply, then a clean exit. */
        ASSERT_SUCCESS(call(&root, "Exit", 0, 0, 0));
        int status = -1;
        for (int i = 0; i < 500; i++) {
                if (waitpid(s.rtkit_pid, &status, WNOHANG) == s.rtkit_pid) {
                        s.rtkit_pid = 0;
                        break;
                }
                sleep_ms(10);
        }
        ASSERT_EQ(s.rtkit_pid, 0);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        client_stop(&a);
        client_stop(&root);
        stack_stop(&s);
}

TEST(name_taken_and_rtkit_off) {
        Stack s;
        if (!stack_start(&s, config_default))
                return;
        /* A second pace-rtkit: the name is the first one's. */
        int status = -1;
        pid_t second = launch_rtkit(&s, s.broker.config);
        for (int i = 0; i < 500 && waitpid(second, &status, WNOHANG) != second; i++)
                sleep_ms(10);
        if (!WIFEXITED(status))
                kill_and_reap(&second, SIGKILL, 0, &status);
        ASSERT_TRUE(WIFEXITED(status));
        ASSERT_EQ(WEXITSTATUS(status), 1);
        char *log = read_text(s.rtkit_log);
        ASSERT_CONTAINS(log, RTKIT_NAME " is already owned by");
        char owner[64];
        snprintf(owner, sizeof(owner), "process %d", (int) s.rtkit_pid);
        ASSERT_CONTAINS(log, owner);
        free(log);

        /* "rtkit": false leaves the name alone and exits 0. */
        char off[160];
        snprintf(off, sizeof(off), "%s/off.json", s.dir);
        ASSERT_OK(test_write_text(off, "{ \"rtkit\": false }"));
        pid_t quiet = launch_rtkit(&s, off);
        status = -1;
        for (int i = 0; i < 500 && waitpid(quiet, &status, WNOHANG) != quiet; i++)
                sleep_ms(10);
        if (!WIFEXITED(status))
                kill_and_reap(&quiet, SIGKILL, 0, &status);
        ASSERT_TRUE(WIFEXITED(status));
        ASSERT_EQ(WEXITSTATUS(status), 0);
        log = read_text(s.rtkit_log);
        ASSERT_CONTAINS(log, "leaving " RTKIT_NAME " to rtkit");
        free(log);
        ASSERT_EQ(stack_stop(&s), 0);
}

TEST(broker_away_is_failed) {
        Stack s;
        if (!stack_start(&s, config_default))
                return;
        Client a = client_start(CALLER_UID);
        ASSERT_SUCCESS(call(&a, "MakeThreadRealtime", 0, 0, 10));
        /* The broker goes: pace-rtkit answers, with a reason. */
        kill_and_reap(&s.broker.pid, SIGKILL, 0, NULL);
        Result *r = call(&a, "MakeThreadRealtime", 0, 0, 10);
        ASSERT_DBUS_ERROR(r, FAILED);
        ASSERT_CONTAINS(r->message, "pace-broker is not answering at");
        /* A new broker: served again, over a new connection. */
        unlink(s.broker.socket);
        ASSERT_OK(broker_restart(&s.broker, SIGKILL));
        ASSERT_SUCCESS(call(&a, "MakeThreadRealtime", 0, 0, 10));
        client_stop(&a);
        ASSERT_EQ(stack_stop(&s), 0);
}

TEST_MAIN()
