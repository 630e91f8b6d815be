/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>

#include "watchdog.h"

struct Watchdog {
        uint32_t n;
        WatchdogBeatsFn beats;
        WatchdogKickFn kick;
        void *userdata;
        uint64_t *seen;  /* each loop's count at the last look */
        bool *lagging;   /* had not moved at the last look */
        bool stalled;    /* reported, and no ping since */
        uint64_t stalled_since;
};

int watchdog_new(uint32_t n_loops, WatchdogBeatsFn beats, WatchdogKickFn kick, void *userdata, Watchdog **ret) {
        _cleanup_(watchdog_freep) Watchdog *w = calloc(1, sizeof(*w));

        if (!w)
                return -ENOMEM;
        w->n = n_loops;
        w->beats = beats;
        w->kick = kick;
        w->userdata = userdata;
        w->seen = calloc(n_loops, sizeof(*w->seen));
        w->lagging = calloc(n_loops, sizeof(*w->lagging));
        if (!w->seen || !w->lagging)
                return -ENOMEM;
        *ret = TAKE_PTR(w);
        return 0;
}

Watchdog *watchdog_free(Watchdog *w) {
        if (!w)
                return NULL;
        free(w->seen);
        free(w->lagging);
        free(w);
        return NULL;
}

uint64_t watchdog_look_interval(uint64_t watchdog_ns) {
        return MAX(watchdog_ns / 4, 2 * WATCHDOG_PROBE_NS);
}

/* Whether every running loop moved since the last look; the ones that did
 * not are marked and, if kick, kicked. */
static bool all_advanced(Watchdog *w, bool kick) {
        bool all = true;

        for (uint32_t i = 0; i < w->n; i++) {
                uint64_t b;
                if (!w->beats(i, &b, w->userdata)) {
                        w->lagging[i] = false;
                        continue;
                }
                if (b != w->seen[i]) {
                        w->seen[i] = b;
                        w->lagging[i] = false;
                        continue;
                }
                all = false;
                w->lagging[i] = true;
                if (kick)
                        w->kick(i, w->userdata);
        }
        return all;
}

static WatchdogVerdict ping(Watchdog *w, uint64_t now_ns, uint64_t *ret_stalled_ns) {
        if (!w->stalled) {
                *ret_stalled_ns = 0;
                return WATCHDOG_PING;
        }
        w->stalled = false;
        *ret_stalled_ns = now_ns - w->stalled_since;
        return WATCHDOG_RECOVERED;
}

WatchdogVerdict watchdog_look(Watchdog *w, uint64_t now_ns, uint64_t *ret_stalled_ns) {
        if (all_advanced(w, true))
                return ping(w, now_ns, ret_stalled_ns);
        *ret_stalled_ns = 0;
        return WATCHDOG_PROBE;
}

WatchdogVerdict watchdog_probe(Watchdog *w, uint64_t now_ns, uint64_t *ret_stalled_ns) {
        if (all_advanced(w, false))
                return ping(w, now_ns, ret_stalled_ns);
        *ret_stalled_ns = 0;
        if (w->stalled)
                return WATCHDOG_STILL_STALLED;
        w->stalled = true;
        w->stalled_since = now_ns;
        return WATCHDOG_STALLED;
}

bool watchdog_loop_stalled(const Watchdog *w, uint32_t i) {
        return i < w->n && w->lagging[i];
}
