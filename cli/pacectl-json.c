/* SPDX-License-Identifier: MIT */

/* pacectl --json: what a program reads. */

#include <errno.h>
#include <stdlib.h>

#include "cli.h"
#include "pacectl.h"

/* The share of one CPU delivered in the accounting window, in ppm; not
 * capped, since whatever the dispatcher measured is the answer. */
static double delivered_ppm(const pace_accounting *a) {
        if (a->window_ns == 0)
                return 0;
        return (double) (((unsigned __int128) a->delivered_ns * PPM + a->window_ns / 2) / a->window_ns);
}

/* Numbers are raw nanoseconds and ppm, exact for a program to compute with. A
 * double holds integers up to 2^53 exactly: 104 days in ns, far beyond any
 * period. */
static bool json_add(cJSON *o, const char *name, double value) {
        return cJSON_AddNumberToObject(o, name, value) != NULL;
}

cJSON *json_grant(const pace_grant *g) {
        _cleanup_(cJSON_Deletep) cJSON *o = cJSON_CreateObject();

        if (!o)
                return NULL;
        if (!json_add(o, "id", (double) g->id) ||
            !json_add(o, "pid", g->pid) ||
            !json_add(o, "uid", g->uid) ||
            !json_add(o, "cpu", g->cpu) ||
            !json_add(o, "requested_period_ns", (double) g->requested_period_ns) ||
            !json_add(o, "requested_utilization_ppm", g->requested_utilization_ppm) ||
            !json_add(o, "period_ns", (double) g->period_ns) ||
            !json_add(o, "budget_ns", (double) g->budget_ns) ||
            !json_add(o, "utilization_ppm", granted_ppm(g)) ||
            !json_add(o, "slot_ns", (double) g->slot_ns) ||
            !cJSON_AddStringToObject(o, "kind", cli_kind_name(g->kind)) ||
            !cJSON_AddStringToObject(o, "scope", cli_scope_name(g->scope)) ||
            !json_add(o, "tid", g->tid) ||
            !json_add(o, "threads", g->threads) ||
            !json_add(o, "phase_ns", (double) g->phase_ns))
                return NULL;
        /* Every CPU it lives on: [cpu], or a split one's pieces. */
        cJSON *cpus = cJSON_AddArrayToObject(o, "cpus");
        if (!cpus)
                return NULL;
        for (unsigned cpu = 0; cpu < 64; cpu++)
                if (g->split_cpus ? (g->split_cpus & (UINT64_C(1) << cpu)) != 0 : (int) cpu == g->cpu)
                        if (!cJSON_AddItemToArray(cpus, cJSON_CreateNumber(cpu)))
                                return NULL;

        /* null, not 0, before the dispatcher's first report: "nothing
         * delivered" and "nothing known" are different answers. */
        if (!g->accounting.valid) {
                if (!cJSON_AddNullToObject(o, "delivered_utilization_ppm") ||
                    !cJSON_AddNullToObject(o, "accounting"))
                        return NULL;
        } else {
                const pace_accounting *a = &g->accounting;
                cJSON *e;

                if (!json_add(o, "delivered_utilization_ppm", delivered_ppm(a)))
                        return NULL;
                e = cJSON_AddObjectToObject(o, "accounting");
                if (!e ||
                    !json_add(e, "window_ns", (double) a->window_ns) ||
                    !json_add(e, "delivered_ns", (double) a->delivered_ns) ||
                    !json_add(e, "cpu_time_ns", (double) a->cpu_time_ns) ||
                    !json_add(e, "periods", (double) a->periods) ||
                    !json_add(e, "periods_blocked", (double) a->periods_blocked) ||
                    !json_add(e, "periods_wanted_more", (double) a->periods_wanted_more))
                        return NULL;
        }
        return TAKE_PTR(o);
}

cJSON *json_status(const pace_status_report *s) {
        _cleanup_(cJSON_Deletep) cJSON *o = cJSON_CreateObject();
        cJSON *reservations, *cpus;

        if (!o)
                return NULL;
        if (!json_add(o, "generation", (double) s->generation) ||
            !json_add(o, "non_rt_share_ppm", s->non_rt_share_ppm))
                return NULL;

        reservations = cJSON_AddArrayToObject(o, "reservations");
        if (!reservations)
                return NULL;
        for (size_t i = 0; i < s->n_reservations; i++) {
                cJSON *g = json_grant(&s->reservations[i]);

                if (!g || !cJSON_AddItemToArray(reservations, g)) {
                        cJSON_Delete(g);
                        return NULL;
                }
                if (!cJSON_AddBoolToObject(g, "on_behalf", s->on_behalf && s->on_behalf[i]))
                        return NULL;
        }

        cJSON *nice = cJSON_AddArrayToObject(o, "nice_levels");
        if (!nice)
                return NULL;
        for (size_t i = 0; i < s->n_nice_levels; i++) {
                cJSON *e = cJSON_CreateObject();
                if (!e || !cJSON_AddItemToArray(nice, e)) {
                        cJSON_Delete(e);
                        return NULL;
                }
                if (!json_add(e, "pid", s->nice_levels[i].pid) || !json_add(e, "tid", s->nice_levels[i].tid) ||
                    !json_add(e, "nice", s->nice_levels[i].nice))
                        return NULL;
        }

        cpus = cJSON_AddArrayToObject(o, "cpus");
        if (!cpus)
                return NULL;
        for (size_t i = 0; i < s->n_cpus; i++) {
                const pace_cpu_status *c = &s->cpus[i];
                cJSON *e = cJSON_CreateObject();

                if (!e || !cJSON_AddItemToArray(cpus, e)) {
                        cJSON_Delete(e);
                        return NULL;
                }
                if (!json_add(e, "cpu", c->cpu) ||
                    !json_add(e, "reserved_ppm", c->reserved_ppm) ||
                    !json_add(e, "free_ppm", c->free_ppm) ||
                    !json_add(e, "frame_ns", (double) c->frame_ns))
                        return NULL;
        }

        return TAKE_PTR(o);
}

int print_json(const cJSON *o) {
        _cleanup_free_ char *text = NULL;

        if (!o)
                return -ENOMEM;
        text = cJSON_Print(o);
        if (!text)
                return -ENOMEM;
        puts(text);
        return 0;
}

cJSON *json_released(uint64_t id) {
        _cleanup_(cJSON_Deletep) cJSON *o = cJSON_CreateObject();

        if (!o || !json_add(o, "released", (double) id))
                return NULL;
        return TAKE_PTR(o);
}
