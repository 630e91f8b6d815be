/* SPDX-License-Identifier: MIT */
/* Which process or thread a request may name: opened and read so that
 * everything is about one process even if its pid is reused, and judged
 * against who is asking. Shared by reservations and nice levels. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "broker-internal.h"
#include "cgroup-limits.h"
#include "macro.h"
#include "proc-util.h"

/* Where the target may run: the main thread's CPU affinity for a process or
 * tree, the thread's own for a thread scope; from the kernel, never from the
 * message. Read while the pidfd holds the process and checked against it
 * afterwards, like its identity, so a reused pid cannot lend its affinity.
 * While the dispatcher holds a reservation's threads it has pinned them to
 * its CPU, and it gives them their own affinity back only at its next frame
 * boundary after a release: a process reserved again within that frame is
 * read as pinned to its old CPU.
 * 0 with the mask, a refusal (> 0, in *ret_refusal), or a negative errno. */
int read_allowed_cpus(Broker *b, pid_t pid, uint32_t scope, pid_t tid, int pidfd, uint64_t *ret_mask,
                      Refusal *ret_refusal) {
        bool thread = scope == PACE_TABLE_SCOPE_THREAD;
        uint64_t mask = 0;
        int r, alive;

        r = proc_cpus_allowed(b->proc_root, pid, thread ? tid : pid, &mask);
        alive = pidfd_alive(pidfd);
        if (alive == -ESRCH)
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_NO_SUCH_PROCESS,
                              "no process with pid %" PRIi32, (int32_t) pid);
        if (r == -ESRCH && thread)
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_NO_SUCH_PROCESS,
                              "pid %" PRIi32 " has no thread %" PRIi32, (int32_t) pid, tid);
        if (r < 0 || alive < 0)
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_INTERNAL,
                              "cannot read the CPU affinity of %s %" PRIi32 ": %s", thread ? "thread" : "pid",
                              (int32_t) (thread ? tid : pid), strerror(r < 0 ? -r : -alive));
        /* The kernel never leaves a task without a CPU: an empty mask means
         * every CPU it may use is numbered 64 or above. */
        if (mask == 0)
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT,
                              "%s %" PRIi32 " may run only on CPUs numbered 64 or above, and pace manages CPUs "
                              "0-63 at most; change its affinity", thread ? "thread" : "pid",
                              (int32_t) (thread ? tid : pid));
        *ret_mask = mask;
        return 0;
}

const TargetWords reserve_words = {
        .name_process = "reserve",
        .kernel = "; only user processes can be reserved",
        .own = "reserve only its own processes",
        .root = " (a real, effective, saved or file-system uid 0); root's processes can be reserved only where "
                "pace.json sets \"reserve_root_processes\": true",
};

const TargetWords nice_words = {
        .name_process = "name",
        .kernel = "",
        .own = "renice only its own threads",
        .root = "; root's threads are reniced only where pace.json sets \"reserve_root_processes\": true",
};

/* Opens process pid and reads what it is: the pidfd first, its identity
 * second, that it still lives third, so all of it is about the process the
 * pidfd holds even if the pid is reused in between. With tid > 0 the
 * thread's start time is read in the same window. For the caller itself
 * (use_peer_pidfd), the kernel's pidfd from the connection is better still.
 * 0 with the pidfd, a refusal (> 0, in *ret_refusal), or a negative errno. */
int open_target(Broker *b, const BrokerPeer *peer, pid_t pid, bool use_peer_pidfd, pid_t tid,
                const TargetWords *words, int *ret_pidfd, ProcInfo *ret_info,
                uint64_t *ret_thread_start_time, Refusal *ret_refusal) {
        _cleanup_close_ int pidfd = -EBADF;
        int r = 0;

        if (use_peer_pidfd) {
                pidfd = fcntl(peer->pidfd, F_DUPFD_CLOEXEC, 3);
                if (pidfd < 0)
                        return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_INTERNAL,
                                      "cannot keep a handle on the calling process: %s", strerror(errno));
        } else {
                r = pidfd_open_checked(pid, &pidfd);
                /* Kernels say EINVAL (older) or ENOENT (6.9+) for a thread
                 * that is not its process's leader. */
                if (r == -EINVAL || r == -ENOENT)
                        return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT,
                                      "%" PRIi32 " is a thread, not a process; %s its process "
                                      "(the Tgid in /proc/%" PRIi32 "/status)", (int32_t) pid,
                                      words->name_process, (int32_t) pid);
                if (r < 0 && r != -ESRCH) /* a process that is gone is answered below */
                        return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_INTERNAL,
                                      "cannot open pid %" PRIi32 ": %s", (int32_t) pid, strerror(-r));
        }
        if (pidfd >= 0)
                r = proc_info_read(b->proc_root, pid, ret_info);
        if (r == 0 && tid > 0) {
                r = proc_thread_start_time(b->proc_root, pid, tid, ret_thread_start_time);
                if (r == -ESRCH && pidfd_alive(pidfd) == 0)
                        return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_NO_SUCH_PROCESS,
                                      "pid %" PRIi32 " has no thread %" PRIi32, (int32_t) pid, tid);
        }
        if (r == 0)
                r = pidfd_alive(pidfd);
        if (r == -ESRCH)
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_NO_SUCH_PROCESS,
                              "no process with pid %" PRIi32, (int32_t) pid);
        if (r < 0)
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_INTERNAL,
                              "cannot read /proc for pid %" PRIi32 ": %s", (int32_t) pid, strerror(-r));
        *ret_pidfd = TAKE_FD(pidfd);
        return 0;
}

/* Whether the peer may have process pid (as open_target() read it) reserved
 * or reniced: a user process of its own uid (root: anyone's), and root's
 * own processes only where the configuration allows. 0 or a refusal (> 0,
 * in *ret_refusal). */
int target_permitted(Broker *b, const BrokerPeer *peer, pid_t pid, const ProcInfo *info,
                     const TargetWords *words, Refusal *ret_refusal) {
        if (info->kernel_thread)
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_PERMISSION_DENIED,
                              "pid %" PRIi32 " is a kernel thread%s", (int32_t) pid, words->kernel);
        if (peer->uid != 0 && info->uid != peer->uid)
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_PERMISSION_DENIED,
                              "pid %" PRIi32 " belongs to uid %u; uid %u may %s", (int32_t) pid,
                              (unsigned) info->uid, (unsigned) peer->uid, words->own);
        if (info->root && !b->config.reserve_root_processes)
                return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_PERMISSION_DENIED,
                              "pid %" PRIi32 " runs as root%s", (int32_t) pid, words->root);
        return 0;
}

int target_limits_kept(Broker *b, pid_t pid, uint32_t scope, pid_t tid, Refusal *ret_refusal) {
        char path[128], text[4096], limit[PATH_MAX + 512];

        if (scope == PACE_TABLE_SCOPE_THREAD)
                snprintf(path, sizeof(path), "%s/%" PRIi32 "/task/%" PRIi32 "/cgroup", b->proc_root, (int32_t) pid,
                         tid);
        else
                snprintf(path, sizeof(path), "%s/%" PRIi32 "/cgroup", b->proc_root, (int32_t) pid);
        /* Unreadable (gone, or a test's /proc without it): the dispatcher's
         * identity check has the last word on the process anyway. */
        if (read_small_file(path, text, sizeof(text)) < 0)
                return 0;
        if (cgroup_limit_lifted(b->cgroup_root, text, limit, sizeof(limit)) <= 0)
                return 0;
        return refuse(ret_refusal, PACE__ERROR_CODE__ERROR_PERMISSION_DENIED,
                      "pid %" PRIi32 " is held by a limit someone else set: %s. A reservation would move it into "
                      "pace's own groups, where that limit no longer applies, and pace never lifts a limit it did "
                      "not set; ask whoever set it to lift it",
                      (int32_t) pid, limit);
}
