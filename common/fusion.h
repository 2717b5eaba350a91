/* fusion.h — Tensor Fusion planning: which ready tensors share one fused
 * operation. Pure and deterministic: the same input gives the same plan on
 * every daemon, so it can be unit-tested and re-derived anywhere. */
#ifndef HVD_FUSION_H
#define HVD_FUSION_H

#include <stddef.h>
#include <stdint.h>

typedef struct hvd_fusion_item {
        uint32_t kind; /* HVD__KIND__* */
        uint32_t dtype;
        uint32_t reduce_op;
        int32_t root;
        int32_t device;
        uint32_t process_set;
        double prescale, postscale;
        uint64_t bytes; /* bytes this tensor occupies in the fusion buffer */
} hvd_fusion_item_t;

typedef struct hvd_fusion_op {
        uint32_t first; /* index of the operation's first item */
        uint32_t n_items;
        uint64_t bytes; /* fused size */
} hvd_fusion_op_t;

/* Plans items[0..n) (in the order they became ready) into fused
 * operations: an item joins the first open operation of the same kind,
 * dtype, reduce op, root, device, process set and scale factors whose
 * bytes stay within threshold_bytes; otherwise it opens a new one. Only
 * allreduce, broadcast, allgather and reducescatter fuse; threshold 0
 * disables fusion. A single item larger than the threshold gets an
 * operation of its own. Writes op_of[i] (operation index of item i;
 * operations are numbered in order of their first item) and ops[] (n
 * entries of room), and returns the number of operations. No allocation. */
size_t hvd_fusion_plan(const hvd_fusion_item_t *items, size_t n, uint64_t threshold_bytes, uint32_t *op_of,
                       hvd_fusion_op_t *ops);

#endif
