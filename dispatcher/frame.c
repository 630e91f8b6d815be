/* SPDX-License-Identifier: MIT */
#include "frame.h"
#include "macro.h"

static uint32_t owner_at(const uint16_t *slots, const bool *live, uint32_t s) {
        uint32_t o = slots[s];
        return o != 0 && live[o] ? o : 0;
}

void frame_compile(const uint16_t *slots, uint32_t frame, const bool *live, const uint32_t *period_slots,
                   FrameScratch *scratch, FrameRun *out, uint32_t *ret_n, uint32_t *ret_rot) {
        uint32_t rot = UINT32_MAX, n = 0;

        for (uint32_t s = 0; s < frame; s++)
                if (owner_at(slots, live, s) != owner_at(slots, live, (s + frame - 1) % frame)) {
                        rot = s;
                        break;
                }
        if (rot == UINT32_MAX && frame > 0 && owner_at(slots, live, 0) != 0)
                rot = 0; /* one owner all frame long: table_check forbids it, stay correct anyway */
        if (rot != UINT32_MAX)
                for (uint32_t k = 0; k < frame; k++) {
                        uint32_t o = owner_at(slots, live, (rot + k) % frame);
                        if (n == 0 || out[n - 1].owner != o)
                                out[n++] = (FrameRun) { .start = k, .owner = o };
                }

        /* The gap after each run, to the same owner's next run (cyclic). */
        for (uint32_t k = 0; k < n; k++)
                if (out[k].owner)
                        scratch[out[k].owner].first = UINT32_MAX;
        for (uint32_t k = 0; k < n; k++) {
                FrameScratch *o = out[k].owner ? &scratch[out[k].owner] : NULL;
                if (o && o->first == UINT32_MAX) {
                        o->first = out[k].start;
                        o->next = o->first + frame;
                        o->maxgap = 0;
                        o->close = UINT32_MAX;
                }
        }
        for (uint32_t k = n; k-- > 0;) {
                if (!out[k].owner)
                        continue;
                FrameScratch *o = &scratch[out[k].owner];
                uint32_t end = frame_run_end(out, n, frame, k);
                out[k].gap = o->next - end;
                o->next = out[k].start;
                o->maxgap = MAX(o->maxgap, out[k].gap);
        }
        /* The grant repeats with its period, so each period has one run
         * before its longest gap; ties go to the first offset found. */
        for (uint32_t k = 0; k < n; k++) {
                out[k].closes = false;
                if (!out[k].owner)
                        continue;
                FrameScratch *o = &scratch[out[k].owner];
                uint32_t period = period_slots[out[k].owner];
                if (out[k].gap != o->maxgap || period == 0)
                        continue;
                uint32_t end = frame_run_end(out, n, frame, k);
                uint32_t off = (uint32_t) (((uint64_t) (rot == UINT32_MAX ? 0 : rot) + end) % period);
                if (o->close == UINT32_MAX)
                        o->close = off;
                out[k].closes = off == o->close;
        }
        *ret_n = n;
        *ret_rot = rot == UINT32_MAX ? 0 : rot;
}

void frame_locate(const FrameRun *runs, uint32_t n_runs, uint32_t frame, uint32_t rot, uint64_t g,
                  uint32_t *ret_offset, uint32_t *ret_run) {
        uint32_t off = (uint32_t) ((g % frame + frame - rot % frame) % frame), k = 0;

        while (k + 1 < n_runs && runs[k + 1].start <= off)
                k++;
        *ret_offset = off;
        *ret_run = k;
}
