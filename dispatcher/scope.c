/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-bus.h>
#include <systemd/sd-login.h>
#include <time.h>

#include "cgroup-limits.h"
#include "macro.h"
#include "proc-util.h"
#include "scope.h"

#define SCOPE_MAX_PIDS 256

static int bus_open(sd_bus **ret) {
        sd_bus *bus = NULL;
        int r;

        /* The bus daemon first; systemd's own socket (root only) where
         * there is none. */
        r = sd_bus_open_system(&bus);
        if (r >= 0) {
                *ret = bus;
                return 0;
        }
        r = sd_bus_new(&bus);
        if (r < 0)
                return r;
        r = sd_bus_set_address(bus, "unix:path=/run/systemd/private");
        if (r >= 0)
                r = sd_bus_start(bus);
        if (r < 0) {
                sd_bus_unref(bus);
                return r;
        }
        *ret = bus;
        return 0;
}

static int append_property_s(sd_bus_message *m, const char *name, const char *value) {
        return sd_bus_message_append(m, "(sv)", name, "s", value);
}

/* Descendants forked between our listing and the manager's move were born
 * where the tree was (orig, the client's unit): the manager moves them
 * after it, a few rounds for what they fork meanwhile. Best effort: one
 * left behind runs outside the reservation, at its own policy. */
/* The main thread's watchdog look, for the waits below: one process, one
 * main thread, one scope request at a time. */
static void (*tick_fn)(void *);
static void *tick_userdata;

void scope_set_tick(void *userdata, void (*tick)(void *tick_userdata), void *tick_userdata_) {
        tick_fn = tick;
        tick_userdata = tick_userdata_;
}

static void tick(void) {
        if (tick_fn)
                tick_fn(tick_userdata);
}

typedef struct CallState {
        bool done;
        sd_bus_message *reply;
} CallState;

static int on_reply(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        CallState *c = userdata;

        c->done = true;
        c->reply = sd_bus_message_ref(reply);
        return 0;
}

/* sd_bus_call(), looking (tick()) every 100 ms while the manager has not
 * answered: a manager busy with its own work (a loaded machine, an
 * emulated one) has taken over 2 s, the watchdog's limit. */
static int bus_call_ticking(sd_bus *bus, sd_bus_message *m, uint64_t timeout_usec, sd_bus_error *ret_error,
                            sd_bus_message **ret_reply) {
        _cleanup_(sd_bus_slot_unrefp) sd_bus_slot *slot = NULL;
        CallState c = {};
        int r;

        r = sd_bus_call_async(bus, &slot, m, on_reply, &c, timeout_usec);
        if (r < 0)
                return r;
        while (!c.done) {
                r = sd_bus_process(bus, NULL);
                if (r < 0)
                        return r;
                if (r > 0)
                        continue;
                tick();
                r = sd_bus_wait(bus, 100 * 1000);
                if (r < 0 && r != -EINTR)
                        return r;
        }
        r = sd_bus_message_get_errno(c.reply);
        if (r > 0) {
                (void) sd_bus_error_copy(ret_error, sd_bus_message_get_error(c.reply));
                sd_bus_message_unref(c.reply);
                return -r;
        }
        if (ret_reply)
                *ret_reply = c.reply;
        else
                sd_bus_message_unref(c.reply);
        return 1;
}

/* The processes that may go with req->pid (group_enter()'s rule), each
 * with its pidfd; *ret_n of them. */
static void list_movable(const GroupScopeRequest *req, pid_t *kids, int *pidfds, size_t max, size_t *ret_n) {
        size_t n = 0, k = 0;

        (void) proc_list_owned_descendants("/proc", req->pid, req->uid, req->max_threads, kids, pidfds, max, &n);
        /* Nor one a limit of its own holds (group_move_descendants()). */
        for (size_t i = 0; i < n; i++) {
                if (cgroup_limit_lifted_pid("/sys/fs/cgroup", kids[i], NULL, 0) != 0) {
                        safe_close(pidfds[i]);
                        continue;
                }
                kids[k] = kids[i];
                pidfds[k++] = pidfds[i];
        }
        *ret_n = k;
}

/* After the manager moved them: one that exited meanwhile may have left its
 * number to anyone, whom the manager then put into the scope. To the root
 * with it, and every pidfd closed. */
static void unmove_the_gone(const pid_t *kids, int *pidfds, size_t n) {
        for (size_t i = 0; i < n; i++) {
                if (pidfd_alive(pidfds[i]) < 0) {
                        char text[32];
                        snprintf(text, sizeof(text), "%" PRIi32, kids[i]);
                        (void) write_string_file("/sys/fs/cgroup/cgroup.procs", text);
                }
                safe_close(pidfds[i]);
        }
}

static void attach_stragglers(sd_bus *bus, const char *name, const GroupScopeRequest *req, const char *orig) {
        static pid_t kids[SCOPE_MAX_PIDS];
        static int pidfds[SCOPE_MAX_PIDS];

        for (int round = 0; round < 4; round++) {
                _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
                size_t n = 0, k = 0;
                int r;

                list_movable(req, kids, pidfds, ELEMENTSOF(kids), &n);
                for (size_t i = 0; i < n; i++) {
                        _cleanup_free_ char *cg = NULL;
                        if (sd_pid_get_cgroup(kids[i], &cg) >= 0 && strcmp(cg, orig) == 0) {
                                kids[k] = kids[i];
                                pidfds[k++] = pidfds[i];
                        } else
                                safe_close(pidfds[i]);
                }
                if (k == 0)
                        return;
                r = sd_bus_message_new_method_call(bus, &m, "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
                                                   "org.freedesktop.systemd1.Manager", "AttachProcessesToUnit");
                if (r >= 0)
                        r = sd_bus_message_append(m, "ss", name, "");
                if (r >= 0)
                        r = sd_bus_message_open_container(m, 'a', "u");
                for (size_t i = 0; r >= 0 && i < k; i++)
                        r = sd_bus_message_append(m, "u", (uint32_t) kids[i]);
                if (r >= 0)
                        r = sd_bus_message_close_container(m);
                if (r >= 0)
                        r = bus_call_ticking(bus, m, 5 * 1000000ULL, NULL, NULL);
                unmove_the_gone(kids, pidfds, k);
                if (r < 0)
                        return;
        }
}

/* What a unit's cgroup holds besides limits: BPF programs systemd attaches
 * there (address and socket filters, device policy, interface lists, its
 * own programs). A scope outside the unit has none of them, so moving a
 * process of such a unit there would let it out of its sandbox (issue 26,
 * case 3): it is dispatched where it is instead. */
static const char *const sandbox_properties[] = {
        "IPAddressDeny", "IPAddressAllow", "IPIngressFilterPath", "IPEgressFilterPath", "DeviceAllow",
        "SocketBindAllow", "SocketBindDeny", "RestrictNetworkInterfaces", "BPFProgram", NULL,
};

static bool is_sandbox_property(const char *name) {
        for (const char *const *p = sandbox_properties; *p; p++)
                if (strcmp(*p, name) == 0)
                        return true;
        return false;
}

/* Whether the variant at the reader's position (one of the properties
 * above, or DevicePolicy) sets anything. Consumes it when it does not; when
 * it does the caller reads no further. */
static int variant_sets(sd_bus_message *m, const char *name) {
        const char *contents = NULL, *s = NULL;
        char type;
        int r;

        r = sd_bus_message_peek_type(m, &type, &contents);
        if (r < 0)
                return r;
        r = sd_bus_message_enter_container(m, 'v', contents);
        if (r < 0)
                return r;
        if (strcmp(name, "DevicePolicy") == 0 && strcmp(contents, "s") == 0) {
                r = sd_bus_message_read(m, "s", &s);
                if (r < 0)
                        return r;
                if (strcmp(s, "auto") != 0)
                        return 1;
        } else if (contents[0] == 'a') {
                r = sd_bus_message_enter_container(m, 'a', contents + 1);
                if (r < 0)
                        return r;
                if (sd_bus_message_at_end(m, false) == 0)
                        return 1;
                r = sd_bus_message_exit_container(m);
        } else if (strcmp(contents, "(bas)") == 0) { /* RestrictNetworkInterfaces */
                int allow;
                r = sd_bus_message_enter_container(m, 'r', "bas");
                if (r >= 0)
                        r = sd_bus_message_read(m, "b", &allow);
                if (r >= 0)
                        r = sd_bus_message_enter_container(m, 'a', "s");
                if (r < 0)
                        return r;
                if (sd_bus_message_at_end(m, false) == 0)
                        return 1;
                r = sd_bus_message_exit_container(m);
                if (r >= 0)
                        r = sd_bus_message_exit_container(m);
        } else
                r = sd_bus_message_skip(m, contents);
        if (r < 0)
                return r;
        r = sd_bus_message_exit_container(m);
        return r < 0 ? r : 0;
}

/* The first sandbox property unit sets (its name into ret): 1, or 0 if
 * none; negative errno if the manager could not be asked. */
static int unit_sandboxed(sd_bus *bus, const char *unit, char *ret, size_t size) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL, *reply = NULL;
        _cleanup_free_ char *path = NULL;
        const char *dot = strrchr(unit, '.');
        char iface[64];
        int r;

        /* Properties of the cgroup live on the unit type's interface. */
        if (!dot || (strcmp(dot, ".service") != 0 && strcmp(dot, ".scope") != 0 && strcmp(dot, ".socket") != 0 &&
                     strcmp(dot, ".mount") != 0 && strcmp(dot, ".swap") != 0))
                return 0;
        snprintf(iface, sizeof(iface), "org.freedesktop.systemd1.%c%s", dot[1] - 'a' + 'A', dot + 2);
        r = sd_bus_path_encode("/org/freedesktop/systemd1/unit", unit, &path);
        if (r < 0)
                return r;
        r = sd_bus_message_new_method_call(bus, &m, "org.freedesktop.systemd1", path,
                                           "org.freedesktop.DBus.Properties", "GetAll");
        if (r >= 0)
                r = sd_bus_message_append(m, "s", iface);
        if (r >= 0)
                r = bus_call_ticking(bus, m, 5 * 1000000ULL, NULL, &reply);
        if (r < 0)
                return r;
        r = sd_bus_message_enter_container(reply, 'a', "{sv}");
        while (r >= 0 && (r = sd_bus_message_enter_container(reply, 'e', "sv")) > 0) {
                const char *name;
                r = sd_bus_message_read(reply, "s", &name);
                if (r < 0)
                        break;
                if (is_sandbox_property(name) || strcmp(name, "DevicePolicy") == 0) {
                        r = variant_sets(reply, name);
                        if (r > 0) {
                                snprintf(ret, size, "%s", name);
                                return 1;
                        }
                } else
                        r = sd_bus_message_skip(reply, "v");
                if (r >= 0)
                        r = sd_bus_message_exit_container(reply);
        }
        return r < 0 ? r : 0;
}

int scope_make(void *userdata, const GroupScopeRequest *req, GroupScopeAnswer *ret) {
        _cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
        _cleanup_(sd_bus_error_free) sd_bus_error error = SD_BUS_ERROR_NULL;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL, *reply = NULL;
        _cleanup_free_ char *unit = NULL, *slice = NULL, *user_unit = NULL, *orig = NULL;
        static pid_t kids[SCOPE_MAX_PIDS];
        static int pidfds[SCOPE_MAX_PIDS];
        _cleanup_close_ int pidfd = -EBADF;
        pid_t pid = req->pid;
        char name[96], description[128], sandbox[64];
        size_t n = 0;
        int r;

        if (sd_pid_get_user_unit(pid, &user_unit) >= 0)
                return -EOPNOTSUPP;
        r = sd_pid_get_unit(pid, &unit);
        if (r < 0)
                return r;
        r = sd_pid_get_slice(pid, &slice);
        if (r < 0)
                return r;
        r = sd_pid_get_cgroup(pid, &orig);
        if (r < 0)
                return r;
        /* Its exit ends the wait below at once (a client that exits as the
         * manager moves it cost the main thread a second each). */
        r = pidfd_open_checked(pid, &pidfd);
        if (r < 0)
                return r;
        r = bus_open(&bus);
        if (r < 0)
                return r;
        r = unit_sandboxed(bus, unit, sandbox, sizeof(sandbox));
        if (r < 0)
                return r;
        if (r > 0) {
                snprintf(ret->why, sizeof(ret->why),
                         "%s sets %s, which a scope outside it would not have; its reservation runs where it is, "
                         "without a group", unit, sandbox);
                return -EPERM;
        }
        snprintf(ret->home, sizeof(ret->home), "%s", orig);
        list_movable(req, kids, pidfds, ELEMENTSOF(kids) - 1, &n);
        snprintf(name, sizeof(name), "pace-%" PRIu64 "-%" PRIi32 ".scope", req->id, pid);
        snprintf(description, sizeof(description), "pace reservation %" PRIu64 " of pid %" PRIi32, req->id, pid);
        r = sd_bus_message_new_method_call(bus, &m, "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
                                           "org.freedesktop.systemd1.Manager", "StartTransientUnit");
        if (r >= 0)
                r = sd_bus_message_append(m, "ss", name, "fail");
        if (r >= 0)
                r = sd_bus_message_open_container(m, 'a', "(sv)");
        if (r >= 0)
                r = append_property_s(m, "Description", description);
        if (r >= 0)
                r = append_property_s(m, "Slice", slice);
        if (r >= 0)
                r = append_property_s(m, "CollectMode", "inactive-or-failed");
        if (r >= 0)
                r = sd_bus_message_append(m, "(sv)", "Delegate", "b", 1);
        if (r >= 0 && req->cpu_weight > 0)
                r = sd_bus_message_append(m, "(sv)", "CPUWeight", "t", req->cpu_weight);
        /* Stopping the client's own unit stops the scope too. */
        if (r >= 0)
                r = sd_bus_message_append(m, "(sv)", "PartOf", "as", 1, unit);
        if (r >= 0)
                r = sd_bus_message_open_container(m, 'r', "sv");
        if (r >= 0)
                r = sd_bus_message_append(m, "s", "PIDs");
        if (r >= 0)
                r = sd_bus_message_open_container(m, 'v', "au");
        if (r >= 0)
                r = sd_bus_message_open_container(m, 'a', "u");
        if (r >= 0)
                r = sd_bus_message_append(m, "u", (uint32_t) pid);
        for (size_t i = 0; r >= 0 && i < n; i++)
                r = sd_bus_message_append(m, "u", (uint32_t) kids[i]);
        for (int k = 0; r >= 0 && k < 4; k++)
                r = sd_bus_message_close_container(m);
        if (r >= 0)
                r = sd_bus_message_append(m, "a(sa(sv))", 0);
        if (r >= 0)
                r = bus_call_ticking(bus, m, 5 * 1000000ULL, &error, &reply);
        /* A restarted dispatcher asks again for a scope its predecessor
         * got: the process is in it already. */
        if (r < 0 && !sd_bus_error_has_name(&error, "org.freedesktop.systemd1.UnitExists")) {
                unmove_the_gone(kids, pidfds, n);
                return r;
        }
        bool created = r >= 0;

        /* The manager moves the processes as the scope starts. */
        r = -ETIMEDOUT;
        for (int i = 0; r == -ETIMEDOUT && i < 1000; i++) {
                _cleanup_free_ char *cg = NULL;
                if (pidfd_alive(pidfd) < 0) {
                        r = -ESRCH;
                        break;
                }
                if (sd_pid_get_cgroup(pid, &cg) >= 0) {
                        /* In the scope, or already in our subgroup of it. */
                        size_t len = strlen(cg), nlen = strlen(name);
                        if (len > 5 && strcmp(cg + len - 5, "/pace") == 0)
                                cg[len -= 5] = '\0';
                        if (len > nlen && strcmp(cg + len - nlen, name) == 0 && cg[len - nlen - 1] == '/') {
                                int k = snprintf(ret->scope, sizeof(ret->scope), "%s", cg);
                                r = k < 0 || (size_t) k >= sizeof(ret->scope) ? -ENAMETOOLONG : 0;
                                break;
                        }
                }
                tick();
                nanosleep(&(struct timespec) { .tv_nsec = 1000000 }, NULL);
        }
        /* Once the manager has moved them, so a number it moved for a
         * process gone meanwhile goes back out. */
        unmove_the_gone(kids, pidfds, n);
        if (r >= 0 && created)
                attach_stragglers(bus, name, req, orig);
        return r;
}
