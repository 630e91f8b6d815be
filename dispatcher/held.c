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
#include "sched-util.h"
#include "proc-util.h"
#include "time-util.h"

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
        /* A tree's other process (not the one the table names): a pidfd of
         * it, so a pid that changes hands is never taken for it. -1 else. */
        int proc_pidfd;
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
        pi_mutex_init(&reg->lock);
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
                        safe_close(e->proc_pidfd);
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
static int registry_acquire(ThreadRegistry *reg, pid_t tid, pid_t tgid, const PaceSchedAttr *fallback,
                            uint32_t rt_ceiling, int cpu, int *proc_pidfd, RegistryEntry **ret) {
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
        e->proc_pidfd = -EBADF;
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
        /* A real-time policy its process could not have given itself came
         * from a dispatcher (a dead one's FIFO 98, lowered by the client to
         * FIFO 1 in its run): restoring it would keep it real-time for good. */
        if (!sched_attr_owner_could_set(&e->orig, rt_ceiling))
                e->orig = (PaceSchedAttr) { .sched_policy = SCHED_OTHER };
        /* Reset-on-fork from the first touch on, and in every policy set
         * while the thread is held (its owner cannot clear the flag
         * without CAP_SYS_NICE). A clone() copies the flag as it begins
         * but the priority as the child is set up: one under way when the
         * thread is first promoted copied it without the flag, and its
         * child is in the real-time class with SCHED_OTHER as its policy
         * (sched_stat_class_leaked()), which the main thread's look puts
         * back (sweep_reclass_table()). */
        PaceSchedAttr flagged = e->orig;
        flagged.sched_flags |= PACE_SCHED_FLAG_RESET_ON_FORK;
        r = sched_attr_set(tid, &flagged);
        if (r < 0) {
                free(e);
                e = NULL;
                goto done;
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
        if (proc_pidfd) {
                e->proc_pidfd = *proc_pidfd;
                *proc_pidfd = -EBADF;
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
        safe_close(e->proc_pidfd);
        free(e);
}

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

int held_new(const PaceTableReservation *res, bool allow_root, Held **ret) {
        _cleanup_close_ int pidfd = -EBADF, procfd = -EBADF, taskfd = -EBADF, listfd = -EBADF;
        char path[64], stat[1024], status[4096], limits[2048];
        uint64_t start_time;
        unsigned long flags;
        uint32_t ceiling;
        ProcOwner owner;
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
        /* A second one for liveness listings: the scan for new threads
         * keeps its place in taskfd between promotions. */
        listfd = openat(procfd, "task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (listfd < 0)
                return -ESRCH;
        /* Alive after /proc/PID was read: the directory is the pidfd's
         * process, not a successor that inherited the number. */
        r = pidfd_alive(pidfd);
        if (r < 0)
                return r;
        if (flags & PF_KTHREAD)
                return -EPERM;
        if (start_time != res->start_time)
                return -ESTALE;
        /* The owner is the kernel's word, not the table's: the broker's
         * user could name anyone. The table's uid is who asked; only root
         * may ask for another user's process. */
        if (proc_status_owner(status, &owner) < 0 || proc_rt_priority_ceiling(status, limits, &ceiling) < 0)
                return -EBADMSG;
        if (res->uid != 0 && !proc_owner_is(&owner, res->uid))
                return -EACCES;
        if (proc_owner_has_root(&owner) && !allow_root)
                return -EDQUOT;

        /* A thread of this very process: its entry under the pinned
         * /proc/PID directory. */
        if (res->scope == PACE_TABLE_SCOPE_THREAD) {
                char task[32];
                snprintf(task, sizeof(task), "%" PRIi32, res->tid);
                if (res->tid <= 0 || faccessat(taskfd, task, F_OK, 0) < 0)
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
        h->rt_ceiling = ceiling;
        h->uid = owner.uids[0];
        snprintf(h->cpus, sizeof(h->cpus), "%" PRIi32, res->cpu);
        h->pidfd = TAKE_FD(pidfd);
        h->procfd = TAKE_FD(procfd);
        h->taskfd = TAKE_FD(taskfd);
        h->listfd = TAKE_FD(listfd);
        h->freeze_fd = -EBADF;
        h->stat_fd = -EBADF;
        *ret = h;
        return 0;
}

/* Whether tid is still the thread we took: a thread of the very process
 * (the held task directory goes stale when the process exits, and lists
 * only its own threads), or for a tree's other processes, of its own
 * process. A thread id outlives its thread: another user's new process can
 * receive it, and must never be touched on the dead thread's account. */
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

static bool held_thread_alive(const Held *h, const RegistryEntry *e) {
        if (e->tgid != h->pid && e->proc_pidfd >= 0 && pidfd_alive(e->proc_pidfd) < 0)
                return false;
        return held_tid_alive(h, e->tid, e->tgid);
}

static void held_forget_threads(Held *h, const HeldContext *ctx, bool restore) {
        for (size_t i = 0; i < h->n_threads; i++) {
                RegistryEntry *e = h->threads[i].entry;
                registry_release(ctx->registry, e, restore && held_thread_alive(h, e));
        }
        h->n_threads = 0;
}

static void held_drop_thread(Held *h, const HeldContext *ctx, size_t i) {
        registry_release(ctx->registry, h->threads[i].entry, false);
        h->threads[i] = h->threads[--h->n_threads];
}

struct linux_dirent64 {
        uint64_t d_ino;
        int64_t d_off;
        unsigned short d_reclen;
        unsigned char d_type;
        char d_name[];
};

/* From this many held threads on, their liveness comes from one listing
 * of the process's task directory instead of a lookup each (1.4 us a
 * lookup here; a listing of up to LIVE_LIST_BYTES about 2 us). */
#define LIVE_LIST_MIN_THREADS 3u
/* One getdents64 of this much holds about 170 thread ids: a process with
 * more is checked thread by thread, so the listing never grows with it. */
#define LIVE_LIST_BYTES 4096
/* Slots of the set the listing goes into: a power of two, over twice the
 * ids one listing can hold. */
#define LIVE_SET_SLOTS 512u
/* The longest record a thread id's entry can take (a 10-digit name). */
#define LIVE_LIST_MAX_RECLEN 32
/* How long a process found too large for one listing is checked thread
 * by thread before a listing is tried again. */
#define LIVE_LIST_RETRY_NS NSEC_PER_SEC

/* Every thread id of the held process, into set (LIVE_SET_SLOTS, open
 * addressing, 0 = empty), from one read of its task directory. -E2BIG if
 * one read could not hold them all. */
static int held_live_set(Held *h, pid_t *set) {
        char buf[LIVE_LIST_BYTES] __attribute__((aligned(8)));

        if (h->listfd < 0)
                return -EBADF;
        if (lseek(h->listfd, 0, SEEK_SET) < 0)
                return negative_errno();
        long n = syscall(SYS_getdents64, h->listfd, buf, sizeof(buf));
        if (n < 0)
                return negative_errno();
        /* The kernel stops filling only when the next entry does not fit:
         * with room for one more left, it listed them all. */
        if ((size_t) n > sizeof(buf) - LIVE_LIST_MAX_RECLEN)
                return -E2BIG;
        memset(set, 0, LIVE_SET_SLOTS * sizeof(pid_t));
        for (long off = 0; off < n;) {
                struct linux_dirent64 *de = (struct linux_dirent64 *) (buf + off);
                char *end;

                off += de->d_reclen;
                if (de->d_name[0] < '0' || de->d_name[0] > '9')
                        continue;
                long tid = strtol(de->d_name, &end, 10);
                if (*end != '\0' || tid <= 0 || tid > INT32_MAX)
                        continue;
                for (unsigned b = (unsigned) tid;; b++)
                        if (set[b % LIVE_SET_SLOTS] == 0) {
                                set[b % LIVE_SET_SLOTS] = (pid_t) tid;
                                break;
                        }
        }
        return 0;
}

static bool live_set_has(const pid_t *set, pid_t tid) {
        for (unsigned b = (unsigned) tid;; b++) {
                pid_t v = set[b % LIVE_SET_SLOTS];
                if (v == tid)
                        return true;
                if (v == 0)
                        return false;
        }
}

/* Drops the threads that are gone, before anything is done to their ids.
 * The held process's own threads are looked up in one listing of its task
 * directory when there are several; a tree's other processes' threads, or
 * a process too large for one listing, one by one. A listing is as good as
 * the lookup: it comes from the same pinned directory, which lists this
 * process's live threads and nobody else's. */
static void held_drop_dead(Held *h, const HeldContext *ctx) {
        pid_t set[LIVE_SET_SLOTS];
        bool listed = false;
        uint64_t now;

        if (h->n_threads >= LIVE_LIST_MIN_THREADS && (now = monotonic_ns()) >= h->next_live_list_ns) {
                int r = held_live_set(h, set);
                listed = r >= 0;
                /* A listing that overflows still cost the kernel a dentry
                 * lookup per entry (about 170): a process that large is
                 * checked thread by thread until it may have shrunk. */
                if (r == -E2BIG)
                        h->next_live_list_ns = now + LIVE_LIST_RETRY_NS;
        }

        for (size_t i = h->n_threads; i-- > 0;) {
                const RegistryEntry *e = h->threads[i].entry;
                bool alive = listed && e->tgid == h->pid ? live_set_has(set, e->tid) : held_thread_alive(h, e);
                if (!alive) {
                        held_drop_thread(h, ctx, i);
                        /* Threads come and go: look for newcomers at once. */
                        h->next_task_scan_ns = 0;
                }
        }
}

/* Strict mode on the v1 freezer: a group of its own, made at the first
 * promotion (freezer-v1.h). */
static int held_freezer_enter(Held *h, const HeldContext *ctx) {
        bool thread = h->scope == PACE_TABLE_SCOPE_THREAD;

        if (h->freezer)
                return 0;
        return freezer_v1_enter(ctx->freezer, h->id, h->procfd, thread ? h->tid : h->pid, thread, &h->freezer);
}

/* Frozen or thawed: the v1 freezer group, or the unified hierarchy's
 * cgroup.freeze. */
static void held_freeze(Held *h, bool frozen) {
        if (h->freezer)
                (void) freezer_v1_freeze(h->freezer, frozen);
        else if (h->freeze_fd >= 0)
                (void) !pwrite(h->freeze_fd, frozen ? "1" : "0", 1, 0);
}

static int held_thread_find(const Held *h, pid_t tid) {
        for (size_t i = 0; i < h->n_threads; i++)
                if (h->threads[i].tid == tid)
                        return (int) i;
        return -1;
}

static void held_group_leave(Held *h, const HeldContext *ctx) {
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

static void housekeeping_wanted(const HeldContext *ctx) {
        if (ctx->housekeeping_fd >= 0) {
                uint64_t one = 1;
                (void) !write(ctx->housekeeping_fd, &one, sizeof(one));
        }
}

static void held_mark_gone(Held *h, const HeldContext *ctx) {
        held_group_leave(h, ctx);
        /* A tree's other processes may live on: theirs are restored (each
         * id checked); the gone process's own fail the check. */
        held_forget_threads(h, ctx, true);
        h->freezer = freezer_v1_leave(h->freezer);
        h->gone = true;
        h->running = false;
        h->pidfd = safe_close(h->pidfd);
        h->procfd = safe_close(h->procfd);
        h->taskfd = safe_close(h->taskfd);
        h->listfd = safe_close(h->listfd);
        h->stat_fd = safe_close(h->stat_fd);
}

/* Whether a cpuset holds the members to their CPUs; if not, affinity is
 * all there is, and it is checked around every run. */
bool held_confined(const Held *h) {
        /* One CPU only: a split reservation's cpuset holds all its pieces'
         * CPUs, and a member could run on two of them at once. */
        return h->group && group_confined(h->group) && !strchr(h->cpus, ',');
}

/* A group that holds the members now (a delegated one may still wait for
 * its scope). */
bool held_grouped(const Held *h) {
        return h->group && group_entered(h->group);
}

static bool affinity_is_only(pid_t tid, int cpu) {
        cpu_set_t set;
        if (sched_getaffinity(tid, sizeof(set), &set) < 0)
                return true; /* gone: nothing ran anywhere */
        return CPU_COUNT(&set) == 1 && CPU_ISSET(cpu, &set);
}

/* Promotes one held thread on this CPU. A piece of a split reservation on
 * this CPU first moves the thread here: pieces never coincide and a free
 * slot separates them, so the loop that had it has demoted it by now.
 * Unconfined, the thread may have moved itself while it waited: it is put
 * back before it gets our priority. */
static int held_move_thread(Held *h, const HeldContext *ctx, size_t i, const PaceSchedAttr *running) {
        RegistryEntry *entry = h->threads[i].entry;
        pid_t tid = h->threads[i].tid;

        if (entry->affinity_saved &&
            (atomic_load(&entry->pinned_cpu) != ctx->cpu || (!held_confined(h) && !affinity_is_only(tid, ctx->cpu)))) {
                cpu_set_t set;
                CPU_ZERO(&set);
                CPU_SET(ctx->cpu, &set);
                if (sched_setaffinity(tid, sizeof(set), &set) < 0)
                        return negative_errno();
                atomic_store(&entry->pinned_cpu, ctx->cpu);
        }
        return sched_attr_set(tid, running);
}

/* New threads registered per promotion: each costs a few system calls, and
 * a client that ends and creates threads every period must not make a
 * promotion cost more than admission charges for it. */
#define NEW_THREADS_PER_PROMOTION 4u
/* Directory entries read per promotion: two getdents64 calls of 4 KiB,
 * about 250 threads. A larger process is walked a slice at a time. */
#define TASK_SLICES_PER_PROMOTION 2
/* A tree's member list is a copy the main thread refreshes
 * (group_set_housekeep()); taking it more often gains nothing. */
#define GROUP_SCAN_INTERVAL_NS (20 * NSEC_PER_MSEC)
/* /proc/PID/task is read for new threads at every promotion while its
 * threads come and go (the last look found a newcomer, or a held thread
 * ended), and at most this often once a look found nobody new and nobody
 * left: a look costs 2-3 us, more than moving a thread, and at 1 ms slots
 * a promotion comes every few ms. A thread born to a quiet process waits
 * at most this long (plus the next promotion) at the policy it was born
 * with, which never gives it more than the grant; a client that keeps
 * making short-lived threads has them looked for every time. */
#define TASK_SCAN_INTERVAL_NS (10 * NSEC_PER_MSEC)

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

/* Takes one listed thread if it is new, within the promotion's budget. */
static int held_take_thread(Held *h, const HeldContext *ctx, pid_t tid, pid_t tgid, unsigned *budget,
                            uint32_t *skipped) {
        RegistryEntry *e;
        int r;

        if (held_thread_find(h, tid) >= 0)
                return 0;
        if (ctx->max_threads > 0 && h->n_threads >= ctx->max_threads) {
                (*skipped)++;
                return 0;
        }
        if (*budget == 0)
                return 0; /* found again at a later promotion */
        (*budget)--;
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
        if (h->n_threads == h->n_allocated) {
                size_t k = MAX(h->n_allocated * 2, (size_t) 8);
                HeldThread *t = realloc(h->threads, k * sizeof(*t));
                if (!t)
                        return -ENOMEM;
                h->threads = t;
                h->n_allocated = k;
        }
        const PaceSchedAttr *fallback = h->main_orig_set ? &h->main_orig : NULL;
        r = registry_acquire(ctx->registry, tid, tgid, fallback, h->rt_ceiling, ctx->cpu,
                             proc_pidfd >= 0 ? &proc_pidfd : NULL, &e);
        if (r < 0)
                return 0; /* exited since the listing */
        if (tid == h->pid && !h->main_orig_set) {
                h->main_orig = e->orig;
                h->main_orig_set = true;
        }
        h->threads[h->n_threads++] = (HeldThread) { .tid = tid, .entry = e };
        /* Listed a moment ago; still ours now that it is registered? */
        if (!held_thread_alive(h, e)) {
                held_drop_thread(h, ctx, h->n_threads - 1);
                return 0;
        }
        /* Born in the real-time class behind its policy's back (its parent
         * turned real-time as it was being made): put in its own class. */
        if (sched_thread_class_leaked(tgid, tid) > 0)
                (void) sched_attr_reclass(tid);
        return 0;
}

/* Moves every held thread to the running policy, starting one further
 * along each time. SCHED_FIFO queues each promoted thread behind the ones
 * promoted before it and never time-slices: in a fixed order the first
 * thread would run every slot and, if it never blocks, its siblings would
 * never run inside the reservation. */
static void held_move_rotated(Held *h, const HeldContext *ctx, const PaceSchedAttr *running) {
        size_t n = h->n_threads, start;

        if (n == 0)
                return;
        start = h->rotation++ % n;
        for (size_t k = 0; k < n; k++) {
                size_t i = (start + k) % n;
                if (held_move_thread(h, ctx, i, running) == -ESRCH)
                        h->threads[i].tid = 0;
        }
        for (size_t i = n; i-- > 0;)
                if (h->threads[i].tid == 0)
                        held_drop_thread(h, ctx, i);
}

/* New members from /proc/PID/task, a slice at a time: the directory
 * offset carries over between promotions, and the walk starts over once it
 * reaches the end. Nothing here grows with the process's thread count. */
static int held_scan_proc(Held *h, const HeldContext *ctx, unsigned *budget, uint32_t *skipped) {
        /* The first promotion finds the threads it moves; later ones look
         * for newcomers now and then. */
        if (h->n_threads > 0 && monotonic_ns() < h->next_task_scan_ns)
                return 0;
        unsigned budget_before = *budget;
        for (int slice = 0; slice < TASK_SLICES_PER_PROMOTION; slice++) {
                char buf[4096] __attribute__((aligned(8)));
                long n = syscall(SYS_getdents64, h->taskfd, buf, sizeof(buf));
                if (n < 0)
                        return -ESRCH;
                /* The kernel stops filling only when the next entry does
                 * not fit: with room for one more, the listing is done
                 * (one getdents64 fewer for most processes). */
                bool done = n == 0 || (size_t) n <= sizeof(buf) - LIVE_LIST_MAX_RECLEN;
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
                        int r = held_take_thread(h, ctx, (pid_t) tid, h->pid, budget, skipped);
                        if (r < 0)
                                return r;
                }
                if (done) {
                        (void) lseek(h->taskfd, 0, SEEK_SET);
                        break;
                }
        }
        h->next_task_scan_ns = *budget == budget_before ? monotonic_ns() + TASK_SCAN_INTERVAL_NS : 0;
        return 0;
}

/* A tree's members, from its group: whatever was born inside is listed
 * without walking /proc. At most every GROUP_SCAN_INTERVAL_NS. */
static int held_scan_group(Held *h, const HeldContext *ctx, unsigned *budget, uint32_t *skipped) {
        pid_t tids[256];
        size_t n;
        int r;

        uint64_t now = monotonic_ns();
        if (now < h->next_group_scan_ns)
                return 0;
        h->next_group_scan_ns = now + GROUP_SCAN_INTERVAL_NS;
        r = group_list_threads(h->group, tids, ELEMENTSOF(tids), &n);
        if (r < 0)
                return r;
        if (n > ELEMENTSOF(tids))
                *skipped += (uint32_t) (n - ELEMENTSOF(tids));
        for (size_t i = 0; i < MIN(n, ELEMENTSOF(tids)); i++) {
                if (tids[i] <= 1)
                        continue;
                r = held_take_thread(h, ctx, tids[i], -1, budget, skipped);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* A tree's descendants without a group: the main thread's last listing. */
static int held_scan_tree(Held *h, const HeldContext *ctx, unsigned *budget, uint32_t *skipped) {
        TreeMember m[TREE_WATCH_MAX_THREADS];

        uint64_t now = monotonic_ns();
        if (now < h->next_group_scan_ns)
                return 0;
        h->next_group_scan_ns = now + GROUP_SCAN_INTERVAL_NS;
        size_t n = tree_watch_members(h->tree, m, ELEMENTSOF(m));
        for (size_t i = 0; i < n; i++) {
                int r = held_take_thread(h, ctx, m[i].tid, m[i].tgid, budget, skipped);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* Without a group, a tree's descendants are watched from the main thread. */
static void held_tree_watch(Held *h, const HeldContext *ctx) {
        if (h->scope != PACE_TABLE_SCOPE_TREE || held_grouped(h) || h->tree || !ctx->trees)
                return;
        if (tree_watch_acquire(ctx->trees, h->id, h->pid, h->pidfd, &h->tree) >= 0)
                housekeeping_wanted(ctx);
}

/* At first promotion: the group of its own, members moved in (and confined
 * to the reservation's CPUs where the host has a cpuset). A failure leaves
 * the reservation on /proc scanning (logged once by the loop). */
static void held_group_enter(Held *h, const HeldContext *ctx) {
        int r;

        if (!ctx->groups || h->group || h->group_error)
                return;
        r = group_acquire(ctx->groups, h->id, &h->group);
        if (r >= 0)
                r = group_enter(ctx->groups, h->group, h->pid, h->tid, h->scope, h->cpus);
        if (r < 0) {
                held_group_leave(h, ctx);
                h->group_error = r;
                return;
        }
        /* The main thread keeps groups tidy from now on. */
        housekeeping_wanted(ctx);
}

/* Registers new members, from wherever this reservation's are listed. */
static int held_scan(Held *h, const HeldContext *ctx, unsigned *budget, uint32_t *skipped) {
        int r;

        if (ctx->max_threads > 0 && h->n_threads >= ctx->max_threads)
                return 0;
        if (h->scope == PACE_TABLE_SCOPE_THREAD)
                r = held_take_thread(h, ctx, h->tid, h->pid, budget, skipped);
        else if (held_grouped(h) && h->scope == PACE_TABLE_SCOPE_TREE)
                r = held_scan_group(h, ctx, budget, skipped);
        else {
                r = held_scan_proc(h, ctx, budget, skipped);
                if (r >= 0 && h->tree)
                        r = held_scan_tree(h, ctx, budget, skipped);
        }
        if (r == -ESRCH) {
                held_mark_gone(h, ctx);
                return r;
        }
        if (r < 0)
                return r;
        h->threads_skipped = *skipped;
        return 0;
}

int held_promote(Held *h, const HeldContext *ctx) {
        return held_promote_at(h, ctx, PACE_RUNNING_PRIORITY);
}

int held_promote_at(Held *h, const HeldContext *ctx, int priority) {
        PaceSchedAttr running;
        uint32_t skipped = 0;
        unsigned budget = NEW_THREADS_PER_PROMOTION;
        int r;

        if (h->gone)
                return -ESRCH;
        if (h->revoked)
                return -EPERM;
        if (pidfd_alive(h->pidfd) < 0) {
                held_mark_gone(h, ctx);
                return -ESRCH;
        }

        if (ctx->waiting == PACE_WAITING_FREEZE && ctx->freezer) {
                r = held_freezer_enter(h, ctx);
                if (r < 0)
                        return r;
        }
        held_drop_dead(h, ctx);

        /* Threads already held are moved first and the client runs; new
         * ones are looked for after that, so the look (/proc or a group's
         * list) never sits between the slot boundary and the client. Only
         * a reservation with no thread yet has to look first. */
        bool scan_first = h->n_threads == 0;
        if (scan_first) {
                r = held_scan(h, ctx, &budget, &skipped);
                if (r < 0)
                        return r;
        }
        /* After the first threads are registered: their original affinity
         * is recorded before a cpuset narrows it. */
        held_group_enter(h, ctx);
        held_tree_watch(h, ctx);
        /* Delegated: the manager moves the members into their scope and we
         * into its subgroup; before Linux 6.2 each move into a cgroup with
         * a cpuset of its own resets their affinity to that cpuset's, which
         * held_demote() would take for a member that left its CPU. So not
         * promoted until they are in place (or no scope can be had: then
         * through /proc). */
        if (h->group && group_settling(h->group))
                return -EAGAIN;
        /* Strict mode without the v1 freezer: the group freezes itself. A
         * reservation it cannot freeze would run unfrozen, at its own
         * policy, between its slots: never promoted then. */
        if (ctx->waiting == PACE_WAITING_FREEZE && !ctx->freezer && h->freeze_fd < 0) {
                r = h->group ? group_freeze_fd(h->group) : -EOPNOTSUPP;
                if (r < 0)
                        return r;
                h->freeze_fd = r;
        }
        /* The one thread of a thread-scope reservation is gone: its id may
         * be anyone's next, so the reservation is over for us. */
        if (h->scope == PACE_TABLE_SCOPE_THREAD && h->n_threads == 0 && budget > 0) {
                held_mark_gone(h, ctx);
                return -ESRCH;
        }

        sched_attr_running_at(priority, &running);
        held_move_rotated(h, ctx, &running);

        held_freeze(h, false);
        h->running = true;

        if (!scan_first) {
                size_t known = h->n_threads;
                r = held_scan(h, ctx, &budget, &skipped);
                if (r < 0)
                        return r;
                /* Newcomers join the running ones at once (in strict mode
                 * they are thawed already: the group is the whole process).
                 * Holding them back to the next promotion, so that a
                 * clone() under way could end first, cost a client whose
                 * threads live 3 ms a third of its grant; the main thread's
                 * look (sweep_reclass_table()) puts back what a clone()
                 * under way makes of it. */
                for (size_t i = h->n_threads; i-- > known;)
                        if (held_move_thread(h, ctx, i, &running) == -ESRCH)
                                held_drop_thread(h, ctx, i);
        }
        return 0;
}

int held_usage_ns(Held *h, const HeldContext *ctx, uint64_t *ret) {
        uint64_t sum = 0;

        if (held_grouped(h))
                return group_usage_ns(ctx->groups, h->group, ctx->cpu, ret);
        for (size_t i = 0; i < h->n_threads; i++) {
                char path[64], buf[128];
                const RegistryEntry *e = h->threads[i].entry;
                /* The thread's own figure: /proc/TID/... of a thread that
                 * is not the leader would describe its whole process. */
                snprintf(path, sizeof(path), "/proc/%" PRIi32 "/task/%" PRIi32 "/schedstat", e->tgid, e->tid);
                if (read_small_file_at(AT_FDCWD, path, buf, sizeof(buf)) == 0)
                        sum += strtoull(buf, NULL, 10);
        }
        *ret = sum;
        return 0;
}

bool held_budget_spent(Held *h, const HeldContext *ctx, uint64_t budget_ns, uint64_t run_ns) {
        uint64_t u;

        /* Only a whole reservation's group counts it cheaply (one read),
         * and only where nothing weighs its waiting members down; a split
         * reservation's group total is every piece's. */
        if (ctx->waiting != PACE_WAITING_NICE || !held_grouped(h) || group_weighed(h->group) ||
            strchr(h->cpus, ','))
                return false;
        if (group_usage_ns(ctx->groups, h->group, ctx->cpu, &u) < 0)
                return false;
        return acct_budget_spent(&h->acct, u, budget_ns, run_ns);
}

/* At most this many threads are looked at: it only tells a client that
 * blocked from one that wanted more, and runs at SCHED_FIFO 99. */
#define RUNNABLE_PROBES 4u

/* 1 if the thread whose /proc stat file fd is was runnable ("R"), 0 if
 * not, negative if it is gone. */
static int stat_fd_runnable(int fd) {
        char buf[512];
        ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
        if (n <= 0)
                return n < 0 ? negative_errno() : -ESRCH;
        buf[n] = '\0';
        /* "tid (comm) S ...": comm may hold spaces and parentheses. */
        const char *p = strrchr(buf, ')');
        return p && p[1] == ' ' && p[2] == 'R';
}

bool held_any_runnable(Held *h) {
        /* The thread found runnable last time first, through its stat file
         * kept open: a pread costs half of an open, read and close (4 us
         * against 8 here), and a reservation's runnable thread is most
         * often the same one period after period. The descriptor pins
         * the thread, not its id: once it exits, reads fail. */
        if (h->stat_fd >= 0) {
                int r = stat_fd_runnable(h->stat_fd);
                if (r > 0)
                        return true;
                if (r < 0)
                        h->stat_fd = safe_close(h->stat_fd);
        }
        for (size_t k = 0; k < MIN(h->n_threads, (size_t) RUNNABLE_PROBES); k++) {
                char path[64];
                const RegistryEntry *e = h->threads[(h->rotation + k) % h->n_threads].entry;
                if (h->stat_fd >= 0 && e->tid == h->stat_tid)
                        continue;
                snprintf(path, sizeof(path), "/proc/%" PRIi32 "/task/%" PRIi32 "/stat", e->tgid, e->tid);
                _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        continue;
                if (stat_fd_runnable(fd) > 0) {
                        safe_close(h->stat_fd);
                        h->stat_fd = TAKE_FD(fd);
                        h->stat_tid = e->tid;
                        return true;
                }
        }
        return false;
}

int held_demote(Held *h, const HeldContext *ctx) {
        PaceSchedAttr waiting;

        if (h->gone || !h->running)
                return 0;
        h->running = false;

        /* Ids first: a thread that ended in its run must not pass its id's
         * next owner our waiting policy. */
        held_drop_dead(h, ctx);

        if (ctx->waiting == PACE_WAITING_FREEZE && (h->freezer || h->freeze_fd >= 0)) {
                /* Frozen first, so nothing runs between losing FIFO and
                 * stopping; then its own policy back, so a frozen thread is
                 * never left real-time if we die. */
                held_freeze(h, true);
                for (size_t i = h->n_threads; i-- > 0;) {
                        /* With the flag it has had since its first touch. */
                        PaceSchedAttr own = h->threads[i].entry->orig;
                        own.sched_flags |= PACE_SCHED_FLAG_RESET_ON_FORK;
                        if (sched_attr_set(h->threads[i].tid, &own) == -ESRCH)
                                held_drop_thread(h, ctx, i);
                }
        } else {
                sched_attr_waiting_nice(&waiting);
                for (size_t i = h->n_threads; i-- > 0;)
                        if (sched_attr_set(h->threads[i].tid, &waiting) == -ESRCH)
                                held_drop_thread(h, ctx, i);
        }

        /* Unconfined, a member can move itself to another CPU while it
         * runs at our priority there; found at the end of its run, it has
         * done so, and the reservation is never promoted again. */
        if (!held_confined(h))
                for (size_t i = 0; i < h->n_threads; i++)
                        if (h->threads[i].entry->affinity_saved &&
                            atomic_load(&h->threads[i].entry->pinned_cpu) == ctx->cpu &&
                            !affinity_is_only(h->threads[i].tid, ctx->cpu)) {
                                h->revoked = true;
                                break;
                        }
        return 0;
}

bool held_thread_stays(Held *h, const HeldContext *ctx) {
        if (h->scope != PACE_TABLE_SCOPE_THREAD || strchr(h->cpus, ','))
                return false;
        for (size_t i = 0; i < h->n_threads; i++)
                if (!h->threads[i].entry->affinity_saved || !affinity_is_only(h->threads[i].tid, ctx->cpu)) {
                        /* Moved itself away, as at the end of a run. */
                        h->revoked = h->threads[i].entry->affinity_saved;
                        return false;
                }
        return true;
}

Held *held_free(Held *h, const HeldContext *ctx) {
        if (!h)
                return NULL;
        /* Out of its cpuset first: a restored affinity outside the cpuset
         * would be refused. */
        held_group_leave(h, ctx);
        held_forget_threads(h, ctx, true);
        freezer_v1_leave(h->freezer);
        safe_close(h->pidfd);
        safe_close(h->procfd);
        safe_close(h->taskfd);
        safe_close(h->listfd);
        safe_close(h->stat_fd);
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
        h->pidfd = h->procfd = h->taskfd = h->listfd = h->freeze_fd = h->stat_fd = -EBADF;
        h->gone = true;
        h->logged = true;
        *ret = h;
        return 0;
}
