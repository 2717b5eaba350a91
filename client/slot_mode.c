/* slot_mode.c — how a rank writes its slot on the segment path of the
 * one-node allreduce, chosen by measurement per size class: ordinary stores
 * (the others read the data from the caches) or non-temporal ones (they
 * read it from memory). Which is faster depends on where the ranks' CPUs
 * sit: on a 2-vCPU AMD EPYC virtual machine whose host moved the vCPUs
 * between sharing an L3 (a cache line's round trip 100-200 ns) and not
 * (500-590 ns), 1-4 MiB allreduces ran 13-15 GB/s with ordinary stores and
 * 5 with non-temporal ones in the first placement, 2.5-2.9 and 4.5-6.2 in
 * the second (benchmarks/core_rtt beside each run).
 *
 * So a size class measures both: SLOT_MODE_BURST operations in the mode in
 * use, then SLOT_MODE_BURST in the other, and keeps the other mode where its
 * fastest operation beat the fastest in use by SLOT_MODE_GAIN (the fastest,
 * since the first operation in a new mode pays for the lines the last one
 * left in the others' caches, and any may meet a preemption). It measures once its first operations
 * are past (they negotiate and fault pages in); then, with ordinary stores,
 * when its operations fall below half the rate they reached (the placement
 * changed) and every SLOT_MODE_CALM operations; with non-temporal ones,
 * whose rate does not show the placement, every SLOT_MODE_RESTLESS. Every
 * rank counts the same operations and times the same ones (each operation
 * ends on a barrier), so the ranks measure and switch together. The byte
 * streams (broadcast, allgather, alltoall) keep classes of their own, by
 * the bytes a rank publishes: a reader there copies lines the publisher
 * just wrote, as on the segment path. */
#include "config.h"

#include "cpu_internal.h"
#include "util.h"

/* Segment-path operations from this size are measured: first after
 * SLOT_MODE_FIRST of them (a size's first operations negotiate and fault
 * pages in; a measurement costs a few operations in the slower mode, up to
 * 3x, so not in a short job's every size) */
#define SLOT_MODE_MIN_BYTES (UINT64_C(256) << 10)
#define SLOT_MODE_FIRST     64
#define SLOT_MODE_BURST     4
#define SLOT_MODE_GAIN      1.2
#define SLOT_MODE_CALM      4096
#define SLOT_MODE_RESTLESS  512
/* the rate an operation with ordinary stores is held against: the class's
 * best, decaying by this much an operation */
#define SLOT_MODE_DECAY 0.999

/* The size class of bytes, or -1 below SLOT_MODE_MIN_BYTES */
static int class_of(uint64_t bytes) {
        if (bytes < SLOT_MODE_MIN_BYTES)
                return -1;
        int k = 0;
        for (uint64_t x = bytes / SLOT_MODE_MIN_BYTES; x > 1 && k < HVD_SLOT_MODE_CLASSES - 1; x >>= 1)
                k++;
        return k;
}

hvd_slot_mode_t *hvd_slot_mode_of(hvd_backend_t *b, uint64_t bytes) {
        int k = class_of(bytes);
        return k < 0 ? NULL : &b->slot_mode[k];
}

hvd_slot_mode_t *hvd_slot_mode_of_stream(hvd_backend_t *b, uint64_t bytes) {
        int k = class_of(bytes);
        return k < 0 ? NULL : &b->pub_mode[k];
}

bool hvd_slot_mode_stream(const hvd_slot_mode_t *m) {
        return m->stream != (m->burst > SLOT_MODE_BURST);
}

/* Whether the class measures both modes from its next operation. */
static bool due(const hvd_slot_mode_t *m) {
        if (m->n == SLOT_MODE_FIRST)
                return true;
        if (m->stream)
                return m->since >= SLOT_MODE_RESTLESS;
        return m->since >= SLOT_MODE_CALM || (m->since >= SLOT_MODE_FIRST && m->recent < 0.5 * m->peak);
}

void hvd_slot_mode_note(hvd_slot_mode_t *m, uint64_t bytes, uint64_t usec) {
        double rate = (double) bytes / (double) (usec ? usec : 1);
        m->n++;
        m->since++;
        if (m->burst) {
                /* operation m->burst of the two bursts (from 1) */
                int k = m->burst > SLOT_MODE_BURST;
                if (rate > m->best[k])
                        m->best[k] = rate;
                if (m->burst++ < 2 * SLOT_MODE_BURST)
                        return;
                if (m->best[1] > SLOT_MODE_GAIN * m->best[0]) {
                        m->stream = !m->stream;
                        m->peak = m->recent = 0;
                } else /* a fall is counted from what was just measured */
                        m->peak = m->recent = m->best[0];
                m->burst = 0;
                m->since = 0;
                return;
        }
        if (!m->stream) {
                m->recent = m->recent > 0 ? m->recent + (rate - m->recent) / 8 : rate;
                m->peak = HVD_MAX(m->peak * SLOT_MODE_DECAY, rate);
        }
        if (due(m)) {
                m->burst = 1;
                m->best[0] = m->best[1] = 0;
        }
}
