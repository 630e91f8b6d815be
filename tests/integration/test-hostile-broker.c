/* SPDX-License-Identifier: MIT */
/* Hostile clients, and a hostile broker, against the real daemons on the
 * real kernel. Every attack runs as an ordinary user (uid 60001, no
 * RLIMIT_RTPRIO, no groups) through the public interface (libpace over the
 * broker's socket, or, for the broker's user, the table file it owns); what
 * is measured is what the *victim* gets: a SCHED_OTHER hog's share of a
 * CPU, or the scheduling state of a process nobody reserved.
 *
 * Root only; 2 CPUs. Each case arms alarm(), kills everything it started by
 * pid and reaps it, and removes the cgroups it finds left behind.
 *
 * Here: a compromised broker. Its user owns the runtime directory and
 * writes the table; the dispatcher must trust neither. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "broker-harness.h"
#include "cpu-share.h"
#include "hostile-harness.h"
#include "macro.h"
#include "pace-table.h"
#include "pace/pace.h"
#include "proc-util.h"
#include "stack-harness.h"
#include "table-shm.h"
#include "test.h"

static bool realtime_policy(int pol) {
        return pol == SCHED_FIFO || pol == SCHED_RR;
}

/* 7. A compromised broker: its user owns the runtime directory and writes
 * the table. The dispatcher must not trust either. */

typedef struct Hostile {
        Stack s;
        int dirfd;
        TableWriter *w;
} Hostile;

/* A runtime directory and configuration as the broker would leave them,
 * a table written here (no broker runs), and the real dispatcher on it. */
static void hostile_start(Hostile *h, const char *json) {
        *h = (Hostile) { .dirfd = -1 };
        alarm(CASE_ALARM_S);
        ASSERT_OK(broker_prepare(&h->s.broker, json));
        h->dirfd = open(h->s.broker.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ASSERT_TRUE(h->dirfd >= 0);
        ASSERT_OK(table_writer_new(h->dirfd, &h->w));
        stack_start_dispatcher(&h->s);
}

static void hostile_stop(Hostile *h) {
        ASSERT_EQ(stack_stop_dispatcher(&h->s), 0);
        h->w = table_writer_free(h->w);
        if (h->dirfd >= 0)
                close(h->dirfd);
        h->dirfd = -1;
        ASSERT_EQ(broker_stop(&h->s.broker), 0);
        alarm(0);
}

/* Case-insensitive search of the dispatcher's log. */
static bool log_mentions(const Stack *s, const char *needle) {
        char path[320], line[1024];
        bool found = false;
        snprintf(path, sizeof(path), "%s/dispatcher.log", s->broker.dir);
        FILE *f = fopen(path, "re");
        while (f && !found && fgets(line, sizeof(line), f))
                found = strcasestr(line, needle) != NULL;
        if (f)
                fclose(f);
        return found;
}

TEST(a_fifo_in_place_of_the_table_does_not_hang_the_dispatcher) {
        Hostile h;
        char path[320];

        if (skip())
                TEST_SKIP("needs root, 2 CPUs and the built daemons");
        hostile_start(&h, STACK_DEFAULT_CONFIG);
        pid_t child = dispatcher_child(&h.s);
        ASSERT_TRUE(child > 0);
        /* A FIFO with no writer: open(O_RDONLY) on it blocks forever. */
        snprintf(path, sizeof(path), "%s/%s", h.s.broker.dir, PACE_TABLE_NAME);
        ASSERT_OK(unlink(path));
        ASSERT_OK(mkfifo(path, 0644));
        sleep_ms(500);
        uint64_t t0 = monotonic_ns();
        kill(h.s.dispatcher, SIGTERM);
        int status = -1;
        bool exited = false;
        while (!exited && monotonic_ns() < t0 + 3 * NSEC_PER_SEC) {
                exited = waitpid(h.s.dispatcher, &status, WNOHANG) == h.s.dispatcher;
                if (!exited)
                        sleep_ms(5);
        }
        double took = (double) (monotonic_ns() - t0) / 1e6;
        if (!exited) {
                /* Hung: both processes, by pid (the child is the monitor's). */
                kill(child, SIGKILL);
                kill(h.s.dispatcher, SIGKILL);
                waitpid(h.s.dispatcher, &status, 0);
        }
        h.s.dispatcher = 0;
        bool refused = log_mentions(&h.s, "regular file");
        printf("  SIGTERM %s; the log %s the table refused as not a regular file\n",
               exited ? "obeyed" : "IGNORED for 3 s (killed)", refused ? "has" : "does not have");
        if (exited)
                printf("  exited after %.0f ms with status %d\n", took, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        hostile_stop(&h);
        ASSERT_TRUE(exited);
        ASSERT_TRUE(refused);
}

/* One reservation of 30 of 50 slots on CPU 1 (runs of 15: within the
 * default non-real-time gap). */
static void publish_one(Hostile *h, pid_t pid, uint32_t uid) {
        static const char pattern[] = "AAAAAAAAAAAAAAA..........AAAAAAAAAAAAAAA..........";
        ProcInfo info;
        ASSERT_OK(proc_info_read("/proc", pid, &info));
        PaceTableBuffer *b = table_writer_begin(h->w);
        uint32_t frame = (uint32_t) strlen(pattern);
        b->slot_ns = 1000 * NSEC_PER_USEC;
        b->n_cpus = 1;
        b->cpus[0] = (PaceTableCpu) { .cpu = STACK_CPU, .frame_slots = frame, .first_slot = 0 };
        b->n_slots = frame;
        b->n_reservations = 1;
        b->next_id = 2;
        b->reservations[0] = (PaceTableReservation) { .id = 1, .pid = pid, .uid = uid, .start_time = info.start_time,
                                                      .cpu = STACK_CPU, .period_slots = frame, .budget_slots = 30,
                                                      .requested_period_ns = 50 * NSEC_PER_MSEC,
                                                      .requested_utilization_ppm = 600000 };
        for (uint32_t i = 0; i < frame; i++)
                b->slots[i] = pattern[i] == 'A' ? 1 : PACE_SLOT_FREE;
        table_writer_publish(h->w);
}

TEST(a_table_naming_a_root_process_as_root_does_not_touch_it) {
        Hostile h;
        cpu_set_t both, now;
        unsigned fifo = 0, reniced = 0, moved = 0, samples = 0;

        if (skip())
                TEST_SKIP("needs root, 2 CPUs and the built daemons");
        /* What the administrator would have to allow explicitly. */
        hostile_start(&h, "{ \"slot_us\": 1000, \"cpus\": [1], \"reserve_root_processes\": false }");
        CPU_ZERO(&both);
        CPU_SET(0, &both);
        CPU_SET(1, &both);
        ASSERT_OK(sched_setaffinity(0, sizeof(both), &both));
        pid_t victim = fork();
        ASSERT_OK(victim);
        if (victim == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                alarm(CHILD_LIFETIME_S);
                for (;;)
                        pause();
        }
        pin(0);
        /* The broker's user has no right to name a root process, and "uid
         * 0" in the table is only its word. */
        publish_one(&h, victim, 0);
        for (uint64_t end = monotonic_ns() + NSEC_PER_SEC; monotonic_ns() < end; samples++) {
                errno = 0;
                int nice_value = getpriority(PRIO_PROCESS, (id_t) victim);
                fifo += realtime_policy(policy_of(victim));
                reniced += nice_value != 0 || errno != 0;
                moved += sched_getaffinity(victim, sizeof(now), &now) < 0 || !CPU_EQUAL(&now, &both);
                usleep(200);
        }
        printf("  a root sleeper named with uid 0, 60%% of CPU 1: of %u samples over 1 s, real-time %u, not nice 0 "
               "%u, affinity changed %u\n", samples, fifo, reniced, moved);
        hostile_stop(&h);
        reap(victim);
        ASSERT_EQ(fifo, 0);
        ASSERT_EQ(reniced, 0);
        ASSERT_EQ(moved, 0);
}

/* Republishing as fast as it can: each generation wakes the dispatch
 * thread of an idle CPU, which copies the whole buffer and validates it at
 * SCHED_FIFO 99. The table is valid (checked first): 300 reservations of 1
 * slot each in a 600-slot frame on CPU 0, of processes that cannot exist
 * (pids above PID_MAX_LIMIT), none on CPU 1. */
#define BIG_RES 300

#define BIG_FRAME 600

static void fill_big(PaceTableBuffer *b) {
        b->slot_ns = 1000 * NSEC_PER_USEC;
        b->n_cpus = 2;
        b->cpus[0] = (PaceTableCpu) { .cpu = 0, .frame_slots = BIG_FRAME, .first_slot = 0 };
        b->cpus[1] = (PaceTableCpu) { .cpu = 1, .frame_slots = 0, .first_slot = BIG_FRAME };
        b->n_slots = BIG_FRAME;
        b->n_reservations = BIG_RES;
        b->next_id = BIG_RES + 1;
        for (uint32_t i = 0; i < BIG_RES; i++)
                b->reservations[i] = (PaceTableReservation) { .id = i + 1, .pid = 5000000 + (int32_t) i, .uid = 0,
                                                              .start_time = 1, .cpu = 0, .period_slots = BIG_FRAME,
                                                              .budget_slots = 1 };
        for (uint32_t s = 0; s < BIG_FRAME; s++)
                b->slots[s] = s % 2 == 0 ? (uint16_t) (s / 2 + 1) : PACE_SLOT_FREE;
}

static _Atomic int flood_stop;

static _Atomic uint64_t flood_count;

static void *flood(void *arg) {
        TableWriter *w = arg;
        pin(0);
        while (!atomic_load_explicit(&flood_stop, memory_order_relaxed)) {
                fill_big(table_writer_begin(w));
                table_writer_publish(w);
                atomic_fetch_add_explicit(&flood_count, 1, memory_order_relaxed);
        }
        return NULL;
}

TEST(a_broker_bumping_the_generation_in_a_loop_costs_other_cpus_nothing) {
        Hostile h;
        pthread_t t;
        double shares[2];

        if (skip())
                TEST_SKIP("needs root, 2 CPUs and the built daemons");
        hostile_start(&h, "{ \"slot_us\": 1000, \"cpus\": [0, 1] }");
        fill_big(table_writer_begin(h.w));
        table_writer_publish(h.w);
        sleep_ms(300);
        bool refused = log_mentions(&h.s, "refus");
        pid_t child = dispatcher_child(&h.s);
        ASSERT_TRUE(child > 0);
        pid_t victim = hog_on(1);
        sleep_ms(200);
        atomic_store(&flood_stop, 0);
        atomic_store(&flood_count, 0);
        ASSERT_EQ(pthread_create(&t, NULL, flood, h.w), 0);
        uint64_t t0 = monotonic_ns();
        /* CPU 1 has no reservation: all of it is the hog's but for the
         * system's own work (10 points). The dispatcher's time is its whole
         * process's (both CPUs' threads): an upper bound of what it takes
         * from CPU 1, which with nothing reserved there should be next to
         * nothing (5%: a copy and a check per frame boundary at most). */
        share_measure(1, (pid_t[]) { victim, child }, 2, 3000, shares);
        atomic_store(&flood_stop, 1);
        pthread_join(t, NULL);
        double rate = (double) atomic_load(&flood_count) / ((double) (monotonic_ns() - t0) / 1e9);
        printf("  %.0f generations/s for 3 s: on CPU 1 the hog got %.2f%%, the dispatcher %.2f%%\n", rate, shares[0],
               shares[1]);
        reap(victim);
        hostile_stop(&h);
        ASSERT_FALSE(refused); /* a valid table: the cost is not a refusal's */
        ASSERT_CMP(shares[0], >=, 90.0);
        ASSERT_CMP(shares[1], <=, 5.0);
}

TEST_MAIN()
