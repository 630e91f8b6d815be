/* SPDX-License-Identifier: MIT */
#pragma once

/* Measuring CPU shares on a shared, noisy VM. What the measured processes
 * did not get and the CPU did not idle ("others": the dispatcher's own few
 * us per switch, interrupts, and anyone else's tests) is measured too; above
 * 1.5 points the window is not ours and is measured again (at most twice
 * more), rather than blaming pace for a neighbour. Foreign load can only
 * lower the measured shares, so a check of an upper bound never needs this. */

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "test.h"
#include "time-util.h"

#define SHARE_MAX_PIDS 8
/* What others may take in a window share_measure() keeps, in points. */
#define SHARE_OTHERS_KEPT 1.5


/* CPU time of a whole process (every thread, living or gone), in ns: the
 * kernel's process CPU clock. /proc/PID/stat's utime + stime would do, but
 * in 10 ms ticks that is +-0.2 points over 5 s, too coarse beside the
 * tolerances of a few tenths asserted with it. 0 once the process is gone. */
static inline uint64_t share_cpu_time_ns(pid_t pid) {
        clockid_t clock;
        struct timespec ts;

        if (clock_getcpuclockid(pid, &clock) != 0 || clock_gettime(clock, &ts) < 0)
                return 0;
        return (uint64_t) ts.tv_sec * 1000000000ULL + (uint64_t) ts.tv_nsec;
}

/* A CPU's idle and iowait time (ns), from /proc/stat. Steal (the host ran
 * another guest) is left to "others": it takes from the measured
 * processes, so a window with much of it is measured again. */
/* Field k (0: user ... 3: idle, 4: iowait, 7: steal) of the cpu's line in
 * /proc/stat, in ns. */
static inline uint64_t share_cpu_stat_ns(int cpu, unsigned k) {
        char line[512], tag[16];
        uint64_t v[8] = {}, hz = (uint64_t) sysconf(_SC_CLK_TCK);
        FILE *f = fopen("/proc/stat", "re");

        ASSERT_TRUE(f);
        ASSERT_TRUE(k < ELEMENTSOF(v));
        snprintf(tag, sizeof(tag), "cpu%d ", cpu);
        while (fgets(line, sizeof(line), f))
                if (strncmp(line, tag, strlen(tag)) == 0 &&
                    sscanf(line + strlen(tag), "%" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64
                           " %" SCNu64 " %" SCNu64, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) == 8)
                        break;
        fclose(f);
        return v[k] * (1000000000ULL / hz);
}

static inline uint64_t share_cpu_idle_ns(int cpu) {
        return share_cpu_stat_ns(cpu, 3) + share_cpu_stat_ns(cpu, 4);
}

/* Shares (percent of one CPU) of pids over ms, on `cpu`. A window where
 * others took more than 1.5 points (here they take 0.0-0.5; /proc/stat's
 * 10 ms ticks alone make +-0.2) is measured again, up to three windows in
 * all, and the quietest one is returned. The hypervisor's share (steal)
 * counts as others: it takes from every process on the CPU alike, and
 * where one of pids also runs on other CPUs the idle arithmetic alone
 * cannot see it. */
static double share_last_others;

static inline void share_measure(int cpu, const pid_t *pids, unsigned n, unsigned ms, double *ret) {
        double best_others = 1e9;

        /* Written below unless every attempt's figure is NaN; gcc cannot
         * tell, and where it inlines this it warns that ret may be unset. */
        memset(ret, 0, n * sizeof(double));
        for (unsigned attempt = 0; attempt < 3; attempt++) {
                uint64_t c0[SHARE_MAX_PIDS], t0 = monotonic_ns(), i0 = share_cpu_idle_ns(cpu), t1, i1;
                uint64_t s0 = share_cpu_stat_ns(cpu, 7);
                double ours = 0, got[SHARE_MAX_PIDS];

                for (unsigned i = 0; i < n; i++)
                        c0[i] = share_cpu_time_ns(pids[i]);
                nanosleep(&(struct timespec) { .tv_sec = ms / 1000, .tv_nsec = (long) (ms % 1000) * 1000000L }, NULL);
                t1 = monotonic_ns();
                i1 = share_cpu_idle_ns(cpu);
                for (unsigned i = 0; i < n; i++) {
                        got[i] = 100.0 * (double) (share_cpu_time_ns(pids[i]) - c0[i]) / (double) (t1 - t0);
                        ours += got[i];
                }
                double others = 100.0 - ours - 100.0 * (double) (i1 - i0) / (double) (t1 - t0);
                double stolen = 100.0 * (double) (share_cpu_stat_ns(cpu, 7) - s0) / (double) (t1 - t0);
                others = MAX(others, stolen);
                if (others < best_others) {
                        best_others = share_last_others = others;
                        memcpy(ret, got, n * sizeof(double));
                }
                if (others <= SHARE_OTHERS_KEPT)
                        return;
                printf("  CPU %d busy with something else (%.1f points): measuring again\n", cpu, others);
        }
}

/* What others took in share_measure()'s window beyond the 1.5 points
 * it allows: the most a reserved client can have lost to them (the
 * host's steal, a neighbour's load on this shared VM) besides what pace
 * owes it. For lower bounds on a grant only; upper bounds never give way. */
static inline double share_foreign(void) {
        return share_last_others > SHARE_OTHERS_KEPT ? share_last_others - SHARE_OTHERS_KEPT : 0.0;
}
