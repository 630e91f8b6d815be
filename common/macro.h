/* SPDX-License-Identifier: MIT */
#pragma once

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _unused_ __attribute__((unused))
#define _printf_(a, b) __attribute__((format(printf, a, b)))
#define _pure_ __attribute__((pure))

#define ELEMENTSOF(x) (sizeof(x) / sizeof((x)[0]))
/* Each argument is evaluated once (MAX(x, ++n) must not bump n twice), with
 * names unique per expansion so nested uses do not shadow each other. */
#define PACE_CONCAT_(a, b) a##b
#define PACE_CONCAT(a, b) PACE_CONCAT_(a, b)
#define PACE_MINMAX_(a, b, op, u)                                              \
        ({                                                                     \
                __typeof__(a) PACE_CONCAT(_a_, u) = (a);                       \
                __typeof__(b) PACE_CONCAT(_b_, u) = (b);                       \
                PACE_CONCAT(_a_, u) op PACE_CONCAT(_b_, u) ? PACE_CONCAT(_a_, u) \
                                                            : PACE_CONCAT(_b_, u); \
        })
#define MIN(a, b) PACE_MINMAX_(a, b, <, __COUNTER__)
#define MAX(a, b) PACE_MINMAX_(a, b, >, __COUNTER__)

#define NSEC_PER_SEC 1000000000ULL
#define NSEC_PER_MSEC 1000000ULL
#define NSEC_PER_USEC 1000ULL
#define PPM 1000000u

/* Hand an owned pointer or fd over, leaving the cleanup attribute nothing to free. */
#define TAKE_PTR(p)                              \
        ({                                       \
                __typeof__(p) _taken_ = (p);     \
                (p) = NULL;                      \
                _taken_;                         \
        })
#define TAKE_FD(fd)                              \
        ({                                       \
                int _taken_fd_ = (fd);           \
                (fd) = -EBADF;                   \
                _taken_fd_;                      \
        })

static inline void freep(void *p) {
        free(*(void **) p);
}
#define _cleanup_free_ _cleanup_(freep)

static inline int safe_close(int fd) {
        if (fd >= 0) {
                int saved = errno;
                (void) close(fd);
                errno = saved;
        }
        return -EBADF;
}
static inline void closep(int *fd) {
        safe_close(*fd);
}
#define _cleanup_close_ _cleanup_(closep)

/* errno of a failed libc call, never 0, as a negative value. */
static inline int negative_errno(void) {
        return errno > 0 ? -errno : -EIO;
}

#define DEFINE_TRIVIAL_CLEANUP_FUNC(type, func)  \
        static inline void func##p(type *p) {    \
                if (*p)                          \
                        func(*p);                \
        }

/* qsort() order for uint64_t. */
static inline int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;
        return (x > y) - (x < y);
}
