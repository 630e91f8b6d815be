/* SPDX-License-Identifier: MIT */
/* pace-oci-hook: an OCI runtime hook (poststart) that asks pace-broker for
 * the reservation a container's annotation names, for the container's
 * whole process tree, on behalf of its init. The runtime gives the
 * container's state on stdin. poststart, not prestart: only once the
 * container's program runs is its init the user the container runs as,
 * and the broker judges the request as that user (at prestart it is still
 * the runtime's root). Exit 0: reserved, or nothing asked, or refused but
 * not required (a warning on stderr); 1: a required reservation was
 * refused, and the hook has killed the container's init (a runtime does
 * not stop a container whose poststart hook fails), or the annotation is
 * malformed; the reason on stderr. docs/containers.md. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "broker-client.h"
#include "hook-core.h"
#include "macro.h"
#include "pace-limits.h"
#include "parse-util.h"
#include "proc-util.h"
#include "proto-cleanup.h"

#define PROGRAM "pace-oci-hook"
/* A hook holds up the container's start: a broker that does not answer
 * in this long is as good as a refusal. */
#define BROKER_TIMEOUT_USEC (2 * 1000 * 1000)

static int read_all(int fd, char *buf, size_t size, size_t *ret_n) {
        size_t n = 0;

        for (;;) {
                if (n == size)
                        return -EFBIG;
                ssize_t k = read(fd, buf + n, size - n);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        return -errno;
                if (k == 0)
                        break;
                n += (size_t) k;
        }
        *ret_n = n;
        return 0;
}

/* Refused or failed: fatal only where the annotation requires it, and
 * then the hook stops the container itself, through the pidfd it took of
 * the init before it read anything about it (never a successor with the
 * same number). */
static int outcome(const OciState *s, int pidfd, const char *what) {
        fprintf(stderr, PROGRAM ": container %s (pid %d): %s%s\n", s->id, (int) s->pid, what,
                s->want.required ? "; the annotation says required: the container is stopped"
                                 : "; it runs without a reservation");
        if (!s->want.required)
                return EXIT_SUCCESS;
        if (pidfd >= 0 && syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0) < 0 && errno != ESRCH)
                fprintf(stderr, PROGRAM ": container %s: cannot stop its init: %s\n", s->id, strerror(errno));
        return EXIT_FAILURE;
}

static int reserve(const OciState *s, const char *socket_path) {
        _cleanup_(broker_client_freep) BrokerClient *client = NULL;
        _cleanup_(pace_response_freep) Pace__Response *resp = NULL;
        Pace__Request req;
        Pace__ReserveRequest body;
        Pace__Caller caller;
        ProcInfo info;
        char what[1200], period[32], share[32];
        int r;

        _cleanup_close_ int pidfd = -EBADF;
        r = pidfd_open_checked(s->pid, &pidfd);
        if (r >= 0)
                r = proc_info_read("/proc", s->pid, &info);
        if (r >= 0)
                r = pidfd_alive(pidfd);
        if (r < 0) {
                snprintf(what, sizeof(what), "its init cannot be read in /proc: %s", strerror(-r));
                return outcome(s, pidfd, what);
        }
        oci_request_build(&s->want, s->pid, info.uid, info.start_time, &req, &body, &caller);
        r = broker_client_new(socket_path, BROKER_TIMEOUT_USEC, &client);
        if (r >= 0)
                r = broker_client_exchange(client, &req, &resp);
        if (r < 0) {
                snprintf(what, sizeof(what), "pace-broker at %s does not answer: %s", socket_path, strerror(-r));
                return outcome(s, pidfd, what);
        }
        if (resp->body_case == PACE__RESPONSE__BODY_ERROR && resp->error) {
                snprintf(what, sizeof(what), "pace refused the reservation: %s",
                         resp->error->message ? resp->error->message : "(no reason given)");
                return outcome(s, pidfd, what);
        }
        if (resp->body_case != PACE__RESPONSE__BODY_GRANT || !resp->grant) {
                snprintf(what, sizeof(what), "pace-broker at %s gave an answer this hook does not understand",
                         socket_path);
                return outcome(s, pidfd, what);
        }
        const Pace__Grant *g = resp->grant;
        fprintf(stderr, PROGRAM ": container %s (pid %d): reservation %" PRIu64 ", %s every %s on CPU %" PRIi32
                " for its processes, as uid %u\n", s->id, (int) s->pid, g->id,
                format_ppm(share, sizeof(share), g->requested_utilization_ppm),
                format_duration(period, sizeof(period), g->period_ns), g->cpu, (unsigned) info.uid);
        return EXIT_SUCCESS;
}

static void usage(FILE *f) {
        fprintf(f, "Usage: " PROGRAM " [--socket PATH]\n"
                   "An OCI runtime hook (poststart): reads the container's state on stdin and\n"
                   "asks pace-broker for the reservation its " OCI_ANNOTATION " annotation names, e.g.\n"
                   "  " OCI_ANNOTATION "=period=20ms,util=30%%[,cpu=N][,kind=slots|server|aligned][,required]\n"
                   "  --socket PATH  the broker's socket (default $PACE_SOCKET, else " PACE_DEFAULT_SOCKET ")\n");
}

int main(int argc, char **argv) {
        static const struct option options[] = {
                { "socket", required_argument, NULL, 's' },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        const char *socket_path = getenv("PACE_SOCKET") ?: PACE_DEFAULT_SOCKET;
        static char buf[OCI_STATE_MAX];
        char why[600];
        OciState s;
        size_t n = 0;
        int c, r;

        while ((c = getopt_long(argc, argv, "h", options, NULL)) >= 0)
                switch (c) {
                case 's':
                        socket_path = optarg;
                        break;
                case 'h':
                        usage(stdout);
                        return EXIT_SUCCESS;
                default:
                        usage(stderr);
                        return EXIT_FAILURE;
                }
        if (optind < argc) {
                fprintf(stderr, PROGRAM ": unexpected argument \"%s\"\n", argv[optind]);
                return EXIT_FAILURE;
        }

        r = read_all(STDIN_FILENO, buf, sizeof(buf), &n);
        if (r < 0) {
                fprintf(stderr, PROGRAM ": cannot read the container's state on stdin: %s\n",
                        r == -EFBIG ? "it is larger than 256 KiB" : strerror(-r));
                return EXIT_FAILURE;
        }
        if (oci_state_parse(buf, n, &s, why, sizeof(why)) < 0) {
                fprintf(stderr, PROGRAM ": the container's state: %s\n", why);
                return EXIT_FAILURE;
        }
        /* Not ours to touch; or stopped (the reservation ended with its
         * process: the broker holds a pidfd of it). */
        if (!s.annotated || s.pid <= 0 || strcmp(s.status, "stopped") == 0)
                return EXIT_SUCCESS;
        return reserve(&s, socket_path);
}
