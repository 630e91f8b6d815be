/* SPDX-License-Identifier: MIT */
#include <grp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "hostile-harness.h"
#include "stack-harness.h"
#include "test.h"

Shared *sh;

void shared_reset(void) {
        if (!sh) {
                sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
                ASSERT_TRUE(sh != MAP_FAILED);
        }
        memset((void *) sh, 0, sizeof(*sh));
}

/* Drops to an ordinary user: no real-time rlimit, no groups. PDEATHSIG is
 * cleared by setuid(), so it is set after; the alarm survives. */
void become_user(uid_t uid, pid_t parent) {
        struct rlimit rl = { 0, 0 };
        if (setrlimit(RLIMIT_RTPRIO, &rl) < 0 || setgroups(0, NULL) < 0 || setgid(uid) < 0 || setuid(uid) < 0)
                _exit(2);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
                _exit(2);
}

/* Forks an attacker: uid 60001, pinned to CPU 1 to start with, runs fn. */
pid_t attacker(void (*fn)(void)) {
        pid_t parent = getpid(), pid = fork();
        ASSERT_OK(pid);
        if (pid == 0) {
                alarm(CHILD_LIFETIME_S);
                pin(STACK_CPU);
                become_user(ATTACKER_UID, parent);
                fn();
                _exit(0);
        }
        return pid;
}

/* A SCHED_OTHER nice-0 hog pinned to `cpu`, as root. */
pid_t hog_on(int cpu) {
        pid_t pid = fork();
        ASSERT_OK(pid);
        if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                alarm(CHILD_LIFETIME_S);
                pin(cpu);
                hog(NULL);
        }
        return pid;
}

/* In an attacker: connect and reserve; the handle stays open (a later
 * release goes through it). Reports the outcome in sh. */
pace *attacker_reserve(uint32_t period_ms, uint32_t ppm, pace_scope scope, pid_t tid) {
        pace *p = NULL;
        pace_grant g;
        pace_reserve_params params = { .period_ns = period_ms * NSEC_PER_MSEC, .utilization_ppm = ppm, .cpu = STACK_CPU,
                                       .scope = scope, .tid = tid };
        if (pace_connect(stack_socket, &p) < 0 || pace_reserve(p, &params, &g) < 0) {
                fprintf(stderr, "attacker: reservation refused: %s\n", pace_last_message() ?: "no reason");
                atomic_store(&sh->reserved, -1);
                _exit(3);
        }
        atomic_store(&sh->id, g.id);
        atomic_store(&sh->reserved, 1);
        return p;
}

/* In an attacker: if told to, release through its own connection. */
void attacker_maybe_release(pace *p) {
        if (atomic_load_explicit(&sh->release, memory_order_relaxed) && !atomic_load(&sh->released))
                atomic_store(&sh->released, pace_release(p, atomic_load(&sh->id)) < 0 ? -1 : 1);
}

bool wait_flag(_Atomic int *flag, int want, unsigned ms) {
        for (unsigned i = 0; i < ms / 5 && atomic_load(flag) != want; i++)
                sleep_ms(5);
        return atomic_load(flag) == want;
}

void await_reserved(void) {
        for (int i = 0; i < 600 && atomic_load(&sh->reserved) == 0; i++)
                sleep_ms(10);
        ASSERT_EQ(atomic_load(&sh->reserved), 1);
}

void spin_until_fifo(void) {
        while (policy_of(0) != SCHED_FIFO)
                ;
        atomic_fetch_add(&sh->promoted, 1);
}

void *spinner_thread(void *arg) {
        for (;;)
                ;
        return NULL;
}

pid_t start_attacker(Stack *s, void (*fn)(void)) {
        shared_reset();
        stack_start(s);
        pid_t pid = attacker(fn);
        await_reserved();
        return pid;
}
