/* cpu_set.c — a process set whose members are on several nodes. Its
 * members run the collective among themselves over TCP (tcp.c), in the
 * set's order, with the algorithms the nodes use between each other:
 * allreduce and barrier by recursive doubling or the pipelined ring,
 * reducescatter by the ring reduce-scatter, broadcast by a chain from the
 * root, allgather by a ring, alltoall by pairwise exchanges. Members on
 * one node exchange over TCP too (loopback), not through the slots: the
 * slots' barriers are per node, and a set's members on a node are only
 * some of its ranks. Every rank runs the job's schedules in one order, so
 * the members meet over each connection in the same order; a rank not in
 * the set skips the operation (cpu_backend.c). */
#include "config.h"

#include "backend.h"
#include "cpu_internal.h"
#include "hvd.pb-c.h"
#include "tcp.h"

int hvd_cpu_execute_set(hvd_backend_t *b, const hvd_xop_t *op, int me, char *err, size_t err_len) {
        int n = (int) op->n_set, r;
        for (int i = 0; i < n; i++)
                b->set_rank[i] = (int) op->set_ranks[i];
        hvd_cpu_group_t g = { .n = n, .me = me, .rank = b->set_rank, .space = n };
        uint8_t token = 0;
        switch (op->kind) {
        case HVD__KIND__KIND_ALLREDUCE: return hvd_cpu_reduce_direct(b, &g, op, err, err_len); /* aborts itself */
        case HVD__KIND__KIND_BARRIER:
                /* one byte: recursive doubling, where every result depends on every member's entry */
                r = hvd_cpu_allreduce_group(b, &g, HVD_UINT8, HVD_REDUCE_SUM, &token, NULL, 1, 1.0, err, err_len);
                break;
        case HVD__KIND__KIND_REDUCESCATTER: r = hvd_cpu_reducescatter_ring(b, &g, op, err, err_len); break;
        case HVD__KIND__KIND_BROADCAST:
                r = hvd_cpu_broadcast_chain(b, op, (me - op->root + n) % n, n, b->set_rank[(me - 1 + n) % n],
                                            b->set_rank[(me + 1) % n], err, err_len);
                break;
        case HVD__KIND__KIND_ALLGATHER: r = hvd_cpu_allgather_group(b, &g, op, err, err_len); break;
        case HVD__KIND__KIND_ALLTOALL: r = hvd_cpu_alltoall_pairs(b, &g, op, false, err, err_len); break;
        default: return hvd_cpu_unsupported(op, err, err_len);
        }
        if (r < 0)
                hvd_backend_abort(b, err);
        return r;
}
