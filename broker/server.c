/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "macro.h"
#include "pace.pb-c.h"
#include "proc-util.h"
#include "server.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

/* Connections accepted per wake-up: a flood cannot starve the clients we
 * already have. */
#define ACCEPT_BATCH 32

typedef struct Connection Connection;

struct Connection {
        Server *server;
        int fd;
        BrokerPeer peer;
        sd_event_source *io;
        sd_event_source *timer;
        Connection *prev, *next;
};

typedef struct PidWatch {
        Server *server;
        uint64_t id;
        sd_event_source *io;
} PidWatch;

struct Server {
        sd_event *event;
        PaceConfig config;
        int listen_fd;
        sd_event_source *listen_io;
        /* While out of fds, accepting pauses instead of spinning. */
        sd_event_source *listen_resume;
        bool out_of_fds; /* logged once per episode */
        char *cpu_online_path;
        sd_event_source *hotplug_timer;
        Broker *broker;
        Connection *connections;
        size_t n_connections;
        void *log_userdata;
        LogSink log;
        int (*load_config)(void *userdata, PaceConfig *ret, char *why, size_t why_size);
        uint8_t buffer[PACE_MAX_MESSAGE_SIZE];
};

#define server_log(s, priority, ...) log_sinkf((s)->log, (s)->log_userdata, (priority), __VA_ARGS__)

static uint64_t now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * NSEC_PER_SEC + (uint64_t) ts.tv_nsec;
}

static void connection_free(Connection *c) {
        if (!c)
                return;
        Server *s = c->server;
        if (c->prev)
                c->prev->next = c->next;
        else
                s->connections = c->next;
        if (c->next)
                c->next->prev = c->prev;
        s->n_connections--;
        sd_event_source_disable_unref(c->io);
        sd_event_source_disable_unref(c->timer);
        safe_close(c->peer.pidfd);
        safe_close(c->fd);
        free(c);
}

static int connection_timeout(sd_event_source *src, uint64_t usec, void *userdata) {
        Connection *c = userdata;
        server_log(c->server, LOG_DEBUG, "pid %" PRIi32 ": idle for too long, disconnected", (int32_t) c->peer.pid);
        connection_free(c);
        return 0;
}

/* A client that does not read its replies loses its connection instead of
 * making the broker wait: sends never block. */
static int send_reply(Connection *c, const uint8_t *reply, size_t size) {
        if (send(c->fd, reply, size, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
                return negative_errno();
        return 0;
}

static int connection_io(sd_event_source *src, int fd, uint32_t revents, void *userdata) {
        Connection *c = userdata;
        Server *s = c->server;
        _cleanup_free_ uint8_t *reply = NULL;
        size_t reply_size = 0;
        struct iovec iov = { .iov_base = s->buffer, .iov_len = sizeof(s->buffer) };
        struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
        ssize_t n;
        int r;

        n = recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        c->peer.now_ns = now_ns();
        if (n < 0) {
                if (errno == EAGAIN || errno == EINTR)
                        return 0;
                connection_free(c);
                return 0;
        }
        /* A zero-length read is the peer hanging up, unless the socket says
         * otherwise: then it was an empty datagram, which gets an error. */
        if (n == 0 && (revents & (EPOLLHUP | EPOLLRDHUP | EPOLLERR))) {
                connection_free(c);
                return 0;
        }

        (void) sd_event_source_set_time_relative(c->timer, s->config.client_timeout_ns / NSEC_PER_USEC);

        if (msg.msg_flags & MSG_TRUNC)
                r = broker_error_reply(PACE__ERROR_CODE__ERROR_MALFORMED,
                                       "message larger than the limit of 65536 bytes (the protocol's maximum)",
                                       &reply, &reply_size);
        else if (msg.msg_flags & MSG_CTRUNC)
                r = broker_error_reply(PACE__ERROR_CODE__ERROR_MALFORMED,
                                       "unexpected ancillary data; send plain messages", &reply, &reply_size);
        else
                r = broker_handle(s->broker, &c->peer, s->buffer, (size_t) n, &reply, &reply_size);
        if (r < 0) {
                server_log(s, LOG_ERR, "pid %" PRIi32 ": cannot build a reply: %s", (int32_t) c->peer.pid,
                           strerror(-r));
                connection_free(c);
                return 0;
        }
        r = send_reply(c, reply, reply_size);
        if (r < 0) {
                server_log(s, LOG_DEBUG, "pid %" PRIi32 ": reply not sent (%s), disconnected", (int32_t) c->peer.pid,
                           strerror(-r));
                connection_free(c);
        }
        return 0;
}

static void refuse_connection(Server *s, int fd) {
        _cleanup_free_ uint8_t *reply = NULL;
        size_t size;
        char message[160];

        snprintf(message, sizeof(message), "the broker serves %u connections at most (max_connections); try again later",
                 s->config.max_connections);
        if (broker_error_reply(PACE__ERROR_CODE__ERROR_BUSY, message, &reply, &size) >= 0)
                (void) send(fd, reply, size, MSG_DONTWAIT | MSG_NOSIGNAL);
}

static void refuse_user(Server *s, int fd, uid_t uid) {
        _cleanup_free_ uint8_t *reply = NULL;
        size_t size;
        char message[200];

        snprintf(message, sizeof(message), "uid %u already holds %u connections (max_connections_per_user); "
                 "close some or reuse one", (unsigned) uid, s->config.max_connections_per_user);
        if (broker_error_reply(PACE__ERROR_CODE__ERROR_BUSY, message, &reply, &size) >= 0)
                (void) send(fd, reply, size, MSG_DONTWAIT | MSG_NOSIGNAL);
}

static int accept_one(Server *s) {
        _cleanup_close_ int fd = -EBADF;
        _cleanup_free_ Connection *c = NULL;
        struct ucred cred;
        socklen_t len = sizeof(cred);
        int pidfd = -1;
        int r;

        fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
                return negative_errno();

        if (s->n_connections >= s->config.max_connections) {
                refuse_connection(s, fd);
                server_log(s, LOG_WARNING, "connection refused: %zu clients connected (max_connections)",
                           s->n_connections);
                return 0;
        }
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
                return negative_errno();

        /* One user may not fill the broker: root excepted, as everywhere. */
        if (cred.uid != 0) {
                size_t mine = 0;
                for (Connection *o = s->connections; o; o = o->next)
                        mine += o->peer.uid == cred.uid;
                if (mine >= s->config.max_connections_per_user) {
                        refuse_user(s, fd, cred.uid);
                        return 0;
                }
        }
        len = sizeof(pidfd);
        /* Best effort: kernels before 6.5 have no SO_PEERPIDFD; the caller's
         * pid is then opened by number, which the start-time check guards. */
        if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) < 0)
                pidfd = -1;

        c = calloc(1, sizeof(*c));
        if (!c) {
                safe_close(pidfd);
                return -ENOMEM;
        }
        c->server = s;
        c->peer = (BrokerPeer) { .pid = cred.pid, .uid = cred.uid, .gid = cred.gid, .pidfd = pidfd };
        /* Supplementary groups as the kernel recorded them at connect time;
         * if there are more than fit, the first ones are judged. */
        {
                gid_t groups[BROKER_PEER_MAX_GROUPS * 4];
                socklen_t glen = sizeof(groups);
                if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &glen) == 0) {
                        c->peer.n_groups = MIN((size_t) glen / sizeof(gid_t), (size_t) BROKER_PEER_MAX_GROUPS);
                        memcpy(c->peer.groups, groups, c->peer.n_groups * sizeof(gid_t));
                }
        }
        c->fd = fd;

        r = sd_event_add_io(s->event, &c->io, fd, EPOLLIN | EPOLLRDHUP, connection_io, c);
        if (r >= 0)
                r = sd_event_add_time_relative(s->event, &c->timer, CLOCK_MONOTONIC,
                                               s->config.client_timeout_ns / NSEC_PER_USEC, 0, connection_timeout, c);
        if (r < 0) {
                sd_event_source_disable_unref(c->io);
                safe_close(c->peer.pidfd);
                return r;
        }
        TAKE_FD(fd);
        c->next = s->connections;
        if (c->next)
                c->next->prev = c;
        s->connections = TAKE_PTR(c);
        s->n_connections++;
        return 0;
}

static int listen_io(sd_event_source *src, int fd, uint32_t revents, void *userdata) {
        Server *s = userdata;

        for (int i = 0; i < ACCEPT_BATCH; i++) {
                int r = accept_one(s);
                if (r == -EAGAIN || r == -EINTR)
                        break;
                if (r == -EMFILE || r == -ENFILE) {
                        /* The listening socket stays readable: without a
                         * pause, the loop would spin on it. */
                        if (!s->out_of_fds)
                                server_log(s, LOG_WARNING, "out of file descriptors with %zu clients connected; "
                                           "accepting again when some are free", s->n_connections);
                        s->out_of_fds = true;
                        (void) sd_event_source_set_enabled(s->listen_io, SD_EVENT_OFF);
                        (void) sd_event_source_set_time_relative(s->listen_resume, 100 * 1000);
                        (void) sd_event_source_set_enabled(s->listen_resume, SD_EVENT_ONESHOT);
                        break;
                }
                if (r < 0)
                        server_log(s, LOG_WARNING, "accepting a client failed: %s", strerror(-r));
                else
                        s->out_of_fds = false;
        }
        return 0;
}

static int listen_resume(sd_event_source *src, uint64_t usec, void *userdata) {
        Server *s = userdata;
        return sd_event_source_set_enabled(s->listen_io, SD_EVENT_ON);
}

static int pid_exited(sd_event_source *src, int fd, uint32_t revents, void *userdata) {
        PidWatch *w = userdata;
        /* The broker unwatches, which frees w: read what we need first. */
        Server *s = w->server;
        uint64_t id = w->id;

        broker_process_exited(s->broker, id);
        return 0;
}

static int watch_pidfd(void *userdata, int pidfd, uint64_t id, void **ret_watch) {
        Server *s = userdata;
        PidWatch *w = calloc(1, sizeof(*w));
        int r;

        if (!w)
                return -ENOMEM;
        w->server = s;
        w->id = id;
        r = sd_event_add_io(s->event, &w->io, pidfd, EPOLLIN, pid_exited, w);
        if (r < 0) {
                free(w);
                return r;
        }
        *ret_watch = w;
        return 0;
}

static void unwatch(void *userdata, void *watch) {
        PidWatch *w = watch;
        if (!w)
                return;
        sd_event_source_disable_unref(w->io);
        free(w);
}

static void broker_log_hook(void *userdata, int priority, const char *message) {
        Server *s = userdata;
        if (s->log)
                s->log(s->log_userdata, priority, message);
}

int server_reload(Server *s, char *why, size_t why_size) {
        PaceConfig config;
        int r;

        if (!s->load_config) {
                snprintf(why, why_size, "no configuration source to reload from");
                return -EOPNOTSUPP;
        }
        r = s->load_config(s->log_userdata, &config, why, why_size);
        if (r < 0)
                return r;
        r = broker_reload(s->broker, &config, why, why_size);
        if (r < 0)
                return r;
        s->config = config;
        return 0;
}

/* CPU hotplug: sysfs offers no notification an AF_UNIX-only service can
 * receive, so poll the online list once a second. Threads that end are
 * noticed on the same beat: no pidfd turns readable for a thread. */
#define HOTPLUG_POLL_USEC (1000 * 1000)

static int hotplug_poll(sd_event_source *src, uint64_t usec, void *userdata) {
        Server *s = userdata;
        int32_t online[PACE_MAX_CPUS];
        uint32_t n = 0;
        char buf[1024];
        FILE *f = fopen(s->cpu_online_path, "re");

        if (f) {
                size_t len = fread(buf, 1, sizeof(buf) - 1, f);
                buf[len] = '\0';
                fclose(f);
                /* An unreadable list changes nothing: never drop reservations
                 * because of a read error. */
                if (cpu_list_parse(buf, online, PACE_MAX_CPUS, &n) == 0 && n > 0)
                        broker_cpus_online(s->broker, online, n);
        }
        broker_tick(s->broker);
        (void) sd_event_source_set_time_relative(src, HOTPLUG_POLL_USEC);
        return sd_event_source_set_enabled(src, SD_EVENT_ONESHOT);
}

static int broker_reload_hook(void *userdata, char *why, size_t why_size) {
        return server_reload(userdata, why, why_size);
}

int server_new(sd_event *event, const ServerOptions *options, Server **ret) {
        _cleanup_(server_freep) Server *s = NULL;
        int r;

        s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        s->event = sd_event_ref(event);
        s->config = *options->config;
        s->listen_fd = options->listen_fd;
        s->log = options->log;
        s->log_userdata = options->log_userdata;
        s->load_config = options->load_config;

        BrokerOptions bo = {
                .config = options->config,
                .runtime_dir_fd = options->runtime_dir_fd,
                .proc_root = options->proc_root,
                .delegate_uid = options->delegate_uid,
                .hooks = {
                        .userdata = s,
                        .watch_pidfd = watch_pidfd,
                        .unwatch = unwatch,
                        .log = broker_log_hook,
                        .reload = options->load_config ? broker_reload_hook : NULL,
                },
        };
        r = broker_new(&bo, &s->broker);
        if (r < 0)
                return r;

        r = sd_event_add_io(event, &s->listen_io, s->listen_fd, EPOLLIN, listen_io, s);
        if (r < 0)
                return r;
        s->cpu_online_path = strdup(options->cpu_online_path ?: "/sys/devices/system/cpu/online");
        if (!s->cpu_online_path)
                return -ENOMEM;
        r = sd_event_add_time_relative(event, &s->hotplug_timer, CLOCK_MONOTONIC, HOTPLUG_POLL_USEC, 0, hotplug_poll, s);
        if (r < 0)
                return r;
        (void) sd_event_source_set_enabled(s->hotplug_timer, SD_EVENT_ON);
        r = sd_event_add_time_relative(event, &s->listen_resume, CLOCK_MONOTONIC, 100 * 1000, 0, listen_resume, s);
        if (r < 0)
                return r;
        (void) sd_event_source_set_enabled(s->listen_resume, SD_EVENT_OFF);
        *ret = TAKE_PTR(s);
        return 0;
}

Server *server_free(Server *s) {
        if (!s)
                return NULL;
        while (s->connections)
                connection_free(s->connections);
        sd_event_source_disable_unref(s->listen_io);
        sd_event_source_disable_unref(s->listen_resume);
        sd_event_source_disable_unref(s->hotplug_timer);
        free(s->cpu_online_path);
        broker_free(s->broker);
        safe_close(s->listen_fd);
        sd_event_unref(s->event);
        free(s);
        return NULL;
}

size_t server_n_connections(const Server *s) {
        return s->n_connections;
}

Broker *server_broker(Server *s) {
        return s->broker;
}
