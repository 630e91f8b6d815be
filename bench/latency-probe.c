/* SPDX-License-Identifier: MIT */
/* latency-probe: a pace client that measures its own dispatch latency, the
 * time from the start of one of its runs in the dispatch table until it
 * really runs.
 *
 * It reserves (period, utilization) on a CPU, reads the dispatch table to
 * learn which slots it owns (the global grid: slot g = CLOCK_MONOTONIC /
 * slot_ns, table slot = g mod frame), then spins reading CLOCK_MONOTONIC. For
 * every run start S (a slot it owns after one it does not) the first reading
 * at or after S is when it ran again; the difference is one sample (a start
 * it slept through entirely is "missed" and its sample is its whole delay,
 * up to the run in which it did run). Meant
 * for strict mode ("waiting": "freeze"), where the client gets no CPU at all
 * between its runs, so the first reading after S is the wake-up.
 *
 *   latency-probe --cpu N [--period 2ms] [--util 50%]
 *                 [--threads K] [--duration 5s] [--warmup 300ms] [--out FILE]
 *                 [--freeze-out FILE]
 *
 * --threads K: K - 1 more threads that only sleep, so the dispatcher moves
 * K threads at every switch (the measuring thread is one of them).
 *
 * Writes one latency in ns per line to FILE and a summary line to stdout:
 *   samples=N missed=N offcpu=N median_ns=N p99_ns=N p999_ns=N max_ns=N
 * missed: run starts at which the client did not run at all before the next
 * one (their samples are in FILE); offcpu: samples taken on another CPU than
 * the one intended.
 *
 * --freeze-out FILE: the other edge (bench/backends). For every run end E
 * (a slot it owns followed by one it does not) the freeze lag is its last
 * reading before the next run start minus E: how long it still ran after
 * its run was over. One signed value in ns per line (negative: it had
 * stopped before E: preempted, or, in a VM, the exit that delivers the
 * dispatcher's timer interrupt); the summary line then also has
 *   freeze_samples=N freeze_late=N freeze_median_ns=N freeze_p99_ns=N freeze_max_ns=N
 * (signed percentiles; late: how many were above 0). */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* pace.h before pace-table.h: the table's PACE_SCOPE_* macros would
 * otherwise rewrite pace.h's enum of the same names. */
#include "pace/pace.h"
#include "bench-util.h"
#include "macro.h"
#include "pace-table.h"
#include "parse-util.h"
#include "table-shm.h"

#define MAX_RUNS 65536

typedef struct Schedule {
        uint64_t slot_ns;
        uint32_t frame_slots;
        uint32_t n_starts;
        uint32_t starts[MAX_RUNS]; /* frame offsets of run starts, ascending */
        uint32_t n_ends;
        uint32_t ends[MAX_RUNS]; /* frame offsets just after a run's last slot, ascending (up to frame_slots) */
} Schedule;

/* The first of the frame offsets `offs` (ascending), repeated every frame,
 * at or after t. */
static uint64_t next_at(const Schedule *s, const uint32_t *offs, uint32_t n, uint64_t t) {
        uint64_t g = t / s->slot_ns, base = g - g % s->frame_slots;

        for (int lap = 0; lap < 2; lap++, base += s->frame_slots)
                for (uint32_t i = 0; i < n; i++) {
                        uint64_t at = (base + offs[i]) * s->slot_ns;
                        if (at >= t)
                                return at;
                }
        return UINT64_MAX; /* not reached: n > 0 */
}

/* The first run start at or after t. */
static uint64_t next_start(const Schedule *s, uint64_t t) {
        return next_at(s, s->starts, s->n_starts, t);
}

/* The first run end at or after t. */
static uint64_t next_end(const Schedule *s, uint64_t t) {
        return next_at(s, s->ends, s->n_ends, t);
}

/* Finds the reservation `id` on `cpu` in the published table and lists where
 * its runs start. -ENOENT while the table does not hold it yet. */
static int read_schedule(const char *path, uint64_t id, int cpu, Schedule *ret) {
        _cleanup_(table_reader_freep) TableReader *r = NULL;
        _cleanup_free_ PaceTableBuffer *b = malloc(sizeof(PaceTableBuffer));
        uint64_t gen;
        int k;

        if (!b)
                return -ENOMEM;
        k = table_reader_open(path, &r);
        if (k < 0)
                return k;
        k = table_reader_snapshot_retry(r, b, &gen);
        if (k < 0)
                return k;

        uint32_t owner = 0;
        for (uint32_t i = 0; i < b->n_reservations && i < PACE_MAX_RESERVATIONS; i++)
                if (b->reservations[i].id == id && b->reservations[i].cpu == cpu)
                        owner = i + 1;
        if (owner == 0)
                return -ENOENT;
        for (uint32_t c = 0; c < b->n_cpus && c < PACE_MAX_CPUS; c++) {
                const PaceTableCpu *tc = &b->cpus[c];
                if (tc->cpu != cpu)
                        continue;
                if (tc->frame_slots == 0 || (uint64_t) tc->first_slot + tc->frame_slots > PACE_TABLE_MAX_SLOTS)
                        return -EBADMSG;
                const uint16_t *slots = b->slots + tc->first_slot;
                uint32_t f = tc->frame_slots;
                ret->slot_ns = b->slot_ns;
                ret->frame_slots = f;
                ret->n_starts = ret->n_ends = 0;
                for (uint32_t s = 0; s < f; s++) {
                        if (slots[s] == owner && slots[(s + f - 1) % f] != owner && ret->n_starts < MAX_RUNS)
                                ret->starts[ret->n_starts++] = s;
                        if (slots[s] == owner && slots[(s + 1) % f] != owner && ret->n_ends < MAX_RUNS)
                                ret->ends[ret->n_ends++] = s + 1;
                }
                return ret->n_starts > 0 && ret->n_ends > 0 && ret->slot_ns > 0 ? 0 : -EBADMSG;
        }
        return -ENOENT;
}

static int cmp_i64(const void *a, const void *b) {
        int64_t x = *(const int64_t *) a, y = *(const int64_t *) b;
        return (x > y) - (x < y);
}

static int pin_self(int cpu) {
        cpu_set_t set;

        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        return sched_setaffinity(0, sizeof(set), &set) < 0 ? -errno : 0;
}

static int sleeper_fd = -1;

static void *sleeper(void *arg) {
        char c;
        /* Blocks until the process exits: the pipe's write end stays open. */
        while (read(sleeper_fd, &c, 1) < 0 && errno == EINTR)
                ;
        return NULL;
}

typedef struct Args {
        int cpu;
        uint64_t period_ns, duration_ns, warmup_ns;
        uint32_t util_ppm, threads;
        const char *out_path, *freeze_path;
        char table_path[PATH_MAX];
} Args;

/* The broker publishes the table beside its socket. */
static void table_path_from_env(char *buf, size_t size) {
        const char *sock = getenv("PACE_SOCKET");
        const char *slash = sock ? strrchr(sock, '/') : NULL;

        if (!slash)
                bench_usage_error("set PACE_SOCKET or --table");
        snprintf(buf, size, "%.*s/%s", (int) (slash - sock), sock, PACE_TABLE_NAME);
}

static void parse_argv(int argc, char **argv, Args *ret) {
        static const char usage[] = "Usage: latency-probe --cpu N [--period D] [--util U] [--threads K]\n"
                                    "                     [--duration D] [--warmup D] [--out FILE] [--table PATH]\n"
                                    "                     [--freeze-out FILE]\n";
        Args a = {
                .cpu = -1,
                .period_ns = 2 * NSEC_PER_MSEC,
                .duration_ns = 5 * NSEC_PER_SEC,
                .warmup_ns = 300 * NSEC_PER_MSEC,
                .util_ppm = 500000,
                .threads = 1,
        };
        const char *table = NULL;
        const BenchOption options[] = {
                BENCH_OPT_CPU("cpu", &a.cpu),
                BENCH_OPT_DURATION("period", &a.period_ns),
                BENCH_OPT_UTILIZATION("util", &a.util_ppm),
                BENCH_OPT_UINT32("threads", &a.threads, 1, 1024),
                BENCH_OPT_DURATION("duration", &a.duration_ns),
                BENCH_OPT_DURATION("warmup", &a.warmup_ns),
                BENCH_OPT_STRING("out", &a.out_path),
                BENCH_OPT_STRING("table", &table),
                BENCH_OPT_STRING("freeze-out", &a.freeze_path),
        };

        bench_parse_argv(argc, argv, usage, options, ELEMENTSOF(options));
        if (a.cpu < 0)
                bench_usage_error("--cpu is required");
        if (table && table[0])
                snprintf(a.table_path, sizeof(a.table_path), "%s", table);
        else
                table_path_from_env(a.table_path, sizeof(a.table_path));
        *ret = a;
}

/* threads - 1 threads that only sleep, for the dispatcher to move. */
static int start_sleepers(uint32_t threads) {
        int pipefd[2];

        if (pipe(pipefd) < 0)
                return -errno;
        sleeper_fd = pipefd[0];
        for (uint32_t i = 1; i < threads; i++) {
                pthread_t th;
                pthread_attr_t attr;
                pthread_attr_init(&attr);
                pthread_attr_setstacksize(&attr, 64 * 1024);
                int r = pthread_create(&th, &attr, sleeper, NULL);
                pthread_attr_destroy(&attr);
                if (r != 0) {
                        fprintf(stderr, "latency-probe: pthread_create: %s\n", strerror(r));
                        return -r;
                }
        }
        return 0;
}

static int reserve(const Args *a, pace_grant *ret) {
        pace *p = NULL;
        int r;

        r = pace_connect(NULL, &p);
        if (r < 0) {
                fprintf(stderr, "latency-probe: cannot connect to pace-broker: %s\n", pace_strerror(r));
                return r;
        }
        r = pace_reserve(p, &(pace_reserve_params) { .period_ns = a->period_ns, .utilization_ppm = a->util_ppm, .cpu = a->cpu },
                         ret);
        if (r < 0)
                fprintf(stderr, "latency-probe: reservation refused: %s\n",
                        pace_last_message() ? pace_last_message() : pace_strerror(r));
        pace_close(p);
        return r;
}

/* The table may not hold a new reservation yet: up to 2 s. */
static int wait_schedule(const char *table_path, const pace_grant *g, Schedule *ret) {
        uint64_t give_up = monotonic_ns() + 2 * NSEC_PER_SEC;
        int r;

        while ((r = read_schedule(table_path, g->id, g->cpu, ret)) == -ENOENT && monotonic_ns() < give_up)
                usleep(1000);
        if (r < 0)
                fprintf(stderr, "latency-probe: cannot find reservation %" PRIu64 " in %s: %s\n", g->id, table_path,
                        strerror(-r));
        return r;
}

/* The first promotion: measuring starts once the dispatcher holds us. */
static int wait_promoted(void) {
        uint64_t give_up = monotonic_ns() + 3 * NSEC_PER_SEC;

        while ((sched_getscheduler(0) & ~SCHED_RESET_ON_FORK) != SCHED_FIFO)
                if (monotonic_ns() > give_up) {
                        fprintf(stderr, "latency-probe: never promoted (is the dispatcher running?)\n");
                        return -ETIMEDOUT;
                }
        return 0;
}

typedef struct Samples {
        size_t cap;
        uint64_t *lat; /* one dispatch latency per run start */
        size_t n, missed, offcpu;
        int64_t *flag; /* one freeze lag per run end; NULL: not measured */
        size_t nf;
} Samples;

/* Spins from begin to end, reading the clock. The loop works on locals:
 * a store to the arrays could otherwise alias the counts and cost it a
 * reload, and the loop's period is the probe's resolution. */
static void measure(const Schedule *s, int cpu, uint64_t begin, uint64_t end, Samples *m) {
        uint64_t *lat = m->lat;
        int64_t *flag = m->flag;
        size_t cap = m->cap, n = 0, missed = 0, offcpu = 0, nf = 0;

        while (monotonic_ns() < begin)
                ;
        uint64_t prev = monotonic_ns();
        uint64_t next = next_start(s, prev + 1);
        /* The run end being watched, and the run start after it: the last
         * reading before that start is the last one of the run. */
        uint64_t fend = next_end(s, prev + 1), fnext = next_start(s, fend);
        for (;;) {
                uint64_t t = monotonic_ns();
                if (flag && t >= fnext) {
                        if (nf < cap)
                                flag[nf++] = (int64_t) (prev - fend);
                        fend = next_end(s, t);
                        fnext = next_start(s, fend);
                }
                prev = t;
                if (t < next)
                        continue;
                /* Every run start up to now gets its sample, even one the
                 * client slept through entirely: like cyclictest's, a late
                 * wake-up counts with its whole delay. */
                bool here = sched_getcpu() == cpu;
                for (uint64_t at = next;;) {
                        if (n < cap) {
                                lat[n++] = t - at;
                                offcpu += !here;
                        }
                        uint64_t nn = next_start(s, at + 1);
                        if (nn > t) {
                                next = nn;
                                break;
                        }
                        missed++;
                        at = nn;
                }
                if (t >= end)
                        break;
        }
        m->n = n;
        m->missed = missed;
        m->offcpu = offcpu;
        m->nf = nf;
}

/* bench_write_samples(), for signed values. */
static int write_freeze_lags(const char *path, const int64_t *flag, size_t n) {
        FILE *f = fopen(path, "we");

        if (!f) {
                fprintf(stderr, "latency-probe: cannot write %s: %m\n", path);
                return -errno;
        }
        for (size_t i = 0; i < n; i++)
                fprintf(f, "%" PRId64 "\n", flag[i]);
        return fclose(f) != 0 ? -errno : 0;
}

/* The summary line; sorts the samples. */
static void print_summary(Samples *m, const Schedule *s, const pace_grant *g) {
        uint64_t *lat = m->lat, frame_ns = s->frame_slots * s->slot_ns;
        size_t n = m->n;

        qsort(lat, n, sizeof(uint64_t), cmp_u64);
        printf("samples=%zu missed=%zu offcpu=%zu median_ns=%" PRIu64 " p99_ns=%" PRIu64 " p999_ns=%" PRIu64
               " max_ns=%" PRIu64 " runs_per_frame=%" PRIu32 " frame_ns=%" PRIu64 " grant_period_ns=%" PRIu64
               " grant_budget_ns=%" PRIu64,
               n, m->missed, m->offcpu, bench_percentile(lat, n, 0.5), bench_percentile(lat, n, 0.99),
               bench_percentile(lat, n, 0.999), n ? lat[n - 1] : 0, s->n_starts, frame_ns, g->period_ns, g->budget_ns);
        if (m->flag) {
                int64_t *flag = m->flag;
                size_t nf = m->nf, late = 0;
                for (size_t i = 0; i < nf; i++)
                        late += flag[i] > 0;
                qsort(flag, nf, sizeof(int64_t), cmp_i64);
                /* bench_percentile's nearest rank, on signed values. */
                size_t i50 = nf ? MIN((size_t) (0.5 * (double) (nf - 1) + 0.5), nf - 1) : 0;
                size_t i99 = nf ? MIN((size_t) (0.99 * (double) (nf - 1) + 0.5), nf - 1) : 0;
                printf(" freeze_samples=%zu freeze_late=%zu freeze_median_ns=%" PRId64 " freeze_p99_ns=%" PRId64
                       " freeze_max_ns=%" PRId64,
                       nf, late, nf ? flag[i50] : 0, nf ? flag[i99] : 0, nf ? flag[nf - 1] : 0);
        }
        printf("\n");
}

static int run(const Args *a) {
        pace_grant g;
        int r;

        /* A bound on everything, even a client stuck at SCHED_FIFO. */
        alarm((unsigned) ((a->duration_ns + a->warmup_ns) / NSEC_PER_SEC) + 20);

        r = pin_self(a->cpu);
        if (r < 0) {
                fprintf(stderr, "latency-probe: cannot pin to CPU %d: %s\n", a->cpu, strerror(-r));
                return r;
        }
        r = start_sleepers(a->threads);
        if (r < 0)
                return r;
        r = reserve(a, &g);
        if (r < 0)
                return r;

        _cleanup_free_ Schedule *s = malloc(sizeof(Schedule));
        if (!s)
                return -ENOMEM;
        r = wait_schedule(a->table_path, &g, s);
        if (r < 0)
                return r;
        r = wait_promoted();
        if (r < 0)
                return r;

        uint64_t begin = monotonic_ns() + a->warmup_ns, end = begin + a->duration_ns;
        /* Every run start could be sampled; twice that is room enough. Freeze
         * lags: one per run end at most, as many as run starts. */
        uint64_t frame_ns = s->frame_slots * s->slot_ns;
        size_t cap = (size_t) (a->duration_ns / frame_ns + 2) * s->n_starts * 2 + 16;
        _cleanup_free_ uint64_t *lat = calloc(cap, sizeof(uint64_t));
        _cleanup_free_ int64_t *flag = a->freeze_path ? calloc(cap, sizeof(int64_t)) : NULL;
        if (!lat || (a->freeze_path && !flag))
                return -ENOMEM;
        Samples m = { .cap = cap, .lat = lat, .flag = flag };
        measure(s, a->cpu, begin, end, &m);

        if (a->out_path && (r = bench_write_samples(a->out_path, lat, m.n)) < 0)
                return r;
        if (a->freeze_path && (r = write_freeze_lags(a->freeze_path, flag, m.nf)) < 0)
                return r;
        print_summary(&m, s, &g);
        return 0;
}

int main(int argc, char **argv) {
        Args args;

        parse_argv(argc, argv, &args);
        return run(&args) < 0 ? 1 : 0;
}
