#!/bin/sh
# test-gpu-mock.sh — every GPU test case of the harness, over the host mock
# of CUDA and NCCL (tests/gpu/check_gpu_mock: the real client/nccl_module.c,
# ranks as threads, 4 mock GPUs). Nothing may skip or fail.
. "${HVD_SRCDIR:?run through make check}/tests/lib/common.sh"
mock=$HVD_BUILDDIR/tests/gpu/check_gpu_mock
[ -x "$mock" ] || fail "tests/gpu/check_gpu_mock not built"
out=$(MOCK_GPUS=4 HVD_GPU_HARNESS=$mock HVD_GPU_LOG_PREFIX=mock- \
        sh "$HVD_SRCDIR/tests/gpu/run-gpu-tests.sh" 2>&1)
rc=$?
printf '%s\n' "$out"
[ "$rc" -eq 0 ] || fail "a GPU test failed over the mock"
printf '%s\n' "$out" | grep -q ' 0 skipped, 0 failed' || fail "a GPU test skipped over the mock"
