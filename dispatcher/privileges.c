/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <linux/mount.h>
#include <linux/securebits.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/capability.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "macro.h"
#include "privileges.h"

/* The one capability the dispatcher keeps. Why nothing else:
 * - CAP_SYS_NICE: SCHED_FIFO 99 for itself, sched_setattr() and
 *   sched_setaffinity() on other users' threads.
 * - CAP_IPC_LOCK only as a fallback: mlockall() within RLIMIT_MEMLOCK needs
 *   no capability, and the dispatcher sets that limit to what it locks
 *   (raised while it still has CAP_SYS_RESOURCE, or LimitMEMLOCK= in the
 *   unit). Only where the limit cannot be raised (root without
 *   CAP_SYS_RESOURCE, e.g. in a container) is CAP_IPC_LOCK kept instead,
 *   and said so in the start-up log.
 * - CAP_DAC_OVERRIDE in strict mode only: the v1 freezer's root directory
 *   is mode 0555 whoever owns it, so creating and removing pace.<hash> there
 *   needs it even for uid 0. Everything else it writes (freezer.state,
 *   cgroup.procs) belongs to uid 0, and the /proc files it reads (stat,
 *   status, cgroup, task/) are world-readable: no CAP_DAC_READ_SEARCH.
 * - not CAP_SYS_PTRACE: pidfd_open() and sched_getattr() need none.
 * - not CAP_KILL, CAP_SYS_ADMIN: it never signals anyone, and the v1
 *   freezer's cgroup.procs checks euid 0, not a capability. */
#define KEEP_CAPS PACE_CAP_BIT(CAP_SYS_NICE)

static int parse_mask(const char *status, const char *key, uint64_t *ret) {
        const char *p = strstr(status, key);
        char *end;

        if (!p)
                return -ENOENT;
        p += strlen(key);
        errno = 0;
        unsigned long long v = strtoull(p, &end, 16);
        if (errno != 0 || end == p)
                return -EBADMSG;
        *ret = v;
        return 0;
}

int privileges_read(PrivilegeReport *ret_report) {
        char status[8192];
        ssize_t n;
        int r;

        _cleanup_close_ int fd = open("/proc/thread-self/status", O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        n = read(fd, status, sizeof(status) - 1);
        if (n < 0)
                return negative_errno();
        status[n] = '\0';
        if ((r = parse_mask(status, "\nCapInh:", &ret_report->inheritable)) < 0 ||
            (r = parse_mask(status, "\nCapPrm:", &ret_report->permitted)) < 0 ||
            (r = parse_mask(status, "\nCapEff:", &ret_report->effective)) < 0 ||
            (r = parse_mask(status, "\nCapBnd:", &ret_report->bounding)) < 0)
                return r;
        /* CapAmb exists since 4.3; a kernel without it has no ambient set. */
        if (parse_mask(status, "\nCapAmb:", &ret_report->ambient) < 0)
                ret_report->ambient = 0;
        return 0;
}

/* Soft and hard limit both to `value`: lowering is always allowed, raising
 * needs CAP_SYS_RESOURCE. -EPERM if the limit stays below value. */
static int set_limit(int resource, uint64_t value, bool *ret_raised) {
        struct rlimit rl;

        if (getrlimit(resource, &rl) < 0)
                return negative_errno();
        bool raise = rl.rlim_max != RLIM_INFINITY && rl.rlim_max < value;
        rl.rlim_cur = rl.rlim_max = value;
        if (setrlimit(resource, &rl) < 0)
                return negative_errno();
        if (ret_raised)
                *ret_raised = raise;
        return 0;
}

static int no_sys_nice(char *why, size_t why_size) {
        snprintf(why, why_size,
                 "no CAP_SYS_NICE: the dispatcher can neither run at SCHED_FIFO 99 nor change other processes' "
                 "priorities. Run it as root, or give it CAP_SYS_NICE (systemd: CapabilityBoundingSet=CAP_SYS_NICE, "
                 "plus AmbientCapabilities=CAP_SYS_NICE with a User= other than root).");
        return -EPERM;
}

static bool has_effective(const PrivilegeReport *rep, int cap) {
        return rep->effective & PACE_CAP_BIT(cap);
}

/* A private mount namespace in which everything is read-only (except the
 * freezer hierarchy in strict mode): the dispatcher keeps uid 0, which
 * owns most of the system's files, and this takes that ownership away from
 * a compromised dispatcher without taking away the euid-0 check the v1
 * freezer needs. Slave propagation, so mounts made later outside (e.g. a
 * runtime directory) still appear. Under systemd ProtectSystem=strict does
 * this job and CAP_SYS_ADMIN is already gone: skipped then. */
static int read_only_view(const char *writable_path, const char *groups_path, const char *groups_cpu_path,
                          const char *groups_cpuset_path, const char *tracing_path) {
        struct mount_attr ro = { .attr_set = MOUNT_ATTR_RDONLY, .propagation = MS_SLAVE };
        struct mount_attr rw = { .attr_clr = MOUNT_ATTR_RDONLY };

        if (unshare(CLONE_NEWNS) < 0)
                return negative_errno();
        if (syscall(SYS_mount_setattr, AT_FDCWD, "/", AT_RECURSIVE, &ro, sizeof(ro)) < 0)
                return negative_errno();
        if (writable_path &&
            syscall(SYS_mount_setattr, AT_FDCWD, writable_path, 0, &rw, sizeof(rw)) < 0)
                return negative_errno();
        if (groups_path &&
            syscall(SYS_mount_setattr, AT_FDCWD, groups_path, 0, &rw, sizeof(rw)) < 0)
                return negative_errno();
        if (groups_cpu_path &&
            syscall(SYS_mount_setattr, AT_FDCWD, groups_cpu_path, 0, &rw, sizeof(rw)) < 0)
                return negative_errno();
        if (groups_cpuset_path &&
            syscall(SYS_mount_setattr, AT_FDCWD, groups_cpuset_path, 0, &rw, sizeof(rw)) < 0)
                return negative_errno();
        /* Best effort: without it, lent priority is not charged (said at
         * start-up), nothing else. */
        if (tracing_path)
                (void) syscall(SYS_mount_setattr, AT_FDCWD, tracing_path, 0, &rw, sizeof(rw));
        return 0;
}

/* What the dispatcher must have before it drops anything: CAP_SYS_NICE,
 * and in strict mode CAP_DAC_OVERRIDE. Adds to *keep what it will keep. */
static int check_needed(const PrivilegeLimits *limits, const PrivilegeReport *rep, uint64_t *keep, char *why,
                        size_t why_size) {
        if (limits->writable_path || (limits->groups_path && (rep->permitted & PACE_CAP_BIT(CAP_DAC_OVERRIDE))))
                *keep |= PACE_CAP_BIT(CAP_DAC_OVERRIDE);
        if (!(rep->permitted & KEEP_CAPS))
                return no_sys_nice(why, why_size);
        if (limits->writable_path && !(rep->permitted & PACE_CAP_BIT(CAP_DAC_OVERRIDE))) {
                snprintf(why, why_size,
                         "\"waiting\": \"freeze\" needs CAP_DAC_OVERRIDE: the freezer hierarchy's root directory "
                         "(%s) is mode 0555, so creating the dispatcher's group there needs it even for root "
                         "(systemd: add CAP_DAC_OVERRIDE to CapabilityBoundingSet=, see pace-dispatcher(8))",
                         limits->writable_path);
                return -EPERM;
        }
        return 0;
}

/* The resource limits, first, while CAP_SYS_RESOURCE may still allow
 * raising them. Where RLIMIT_MEMLOCK cannot be raised, CAP_IPC_LOCK is
 * kept instead (added to *keep, said in rep). */
static int set_limits(const PrivilegeLimits *limits, PrivilegeReport *rep, uint64_t *keep, char *why,
                      size_t why_size) {
        int r;

        r = set_limit(RLIMIT_MEMLOCK, limits->memlock_bytes, &rep->memlock_raised);
        if (r < 0 && (rep->permitted & PACE_CAP_BIT(CAP_IPC_LOCK))) {
                *keep |= PACE_CAP_BIT(CAP_IPC_LOCK);
                rep->kept_ipc_lock = true;
        } else if (r < 0) {
                struct rlimit rl = {};
                (void) getrlimit(RLIMIT_MEMLOCK, &rl);
                snprintf(why, why_size,
                         "RLIMIT_MEMLOCK is %" PRIu64 " KiB and cannot be raised to the %" PRIu64 " KiB the "
                         "dispatcher locks (mlockall) for its %s, and there is no CAP_IPC_LOCK to go beyond it; raise "
                         "the limit (systemd: LimitMEMLOCK=, shell: ulimit -l) or allow CAP_IPC_LOCK",
                         (uint64_t) rl.rlim_max / 1024, limits->memlock_bytes / 1024,
                         "table copies, run arrays and thread stacks");
                return -EPERM;
        }
        rep->files = limits->max_files;
        r = set_limit(RLIMIT_NOFILE, limits->max_files, NULL);
        if (r == -EPERM) {
                /* The hard limit stays where it is: as many as it allows,
                 * if that is enough for the reservations themselves. */
                struct rlimit rl = {};
                if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max != RLIM_INFINITY &&
                    rl.rlim_max >= limits->min_files) {
                        rep->files = rl.rlim_max;
                        r = set_limit(RLIMIT_NOFILE, rl.rlim_max, NULL);
                }
        }
        if (r < 0) {
                snprintf(why, why_size, "cannot set RLIMIT_NOFILE to %" PRIu64 " (eight descriptors per reserved "
                         "process, three per registered thread, one per nice level), nor to at least %" PRIu64 ": %s",
                         limits->max_files, limits->min_files, strerror(-r));
                return r;
        }
        /* Binding only for a non-root uid: the kernel exempts uid 0 from
         * RLIMIT_NPROC. Set anyway so the same binary under a dedicated
         * User= cannot fork beyond its threads. */
        (void) set_limit(RLIMIT_NPROC, limits->max_threads, NULL);
        /* A core of a process that holds mlocked copies of the table and
         * other users' thread ids is of no use to anyone else. */
        (void) set_limit(RLIMIT_CORE, 0, NULL);
        return 0;
}

/* uid 0 must not get its capabilities back through an execve()
 * (NO_NEW_PRIVS already forbids gaining any, the securebits also forbid
 * root's implicit full set), and nobody may undo that; the bounding set
 * keeps only what is kept. Needs CAP_SETPCAP: without it (systemd's
 * CapabilityBoundingSet= has done this) nothing to do. */
static int lock_bounding_set(PrivilegeReport *rep, uint64_t keep, char *why, size_t why_size) {
        unsigned long bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                             SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED;
        int r;

        if (!has_effective(rep, CAP_SETPCAP))
                return 0;
        if (prctl(PR_SET_SECUREBITS, bits, 0, 0, 0) < 0) {
                r = negative_errno();
                snprintf(why, why_size, "cannot set securebits: %s", strerror(-r));
                return r;
        }
        for (cap_value_t c = 0; c <= CAP_LAST_CAP; c++)
                if (!(keep & PACE_CAP_BIT(c)) && (rep->bounding & PACE_CAP_BIT(c)) &&
                    prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno != EINVAL) {
                        r = negative_errno();
                        snprintf(why, why_size, "cannot drop capability %d from the bounding set: %s", (int) c,
                                 strerror(-r));
                        return r;
                }
        rep->bounding_dropped = true;
        return 0;
}

/* Effective and permitted become exactly keep; inheritable and ambient
 * empty; then NO_NEW_PRIVS. */
static int set_capabilities(uint64_t keep, char *why, size_t why_size) {
        cap_value_t values[3];
        int n_values = 0, r;

        if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL) {
                r = negative_errno();
                snprintf(why, why_size, "cannot clear the ambient capability set: %s", strerror(-r));
                return r;
        }
        for (cap_value_t c = 0; c <= CAP_LAST_CAP && n_values < (int) ELEMENTSOF(values); c++)
                if (keep & PACE_CAP_BIT(c))
                        values[n_values++] = c;
        cap_t caps = cap_init(); /* all clear */
        if (!caps)
                return -ENOMEM;
        if (cap_set_flag(caps, CAP_EFFECTIVE, n_values, values, CAP_SET) < 0 ||
            cap_set_flag(caps, CAP_PERMITTED, n_values, values, CAP_SET) < 0) {
                cap_free(caps);
                return -EINVAL;
        }
        r = cap_set_proc(caps) < 0 ? negative_errno() : 0;
        cap_free(caps);
        if (r < 0) {
                snprintf(why, why_size, "cannot drop capabilities: %s", strerror(-r));
                return r;
        }
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
                r = negative_errno();
                snprintf(why, why_size, "cannot set no_new_privs: %s", strerror(-r));
                return r;
        }
        return 0;
}

/* The kernel's view, not libcap's return values: rep's sets read back, and
 * nothing beyond keep left anywhere. */
static int verify_dropped(uint64_t keep, PrivilegeReport *rep, char *why, size_t why_size) {
        PrivilegeReport now = *rep;
        int r;

        r = privileges_read(&now);
        if (r < 0) {
                snprintf(why, why_size, "cannot read back the capabilities: %s", strerror(-r));
                return r;
        }
        *rep = now;
        if ((rep->effective | rep->permitted) & ~keep || rep->inheritable || rep->ambient) {
                snprintf(why, why_size,
                         "refusing to run: capabilities beyond CAP_SYS_NICE%s%s remain after dropping them "
                         "(CapEff %016" PRIx64 ", CapPrm %016" PRIx64 ", CapInh %016" PRIx64 ", CapAmb %016" PRIx64 ")",
                         keep & PACE_CAP_BIT(CAP_IPC_LOCK) ? ", CAP_IPC_LOCK" : "",
                         keep & PACE_CAP_BIT(CAP_DAC_OVERRIDE) ? ", CAP_DAC_OVERRIDE" : "", rep->effective,
                         rep->permitted, rep->inheritable, rep->ambient);
                return -EPERM;
        }
        if (!(rep->effective & KEEP_CAPS))
                return no_sys_nice(why, why_size);
        return 0;
}

int privileges_drop(const PrivilegeLimits *limits, PrivilegeReport *ret_report, char *why, size_t why_size) {
        PrivilegeReport rep = {};
        uint64_t keep = KEEP_CAPS;
        int r;

        r = privileges_read(&rep);
        if (r < 0) {
                snprintf(why, why_size, "cannot read this process's capabilities: %s", strerror(-r));
                return r;
        }
        r = check_needed(limits, &rep, &keep, why, why_size);
        if (r < 0)
                return r;
        r = set_limits(limits, &rep, &keep, why, why_size);
        if (r < 0)
                return r;
        if (has_effective(&rep, CAP_SYS_ADMIN)) {
                r = read_only_view(limits->writable_path, limits->groups_path, limits->groups_cpu_path,
                                   limits->groups_cpuset_path, limits->tracing_path);
                if (r < 0) {
                        snprintf(why, why_size, "cannot make the file system read-only for the dispatcher "
                                 "(private mount namespace): %s", strerror(-r));
                        return r;
                }
                rep.read_only_view = true;
        }
        if (has_effective(&rep, CAP_SETGID))
                (void) setgroups(0, NULL);
        r = lock_bounding_set(&rep, keep, why, why_size);
        if (r < 0)
                return r;
        r = set_capabilities(keep, why, why_size);
        if (r < 0)
                return r;
        r = verify_dropped(keep, &rep, why, why_size);
        if (r < 0)
                return r;
        if (ret_report)
                *ret_report = rep;
        return 0;
}
