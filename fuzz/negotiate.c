/* negotiate.c — fuzzes what a job's root does with its ranks' Ready
 * messages: each frame is decoded and validated as off the wire, handed to
 * the negotiation table as the rank's submission, and every schedule the
 * table produces must itself pass the validation the receiving daemons and
 * workers apply (a root must never send what its peers refuse).
 * Input: 1 byte: world size (bits 0-2, + 1), hosts (bit 6: ranks on
 * hosts of bits 3-5 + 1 consecutive ranks each, whose ranks may share a
 * request and whose Ready's node_cached ids are the host's own, as a
 * host's daemon sends them), fusion off (bit 7); then frames of
 * [1 byte ranks][2 bytes little-endian length][Envelope]; the ranks byte:
 * bits 0-3 the rank, and with bit 7 the frame is a Ready shared by
 * bits 4-6 + 1 consecutive ranks from it (mod the world size: more ranks
 * than the world repeats one), as a node forwards its ranks' alike. */
#include "config.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "hvd.h"
#include "negotiate.h"
#include "wire.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        return 0;
}

static void check_schedule(Hvd__Schedule *s) {
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        env.version = HVD_PROTOCOL_VERSION;
        env.body_case = HVD__ENVELOPE__BODY_SCHEDULE;
        env.schedule = s;
        size_t len = hvd__envelope__get_packed_size(&env);
        uint8_t *buf = malloc(len ? len : 1);
        FUZZ_ASSERT(buf, "out of memory");
        hvd__envelope__pack(&env, buf);
        Hvd__Envelope *back = NULL;
        char err[512] = "";
        /* a generous budget: the schedule may legitimately be larger than 8x */
        int r = hvd_wire_decode(buf, len, len * 64 + (1 << 20), &back, err, sizeof err);
        FUZZ_ASSERT(r == 0, "the root's schedule is refused by its receivers: %s", err);
        hvd_wire_free(&back);
        free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size < 1)
                return 0;
        uint32_t world = (uint32_t) (data[0] % 8) + 1;
        hvd_negotiator_t *n = NULL;
        FUZZ_ASSERT(hvd_negotiator_new(world, 16, (data[0] & 0x80) ? 0 : 1 << 20, &n) == 0, "negotiator_new failed");
        uint32_t node_of[8], per_node = ((data[0] >> 3) & 7) + 1;
        bool nodes = data[0] & 0x40;
        for (uint32_t r = 0; r < world; r++)
                node_of[r] = r / per_node;
        if (nodes)
                FUZZ_ASSERT(hvd_negotiator_set_nodes(n, (world + per_node - 1) / per_node, node_of) == 0,
                            "set_nodes failed");
        size_t off = 1;
        while (off + 3 <= size) {
                uint32_t rank = (data[off] & 0x0f) % world, ranks[8], n_ranks = 1;
                if (data[off] & 0x80)
                        n_ranks = ((data[off] >> 4) & 7) + 1;
                for (uint32_t k = 0; k < n_ranks; k++)
                        ranks[k] = (rank + k) % world;
                size_t len = (size_t) data[off + 1] | (size_t) data[off + 2] << 8;
                off += 3;
                if (len > size - off)
                        len = size - off;
                Hvd__Envelope *env = NULL;
                char err[512];
                if (hvd_wire_decode(data + off, len, 0, &env, err, sizeof err) == 0) {
                        if (env->body_case == HVD__ENVELOPE__BODY_READY) {
                                hvd_negotiator_submit_ranks(n, ranks, n_ranks, env->ready, err, sizeof err);
                                if (nodes && env->ready->n_node_cached)
                                        hvd_negotiator_submit_node(
                                                n, node_of[rank], env->ready->node_cached, env->ready->n_node_cached,
                                                env->ready->n_node_cached_waited_usec == env->ready->n_node_cached
                                                        ? env->ready->node_cached_waited_usec
                                                        : NULL,
                                                err, sizeof err);
                        }
                        hvd_wire_free(&env);
                }
                off += len;
                while (hvd_negotiator_has_work(n)) {
                        Hvd__Schedule *s = NULL;
                        if (hvd_negotiator_take_schedule(n, &s) <= 0)
                                break;
                        check_schedule(s);
                        hvd_negotiator_schedule_free(&s);
                }
                char buf[1024];
                hvd_negotiator_describe_pending(n, 0, 0, buf, sizeof buf);
        }
        hvd_negotiator_destroy(&n);
        return 0;
}
