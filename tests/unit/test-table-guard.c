/* SPDX-License-Identifier: MIT */
/* Reads of a table mapping whose file shrinks under it: -EFAULT instead of
 * SIGBUS, and a SIGBUS outside a guarded read still kills. */
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "table-guard.h"
#include "test.h"

typedef struct Table {
        char dir[64];
        int dfd;
        TableWriter *writer;
        TableReader *reader;
} Table;

static void table_make(Table *t) {
        t->dfd = test_temp_dir("guard", t->dir, sizeof(t->dir));
        ASSERT_OK(table_writer_new(t->dfd, &t->writer));
        (void) table_writer_begin(t->writer);
        ASSERT_EQ(table_writer_publish(t->writer), 1u);
        ASSERT_OK(table_reader_openat(t->dfd, PACE_TABLE_NAME, &t->reader));
}

static void table_shrink(Table *t) {
        int fd = openat(t->dfd, PACE_TABLE_NAME, O_WRONLY | O_CLOEXEC);
        ASSERT_TRUE(fd >= 0);
        ASSERT_OK(ftruncate(fd, 0));
        close(fd);
}

static void table_remove(Table *t) {
        table_reader_free(t->reader);
        table_writer_free(t->writer);
        ASSERT_OK(unlinkat(t->dfd, PACE_TABLE_NAME, 0));
        close(t->dfd);
        ASSERT_OK(rmdir(t->dir));
}

TEST(reads_of_an_intact_mapping_pass_through) {
        static PaceTableBuffer copy;
        Table t;
        uint64_t gen = 0;

        ASSERT_OK(table_guard_install());
        ASSERT_OK(table_guard_install()); /* once or twice, the same */
        table_make(&t);
        ASSERT_OK(table_guard_generation(t.reader, &gen));
        ASSERT_EQ(gen, 1u);
        gen = 0;
        ASSERT_OK(table_guard_snapshot(t.reader, &copy, &gen));
        ASSERT_EQ(gen, 1u);
        table_remove(&t);
}

TEST(a_shrunk_file_gives_efault_not_sigbus) {
        static PaceTableBuffer copy;
        Table t;
        uint64_t gen = 42;

        ASSERT_OK(table_guard_install());
        table_make(&t);
        table_shrink(&t);
        ASSERT_ERR(table_guard_generation(t.reader, &gen), -EFAULT);
        ASSERT_EQ(gen, 42u);
        ASSERT_ERR(table_guard_snapshot(t.reader, &copy, &gen), -EFAULT);
        ASSERT_ERR(table_guard_wait(t.reader, 1), -EFAULT);
        /* The guard is left behind each time: it works again and again. */
        ASSERT_ERR(table_guard_generation(t.reader, &gen), -EFAULT);
        table_remove(&t);
}

TEST(a_fault_outside_a_guarded_read_still_kills) {
        Table t;
        int status;

        ASSERT_OK(table_guard_install());
        table_make(&t);
        table_shrink(&t);
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                alarm(10);
                (void) table_reader_generation(t.reader);
                _exit(EXIT_SUCCESS);
        }
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        ASSERT_TRUE(WIFSIGNALED(status));
        ASSERT_EQ(WTERMSIG(status), SIGBUS);
        table_remove(&t);
}

TEST_MAIN()
