/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "explain.h"
#include "frame-math.h"
#include "macro.h"
#include "table-check.h"

/* The table is not one to enforce (a failure, -EBADMSG, unlike the broker's
 * positive refuse()), and why says what is wrong with it. */
#define table_bad(why, why_size, ...) (explain((why), (why_size), __VA_ARGS__), -EBADMSG)

/* Which piece of reservation `id` owns global slot g (every CPU's frame
 * starts at the same instant and repeats), or -1. *ret_count says how many
 * do: more than one is an overlap. */
static int piece_at(const PaceTableBuffer *t, const uint32_t *pieces, const uint32_t *first, const uint32_t *frame,
                    uint32_t n, uint64_t g, uint32_t *ret_count) {
        int who = -1;
        uint32_t count = 0;

        for (uint32_t k = 0; k < n; k++)
                if (t->slots[first[k] + g % frame[k]] == pieces[k] + 1) {
                        who = (int) k;
                        count++;
                }
        *ret_count = count;
        return who;
}

/* The pieces of the split reservation whose first entry is i, together:
 * never two at once, a free slot at every change of CPU (so a demotion on
 * one CPU cannot race the promotion on the next), and the whole budget in
 * every window of the period. Runs once per reservation, at its first
 * piece. */
static int check_split(const PaceTableBuffer *t, uint32_t i, uint32_t max_frame, char *why, size_t why_size) {
        const PaceTableReservation *res = &t->reservations[i];
        uint32_t pieces[PACE_MAX_CPUS], first[PACE_MAX_CPUS], frame[PACE_MAX_CPUS], n = 0, budget = 0;
        uint64_t span = 1;

        for (uint32_t j = 0; j < t->n_reservations; j++) {
                const PaceTableReservation *o = &t->reservations[j];
                if (o->id != res->id)
                        continue;
                if (j < i)
                        return 0; /* checked at the first piece */
                if (n >= PACE_MAX_CPUS)
                        return table_bad(why, why_size, "reservation %" PRIu64 ": too many pieces", res->id);
                for (uint32_t c = 0; c < t->n_cpus; c++)
                        if (t->cpus[c].cpu == o->cpu) {
                                first[n] = t->cpus[c].first_slot;
                                frame[n] = t->cpus[c].frame_slots;
                        }
                pieces[n++] = j;
                budget += o->budget_slots;
                /* Frames divide the longest frame, so the lcm does too. */
                span = lcm_u64(span, frame[n - 1]);
        }
        if (span > max_frame || budget > res->period_slots)
                return table_bad(why, why_size, "reservation %" PRIu64 ": pieces hold %" PRIu32 " slots of a %" PRIu32
                              "-slot period", res->id, budget, res->period_slots);

        uint32_t count, window = res->period_slots, held = 0, min = UINT32_MAX;
        int prev = -1;
        for (uint64_t g = 0; g < span + window; g++) {
                int who = piece_at(t, pieces, first, frame, n, g, &count);
                if (count > 1)
                        return table_bad(why, why_size, "reservation %" PRIu64 ": two pieces at slot %" PRIu64
                                      " at once", res->id, g % span);
                if (who >= 0 && prev >= 0 && who != prev)
                        return table_bad(why, why_size, "reservation %" PRIu64 ": changes CPU at slot %" PRIu64
                                      " without a free slot between", res->id, g % span);
                prev = who;
                /* Sliding window of `window` slots over the cyclic span. */
                held += who >= 0;
                if (g >= window) {
                        uint32_t c2;
                        held -= piece_at(t, pieces, first, frame, n, g - window, &c2) >= 0;
                }
                if (g + 1 >= window)
                        min = MIN(min, held);
        }
        if (min < budget)
                return table_bad(why, why_size, "reservation %" PRIu64 ": its pieces hold only %" PRIu32
                              " slots in some window of its period, granted %" PRIu32, res->id, min, budget);
        return 0;
}

static bool cpu_managed(const PaceConfig *config, int32_t cpu) {
        for (uint32_t i = 0; i < config->n_cpus; i++)
                if (config->cpus[i] == cpu)
                        return true;
        return false;
}

/* Sizes and the slot length: what every other check relies on to stay
 * inside *t. */
static int check_bounds(const PaceTableBuffer *t, const PaceConfig *config, char *why, size_t why_size) {
        if (t->slot_ns != config->slot_ns)
                return table_bad(why, why_size, "slot is %" PRIu64 " ns, configured %" PRIu64 " ns", t->slot_ns,
                              config->slot_ns);
        if (t->n_cpus > config->n_cpus || t->n_cpus > PACE_MAX_CPUS)
                return table_bad(why, why_size, "%" PRIu32 " CPUs, at most %" PRIu32 " are managed", t->n_cpus,
                              config->n_cpus);
        if (t->n_reservations > PACE_MAX_RESERVATIONS)
                return table_bad(why, why_size, "%" PRIu32 " reservations, limit %u", t->n_reservations,
                              PACE_MAX_RESERVATIONS);
        if (t->n_slots > PACE_TABLE_MAX_SLOTS)
                return table_bad(why, why_size, "%" PRIu32 " slots, limit %u", t->n_slots, PACE_TABLE_MAX_SLOTS);
        return 0;
}

/* Nice levels: within their limit, each a user process's thread named
 * once, none below the checker's own floor (a broker that asks for less
 * than the administrator allows is refused whole). */
static int check_nice_levels(const PaceTableBuffer *t, const PaceConfig *config, char *why, size_t why_size) {
        if (t->n_nice > PACE_MAX_NICE_THREADS)
                return table_bad(why, why_size, "%" PRIu32 " nice levels, limit %u", t->n_nice, PACE_MAX_NICE_THREADS);
        for (uint32_t i = 0; i < t->n_nice; i++) {
                const PaceTableNice *n = &t->nice[i];

                if (n->pid <= 1 || n->tid <= 0)
                        return table_bad(why, why_size, "nice level %" PRIu32 ": pid %" PRIi32 " tid %" PRIi32
                                      " is not a user process's thread", i, n->pid, n->tid);
                if (n->nice < config->rtkit_min_nice_level || n->nice > 19)
                        return table_bad(why, why_size, "nice level %" PRIu32 ": %" PRIi32 " is outside %" PRIi32
                                      "..19 (rtkit_min_nice_level)", i, n->nice, config->rtkit_min_nice_level);
                for (uint32_t j = 0; j < i; j++)
                        if (t->nice[j].tid == n->tid)
                                return table_bad(why, why_size, "nice level %" PRIu32 ": thread %" PRIi32
                                              " listed twice", i, n->tid);
        }
        return 0;
}

/* Every CPU managed, listed once, its frame dividing the longest one, the
 * frames back to back over exactly n_slots. */
static int check_cpus(const PaceTableBuffer *t, const PaceConfig *config, uint32_t max_frame, char *why,
                      size_t why_size) {
        uint32_t next_slot = 0;

        for (uint32_t c = 0; c < t->n_cpus; c++) {
                const PaceTableCpu *cpu = &t->cpus[c];

                if (!cpu_managed(config, cpu->cpu))
                        return table_bad(why, why_size, "CPU %" PRId32 " is not managed", cpu->cpu);
                for (uint32_t d = 0; d < c; d++)
                        if (t->cpus[d].cpu == cpu->cpu)
                                return table_bad(why, why_size, "CPU %" PRId32 " listed twice", cpu->cpu);
                if (cpu->frame_slots > max_frame || (cpu->frame_slots > 0 && max_frame % cpu->frame_slots != 0))
                        return table_bad(why, why_size, "CPU %" PRId32 ": frame of %" PRIu32
                                      " slots does not divide the longest frame (%" PRIu32 " slots)",
                                      cpu->cpu, cpu->frame_slots, max_frame);
                /* Frames are laid out back to back: no overlap, no hole to hide in. */
                if (cpu->first_slot != next_slot)
                        return table_bad(why, why_size, "CPU %" PRId32 ": frame starts at slot %" PRIu32
                                      ", expected %" PRIu32, cpu->cpu, cpu->first_slot, next_slot);
                next_slot += cpu->frame_slots;
                if (next_slot > t->n_slots)
                        return table_bad(why, why_size, "CPU %" PRId32 ": frame runs past the %" PRIu32 " slots",
                                      cpu->cpu, t->n_slots);
        }
        if (next_slot != t->n_slots)
                return table_bad(why, why_size, "%" PRIu32 " slots but the frames cover %" PRIu32, t->n_slots,
                              next_slot);
        return 0;
}

/* The index into t->cpus of the CPU reservation i runs on, or -1. */
static int32_t reservation_cpu_index(const PaceTableBuffer *t, uint32_t i) {
        int32_t found = -1;

        for (uint32_t c = 0; c < t->n_cpus; c++)
                if (t->cpus[c].cpu == t->reservations[i].cpu)
                        found = (int32_t) c;
        return found;
}

/* Reservation i on its own and against those before it: id, flags, kind,
 * pieces, scope, process, CPU, period and budget. */
static int check_reservation(const PaceTableBuffer *t, uint32_t i, const int32_t *res_cpu_index, char *why,
                             size_t why_size) {
        const PaceTableReservation *res = &t->reservations[i];

        if (res->id == 0)
                return table_bad(why, why_size, "reservation %" PRIu32 " has id 0", i);
        if (res->flags & ~(PACE_RES_PIECE | PACE_RES_SERVER | PACE_RES_ALIGNED | PACE_RES_ON_BEHALF))
                return table_bad(why, why_size, "reservation %" PRIu64 ": unknown flags %#" PRIx32, res->id,
                              res->flags);
        /* A server's budget is spent wherever it runs: pieces on
         * other CPUs could not know what is left. */
        if ((res->flags & PACE_RES_PIECE) && (res->flags & PACE_RES_SERVER))
                return table_bad(why, why_size, "reservation %" PRIu64 ": a budget server cannot be split "
                              "over CPUs", res->id);
        /* Aligned names a layout of the reservation's own slots: a
         * server's slots only back it, and pieces on several CPUs
         * cannot be one block. */
        if ((res->flags & PACE_RES_ALIGNED) && (res->flags & PACE_RES_SERVER))
                return table_bad(why, why_size, "reservation %" PRIu64 ": aligned and budget server at once; "
                              "a reservation is one kind", res->id);
        if ((res->flags & PACE_RES_ALIGNED) && (res->flags & PACE_RES_PIECE))
                return table_bad(why, why_size, "reservation %" PRIu64 ": an aligned reservation cannot be "
                              "split over CPUs", res->id);
        /* An id appears once, or once per CPU as the pieces of one
         * split reservation that agree on everything but CPU and
         * budget. */
        uint32_t siblings = 0;
        for (uint32_t j = 0; j < t->n_reservations; j++) {
                const PaceTableReservation *o = &t->reservations[j];
                if (j == i || o->id != res->id)
                        continue;
                if (!(res->flags & PACE_RES_PIECE) || !(o->flags & PACE_RES_PIECE))
                        return table_bad(why, why_size, "reservation id %" PRIu64 " used twice", res->id);
                if (o->pid != res->pid || o->start_time != res->start_time || o->uid != res->uid ||
                    o->scope != res->scope || o->tid != res->tid || o->period_slots != res->period_slots ||
                    o->cpu == res->cpu)
                        return table_bad(why, why_size, "pieces of reservation %" PRIu64
                                      " disagree on process, scope, owner or period, or share a CPU",
                                      res->id);
                siblings++;
        }
        if ((res->flags & PACE_RES_PIECE) && siblings == 0)
                return table_bad(why, why_size, "reservation %" PRIu64 " is a piece of nothing", res->id);
        if (res->scope > PACE_TABLE_SCOPE_TREE)
                return table_bad(why, why_size, "reservation %" PRIu64 ": unknown scope %" PRIu32, res->id,
                              res->scope);
        if ((res->scope == PACE_TABLE_SCOPE_THREAD) != (res->tid > 0))
                return table_bad(why, why_size, "reservation %" PRIu64 ": thread id %" PRIi32
                              " does not fit its scope %" PRIu32, res->id, res->tid, res->scope);
        /* pid 1 and the idle task are never ours to promote. */
        if (res->pid <= 1)
                return table_bad(why, why_size, "reservation %" PRIu64 ": pid %" PRId32 " is not allowed",
                              res->id, res->pid);
        if (res_cpu_index[i] < 0)
                return table_bad(why, why_size, "reservation %" PRIu64 ": CPU %" PRId32 " has no frame",
                              res->id, res->cpu);
        uint32_t frame = t->cpus[res_cpu_index[i]].frame_slots;
        if (res->period_slots == 0 || frame == 0 || frame % res->period_slots != 0)
                return table_bad(why, why_size, "reservation %" PRIu64 ": period of %" PRIu32
                              " slots does not divide its CPU's frame (%" PRIu32 ")",
                              res->id, res->period_slots, frame);
        if (res->budget_slots == 0 || res->budget_slots > res->period_slots)
                return table_bad(why, why_size, "reservation %" PRIu64 ": budget of %" PRIu32
                              " slots in a period of %" PRIu32, res->id, res->budget_slots,
                              res->period_slots);
        /* One reservation per process, or one per thread: two
         * CPU loops driving the same thread would undo each
         * other's promotions. */
        for (uint32_t j = 0; j < i; j++) {
                const PaceTableReservation *o = &t->reservations[j];
                if (o->pid != res->pid || o->id == res->id)
                        continue;
                if (o->scope == PACE_TABLE_SCOPE_THREAD && res->scope == PACE_TABLE_SCOPE_THREAD && o->tid != res->tid)
                        continue;
                return table_bad(why, why_size, "pid %" PRIi32 " holds reservations %" PRIu64 " and %" PRIu64,
                              res->pid, o->id, res->id);
        }
        return 0;
}

static int check_user_limits(const PaceTableBuffer *t, const PaceConfig *config, char *why, size_t why_size) {
        /* Per-user totals: the dispatcher enforces the limits too, so a broker
         * that lost its mind cannot hand one user the machine. */
        for (uint32_t i = 0; i < t->n_reservations; i++) {
                const PaceTableReservation *res = &t->reservations[i];
                uint64_t util = 0;
                uint32_t count = 0;

                if (res->uid == 0)
                        continue;
                FRAME_USER_TOTALS(t->reservations, t->n_reservations, res->uid, &count, &util);
                if (count > config->max_reservations_per_user)
                        return table_bad(why, why_size, "uid %" PRIu32 " holds %" PRIu32 " reservations, limit %" PRIu32,
                                      res->uid, count, config->max_reservations_per_user);
                /* The same floored sum the broker admits against: no slack. */
                if (util > config->max_utilization_per_user_ppm)
                        return table_bad(why, why_size, "uid %" PRIu32 " holds %" PRIu64 " ppm, limit %" PRIu32 " ppm",
                                      res->uid, util, config->max_utilization_per_user_ppm);
        }
        return 0;
}

/* CPU c's frame: every owner exists and lives on this CPU (counted into
 * held[]), the free share after dispatch costs, and the longest busy run. */
static int check_frame(const PaceTableBuffer *t, uint32_t c, const PaceConfig *config, uint32_t max_gap,
                       const int32_t *res_cpu_index, uint32_t *held, char *why, size_t why_size) {
        const PaceTableCpu *cpu = &t->cpus[c];
        const uint16_t *slots = &t->slots[cpu->first_slot];
        uint32_t free_slots = 0, server_switches = 0;

        if (cpu->frame_slots == 0)
                return 0;
        for (uint32_t i = 0; i < t->n_reservations; i++)
                if (res_cpu_index[i] == (int32_t) c && (t->reservations[i].flags & PACE_RES_SERVER))
                        server_switches += frame_server_switches(t->reservations[i].period_slots,
                                                                 cpu->frame_slots, config);
        for (uint32_t s = 0; s < cpu->frame_slots; s++) {
                uint16_t owner = slots[s];
                if (owner == PACE_SLOT_FREE) {
                        free_slots++;
                        continue;
                }
                if (owner > t->n_reservations)
                        return table_bad(why, why_size, "CPU %" PRId32 " slot %" PRIu32 ": owner %u does not exist",
                                      cpu->cpu, s, owner);
                if (res_cpu_index[owner - 1] != (int32_t) c)
                        return table_bad(why, why_size, "CPU %" PRId32 " slot %" PRIu32
                                      ": reservation %" PRIu64 " belongs to CPU %" PRId32,
                                      cpu->cpu, s, t->reservations[owner - 1].id,
                                      t->reservations[owner - 1].cpu);
                held[owner - 1]++;
        }

        if (!frame_free_share_ok(free_slots, frame_switches(slots, cpu->frame_slots) + server_switches,
                                 cpu->frame_slots, config))
                return table_bad(why, why_size, "CPU %" PRId32 ": %" PRIu32 " of %" PRIu32
                              " slots free, below the non-real-time share of %" PRIu32 " ppm"
                              " after dispatch costs",
                              cpu->cpu, free_slots, cpu->frame_slots, config->non_rt_share_ppm);
        uint32_t run = frame_max_busy_run(slots, cpu->frame_slots);
        if (run > max_gap)
                return table_bad(why, why_size, "CPU %" PRId32 ": %" PRIu32
                              " consecutive reserved slots, non-real-time work may wait at most %" PRIu32,
                              cpu->cpu, run, max_gap);
        return 0;
}

/* Every reservation holds exactly its grant, in every window of its period. */
static int check_grants(const PaceTableBuffer *t, uint32_t max_frame, const int32_t *res_cpu_index,
                        const uint32_t *held, char *why, size_t why_size) {
        for (uint32_t i = 0; i < t->n_reservations; i++) {
                const PaceTableReservation *res = &t->reservations[i];
                const PaceTableCpu *cpu = &t->cpus[res_cpu_index[i]];
                uint32_t expected = res->budget_slots * (cpu->frame_slots / res->period_slots);

                /* Exactly the grant: more would be CPU time nobody admitted. */
                if (held[i] != expected)
                        return table_bad(why, why_size, "reservation %" PRIu64 " holds %" PRIu32
                                      " slots per frame, granted %" PRIu32, res->id, held[i], expected);
                if (res->flags & PACE_RES_PIECE) {
                        int r = check_split(t, i, max_frame, why, why_size);
                        if (r < 0)
                                return r;
                        continue;
                }
                uint32_t min = frame_min_supply(&t->slots[cpu->first_slot], cpu->frame_slots, (uint16_t) (i + 1),
                                                res->period_slots);
                if (min < res->budget_slots)
                        return table_bad(why, why_size, "reservation %" PRIu64 ": only %" PRIu32
                                      " slots in some window of its period, granted %" PRIu32,
                                      res->id, min, res->budget_slots);
        }
        return 0;
}

int table_check(const PaceTableBuffer *t, const PaceConfig *config, char *why, size_t why_size) {
        uint32_t max_frame = pace_config_frame_slots(config);
        uint32_t max_gap = (uint32_t) (config->non_rt_max_gap_ns / config->slot_ns);
        /* Per-reservation slot counts and CPUs; static size, no allocation
         * on the dispatcher's path. */
        uint32_t held[PACE_MAX_RESERVATIONS];
        int32_t res_cpu_index[PACE_MAX_RESERVATIONS];
        int r;

        r = check_bounds(t, config, why, why_size);
        if (r < 0)
                return r;
        r = check_nice_levels(t, config, why, why_size);
        if (r < 0)
                return r;
        r = check_cpus(t, config, max_frame, why, why_size);
        if (r < 0)
                return r;
        for (uint32_t i = 0; i < t->n_reservations; i++) {
                res_cpu_index[i] = reservation_cpu_index(t, i);
                held[i] = 0;
                r = check_reservation(t, i, res_cpu_index, why, why_size);
                if (r < 0)
                        return r;
        }
        r = check_user_limits(t, config, why, why_size);
        if (r < 0)
                return r;
        for (uint32_t c = 0; c < t->n_cpus; c++) {
                r = check_frame(t, c, config, max_gap, res_cpu_index, held, why, why_size);
                if (r < 0)
                        return r;
        }
        return check_grants(t, max_frame, res_cpu_index, held, why, why_size);
}
