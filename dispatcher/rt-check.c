/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <limits.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/capability.h>
#include <sys/resource.h>
#include <unistd.h>

#include "macro.h"
#include "rt-check.h"
#include "sched-util.h"

static bool have_cap_sys_nice(void) {
        cap_t caps = cap_get_proc();
        cap_flag_value_t v = CAP_CLEAR;

        if (!caps)
                return false;
        if (cap_get_flag(caps, CAP_SYS_NICE, CAP_EFFECTIVE, &v) < 0)
                v = CAP_CLEAR;
        cap_free(caps);
        return v == CAP_SET;
}

int rt_check_privileges(char *why, size_t why_size) {
        struct rlimit rl;

        if (have_cap_sys_nice())
                return 0;

        /* Without CAP_SYS_NICE nothing else matters: changing another
         * user's threads needs it whatever RLIMIT_RTPRIO says. Still name
         * the limit, since that is what a user running it by hand hits. */
        if (getrlimit(RLIMIT_RTPRIO, &rl) == 0 && rl.rlim_cur < PACE_DISPATCHER_PRIORITY && getuid() != 0)
                snprintf(why, why_size,
                         "no CAP_SYS_NICE and RLIMIT_RTPRIO is %" PRIu64 " (needs %d): the dispatcher can neither run "
                         "at SCHED_FIFO %d nor change other processes' priorities. Run it as root, or give it "
                         "CAP_SYS_NICE (systemd: AmbientCapabilities=CAP_SYS_NICE).",
                         (uint64_t) rl.rlim_cur, PACE_DISPATCHER_PRIORITY, PACE_DISPATCHER_PRIORITY);
        else
                snprintf(why, why_size,
                         "no CAP_SYS_NICE in the effective set: the dispatcher cannot change other processes' "
                         "scheduling policy. Run it as root, or give it CAP_SYS_NICE "
                         "(systemd: AmbientCapabilities=CAP_SYS_NICE).");
        return -EPERM;
}

static int read_line(const char *path, char *buf, size_t size) {
        FILE *f = fopen(path, "re");
        if (!f)
                return negative_errno();
        if (!fgets(buf, (int) size, f)) {
                fclose(f);
                return -ENODATA;
        }
        fclose(f);
        buf[strcspn(buf, "\n")] = '\0';
        return 0;
}

/* "N:cpu,cpuacct:/path" → "/path" for the v1 hierarchy holding `controller`. */
static int v1_cgroup_path(const char *proc_root, const char *controller, char *ret, size_t size,
                          char *ret_dir, size_t dir_size) {
        char path[256], line[4096];
        FILE *f;
        int r = -ENOENT;

        snprintf(path, sizeof(path), "%s/self/cgroup", proc_root);
        f = fopen(path, "re");
        if (!f)
                return negative_errno();
        while (fgets(line, sizeof(line), f)) {
                char *c = strchr(line, ':'), *p;
                if (!c)
                        continue;
                p = strchr(c + 1, ':');
                if (!p)
                        continue;
                *p = '\0';
                /* controllers: comma-separated list between the colons */
                char *list = c + 1, *save = NULL;
                bool match = false;
                char dir[128] = "";
                for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                        if (strcmp(tok, controller) == 0)
                                match = true;
                        if (dir[0])
                                strncat(dir, ",", sizeof(dir) - strlen(dir) - 1);
                        strncat(dir, tok, sizeof(dir) - strlen(dir) - 1);
                }
                if (!match)
                        continue;
                p[1 + strcspn(p + 1, "\n")] = '\0';
                snprintf(ret, size, "%s", p + 1);
                snprintf(ret_dir, dir_size, "%s", dir);
                r = 0;
                break;
        }
        fclose(f);
        return r;
}

int rt_check_cgroup(const char *proc_root, const char *cgroup_root, char *why, size_t why_size) {
        char cg[2048], dir[128], path[PATH_MAX + 64], value[64];

        if (v1_cgroup_path(proc_root, "cpu", cg, sizeof(cg), dir, sizeof(dir)) < 0)
                return 0; /* no v1 cpu hierarchy: nothing to check here */

        /* Walk from our group up to the root: any ancestor at 0 starves us.
         * The file only exists with CONFIG_RT_GROUP_SCHED. Report the topmost
         * zero, since fixing below it is refused by the kernel. */
        char walk[2048], found[PATH_MAX + 64] = "";
        snprintf(walk, sizeof(walk), "%s", cg);
        for (;;) {
                snprintf(path, sizeof(path), "%s/%s%s/cpu.rt_runtime_us", cgroup_root, dir,
                         strcmp(walk, "/") == 0 ? "" : walk);
                if (read_line(path, value, sizeof(value)) == 0 && strtoll(value, NULL, 10) == 0)
                        snprintf(found, sizeof(found), "%s", path);
                char *slash = strrchr(walk, '/');
                if (!slash || slash == walk) {
                        if (strcmp(walk, "/") == 0)
                                break;
                        snprintf(walk, sizeof(walk), "/");
                        continue;
                }
                *slash = '\0';
        }
        if (!found[0])
                return 0;

        snprintf(why, why_size,
                 "real-time scheduling is disabled for this process's cpu cgroup: %s is 0 "
                 "(the kernel has RT group scheduling, and a group with no real-time runtime refuses "
                 "SCHED_FIFO with EPERM, even for root). Fix: write a runtime into cpu.rt_runtime_us of each "
                 "group from the top down (e.g. echo 950000 > %s, children may not exceed their parent), or "
                 "start pace-dispatcher in the root cpu cgroup (echo $PID > %s/%s/cgroup.procs).",
                 found, found, cgroup_root, dir);
        return -EPERM;
}

void rt_explain_eperm(const char *proc_root, const char *cgroup_root, char *why, size_t why_size) {
        char path[256], line[4096];
        bool v2_nonroot = false;
        FILE *f;

        if (rt_check_privileges(why, why_size) < 0 || rt_check_cgroup(proc_root, cgroup_root, why, why_size) < 0)
                return;

        snprintf(path, sizeof(path), "%s/self/cgroup", proc_root);
        f = fopen(path, "re");
        if (f) {
                bool v1_cpu = false;
                while (fgets(line, sizeof(line), f)) {
                        if (strncmp(line, "0::", 3) == 0 && strcmp(line, "0::/\n") != 0)
                                v2_nonroot = true;
                        if (strstr(line, ":cpu:") || strstr(line, ":cpu,") || strstr(line, ",cpu:") ||
                            strstr(line, ",cpu,"))
                                v1_cpu = true;
                }
                fclose(f);
                if (v1_cpu)
                        v2_nonroot = false;
        }
        if (v2_nonroot) {
                snprintf(why, why_size,
                         "SCHED_FIFO was refused (EPERM) although the process has CAP_SYS_NICE: on cgroup v2 with "
                         "RT group scheduling (CONFIG_RT_GROUP_SCHED), real-time tasks are only allowed in the "
                         "root cgroup. Run pace-dispatcher in the root cgroup, or boot with a kernel without RT "
                         "group scheduling.");
                return;
        }
        snprintf(why, why_size,
                 "SCHED_FIFO was refused (EPERM) although the process has CAP_SYS_NICE and its cgroups allow "
                 "real-time runtime; check for a seccomp filter or RestrictRealtime= in the unit.");
}
