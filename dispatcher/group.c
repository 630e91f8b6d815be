/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libcgroup.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include "group.h"
#include "macro.h"
#include "pace-table.h"
#include "proc-util.h"

#define PACE_MAX_GROUPS_HOUSEKEPT 1024
/* Descendants moved with a tree-scope reservation at its first promotion,
 * at SCHED_FIFO 99: the broker admitted the tree with at most
 * max_threads_per_reservation (32 by default) threads in all, so more
 * processes than this were forked since, and are left where they are. */
#define TREE_MAX 64

struct Group {
        Group *next;
        bool unified; /* on the unified hierarchy: one group does it all */
        /* Delegated mode (see GroupSet): waiting for the main thread to get
         * a scope from the manager; entered is set (release) once ready. */
        bool pending;
        uint64_t id;
        unsigned refs;
        bool entered;
        uint32_t scope;
        pid_t pid, tid;
        char dir[PATH_MAX + 64];
        /* Where the members came from, relative to the hierarchy's root. */
        char orig[PATH_MAX];
        char cpu_orig[PATH_MAX]; /* the same in the cpu hierarchy ("" if none) */
        /* The reservation's cpuset (pace.<hash>/res-<id> in the cpuset
         * hierarchy, "" if none) and where the members came from there. */
        char cpuset_dir[PATH_MAX + 64];
        char cpuset_orig[PATH_MAX];
        /* The group's directory, and its two lists: reopened when older
         * than LIST_REFRESH_NS (see list_read), under list_lock because a
         * split reservation's loops share the group. */
        int dir_fd, usage_fd;
        pthread_mutex_t list_lock;
        int list_fd[2];
        uint64_t list_opened_ns[2];
        /* A tree's threads as the main thread last listed them
         * (group_set_housekeep()): reading a v1 list makes the kernel walk
         * and sort every task in the group, which must never happen at
         * SCHED_FIFO 99 on a client's say-so. */
        pthread_mutex_t cand_lock;
        pid_t cand[256];
        size_t n_cand;
};

enum { LIST_TASKS, LIST_PROCS };
/* The v1 names, and the unified hierarchy's. */
static const char *const list_name[2][2] = {
        { [LIST_TASKS] = "tasks", [LIST_PROCS] = "cgroup.procs" },
        { [LIST_TASKS] = "cgroup.threads", [LIST_PROCS] = "cgroup.procs" },
};

#define CGROUP2_SUPER_MAGIC_ 0x63677270
#define UNIFIED_ROOT "/sys/fs/cgroup"

/* cgroup v1 builds a tasks/cgroup.procs list at the first read after open
 * and serves every later read of that open file from it while it is read
 * at least once a second: a file held open never shows a thread born
 * after its first read (a reservation's new thread went unpromoted for
 * 11 s that way). Reopening at every read cost the dispatch loop about
 * 10 us more per change of slot owner (bench/latency, bench/overhead), so a
 * list is reused for at most this long: a new member is found within 10 ms
 * plus its next run. */
#define LIST_REFRESH_NS (10 * NSEC_PER_MSEC)

struct GroupSet {
        pthread_mutex_t lock;
        /* The unified hierarchy (a cgroup-v2-only host) instead of v1's
         * cpuacct: root is its mount, and each reservation's group also
         * carries strict mode's cgroup.freeze and cpu.stat. */
        bool unified;
        /* Unified and managed (systemd): groups are "pace" subgroups of a
         * delegated transient scope the manager creates for each reserved
         * tree (group_set_housekeep()'s make_scope), never cgroups of
         * ours beside its units. */
        bool delegated;
        char root[PATH_MAX];
        char name[128];
        char base[PATH_MAX];
        /* The cpu hierarchy's pace.<hash>, shared by every reservation:
         * cpu.shares 2, so waiting members (nice 19, but many threads) take
         * next to nothing from the free time, and under RT_GROUP_SCHED the
         * real-time runtime SCHED_FIFO needs there. "" when not used. */
        char cpu_root[PATH_MAX];
        char cpu_base[PATH_MAX];
        /* The cpuset hierarchy's pace.<hash>: each reservation's members
         * are confined to its CPUs there, so a member cannot move itself
         * (or, through priority inheritance, a sibling) to a CPU whose frame
         * does not account for it. "" when the host has no v1 cpuset. */
        char cpuset_root[PATH_MAX];
        char cpuset_base[PATH_MAX];
        char cpuset_mems[256];
        char owner_dir[PATH_MAX + 96];
        Group *groups;
};

static int write_id(const char *dir, const char *file, pid_t id) {
        char path[PATH_MAX * 2 + 32], text[32];
        snprintf(path, sizeof(path), "%s/%s", dir, file);
        snprintf(text, sizeof(text), "%" PRIi32, id);
        return write_string_file(path, text);
}

static int libcgroup_error(int r) {
        switch (r) {
        case 0:
                return 0;
        case ECGROUPNOTMOUNTED:
        case ECGROUPSUBSYSNOTMOUNTED:
        case ECGROUPNOTEXIST:
                return -ENOENT;
        case ECGOTHER:
                return -cgroup_get_last_errno() ?: -EIO;
        default:
                return -EIO;
        }
}

/* The base group, through libcgroup: what it is made for. With
 * CGFLAG_DELETE_RECURSIVE the tasks of every subgroup go to the base's
 * parent, the hierarchy's root. */
static int base_delete(const char *name, const char *controller) {
        struct cgroup *cg = cgroup_new_cgroup(name);
        int r;

        if (!cg)
                return -ENOMEM;
        if (!cgroup_add_controller(cg, controller)) {
                cgroup_free(&cg);
                return -ENOMEM;
        }
        r = cgroup_delete_cgroup_ext(cg, CGFLAG_DELETE_RECURSIVE);
        cgroup_free(&cg);
        return libcgroup_error(r);
}

static int base_create(const char *name, const char *controller) {
        struct cgroup *cg = cgroup_new_cgroup(name);
        int r;

        if (!cg)
                return -ENOMEM;
        if (!cgroup_add_controller(cg, controller)) {
                cgroup_free(&cg);
                return -ENOMEM;
        }
        r = cgroup_create_cgroup(cg, 0);
        cgroup_free(&cg);
        return libcgroup_error(r);
}

static void cpu_group_setup(GroupSet *s, const char *cpu_root, uint32_t rt_share_ppm, char *err, size_t err_size);
static void cpuset_setup(GroupSet *s);

/* Marks the base group with the instance that owns it: a dispatcher that
 * starts later tells a dead instance's leftovers from a live one's by it. */
static void owner_mark(GroupSet *s, pid_t owner) {
        ProcInfo info;

        if (proc_info_read("/proc", owner, &info) < 0)
                return;
        snprintf(s->owner_dir, sizeof(s->owner_dir), "%s/owner-%" PRIi32 "-%" PRIu64, s->base, owner,
                 info.start_time);
        if (mkdir(s->owner_dir, 0755) < 0)
                s->owner_dir[0] = '\0';
}

/* Whether base (a pace.* directory) carries an owner marker at all. */
static bool owner_marked(const char *base) {
        DIR *d = opendir(base);
        bool marked = false;
        for (struct dirent *de; d && !marked && (de = readdir(d));)
                marked = strncmp(de->d_name, "owner-", 6) == 0;
        if (d)
                closedir(d);
        return marked;
}

/* Whether the instance that owns base (a pace.* directory) still lives:
 * its owner-PID-STARTTIME marker names a live process with that start. */
static bool owner_alive(const char *base) {
        DIR *d = opendir(base);
        bool alive = false;

        if (!d)
                return false;
        for (struct dirent *de; !alive && (de = readdir(d));) {
                long pid;
                unsigned long long start;
                ProcInfo info;
                if (sscanf(de->d_name, "owner-%ld-%llu", &pid, &start) == 2 &&
                    proc_info_read("/proc", (pid_t) pid, &info) == 0 && info.start_time == start)
                        alive = true;
        }
        closedir(d);
        return alive;
}

static int read_orig(const char *proc_path, const char *controller, char *ret, size_t size);

/* Whether /sys/fs/cgroup is the unified hierarchy itself. */
static bool unified_mounted(void) {
        struct statfs sf;
        return statfs(UNIFIED_ROOT, &sf) == 0 && (uint64_t) sf.f_type == CGROUP2_SUPER_MAGIC_;
}

/* Every res-* group under base emptied into the root and removed, then
 * base: a dead run's leftovers on the unified hierarchy. */
static void unified_remove(const char *base) {
        DIR *d = opendir(base);
        char path[PATH_MAX + 300], line[32];

        for (struct dirent *de; d && (de = readdir(d));) {
                if (de->d_type != DT_DIR || de->d_name[0] == '.')
                        continue;
                snprintf(path, sizeof(path), "%s/%s/cgroup.freeze", base, de->d_name);
                (void) write_string_file(path, "0");
                snprintf(path, sizeof(path), "%s/%s/cgroup.procs", base, de->d_name);
                for (int round = 0; round < 8; round++) {
                        FILE *f = fopen(path, "re");
                        bool any = false;
                        while (f && fgets(line, sizeof(line), f)) {
                                line[strcspn(line, "\n")] = '\0';
                                (void) write_string_file(UNIFIED_ROOT "/cgroup.procs", line);
                                any = true;
                        }
                        if (f)
                                fclose(f);
                        if (!any)
                                break;
                }
                snprintf(path, sizeof(path), "%s/%s", base, de->d_name);
                (void) rmdir(path);
        }
        if (d)
                closedir(d);
        (void) rmdir(base);
}

/* A cgroup-v2-only host: the groups live at the root of the unified
 * hierarchy, which is ours to use only when no manager owns it: a process
 * that the manager (systemd) put in a cgroup of its own must not create
 * cgroups beside its units nor move other units' processes out of them
 * (systemd's delegation rules). There, tree scope and accounting take their
 * cgroup-less paths. */
static int unified_set_new(const char *name, pid_t owner, GroupSet **ret, char *err, size_t err_size) {
        char own[PATH_MAX];
        struct stat st;

        if (!unified_mounted()) {
                snprintf(err, err_size, "no cgroup v1 cpuacct hierarchy is mounted and %s is not the unified "
                         "hierarchy", UNIFIED_ROOT);
                return -EOPNOTSUPP;
        }
        bool managed = read_orig("/proc/self/cgroup", NULL, own, sizeof(own)) < 0 || strcmp(own, "/") != 0;
        GroupSet *s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        pthread_mutex_init(&s->lock, NULL);
        s->unified = true;
        if (managed) {
                /* Nothing of ours beside the manager's units: each reserved
                 * tree gets a delegated scope from it instead. */
                s->delegated = true;
                snprintf(s->root, sizeof(s->root), "%s", UNIFIED_ROOT);
                snprintf(s->name, sizeof(s->name), "%s", name);
                *ret = s;
                return 0;
        }
        snprintf(s->root, sizeof(s->root), "%s", UNIFIED_ROOT);
        snprintf(s->name, sizeof(s->name), "%s", name);
        snprintf(s->base, sizeof(s->base), "%s/%s", UNIFIED_ROOT, name);
        if (stat(s->base, &st) == 0)
                unified_remove(s->base);
        if (mkdir(s->base, 0755) < 0 && errno != EEXIST) {
                int r = negative_errno();
                snprintf(err, err_size, "cannot create the cgroup %s: %s", s->base, strerror(-r));
                group_set_free(s);
                return r;
        }
        owner_mark(s, owner);
        *ret = s;
        return 0;
}

/* Whether groups may live on the unified hierarchy's root here. */
static bool unified_usable(void) {
        char own[PATH_MAX];
        return unified_mounted() && read_orig("/proc/self/cgroup", NULL, own, sizeof(own)) == 0 && strcmp(own, "/") == 0;
}

bool group_set_unified(const GroupSet *s) {
        return s->unified;
}

bool group_set_delegated(const GroupSet *s) {
        return s->delegated;
}

int group_freeze_fd(Group *g) {
        if (!g->unified)
                return -EOPNOTSUPP;
        if (!group_entered(g))
                return -EAGAIN;
        int fd = openat(g->dir_fd, "cgroup.freeze", O_WRONLY | O_CLOEXEC);
        return fd < 0 ? negative_errno() : fd;
}

int group_set_new(const char *name, uint32_t rt_share_ppm, pid_t owner, GroupSet **ret, char *err, size_t err_size) {
        _cleanup_free_ char *acct = NULL, *cpu = NULL;
        struct stat st;
        int r;

        /* libcgroup 2.0 finds no v1 hierarchy on a unified-only host at
         * all (ECGROUPNOTMOUNTED): that is the unified case, not an error. */
        r = cgroup_init();
        if (r != 0) {
                r = unified_set_new(name, owner, ret, err, err_size);
                if (r == -EOPNOTSUPP && !err[0])
                        snprintf(err, err_size, "libcgroup cannot read the mounted cgroup hierarchies");
                return r;
        }
        if (cgroup_get_subsys_mount_point("cpuacct", &acct) != 0 || !acct)
                return unified_set_new(name, owner, ret, err, err_size);
        /* Mounted together with cpu, a new group is also a cpu group: under
         * RT_GROUP_SCHED it starts with cpu.rt_runtime_us = 0 (SCHED_FIFO
         * refused) and the runtimes of all groups may not sum past their
         * parent's, one CPU's share, while reservations on several CPUs
         * need more. */
        if (cgroup_get_subsys_mount_point("cpu", &cpu) == 0 && cpu && strcmp(cpu, acct) == 0) {
                char path[PATH_MAX + 32];
                snprintf(path, sizeof(path), "%s/cpu.rt_runtime_us", acct);
                if (stat(path, &st) == 0) {
                        snprintf(err, err_size,
                                 "cpuacct shares its hierarchy (%s) with cpu and the kernel has RT group "
                                 "scheduling: real-time threads in a group of their own would need "
                                 "cpu.rt_runtime_us of their own, which the kernel caps in total below what "
                                 "reservations on several CPUs need; mount cpuacct on its own to let pace use it",
                                 acct);
                        return -EOPNOTSUPP;
                }
        }

        GroupSet *s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        pthread_mutex_init(&s->lock, NULL);
        snprintf(s->root, sizeof(s->root), "%s", acct);
        snprintf(s->name, sizeof(s->name), "%s", name);
        snprintf(s->base, sizeof(s->base), "%s/%s", acct, name);

        /* A crashed run's leftovers: their tasks go to the root (where they
         * came from is lost with the dead run); reserved ones come back
         * in at their next promotion. */
        if (stat(s->base, &st) == 0)
                (void) base_delete(name, "cpuacct");
        r = base_create(name, "cpuacct");
        if (r < 0) {
                snprintf(err, err_size, "cannot create the cgroup %s: %s", s->base, strerror(-r));
                group_set_free(s);
                return r;
        }
        owner_mark(s, owner);
        if (cpu && strcmp(cpu, acct) != 0)
                cpu_group_setup(s, cpu, rt_share_ppm, err, err_size);
        cpuset_setup(s);
        *ret = s;
        return 0;
}

static int read_u64(const char *path, uint64_t *ret) {
        char buf[64];
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        if (n <= 0)
                return n < 0 ? negative_errno() : -EIO;
        buf[n] = '\0';
        *ret = strtoull(buf, NULL, 10);
        return 0;
}

/* Hands the cpu group's real-time runtime back before it is removed. A
 * removed group lingers in the kernel until its last reference goes (a
 * zombie that ran in it, RCU), and while it lingers its runtime still
 * counts against its parent's: the next dispatcher's group, which asks for
 * all that is left, would be refused it (EINVAL). Best effort: with no
 * RT_GROUP_SCHED the file does not exist; with real-time threads still
 * inside the kernel refuses (EBUSY), and only then does the old behaviour
 * remain. */
static int cpu_group_drop_runtime(const char *dir) {
        char path[PATH_MAX * 2 + 64];
        snprintf(path, sizeof(path), "%s/cpu.rt_runtime_us", dir);
        return write_string_file(path, "0");
}

/* The shared cpu group. Under RT_GROUP_SCHED a new group may run no
 * SCHED_FIFO thread until it has cpu.rt_runtime_us, and the kernel refuses
 * more than the parent's runtime minus what its other children hold. It
 * takes what the reservations can use at most, rt_share_ppm of each
 * period (the dispatch table, not this, is what bounds the clients), so
 * another instance, or a group a crashed instance left, cannot be starved
 * of the rest. A failure is noted in err (not fatal: accounting groups
 * work without it, the waiting threads just weigh more). */
static void cpu_group_setup(GroupSet *s, const char *cpu_root, uint32_t rt_share_ppm, char *err, size_t err_size) {
        char path[PATH_MAX + 64], dir[PATH_MAX];
        uint64_t parent_runtime, parent_period, siblings = 0;
        struct stat st;
        int r;

        snprintf(dir, sizeof(dir), "%s/%s", cpu_root, s->name);
        if (stat(dir, &st) == 0) {
                (void) cpu_group_drop_runtime(dir);
                (void) base_delete(s->name, "cpu");
        }
        r = base_create(s->name, "cpu");
        if (r < 0) {
                snprintf(err, err_size, "cannot create the cgroup %s: %s", dir, strerror(-r));
                return;
        }
        snprintf(path, sizeof(path), "%s/cpu.rt_runtime_us", cpu_root);
        if (read_u64(path, &parent_runtime) == 0) {
                snprintf(path, sizeof(path), "%s/cpu.rt_period_us", cpu_root);
                if (read_u64(path, &parent_period) < 0)
                        parent_period = 1000000;
                DIR *d = opendir(cpu_root);
                for (struct dirent *de; d && (de = readdir(d));) {
                        uint64_t v;
                        if (de->d_type != DT_DIR || de->d_name[0] == '.' || strcmp(de->d_name, s->name) == 0)
                                continue;
                        snprintf(path, sizeof(path), "%s/%s/cpu.rt_runtime_us", cpu_root, de->d_name);
                        if (read_u64(path, &v) == 0)
                                siblings += v;
                }
                if (d)
                        closedir(d);
                char text[32];
                snprintf(path, sizeof(path), "%s/cpu.rt_period_us", dir);
                snprintf(text, sizeof(text), "%" PRIu64, parent_period);
                (void) write_string_file(path, text);
                snprintf(path, sizeof(path), "%s/cpu.rt_runtime_us", dir);
                uint64_t need = (parent_period * rt_share_ppm + PPM - 1) / PPM;
                uint64_t left = parent_runtime > siblings ? parent_runtime - siblings : 0;
                snprintf(text, sizeof(text), "%" PRIu64, MIN(need, left));
                r = left >= need ? write_string_file(path, text) : -EBUSY;
                if (r < 0) {
                        snprintf(err, err_size, "cannot give the cgroup %s real-time runtime (cpu.rt_runtime_us: "
                                 "%" PRIu64 " of the parent's %" PRIu64 " us are held by other groups): %s; "
                                 "reserved threads stay in their own cpu groups", dir, siblings, parent_runtime,
                                 strerror(-r));
                        (void) base_delete(s->name, "cpu");
                        return;
                }
        }
        snprintf(path, sizeof(path), "%s/cpu.shares", dir);
        (void) write_string_file(path, "2");
        snprintf(s->cpu_root, sizeof(s->cpu_root), "%s", cpu_root);
        snprintf(s->cpu_base, sizeof(s->cpu_base), "%s", dir);
}

static int read_text(const char *path, char *buf, size_t size) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        ssize_t n = read(fd, buf, size - 1);
        if (n < 0)
                return negative_errno();
        buf[n] = '\0';
        buf[strcspn(buf, "\n")] = '\0';
        return 0;
}

/* The cpuset base: a v1 cpuset must be given CPUs and memory nodes before
 * it can hold a task, and a child's must lie within its parent's, so the
 * base gets all of the root's. Best effort: without it members are held
 * to their CPU by affinity alone, which held.c checks around every run. */
static void cpuset_setup(GroupSet *s) {
        _cleanup_free_ char *root = NULL;
        char path[PATH_MAX + 64], cpus[256], dir[PATH_MAX];
        struct stat st;

        if (cgroup_get_subsys_mount_point("cpuset", &root) != 0 || !root)
                return;
        snprintf(dir, sizeof(dir), "%s/%s", root, s->name);
        if (stat(dir, &st) == 0)
                (void) base_delete(s->name, "cpuset");
        snprintf(path, sizeof(path), "%s/cpuset.cpus", root);
        if (read_text(path, cpus, sizeof(cpus)) < 0)
                return;
        snprintf(path, sizeof(path), "%s/cpuset.mems", root);
        if (read_text(path, s->cpuset_mems, sizeof(s->cpuset_mems)) < 0)
                return;
        if (base_create(s->name, "cpuset") < 0)
                return;
        snprintf(path, sizeof(path), "%s/cpuset.cpus", dir);
        if (write_string_file(path, cpus) < 0)
                goto fail;
        snprintf(path, sizeof(path), "%s/cpuset.mems", dir);
        if (write_string_file(path, s->cpuset_mems) < 0)
                goto fail;
        snprintf(s->cpuset_root, sizeof(s->cpuset_root), "%s", root);
        snprintf(s->cpuset_base, sizeof(s->cpuset_base), "%s", dir);
        return;
fail:
        (void) base_delete(s->name, "cpuset");
}

bool group_set_confines(const GroupSet *s) {
        return s->cpuset_base[0] != '\0';
}

GroupSet *group_set_free(GroupSet *s) {
        if (!s)
                return NULL;
        while (s->groups) {
                Group *g = s->groups;
                g->refs = 1;
                group_release(s, g);
        }
        if (s->owner_dir[0])
                (void) rmdir(s->owner_dir);
        if (s->base[0])
                (void) rmdir(s->base);
        if (s->cpu_base[0]) {
                (void) cpu_group_drop_runtime(s->cpu_base);
                (void) rmdir(s->cpu_base);
        }
        if (s->cpuset_base[0])
                (void) rmdir(s->cpuset_base);
        pthread_mutex_destroy(&s->lock);
        free(s);
        return NULL;
}

const char *group_set_root(const GroupSet *s) {
        return s->root;
}

size_t group_set_count(GroupSet *s) {
        size_t n = 0;
        pthread_mutex_lock(&s->lock);
        for (Group *g = s->groups; g; g = g->next)
                n++;
        pthread_mutex_unlock(&s->lock);
        return n;
}

int group_acquire(GroupSet *s, uint64_t id, Group **ret) {
        char path[PATH_MAX + 128];
        Group *g;
        int r = 0;

        pthread_mutex_lock(&s->lock);
        for (g = s->groups; g; g = g->next)
                if (g->id == id) {
                        g->refs++;
                        goto done;
                }
        g = calloc(1, sizeof(*g));
        if (!g) {
                r = -ENOMEM;
                goto done;
        }
        g->id = id;
        g->refs = 1;
        g->dir_fd = g->usage_fd = g->list_fd[0] = g->list_fd[1] = -EBADF;
        pthread_mutex_init(&g->list_lock, NULL);
        pthread_mutex_init(&g->cand_lock, NULL);
        g->unified = s->unified;
        if (s->delegated) /* made by the main thread, in the scope */
                goto linked;
        snprintf(g->dir, sizeof(g->dir), "%s/res-%" PRIu64, s->base, id);
        if (mkdir(g->dir, 0755) < 0 && errno != EEXIST) {
                r = negative_errno();
                pthread_mutex_destroy(&g->list_lock);
                free(g);
                g = NULL;
                goto done;
        }
        g->unified = s->unified;
        g->dir_fd = open(g->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        snprintf(path, sizeof(path), "%s/%s", g->dir, s->unified ? "cpu.stat" : "cpuacct.usage_percpu");
        g->usage_fd = open(path, O_RDONLY | O_CLOEXEC);
        if (g->dir_fd < 0 || g->usage_fd < 0) {
                r = negative_errno();
                safe_close(g->dir_fd);
                safe_close(g->usage_fd);
                (void) rmdir(g->dir);
                pthread_mutex_destroy(&g->list_lock);
                pthread_mutex_destroy(&g->cand_lock);
                free(g);
                g = NULL;
                goto done;
        }
linked:
        g->next = s->groups;
        s->groups = g;
done:
        pthread_mutex_unlock(&s->lock);
        if (r >= 0)
                *ret = g;
        return r;
}

/* Reads a whole list file (one number per line) from its start. */
static int read_ids(int fd, pid_t *ids, size_t max, size_t *ret_n) {
        char buf[8192];
        size_t n = 0, fill = 0;
        off_t off = 0;

        for (;;) {
                ssize_t k = pread(fd, buf + fill, sizeof(buf) - fill - 1, off);
                if (k < 0)
                        return negative_errno();
                off += k;
                fill += (size_t) k;
                buf[fill] = '\0';
                /* Whole lines only; the tail waits for the next read. */
                char *p = buf, *nl;
                while ((nl = strchr(p, '\n'))) {
                        *nl = '\0';
                        char *end;
                        long v = strtol(p, &end, 10);
                        if (end != p && v > 0 && v <= INT32_MAX) {
                                if (n < max)
                                        ids[n] = (pid_t) v;
                                n++;
                        }
                        p = nl + 1;
                }
                fill = (size_t) (buf + fill - p);
                memmove(buf, p, fill);
                if (k == 0 || fill >= sizeof(buf) - 1)
                        break;
        }
        *ret_n = n;
        return 0;
}

static uint64_t monotonic_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * NSEC_PER_SEC + (uint64_t) ts.tv_nsec;
}

/* One of the group's lists, at most LIST_REFRESH_NS old; fresh: now. */
static int list_read(Group *g, int which, bool fresh, pid_t *ids, size_t max, size_t *ret_n) {
        uint64_t now = monotonic_ns();
        int r;

        pthread_mutex_lock(&g->list_lock);
        if (g->list_fd[which] < 0 || fresh || now - g->list_opened_ns[which] >= LIST_REFRESH_NS) {
                safe_close(g->list_fd[which]);
                g->list_fd[which] = openat(g->dir_fd, list_name[g->unified][which], O_RDONLY | O_CLOEXEC);
                g->list_opened_ns[which] = now;
        }
        r = g->list_fd[which] < 0 ? negative_errno() : read_ids(g->list_fd[which], ids, max, ret_n);
        pthread_mutex_unlock(&g->list_lock);
        return r;
}

static void orig_dir(const GroupSet *s, const Group *g, char *ret, size_t size) {
        int n = snprintf(ret, size, "%s%s", s->root, strcmp(g->orig, "/") == 0 ? "" : g->orig);
        if (n < 0 || (size_t) n >= size)
                snprintf(ret, size, "%s", s->root);
}

/* Moves one process (file "cgroup.procs") or thread ("tasks") back where
 * the members came from, or to the root if that group is gone. */
static void move_out(const GroupSet *s, const Group *g, const char *file, pid_t id) {
        char dir[PATH_MAX * 2];
        orig_dir(s, g, dir, sizeof(dir));
        if (write_id(dir, file, id) < 0)
                (void) write_id(s->root, file, id);
        if (s->cpu_base[0] && g->cpu_orig[0]) {
                int n = snprintf(dir, sizeof(dir), "%s%s", s->cpu_root, strcmp(g->cpu_orig, "/") == 0 ? "" : g->cpu_orig);
                if (n < 0 || (size_t) n >= sizeof(dir) || write_id(dir, file, id) < 0)
                        (void) write_id(s->cpu_root, file, id);
        }
        if (g->cpuset_dir[0]) {
                int n = snprintf(dir, sizeof(dir), "%s%s", s->cpuset_root,
                                 strcmp(g->cpuset_orig, "/") == 0 ? "" : g->cpuset_orig);
                if (n < 0 || (size_t) n >= sizeof(dir) || write_id(dir, file, id) < 0)
                        (void) write_id(s->cpuset_root, file, id);
        }
}

void group_release(GroupSet *s, Group *g) {
        pid_t ids[256];
        size_t n;

        if (!g)
                return;
        pthread_mutex_lock(&s->lock);
        if (--g->refs > 0) {
                pthread_mutex_unlock(&s->lock);
                return;
        }
        for (Group **p = &s->groups; *p; p = &(*p)->next)
                if (*p == g) {
                        *p = g->next;
                        break;
                }
        pthread_mutex_unlock(&s->lock);

        /* Everything inside goes back, children it forked included. A fork
         * racing with the move leaves a straggler: go round a few times. */
        for (int round = 0; round < 8; round++) {
                int which = g->scope == PACE_TABLE_SCOPE_THREAD ? LIST_TASKS : LIST_PROCS;
                const char *file = list_name[g->unified][which];
                if (list_read(g, which, true, ids, ELEMENTSOF(ids), &n) < 0 || n == 0)
                        break;
                for (size_t i = 0; i < MIN(n, ELEMENTSOF(ids)); i++)
                        move_out(s, g, file, ids[i]);
        }
        safe_close(g->list_fd[LIST_TASKS]);
        safe_close(g->list_fd[LIST_PROCS]);
        if (!g->dir[0]) /* delegated, never entered */
                goto freed;
        safe_close(g->dir_fd);
        safe_close(g->usage_fd);
        pthread_mutex_destroy(&g->list_lock);
        pthread_mutex_destroy(&g->cand_lock);
        (void) rmdir(g->dir);
        if (g->cpuset_dir[0]) {
                /* Stragglers a fork raced in: to the root, so the group goes. */
                char path[PATH_MAX + 96];
                snprintf(path, sizeof(path), "%s/cgroup.procs", g->cpuset_dir);
                FILE *f = fopen(path, "re");
                char line[32];
                while (f && fgets(line, sizeof(line), f))
                        (void) write_id(s->cpuset_root, "cgroup.procs", (pid_t) strtol(line, NULL, 10));
                if (f)
                        fclose(f);
                (void) rmdir(g->cpuset_dir);
        }
freed:
        free(g);
}

/* Where a task sits in the v1 hierarchy of controller, from its
 * /proc/.../cgroup file. */
static int read_orig(const char *proc_path, const char *controller, char *ret, size_t size) {
        char buf[4096];
        _cleanup_close_ int fd = open(proc_path, O_RDONLY | O_CLOEXEC);
        ssize_t n;

        if (fd < 0)
                return errno == ENOENT ? -ESRCH : negative_errno();
        n = read(fd, buf, sizeof(buf) - 1);
        if (n < 0)
                return negative_errno();
        buf[n] = '\0';
        if (!controller)
                return proc_cgroup_v2_path(buf, ret, size);
        return proc_cgroup_v1_path(buf, controller, ret, size);
}

static void refresh_candidates(Group *g);

/* The reservation's own cpuset, holding exactly its CPUs. */
static int cpuset_create(GroupSet *s, Group *g, const char *cpus, const char *proc_path) {
        char path[PATH_MAX + 128];
        int r;

        if (read_orig(proc_path, "cpuset", g->cpuset_orig, sizeof(g->cpuset_orig)) < 0)
                return -EOPNOTSUPP;
        snprintf(g->cpuset_dir, sizeof(g->cpuset_dir), "%s/res-%" PRIu64, s->cpuset_base, g->id);
        if (mkdir(g->cpuset_dir, 0755) < 0 && errno != EEXIST) {
                r = negative_errno();
                g->cpuset_dir[0] = '\0';
                return r;
        }
        snprintf(path, sizeof(path), "%s/cpuset.mems", g->cpuset_dir);
        r = write_string_file(path, s->cpuset_mems);
        if (r >= 0) {
                snprintf(path, sizeof(path), "%s/cpuset.cpus", g->cpuset_dir);
                r = write_string_file(path, cpus);
        }
        if (r < 0) {
                (void) rmdir(g->cpuset_dir);
                g->cpuset_dir[0] = '\0';
        }
        return r;
}

int group_enter(GroupSet *s, Group *g, pid_t pid, pid_t tid, uint32_t scope, const char *cpus) {
        char path[96];
        int r = 0;

        pthread_mutex_lock(&s->lock);
        if (g->entered)
                goto done;
        if (scope == PACE_TABLE_SCOPE_THREAD)
                snprintf(path, sizeof(path), "/proc/%" PRIi32 "/task/%" PRIi32 "/cgroup", pid, tid);
        else
                snprintf(path, sizeof(path), "/proc/%" PRIi32 "/cgroup", pid);
        /* The unified hierarchy moves only whole processes into an
         * ordinary group (a thread alone needs threaded mode). */
        if (s->unified && scope == PACE_TABLE_SCOPE_THREAD) {
                r = -EOPNOTSUPP;
                goto done;
        }
        if (s->delegated) {
                g->scope = scope;
                g->pid = pid;
                g->pending = true;
                goto done;
        }
        r = read_orig(path, s->unified ? NULL : "cpuacct", g->orig, sizeof(g->orig));
        if (r < 0)
                goto done;
        if (s->cpu_base[0] && read_orig(path, "cpu", g->cpu_orig, sizeof(g->cpu_orig)) < 0)
                g->cpu_orig[0] = '\0';
        g->scope = scope;
        g->pid = pid;
        g->tid = tid;
        bool cpu = s->cpu_base[0] && g->cpu_orig[0];
        if (s->cpuset_base[0] && cpus)
                (void) cpuset_create(s, g, cpus, path);
        bool cpuset = g->cpuset_dir[0] != '\0';
        if (scope == PACE_TABLE_SCOPE_THREAD) {
                r = write_id(g->dir, "tasks", tid);
                if (r >= 0 && cpu)
                        (void) write_id(s->cpu_base, "tasks", tid);
                if (r >= 0 && cpuset && write_id(g->cpuset_dir, "tasks", tid) < 0) {
                        (void) rmdir(g->cpuset_dir);
                        g->cpuset_dir[0] = '\0';
                }
        } else {
                r = write_id(g->dir, "cgroup.procs", pid);
                if (r >= 0 && cpu)
                        (void) write_id(s->cpu_base, "cgroup.procs", pid);
                if (r >= 0 && cpuset && write_id(g->cpuset_dir, "cgroup.procs", pid) < 0) {
                        (void) rmdir(g->cpuset_dir);
                        g->cpuset_dir[0] = '\0';
                        cpuset = false;
                }
                if (r >= 0 && scope == PACE_TABLE_SCOPE_TREE) {
                        /* Those forked before the grant; later ones are
                         * born inside. */
                        static pid_t kids[TREE_MAX];
                        size_t n = 0;
                        (void) proc_list_descendants("/proc", pid, kids, ELEMENTSOF(kids), &n);
                        for (size_t i = 0; i < n; i++) {
                                (void) write_id(g->dir, "cgroup.procs", kids[i]);
                                if (cpu)
                                        (void) write_id(s->cpu_base, "cgroup.procs", kids[i]);
                                if (cpuset)
                                        (void) write_id(g->cpuset_dir, "cgroup.procs", kids[i]);
                        }
                }
        }
        if (r >= 0) {
                g->entered = true;
                if (scope == PACE_TABLE_SCOPE_TREE)
                        refresh_candidates(g);
        }
done:
        pthread_mutex_unlock(&s->lock);
        return r;
}

bool group_entered(const Group *g) {
        return __atomic_load_n(&g->entered, __ATOMIC_ACQUIRE);
}

bool group_confined(const Group *g) {
        return g->cpuset_dir[0] != '\0';
}

int group_evict_strangers(GroupSet *s, Group *g) {
        pid_t ids[64];
        size_t n;
        int r;

        if (!g->entered || g->scope == PACE_TABLE_SCOPE_TREE)
                return 0;
        /* The common case, the member and nobody else, costs one read. */
        bool thread = g->scope == PACE_TABLE_SCOPE_THREAD;
        r = list_read(g, thread ? LIST_TASKS : LIST_PROCS, false, ids, ELEMENTSOF(ids), &n);
        if (r < 0)
                return r;
        pid_t member = thread ? g->tid : g->pid;
        unsigned evicted = 0;
        for (size_t i = 0; i < MIN(n, ELEMENTSOF(ids)); i++)
                if (ids[i] != member) {
                        move_out(s, g, thread ? "tasks" : "cgroup.procs", ids[i]);
                        evicted++;
                }
        return (int) evicted;
}

int group_list_threads(Group *g, pid_t *tids, size_t max, size_t *ret_n) {
        pthread_mutex_lock(&g->cand_lock);
        size_t n = MIN(g->n_cand, max);
        memcpy(tids, g->cand, n * sizeof(*tids));
        pthread_mutex_unlock(&g->cand_lock);
        *ret_n = n;
        return 0;
}

/* A tree's members, listed for group_list_threads(). */
static void refresh_candidates(Group *g) {
        pid_t ids[ELEMENTSOF(g->cand)];
        size_t n = 0;

        if (list_read(g, LIST_TASKS, false, ids, ELEMENTSOF(ids), &n) < 0)
                return;
        pthread_mutex_lock(&g->cand_lock);
        g->n_cand = MIN(n, ELEMENTSOF(ids));
        memcpy(g->cand, ids, g->n_cand * sizeof(ids[0]));
        pthread_mutex_unlock(&g->cand_lock);
}

/* Everything in the scope's own cgroup, into our subgroup: what the manager
 * moved in, and children that a process forked there before it was moved
 * (born beside it, in the scope). Again at every housekeeping round. */
static void delegated_gather(GroupSet *s, Group *g, char *err, size_t err_size) {
        char path[2 * PATH_MAX + 64], line[32];

        snprintf(path, sizeof(path), "%s%s/cgroup.procs", s->root, g->orig);
        for (int round = 0; round < 4; round++) {
                FILE *f = fopen(path, "re");
                bool any = false;
                for (unsigned k = 0; f && k < 256 && fgets(line, sizeof(line), f); k++) {
                        line[strcspn(line, "\n")] = '\0';
                        int r = write_id(g->dir, "cgroup.procs", (pid_t) strtol(line, NULL, 10));
                        if (r < 0 && r != -ESRCH)
                                snprintf(err, err_size, "cannot move pid %s into %s: %s", line, g->dir, strerror(-r));
                        any |= r >= 0;
                }
                if (f)
                        fclose(f);
                if (!any)
                        break;
        }
}

/* Delegated mode: the manager moves the tree into a scope of its own
 * (make_scope, main thread, over D-Bus); then the members go into its
 * "pace" subgroup, which is ours to freeze. */
static void delegated_enter(GroupSet *s, Group *g, GroupMakeScope make_scope, void *userdata, char *err,
                            size_t err_size) {
        char scope[1024], path[PATH_MAX + 1200];
        int r;

        g->pending = false;
        r = make_scope ? make_scope(userdata, g->pid, g->id, scope, sizeof(scope)) : -EOPNOTSUPP;
        if (r < 0) {
                snprintf(err, err_size, "no scope for reservation %" PRIu64 " of pid %" PRIi32 ": %s", g->id, g->pid,
                         strerror(-r));
                return; /* never entered: the loop keeps to /proc */
        }
        snprintf(g->orig, sizeof(g->orig), "%s", scope);
        int k = snprintf(g->dir, sizeof(g->dir), "%s%s/pace", s->root, scope);
        if (k < 0 || (size_t) k >= sizeof(g->dir) || (mkdir(g->dir, 0755) < 0 && errno != EEXIST)) {
                snprintf(err, err_size, "cannot create a group in the scope %s: %s", scope, strerror(errno));
                g->dir[0] = '\0';
                return;
        }
        delegated_gather(s, g, err, err_size);
        g->dir_fd = open(g->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        snprintf(path, sizeof(path), "%s/cpu.stat", g->dir);
        g->usage_fd = open(path, O_RDONLY | O_CLOEXEC);
        if (g->dir_fd < 0 || g->usage_fd < 0) {
                g->dir_fd = safe_close(g->dir_fd);
                g->usage_fd = safe_close(g->usage_fd);
                return;
        }
        if (g->scope == PACE_TABLE_SCOPE_TREE)
                refresh_candidates(g);
        __atomic_store_n(&g->entered, true, __ATOMIC_RELEASE);
}

size_t group_set_housekeep(GroupSet *s, GroupMakeScope make_scope, void *userdata, char *err, size_t err_size) {
        Group *held[PACE_MAX_GROUPS_HOUSEKEPT];
        size_t n = 0;

        /* A reference each, so a loop that lets go meanwhile leaves the
         * clean-up to whoever drops the last one. */
        pthread_mutex_lock(&s->lock);
        for (Group *g = s->groups; g && n < ELEMENTSOF(held); g = g->next) {
                g->refs++;
                held[n++] = g;
        }
        pthread_mutex_unlock(&s->lock);
        for (size_t i = 0; i < n; i++) {
                if (held[i]->pending)
                        delegated_enter(s, held[i], make_scope, userdata, err, err_size);
                else if (s->delegated && group_entered(held[i]))
                        delegated_gather(s, held[i], err, err_size);
                if (group_entered(held[i])) {
                        if (held[i]->scope == PACE_TABLE_SCOPE_TREE)
                                refresh_candidates(held[i]);
                        else
                                (void) group_evict_strangers(s, held[i]);
                }
                group_release(s, held[i]);
        }
        return n;
}

int group_usage_ns(Group *g, int cpu, uint64_t *ret) {
        char buf[2048];
        ssize_t n = pread(g->usage_fd, buf, sizeof(buf) - 1, 0);
        char *p = buf, *end;

        if (n < 0)
                return negative_errno();
        buf[n] = '\0';
        if (g->unified) {
                /* cpu.stat has the group's total only: right for a
                 * reservation on one CPU, the sum of the pieces for a split
                 * one. */
                p = strstr(buf, "usage_usec ");
                if (!p)
                        return -ENOENT;
                *ret = strtoull(p + strlen("usage_usec "), NULL, 10) * NSEC_PER_USEC;
                return 0;
        }
        for (int i = 0;; i++) {
                unsigned long long v = strtoull(p, &end, 10);
                if (end == p)
                        return -ENOENT;
                if (i == cpu) {
                        *ret = v;
                        return 0;
                }
                p = end;
        }
}

int group_cpu_mount(char *ret, size_t size) {
        _cleanup_free_ char *acct = NULL, *cpu = NULL;

        if (cgroup_init() != 0 || cgroup_get_subsys_mount_point("cpu", &cpu) != 0 || !cpu ||
            (cgroup_get_subsys_mount_point("cpuacct", &acct) == 0 && acct && strcmp(acct, cpu) == 0))
                return -EOPNOTSUPP;
        snprintf(ret, size, "%s", cpu);
        return 0;
}

int group_cpuset_mount(char *ret, size_t size) {
        _cleanup_free_ char *cpuset = NULL;

        if (cgroup_init() != 0 || cgroup_get_subsys_mount_point("cpuset", &cpuset) != 0 || !cpuset)
                return -EOPNOTSUPP;
        snprintf(ret, size, "%s", cpuset);
        return 0;
}

int group_base_path(const char *name, char *ret, size_t size) {
        _cleanup_free_ char *acct = NULL;

        if (cgroup_init() != 0 || cgroup_get_subsys_mount_point("cpuacct", &acct) != 0 || !acct) {
                if (!unified_usable())
                        return -EOPNOTSUPP;
                snprintf(ret, size, "%s/%s", UNIFIED_ROOT, name);
                return 0;
        }
        snprintf(ret, size, "%s/%s", acct, name);
        return 0;
}

/* One pace.* instance's leftovers, every hierarchy. */
static void remove_instance(const char *name, void (*demote)(const char *base)) {
        _cleanup_free_ char *acct = NULL, *cpu = NULL;
        char path[PATH_MAX + 128];

        if (cgroup_get_subsys_mount_point("cpuacct", &acct) == 0 && acct) {
                snprintf(path, sizeof(path), "%s/%s", acct, name);
                if (demote)
                        demote(path);
        }
        if (cgroup_get_subsys_mount_point("cpu", &cpu) == 0 && cpu) {
                snprintf(path, sizeof(path), "%s/%s", cpu, name);
                (void) cpu_group_drop_runtime(path);
        }
        (void) base_delete(name, "cpu");
        (void) base_delete(name, "cpuset");
        (void) base_delete(name, "cpuacct");
}

int group_sweep_dead(const char *own_name, void (*demote)(const char *base), unsigned *ret_n) {
        _cleanup_free_ char *acct = NULL;
        unsigned n = 0;
        DIR *d;

        bool unified = false;
        if (cgroup_init() != 0 || cgroup_get_subsys_mount_point("cpuacct", &acct) != 0 || !acct) {
                if (!unified_mounted())
                        return -EOPNOTSUPP;
                acct = strdup(UNIFIED_ROOT);
                if (!acct)
                        return -ENOMEM;
                unified = true;
        }
        d = opendir(acct);
        if (!d)
                return negative_errno();
        for (struct dirent *de; (de = readdir(d));) {
                char base[PATH_MAX + 128];
                /* Exactly our names (pace.<16 hex digits>), and only with an
                 * owner marker naming a gone process: an administrator's
                 * pace.slice, or an instance that could not mark its groups,
                 * is left alone. */
                if (strlen(de->d_name) != 21 || strncmp(de->d_name, "pace.", 5) != 0 ||
                    strspn(de->d_name + 5, "0123456789abcdef") != 16 || strcmp(de->d_name, own_name) == 0)
                        continue;
                snprintf(base, sizeof(base), "%s/%s", acct, de->d_name);
                if (!owner_marked(base) || owner_alive(base))
                        continue;
                if (unified) {
                        if (demote)
                                demote(base);
                        unified_remove(base);
                } else
                        remove_instance(de->d_name, demote);
                n++;
        }
        closedir(d);
        *ret_n = n;
        return 0;
}

int group_set_remove(const char *name) {
        _cleanup_free_ char *cpu = NULL, *acct = NULL;

        if (cgroup_init() != 0 || cgroup_get_subsys_mount_point("cpuacct", &acct) != 0 || !acct) {
                char base[PATH_MAX];
                if (!unified_mounted())
                        return -EOPNOTSUPP;
                snprintf(base, sizeof(base), "%s/%s", UNIFIED_ROOT, name);
                unified_remove(base);
                return 0;
        }
        if (cgroup_get_subsys_mount_point("cpu", &cpu) == 0 && cpu) {
                char dir[PATH_MAX];
                snprintf(dir, sizeof(dir), "%s/%s", cpu, name);
                (void) cpu_group_drop_runtime(dir);
        }
        (void) base_delete(name, "cpu");
        (void) base_delete(name, "cpuset");
        return base_delete(name, "cpuacct");
}
