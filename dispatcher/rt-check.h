/* SPDX-License-Identifier: MIT */
#pragma once

#include <stddef.h>

/* Start-up checks: can this process make threads SCHED_FIFO, and change
 * other processes' policies? Returns 0, or -EPERM with a plain-words
 * explanation of what stands in the way and how to fix it.
 * proc_root/cgroup_root are "/proc" and "/sys/fs/cgroup" outside tests. */
int rt_check_privileges(char *why, size_t why_size);
int rt_check_cgroup(const char *proc_root, const char *cgroup_root, char *why, size_t why_size);

/* After SCHED_FIFO was refused anyway: the most likely reason, in words. */
void rt_explain_eperm(const char *proc_root, const char *cgroup_root, char *why, size_t why_size);
