/* SPDX-License-Identifier: MIT */
#pragma once

/* The main thread's side of the dispatch loops (SCHED_OTHER): everything a
 * loop would otherwise have to look up, done once per table generation for
 * all CPUs and handed to each loop as a plan (loop.h) it takes at a frame
 * boundary: the identities checked, the groups made and entered, the
 * threads registered with their handles opened, the frame compiled. Then
 * the threads that come and go (held_keep()) and, once a loop has taken a
 * newer plan, the reservations it no longer runs restored and freed.
 * Core code: returns negative errno, never logs (the ignored callback says
 * what the caller should). */

#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "loop.h"
#include "pace-stats.h"
#include "pace-table.h"

typedef struct Keeper Keeper;

/* ignored: called for a reservation whose identity check failed or
 * refused (r as held_new() returns it: a HeldRefusal or a negative errno),
 * once per reservation. */
typedef void (*KeeperIgnored)(void *userdata, const PaceTableReservation *res, int r);

int keeper_new(PaceStatsFile *stats, KeeperIgnored ignored, void *userdata, Keeper **ret);
Keeper *keeper_free(Keeper *k);
void keeper_set_stats(Keeper *k, PaceStatsFile *stats);

/* Hands loop l the part of table t (generation gen, already checked) that
 * is its CPU's; it replaces a plan the loop has not taken yet. */
int keeper_plan(Keeper *k, CpuLoop *l, const PaceTableBuffer *t, uint64_t gen, const PaceConfig *config);
/* Frees what l neither runs nor may take next. Returns how many. */
size_t keeper_collect(Keeper *k, CpuLoop *l);
/* Registers the threads that came, takes back the ones that went, and
 * settles reservations that wait for their group. Adds to *ret_put_back
 * the threads it found in the real-time class behind their policy and put
 * back. Returns how many reservations it looked at. */
size_t keeper_keep(Keeper *k, CpuLoop *l, unsigned *ret_put_back);
/* After the loop has exited: restores and frees everything of l's. */
void keeper_release_all(Keeper *k, CpuLoop *l);
