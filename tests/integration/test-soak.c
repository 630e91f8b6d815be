/* SPDX-License-Identifier: MIT */
/* Load and soak: 64 concurrent clients, 10,000 reserve/release
 * cycles with random parameters (many refused) while status is polled;
 * every table the broker publishes passes the dispatcher's validator; the
 * broker's fds, memory and reservations return to their baseline; and a
 * client that never reads its replies, or floods connections, does not hold
 * up the others beyond a stated bound. */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "broker-harness.h"
#include "config.h"
#include "macro.h"
#include "pace-limits.h"
#include "pace.pb-c.h"
#include "pace/pace.h"
#include "proc-util.h"
#include "table-check.h"
#include "table-shm.h"
#include "test.h"
#include "time-util.h"

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

#define CLIENTS 64
#define CYCLES 10000

static const char *config_json = "{ \"slot_us\": 1000, \"max_connections\": 256, \"max_connections_per_user\": 256 }";


static unsigned count_fds(pid_t pid) {
        char path[64];
        unsigned n = 0;
        snprintf(path, sizeof(path), "/proc/%d/fd", (int) pid);
        DIR *d = opendir(path);
        if (!d)
                return 0;
        for (struct dirent *de; (de = readdir(d));)
                n += de->d_name[0] != '.';
        closedir(d);
        return n;
}

static unsigned long rss_kb(pid_t pid) {
        char path[64], line[256];
        unsigned long kb = 0;
        snprintf(path, sizeof(path), "/proc/%d/status", (int) pid);
        FILE *f = fopen(path, "re");
        if (!f)
                return 0;
        while (fgets(line, sizeof(line), f))
                if (sscanf(line, "VmRSS: %lu kB", &kb) == 1)
                        break;
        fclose(f);
        return kb;
}

typedef struct Shared {
        _Atomic unsigned cycles, granted, refused, errors;
        _Atomic int go, stop;
} Shared;

static uint64_t next_rand(uint64_t *s) {
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        return *s;
}

/* One client process: its own reservations (they die with it), random
 * parameters, until the shared count reaches CYCLES. */
static void client(const char *socket, Shared *sh, unsigned index) {
        uint64_t seed = 0x9e3779b97f4a7c15ULL * (index + 1);
        pace *p = NULL;

        while (!atomic_load(&sh->go))
                usleep(1000);
        if (pace_connect(socket, &p) < 0)
                _exit(2);
        while (atomic_fetch_add(&sh->cycles, 1) < CYCLES) {
                static const uint64_t periods_ms[] = { 1, 5, 10, 16, 20, 25, 33, 40, 50, 100, 250, 2000 };
                pace_reserve_params params = {
                        .period_ns = periods_ms[next_rand(&seed) % ELEMENTSOF(periods_ms)] * NSEC_PER_MSEC,
                        .utilization_ppm = 1 + (uint32_t) (next_rand(&seed) % 900000),
                        .cpu = next_rand(&seed) % 4 == 0 ? (int) (next_rand(&seed) % 3) : -1,
                };
                pace_grant g;
                int r = pace_reserve(p, &params, &g);
                if (r == 0) {
                        atomic_fetch_add(&sh->granted, 1);
                        if (pace_release(p, g.id) < 0)
                                atomic_fetch_add(&sh->errors, 1);
                } else if (r <= -(PACE_E_BASE + 1) && r > PACE_E_PROTOCOL)
                        atomic_fetch_add(&sh->refused, 1);
                else
                        atomic_fetch_add(&sh->errors, 1);
        }
        pace_close(p);
        _exit(0);
}

/* Follows every generation the broker publishes and validates it as the
 * dispatcher would. */
typedef struct Watcher {
        const char *table_path;
        PaceConfig config;
        Shared *sh;
        unsigned checked, bad, torn;
        char first_error[256];
} Watcher;

static void *watch_tables(void *arg) {
        Watcher *w = arg;
        TableReader *r = NULL;
        PaceTableBuffer *t = malloc(sizeof(*t));
        uint64_t seen = 0, gen;

        if (!t || table_reader_open(w->table_path, &r) < 0) {
                free(t);
                return NULL;
        }
        while (!atomic_load(&w->sh->stop)) {
                if (table_reader_generation(r) == seen) {
                        struct timespec ts = { .tv_nsec = 1000000 };
                        (void) table_reader_wait(r, seen, &ts);
                        continue;
                }
                int rr = table_reader_snapshot(r, t, &gen);
                if (rr == -EAGAIN) {
                        w->torn++;
                        continue;
                }
                if (rr < 0 || gen == seen)
                        continue;
                seen = gen;
                char err[256];
                if (table_check(t, &w->config, err, sizeof(err)) < 0) {
                        if (w->bad++ == 0)
                                snprintf(w->first_error, sizeof(w->first_error), "%s", err);
                }
                w->checked++;
        }
        table_reader_free(r);
        free(t);
        return NULL;
}

static int raw_connect(const char *path) {
        struct sockaddr_un addr = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path);
        if (fd >= 0 && connect(fd, (struct sockaddr *) &addr, sizeof(addr)) < 0) {
                close(fd);
                return -1;
        }
        return fd;
}

TEST(sixty_four_clients_ten_thousand_cycles) {
        BrokerInstance b;
        Shared *sh = mmap(NULL, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        pid_t kids[CLIENTS];
        Watcher w = {};
        pthread_t watcher;
        char table_path[320];
        pace *p = NULL;
        pace_status_report *st = NULL;

        ASSERT_TRUE(sh != MAP_FAILED);
        memset(sh, 0, sizeof(*sh));
        ASSERT_OK(broker_start(&b, config_json));
        snprintf(table_path, sizeof(table_path), "%s/table", b.dir);
        pace_config_init(&w.config);
        w.config.slot_ns = NSEC_PER_MSEC;
        w.config.max_connections = 256;
        w.config.max_connections_per_user = 256;
        ASSERT_OK(config_resolve_cpus(&w.config, "/sys/devices/system/cpu/online", NULL, 0));
        w.table_path = table_path;
        w.sh = sh;

        /* Baseline after one round trip, so lazily allocated state exists. */
        ASSERT_OK(pace_connect(b.socket, &p));
        ASSERT_OK(pace_status(p, &st));
        pace_status_report_free(st);
        pace_close(p);
        usleep(100000); /* until the broker has seen that close */
        unsigned fds0 = count_fds(b.pid);
        unsigned long rss0 = rss_kb(b.pid);

        /* Fork before the watcher thread exists: a child forked while that
         * thread holds an allocator lock (ASan's large-chunk allocator has no
         * fork handler in GCC 12) deadlocks on its first malloc. */
        for (unsigned i = 0; i < CLIENTS; i++) {
                kids[i] = fork();
                ASSERT_OK(kids[i]);
                if (kids[i] == 0) {
                        prctl(PR_SET_PDEATHSIG, SIGKILL);
                        alarm(120);
                        client(b.socket, sh, i);
                }
        }
        ASSERT_EQ(pthread_create(&watcher, NULL, watch_tables, &w), 0);
        uint64_t t0 = monotonic_ns();
        atomic_store(&sh->go, 1);

        /* status polls all along; its latency is what others see. */
        static uint64_t lat[100000];
        unsigned n_lat = 0;
        ASSERT_OK(pace_connect(b.socket, &p));
        for (;;) {
                bool running = false;
                for (unsigned i = 0; i < CLIENTS; i++)
                        if (kids[i] > 0) {
                                int status;
                                if (waitpid(kids[i], &status, WNOHANG) == kids[i]) {
                                        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                                                TEST_FAIL_("client %u: %s %d", i,
                                                           WIFEXITED(status) ? "exit status" : "killed by signal",
                                                           WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
                                        kids[i] = 0;
                                } else
                                        running = true;
                        }
                if (!running)
                        break;
                uint64_t s0 = monotonic_ns();
                ASSERT_OK(pace_status(p, &st));
                if (n_lat < ELEMENTSOF(lat))
                        lat[n_lat++] = monotonic_ns() - s0;
                pace_status_report_free(st);
        }
        uint64_t t1 = monotonic_ns();
        atomic_store(&sh->stop, 1);
        pthread_join(watcher, NULL);

        qsort(lat, n_lat, sizeof(lat[0]), cmp_u64);
        printf("  %u cycles by %d clients in %.2f s: %u granted, %u refused, %u errors; %u tables validated "
               "(%u torn copies retried), %u bad\n",
               CYCLES, CLIENTS, (double) (t1 - t0) / 1e9, sh->granted, sh->refused, sh->errors, w.checked, w.torn,
               w.bad);
        printf("  status during the load: %u polls, p50 %.2f ms, p99 %.2f ms, max %.2f ms\n", n_lat,
               (double) lat[n_lat / 2] / 1e6, (double) lat[n_lat * 99 / 100] / 1e6, (double) lat[n_lat - 1] / 1e6);
        ASSERT_EQ(sh->errors, 0);
        /* Both outcomes in bulk (here about 1200 granted, 8800 refused);
         * how many fit depends on the interleaving, so no tight bound. */
        ASSERT_CMP(sh->granted, >, 500);
        ASSERT_CMP(sh->refused, >, 1000);
        ASSERT_CMP(w.checked, >, 100);
        if (w.bad)
                TEST_FAIL_("%u published tables failed validation, first: %s", w.bad, w.first_error);
        /* 64 clients share two cores with the broker: a poll waits behind
         * at most a round of the others' requests (p99 7-8 ms here). Under
         * ASan the broker is several times slower: p99 14-17 ms, once 84 ms
         * (~180 polls, so p99 is the second-largest). A broker that lets one
         * client hold up the others shows seconds, libpace's reply timeout. */
        ASSERT_CMP(lat[n_lat * 99 / 100], <, (SANITIZED ? 300 : 100) * NSEC_PER_MSEC);

        /* Back to baseline: nothing reserved, no fd or memory kept. */
        size_t n = 1;
        for (int i = 0; i < 200 && n != 0; i++) {
                ASSERT_OK(pace_status(p, &st));
                n = st->n_reservations;
                pace_status_report_free(st);
                usleep(5000);
        }
        pace_close(p);
        usleep(100000);
        /* The last hang-ups may still be queued behind a slow broker. */
        unsigned fds1 = count_fds(b.pid);
        for (int i = 0; i < 100 && fds1 != fds0; i++) {
                usleep(50000);
                fds1 = count_fds(b.pid);
        }
        unsigned long rss1 = rss_kb(b.pid);
        printf("  broker after: %zu reservations, %u fds (baseline %u), RSS %lu kB (baseline %lu kB)\n", n, fds1, fds0,
               rss1, rss0);
        ASSERT_EQ(n, 0);
        ASSERT_EQ(fds1, fds0);
        /* The allocator may keep a few pages; a leak per cycle would be MBs.
         * Under ASan its quarantine holds freed memory on purpose, and
         * LeakSanitizer judges the broker at exit (broker_stop) instead. */
        if (!SANITIZED)
                ASSERT_CMP(rss1, <=, rss0 + 2048);
        ASSERT_EQ(broker_stop(&b), 0);
        munmap(sh, sizeof(*sh));
}

/* A client that sends and never reads, and a flood of idle connections:
 * the broker drops the first when its socket fills and refuses the rest
 * past max_connections; a well-behaved client stays fast. */
TEST(clients_that_never_read_or_flood_do_not_slow_others) {
        BrokerInstance b;
        pace *p = NULL;
        pace_status_report *st = NULL;
        uint8_t buf[64];
        static uint64_t lat[2000];

        ASSERT_OK(broker_start(&b, "{ \"max_connections\": 64, \"max_connections_per_user\": 64 }"));
        Pace__Request req = PACE__REQUEST__INIT;
        Pace__StatusRequest sr = PACE__STATUS_REQUEST__INIT;
        req.version = 1;
        req.body_case = PACE__REQUEST__BODY_STATUS;
        req.status = &sr;
        size_t len = pace__request__pack(&req, buf);

        /* The well-behaved client is connected first; past max_connections
         * the flood is refused, the ones in keep their service. */
        ASSERT_OK(pace_connect(b.socket, &p));
        ASSERT_OK(pace_status(p, &st));
        pace_status_report_free(st);
        int deaf = raw_connect(b.socket);
        ASSERT_OK(deaf);
        int sndbuf = 4096;
        setsockopt(deaf, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
        int idle[200];
        for (int i = 0; i < 200; i++)
                idle[i] = raw_connect(b.socket);

        unsigned sent = 0;
        for (unsigned i = 0; i < ELEMENTSOF(lat); i++) {
                /* The deaf client keeps asking, never reading. */
                for (int k = 0; k < 5; k++)
                        if (send(deaf, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL) > 0)
                                sent++;
                uint64_t s0 = monotonic_ns();
                int r = pace_status(p, &st);
                lat[i] = monotonic_ns() - s0;
                ASSERT_OK(r);
                pace_status_report_free(st);
        }
        qsort(lat, ELEMENTSOF(lat), sizeof(lat[0]), cmp_u64);
        char c;
        ssize_t n = recv(deaf, &c, 1, MSG_DONTWAIT);
        (void) n;
        printf("  deaf client sent %u requests unread; others: p50 %.3f ms, p99 %.3f ms, max %.3f ms over %zu polls\n",
               sent, (double) lat[ELEMENTSOF(lat) / 2] / 1e6, (double) lat[ELEMENTSOF(lat) * 99 / 100] / 1e6,
               (double) lat[ELEMENTSOF(lat) - 1] / 1e6, ELEMENTSOF(lat));
        /* Stated bound: a well-behaved client's p99 stays under 10 ms while
         * one client floods and 200 sit idle. */
        ASSERT_CMP(lat[ELEMENTSOF(lat) * 99 / 100], <, 10 * NSEC_PER_MSEC);
        pace_close(p);
        close(deaf);
        for (int i = 0; i < 200; i++)
                if (idle[i] >= 0)
                        close(idle[i]);
        ASSERT_EQ(broker_stop(&b), 0);
}

TEST_MAIN()
