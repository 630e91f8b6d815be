/* SPDX-License-Identifier: MIT */
#pragma once

#include <stdint.h>
#include <sys/types.h>

/* "50ms", "250us", "1s", "100000ns", "1.5ms". A bare number is refused: a
 * duration without a unit is ambiguous. Result must be > 0 and fit in uint64.
 * Returns -EINVAL for syntax, -ERANGE for overflow or zero. */
int parse_duration_ns(const char *s, uint64_t *ret_ns);

/* "60%", "0.6", "60.5%", "1". Result in parts per million, 1..1000000
 * (0 and more than one CPU are refused: -ERANGE; syntax: -EINVAL). */
int parse_utilization_ppm(const char *s, uint32_t *ret_ppm);

/* Decimal pid/cpu numbers: no sign, no trailing garbage. */
int parse_pid(const char *s, pid_t *ret_pid);
int parse_uint32(const char *s, uint32_t *ret);

/* Human-readable, e.g. "50ms", "1.5ms", "250us". buf at least 32 bytes. */
const char *format_duration(char *buf, size_t size, uint64_t ns);
/* "60%", "62.5%" */
const char *format_ppm(char *buf, size_t size, uint32_t ppm);
/* A CPU mask (bit n: CPU n) in the kernel's list form: "1", "0-3,8". */
const char *format_cpu_mask(char *buf, size_t size, uint64_t mask);
