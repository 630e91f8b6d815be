/* SPDX-License-Identifier: MIT */
/* The unified-hierarchy backend (cgroup v2: every current distribution).
 * One cgroup per reservation does every job: members and their children
 * live in it (children are born inside), its cgroup.threads lists them,
 * cpu.stat says what they received, cgroup.freeze holds them in strict
 * mode, and where the host offers the controllers, cpu.weight 1 keeps its
 * waiting members (nice 19, however many) from taking more than a sliver
 * of the free time and cpuset.cpus confines them to the reservation's CPUs.
 *
 * Where it lives follows systemd's delegation rules:
 *  - no manager owns the hierarchy (this process sits in its root): groups
 *    of our own, <root>/pace.<hash>/res-<id>;
 *  - under a manager: never a cgroup beside its units. The main thread asks
 *    it (make_scope, D-Bus) for a delegated transient scope per reserved
 *    tree, and our group is the scope's "pace" subgroup.
 * A thread-scope reservation gets no group: v2 moves whole processes into
 * an ordinary group (a thread alone needs threaded mode). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "group-backend.h"
#include "macro.h"
#include "pace-table.h"
#include "proc-util.h"

#define CGROUP2_SUPER_MAGIC_ 0x63677270

static bool unified_mounted(void) {
        struct statfs sf;
        return statfs(GROUP_UNIFIED_ROOT, &sf) == 0 && (uint64_t) sf.f_type == CGROUP2_SUPER_MAGIC_;
}

static bool in_root_cgroup(void) {
        char own[PATH_MAX];
        return group_read_orig("/proc/self/cgroup", NULL, own, sizeof(own)) == 0 && strcmp(own, "/") == 0;
}

static int unified_hierarchy(bool new_groups, char *ret, size_t size) {
        if (!unified_mounted() || (new_groups && !in_root_cgroup()))
                return -EOPNOTSUPP;
        snprintf(ret, size, "%s", GROUP_UNIFIED_ROOT);
        return 0;
}

/* Every res-* group under base thawed, emptied into the root and removed,
 * then base. */
static void unified_remove_base(const char *base) {
        DIR *d = opendir(base);
        char path[PATH_MAX + 300];

        for (struct dirent *de; d && (de = readdir(d));) {
                if (de->d_type != DT_DIR || de->d_name[0] == '.')
                        continue;
                snprintf(path, sizeof(path), "%s/%s/cgroup.freeze", base, de->d_name);
                (void) write_string_file(path, "0");
                snprintf(path, sizeof(path), "%s/%s", base, de->d_name);
                for (int round = 0; round < 8 && group_empty_into(path, GROUP_UNIFIED_ROOT) > 0; round++)
                        ;
                (void) rmdir(path);
        }
        if (d)
                closedir(d);
        (void) rmdir(base);
}

/* Whether the space-separated list in file names word. */
static bool file_has_word(const char *path, const char *word) {
        char buf[512];
        size_t len = strlen(word);

        if (read_small_file(path, buf, sizeof(buf)) < 0)
                return false;
        for (char *p = buf; (p = strstr(p, word)); p += len)
                if ((p == buf || p[-1] == ' ') && (p[len] == ' ' || p[len] == '\n' || p[len] == '\0'))
                        return true;
        return false;
}

/* Whether SCHED_FIFO works for a process in dir (with the cpu controller
 * enabled above it): a kernel with RT_GROUP_SCHED gives a non-root v2
 * group no real-time runtime, and the promotion would fail with EPERM.
 * Asked of the kernel itself, by a child moved there, since no file says
 * it on v2 and a kernel built with it may have it off (rt_group_sched=0). */
static bool fifo_works_in(const char *dir) {
        char procs[2 * PATH_MAX];
        int status;

        snprintf(procs, sizeof(procs), "%s/cgroup.procs", dir);
        pid_t pid = fork();
        if (pid < 0)
                return false;
        if (pid == 0) {
                struct sched_param sp = { .sched_priority = 1 };
                if (write_string_file(procs, "0") < 0)
                        _exit(2);
                _exit(sched_setscheduler(0, SCHED_FIFO | SCHED_RESET_ON_FORK, &sp) == 0 ? 0 : 1);
        }
        while (waitpid(pid, &status, 0) < 0)
                if (errno != EINTR)
                        return false;
        return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static int enable(const char *dir, const char *what) {
        char path[2 * PATH_MAX];
        snprintf(path, sizeof(path), "%s/cgroup.subtree_control", dir);
        return write_string_file(path, what);
}

/* controller (e.g. "cpu") enabled for the root's children, remembered in
 * slot if it was not already, so the end gives back just what we added. */
static int enable_at_root(GroupSet *s, const char *controller, unsigned slot) {
        char path[PATH_MAX + 32], what[16];

        snprintf(path, sizeof(path), "%s/cgroup.subtree_control", s->root);
        if (file_has_word(path, controller))
                return 0;
        snprintf(what, sizeof(what), "+%s", controller);
        int r = enable(s->root, what);
        if (r >= 0)
                snprintf(s->root_enabled[slot], sizeof(s->root_enabled[slot]), "-%s", controller);
        return r;
}

/* The cpu and cpuset controllers for our groups, root-owned mode. What
 * cannot be had goes into note, with what the administrator can do. */
static void cpu_give_back(GroupSet *s) {
        (void) enable(s->base, "-cpu");
        if (s->root_enabled[0][0] && enable(s->root, s->root_enabled[0]) >= 0)
                s->root_enabled[0][0] = '\0';
}

/* Weights count among siblings only: the groups' own weight 1 means
 * nothing unless their parent weighs little beside the root's other
 * children too. */
static int write_base_weight(GroupSet *s) {
        char path[PATH_MAX + 32];
        snprintf(path, sizeof(path), "%s/cpu.weight", s->base);
        return write_string_file(path, "1");
}

static void controllers_setup(GroupSet *s, char *why, size_t why_size) {
        char path[PATH_MAX + 32], probe[PATH_MAX + 32];
        bool cpu_offered, cpuset_offered;
        int r;

        snprintf(path, sizeof(path), "%s/cgroup.controllers", s->root);
        cpu_offered = file_has_word(path, "cpu");
        cpuset_offered = file_has_word(path, "cpuset");
        if (cpuset_offered && enable_at_root(s, "cpuset", 1) >= 0 && enable(s->base, "+cpuset") >= 0)
                s->use_cpuset = true;
        if (!cpu_offered) {
                snprintf(why, why_size, "the unified hierarchy offers no cpu controller (it is bound to a cgroup v1 "
                         "hierarchy, or the kernel lacks it): waiting members are held at SCHED_IDLE only, so a "
                         "reservation with many threads takes a little of the free time between its slots");
        } else if ((r = enable_at_root(s, "cpu", 0)) < 0 || (r = enable(s->base, "+cpu")) < 0) {
                cpu_give_back(s);
                snprintf(why, why_size, "cannot enable the cpu controller for %s (%s): waiting members are held "
                         "at SCHED_IDLE only; with RT_GROUP_SCHED the kernel refuses it while real-time threads sit "
                         "outside the root cgroup: boot with rt_group_sched=0 (Linux 6.16 and later) or a kernel "
                         "without CONFIG_RT_GROUP_SCHED", s->base, strerror(-r));
        } else {
                snprintf(probe, sizeof(probe), "%s/probe", s->base);
                if (mkdir(probe, 0755) < 0 && errno != EEXIST) {
                        r = negative_errno();
                        cpu_give_back(s);
                        snprintf(why, why_size, "cannot create %s: %s", probe, strerror(-r));
                } else if (!fifo_works_in(probe)) {
                        (void) rmdir(probe);
                        cpu_give_back(s);
                        snprintf(why, why_size, "the kernel has RT group scheduling (RT_GROUP_SCHED): SCHED_FIFO is "
                                 "refused inside a cgroup with the cpu controller, so pace leaves the controller off "
                                 "and holds waiting members at SCHED_IDLE only; boot with rt_group_sched=0 (Linux 6.16 "
                                 "and later) or a kernel without CONFIG_RT_GROUP_SCHED to let it weigh them");
                } else if ((r = write_base_weight(s)) < 0) {
                        cpu_give_back(s);
                        snprintf(why, why_size, "cannot weigh %s down (cpu.weight: %s): waiting members are held "
                                 "at SCHED_IDLE only", s->base, strerror(-r));
                } else {
                        s->use_cpu = true;
                }
                (void) rmdir(probe);
        }
}

/* rt_share_ppm is v1's (its cpu group's real-time runtime): pace gives
 * its unified groups none. */
static int unified_set_new(const char *name, uint32_t rt_share_ppm, pid_t owner, GroupSet **ret, char *why,
                           size_t why_size) {
        struct stat st;

        if (!unified_mounted()) {
                snprintf(why, why_size, "no cgroup v1 cpuacct hierarchy is mounted and %s is not the unified "
                         "hierarchy", GROUP_UNIFIED_ROOT);
                return -EOPNOTSUPP;
        }
        GroupSet *s = group_set_alloc(&group_backend_unified, GROUP_UNIFIED_ROOT, name);
        if (!s)
                return -ENOMEM;
        if (!in_root_cgroup()) {
                /* Nothing of ours beside the manager's units: each reserved
                 * tree gets a delegated scope from it instead, with every
                 * controller the hierarchy offers, ours to enable below it
                 * (delegated_enter(), which also asks the kernel whether
                 * SCHED_FIFO survives the cpu controller). */
                char path[PATH_MAX + 32];
                s->delegated = true;
                snprintf(path, sizeof(path), "%s/cgroup.controllers", s->root);
                s->use_cpu = file_has_word(path, "cpu");
                s->use_cpuset = file_has_word(path, "cpuset");
                if (!s->use_cpu)
                        snprintf(why, why_size, "the unified hierarchy offers no cpu controller: waiting members are "
                                 "held at SCHED_IDLE only, and their time between runs counts against the budget");
                *ret = s;
                return 0;
        }
        snprintf(s->base, sizeof(s->base), "%s/%s", GROUP_UNIFIED_ROOT, name);
        if (stat(s->base, &st) == 0)
                unified_remove_base(s->base);
        if (mkdir(s->base, 0755) < 0 && errno != EEXIST) {
                int r = negative_errno();
                snprintf(why, why_size, "cannot create the cgroup %s: %s", s->base, strerror(-r));
                s->base[0] = '\0';
                group_set_free(s);
                return r;
        }
        group_owner_mark(s, owner);
        controllers_setup(s, why, why_size);
        *ret = s;
        return 0;
}

/* The controllers' settings of a new group: the waiting members weigh as
 * little as the kernel allows; the members stay on the reservation's CPUs.
 * Best effort each: what fails leaves the group as it would be without. */
static void controllers_apply(GroupSet *s, Group *g) {
        char path[PATH_MAX + 96];

        if (s->use_cpu) {
                snprintf(path, sizeof(path), "%s/cpu.weight", g->dir);
                g->weighed = write_string_file(path, "1") >= 0;
        }
        if (s->use_cpuset && g->cpus[0]) {
                snprintf(path, sizeof(path), "%s/cpuset.cpus", g->dir);
                g->confined = write_string_file(path, g->cpus) >= 0;
        }
}

static int open_group(Group *g) {
        char path[PATH_MAX + 96];

        g->dir_fd = open(g->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        snprintf(path, sizeof(path), "%s/cpu.stat", g->dir);
        g->usage_fd = open(path, O_RDONLY | O_CLOEXEC);
        if (g->dir_fd < 0 || g->usage_fd < 0) {
                int r = negative_errno();
                g->dir_fd = safe_close(g->dir_fd);
                g->usage_fd = safe_close(g->usage_fd);
                return r;
        }
        return 0;
}

static int unified_create(GroupSet *s, Group *g) {
        if (s->delegated) /* made by the main thread, in the scope */
                return 0;
        snprintf(g->dir, sizeof(g->dir), "%s/res-%" PRIu64, s->base, g->id);
        if (mkdir(g->dir, 0755) < 0 && errno != EEXIST)
                return negative_errno();
        int r = open_group(g);
        if (r < 0)
                (void) rmdir(g->dir);
        return r;
}

static int unified_move_process_in(GroupSet *s, Group *g, pid_t pid) {
        return group_write_id(g->dir, "cgroup.procs", pid);
}

static int unified_enter(GroupSet *s, Group *g, const char *proc_cgroup) {
        if (g->scope == PACE_TABLE_SCOPE_THREAD)
                return -EOPNOTSUPP;
        if (s->delegated) {
                __atomic_store_n(&g->pending, true, __ATOMIC_RELEASE); /* the main thread asks for a scope */
                return 0;
        }
        int r = group_read_orig(proc_cgroup, NULL, g->orig, sizeof(g->orig));
        if (r < 0)
                return r;
        /* Before anyone is inside: a member must never run unconfined. */
        controllers_apply(s, g);
        r = group_write_id(g->dir, "cgroup.procs", g->pid);
        /* Those forked before the grant; later ones are born inside. */
        if (r >= 0 && g->scope == PACE_TABLE_SCOPE_TREE)
                group_move_descendants(s, g, unified_move_process_in);
        return r;
}

static void unified_move_out(const GroupSet *s, const Group *g, const char *file, pid_t id, bool to_root) {
        /* Delegated: back into its unit's own cgroup, not the scope, which
         * has controllers enabled below it and takes no process (EBUSY),
         * and outside which the unit's limits would stop applying. */
        group_move_back(s->root, to_root ? "/" : g->home[0] ? g->home : g->orig, file, id);
}

static int unified_destroy(GroupSet *s, Group *g) {
        return group_dir_removed(g->dir) ? 0 : -EBUSY;
}

/* Delegated sets have no base: their groups live in the manager's scopes,
 * which go with their units. */
static size_t unified_sweep_stale(GroupSet *s) {
        return s->base[0] ? group_sweep_stale_dir(s, s->base, s->root) : 0;
}

/* cpu.stat has the group's total only: right for a reservation on one
 * CPU, the sum of the pieces for a split one. */
static int unified_usage_ns(Group *g, int cpu, uint64_t *ret) {
        char buf[2048];
        ssize_t n = pread(g->usage_fd, buf, sizeof(buf) - 1, 0);

        if (n < 0)
                return negative_errno();
        buf[n] = '\0';
        char *p = strstr(buf, "usage_usec ");
        if (!p)
                return -ENOENT;
        *ret = strtoull(p + strlen("usage_usec "), NULL, 10) * NSEC_PER_USEC;
        return 0;
}

/* Everything in the scope's own cgroup, into our subgroup: what the manager
 * moved in, and children that a process forked there before it was moved
 * (born beside it, in the scope). Again at every housekeeping round. */
static void delegated_gather(GroupSet *s, Group *g, char *why, size_t why_size) {
        char path[2 * PATH_MAX + 64], line[32];

        snprintf(path, sizeof(path), "%s%s/cgroup.procs", s->root, g->orig);
        for (int round = 0; round < 4; round++) {
                FILE *f = fopen(path, "re");
                bool any = false;
                for (unsigned k = 0; f && k < 256 && fgets(line, sizeof(line), f); k++) {
                        line[strcspn(line, "\n")] = '\0';
                        int r = group_write_id(g->dir, "cgroup.procs", (pid_t) strtol(line, NULL, 10));
                        if (r < 0 && r != -ESRCH)
                                snprintf(why, why_size, "cannot move pid %s into %s: %s", line, g->dir, strerror(-r));
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
 * "pace" subgroup, which is ours to weigh, confine and freeze. The scope's
 * own cgroup must be empty before controllers can be enabled below it (no
 * internal processes), hence the order. */
static void delegated_enter(GroupSet *s, Group *g, GroupMakeScope make_scope, void *userdata, char *why,
                            size_t why_size) {
        char scope_dir[PATH_MAX + 1100];
        GroupScopeAnswer answer = {};
        int r;

        /* Weights count among siblings only: our subgroup is the scope's
         * one child, so the scope itself must weigh little against the
         * slice's other units (the client's own among them). */
        GroupScopeRequest req = { .pid = g->pid, .uid = g->uid, .max_threads = g->max_threads, .id = g->id,
                                  .cpu_weight = s->use_cpu ? 1 : 0 };
        r = make_scope ? make_scope(userdata, &req, &answer) : -EOPNOTSUPP;
        if (r < 0) {
                snprintf(why, why_size, "no scope for reservation %" PRIu64 " of pid %" PRIi32 ": %s", g->id, g->pid,
                         answer.why[0] ? answer.why : strerror(-r));
                return; /* never entered: the loop keeps to /proc */
        }
        const char *scope = answer.scope;
        snprintf(g->orig, sizeof(g->orig), "%s", scope);
        snprintf(g->home, sizeof(g->home), "%s", answer.home);
        snprintf(scope_dir, sizeof(scope_dir), "%s%s", s->root, scope);
        int k = snprintf(g->dir, sizeof(g->dir), "%s/pace", scope_dir);
        if (k < 0 || (size_t) k >= sizeof(g->dir) || (mkdir(g->dir, 0755) < 0 && errno != EEXIST)) {
                snprintf(why, why_size, "cannot create a group in the scope %s: %s", scope, strerror(errno));
                g->dir[0] = '\0';
                return;
        }
        delegated_gather(s, g, why, why_size);
        char controllers[32] = "";
        if (s->use_cpu)
                strcat(controllers, "+cpu ");
        if (s->use_cpuset)
                strcat(controllers, "+cpuset");
        if (controllers[0] && enable(scope_dir, controllers) >= 0) {
                if (s->use_cpu && !fifo_works_in(g->dir)) {
                        /* RT_GROUP_SCHED: never again, for any scope; the
                         * run-skipping of held_budget_spent() takes over. */
                        (void) enable(scope_dir, "-cpu");
                        s->use_cpu = false;
                }
                controllers_apply(s, g);
        }
        if (open_group(g) < 0)
                return;
        if (g->scope == PACE_TABLE_SCOPE_TREE)
                group_refresh_candidates(s, g);
        __atomic_store_n(&g->entered, true, __ATOMIC_RELEASE);
}

static void unified_housekeep(GroupSet *s, Group *g, GroupMakeScope make_scope, void *userdata, char *why,
                              size_t why_size) {
        if (__atomic_load_n(&g->pending, __ATOMIC_ACQUIRE)) {
                delegated_enter(s, g, make_scope, userdata, why, why_size);
                /* Entered, or never to be: the loop promotes again. */
                __atomic_store_n(&g->pending, false, __ATOMIC_RELEASE);
        }
        else if (s->delegated && __atomic_load_n(&g->entered, __ATOMIC_ACQUIRE))
                delegated_gather(s, g, why, why_size);
}

static void unified_set_free(GroupSet *s) {
        if (s->base[0])
                (void) rmdir(s->base);
        /* Refused while another cgroup still uses it: then it stays. */
        for (unsigned i = 0; i < ELEMENTSOF(s->root_enabled); i++)
                if (s->root_enabled[i][0])
                        (void) enable(s->root, s->root_enabled[i]);
}

static int unified_remove_instance(const char *root, const char *name) {
        char base[PATH_MAX + 64];

        snprintf(base, sizeof(base), "%s/%s", root, name);
        unified_remove_base(base);
        return 0;
}

const GroupBackend group_backend_unified = {
        .name = "unified",
        .list_file = { [LIST_TASKS] = "cgroup.threads", [LIST_PROCS] = "cgroup.procs" },
        .create = unified_create,
        .enter = unified_enter,
        .move_out = unified_move_out,
        .destroy = unified_destroy,
        .sweep_stale = unified_sweep_stale,
        .usage_ns = unified_usage_ns,
        .housekeep = unified_housekeep,
        .set_free = unified_set_free,
        .set_new = unified_set_new,
        .hierarchy = unified_hierarchy,
        .remove_instance = unified_remove_instance,
};
