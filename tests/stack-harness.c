/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "macro.h"
#include "pace/pace.h"
#include "proc-util.h"
#include "stack-harness.h"
#include "test.h"

const char *stack_socket;


void pin(int cpu) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        sched_setaffinity(0, sizeof(set), &set);
}

/* The policy without the SCHED_RESET_ON_FORK flag the kernel ORs into it. */
int policy_of(pid_t tid) {
        int pol = sched_getscheduler(tid);
        return pol < 0 ? pol : pol & ~SCHED_RESET_ON_FORK;
}

unsigned threads_at_policy(pid_t pid, int policy) {
        char path[64];
        unsigned n = 0;

        snprintf(path, sizeof(path), "/proc/%d/task", (int) pid);
        DIR *d = opendir(path);
        if (!d)
                return 0;
        for (struct dirent *de; (de = readdir(d));) {
                int tid = atoi(de->d_name);
                n += tid > 0 && policy_of(tid) == policy;
        }
        closedir(d);
        return n;
}

/* Whether any thread of a process is real-time. */
bool any_thread_realtime(pid_t pid) {
        return threads_at_policy(pid, SCHED_FIFO) + threads_at_policy(pid, SCHED_RR) > 0;
}

pid_t spawn_on(int cpu, void (*fn)(const void *), const void *arg) {
        pid_t pid = fork();
        ASSERT_OK(pid);
        if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                alarm(CHILD_LIFETIME_S);
                if (cpu >= 0)
                        pin(cpu);
                fn(arg);
                _exit(0);
        }
        return pid;
}

pid_t spawn(void (*fn)(const void *), const void *arg) {
        return spawn_on(STACK_CPU, fn, arg);
}

void hog(const void *arg) {
        for (volatile uint64_t i = 0;; i++)
                ;
}

void reap(pid_t pid) {
        if (pid <= 0)
                return;
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
}

/* Looks for needle in the dispatcher's log: 1 and its first line with it
 * in ret_line (may be NULL), 0 if no line has it, -errno if there is no
 * log to read. */
int dispatcher_log_line(const Stack *s, const char *needle, char *ret_line, size_t size) {
        char path[320], line[1024];
        bool found = false;

        snprintf(path, sizeof(path), "%s/dispatcher.log", s->broker.dir);
        FILE *f = fopen(path, "re");
        if (!f)
                return -errno;
        while (!found && fgets(line, sizeof(line), f))
                found = strstr(line, needle) != NULL;
        fclose(f);
        if (found && ret_line)
                snprintf(ret_line, size, "%s", line);
        return found;
}

void stack_start_with(Stack *s, const char *json) {
        ASSERT_OK(broker_start(&s->broker, json));
        stack_socket = s->broker.socket;
        stack_start_dispatcher(s);
}

void stack_start_dispatcher(Stack *s) {
        ASSERT_TRUE(stack_try_start_dispatcher(s));
}

bool stack_try_start_dispatcher(Stack *s) {
        char log[320];
        /* A previous dispatcher's log would say "watching" already. */
        snprintf(log, sizeof(log), "%s/dispatcher.log", s->broker.dir);
        (void) unlink(log);
        s->dispatcher = fork();
        ASSERT_OK(s->dispatcher);
        if (s->dispatcher == 0) {
                int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
                dup2(fd, STDERR_FILENO);
                int null = open("/dev/null", O_RDWR | O_CLOEXEC);
                dup2(null, STDOUT_FILENO);
                prctl(PR_SET_PDEATHSIG, SIGTERM);
                if (s->hide_cgroup_v1 &&
                    (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
                     umount2("/sys/fs/cgroup/cpuacct", MNT_DETACH) < 0 || umount2("/sys/fs/cgroup/cpu", MNT_DETACH) < 0))
                        _exit(126);
                if (s->unified_only &&
                    (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
                     umount2("/sys/fs/cgroup", MNT_DETACH) < 0 ||
                     mount("cgroup2", "/sys/fs/cgroup", "cgroup2", 0, NULL) < 0))
                        _exit(126);
                execl(getenv("PACE_DISPATCHER"), "pace-dispatcher", "--config", s->broker.config, "--runtime-dir",
                      s->broker.dir, (char *) NULL);
                _exit(127);
        }
        /* Up: its monitor watches the dispatch process (up to 5 s on a slow
         * machine), which then has half a second to adopt the table. */
        bool up = false;
        for (int i = 0; i < 500 && !(up = dispatcher_log_line(s, "monitor: watching dispatcher pid", NULL, 0) > 0); i++)
                sleep_ms(10);
        if (!up)
                return false;
        sleep_ms(500);
        return waitpid(s->dispatcher, NULL, WNOHANG) == 0;
}

void stack_start(Stack *s) {
        stack_start_with(s, STACK_DEFAULT_CONFIG);
}

int stack_stop_dispatcher(Stack *s) {
        int status = -1;
        if (s->dispatcher <= 0)
                return 0;
        kill(s->dispatcher, SIGTERM);
        for (int i = 0; i < 500; i++) {
                if (waitpid(s->dispatcher, &status, WNOHANG) == s->dispatcher)
                        break;
                sleep_ms(10);
        }
        s->dispatcher = 0;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void stack_stop(Stack *s) {
        ASSERT_EQ(stack_stop_dispatcher(s), 0);
        ASSERT_EQ(broker_stop(&s->broker), 0);
}

bool skip(void) {
        if (geteuid() != 0)
                return true;
        if (!getenv("PACE_DISPATCHER") || !getenv("PACE_RUN") || !getenv("PACE_BROKER"))
                return true;
        return sysconf(_SC_NPROCESSORS_ONLN) < 2;
}

size_t n_reservations(const char *socket) {
        pace *p = NULL;
        pace_status_report *st = NULL;
        ASSERT_OK(pace_connect(socket, &p));
        ASSERT_OK(pace_status(p, &st));
        size_t n = st->n_reservations;
        pace_status_report_free(st);
        pace_close(p);
        return n;
}

/* Waits up to 3 s for the broker to list at least n reservations. */
void await_reservations(const char *socket, size_t n) {
        for (int i = 0; i < 300 && n_reservations(socket) < n; i++)
                sleep_ms(10);
}

pid_t spawn_reserved(const Stack *s, void (*fn)(const void *), const void *arg, size_t n) {
        pid_t pid = spawn(fn, arg);

        await_reservations(s->broker.socket, n);
        ASSERT_EQ(n_reservations(s->broker.socket), n);
        return pid;
}

bool stack_find_reservation(const char *socket, uint64_t id, pace_grant *ret) {
        pace *p = NULL;
        pace_status_report *st = NULL;
        bool found = false;
        ASSERT_OK(pace_connect(socket, &p));
        ASSERT_OK(pace_status(p, &st));
        for (size_t i = 0; i < st->n_reservations && !found; i++)
                if (id == 0 || st->reservations[i].id == id) {
                        *ret = st->reservations[i];
                        found = true;
                }
        pace_status_report_free(st);
        pace_close(p);
        return found;
}

/* Waits up to 3 s for the broker to list none (their processes died). */
void await_no_reservations(const char *socket) {
        for (int i = 0; i < 300 && n_reservations(socket) > 0; i++)
                sleep_ms(10);
        ASSERT_EQ(n_reservations(socket), 0);
}

/* The dispatcher runs as a monitor and its child; the child moves threads. */
pid_t dispatcher_child(const Stack *s) {
        pid_t child;
        size_t n = 0;
        return proc_list_descendants("/proc", s->dispatcher, &child, 1, &n) == 0 && n == 1 ? child : 0;
}
/* The pace.<hash> directories of a runtime dir in the cpuacct and cpu
 * hierarchies: how many exist (0 when clean). */
unsigned pace_groups_left(const Stack *s, char *ret_base, size_t size) {
        static const char *roots[] = { "/sys/fs/cgroup/cpuacct", "/sys/fs/cgroup/cpu" };
        unsigned n = 0;
        for (size_t i = 0; i < ELEMENTSOF(roots); i++) {
                DIR *d = opendir(roots[i]);
                for (struct dirent *de; d && (de = readdir(d));)
                        if (strncmp(de->d_name, "pace.", 5) == 0) {
                                n++;
                                if (ret_base && i == 0)
                                        snprintf(ret_base, size, "%s/%s", roots[i], de->d_name);
                        }
                if (d)
                        closedir(d);
        }
        return n;
}

bool have_cpuacct(void) {
        return access("/sys/fs/cgroup/cpuacct/cpuacct.usage", F_OK) == 0;
}


uint64_t thread_cpu_ns(pid_t pid, pid_t tid) {
        char path[96];
        unsigned long long ns = 0;
        snprintf(path, sizeof(path), "/proc/%d/task/%d/schedstat", (int) pid, (int) tid);
        FILE *f = fopen(path, "re");
        if (f) {
                if (fscanf(f, "%llu", &ns) != 1)
                        ns = 0;
                fclose(f);
        }
        return ns;
}

void reap_tree(pid_t pid) {
        pid_t kids[256];
        size_t n = 0;

        if (pid <= 0)
                return;
        (void) proc_list_descendants("/proc", pid, kids, ELEMENTSOF(kids), &n);
        reap(pid);
        for (size_t i = 0; i < MIN(n, ELEMENTSOF(kids)); i++)
                kill(kids[i], SIGKILL);
}

/* pace-run --period 50ms --util 60% --cpu 1 -- sh -c 'while :; do :; done' */
void reserved_hog(const void *arg) {
        const char *pace_run = getenv("PACE_RUN");
        setenv("PACE_SOCKET", stack_socket, 1);
        execl(pace_run, pace_run, "--quiet", "--kind", "slots", "--period", "50ms", "--util", (const char *) arg, "--cpu",
              "1", "--",
              "/bin/sh", "-c", "while :; do :; done", (char *) NULL);
        _exit(127);
}

bool tid_listed(const pid_t *list, size_t n, pid_t tid) {
        for (size_t i = 0; i < n; i++)
                if (list[i] == tid)
                        return true;
        return false;
}

/* Removes a cgroup tree a dead or stopped instance left: children first;
 * in each, thawed, its tasks moved to the hierarchy's root (their
 * real-time threads demoted first: a task cannot join a group without
 * real-time runtime at a real-time policy), its real-time runtime given
 * back (a removed cpu group's runtime stays counted for a while
 * otherwise), then removed. Works on v1 and v2 alike. */
void remove_cgroup_tree(const char *root, const char *path) {
        char sub[PATH_MAX], line[64];
        DIR *d = opendir(path);
        for (struct dirent *de; d && (de = readdir(d));)
                if (de->d_type == DT_DIR && de->d_name[0] != '.') {
                        snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name);
                        remove_cgroup_tree(root, sub);
                }
        if (d)
                closedir(d);
        snprintf(sub, sizeof(sub), "%s/freezer.state", path);
        (void) write_string_file(sub, "THAWED");
        snprintf(sub, sizeof(sub), "%s/cgroup.freeze", path);
        (void) write_string_file(sub, "0");
        bool v2 = access(sub, F_OK) == 0;
        snprintf(sub, sizeof(sub), "%s/%s", path, v2 ? "cgroup.procs" : "tasks");
        FILE *f = fopen(sub, "re");
        while (f && fgets(line, sizeof(line), f)) {
                char dest[PATH_MAX];
                pid_t tid = (pid_t) atoi(line);
                int policy = tid > 0 ? policy_of(tid) : -1;
                if (policy == SCHED_FIFO || policy == SCHED_RR)
                        (void) sched_setscheduler(tid, SCHED_OTHER, &(struct sched_param) { 0 });
                line[strcspn(line, "\n")] = '\0';
                snprintf(dest, sizeof(dest), "%s/%s", root, v2 ? "cgroup.procs" : "tasks");
                (void) write_string_file(dest, line);
        }
        if (f)
                fclose(f);
        snprintf(sub, sizeof(sub), "%s/cpu.rt_runtime_us", path);
        (void) write_string_file(sub, "0");
        if (rmdir(path) < 0 && errno != ENOENT)
                printf("  could not remove %s: %s\n", path, strerror(errno));
}
