/* SPDX-License-Identifier: MIT */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct ProcInfo {
        uid_t uid;           /* real uid, from /proc/PID/status */
        uint64_t start_time; /* field 22 of /proc/PID/stat: clock ticks after boot */
        bool kernel_thread;  /* PF_KTHREAD */
} ProcInfo;

/* Reads what pace needs to know about a process. -ESRCH if it is gone.
 * proc_root is normally "/proc" (tests may point elsewhere). */
int proc_info_read(const char *proc_root, pid_t pid, ProcInfo *ret);

/* Parses the content of /proc/PID/stat (robust against ')' in comm). */
int proc_stat_parse(const char *text, uint64_t *ret_start_time, unsigned long *ret_flags);

int pidfd_open_checked(pid_t pid, int *ret_fd);
/* 0 while the process behind the pidfd is alive, -ESRCH once it has exited. */
int pidfd_alive(int pidfd);
