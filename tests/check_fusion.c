/* check_fusion.c — unit tests of the Tensor Fusion planner (common/fusion.c):
 * the threshold is respected exactly, ready order is kept inside and across
 * operations, incompatible tensors (kind, dtype, reduce op, root, device,
 * process set, scale factors) never share an operation, threshold 0 disables
 * fusion, an oversize tensor runs alone, alltoall/barrier/join never fuse. */
#include "config.h"

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fusion.h"
#include "hvd.h"
#include "hvd.pb-c.h"

#define MiB  (UINT64_C(1) << 20)
#define MAXN 64

static hvd_fusion_item_t items[MAXN];
static uint32_t op_of[MAXN];
static hvd_fusion_op_t ops[MAXN];

static hvd_fusion_item_t ar(uint64_t bytes) {
        return (hvd_fusion_item_t){ .kind = HVD__KIND__KIND_ALLREDUCE,
                                    .dtype = HVD_FLOAT32,
                                    .reduce_op = HVD_REDUCE_SUM,
                                    .root = 0,
                                    .device = HVD_DEVICE_CPU,
                                    .process_set = 0,
                                    .prescale = 1.0,
                                    .postscale = 1.0,
                                    .bytes = bytes };
}

static size_t plan(size_t n, uint64_t threshold) {
        memset(op_of, 0xff, sizeof op_of);
        memset(ops, 0xee, sizeof ops);
        return hvd_fusion_plan(items, n, threshold, op_of, ops);
}

/* Checks the plan's invariants: every item is in exactly one op, ops are
 * numbered by their first item, members of an op are compatible, and an op
 * of several members stays within the threshold. */
static void check_invariants(size_t n, size_t n_ops, uint64_t threshold) {
        uint64_t bytes[MAXN] = { 0 };
        uint32_t count[MAXN] = { 0 };
        int64_t first_seen[MAXN];
        for (size_t k = 0; k < MAXN; k++)
                first_seen[k] = -1;
        for (size_t i = 0; i < n; i++) {
                ck_assert_uint_lt(op_of[i], n_ops);
                uint32_t k = op_of[i];
                bytes[k] += items[i].bytes;
                count[k]++;
                if (first_seen[k] < 0)
                        first_seen[k] = (int64_t) i;
                const hvd_fusion_item_t *a = &items[ops[k].first], *b = &items[i];
                ck_assert_uint_eq(a->kind, b->kind);
                ck_assert_uint_eq(a->dtype, b->dtype);
                ck_assert_uint_eq(a->reduce_op, b->reduce_op);
                ck_assert_int_eq(a->root, b->root);
                ck_assert_int_eq(a->device, b->device);
                ck_assert_uint_eq(a->process_set, b->process_set);
                ck_assert(a->prescale == b->prescale && a->postscale == b->postscale);
        }
        for (size_t k = 0; k < n_ops; k++) {
                ck_assert_int_eq(first_seen[k], (int64_t) ops[k].first);
                ck_assert_uint_eq(count[k], ops[k].n_items);
                ck_assert_uint_eq(bytes[k], ops[k].bytes);
                if (ops[k].n_items > 1)
                        ck_assert_uint_le(ops[k].bytes, threshold);
                if (k > 0)
                        ck_assert_uint_lt(ops[k - 1].first, ops[k].first);
        }
}

START_TEST(test_fusion_three_40mib_with_64mib) {
        /* 40 + 40 > 64: no two of them fit together, so three operations */
        for (int i = 0; i < 3; i++)
                items[i] = ar(40 * MiB);
        size_t n_ops = plan(3, 64 * MiB);
        ck_assert_uint_eq(n_ops, 3);
        for (uint32_t i = 0; i < 3; i++) {
                ck_assert_uint_eq(op_of[i], i);
                ck_assert_uint_eq(ops[i].first, i);
                ck_assert_uint_eq(ops[i].n_items, 1);
                ck_assert_uint_eq(ops[i].bytes, 40 * MiB);
        }
        check_invariants(3, n_ops, 64 * MiB);
}
END_TEST

START_TEST(test_fusion_threshold_exact_fit) {
        /* 3 x 20 MiB = 60 MiB fits; the 4th (80 MiB) does not: 2 ops, 3 + 1 */
        for (int i = 0; i < 4; i++)
                items[i] = ar(20 * MiB);
        size_t n_ops = plan(4, 64 * MiB);
        ck_assert_uint_eq(n_ops, 2);
        ck_assert_uint_eq(ops[0].n_items, 3);
        ck_assert_uint_eq(ops[0].bytes, 60 * MiB);
        ck_assert_uint_eq(ops[1].first, 3);
        ck_assert_uint_eq(ops[1].n_items, 1);
        ck_assert_uint_eq(op_of[0], 0);
        ck_assert_uint_eq(op_of[1], 0);
        ck_assert_uint_eq(op_of[2], 0);
        ck_assert_uint_eq(op_of[3], 1);
        check_invariants(4, n_ops, 64 * MiB);

        /* exactly the threshold still fits (<=) */
        items[0] = ar(32 * MiB);
        items[1] = ar(32 * MiB);
        n_ops = plan(2, 64 * MiB);
        ck_assert_uint_eq(n_ops, 1);
        ck_assert_uint_eq(ops[0].bytes, 64 * MiB);
        /* one byte more does not */
        items[1] = ar(32 * MiB + 1);
        n_ops = plan(2, 64 * MiB);
        ck_assert_uint_eq(n_ops, 2);
}
END_TEST

START_TEST(test_fusion_first_fit_keeps_order) {
        /* 40, 30, 20 with 64: 30 cannot join 40, 20 can: op0 = {0, 2}, op1 = {1} */
        items[0] = ar(40 * MiB);
        items[1] = ar(30 * MiB);
        items[2] = ar(20 * MiB);
        size_t n_ops = plan(3, 64 * MiB);
        ck_assert_uint_eq(n_ops, 2);
        ck_assert_uint_eq(op_of[0], 0);
        ck_assert_uint_eq(op_of[1], 1);
        ck_assert_uint_eq(op_of[2], 0);
        ck_assert_uint_eq(ops[0].first, 0);
        ck_assert_uint_eq(ops[0].n_items, 2);
        ck_assert_uint_eq(ops[0].bytes, 60 * MiB);
        ck_assert_uint_eq(ops[1].first, 1);
        ck_assert_uint_eq(ops[1].bytes, 30 * MiB);
        check_invariants(3, n_ops, 64 * MiB);
}
END_TEST

START_TEST(test_fusion_many_small_one_op) {
        for (int i = 0; i < MAXN; i++)
                items[i] = ar((uint64_t) (i + 1) * 4);
        size_t n_ops = plan(MAXN, 64 * MiB);
        ck_assert_uint_eq(n_ops, 1);
        ck_assert_uint_eq(ops[0].n_items, MAXN);
        ck_assert_uint_eq(ops[0].bytes, 4 * MAXN * (MAXN + 1) / 2);
        for (int i = 0; i < MAXN; i++)
                ck_assert_uint_eq(op_of[i], 0);
}
END_TEST

START_TEST(test_fusion_incompatible_never_fused) {
        /* each item differs from item 0 in exactly one attribute */
        items[0] = ar(100);
        items[1] = ar(100);
        items[1].kind = HVD__KIND__KIND_BROADCAST;
        items[2] = ar(100);
        items[2].dtype = HVD_FLOAT64;
        items[3] = ar(100);
        items[3].reduce_op = HVD_REDUCE_MAX;
        items[4] = ar(100);
        items[4].kind = HVD__KIND__KIND_BROADCAST;
        items[4].root = 1; /* differs from item 1 in root only */
        items[5] = ar(100);
        items[5].prescale = 0.5;
        items[6] = ar(100);
        items[6].postscale = 2.0;
        items[7] = ar(100);
        items[7].device = 0;
        items[8] = ar(100);
        items[8].process_set = 1;
        items[9] = ar(100);
        items[9].kind = HVD__KIND__KIND_ALLGATHER;
        items[10] = ar(100);
        items[10].kind = HVD__KIND__KIND_REDUCESCATTER;
        size_t n_ops = plan(11, 64 * MiB);
        ck_assert_uint_eq(n_ops, 11);
        for (uint32_t i = 0; i < 11; i++) {
                ck_assert_uint_eq(op_of[i], i);
                ck_assert_uint_eq(ops[i].n_items, 1);
        }
        check_invariants(11, n_ops, 64 * MiB);
}
END_TEST

START_TEST(test_fusion_threshold_zero_disables) {
        for (int i = 0; i < 5; i++)
                items[i] = ar(8);
        size_t n_ops = plan(5, 0);
        ck_assert_uint_eq(n_ops, 5);
        for (uint32_t i = 0; i < 5; i++) {
                ck_assert_uint_eq(op_of[i], i);
                ck_assert_uint_eq(ops[i].first, i);
                ck_assert_uint_eq(ops[i].n_items, 1);
                ck_assert_uint_eq(ops[i].bytes, 8);
        }
}
END_TEST

START_TEST(test_fusion_oversize_alone) {
        /* small, huge, small: the huge one gets an op of its own; the
         * smalls fuse around it */
        items[0] = ar(1 * MiB);
        items[1] = ar(100 * MiB);
        items[2] = ar(1 * MiB);
        items[3] = ar(100 * MiB);
        size_t n_ops = plan(4, 64 * MiB);
        ck_assert_uint_eq(n_ops, 3);
        ck_assert_uint_eq(op_of[0], 0);
        ck_assert_uint_eq(op_of[1], 1);
        ck_assert_uint_eq(op_of[2], 0);
        ck_assert_uint_eq(op_of[3], 2);
        ck_assert_uint_eq(ops[1].n_items, 1);
        ck_assert_uint_eq(ops[1].bytes, 100 * MiB);
        ck_assert_uint_eq(ops[2].n_items, 1);
        ck_assert_uint_eq(ops[0].bytes, 2 * MiB);
        check_invariants(4, n_ops, 64 * MiB);
}
END_TEST

START_TEST(test_fusion_alltoall_barrier_join_never_fused) {
        const uint32_t kinds[] = { HVD__KIND__KIND_ALLTOALL, HVD__KIND__KIND_BARRIER, HVD__KIND__KIND_JOIN };
        for (size_t k = 0; k < 3; k++) {
                for (int i = 0; i < 4; i++) {
                        items[i] = ar(16);
                        items[i].kind = kinds[k];
                }
                size_t n_ops = plan(4, 64 * MiB);
                ck_assert_uint_eq(n_ops, 4);
                for (uint32_t i = 0; i < 4; i++)
                        ck_assert_uint_eq(op_of[i], i);
        }
}
END_TEST

START_TEST(test_fusion_interleaved_groups) {
        /* A B A B A C A: A = float32 sum, B = float64 sum, C = broadcast */
        const char *pat = "ABABACA";
        for (int i = 0; pat[i]; i++) {
                items[i] = ar(1000);
                if (pat[i] == 'B')
                        items[i].dtype = HVD_FLOAT64;
                if (pat[i] == 'C')
                        items[i].kind = HVD__KIND__KIND_BROADCAST;
        }
        size_t n_ops = plan(7, 64 * MiB);
        ck_assert_uint_eq(n_ops, 3);
        const uint32_t want[] = { 0, 1, 0, 1, 0, 2, 0 };
        for (int i = 0; i < 7; i++)
                ck_assert_uint_eq(op_of[i], want[i]);
        ck_assert_uint_eq(ops[0].n_items, 4);
        ck_assert_uint_eq(ops[0].bytes, 4000);
        ck_assert_uint_eq(ops[1].first, 1);
        ck_assert_uint_eq(ops[1].n_items, 2);
        ck_assert_uint_eq(ops[2].first, 5);
        ck_assert_uint_eq(ops[2].n_items, 1);
        check_invariants(7, n_ops, 64 * MiB);

        /* the same with a threshold of 2 items: A's split into pairs */
        n_ops = plan(7, 2000);
        const uint32_t want2[] = { 0, 1, 0, 1, 2, 3, 2 };
        ck_assert_uint_eq(n_ops, 4);
        for (int i = 0; i < 7; i++)
                ck_assert_uint_eq(op_of[i], want2[i]);
        check_invariants(7, n_ops, 2000);
}
END_TEST

START_TEST(test_fusion_empty_and_zero_bytes) {
        ck_assert_uint_eq(plan(0, 64 * MiB), 0);
        /* zero-byte tensors fuse like any other */
        for (int i = 0; i < 3; i++)
                items[i] = ar(0);
        ck_assert_uint_eq(plan(3, 64 * MiB), 1);
        ck_assert_uint_eq(ops[0].n_items, 3);
        ck_assert_uint_eq(ops[0].bytes, 0);
}
END_TEST

START_TEST(test_fusion_deterministic) {
        /* the same input gives the same plan (every daemon re-derives it) */
        for (int i = 0; i < MAXN; i++) {
                items[i] = ar((uint64_t) ((i * 7919) % 97) * MiB / 4);
                items[i].dtype = (uint32_t) (i % 3 == 0 ? HVD_FLOAT64 : HVD_FLOAT32);
        }
        size_t n1 = plan(MAXN, 64 * MiB);
        uint32_t op_of1[MAXN];
        hvd_fusion_op_t ops1[MAXN];
        memcpy(op_of1, op_of, sizeof op_of);
        memcpy(ops1, ops, sizeof ops);
        size_t n2 = plan(MAXN, 64 * MiB);
        ck_assert_uint_eq(n1, n2);
        ck_assert_mem_eq(op_of1, op_of, MAXN * sizeof *op_of);
        for (size_t k = 0; k < n1; k++) {
                ck_assert_uint_eq(ops1[k].first, ops[k].first);
                ck_assert_uint_eq(ops1[k].n_items, ops[k].n_items);
                ck_assert_uint_eq(ops1[k].bytes, ops[k].bytes);
        }
        check_invariants(MAXN, n1, 64 * MiB);
}
END_TEST

static Suite *fusion_suite(void) {
        Suite *s = suite_create("fusion");
        TCase *tc = tcase_create("plan");
        tcase_add_test(tc, test_fusion_three_40mib_with_64mib);
        tcase_add_test(tc, test_fusion_threshold_exact_fit);
        tcase_add_test(tc, test_fusion_first_fit_keeps_order);
        tcase_add_test(tc, test_fusion_many_small_one_op);
        tcase_add_test(tc, test_fusion_incompatible_never_fused);
        tcase_add_test(tc, test_fusion_threshold_zero_disables);
        tcase_add_test(tc, test_fusion_oversize_alone);
        tcase_add_test(tc, test_fusion_alltoall_barrier_join_never_fused);
        tcase_add_test(tc, test_fusion_interleaved_groups);
        tcase_add_test(tc, test_fusion_empty_and_zero_bytes);
        tcase_add_test(tc, test_fusion_deterministic);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(fusion_suite());
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
