/* SPDX-License-Identifier: MIT */
/* libpace finding its broker: missing, dead and bad socket paths, $PACE_SOCKET,
 * and a socket that does not leak into exec'ed programs. */
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "fake-broker.h"
#include "macro.h"
#include "pace-limits.h"
#include "pace.pb-c.h"
#include "pace/pace.h"
#include "test.h"

TEST(connect_to_missing_socket) {
        char dir[] = "/tmp/test-libpace-XXXXXX";
        char path[128];
        pace *p = NULL;

        ASSERT_TRUE(mkdtemp(dir));
        snprintf(path, sizeof(path), "%s/nothing.sock", dir);
        ASSERT_ERR(pace_connect(path, &p), -ENOENT);
        ASSERT_TRUE(p == NULL);
        ASSERT_OK(rmdir(dir));
}

TEST(connect_to_dead_socket) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        char dir[] = "/tmp/test-libpace-XXXXXX";
        pace *p = NULL;
        int fd;

        /* A socket file nobody listens on, as a crashed broker leaves behind. */
        ASSERT_TRUE(mkdtemp(dir));
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/dead.sock", dir);
        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        ASSERT_OK(fd);
        ASSERT_OK(bind(fd, (struct sockaddr *) &sa, sizeof(sa)));
        ASSERT_OK(close(fd));

        ASSERT_ERR(pace_connect(sa.sun_path, &p), -ECONNREFUSED);
        ASSERT_TRUE(p == NULL);
        ASSERT_OK(unlink(sa.sun_path));
        ASSERT_OK(rmdir(dir));
}

TEST(connect_bad_paths) {
        char path[200];
        pace *p = NULL;

        memset(path, 'a', sizeof(path) - 1);
        path[0] = '/';
        path[sizeof(path) - 1] = '\0';
        ASSERT_ERR(pace_connect(path, &p), -ENAMETOOLONG);

        /* Exactly sun_path's size leaves no room for the terminator. */
        path[sizeof(((struct sockaddr_un *) NULL)->sun_path)] = '\0';
        ASSERT_ERR(pace_connect(path, &p), -ENAMETOOLONG);

        ASSERT_ERR(pace_connect("", &p), -EINVAL);
        ASSERT_ERR(pace_connect("/tmp/x", NULL), -EINVAL);
        ASSERT_TRUE(p == NULL);
}

TEST(connect_socket_is_cloexec) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        char dir[] = "/tmp/test-libpace-XXXXXX";
        bool open_before[1024];
        pace *p = NULL;
        int listen_fd, found = 0;

        ASSERT_TRUE(mkdtemp(dir));
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/b.sock", dir);
        listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        ASSERT_OK(listen_fd);
        ASSERT_OK(bind(listen_fd, (struct sockaddr *) &sa, sizeof(sa)));
        ASSERT_OK(listen(listen_fd, 1));

        for (int fd = 0; fd < (int) ELEMENTSOF(open_before); fd++)
                open_before[fd] = fcntl(fd, F_GETFD) >= 0;

        /* The backlog accepts the connection; nobody needs to call accept(). */
        ASSERT_OK(pace_connect(sa.sun_path, &p));

        for (int fd = 0; fd < (int) ELEMENTSOF(open_before); fd++) {
                int flags;

                if (open_before[fd])
                        continue;
                flags = fcntl(fd, F_GETFD);
                if (flags < 0)
                        continue;
                ASSERT_TRUE(flags & FD_CLOEXEC);
                found++;
        }
        ASSERT_EQ(found, 1);

        pace_close(p);
        close(listen_fd);
        ASSERT_OK(unlink(sa.sun_path));
        ASSERT_OK(rmdir(dir));
}

TEST(pace_socket_env_is_honored) {
        FakeBroker b;
        pace *p = NULL;
        pace_status_report *s = NULL;

        fake_broker_start(&b, MODE_ECHO);

        ASSERT_OK(unsetenv("PACE_SOCKET"));
        ASSERT_STREQ(pace_default_socket(), PACE_DEFAULT_SOCKET);
        ASSERT_OK(setenv("PACE_SOCKET", "", 1));
        ASSERT_STREQ(pace_default_socket(), PACE_DEFAULT_SOCKET);

        ASSERT_OK(setenv("PACE_SOCKET", b.path, 1));
        ASSERT_STREQ(pace_default_socket(), b.path);
        ASSERT_OK(pace_connect(NULL, &p));
        ASSERT_OK(pace_status(p, &s));
        pace_status_report_free(s);
        ASSERT_EQ(fake_broker_get(&b, &b.n_requests), 1);
        pace_close(p);

        /* An explicit path wins over the environment. */
        ASSERT_OK(setenv("PACE_SOCKET", "/nonexistent/broker.sock", 1));
        ASSERT_OK(pace_connect(b.path, &p));
        pace_close(p);
        ASSERT_ERR(pace_connect(NULL, &p), -ENOENT);

        ASSERT_OK(unsetenv("PACE_SOCKET"));
        fake_broker_stop(&b);
}

TEST_MAIN()
