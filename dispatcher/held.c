/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "held.h"
#include "macro.h"
#include "proc-util.h"

#define PF_KTHREAD 0x00200000UL
#define REGISTRY_BUCKETS 256u

struct RegistryEntry {
        pid_t tid;
        pid_t tgid;
        unsigned refs;
        PaceSchedAttr orig;
        bool affinity_saved;
        cpu_set_t orig_affinity;
        /* The CPU it is held to now: a split reservation's pieces move it. */
        _Atomic int pinned_cpu;
        RegistryEntry *next;
};

struct ThreadRegistry {
        pthread_mutex_t lock;
        size_t size;
        RegistryEntry *buckets[REGISTRY_BUCKETS];
};

int thread_registry_new(ThreadRegistry **ret) {
        ThreadRegistry *reg = calloc(1, sizeof(*reg));
        if (!reg)
                return -ENOMEM;
        pthread_mutex_init(&reg->lock, NULL);
        *ret = reg;
        return 0;
}

ThreadRegistry *thread_registry_free(ThreadRegistry *reg) {
        if (!reg)
                return NULL;
        for (unsigned b = 0; b < REGISTRY_BUCKETS; b++)
                while (reg->buckets[b]) {
                        RegistryEntry *e = reg->buckets[b];
                        reg->buckets[b] = e->next;
                        free(e);
                }
        pthread_mutex_destroy(&reg->lock);
        free(reg);
        return NULL;
}

size_t thread_registry_size(ThreadRegistry *reg) {
        size_t n;

        pthread_mutex_lock(&reg->lock);
        n = reg->size;
        pthread_mutex_unlock(&reg->lock);
        return n;
}

/* The first touch records the thread's state. A thread that already looks
 * like our work (FIFO 98, or nice 19 after being born to a waiting parent)
 * cannot tell us its real original: take the process's main thread's, or
 * plain SCHED_OTHER, so restoring never leaves anything real-time. */
static int registry_acquire(ThreadRegistry *reg, pid_t tid, pid_t tgid, const PaceSchedAttr *fallback, int cpu,
                            RegistryEntry **ret) {
        unsigned b = (unsigned) tid % REGISTRY_BUCKETS;
        RegistryEntry *e;
        int r = 0;

        pthread_mutex_lock(&reg->lock);
        for (e = reg->buckets[b]; e; e = e->next)
                if (e->tid == tid && e->tgid == tgid)
                        break;
        if (e) {
                e->refs++;
                goto done;
        }

        e = calloc(1, sizeof(*e));
        if (!e) {
                r = -ENOMEM;
                goto done;
        }
        e->tid = tid;
        e->tgid = tgid;
        e->refs = 1;
        r = sched_attr_get(tid, &e->orig);
        if (r < 0) {
                free(e);
                e = NULL;
                goto done;
        }
        if (sched_attr_is_ours(&e->orig)) {
                if (fallback)
                        e->orig = *fallback;
                else if (e->orig.sched_policy == SCHED_FIFO)
                        e->orig = (PaceSchedAttr) { .sched_policy = SCHED_OTHER };
        }
        /* Held to its reserved CPU: a promoted thread elsewhere would spend
         * its budget on a CPU whose frame does not account for it. */
        if (sched_getaffinity(tid, sizeof(e->orig_affinity), &e->orig_affinity) == 0) {
                cpu_set_t set;
                CPU_ZERO(&set);
                CPU_SET(cpu, &set);
                e->affinity_saved = sched_setaffinity(tid, sizeof(set), &set) == 0;
                atomic_store(&e->pinned_cpu, cpu);
        }
        e->next = reg->buckets[b];
        reg->buckets[b] = e;
        reg->size++;
done:
        pthread_mutex_unlock(&reg->lock);
        if (r >= 0)
                *ret = e;
        return r;
}

static void registry_release(ThreadRegistry *reg, RegistryEntry *e, bool restore) {
        unsigned b = (unsigned) e->tid % REGISTRY_BUCKETS;

        pthread_mutex_lock(&reg->lock);
        if (--e->refs > 0) {
                pthread_mutex_unlock(&reg->lock);
                return;
        }
        for (RegistryEntry **p = &reg->buckets[b]; *p; p = &(*p)->next)
                if (*p == e) {
                        *p = e->next;
                        break;
                }
        reg->size--;
        pthread_mutex_unlock(&reg->lock);

        /* A thread that no longer exists has nothing to restore (ESRCH). */
        if (restore) {
                (void) sched_attr_set(e->tid, &e->orig);
                if (e->affinity_saved)
                        (void) sched_setaffinity(e->tid, sizeof(e->orig_affinity), &e->orig_affinity);
        }
        free(e);
}

static int read_at(int dirfd, const char *name, char *buf, size_t size) {
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

/* The monitor (monitor.c): our parent, at SCHED_FIFO 99. Promoting it would
 * drop it below the clients it has to demote, and demoting it would leave
 * nobody to notice our death. */
static pid_t protected_pid;

void held_protect_pid(pid_t pid) {
        protected_pid = pid;
}

int held_new(const PaceTableReservation *res, Held **ret) {
        _cleanup_close_ int pidfd = -EBADF, procfd = -EBADF;
        char path[64], stat[1024];
        uint64_t start_time;
        unsigned long flags;
        int r;

        /* pid 1, and the dispatcher itself: demoting ourselves would stop
         * the dispatch of every CPU. */
        if (res->pid <= 1 || res->pid == getpid() || (protected_pid > 0 && res->pid == protected_pid))
                return -EPERM;
        r = pidfd_open_checked(res->pid, &pidfd);
        if (r < 0)
                return r == -EINVAL ? -ESRCH : r;
        snprintf(path, sizeof(path), "/proc/%" PRIi32, res->pid);
        procfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (procfd < 0)
                return -ESRCH;
        r = read_at(procfd, "stat", stat, sizeof(stat));
        if (r < 0)
                return r;
        r = proc_stat_parse(stat, &start_time, &flags);
        if (r < 0)
                return r;
        /* Alive after /proc/PID was opened: the directory is the pidfd's
         * process, not a successor that inherited the number. */
        r = pidfd_alive(pidfd);
        if (r < 0)
                return r;
        if (flags & PF_KTHREAD)
                return -EPERM;
        if (start_time != res->start_time)
                return -ESTALE;
        /* The table's uid is who asked; only root may ask for another
         * user's process, so anything else names the wrong owner. */
        if (res->uid != 0) {
                char status[4096];
                const char *line;
                r = read_at(procfd, "status", status, sizeof(status));
                if (r < 0)
                        return r;
                line = strstr(status, "\nUid:");
                if (!line || strtoul(line + 5, NULL, 10) != res->uid)
                        return -EACCES;
        }

        /* A thread of this very process: its entry under the pinned
         * /proc/PID directory. */
        if (res->scope == PACE_TABLE_SCOPE_THREAD) {
                char task[48];
                snprintf(task, sizeof(task), "task/%" PRIi32, res->tid);
                if (res->tid <= 0 || faccessat(procfd, task, F_OK, 0) < 0)
                        return -ESRCH;
        }

        Held *h = calloc(1, sizeof(*h));
        if (!h)
                return -ENOMEM;
        h->id = res->id;
        h->pid = res->pid;
        h->start_time = res->start_time;
        h->scope = res->scope;
        h->tid = res->scope == PACE_TABLE_SCOPE_THREAD ? res->tid : 0;
        h->pidfd = TAKE_FD(pidfd);
        h->procfd = TAKE_FD(procfd);
        h->cg_state_fd = -EBADF;
        *ret = h;
        return 0;
}

static void held_forget_threads(Held *h, const HeldContext *ctx, bool restore) {
        for (size_t i = 0; i < h->n_threads; i++)
                registry_release(ctx->registry, h->threads[i].entry, restore);
        h->n_threads = 0;
}

static void held_drop_thread(Held *h, const HeldContext *ctx, size_t i) {
        registry_release(ctx->registry, h->threads[i].entry, false);
        h->threads[i] = h->threads[--h->n_threads];
}

/* Strict mode: a freezer cgroup of its own, so freezing it touches no one
 * else. Moved at first promotion; the whole thread group moves together via
 * cgroup.procs, and threads it creates later are born inside. */
static int held_freezer_enter(Held *h, const HeldContext *ctx) {
        char path[PATH_MAX], buf[4096], pidbuf[32];
        int r;

        if (h->cg_dir)
                return 0;
        if (!ctx->freezer_root || !ctx->freezer_base)
                return -EOPNOTSUPP;

        r = read_at(h->procfd, "cgroup", buf, sizeof(buf));
        if (r < 0)
                return r;
        if (proc_cgroup_v1_path(buf, "freezer", path, sizeof(path)) < 0)
                return -EOPNOTSUPP;
        h->cg_orig = strdup(path);
        if (!h->cg_orig)
                return -ENOMEM;

        if (mkdir(ctx->freezer_base, 0755) < 0 && errno != EEXIST)
                return negative_errno();
        snprintf(path, sizeof(path), "%s/res-%" PRIu64, ctx->freezer_base, h->id);
        if (mkdir(path, 0755) < 0 && errno != EEXIST)
                return negative_errno();
        h->cg_dir = strdup(path);
        if (!h->cg_dir)
                return -ENOMEM;

        snprintf(path, sizeof(path), "%s/freezer.state", h->cg_dir);
        h->cg_state_fd = open(path, O_WRONLY | O_CLOEXEC);
        if (h->cg_state_fd < 0)
                return negative_errno();

        bool thread = h->scope == PACE_TABLE_SCOPE_THREAD;
        snprintf(path, sizeof(path), "%s/%s", h->cg_dir, thread ? "tasks" : "cgroup.procs");
        snprintf(pidbuf, sizeof(pidbuf), "%" PRIi32, thread ? h->tid : h->pid);
        return write_string_file(path, pidbuf);
}

static void held_freezer_leave(Held *h, const HeldContext *ctx) {
        char path[PATH_MAX], dest[PATH_MAX], root[PATH_MAX];

        if (!h->cg_dir)
                return;
        if (h->cg_state_fd >= 0)
                (void) !pwrite(h->cg_state_fd, "THAWED", 6, 0);

        /* Everything inside goes back, including children the client forked
         * (they were born into our cgroup); if its old group is gone, to the
         * root, which always exists. */
        snprintf(path, sizeof(path), "%s/cgroup.procs", h->cg_dir);
        snprintf(dest, sizeof(dest), "%s%s/cgroup.procs", ctx->freezer_root,
                 h->cg_orig && strcmp(h->cg_orig, "/") != 0 ? h->cg_orig : "");
        snprintf(root, sizeof(root), "%s/cgroup.procs", ctx->freezer_root);
        FILE *f = fopen(path, "re");
        if (f) {
                char pid[32];
                while (fgets(pid, sizeof(pid), f)) {
                        pid[strcspn(pid, "\n")] = '\0';
                        if (write_string_file(dest, pid) < 0)
                                (void) write_string_file(root, pid);
                }
                fclose(f);
        }
        h->cg_state_fd = safe_close(h->cg_state_fd);
        (void) rmdir(h->cg_dir);
        free(h->cg_dir);
        h->cg_dir = NULL;
        free(h->cg_orig);
        h->cg_orig = NULL;
}

static int held_thread_find(const Held *h, pid_t tid) {
        for (size_t i = 0; i < h->n_threads; i++)
                if (h->threads[i].tid == tid)
                        return (int) i;
        return -1;
}

static void held_group_leave(Held *h, const HeldContext *ctx) {
        if (h->group && ctx->groups)
                group_release(ctx->groups, h->group);
        h->group = NULL;
}

static void held_mark_gone(Held *h, const HeldContext *ctx) {
        held_forget_threads(h, ctx, false);
        held_freezer_leave(h, ctx);
        held_group_leave(h, ctx);
        h->gone = true;
        h->running = false;
        h->pidfd = safe_close(h->pidfd);
        h->procfd = safe_close(h->procfd);
}

struct linux_dirent64 {
        uint64_t d_ino;
        int64_t d_off;
        unsigned short d_reclen;
        unsigned char d_type;
        char d_name[];
};

/* Promotes one held thread on this CPU. A piece of a split reservation on
 * this CPU first moves the thread here: pieces never coincide and a free
 * slot separates them, so the loop that had it has demoted it by now. */
static int held_move_thread(Held *h, const HeldContext *ctx, size_t i, const PaceSchedAttr *running) {
        RegistryEntry *entry = h->threads[i].entry;
        pid_t tid = h->threads[i].tid;

        if (entry->affinity_saved && atomic_load(&entry->pinned_cpu) != ctx->cpu) {
                cpu_set_t set;
                CPU_ZERO(&set);
                CPU_SET(ctx->cpu, &set);
                if (sched_setaffinity(tid, sizeof(set), &set) == 0)
                        atomic_store(&entry->pinned_cpu, ctx->cpu);
        }
        return sched_attr_set(tid, running);
}

/* Takes one listed thread: found or newly registered, and marked seen in
 * this scan; held_move_rotated() moves it. */
static int held_take_thread(Held *h, const HeldContext *ctx, pid_t tid, unsigned scan, uint32_t *skipped) {
        int i = held_thread_find(h, tid);
        int r;

        if (i < 0 && ctx->max_threads > 0 && h->n_threads >= ctx->max_threads) {
                (*skipped)++;
                return 0;
        }
        if (i < 0) {
                RegistryEntry *e;
                const PaceSchedAttr *fallback = scan > 1 && h->main_orig_set ? &h->main_orig : NULL;

                if (h->n_threads == h->n_allocated) {
                        size_t k = MAX(h->n_allocated * 2, (size_t) 8);
                        HeldThread *t = realloc(h->threads, k * sizeof(*t));
                        if (!t)
                                return -ENOMEM;
                        h->threads = t;
                        h->n_allocated = k;
                }
                r = registry_acquire(ctx->registry, tid, h->pid, fallback, ctx->cpu, &e);
                if (r < 0)
                        return 0; /* exited since the listing */
                if (tid == h->pid && !h->main_orig_set) {
                        h->main_orig = e->orig;
                        h->main_orig_set = true;
                }
                i = (int) h->n_threads++;
                h->threads[i] = (HeldThread) { .tid = tid, .entry = e };
        }
        h->threads[i].seen = scan;
        return 0;
}

/* Moves the held threads seen in `scan` (all of them for scan 0) to the
 * running policy, starting one further along each time. SCHED_FIFO queues
 * each promoted thread behind the ones promoted before it and never
 * time-slices: in a fixed order the first thread would run every slot and,
 * if it never blocks, its siblings would never run inside the reservation.
 * A thread that is gone gets seen = 0, for the caller to drop. */
static void held_move_rotated(Held *h, const HeldContext *ctx, unsigned scan, const PaceSchedAttr *running) {
        size_t n = h->n_threads, start;

        if (n == 0)
                return;
        start = h->rotation++ % n;
        for (size_t k = 0; k < n; k++) {
                size_t i = (start + k) % n;
                if (scan != 0 && h->threads[i].seen != scan)
                        continue;
                if (held_move_thread(h, ctx, i, running) == -ESRCH)
                        h->threads[i].seen = 0;
        }
}

/* The members, from /proc/PID/task (no group): getdents64 on a stack
 * buffer, no allocation on the dispatch path. */
static int held_scan_proc(Held *h, const HeldContext *ctx, int taskfd, unsigned scan, uint32_t *skipped) {
        for (;;) {
                char buf[4096] __attribute__((aligned(8)));
                long n = syscall(SYS_getdents64, taskfd, buf, sizeof(buf));
                if (n < 0)
                        return -ESRCH;
                if (n == 0)
                        return 0;
                for (long off = 0; off < n;) {
                        struct linux_dirent64 *de = (struct linux_dirent64 *) (buf + off);
                        char *end;
                        long tid;

                        off += de->d_reclen;
                        if (de->d_name[0] < '0' || de->d_name[0] > '9')
                                continue;
                        tid = strtol(de->d_name, &end, 10);
                        if (*end != '\0' || tid <= 1)
                                continue;
                        int r = held_take_thread(h, ctx, (pid_t) tid, scan, skipped);
                        if (r < 0)
                                return r;
                }
        }
}

/* The members, from the reservation's group: whatever was born inside is
 * listed without walking /proc (children of a tree included). */
static int held_scan_group(Held *h, const HeldContext *ctx, unsigned scan, uint32_t *skipped) {
        pid_t tids[256];
        size_t n;
        int r;

        (void) group_evict_strangers(ctx->groups, h->group);
        r = group_list_threads(h->group, tids, ELEMENTSOF(tids), &n);
        if (r < 0)
                return r;
        if (n > ELEMENTSOF(tids))
                *skipped += (uint32_t) (n - ELEMENTSOF(tids));
        for (size_t i = 0; i < MIN(n, ELEMENTSOF(tids)); i++) {
                if (tids[i] <= 1)
                        continue;
                r = held_take_thread(h, ctx, tids[i], scan, skipped);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* At first promotion: the group of its own, members moved in. A failure
 * leaves the reservation on /proc scanning (logged once by the loop). */
static void held_group_enter(Held *h, const HeldContext *ctx) {
        int r;

        if (!ctx->groups || h->group || h->group_error)
                return;
        r = group_acquire(ctx->groups, h->id, &h->group);
        if (r >= 0)
                r = group_enter(ctx->groups, h->group, h->pid, h->tid, h->scope);
        if (r < 0) {
                held_group_leave(h, ctx);
                h->group_error = r;
        }
}

int held_promote(Held *h, const HeldContext *ctx) {
        PaceSchedAttr running;
        _cleanup_close_ int taskfd = -EBADF;
        unsigned scan;
        int r;

        if (h->gone)
                return -ESRCH;

        /* Stale once the process exits, even if its pid is reused: the
         * directory fd belongs to the process we identified. */
        taskfd = openat(h->procfd, "task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (taskfd < 0) {
                held_mark_gone(h, ctx);
                return -ESRCH;
        }

        if (ctx->waiting == PACE_WAITING_FREEZE) {
                r = held_freezer_enter(h, ctx);
                if (r < 0)
                        return r;
        }
        held_group_enter(h, ctx);

        sched_attr_running(&running);

        /* Already holding as many threads as it may: listing a thousand
         * more at every switch would cost the dispatcher what the limit is
         * there to save. Move the ones it holds; a vanished one frees a
         * place, and the next promotion lists the threads again. */
        if (ctx->max_threads > 0 && h->n_threads >= ctx->max_threads && h->threads_skipped > 0) {
                held_move_rotated(h, ctx, 0, &running);
                for (size_t i = h->n_threads; i-- > 0;)
                        if (h->threads[i].seen == 0)
                                held_drop_thread(h, ctx, i);
                if (h->n_threads < ctx->max_threads)
                        h->threads_skipped = 0; /* rescan next time */
                if (h->cg_state_fd >= 0)
                        (void) !pwrite(h->cg_state_fd, "THAWED", 6, 0);
                h->running = true;
                return 0;
        }

        scan = ++h->scans;
        uint32_t skipped = 0;
        if (h->group)
                r = held_scan_group(h, ctx, scan, &skipped);
        else if (h->scope == PACE_TABLE_SCOPE_THREAD)
                r = held_take_thread(h, ctx, h->tid, scan, &skipped);
        else
                r = held_scan_proc(h, ctx, taskfd, scan, &skipped);
        if (r == -ESRCH) {
                held_mark_gone(h, ctx);
                return r;
        }
        if (r < 0)
                return r;

        held_move_rotated(h, ctx, scan, &running);
        for (size_t i = h->n_threads; i-- > 0;)
                if (h->threads[i].seen != scan)
                        held_drop_thread(h, ctx, i);
        h->threads_skipped = skipped;

        if (h->cg_state_fd >= 0)
                (void) !pwrite(h->cg_state_fd, "THAWED", 6, 0);
        h->running = true;
        return 0;
}

int held_usage_ns(Held *h, const HeldContext *ctx, uint64_t *ret) {
        uint64_t sum = 0;

        if (h->group)
                return group_usage_ns(h->group, ctx->cpu, ret);
        for (size_t i = 0; i < h->n_threads; i++) {
                char path[64], buf[128];
                snprintf(path, sizeof(path), "/proc/%" PRIi32 "/schedstat", h->threads[i].tid);
                if (read_at(AT_FDCWD, path, buf, sizeof(buf)) == 0)
                        sum += strtoull(buf, NULL, 10);
        }
        *ret = sum;
        return 0;
}

bool held_any_runnable(Held *h) {
        for (size_t i = 0; i < h->n_threads; i++) {
                char path[48], buf[512];
                snprintf(path, sizeof(path), "/proc/%" PRIi32 "/stat", h->threads[i].tid);
                if (read_at(AT_FDCWD, path, buf, sizeof(buf)) < 0)
                        continue;
                /* "tid (comm) S ...": comm may hold spaces and parentheses. */
                const char *p = strrchr(buf, ')');
                if (p && p[1] == ' ' && p[2] == 'R')
                        return true;
        }
        return false;
}

int held_demote(Held *h, const HeldContext *ctx) {
        PaceSchedAttr waiting;

        if (h->gone || !h->running)
                return 0;
        h->running = false;

        if (ctx->waiting == PACE_WAITING_FREEZE && h->cg_state_fd >= 0) {
                /* Frozen first, so nothing runs between losing FIFO and
                 * stopping; then its own policy back, so a frozen thread is
                 * never left real-time if we die. */
                (void) !pwrite(h->cg_state_fd, "FROZEN", 6, 0);
                for (size_t i = h->n_threads; i-- > 0;)
                        if (sched_attr_set(h->threads[i].tid, &h->threads[i].entry->orig) == -ESRCH)
                                held_drop_thread(h, ctx, i);
                return 0;
        }

        sched_attr_waiting_nice(&waiting);
        for (size_t i = h->n_threads; i-- > 0;)
                if (sched_attr_set(h->threads[i].tid, &waiting) == -ESRCH)
                        held_drop_thread(h, ctx, i);
        return 0;
}

Held *held_free(Held *h, const HeldContext *ctx) {
        if (!h)
                return NULL;
        held_forget_threads(h, ctx, true);
        held_freezer_leave(h, ctx);
        held_group_leave(h, ctx);
        safe_close(h->pidfd);
        safe_close(h->procfd);
        free(h->threads);
        free(h);
        return NULL;
}

int held_new_inert(const PaceTableReservation *res, Held **ret) {
        Held *h = calloc(1, sizeof(*h));
        if (!h)
                return -ENOMEM;
        h->id = res->id;
        h->pid = res->pid;
        h->start_time = res->start_time;
        h->pidfd = h->procfd = h->cg_state_fd = -EBADF;
        h->gone = true;
        h->logged = true;
        *ret = h;
        return 0;
}
