/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "macro.h"
#include "test.h"

/* Room for any of the parser's sentences. */
#define WHY_SIZE 1024

/* why: NULL, or WHY_SIZE bytes. */
static int parse_string(const char *json, PaceConfig *c, char *why) {
        return pace_config_parse(json, strlen(json), c, why, why ? WHY_SIZE : 0);
}

/* Parses json, which must fail with -EINVAL and a message containing every
 * needle; *config must not change. The message is shown, for the log. */
#define ASSERT_PARSE_FAILS(json, ...)                                                     \
        do {                                                                              \
                const char *needles_[] = { __VA_ARGS__ };                                 \
                char msg_[WHY_SIZE] = "";                                                 \
                PaceConfig before_, after_;                                               \
                memset(&before_, 0xa5, sizeof(before_));                                  \
                memcpy(&after_, &before_, sizeof(before_));                               \
                ASSERT_ERR(parse_string((json), &after_, msg_), -EINVAL);                 \
                ASSERT_TRUE(msg_[0] != '\0');                                             \
                printf("  %s\n    -> %s\n", (json), msg_);                                \
                for (size_t k_ = 0; k_ < ELEMENTSOF(needles_); k_++)                      \
                        ASSERT_CONTAINS(msg_, needles_[k_]);                              \
                ASSERT_TRUE(memcmp(&before_, &after_, sizeof(before_)) == 0);             \
        } while (0)

#define ASSERT_PARSES(json, c)                                                            \
        do {                                                                              \
                char msg_[WHY_SIZE] = "garbage";                                          \
                int r_ = parse_string((json), (c), msg_);                                 \
                if (r_ < 0)                                                               \
                        TEST_FAIL_("parsing %s failed: %d: %s", (json), r_,               \
                                   msg_[0] ? msg_ : "(no message)");                      \
                ASSERT_TRUE(msg_[0] == '\0');                                             \
        } while (0)

/* json parses, and sets field to value. */
#define ASSERT_PARSES_TO(json, field, value)                                              \
        do {                                                                              \
                PaceConfig c_;                                                            \
                ASSERT_PARSES(json, &c_);                                                 \
                ASSERT_EQ(c_.field, value);                                               \
        } while (0)

static void assert_config_eq(const PaceConfig *a, const PaceConfig *b) {
        ASSERT_EQ(a->non_rt_share_ppm, b->non_rt_share_ppm);
        ASSERT_EQ(a->slot_ns, b->slot_ns);
        ASSERT_EQ(a->non_rt_max_gap_ns, b->non_rt_max_gap_ns);
        ASSERT_EQ(a->policy, b->policy);
        ASSERT_EQ(a->max_frame_ns, b->max_frame_ns);
        ASSERT_EQ(a->max_reservations_per_user, b->max_reservations_per_user);
        ASSERT_EQ(a->max_utilization_per_user_ppm, b->max_utilization_per_user_ppm);
        ASSERT_EQ(a->max_connections, b->max_connections);
        ASSERT_EQ(a->client_timeout_ns, b->client_timeout_ns);
        ASSERT_EQ(a->switch_cost_ns, b->switch_cost_ns);
        ASSERT_EQ(a->waiting, b->waiting);
        ASSERT_EQ(a->rtkit, b->rtkit);
        ASSERT_EQ(a->rtkit_period_ns, b->rtkit_period_ns);
        ASSERT_EQ(a->rtkit_utilization_ppm, b->rtkit_utilization_ppm);
        ASSERT_EQ(a->rtkit_kind, b->rtkit_kind);
        ASSERT_EQ(a->rtkit_max_realtime_priority, b->rtkit_max_realtime_priority);
        ASSERT_EQ(a->rtkit_min_nice_level, b->rtkit_min_nice_level);
        ASSERT_EQ(a->rtkit_rttime_usec_max, b->rtkit_rttime_usec_max);
        ASSERT_EQ(a->cpus_set, b->cpus_set);
        ASSERT_EQ(a->n_cpus, b->n_cpus);
        for (uint32_t i = 0; i < a->n_cpus && i < PACE_MAX_CPUS; i++)
                ASSERT_EQ(a->cpus[i], b->cpus[i]);
}

/* The source tree's config/pace.json. meson runs tests from the build
 * directory and compiles with a __FILE__ relative to it (or absolute). */
static const char *shipped_config_path(char *buf, size_t size) {
        const char *env = getenv("PACE_SHIPPED_CONFIG");
        const char *file = __FILE__, *tail = "tests/unit/test-config.c";
        size_t n = strlen(file), t = strlen(tail);
        const char *prefixes[] = { "", "../", "../../" };

        if (env)
                return env;
        if (n < t || strcmp(file + n - t, tail) != 0)
                return NULL;
        for (size_t i = 0; i < ELEMENTSOF(prefixes); i++) {
                if (file[0] == '/' && i > 0)
                        break;
                snprintf(buf, size, "%s%.*sconfig/pace.json", prefixes[i], (int) (n - t), file);
                if (access(buf, R_OK) == 0)
                        return buf;
        }
        return NULL;
}

static char *write_temp(const char *content, size_t size) {
        char *path = strdup("/tmp/test-config-XXXXXX");
        int fd;

        ASSERT_TRUE(path);
        fd = mkstemp(path);
        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(write(fd, content, size), (ssize_t) size);
        ASSERT_OK(close(fd));
        return path;
}

TEST(defaults) {
        PaceConfig c;

        pace_config_init(&c);
        ASSERT_EQ(c.non_rt_share_ppm, 250000);
        ASSERT_EQ(c.slot_ns, 1000000);
        ASSERT_EQ(c.non_rt_max_gap_ns, 20000000);
        ASSERT_EQ(c.policy, PACE_POLICY_EDF);
        ASSERT_EQ(c.max_frame_ns, 1200000000ULL);
        ASSERT_EQ(c.max_reservations_per_user, 16);
        ASSERT_EQ(c.max_utilization_per_user_ppm, 1000000);
        ASSERT_EQ(c.max_connections, 256);
        ASSERT_EQ(c.client_timeout_ns, 10000000000ULL);
        ASSERT_EQ(c.switch_cost_ns, 75000);
        ASSERT_EQ(c.waiting, PACE_WAITING_NICE);
        ASSERT_FALSE(c.cpus_set);
        ASSERT_EQ(c.n_cpus, 0);
        ASSERT_EQ(pace_config_frame_slots(&c), 1200);
}

TEST(empty_object_is_defaults) {
        PaceConfig c, d;

        pace_config_init(&d);
        memset(&c, 0x5a, sizeof(c));
        ASSERT_PARSES("{}", &c);
        assert_config_eq(&c, &d);
        memset(&c, 0x5a, sizeof(c));
        ASSERT_PARSES(" \n\t{ }\r\n", &c);
        assert_config_eq(&c, &d);
}

TEST(parse_starts_from_defaults) {
        PaceConfig c, d;

        /* Keys left out are defaults, not what the struct held before. */
        pace_config_init(&d);
        ASSERT_PARSES("{\"slot_us\": 500, \"cpus\": [1]}", &c);
        ASSERT_PARSES("{\"policy\": \"edf\"}", &c);
        assert_config_eq(&c, &d);
}

TEST(shipped_config_is_defaults) {
        char error[WHY_SIZE] = "";
        char buf[PATH_MAX];
        const char *path = shipped_config_path(buf, sizeof(buf));
        PaceConfig c, d;

        if (!path)
                TEST_SKIP("config/pace.json not found (set PACE_SHIPPED_CONFIG)");
        pace_config_init(&d);
        memset(&c, 0x5a, sizeof(c));
        ASSERT_OK(pace_config_load(path, &c, error, sizeof(error)));
        ASSERT_TRUE(error[0] == '\0');
        assert_config_eq(&c, &d);
}

TEST(every_key_valid) {
        PaceConfig c;

        ASSERT_PARSES_TO("{\"non_rt_share\": 0.5}", non_rt_share_ppm, 500000);
        ASSERT_PARSES_TO("{\"non_rt_share\": 0.05}", non_rt_share_ppm, 50000);
        ASSERT_PARSES_TO("{\"non_rt_share\": 0.95}", non_rt_share_ppm, 950000);
        ASSERT_PARSES_TO("{\"non_rt_share\": 0.333333}", non_rt_share_ppm, 333333);

        ASSERT_PARSES_TO("{\"slot_us\": 500}", slot_ns, 500000);
        ASSERT_PARSES("{\"slot_us\": 50, \"max_frame_ms\": 3, \"non_rt_max_gap_ms\": 1}", &c);
        ASSERT_EQ(c.slot_ns, 50000);
        ASSERT_EQ(pace_config_frame_slots(&c), 60);
        ASSERT_PARSES_TO("{\"slot_us\": 100000, \"non_rt_max_gap_ms\": 200}", slot_ns, 100000000);
        ASSERT_PARSES_TO("{\"slot_us\": 1e3}", slot_ns, 1000000);
        ASSERT_PARSES_TO("{\"slot_us\": 1000.0}", slot_ns, 1000000);

        ASSERT_PARSES_TO("{\"non_rt_max_gap_ms\": 2.5}", non_rt_max_gap_ns, 2500000);
        ASSERT_PARSES_TO("{\"non_rt_max_gap_ms\": 2}", non_rt_max_gap_ns, 2000000);
        ASSERT_PARSES_TO("{\"non_rt_max_gap_ms\": 0.1, \"slot_us\": 50}", non_rt_max_gap_ns, 100000);

        ASSERT_PARSES_TO("{\"policy\": \"rm\"}", policy, PACE_POLICY_RM);
        ASSERT_PARSES_TO("{\"policy\": \"edf\"}", policy, PACE_POLICY_EDF);

        ASSERT_PARSES("{\"max_frame_ms\": 60000, \"slot_us\": 1000}", &c);
        ASSERT_EQ(c.max_frame_ns, 60000 * NSEC_PER_MSEC);
        ASSERT_EQ(pace_config_frame_slots(&c), 60000);
        ASSERT_PARSES_TO("{\"max_frame_ms\": 1, \"slot_us\": 100, \"non_rt_max_gap_ms\": 0.5}", max_frame_ns,
                         NSEC_PER_MSEC);
        ASSERT_PARSES("{\"max_frame_ms\": 32768, \"slot_us\": 500}", &c);
        ASSERT_EQ(pace_config_frame_slots(&c), PACE_MAX_FRAME_SLOTS);

        ASSERT_PARSES_TO("{\"max_reservations_per_user\": 1}", max_reservations_per_user, 1);
        ASSERT_PARSES_TO("{\"max_reservations_per_user\": 1024}", max_reservations_per_user, PACE_MAX_RESERVATIONS);

        ASSERT_PARSES_TO("{\"max_utilization_per_user\": 0.01}", max_utilization_per_user_ppm, 10000);
        ASSERT_PARSES_TO("{\"max_utilization_per_user\": 64}", max_utilization_per_user_ppm, 64000000);
        ASSERT_PARSES_TO("{\"max_utilization_per_user\": 2.5}", max_utilization_per_user_ppm, 2500000);

        ASSERT_PARSES_TO("{\"max_connections\": 1}", max_connections, 1);
        ASSERT_PARSES_TO("{\"max_connections\": 65536}", max_connections, 65536);

        ASSERT_PARSES_TO("{\"client_timeout_ms\": 100}", client_timeout_ns, 100 * NSEC_PER_MSEC);
        ASSERT_PARSES_TO("{\"client_timeout_ms\": 3600000}", client_timeout_ns, 3600 * NSEC_PER_SEC);

        ASSERT_PARSES_TO("{\"switch_cost_us\": 0}", switch_cost_ns, 0);
        ASSERT_PARSES_TO("{\"switch_cost_us\": 1000}", switch_cost_ns, 1000000);
        ASSERT_PARSES_TO("{\"switch_cost_us\": 2.5}", switch_cost_ns, 2500);

        ASSERT_PARSES_TO("{\"waiting\": \"freeze\"}", waiting, PACE_WAITING_FREEZE);
        ASSERT_PARSES_TO("{\"waiting\": \"nice\"}", waiting, PACE_WAITING_NICE);

        ASSERT_PARSES("{\"$comment\": \"hello\"}", &c);
        ASSERT_PARSES("{\"$comment\": [1, {\"a\": null}]}", &c);
        ASSERT_PARSES_TO("{\"$comment\": null, \"policy\": \"rm\"}", policy, PACE_POLICY_RM);
}

TEST(all_keys_together) {
        PaceConfig c;

        ASSERT_PARSES("{\n"
                      "  \"$comment\": \"all of them\",\n"
                      "  \"non_rt_share\": 0.1,\n"
                      "  \"slot_us\": 250,\n"
                      "  \"non_rt_max_gap_ms\": 5,\n"
                      "  \"policy\": \"rm\",\n"
                      "  \"max_frame_ms\": 500,\n"
                      "  \"max_reservations_per_user\": 4,\n"
                      "  \"max_utilization_per_user\": 0.5,\n"
                      "  \"max_connections\": 32,\n"
                      "  \"client_timeout_ms\": 2000,\n"
                      "  \"switch_cost_us\": 7,\n"
                      "  \"waiting\": \"freeze\",\n"
                      "  \"cpus\": [3, 1, 2]\n"
                      "}\n",
                      &c);
        ASSERT_EQ(c.non_rt_share_ppm, 100000);
        ASSERT_EQ(c.slot_ns, 250000);
        ASSERT_EQ(c.non_rt_max_gap_ns, 5000000);
        ASSERT_EQ(c.policy, PACE_POLICY_RM);
        ASSERT_EQ(c.max_frame_ns, 500000000);
        ASSERT_EQ(pace_config_frame_slots(&c), 2000);
        ASSERT_EQ(c.max_reservations_per_user, 4);
        ASSERT_EQ(c.max_utilization_per_user_ppm, 500000);
        ASSERT_EQ(c.max_connections, 32);
        ASSERT_EQ(c.client_timeout_ns, 2 * NSEC_PER_SEC);
        ASSERT_EQ(c.switch_cost_ns, 7000);
        ASSERT_EQ(c.waiting, PACE_WAITING_FREEZE);
        ASSERT_TRUE(c.cpus_set);
        ASSERT_EQ(c.n_cpus, 3);
        ASSERT_EQ(c.cpus[0], 1);
        ASSERT_EQ(c.cpus[1], 2);
        ASSERT_EQ(c.cpus[2], 3);
}

TEST(cpus) {
        char json[1024];
        size_t n = 0;
        PaceConfig c;

        ASSERT_PARSES("{\"cpus\": [0]}", &c);
        ASSERT_TRUE(c.cpus_set);
        ASSERT_EQ(c.n_cpus, 1);
        ASSERT_EQ(c.cpus[0], 0);

        ASSERT_PARSES("{\"cpus\": [63, 0, 5, 2.0]}", &c);
        ASSERT_EQ(c.n_cpus, 4);
        ASSERT_EQ(c.cpus[0], 0);
        ASSERT_EQ(c.cpus[1], 2);
        ASSERT_EQ(c.cpus[2], 5);
        ASSERT_EQ(c.cpus[3], 63);

        /* All 64, given backwards. */
        n += (size_t) snprintf(json + n, sizeof(json) - n, "{\"cpus\": [");
        for (int i = (int) PACE_MAX_CPUS - 1; i >= 0; i--)
                n += (size_t) snprintf(json + n, sizeof(json) - n, "%d%s", i, i > 0 ? ", " : "]}");
        ASSERT_PARSES(json, &c);
        ASSERT_EQ(c.n_cpus, PACE_MAX_CPUS);
        for (uint32_t i = 0; i < PACE_MAX_CPUS; i++)
                ASSERT_EQ(c.cpus[i], i);

        ASSERT_PARSE_FAILS("{\"cpus\": []}", "\"cpus\"", "empty", "allowed: an array of 1 to 64 distinct CPU numbers from 0 to 63");
        ASSERT_PARSE_FAILS("{\"cpus\": [1, 2, 1]}", "\"cpus\"", "CPU 1 is listed twice", "distinct");
        ASSERT_PARSE_FAILS("{\"cpus\": [64]}", "\"cpus\"[0]: 64 is out of range", "from 0 to 63");
        ASSERT_PARSE_FAILS("{\"cpus\": [0, -1]}", "\"cpus\"[1]: -1 is out of range", "from 0 to 63");
        ASSERT_PARSE_FAILS("{\"cpus\": [0, 1.5]}", "\"cpus\"[1]: expected an integer, got 1.5");
        ASSERT_PARSE_FAILS("{\"cpus\": [\"0\"]}", "\"cpus\"[0]: expected an integer, got a string (\"0\")");
        ASSERT_PARSE_FAILS("{\"cpus\": [[0]]}", "\"cpus\"[0]: expected an integer, got an array");
        ASSERT_PARSE_FAILS("{\"cpus\": 3}", "\"cpus\": expected an array, got 3", "allowed: an array of 1 to 64");
        ASSERT_PARSE_FAILS("{\"cpus\": \"0-3\"}", "\"cpus\": expected an array, got a string (\"0-3\")");
        ASSERT_PARSE_FAILS("{\"cpus\": {}}", "\"cpus\": expected an array, got an object");
        ASSERT_PARSE_FAILS("{\"cpus\": [1e300]}", "\"cpus\"[0]: 1e+300 is out of range", "from 0 to 63");

        /* 65 entries cannot all be distinct. */
        n = 0;
        n += (size_t) snprintf(json + n, sizeof(json) - n, "{\"cpus\": [");
        for (int i = 0; i <= (int) PACE_MAX_CPUS; i++)
                n += (size_t) snprintf(json + n, sizeof(json) - n, "%d%s", i % (int) PACE_MAX_CPUS,
                                       i < (int) PACE_MAX_CPUS ? ", " : "]}");
        ASSERT_PARSE_FAILS(json, "\"cpus\": CPU 0 is listed twice");
}

TEST(out_of_range) {
        ASSERT_PARSE_FAILS("{\"non_rt_share\": 0.01}",
                           "\"non_rt_share\": 0.01 is out of range; allowed: a number from 0.05 to 0.95");
        ASSERT_PARSE_FAILS("{\"non_rt_share\": 0.049999}", "\"non_rt_share\": 0.049999 is out of range");
        ASSERT_PARSE_FAILS("{\"non_rt_share\": 0.96}", "\"non_rt_share\": 0.96 is out of range", "0.05 to 0.95");
        ASSERT_PARSE_FAILS("{\"non_rt_share\": -0.5}", "\"non_rt_share\": -0.5 is out of range");
        ASSERT_PARSE_FAILS("{\"non_rt_share\": 1e999}", "\"non_rt_share\": a number beyond 1e308 is out of range");
        ASSERT_PARSE_FAILS("{\"max_connections\": -1e999}", "\"max_connections\": a number below -1e308 is out of range");

        ASSERT_PARSE_FAILS("{\"slot_us\": 49}", "\"slot_us\": 49 is out of range",
                           "allowed: an integer from 50 to 100000 (microseconds)");
        ASSERT_PARSE_FAILS("{\"slot_us\": 100001}", "\"slot_us\": 100001 is out of range", "50 to 100000");
        ASSERT_PARSE_FAILS("{\"slot_us\": 0}", "\"slot_us\": 0 is out of range");
        ASSERT_PARSE_FAILS("{\"slot_us\": -1000}", "\"slot_us\": -1000 is out of range");
        ASSERT_PARSE_FAILS("{\"slot_us\": 1e20}", "\"slot_us\": 1e+20 is out of range");

        ASSERT_PARSE_FAILS("{\"non_rt_max_gap_ms\": 0}", "\"non_rt_max_gap_ms\": 0 is out of range",
                           "allowed: a number greater than 0 and at most 60000 (milliseconds)");
        ASSERT_PARSE_FAILS("{\"non_rt_max_gap_ms\": -3}", "\"non_rt_max_gap_ms\": -3 is out of range");
        ASSERT_PARSE_FAILS("{\"non_rt_max_gap_ms\": 60000.5}", "\"non_rt_max_gap_ms\": 60000.5 is out of range");

        ASSERT_PARSE_FAILS("{\"max_frame_ms\": 0}", "\"max_frame_ms\": 0 is out of range",
                           "allowed: an integer from 1 to 60000 (milliseconds)");
        ASSERT_PARSE_FAILS("{\"max_frame_ms\": 60001}", "\"max_frame_ms\": 60001 is out of range");

        ASSERT_PARSE_FAILS("{\"max_reservations_per_user\": 0}", "\"max_reservations_per_user\": 0 is out of range",
                           "allowed: an integer from 1 to 1024");
        ASSERT_PARSE_FAILS("{\"max_reservations_per_user\": 1025}",
                           "\"max_reservations_per_user\": 1025 is out of range");

        ASSERT_PARSE_FAILS("{\"max_utilization_per_user\": 0.009}",
                           "\"max_utilization_per_user\": 0.009 is out of range",
                           "allowed: a number from 0.01 to 64 (CPUs)");
        ASSERT_PARSE_FAILS("{\"max_utilization_per_user\": 64.5}",
                           "\"max_utilization_per_user\": 64.5 is out of range");

        ASSERT_PARSE_FAILS("{\"max_connections\": 0}", "\"max_connections\": 0 is out of range",
                           "allowed: an integer from 1 to 65536");
        ASSERT_PARSE_FAILS("{\"max_connections\": 65537}", "\"max_connections\": 65537 is out of range");

        ASSERT_PARSE_FAILS("{\"client_timeout_ms\": 99}", "\"client_timeout_ms\": 99 is out of range",
                           "allowed: an integer from 100 to 3600000 (milliseconds)");
        ASSERT_PARSE_FAILS("{\"client_timeout_ms\": 3600001}", "\"client_timeout_ms\": 3600001 is out of range");

        ASSERT_PARSE_FAILS("{\"switch_cost_us\": -0.5}", "\"switch_cost_us\": -0.5 is out of range",
                           "allowed: a number from 0 to 1000 (microseconds)");
        ASSERT_PARSE_FAILS("{\"switch_cost_us\": 1000.001}", "\"switch_cost_us\": 1000.001 is out of range");
}

TEST(not_allowed_choice) {
        ASSERT_PARSE_FAILS("{\"policy\": \"fifo\"}", "\"policy\": \"fifo\" is not allowed; allowed: \"edf\" or \"rm\"");
        ASSERT_PARSE_FAILS("{\"policy\": \"EDF\"}", "\"policy\": \"EDF\" is not allowed");
        ASSERT_PARSE_FAILS("{\"policy\": \"\"}", "\"policy\": \"\" is not allowed");
        ASSERT_PARSE_FAILS("{\"waiting\": \"idle\"}",
                           "\"waiting\": \"idle\" is not allowed; allowed: \"nice\" or \"freeze\"");
        /* Control characters and non-ASCII are escaped in messages. */
        ASSERT_PARSE_FAILS("{\"waiting\": \"a\\nb\\u00e9\"}", "\"waiting\": \"a\\x0ab\\xc3\\xa9\" is not allowed");
}

TEST(wrong_type) {
        ASSERT_PARSE_FAILS("{\"slot_us\": \"1000\"}", "\"slot_us\": expected an integer, got a string",
                           "(\"1000\")", "allowed: an integer from 50 to 100000");
        ASSERT_PARSE_FAILS("{\"slot_us\": 1000.5}", "\"slot_us\": expected an integer, got 1000.5");
        ASSERT_PARSE_FAILS("{\"slot_us\": true}", "\"slot_us\": expected an integer, got a boolean (true)");
        ASSERT_PARSE_FAILS("{\"slot_us\": null}", "\"slot_us\": expected an integer, got null");
        ASSERT_PARSE_FAILS("{\"slot_us\": [1000]}", "\"slot_us\": expected an integer, got an array");
        ASSERT_PARSE_FAILS("{\"slot_us\": {}}", "\"slot_us\": expected an integer, got an object");
        ASSERT_PARSE_FAILS("{\"max_frame_ms\": 1.5}", "\"max_frame_ms\": expected an integer, got 1.5");
        ASSERT_PARSE_FAILS("{\"max_reservations_per_user\": 2.5}",
                           "\"max_reservations_per_user\": expected an integer, got 2.5");
        ASSERT_PARSE_FAILS("{\"max_connections\": \"many\"}", "\"max_connections\": expected an integer, got a string");
        ASSERT_PARSE_FAILS("{\"client_timeout_ms\": 100.25}", "\"client_timeout_ms\": expected an integer, got 100.25");
        ASSERT_PARSE_FAILS("{\"non_rt_share\": \"25%\"}", "\"non_rt_share\": expected a number, got a string (\"25%\")",
                           "allowed: a number from 0.05 to 0.95");
        ASSERT_PARSE_FAILS("{\"non_rt_max_gap_ms\": false}", "\"non_rt_max_gap_ms\": expected a number, got a boolean");
        ASSERT_PARSE_FAILS("{\"max_utilization_per_user\": null}",
                           "\"max_utilization_per_user\": expected a number, got null");
        ASSERT_PARSE_FAILS("{\"switch_cost_us\": \"20us\"}", "\"switch_cost_us\": expected a number, got a string");
        ASSERT_PARSE_FAILS("{\"policy\": 1}", "\"policy\": expected a string, got 1", "allowed: \"edf\" or \"rm\"");
        ASSERT_PARSE_FAILS("{\"waiting\": [\"nice\"]}", "\"waiting\": expected a string, got an array",
                           "allowed: \"nice\" or \"freeze\"");
}

TEST(unknown_key) {
        ASSERT_PARSE_FAILS("{\"slots_us\": 1000}", "unknown key \"slots_us\" (known keys: ", "slot_us",
                           "non_rt_share", "cpus", "did you mean \"slot_us\"?");
        ASSERT_PARSE_FAILS("{\"Policy\": \"rm\"}", "unknown key \"Policy\"", "did you mean \"policy\"?");
        ASSERT_PARSE_FAILS("{\"frobnicate\": 1}", "unknown key \"frobnicate\" (known keys: ");
        ASSERT_PARSE_FAILS("{\"\": 1}", "unknown key \"\"");
        ASSERT_PARSE_FAILS("{\"comment\": \"x\"}", "unknown key \"comment\"", "did you mean \"$comment\"?");

        /* Long keys are cut short in the message. */
        {
                char json[4096], key[2001];
                char error[WHY_SIZE] = "";
                PaceConfig c;

                memset(key, 'k', sizeof(key) - 1);
                key[sizeof(key) - 1] = '\0';
                snprintf(json, sizeof(json), "{\"%s\": 1}", key);
                ASSERT_ERR(parse_string(json, &c, error), -EINVAL);
                ASSERT_CONTAINS(error, "unknown key \"kkkk");
                ASSERT_CONTAINS(error, "\"...");
                ASSERT_CMP(strlen(error), <, 600);
        }

        /* An unknown key is refused even when every other key is fine. */
        ASSERT_PARSE_FAILS("{\"policy\": \"rm\", \"slot_us\": 500, \"extra\": 1}", "unknown key \"extra\"");
}

TEST(duplicate_key) {
        ASSERT_PARSE_FAILS("{\"slot_us\": 1000, \"slot_us\": 1000}", "duplicate key \"slot_us\"");
        ASSERT_PARSE_FAILS("{\"policy\": \"rm\", \"waiting\": \"nice\", \"policy\": \"edf\"}",
                           "duplicate key \"policy\"");
        ASSERT_PARSE_FAILS("{\"$comment\": 1, \"$comment\": 2}", "duplicate key \"$comment\"");
}

TEST(cross_key) {
        PaceConfig c;

        ASSERT_PARSE_FAILS("{\"slot_us\": 7000}",
                           "\"max_frame_ms\": 1200 (default) is not a whole multiple of \"slot_us\": 7000",
                           "e.g. 1197 or 1204");
        ASSERT_PARSE_FAILS("{\"slot_us\": 700, \"max_frame_ms\": 1000}",
                           "\"max_frame_ms\": 1000 is not a whole multiple of \"slot_us\": 700;",
                           "e.g. 994 or 1001");
        ASSERT_PARSE_FAILS("{\"slot_us\": 3000, \"max_frame_ms\": 1, \"non_rt_max_gap_ms\": 1}",
                           "\"max_frame_ms\": 1 is not a whole multiple of \"slot_us\": 3000", "e.g. 3");
        ASSERT_PARSES("{\"slot_us\": 7000, \"max_frame_ms\": 1204, \"non_rt_max_gap_ms\": 14}", &c);
        ASSERT_EQ(pace_config_frame_slots(&c), 172);

        ASSERT_PARSE_FAILS("{\"slot_us\": 50, \"max_frame_ms\": 60000}",
                           "\"max_frame_ms\": 60000 with \"slot_us\": 50 makes 1200000 slots per frame",
                           "at most 65536 slots");
        ASSERT_PARSE_FAILS("{\"max_frame_ms\": 65537, \"slot_us\": 1000}", "\"max_frame_ms\"", "out of range");
        ASSERT_PARSE_FAILS("{\"slot_us\": 100, \"max_frame_ms\": 6554}",
                           "\"max_frame_ms\": 6554 with \"slot_us\": 100 makes 65540 slots per frame");

        ASSERT_PARSE_FAILS("{\"non_rt_max_gap_ms\": 1}",
                           "\"non_rt_max_gap_ms\": 1 is shorter than two slots of \"slot_us\": 1000 (default)",
                           "allowed: at least 2 (milliseconds)");
        ASSERT_PARSE_FAILS("{\"slot_us\": 250, \"non_rt_max_gap_ms\": 0.4}",
                           "\"non_rt_max_gap_ms\": 0.4 is shorter than two slots of \"slot_us\": 250;",
                           "allowed: at least 0.5 (milliseconds)");
        ASSERT_PARSE_FAILS("{\"slot_us\": 20000}",
                           "\"non_rt_max_gap_ms\": 20 (default) is shorter than two slots of \"slot_us\": 20000");
        ASSERT_PARSES("{\"slot_us\": 250, \"non_rt_max_gap_ms\": 0.5}", &c);
        ASSERT_EQ(c.non_rt_max_gap_ns, 500000);

        ASSERT_PARSE_FAILS("{\"max_frame_ms\": 10}",
                           "\"max_frame_ms\": 10 is shorter than \"non_rt_max_gap_ms\": 20 (default)");
        ASSERT_PARSE_FAILS("{\"non_rt_max_gap_ms\": 2000}",
                           "\"max_frame_ms\": 1200 (default) is shorter than \"non_rt_max_gap_ms\": 2000");
        ASSERT_PARSES("{\"max_frame_ms\": 20}", &c);
        ASSERT_EQ(c.max_frame_ns, c.non_rt_max_gap_ns);
}

TEST(syntax_error_position) {
        ASSERT_PARSE_FAILS("{\n  \"policy\": \"rm\",\n  \"slot_us\": 1000,,\n}", "syntax error at line 3, column 19");
        ASSERT_PARSE_FAILS("{\"policy\" \"rm\"}", "syntax error at line 1, column 11");
        ASSERT_PARSE_FAILS("{\n\n\n    \"slot_us\": 10x0\n}", "syntax error at line 4, column 18");
        ASSERT_PARSE_FAILS("{\"slot_us\": 1000", "syntax error at line 1, column 17", "unexpected end of input");
        ASSERT_PARSE_FAILS("{\n\"policy\": \"rm\n", "syntax error at line 2, column 11: unterminated string");
        ASSERT_PARSE_FAILS("{\"a\": \"x\\", "syntax error at line 1, column 7: unterminated string");
        ASSERT_PARSE_FAILS("{\"policy\": \"rm\",", "syntax error at line 1, column 17: unexpected end of input");
        ASSERT_PARSE_FAILS("{,}", "syntax error at line 1, column 2");
        ASSERT_PARSE_FAILS("{\"policy\"\"rm\"}", "syntax error at line 1, column 10");
        ASSERT_PARSE_FAILS("{\"a,\": [1,{x}]}", "syntax error at line 1, column 12");
        ASSERT_PARSE_FAILS("{\"$comment\": \"{\", x}", "syntax error at line 1, column 19");
        ASSERT_PARSE_FAILS("{\"$comment\": {,}}", "syntax error at line 1, column 15");
        ASSERT_PARSE_FAILS("{\"cpus\": [1,[x]]}", "syntax error at line 1, column 14");
        ASSERT_PARSE_FAILS("{\"cpus\": [1, 2,]}", "syntax error at line 1, column 16");
        ASSERT_PARSE_FAILS("{\"policy\": \"\\x\"}", "syntax error at line 1, column 13");
        ASSERT_PARSE_FAILS("{\"a\": tru}", "syntax error at line 1, column 7");
        ASSERT_PARSE_FAILS("{'policy': 'rm'}", "syntax error at line 1, column 2");
        ASSERT_PARSE_FAILS("{\"slot_us\": 1000, /* comment */ \"policy\": \"rm\"}", "syntax error at line 1");
}

TEST(trailing_garbage) {
        ASSERT_PARSE_FAILS("{} x", "syntax error at line 1, column 4", "after the top-level object");
        ASSERT_PARSE_FAILS("{}\n{}", "syntax error at line 2, column 1", "after the top-level object");
        ASSERT_PARSE_FAILS("{\"policy\": \"rm\"}}", "syntax error at line 1, column 17");
        ASSERT_PARSE_FAILS("{}\n\n   ,", "syntax error at line 3, column 4");
}

TEST(empty_and_top_level) {
        char error[WHY_SIZE] = "";
        PaceConfig c;

        ASSERT_PARSE_FAILS("", "empty");
        ASSERT_PARSE_FAILS("  \n\t\r\n", "empty");
        ASSERT_ERR(pace_config_parse(NULL, 0, &c, error, sizeof(error)), -EINVAL);
        ASSERT_CONTAINS(error, "empty");

        ASSERT_PARSE_FAILS("[]", "the top level must be a JSON object, got an array");
        ASSERT_PARSE_FAILS("[{\"policy\": \"rm\"}]", "must be a JSON object, got an array");
        ASSERT_PARSE_FAILS("42", "must be a JSON object, got a number");
        ASSERT_PARSE_FAILS("\"edf\"", "must be a JSON object, got a string");
        ASSERT_PARSE_FAILS("null", "must be a JSON object, got null");
        ASSERT_PARSE_FAILS("true", "must be a JSON object, got a boolean");
}

TEST(nul_bytes) {
        static const char with_nul[] = "{\"policy\": \"rm\0\", \"slot_us\": 500}";
        static const char trailing_nul[] = "{}\n";  /* sizeof includes the terminator */
        char error[WHY_SIZE] = "";
        PaceConfig c, before;

        memset(&c, 0x33, sizeof(c));
        before = c;
        ASSERT_ERR(pace_config_parse(with_nul, sizeof(with_nul) - 1, &c, error, sizeof(error)), -EINVAL);
        ASSERT_CONTAINS(error, "syntax error at line 1, column 15: NUL byte");
        ASSERT_TRUE(memcmp(&c, &before, sizeof(c)) == 0);

        ASSERT_ERR(pace_config_parse(trailing_nul, sizeof(trailing_nul), &c, error, sizeof(error)), -EINVAL);
        ASSERT_CONTAINS(error, "syntax error at line 2, column 1: NUL byte");

        /* size is what counts: a NUL after it is not looked at. */
        ASSERT_OK(pace_config_parse(trailing_nul, sizeof(trailing_nul) - 1, &c, error, sizeof(error)));
        ASSERT_TRUE(error[0] == '\0');
}

TEST(not_nul_terminated) {
        static const char json[] = "{\"policy\": \"rm\", \"slot_us\": 500}";
        size_t n = sizeof(json) - 1;
        char error[WHY_SIZE] = "";
        PaceConfig c;

        /* Exactly sized heap copies: ASan reports any read past the end. */
        for (size_t len = 0; len <= n; len++) {
                char *buf = malloc(len ? len : 1);
                int r;

                ASSERT_TRUE(buf);
                memcpy(buf, json, len);
                r = pace_config_parse(buf, len, &c, error, sizeof(error));
                if (len == n) {
                        ASSERT_OK(r);
                        ASSERT_EQ(c.policy, PACE_POLICY_RM);
                        ASSERT_EQ(c.slot_ns, 500000);
                } else {
                        ASSERT_ERR(r, -EINVAL);
                        ASSERT_TRUE(error[0] != '\0');
                }
                free(buf);
        }

        /* A number cut off by size must not pick up digits beyond it. */
        ASSERT_OK(pace_config_parse("{\"slot_us\": 500}0", strlen("{\"slot_us\": 500}"), &c, NULL, 0));
        ASSERT_EQ(c.slot_ns, 500000);
}

TEST(untouched_on_failure) {
        static const char *const bad[] = {
                "{\"policy\": \"rm\", \"slot_us\": 10}",
                "{\"policy\": \"rm\", \"cpus\": [1, 1]}",
                "{\"cpus\": [1, 2], \"bogus\": 0}",
                "{\"waiting\": \"freeze\", \"slot_us\": 7000}",
                "{\"waiting\": \"freeze\"",
        };

        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                ASSERT_PARSE_FAILS(bad[i], "");
}

TEST(no_error_pointer) {
        PaceConfig c, before;

        memset(&c, 0x11, sizeof(c));
        before = c;
        ASSERT_ERR(parse_string("{\"slot_us\": 1}", &c, NULL), -EINVAL);
        ASSERT_ERR(parse_string("{", &c, NULL), -EINVAL);
        ASSERT_TRUE(memcmp(&c, &before, sizeof(c)) == 0);
        ASSERT_OK(parse_string("{\"slot_us\": 100}", &c, NULL));
        ASSERT_EQ(c.slot_ns, 100000);
}

TEST(error_cleared_on_success) {
        char error[WHY_SIZE] = "garbage";
        PaceConfig c;

        ASSERT_OK(parse_string("{}", &c, error));
        ASSERT_TRUE(error[0] == '\0');
}

TEST(deep_nesting) {
        /* cJSON limits nesting; what matters is a clean refusal, not a crash. */
        size_t depth = 100000;
        char *json = malloc(2 * depth + 32);
        char error[WHY_SIZE] = "";
        PaceConfig c;
        size_t n = 0;

        ASSERT_TRUE(json);
        n += (size_t) sprintf(json, "{\"$comment\": ");
        for (size_t i = 0; i < depth; i++)
                json[n++] = '[';
        for (size_t i = 0; i < depth; i++)
                json[n++] = ']';
        json[n++] = '}';
        ASSERT_ERR(pace_config_parse(json, n, &c, error, sizeof(error)), -EINVAL);
        ASSERT_CONTAINS(error, "syntax error");
        free(json);
}

TEST(load_missing) {
        char error[WHY_SIZE] = "";
        PaceConfig c;

        ASSERT_ERR(pace_config_load("/nonexistent/pace/pace.json", &c, error, sizeof(error)), -ENOENT);
        ASSERT_TRUE(error[0] == '\0');
}

TEST(load_good_and_bad) {
        static const char good_json[] = "{\"policy\": \"rm\"}\n";
        static const char bad_json[] = "{\n  \"non_rt_share\": 0.01\n}\n";
        static const char broken_json[] = "{\n  \"policy\": \"rm\"\n  \"slot_us\": 1\n}\n";
        _cleanup_free_ char *good = write_temp(good_json, strlen(good_json));
        _cleanup_free_ char *bad = write_temp(bad_json, strlen(bad_json));
        _cleanup_free_ char *broken = write_temp(broken_json, strlen(broken_json));
        _cleanup_free_ char *prefix = NULL;
        char error[WHY_SIZE] = "";
        PaceConfig c, before;

        ASSERT_OK(pace_config_load(good, &c, error, sizeof(error)));
        ASSERT_TRUE(error[0] == '\0');
        ASSERT_EQ(c.policy, PACE_POLICY_RM);

        before = c;
        ASSERT_ERR(pace_config_load(bad, &c, error, sizeof(error)), -EINVAL);
        printf("    -> %s\n", error);
        ASSERT_TRUE(asprintf(&prefix, "%s: \"non_rt_share\": 0.01 is out of range", bad) > 0);
        ASSERT_TRUE(strncmp(error, prefix, strlen(prefix)) == 0);
        ASSERT_CONTAINS(error, "allowed: a number from 0.05 to 0.95");
        ASSERT_TRUE(memcmp(&c, &before, sizeof(c)) == 0);

        ASSERT_ERR(pace_config_load(broken, &c, error, sizeof(error)), -EINVAL);
        printf("    -> %s\n", error);
        ASSERT_TRUE(strncmp(error, broken, strlen(broken)) == 0);
        ASSERT_CONTAINS(error, ": syntax error at line 3, column 3");

        ASSERT_OK(unlink(good));
        ASSERT_OK(unlink(bad));
        ASSERT_OK(unlink(broken));
}

TEST(load_too_large) {
        size_t size = 1024 * 1024 + 1;
        _cleanup_free_ char *content = malloc(size);
        _cleanup_free_ char *path = NULL;
        char error[WHY_SIZE] = "";
        PaceConfig c;

        ASSERT_TRUE(content);
        /* Valid JSON apart from its size: the limit is about bytes, not content. */
        memset(content, ' ', size);
        content[0] = '{';
        content[size - 1] = '}';
        path = write_temp(content, size);
        ASSERT_ERR(pace_config_load(path, &c, error, sizeof(error)), -EFBIG);
        printf("    -> %s\n", error);
        ASSERT_TRUE(strncmp(error, path, strlen(path)) == 0);
        ASSERT_CONTAINS(error, "at most 1048576 bytes (1 MiB)");
        ASSERT_OK(unlink(path));
        free(path);

        /* Exactly 1 MiB is fine. */
        content[size - 2] = '}';
        path = write_temp(content, size - 1);
        ASSERT_OK(pace_config_load(path, &c, error, sizeof(error)));
        ASSERT_OK(unlink(path));
}

TEST(access_and_rate_keys) {
        PaceConfig c;

        pace_config_init(&c);
        ASSERT_EQ(c.max_connections_per_user, 64);
        ASSERT_EQ(c.max_requests_per_second, 50);
        ASSERT_FALSE(c.allowed_groups_set);

        ASSERT_PARSES("{\"allowed_groups\": [\"root\", 4242]}", &c);
        ASSERT_TRUE(c.allowed_groups_set);
        ASSERT_EQ(c.n_allowed_groups, 2);
        ASSERT_EQ(c.allowed_groups[0], 0);
        ASSERT_EQ(c.allowed_groups[1], 4242);
        ASSERT_PARSE_FAILS("{\"allowed_groups\": [\"no-such-group-pace\"]}", "\"allowed_groups\"[0]",
                           "group \"no-such-group-pace\" does not exist");
        ASSERT_PARSE_FAILS("{\"allowed_groups\": []}", "would let only root ask");
        ASSERT_PARSE_FAILS("{\"allowed_groups\": [1.5]}", "expected a group name or gid, got 1.5");
        ASSERT_PARSE_FAILS("{\"allowed_groups\": \"root\"}", "expected an array");

        ASSERT_EQ(c.max_threads_per_reservation, 32);
        ASSERT_EQ(c.max_reservations, 1024);
        ASSERT_EQ(c.max_message_bytes, 65536);
        ASSERT_PARSES("{\"max_reservations\": 3, \"max_message_bytes\": 512}", &c);
        ASSERT_EQ(c.max_reservations, 3);
        ASSERT_EQ(c.max_message_bytes, 512);
        ASSERT_PARSE_FAILS("{\"max_reservations\": 1025}", "\"max_reservations\": 1025 is out of range");
        ASSERT_PARSE_FAILS("{\"max_message_bytes\": 100}", "\"max_message_bytes\": 100 is out of range",
                           "256 to 65536");
        ASSERT_PARSES("{\"max_threads_per_reservation\": 4}", &c);
        ASSERT_EQ(c.max_threads_per_reservation, 4);
        ASSERT_PARSE_FAILS("{\"max_threads_per_reservation\": 0}", "\"max_threads_per_reservation\": 0 is out of range");
        ASSERT_PARSE_FAILS("{\"max_threads_per_reservation\": 5000}", "allowed: an integer from 1 to 1024");
        pace_config_init(&c);
        ASSERT_PARSES("{\"max_requests_per_second\": 5, \"max_connections_per_user\": 3}", &c);
        ASSERT_EQ(c.max_requests_per_second, 5);
        ASSERT_EQ(c.max_connections_per_user, 3);
        ASSERT_PARSE_FAILS("{\"max_requests_per_second\": 0}", "\"max_requests_per_second\": 0 is out of range");
        ASSERT_PARSE_FAILS("{\"max_connections_per_user\": 100, \"max_connections\": 10}",
                           "\"max_connections_per_user\": 100 is more than \"max_connections\": 10");
        /* Lowering only max_connections takes the per-user default along. */
        ASSERT_PARSES("{\"max_connections\": 10}", &c);
        ASSERT_EQ(c.max_connections_per_user, 10);
}

TEST(reserve_root_processes) {
        PaceConfig c;

        pace_config_init(&c);
        ASSERT_FALSE(c.reserve_root_processes);
        ASSERT_PARSES("{\"reserve_root_processes\": true}", &c);
        ASSERT_TRUE(c.reserve_root_processes);
        ASSERT_PARSES("{\"reserve_root_processes\": false}", &c);
        ASSERT_FALSE(c.reserve_root_processes);
        ASSERT_PARSE_FAILS("{\"reserve_root_processes\": 1}", "\"reserve_root_processes\": expected true or false, "
                           "got 1; allowed: true or false");
        ASSERT_PARSE_FAILS("{\"reserve_root_processes\": \"yes\"}", "expected true or false");
}

TEST(rtkit_keys) {
        PaceConfig c;

        pace_config_init(&c);
        ASSERT_TRUE(c.rtkit);
        ASSERT_EQ(c.rtkit_period_ns, 10 * NSEC_PER_MSEC);
        ASSERT_EQ(c.rtkit_utilization_ppm, 100000);
        ASSERT_EQ(c.rtkit_kind, PACE_RTKIT_KIND_SERVER);
        ASSERT_EQ(c.rtkit_max_realtime_priority, 20);
        ASSERT_EQ(c.rtkit_min_nice_level, -15);
        ASSERT_EQ(c.rtkit_rttime_usec_max, 200000);

        ASSERT_PARSES("{\"rtkit\": false, \"rtkit_period_us\": 5000, \"rtkit_utilization\": 0.25, "
                      "\"rtkit_kind\": \"slots\", \"rtkit_max_realtime_priority\": 98, "
                      "\"rtkit_min_nice_level\": -20, \"rtkit_rttime_usec_max\": 1000}", &c);
        ASSERT_FALSE(c.rtkit);
        ASSERT_EQ(c.rtkit_period_ns, 5 * NSEC_PER_MSEC);
        ASSERT_EQ(c.rtkit_utilization_ppm, 250000);
        ASSERT_EQ(c.rtkit_kind, PACE_RTKIT_KIND_SLOTS);
        ASSERT_EQ(c.rtkit_max_realtime_priority, 98);
        ASSERT_EQ(c.rtkit_min_nice_level, -20);
        ASSERT_EQ(c.rtkit_rttime_usec_max, 1000);

        /* The default period follows slots longer than itself; one that
         * is written down must hold a slot. */
        ASSERT_PARSES("{\"slot_us\": 20000, \"non_rt_max_gap_ms\": 40}", &c);
        ASSERT_EQ(c.rtkit_period_ns, 20 * NSEC_PER_MSEC);
        ASSERT_PARSE_FAILS("{\"slot_us\": 20000, \"non_rt_max_gap_ms\": 40, \"rtkit_period_us\": 10000}",
                           "\"rtkit_period_us\": 10000 is shorter than \"slot_us\": 20000; allowed: at least one slot");

        ASSERT_PARSE_FAILS("{\"rtkit_max_realtime_priority\": 99}",
                           "\"rtkit_max_realtime_priority\": 99 is out of range; allowed: an integer from 1 to 98");
        ASSERT_PARSE_FAILS("{\"rtkit_max_realtime_priority\": 0}", "is out of range");
        ASSERT_PARSE_FAILS("{\"rtkit_min_nice_level\": -21}",
                           "\"rtkit_min_nice_level\": -21 is out of range; allowed: an integer from -20 to 19");
        ASSERT_PARSE_FAILS("{\"rtkit_min_nice_level\": 20}", "is out of range");
        ASSERT_PARSE_FAILS("{\"rtkit_utilization\": 0.96}", "\"rtkit_utilization\": 0.96 is out of range");
        ASSERT_PARSE_FAILS("{\"rtkit_utilization\": 0}", "is out of range");
        ASSERT_PARSE_FAILS("{\"rtkit_period_us\": 99}", "\"rtkit_period_us\": 99 is out of range");
        ASSERT_PARSE_FAILS("{\"rtkit_rttime_usec_max\": 999}", "is out of range");
        ASSERT_PARSE_FAILS("{\"rtkit_kind\": \"aligned\"}",
                           "\"rtkit_kind\": \"aligned\" is not allowed; allowed: \"server\" or \"slots\"");
        ASSERT_PARSE_FAILS("{\"rtkit\": \"yes\"}", "\"rtkit\": expected true or false");
}

TEST(load_not_a_file) {
        char error[WHY_SIZE] = "";
        PaceConfig c;

        ASSERT_ERR(pace_config_load("/tmp", &c, error, sizeof(error)), -EISDIR);
        ASSERT_ERR(pace_config_load("/dev/null", &c, error, sizeof(error)), -EINVAL);
        ASSERT_CONTAINS(error, "/dev/null: the document is empty");
}

TEST_MAIN()
