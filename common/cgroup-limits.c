/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cgroup-limits.h"
#include "macro.h"
#include "proc-util.h"

/* A limit file's value that sets nothing. */
static bool unset(const char *file, const char *value) {
        if (value[0] == '\0')
                return true; /* io.max, cpuset.mems: empty until set */
        if (strcmp(file, "cpu.cfs_quota_us") == 0)
                return strcmp(value, "-1") == 0;
        /* cpu.max: "max 100000"; the others: "max". */
        return strncmp(value, "max", 3) == 0 && (value[3] == '\0' || value[3] == ' ');
}

/* Whether dir (a cgroup directory) sets one of files; the sentence if so. */
static bool level_limits(const char *dir, const char *shown, const char *const *files, char *ret, size_t size) {
        for (const char *const *f = files; *f; f++) {
                char path[PATH_MAX * 2 + 64], value[256];
                int n = snprintf(path, sizeof(path), "%s/%s", dir, *f);
                if (n < 0 || (size_t) n >= sizeof(path) || read_small_file(path, value, sizeof(value)) < 0)
                        continue;
                value[strcspn(value, "\n")] = '\0';
                if (unset(*f, value))
                        continue;
                snprintf(ret, size, "cgroup %s sets %s to %s", shown, *f, value);
                return true;
        }
        return false;
}

/* Each level of path from the deepest up to (not including) the first
 * `keep` characters, under mount. */
static int walk_levels(const char *mount, const char *path, size_t keep, const char *const *files, char *ret,
                       size_t size) {
        char level[PATH_MAX];
        int n = snprintf(level, sizeof(level), "%s", path);
        if (n < 0 || (size_t) n >= sizeof(level))
                return -ENAMETOOLONG;
        for (size_t len = strlen(level); len > keep && len > 1;) {
                char dir[PATH_MAX * 2];
                snprintf(dir, sizeof(dir), "%s%s", mount, level);
                if (level_limits(dir, level, files, ret, size))
                        return 1;
                while (len > 0 && level[len - 1] != '/')
                        len--;
                if (len > 1)
                        len--; /* the '/' before this level */
                level[len] = '\0';
        }
        return 0;
}

/* How much of a unified path stays above the scope pace would ask for: up
 * to the end of its last *.slice component (0: nothing, no systemd). */
static size_t slice_prefix(const char *path) {
        size_t keep = 0;
        for (const char *p = path; (p = strstr(p, ".slice"));) {
                p += 6;
                if (*p == '/' || *p == '\0')
                        keep = (size_t) (p - path);
        }
        return keep;
}

int cgroup_limit_lifted(const char *sys_cgroup, const char *proc_cgroup_text, char *ret, size_t size) {
        static const char *const v1_cpu[] = { "cpu.cfs_quota_us", NULL };
        static const char *const unified[] = { "cpu.max", "memory.max", "memory.high", "memory.swap.max",
                                               "pids.max", "io.max", "cpuset.mems", NULL };
        /* Under systemd every unit has a pids.max (DefaultTasksMax=), and
         * so does the scope pace asks for: not one a reservation lifts. */
        static const char *const unified_systemd[] = { "cpu.max", "memory.max", "memory.high", "memory.swap.max",
                                                       "io.max", "cpuset.mems", NULL };
        char path[PATH_MAX], mount[PATH_MAX];
        struct stat st;

        /* Hybrid: the v1 cpu hierarchy, wherever cpu is mounted. */
        if (proc_cgroup_v1_path(proc_cgroup_text, "cpu", path, sizeof(path)) == 0) {
                static const char *const mounts[] = { "cpu", "cpu,cpuacct", "cpuacct,cpu" };
                for (size_t i = 0; i < ELEMENTSOF(mounts); i++) {
                        snprintf(mount, sizeof(mount), "%s/%s", sys_cgroup, mounts[i]);
                        if (stat(mount, &st) == 0)
                                return walk_levels(mount, path, 0, v1_cpu, ret, size);
                }
                return 0;
        }
        /* Unified only: the hierarchy at sys_cgroup itself. */
        snprintf(mount, sizeof(mount), "%s/cgroup.controllers", sys_cgroup);
        if (stat(mount, &st) < 0 || proc_cgroup_v2_path(proc_cgroup_text, path, sizeof(path)) < 0)
                return 0;
        size_t keep = slice_prefix(path);
        return walk_levels(sys_cgroup, path, keep, keep > 0 ? unified_systemd : unified, ret, size);
}

int cgroup_limit_lifted_pid(const char *sys_cgroup, pid_t pid, char *ret, size_t size) {
        char path[64], text[4096], ignored[8];

        snprintf(path, sizeof(path), "/proc/%d/cgroup", (int) pid);
        if (read_small_file(path, text, sizeof(text)) < 0)
                return 0;
        return ret ? cgroup_limit_lifted(sys_cgroup, text, ret, size)
                   : cgroup_limit_lifted(sys_cgroup, text, ignored, sizeof(ignored));
}
