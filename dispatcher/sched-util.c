/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "macro.h"
#include "proc-util.h"
#include "sched-util.h"

int sched_attr_get(pid_t tid, PaceSchedAttr *ret) {
        PaceSchedAttr a = {};

        if (syscall(SYS_sched_getattr, tid, &a, (unsigned) sizeof(a), 0u) < 0)
                return negative_errno();
        *ret = a;
        return 0;
}

int sched_attr_set(pid_t tid, const PaceSchedAttr *attr) {
        PaceSchedAttr a = *attr;

        /* The kernel rejects unknown utilization clamps on kernels without
         * uclamp; we never change them, so never pass them. */
        a.size = (uint32_t) offsetof(PaceSchedAttr, sched_util_min);
        a.sched_flags &= PACE_SCHED_FLAG_RESET_ON_FORK;
        if (syscall(SYS_sched_setattr, tid, &a, 0u) < 0)
                return negative_errno();
        return 0;
}

void sched_attr_running_at(int priority, PaceSchedAttr *ret) {
        *ret = (PaceSchedAttr) {
                .sched_policy = SCHED_FIFO,
                .sched_priority = (uint32_t) priority,
                .sched_flags = PACE_SCHED_FLAG_RESET_ON_FORK,
        };
}

void sched_attr_running(PaceSchedAttr *ret) {
        sched_attr_running_at(PACE_RUNNING_PRIORITY, ret);
}

void sched_attr_waiting_nice(PaceSchedAttr *ret) {
        /* Reset-on-fork stays set: a child forked while waiting must not come
         * back real-time through some later inheritance path. */
        *ret = (PaceSchedAttr) {
                .sched_policy = SCHED_OTHER,
                .sched_nice = PACE_WAITING_NICE_VALUE,
                .sched_flags = PACE_SCHED_FLAG_RESET_ON_FORK,
        };
}

void sched_attr_parked(PaceSchedAttr *ret) {
        *ret = (PaceSchedAttr) {
                .sched_policy = SCHED_IDLE,
                .sched_flags = PACE_SCHED_FLAG_RESET_ON_FORK,
        };
}

void sched_attr_waiting_idle(PaceSchedAttr *ret) {
        /* The nice level weighs nothing at SCHED_IDLE, but is what a
         * member sees of being held (pace-run waits for nice 19 or
         * SCHED_FIFO before it starts its command), and the step before
         * (sched_attr_set_waiting()) leaves it there anyway. */
        sched_attr_parked(ret);
        ret->sched_nice = PACE_WAITING_NICE_VALUE;
}

int sched_attr_set_waiting(pid_t tid, const PaceSchedAttr *waiting) {
        if (waiting->sched_policy == SCHED_IDLE) {
                PaceSchedAttr nice;
                sched_attr_waiting_nice(&nice);
                int r = sched_attr_set(tid, &nice);
                if (r < 0)
                        return r;
        }
        return sched_attr_set(tid, waiting);
}

bool sched_attr_is_parked(const PaceSchedAttr *a) {
        return a->sched_policy == SCHED_IDLE && (a->sched_flags & PACE_SCHED_FLAG_RESET_ON_FORK);
}

bool sched_attr_is_ours(const PaceSchedAttr *a) {
        if (a->sched_policy == SCHED_FIFO &&
            (a->sched_priority == PACE_RUNNING_PRIORITY || a->sched_priority == PACE_SERVER_PRIORITY))
                return true;
        return (a->sched_policy == SCHED_OTHER && a->sched_nice == PACE_WAITING_NICE_VALUE) ||
               a->sched_policy == SCHED_IDLE;
}

bool sched_attr_is_realtime(const PaceSchedAttr *a) {
        return a->sched_policy == SCHED_FIFO || a->sched_policy == SCHED_RR || a->sched_policy == SCHED_DEADLINE;
}

bool sched_attr_owner_could_set(const PaceSchedAttr *a, uint32_t ceiling) {
        if (!sched_attr_is_realtime(a))
                return true;
        /* SCHED_DEADLINE needs CAP_SYS_NICE whatever the rlimit says. */
        if (a->sched_policy == SCHED_DEADLINE)
                return ceiling >= 99;
        return a->sched_priority <= ceiling;
}

/* In the real-time class (the kernel's priority for the thread says so)
 * under a policy that is not real-time; policy below 0: not read. */
static bool class_leaked(bool realtime_class, long policy) {
        return realtime_class && policy >= 0 && policy != SCHED_FIFO && policy != SCHED_RR &&
               policy != SCHED_DEADLINE;
}

bool sched_stat_class_leaked(const char *stat) {
        /* "tid (comm) state ...": comm may hold spaces and parentheses.
         * Field 18 is the priority as the kernel runs the thread (below 0:
         * the real-time class), field 41 the policy. */
        const char *p = strrchr(stat, ')');
        long priority = 0, policy = -1;

        for (unsigned field = 2; p && field < 41;) {
                p = strchr(p + 1, ' ');
                if (!p)
                        return false;
                field++;
                if (field == 18)
                        priority = strtol(p + 1, NULL, 10);
                else if (field == 41)
                        policy = strtol(p + 1, NULL, 10);
        }
        return class_leaked(priority < 0, policy);
}

/* The number after "key" and its colon on the last line of a /proc sched
 * file that starts with key: the thread's name, on the first line, may
 * hold anything, lines like these included. */
static int sched_text_field(const char *text, const char *key, long *ret) {
        size_t n = strlen(key);
        const char *found = NULL;
        char *end;

        for (const char *p = strchr(text, '\n'); p; p = strchr(p + 1, '\n'))
                if (strncmp(p + 1, key, n) == 0 && (p[1 + n] == ' ' || p[1 + n] == ':'))
                        found = p + 1 + n;
        if (!found)
                return -EBADMSG;
        found += strspn(found, " ");
        if (*found != ':')
                return -EBADMSG;
        errno = 0;
        long v = strtol(found + 1, &end, 10);
        if (errno != 0 || end == found + 1)
                return -EBADMSG;
        *ret = v;
        return 0;
}

bool sched_sched_class_leaked(const char *text) {
        long prio, policy;

        /* prio as the kernel runs the thread: below 100 the real-time
         * class (-1 for SCHED_DEADLINE). */
        if (sched_text_field(text, "prio", &prio) < 0 || sched_text_field(text, "policy", &policy) < 0)
                return false;
        return class_leaked(prio < 100, policy);
}

int sched_thread_class_leaked(pid_t tgid, pid_t tid) {
        char path[64], stat[1024], text[4096];
        int r;

        /* The sched file, not stat: reading stat waits for the thread's
         * exec_update_lock, which a thread holds through the middle of an
         * execve(). A newcomer weighed down in its waiting group on a busy
         * CPU was seen to hold it for 19 minutes (preempted mid-exec, and
         * starved there until it would be registered), and the main thread
         * that read its stat to register it waited all that time (the
         * eighth stop's 30-minute soak). The sched file takes no such
         * lock; stat only where a kernel has no sched file. */
        snprintf(path, sizeof(path), "/proc/%" PRIi32 "/task/%" PRIi32 "/sched", tgid, tid);
        r = read_small_file(path, text, sizeof(text));
        if (r == 0)
                return sched_sched_class_leaked(text);
        snprintf(path, sizeof(path), "/proc/%" PRIi32 "/task/%" PRIi32, tgid, tid);
        if (r != -ESRCH || access(path, F_OK) < 0)
                return r;
        snprintf(path, sizeof(path), "/proc/%" PRIi32 "/task/%" PRIi32 "/stat", tgid, tid);
        r = read_small_file(path, stat, sizeof(stat));
        if (r < 0)
                return r;
        return sched_stat_class_leaked(stat);
}

int sched_attr_reclass(pid_t tid) {
        PaceSchedAttr a, hop;
        int r;

        r = sched_attr_get(tid, &a);
        if (r < 0)
                return r;
        if (sched_attr_is_realtime(&a))
                return 0;
        hop = a;
        hop.sched_policy = a.sched_policy == SCHED_OTHER ? SCHED_BATCH : SCHED_OTHER;
        r = sched_attr_set(tid, &hop);
        if (r < 0)
                return r;
        return sched_attr_set(tid, &a);
}

void pi_mutex_init(pthread_mutex_t *m) {
        pthread_mutexattr_t a;

        pthread_mutexattr_init(&a);
        /* Cannot fail for a valid protocol on glibc with PI futexes. */
        (void) pthread_mutexattr_setprotocol(&a, PTHREAD_PRIO_INHERIT);
        pthread_mutex_init(m, &a);
        pthread_mutexattr_destroy(&a);
}
