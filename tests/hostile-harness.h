/* SPDX-License-Identifier: MIT */
#pragma once

/* What the hostile tests (tests/integration/test-hostile*.c) share: an
 * attacker process that runs as an ordinary user, the page it and the test
 * talk through, and the victims it is measured against. */

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "pace/pace.h"
#include "stack-harness.h"

#define ATTACKER_UID 60001
/* Each case's alarm(). */
#define CASE_ALARM_S 120

/* What an attacker and the test tell each other (MAP_SHARED, reset per case). */
typedef struct Shared {
        _Atomic int reserved;  /* 1 granted, -1 refused */
        _Atomic uint64_t id;   /* the grant's id */
        _Atomic int promoted;  /* threads that saw themselves SCHED_FIFO */
        _Atomic int release;   /* test → attacker: pace_release() now */
        _Atomic int released;  /* 1 done, -1 failed */
        _Atomic int thread_exit;
        _Atomic pid_t tid;
        _Atomic unsigned threads;  /* threads created */
        _Atomic uint64_t counter;  /* whatever the attack counts */
        _Atomic int err;
} Shared;
/* Mapped by shared_reset(). */
extern Shared *sh;

/* Maps sh on first use (shared with every child forked after), and zeroes it. */
void shared_reset(void);
/* Drops to an ordinary user: no real-time rlimit, no groups. PDEATHSIG is
 * cleared by setuid(), so it is set after; the alarm survives. */
void become_user(uid_t uid, pid_t parent);
/* Forks an attacker: uid 60001, pinned to CPU 1 to start with, runs fn. */
pid_t attacker(void (*fn)(void));
/* A SCHED_OTHER nice-0 hog pinned to `cpu`, as root. */
pid_t hog_on(int cpu);
/* In an attacker: connect and reserve; the handle stays open (a later
 * release goes through it). Reports the outcome in sh. */
pace *attacker_reserve(uint32_t period_ms, uint32_t ppm, pace_scope scope, pid_t tid);
/* In an attacker: if told to, release through its own connection. */
void attacker_maybe_release(pace *p);
/* Waits up to ms for *flag to be want; whether it is. */
bool wait_flag(_Atomic int *flag, int want, unsigned ms);
/* A stack (stack_start()), sh reset, and an attacker running fn that the
 * broker granted: the attacker. */
pid_t start_attacker(Stack *s, void (*fn)(void));
/* Waits up to 6 s for the attacker's reservation; fails the test if refused. */
void await_reserved(void);
/* In an attacker's thread: spins until promoted, then counts itself in sh->promoted. */
void spin_until_fifo(void);
/* A pthread body that spins forever. */
void *spinner_thread(void *arg);
