/* SPDX-License-Identifier: MIT */
/* The thread registry: one entry per thread the dispatcher touched, across
 * reservations (one process may hold reservations on several CPUs), with
 * its original state and the handles the loops use; what is restored is
 * whatever the thread had before the first of them touched it. */
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

#ifndef PIDFD_THREAD
#define PIDFD_THREAD O_EXCL /* linux/pidfd.h, kernel 6.9 */
#endif
#define REGISTRY_BUCKETS 256u

struct ThreadRegistry {
        pthread_mutex_t lock;
        size_t size;
        RegistryEntry *buckets[REGISTRY_BUCKETS];
};
static void entry_close(RegistryEntry *e) {
        safe_close(e->proc_pidfd);
        safe_close(e->thread_pidfd);
        safe_close(e->schedstat_fd);
}

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
                        entry_close(e);
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
int thread_registry_acquire(ThreadRegistry *reg, pid_t tid, pid_t tgid, const PaceSchedAttr *fallback,
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
        e->proc_pidfd = e->thread_pidfd = e->schedstat_fd = -EBADF;
        r = sched_attr_get(tid, &e->orig);
        if (r < 0) {
                free(e);
                e = NULL;
                goto done;
        }
        /* With nothing better to go by, what only a dispatcher sets (FIFO
         * at our priorities; SCHED_IDLE with the flag, a waiting or parked
         * member a dead dispatcher left) becomes SCHED_OTHER: given back,
         * it would keep the thread real-time, or starved, for good. */
        if (sched_attr_is_ours(&e->orig)) {
                if (fallback)
                        e->orig = *fallback;
                else if (e->orig.sched_policy == SCHED_FIFO || sched_attr_is_parked(&e->orig))
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
        /* The loop's check that the id is still this thread, with no
         * lookup. None (older kernel, or out of descriptors): the main
         * thread's looks mark it instead. */
        e->thread_pidfd = (int) syscall(SYS_pidfd_open, tid, PIDFD_THREAD);
        if (e->thread_pidfd < 0)
                e->thread_pidfd = -EBADF;
        e->next = reg->buckets[b];
        reg->buckets[b] = e;
        reg->size++;
done:
        pthread_mutex_unlock(&reg->lock);
        if (r >= 0)
                *ret = e;
        return r;
}

void thread_registry_release(ThreadRegistry *reg, RegistryEntry *e, bool restore) {
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
        entry_close(e);
        free(e);
}
