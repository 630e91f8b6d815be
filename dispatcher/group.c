/* SPDX-License-Identifier: MIT */
/* Reservation groups, what every backend does alike: a Group per
 * reservation (shared by the pieces of a split one, counted), its member
 * lists read at bounded cost from file descriptors opened once, strangers
 * moved out and tree members listed by the main thread, and the sweeps
 * of instances that died. Where a group lives and how members get in and
 * out is the backend's (group-backend.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cgroup-limits.h"
#include "group-backend.h"
#include "macro.h"
#include "sched-util.h"
#include "pace-table.h"
#include "proc-util.h"
#include "time-util.h"

#define PACE_MAX_GROUPS_HOUSEKEPT 1024

/* cgroup v1 builds a tasks/cgroup.procs list at the first read after open
 * and serves every later read of that open file from it while it is read
 * at least once a second: a file held open never shows a thread born
 * after its first read (a reservation's new thread went unpromoted for
 * 11 s that way). Reopening at every read cost the dispatch loop about
 * 10 us more per change of slot owner (bench/latency, bench/overhead), so a
 * list is reused for at most this long: a new member is found within 10 ms
 * plus its next run. */
#define LIST_REFRESH_NS (10 * NSEC_PER_MSEC)

int group_write_id(const char *dir, const char *file, pid_t id) {
        char path[PATH_MAX * 2 + 32], text[32];
        snprintf(path, sizeof(path), "%s/%s", dir, file);
        snprintf(text, sizeof(text), "%" PRIi32, id);
        return write_string_file(path, text);
}

void group_move_back(const char *root, const char *orig, const char *file, pid_t id) {
        char dir[PATH_MAX * 2];
        int n = snprintf(dir, sizeof(dir), "%s%s", root, strcmp(orig, "/") == 0 ? "" : orig);
        if (n < 0 || (size_t) n >= sizeof(dir) || group_write_id(dir, file, id) < 0)
                (void) group_write_id(root, file, id);
}

int group_read_orig(const char *proc_path, const char *controller, char *ret, size_t size) {
        char buf[4096];
        int r = read_small_file(proc_path, buf, sizeof(buf));

        if (r < 0)
                return r;
        if (!controller)
                return proc_cgroup_v2_path(buf, ret, size);
        return proc_cgroup_v1_path(buf, controller, ret, size);
}

GroupSet *group_set_alloc(const GroupBackend *backend, const char *root, const char *name) {
        GroupSet *s = calloc(1, sizeof(*s));
        if (!s)
                return NULL;
        s->backend = backend;
        pi_mutex_init(&s->lock);
        snprintf(s->root, sizeof(s->root), "%s", root);
        snprintf(s->name, sizeof(s->name), "%s", name);
        return s;
}

/* Marks the base group with the instance that owns it: a dispatcher that
 * starts later tells a dead instance's leftovers from a live one's by it. */
void group_owner_mark(GroupSet *s, pid_t owner) {
        ProcInfo info;

        if (proc_info_read("/proc", owner, &info) < 0)
                return;
        snprintf(s->owner_dir, sizeof(s->owner_dir), "%s/owner-%" PRIi32 "-%" PRIu64, s->base, owner,
                 info.start_time);
        if (mkdir(s->owner_dir, 0755) < 0)
                s->owner_dir[0] = '\0';
}

/* Whether base (a pace.* directory) carries an owner marker at all. */
static bool owner_marked(const char *base) {
        DIR *d = opendir(base);
        bool marked = false;
        for (struct dirent *de; d && !marked && (de = readdir(d));)
                marked = strncmp(de->d_name, "owner-", 6) == 0;
        if (d)
                closedir(d);
        return marked;
}

/* Whether the owner-PID-STARTTIME marker name names a live process with
 * that start. */
static bool marker_alive(const char *name) {
        long pid;
        unsigned long long start;
        ProcInfo info;

        return sscanf(name, "owner-%ld-%llu", &pid, &start) == 2 && proc_info_read("/proc", (pid_t) pid, &info) == 0 &&
               info.start_time == start;
}

/* Whether the instance that owns base (a pace.* directory) still lives:
 * its owner-PID-STARTTIME marker names a live process with that start. */
static bool owner_alive(const char *base) {
        DIR *d = opendir(base);
        bool alive = false;

        if (!d)
                return false;
        for (struct dirent *de; !alive && (de = readdir(d));)
                alive = marker_alive(de->d_name);
        closedir(d);
        return alive;
}

/* In the order they are tried: v1's cpuacct where a hybrid host has it
 * (libcgroup finds no v1 hierarchy on a unified-only host at all: that is
 * the unified case, not an error). */
static const GroupBackend *const backends[] = { &group_backend_v1, &group_backend_unified };

/* The first backend whose hierarchy this host has (new_groups: as for
 * GroupBackend.hierarchy), its root in root; NULL if none. */
static const GroupBackend *host_backend(bool new_groups, char *root, size_t size) {
        for (size_t i = 0; i < ELEMENTSOF(backends); i++)
                if (backends[i]->hierarchy(new_groups, root, size) == 0)
                        return backends[i];
        return NULL;
}

int group_set_new(const char *name, uint32_t rt_share_ppm, pid_t owner, GroupSet **ret, char *why, size_t why_size) {
        int r = -EOPNOTSUPP;

        if (why_size > 0)
                why[0] = '\0';
        for (size_t i = 0; i < ELEMENTSOF(backends) && r == -EOPNOTSUPP && !why[0]; i++)
                r = backends[i]->set_new(name, rt_share_ppm, owner, ret, why, why_size);
        return r;
}

static size_t graves_dig(GroupSet *s);
static void group_free(Group *g);

GroupSet *group_set_free(GroupSet *s) {
        if (!s)
                return NULL;
        while (s->groups) {
                Group *g = s->groups;
                g->refs = 1;
                group_release(s, g);
        }
        /* A member not reaped yet keeps its group: its parent reaps it
         * soon, so wait for that a little (200 ms at most). */
        size_t left = 0;
        for (unsigned i = 0; i < 20 && (left = graves_dig(s) + s->backend->sweep_stale(s)) > 0; i++)
                (void) usleep(10000);
        while (s->graves) {
                Group *g = s->graves;
                s->graves = g->next;
                group_free(g);
        }
        /* A group still there keeps the marker: whoever starts once its
         * owner is gone removes it (group_sweep_dead()). Without one, no
         * sweep ever would (CI left a base with an empty res-1 that way,
         * and the next test counted it). */
        if (s->owner_dir[0] && left == 0)
                (void) rmdir(s->owner_dir);
        s->backend->set_free(s);
        pthread_mutex_destroy(&s->lock);
        free(s);
        return NULL;
}

const char *group_set_root(const GroupSet *s) {
        return s->root;
}

const char *group_set_backend_name(const GroupSet *s) {
        return s->backend->name;
}

bool group_set_unified(const GroupSet *s) {
        return s->backend == &group_backend_unified;
}

bool group_set_delegated(const GroupSet *s) {
        return s->delegated;
}

bool group_set_confines(const GroupSet *s) {
        return s->cpuset_base[0] != '\0' || s->use_cpuset;
}

bool group_set_weighs(const GroupSet *s) {
        return s->cpu_base[0] != '\0' || s->use_cpu;
}

size_t group_set_count(GroupSet *s) {
        size_t n = 0;
        pthread_mutex_lock(&s->lock);
        for (Group *g = s->groups; g; g = g->next)
                n++;
        pthread_mutex_unlock(&s->lock);
        return n;
}

static void group_free(Group *g) {
        safe_close(g->list_fd[LIST_TASKS]);
        safe_close(g->list_fd[LIST_PROCS]);
        safe_close(g->dir_fd);
        safe_close(g->usage_fd);
        pthread_mutex_destroy(&g->list_lock);
        pthread_mutex_destroy(&g->cand_lock);
        free(g);
}

int group_acquire(GroupSet *s, uint64_t id, Group **ret) {
        Group *g;
        int r = 0;

        pthread_mutex_lock(&s->lock);
        for (g = s->groups; g; g = g->next)
                if (g->id == id) {
                        g->refs++;
                        goto done;
                }
        g = calloc(1, sizeof(*g));
        if (!g) {
                r = -ENOMEM;
                goto done;
        }
        g->id = id;
        g->refs = 1;
        g->dir_fd = g->usage_fd = g->list_fd[0] = g->list_fd[1] = -EBADF;
        pi_mutex_init(&g->list_lock);
        pi_mutex_init(&g->cand_lock);
        r = s->backend->create(s, g);
        if (r < 0) {
                group_free(g);
                g = NULL;
                goto done;
        }
        g->next = s->groups;
        s->groups = g;
done:
        pthread_mutex_unlock(&s->lock);
        if (r >= 0)
                *ret = g;
        return r;
}

/* Reads a whole list file (one number per line) from its start. */
static int read_ids(int fd, pid_t *ids, size_t max, size_t *ret_n) {
        char buf[8192];
        size_t n = 0, fill = 0;
        off_t off = 0;

        for (;;) {
                ssize_t k = pread(fd, buf + fill, sizeof(buf) - fill - 1, off);
                if (k < 0)
                        return negative_errno();
                off += k;
                fill += (size_t) k;
                buf[fill] = '\0';
                /* Whole lines only; the tail waits for the next read. */
                char *p = buf, *nl;
                while ((nl = strchr(p, '\n'))) {
                        *nl = '\0';
                        char *end;
                        long v = strtol(p, &end, 10);
                        if (end != p && v > 0 && v <= INT32_MAX) {
                                if (n < max)
                                        ids[n] = (pid_t) v;
                                n++;
                        }
                        p = nl + 1;
                }
                fill = (size_t) (buf + fill - p);
                memmove(buf, p, fill);
                if (k == 0 || fill >= sizeof(buf) - 1)
                        break;
        }
        *ret_n = n;
        return 0;
}

/* One of the group's lists, at most LIST_REFRESH_NS old; fresh: now. */
static int list_read(const GroupSet *s, Group *g, int which, bool fresh, pid_t *ids, size_t max, size_t *ret_n) {
        uint64_t now = monotonic_ns();
        int r;

        pthread_mutex_lock(&g->list_lock);
        if (g->list_fd[which] < 0 || fresh || now - g->list_opened_ns[which] >= LIST_REFRESH_NS) {
                safe_close(g->list_fd[which]);
                g->list_fd[which] = openat(g->dir_fd, s->backend->list_file[which], O_RDONLY | O_CLOEXEC);
                g->list_opened_ns[which] = now;
        }
        r = g->list_fd[which] < 0 ? negative_errno() : read_ids(g->list_fd[which], ids, max, ret_n);
        pthread_mutex_unlock(&g->list_lock);
        return r;
}

/* Everything inside goes back (children it forked included, unless
 * move is false) and the directories go if they are empty. */
static void group_empty_and_remove(GroupSet *s, Group *g, bool move) {
        pid_t ids[256];
        size_t n;

        if (!g->dir[0] || g->retired) /* (a delegated group never entered has none) */
                return;
        /* A fork racing with the move leaves a straggler: go round a few
         * times. */
        int which = g->scope == PACE_TABLE_SCOPE_THREAD ? LIST_TASKS : LIST_PROCS;
        for (int round = 0; move && round < 8; round++) {
                if (list_read(s, g, which, true, ids, ELEMENTSOF(ids), &n) < 0 || n == 0)
                        break;
                for (size_t i = 0; i < MIN(n, ELEMENTSOF(ids)); i++)
                        s->backend->move_out(s, g, s->backend->list_file[which], ids[i], false);
        }
        /* Still there (a member not yet reaped), in any hierarchy: tried
         * again later. */
        g->retired = s->backend->destroy(s, g) == 0;
}

void group_release(GroupSet *s, Group *g) {
        if (!g)
                return;
        pthread_mutex_lock(&s->lock);
        if (--g->refs > 0) {
                pthread_mutex_unlock(&s->lock);
                return;
        }
        for (Group **p = &s->groups; *p; p = &(*p)->next)
                if (*p == g) {
                        *p = g->next;
                        break;
                }
        pthread_mutex_unlock(&s->lock);
        group_empty_and_remove(s, g, true);
        if (g->dir[0] && !g->retired) {
                g->next = s->graves;
                s->graves = g;
                return;
        }
        group_free(g);
}

size_t group_empty_into(const char *dir, const char *root) {
        char path[PATH_MAX + 32], line[32];
        size_t n = 0;

        snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
        FILE *f = fopen(path, "re");
        while (f && fgets(line, sizeof(line), f)) {
                (void) group_write_id(root, "cgroup.procs", (pid_t) strtol(line, NULL, 10));
                n++;
        }
        if (f)
                fclose(f);
        return n;
}

bool group_dir_removed(const char *dir) {
        return rmdir(dir) == 0 || errno == ENOENT;
}

/* Whether id is one of ours: a live group's, or one waiting to be removed. */
static bool id_known(GroupSet *s, uint64_t id) {
        bool known = false;
        pthread_mutex_lock(&s->lock);
        for (const Group *g = s->groups; g && !known; g = g->next)
                known = g->id == id;
        pthread_mutex_unlock(&s->lock);
        for (const Group *g = s->graves; g && !known; g = g->next)
                known = g->id == id;
        return known;
}

size_t group_sweep_stale_dir(GroupSet *s, const char *base, const char *root) {
        size_t left = 0;
        DIR *d = opendir(base);

        const char *own_marker = s->owner_dir[0] ? strrchr(s->owner_dir, '/') + 1 : "";
        for (struct dirent *de; d && (de = readdir(d));) {
                char *end, dir[PATH_MAX + 300];
                /* A dead predecessor's marker (it shares our name): the base
                 * could never go with it there. */
                if (strncmp(de->d_name, "owner-", 6) == 0 && strcmp(de->d_name, own_marker) != 0 &&
                    !marker_alive(de->d_name)) {
                        snprintf(dir, sizeof(dir), "%s/%s", base, de->d_name);
                        left += !group_dir_removed(dir);
                        continue;
                }
                if (strncmp(de->d_name, "res-", 4) != 0)
                        continue;
                uint64_t id = strtoull(de->d_name + 4, &end, 10);
                if (end == de->d_name + 4 || *end || id_known(s, id))
                        continue;
                snprintf(dir, sizeof(dir), "%s/%s", base, de->d_name);
                (void) group_empty_into(dir, root);
                left += !group_dir_removed(dir);
        }
        if (d)
                closedir(d);
        return left;
}

/* Tries again to remove the groups released before they could be. Returns
 * how many are still there. */
static size_t graves_dig(GroupSet *s) {
        size_t left = 0;

        for (Group **p = &s->graves; *p;) {
                Group *g = *p;
                group_empty_and_remove(s, g, true);
                if (g->retired) {
                        *p = g->next;
                        group_free(g);
                } else {
                        p = &g->next;
                        left++;
                }
        }
        return left;
}

void group_retire(GroupSet *s, Group *g) {
        /* Members that live on (a tree's, after its root exited) stay
         * until the reservation is released: the loop may have them at its
         * priority, and a dead dispatcher's sweep finds them in the group. */
        if (g)
                group_empty_and_remove(s, g, false);
}

int group_enter(GroupSet *s, Group *g, const GroupMembers *m) {
        char path[96];
        int r = 0;

        pthread_mutex_lock(&s->lock);
        if (g->entered || g->pending)
                goto done;
        if (m->scope == PACE_TABLE_SCOPE_THREAD)
                snprintf(path, sizeof(path), "/proc/%" PRIi32 "/task/%" PRIi32 "/cgroup", m->pid, m->tid);
        else
                snprintf(path, sizeof(path), "/proc/%" PRIi32 "/cgroup", m->pid);
        g->scope = m->scope;
        g->pid = m->pid;
        g->tid = m->tid;
        g->uid = m->uid;
        g->max_threads = m->max_threads;
        snprintf(g->cpus, sizeof(g->cpus), "%s", m->cpus ?: "");
        r = s->backend->enter(s, g, path);
        if (r >= 0 && !g->pending) {
                __atomic_store_n(&g->entered, true, __ATOMIC_RELEASE);
                if (m->scope == PACE_TABLE_SCOPE_TREE)
                        group_refresh_candidates(s, g);
        }
done:
        pthread_mutex_unlock(&s->lock);
        return r;
}

bool group_entered(const Group *g) {
        return __atomic_load_n(&g->entered, __ATOMIC_ACQUIRE);
}

bool group_settling(const Group *g) {
        return __atomic_load_n(&g->pending, __ATOMIC_ACQUIRE) && !group_entered(g);
}

bool group_confined(const Group *g) {
        return group_entered(g) && g->confined;
}

bool group_weighed(const Group *g) {
        return group_entered(g) && g->weighed;
}

int group_freeze_fd(Group *g) {
        if (!group_entered(g))
                return -EAGAIN;
        /* (The v1 freezer is a hierarchy of its own: held.c.) */
        int fd = openat(g->dir_fd, "cgroup.freeze", O_WRONLY | O_CLOEXEC);
        return fd < 0 ? (errno == ENOENT ? -EOPNOTSUPP : negative_errno()) : fd;
}

void group_move_descendants(GroupSet *s, Group *g, int (*move_in)(GroupSet *s, Group *g, pid_t pid)) {
        static pid_t kids[GROUP_TREE_MAX];
        static int pidfds[GROUP_TREE_MAX];
        size_t n = 0;

        if (proc_list_owned_descendants("/proc", g->pid, g->uid, g->max_threads, kids, pidfds, ELEMENTSOF(kids),
                                        &n) < 0)
                return;
        for (size_t i = 0; i < n; i++) {
                /* The broker checked the root's cgroups; a descendant may
                 * live in others, and a limit set there stays in force. */
                if (cgroup_limit_lifted_pid("/sys/fs/cgroup", kids[i], NULL, 0) != 0) {
                        safe_close(pidfds[i]);
                        continue;
                }
                if (move_in(s, g, kids[i]) >= 0 && pidfd_alive(pidfds[i]) < 0)
                        s->backend->move_out(s, g, "cgroup.procs", kids[i], true);
                safe_close(pidfds[i]);
        }
}

/* A tree's processes that are not its owner's: born inside (a set-uid
 * program a member ran) and no member, so not to be confined or weighed
 * with it; back where the tree came from, which is where they would be
 * had it never been reserved. One status read per process a round. */
static int evict_foreign_owners(GroupSet *s, Group *g) {
        pid_t ids[GROUP_CANDIDATES_MAX];
        unsigned evicted = 0;
        size_t n;
        int r;

        r = list_read(s, g, LIST_PROCS, false, ids, ELEMENTSOF(ids), &n);
        if (r < 0)
                return r;
        for (size_t i = 0; i < MIN(n, ELEMENTSOF(ids)); i++) {
                char path[64], status[4096];
                ProcOwner owner;
                snprintf(path, sizeof(path), "/proc/%" PRIi32 "/status", ids[i]);
                if (ids[i] == g->pid || read_small_file(path, status, sizeof(status)) < 0 ||
                    proc_status_owner(status, &owner) < 0 || proc_owner_is(&owner, g->uid))
                        continue;
                s->backend->move_out(s, g, "cgroup.procs", ids[i], false);
                evicted++;
        }
        return (int) evicted;
}

int group_evict_strangers(GroupSet *s, Group *g) {
        pid_t ids[64];
        size_t n;
        int r;

        if (!group_entered(g))
                return 0;
        if (g->scope == PACE_TABLE_SCOPE_TREE)
                return evict_foreign_owners(s, g);
        /* The common case, the member and nobody else, costs one read. */
        int which = g->scope == PACE_TABLE_SCOPE_THREAD ? LIST_TASKS : LIST_PROCS;
        r = list_read(s, g, which, false, ids, ELEMENTSOF(ids), &n);
        if (r < 0)
                return r;
        pid_t member = which == LIST_TASKS ? g->tid : g->pid;
        unsigned evicted = 0;
        for (size_t i = 0; i < MIN(n, ELEMENTSOF(ids)); i++)
                if (ids[i] != member) {
                        s->backend->move_out(s, g, s->backend->list_file[which], ids[i], false);
                        evicted++;
                }
        return (int) evicted;
}

int group_list_threads(Group *g, pid_t *tids, size_t max, size_t *ret_n) {
        pthread_mutex_lock(&g->cand_lock);
        size_t n = MIN(g->n_cand, max);
        memcpy(tids, g->cand, n * sizeof(*tids));
        pthread_mutex_unlock(&g->cand_lock);
        *ret_n = n;
        return 0;
}

void group_refresh_candidates(GroupSet *s, Group *g) {
        pid_t ids[GROUP_CANDIDATES_MAX];
        size_t n = 0;

        if (list_read(s, g, LIST_TASKS, false, ids, ELEMENTSOF(ids), &n) < 0)
                return;
        pthread_mutex_lock(&g->cand_lock);
        g->n_cand = MIN(n, ELEMENTSOF(ids));
        memcpy(g->cand, ids, g->n_cand * sizeof(ids[0]));
        pthread_mutex_unlock(&g->cand_lock);
}

size_t group_set_housekeep(GroupSet *s, GroupMakeScope make_scope, void *userdata, char *why, size_t why_size) {
        Group *held[PACE_MAX_GROUPS_HOUSEKEPT];
        size_t n = 0;

        (void) graves_dig(s);
        (void) s->backend->sweep_stale(s);
        /* A reference each, so a loop that lets go meanwhile leaves the
         * clean-up to whoever drops the last one. */
        pthread_mutex_lock(&s->lock);
        for (Group *g = s->groups; g && n < ELEMENTSOF(held); g = g->next) {
                g->refs++;
                held[n++] = g;
        }
        pthread_mutex_unlock(&s->lock);
        for (size_t i = 0; i < n; i++) {
                if (s->backend->housekeep)
                        s->backend->housekeep(s, held[i], make_scope, userdata, why, why_size);
                if (group_entered(held[i])) {
                        (void) group_evict_strangers(s, held[i]);
                        if (held[i]->scope == PACE_TABLE_SCOPE_TREE)
                                group_refresh_candidates(s, held[i]);
                }
                group_release(s, held[i]);
        }
        return n;
}

int group_usage_ns(GroupSet *s, Group *g, int cpu, uint64_t *ret) {
        return s->backend->usage_ns(g, cpu, ret);
}

int group_base_path(const char *name, char *ret, size_t size) {
        char root[PATH_MAX];

        if (!host_backend(true, root, sizeof(root)))
                return -EOPNOTSUPP;
        snprintf(ret, size, "%s/%s", root, name);
        return 0;
}

int group_sweep_dead(const char *own_name, void (*demote)(const char *base), unsigned *ret_n) {
        char root[PATH_MAX];
        unsigned n = 0;

        const GroupBackend *b = host_backend(false, root, sizeof(root));
        if (!b)
                return -EOPNOTSUPP;
        DIR *d = opendir(root);
        if (!d)
                return negative_errno();
        for (struct dirent *de; (de = readdir(d));) {
                char base[PATH_MAX + 128];
                /* Exactly our names (pace.<16 hex digits>), and only with an
                 * owner marker naming a gone process: an administrator's
                 * pace.slice, or an instance that could not mark its groups,
                 * is left alone. */
                if (strlen(de->d_name) != 21 || strncmp(de->d_name, "pace.", 5) != 0 ||
                    strspn(de->d_name + 5, "0123456789abcdef") != 16 || strcmp(de->d_name, own_name) == 0)
                        continue;
                snprintf(base, sizeof(base), "%s/%s", root, de->d_name);
                if (!owner_marked(base) || owner_alive(base))
                        continue;
                if (demote)
                        demote(base);
                (void) b->remove_instance(root, de->d_name);
                n++;
        }
        closedir(d);
        *ret_n = n;
        return 0;
}

int group_set_remove(const char *name) {
        char root[PATH_MAX];

        const GroupBackend *b = host_backend(false, root, sizeof(root));
        if (!b)
                return -EOPNOTSUPP;
        return b->remove_instance(root, name);
}
