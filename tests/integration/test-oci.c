/* SPDX-License-Identifier: MIT */
/* pace-oci-hook under a real OCI runtime (crun), a real broker and
 * dispatcher: a container whose annotation asks for 60% of CPU 1 gets it
 * beside two hogs there, as its own user (the broker judges the request as
 * the container's init); one without the annotation is left as it was; a
 * refused "required" reservation stops the container with pace's sentence,
 * a refused optional one lets it run; the reservation ends with the
 * container.
 *
 * The runtime: crun, without cgroups of its own (--cgroup-manager=disabled:
 * crun 1.8 refuses this host's hybrid layout) in a mount namespace of its
 * own without the unified mount; the container runs busybox's sh from a
 * rootfs made here. Skipped without root, crun or busybox (tools/install-deps
 * installs both). The container is pinned to CPU 1 by the affinity crun
 * inherits. Safety: every container is killed and deleted by name, crun's
 * process by pid, whatever the case did. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker-harness.h"
#include "cpu-share.h"
#include "macro.h"
#include "stack-harness.h"
#include "test.h"

#define CONTAINER_UID 60001
#define CRUN "/usr/bin/crun"
#define BUSYBOX "/bin/busybox"

typedef struct Container {
        char bundle[128];
        char name[64];
        char log[192];
        pid_t crun; /* crun run, in its own mount namespace */
        pid_t init; /* the container's sh, on the host */
} Container;

static bool oci_skip(void) {
        return skip() || access(CRUN, X_OK) < 0 || access(BUSYBOX, X_OK) < 0 || !getenv("PACE_OCI_HOOK") ||
               !getenv("PACECTL");
}

/* A bundle whose container runs as CONTAINER_UID and spins (or sleeps a
 * second and exits: quick; the hook still finds it), with annotation (NULL: none) and the hook in poststart. */
static void bundle_make(Container *c, const Stack *s, const char *annotation, bool quick) {
        char path[256], hook[256], annotations[512];
        static unsigned n;

        snprintf(c->bundle, sizeof(c->bundle), "/tmp/pace-test-oci-XXXXXX");
        ASSERT_TRUE(mkdtemp(c->bundle));
        snprintf(c->name, sizeof(c->name), "pace-test-%d-%u", (int) getpid(), n++);
        snprintf(c->log, sizeof(c->log), "%s/crun.log", c->bundle);
        snprintf(path, sizeof(path), "%s/rootfs", c->bundle);
        ASSERT_OK(mkdir(path, 0755));
        snprintf(path, sizeof(path), "%s/rootfs/bin", c->bundle);
        ASSERT_OK(mkdir(path, 0755));
        char cmd[1024];
        snprintf(cmd, sizeof(cmd),
                 "cp " BUSYBOX " %s/rootfs/bin/busybox && ln -s busybox %s/rootfs/bin/sh && ln -s busybox "
                 "%s/rootfs/bin/sleep && mkdir %s/rootfs/dev %s/rootfs/proc",
                 c->bundle, c->bundle, c->bundle, c->bundle, c->bundle);
        ASSERT_EQ(system(cmd), 0);
        snprintf(hook, sizeof(hook), "%s", getenv("PACE_OCI_HOOK"));
        /* crun sends a hook's output nowhere unless told (podman keeps it
         * in its own log). */
        snprintf(annotations, sizeof(annotations), "\"run.oci.hooks.stderr\": \"%s/hook.log\"%s%s%s", c->bundle,
                 annotation ? ", \"io.pace.reservation\": \"" : "", annotation ?: "", annotation ? "\"" : "");
        char config[4096];
        snprintf(config, sizeof(config),
                 "{ \"ociVersion\": \"1.0.2\",\n"
                 "  \"process\": { \"terminal\": false, \"user\": { \"uid\": %d, \"gid\": %d }, \"cwd\": \"/\",\n"
                 "    \"args\": [\"/bin/sh\", \"-c\", \"%s\"], \"env\": [\"PATH=/bin\"],\n"
                 "    \"noNewPrivileges\": true },\n"
                 "  \"root\": { \"path\": \"rootfs\", \"readonly\": true },\n"
                 "  \"hostname\": \"pace-test\",\n"
                 "  \"mounts\": [ { \"destination\": \"/proc\", \"type\": \"proc\", \"source\": \"proc\" } ],\n"
                 "  \"hooks\": { \"poststart\": [ { \"path\": \"%s\", \"args\": [\"pace-oci-hook\", \"--socket\", "
                 "\"%s\"] } ] },\n"
                 "  \"annotations\": { %s },\n"
                 "  \"linux\": { \"namespaces\": [ { \"type\": \"pid\" }, { \"type\": \"mount\" }, { \"type\": "
                 "\"ipc\" }, { \"type\": \"uts\" } ] } }\n",
                 CONTAINER_UID, CONTAINER_UID, quick ? "sleep 1" : "while :; do :; done", hook, s->broker.socket,
                 annotations);
        snprintf(path, sizeof(path), "%s/config.json", c->bundle);
        ASSERT_OK(test_write_text(path, config));
}

static void container_end(Container *c);

/* The one container a case runs, ended at exit too: a failed assertion
 * exits, and must not leave it spinning. */
static Container *running;

static void end_running(void) {
        if (running)
                container_end(running);
}

/* crun run, detached from us by nothing but its own mount namespace. */
static void container_start(Container *c) {
        static bool registered;
        if (!registered && atexit(end_running) == 0)
                registered = true;
        running = c;
        c->crun = fork();
        ASSERT_OK(c->crun);
        if (c->crun == 0) {
                int fd = open(c->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
                int null = open("/dev/null", O_RDWR | O_CLOEXEC);
                if (fd < 0 || null < 0)
                        _exit(125);
                dup2(null, STDIN_FILENO);
                dup2(fd, STDOUT_FILENO);
                dup2(fd, STDERR_FILENO);
                alarm(60);
                pin(STACK_CPU);
                if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                        _exit(126);
                (void) umount2("/sys/fs/cgroup/unified", MNT_DETACH);
                execl(CRUN, "crun", "--cgroup-manager=disabled", "run", "-b", c->bundle, c->name, (char *) NULL);
                _exit(127);
        }
}

/* A shell command's output (stdout and whatever it redirects there) in out,
 * NUL-terminated: its exit status, -1 if it could not run or was killed. */
static int capture(const char *cmd, char *out, size_t size) {
        FILE *f = popen(cmd, "r");
        size_t n = f ? fread(out, 1, size - 1, f) : 0;
        out[n] = '\0';
        int status = f ? pclose(f) : -1;
        return status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The container's init on the host, from crun's state, once it runs. */
static pid_t container_init(const Container *c) {
        for (int i = 0; i < 300; i++) {
                char cmd[160], out[4096] = "";
                snprintf(cmd, sizeof(cmd), CRUN " state %s 2>/dev/null", c->name);
                (void) capture(cmd, out, sizeof(out));
                const char *p = strstr(out, "\"pid\":");
                if (p && strstr(out, "\"running\"")) {
                        long pid = strtol(p + 6, NULL, 10);
                        if (pid > 1)
                                return (pid_t) pid;
                }
                sleep_ms(10);
        }
        return 0;
}

/* crun's exit status once it ends (within timeout_ms), -1 if it did not. */
static int crun_wait(Container *c, unsigned timeout_ms) {
        for (unsigned i = 0; i < timeout_ms / 10; i++) {
                int status;
                if (waitpid(c->crun, &status, WNOHANG) == c->crun) {
                        c->crun = 0;
                        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                }
                sleep_ms(10);
        }
        return -1;
}

static void container_end(Container *c) {
        char cmd[400];

        running = NULL;
        /* Either may find nothing to do: the container ended already. */
        snprintf(cmd, sizeof(cmd), CRUN " kill %s KILL >/dev/null 2>&1", c->name);
        if (system(cmd) != 0)
                printf("  %s: nothing to kill\n", c->name);
        if (c->crun > 0 && crun_wait(c, 5000) < 0) {
                kill(c->crun, SIGKILL);
                waitpid(c->crun, NULL, 0);
        }
        snprintf(cmd, sizeof(cmd), CRUN " delete -f %s >/dev/null 2>&1; rm -rf %s", c->name, c->bundle);
        if (system(cmd) != 0)
                printf("  %s: crun delete or rm failed\n", c->name);
}

/* What crun and the hook said: crun's output, then the hook's. */
static void read_log(const Container *c, char *buf, size_t size) {
        char hook_log[200];
        size_t n = 0;

        snprintf(hook_log, sizeof(hook_log), "%s/hook.log", c->bundle);
        const char *paths[] = { c->log, hook_log };
        for (size_t i = 0; i < ELEMENTSOF(paths); i++) {
                FILE *f = fopen(paths[i], "re");
                if (f) {
                        n += fread(buf + n, 1, size - 1 - n, f);
                        fclose(f);
                }
        }
        buf[n] = '\0';
}

/* The log once it holds needle (the hook's line: crun reports the
 * container running before its poststart hooks end), within 5 s. */
static void read_log_with(const Container *c, const char *needle, char *buf, size_t size) {
        for (int i = 0; i < 500; i++) {
                read_log(c, buf, size);
                if (strstr(buf, needle))
                        return;
                sleep_ms(10);
        }
}

/* A grant listing pid as its process, in the broker's status (a child
 * asks: libpace waits for ever). */
static bool broker_lists(const Stack *s, pid_t pid) {
        char cmd[400], out[8192] = "";
        snprintf(cmd, sizeof(cmd), "timeout 5 %s --socket %s status 2>&1", getenv("PACECTL"), s->broker.socket);
        (void) capture(cmd, out, sizeof(out));
        char needle[32];
        snprintf(needle, sizeof(needle), " %d ", (int) pid);
        return strstr(out, needle) != NULL;
}

/* A hog in a session of its own: the container's init is one (crun
 * made it), and with autogroups the kernel shares a CPU between sessions
 * first, so two hogs of one session would weigh as one beside it. */
static void session_hog(const void *arg) {
        (void) setsid();
        hog(arg);
}

/* The container's share of CPU 1 beside two hogs there. */
static double share_beside_hogs(pid_t init) {
        pid_t hogs[2] = { spawn(session_hog, NULL), spawn(session_hog, NULL) };
        double got[3];

        sleep_ms(300);
        share_measure(STACK_CPU, (pid_t[]) { init, hogs[0], hogs[1] }, 3, 2000, got);
        printf("  container %.1f%%, hogs %.1f%% and %.1f%% (others %.1f)\n", got[0], got[1], got[2],
               share_last_others);
        reap(hogs[0]);
        reap(hogs[1]);
        return got[0];
}

/* unified: the dispatcher sees the unified hierarchy only (no cpu
 * controller there on this host: its waiting members are held by
 * SCHED_IDLE and the budget). */
static void annotated_container(bool unified) {
        Stack s = { .unified_only = unified };
        Container c = { 0 };
        char log[4096];

        stack_start(&s);
        bundle_make(&c, &s, "period=20ms,util=60%,cpu=1", false);
        container_start(&c);
        c.init = container_init(&c);
        read_log_with(&c, "pace-oci-hook: ", log, sizeof(log));
        printf("  crun's output: %s", log);
        ASSERT_CMP(c.init, >, 0);
        ASSERT_CONTAINS(log, "pace-oci-hook: container pace-test-");
        ASSERT_CONTAINS(log, "60% every 20ms on CPU 1 for its processes, as uid 60001");
        ASSERT_TRUE(broker_lists(&s, c.init));
        /* Two hogs and the container at nice 0 share CPU 1 in thirds
         * without a reservation (the next case); with 60% of it reserved
         * the container gets that and a third of the rest. The bound is
         * its grant less the 5 points the share tests allow. */
        double got = share_beside_hogs(c.init);
        container_end(&c);
        ASSERT_CMP(got, >=, 55.0 - share_foreign());
        /* The broker holds a pidfd of the init: gone, so is the grant. */
        bool listed = true;
        for (int i = 0; i < 30 && (listed = broker_lists(&s, c.init)); i++)
                sleep_ms(100);
        ASSERT_FALSE(listed);
        stack_stop(&s);
}

TEST(an_annotated_container_gets_its_share_as_its_own_user_and_gives_it_back_at_its_end) {
        if (oci_skip())
                TEST_SKIP("needs root, 2 CPUs, the built daemons, crun and busybox");
        annotated_container(false);
}

TEST(the_same_on_the_unified_only_view) {
        if (oci_skip())
                TEST_SKIP("needs root, 2 CPUs, the built daemons, crun and busybox");
        annotated_container(true);
}

TEST(a_container_without_the_annotation_is_left_as_it_was) {
        Stack s = { 0 };
        Container c = { 0 };
        char log[4096];

        if (oci_skip())
                TEST_SKIP("needs root, 2 CPUs, the built daemons, crun and busybox");
        stack_start(&s);
        bundle_make(&c, &s, NULL, false);
        container_start(&c);
        c.init = container_init(&c);
        ASSERT_CMP(c.init, >, 0);
        double got = share_beside_hogs(c.init);
        int policy = policy_of(c.init);
        /* The hook ran (crun runs it for every container: picking them by
         * annotation is podman's and CRI-O's), long ago by now, and said
         * and asked nothing. */
        bool listed = broker_lists(&s, c.init);
        read_log(&c, log, sizeof(log));
        container_end(&c);
        ASSERT_TRUE(strstr(log, "pace-oci-hook") == NULL);
        ASSERT_FALSE(listed);
        ASSERT_EQ(policy, SCHED_OTHER);
        /* A third, give or take the window's noise: nowhere near 55. */
        ASSERT_CMP(got, <=, 45.0);
        stack_stop(&s);
}

/* A container asking for more than the administrator's free share leaves
 * to reserve, run to its end (quick: it would end by itself): crun's exit
 * status, what crun and the hook said in log, and whether its init was
 * still found running after crun ended. */
static int run_refused(const char *annotation, bool quick, char *log, size_t size, pid_t *ret_init) {
        Stack s = { 0 };
        Container c = { 0 };

        stack_start(&s);
        bundle_make(&c, &s, annotation, quick);
        container_start(&c);
        int status = crun_wait(&c, 20000);
        read_log(&c, log, size);
        printf("  crun's output: %s", log);
        *ret_init = container_init(&c);
        container_end(&c);
        stack_stop(&s);
        return status;
}

TEST(a_refused_required_reservation_stops_the_container_with_paces_reason) {
        char log[4096];
        pid_t init;

        if (oci_skip())
                TEST_SKIP("needs root, 2 CPUs, the built daemons, crun and busybox");
        int status = run_refused("period=20ms,util=95%,cpu=1,required", false, log, sizeof(log), &init);
        ASSERT_CMP(status, >, 0);
        ASSERT_EQ(init, 0);
        ASSERT_CONTAINS(log, "pace refused the reservation: ");
        ASSERT_CONTAINS(log, "the annotation says required: the container is stopped");
}

TEST(a_refused_optional_reservation_lets_the_container_run_and_says_so) {
        char log[4096];
        pid_t init;

        if (oci_skip())
                TEST_SKIP("needs root, 2 CPUs, the built daemons, crun and busybox");
        ASSERT_EQ(run_refused("period=20ms,util=95%,cpu=1", true, log, sizeof(log), &init), 0);
        ASSERT_CONTAINS(log, "pace refused the reservation: ");
        ASSERT_CONTAINS(log, "it runs without a reservation");
}

/* podman, as a user runs it: the hook found through the hooks.d file pace
 * installs (its path and the broker's socket changed to this build's), the
 * annotation given on the command line, where podman splits values at
 * commas (hence ';'), the container detached, then removed. Its storage in
 * a directory of the test's. */
#define PODMAN "/usr/bin/podman"

static int podman(const char *dir, const char *args, char *out, size_t size) {
        char cmd[2048];
        snprintf(cmd, sizeof(cmd),
                 "unshare -m sh -c 'umount /sys/fs/cgroup/unified 2>/dev/null; exec taskset -c %d timeout 60 " PODMAN
                 " --root %s/root --runroot %s/run --cgroup-manager=cgroupfs --hooks-dir %s/hooks %s' 2>&1",
                 STACK_CPU, dir, dir, dir, args);
        return capture(cmd, out, size);
}

TEST(podman_reserves_an_annotated_container_through_the_installed_hooks_file) {
        Stack s = { 0 };
        char dir[64] = "/tmp/pace-test-podman-XXXXXX", cmd[2048], out[8192], args[1024];

        if (oci_skip() || access(PODMAN, X_OK) < 0 || !getenv("PACE_OCI_HOOK_JSON"))
                TEST_SKIP("needs root, 2 CPUs, the built daemons, podman and busybox");
        stack_start(&s);
        ASSERT_TRUE(mkdtemp(dir));
        snprintf(cmd, sizeof(cmd),
                 "mkdir -p %s/hooks %s/rootfs/bin && cp " BUSYBOX " %s/rootfs/bin/ && ln -s busybox %s/rootfs/bin/sh && "
                 "python3 -c 'import json, sys; h = json.load(open(sys.argv[1])); h[\"hook\"][\"path\"] = sys.argv[2]; "
                 "h[\"hook\"][\"env\"] = [\"PACE_SOCKET=\" + sys.argv[3]]; json.dump(h, open(sys.argv[4], \"w\"))' "
                 "%s %s %s %s/hooks/pace-oci-hook.json",
                 dir, dir, dir, dir, getenv("PACE_OCI_HOOK_JSON"), getenv("PACE_OCI_HOOK"), s.broker.socket, dir);
        ASSERT_EQ(system(cmd), 0);
        snprintf(args, sizeof(args),
                 "run -d --name pace-test --network host --cgroups disabled --user %d:%d --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 --annotation "
                 "io.pace.reservation=\"period=20ms;util=60%%;cpu=1\" --rootfs %s/rootfs /bin/sh -c \"while :; do :; "
                 "done\"",
                 CONTAINER_UID, CONTAINER_UID, dir);
        int status = podman(dir, args, out, sizeof(out));
        printf("  podman run: %s", out);
        pid_t init = 0;
        if (status == 0) {
                int r = podman(dir, "inspect --format {{.State.Pid}} pace-test", out, sizeof(out));
                printf("  podman inspect (%d): %s", r, out);
                if (r == 0)
                        init = (pid_t) strtol(out, NULL, 10);
        }
        bool listed = init > 0 && broker_lists(&s, init);
        double got = init > 0 ? share_beside_hogs(init) : 0;
        (void) podman(dir, "rm -f -t 0 pace-test", out, sizeof(out));
        /* podman's cleanup of the container runs on after rm returns and
         * writes into its storage: removed until it stays gone (1 s). */
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        for (int i = 0, gone = 0; i < 100 && gone < 10; i++) {
                ASSERT_EQ(system(cmd), 0);
                gone = access(dir, F_OK) < 0 ? gone + 1 : 0;
                sleep_ms(100);
        }
        ASSERT_TRUE(access(dir, F_OK) < 0);
        ASSERT_EQ(status, 0);
        ASSERT_CMP(init, >, 0);
        ASSERT_TRUE(listed);
        ASSERT_CMP(got, >=, 55.0 - share_foreign());
        bool still = true;
        for (int i = 0; i < 30 && (still = broker_lists(&s, init)); i++)
                sleep_ms(100);
        ASSERT_FALSE(still);
        stack_stop(&s);
}

TEST_MAIN()
