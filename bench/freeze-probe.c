/* SPDX-License-Identifier: MIT */
/* freeze-probe: how long the kernel's cgroup freezer takes to freeze and to
 * thaw a group of spinning threads, for bench/backends.
 *
 * For each N in --threads it forks a child with N threads spinning on --cpu
 * (default 1) at SCHED_FIFO --spin-priority (default 1; 0: SCHED_OTHER),
 * moves the child into a fresh cgroup of its own and then, --iterations
 * times, at the cadence of a strict pace reservation (--running 3ms, then
 * --frozen 7ms):
 *   freeze: writes FROZEN to the v1 group's freezer.state or 1 to the
 *           unified group's cgroup.freeze and waits until the kernel says the
 *           group is frozen (v1: freezer.state reads FROZEN; unified:
 *           cgroup.events says "frozen 1", re-read in a loop or, with
 *           --wait poll, after poll(POLLPRI) wakes up);
 *   thaw:   writes THAWED / 0 and waits until a spinner runs again (every
 *           spinner stamps CLOCK_MONOTONIC in shared memory and notes the
 *           first stamp after each gap).
 * The controller (this process) runs at SCHED_FIFO --priority on --ctl-cpu
 * (default 0), memory locked, so its waits are not the spinners' CPU.
 * Real-time spinners are what pace thaws (it promotes a reservation's
 * threads to SCHED_FIFO 98, then thaws them) and keep ordinary load on the
 * CPU from adding its own delay; SCHED_OTHER ones show that delay (pace
 * demotes threads to their own policy right after writing the freeze, so
 * they finish freezing at that policy).
 *
 * One line per iteration to --out (times in ns, from just before the write):
 *   LABEL N I FREEZE_WRITE FROZEN RAN_AFTER THAW_WRITE THAWED
 * FREEZE_WRITE, THAW_WRITE: how long the write() itself took; FROZEN: until
 * the kernel reported the group frozen; RAN_AFTER: the latest stamp any
 * spinner took after the freeze write began (negative: none ran after it);
 * THAWED: until the first spinner ran again after the thaw write began.
 *
 *   freeze-probe --backend v1|v2 [--root DIR] [--threads 1,8,64] [--iterations 200]
 *                [--wait read|poll] [--anchor] [--cpu 1] [--ctl-cpu 0] [--priority 50] [--spin-priority 1]
 *                [--running 3ms] [--frozen 7ms] [--label L] [--out FILE] [--limit 60s]
 *
 * --root: the hierarchy to create the groups in (default: the v1 freezer's
 * mount point, or the cgroup2 mount: /sys/fs/cgroup or /sys/fs/cgroup/unified,
 * from /proc/self/mountinfo). --anchor (v1): keep one more, empty group frozen
 * meanwhile, as pace-dispatcher does (the v1 freezer switches a static key,
 * i.e. patches kernel text on every CPU, whenever the number of freezing
 * groups goes between 0 and 1).
 *
 * Bounded: an alarm (--limit) and a 1 s bound on every wait end the run;
 * whatever happens, the groups are thawed, the children killed and reaped
 * by pid and the groups removed before exit. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench-util.h"
#include "macro.h"
#include "parse-util.h"

#define MAX_THREADS 1024
#define MAX_COUNTS 16
#define WAIT_BOUND_NS NSEC_PER_SEC

/* One cache line per spinner: they share a CPU, the controller reads them
 * from another one. */
typedef struct Stamp {
        _Atomic uint64_t last;   /* the latest CLOCK_MONOTONIC reading */
        _Atomic uint64_t resume; /* the first reading after the latest gap */
        _Atomic int tid;
        char pad[44];
} Stamp;

typedef struct Shared {
        _Atomic uint32_t ready;
        uint64_t gap_ns;
        Stamp s[MAX_THREADS];
} Shared;

static volatile sig_atomic_t stop;
static Shared *sh;
static int spin_cpu = 1;
static int spin_priority = 1;

static void on_signal(int sig) {
        stop = 1;
}

static void pin(int cpu) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        (void) sched_setaffinity(0, sizeof(set), &set);
}

static void spin(Stamp *st) {
        uint64_t prev = monotonic_ns();
        atomic_store_explicit(&st->last, prev, memory_order_relaxed);
        atomic_store(&st->tid, (int) gettid());
        atomic_fetch_add(&sh->ready, 1);
        for (;;) {
                uint64_t t = monotonic_ns();
                if (t - prev > sh->gap_ns)
                        atomic_store_explicit(&st->resume, t, memory_order_release);
                atomic_store_explicit(&st->last, t, memory_order_release);
                prev = t;
        }
}

static void *spinner(void *arg) {
        spin(arg);
        return NULL;
}

/* The child: waits until the parent has moved it into the group (one byte
 * on the pipe), then spins in n threads. Dies with its parent. */
static _Noreturn void child_main(int go_fd, unsigned n, unsigned limit_s) {
        char c;

        (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() == 1)
                _exit(1);
        alarm(limit_s + 5);
        pin(spin_cpu);
        if (read(go_fd, &c, 1) != 1)
                _exit(1);
        for (unsigned i = 1; i < n; i++) {
                pthread_t t;
                pthread_attr_t attr;
                pthread_attr_init(&attr);
                pthread_attr_setstacksize(&attr, 64 * 1024);
                if (pthread_create(&t, &attr, spinner, &sh->s[i]) != 0)
                        _exit(1);
                pthread_attr_destroy(&attr);
        }
        spin(&sh->s[0]);
        _exit(0);
}

static int write_str(int fd, const char *s) {
        ssize_t n = pwrite(fd, s, strlen(s), 0);
        if (n < 0)
                return -errno;
        return n == (ssize_t) strlen(s) ? 0 : -EIO;
}

static int write_file(const char *path, const char *s) {
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        int r = write_str(fd, s);
        close(fd);
        return r;
}

/* The first cgroup2 mount in mountinfo, or the v1 hierarchy with the
 * freezer among its super options. */
static int find_root(bool v2, char *ret, size_t size) {
        FILE *f = fopen("/proc/self/mountinfo", "re");
        char line[4096];
        int r = -ENOENT;

        if (!f)
                return -errno;
        while (fgets(line, sizeof(line), f)) {
                char mnt[1024], fstype[64], opts[1024];
                const char *sep = strstr(line, " - ");
                if (!sep || sscanf(line, "%*s %*s %*s %*s %1023s", mnt) != 1 ||
                    sscanf(sep + 3, "%63s %*s %1023s", fstype, opts) != 2)
                        continue;
                bool match = v2 ? strcmp(fstype, "cgroup2") == 0 :
                                  strcmp(fstype, "cgroup") == 0 && (strstr(opts, ",freezer") || strncmp(opts, "freezer", 7) == 0);
                if (match) {
                        snprintf(ret, size, "%s", mnt);
                        r = 0;
                        break;
                }
        }
        fclose(f);
        return r;
}

typedef struct Group {
        char dir[512];
        int state_fd; /* freezer.state / cgroup.freeze */
        int done_fd;  /* freezer.state / cgroup.events */
        bool v2;
} Group;

static int group_make(Group *g, const char *root, const char *name, bool v2) {
        char path[600];

        *g = (Group) { .state_fd = -1, .done_fd = -1, .v2 = v2 };
        snprintf(g->dir, sizeof(g->dir), "%s/%s", root, name);
        if (mkdir(g->dir, 0755) < 0 && errno != EEXIST)
                return -errno;
        snprintf(path, sizeof(path), "%s/%s", g->dir, v2 ? "cgroup.freeze" : "freezer.state");
        g->state_fd = open(path, O_RDWR | O_CLOEXEC);
        if (g->state_fd < 0)
                return -errno;
        snprintf(path, sizeof(path), "%s/%s", g->dir, v2 ? "cgroup.events" : "freezer.state");
        g->done_fd = open(path, O_RDONLY | O_CLOEXEC);
        return g->done_fd < 0 ? -errno : 0;
}

static int group_freeze(Group *g, bool on) {
        return write_str(g->state_fd, g->v2 ? (on ? "1" : "0") : (on ? "FROZEN" : "THAWED"));
}

/* 1 if the kernel says frozen, 0 if not (yet), negative on error. */
static int group_frozen(Group *g) {
        char buf[256];
        ssize_t n = pread(g->done_fd, buf, sizeof(buf) - 1, 0);
        if (n < 0)
                return -errno;
        buf[n] = '\0';
        if (g->v2)
                return strstr(buf, "frozen 1") != NULL;
        return strncmp(buf, "FROZEN", 6) == 0;
}

/* Thaw, kill whatever is left inside (our child only), remove. */
static void group_remove(Group *g) {
        char path[600];

        if (!g->dir[0])
                return;
        if (g->state_fd >= 0)
                (void) group_freeze(g, false);
        safe_close(g->state_fd);
        safe_close(g->done_fd);
        g->state_fd = g->done_fd = -1;
        for (int i = 0; i < 200; i++) {
                if (rmdir(g->dir) == 0 || errno == ENOENT)
                        break;
                if (errno != EBUSY)
                        break;
                /* Still populated: a child not yet reaped. */
                snprintf(path, sizeof(path), "%s/cgroup.procs", g->dir);
                FILE *f = fopen(path, "re");
                pid_t pid;
                while (f && fscanf(f, "%d", &pid) == 1)
                        if (pid > 1 && getpgid(pid) >= 0)
                                (void) kill(pid, SIGKILL);
                if (f)
                        fclose(f);
                usleep(5000);
        }
        if (access(g->dir, F_OK) == 0)
                fprintf(stderr, "freeze-probe: could not remove %s: %m\n", g->dir);
        g->dir[0] = '\0';
}

static void sleep_until(uint64_t t) {
        struct timespec ts = { .tv_sec = (time_t) (t / NSEC_PER_SEC), .tv_nsec = (long) (t % NSEC_PER_SEC) };
        while (!stop && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
                ;
}

/* Until the kernel reports the group frozen: re-reading, or in poll(). */
static int wait_frozen(Group *g, bool use_poll, uint64_t t0) {
        for (;;) {
                int r = group_frozen(g);
                if (r != 0)
                        return r;
                uint64_t now = monotonic_ns();
                if (stop || now - t0 > WAIT_BOUND_NS)
                        return -ETIMEDOUT;
                if (use_poll) {
                        struct pollfd p = { .fd = g->done_fd, .events = POLLPRI };
                        int ms = (int) ((t0 + WAIT_BOUND_NS - now) / NSEC_PER_MSEC) + 1;
                        if (poll(&p, 1, ms) < 0 && errno != EINTR)
                                return -errno;
                }
        }
}

/* Until some spinner took a stamp after a gap that ended at or after t0;
 * returns that stamp. */
static int wait_resumed(unsigned n, uint64_t t0, uint64_t *ret) {
        for (;;) {
                uint64_t first = UINT64_MAX;
                for (unsigned i = 0; i < n; i++) {
                        uint64_t r = atomic_load_explicit(&sh->s[i].resume, memory_order_acquire);
                        if (r >= t0 && r < first)
                                first = r;
                }
                if (first != UINT64_MAX) {
                        *ret = first;
                        return 0;
                }
                if (stop || monotonic_ns() - t0 > WAIT_BOUND_NS)
                        return -ETIMEDOUT;
        }
}

static int parse_counts(const char *s, unsigned *counts, unsigned *n) {
        char buf[256];
        snprintf(buf, sizeof(buf), "%s", s);
        *n = 0;
        for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                uint32_t v;
                if (*n >= MAX_COUNTS || parse_uint32(tok, &v) < 0 || v == 0 || v > MAX_THREADS)
                        return -EINVAL;
                counts[(*n)++] = v;
        }
        return *n > 0 ? 0 : -EINVAL;
}

typedef struct Args {
        bool v2, use_poll, anchor;
        unsigned counts[MAX_COUNTS], n_counts;
        uint32_t iterations, priority, spin_priority;
        int cpu, ctl_cpu;
        uint64_t running_ns, frozen_ns, limit_ns;
        const char *root, *label, *out_path;
} Args;

static void read_counts(const char *option, const char *value, void *userdata) {
        Args *a = userdata;

        if (parse_counts(value, a->counts, &a->n_counts) < 0)
                bench_arg_refuse(option, value, "up to %d thread counts from 1 to %d, such as 1,8,64", MAX_COUNTS,
                                 MAX_THREADS);
}

static void parse_argv(int argc, char **argv, Args *ret) {
        static const char usage[] = "Usage: freeze-probe --backend v1|v2 [--root DIR] [--threads 1,8,64] [--iterations N]\n"
                                    "                    [--wait read|poll] [--anchor] [--cpu N] [--ctl-cpu N] [--priority P]\n"
                                    "                    [--spin-priority P]\n"
                                    "                    [--running D] [--frozen D] [--label L] [--out FILE] [--limit D]\n";
        static const char *const backends[] = { "v1", "v2", NULL };
        static const char *const waits[] = { "read", "poll", NULL };
        Args a = {
                .counts = { 1, 8, 64 },
                .n_counts = 3,
                .iterations = 200,
                .priority = 50,
                .spin_priority = 1,
                .cpu = 1,
                .ctl_cpu = 0,
                .running_ns = 3 * NSEC_PER_MSEC,
                .frozen_ns = 7 * NSEC_PER_MSEC,
                .limit_ns = 60 * NSEC_PER_SEC,
        };
        unsigned backend = UINT_MAX, wait_mode = 0; /* backend: none given */
        const BenchOption options[] = {
                BENCH_OPT_CHOICE("backend", &backend, backends),
                BENCH_OPT_STRING("root", &a.root),
                BENCH_OPT_CUSTOM("threads", read_counts, &a),
                BENCH_OPT_UINT32("iterations", &a.iterations, 1, 1000000),
                BENCH_OPT_CHOICE("wait", &wait_mode, waits),
                BENCH_OPT_FLAG("anchor", &a.anchor),
                BENCH_OPT_CPU("cpu", &a.cpu),
                BENCH_OPT_CPU("ctl-cpu", &a.ctl_cpu),
                BENCH_OPT_UINT32("priority", &a.priority, 1, 98),
                BENCH_OPT_UINT32("spin-priority", &a.spin_priority, 0, 49),
                BENCH_OPT_DURATION("running", &a.running_ns),
                BENCH_OPT_DURATION("frozen", &a.frozen_ns),
                BENCH_OPT_STRING("label", &a.label),
                BENCH_OPT_STRING("out", &a.out_path),
                BENCH_OPT_DURATION("limit", &a.limit_ns),
        };

        bench_parse_argv(argc, argv, usage, options, ELEMENTSOF(options));
        if (backend == UINT_MAX)
                bench_usage_error("--backend v1 or v2 is required");
        a.v2 = backend == 1;
        a.use_poll = wait_mode == 1;
        if (a.use_poll && !a.v2)
                bench_usage_error("--wait poll needs the unified hierarchy (v1's freezer.state has no notification)");
        if (!a.label)
                a.label = a.v2 ? (a.use_poll ? "v2-poll" : "v2") : (a.anchor ? "v1-anchor" : "v1");
        *ret = a;
}

/* The controller: real-time on its own CPU, memory locked, so that its
 * waits are not the spinners' CPU. Bounded by the alarm. */
static int become_controller(int ctl_cpu, uint32_t priority) {
        struct sched_param sp = { .sched_priority = (int) priority };

        pin(ctl_cpu);
        if (mlockall(MCL_CURRENT | MCL_FUTURE) < 0)
                fprintf(stderr, "freeze-probe: mlockall: %m (continuing)\n");
        if (sched_setscheduler(0, SCHED_FIFO | SCHED_RESET_ON_FORK, &sp) < 0) {
                fprintf(stderr, "freeze-probe: SCHED_FIFO %u: %m\n", priority);
                return -errno;
        }
        return 0;
}

/* Moves the child into the group, then lets it start its spinners. */
static int enter_group(const Group *g, pid_t child, int go_fd) {
        char path[600], pid_s[32];
        int r;

        snprintf(path, sizeof(path), "%s/cgroup.procs", g->dir);
        snprintf(pid_s, sizeof(pid_s), "%d", child);
        r = write_file(path, pid_s);
        if (r < 0)
                fprintf(stderr, "freeze-probe: moving pid %d into %s: %s\n", child, g->dir, strerror(-r));
        else if (write(go_fd, "g", 1) != 1)
                r = -EIO;
        close(go_fd);
        return r;
}

/* Every spinner running (up to 2 s), then real-time. */
static int wait_spinners(unsigned n) {
        uint64_t deadline = monotonic_ns() + 2 * NSEC_PER_SEC;

        while (atomic_load(&sh->ready) < n && !stop)
                if (monotonic_ns() > deadline) {
                        fprintf(stderr, "freeze-probe: only %u of %u spinners started\n", atomic_load(&sh->ready), n);
                        return -ETIMEDOUT;
                } else
                        usleep(1000);
        /* Started at SCHED_OTHER, so that every one of them ran; now
         * real-time: from here on one runs at a time, the others wait
         * their turn (SCHED_FIFO does not time-slice), as a reservation's
         * threads do in their run. */
        for (unsigned j = 0; spin_priority > 0 && j < n; j++) {
                struct sched_param ssp = { .sched_priority = spin_priority };
                if (sched_setscheduler(atomic_load(&sh->s[j].tid), SCHED_FIFO, &ssp) < 0) {
                        fprintf(stderr, "freeze-probe: SCHED_FIFO %d for spinner %u: %m\n", spin_priority, j);
                        return -errno;
                }
        }
        return 0;
}

/* The iterations for n spinners in g, one line each to out, after a
 * warm-up stretch; *ret_done and *ret_timeouts count them. */
static int iterate(const Args *a, Group *g, unsigned n, FILE *out, uint32_t *ret_done, uint32_t *ret_timeouts) {
        uint64_t next = monotonic_ns() + 50 * NSEC_PER_MSEC;
        uint32_t done = 0, timeouts = 0;
        int r = 0;

        for (uint32_t i = 0; i < a->iterations && !stop; i++) {
                uint64_t resumed = 0;
                sleep_until(next);
                uint64_t t0 = monotonic_ns();
                int k1 = group_freeze(g, true);
                uint64_t t1 = monotonic_ns();
                int k2 = k1 < 0 ? k1 : wait_frozen(g, a->use_poll, t0);
                uint64_t t2 = monotonic_ns();
                uint64_t last = 0;
                for (unsigned j = 0; j < n; j++)
                        last = MAX(last, atomic_load_explicit(&sh->s[j].last, memory_order_acquire));
                sleep_until(t0 + a->frozen_ns);
                uint64_t t3 = monotonic_ns();
                int k3 = group_freeze(g, false);
                uint64_t t4 = monotonic_ns();
                int k4 = k3 < 0 ? k3 : wait_resumed(n, t3, &resumed);
                next = t3 + a->running_ns;
                if (k1 < 0 || k3 < 0) {
                        fprintf(stderr, "freeze-probe: writing %s: %s\n", g->dir, strerror(-(k1 < 0 ? k1 : k3)));
                        r = k1 < 0 ? k1 : k3;
                        break;
                }
                if (k2 < 0 || k4 < 0) {
                        timeouts++;
                        if (stop)
                                break;
                        continue;
                }
                fprintf(out, "%s\t%u\t%" PRIu32 "\t%" PRIu64 "\t%" PRIu64 "\t%" PRId64 "\t%" PRIu64 "\t%" PRIu64 "\n",
                        a->label, n, i, t1 - t0, t2 - t0, (int64_t) (last - t0), t4 - t3, resumed - t3);
                done++;
        }
        fflush(out);
        *ret_done = done;
        *ret_timeouts = timeouts;
        return r;
}

/* One --threads count: a child of n spinners in a group of its own,
 * measured, then thawed, killed, reaped by pid and removed. */
static int probe_count(const Args *a, const char *root, unsigned n, FILE *out) {
        Group g = { .state_fd = -1, .done_fd = -1 };
        uint32_t done = 0, timeouts = 0;
        char name[64];
        int go_fd = -1, r;

        memset(sh->s, 0, sizeof(sh->s));
        atomic_store(&sh->ready, 0);
        snprintf(name, sizeof(name), "pace-bench-freeze.%d-%u", getpid(), n);
        r = group_make(&g, root, name, a->v2);
        if (r < 0) {
                fprintf(stderr, "freeze-probe: group %s: %s\n", g.dir, strerror(-r));
                group_remove(&g);
                return r;
        }
        pid_t child = bench_fork_pipe(false, &go_fd);
        if (child < 0) {
                group_remove(&g);
                return child;
        }
        if (child == 0)
                child_main(go_fd, n, (unsigned) (a->limit_ns / NSEC_PER_SEC));

        r = enter_group(&g, child, go_fd);
        if (r == 0)
                r = wait_spinners(n);
        if (r == 0)
                r = iterate(a, &g, n, out, &done, &timeouts);

        (void) group_freeze(&g, false);
        (void) kill(child, SIGKILL);
        while (waitpid(child, NULL, 0) < 0 && errno == EINTR)
                ;
        group_remove(&g);
        fprintf(stderr, "freeze-probe: %s, %u threads: %" PRIu32 " samples, %" PRIu32 " waits over 1 s\n", a->label, n,
                done, timeouts);
        return r;
}

/* Every --threads count in turn, with the anchor group frozen meanwhile
 * if asked for. */
static int probe_all(const Args *a, const char *root, FILE *out) {
        Group anc = { .state_fd = -1, .done_fd = -1 };
        char name[64];
        int r = 0;

        if (a->anchor) {
                snprintf(name, sizeof(name), "pace-bench-freeze.%d-anchor", getpid());
                r = group_make(&anc, root, name, a->v2);
                if (r < 0 || (r = group_freeze(&anc, true)) < 0)
                        fprintf(stderr, "freeze-probe: anchor group %s: %s\n", anc.dir, strerror(-r));
        }
        for (unsigned k = 0; k < a->n_counts && !stop && r == 0; k++)
                r = probe_count(a, root, a->counts[k], out);
        group_remove(&anc);
        return r;
}

static int run(const Args *a) {
        char root[1024];
        int r;

        spin_cpu = a->cpu;
        spin_priority = (int) a->spin_priority;
        if (a->root)
                snprintf(root, sizeof(root), "%s", a->root);
        else if (find_root(a->v2, root, sizeof(root)) < 0) {
                fprintf(stderr, "freeze-probe: no %s mounted\n", a->v2 ? "cgroup2 hierarchy" : "cgroup v1 freezer");
                return -ENOENT;
        }

        FILE *out = stdout;
        if (a->out_path && !(out = fopen(a->out_path, "ae"))) {
                fprintf(stderr, "freeze-probe: %s: %m\n", a->out_path);
                return -errno;
        }

        struct sigaction sa = { .sa_handler = on_signal };
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGALRM, &sa, NULL);
        alarm((unsigned) (a->limit_ns / NSEC_PER_SEC) + 1);

        sh = mmap(NULL, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (sh == MAP_FAILED)
                r = -errno;
        else {
                /* A spinner's own preemptions are far shorter than a frozen stretch. */
                sh->gap_ns = a->frozen_ns / 2;
                r = become_controller(a->ctl_cpu, a->priority);
                if (r == 0)
                        r = probe_all(a, root, out);
        }
        if (out != stdout)
                fclose(out);
        return r;
}

int main(int argc, char **argv) {
        Args args;

        parse_argv(argc, argv, &args);
        if (run(&args) < 0)
                return 1;
        /* Cut short by a signal or the alarm, without a failure. */
        return stop ? 3 : 0;
}
