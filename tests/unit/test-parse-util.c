/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <fcntl.h>

#include "macro.h"
#include "parse-util.h"
#include "proc-util.h"
#include "test.h"

/* parse(s, &v), for v of type, gives expected (v holds another value
 * before, so that one left unwritten is caught). */
#define ASSERT_PARSED(parse, type, s, expected)                                           \
        do {                                                                              \
                type v_ = (type) ~(type) (expected);                                      \
                ASSERT_OK(parse((s), &v_));                                               \
                if (v_ != (type) (expected))                                              \
                        TEST_FAIL_("%s(\"%s\") = %llu, expected %llu", #parse, (s),         \
                                   (unsigned long long) v_, (unsigned long long) (type) (expected)); \
        } while (0)

/* parse(s, &v) fails with err, and v keeps the value it had (untouched). */
#define ASSERT_PARSE_FAILS(parse, type, s, err, untouched)                                \
        do {                                                                              \
                type v_ = (untouched);                                                    \
                ASSERT_ERR(parse((s), &v_), (err));                                       \
                ASSERT_EQ(v_, (untouched));                                               \
        } while (0)

#define ASSERT_DURATION(s, expected) ASSERT_PARSED(parse_duration_ns, uint64_t, s, expected)
#define ASSERT_DURATION_FAILS(s, err) ASSERT_PARSE_FAILS(parse_duration_ns, uint64_t, s, err, 12345)
#define ASSERT_PPM(s, expected) ASSERT_PARSED(parse_utilization_ppm, uint32_t, s, expected)
#define ASSERT_PPM_FAILS(s, err) ASSERT_PARSE_FAILS(parse_utilization_ppm, uint32_t, s, err, 777)
#define ASSERT_PID(s, expected) ASSERT_PARSED(parse_pid, pid_t, s, expected)
#define ASSERT_PID_FAILS(s, err) ASSERT_PARSE_FAILS(parse_pid, pid_t, s, err, 99)
#define ASSERT_UINT32(s, expected) ASSERT_PARSED(parse_uint32, uint32_t, s, expected)
#define ASSERT_UINT32_FAILS(s, err) ASSERT_PARSE_FAILS(parse_uint32, uint32_t, s, err, 5)

TEST(duration_good) {
        ASSERT_DURATION("1ns", 1);
        ASSERT_DURATION("999ns", 999);
        ASSERT_DURATION("1us", 1000);
        ASSERT_DURATION("250us", 250000);
        ASSERT_DURATION("250\xc2\xb5s", 250000);
        ASSERT_DURATION("50ms", 50000000);
        ASSERT_DURATION("1.5ms", 1500000);
        ASSERT_DURATION("0.5ms", 500000);
        ASSERT_DURATION("1s", NSEC_PER_SEC);
        ASSERT_DURATION("2.25s", 2250000000ULL);
        ASSERT_DURATION("0.000000001s", 1);
        ASSERT_DURATION("1.000000000000000000000s", NSEC_PER_SEC);
        ASSERT_DURATION("0.1s", 100000000);     /* 0.1 has no exact double; no drift allowed */
        ASSERT_DURATION("0.3ms", 300000);
        ASSERT_DURATION("1.001us", 1001);
        ASSERT_DURATION("007ms", 7000000);
        ASSERT_DURATION("18446744073709551615ns", UINT64_MAX);
        ASSERT_DURATION("18446744073.709551615s", UINT64_MAX);
        ASSERT_DURATION("18446744073709551.615us", UINT64_MAX);
        /* Sub-nanosecond digits round to the nearest nanosecond. */
        ASSERT_DURATION("1.5ns", 2);
        ASSERT_DURATION("1.4999us", 1500);
        ASSERT_DURATION("0.0000000015s", 2);
        ASSERT_DURATION("0.5ns", 1);
}

TEST(duration_bad) {
        uint64_t ns;

        /* Syntax. */
        ASSERT_DURATION_FAILS("", -EINVAL);
        ASSERT_DURATION_FAILS("50", -EINVAL);
        ASSERT_DURATION_FAILS("1.5", -EINVAL);
        ASSERT_DURATION_FAILS("ms", -EINVAL);
        ASSERT_DURATION_FAILS(".5ms", -EINVAL);
        ASSERT_DURATION_FAILS("5.ms", -EINVAL);
        ASSERT_DURATION_FAILS("1..5ms", -EINVAL);
        ASSERT_DURATION_FAILS("1.5.5ms", -EINVAL);
        ASSERT_DURATION_FAILS(" 5ms", -EINVAL);
        ASSERT_DURATION_FAILS("5ms ", -EINVAL);
        ASSERT_DURATION_FAILS("5 ms", -EINVAL);
        ASSERT_DURATION_FAILS("5\tms", -EINVAL);
        ASSERT_DURATION_FAILS("5msx", -EINVAL);
        ASSERT_DURATION_FAILS("5mss", -EINVAL);
        ASSERT_DURATION_FAILS("5MS", -EINVAL);
        ASSERT_DURATION_FAILS("5m", -EINVAL);
        ASSERT_DURATION_FAILS("5min", -EINVAL);
        ASSERT_DURATION_FAILS("5h", -EINVAL);
        ASSERT_DURATION_FAILS("+5ms", -EINVAL);
        ASSERT_DURATION_FAILS("--5ms", -EINVAL);
        ASSERT_DURATION_FAILS("-", -EINVAL);
        ASSERT_DURATION_FAILS("-ms", -EINVAL);
        ASSERT_DURATION_FAILS("0x10ms", -EINVAL);
        ASSERT_DURATION_FAILS("1e3ms", -EINVAL);
        ASSERT_DURATION_FAILS("1,5ms", -EINVAL);
        ASSERT_DURATION_FAILS("5ms5ms", -EINVAL);
        ASSERT_DURATION_FAILS("99999999999999999999999xs", -EINVAL);
        ASSERT_ERR(parse_duration_ns(NULL, &ns), -EINVAL);

        /* Range: negative, zero, too big. */
        ASSERT_DURATION_FAILS("-5ms", -ERANGE);
        ASSERT_DURATION_FAILS("-0ns", -ERANGE);
        ASSERT_DURATION_FAILS("0ns", -ERANGE);
        ASSERT_DURATION_FAILS("0s", -ERANGE);
        ASSERT_DURATION_FAILS("0.0ms", -ERANGE);
        ASSERT_DURATION_FAILS("0.4ns", -ERANGE);
        ASSERT_DURATION_FAILS("0.0000000004s", -ERANGE);
        ASSERT_DURATION_FAILS("18446744073709551616ns", -ERANGE);
        ASSERT_DURATION_FAILS("18446744073.709551616s", -ERANGE);
        ASSERT_DURATION_FAILS("18446744074s", -ERANGE);
        ASSERT_DURATION_FAILS("18446744073709551615.5ns", -ERANGE);
        ASSERT_DURATION_FAILS("99999999999999999999999999999s", -ERANGE);
}

TEST(utilization_good) {
        ASSERT_PPM("60%", 600000);
        ASSERT_PPM("60.5%", 605000);
        ASSERT_PPM("100%", 1000000);
        ASSERT_PPM("0.0001%", 1);
        ASSERT_PPM("1%", 10000);
        ASSERT_PPM("0.6", 600000);
        ASSERT_PPM("0.1", 100000);
        ASSERT_PPM("0.3", 300000);
        ASSERT_PPM("1", 1000000);
        ASSERT_PPM("1.0", 1000000);
        ASSERT_PPM("1.000000000", 1000000);
        ASSERT_PPM("0.000001", 1);
        ASSERT_PPM("0.333333", 333333);
        ASSERT_PPM("0.3333334", 333333);
        ASSERT_PPM("0.3333335", 333334);
        ASSERT_PPM("33.33333%", 333333);
        ASSERT_PPM("099%", 990000);
}

TEST(utilization_bad) {
        uint32_t ppm;

        ASSERT_PPM_FAILS("", -EINVAL);
        ASSERT_PPM_FAILS("%", -EINVAL);
        ASSERT_PPM_FAILS("60 %", -EINVAL);
        ASSERT_PPM_FAILS(" 60%", -EINVAL);
        ASSERT_PPM_FAILS("60% ", -EINVAL);
        ASSERT_PPM_FAILS("60%%", -EINVAL);
        ASSERT_PPM_FAILS("60%x", -EINVAL);
        ASSERT_PPM_FAILS(".6", -EINVAL);
        ASSERT_PPM_FAILS("6.", -EINVAL);
        ASSERT_PPM_FAILS("+0.5", -EINVAL);
        ASSERT_PPM_FAILS("0,5", -EINVAL);
        ASSERT_PPM_FAILS("half", -EINVAL);
        ASSERT_PPM_FAILS("6e-1", -EINVAL);
        ASSERT_PPM_FAILS("0.5ms", -EINVAL);
        ASSERT_ERR(parse_utilization_ppm(NULL, &ppm), -EINVAL);

        ASSERT_PPM_FAILS("0", -ERANGE);
        ASSERT_PPM_FAILS("0%", -ERANGE);
        ASSERT_PPM_FAILS("0.0000001", -ERANGE);
        ASSERT_PPM_FAILS("0.00001%", -ERANGE);
        ASSERT_PPM_FAILS("-60%", -ERANGE);
        ASSERT_PPM_FAILS("-0.5", -ERANGE);
        ASSERT_PPM_FAILS("100.0001%", -ERANGE);
        ASSERT_PPM_FAILS("101%", -ERANGE);
        ASSERT_PPM_FAILS("1.000001", -ERANGE);
        ASSERT_PPM_FAILS("2", -ERANGE);
        ASSERT_PPM_FAILS("4294967296", -ERANGE);
        ASSERT_PPM_FAILS("99999999999999999999999999%", -ERANGE);
}

TEST(pid) {
        pid_t pid = 99;

        ASSERT_PID("1", 1);
        ASSERT_PID("4242", 4242);
        ASSERT_PID("2147483647", INT32_MAX);
        ASSERT_PID("0012", 12);

        ASSERT_PID_FAILS("0", -ERANGE);
        ASSERT_PID_FAILS("2147483648", -ERANGE);
        ASSERT_PID_FAILS("4294967297", -ERANGE);
        ASSERT_PID_FAILS("99999999999999999999999", -ERANGE);
        ASSERT_PID_FAILS("", -EINVAL);
        ASSERT_PID_FAILS("-1", -EINVAL);
        ASSERT_PID_FAILS("+1", -EINVAL);
        ASSERT_PID_FAILS(" 1", -EINVAL);
        ASSERT_PID_FAILS("1 ", -EINVAL);
        ASSERT_PID_FAILS("0x10", -EINVAL);
        ASSERT_PID_FAILS("12a", -EINVAL);
        ASSERT_PID_FAILS("1.0", -EINVAL);
        ASSERT_PID_FAILS("99999999999999999999999x", -EINVAL);
        ASSERT_ERR(parse_pid(NULL, &pid), -EINVAL);
        ASSERT_EQ(pid, 99);
}

TEST(uint32) {
        uint32_t v = 5;

        ASSERT_UINT32("0", 0);
        ASSERT_UINT32("63", 63);
        ASSERT_UINT32("4294967295", UINT32_MAX);
        ASSERT_UINT32("000", 0);

        ASSERT_UINT32_FAILS("4294967296", -ERANGE);
        ASSERT_UINT32_FAILS("18446744073709551616", -ERANGE);
        ASSERT_UINT32_FAILS("", -EINVAL);
        ASSERT_UINT32_FAILS("-0", -EINVAL);
        ASSERT_UINT32_FAILS("-1", -EINVAL);
        ASSERT_UINT32_FAILS("1\n", -EINVAL);
        ASSERT_UINT32_FAILS("\t1", -EINVAL);
        ASSERT_UINT32_FAILS("1e3", -EINVAL);
        ASSERT_UINT32_FAILS("0x1", -EINVAL);
        ASSERT_ERR(parse_uint32(NULL, &v), -EINVAL);
        ASSERT_EQ(v, 5);
}

TEST(format_duration) {
        char buf[32];

        ASSERT_STREQ(format_duration(buf, sizeof(buf), 50000000), "50ms");
        ASSERT_STREQ(format_duration(buf, sizeof(buf), 1500000), "1.5ms");
        ASSERT_STREQ(format_duration(buf, sizeof(buf), 250000), "250us");
        ASSERT_STREQ(format_duration(buf, sizeof(buf), 999), "999ns");
        ASSERT_STREQ(format_duration(buf, sizeof(buf), 1), "1ns");
        ASSERT_STREQ(format_duration(buf, sizeof(buf), 0), "0ns");
        ASSERT_STREQ(format_duration(buf, sizeof(buf), 1000), "1us");
        ASSERT_STREQ(format_duration(buf, sizeof(buf), 1001), "1.001us");
        ASSERT_STREQ(format_duration(buf, sizeof(buf), 1000000), "1ms");
        ASSERT_STREQ(format_duration(buf, sizeof(buf), 1234000), "1.234ms");
        ASSERT_STREQ(format_duration(buf, sizeof(buf), 1234500), "1234.5us");
        ASSERT_STREQ(format_duration(buf, sizeof(buf), 1234567), "1234.567us");
        ASSERT_STREQ(format_duration(buf, sizeof(buf), NSEC_PER_SEC), "1s");
        ASSERT_STREQ(format_duration(buf, sizeof(buf), 1500000000), "1.5s");
        ASSERT_STREQ(format_duration(buf, sizeof(buf), 1200 * NSEC_PER_MSEC), "1.2s");
        ASSERT_STREQ(format_duration(buf, sizeof(buf), 3600 * NSEC_PER_SEC), "3600s");
        ASSERT_STREQ(format_duration(buf, sizeof(buf), 1000100000), "1000.1ms");
        ASSERT_STREQ(format_duration(buf, sizeof(buf), UINT64_MAX), "18446744073709551.615us");

        /* Too small a buffer truncates but stays a terminated string. */
        ASSERT_STREQ(format_duration(buf, 4, 1500000), "1.5");
}

TEST(format_ppm) {
        char buf[32];

        ASSERT_STREQ(format_ppm(buf, sizeof(buf), 600000), "60%");
        ASSERT_STREQ(format_ppm(buf, sizeof(buf), 625000), "62.5%");
        ASSERT_STREQ(format_ppm(buf, sizeof(buf), 1), "0.0001%");
        ASSERT_STREQ(format_ppm(buf, sizeof(buf), 0), "0%");
        ASSERT_STREQ(format_ppm(buf, sizeof(buf), 1000000), "100%");
        ASSERT_STREQ(format_ppm(buf, sizeof(buf), 333333), "33.3333%");
        ASSERT_STREQ(format_ppm(buf, sizeof(buf), 10), "0.001%");
        ASSERT_STREQ(format_ppm(buf, sizeof(buf), 64000000), "6400%");
        ASSERT_STREQ(format_ppm(buf, sizeof(buf), UINT32_MAX), "429496.7295%");
}

TEST(duration_round_trip) {
        static const uint64_t values[] = {
                1, 7, 999, 1000, 1001, 1500, 999999, 1000000, 1234567, 1500000, 20000000, 50000000,
                999999999, NSEC_PER_SEC, 1200 * NSEC_PER_MSEC, 3600 * NSEC_PER_SEC, UINT64_MAX / 3,
                UINT64_MAX - 1, UINT64_MAX,
        };
        char buf[32];

        for (size_t i = 0; i < ELEMENTSOF(values); i++) {
                uint64_t back = 0;

                ASSERT_OK(parse_duration_ns(format_duration(buf, sizeof(buf), values[i]), &back));
                ASSERT_EQ(back, values[i]);
        }

        /* A sweep over every magnitude, with assorted low digits. */
        for (uint64_t v = 1; v < UINT64_MAX / 10; v = v * 10 + 3) {
                uint64_t back = 0;

                ASSERT_OK(parse_duration_ns(format_duration(buf, sizeof(buf), v), &back));
                ASSERT_EQ(back, v);
        }

        /* And text -> value -> text for the canonical forms. */
        static const char *const texts[] = { "1ns", "250us", "1.5ms", "50ms", "1.2s", "1.001us", "3600s" };
        for (size_t i = 0; i < ELEMENTSOF(texts); i++) {
                uint64_t ns = 0;

                ASSERT_OK(parse_duration_ns(texts[i], &ns));
                ASSERT_STREQ(format_duration(buf, sizeof(buf), ns), texts[i]);
        }
}

TEST(ppm_round_trip) {
        char buf[32];

        for (uint32_t ppm = 1; ppm <= PPM; ppm += ppm < 2000 ? 1 : 997) {
                uint32_t back = 0;

                ASSERT_OK(parse_utilization_ppm(format_ppm(buf, sizeof(buf), ppm), &back));
                ASSERT_EQ(back, ppm);
        }
        {
                uint32_t back = 0;

                ASSERT_OK(parse_utilization_ppm(format_ppm(buf, sizeof(buf), PPM), &back));
                ASSERT_EQ(back, PPM);
        }
}

/* The dispatcher finds where a client came from in these lines, to put it
 * back there: a controller alone, in a list, absent, or past the buffer. */
TEST(cgroup_v1_path) {
        const char *text = "9:name=systemd:/user.slice\n4:memory:/a/b\n3:cpu,cpuacct:/c\n6:freezer:/\n0::/unified\n";
        char path[64];

        ASSERT_OK(proc_cgroup_v1_path(text, "freezer", path, sizeof(path)));
        ASSERT_STREQ(path, "/");
        ASSERT_OK(proc_cgroup_v1_path(text, "cpuacct", path, sizeof(path)));
        ASSERT_STREQ(path, "/c");
        ASSERT_OK(proc_cgroup_v1_path(text, "cpu", path, sizeof(path)));
        ASSERT_STREQ(path, "/c");
        ASSERT_OK(proc_cgroup_v1_path(text, "memory", path, sizeof(path)));
        ASSERT_STREQ(path, "/a/b");
        ASSERT_ERR(proc_cgroup_v1_path(text, "cpuset", path, sizeof(path)), -ENOENT);
        ASSERT_ERR(proc_cgroup_v1_path(text, "mem", path, sizeof(path)), -ENOENT);
        ASSERT_ERR(proc_cgroup_v1_path("2:cpuacct:/a/very/long/path", "cpuacct", path, 8), -ENAMETOOLONG);
        ASSERT_ERR(proc_cgroup_v1_path("", "cpuacct", path, sizeof(path)), -ENOENT);
}

TEST(cpu_list_parse) {
        int32_t cpus[8];
        uint32_t n = 0;
        uint64_t mask = 0;

        ASSERT_OK(cpu_list_parse("0-2,5\n", cpus, ELEMENTSOF(cpus), &n));
        ASSERT_EQ(n, 4);
        ASSERT_EQ(cpus[3], 5);
        ASSERT_ERR(cpu_list_parse("0-8", cpus, ELEMENTSOF(cpus), &n), -E2BIG);
        ASSERT_ERR(cpu_list_parse("3-1", cpus, ELEMENTSOF(cpus), &n), -EINVAL);
        ASSERT_ERR(cpu_list_parse("1;2", cpus, ELEMENTSOF(cpus), &n), -EINVAL);

        /* The same reader into a mask; CPUs from 64 on are left out, and a
         * long range is clipped, not walked. */
        ASSERT_OK(cpu_list_parse_mask("1,3-4\n", &mask));
        ASSERT_EQ(mask, 0x1a);
        ASSERT_OK(cpu_list_parse_mask("62-4000000000", &mask));
        ASSERT_EQ(mask, UINT64_C(3) << 62);
        ASSERT_OK(cpu_list_parse_mask("64-127", &mask));
        ASSERT_EQ(mask, 0);
        ASSERT_ERR(cpu_list_parse_mask("1-", &mask), -EINVAL);
        ASSERT_ERR(cpu_list_parse_mask("x", &mask), -EINVAL);
}

TEST(format_cpu_mask) {
        char buf[256];

        ASSERT_STREQ(format_cpu_mask(buf, sizeof(buf), 0), "");
        ASSERT_STREQ(format_cpu_mask(buf, sizeof(buf), 0x2), "1");
        ASSERT_STREQ(format_cpu_mask(buf, sizeof(buf), 0x3), "0-1");
        ASSERT_STREQ(format_cpu_mask(buf, sizeof(buf), 0x10f | UINT64_C(1) << 63), "0-3,8,63");
        ASSERT_STREQ(format_cpu_mask(buf, sizeof(buf), UINT64_MAX), "0-63");
        ASSERT_STREQ(format_cpu_mask(buf, sizeof(buf), 0x5555), "0,2,4,6,8,10,12,14");
        ASSERT_STREQ(format_cpu_mask(buf, 6, 0x5555), "0,2,4"); /* cut at a whole CPU */
        ASSERT_STREQ(format_cpu_mask(buf, 7, 0x5555), "0,2,4");
        uint64_t back = 0;
        ASSERT_OK(cpu_list_parse_mask(format_cpu_mask(buf, sizeof(buf), 0xf0f0f00ff1ULL), &back));
        ASSERT_EQ(back, 0xf0f0f00ff1ULL);
}

/* What the broker reads of a process it may reserve: its own affinity,
 * from /proc, as the kernel has it. */
TEST(proc_cpus_allowed_is_the_affinity) {
        cpu_set_t set, old;
        uint64_t mask = 0, want = 0;

        ASSERT_OK(sched_getaffinity(0, sizeof(old), &old));
        for (unsigned c = 0; c < 64; c++)
                if (CPU_ISSET(c, &old))
                        want |= UINT64_C(1) << c;
        ASSERT_OK(proc_cpus_allowed("/proc", getpid(), getpid(), &mask));
        ASSERT_EQ(mask, want);
        /* Narrowed to its first CPU: that one alone. */
        unsigned first = (unsigned) __builtin_ctzll(want);
        CPU_ZERO(&set);
        CPU_SET(first, &set);
        ASSERT_OK(sched_setaffinity(0, sizeof(set), &set));
        ASSERT_OK(proc_cpus_allowed("/proc", getpid(), gettid(), &mask));
        ASSERT_OK(sched_setaffinity(0, sizeof(old), &old));
        ASSERT_EQ(mask, UINT64_C(1) << first);
        ASSERT_ERR(proc_cpus_allowed("/proc", getpid(), 0, &mask), -ESRCH);
        ASSERT_ERR(proc_cpus_allowed("/nonexistent", getpid(), getpid(), &mask), -ESRCH);
}

/* Who owns a process is four uids; a set-uid root program run by a user is
 * root in one of them, and counts as root. */
TEST(proc_status_owner_reads_all_four_uids) {
        ProcOwner o;

        ASSERT_OK(proc_status_owner("Name:\tx\nUid:\t1000\t1000\t1000\t1000\nGid:\t1\t1\t1\t1\n", &o));
        ASSERT_TRUE(proc_owner_is(&o, 1000));
        ASSERT_FALSE(proc_owner_is(&o, 0));
        ASSERT_FALSE(proc_owner_has_root(&o));
        ASSERT_OK(proc_status_owner("Name:\tpasswd\nUid:\t1000\t0\t0\t0\n", &o));
        ASSERT_FALSE(proc_owner_is(&o, 1000));
        ASSERT_TRUE(proc_owner_has_root(&o));
        ASSERT_ERR(proc_status_owner("Name:\tx\nGid:\t1\n", &o), -EBADMSG);
        ASSERT_ERR(proc_status_owner("Name:\tx\nUid:\t1000\t1000\n", &o), -EBADMSG);
}

/* The real-time priority a process could give itself: what decides
 * whether a policy found on its thread was its own or a dispatcher's. */
TEST(proc_rt_priority_ceiling_from_caps_and_rlimit) {
        const char *limits_none = "Limit                     Soft Limit           Hard Limit           Units\n"
                                  "Max realtime priority     0                    0                    \n";
        const char *limits_hard = "Max realtime priority     0                    50                   \n";
        const char *limits_unl = "Max realtime priority     unlimited            unlimited            \n";
        const char *plain = "Name:\tx\nCapEff:\t0000000000000000\n";
        const char *nice_cap = "Name:\tx\nCapEff:\t0000000000800000\n";
        uint32_t c;

        ASSERT_OK(proc_rt_priority_ceiling(plain, limits_none, &c));
        ASSERT_EQ(c, 0u);
        ASSERT_OK(proc_rt_priority_ceiling(plain, limits_hard, &c));
        ASSERT_EQ(c, 50u);
        ASSERT_OK(proc_rt_priority_ceiling(plain, limits_unl, &c));
        ASSERT_EQ(c, 99u);
        ASSERT_OK(proc_rt_priority_ceiling(nice_cap, limits_none, &c));
        ASSERT_EQ(c, 99u);
        ASSERT_ERR(proc_rt_priority_ceiling(plain, "Max open files 1024 1024 files\n", &c), -EBADMSG);
        ASSERT_ERR(proc_rt_priority_ceiling("Name:\tx\n", limits_none, &c), -EBADMSG);
}

/* This process, as /proc has it. */
TEST(proc_rt_priority_ceiling_of_self) {
        char status[8192], limits[4096];
        FILE *f;
        size_t n;
        uint32_t c;

        f = fopen("/proc/self/status", "re");
        ASSERT_TRUE(f != NULL);
        n = fread(status, 1, sizeof(status) - 1, f);
        status[n] = '\0';
        fclose(f);
        f = fopen("/proc/self/limits", "re");
        ASSERT_TRUE(f != NULL);
        n = fread(limits, 1, sizeof(limits) - 1, f);
        limits[n] = '\0';
        fclose(f);
        ASSERT_OK(proc_rt_priority_ceiling(status, limits, &c));
        ASSERT_CMP(c, <=, 99u);
}

TEST(cgroup_v2_path) {
        char p[64];
        ASSERT_OK(proc_cgroup_v2_path("12:cpuacct:/a\n0::/system.slice/x.service\n", p, sizeof(p)));
        ASSERT_STREQ(p, "/system.slice/x.service");
        ASSERT_OK(proc_cgroup_v2_path("0::/", p, sizeof(p)));
        ASSERT_STREQ(p, "/");
        ASSERT_ERR(proc_cgroup_v2_path("2:cpu:/\n1:name=systemd:/\n", p, sizeof(p)), -ENOENT);
        ASSERT_ERR(proc_cgroup_v2_path("0::/a/very/long/path/that/does/not/fit/in/the/buffer/given/here", p, 8),
                   -ENAMETOOLONG);
}

/* A fake /proc: process pid with n task directories, each with a children
 * file listing kids (or, trap: a FIFO, which blocks whoever opens it). */
static void fake_process(const char *root, pid_t pid, unsigned n, const char *kids, bool trap) {
        char path[512];
        snprintf(path, sizeof(path), "%s/%d", root, (int) pid);
        ASSERT_OK(mkdir(path, 0755));
        snprintf(path, sizeof(path), "%s/%d/task", root, (int) pid);
        ASSERT_OK(mkdir(path, 0755));
        for (unsigned i = 0; i < n; i++) {
                snprintf(path, sizeof(path), "%s/%d/task/%u", root, (int) pid, (unsigned) pid + i);
                ASSERT_OK(mkdir(path, 0755));
                snprintf(path, sizeof(path), "%s/%d/task/%u/children", root, (int) pid, (unsigned) pid + i);
                if (trap) {
                        ASSERT_OK(mkfifo(path, 0644));
                        continue;
                }
                FILE *f = fopen(path, "we");
                ASSERT_TRUE(f);
                fputs(i == 0 ? kids : "", f);
                fclose(f);
        }
}

/* A tree's thread count stops at the limit: past it, a process's children
 * are not listed, which would read one file per thread of it (issue 26: a
 * broker walked 20,000 threads per tree request, 8.5 s). Here every
 * children file of the large process is a FIFO: listing them would block
 * (alarm: the test fails). */
TEST(tree_thread_count_stops_at_the_limit) {
        char root[128], cmd[200];
        uint32_t n = 0;
        int fd = test_temp_dir("fakeproc", root, sizeof(root));
        close(fd);

        fake_process(root, 100, 3, "200 300 ", false);
        fake_process(root, 200, 2, "", false);
        fake_process(root, 300, 40, "", true);
        alarm(10);
        /* Under the limit: the whole (one-process) tree. */
        ASSERT_OK(proc_count_tree_threads(root, 200, 32, 64, &n));
        ASSERT_EQ(n, 2);
        /* 3 + 2 + 40 passes 32 at process 300, whose children are never
         * listed (FIFOs): more than the limit, and that is the answer. */
        ASSERT_OK(proc_count_tree_threads(root, 100, 32, 64, &n));
        ASSERT_EQ(n, 45);
        ASSERT_EQ(proc_count_tree_threads(root, 999, 32, 64, &n), -ESRCH);
        alarm(0);
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
        ASSERT_EQ(system(cmd), 0);
}

static void fake_status(const char *root, pid_t pid, const char *uids, unsigned threads) {
        char path[512];
        snprintf(path, sizeof(path), "%s/%d/status", root, (int) pid);
        FILE *f = fopen(path, "we");
        ASSERT_TRUE(f);
        fprintf(f, "Name:\tx\nUid:\t%s\nGid:\t1000\t1000\t1000\t1000\nThreads:\t%u\n", uids, threads);
        fclose(f);
}

/* What may be moved with a tree (issue 26, case 6): its owner's processes
 * only, a set-uid child skipped with what is below it; and a process whose
 * threads would take the walk past the limit is listed, but its children
 * are not (FIFOs here: a look would block, and the alarm fail the test). */
TEST(owned_descendants_are_the_owners_within_the_thread_limit) {
        char root[128], cmd[200];
        pid_t kids[8];
        size_t n = 0;
        int fd = test_temp_dir("fakeproc", root, sizeof(root));
        close(fd);

        fake_process(root, 100, 3, "200 300 500 ", false);
        fake_status(root, 100, "1000\t1000\t1000\t1000", 3);
        fake_process(root, 200, 2, "", false);
        fake_status(root, 200, "1000\t1000\t1000\t1000", 2);
        fake_process(root, 300, 1, "400 ", false); /* set-uid root */
        fake_status(root, 300, "1000\t0\t0\t0", 1);
        fake_process(root, 400, 1, "", false);
        fake_status(root, 400, "1000\t1000\t1000\t1000", 1);
        fake_process(root, 500, 40, "", true);
        fake_status(root, 500, "1000\t1000\t1000\t1000", 40);
        alarm(10);
        ASSERT_OK(proc_list_owned_descendants(root, 100, 1000, 32, kids, NULL, ELEMENTSOF(kids), &n));
        ASSERT_EQ(n, 2);
        ASSERT_TRUE((kids[0] == 200 && kids[1] == 500) || (kids[0] == 500 && kids[1] == 200));
        /* Another owner's tree: nothing of it. */
        ASSERT_OK(proc_list_owned_descendants(root, 100, 2000, 32, kids, NULL, ELEMENTSOF(kids), &n));
        ASSERT_EQ(n, 0);
        ASSERT_EQ(proc_list_owned_descendants(root, 999, 1000, 32, kids, NULL, ELEMENTSOF(kids), &n), -ESRCH);
        alarm(0);
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
        ASSERT_EQ(system(cmd), 0);
}

TEST_MAIN()
