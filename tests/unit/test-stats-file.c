/* SPDX-License-Identifier: MIT */
/* The accounting file, on a temporary directory: what open() takes over and
 * what it replaces, the reset on map, and claiming, publishing and
 * releasing entries up to a full file. */
#include <fcntl.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stats-file.h"
#include "test.h"

typedef struct TempDir {
        char path[64];
        int fd;
} TempDir;

static void temp_dir_make(TempDir *t) {
        t->fd = test_temp_dir("stats", t->path, sizeof(t->path));
}

static void temp_dir_remove(TempDir *t) {
        (void) unlinkat(t->fd, PACE_STATS_NAME, 0);
        (void) unlinkat(t->fd, "other", 0);
        close(t->fd);
        ASSERT_OK(rmdir(t->path));
}

static void write_file(int dfd, const char *name, const char *content) {
        int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(write(fd, content, strlen(content)), (ssize_t) strlen(content));
        close(fd);
}

static bool file_is(int dfd, const char *name, const char *content) {
        char buf[256] = {};
        int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return false;
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        return n == (ssize_t) strlen(content) && memcmp(buf, content, (size_t) n) == 0;
}

static void assert_fresh_file(const TempDir *t, int fd) {
        struct stat st, named;

        ASSERT_OK(fstat(fd, &st));
        ASSERT_TRUE(S_ISREG(st.st_mode));
        ASSERT_EQ(st.st_mode & 07777, 0644);
        ASSERT_EQ(st.st_nlink, 1);
        ASSERT_EQ(st.st_size, (off_t) sizeof(PaceStatsFile));
        /* The fd is the file under the name, not something a link led to. */
        ASSERT_OK(fstatat(t->fd, PACE_STATS_NAME, &named, AT_SYMLINK_NOFOLLOW));
        ASSERT_EQ(named.st_ino, st.st_ino);
}

TEST(open_creates_the_file_sized_and_readable) {
        TempDir t;
        int fd = -EBADF;

        temp_dir_make(&t);
        ASSERT_OK(stats_file_open(t.path, &fd));
        assert_fresh_file(&t, fd);
        close(fd);
        temp_dir_remove(&t);
}

/* Whatever link the broker left under the name, it is replaced by a new
 * file: never followed, and what it led to is never cleared. */
static void assert_link_replaced(bool symbolic) {
        TempDir t;
        int fd = -EBADF;
        char target[128];

        temp_dir_make(&t);
        write_file(t.fd, "other", "the broker's own file");
        snprintf(target, sizeof(target), "%s/other", t.path);
        if (symbolic)
                ASSERT_OK(symlinkat(target, t.fd, PACE_STATS_NAME));
        else
                ASSERT_OK(linkat(t.fd, "other", t.fd, PACE_STATS_NAME, 0));

        ASSERT_OK(stats_file_open(t.path, &fd));
        assert_fresh_file(&t, fd);
        ASSERT_TRUE(file_is(t.fd, "other", "the broker's own file"));
        close(fd);
        temp_dir_remove(&t);
}

TEST(open_never_follows_a_symlink_under_the_name) {
        assert_link_replaced(true);
}

TEST(open_replaces_a_hard_link_instead_of_clearing_its_other_name) {
        assert_link_replaced(false);
}

TEST(open_refuses_a_directory_that_is_not_there) {
        int fd = -EBADF;

        ASSERT_ERR(stats_file_open("/nonexistent/pace-test", &fd), -ENOENT);
        ASSERT_EQ(fd, -EBADF);
}

/* A mapped file in a temporary directory, for the entry tests. */
static PaceStatsFile *map_temp(TempDir *t, int *ret_fd) {
        PaceStatsFile *f = NULL;

        temp_dir_make(t);
        ASSERT_OK(stats_file_open(t->path, ret_fd));
        ASSERT_OK(stats_file_map(*ret_fd, &f));
        return f;
}

TEST(map_resets_the_file_and_names_this_process) {
        TempDir t;
        int fd;
        PaceStatsFile *f = map_temp(&t, &fd);
        PaceStatsEntry *e;

        ASSERT_EQ(f->magic, PACE_STATS_MAGIC);
        ASSERT_EQ(f->version, PACE_STATS_VERSION);
        ASSERT_EQ(f->n_entries, PACE_STATS_MAX_ENTRIES);
        ASSERT_EQ(f->dispatcher_pid, getpid());

        /* What a previous dispatcher left is gone after a new map. */
        ASSERT_OK(stats_file_claim(f, 7, 1, &e));
        stats_file_unmap(f);
        ASSERT_OK(stats_file_map(fd, &f));
        for (uint32_t i = 0; i < PACE_STATS_MAX_ENTRIES; i++) {
                ASSERT_EQ(atomic_load(&f->entries[i].claimed), 0u);
                ASSERT_EQ(f->entries[i].id, 0u);
        }
        stats_file_unmap(f);
        close(fd);
        temp_dir_remove(&t);
}

TEST(claim_publish_release) {
        TempDir t;
        int fd;
        PaceStatsFile *f = map_temp(&t, &fd);
        PaceStatsEntry *a, *b;

        ASSERT_OK(stats_file_claim(f, 11, 0, &a));
        ASSERT_OK(stats_file_claim(f, 12, 1, &b));
        ASSERT_TRUE(a != b);
        ASSERT_EQ(a->id, 11u);
        ASSERT_EQ(a->cpu, 0);
        ASSERT_EQ(b->id, 12u);
        ASSERT_EQ(b->cpu, 1);
        ASSERT_EQ(atomic_load(&a->claimed), 1u);
        ASSERT_TRUE(a->updated_ns > 0);
        /* Readers take an entry only while its sequence word is even. */
        ASSERT_EQ(atomic_load(&a->seq) % 2, 0u);

        Acct acct = {};
        acct_period_end(&acct, 0, 0, 10, false, 100);
        acct_period_end(&acct, 10, 50, 10, true, 100);
        uint32_t seq = atomic_load(&a->seq);
        stats_file_publish(a, &acct, 3, 10, 50);
        ASSERT_EQ(atomic_load(&a->seq), seq + 2);
        ASSERT_EQ(a->threads, 3u);
        ASSERT_EQ(a->periods, 1u);
        ASSERT_EQ(a->periods_wanted_more, 1u);
        ASSERT_EQ(a->updated_ns, 50u);

        stats_file_release(a);
        ASSERT_EQ(a->id, 0u);
        ASSERT_EQ(atomic_load(&a->claimed), 0u);
        ASSERT_EQ(atomic_load(&a->seq) % 2, 0u);
        /* The other piece's entry is untouched. */
        ASSERT_EQ(b->id, 12u);

        /* A released entry is claimed again, cleared of its old figures. */
        PaceStatsEntry *c;
        ASSERT_OK(stats_file_claim(f, 13, 0, &c));
        ASSERT_TRUE(c == a);
        ASSERT_EQ(c->id, 13u);
        ASSERT_EQ(c->threads, 0u);
        ASSERT_EQ(c->periods, 0u);

        stats_file_unmap(f);
        close(fd);
        temp_dir_remove(&t);
}

TEST(a_full_file_refuses_and_a_release_makes_room) {
        TempDir t;
        int fd;
        PaceStatsFile *f = map_temp(&t, &fd);
        PaceStatsEntry *e, *middle = NULL;

        for (uint32_t i = 0; i < PACE_STATS_MAX_ENTRIES; i++) {
                ASSERT_OK(stats_file_claim(f, 100 + i, 0, &e));
                if (i == PACE_STATS_MAX_ENTRIES / 2)
                        middle = e;
        }
        e = NULL;
        ASSERT_ERR(stats_file_claim(f, 1, 0, &e), -ENOSPC);
        ASSERT_TRUE(e == NULL);

        stats_file_release(middle);
        ASSERT_OK(stats_file_claim(f, 1, 1, &e));
        ASSERT_TRUE(e == middle);
        ASSERT_EQ(e->id, 1u);
        ASSERT_ERR(stats_file_claim(f, 2, 0, &e), -ENOSPC);

        stats_file_unmap(f);
        close(fd);
        temp_dir_remove(&t);
}

TEST_MAIN()
