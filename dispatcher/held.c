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
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "held.h"
#include "macro.h"
#include "sched-util.h"
#include "proc-util.h"
#include "time-util.h"

#define PF_KTHREAD 0x00200000UL

/* The monitor (monitor.c): our parent, at SCHED_FIFO 99. Promoting it would
 * drop it below the clients it has to demote, and demoting it would leave
 * nobody to notice our death. */
static pid_t protected_pid;

void held_protect_pid(pid_t pid) {
        protected_pid = pid;
}

pid_t held_protected_pid(void) {
        return protected_pid;
}

static Held *held_alloc(const PaceTableReservation *res, uint32_t capacity) {
        Held *h = calloc(1, sizeof(*h));
        if (!h)
                return NULL;
        h->id = res->id;
        h->pid = res->pid;
        h->start_time = res->start_time;
        h->scope = res->scope;
        h->tid = res->scope == PACE_TABLE_SCOPE_THREAD ? res->tid : 0;
        h->cpu = res->cpu;
        h->capacity = capacity;
        snprintf(h->cpus, sizeof(h->cpus), "%" PRIi32, res->cpu);
        h->pidfd = h->procfd = h->taskfd = h->freeze_fd = -EBADF;
        h->mine = calloc(MAX(capacity, 1u), sizeof(RegistryEntry *));
        h->threads = calloc(MAX(capacity, 1u), sizeof(HeldThread));
        h->pfds = calloc(MAX(capacity, 1u), sizeof(struct pollfd));
        /* What is handed over never exceeds what is registered, and what is
         * handed back never exceeds what was handed over. */
        if (!h->mine || !h->threads || !h->pfds || spsc_init(&h->incoming, MAX(capacity, 1u)) < 0 ||
            spsc_init(&h->dropped, MAX(capacity, 1u)) < 0) {
                spsc_done(&h->incoming);
                free(h->mine);
                free(h->threads);
                free(h->pfds);
                free(h);
                return NULL;
        }
        return h;
}

int held_new(const PaceTableReservation *res, bool allow_root, uint32_t capacity, Held **ret) {
        _cleanup_close_ int pidfd = -EBADF, procfd = -EBADF, taskfd = -EBADF;
        char path[64], stat[1024], status[4096], limits[2048];
        uint64_t start_time;
        unsigned long flags;
        uint32_t ceiling;
        ProcOwner owner;
        int r;

        /* pid 1, and the dispatcher itself: demoting ourselves would stop
         * the dispatch of every CPU. */
        if (res->pid <= 1 || res->pid == getpid() || (protected_pid > 0 && res->pid == protected_pid))
                return HELD_REFUSED_PROTECTED;
        r = pidfd_open_checked(res->pid, &pidfd);
        if (r < 0)
                return r == -EINVAL ? -ESRCH : r;
        snprintf(path, sizeof(path), "/proc/%" PRIi32, res->pid);
        procfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (procfd < 0)
                return -ESRCH;
        r = read_small_file_at(procfd, "stat", stat, sizeof(stat));
        if (r < 0)
                return r;
        r = proc_stat_parse(stat, &start_time, &flags);
        if (r < 0)
                return r;
        r = read_small_file_at(procfd, "status", status, sizeof(status));
        if (r < 0)
                return r;
        r = read_small_file_at(procfd, "limits", limits, sizeof(limits));
        if (r < 0)
                return r;
        taskfd = openat(procfd, "task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (taskfd < 0)
                return -ESRCH;
        /* Alive after /proc/PID was read: the directory is the pidfd's
         * process, not a successor that inherited the number. */
        r = pidfd_alive(pidfd);
        if (r < 0)
                return r;
        if (flags & PF_KTHREAD)
                return HELD_REFUSED_PROTECTED;
        if (start_time != res->start_time)
                return HELD_REFUSED_STALE;
        /* The owner is the kernel's word, not the table's: the broker's
         * user could name anyone. The table's uid is who asked; only root
         * may ask for another user's process. */
        if (proc_status_owner(status, &owner) < 0 || proc_rt_priority_ceiling(status, limits, &ceiling) < 0)
                return -EBADMSG;
        if (res->uid != 0 && !proc_owner_is(&owner, res->uid))
                return HELD_REFUSED_OTHER_OWNER;
        if (proc_owner_has_root(&owner) && !allow_root)
                return HELD_REFUSED_ROOT;

        /* A thread of this very process: its entry under the pinned
         * /proc/PID directory. */
        if (res->scope == PACE_TABLE_SCOPE_THREAD) {
                char task[32];
                snprintf(task, sizeof(task), "%" PRIi32, res->tid);
                if (res->tid <= 0 || faccessat(taskfd, task, F_OK, 0) < 0)
                        return -ESRCH;
        }

        Held *h = held_alloc(res, capacity);
        if (!h)
                return -ENOMEM;
        h->rt_ceiling = ceiling;
        h->uid = owner.uids[0];
        h->pidfd = TAKE_FD(pidfd);
        h->procfd = TAKE_FD(procfd);
        h->taskfd = TAKE_FD(taskfd);
        *ret = h;
        return 0;
}

const char *held_refusal_to_string(int r) {
        switch (r) {
        case HELD_REFUSED_PROTECTED:
                return "pid 1, kernel threads and the dispatcher itself are never promoted or reniced";
        case HELD_REFUSED_STALE:
                return "the pid now belongs to another process (start time differs)";
        case HELD_REFUSED_OTHER_OWNER:
                return "the process belongs to another user than the one the table names";
        case HELD_REFUSED_ROOT:
                return "the process runs as root (a real, effective, saved or file-system uid 0) and "
                       "\"reserve_root_processes\" is off";
        case HELD_REFUSED_REALTIME:
                return "the thread is real-time (pace's or its own), and its nice level waits until it is not";
        case -ESRCH:
                return "the process does not exist";
        case -EBADMSG:
                return "its /proc status or limits cannot be read";
        default:
                return r < 0 ? strerror(-r) : "refused for an unknown reason";
        }
}

int held_new_inert(const PaceTableReservation *res, Held **ret) {
        Held *h = held_alloc(res, 1);
        if (!h)
                return -ENOMEM;
        h->inert = true;
        h->logged = true;
        atomic_store(&h->gone, true);
        *ret = h;
        return 0;
}

bool held_confined(const Held *h) {
        /* One CPU only: a split reservation's cpuset holds all its pieces'
         * CPUs, and a member could run on two of them at once. */
        return atomic_load_explicit(&h->confined, memory_order_relaxed);
}

bool held_grouped(const Held *h) {
        return atomic_load_explicit(&h->grouped, memory_order_relaxed);
}

bool held_leak_charged(const Held *h, const HeldContext *ctx) {
        /* Only a whole reservation's group counts it cheaply (one read),
         * and only where nothing weighs its waiting members down; a split
         * reservation's group total is every piece's. */
        return ctx->waiting == PACE_WAITING_NICE && held_grouped(h) && !group_weighed(h->group) &&
               !strchr(h->cpus, ',');
}

void held_waiting_attr(const Held *h, const HeldContext *ctx, PaceSchedAttr *ret) {
        if (held_leak_charged(h, ctx))
                sched_attr_waiting_idle(ret);
        else
                sched_attr_waiting_nice(ret);
}

/* Whether tid is still the thread we took: a thread of the very process
 * (the held task directory goes stale when the process exits, and lists
 * only its own threads), or for a tree's other processes, of its own
 * process. Main thread: a lookup. */
static bool held_tid_alive(const Held *h, pid_t tid, pid_t tgid) {
        char name[64];

        if (h->taskfd < 0)
                return false;
        if (tgid == h->pid) {
                snprintf(name, sizeof(name), "%" PRIi32, tid);
                return faccessat(h->taskfd, name, F_OK, 0) == 0;
        }
        snprintf(name, sizeof(name), "/proc/%" PRIi32 "/task/%" PRIi32, tgid, tid);
        return faccessat(AT_FDCWD, name, F_OK, 0) == 0;
}

static bool held_entry_alive(const Held *h, const RegistryEntry *e) {
        if (e->proc_pidfd >= 0 && pidfd_alive(e->proc_pidfd) < 0)
                return false;
        if (e->thread_pidfd >= 0)
                return pidfd_alive(e->thread_pidfd) == 0;
        return held_tid_alive(h, e->tid, e->tgid);
}

static int held_mine_find(const Held *h, pid_t tid) {
        for (size_t i = 0; i < h->n_mine; i++)
                if (h->mine[i]->tid == tid)
                        return (int) i;
        return -1;
}

static void held_mine_remove(Held *h, const RegistryEntry *e) {
        for (size_t i = 0; i < h->n_mine; i++)
                if (h->mine[i] == e) {
                        h->mine[i] = h->mine[--h->n_mine];
                        return;
                }
}

static void housekeeping_wanted(const HeldContext *ctx) {
        if (ctx->housekeeping_fd >= 0) {
                uint64_t one = 1;
                (void) !write(ctx->housekeeping_fd, &one, sizeof(one));
        }
}

/* Directory entries read per look: two getdents64 calls of 4 KiB, about
 * 250 threads. A larger process is walked a slice at a time. */
#define TASK_SLICES_PER_LOOK 2
/* The longest record a thread id's entry can take (a 10-digit name). */
#define LIST_MAX_RECLEN 32
/* How long a reservation whose last look found no new thread goes
 * without one (a loop that saw one of its threads end asks at once): what
 * a thread born to a quiet process waits, at its parent's waiting policy,
 * before it is registered; a look at a 10,000-thread process costs the
 * main thread about 1 ms. */
#define KEEP_QUIET_NS (200 * NSEC_PER_MSEC)

struct linux_dirent64 {
        uint64_t d_ino;
        int64_t d_off;
        unsigned short d_reclen;
        unsigned char d_type;
        char d_name[];
};

/* The thread group a thread id belongs to now (a tree's other processes),
 * if that process has exactly the reservation's owner: a tree's member
 * whose pid was reused, or a set-uid child, is nobody we may touch. */
static pid_t tgid_of_owned(pid_t tid, uid_t uid) {
        char path[64], buf[2048];
        ProcOwner owner;
        snprintf(path, sizeof(path), "/proc/%" PRIi32 "/status", tid);
        if (read_small_file_at(AT_FDCWD, path, buf, sizeof(buf)) < 0)
                return -1;
        const char *line = strstr(buf, "\nTgid:");
        if (!line || proc_status_owner(buf, &owner) < 0 || !proc_owner_is(&owner, uid))
                return -1;
        return (pid_t) strtol(line + 6, NULL, 10);
}

typedef struct HeldParked {
        pid_t tid, tgid;
        PaceSchedAttr orig;
} HeldParked;

static int parked_find(const Held *h, pid_t tid) {
        for (size_t i = 0; i < h->n_parked; i++)
                if (h->parked[i].tid == tid)
                        return (int) i;
        return -1;
}

/* Threads past the reservation's capacity are never promoted; left at
 * their own policy they would take free time that is non-real-time work's
 * wherever no cpu controller weighs the reservation's members down (the
 * unified hierarchy without one, the /proc fallback): the soak test saw a
 * 51-thread client take 99-141% of a CPU that way, and at nice 19 still
 * half the free time beside a nice-0 hog. So the main thread puts each
 * once at SCHED_IDLE (sched_attr_parked()), recording what it had, and
 * gives that back with the reservation (held_free()). Real-time policies
 * are left to the sweeps; at most HELD_PARKED_MAX per reservation. tgid as
 * for held_take_thread(). */
static void held_park(Held *h, pid_t tid, pid_t tgid) {
        PaceSchedAttr a, parked;

        if (h->n_parked == HELD_PARKED_MAX || parked_find(h, tid) >= 0)
                return;
        if (tgid != h->pid) {
                pid_t found = tgid_of_owned(tid, h->uid);
                if (found <= 0 || (tgid > 0 && found != tgid))
                        return;
                tgid = found;
        }
        if (!h->parked && !(h->parked = calloc(HELD_PARKED_MAX, sizeof(HeldParked))))
                return;
        if (!held_tid_alive(h, tid, tgid) || sched_attr_get(tid, &a) < 0 || sched_attr_is_realtime(&a) ||
            sched_attr_is_parked(&a))
                return;
        /* Our waiting policy, inherited from a registered creator: what it
         * gets back is what the process's main thread had (as in
         * thread_registry_acquire()). Skipped, it would be looked up again at every
         * round. */
        if (sched_attr_is_ours(&a))
                a = h->main_orig_set ? h->main_orig : (PaceSchedAttr) { .sched_policy = SCHED_OTHER };
        /* In the real-time class behind its policy (held_take_thread()):
         * the policy set below puts it back in its own, and says so. */
        bool leaked = sched_thread_class_leaked(tgid, tid) > 0;
        sched_attr_parked(&parked);
        /* Through nice 19, as a waiting member (sched_attr_set_waiting()):
         * one in the real-time class behind its policy leaves that class. */
        if (sched_attr_set_waiting(tid, &parked) < 0)
                return;
        h->put_back += leaked;
        h->parked[h->n_parked++] = (HeldParked) { .tid = tid, .tgid = tgid, .orig = a };
}

/* Gives parked threads back what they had, if they still are as we left
 * them. */
static void held_unpark_all(Held *h) {
        for (size_t i = 0; i < h->n_parked; i++) {
                const HeldParked *p = &h->parked[i];
                PaceSchedAttr now;
                if (held_tid_alive(h, p->tid, p->tgid) && sched_attr_get(p->tid, &now) == 0 &&
                    (sched_attr_is_parked(&now) || sched_attr_is_ours(&now)))
                        (void) sched_attr_set(p->tid, &p->orig);
        }
        h->n_parked = 0;
}

/* Registers one listed thread if it is new and there is room, and hands it
 * to the loop; parks it if there is none. Returns 1 if it was taken. */
static int held_take_thread(Held *h, const HeldContext *ctx, pid_t tid, pid_t tgid) {
        RegistryEntry *e;
        int r;

        if (held_mine_find(h, tid) >= 0)
                return 0;
        if (h->n_mine >= h->capacity) {
                h->threads_skipped++;
                held_park(h, tid, tgid);
                return 0;
        }
        /* Registered now: the registry records its state from here on,
         * which is the one it had before it was parked. */
        int k = parked_find(h, tid);
        if (k >= 0) {
                PaceSchedAttr now;
                if (sched_attr_get(tid, &now) == 0 && sched_attr_is_parked(&now))
                        (void) sched_attr_set(tid, &h->parked[k].orig);
                h->parked[k] = h->parked[--h->n_parked];
        }
        _cleanup_close_ int proc_pidfd = -EBADF;
        if (tgid != h->pid) {
                /* Another process of the tree: its owner is checked anew,
                 * and a pidfd taken of it before the check is trusted, so
                 * a pid that changes hands later is told from it. */
                pid_t found = tgid_of_owned(tid, h->uid);
                if (found <= 0 || (tgid > 0 && found != tgid))
                        return 0;
                if (pidfd_open_checked(found, &proc_pidfd) < 0 || tgid_of_owned(tid, h->uid) != found ||
                    pidfd_alive(proc_pidfd) < 0)
                        return 0;
                tgid = found;
        }
        /* Nothing is done to an id that is not, right now, our thread. */
        if (!held_tid_alive(h, tid, tgid))
                return 0;
        const PaceSchedAttr *fallback = h->main_orig_set ? &h->main_orig : NULL;
        r = thread_registry_acquire(ctx->registry, tid, tgid, fallback, h->rt_ceiling, h->cpu,
                             proc_pidfd >= 0 ? &proc_pidfd : NULL, &e);
        if (r < 0)
                return 0; /* exited since the listing */
        if (tid == h->pid && !h->main_orig_set) {
                h->main_orig = e->orig;
                h->main_orig_set = true;
        }
        /* Listed a moment ago; still ours now that it is registered (its
         * pidfd, if any, was opened after the listing)? */
        if (!held_entry_alive(h, e)) {
                thread_registry_release(ctx->registry, e, false);
                return 0;
        }
        /* Born in the real-time class behind its policy's back (its parent
         * turned real-time as it was being made): put in its own class. */
        if (sched_thread_class_leaked(tgid, tid) > 0 && sched_attr_reclass(tid) >= 0)
                h->put_back++;
        /* The thread's own schedstat (/proc/TID/... of a thread that is
         * not the leader describes its whole process), which the loop reads
         * for the accounting where no group counts (or may yet count) the
         * members. */
        char path[64];
        if (e->schedstat_fd < 0 && (!ctx->groups || !h->group || h->group_error)) {
                snprintf(path, sizeof(path), "/proc/%" PRIi32 "/task/%" PRIi32 "/schedstat", tgid, tid);
                e->schedstat_fd = open(path, O_RDONLY | O_CLOEXEC);
        }
        /* A newcomer of a reservation in force waits until its first run
         * (held_settle()). */
        if (ctx->waiting == PACE_WAITING_NICE && atomic_load_explicit(&h->begun, memory_order_relaxed) &&
            !strchr(h->cpus, ',')) {
                PaceSchedAttr waiting;
                held_waiting_attr(h, ctx, &waiting);
                (void) sched_attr_set_waiting(tid, &waiting);
        }
        h->mine[h->n_mine++] = e;
        if (!spsc_push(&h->incoming, e)) {
                /* Cannot happen (the ring holds capacity): never leave it
                 * registered but unknown to the loop. */
                h->n_mine--;
                thread_registry_release(ctx->registry, e, true);
                return 0;
        }
        return 1;
}

/* New members from /proc/PID/task: every thread, or for a large process
 * a slice at a time, the directory offset carrying over between looks. */
static size_t held_list_proc(Held *h, const HeldContext *ctx) {
        size_t n_new = 0;

        for (int slice = 0; slice < TASK_SLICES_PER_LOOK; slice++) {
                char buf[4096] __attribute__((aligned(8)));
                long n = syscall(SYS_getdents64, h->taskfd, buf, sizeof(buf));
                if (n < 0) {
                        atomic_store(&h->gone, true);
                        return n_new;
                }
                /* The kernel stops filling only when the next entry does
                 * not fit: with room for one more, the listing is done. */
                bool done = n == 0 || (size_t) n <= sizeof(buf) - LIST_MAX_RECLEN;
                for (long off = 0; off < n;) {
                        struct linux_dirent64 *de = (struct linux_dirent64 *) (buf + off);
                        char *end;

                        off += de->d_reclen;
                        if (de->d_name[0] < '0' || de->d_name[0] > '9')
                                continue;
                        long tid = strtol(de->d_name, &end, 10);
                        if (*end != '\0' || tid <= 1)
                                continue;
                        n_new += (size_t) held_take_thread(h, ctx, (pid_t) tid, h->pid);
                }
                if (done) {
                        (void) lseek(h->taskfd, 0, SEEK_SET);
                        break;
                }
        }
        return n_new;
}

/* A tree's members, from its group: whatever was born inside is listed
 * without walking /proc. */
static size_t held_list_group(Held *h, const HeldContext *ctx) {
        pid_t tids[256];
        size_t n, n_new = 0;

        if (group_list_threads(h->group, tids, ELEMENTSOF(tids), &n) < 0)
                return 0;
        if (n > ELEMENTSOF(tids))
                h->threads_skipped += (uint32_t) (n - ELEMENTSOF(tids));
        for (size_t i = 0; i < MIN(n, ELEMENTSOF(tids)); i++)
                if (tids[i] > 1)
                        n_new += (size_t) held_take_thread(h, ctx, tids[i], -1);
        return n_new;
}

/* A tree's descendants without a group: the main thread's last listing. */
static size_t held_list_tree(Held *h, const HeldContext *ctx) {
        TreeMember m[TREE_WATCH_MAX_THREADS];
        size_t n_new = 0;

        size_t n = tree_watch_members(h->tree, m, ELEMENTSOF(m));
        for (size_t i = 0; i < n; i++)
                n_new += (size_t) held_take_thread(h, ctx, m[i].tid, m[i].tgid);
        return n_new;
}

static void held_group_leave(Held *h, const HeldContext *ctx) {
        atomic_store(&h->grouped, false);
        atomic_store(&h->confined, false);
        /* Strict mode on the unified hierarchy: the group's own freezer,
         * thawed before the members leave it. */
        if (h->freeze_fd >= 0) {
                (void) !pwrite(h->freeze_fd, "0", 1, 0);
                h->freeze_fd = safe_close(h->freeze_fd);
        }
        if (h->group && ctx->groups)
                group_release(ctx->groups, h->group);
        h->group = NULL;
        if (h->tree && ctx->trees)
                tree_watch_release(ctx->trees, h->tree);
        h->tree = NULL;
}

/* The group of its own, members moved in (and confined to the
 * reservation's CPUs where the host has a cpuset). A failure leaves the
 * reservation on /proc scanning. */
static void held_group_enter(Held *h, const HeldContext *ctx) {
        int r;

        if (!ctx->groups || h->group || h->group_error)
                return;
        r = group_acquire(ctx->groups, h->id, &h->group);
        if (r >= 0)
                r = group_enter(ctx->groups, h->group,
                                &(GroupMembers) { .pid = h->pid, .tid = h->tid, .scope = h->scope, .uid = h->uid,
                                                  .max_threads = h->capacity, .cpus = h->cpus });
        if (r < 0) {
                held_group_leave(h, ctx);
                h->group_error = r;
                return;
        }
        /* The main thread keeps groups tidy from now on. */
        housekeeping_wanted(ctx);
}

/* Where the members will be held, and whether the loop may promote them. */
static void held_settle(Held *h, const HeldContext *ctx) {
        int r;

        if (atomic_load(&h->ready) || atomic_load(&h->ready_error) || atomic_load(&h->gone))
                return;
        /* Strict mode on the v1 freezer: a group of its own. */
        if (ctx->waiting == PACE_WAITING_FREEZE && ctx->freezer && !h->freezer) {
                bool thread = h->scope == PACE_TABLE_SCOPE_THREAD;
                r = freezer_v1_enter(ctx->freezer, h->id, h->procfd, thread ? h->tid : h->pid, thread, &h->freezer);
                if (r < 0) {
                        if (r == -ESRCH)
                                atomic_store(&h->gone, true);
                        else
                                atomic_store(&h->ready_error, r);
                        return;
                }
        }
        /* After the first threads are registered: their original affinity
         * is recorded before a cpuset narrows it. */
        held_group_enter(h, ctx);
        if (h->scope == PACE_TABLE_SCOPE_TREE && !h->group && !h->tree && ctx->trees &&
            tree_watch_acquire(ctx->trees, h->id, h->pid, h->pidfd, &h->tree) >= 0)
                housekeeping_wanted(ctx);
        /* Delegated: the manager moves the members into their scope and we
         * into its subgroup; before Linux 6.2 each move into a cgroup with
         * a cpuset of its own resets their affinity to that cpuset's, which
         * held_demote() would take for a member that left its CPU. So not
         * promoted until they are in place. */
        if (h->group && group_settling(h->group))
                return;
        bool grouped = h->group && group_entered(h->group);
        /* Strict mode without the v1 freezer: the group freezes itself. A
         * reservation it cannot freeze would run unfrozen, at its own
         * policy, between its slots: never promoted then. */
        if (ctx->waiting == PACE_WAITING_FREEZE && !ctx->freezer && h->freeze_fd < 0) {
                r = grouped ? group_freeze_fd(h->group) : -EOPNOTSUPP;
                if (r < 0) {
                        atomic_store(&h->ready_error, r);
                        return;
                }
                h->freeze_fd = r;
        }
        /* From now on its members wait between runs, and until their
         * first: at their own policy (which the registry gives a thread
         * born to a waiting creator back, nice 0) they took free time from
         * everyone until a run demoted them, and where no group weighs
         * members down that time counts against the budget, runs are
         * skipped and nothing demotes them (the soak test on the
         * unified-only view: a 51-thread client's late threads at nice 0,
         * the hog beside it at 2-17% where 25% was free; on v1, a new
         * 7-thread client left a hog 14.9% for a window). Before ready:
         * the loop promotes nothing yet. Not for a split reservation,
         * whose threads another piece's loop may hold. */
        atomic_store(&h->grouped, grouped);
        if (ctx->waiting == PACE_WAITING_NICE && !strchr(h->cpus, ',')) {
                PaceSchedAttr waiting;
                held_waiting_attr(h, ctx, &waiting);
                for (size_t i = 0; i < h->n_mine; i++)
                        if (!atomic_load(&h->mine[i]->dead) && held_entry_alive(h, h->mine[i]))
                                (void) sched_attr_set_waiting(h->mine[i]->tid, &waiting);
                atomic_store(&h->begun, true);
        }
        atomic_store(&h->confined, grouped && group_confined(h->group) && !strchr(h->cpus, ','));
        atomic_store(&h->ready, true);
}

void held_prepare(Held *h, const HeldContext *ctx) {
        if (!h->inert)
                (void) held_keep(h, ctx);
}

static size_t held_list(Held *h, const HeldContext *ctx);

void held_stand_down(Held *h, const HeldContext *ctx) {
        PaceSchedAttr a, waiting;

        if (h->stood_down)
                return;
        h->stood_down = true;
        held_waiting_attr(h, ctx, &waiting);
        for (size_t i = 0; i < h->n_mine; i++) {
                const RegistryEntry *e = h->mine[i];
                if (!atomic_load(&e->dead) && sched_attr_get(e->tid, &a) == 0 && sched_attr_is_realtime(&a) &&
                    held_entry_alive(h, e))
                        (void) sched_attr_set_waiting(e->tid, &waiting);
        }
}

size_t held_keep(Held *h, const HeldContext *ctx) {
        RegistryEntry *e;
        size_t n_new = 0;

        if (h->inert)
                return 0;
        /* What the loop let go: its thread exited (or was never ours). */
        bool churned = false;
        while ((e = spsc_pop(&h->dropped))) {
                held_mine_remove(h, e);
                thread_registry_release(ctx->registry, e, false);
                churned = true;
        }
        if (atomic_load(&h->gone) || pidfd_alive(h->pidfd) < 0) {
                atomic_store(&h->gone, true);
                /* A tree's members live on after its root: not one more
                 * run at our priority, whatever the loop is doing. */
                held_stand_down(h, ctx);
                /* Its cgroups go now rather than when the table drops it,
                 * if nobody lives on in them (a loop reading the group then
                 * fails and skips). */
                if (h->group && ctx->groups)
                        group_retire(ctx->groups, h->group);
                return 0;
        }
        /* Threads that exited: the loop drops them when it next moves the
         * reservation (their pidfds say so; where the kernel has no thread
         * pidfds, this mark does). */
        for (size_t i = 0; i < h->n_mine; i++)
                if (!atomic_load(&h->mine[i]->dead) && !held_entry_alive(h, h->mine[i]))
                        atomic_store(&h->mine[i]->dead, true);
        /* Listing costs the kernel a dentry per thread listed: a full
         * reservation (max_threads_per_reservation registered) whose last
         * look found nobody new is looked at again only after
         * KEEP_QUIET_NS, unless threads went meanwhile (their places may
         * be taken) or it is not settled yet; its newcomers could only be
         * parked. One with room is looked at every round (HOUSEKEEPING_NS),
         * so that a new thread is promoted within about a frame; that
         * costs at most max_threads_per_reservation dentries a round. A
         * listing that found members and could not take them (being
         * demoted by a dying predecessor's monitor, say) is not quiet
         * either. */
        uint64_t now = monotonic_ns();
        if (churned || now >= h->next_keep_ns || !atomic_load(&h->ready)) {
                size_t parked = h->n_parked;
                n_new = held_list(h, ctx);
                bool full = h->n_mine >= h->capacity;
                h->next_keep_ns = n_new > 0 || h->n_parked != parked || !full ? 0 : now + KEEP_QUIET_NS;
        }
        /* After the listing: a thread's original affinity is recorded
         * before a cpuset narrows it. */
        if (!atomic_load(&h->ready))
                held_settle(h, ctx);
        return n_new;
}

/* Registers what is new among the members, from wherever this
 * reservation's are listed. */
static size_t held_list(Held *h, const HeldContext *ctx) {
        size_t n_new = 0;

        h->threads_skipped = 0;
        if (h->scope == PACE_TABLE_SCOPE_THREAD) {
                if (h->n_mine > 0)
                        return 0;
                /* Taken once and let go: the one thread is gone, and its id
                 * may be anyone's next, so the reservation is over for us. */
                if (!h->thread_taken && held_take_thread(h, ctx, h->tid, h->pid) > 0) {
                        h->thread_taken = true;
                        return 1;
                }
                if (h->thread_taken || !held_tid_alive(h, h->tid, h->pid))
                        atomic_store(&h->gone, true);
                return 0;
        }
        if (held_grouped(h) && h->scope == PACE_TABLE_SCOPE_TREE)
                n_new += held_list_group(h, ctx);
        else {
                n_new += held_list_proc(h, ctx);
                if (h->tree)
                        n_new += held_list_tree(h, ctx);
        }
        return n_new;
}

Held *held_free(Held *h, const HeldContext *ctx) {
        RegistryEntry *e;

        if (!h)
                return NULL;
        while ((e = spsc_pop(&h->dropped))) {
                held_mine_remove(h, e);
                thread_registry_release(ctx->registry, e, false);
        }
        /* Out of its cpuset first: a restored affinity outside the cpuset
         * would be refused. */
        held_group_leave(h, ctx);
        for (size_t i = 0; i < h->n_mine; i++)
                thread_registry_release(ctx->registry, h->mine[i], held_entry_alive(h, h->mine[i]));
        h->n_mine = 0;
        held_unpark_all(h);
        free(h->parked);
        freezer_v1_leave(h->freezer);
        safe_close(h->pidfd);
        safe_close(h->procfd);
        safe_close(h->taskfd);
        spsc_done(&h->incoming);
        spsc_done(&h->dropped);
        free(h->mine);
        free(h->threads);
        free(h->pfds);
        free(h);
        return NULL;
}
