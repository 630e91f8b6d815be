/* SPDX-License-Identifier: MIT */
#pragma once

/* The kernel's struct sched_attr (its size up to the utilization hints,
 * SCHED_ATTR_SIZE_VER1), for sched_setattr() and sched_getattr() by
 * syscall(): glibc 2.36 (Debian 12) has neither call, newer glibc declares
 * its own struct sched_attr, and <linux/sched/types.h> redefines struct
 * sched_param beside <sched.h>; so the layout is spelled out once, here,
 * under a name of our own, for the dispatcher and the benchmarks alike. */

#include <stdint.h>

#ifndef SCHED_DEADLINE
#define SCHED_DEADLINE 6
#endif

typedef struct PaceSchedAttr {
        uint32_t size;
        uint32_t sched_policy;
        uint64_t sched_flags;
        int32_t sched_nice;
        uint32_t sched_priority;
        uint64_t sched_runtime;
        uint64_t sched_deadline;
        uint64_t sched_period;
        uint32_t sched_util_min;
        uint32_t sched_util_max;
} PaceSchedAttr;
