/* fusion.c — the Tensor Fusion planner (see fusion.h). Invariant: every
 * operation's members keep their ready order, and no operation of several
 * members exceeds the threshold. */
#include "config.h"

#include <stdbool.h>

#include "fusion.h"
#include "hvd.pb-c.h"

static bool fusable(uint32_t kind) {
        return kind == HVD__KIND__KIND_ALLREDUCE || kind == HVD__KIND__KIND_BROADCAST ||
               kind == HVD__KIND__KIND_ALLGATHER || kind == HVD__KIND__KIND_REDUCESCATTER;
}

static bool compatible(const hvd_fusion_item_t *a, const hvd_fusion_item_t *b) {
        return a->kind == b->kind && a->dtype == b->dtype && a->reduce_op == b->reduce_op && a->root == b->root &&
               a->device == b->device && a->process_set == b->process_set && a->prescale == b->prescale &&
               a->postscale == b->postscale;
}

size_t hvd_fusion_plan(const hvd_fusion_item_t *items, size_t n, uint64_t threshold_bytes, uint32_t *op_of,
                       hvd_fusion_op_t *ops) {
        size_t n_ops = 0;
        for (size_t i = 0; i < n; i++) {
                const hvd_fusion_item_t *it = &items[i];
                size_t k = n_ops;
                if (threshold_bytes > 0 && fusable(it->kind))
                        for (k = 0; k < n_ops; k++)
                                if (compatible(&items[ops[k].first], it) && ops[k].bytes + it->bytes <= threshold_bytes)
                                        break;
                if (k == n_ops)
                        ops[n_ops++] = (hvd_fusion_op_t){ .first = (uint32_t) i };
                ops[k].n_items++;
                ops[k].bytes += it->bytes;
                op_of[i] = (uint32_t) k;
        }
        return n_ops;
}
