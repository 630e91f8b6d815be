/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "macro.h"
#include "table-guard.h"

/* Per thread: each dispatch thread reads the mapping on its own. */
static __thread sigjmp_buf *bus_guard;
static atomic_bool installed;

static void on_sigbus(int sig, siginfo_t *si, void *uc) {
        if (bus_guard)
                siglongjmp(*bus_guard, 1);
        /* Not ours: die as the fault would have made us. */
        signal(SIGBUS, SIG_DFL);
        raise(SIGBUS);
}

int table_guard_install(void) {
        /* SA_NODEFER: siglongjmp(…, 0) then leaves no signal blocked, so the
         * guard costs no sigprocmask() on the dispatch path. */
        struct sigaction sa = { .sa_sigaction = on_sigbus, .sa_flags = SA_SIGINFO | SA_NODEFER };

        if (atomic_load(&installed))
                return 0;
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGBUS, &sa, NULL) < 0)
                return negative_errno();
        atomic_store(&installed, true);
        return 0;
}

typedef enum GuardedRead {
        READ_SNAPSHOT,
        READ_GENERATION,
        READ_WAIT,
} GuardedRead;

/* One guard for every kind of read, so there is one place where a fault
 * can land and one way back from it. */
static int guarded_read(const TableReader *r, GuardedRead what, PaceTableBuffer *out, uint64_t seen,
                        uint64_t *ret) {
        sigjmp_buf jb;
        volatile int ret_r = -EFAULT;

        if (sigsetjmp(jb, 0) == 0) {
                bus_guard = &jb;
                switch (what) {
                case READ_SNAPSHOT:
                        ret_r = table_reader_snapshot(r, out, ret);
                        break;
                case READ_GENERATION:
                        *ret = table_reader_generation(r);
                        ret_r = 0;
                        break;
                case READ_WAIT:
                        ret_r = table_reader_wait(r, seen, NULL);
                        break;
                }
        }
        bus_guard = NULL;
        return ret_r;
}

int table_guard_snapshot(const TableReader *r, PaceTableBuffer *out, uint64_t *ret_gen) {
        return guarded_read(r, READ_SNAPSHOT, out, 0, ret_gen);
}

int table_guard_generation(const TableReader *r, uint64_t *ret) {
        return guarded_read(r, READ_GENERATION, NULL, 0, ret);
}

int table_guard_wait(const TableReader *r, uint64_t seen) {
        return guarded_read(r, READ_WAIT, NULL, seen, NULL);
}
