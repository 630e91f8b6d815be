/* SPDX-License-Identifier: MIT */
#pragma once

/* What pace-run and pacectl share: usage errors in one voice and option
 * values parsed with the same messages. Each returns 0 or, after printing a
 * usage error naming the option and what is allowed, -EINVAL. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "macro.h"
#include "pace/pace.h"

/* Set once by main(): the name every message starts with. */
extern const char *cli_program;

_printf_(1, 2) int cli_usage_error(const char *format, ...);

/* getopt_long's ':' (missing value) and '?' (unknown option, or a value
 * given to an option that takes none; valueless lists those short names). */
int cli_getopt_failure(int c, char **argv, const char *valueless);

/* The options both tools answer alike, and getopt_long's failures: -h
 * calls help() and -V prints the version (both return 1: exit 0 without
 * doing anything else); ':' and '?' as cli_getopt_failure(). Any other c is
 * a bug in the caller's option table and aborts. */
int cli_common_option(int c, char **argv, void (*help)(void), const char *valueless);

int cli_parse_period(const char *option, const char *s, uint64_t *ret);
int cli_parse_util(const char *option, const char *s, uint32_t *ret);
int cli_parse_pid(const char *option, const char *s, pid_t *ret);
int cli_parse_cpu(const char *option, const char *s, int *ret);
/* "thread", "process" or "tree". */
int cli_parse_scope(const char *option, const char *s, pace_scope *ret);

/* The word cli_parse_scope() reads for a scope; "?" for one this build does
 * not know (a newer broker's). */
const char *cli_scope_name(pace_scope scope);

/* "slots", "server" or "aligned". */
int cli_parse_kind(const char *option, const char *s, pace_kind *ret);

/* The word cli_parse_kind() reads for a kind; "default" for
 * PACE_KIND_DEFAULT, "?" for one this build does not know (a newer
 * broker's). */
const char *cli_kind_name(pace_kind kind);

/* Where a grant lives: "CPU 1", or for a split one "CPUs 0+1". */
char *cli_format_cpus(char *buf, size_t size, const pace_grant *g);

/* The broker said no (as opposed to: could not be asked). */
bool cli_is_refusal(int r);
