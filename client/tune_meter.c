/* tune_meter.c — local rank 0's step meter for the autotuner on a job of
 * one host with the fast path (see tune_meter.h). A step runs from one
 * record holding the marker (the lowest cache id that came round again;
 * an id negotiated once, such as a state's sync before training, marks
 * nothing) to the next; its bytes are those of the records in between. */
#include "config.h"

#include <string.h>

#include "negotiate.h"
#include "tune_meter.h"
#include "util.h"

void hvd_tune_meter_reset(hvd_tune_meter_t *m, bool on) {
        memset(m, 0, offsetof(hvd_tune_meter_t, usec));
        m->on = on;
        m->low = UINT32_MAX;
}

void hvd_tune_meter_see(hvd_tune_meter_t *m, uint32_t id) {
        if (!m->on || id == HVD_NEGOTIATOR_NO_ID)
                return;
        m->marked |= m->have_marker && id == m->marker;
        if (id >= HVD_TUNE_METER_IDS)
                return;
        uint64_t bit = UINT64_C(1) << id % 64;
        if (m->seen[id / 64] & bit)
                m->low = HVD_MIN(m->low, id);
        m->seen[id / 64] |= bit;
}

void hvd_tune_meter_record(hvd_tune_meter_t *m, uint64_t bytes, uint64_t generation, uint64_t now_usec) {
        if (!m->on)
                return;
        bool marked = m->marked;
        if (m->low != UINT32_MAX && (!m->have_marker || m->low < m->marker)) {
                /* a lower recurring id: the steps start there from now on */
                m->have_marker = true;
                m->marker = m->low;
                m->in_step = false;
                marked = true;
        }
        m->low = UINT32_MAX;
        m->marked = false;
        if (marked) {
                uint64_t dur = now_usec - m->start_usec;
                if (m->in_step && m->generation == generation && dur && m->bytes && m->n < HVD_WIRE_MAX_TUNE_STEPS) {
                        m->usec[m->n] = dur;
                        m->step_bytes[m->n] = m->bytes;
                        m->step_generation[m->n++] = generation;
                }
                m->in_step = true;
                m->start_usec = now_usec;
                m->bytes = 0;
                m->generation = generation;
        }
        m->bytes += bytes;
}
