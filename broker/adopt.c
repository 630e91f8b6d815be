/* SPDX-License-Identifier: MIT */
/* A restarted broker keeps what its predecessor granted: the table it left
 * in the runtime directory, checked like any table (the configuration may
 * have changed since), and of it every reservation and nice level whose
 * process still lives (same pid, same start time), in exactly its slots.
 * Anything doubtful is dropped with a log line; only allocation failures
 * are errors. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "broker-internal.h"
#include "macro.h"
#include "proc-util.h"
#include "table-check.h"

/* The previous broker's table into *ret: 1 if there is one worth
 * adopting, 0 if there is none or it cannot be (said in the log). */
static int read_previous_table(Broker *b, int dir_fd, PaceTableBuffer *ret) {
        _cleanup_(table_reader_freep) TableReader *reader = NULL;
        char why[256];
        int r;

        r = table_reader_openat(dir_fd, PACE_TABLE_NAME, &reader);
        if (r == -ENOENT)
                return 0;
        if (r < 0) {
                broker_log(b, LOG_WARNING, "previous table not adopted: cannot map it: %s", strerror(-r));
                return 0;
        }
        r = table_reader_snapshot_retry(reader, ret, NULL);
        if (r == -ENODATA)
                return 0;
        if (r < 0) {
                broker_log(b, LOG_WARNING, "previous table not adopted: cannot read it: %s", strerror(-r));
                return 0;
        }
        /* Written by a broker of the same user, but checked like any table. */
        if (table_check(ret, &b->config, why, sizeof(why)) < 0) {
                broker_log(b, LOG_WARNING, "previous table not adopted: %s", why);
                return 0;
        }
        return 1;
}

/* Marks in keep[] the reservations whose process still lives, holding it
 * in pidfds[] by the first piece of each: the pieces of a split
 * reservation share their fate, and one pidfd. */
static void find_live(Broker *b, const PaceTableBuffer *old, bool *keep, int *pidfds) {
        for (uint32_t i = 0; i < old->n_reservations; i++) {
                const PaceTableReservation *res = &old->reservations[i];
                ProcInfo info;
                bool seen = false;

                keep[i] = false;
                pidfds[i] = -EBADF;
                for (uint32_t j = 0; j < i && !seen; j++)
                        if (old->reservations[j].id == res->id) {
                                keep[i] = keep[j];
                                seen = true;
                        }
                if (seen)
                        continue;
                if (pidfd_open_checked(res->pid, &pidfds[i]) < 0 ||
                    proc_info_read(b->proc_root, res->pid, &info) < 0 || pidfd_alive(pidfds[i]) < 0 ||
                    info.start_time != res->start_time) {
                        broker_log(b, LOG_INFO, "reservation %" PRIu64 " not adopted: process %" PRIi32 " is gone",
                                   res->id, res->pid);
                        pidfds[i] = safe_close(pidfds[i]);
                        continue;
                }
                keep[i] = true;
        }
}

/* The plan rebuilt from what is kept, and checked (in check) as the
 * dispatcher will check the table it makes: 0, or -EBADMSG with why, or a
 * negative errno. */
static int restore_plan(Broker *b, const PaceTableBuffer *old, const bool *keep, PaceTableBuffer *check, char *why,
                        size_t why_size) {
        int r;

        r = plan_restore(b->plan, old, keep);
        if (r < 0)
                return r;
        memset(check, 0, sizeof(*check));
        plan_export(b->plan, check);
        return table_check(check, &b->config, why, why_size) < 0 ? -EBADMSG : 0;
}

/* Takes the kept reservations over, each watched like a new grant; their
 * pidfds become the broker's. Returns how many. */
static size_t take_reservations(Broker *b, const PaceTableBuffer *old, const bool *keep, const int *pidfds) {
        size_t kept = 0;

        for (uint32_t i = 0; i < old->n_reservations; i++) {
                const PaceTableReservation *res = &old->reservations[i];
                if (!keep[i] || pidfds[i] < 0)
                        continue; /* gone, or a later piece of one adopted already */
                Reservation *nr = &b->reservations[b->n_reservations];
                *nr = (Reservation) {
                        .id = res->id,
                        .owner_uid = (uid_t) res->uid,
                        .pidfd = pidfds[i],
                        .tid = res->scope == PACE_TABLE_SCOPE_THREAD ? res->tid : 0,
                };
                if (b->hooks.watch_pidfd && b->hooks.watch_pidfd(b->hooks.userdata, nr->pidfd, nr->id, &nr->watch) < 0) {
                        /* Unwatched, it would never end: give it up now. */
                        (void) plan_remove(b->plan, nr->id);
                        safe_close(nr->pidfd);
                        continue;
                }
                add_reservation(b);
                kept++;
        }
        return kept;
}

/* A nice level whose process is gone is left out: the dispatcher puts its
 * thread back by itself. */
static void adopt_nice_levels(Broker *b, const PaceTableBuffer *old) {
        for (uint32_t i = 0; i < old->n_nice && b->n_nice < PACE_MAX_NICE_THREADS; i++) {
                const PaceTableNice *n = &old->nice[i];
                _cleanup_close_ int pidfd = -EBADF;
                ProcInfo info;

                if (pidfd_open_checked(n->pid, &pidfd) < 0 || proc_info_read(b->proc_root, n->pid, &info) < 0 ||
                    pidfd_alive(pidfd) < 0 || info.start_time != n->start_time)
                        continue;
                b->nice[b->n_nice++] = (NiceLevel) {
                        .pid = n->pid,
                        .tid = n->tid,
                        .start_time = n->start_time,
                        .uid = (uid_t) n->uid,
                        .nice = n->nice,
                        .pidfd = TAKE_FD(pidfd),
                };
        }
}

int adopt_previous_table(Broker *b, int dir_fd) {
        _cleanup_free_ PaceTableBuffer *old = malloc(sizeof(PaceTableBuffer));
        _cleanup_free_ PaceTableBuffer *check = malloc(sizeof(PaceTableBuffer));
        static bool keep[PACE_MAX_RESERVATIONS];
        static int pidfds[PACE_MAX_RESERVATIONS];
        char why[256];
        int r;

        if (!old || !check)
                return -ENOMEM;
        if (read_previous_table(b, dir_fd, old) == 0)
                return 0;
        find_live(b, old, keep, pidfds);
        b->next_id = MAX(b->next_id, old->next_id);
        for (uint32_t i = 0; i < old->n_reservations; i++)
                b->next_id = MAX(b->next_id, old->reservations[i].id + 1);

        r = restore_plan(b, old, keep, check, why, sizeof(why));
        if (r < 0) {
                for (uint32_t i = 0; i < old->n_reservations; i++)
                        safe_close(pidfds[i]);
                /* Out of memory is the one error: the broker does not start,
                 * and the table stays for the next one to adopt. */
                if (r == -ENOMEM)
                        return r;
                broker_log(b, LOG_WARNING, "previous table not adopted: %s", r == -EBADMSG ? why : strerror(-r));
                plan_free(b->plan);
                b->plan = NULL;
                return plan_new(&b->config, &b->plan);
        }
        size_t kept = take_reservations(b, old, keep, pidfds);
        broker_log(b, LOG_INFO, "adopted %zu reservation(s) from the previous table", kept);
        adopt_nice_levels(b, old);
        return 0;
}
