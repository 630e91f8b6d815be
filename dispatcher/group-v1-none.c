/* SPDX-License-Identifier: MIT */
/* The cgroup v1 backend left out (-Dcgroup_v1=false): no libcgroup. A
 * host then offers pace no v1 hierarchy, whatever it mounts, so the group
 * code takes the unified hierarchy, or finds members in /proc where that
 * is not usable either. Only the set-less entries are here: with no set
 * ever made of this backend, nothing reaches the others. */
#include <errno.h>

#include "group-backend.h"
#include "group.h"

/* -EOPNOTSUPP with no sentence: "no v1 hierarchy here", not an error
 * (group_set_new() tries the next backend). */
static int none_set_new(const char *name, uint32_t rt_share_ppm, pid_t owner, GroupSet **ret, char *why,
                        size_t why_size) {
        return -EOPNOTSUPP;
}

static int none_hierarchy(bool new_groups, char *ret, size_t size) {
        return -EOPNOTSUPP;
}

static int none_remove_instance(const char *root, const char *name) {
        return -EOPNOTSUPP;
}

int group_cpu_mount(char *ret, size_t size) {
        return -EOPNOTSUPP;
}

int group_cpuset_mount(char *ret, size_t size) {
        return -EOPNOTSUPP;
}

const GroupBackend group_backend_v1 = {
        .name = "cgroup v1 (not built)",
        .set_new = none_set_new,
        .hierarchy = none_hierarchy,
        .remove_instance = none_remove_instance,
};
