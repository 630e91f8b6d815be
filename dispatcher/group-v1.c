/* SPDX-License-Identifier: MIT */
/* The cgroup v1 backend (hybrid hosts, like the machines pace is developed
 * on): each reservation's group is <cpuacct>/pace.<hash>/res-<id>, whose
 * cpuacct.usage_percpu says what it received on each CPU. Beside it, when
 * the host has them: one shared group in the v1 cpu hierarchy
 * (cpu.shares 2, and under RT_GROUP_SCHED the real-time runtime the
 * reserved threads need there), and a cpuset per reservation holding
 * exactly its CPUs. Hierarchies are found and base groups made and removed
 * through libcgroup; the per-reservation groups with plain file
 * operations, which is all the dispatch threads can afford.
 *
 * Kept only while it is cheap to keep: distributions have dropped v1. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libcgroup.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "group-backend.h"
#include "macro.h"
#include "pace-table.h"
#include "proc-util.h"

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
static struct cgroup *base_cgroup(const char *name, const char *controller) {
        struct cgroup *cg = cgroup_new_cgroup(name);

        if (cg && !cgroup_add_controller(cg, controller))
                cgroup_free(&cg);
        return cg;
}

static int base_delete(const char *name, const char *controller) {
        struct cgroup *cg = base_cgroup(name, controller);

        if (!cg)
                return -ENOMEM;
        int r = cgroup_delete_cgroup_ext(cg, CGFLAG_DELETE_RECURSIVE);
        cgroup_free(&cg);
        return libcgroup_error(r);
}

static int base_create(const char *name, const char *controller) {
        struct cgroup *cg = base_cgroup(name, controller);

        if (!cg)
                return -ENOMEM;
        int r = cgroup_create_cgroup(cg, 0);
        cgroup_free(&cg);
        return libcgroup_error(r);
}

static int mount_of(const char *controller, char *ret, size_t size) {
        _cleanup_free_ char *m = NULL;

        if (cgroup_init() != 0 || cgroup_get_subsys_mount_point(controller, &m) != 0 || !m)
                return -EOPNOTSUPP;
        snprintf(ret, size, "%s", m);
        return 0;
}

/* The cpuacct hierarchy is where v1 groups are: new or left over alike. */
static int v1_hierarchy(bool new_groups, char *ret, size_t size) {
        return mount_of("cpuacct", ret, size);
}

int group_cpu_mount(char *ret, size_t size) {
        char acct[PATH_MAX];

        if (mount_of("cpu", ret, size) < 0 || (mount_of("cpuacct", acct, sizeof(acct)) == 0 && strcmp(acct, ret) == 0))
                return -EOPNOTSUPP;
        return 0;
}

int group_cpuset_mount(char *ret, size_t size) {
        return mount_of("cpuset", ret, size);
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

static int read_u64(const char *path, uint64_t *ret) {
        char buf[64];
        int r = read_small_file(path, buf, sizeof(buf));
        if (r < 0)
                return r;
        *ret = strtoull(buf, NULL, 10);
        return 0;
}

/* The shared cpu group. Under RT_GROUP_SCHED a new group may run no
 * SCHED_FIFO thread until it has cpu.rt_runtime_us, and the kernel refuses
 * more than the parent's runtime minus what its other children hold. It
 * takes what the reservations can use at most, rt_share_ppm of each
 * period (the dispatch table, not this, is what bounds the clients), so
 * another instance, or a group a crashed instance left, cannot be starved
 * of the rest. A failure is noted in why (not fatal: accounting groups
 * work without it, the waiting threads just weigh more). */
static void cpu_group_setup(GroupSet *s, const char *cpu_root, uint32_t rt_share_ppm, char *why, size_t why_size) {
        char path[2 * PATH_MAX + 64], dir[PATH_MAX + 160];
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
                snprintf(why, why_size, "cannot create the cgroup %s: %s", dir, strerror(-r));
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
                        snprintf(why, why_size, "cannot give the cgroup %s real-time runtime (cpu.rt_runtime_us: "
                                 "%" PRIu64 " of the parent's %" PRIu64 " us are held by other groups): %s; "
                                 "reserved threads stay in their own cpu groups", dir, siblings, parent_runtime,
                                 strerror(-r));
                        (void) base_delete(s->name, "cpu");
                        return;
                }
        }
        snprintf(path, sizeof(path), "%s/cpu.shares", dir);
        (void) write_string_file(path, "2");
        if (snprintf(s->cpu_base, sizeof(s->cpu_base), "%s", dir) >= (int) sizeof(s->cpu_base)) {
                (void) base_delete(s->name, "cpu");
                s->cpu_base[0] = '\0';
                return;
        }
        snprintf(s->cpu_root, sizeof(s->cpu_root), "%s", cpu_root);
}

/* The cpuset base: a v1 cpuset must be given CPUs and memory nodes before
 * it can hold a task, and a child's must lie within its parent's, so the
 * base gets all of the root's. Best effort: without it members are held
 * to their CPU by affinity alone, which held.c checks around every run. */
static void cpuset_setup(GroupSet *s) {
        char path[PATH_MAX + 256], cpus[256], dir[PATH_MAX + 160], root[PATH_MAX];
        struct stat st;

        if (group_cpuset_mount(root, sizeof(root)) < 0)
                return;
        snprintf(dir, sizeof(dir), "%s/%s", root, s->name);
        if (stat(dir, &st) == 0)
                (void) base_delete(s->name, "cpuset");
        snprintf(path, sizeof(path), "%s/cpuset.cpus", root);
        if (read_small_file(path, cpus, sizeof(cpus)) < 0)
                return;
        cpus[strcspn(cpus, "\n")] = '\0';
        snprintf(path, sizeof(path), "%s/cpuset.mems", root);
        if (read_small_file(path, s->cpuset_mems, sizeof(s->cpuset_mems)) < 0)
                return;
        s->cpuset_mems[strcspn(s->cpuset_mems, "\n")] = '\0';
        if (base_create(s->name, "cpuset") < 0)
                return;
        snprintf(path, sizeof(path), "%s/cpuset.cpus", dir);
        if (write_string_file(path, cpus) < 0)
                goto fail;
        snprintf(path, sizeof(path), "%s/cpuset.mems", dir);
        if (write_string_file(path, s->cpuset_mems) < 0)
                goto fail;
        if (snprintf(s->cpuset_base, sizeof(s->cpuset_base), "%s", dir) >= (int) sizeof(s->cpuset_base)) {
                s->cpuset_base[0] = '\0';
                goto fail;
        }
        snprintf(s->cpuset_root, sizeof(s->cpuset_root), "%s", root);
        return;
fail:
        (void) base_delete(s->name, "cpuset");
}

static int v1_set_new(const char *name, uint32_t rt_share_ppm, pid_t owner, GroupSet **ret, char *why,
                      size_t why_size) {
        char acct[PATH_MAX], cpu[PATH_MAX];
        struct stat st;
        int r;

        if (v1_hierarchy(true, acct, sizeof(acct)) < 0)
                return -EOPNOTSUPP;
        /* Mounted together with cpu, a new group is also a cpu group: under
         * RT_GROUP_SCHED it starts with cpu.rt_runtime_us = 0 (SCHED_FIFO
         * refused) and the runtimes of all groups may not sum past their
         * parent's, one CPU's share, while reservations on several CPUs
         * need more. */
        bool cpu_apart = group_cpu_mount(cpu, sizeof(cpu)) == 0;
        if (!cpu_apart && mount_of("cpu", cpu, sizeof(cpu)) == 0) {
                char path[PATH_MAX + 32];
                snprintf(path, sizeof(path), "%s/cpu.rt_runtime_us", acct);
                if (stat(path, &st) == 0) {
                        snprintf(why, why_size,
                                 "cpuacct shares its hierarchy (%s) with cpu and the kernel has RT group "
                                 "scheduling: real-time threads in a group of their own would need "
                                 "cpu.rt_runtime_us of their own, which the kernel caps in total below what "
                                 "reservations on several CPUs need; mount cpuacct on its own to let pace use it",
                                 acct);
                        return -EOPNOTSUPP;
                }
        }

        GroupSet *s = group_set_alloc(&group_backend_v1, acct, name);
        if (!s)
                return -ENOMEM;
        if (snprintf(s->base, sizeof(s->base), "%s/%s", acct, name) >= (int) sizeof(s->base)) {
                s->base[0] = '\0';
                group_set_free(s);
                return -ENAMETOOLONG;
        }

        /* A crashed run's leftovers: their tasks go to the root (where they
         * came from is lost with the dead run); reserved ones come back
         * in at their next promotion. */
        if (stat(s->base, &st) == 0)
                (void) base_delete(name, "cpuacct");
        r = base_create(name, "cpuacct");
        if (r < 0) {
                snprintf(why, why_size, "cannot create the cgroup %s: %s", s->base, strerror(-r));
                s->base[0] = '\0';
                group_set_free(s);
                return r;
        }
        group_owner_mark(s, owner);
        if (cpu_apart)
                cpu_group_setup(s, cpu, rt_share_ppm, why, why_size);
        cpuset_setup(s);
        *ret = s;
        return 0;
}

static int v1_create(GroupSet *s, Group *g) {
        char path[PATH_MAX + 128];

        snprintf(g->dir, sizeof(g->dir), "%s/res-%" PRIu64, s->base, g->id);
        if (mkdir(g->dir, 0755) < 0 && errno != EEXIST)
                return negative_errno();
        g->dir_fd = open(g->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        snprintf(path, sizeof(path), "%s/cpuacct.usage_percpu", g->dir);
        g->usage_fd = open(path, O_RDONLY | O_CLOEXEC);
        if (g->dir_fd < 0 || g->usage_fd < 0) {
                int r = negative_errno();
                g->dir_fd = safe_close(g->dir_fd);
                g->usage_fd = safe_close(g->usage_fd);
                (void) rmdir(g->dir);
                return r;
        }
        return 0;
}

/* The reservation's own cpuset, holding exactly its CPUs. */
static int cpuset_create(GroupSet *s, Group *g, const char *proc_cgroup) {
        char path[PATH_MAX + 128];
        int r;

        if (group_read_orig(proc_cgroup, "cpuset", g->cpuset_orig, sizeof(g->cpuset_orig)) < 0)
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
                r = write_string_file(path, g->cpus);
        }
        if (r < 0) {
                (void) rmdir(g->cpuset_dir);
                g->cpuset_dir[0] = '\0';
        }
        return r;
}

static void cpuset_drop(Group *g) {
        (void) rmdir(g->cpuset_dir);
        g->cpuset_dir[0] = '\0';
}

/* One process (or thread) into the group and, when used, the shared cpu
 * group and the reservation's cpuset. */
static int v1_move_in(GroupSet *s, Group *g, const char *file, pid_t id, bool cpu) {
        int r = group_write_id(g->dir, file, id);
        if (r >= 0 && cpu)
                (void) group_write_id(s->cpu_base, file, id);
        if (r >= 0 && g->cpuset_dir[0] && group_write_id(g->cpuset_dir, file, id) < 0)
                cpuset_drop(g);
        return r;
}

static int v1_move_process_in(GroupSet *s, Group *g, pid_t pid) {
        return v1_move_in(s, g, "cgroup.procs", pid, s->cpu_base[0] && g->cpu_orig[0]);
}

static int v1_enter(GroupSet *s, Group *g, const char *proc_cgroup) {
        int r = group_read_orig(proc_cgroup, "cpuacct", g->orig, sizeof(g->orig));
        if (r < 0)
                return r;
        if (s->cpu_base[0] && group_read_orig(proc_cgroup, "cpu", g->cpu_orig, sizeof(g->cpu_orig)) < 0)
                g->cpu_orig[0] = '\0';
        bool cpu = s->cpu_base[0] && g->cpu_orig[0];
        if (s->cpuset_base[0] && g->cpus[0])
                (void) cpuset_create(s, g, proc_cgroup);
        if (g->scope == PACE_TABLE_SCOPE_THREAD)
                r = v1_move_in(s, g, "tasks", g->tid, cpu);
        else
                r = v1_move_in(s, g, "cgroup.procs", g->pid, cpu);
        /* Those forked before the grant; later ones are born inside. */
        if (r >= 0 && g->scope == PACE_TABLE_SCOPE_TREE)
                group_move_descendants(s, g, v1_move_process_in);
        g->confined = g->cpuset_dir[0] != '\0';
        g->weighed = cpu;
        return r;
}

static void v1_move_out(const GroupSet *s, const Group *g, const char *file, pid_t id, bool to_root) {
        group_move_back(s->root, to_root ? "/" : g->orig, file, id);
        if (s->cpu_base[0] && g->cpu_orig[0])
                group_move_back(s->cpu_root, to_root ? "/" : g->cpu_orig, file, id);
        if (g->cpuset_dir[0])
                group_move_back(s->cpuset_root, to_root ? "/" : g->cpuset_orig, file, id);
}

static int v1_destroy(GroupSet *s, Group *g) {
        bool gone = group_dir_removed(g->dir);
        if (g->cpuset_dir[0]) {
                /* Stragglers a fork raced in: to the root, so the group goes. */
                (void) group_empty_into(g->cpuset_dir, s->cpuset_root);
                gone = group_dir_removed(g->cpuset_dir) && gone;
        }
        return gone ? 0 : -EBUSY;
}

static int v1_usage_ns(Group *g, int cpu, uint64_t *ret) {
        char buf[2048];
        ssize_t n = pread(g->usage_fd, buf, sizeof(buf) - 1, 0);
        char *p = buf, *end;

        if (n < 0)
                return negative_errno();
        buf[n] = '\0';
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

static size_t v1_sweep_stale(GroupSet *s) {
        size_t left = s->base[0] ? group_sweep_stale_dir(s, s->base, s->root) : 0;
        if (s->cpuset_base[0])
                left += group_sweep_stale_dir(s, s->cpuset_base, s->cpuset_root);
        return left;
}

static void v1_set_free(GroupSet *s) {
        if (s->base[0])
                (void) rmdir(s->base);
        if (s->cpu_base[0]) {
                (void) cpu_group_drop_runtime(s->cpu_base);
                (void) rmdir(s->cpu_base);
        }
        if (s->cpuset_base[0])
                (void) rmdir(s->cpuset_base);
}

/* In every v1 hierarchy, the cpu group's real-time runtime given back
 * first; root (cpuacct's) is found again by each base_delete(). */
static int v1_remove_instance(const char *root, const char *name) {
        char cpu[PATH_MAX], dir[PATH_MAX + 128];

        if (mount_of("cpu", cpu, sizeof(cpu)) == 0) {
                snprintf(dir, sizeof(dir), "%s/%s", cpu, name);
                (void) cpu_group_drop_runtime(dir);
        }
        (void) base_delete(name, "cpu");
        (void) base_delete(name, "cpuset");
        return base_delete(name, "cpuacct");
}

const GroupBackend group_backend_v1 = {
        .name = "cgroup v1",
        .list_file = { [LIST_TASKS] = "tasks", [LIST_PROCS] = "cgroup.procs" },
        .create = v1_create,
        .enter = v1_enter,
        .move_out = v1_move_out,
        .destroy = v1_destroy,
        .sweep_stale = v1_sweep_stale,
        .usage_ns = v1_usage_ns,
        .set_free = v1_set_free,
        .set_new = v1_set_new,
        .hierarchy = v1_hierarchy,
        .remove_instance = v1_remove_instance,
};
