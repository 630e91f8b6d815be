/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "macro.h"
#include "table-shm.h"

struct TableWriter {
        int fd;
        void *base;
        PaceTableBuffer *writing;
};

struct TableReader {
        int fd;
        const void *base;
};

static PaceTableHeader *header_of(const void *base) {
        return (PaceTableHeader *) base;
}

static long futex(_Atomic uint32_t *word, int op, uint32_t val, const struct timespec *timeout) {
        return syscall(SYS_futex, word, op, val, timeout, NULL, 0);
}

int table_writer_new(int dir_fd, TableWriter **ret) {
        _cleanup_close_ int fd = -EBADF;
        _cleanup_free_ TableWriter *w = NULL;
        void *base;

        /* Replace, never reuse, an old file: a stale mapping held by a
         * dispatcher of an earlier run must not see our half-written state. */
        (void) unlinkat(dir_fd, PACE_TABLE_NAME, 0);
        fd = openat(dir_fd, PACE_TABLE_NAME, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0)
                return negative_errno();
        /* The umask must not decide whether the dispatcher can read it. */
        if (fchmod(fd, 0644) < 0)
                return negative_errno();
        if (ftruncate(fd, (off_t) PACE_TABLE_FILE_SIZE) < 0)
                return negative_errno();

        base = mmap(NULL, PACE_TABLE_FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (base == MAP_FAILED)
                return negative_errno();

        w = calloc(1, sizeof(*w));
        if (!w) {
                munmap(base, PACE_TABLE_FILE_SIZE);
                return -ENOMEM;
        }

        PaceTableHeader *h = header_of(base);
        h->version = PACE_TABLE_VERSION;
        h->header_size = PACE_TABLE_HEADER_SIZE;
        h->buffer_size = sizeof(PaceTableBuffer);
        h->broker_pid = getpid();
        atomic_store_explicit(&h->generation, 0, memory_order_relaxed);
        atomic_store_explicit(&h->generation_futex, 0, memory_order_relaxed);
        /* Magic last: a reader that sees it sees a complete header. */
        atomic_thread_fence(memory_order_release);
        h->magic = PACE_TABLE_MAGIC;

        w->fd = TAKE_FD(fd);
        w->base = base;
        *ret = TAKE_PTR(w);
        return 0;
}

TableWriter *table_writer_free(TableWriter *w) {
        if (!w)
                return NULL;
        if (w->base)
                munmap(w->base, PACE_TABLE_FILE_SIZE);
        safe_close(w->fd);
        free(w);
        return NULL;
}

uint64_t table_writer_generation(const TableWriter *w) {
        return atomic_load_explicit(&header_of(w->base)->generation, memory_order_relaxed);
}

const PaceTableBuffer *table_writer_current(const TableWriter *w) {
        uint64_t gen = table_writer_generation(w);
        return gen == 0 ? NULL : pace_table_buffer(w->base, (unsigned) (gen & 1));
}

PaceTableBuffer *table_writer_begin(TableWriter *w) {
        uint64_t next = table_writer_generation(w) + 1;
        PaceTableBuffer *b = pace_table_buffer(w->base, (unsigned) (next & 1));

        /* seq 0 before the first byte changes: a reader still copying this
         * buffer (from two generations ago) will find its copy torn. */
        atomic_store_explicit(&b->seq, 0, memory_order_relaxed);
        atomic_thread_fence(memory_order_release);
        /* Only the used prefix of the slot array matters, but a full clear
         * keeps stale owners out of any slot a bad index could reach. */
        memset((char *) b + sizeof(b->seq), 0, offsetof(PaceTableBuffer, slots) - sizeof(b->seq));
        memset(b->slots, 0, sizeof(b->slots));
        w->writing = b;
        return b;
}

uint64_t table_writer_publish(TableWriter *w) {
        PaceTableHeader *h = header_of(w->base);
        uint64_t next = table_writer_generation(w) + 1;

        atomic_store_explicit(&w->writing->seq, next, memory_order_release);
        atomic_store_explicit(&h->generation, next, memory_order_release);
        atomic_store_explicit(&h->generation_futex, (uint32_t) next, memory_order_release);
        (void) futex(&h->generation_futex, FUTEX_WAKE, INT_MAX, NULL);
        w->writing = NULL;
        return next;
}

int table_reader_open(const char *path, TableReader **ret) {
        return table_reader_openat(AT_FDCWD, path, ret);
}

int table_file_open(int dir_fd, const char *name, uint64_t *ret_size) {
        _cleanup_close_ int fd = openat(dir_fd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        struct stat st;

        if (fd < 0)
                return negative_errno();
        if (fstat(fd, &st) < 0)
                return negative_errno();
        if (!S_ISREG(st.st_mode))
                return -EMEDIUMTYPE;
        *ret_size = (uint64_t) st.st_size;
        return TAKE_FD(fd);
}

int table_header_check(const PaceTableHeader *h) {
        if (h->magic != PACE_TABLE_MAGIC)
                return -EBADMSG;
        if (h->version != PACE_TABLE_VERSION || h->header_size != PACE_TABLE_HEADER_SIZE ||
            h->buffer_size != sizeof(PaceTableBuffer))
                return -EPROTO;
        return 0;
}

int table_reader_openat(int dir_fd, const char *name, TableReader **ret) {
        _cleanup_close_ int fd = -EBADF;
        uint64_t size;
        const void *base;

        fd = table_file_open(dir_fd, name, &size);
        if (fd < 0)
                return fd;
        /* The mapping must cover everything we will index. The writer can
         * still truncate the file later, turning a read into SIGBUS: readers
         * that must survive that (the dispatcher) copy snapshots under a
         * SIGBUS guard. */
        if (size < PACE_TABLE_FILE_SIZE)
                return -EBADMSG;

        base = mmap(NULL, PACE_TABLE_FILE_SIZE, PROT_READ, MAP_SHARED, fd, 0);
        if (base == MAP_FAILED)
                return negative_errno();

        int r = table_header_check(header_of(base));
        if (r < 0) {
                munmap((void *) base, PACE_TABLE_FILE_SIZE);
                return r;
        }

        TableReader *reader = calloc(1, sizeof(*reader));
        if (!reader) {
                munmap((void *) base, PACE_TABLE_FILE_SIZE);
                return -ENOMEM;
        }
        reader->fd = TAKE_FD(fd);
        reader->base = base;
        *ret = reader;
        return 0;
}

TableReader *table_reader_free(TableReader *r) {
        if (!r)
                return NULL;
        if (r->base)
                munmap((void *) r->base, PACE_TABLE_FILE_SIZE);
        safe_close(r->fd);
        free(r);
        return NULL;
}

uint64_t table_reader_generation(const TableReader *r) {
        return atomic_load_explicit(&header_of(r->base)->generation, memory_order_acquire);
}

int table_reader_snapshot(const TableReader *r, PaceTableBuffer *out, uint64_t *ret_generation) {
        const PaceTableHeader *h = header_of(r->base);
        uint64_t gen = atomic_load_explicit(&h->generation, memory_order_acquire);
        if (gen == 0)
                return -ENODATA;

        const PaceTableBuffer *b = pace_table_buffer((void *) r->base, (unsigned) (gen & 1));
        if (atomic_load_explicit(&b->seq, memory_order_acquire) != gen)
                return -EAGAIN;

        /* A seqlock read: the copy may race with a writer two generations on;
         * the re-check below tells us to throw it away. The data are plain
         * integers, so a torn copy is harmless until validated. */
        memcpy(out, b, sizeof(*out));
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&b->seq, memory_order_relaxed) != gen)
                return -EAGAIN;

        atomic_store_explicit(&out->seq, gen, memory_order_relaxed);
        if (ret_generation)
                *ret_generation = gen;
        return 0;
}

int table_reader_snapshot_retry(const TableReader *r, PaceTableBuffer *out, uint64_t *ret_generation) {
        int k = -EAGAIN;

        for (unsigned tries = 0; tries < 100 && k == -EAGAIN; tries++)
                k = table_reader_snapshot(r, out, ret_generation);
        return k;
}

int table_reader_wait(const TableReader *r, uint64_t seen, const struct timespec *timeout) {
        PaceTableHeader *h = header_of(r->base);

        for (;;) {
                uint32_t word = atomic_load_explicit(&h->generation_futex, memory_order_acquire);
                if (atomic_load_explicit(&h->generation, memory_order_acquire) != seen)
                        return 0;
                /* Shared futex (no FUTEX_PRIVATE_FLAG): the writer is another process. */
                if (futex(&h->generation_futex, FUTEX_WAIT, word, timeout) < 0) {
                        if (errno == EAGAIN)
                                continue;
                        if (errno == ETIMEDOUT)
                                return -ETIMEDOUT;
                        return negative_errno();
                }
                if (atomic_load_explicit(&h->generation, memory_order_acquire) != seen)
                        return 0;
                if (timeout)
                        return -ETIMEDOUT; /* spurious wake with a relative timeout: let the caller re-arm */
        }
}
