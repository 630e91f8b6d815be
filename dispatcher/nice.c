/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "held.h"
#include "macro.h"
#include "nice.h"
#include "proc-util.h"
#include "sched-util.h"

#ifndef PF_KTHREAD
#define PF_KTHREAD 0x00200000
#endif

typedef struct Applied {
        pid_t pid;
        pid_t tid;
        uint64_t start_time;
        uint64_t thread_start_time;
        int32_t nice;
        PaceSchedAttr orig;
        int pidfd;
} Applied;

struct NiceSet {
        size_t n;
        Applied applied[PACE_MAX_NICE_THREADS];
};

int nice_set_new(NiceSet **ret) {
        NiceSet *s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        *ret = s;
        return 0;
}

size_t nice_set_size(const NiceSet *s) {
        return s ? s->n : 0;
}

/* Whether a's thread is still the one it changed and still as it left it:
 * only then is putting it back ours to do (a thread that has since set its
 * own policy, or been reserved, keeps what it has now). */
static bool still_ours(const Applied *a) {
        PaceSchedAttr now;
        uint64_t st;

        if (pidfd_alive(a->pidfd) < 0 || proc_thread_start_time("/proc", a->pid, a->tid, &st) < 0 ||
            st != a->thread_start_time || sched_attr_get(a->tid, &now) < 0)
                return false;
        return now.sched_policy == SCHED_OTHER && now.sched_nice == a->nice;
}

static void restore(Applied *a) {
        if (still_ours(a))
                (void) sched_attr_set(a->tid, &a->orig);
        safe_close(a->pidfd);
}

NiceSet *nice_set_free(NiceSet *s) {
        if (!s)
                return NULL;
        for (size_t i = 0; i < s->n; i++)
                restore(&s->applied[i]);
        free(s);
        return NULL;
}

static bool same_entry(const Applied *a, const PaceTableNice *n) {
        return a->pid == n->pid && a->tid == n->tid && a->start_time == n->start_time && a->nice == n->nice;
}

/* Checks n against the kernel and applies it into *ret. Returns 0; a
 * HeldRefusal where the table names a thread it must not renice; or a
 * negative errno where it could not tell or could not set it, with a
 * reason in why. */
static int apply_one(const PaceTableNice *n, bool allow_root, Applied *ret, char *why, size_t why_size) {
        _cleanup_close_ int pidfd = -EBADF;
        char path[64], stat[1024], status[4096];
        uint64_t start_time, thread_start_time;
        unsigned long flags;
        PaceSchedAttr orig, want;
        ProcOwner owner;
        int r;

        if (n->pid <= 1 || n->pid == getpid())
                return HELD_REFUSED_PROTECTED;
        r = pidfd_open_checked(n->pid, &pidfd);
        if (r >= 0) {
                snprintf(path, sizeof(path), "/proc/%" PRIi32 "/stat", n->pid);
                r = read_small_file(path, stat, sizeof(stat));
        }
        if (r >= 0)
                r = proc_stat_parse(stat, &start_time, &flags);
        if (r >= 0) {
                snprintf(path, sizeof(path), "/proc/%" PRIi32 "/status", n->pid);
                r = read_small_file(path, status, sizeof(status));
        }
        if (r >= 0)
                r = proc_thread_start_time("/proc", n->pid, n->tid, &thread_start_time);
        if (r >= 0)
                r = sched_attr_get(n->tid, &orig);
        /* Alive after all of it was read: it is all about the pidfd's
         * process, not a successor with the same number. */
        if (r >= 0)
                r = pidfd_alive(pidfd);
        if (r < 0)
                return snprintf(why, why_size, "thread %" PRIi32 " of pid %" PRIi32 " is gone", n->tid, n->pid), r;
        if (start_time != n->start_time)
                return HELD_REFUSED_STALE;
        if (flags & PF_KTHREAD)
                return HELD_REFUSED_PROTECTED;
        /* The kernel's word for the owner, as for a reservation. */
        if (proc_status_owner(status, &owner) < 0)
                return snprintf(why, why_size, "cannot read pid %" PRIi32 "'s owner", n->pid), -EBADMSG;
        if (n->uid != 0 && !proc_owner_is(&owner, n->uid))
                return HELD_REFUSED_OTHER_OWNER;
        if (proc_owner_has_root(&owner) && !allow_root)
                return HELD_REFUSED_ROOT;
        /* A real-time thread (one pace runs, or its own) keeps its policy. */
        if (sched_attr_is_realtime(&orig))
                return HELD_REFUSED_REALTIME;

        want = (PaceSchedAttr) {
                .size = sizeof(want),
                .sched_policy = SCHED_OTHER,
                .sched_flags = PACE_SCHED_FLAG_RESET_ON_FORK,
                .sched_nice = n->nice,
        };
        r = sched_attr_set(n->tid, &want);
        if (r < 0)
                return snprintf(why, why_size, "cannot set nice %" PRIi32 " on thread %" PRIi32 ": %s", n->nice,
                                n->tid, strerror(-r)), r;
        *ret = (Applied) {
                .pid = n->pid,
                .tid = n->tid,
                .start_time = n->start_time,
                .thread_start_time = thread_start_time,
                .nice = n->nice,
                .orig = orig,
                .pidfd = TAKE_FD(pidfd),
        };
        return 0;
}

size_t nice_set_apply(NiceSet *s, const PaceTableBuffer *t, bool allow_root, char *why, size_t why_size) {
        size_t changed = 0;

        if (why_size > 0)
                why[0] = '\0';
        /* Gone from the table, or changed: put back first. */
        for (size_t i = 0; i < s->n;) {
                bool kept = false;
                for (uint32_t j = 0; j < t->n_nice && j < PACE_MAX_NICE_THREADS && !kept; j++)
                        kept = same_entry(&s->applied[i], &t->nice[j]);
                if (kept) {
                        i++;
                        continue;
                }
                restore(&s->applied[i]);
                s->applied[i] = s->applied[--s->n];
                changed++;
        }
        for (uint32_t j = 0; j < t->n_nice && j < PACE_MAX_NICE_THREADS; j++) {
                bool have = false;
                for (size_t i = 0; i < s->n && !have; i++)
                        have = same_entry(&s->applied[i], &t->nice[j]);
                if (have || s->n >= PACE_MAX_NICE_THREADS)
                        continue;
                const PaceTableNice *n = &t->nice[j];
                int r = apply_one(n, allow_root, &s->applied[s->n], why, why_size);
                if (r > 0)
                        snprintf(why, why_size, "thread %" PRIi32 " of pid %" PRIi32 ": %s", n->tid, n->pid,
                                 held_refusal_to_string(r));
                if (r == 0) {
                        s->n++;
                        changed++;
                }
        }
        return changed;
}
