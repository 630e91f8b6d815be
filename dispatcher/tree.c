/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "macro.h"
#include "sched-util.h"
#include "proc-util.h"
#include "tree.h"

/* Descendant processes visited per tree and round. */
#define TREE_WALK_MAX 1024

struct TreeWatch {
        TreeWatch *next;
        uint64_t id;
        pid_t pid;
        int pidfd;
        unsigned refs;
        pthread_mutex_t lock;
        TreeMember members[TREE_WATCH_MAX_THREADS];
        size_t n_members;
};

struct TreeSet {
        pthread_mutex_t lock;
        TreeWatch *watches;
};

int tree_set_new(TreeSet **ret) {
        TreeSet *s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        pi_mutex_init(&s->lock);
        *ret = s;
        return 0;
}

static void watch_free(TreeWatch *w) {
        safe_close(w->pidfd);
        pthread_mutex_destroy(&w->lock);
        free(w);
}

TreeSet *tree_set_free(TreeSet *s) {
        if (!s)
                return NULL;
        while (s->watches) {
                TreeWatch *w = s->watches;
                s->watches = w->next;
                watch_free(w);
        }
        pthread_mutex_destroy(&s->lock);
        free(s);
        return NULL;
}

int tree_watch_acquire(TreeSet *s, uint64_t id, pid_t pid, int pidfd, TreeWatch **ret) {
        TreeWatch *w;
        int r = 0;

        pthread_mutex_lock(&s->lock);
        for (w = s->watches; w; w = w->next)
                if (w->id == id && w->pid == pid) {
                        w->refs++;
                        goto done;
                }
        w = calloc(1, sizeof(*w));
        if (!w) {
                r = -ENOMEM;
                goto done;
        }
        w->pidfd = fcntl(pidfd, F_DUPFD_CLOEXEC, 3);
        if (w->pidfd < 0) {
                r = negative_errno();
                free(w);
                w = NULL;
                goto done;
        }
        w->id = id;
        w->pid = pid;
        w->refs = 1;
        pi_mutex_init(&w->lock);
        w->next = s->watches;
        s->watches = w;
done:
        pthread_mutex_unlock(&s->lock);
        if (r >= 0)
                *ret = w;
        return r;
}

void tree_watch_release(TreeSet *s, TreeWatch *w) {
        if (!w)
                return;
        pthread_mutex_lock(&s->lock);
        if (--w->refs > 0) {
                pthread_mutex_unlock(&s->lock);
                return;
        }
        for (TreeWatch **p = &s->watches; *p; p = &(*p)->next)
                if (*p == w) {
                        *p = w->next;
                        break;
                }
        pthread_mutex_unlock(&s->lock);
        watch_free(w);
}

size_t tree_watch_members(TreeWatch *w, TreeMember *ret, size_t max) {
        pthread_mutex_lock(&w->lock);
        size_t n = MIN(w->n_members, max);
        memcpy(ret, w->members, n * sizeof(*ret));
        pthread_mutex_unlock(&w->lock);
        return n;
}

/* The threads of every descendant of the watch's root. */
static void watch_refresh(TreeWatch *w) {
        static pid_t kids[TREE_WALK_MAX];
        TreeMember found[TREE_WATCH_MAX_THREADS];
        size_t n_kids = 0, n = 0;

        if (pidfd_alive(w->pidfd) < 0 || proc_list_descendants("/proc", w->pid, kids, ELEMENTSOF(kids), &n_kids) < 0)
                n_kids = 0;
        for (size_t k = 0; k < MIN(n_kids, ELEMENTSOF(kids)) && n < ELEMENTSOF(found); k++) {
                char path[64];
                snprintf(path, sizeof(path), "/proc/%" PRIi32 "/task", kids[k]);
                DIR *d = opendir(path);
                for (struct dirent *de; d && n < ELEMENTSOF(found) && (de = readdir(d));) {
                        char *end;
                        long tid = strtol(de->d_name, &end, 10);
                        if (*end == '\0' && tid > 1)
                                found[n++] = (TreeMember) { .tid = (pid_t) tid, .tgid = kids[k] };
                }
                if (d)
                        closedir(d);
        }
        pthread_mutex_lock(&w->lock);
        memcpy(w->members, found, n * sizeof(found[0]));
        w->n_members = n;
        pthread_mutex_unlock(&w->lock);
}

size_t tree_set_housekeep(TreeSet *s) {
        TreeWatch *held[1024];
        size_t n = 0;

        pthread_mutex_lock(&s->lock);
        for (TreeWatch *w = s->watches; w && n < ELEMENTSOF(held); w = w->next) {
                w->refs++;
                held[n++] = w;
        }
        pthread_mutex_unlock(&s->lock);
        for (size_t i = 0; i < n; i++) {
                watch_refresh(held[i]);
                tree_watch_release(s, held[i]);
        }
        return n;
}
