/* SPDX-License-Identifier: MIT */
/* The v1 freezer backend on a directory tree that stands in for the
 * hierarchy (the kernel's control files are plain files here, made by the
 * test): finding the mount in mountinfo, the paths it builds, what it
 * writes to freeze, thaw and move members, where members go back to, the
 * sweep of a dead instance's groups, and that a failed entry leaves
 * nothing made. The real kernel's side is the integration tests'. */
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "freezer-v1.h"
#include "test.h"

#define NAME "pace.0123456789abcdef"

typedef struct Fake {
        char top[64];      /* the temporary directory */
        char proc[96];     /* stands in for /proc */
        char mount[96];    /* the freezer hierarchy's mount */
        char base[160];    /* mount/NAME */
        char procdir[128]; /* a process's /proc/PID */
} Fake;

static void write_file(const char *dir, const char *name, const char *content) {
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(write(fd, content, strlen(content)), (ssize_t) strlen(content));
        close(fd);
}

static void assert_file(const char *dir, const char *name, const char *content) {
        char path[512], buf[256] = {};
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ASSERT_TRUE(fd >= 0);
        ASSERT_TRUE(read(fd, buf, sizeof(buf) - 1) >= 0);
        close(fd);
        ASSERT_STREQ(buf, content);
}

static void make_dir(const char *dir, const char *name) {
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        ASSERT_OK(mkdir(path, 0755));
}

/* A group directory with the control files the kernel would make. */
static void make_group(const char *parent, const char *name, const char *state) {
        char path[512];
        make_dir(parent, name);
        snprintf(path, sizeof(path), "%s/%s", parent, name);
        write_file(path, "freezer.state", state);
        write_file(path, "cgroup.procs", "");
        write_file(path, "tasks", "");
}

/* The stand-in tree, in a new temporary directory. A test declares its Fake
 * _cleanup_(fake_remove) and makes it first thing, so that it goes when the
 * test returns. */
static void fake_make(Fake *f) {
        char path[256], line[512];

        close(test_temp_dir("freezer", f->top, sizeof(f->top)));
        snprintf(f->proc, sizeof(f->proc), "%s/proc", f->top);
        snprintf(f->mount, sizeof(f->mount), "%s/freezer", f->top);
        snprintf(f->base, sizeof(f->base), "%s/" NAME, f->mount);
        snprintf(f->procdir, sizeof(f->procdir), "%s/4242", f->proc);
        ASSERT_OK(mkdir(f->proc, 0755));
        snprintf(path, sizeof(path), "%s/self", f->proc);
        ASSERT_OK(mkdir(path, 0755));
        snprintf(line, sizeof(line),
                 "30 25 0:26 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:11 - cgroup cgroup rw,cpu,cpuacct\n"
                 "35 25 0:30 / %s rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,freezer\n",
                 f->mount);
        write_file(path, "mountinfo", line);
        ASSERT_OK(mkdir(f->procdir, 0755));
        ASSERT_OK(mkdir(f->mount, 0755));
        write_file(f->mount, "cgroup.procs", "");
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw) {
        return remove(path);
}

static void fake_remove(Fake *f) {
        ASSERT_OK(nftw(f->top, remove_entry, 16, FTW_DEPTH | FTW_PHYS));
}

static int open_dir(const char *path) {
        int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ASSERT_TRUE(fd >= 0);
        return fd;
}

/* A group of the instance's, under f->base (made first if it is not
 * there): its path in ret_path. */
static void make_instance_group(const Fake *f, const char *name, const char *state, char *ret_path, size_t size) {
        if (access(f->base, F_OK) < 0)
                ASSERT_OK(mkdir(f->base, 0755));
        make_group(f->base, name, state);
        snprintf(ret_path, size, "%s/%s", f->base, name);
}

/* freezer_v1_enter() for tid of the fake's process (pid 4242), through its
 * /proc directory. */
static int enter(FreezerV1 *fz, const Fake *f, uint64_t id, pid_t tid, bool thread, FreezerV1Group **ret) {
        int procfd = open_dir(f->procdir);
        int r = freezer_v1_enter(fz, id, procfd, tid, thread, ret);
        close(procfd);
        return r;
}

TEST(find_root_reads_the_freezer_mount_from_mountinfo) {
        char path[256], root[256];
        _cleanup_(fake_remove) Fake f;

        fake_make(&f);
        ASSERT_OK(freezer_v1_find_root(f.proc, root, sizeof(root)));
        ASSERT_STREQ(root, f.mount);
        /* Too small for the path: not found, rather than cut short. */
        ASSERT_ERR(freezer_v1_find_root(f.proc, root, 8), -EOPNOTSUPP);

        /* Unified only: no freezer line. */
        snprintf(path, sizeof(path), "%s/self", f.proc);
        write_file(path, "mountinfo", "30 1 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw\n");
        ASSERT_ERR(freezer_v1_find_root(f.proc, root, sizeof(root)), -EOPNOTSUPP);
        ASSERT_ERR(freezer_v1_find_root("/nonexistent", root, sizeof(root)), -ENOENT);
}

TEST(open_builds_the_instance_and_group_paths) {
        _cleanup_(freezer_v1_closep) FreezerV1 *fz = NULL;
        char path[512], want[512];
        _cleanup_(fake_remove) Fake f;

        fake_make(&f);
        ASSERT_OK(freezer_v1_open(f.proc, NAME, &fz));
        ASSERT_STREQ(freezer_v1_root(fz), f.mount);
        ASSERT_STREQ(freezer_v1_base(fz), f.base);
        ASSERT_OK(freezer_v1_group_path(fz, 42, path, sizeof(path)));
        snprintf(want, sizeof(want), "%s/res-42", f.base);
        ASSERT_STREQ(path, want);
        ASSERT_ERR(freezer_v1_group_path(fz, 42, path, 16), -ENAMETOOLONG);
        /* Opening makes nothing (the monitor only sweeps), and neither
         * does closing what was only opened. */
        fz = freezer_v1_close(fz);
        ASSERT_TRUE(access(f.base, F_OK) < 0);
        ASSERT_TRUE(freezer_v1_close(NULL) == NULL);
}

TEST(open_without_a_freezer_is_not_supported) {
        FreezerV1 *fz = NULL;
        char path[256];
        _cleanup_(fake_remove) Fake f;

        fake_make(&f);
        snprintf(path, sizeof(path), "%s/self", f.proc);
        write_file(path, "mountinfo", "30 1 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw\n");
        ASSERT_ERR(freezer_v1_open(f.proc, NAME, &fz), -EOPNOTSUPP);
        ASSERT_TRUE(fz == NULL);
}

TEST(anchor_is_frozen_until_close) {
        FreezerV1 *fz = NULL;
        char anchor[256];
        _cleanup_(fake_remove) Fake f;

        fake_make(&f);
        make_instance_group(&f, "anchor", "THAWED", anchor, sizeof(anchor));
        ASSERT_OK(freezer_v1_open(f.proc, NAME, &fz));
        ASSERT_OK(freezer_v1_anchor(fz));
        assert_file(anchor, "freezer.state", "FROZEN");
        fz = freezer_v1_close(fz);
        assert_file(anchor, "freezer.state", "THAWED");
}

TEST(anchor_says_why_it_cannot_be_made) {
        FreezerV1 *fz = NULL;
        _cleanup_(fake_remove) Fake f;

        fake_make(&f);
        ASSERT_OK(freezer_v1_open(f.proc, NAME, &fz));
        /* A plain directory has no freezer.state: the kernel would have made it. */
        ASSERT_ERR(freezer_v1_anchor(fz), -ENOENT);
        fz = freezer_v1_close(fz);
        /* What the attempt made is removed again. */
        ASSERT_TRUE(access(f.base, F_OK) < 0);
}

TEST(enter_freeze_leave_a_process) {
        _cleanup_(freezer_v1_closep) FreezerV1 *fz = NULL;
        FreezerV1Group *g = NULL;
        char group[256], orig[256];
        _cleanup_(fake_remove) Fake f;

        fake_make(&f);
        write_file(f.procdir, "cgroup", "9:name=systemd:/user.slice\n6:freezer:/user/a\n0::/unified\n");
        snprintf(orig, sizeof(orig), "%s/user", f.mount);
        ASSERT_OK(mkdir(orig, 0755));
        make_group(orig, "a", "THAWED");
        snprintf(orig, sizeof(orig), "%s/user/a", f.mount);
        make_instance_group(&f, "res-7", "THAWED", group, sizeof(group));

        ASSERT_OK(freezer_v1_open(f.proc, NAME, &fz));
        ASSERT_OK(enter(fz, &f, 7, 4242, false, &g));
        /* The whole thread group, through cgroup.procs. */
        assert_file(group, "cgroup.procs", "4242");
        assert_file(group, "tasks", "");
        ASSERT_OK(freezer_v1_freeze(g, true));
        assert_file(group, "freezer.state", "FROZEN");
        ASSERT_OK(freezer_v1_freeze(g, false));
        assert_file(group, "freezer.state", "THAWED");
        ASSERT_OK(freezer_v1_freeze(g, true));

        /* Leaving thaws first, then sends back where it came from. */
        g = freezer_v1_leave(g);
        ASSERT_TRUE(g == NULL);
        assert_file(group, "freezer.state", "THAWED");
        assert_file(orig, "cgroup.procs", "4242");
        assert_file(f.mount, "cgroup.procs", "");
        ASSERT_TRUE(freezer_v1_leave(NULL) == NULL);
}

TEST(enter_a_thread_and_leave_to_the_root_when_its_group_is_gone) {
        _cleanup_(freezer_v1_closep) FreezerV1 *fz = NULL;
        FreezerV1Group *g = NULL;
        char group[256];
        _cleanup_(fake_remove) Fake f;

        fake_make(&f);
        write_file(f.procdir, "cgroup", "6:freezer:/gone\n");
        make_instance_group(&f, "res-8", "THAWED", group, sizeof(group));

        ASSERT_OK(freezer_v1_open(f.proc, NAME, &fz));
        ASSERT_OK(enter(fz, &f, 8, 4243, true, &g));
        /* One thread: tasks, not cgroup.procs. */
        assert_file(group, "tasks", "4243");
        assert_file(group, "cgroup.procs", "");

        /* What the kernel lists in the group goes back; /gone is gone. */
        write_file(group, "cgroup.procs", "4242\n");
        g = freezer_v1_leave(g);
        assert_file(f.mount, "cgroup.procs", "4242");
}

TEST(enter_fails_whole) {
        _cleanup_(freezer_v1_closep) FreezerV1 *fz = NULL;
        FreezerV1Group *g = NULL;
        char group[256];
        _cleanup_(fake_remove) Fake f;

        fake_make(&f);
        ASSERT_OK(freezer_v1_open(f.proc, NAME, &fz));

        /* Exited: no cgroup file. */
        ASSERT_ERR(enter(fz, &f, 9, 4242, false, &g), -ESRCH);
        /* No freezer line: the process is in no v1 freezer group. */
        write_file(f.procdir, "cgroup", "0::/unified\n");
        ASSERT_ERR(enter(fz, &f, 9, 4242, false, &g), -EOPNOTSUPP);
        /* Made, but it cannot be used (here: no freezer.state): removed. */
        write_file(f.procdir, "cgroup", "6:freezer:/\n");
        ASSERT_ERR(enter(fz, &f, 9, 4242, false, &g), -ENOENT);
        snprintf(group, sizeof(group), "%s/res-9", f.base);
        ASSERT_TRUE(access(group, F_OK) < 0);
        ASSERT_TRUE(g == NULL);
        /* One that was there already (another piece's) is left alone. */
        make_dir(f.base, "res-9");
        ASSERT_ERR(enter(fz, &f, 9, 4242, false, &g), -ENOENT);
        ASSERT_OK(access(group, F_OK));
}

TEST(sweep_thaws_a_dead_instances_groups_and_then_removes_them) {
        _cleanup_(freezer_v1_closep) FreezerV1 *fz = NULL;
        char group[256], anchor[256];
        _cleanup_(fake_remove) Fake f;

        fake_make(&f);
        ASSERT_EQ(freezer_v1_sweep(NULL, true), 0u);
        ASSERT_OK(freezer_v1_open(f.proc, NAME, &fz));
        /* No directory yet: nothing to do. */
        ASSERT_EQ(freezer_v1_sweep(fz, true), 0u);

        make_instance_group(&f, "anchor", "FROZEN", anchor, sizeof(anchor));
        make_instance_group(&f, "res-1", "FROZEN", group, sizeof(group));
        write_file(group, "cgroup.procs", "4242\n");

        /* The monitor's first sweep: thawed at once, nothing moved. */
        ASSERT_EQ(freezer_v1_sweep(fz, false), 1u);
        assert_file(group, "freezer.state", "THAWED");
        assert_file(anchor, "freezer.state", "FROZEN");
        assert_file(f.mount, "cgroup.procs", "");

        /* Then emptied into the root (where they came from died with the
         * dispatcher) and removed; a plain directory with files cannot be
         * removed here, which the kernel's can. */
        ASSERT_EQ(freezer_v1_sweep(fz, true), 1u);
        assert_file(f.mount, "cgroup.procs", "4242");
        assert_file(anchor, "freezer.state", "FROZEN");
}

TEST_MAIN()
