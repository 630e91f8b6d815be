/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "keeper.h"
#include "macro.h"
#include "stats-file.h"

struct Keeper {
        PaceStatsFile *stats;
        KeeperIgnored ignored;
        void *userdata;
        /* frame_compile()'s inputs, per slot value. */
        bool *owner_live;
        uint32_t *owner_period;
        FrameScratch *owner_scratch;
};

int keeper_new(PaceStatsFile *stats, KeeperIgnored ignored, void *userdata, Keeper **ret) {
        Keeper *k = calloc(1, sizeof(*k));

        if (!k)
                return -ENOMEM;
        k->stats = stats;
        k->ignored = ignored;
        k->userdata = userdata;
        k->owner_live = calloc(PACE_MAX_RESERVATIONS + 1, sizeof(bool));
        k->owner_period = calloc(PACE_MAX_RESERVATIONS + 1, sizeof(uint32_t));
        k->owner_scratch = calloc(PACE_MAX_RESERVATIONS + 1, sizeof(FrameScratch));
        if (!k->owner_live || !k->owner_period || !k->owner_scratch) {
                keeper_free(k);
                return -ENOMEM;
        }
        *ret = k;
        return 0;
}

Keeper *keeper_free(Keeper *k) {
        if (!k)
                return NULL;
        free(k->owner_live);
        free(k->owner_period);
        free(k->owner_scratch);
        free(k);
        return NULL;
}

void keeper_set_stats(Keeper *k, PaceStatsFile *stats) {
        k->stats = stats;
}

/* Every CPU the pieces of reservation id sit on, as a kernel CPU list: its
 * members may run there and nowhere else. */
static void cpus_of(const PaceTableBuffer *t, uint64_t id, char *ret, size_t size) {
        bool on[PACE_MAX_CPUS] = {};
        size_t n = 0;

        for (uint32_t i = 0; i < MIN(t->n_reservations, PACE_MAX_RESERVATIONS); i++)
                if (t->reservations[i].id == id && t->reservations[i].cpu >= 0 &&
                    t->reservations[i].cpu < (int32_t) PACE_MAX_CPUS)
                        on[t->reservations[i].cpu] = true;
        ret[0] = '\0';
        for (int32_t c = 0; c < (int32_t) PACE_MAX_CPUS; c++)
                if (on[c]) {
                        int w = snprintf(ret + n, size - n, "%s%" PRIi32, n ? "," : "", c);
                        if (w < 0 || (size_t) w >= size - n)
                                break;
                        n += (size_t) w;
                }
}

static Held *find_owned(CpuLoop *l, const PaceTableReservation *res) {
        for (size_t i = 0; i < l->n_owned; i++) {
                Held *h = l->owned[i];
                if (h->id == res->id && h->pid == res->pid && h->start_time == res->start_time)
                        return h;
        }
        return NULL;
}

int keeper_plan(Keeper *k, CpuLoop *l, const PaceTableBuffer *t, uint64_t gen, const PaceConfig *config) {
        uint32_t w = atomic_load(&l->plan_word);
        const PaceTableCpu *tc = NULL;
        int r;

        /* A buffer the loop neither runs nor may take: it only ever takes
         * the waiting one, which this replaces. */
        unsigned f = 0;
        while (f == LOOP_PLAN_CUR(w) || f == LOOP_PLAN_WAITING(w))
                f++;
        LoopPlan *p = &l->plans[f];
        HeldContext *ctx = &l->ctx;

        for (uint32_t c = 0; c < t->n_cpus; c++)
                if (t->cpus[c].cpu == l->cpu)
                        tc = &t->cpus[c];
        p->n_entries = 0;
        for (uint32_t i = 0; i < t->n_reservations; i++) {
                const PaceTableReservation *res = &t->reservations[i];
                Held *h;

                p->by_owner[i + 1] = NULL;
                k->owner_live[i + 1] = false;
                if (res->cpu != l->cpu)
                        continue;
                h = find_owned(l, res);
                if (!h) {
                        if (l->n_owned == 2 * PACE_MAX_RESERVATIONS)
                                return -ENOSPC; /* cannot happen: collected before */
                        r = held_new(res, config->reserve_root_processes, config->max_threads_per_reservation, &h);
                        if (r != 0) {
                                if (k->ignored)
                                        k->ignored(k->userdata, res, r);
                                r = held_new_inert(res, &h);
                                if (r < 0)
                                        return r;
                        } else {
                                /* Full: the piece goes unaccounted. */
                                if (k->stats)
                                        (void) stats_file_claim(k->stats, h->id, l->cpu, &h->stats);
                                cpus_of(t, res->id, h->cpus, sizeof(h->cpus));
                                held_prepare(h, ctx);
                        }
                        l->owned[l->n_owned++] = h;
                }
                bool live = !atomic_load(&h->gone);
                p->entries[p->n_entries++] = (PlanEntry) {
                        .held = h,
                        .period_slots = res->period_slots,
                        .budget_slots = res->budget_slots,
                        .server = (res->flags & PACE_RES_SERVER) != 0,
                };
                p->by_owner[i + 1] = live ? h : NULL;
                k->owner_live[i + 1] = live;
                k->owner_period[i + 1] = res->period_slots;
        }
        p->gen = gen;
        p->frame_slots = tc ? tc->frame_slots : 0;
        p->n_runs = 0;
        p->rot = 0;
        if (tc)
                frame_compile(&t->slots[tc->first_slot], p->frame_slots, k->owner_live, k->owner_period,
                              k->owner_scratch, p->runs, &p->n_runs, &p->rot);

        /* What the plan does not name is on its way out: the loop stops
         * promoting it now (a server in the middle of a long frame would
         * otherwise keep its priority until the frame ends). */
        for (size_t i = 0; i < l->n_owned; i++)
                l->owned[i]->kept = false;
        for (size_t i = 0; i < p->n_entries; i++)
                p->entries[i].held->kept = true;
        for (size_t i = 0; i < l->n_owned; i++) {
                Held *h = l->owned[i];
                atomic_store(&h->leaving, !h->kept);
                if (!h->kept)
                        held_stand_down(h, ctx);
        }
        /* The loop may have taken the waiting one meanwhile: whatever it
         * runs now stays its own. */
        w = atomic_load(&l->plan_word);
        while (!atomic_compare_exchange_weak(&l->plan_word, &w, LOOP_PLAN_WORD(LOOP_PLAN_CUR(w), f)))
                ;
        return 0;
}

static void held_release(CpuLoop *l, Held *h) {
        if (h->stats)
                stats_file_release(h->stats);
        held_free(h, &l->ctx);
}

static void mark_plan(const CpuLoop *l, unsigned buffer) {
        if (buffer == LOOP_PLAN_NONE)
                return;
        const LoopPlan *p = &l->plans[buffer];
        for (size_t i = 0; i < p->n_entries; i++)
                p->entries[i].held->kept = true;
}

size_t keeper_collect(Keeper *k, CpuLoop *l) {
        /* What the loop runs and what it may take next, read at once: the
         * loop only ever moves the waiting plan to the one it runs. */
        uint32_t w = atomic_load(&l->plan_word);
        size_t kept = 0, freed = 0;

        for (size_t i = 0; i < l->n_owned; i++)
                l->owned[i]->kept = false;
        mark_plan(l, LOOP_PLAN_CUR(w));
        mark_plan(l, LOOP_PLAN_WAITING(w));
        for (size_t i = 0; i < l->n_owned; i++) {
                Held *h = l->owned[i];
                if (h->kept)
                        l->owned[kept++] = h;
                else {
                        held_release(l, h);
                        freed++;
                }
        }
        l->n_owned = kept;
        return freed;
}

size_t keeper_keep(Keeper *k, CpuLoop *l, unsigned *ret_put_back) {
        size_t n = 0;

        for (size_t i = 0; i < l->n_owned; i++) {
                Held *h = l->owned[i];
                if (h->inert)
                        continue;
                /* A gone one too: its groups go at once (held_keep()). */
                (void) held_keep(h, &l->ctx);
                *ret_put_back += h->put_back;
                h->put_back = 0;
                n++;
        }
        return n;
}

void keeper_release_all(Keeper *k, CpuLoop *l) {
        for (size_t i = 0; i < l->n_owned; i++)
                held_release(l, l->owned[i]);
        l->n_owned = 0;
}
