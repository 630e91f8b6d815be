/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "held.h"
#include "macro.h"
#include "sched-util.h"
#include "sweep.h"

/* The original policy is unknown here (it lived in the dead dispatcher's
 * registry); SCHED_OTHER is the safe answer. */
unsigned sweep_demote_table(const PaceTableBuffer *t) {
        PaceSchedAttr other = { .size = sizeof(PaceSchedAttr), .sched_policy = SCHED_OTHER };
        HeldContext none = {};
        unsigned n = 0;

        for (uint32_t i = 0; i < MIN(t->n_reservations, PACE_MAX_RESERVATIONS); i++) {
                Held *h;

                /* The same identity checks as for promotion: only the very
                 * process the table names, never pid 1 or a kernel thread. */
                if (held_new(&t->reservations[i], &h) < 0)
                        continue;
                int taskfd = openat(h->procfd, "task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                DIR *dir = taskfd >= 0 ? fdopendir(taskfd) : NULL;
                if (!dir)
                        safe_close(taskfd);
                for (struct dirent *de; dir && (de = readdir(dir));) {
                        PaceSchedAttr a;
                        char *end;
                        long tid = strtol(de->d_name, &end, 10);

                        if (*end != '\0' || tid <= 1 || sched_attr_get((pid_t) tid, &a) < 0)
                                continue;
                        if ((a.sched_policy == SCHED_FIFO || a.sched_policy == SCHED_RR) &&
                            a.sched_priority == PACE_RUNNING_PRIORITY && sched_attr_set((pid_t) tid, &other) == 0)
                                n++;
                }
                if (dir)
                        closedir(dir);
                held_free(h, &none);
        }
        return n;
}

unsigned sweep_demote_groups(const char *group_base) {
        PaceSchedAttr other = { .size = sizeof(PaceSchedAttr), .sched_policy = SCHED_OTHER };
        unsigned n = 0;
        DIR *dir;

        if (!group_base || !(dir = opendir(group_base)))
                return 0;
        for (struct dirent *de; (de = readdir(dir));) {
                char path[PATH_MAX + 300], line[32];
                if (strncmp(de->d_name, "res-", 4) != 0)
                        continue;
                snprintf(path, sizeof(path), "%s/%s/tasks", group_base, de->d_name);
                FILE *f = fopen(path, "re");
                if (!f)
                        continue;
                while (fgets(line, sizeof(line), f)) {
                        PaceSchedAttr a;
                        long tid = strtol(line, NULL, 10);
                        if (tid > 1 && tid != getpid() && sched_attr_get((pid_t) tid, &a) == 0 &&
                            (a.sched_policy == SCHED_FIFO || a.sched_policy == SCHED_RR) &&
                            a.sched_priority == PACE_RUNNING_PRIORITY && sched_attr_set((pid_t) tid, &other) == 0)
                                n++;
                }
                fclose(f);
        }
        closedir(dir);
        return n;
}

static int pread_all(int fd, void *buf, size_t size, off_t offset) {
        ssize_t n = pread(fd, buf, size, offset);

        if (n < 0)
                return negative_errno();
        /* Truncated under us: what is missing reads as no reservations. */
        if ((size_t) n < size)
                memset((char *) buf + n, 0, size - (size_t) n);
        return 0;
}

int sweep_table_file(const char *path, PaceTableBuffer *scratch, unsigned *ret_demoted) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        PaceTableHeader h;
        unsigned n = 0;
        int r;

        if (fd < 0)
                return negative_errno();
        r = pread_all(fd, &h, sizeof(h), 0);
        if (r < 0)
                return r;
        if (h.magic != PACE_TABLE_MAGIC)
                return -EBADMSG;
        if (h.version != PACE_TABLE_VERSION || h.header_size != PACE_TABLE_HEADER_SIZE ||
            h.buffer_size != sizeof(PaceTableBuffer))
                return -EPROTO;
        /* The published buffer first: it is the likelier one in force. A
         * torn copy is harmless: every entry is identity-checked and only
         * threads at our running priority are touched. */
        for (unsigned k = 0; k < 2; k++) {
                unsigned idx = (unsigned) ((h.generation + k) & 1);
                r = pread_all(fd, scratch, offsetof(PaceTableBuffer, slots),
                              (off_t) (PACE_TABLE_HEADER_SIZE + (uint64_t) idx * sizeof(PaceTableBuffer)));
                if (r < 0)
                        return r;
                n += sweep_demote_table(scratch);
        }
        *ret_demoted = n;
        return 0;
}

static uint64_t fnv1a(const char *s) {
        uint64_t h = 0xcbf29ce484222325ULL;
        for (; *s; s++) {
                h ^= (unsigned char) *s;
                h *= 0x100000001b3ULL;
        }
        return h;
}

void sweep_freezer_name(const char *runtime_dir, char *ret, size_t size) {
        snprintf(ret, size, "pace.%016" PRIx64, fnv1a(runtime_dir));
}

unsigned sweep_freezer(const char *freezer_root, const char *freezer_base, bool remove) {
        _cleanup_close_ int dfd = -EBADF;
        unsigned n = 0;
        DIR *dir;

        dfd = open(freezer_base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0 || !(dir = fdopendir(dfd)))
                return 0;
        TAKE_FD(dfd);
        for (struct dirent *de; (de = readdir(dir));) {
                char path[PATH_MAX + 300], root[PATH_MAX + 32];
                if (strncmp(de->d_name, "res-", 4) != 0)
                        continue;
                snprintf(path, sizeof(path), "%s/%s/freezer.state", freezer_base, de->d_name);
                int fd = open(path, O_WRONLY | O_CLOEXEC);
                if (fd >= 0) {
                        (void) !write(fd, "THAWED", 6);
                        close(fd);
                }
                n++;
                if (!remove)
                        continue;
                snprintf(path, sizeof(path), "%s/%s/cgroup.procs", freezer_base, de->d_name);
                snprintf(root, sizeof(root), "%s/cgroup.procs", freezer_root);
                FILE *f = fopen(path, "re");
                char pid[32];
                while (f && fgets(pid, sizeof(pid), f)) {
                        int rfd = open(root, O_WRONLY | O_CLOEXEC);
                        if (rfd >= 0) {
                                (void) !write(rfd, pid, strcspn(pid, "\n"));
                                close(rfd);
                        }
                }
                if (f)
                        fclose(f);
                snprintf(path, sizeof(path), "%s/%s", freezer_base, de->d_name);
                (void) rmdir(path);
        }
        closedir(dir);
        return n;
}
