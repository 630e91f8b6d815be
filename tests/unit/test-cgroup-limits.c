/* SPDX-License-Identifier: MIT */
/* Which limits a reservation would lift (issue 26, case 3), against fake
 * cgroup file systems: a v1 cpu hierarchy beside others, a unified-only one
 * with and without systemd's slices. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cgroup-limits.h"
#include "macro.h"
#include "test.h"

static void put(const char *root, const char *rel, const char *text) {
        char path[PATH_MAX], cmd[PATH_MAX + 32];
        snprintf(path, sizeof(path), "%s/%s", root, rel);
        snprintf(cmd, sizeof(cmd), "mkdir -p \"$(dirname '%s')\"", path);
        ASSERT_EQ(system(cmd), 0);
        FILE *f = fopen(path, "we");
        ASSERT_TRUE(f);
        fputs(text, f);
        fclose(f);
}

static void cleanup(const char *root) {
        char cmd[PATH_MAX + 16];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
        ASSERT_EQ(system(cmd), 0);
}

/* The cgroups of a process (as /proc/PID/cgroup has them) are on a path
 * with a limit a reservation would lift, the one named as says. */
static void assert_lifted(const char *root, const char *cgroups, const char *says) {
        char why[512];

        ASSERT_EQ(cgroup_limit_lifted(root, cgroups, why, sizeof(why)), 1);
        ASSERT_STREQ(why, says);
}

static void assert_kept(const char *root, const char *cgroups) {
        char why[512];

        ASSERT_EQ(cgroup_limit_lifted(root, cgroups, why, sizeof(why)), 0);
}

/* The tests name every file by its path: the directory's fd is not wanted. */
static void make_root(const char *name, char *root, size_t size) {
        int fd = test_temp_dir(name, root, size);

        close(fd);
}

TEST(a_v1_cpu_quota_on_any_level_is_named) {
        char root[128];
        make_root("cgv1", root, sizeof(root));

        put(root, "cpu/cpu.cfs_quota_us", "-1\n");
        put(root, "cpu/a/cpu.cfs_quota_us", "10000\n");
        put(root, "cpu/a/b/cpu.cfs_quota_us", "-1\n");
        put(root, "cpu/c/cpu.cfs_quota_us", "-1\n");
        put(root, "memory/a/memory.limit_in_bytes", "1048576\n");
        const char *in_b = "12:memory:/a\n4:cpu,cpuacct:/a/b\n1:name=systemd:/a\n0::/\n";
        assert_lifted(root, in_b, "cgroup /a sets cpu.cfs_quota_us to 10000");
        /* A quota nowhere on its path; memory is a hierarchy pace never
         * moves through. */
        assert_kept(root, "12:memory:/a\n4:cpu,cpuacct:/c\n");
        assert_kept(root, "4:cpu,cpuacct:/\n");
        cleanup(root);
}

TEST(unified_limits_below_the_last_slice_are_named_and_the_slices_kept) {
        char root[128];
        make_root("cgv2", root, sizeof(root));

        put(root, "cgroup.controllers", "cpu memory pids\n");
        put(root, "system.slice/pids.max", "4000\n"); /* stays above a scope there */
        /* Every unit's DefaultTasksMax=: the scope gets one too. */
        put(root, "system.slice/a.service/pids.max", "4915\n");
        put(root, "system.slice/a.service/cpu.max", "max 100000\n");
        put(root, "system.slice/a.service/memory.max", "max\n");
        put(root, "system.slice/b.service/memory.high", "1073741824\n");
        put(root, "plain/cpu.max", "20000 100000\n");
        put(root, "plain/inner/io.max", "");
        put(root, "plain2/pids.max", "100\n");
        assert_kept(root, "0::/system.slice/a.service\n");
        assert_lifted(root, "0::/system.slice/b.service\n", "cgroup /system.slice/b.service sets memory.high to 1073741824");
        /* No systemd: every level goes. */
        assert_lifted(root, "0::/plain/inner\n", "cgroup /plain sets cpu.max to 20000 100000");
        assert_lifted(root, "0::/plain2\n", "cgroup /plain2 sets pids.max to 100");
        assert_kept(root, "0::/\n");
        cleanup(root);
}

TEST(a_hybrid_host_is_judged_by_v1_alone) {
        char root[128];
        make_root("cghy", root, sizeof(root));

        /* No cgroup.controllers at the root: the unified view is not where
         * pace's groups are, so its limits are not looked at. */
        put(root, "cpu/cpu.cfs_quota_us", "-1\n");
        put(root, "unified/x/cpu.max", "1000 100000\n");
        assert_kept(root, "4:cpu,cpuacct:/\n0::/x\n");
        cleanup(root);
}

TEST_MAIN()
