/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "macro.h"
#include "pace-stats.h"
#include "pace-table.h"
#include "proc-util.h"
#include "table-shm.h"
#include "test.h"
#include "time-util.h"

#include "dispatch-harness.h"

void test_sleep_ms(unsigned ms) {
        struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long) (ms % 1000) * 1000000L };
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

void pin_self(int cpu) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        ASSERT_OK(sched_setaffinity(0, sizeof(set), &set));
}

const char *dispatch_unsupported(void) {
        static char why[256];
        struct sched_param sp = { .sched_priority = 1 };
        pid_t pid;
        int status;

        if (geteuid() != 0)
                return "needs root (real scheduling on the real kernel)";
        if (!getenv("PACE_DISPATCHER"))
                return "PACE_DISPATCHER is not set (run through meson test)";
        if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
                return "needs CPU 1 (the tests keep CPU 0 for the system)";
        pid = fork();
        if (pid == 0)
                _exit(sched_setscheduler(0, SCHED_FIFO, &sp) < 0 ? 1 : 0);
        if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                snprintf(why, sizeof(why), "SCHED_FIFO is refused here (RT group scheduling with no runtime?)");
                return why;
        }
        return NULL;
}

void env_init(DispatchEnv *e, const char *config_json) {
        FILE *f;

        *e = (DispatchEnv) { .dirfd = -1 };
        /* Each case is bounded: the default action of SIGALRM kills the test,
         * PDEATHSIG then stops the dispatcher, children die by their own alarm. */
        alarm(90);
        pin_self(TEST_CPU);
        snprintf(e->dir, sizeof(e->dir), "/tmp/pace-dispatch-XXXXXX");
        ASSERT_TRUE(mkdtemp(e->dir));
        e->dirfd = open(e->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ASSERT_TRUE(e->dirfd >= 0);
        snprintf(e->config, sizeof(e->config), "%s/pace.json", e->dir);
        snprintf(e->log, sizeof(e->log), "%s/dispatcher.log", e->dir);
        f = fopen(e->config, "we");
        ASSERT_TRUE(f);
        fputs(config_json, f);
        fclose(f);
}

void env_create_table(DispatchEnv *e) {
        ASSERT_OK(table_writer_new(e->dirfd, &e->writer));
}

bool env_log_contains(DispatchEnv *e, const char *needle) {
        char buf[65536];
        FILE *f = fopen(e->log, "re");
        size_t n;

        if (!f)
                return false;
        n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        return strstr(buf, needle) != NULL;
}

bool env_wait_log(DispatchEnv *e, const char *needle, unsigned timeout_ms) {
        for (unsigned waited = 0; waited <= timeout_ms; waited += 10) {
                if (env_log_contains(e, needle))
                        return true;
                test_sleep_ms(10);
        }
        return false;
}

void env_dump_log(DispatchEnv *e) {
        char buf[8192];
        FILE *f = fopen(e->log, "re");
        size_t n;

        if (!f)
                return;
        n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        printf("  --- dispatcher log ---\n%s  ---\n", buf);
}

pid_t env_spawn_dispatcher(DispatchEnv *e, const char *cgroup_procs) {
        pid_t parent = getpid(), pid = fork();

        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                int fd = open(e->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
                if (fd < 0 || dup2(fd, STDERR_FILENO) < 0)
                        _exit(127);
                prctl(PR_SET_PDEATHSIG, SIGTERM);
                if (getppid() != parent)
                        _exit(127);
                if (cgroup_procs) {
                        FILE *f = fopen(cgroup_procs, "we");
                        if (!f || fprintf(f, "%d\n", (int) getpid()) < 0 || fclose(f) != 0)
                                _exit(126);
                }
                execl(getenv("PACE_DISPATCHER"), "pace-dispatcher", "--config", e->config, "--runtime-dir", e->dir,
                      (char *) NULL);
                _exit(127);
        }
        return pid;
}

void env_start(DispatchEnv *e) {
        e->dispatcher = env_spawn_dispatcher(e, NULL);
        if (!env_wait_log(e, "monitor: watching dispatcher pid", 5000)) {
                env_dump_log(e);
                TEST_FAIL_("the dispatcher did not start");
        }
}

pid_t monitor_child(pid_t monitor) {
        pid_t child;
        size_t n = 0;
        return proc_list_descendants("/proc", monitor, &child, 1, &n) == 0 && n == 1 ? child : 0;
}

pid_t env_dispatcher_child(const DispatchEnv *e) {
        return monitor_child(e->dispatcher);
}

int wait_exit(pid_t pid, unsigned timeout_ms) {
        int status;

        for (unsigned waited = 0; waited <= timeout_ms; waited += 5) {
                pid_t r = waitpid(pid, &status, WNOHANG);
                if (r == pid)
                        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                if (r < 0)
                        return -1;
                test_sleep_ms(5);
        }
        return -1;
}

int env_stop_dispatcher(DispatchEnv *e) {
        int status;

        if (e->dispatcher <= 0)
                return 0;
        kill(e->dispatcher, SIGTERM);
        status = wait_exit(e->dispatcher, 5000);
        if (status < 0) {
                kill(e->dispatcher, SIGKILL);
                (void) waitpid(e->dispatcher, NULL, 0);
        }
        e->dispatcher = 0;
        return status;
}

void env_kill_child(DispatchEnv *e, pid_t pid) {
        for (unsigned i = 0; i < e->n_children; i++)
                if (e->children[i] == pid) {
                        kill(pid, SIGKILL);
                        (void) waitpid(pid, NULL, 0);
                        e->children[i] = e->children[--e->n_children];
                        return;
                }
}

void env_cleanup(DispatchEnv *e) {
        /* Dispatcher first: it restores the children it holds. */
        (void) env_stop_dispatcher(e);
        while (e->n_children > 0)
                env_kill_child(e, e->children[e->n_children - 1]);
        table_writer_free(e->writer);
        e->writer = NULL;
        if (e->dirfd >= 0) {
                (void) unlinkat(e->dirfd, PACE_TABLE_NAME, 0);
                (void) unlinkat(e->dirfd, "pace.json", 0);
                (void) unlinkat(e->dirfd, "dispatcher.log", 0);
                (void) unlinkat(e->dirfd, PACE_STATS_NAME, 0); /* the dispatcher's accounting file */
                close(e->dirfd);
                (void) rmdir(e->dir);
        }
        alarm(0);
}

void busy_forever(void) {
        for (volatile uint64_t i = 0;; i++)
                ;
}

pid_t env_spawn_hog(DispatchEnv *e, int nice_value) {
        return env_spawn_hog_on(e, -1, nice_value);
}

pid_t env_spawn_hog_on(DispatchEnv *e, int cpu, int nice_value) {
        pid_t pid;

        ASSERT_TRUE(e->n_children < MAX_CHILDREN);
        pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                alarm(CHILD_LIFETIME_S);
                if (cpu >= 0)
                        pin_self(cpu);
                if (nice_value != 0)
                        setpriority(PRIO_PROCESS, 0, nice_value);
                busy_forever();
        }
        e->children[e->n_children++] = pid;
        return pid;
}

uint64_t start_time_of(pid_t pid) {
        ProcInfo info;
        ASSERT_OK(proc_info_read("/proc", pid, &info));
        return info.start_time;
}

uint64_t cpu_time_ns(pid_t pid) {
        clockid_t clock;
        struct timespec ts;

        ASSERT_EQ(clock_getcpuclockid(pid, &clock), 0);
        ASSERT_OK(clock_gettime(clock, &ts));
        return (uint64_t) ts.tv_sec * 1000000000ULL + (uint64_t) ts.tv_nsec;
}

uint64_t env_publish(DispatchEnv *e, uint64_t slot_ns, const char *pattern, const TestReservation *res,
                     unsigned n_res) {
        PaceTableBuffer *b = table_writer_begin(e->writer);
        uint32_t frame = (uint32_t) strlen(pattern);

        b->slot_ns = slot_ns;
        b->n_cpus = 1;
        b->cpus[0] = (PaceTableCpu) { .cpu = TEST_CPU, .frame_slots = frame, .first_slot = 0 };
        b->n_slots = frame;
        b->n_reservations = n_res;
        for (unsigned i = 0; i < n_res; i++)
                b->reservations[i] = (PaceTableReservation) {
                        .id = 100 + i,
                        .pid = res[i].pid,
                        .uid = res[i].uid,
                        .start_time = res[i].start_time ?: start_time_of(res[i].pid),
                        .cpu = TEST_CPU,
                        .period_slots = res[i].period_slots,
                        .budget_slots = res[i].budget_slots,
                        .flags = res[i].flags,
                };
        for (uint32_t s = 0; s < frame; s++) {
                b->slots[s] = PACE_SLOT_FREE;
                for (unsigned i = 0; i < n_res; i++)
                        if (pattern[s] == res[i].letter)
                                b->slots[s] = (uint16_t) (i + 1);
        }
        return table_writer_publish(e->writer);
}

int policy_of(pid_t tid) {
        return sched_getscheduler(tid);
}

double sample_fifo_fraction(pid_t tid, unsigned ms, unsigned every_us, unsigned *ret_samples) {
        unsigned fifo = 0, n = 0;
        uint64_t end = monotonic_ns() + (uint64_t) ms * 1000000ULL;

        pin_self(TEST_SYSTEM_CPU);
        while (monotonic_ns() < end) {
                int p = policy_of(tid);
                if (p < 0)
                        break;
                fifo += (p & ~SCHED_RESET_ON_FORK) == SCHED_FIFO;
                n++;
                usleep(every_us);
        }
        pin_self(TEST_CPU);
        if (ret_samples)
                *ret_samples = n;
        return n ? (double) fifo / n : 0.0;
}

bool wait_for_fifo(pid_t tid, unsigned timeout_ms) {
        unsigned n;
        return sample_fifo_fraction(tid, timeout_ms, 200, &n) > 0.0;
}
