/* SPDX-License-Identifier: MIT */
#pragma once

/* Whether every dispatch loop still advances: what the dispatcher tells
 * systemd's watchdog, rather than only that its main thread lives.
 *
 * A loop counts its sleeps (beats). An active loop wakes at every change
 * of slot owner, so its count moves on its own; an idle one sleeps on a
 * futex without any periodic wake-up, and so does an active one between
 * the runs of a long frame. So a loop whose count has not moved since the
 * last look is kicked (woken from whatever sleep it is in): a live loop
 * goes round and sleeps again, which moves its count; one wedged anywhere
 * else does not. The ping is due only when every loop has moved.
 *
 * The decisions only: reading the counts and kicking are the caller's
 * callbacks, the timers and the ping too. Never logs. */

#include <stdbool.h>
#include <stdint.h>

#include "macro.h"

/* How long a kicked loop has to answer. */
#define WATCHDOG_PROBE_NS (50 * NSEC_PER_MSEC)

typedef enum WatchdogVerdict {
        WATCHDOG_PING,          /* every loop advanced: ping */
        WATCHDOG_RECOVERED,     /* the same, after a stall */
        WATCHDOG_PROBE,         /* laggards kicked: watchdog_probe() in WATCHDOG_PROBE_NS */
        WATCHDOG_STALLED,       /* a kicked loop did not answer: withhold the ping */
        WATCHDOG_STILL_STALLED, /* the same, already reported since the last ping */
} WatchdogVerdict;

/* Loop i's beat count; false if the loop does not run (never started, or
 * exited): there is nothing to wait for then. */
typedef bool (*WatchdogBeatsFn)(uint32_t i, uint64_t *ret, void *userdata);
/* Ends loop i's sleep, whatever it sleeps on. */
typedef void (*WatchdogKickFn)(uint32_t i, void *userdata);

typedef struct Watchdog Watchdog;

int watchdog_new(uint32_t n_loops, WatchdogBeatsFn beats, WatchdogKickFn kick, void *userdata, Watchdog **ret);
Watchdog *watchdog_free(Watchdog *w);
DEFINE_TRIVIAL_CLEANUP_FUNC(Watchdog *, watchdog_free);

/* How often to look for a watchdog interval (sd_watchdog_enabled()): four
 * looks per interval, and never so often that a probe would not fit
 * between two of them. */
uint64_t watchdog_look_interval(uint64_t watchdog_ns);

/* The periodic look: WATCHDOG_PING or WATCHDOG_RECOVERED if every loop
 * advanced since the last look, else WATCHDOG_PROBE after kicking the ones
 * that did not. *ret_stalled_ns: with WATCHDOG_RECOVERED, how long the
 * loops had stalled (since the stall was found); 0 otherwise. */
WatchdogVerdict watchdog_look(Watchdog *w, uint64_t now_ns, uint64_t *ret_stalled_ns);
/* WATCHDOG_PROBE_NS after a look that kicked: WATCHDOG_PING or
 * WATCHDOG_RECOVERED if every loop has advanced since that look (all of
 * them, not only the kicked ones: an active loop must have changed owner
 * in the meantime), else
 * WATCHDOG_STALLED the first time (watchdog_loop_stalled() names which)
 * and WATCHDOG_STILL_STALLED until the loops advance again. */
WatchdogVerdict watchdog_probe(Watchdog *w, uint64_t now_ns, uint64_t *ret_stalled_ns);

/* Whether loop i had not advanced at the last look or probe. */
bool watchdog_loop_stalled(const Watchdog *w, uint32_t i);
