/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "macro.h"
#include "parse-util.h"

static bool is_digit(char c) {
        return c >= '0' && c <= '9';
}

/* Length of a "D+" or "D+.D+" prefix of s, 0 if there is none. Leading and
 * trailing dots ("5.", ".5") are refused: they are usually typos. */
static size_t decimal_length(const char *s) {
        size_t n = 0;

        while (is_digit(s[n]))
                n++;
        if (n == 0)
                return 0;
        if (s[n] != '.')
                return n;
        if (!is_digit(s[n + 1]))
                return 0;
        n++;
        while (is_digit(s[n]))
                n++;
        return n;
}

/* A leading '-' is stepped over (*s moves past it) and reported in
 * ret_negative, so that a well-formed negative value can be told from a
 * malformed one; then as decimal_length(). */
static size_t signed_decimal_length(const char **s, bool *ret_negative) {
        *ret_negative = (*s)[0] == '-';
        if (*ret_negative)
                (*s)++;
        return decimal_length(*s);
}

/* The same for a value that must start with a number: -EINVAL without. */
static int leading_decimal(const char **s, bool *ret_negative, size_t *ret_len) {
        if (!*s)
                return -EINVAL;
        *ret_len = signed_decimal_length(s, ret_negative);
        return *ret_len == 0 ? -EINVAL : 0;
}

static int mul_add_u64(uint64_t *v, uint64_t mul, uint64_t add) {
        if (*v > (UINT64_MAX - add) / mul)
                return -ERANGE;
        *v = *v * mul + add;
        return 0;
}

/* The decimal number in s[0..len) times 10^scale, rounded half up, in integer
 * arithmetic only: "1.5" with scale 6 is exactly 1500000, which a double
 * multiplication does not promise. The syntax was checked by decimal_length(). */
static int scale_decimal(const char *s, size_t len, unsigned scale, uint64_t *ret) {
        uint64_t v = 0;
        size_t i = 0;
        int r;

        for (; i < len && s[i] != '.'; i++) {
                r = mul_add_u64(&v, 10, (uint64_t) (s[i] - '0'));
                if (r < 0)
                        return r;
        }
        if (i < len)
                i++; /* the dot */

        for (; scale > 0; scale--) {
                uint64_t digit = i < len ? (uint64_t) (s[i++] - '0') : 0;

                r = mul_add_u64(&v, 10, digit);
                if (r < 0)
                        return r;
        }

        /* The first digit beyond the scale decides the rounding. */
        if (i < len && s[i] >= '5') {
                r = mul_add_u64(&v, 1, 1);
                if (r < 0)
                        return r;
        }

        *ret = v;
        return 0;
}

int parse_duration_ns(const char *s, uint64_t *ret_ns) {
        static const struct {
                const char *suffix;
                unsigned scale; /* ns per unit, as a power of ten */
        } units[] = {
                { "ns", 0 },
                { "us", 3 },
                { "\xc2\xb5s", 3 }, /* µs */
                { "ms", 6 },
                { "s", 9 },
        };
        bool negative;
        uint64_t v;
        size_t len;
        int r;

        r = leading_decimal(&s, &negative, &len);
        if (r < 0)
                return r;

        for (size_t i = 0; i < ELEMENTSOF(units); i++) {
                if (strcmp(s + len, units[i].suffix) != 0)
                        continue;

                /* Well-formed but negative is a range problem, not a syntax one. */
                if (negative)
                        return -ERANGE;
                r = scale_decimal(s, len, units[i].scale, &v);
                if (r < 0)
                        return r;
                if (v == 0)
                        return -ERANGE;
                *ret_ns = v;
                return 0;
        }

        /* No unit, or an unknown one: a bare "50" could mean anything. */
        return -EINVAL;
}

int parse_utilization_ppm(const char *s, uint32_t *ret_ppm) {
        bool negative, percent;
        uint64_t v;
        size_t len;
        int r;

        r = leading_decimal(&s, &negative, &len);
        if (r < 0)
                return r;
        if (s[len] == '%' && s[len + 1] == '\0')
                percent = true;
        else if (s[len] == '\0')
                percent = false;
        else
                return -EINVAL;
        if (negative)
                return -ERANGE;

        /* 1% is 10^4 ppm, a fraction of 1 is 10^6 ppm. */
        r = scale_decimal(s, len, percent ? 4 : 6, &v);
        if (r < 0)
                return r;
        if (v == 0 || v > PPM)
                return -ERANGE;

        *ret_ppm = (uint32_t) v;
        return 0;
}

/* Plain decimal digits only: strtoul would also take spaces, signs and "0x".
 * Syntax is checked before range so that "99999999999x" is -EINVAL. */
static int parse_digits(const char *s, uint64_t max, uint64_t *ret) {
        uint64_t v = 0;
        bool overflow = false;

        if (!s || !is_digit(s[0]))
                return -EINVAL;
        for (; *s; s++) {
                if (!is_digit(*s))
                        return -EINVAL;
                if (!overflow && mul_add_u64(&v, 10, (uint64_t) (*s - '0')) < 0)
                        overflow = true;
        }
        if (overflow || v > max)
                return -ERANGE;

        *ret = v;
        return 0;
}

int parse_uint32(const char *s, uint32_t *ret) {
        uint64_t v;
        int r;

        r = parse_digits(s, UINT32_MAX, &v);
        if (r < 0)
                return r;

        *ret = (uint32_t) v;
        return 0;
}

/* A pid is a positive int: parse_uint32()'s digits, at most INT32_MAX. */
int parse_pid(const char *s, pid_t *ret_pid) {
        uint32_t v;
        int r;

        r = parse_uint32(s, &v);
        if (r < 0)
                return r;
        if (v == 0 || v > INT32_MAX)
                return -ERANGE;

        *ret_pid = (pid_t) v;
        return 0;
}

/* value / 10^decimals, printed with the trailing zeros of the fraction dropped. */
static const char *format_fixed(char *buf, size_t size, uint64_t value, unsigned decimals, const char *suffix) {
        uint64_t div = 1, frac;
        unsigned digits = decimals;

        if (!buf || size == 0)
                return buf;

        for (unsigned i = 0; i < decimals; i++)
                div *= 10;
        frac = value % div;
        if (frac == 0) {
                snprintf(buf, size, "%" PRIu64 "%s", value / div, suffix);
                return buf;
        }
        while (frac % 10 == 0) {
                frac /= 10;
                digits--;
        }
        snprintf(buf, size, "%" PRIu64 ".%0*" PRIu64 "%s", value / div, (int) digits, frac, suffix);
        return buf;
}

const char *format_duration(char *buf, size_t size, uint64_t ns) {
        static const struct {
                const char *suffix;
                uint64_t ns;
        } units[] = {
                { "s", NSEC_PER_SEC },
                { "ms", NSEC_PER_MSEC },
                { "us", NSEC_PER_USEC },
        };

        /* The largest unit in which the value is at least 1 and needs no more
         * than three decimals: exact, so parse_duration_ns() reads it back. */
        for (size_t i = 0; i < ELEMENTSOF(units); i++)
                if (ns >= units[i].ns && ns % (units[i].ns / 1000) == 0)
                        return format_fixed(buf, size, ns / (units[i].ns / 1000), 3, units[i].suffix);

        return format_fixed(buf, size, ns, 0, "ns");
}

const char *format_ppm(char *buf, size_t size, uint32_t ppm) {
        /* 1% is 10^4 ppm: four decimals keep every ppm value exact. */
        return format_fixed(buf, size, ppm, 4, "%");
}

const char *format_cpu_mask(char *buf, size_t size, uint64_t mask) {
        size_t used = 0;

        if (size == 0)
                return buf;
        buf[0] = '\0';
        for (unsigned first = 0; first < 64; first++) {
                unsigned last = first;
                int n;

                if (!(mask & (UINT64_C(1) << first)))
                        continue;
                while (last < 63 && (mask & (UINT64_C(1) << (last + 1))))
                        last++;
                if (last == first)
                        n = snprintf(buf + used, size - used, "%s%u", used ? "," : "", first);
                else
                        n = snprintf(buf + used, size - used, "%s%u-%u", used ? "," : "", first, last);
                if (n < 0 || (size_t) n >= size - used) {
                        buf[used] = '\0'; /* cut at the last whole range */
                        break;
                }
                used += (size_t) n;
                first = last;
        }
        return buf;
}
