/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "held.h"
#include "macro.h"
#include "proc-util.h"
#include "sched-util.h"
#include "sweep.h"
#include "table-shm.h"

/* What a dead dispatcher may have left: our running priority, or any
 * real-time policy the process could not have given itself (a client may
 * lower its own FIFO 98 to FIFO 1, which no check for 98 would find). */
/* SCHED_FIFO/RR at one of the priorities a dispatcher hands out. */
static bool at_our_priority(const PaceSchedAttr *a) {
        return sched_attr_is_realtime(a) && a->sched_policy != SCHED_DEADLINE &&
               (a->sched_priority == PACE_RUNNING_PRIORITY || a->sched_priority == PACE_SERVER_PRIORITY);
}

static bool left_by_a_dispatcher(const PaceSchedAttr *a, uint32_t rt_ceiling) {
        if (!sched_attr_is_realtime(a))
                return false;
        return at_our_priority(a) || !sched_attr_owner_could_set(a, rt_ceiling);
}

/* Which threads of a walk a look covers: those from the skip-th on, at
 * most budget of them (the others are only counted). NULL: all. */
typedef struct SweepWindow {
        unsigned skip, budget, seen;
} SweepWindow;

static bool in_window(SweepWindow *w) {
        if (!w)
                return true;
        unsigned i = w->seen++;
        return i >= w->skip && i - w->skip < w->budget;
}

/* The look's budget is spent: the rest of the walk is not even listed. */
static bool window_full(const SweepWindow *w) {
        return w && w->seen >= w->skip + w->budget;
}

/* Puts one thread back from what a dispatcher left: a policy (to
 * SCHED_OTHER), or the real-time class behind a non-real-time policy (a
 * child born as its parent was promoted, sched_stat_class_leaked()).
 * Whether it did. */
static bool demote_left(pid_t tid, uint32_t rt_ceiling, bool leaked_only) {
        PaceSchedAttr a, other = { .size = sizeof(PaceSchedAttr), .sched_policy = SCHED_OTHER };

        /* While dispatching (leaked_only) the stat file alone tells: no
         * system call more per thread of a large client. */
        if (!leaked_only) {
                if (sched_attr_get(tid, &a) < 0)
                        return false;
                /* SCHED_IDLE with the flag: a member a dispatcher held
                 * waiting or parked, which would otherwise run only on an
                 * idle CPU from now on. */
                if (left_by_a_dispatcher(&a, rt_ceiling) || sched_attr_is_parked(&a))
                        return sched_attr_set(tid, &other) == 0;
        }
        if (sched_thread_class_leaked(tid, tid) <= 0 || sched_attr_reclass(tid) < 0)
                return false;
        /* Still there: a priority lent through a PI mutex, which the kernel
         * keeps, and rightly; not one to count. */
        return sched_thread_class_leaked(tid, tid) == 0;
}

/* The ceiling of the process a thread id belongs to; 0 (nothing allowed)
 * if it cannot be read. */
static uint32_t rt_ceiling_of(pid_t tid) {
        char path[64], status[4096], limits[2048];
        uint32_t ceiling = 0;

        snprintf(path, sizeof(path), "/proc/%" PRIi32 "/status", tid);
        if (read_small_file(path, status, sizeof(status)) < 0)
                return 0;
        snprintf(path, sizeof(path), "/proc/%" PRIi32 "/limits", tid);
        if (read_small_file(path, limits, sizeof(limits)) < 0)
                return 0;
        (void) proc_rt_priority_ceiling(status, limits, &ceiling);
        return ceiling;
}

/* Every thread listed in a task directory at a policy a dispatcher left,
 * to SCHED_OTHER; with a window, only those of it in the real-time class
 * behind their policy (while dispatching). Closes dir. */
static unsigned demote_task_dir(DIR *dir, uint32_t rt_ceiling, SweepWindow *window) {
        unsigned n = 0;

        for (struct dirent *de; dir && !window_full(window) && (de = readdir(dir));) {
                char *end;
                long tid = strtol(de->d_name, &end, 10);
                if (*end == '\0' && tid > 1 && in_window(window) &&
                    demote_left((pid_t) tid, rt_ceiling, window != NULL))
                        n++;
        }
        if (dir)
                closedir(dir);
        return n;
}

static unsigned demote_process(pid_t pid, uint32_t rt_ceiling, SweepWindow *window) {
        char path[64];

        snprintf(path, sizeof(path), "/proc/%" PRIi32 "/task", pid);
        return demote_task_dir(opendir(path), rt_ceiling, window);
}

/* Strict mode under systemd: the members sit in the "pace" subgroup of a
 * pace-*.scope, frozen between slots; thawed here, since the dead
 * dispatcher's groups are in no base directory a sweep could list. */
static void thaw_scope_group(pid_t pid) {
        char path[96], buf[4096], cg[2048];

        snprintf(path, sizeof(path), "/proc/%" PRIi32 "/cgroup", pid);
        if (read_small_file(path, buf, sizeof(buf)) < 0 || proc_cgroup_v2_path(buf, cg, sizeof(cg)) < 0)
                return;
        size_t len = strlen(cg);
        const char *parent_end = len > 5 ? cg + len - 5 : NULL;
        if (!parent_end || strcmp(parent_end, "/pace") != 0)
                return;
        const char *scope = parent_end;
        while (scope > cg && scope[-1] != '/')
                scope--;
        if (strncmp(scope, "pace-", 5) != 0)
                return;
        char file[2200];
        snprintf(file, sizeof(file), "/sys/fs/cgroup%s/cgroup.freeze", cg);
        (void) write_string_file(file, "0");
}

/* Children files a look reads to find descendants: one per thread of each
 * process whose children it lists (a 10,000-thread process's would cost
 * the look as much again, every second). */
#define SWEEP_DESCENDANT_THREADS 512u

/* The descendants of a reservation's process (a tree's other members, or
 * a process or thread reservation's children), owned by the same user:
 * where no group lists them they are found under /proc. While dispatching
 * (a window), only those whose parents have few enough threads to list. */
static unsigned demote_descendants(const Held *h, SweepWindow *window) {
        static pid_t kids[1024];
        size_t n = 0;
        unsigned demoted = 0;

        if (proc_list_owned_descendants("/proc", h->pid, h->uid, window ? SWEEP_DESCENDANT_THREADS : UINT32_MAX,
                                        kids, NULL, ELEMENTSOF(kids), &n) < 0)
                return 0;
        for (size_t i = 0; i < n && !window_full(window); i++)
                demoted += demote_process(kids[i], window ? 0 : rt_ceiling_of(kids[i]), window);
        return demoted;
}

/* Their scope groups thawed, once every thread is demoted. */
static void thaw_descendants(const Held *h) {
        static pid_t kids[1024];
        size_t n = 0;

        if (proc_list_descendants("/proc", h->pid, kids, ELEMENTSOF(kids), &n) < 0)
                return;
        for (size_t i = 0; i < MIN(n, ELEMENTSOF(kids)); i++)
                thaw_scope_group(kids[i]);
}

/* The table's processes, identity checked like a promotion: only the very
 * process the table names, never pid 1 or a kernel thread. Every thread is
 * demoted before any cgroup is looked at: reading /proc/PID/cgroup waits
 * for the kernel's cgroup lock, which a dying dispatcher's main thread
 * (SCHED_OTHER, and with clients left at FIFO 98 on every CPU hardly
 * running) may hold; the second client then stayed real-time 19 ms and,
 * once, a second. */
static unsigned sweep_table(const PaceTableBuffer *t, bool allow_root, SweepWindow *window) {
        HeldContext none = {};
        unsigned n = 0;

        for (uint32_t i = 0; i < MIN(t->n_reservations, PACE_MAX_RESERVATIONS) && !window_full(window); i++) {
                Held *h;

                if (held_new(&t->reservations[i], allow_root, 1, &h) != 0)
                        continue;
                /* Through the directory pinned to the process held_new()
                 * checked, not its pid, which could be someone else's by now. */
                int taskfd = openat(h->procfd, "task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                DIR *dir = taskfd >= 0 ? fdopendir(taskfd) : NULL;
                if (!dir)
                        safe_close(taskfd);
                n += demote_task_dir(dir, h->rt_ceiling, window);
                /* Every scope: a process or a thread reservation's children
                 * are none of its members, but one forked as its parent was
                 * promoted is born in the real-time class all the same. */
                n += demote_descendants(h, window);
                held_free(h, &none);
        }
        for (uint32_t i = 0; !window && i < MIN(t->n_reservations, PACE_MAX_RESERVATIONS); i++) {
                Held *h;

                if (held_new(&t->reservations[i], allow_root, 1, &h) != 0)
                        continue;
                thaw_scope_group(h->pid);
                if (h->scope == PACE_TABLE_SCOPE_TREE)
                        thaw_descendants(h);
                held_free(h, &none);
        }
        return n;
}

/* The original policy is unknown here (it lived in the dead dispatcher's
 * registry); SCHED_OTHER is the safe answer. */
unsigned sweep_demote_table(const PaceTableBuffer *t) {
        return sweep_table(t, true, NULL);
}

unsigned sweep_reclass_table(const PaceTableBuffer *t, bool allow_root, unsigned budget, unsigned *cursor) {
        SweepWindow w = { .skip = *cursor, .budget = budget };
        unsigned n = sweep_table(t, allow_root, &w);
        /* The walk ended before the budget did: the next look starts over. */
        *cursor = window_full(&w) ? w.skip + budget : 0;
        return n;
}

/* Opens the list of threads of group name under group_base: v1's, or the
 * unified hierarchy's. */
static FILE *open_group_threads(const char *group_base, const char *name) {
        char path[PATH_MAX + 300];
        FILE *f;

        snprintf(path, sizeof(path), "%s/%s/tasks", group_base, name);
        f = fopen(path, "re");
        if (!f) {
                snprintf(path, sizeof(path), "%s/%s/cgroup.threads", group_base, name);
                f = fopen(path, "re");
        }
        return f;
}

/* A thread at our priorities to SCHED_OTHER, through sched_getattr()
 * alone: no /proc file read (sweep_demote_groups_quick()). */
static bool demote_ours_quick(pid_t tid) {
        const PaceSchedAttr other = { .size = sizeof(PaceSchedAttr), .sched_policy = SCHED_OTHER };
        PaceSchedAttr a;

        return sched_attr_get(tid, &a) == 0 && at_our_priority(&a) && sched_attr_set(tid, &other) == 0;
}

/* Every thread of the res-* groups under group_base, demoted quick (no
 * /proc lookup) or in full, and in full each group thawed after. */
static unsigned demote_groups(const char *group_base, bool quick) {
        unsigned n = 0;
        DIR *dir;

        if (!group_base || !(dir = opendir(group_base)))
                return 0;
        for (struct dirent *de; (de = readdir(dir));) {
                char path[PATH_MAX + 300], line[32];
                if (strncmp(de->d_name, "res-", 4) != 0)
                        continue;
                FILE *f = open_group_threads(group_base, de->d_name);
                if (!f)
                        continue;
                while (fgets(line, sizeof(line), f)) {
                        pid_t tid = (pid_t) strtol(line, NULL, 10);
                        if (tid > 1 && tid != getpid() &&
                            (quick ? demote_ours_quick(tid) : demote_left(tid, rt_ceiling_of(tid), NULL)))
                                n++;
                }
                fclose(f);
                if (quick)
                        continue;
                /* Strict mode on the unified hierarchy: thawed, now that
                 * nothing in it is real-time. */
                snprintf(path, sizeof(path), "%s/%s/cgroup.freeze", group_base, de->d_name);
                int fd = open(path, O_WRONLY | O_CLOEXEC);
                if (fd >= 0) {
                        (void) !write(fd, "0", 1);
                        close(fd);
                }
        }
        closedir(dir);
        return n;
}

unsigned sweep_demote_groups_quick(const char *group_base) {
        return demote_groups(group_base, true);
}

unsigned sweep_demote_groups(const char *group_base) {
        return demote_groups(group_base, false);
}

void sweep_demote_groups_void(const char *group_base) {
        (void) sweep_demote_groups(group_base);
}

static int pread_all(int fd, void *buf, size_t size, off_t offset) {
        ssize_t n = pread(fd, buf, size, offset);

        if (n < 0)
                return negative_errno();
        /* Truncated under us: what is missing reads as no reservations. */
        if ((size_t) n < size)
                memset((char *) buf + n, 0, size - (size_t) n);
        return 0;
}

int sweep_table_file(const char *path, PaceTableBuffer *scratch, unsigned *ret_demoted) {
        /* The broker's user owns the directory and could leave a FIFO
         * there to hang the monitor: table_file_open() never blocks. */
        uint64_t size;
        _cleanup_close_ int fd = table_file_open(AT_FDCWD, path, &size);
        PaceTableHeader h;
        unsigned n = 0;
        int r;

        if (fd < 0)
                return fd;
        r = pread_all(fd, &h, sizeof(h), 0);
        if (r < 0)
                return r;
        r = table_header_check(&h);
        if (r < 0)
                return r;
        /* The published buffer first: it is the likelier one in force. A
         * torn copy is harmless: every entry is identity-checked and only
         * threads at our running priority are touched. */
        for (unsigned k = 0; k < 2; k++) {
                unsigned idx = (unsigned) ((h.generation + k) & 1);
                r = pread_all(fd, scratch, offsetof(PaceTableBuffer, slots),
                              (off_t) (PACE_TABLE_HEADER_SIZE + (uint64_t) idx * sizeof(PaceTableBuffer)));
                if (r < 0)
                        return r;
                n += sweep_demote_table(scratch);
        }
        *ret_demoted = n;
        return 0;
}

static uint64_t fnv1a(const char *s) {
        uint64_t h = 0xcbf29ce484222325ULL;
        for (; *s; s++) {
                h ^= (unsigned char) *s;
                h *= 0x100000001b3ULL;
        }
        return h;
}

void sweep_instance_name(const char *runtime_dir, char *ret, size_t size) {
        snprintf(ret, size, "pace.%016" PRIx64, fnv1a(runtime_dir));
}

/* SIGKILL pending for the process or a thread: SigPnd/ShdPnd's bit 8. */
static bool status_dying(const char *status) {
        const char *state = strstr(status, "\nState:\t");
        if (state && state[8] == 'Z')
                return true;
        for (const char *key = status; (key = strstr(key, "Pnd:\t")); key += 5) {
                unsigned long long bits = strtoull(key + 5, NULL, 16);
                if (bits & (1ULL << (SIGKILL - 1)))
                        return true;
        }
        return false;
}

unsigned sweep_dying_dispatchers(void) {
        const PaceSchedAttr other = { .sched_policy = SCHED_OTHER };
        pid_t self = getpid(), monitor = held_protected_pid();
        unsigned n = 0;
        DIR *proc = opendir("/proc");

        if (!proc)
                return 0;
        for (struct dirent *de; (de = readdir(proc));) {
                char path[300], comm[64], status[4096];
                ProcOwner owner;
                char *end;
                long pid = strtol(de->d_name, &end, 10);

                if (*end || pid <= 1 || pid == self || pid == monitor)
                        continue;
                snprintf(path, sizeof(path), "/proc/%ld/comm", pid);
                if (read_small_file_at(AT_FDCWD, path, comm, sizeof(comm)) < 0 ||
                    strcmp(comm, "pace-dispatcher\n") != 0)
                        continue;
                snprintf(path, sizeof(path), "/proc/%ld/status", pid);
                if (read_small_file_at(AT_FDCWD, path, status, sizeof(status)) < 0 ||
                    proc_status_owner(status, &owner) < 0 || !proc_owner_is(&owner, 0) || !status_dying(status))
                        continue;
                snprintf(path, sizeof(path), "/proc/%ld/task", pid);
                DIR *task = opendir(path);
                if (!task)
                        continue;
                for (struct dirent *t; (t = readdir(task));) {
                        PaceSchedAttr a;
                        long tid = strtol(t->d_name, &end, 10);
                        if (*end || tid <= 0)
                                continue;
                        if (sched_attr_get((pid_t) tid, &a) == 0 && sched_attr_is_realtime(&a) &&
                            sched_attr_set((pid_t) tid, &other) == 0)
                                n++;
                }
                closedir(task);
        }
        closedir(proc);
        return n;
}
