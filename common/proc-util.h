/* SPDX-License-Identifier: MIT */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct ProcInfo {
        uid_t uid;           /* real uid, from /proc/PID/status */
        uint64_t start_time; /* field 22 of /proc/PID/stat: clock ticks after boot */
        bool kernel_thread;  /* PF_KTHREAD */
        bool root;           /* any of its real, effective, saved, fs uids is 0 */
} ProcInfo;

/* A small file (procfs, cgroupfs) into buf, NUL-terminated, in one read.
 * -ESRCH if it does not exist (a process that is gone). */
int read_small_file(const char *path, char *buf, size_t size);
/* The same for name relative to dirfd (e.g. a pinned /proc/PID). */
int read_small_file_at(int dirfd, const char *name, char *buf, size_t size);

/* Reads what pace needs to know about a process. -ESRCH if it is gone.
 * proc_root is normally "/proc" (tests may point elsewhere). */
int proc_info_read(const char *proc_root, pid_t pid, ProcInfo *ret);

/* Parses the content of /proc/PID/stat (robust against ')' in comm). */
int proc_stat_parse(const char *text, uint64_t *ret_start_time, unsigned long *ret_flags);

/* Threads of a process (entries of /proc/PID/task). */
int proc_count_threads(const char *proc_root, pid_t pid, uint32_t *ret);
/* pid's descendants, breadth first (/proc/P/task/T/children): up to max
 * into out; *ret_n says how many were stored. */
int proc_list_descendants(const char *proc_root, pid_t pid, pid_t *out, size_t max, size_t *ret_n);
/* From the text of a /proc/.../cgroup file, the path of the v1 hierarchy
 * that carries `controller` ("2:cpuacct:/a" or "3:cpu,cpuacct:/a").
 * -ENOENT if none does. */
int proc_cgroup_v1_path(const char *text, const char *controller, char *ret, size_t size);
/* The same for the unified hierarchy's line ("0::/a"). -ENOENT if none. */
int proc_cgroup_v2_path(const char *text, char *ret, size_t size);
/* Writes text to an existing file (cgroupfs, procfs): one write. */
int write_string_file(const char *path, const char *text);

/* pid's descendants that may be moved with it: each owned by exactly uid
 * (a set-uid child, or another user's process that took a listed pid, is
 * skipped with everything below it), breadth first. The walk reads a file
 * per thread of each process whose children it lists: it lists those of a
 * process only while the threads so read stay within max_threads (a
 * process past that is itself listed, its children are not). Up to max
 * into out. Each is opened as a pidfd before its owner is read (into
 * ret_pidfds when not NULL, for the caller to close), so that after acting
 * on a number a caller can tell whether it still named that process.
 * -ESRCH if pid is gone. */
int proc_list_owned_descendants(const char *proc_root, pid_t pid, uid_t uid, uint32_t max_threads, pid_t *out,
                                int *ret_pidfds, size_t max, size_t *ret_n);

/* Threads of pid and all its descendants (/proc/P/task/T/children), at most
 * max_processes processes visited. Stops once the count passes max_threads
 * (*ret is then more than max_threads, not the whole count): the reads grow
 * with the threads looked at, and a caller needs no more than that. */
int proc_count_tree_threads(const char *proc_root, pid_t pid, uint32_t max_threads, size_t max_processes,
                            uint32_t *ret);

/* A process's credentials as the kernel holds them, from the text of its
 * /proc/PID/status: the real, effective, saved and file-system uids (the
 * privileged side trusts no one's word for who owns a process). */
typedef struct ProcOwner {
        uid_t uids[4];
} ProcOwner;
int proc_status_owner(const char *status_text, ProcOwner *ret);
/* Whether every one of the four uids is uid. */
bool proc_owner_is(const ProcOwner *o, uid_t uid);
/* Whether any of them is 0: a process that is root in any sense. */
bool proc_owner_has_root(const ProcOwner *o);

/* The highest SCHED_FIFO/SCHED_RR priority the process could give its own
 * threads, from the texts of its /proc/PID/status and /proc/PID/limits: 99
 * with CAP_SYS_NICE in its effective set, else the hard RLIMIT_RTPRIO (it
 * may raise its soft limit up to that), 0 when it may not be real-time. */
int proc_rt_priority_ceiling(const char *status_text, const char *limits_text, uint32_t *ret);

int pidfd_open_checked(pid_t pid, int *ret_fd);
/* 0 while the process behind the pidfd is alive, -ESRCH once it has exited. */
int pidfd_alive(int pidfd);

/* Parses a kernel CPU list ("0-3,8,10-11") into ascending CPU numbers. */
int cpu_list_parse(const char *text, int32_t *cpus, uint32_t max, uint32_t *ret_n);
/* The same list as a mask, bit n for CPU n. CPUs from 64 on are left out:
 * pace manages at most CPUs 0-63 (the configuration's "cpus"). */
int cpu_list_parse_mask(const char *text, uint64_t *ret_mask);

/* The CPUs thread tid of process pid may run on (its affinity, the
 * Cpus_allowed_list of /proc/PID/task/TID/status; tid = pid for the main
 * thread), as a mask of CPUs 0-63. -ESRCH if there is no such thread.
 * Read it while holding a pidfd and check the pidfd afterwards, like any
 * /proc identity: only then is it the affinity of that process. */
int proc_cpus_allowed(const char *proc_root, pid_t pid, pid_t tid, uint64_t *ret_mask);

/* Fills config->cpus with the online CPUs when the config left "cpus" out, and
 * checks that every configured CPU is online. sysfs_online is normally
 * "/sys/devices/system/cpu/online". On failure, a malloc'ed message. */
struct PaceConfig;
int config_resolve_cpus(struct PaceConfig *config, const char *sysfs_online, char *why, size_t why_size);

/* Thread tid of process pid: its start time (field 22 of its stat), which
 * with the tid names one thread even after the tid is reused. -ESRCH if the
 * process has no such thread (any more). */
int proc_thread_start_time(const char *proc_root, pid_t pid, pid_t tid, uint64_t *ret);

/* Groups of a process, from the text of its /proc/PID/status: the real gid
 * and up to max supplementary groups (the rest are left out). */
int proc_status_groups(const char *status_text, gid_t *ret_gid, gid_t *groups, size_t max, size_t *ret_n);
