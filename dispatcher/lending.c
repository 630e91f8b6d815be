/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lending.h"
#include "macro.h"
#include "proc-util.h"

/* Owners boosted at once that are followed; one more is not charged (a
 * member can block on one lock at a time: this is one per thread of the
 * largest reservations, with room). */
#define LENDING_MAX 128
/* The longest line kept across reads. */
#define LENDING_LINE_MAX 512

typedef struct Lent {
        pid_t owner, raiser;
        uint64_t raised_ns, since_ns;
} Lent;

struct Lending {
        Lent lent[LENDING_MAX];
        size_t n;
        char partial[LENDING_LINE_MAX];
        size_t n_partial;
};

int lending_new(Lending **ret) {
        Lending *l = calloc(1, sizeof(*l));
        if (!l)
                return -ENOMEM;
        *ret = l;
        return 0;
}

Lending *lending_free(Lending *l) {
        free(l);
        return NULL;
}

size_t lending_active(const Lending *l) {
        return l->n;
}

static Lent *find(Lending *l, pid_t owner) {
        for (size_t i = 0; i < l->n; i++)
                if (l->lent[i].owner == owner)
                        return &l->lent[i];
        return NULL;
}

static void charge_until(Lent *e, uint64_t t, LendingCharge charge, void *userdata) {
        if (t > e->since_ns) {
                charge(userdata, e->raiser, e->raised_ns, e->owner, t - e->since_ns);
                e->since_ns = t;
        }
}

static void drop(Lending *l, Lent *e) {
        *e = l->lent[--l->n];
}

/* The header every line of an event has:
 *   "  comm-PID  [001] d..3. 35018.652586: "
 * Task names may hold spaces, dashes and brackets: each field is found
 * from the one text around it that a name cannot end. ev: where ": NAME"
 * begins. */
static int parse_header(const char *line, const char *ev, pid_t *ret_pid, uint64_t *ret_ns) {
        /* The time stamp ends right before the event's name. */
        const char *ts = ev;
        while (ts > line && ts[-1] != ' ')
                ts--;
        unsigned long long sec, usec;
        /* CLOCK_MONOTONIC seconds: anything past a century is not ours. */
        if (sscanf(ts, "%llu.%llu:", &sec, &usec) != 2 || sec > 4000000000ULL || usec >= 1000000)
                return -EBADMSG;
        /* The CPU column, "[001]", is the last '[' before it. */
        const char *cpu = ts;
        while (cpu > line && *cpu != '[')
                cpu--;
        const char *p = cpu;
        while (p > line && p[-1] == ' ')
                p--;
        const char *digits = p;
        while (digits > line && digits[-1] >= '0' && digits[-1] <= '9')
                digits--;
        if (digits == p || digits == line || digits[-1] != '-')
                return -EBADMSG;
        *ret_pid = (pid_t) strtol(digits, NULL, 10);
        *ret_ns = sec * 1000000000ULL + usec * 1000ULL;
        return 0;
}

static void event(Lending *l, const char *line, LendingCharge charge, void *userdata) {
        const char *ev;
        pid_t raiser;
        uint64_t t;

        /* "sched_pi_setprio: comm=x pid=O oldprio=120 newprio=1" */
        ev = strstr(line, ": sched_pi_setprio: ");
        if (!ev || parse_header(line, ev, &raiser, &t) < 0)
                return;
        /* The boosted task: the last " pid=" (the name before it is free text). */
        const char *owner_at = NULL;
        for (const char *q = ev; (q = strstr(q, " pid=")); q++)
                owner_at = q;
        int owner, old_prio, new_prio;
        if (!owner_at || sscanf(owner_at, " pid=%d oldprio=%d newprio=%d", &owner, &old_prio, &new_prio) != 3)
                return;
        Lent *e = find(l, owner);
        if (new_prio <= LENDING_PACE_PRIO_MAX) {
                /* Raised to one of ours, or moved between them (a chain
                 * walked again by whoever changed a waiter): the first
                 * lender stays the one charged. */
                if (!e && l->n < LENDING_MAX)
                        l->lent[l->n++] = (Lent) { .owner = owner, .raiser = raiser, .raised_ns = t,
                                                   .since_ns = t };
        } else if (e) {
                charge_until(e, t, charge, userdata);
                drop(l, e);
        }
}

void lending_feed(Lending *l, const char *text, size_t len, LendingCharge charge, void *userdata) {
        for (size_t i = 0; i < len; i++) {
                if (text[i] != '\n') {
                        /* Past the longest event: what it is does not matter. */
                        if (l->n_partial < sizeof(l->partial) - 1)
                                l->partial[l->n_partial++] = text[i];
                        continue;
                }
                l->partial[l->n_partial] = '\0';
                event(l, l->partial, charge, userdata);
                l->n_partial = 0;
        }
}

void lending_charge_ongoing(Lending *l, uint64_t now_ns, LendingCharge charge, LendingStillBoosted still_boosted,
                            void *userdata) {
        for (size_t i = 0; i < l->n;) {
                Lent *e = &l->lent[i];
                charge_until(e, now_ns, charge, userdata);
                /* Its end lost (the buffer overran, or the owner died
                 * boosted): what runs at our priority is looked at. */
                if (still_boosted && !still_boosted(userdata, e->owner)) {
                        drop(l, e);
                        continue;
                }
                i++;
        }
}

static int write_at(const char *dir, const char *file, const char *text) {
        char path[PATH_MAX + 64];
        int n = snprintf(path, sizeof(path), "%s/%s", dir, file);
        if (n < 0 || (size_t) n >= sizeof(path))
                return -ENAMETOOLONG;
        return write_string_file(path, text);
}

void lending_trace_remove(const char *tracefs, const char *name) {
        char dir[PATH_MAX];
        snprintf(dir, sizeof(dir), "%s/instances/%s", tracefs, name);
        (void) write_at(dir, "events/sched/sched_pi_setprio/enable", "0");
        (void) rmdir(dir);
}

int lending_trace_open(const char *tracefs, const char *name, int *ret_fd) {
        char dir[PATH_MAX], instances[PATH_MAX - 128];
        struct stat st;
        int r;

        r = snprintf(instances, sizeof(instances), "%s/instances", tracefs);
        if (r < 0 || (size_t) r >= sizeof(instances) || strlen(name) > 100)
                return -ENAMETOOLONG;
        if (stat(instances, &st) < 0)
                return negative_errno();
        snprintf(dir, sizeof(dir), "%s/%s", instances, name);
        lending_trace_remove(tracefs, name);
        if (mkdir(dir, 0700) < 0)
                return negative_errno();
        /* The dispatcher's clock, a few pages per CPU (an event is 60
         * bytes of text; a lost end is caught by lending_charge_ongoing()),
         * and only boosts to or from our priorities. */
        r = write_at(dir, "trace_clock", "mono");
        if (r >= 0)
                r = write_at(dir, "buffer_size_kb", "64");
        if (r >= 0)
                r = write_at(dir, "events/sched/sched_pi_setprio/filter", "newprio <= 2 || oldprio <= 2");
        if (r >= 0)
                r = write_at(dir, "events/sched/sched_pi_setprio/enable", "1");

        int fd = -EBADF;
        if (r >= 0) {
                char pipe[PATH_MAX + 16];
                snprintf(pipe, sizeof(pipe), "%s/trace_pipe", dir);
                fd = open(pipe, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
                if (fd < 0)
                        r = negative_errno();
        }
        if (r < 0) {
                lending_trace_remove(tracefs, name);
                return r;
        }
        *ret_fd = fd;
        return 0;
}

bool lending_task_boosted(pid_t tid) {
        char path[64], buf[1024];
        long field[41] = {};

        snprintf(path, sizeof(path), "/proc/%" PRIi32 "/stat", tid);
        if (read_small_file(path, buf, sizeof(buf)) < 0)
                return false;
        const char *p = strrchr(buf, ')');
        for (unsigned k = 3; p && k <= 41; k++) {
                p = strchr(p + 1, ' ');
                if (p)
                        field[k - 1] = strtol(p + 1, NULL, 10);
        }
        long prio = field[17] + 100, rt_priority = field[39], policy = field[40];
        if (prio > LENDING_PACE_PRIO_MAX)
                return false;
        bool realtime = policy == SCHED_FIFO || policy == SCHED_RR;
        return !realtime || prio < 99 - rt_priority;
}

unsigned lending_trace_sweep(const char *tracefs) {
        char path[PATH_MAX];
        unsigned n = 0;

        snprintf(path, sizeof(path), "%s/instances", tracefs);
        DIR *d = opendir(path);
        for (struct dirent *de; d && (de = readdir(d));) {
                /* Exactly our names: an administrator's instances are theirs. */
                if (strlen(de->d_name) != 21 || strncmp(de->d_name, "pace.", 5) != 0 ||
                    strspn(de->d_name + 5, "0123456789abcdef") != 16)
                        continue;
                n += unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR) == 0;
        }
        if (d)
                closedir(d);
        return n;
}
