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
 * Here: thread count and thread churn. Whatever the dispatcher does per
 * thread of a reservation, at every promotion, at SCHED_FIFO 99, is paid by
 * the CPU's other processes. A thread the kernel runs in the real-time
 * class behind a non-real-time policy, which no policy check sees. And
 * threads past max_threads_per_reservation, which wait at SCHED_IDLE. */
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

/* 3 and 4. Thread count and thread churn: whatever the dispatcher does per
 * thread of a reservation, at every promotion, at SCHED_FIFO 99, is paid by
 * the CPU's other processes. */

#define MANY_THREADS 10000

static void *sleeper_thread(void *arg) {
        for (;;)
                pause();
        return NULL;
}

static void many_threads_attacker(void) {
        pthread_attr_t attr;
        pthread_t t;
        (void) attacker_reserve(20, 100000, PACE_SCOPE_PROCESS, 0);
        if (pthread_create(&t, NULL, spinner_thread, NULL) != 0)
                _exit(4);
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, 16 * 1024);
        pthread_attr_setguardsize(&attr, 0);
        for (unsigned i = 0; i < MANY_THREADS; i++) {
                if (pthread_create(&t, &attr, sleeper_thread, NULL) != 0) {
                        atomic_store(&sh->err, errno ?: EAGAIN);
                        break;
                }
                atomic_store(&sh->threads, i + 1);
        }
        atomic_store(&sh->promoted, 1); /* done creating */
        for (;;)
                pause();
}

/* Lives about 1 ms, asleep: the churn is bounded by how fast the
 * attacker can create threads, not by their work. */
static _Atomic int churn_alive;

static void *short_thread(void *arg) {
        sleep_ms(1);
        atomic_fetch_sub(&churn_alive, 1);
        return NULL;
}

/* Keeps 8 short-lived threads alive, replacing each as it exits; the main
 * thread spins when it has nothing to replace. */
static void churn_attacker(void) {
        pthread_attr_t attr;
        (void) attacker_reserve(20, 100000, PACE_SCOPE_PROCESS, 0);
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, 16 * 1024);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        atomic_store(&sh->promoted, 1);
        for (;;) {
                pthread_t t;
                if (atomic_load(&churn_alive) >= 8)
                        continue;
                atomic_fetch_add(&churn_alive, 1);
                if (pthread_create(&t, &attr, short_thread, NULL) != 0) {
                        atomic_fetch_sub(&churn_alive, 1);
                        continue;
                }
                atomic_fetch_add_explicit(&sh->threads, 1, memory_order_relaxed);
        }
}

/* A thread that is in the real-time class behind its policy already, one
 * the dispatch loop does not hold (max_threads_per_reservation 1): only the
 * main thread's look at every thread of the reserved processes finds it.
 * The test makes one as the kernel does, by flipping a thread that creates
 * threads between SCHED_OTHER without the flag and SCHED_FIFO with it. */
/* sched_setattr()'s argument, as the kernel defines it (version 0). */
typedef struct LeakSchedAttr {
        uint32_t size, policy;
        uint64_t flags;
        int32_t nice;
        uint32_t priority;
        uint64_t runtime, deadline, period;
} LeakSchedAttr;

static bool self_leaked(void) {
        char path[64], buf[1024];
        snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int) syscall(SYS_gettid));
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
        if (fd >= 0)
                close(fd);
        if (n <= 0)
                return false;
        buf[n] = '\0';
        const char *p = strrchr(buf, ')');
        long field[40] = {};
        for (unsigned k = 0; p && k < ELEMENTSOF(field); k++) {
                p = strchr(p + 1, ' ');
                if (p)
                        field[k] = strtol(p + 1, NULL, 10);
        }
        /* field[k] is field k + 3: priority 18, policy 41. */
        return field[15] < 0 && field[38] != SCHED_FIFO && field[38] != SCHED_RR;
}

static void *leak_child(void *arg) {
        if (!self_leaked()) {
                if (arg)
                        _exit(0);
                return NULL;
        }
        /* The one: says so, then sleeps (no CPU taken at its real-time
         * priority) and looks at itself every 2 ms until it is put back. */
        if (atomic_exchange(&sh->tid, (pid_t) syscall(SYS_gettid)) != 0)
                return NULL;
        uint64_t seen = monotonic_ns();
        while (self_leaked())
                sleep_ms(2);
        atomic_store(&sh->counter, monotonic_ns() - seen);
        atomic_store(&sh->thread_exit, 1);
        for (;;)
                pause();
}

/* arg non-NULL: child processes instead of threads, which a process-scope
 * reservation does not hold either. */
static void leak_maker(const void *arg) {
        atomic_store(&sh->threads, (unsigned) syscall(SYS_gettid));
        /* One thread when it is reserved: the broker refuses a process with
         * more than max_threads_per_reservation. */
        while (!atomic_load(&sh->release))
                sleep_ms(1);
        if (arg)
                signal(SIGCHLD, SIG_IGN); /* the children that are not the one */
        while (atomic_load(&sh->tid) == 0) {
                pthread_t t;
                if (!arg) {
                        if (pthread_create(&t, NULL, leak_child, NULL) == 0)
                                pthread_detach(t);
                } else if (fork() == 0) {
                        (void) leak_child((void *) arg);
                        _exit(0);
                }
                sleep_ms(0);
        }
        for (;;)
                pause();
}

static void leaked_one_is_put_back(bool child_processes) {
        LeakSchedAttr other = { .size = sizeof(LeakSchedAttr), .policy = SCHED_OTHER };
        LeakSchedAttr fifo = { .size = sizeof(LeakSchedAttr), .policy = SCHED_FIFO, .priority = 98,
                               .flags = 1 /* SCHED_FLAG_RESET_ON_FORK */ };
        Stack s = {};
        pace *p = NULL;
        pace_grant g;

        if (skip())
                TEST_SKIP("needs root, 2 CPUs and the built daemons");
        alarm(CASE_ALARM_S);
        shared_reset();
        stack_start_with(&s, "{ \"slot_us\": 1000, \"cpus\": [1], \"reserve_root_processes\": true, "
                             "\"max_threads_per_reservation\": 1 }");
        pid_t client = spawn(leak_maker, child_processes ? "processes" : NULL);
        for (int i = 0; i < 500 && atomic_load(&sh->threads) == 0; i++)
                sleep_ms(1);
        pid_t maker = (pid_t) atomic_load(&sh->threads);
        ASSERT_TRUE(maker > 0);
        /* Reserved first, with its one thread, which is all the dispatch
         * loop holds (max_threads_per_reservation 1): the threads it makes
         * are never registered, so only the main thread's look can find
         * the one the kernel puts in the real-time class. */
        ASSERT_OK(pace_connect(s.broker.socket, &p));
        pace_reserve_params params = { .period_ns = 20 * NSEC_PER_MSEC, .utilization_ppm = 200000, .pid = client,
                                       .cpu = STACK_CPU };
        ASSERT_OK(pace_reserve(p, &params, &g));
        atomic_store(&sh->release, 1);
        /* Flipped from CPU 0 for up to 5 s, 50 us real-time at a time. */
        uint64_t end = monotonic_ns() + 5 * NSEC_PER_SEC;
        unsigned flips = 0;
        while (atomic_load(&sh->tid) == 0 && monotonic_ns() < end) {
                (void) syscall(SYS_sched_setattr, maker, &other, 0);
                usleep(200);
                (void) syscall(SYS_sched_setattr, maker, &fifo, 0);
                usleep(50);
                flips++;
        }
        (void) syscall(SYS_sched_setattr, maker, &other, 0);
        pid_t leaked = atomic_load(&sh->tid);
        printf("  %u flips of the thread that creates %s: %s\n", flips, child_processes ? "processes" : "threads",
               leaked ? "one child in the real-time class behind SCHED_OTHER" : "no such child");
        if (leaked == 0) {
                pace_close(p);
                reap(client);
                stack_stop(&s);
                TEST_SKIP("the kernel made no such child in 5 s (the race it needs did not happen)");
        }
        /* The look comes every second, spaced at least 200 times what it
         * took (dispatcher.c): the storm of short-lived children that makes
         * the race can stretch the one after it to a few seconds. */
        unsigned bound_ms = child_processes ? 6500 : 2500;
        bool put_back = wait_flag(&sh->thread_exit, 1, bound_ms + 1500);
        double after_ms = (double) atomic_load(&sh->counter) / 1e6;
        char line[512] = "";
        int logged = dispatcher_log_line(&s, "real-time class behind", line, sizeof(line));
        pace_close(p);
        reap(client);
        if (child_processes) {
                /* Not the client's thread but its own process: out of the
                 * real-time class first, or a group without real-time
                 * runtime would keep it from dying. */
                (void) syscall(SYS_sched_setattr, leaked, &other, 0);
                (void) kill(leaked, SIGKILL);
                for (int i = 0; i < 1000 && kill(leaked, 0) == 0; i++)
                        sleep_ms(1);
        }
        stack_stop(&s);
        alarm(0);
        printf("  put back in its own class %s (%.0f ms after it saw itself there); dispatcher: %s\n",
               put_back ? "yes" : "no", after_ms, logged > 0 ? line : "(nothing)");
        /* Threads: 2 s allows one late round. */
        ASSERT_TRUE(put_back);
        ASSERT_CMP(after_ms, <=, (double) bound_ms);
        ASSERT_EQ(logged, 1);
}

TEST(a_thread_in_the_real_time_class_behind_its_policy_is_put_back) {
        leaked_one_is_put_back(false);
}

/* A process-scope reservation holds one process; a child it forks as it is
 * promoted is none of its members, and the look once walked a tree's
 * descendants only: that child stayed real-time for as long as it lived. */
TEST(a_child_process_in_the_real_time_class_behind_its_policy_is_put_back) {
        leaked_one_is_put_back(true);
}

/* Threads past max_threads_per_reservation: never promoted, and parked at
 * SCHED_IDLE meanwhile (held.c, held_park()), so that where no cpu
 * controller weighs a reservation's members down they do not take the
 * free time from everyone else; what they had comes back with the end of
 * the reservation. */
#define CAP_EXTRA_THREADS 6

static void *cap_sleeper(void *arg) {
        for (;;)
                pause();
        return NULL;
}

static void cap_client(const void *arg) {
        /* One thread when it is reserved (the broker refuses a process
         * with more than the cap), the rest once told. */
        while (!atomic_load(&sh->release))
                sleep_ms(1);
        for (int i = 0; i < CAP_EXTRA_THREADS; i++) {
                pthread_t t;
                if (pthread_create(&t, NULL, cap_sleeper, NULL) == 0)
                        atomic_fetch_add(&sh->threads, 1);
        }
        for (;;)
                pause();
}

/* Threads of pid at SCHED_IDLE, and threads at SCHED_OTHER nice 0. */
static void count_policies(pid_t pid, unsigned *ret_idle, unsigned *ret_plain) {
        char path[64];
        *ret_idle = *ret_plain = 0;
        snprintf(path, sizeof(path), "/proc/%d/task", (int) pid);
        DIR *d = opendir(path);
        for (struct dirent *de; d && (de = readdir(d));) {
                pid_t tid = atoi(de->d_name);
                if (tid <= 0)
                        continue;
                int pol = policy_of(tid);
                errno = 0;
                int nice = getpriority(PRIO_PROCESS, (id_t) tid);
                *ret_idle += pol == SCHED_IDLE;
                *ret_plain += pol == SCHED_OTHER && errno == 0 && nice == 0;
        }
        if (d)
                closedir(d);
}

TEST(threads_past_the_cap_wait_at_sched_idle_and_get_their_policy_back) {
        Stack s = {};
        pace *p = NULL;
        pace_grant g;
        unsigned idle = 0, plain = 0;

        if (skip())
                TEST_SKIP("needs root, 2 CPUs and the built daemons");
        alarm(CASE_ALARM_S);
        shared_reset();
        stack_start_with(&s, "{ \"slot_us\": 1000, \"cpus\": [1], \"reserve_root_processes\": true, "
                             "\"max_threads_per_reservation\": 2 }");
        pid_t client = spawn(cap_client, NULL);
        ASSERT_OK(pace_connect(s.broker.socket, &p));
        pace_reserve_params params = { .period_ns = 20 * NSEC_PER_MSEC, .utilization_ppm = 100000, .pid = client,
                                       .cpu = STACK_CPU };
        ASSERT_OK(pace_reserve(p, &params, &g));
        atomic_store(&sh->release, 1);
        /* 7 threads, 2 registered: 5 past the cap. The main thread lists a
         * process again within its quiet time (200 ms) of a change. */
        uint64_t t0 = monotonic_ns(), end = t0 + 3 * NSEC_PER_SEC;
        while (monotonic_ns() < end) {
                count_policies(client, &idle, &plain);
                if (atomic_load(&sh->threads) == CAP_EXTRA_THREADS && idle >= CAP_EXTRA_THREADS - 1)
                        break;
                sleep_ms(10);
        }
        double parked_ms = (double) (monotonic_ns() - t0) / 1e6;
        unsigned idle_reserved = idle, plain_reserved = plain;
        /* The end of the reservation gives them back what they had. */
        ASSERT_OK(pace_release(p, g.id));
        t0 = monotonic_ns();
        end = t0 + 3 * NSEC_PER_SEC;
        while (monotonic_ns() < end) {
                count_policies(client, &idle, &plain);
                if (idle == 0 && plain == CAP_EXTRA_THREADS + 1)
                        break;
                sleep_ms(10);
        }
        double back_ms = (double) (monotonic_ns() - t0) / 1e6;
        pace_close(p);
        reap(client);
        stack_stop(&s);
        alarm(0);
        printf("  %u threads, cap 2: %u at SCHED_IDLE after %.0f ms (%u at SCHED_OTHER nice 0); released: %u at "
               "SCHED_IDLE, %u at SCHED_OTHER nice 0 after %.0f ms\n",
               atomic_load(&sh->threads) + 1, idle_reserved, parked_ms, plain_reserved, idle, plain, back_ms);
        ASSERT_EQ(idle_reserved, CAP_EXTRA_THREADS - 1);
        ASSERT_EQ(idle, 0);
        ASSERT_EQ(plain, CAP_EXTRA_THREADS + 1);
}

/* The dispatcher's real-time thread for cpu: SCHED_FIFO, held to it. */
static pid_t dispatch_thread_of(pid_t pid, int cpu) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/task", (int) pid);
        DIR *d = opendir(path);
        pid_t found = 0;
        for (struct dirent *de; d && !found && (de = readdir(d));) {
                pid_t tid = (pid_t) atoi(de->d_name);
                cpu_set_t set;
                if (tid <= 0 || policy_of(tid) != SCHED_FIFO || sched_getaffinity(tid, sizeof(set), &set) < 0)
                        continue;
                if (CPU_COUNT(&set) == 1 && CPU_ISSET(cpu, &set))
                        found = tid;
        }
        if (d)
                closedir(d);
        return found;
}

/* The hog on CPU 1 next to an attacker reserved (20 ms, 10%) there. */
static void run_cpu1_cost_attack(void (*fn)(void), const char *what, unsigned wait_s) {
        Stack s = {};
        double shares[3];

        alarm(CASE_ALARM_S);
        shared_reset();
        stack_start(&s);
        pid_t child = dispatcher_child(&s);
        ASSERT_TRUE(child > 0);
        pid_t bad = attacker(fn);
        await_reserved();
        for (unsigned i = 0; i < wait_s * 100 && !atomic_load(&sh->promoted); i++)
                sleep_ms(10);
        pid_t victim = hog_on(STACK_CPU);
        sleep_ms(500);
        unsigned t0 = atomic_load(&sh->threads);
        uint64_t w0 = monotonic_ns();
        /* Granted 10%: 90% is free, less the switch costs. The hog keeps 80
         * (10 points for the nice-19 leftovers of a spinning client and the
         * dispatcher's fair cost); the dispatcher's own time stays under 3%
         * (a single-threaded client costs it 0.1-0.2%, dispatcher/README.md). */
        pid_t rt = dispatch_thread_of(child, STACK_CPU);
        ASSERT_TRUE(rt > 0);
        /* A window a noisy host spoiled (a CI run once saw the process at
         * 6.31% where 4.6% is usual) is measured once more; a dispatcher
         * that costs too much fails both. */
        double rt_share = 0;
        for (int attempt = 0; attempt < 2; attempt++) {
                uint64_t rt0 = thread_cpu_ns(child, rt), rw0 = monotonic_ns();
                share_measure(STACK_CPU, (pid_t[]) { victim, child, bad }, 3, 3000, shares);
                rt_share = 100.0 * (double) (thread_cpu_ns(child, rt) - rt0) / (double) (monotonic_ns() - rw0);
                double rate = (double) (atomic_load(&sh->threads) - t0) / ((double) (monotonic_ns() - w0) / 1e9);
                printf("  %s: %u threads created (%.0f/s while measured, errno %d); over 3 s on CPU 1: hog %.2f%%, "
                       "dispatch thread (FIFO 99) %.2f%%, dispatcher process (all CPUs) %.2f%%, attacker %.2f%%\n",
                       what, atomic_load(&sh->threads), rate, atomic_load(&sh->err), shares[0], rt_share, shares[1],
                       shares[2]);
                if (rt_share <= 5.0 && shares[1] <= 6.0 && shares[0] >= 80.0)
                        break;
        }
        reap(bad);
        reap(victim);
        stack_stop(&s);
        alarm(0);
        /* What runs at FIFO 99 on the attacker's CPU; the rest of the
         * process (its main thread's group housekeeping, SCHED_OTHER,
         * bounded at 2% of a CPU) may run anywhere. */
        /* Whatever the thread count, it moves at most
         * max_threads_per_reservation (32) threads per switch: about 100 us
         * per switch here at 200 switches/s, 2%. The 10,000-thread client
         * cost it 25.6% before its lists moved off this thread. */
        ASSERT_CMP(rt_share, <=, 5.0);
        ASSERT_CMP(shares[1], <=, 6.0);
        ASSERT_CMP(shares[0], >=, 80.0);
}

/* Free pids and threads for 10,000 more threads, with room to spare. */
static bool room_for_threads(unsigned n) {
        long threads_max = 0, pid_max = 0, running = 0, total = 0;
        FILE *f = fopen("/proc/sys/kernel/threads-max", "re");
        if (f) {
                if (fscanf(f, "%ld", &threads_max) != 1)
                        threads_max = 0;
                fclose(f);
        }
        f = fopen("/proc/sys/kernel/pid_max", "re");
        if (f) {
                if (fscanf(f, "%ld", &pid_max) != 1)
                        pid_max = 0;
                fclose(f);
        }
        f = fopen("/proc/loadavg", "re");
        if (f) {
                if (fscanf(f, "%*s %*s %*s %ld/%ld", &running, &total) != 2)
                        total = LONG_MAX / 2;
                fclose(f);
        }
        return total + (long) n + 1000 < MIN(threads_max, pid_max) * 9 / 10;
}

TEST(ten_thousand_sleeping_threads_cost_the_cpu_nothing) {
        if (skip())
                TEST_SKIP("needs root, 2 CPUs and the built daemons");
        if (!room_for_threads(MANY_THREADS))
                TEST_SKIP("threads-max or pid_max leave no room for %d more threads", MANY_THREADS);
        run_cpu1_cost_attack(many_threads_attacker, "10,000 sleeping threads + 1 spinner", 60);
        ASSERT_EQ(atomic_load(&sh->threads), MANY_THREADS);
}

TEST(threads_that_come_and_go_cost_the_cpu_nothing) {
        if (skip())
                TEST_SKIP("needs root, 2 CPUs and the built daemons");
        run_cpu1_cost_attack(churn_attacker, "8 threads at a time living 1 ms each", 5);
}

/* 5. A tree that grows after its grant: the broker counts its threads then,
 * but moving its processes between groups migrates every thread they have
 * by the time of the move. The attacker forks 20 one-thread children,
 * reserves the tree (21 threads: granted), lets each child grow 400
 * sleeping threads once the tree is in its groups, releases (every process
 * moved back), and starts over, 5 times. Meanwhile a victim's reservation
 * (50% of 20 ms, slots) on the same CPU is measured in 100 ms windows:
 * moves done at SCHED_FIFO 99 left it 19.7% in its worst one. */
#define GROWING_CHILDREN 20
#define GROWN_THREADS 400
#define GROWTH_CYCLES 5

static void grow_child(void) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, 16 * 1024);
        pthread_attr_setguardsize(&attr, 0);
        while (!atomic_load(&sh->thread_exit))
                sleep_ms(1);
        for (unsigned i = 0; i < GROWN_THREADS; i++) {
                pthread_t t;
                if (pthread_create(&t, &attr, sleeper_thread, NULL) != 0)
                        break;
                atomic_fetch_add(&sh->threads, 1);
        }
        for (;;)
                pause();
}

static bool in_pace_cpuacct(pid_t pid) {
        char path[64], buf[4096];
        snprintf(path, sizeof(path), "/proc/%d/cgroup", (int) pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
        if (fd >= 0)
                close(fd);
        buf[n > 0 ? n : 0] = '\0';
        return strstr(buf, "/pace.") != NULL;
}

static void growing_tree_attacker(void) {
        for (unsigned cycle = 0; cycle < GROWTH_CYCLES; cycle++) {
                pid_t kids[GROWING_CHILDREN];
                atomic_store(&sh->thread_exit, 0);
                for (unsigned i = 0; i < GROWING_CHILDREN; i++) {
                        kids[i] = fork();
                        if (kids[i] == 0) {
                                grow_child();
                                _exit(0);
                        }
                }
                pace *p = NULL;
                pace_grant g;
                pace_reserve_params params = { .period_ns = 20 * NSEC_PER_MSEC, .utilization_ppm = 100000,
                                               .cpu = STACK_CPU, .scope = PACE_SCOPE_TREE, .kind = PACE_KIND_SLOTS };
                if (pace_connect(stack_socket, &p) < 0 || pace_reserve(p, &params, &g) < 0) {
                        fprintf(stderr, "attacker: reservation refused: %s\n", pace_last_message() ?: "no reason");
                        atomic_store(&sh->err, 1);
                        _exit(3);
                }
                atomic_store(&sh->reserved, 1);
                /* In its groups: the last child is the last moved. */
                for (int i = 0; i < 3000 && !in_pace_cpuacct(kids[GROWING_CHILDREN - 1]); i++)
                        sleep_ms(1);
                atomic_store(&sh->thread_exit, 1);
                sleep_ms(400);
                (void) pace_release(p, g.id);
                pace_close(p);
                sleep_ms(300); /* the release's moves */
                for (unsigned i = 0; i < GROWING_CHILDREN; i++)
                        (void) kill(kids[i], SIGKILL);
                for (unsigned i = 0; i < GROWING_CHILDREN; i++)
                        (void) waitpid(kids[i], NULL, 0);
                atomic_fetch_add(&sh->promoted, 1); /* cycles done */
        }
        for (;;)
                pause();
}

static void half_reserved_spinner(const void *arg) {
        pace *p = NULL;
        pace_grant g;
        pace_reserve_params params = { .period_ns = 20 * NSEC_PER_MSEC, .utilization_ppm = 500000, .cpu = STACK_CPU,
                                       .kind = PACE_KIND_SLOTS };
        if (pace_connect(stack_socket, &p) < 0 || pace_reserve(p, &params, &g) < 0)
                _exit(3);
        for (;;)
                ;
}

TEST(a_tree_that_grows_after_its_grant_costs_another_reservation_nothing_when_moved) {
        Stack s = {};
        double worst = 100.0, sum = 0;
        unsigned windows = 0;

        if (skip())
                TEST_SKIP("needs root, 2 CPUs and the built daemons");
        if (!room_for_threads(GROWING_CHILDREN * GROWN_THREADS))
                TEST_SKIP("threads-max or pid_max leave no room for %d more threads", GROWING_CHILDREN * GROWN_THREADS);
        alarm(CASE_ALARM_S);
        shared_reset();
        stack_start_with(&s, "{ \"slot_us\": 1000, \"cpus\": [1], \"max_threads_per_reservation\": 32 }");
        pid_t victim = spawn_reserved(&s, half_reserved_spinner, NULL, 1);
        sleep_ms(500);
        pid_t bad = attacker(growing_tree_attacker);
        /* 100 ms windows until the attacker's cycles are done (at most 30 s).
         * What the hypervisor took from CPU 1 in a window (steal, in 10 ms
         * ticks) it took from whatever ran, the victim included: it is
         * credited back to the victim's window, never more than it lost. */
        uint64_t t = monotonic_ns(), c = share_cpu_time_ns(victim), deadline = t + 30 * NSEC_PER_SEC;
        uint64_t st = share_cpu_stat_ns(STACK_CPU, 7);
        double worst_raw = 100.0, stolen_most = 0;
        while (atomic_load(&sh->promoted) < GROWTH_CYCLES && !atomic_load(&sh->err) && monotonic_ns() < deadline) {
                sleep_ms(100);
                uint64_t t1 = monotonic_ns(), c1 = share_cpu_time_ns(victim), st1 = share_cpu_stat_ns(STACK_CPU, 7);
                double share = 100.0 * (double) (c1 - c) / (double) (t1 - t);
                double stolen = 100.0 * (double) (st1 - st) / (double) (t1 - t);
                worst_raw = MIN(worst_raw, share);
                worst = MIN(worst, MIN(50.0, share + stolen));
                stolen_most = MAX(stolen_most, stolen);
                sum += share;
                windows++;
                t = t1;
                c = c1;
                st = st1;
        }
        int cycles = atomic_load(&sh->promoted);
        unsigned grown = atomic_load(&sh->threads);
        int refused = atomic_load(&sh->err);
        reap(bad);
        reap(victim);
        stack_stop(&s);
        alarm(0);
        printf("  %d cycles, %u threads grown after the grants; the victim (50%% reserved) over %u windows of "
               "100 ms: mean %.1f%%, worst %.1f%% (%.1f%% with what the host stole from it; most stolen in a window "
               "%.1f points)\n", cycles, grown, windows, windows ? sum / windows : 0.0, worst_raw, worst, stolen_most);
        ASSERT_EQ(refused, 0);
        ASSERT_EQ(cycles, GROWTH_CYCLES);
        ASSERT_CMP(grown, >=, GROWTH_CYCLES * GROWING_CHILDREN * GROWN_THREADS / 2);
        /* 50% reserved: 50 ms of every 100 ms window (3 runs: worst 41.7,
         * 44.8, 46.0%, means 52.6-56.2 with free time). This kernel is
         * PREEMPT_NONE: the attacker's own 8,000 thread creations and exits
         * a cycle, and the main thread's moves at SCHED_OTHER, delay a slot's
         * start by whatever kernel section is running then. The moves at
         * SCHED_FIFO 99 left 19.7%. The worst of up to 175 windows on a
         * busy CI host was 32.7% once (mean 49.1%), and 29.3% once on a
         * host whose CPU 1 lost 4-12 points to others in the cases before:
         * the host's steal is credited back (see above), and 30 still tells
         * the two apart. */
        ASSERT_CMP(worst, >=, 30.0);
}

TEST_MAIN()
