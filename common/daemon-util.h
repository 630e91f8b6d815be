/* SPDX-License-Identifier: MIT */
#pragma once

/* For the daemons' main.c only, like log.h (it prints and logs): what
 * pace-broker and pace-rtkit start up with alike — their common options and
 * reading the configuration. */

#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "config.h"
#include "log.h"
#include "macro.h"
#include "pace-build-config.h"

typedef struct DaemonArgs {
        const char *config; /* NULL: PACE_DEFAULT_CONFIG, which may be missing */
        const char *runtime_dir;
        const char *user; /* --user, for a daemon that offers it */
        bool verbose;
} DaemonArgs;

/* A daemon's main(): run() returns its exit status, 0 or one it chose, or
 * a negative errno after logging it (exit status 1). One place says so for
 * every daemon, as systemd's DEFINE_MAIN_FUNCTION does. */
#define DAEMON_MAIN(run_func)                                   \
        int main(int argc, char **argv) {                       \
                int _r = run_func(argc, argv);                  \
                return _r < 0 ? EXIT_FAILURE : _r;              \
        }

/* Parses --config, --runtime-dir, -v, -h, --version and, with with_user,
 * --user into args (which holds the defaults). Returns 1 to go on, 0 after
 * --help (help()) or --version, or -EINVAL after saying what was wrong. */
static inline int daemon_parse_argv(int argc, char **argv, const char *program, void (*help)(void), bool with_user,
                                    DaemonArgs *args) {
        enum { ARG_CONFIG = 0x100, ARG_RUNTIME_DIR, ARG_USER, ARG_VERSION };
        struct option options[] = {
                { "config", required_argument, NULL, ARG_CONFIG },
                { "runtime-dir", required_argument, NULL, ARG_RUNTIME_DIR },
                { "verbose", no_argument, NULL, 'v' },
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, ARG_VERSION },
                { "user", required_argument, NULL, ARG_USER },
                {},
        };
        int c;

        if (!with_user) /* then getopt itself calls --user unknown */
                options[ELEMENTSOF(options) - 2] = (struct option) {};
        while ((c = getopt_long(argc, argv, "hv", options, NULL)) >= 0)
                switch (c) {
                case ARG_CONFIG:
                        args->config = optarg;
                        break;
                case ARG_RUNTIME_DIR:
                        args->runtime_dir = optarg;
                        break;
                case ARG_USER:
                        args->user = optarg;
                        break;
                case 'v':
                        args->verbose = true;
                        break;
                case 'h':
                        help();
                        return 0;
                case ARG_VERSION:
                        printf("%s %s\n", program, PACE_VERSION);
                        return 0;
                default:
                        fprintf(stderr, "Try '%s --help'.\n", program);
                        return -EINVAL;
                }
        if (optind < argc) {
                fprintf(stderr, "%s: unexpected argument '%s'. Try '%s --help'.\n", program, argv[optind], program);
                return -EINVAL;
        }
        return 1;
}

/* Reads and checks the configuration file at path, or at the default path
 * if NULL: that one may be missing, and then the built-in defaults apply.
 * Returns 0, 1 when the built-in defaults were used (worth a log line, in
 * the daemon's own style), or a negative errno with a sentence in why. */
static inline int daemon_read_config(const char *path, PaceConfig *config, char *why, size_t why_size) {
        int r;

        pace_config_init(config);
        r = pace_config_load(path ?: PACE_DEFAULT_CONFIG, config, why, why_size);
        if (r == -ENOENT && !path)
                return 1;
        if (r < 0 && !why[0])
                snprintf(why, why_size, "cannot read %s: %s", path ?: PACE_DEFAULT_CONFIG, strerror(-r));
        return r < 0 ? r : 0;
}

#define DAEMON_DEFAULTS_NOTE PACE_DEFAULT_CONFIG " does not exist; using built-in defaults"
