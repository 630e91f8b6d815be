/* SPDX-License-Identifier: MIT */
/* pace-broker over a real socket: reservation kinds (slots, server,
 * aligned) over the wire, as granted, shown, refused and changed. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <grp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "broker-harness.h"
#include "macro.h"
#include "pace-limits.h"
#include "table-shm.h"
#include "pace.pb-c.h"
#include "pace/pace.h"
#include "test.h"
#include "time-util.h"

static PaceTableBuffer table_before, table_after; /* large: off the stack */

/* Reservation kinds over the wire. */
static const char *config_kinds =
        "{ \"slot_us\": 1000, \"non_rt_share\": 0.25, \"max_reservations_per_user\": 8,"
        "  \"max_utilization_per_user\": 1.5 }";

/* A reserve request as a client that predates kinds sends it, or with a
 * kind of any number. */
static Pace__Response *raw_reserve(int fd, pid_t pid, int32_t cpu, uint32_t ppm, bool has_kind, int kind) {
        Pace__Request req;
        Pace__ReserveRequest res;
        raw_reserve_init(&req, &res, 50 * NSEC_PER_MSEC, ppm);
        res.has_pid = pid > 0;
        res.pid = pid;
        res.has_cpu = cpu >= 0;
        res.cpu = cpu;
        res.has_kind = has_kind;
        res.kind = (Pace__Kind) kind;
        return raw_request(fd, &req);
}

static uint32_t table_flags_of(const PaceTableBuffer *t, uint64_t id) {
        for (uint32_t i = 0; i < t->n_reservations; i++)
                if (t->reservations[i].id == id)
                        return t->reservations[i].flags;
        TEST_FAIL_("reservation %" PRIu64 " is not in the table", id);
        return 0;
}

/* Reservation id's flags in b's table as it is now. */
static uint32_t table_flags_now(const BrokerInstance *b, uint64_t id) {
        read_table(b, &table_after);
        return table_flags_of(&table_after, id);
}

static pace_kind status_kind_of(pace *p, uint64_t id) {
        pace_status_report *st = NULL;
        pace_kind kind = PACE_KIND_DEFAULT;
        ASSERT_OK(pace_status(p, &st));
        for (size_t i = 0; i < st->n_reservations; i++)
                if (st->reservations[i].id == id)
                        kind = st->reservations[i].kind;
        pace_status_report_free(st);
        return kind;
}

/* Each kind is granted as asked, said in the grant and in status, and
 * written into the table; a client that sends no kind gets slots, as
 * before kinds; a restarted broker keeps every kind. */
TEST(each_kind_is_granted_and_shown) {
        BrokerInstance b;
        pace_grant slots, server, aligned;

        pid_t k1 = fork_paused(), k2 = fork_paused(), k3 = fork_paused(), k4 = fork_paused();
        pace *p = broker_start_connected(&b, config_kinds);
        /* All on CPU 0, the block first: spread slots leave no stretch of
         * ten free slots for a block placed after them. */
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 200000, .pid = k3,
                                       .cpu = 0, .kind = PACE_KIND_ALIGNED };
        ASSERT_OK(pace_reserve(p, &params, &aligned));
        ASSERT_EQ(aligned.kind, PACE_KIND_ALIGNED);
        ASSERT_EQ(aligned.period_ns, 50 * NSEC_PER_MSEC);
        ASSERT_EQ(aligned.budget_ns, 10 * NSEC_PER_MSEC);
        params.pid = k1;
        params.kind = PACE_KIND_SLOTS;
        ASSERT_OK(pace_reserve(p, &params, &slots));
        ASSERT_EQ(slots.kind, PACE_KIND_SLOTS);
        params.pid = k2;
        params.kind = PACE_KIND_SERVER;
        ASSERT_OK(pace_reserve(p, &params, &server));
        ASSERT_EQ(server.kind, PACE_KIND_SERVER);
        ASSERT_EQ(server.phase_ns, 0u); /* its windows start at multiples of its period */

        /* The table: the flags, and the aligned budget in one piece from
         * the phase the grant names. */
        read_table(&b, &table_after);
        ASSERT_EQ(table_flags_of(&table_after, slots.id), 0u);
        ASSERT_EQ(table_flags_of(&table_after, server.id), PACE_RES_SERVER);
        ASSERT_EQ(table_flags_of(&table_after, aligned.id), PACE_RES_ALIGNED);
        uint16_t owner = 0;
        for (uint32_t i = 0; i < table_after.n_reservations; i++)
                if (table_after.reservations[i].id == aligned.id)
                        owner = (uint16_t) (i + 1);
        const PaceTableCpu *cpu0 = NULL;
        for (uint32_t c = 0; c < table_after.n_cpus; c++)
                if (table_after.cpus[c].cpu == 0)
                        cpu0 = &table_after.cpus[c];
        ASSERT_TRUE(cpu0 != NULL);
        uint32_t phase = (uint32_t) (aligned.phase_ns / NSEC_PER_MSEC);
        for (uint32_t k = 0; k < 50; k++)
                ASSERT_EQ(table_after.slots[cpu0->first_slot + (phase + k) % cpu0->frame_slots] == owner, k < 10);

        /* A client that predates kinds: no field, slots granted and said. */
        int fd = broker_raw_connect(b.socket);
        ASSERT_OK(fd);
        /* 5%: beside the three 20% ones CPU 0 has room for that much at
         * the default switch charge. */
        Pace__Response *resp = raw_reserve(fd, k4, 0, 50000, false, 0);
        ASSERT_TRUE(resp);
        ASSERT_EQ(resp->body_case, PACE__RESPONSE__BODY_GRANT);
        ASSERT_TRUE(resp->grant->has_kind);
        ASSERT_EQ(resp->grant->kind, PACE__KIND__KIND_SLOTS);
        uint64_t old_client = resp->grant->id;
        pace__response__free_unpacked(resp, NULL);
        close(fd);
        ASSERT_EQ(status_kind_of(p, old_client), PACE_KIND_SLOTS);
        ASSERT_EQ(table_flags_now(&b, old_client), 0u);

        /* Status says each one's kind. */
        ASSERT_EQ(status_kind_of(p, slots.id), PACE_KIND_SLOTS);
        ASSERT_EQ(status_kind_of(p, server.id), PACE_KIND_SERVER);
        ASSERT_EQ(status_kind_of(p, aligned.id), PACE_KIND_ALIGNED);

        /* A crash and a restart: the new broker reads the kinds back from
         * the table. */
        pace_close(p);
        ASSERT_OK(broker_restart(&b, SIGKILL));
        ASSERT_OK(pace_connect(b.socket, &p));
        ASSERT_EQ(status_kind_of(p, slots.id), PACE_KIND_SLOTS);
        ASSERT_EQ(status_kind_of(p, server.id), PACE_KIND_SERVER);
        ASSERT_EQ(status_kind_of(p, aligned.id), PACE_KIND_ALIGNED);

        pid_t kids[] = { k1, k2, k3, k4 };
        reap_children(kids, ELEMENTSOF(kids));
        broker_stop_connected(&b, p);
}

/* A kind the protocol does not define is refused, naming the field, and
 * changes nothing; in a reserve and in a modify. */
TEST(a_bad_kind_is_refused_and_changes_nothing) {
        BrokerInstance b;
        pace_grant g;
        size_t n;

        pid_t k = fork_paused();
        pace *p = broker_start_connected(&b, config_kinds);
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 200000, .pid = k,
                                       .cpu = -1, .kind = PACE_KIND_SERVER };
        ASSERT_OK(pace_reserve(p, &params, &g));
        read_table(&b, &table_before);
        uint64_t gen = status_generation(p, &n);
        ASSERT_EQ(n, 1);

        int fd = broker_raw_connect(b.socket);
        ASSERT_OK(fd);
        static const int bad[] = { 4, 9, -1, INT32_MAX };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                char says[96];
                snprintf(says, sizeof(says), "kind %d does not exist: use slots (1), server (2) or aligned (3)",
                         bad[i]);
                assert_error_reply(raw_reserve(fd, getpid(), -1, 100000, true, bad[i]),
                                   PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT, says);
        }
        {
                Pace__Request req = PACE__REQUEST__INIT;
                Pace__ModifyRequest mod = PACE__MODIFY_REQUEST__INIT;
                req.version = 1;
                req.body_case = PACE__REQUEST__BODY_MODIFY;
                req.modify = &mod;
                mod.id = g.id;
                mod.period_ns = 50 * NSEC_PER_MSEC;
                mod.utilization_ppm = 300000;
                mod.has_kind = true;
                mod.kind = (Pace__Kind) 7;
                assert_error_reply(raw_request(fd, &req), PACE__ERROR_CODE__ERROR_INVALID_ARGUMENT,
                                   "kind 7 does not exist: use slots (1), server (2) or aligned (3), or leave kind "
                                   "out for the reservation's own");
        }
        close(fd);

        ASSERT_EQ(status_generation(p, &n), gen);
        ASSERT_EQ(n, 1);
        ASSERT_EQ(status_kind_of(p, g.id), PACE_KIND_SERVER);
        read_table(&b, &table_after);
        ASSERT_EQ(memcmp(&table_before, &table_after, sizeof(table_before)), 0);

        reap_children(&k, 1);
        broker_stop_connected(&b, p);
}

/* A change keeps the kind unless it names one; naming one changes it (and
 * the table's flags) in the same all-or-nothing swap. */
TEST(modify_keeps_or_changes_the_kind) {
        BrokerInstance b;
        pace_grant g, m;

        pid_t k = fork_paused();
        pace *p = broker_start_connected(&b, config_kinds);
        pace_reserve_params params = { .period_ns = 50 * NSEC_PER_MSEC, .utilization_ppm = 200000, .pid = k,
                                       .cpu = -1, .kind = PACE_KIND_SERVER };
        ASSERT_OK(pace_reserve(p, &params, &g));

        /* No kind (as from a client that predates kinds): still a server. */
        params.kind = PACE_KIND_DEFAULT;
        params.utilization_ppm = 300000;
        ASSERT_OK(pace_modify(p, g.id, &params, &m));
        ASSERT_EQ(m.kind, PACE_KIND_SERVER);
        ASSERT_EQ(m.budget_ns, 15 * NSEC_PER_MSEC);
        ASSERT_EQ(status_kind_of(p, g.id), PACE_KIND_SERVER);
        ASSERT_EQ(table_flags_now(&b, g.id), PACE_RES_SERVER);

        /* Named: aligned now, its budget one block from its phase. */
        params.kind = PACE_KIND_ALIGNED;
        ASSERT_OK(pace_modify(p, g.id, &params, &m));
        ASSERT_EQ(m.kind, PACE_KIND_ALIGNED);
        ASSERT_EQ(status_kind_of(p, g.id), PACE_KIND_ALIGNED);
        ASSERT_EQ(table_flags_now(&b, g.id), PACE_RES_ALIGNED);

        /* And back to slots. */
        params.kind = PACE_KIND_SLOTS;
        ASSERT_OK(pace_modify(p, g.id, &params, &m));
        ASSERT_EQ(m.kind, PACE_KIND_SLOTS);
        ASSERT_EQ(table_flags_now(&b, g.id), 0u);

        reap_children(&k, 1);
        broker_stop_connected(&b, p);
}

TEST_MAIN()
