/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "macro.h"
#include "config.h"
#include "explain.h"
#include "proc-util.h"

#define PF_KTHREAD 0x00200000UL

int read_small_file(const char *path, char *buf, size_t size) {
        return read_small_file_at(AT_FDCWD, path, buf, size);
}

int read_small_file_at(int dirfd, const char *name, char *buf, size_t size) {
        _cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
        ssize_t n;

        if (fd < 0)
                return errno == ENOENT ? -ESRCH : negative_errno();
        n = read(fd, buf, size - 1);
        if (n < 0)
                return errno == ESRCH ? -ESRCH : negative_errno();
        buf[n] = '\0';
        return 0;
}

int proc_stat_parse(const char *text, uint64_t *ret_start_time, unsigned long *ret_flags) {
        /* comm may hold spaces and ')': the fields start after the last ')'. */
        const char *p = strrchr(text, ')');
        unsigned long flags = 0;
        uint64_t start_time = 0;

        if (!p)
                return -EBADMSG;
        p++;
        /* Fields after comm start at 3 (state); flags is 9, starttime 22. */
        for (int field = 3; field <= 22; field++) {
                char *end;
                while (*p == ' ')
                        p++;
                if (*p == '\0')
                        return -EBADMSG;
                if (field == 9 || field == 22) {
                        errno = 0;
                        unsigned long long v = strtoull(p, &end, 10);
                        if (errno != 0 || end == p)
                                return -EBADMSG;
                        if (field == 9)
                                flags = (unsigned long) v;
                        else
                                start_time = v;
                        p = end;
                } else {
                        p += strcspn(p, " ");
                }
        }
        if (ret_start_time)
                *ret_start_time = start_time;
        if (ret_flags)
                *ret_flags = flags;
        return 0;
}

int proc_info_read(const char *proc_root, pid_t pid, ProcInfo *ret) {
        char path[128], buf[4096];
        unsigned long flags;
        uint64_t start_time;
        const char *uid_line;
        unsigned long uid;
        int r;

        if (pid <= 0)
                return -ESRCH;

        snprintf(path, sizeof(path), "%s/%" PRIi32 "/stat", proc_root, (int32_t) pid);
        r = read_small_file(path, buf, sizeof(buf));
        if (r < 0)
                return r;
        r = proc_stat_parse(buf, &start_time, &flags);
        if (r < 0)
                return r;

        snprintf(path, sizeof(path), "%s/%" PRIi32 "/status", proc_root, (int32_t) pid);
        r = read_small_file(path, buf, sizeof(buf));
        if (r < 0)
                return r;
        uid_line = strstr(buf, "\nUid:");
        if (!uid_line)
                return -EBADMSG;
        errno = 0;
        uid = strtoul(uid_line + 5, NULL, 10);
        if (errno != 0)
                return -EBADMSG;
        ProcOwner owner;
        r = proc_status_owner(buf, &owner);
        if (r < 0)
                return r;

        *ret = (ProcInfo) {
                .uid = (uid_t) uid,
                .start_time = start_time,
                .kernel_thread = (flags & PF_KTHREAD) != 0,
                .root = proc_owner_has_root(&owner),
        };
        return 0;
}

int proc_count_threads(const char *proc_root, pid_t pid, uint32_t *ret) {
        char path[128];
        uint32_t n = 0;
        DIR *d;

        snprintf(path, sizeof(path), "%s/%" PRIi32 "/task", proc_root, (int32_t) pid);
        d = opendir(path);
        if (!d)
                return errno == ENOENT ? -ESRCH : negative_errno();
        for (struct dirent *de; (de = readdir(d));)
                n += de->d_name[0] >= '0' && de->d_name[0] <= '9';
        closedir(d);
        *ret = n;
        return 0;
}

/* Appends the children of process pid (every thread's children file) to
 * out, which holds *n of max. Whether pid's task directory could be read. */
static bool list_children(const char *proc_root, pid_t pid, pid_t *out, size_t max, size_t *n) {
        char path[160];
        DIR *d;

        snprintf(path, sizeof(path), "%s/%" PRIi32 "/task", proc_root, (int32_t) pid);
        d = opendir(path);
        if (!d)
                return false;
        for (struct dirent *de; (de = readdir(d));) {
                char cpath[PATH_MAX], buf[4096];
                if (de->d_name[0] < '0' || de->d_name[0] > '9')
                        continue;
                snprintf(cpath, sizeof(cpath), "%s/%s/children", path, de->d_name);
                int fd = open(cpath, O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        continue;
                ssize_t k = read(fd, buf, sizeof(buf) - 1);
                close(fd);
                if (k <= 0)
                        continue;
                buf[k] = '\0';
                for (char *q = buf, *end; *q; q = end) {
                        long v = strtol(q, &end, 10);
                        if (end == q)
                                break;
                        if (v > 1 && *n < max)
                                out[(*n)++] = (pid_t) v;
                }
        }
        closedir(d);
        return true;
}

int proc_list_descendants(const char *proc_root, pid_t pid, pid_t *out, size_t max, size_t *ret_n) {
        size_t n = 0, head = 0;

        for (pid_t cur = pid;; cur = out[head++]) {
                if (!list_children(proc_root, cur, out, max, &n) && cur == pid)
                        return errno == ENOENT ? -ESRCH : negative_errno();
                if (head >= n)
                        break;
        }
        *ret_n = n;
        return 0;
}

/* Owner and thread count of pid, from its status file. */
static int status_owner_threads(const char *proc_root, pid_t pid, ProcOwner *ret_owner, uint32_t *ret_threads) {
        char path[128], buf[4096];
        int r;

        snprintf(path, sizeof(path), "%s/%" PRIi32 "/status", proc_root, (int32_t) pid);
        r = read_small_file(path, buf, sizeof(buf));
        if (r < 0)
                return r == -ENOENT ? -ESRCH : r;
        r = proc_status_owner(buf, ret_owner);
        if (r < 0)
                return r;
        const char *line = strstr(buf, "\nThreads:");
        char *end;
        unsigned long v = line ? strtoul(line + 9, &end, 10) : 0;
        if (!line || end == line + 9 || v > UINT32_MAX)
                return -EBADMSG;
        *ret_threads = (uint32_t) v;
        return 0;
}

int proc_list_owned_descendants(const char *proc_root, pid_t pid, uid_t uid, uint32_t max_threads, pid_t *out,
                                int *ret_pidfds, size_t max, size_t *ret_n) {
        ProcOwner owner;
        uint32_t threads;
        size_t n = 0, head = 0;
        int r;

        r = status_owner_threads(proc_root, pid, &owner, &threads);
        if (r < 0)
                return r;
        /* Threads counted so far (the walk's cost), and each listed
         * process's own count, to decide on its children when its turn
         * comes. */
        uint32_t read = 0, *own = calloc(max ? max : 1, sizeof(uint32_t));
        if (!own)
                return -ENOMEM;
        uint32_t cur_threads = threads;
        for (pid_t cur = pid;;) {
                size_t first = n;
                if (cur_threads <= max_threads - MIN(read, max_threads)) {
                        read += cur_threads;
                        (void) list_children(proc_root, cur, out, max, &n);
                }
                for (size_t i = first; i < n;) {
                        int pidfd = -EBADF;
                        uint32_t t = 0;
                        bool keep = (!ret_pidfds || pidfd_open_checked(out[i], &pidfd) >= 0) &&
                                    status_owner_threads(proc_root, out[i], &owner, &t) >= 0 &&
                                    proc_owner_is(&owner, uid);
                        if (keep) {
                                own[i] = t;
                                if (ret_pidfds)
                                        ret_pidfds[i] = pidfd;
                                i++;
                                continue;
                        }
                        safe_close(pidfd);
                        out[i] = out[--n];
                }
                if (head >= n)
                        break;
                cur_threads = own[head];
                cur = out[head++];
        }
        free(own);
        *ret_n = n;
        return 0;
}

int proc_count_tree_threads(const char *proc_root, pid_t pid, uint32_t max_threads, size_t max_processes,
                            uint32_t *ret) {
        _cleanup_free_ pid_t *kids = calloc(max_processes ? max_processes : 1, sizeof(pid_t));
        uint32_t total = 0, threads;
        size_t n = 0, head = 0;
        int r;

        if (!kids)
                return -ENOMEM;
        for (pid_t cur = pid;; cur = kids[head++]) {
                r = proc_count_threads(proc_root, cur, &threads);
                if (r < 0 && cur == pid)
                        return r;
                if (r == 0) { /* a descendant may have exited meanwhile */
                        total += threads;
                        /* Over the limit: that is the whole answer. Listing
                         * this process's children would read one file per
                         * thread, as many as its owner likes. */
                        if (total > max_threads)
                                break;
                        (void) list_children(proc_root, cur, kids, max_processes, &n);
                }
                if (head >= n)
                        break;
        }
        *ret = total;
        return 0;
}

int proc_cgroup_v1_path(const char *text, const char *controller, char *ret, size_t size) {
        size_t clen = strlen(controller);

        for (const char *line = text; line && *line;) {
                const char *nl = strchr(line, '\n'), *end = nl ? nl : line + strlen(line);
                const char *c1 = memchr(line, ':', (size_t) (end - line));
                const char *c2 = c1 ? memchr(c1 + 1, ':', (size_t) (end - c1 - 1)) : NULL;
                for (const char *tok = c1 ? c1 + 1 : NULL; c2 && tok < c2;) {
                        const char *comma = memchr(tok, ',', (size_t) (c2 - tok));
                        const char *tend = comma ? comma : c2;
                        if ((size_t) (tend - tok) == clen && memcmp(tok, controller, clen) == 0) {
                                int n = snprintf(ret, size, "%.*s", (int) (end - c2 - 1), c2 + 1);
                                return n < 0 || (size_t) n >= size ? -ENAMETOOLONG : 0;
                        }
                        tok = tend + 1;
                }
                line = nl ? nl + 1 : NULL;
        }
        return -ENOENT;
}

int proc_cgroup_v2_path(const char *text, char *ret, size_t size) {
        for (const char *line = text; line && *line;) {
                const char *nl = strchr(line, '\n'), *end = nl ? nl : line + strlen(line);
                if (end - line >= 3 && strncmp(line, "0::", 3) == 0) {
                        int n = snprintf(ret, size, "%.*s", (int) (end - line - 3), line + 3);
                        return n < 0 || (size_t) n >= size ? -ENAMETOOLONG : 0;
                }
                line = nl ? nl + 1 : NULL;
        }
        return -ENOENT;
}

int write_string_file(const char *path, const char *text) {
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        if (write(fd, text, strlen(text)) < 0)
                return negative_errno();
        return 0;
}

int proc_status_owner(const char *status_text, ProcOwner *ret) {
        const char *line = strstr(status_text, "\nUid:");
        ProcOwner o;

        if (!line)
                return -EBADMSG;
        line += 5;
        for (size_t i = 0; i < ELEMENTSOF(o.uids); i++) {
                char *end;
                errno = 0;
                unsigned long v = strtoul(line, &end, 10);
                if (errno != 0 || end == line || v > UINT32_MAX)
                        return -EBADMSG;
                o.uids[i] = (uid_t) v;
                line = end;
        }
        *ret = o;
        return 0;
}

bool proc_owner_is(const ProcOwner *o, uid_t uid) {
        for (size_t i = 0; i < ELEMENTSOF(o->uids); i++)
                if (o->uids[i] != uid)
                        return false;
        return true;
}

bool proc_owner_has_root(const ProcOwner *o) {
        for (size_t i = 0; i < ELEMENTSOF(o->uids); i++)
                if (o->uids[i] == 0)
                        return true;
        return false;
}

#define CAP_SYS_NICE_BIT 23

int proc_rt_priority_ceiling(const char *status_text, const char *limits_text, uint32_t *ret) {
        const char *cap = strstr(status_text, "\nCapEff:");
        const char *lim = strstr(limits_text, "Max realtime priority");
        char *end;

        if (!cap || !lim)
                return -EBADMSG;
        errno = 0;
        unsigned long long eff = strtoull(cap + 8, &end, 16);
        if (errno != 0 || end == cap + 8)
                return -EBADMSG;
        if (eff & (1ULL << CAP_SYS_NICE_BIT)) {
                *ret = 99;
                return 0;
        }
        /* "Max realtime priority     0     0": soft, then hard. */
        const char *p = lim + strlen("Max realtime priority");
        for (int field = 0; field < 2; field++) {
                while (*p == ' ' || *p == '\t')
                        p++;
                if (strncmp(p, "unlimited", 9) == 0) {
                        if (field == 1) {
                                *ret = 99;
                                return 0;
                        }
                        p += 9;
                        continue;
                }
                errno = 0;
                unsigned long long v = strtoull(p, &end, 10);
                if (errno != 0 || end == p)
                        return -EBADMSG;
                if (field == 1) {
                        *ret = (uint32_t) MIN(v, 99ULL);
                        return 0;
                }
                p = end;
        }
        return -EBADMSG;
}

int pidfd_open_checked(pid_t pid, int *ret_fd) {
        int fd;

        if (pid <= 0)
                return -ESRCH;
        fd = (int) syscall(SYS_pidfd_open, pid, 0);
        if (fd < 0)
                return negative_errno();
        *ret_fd = fd;
        return 0;
}

int pidfd_alive(int pidfd) {
        /* poll, not signal 0: the broker is unprivileged and may not signal
         * another user's process, but any pidfd turns readable at exit. */
        struct pollfd pfd = { .fd = pidfd, .events = POLLIN };
        int n = poll(&pfd, 1, 0);

        if (n < 0)
                return negative_errno();
        if (pfd.revents & POLLNVAL)
                return -EBADF;
        return n == 0 ? 0 : -ESRCH;
}

/* One range of a kernel CPU list at *p ("3" or "0-7", then ',' or the end):
 * 1 with the range and *p past it, 0 at the end of the list, -EINVAL for
 * anything else. The one reader of CPU lists; the functions below differ
 * only in where the CPUs go. */
static int cpu_list_next(const char **p, unsigned long *ret_first, unsigned long *ret_last) {
        const char *s = *p;
        char *end;
        unsigned long a, b;

        if (*s == '\0' || *s == '\n')
                return 0;
        errno = 0;
        a = strtoul(s, &end, 10);
        if (errno || end == s)
                return -EINVAL;
        b = a;
        s = end;
        if (*s == '-') {
                s++;
                b = strtoul(s, &end, 10);
                if (errno || end == s || b < a)
                        return -EINVAL;
                s = end;
        }
        if (*s == ',')
                s++;
        else if (*s && *s != '\n')
                return -EINVAL;
        *p = s;
        *ret_first = a;
        *ret_last = b;
        return 1;
}

int cpu_list_parse(const char *text, int32_t *cpus, uint32_t max, uint32_t *ret_n) {
        unsigned long a, b;
        uint32_t n = 0;
        int r;

        while ((r = cpu_list_next(&text, &a, &b)) > 0)
                for (unsigned long c = a; c <= b; c++) {
                        if (n >= max || c > INT32_MAX)
                                return -E2BIG;
                        cpus[n++] = (int32_t) c;
                }
        if (r < 0)
                return r;
        *ret_n = n;
        return 0;
}

int cpu_list_parse_mask(const char *text, uint64_t *ret_mask) {
        unsigned long a, b;
        uint64_t mask = 0;
        int r;

        /* Ranges are clipped, not walked: "0-4095" costs what "0-63" does. */
        while ((r = cpu_list_next(&text, &a, &b)) > 0)
                for (unsigned long c = a; c <= MIN(b, 63ul); c++)
                        mask |= UINT64_C(1) << c;
        if (r < 0)
                return r;
        *ret_mask = mask;
        return 0;
}

/* /proc/PID/task/TID/NAME under proc_root, whole, into buf. */
static int read_task_file(const char *proc_root, pid_t pid, pid_t tid, const char *name, char *buf, size_t size) {
        char path[160];

        if (pid <= 0 || tid <= 0)
                return -ESRCH;
        snprintf(path, sizeof(path), "%s/%" PRIi32 "/task/%" PRIi32 "/%s", proc_root, (int32_t) pid,
                 (int32_t) tid, name);
        return read_small_file(path, buf, size);
}

int proc_cpus_allowed(const char *proc_root, pid_t pid, pid_t tid, uint64_t *ret_mask) {
        char buf[8192];
        const char *line;
        int r;

        r = read_task_file(proc_root, pid, tid, "status", buf, sizeof(buf));
        if (r < 0)
                return r;
        line = strstr(buf, "\nCpus_allowed_list:");
        if (!line)
                return -EBADMSG;
        line += strlen("\nCpus_allowed_list:");
        line += strspn(line, " \t");
        r = cpu_list_parse_mask(line, ret_mask);
        return r < 0 ? -EBADMSG : 0;
}

int config_resolve_cpus(PaceConfig *config, const char *sysfs_online, char *why, size_t why_size) {
        int32_t online[PACE_MAX_CPUS];
        uint32_t n_online = 0;
        char buf[1024];
        int r;

        r = read_small_file(sysfs_online, buf, sizeof(buf));
        if (r == 0)
                r = cpu_list_parse(buf, online, PACE_MAX_CPUS, &n_online);
        if (r < 0 || n_online == 0) {
                explain(why, why_size, "cannot read the online CPUs from %s: %s", sysfs_online,
                        strerror(r < 0 ? -r : EINVAL));
                return r < 0 ? r : -EINVAL;
        }

        if (!config->cpus_set) {
                memcpy(config->cpus, online, n_online * sizeof(int32_t));
                config->n_cpus = n_online;
                return 0;
        }
        for (uint32_t i = 0; i < config->n_cpus; i++) {
                bool found = false;
                for (uint32_t j = 0; j < n_online; j++)
                        found |= online[j] == config->cpus[i];
                if (!found) {
                        explain(why, why_size, "\"cpus\": CPU %" PRIi32 " is not online (online: %s)",
                                config->cpus[i], strtok(buf, "\n"));
                        return -ENODEV;
                }
        }
        return 0;
}

int proc_thread_start_time(const char *proc_root, pid_t pid, pid_t tid, uint64_t *ret) {
        char buf[4096];
        int r;

        r = read_task_file(proc_root, pid, tid, "stat", buf, sizeof(buf));
        if (r < 0)
                return r;
        return proc_stat_parse(buf, ret, NULL);
}

static int parse_gid(const char *p, const char **ret_end, gid_t *ret) {
        char *end;

        errno = 0;
        unsigned long v = strtoul(p, &end, 10);
        if (errno != 0 || end == p || v > UINT32_MAX - 1)
                return -EBADMSG;
        *ret_end = end;
        *ret = (gid_t) v;
        return 0;
}

int proc_status_groups(const char *status_text, gid_t *ret_gid, gid_t *groups, size_t max, size_t *ret_n) {
        const char *line = strstr(status_text, "\nGid:"), *end;
        size_t n = 0;
        int r;

        if (!line)
                return -EBADMSG;
        r = parse_gid(line + 5, &end, ret_gid);
        if (r < 0)
                return r;
        line = strstr(status_text, "\nGroups:");
        if (line) {
                const char *p = line + 8;
                for (;;) {
                        gid_t g;
                        p += strspn(p, " \t");
                        if (*p == '\n' || *p == '\0')
                                break;
                        r = parse_gid(p, &end, &g);
                        if (r < 0)
                                return r;
                        if (n < max)
                                groups[n++] = g;
                        p = end;
                }
        }
        *ret_n = n;
        return 0;
}
