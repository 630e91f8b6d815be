/* SPDX-License-Identifier: MIT */
/* The cgroup v1 backend left out (-Dcgroup_v1=false): no libcgroup. A
 * host then offers pace no v1 hierarchy, whatever it mounts, so the group
 * code takes the unified hierarchy, or finds members in /proc where that
 * is not usable either (group_set_new(): -EOPNOTSUPP with no sentence is
 * "no v1 hierarchy here", not an error). */
#include <errno.h>

#include "group-backend.h"
#include "group.h"

int group_v1_root(char *ret, size_t size) {
        return -EOPNOTSUPP;
}

int group_cpu_mount(char *ret, size_t size) {
        return -EOPNOTSUPP;
}

int group_cpuset_mount(char *ret, size_t size) {
        return -EOPNOTSUPP;
}

int group_v1_remove(const char *name) {
        return -EOPNOTSUPP;
}

int group_v1_set_new(const char *name, uint32_t rt_share_ppm, pid_t owner, GroupSet **ret, char *why,
                     size_t why_size) {
        return -EOPNOTSUPP;
}
