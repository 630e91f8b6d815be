/* SPDX-License-Identifier: MIT */
#pragma once

/* A minimal test harness: TEST(name) { ... } registers a case; TEST_MAIN()
 * runs them all (or those named on the command line) and exits 0, 1 on the
 * first failed assertion, or 77 (meson's "skipped") if every case skipped. */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct TestCase {
        const char *name;
        void (*fn)(void);
} TestCase;

#define TEST_MAX_CASES 256
static TestCase test_cases_[TEST_MAX_CASES];
static unsigned test_n_cases_;
/* unused where a file includes this only for its checks (stack-harness.c) */
static bool test_skipped_ __attribute__((unused));

static inline void test_register_(const char *name, void (*fn)(void)) {
        if (test_n_cases_ >= TEST_MAX_CASES) {
                fprintf(stderr, "too many test cases\n");
                abort();
        }
        test_cases_[test_n_cases_++] = (TestCase) { name, fn };
}

#define TEST(name)                                                                        \
        static void test_##name(void);                                                    \
        __attribute__((constructor)) static void test_register_##name(void) {             \
                test_register_(#name, test_##name);                                       \
        }                                                                                 \
        static void test_##name(void)

#define TEST_FAIL_(...)                                                                   \
        do {                                                                              \
                fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                           \
                fprintf(stderr, __VA_ARGS__);                                             \
                fputc('\n', stderr);                                                      \
                exit(EXIT_FAILURE);                                                       \
        } while (0)

/* Skips the rest of the current case, with the reason on stdout. */
#define TEST_SKIP(...)                                                                    \
        do {                                                                              \
                printf("  skip: ");                                                       \
                printf(__VA_ARGS__);                                                      \
                putchar('\n');                                                            \
                test_skipped_ = true;                                                     \
                return;                                                                   \
        } while (0)

#define ASSERT_TRUE(expr)                                                                 \
        do {                                                                              \
                if (!(expr))                                                              \
                        TEST_FAIL_("assertion failed: %s", #expr);                        \
        } while (0)

#define ASSERT_FALSE(expr) ASSERT_TRUE(!(expr))

#define ASSERT_EQ(a, b)                                                                   \
        do {                                                                              \
                long long a_ = (long long) (a), b_ = (long long) (b);                     \
                if (a_ != b_)                                                             \
                        TEST_FAIL_("%s == %s: %lld != %lld", #a, #b, a_, b_);             \
        } while (0)

#define ASSERT_NE(a, b)                                                                   \
        do {                                                                              \
                long long a_ = (long long) (a), b_ = (long long) (b);                     \
                if (a_ == b_)                                                             \
                        TEST_FAIL_("%s != %s: both %lld", #a, #b, a_);                    \
        } while (0)

#define ASSERT_CMP(a, op, b)                                                              \
        do {                                                                              \
                long double a_ = (long double) (a), b_ = (long double) (b);               \
                if (!(a_ op b_))                                                          \
                        TEST_FAIL_("%s %s %s: %Lg vs %Lg", #a, #op, #b, a_, b_);          \
        } while (0)

/* r is 0 or positive. */
#define ASSERT_OK(expr)                                                                   \
        do {                                                                              \
                long long r_ = (long long) (expr);                                        \
                if (r_ < 0)                                                               \
                        TEST_FAIL_("%s failed: %lld (%s)", #expr, r_,                     \
                                   r_ > -4096 ? strerror((int) -r_) : "pace error");      \
        } while (0)

#define ASSERT_ERR(expr, err) ASSERT_EQ((expr), (err))

#define ASSERT_STREQ(a, b)                                                                \
        do {                                                                              \
                const char *a_ = (a), *b_ = (b);                                          \
                if (!a_ || !b_ || strcmp(a_, b_) != 0)                                    \
                        TEST_FAIL_("%s == %s: \"%s\" != \"%s\"", #a, #b, a_ ? a_ : "(null)", \
                                   b_ ? b_ : "(null)");                                   \
        } while (0)

#define ASSERT_CONTAINS(haystack, needle)                                                 \
        do {                                                                              \
                const char *h_ = (haystack), *n_ = (needle);                              \
                if (!h_ || !strstr(h_, n_))                                               \
                        TEST_FAIL_("%s does not contain \"%s\": \"%s\"", #haystack, n_,   \
                                   h_ ? h_ : "(null)");                                   \
        } while (0)

#define ASSERT_NOT_CONTAINS(haystack, needle)                                             \
        do {                                                                              \
                const char *h_ = (haystack), *n_ = (needle);                              \
                if (!h_ || strstr(h_, n_))                                                \
                        TEST_FAIL_("%s contains \"%s\": \"%s\"", #haystack, n_,            \
                                   h_ ? h_ : "(null)");                                   \
        } while (0)

/* path (created or emptied) holding text: 0, or a negative errno for the
 * caller to assert or to hand back, as where a harness sets a daemon up. */
static inline int test_write_text(const char *path, const char *text) {
        FILE *f = fopen(path, "we");
        if (!f)
                return -errno;
        fputs(text, f);
        return fclose(f) == 0 ? 0 : -errno;
}

/* fork() with a pipe from the child to the parent, for a child that
 * reports back: *ret_fd is the write end in the child (where it returns 0)
 * and the read end in the parent (where it returns the child's pid); the
 * other end is closed on each side. Fails the test if either cannot be made. */
static inline pid_t test_fork_pipe(int *ret_fd) {
        int p[2];

        if (pipe(p) < 0)
                TEST_FAIL_("pipe: %s", strerror(errno));
        pid_t pid = fork();
        if (pid < 0)
                TEST_FAIL_("fork: %s", strerror(errno));
        close(p[pid == 0 ? 0 : 1]);
        *ret_fd = p[pid == 0 ? 1 : 0];
        return pid;
}

/* A new empty directory /tmp/pace-test-NAME-XXXXXX (its path in ret_path)
 * and an fd on it; fails the test if there is none. */
static inline int test_temp_dir(const char *name, char *ret_path, size_t size) {
        snprintf(ret_path, size, "/tmp/pace-test-%s-XXXXXX", name);
        if (!mkdtemp(ret_path))
                TEST_FAIL_("mkdtemp(%s): %s", ret_path, strerror(errno));
        int fd = open(ret_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                TEST_FAIL_("open(%s): %s", ret_path, strerror(errno));
        return fd;
}

#define TEST_MAIN()                                                                       \
        int main(int argc, char **argv) {                                                 \
                unsigned ran = 0, skipped = 0;                                            \
                setvbuf(stdout, NULL, _IOLBF, 0);                                         \
                for (unsigned i_ = 0; i_ < test_n_cases_; i_++) {                         \
                        bool selected = argc < 2;                                         \
                        for (int a_ = 1; a_ < argc; a_++)                                 \
                                if (strcmp(argv[a_], test_cases_[i_].name) == 0)          \
                                        selected = true;                                  \
                        if (!selected)                                                    \
                                continue;                                                 \
                        printf("== %s\n", test_cases_[i_].name);                          \
                        test_skipped_ = false;                                            \
                        test_cases_[i_].fn();                                             \
                        ran++;                                                            \
                        if (test_skipped_)                                                \
                                skipped++;                                                \
                }                                                                         \
                printf("%u cases, %u skipped\n", ran, skipped);                           \
                return ran > 0 && skipped == ran ? 77 : EXIT_SUCCESS;                     \
        }
