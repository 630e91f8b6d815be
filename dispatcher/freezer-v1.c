/* SPDX-License-Identifier: MIT */
/* Strict mode on the cgroup v1 freezer (freezer-v1.h): the instance's
 * directory and its anchor, a group per reservation frozen between its
 * slots, and the sweep of what a dead dispatcher left frozen. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "freezer-v1.h"
#include "proc-util.h"

struct FreezerV1 {
        char root[PATH_MAX];
        char base[PATH_MAX + 80];
        /* anchor tried: close undoes it, and removes base */
};

struct FreezerV1Group {
        const FreezerV1 *freezer;
        uint64_t id;
        int state_fd;
        /* Where the member came from, relative to the hierarchy's root. */
        char orig[];
};

int freezer_v1_find_root(const char *proc_root, char *ret_path, size_t size) {
        char path[256], line[4096];
        FILE *f;
        int r = -EOPNOTSUPP;

        snprintf(path, sizeof(path), "%s/self/mountinfo", proc_root);
        f = fopen(path, "re");
        if (!f)
                return negative_errno();
        while (fgets(line, sizeof(line), f)) {
                /* ... mount-point ... - cgroup cgroup rw,freezer */
                char *sep = strstr(line, " - cgroup ");
                if (!sep || !strstr(sep, "freezer"))
                        continue;
                char *p = line;
                for (int field = 0; field < 4 && p; field++) {
                        p = strchr(p, ' ');
                        if (p)
                                p++;
                }
                if (!p)
                        continue;
                size_t len = strcspn(p, " ");
                if (len + 1 > size)
                        continue;
                memcpy(ret_path, p, len);
                ret_path[len] = '\0';
                r = 0;
                break;
        }
        fclose(f);
        return r;
}

int freezer_v1_open(const char *proc_root, const char *name, FreezerV1 **ret) {
        _cleanup_free_ FreezerV1 *f = calloc(1, sizeof(*f));
        int r;

        if (!f)
                return -ENOMEM;
        r = freezer_v1_find_root(proc_root, f->root, sizeof(f->root));
        if (r < 0)
                return r;
        if ((size_t) snprintf(f->base, sizeof(f->base), "%s/%s", f->root, name) >= sizeof(f->base))
                return -ENAMETOOLONG;
        *ret = TAKE_PTR(f);
        return 0;
}

const char *freezer_v1_root(const FreezerV1 *f) {
        return f->root;
}

const char *freezer_v1_base(const FreezerV1 *f) {
        return f->base;
}

static int write_state(const char *dir, const char *state) {
        char path[2 * PATH_MAX];

        snprintf(path, sizeof(path), "%s/freezer.state", dir);
        return write_string_file(path, state);
}

int freezer_v1_anchor(FreezerV1 *f) {
        char path[sizeof(f->base) + 16];

        if (mkdir(f->base, 0755) < 0 && errno != EEXIST)
                return negative_errno();
        snprintf(path, sizeof(path), "%s/anchor", f->base);
        if (mkdir(path, 0755) < 0 && errno != EEXIST)
                return negative_errno();
        return write_state(path, "FROZEN");
}

FreezerV1 *freezer_v1_close(FreezerV1 *f) {
        char path[sizeof(f->base) + 16];

        if (!f)
                return NULL;
        /* Whoever anchored it (a dispatcher the monitor replaced, say):
         * the instance ends with whoever closes last, and what is still in
         * use refuses to go (rmdir of a group with members or children). */
        snprintf(path, sizeof(path), "%s/anchor", f->base);
        if (access(path, F_OK) == 0) {
                (void) write_state(path, "THAWED");
                (void) rmdir(path);
        }
        (void) rmdir(f->base);
        free(f);
        return NULL;
}

int freezer_v1_group_path(const FreezerV1 *f, uint64_t id, char *ret, size_t size) {
        if ((size_t) snprintf(ret, size, "%s/res-%" PRIu64, f->base, id) >= size)
                return -ENAMETOOLONG;
        return 0;
}

/* Every process in the group at dir to <root><orig>, or to the root if
 * that is refused (the group is gone); orig NULL: to the root. */
static void move_out(const FreezerV1 *f, const char *dir, const char *orig) {
        char path[2 * PATH_MAX], dest[2 * PATH_MAX + 32], root[PATH_MAX + 32], pid[32];

        snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
        snprintf(dest, sizeof(dest), "%s%s/cgroup.procs", f->root, orig && strcmp(orig, "/") != 0 ? orig : "");
        snprintf(root, sizeof(root), "%s/cgroup.procs", f->root);
        FILE *procs = fopen(path, "re");
        if (!procs)
                return;
        while (fgets(pid, sizeof(pid), procs)) {
                pid[strcspn(pid, "\n")] = '\0';
                if (!orig || write_string_file(dest, pid) < 0)
                        (void) write_string_file(root, pid);
        }
        fclose(procs);
}

unsigned freezer_v1_sweep(const FreezerV1 *f, bool remove) {
        _cleanup_close_ int dfd = -EBADF;
        unsigned n = 0;
        DIR *dir;

        if (!f)
                return 0;
        dfd = open(f->base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0 || !(dir = fdopendir(dfd)))
                return 0;
        TAKE_FD(dfd);
        for (struct dirent *de; (de = readdir(dir));) {
                char path[sizeof(f->base) + 300];
                if (strncmp(de->d_name, "res-", 4) != 0)
                        continue;
                snprintf(path, sizeof(path), "%s/%s", f->base, de->d_name);
                (void) write_state(path, "THAWED");
                n++;
                if (!remove)
                        continue;
                /* Where they came from was only the dead dispatcher's to
                 * know: to the root. */
                move_out(f, path, NULL);
                (void) rmdir(path);
        }
        closedir(dir);
        return n;
}

/* A group of its own, so freezing it touches no one else. */
int freezer_v1_enter(const FreezerV1 *f, uint64_t id, int procfd, pid_t member, bool thread,
                     FreezerV1Group **ret) {
        char dir[sizeof(f->base) + 32], path[sizeof(dir) + 32], buf[4096], orig[PATH_MAX], text[32];
        int r;

        r = read_small_file_at(procfd, "cgroup", buf, sizeof(buf));
        if (r < 0)
                return r;
        if (proc_cgroup_v1_path(buf, "freezer", orig, sizeof(orig)) < 0)
                return -EOPNOTSUPP;
        r = freezer_v1_group_path(f, id, dir, sizeof(dir));
        if (r < 0)
                return r;
        _cleanup_free_ FreezerV1Group *g = malloc(sizeof(*g) + strlen(orig) + 1);
        if (!g)
                return -ENOMEM;
        *g = (FreezerV1Group) { .freezer = f, .id = id, .state_fd = -EBADF };
        strcpy(g->orig, orig);

        /* Made again if a sweep of ours took it. */
        if (mkdir(f->base, 0755) < 0 && errno != EEXIST)
                return negative_errno();
        /* EEXIST: a split reservation's other piece made it, and it is
         * not ours to remove on failure. */
        bool made = mkdir(dir, 0755) == 0;
        if (!made && errno != EEXIST)
                return negative_errno();

        snprintf(path, sizeof(path), "%s/freezer.state", dir);
        g->state_fd = open(path, O_WRONLY | O_CLOEXEC);
        if (g->state_fd < 0) {
                r = negative_errno();
                goto fail;
        }
        snprintf(path, sizeof(path), "%s/%s", dir, thread ? "tasks" : "cgroup.procs");
        snprintf(text, sizeof(text), "%" PRIi32, member);
        r = write_string_file(path, text);
        if (r < 0)
                goto fail;
        *ret = TAKE_PTR(g);
        return 0;

fail:
        g->state_fd = safe_close(g->state_fd);
        if (made)
                (void) rmdir(dir);
        return r;
}

int freezer_v1_freeze(FreezerV1Group *g, bool frozen) {
        if (pwrite(g->state_fd, frozen ? "FROZEN" : "THAWED", 6, 0) < 0)
                return negative_errno();
        return 0;
}

FreezerV1Group *freezer_v1_leave(FreezerV1Group *g) {
        char dir[sizeof(g->freezer->base) + 32];

        if (!g)
                return NULL;
        (void) freezer_v1_freeze(g, false);
        /* Everything inside goes back, including children the client forked
         * (they were born into our group); if its old group is gone, to the
         * root, which always exists. */
        if (freezer_v1_group_path(g->freezer, g->id, dir, sizeof(dir)) == 0) {
                move_out(g->freezer, dir, g->orig);
                (void) rmdir(dir);
        }
        safe_close(g->state_fd);
        free(g);
        return NULL;
}
