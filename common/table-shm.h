/* SPDX-License-Identifier: MIT */
#pragma once

/* Mapping and publishing the dispatch table (proto/pace-table.h). Core code:
 * takes directory fds and paths, never logs. */

#include <stdint.h>
#include <time.h>

#include "pace-table.h"

typedef struct TableWriter TableWriter;
typedef struct TableReader TableReader;

/* Creates (or truncates) PACE_TABLE_NAME in dir_fd with mode 0644, maps it
 * read-write and writes the header; generation starts at 0 (nothing published). */
int table_writer_new(int dir_fd, TableWriter **ret);
TableWriter *table_writer_free(TableWriter *w);

/* The buffer the next publish will expose, marked as being written (seq 0) and
 * zeroed. Valid until table_writer_publish(). */
PaceTableBuffer *table_writer_begin(TableWriter *w);
/* Publishes the buffer from table_writer_begin() and wakes idle readers.
 * Returns the new generation. */
uint64_t table_writer_publish(TableWriter *w);
uint64_t table_writer_generation(const TableWriter *w);
/* The last published buffer, or NULL. */
const PaceTableBuffer *table_writer_current(const TableWriter *w);

/* Opens and maps read-only; checks size, magic and version (-EBADMSG,
 * -EPROTO), and that it is a regular file (-EMEDIUMTYPE). Never blocks,
 * whatever sits under the name. The file's owner is not trusted either way. */
int table_reader_open(const char *path, TableReader **ret);
/* The table file under name opened as every reader must: never blocking
 * (whoever writes the directory could leave a FIFO there), not through a
 * symbolic link, a regular file only (-EMEDIUMTYPE). The fd, or a
 * negative errno; its size in *ret_size. */
int table_file_open(int dir_fd, const char *name, uint64_t *ret_size);
/* A header read from the file: its magic (-EBADMSG), then its version and
 * sizes (-EPROTO) are this build's. */
int table_header_check(const PaceTableHeader *h);
int table_reader_openat(int dir_fd, const char *name, TableReader **ret);
TableReader *table_reader_free(TableReader *r);

uint64_t table_reader_generation(const TableReader *r);
/* Copies the published buffer into *out (a private copy the caller then
 * validates). Returns -EAGAIN if the writer changed it during the copy (torn),
 * -ENODATA if nothing is published yet. */
int table_reader_snapshot(const TableReader *r, PaceTableBuffer *out, uint64_t *ret_generation);
/* table_reader_snapshot(), looking again while the copy comes out torn: a
 * writer publishes a few times a second at most, so a hundred tries in a
 * row never all meet one. Still -EAGAIN if they did; other errors at once. */
int table_reader_snapshot_retry(const TableReader *r, PaceTableBuffer *out, uint64_t *ret_generation);
/* Sleeps until the generation differs from `seen`, or the timeout (NULL:
 * none) passes. Returns 0, -ETIMEDOUT or -EINTR. */
int table_reader_wait(const TableReader *r, uint64_t seen, const struct timespec *timeout);

static inline void table_writer_freep(TableWriter **w) {
        table_writer_free(*w);
}
static inline void table_reader_freep(TableReader **r) {
        table_reader_free(*r);
}
