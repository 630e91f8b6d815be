/* SPDX-License-Identifier: MIT */
#pragma once
/* The main thread's side of priority lending (lending.h): the tracing
 * instance watched on the main thread's event loop, what a member lent
 * charged to its reservation. */
#include <stdbool.h>

#include <systemd/sd-event.h>

#include "dispatcher.h"

typedef struct LendingWatch LendingWatch;

/* Opens the instance (or, while a dying predecessor still holds it, tries
 * again every 500 ms) and says in the log which. Fails only without memory;
 * without tracefs it watches nothing. */
int lending_watch_new(sd_event *event, Dispatcher *d, const DispatcherRunOptions *o, LendingWatch **ret);
/* Reads what came and charges lendings still going on (housekeeping: a
 * lending whose end has not come yet is charged as it goes). */
void lending_watch_take(LendingWatch *w);
/* Whether a lending is going on. Accepts NULL. */
bool lending_watch_active(const LendingWatch *w);
/* The instance removed. Accepts NULL. */
LendingWatch *lending_watch_free(LendingWatch *w);
static inline void lending_watch_freep(LendingWatch **w) {
        lending_watch_free(*w);
}
