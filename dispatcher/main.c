/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>

#include "config.h"
#include "dispatcher.h"
#include "macro.h"
#include "pace-build-config.h"
#include "pace-limits.h"

static const char *level_prefix(DispatcherLogLevel level) {
        /* sd-daemon "<N>" prefixes give the journal the priority; on a
         * terminal they would only be noise. */
        static const char *const journal[] = {
                [DISPATCHER_LOG_ERROR] = SD_ERR "pace-dispatcher: error: ",
                [DISPATCHER_LOG_WARNING] = SD_WARNING "pace-dispatcher: warning: ",
                [DISPATCHER_LOG_INFO] = SD_INFO "pace-dispatcher: ",
        };
        static const char *const plain[] = {
                [DISPATCHER_LOG_ERROR] = "pace-dispatcher: error: ",
                [DISPATCHER_LOG_WARNING] = "pace-dispatcher: warning: ",
                [DISPATCHER_LOG_INFO] = "pace-dispatcher: ",
        };
        return getenv("JOURNAL_STREAM") ? journal[level] : plain[level];
}

static void log_stderr(DispatcherLogLevel level, const char *message, void *userdata) {
        fprintf(stderr, "%s%s\n", level_prefix(level), message);
}

static void help(void) {
        printf("Usage: pace-dispatcher [--config FILE] [--runtime-dir DIR]\n"
               "Enforces pace's dispatch table at SCHED_FIFO %d.\n\n"
               "  --config FILE       configuration (default %s; missing means defaults)\n"
               "  --runtime-dir DIR   where pace-broker publishes the table (default %s)\n"
               "  --version           print the version\n",
               99, PACE_DEFAULT_CONFIG, PACE_DEFAULT_RUNTIME_DIR);
}

int main(int argc, char **argv) {
        static const struct option options[] = {
                { "config", required_argument, NULL, 'c' },
                { "runtime-dir", required_argument, NULL, 'r' },
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, 'V' },
                {},
        };
        _cleanup_(dispatcher_freep) Dispatcher *d = NULL;
        _cleanup_free_ char *config_error = NULL;
        const char *config_path = NULL, *runtime_dir = PACE_DEFAULT_RUNTIME_DIR;
        PaceConfig config;
        char err[1024] = "";
        int c, r;

        while ((c = getopt_long(argc, argv, "c:r:h", options, NULL)) >= 0)
                switch (c) {
                case 'c':
                        config_path = optarg;
                        break;
                case 'r':
                        runtime_dir = optarg;
                        break;
                case 'h':
                        help();
                        return EXIT_SUCCESS;
                case 'V':
                        printf("pace-dispatcher %s\n", PACE_VERSION);
                        return EXIT_SUCCESS;
                default:
                        return EXIT_FAILURE;
                }
        if (optind < argc) {
                fprintf(stderr, "pace-dispatcher: unexpected argument \"%s\"\n", argv[optind]);
                return EXIT_FAILURE;
        }

        pace_config_init(&config);
        r = pace_config_load(config_path ?: PACE_DEFAULT_CONFIG, &config, &config_error);
        if (r == -ENOENT && !config_path) {
                /* The default file is optional: its absence means defaults. */
        } else if (r < 0) {
                fprintf(stderr, "%scannot load configuration %s: %s\n", level_prefix(DISPATCHER_LOG_ERROR),
                        config_path ?: PACE_DEFAULT_CONFIG, config_error ?: strerror(-r));
                return EXIT_FAILURE;
        }

        r = dispatcher_new(&config, runtime_dir, &d, err, sizeof(err));
        if (r < 0) {
                log_stderr(DISPATCHER_LOG_ERROR, err[0] ? err : strerror(-r), NULL);
                return EXIT_FAILURE;
        }
        r = dispatcher_start(d, err, sizeof(err));
        if (r < 0) {
                fprintf(stderr, "%scannot start: %s\n", level_prefix(DISPATCHER_LOG_ERROR), err[0] ? err : strerror(-r));
                return EXIT_FAILURE;
        }

        const PaceConfig *used = dispatcher_config(d);
        char cpus[256] = "";
        for (uint32_t i = 0; i < used->n_cpus; i++)
                snprintf(cpus + strlen(cpus), sizeof(cpus) - strlen(cpus), "%s%d", i ? "," : "",
                         (int) used->cpus[i]);
        fprintf(stderr, "%srunning on CPUs %s, slot %llu us, waiting policy %s, table %s/table\n",
                level_prefix(DISPATCHER_LOG_INFO), cpus, (unsigned long long) (used->slot_ns / 1000),
                used->waiting == PACE_WAITING_FREEZE ? "freeze" : "nice", runtime_dir);
        (void) sd_notify(0, "READY=1\nSTATUS=dispatching");

        r = dispatcher_run(d, log_stderr, NULL);
        (void) sd_notify(0, "STOPPING=1");
        if (r < 0) {
                log_stderr(DISPATCHER_LOG_ERROR, strerror(-r), NULL);
                return EXIT_FAILURE;
        }
        return EXIT_SUCCESS;
}
