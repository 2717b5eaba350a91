#!/bin/sh
# test-gpu-libhvd.sh — libhvd's own GPU path without a GPU: the real libhvd
# loads the NCCL module built over the host mock of CUDA and NCCL
# (tests/gpu/libhvd-nccl-mock.so) through HVD_GPU_MODULE, and
# tests/gpu/gpu_libhvd checks device outputs of allgather, alltoall and
# reducescatter, their release and hvd_free_output — as a job of one rank
# without a daemon, and as a one-rank job of a real hvd-coordinatord (the
# NCCL id goes through hello and welcome), also on GPU 2. Then a module of
# another ABI must be refused with a clear message, and hvd._core must hand
# device outputs to Python as DLPack capsules.
. "${HVD_SRCDIR:?run through make check}/tests/lib/common.sh"
prog=$HVD_BUILDDIR/tests/gpu/gpu_libhvd
mock=$HVD_BUILDDIR/tests/gpu/.libs/libhvd-nccl-mock.so
old=$HVD_BUILDDIR/tests/gpu/.libs/libhvd-gpu-oldabi.so
{ [ -x "$prog" ] && [ -f "$mock" ] && [ -f "$old" ]; } || fail "tests/gpu/gpu_libhvd or its modules are not built"
unset HVD_JOB_ID HVD_GPU_DEVICE CUDA_VISIBLE_DEVICES

out=$(HVD_GPU_MODULE=$mock MOCK_GPUS=1 timeout 120 "$prog" outputs 2>&1)
rc=$?
printf 'solo: %s\n' "$out"
[ $rc -eq 0 ] || fail "device outputs in a job of one rank without a daemon (exit $rc)" "$out"

out=$(HVD_GPU_MODULE=$mock MOCK_GPUS=1 "$HVD_SRCDIR/tests/lib/launch.sh" -t 120 -n 1 -- "$prog" outputs 2>&1)
rc=$?
printf 'daemon: %s\n' "$out"
[ $rc -eq 0 ] || fail "device outputs in a one-rank job of hvd-coordinatord (exit $rc)" "$out"

# a rank on another GPU than 0 (schedules only say "a GPU")
out=$(HVD_GPU_MODULE=$mock MOCK_GPUS=4 HVD_GPU_DEVICE=2 "$HVD_SRCDIR/tests/lib/launch.sh" -t 120 -n 1 -- \
        "$prog" outputs 2>&1)
rc=$?
printf 'daemon, GPU 2: %s\n' "$out"
[ $rc -eq 0 ] || fail "device outputs on GPU 2 (exit $rc)" "$out"

out=$(HVD_GPU_MODULE=$old timeout 60 "$prog" abi 2>&1)
rc=$?
printf 'old ABI: %s\n' "$out"
[ $rc -eq 0 ] || fail "a module of another ABI (exit $rc)" "$out"

# hvd._core hands device outputs over as DLPack capsules (skipped when the
# Python binding is not built)
pkg=$HVD_BUILDDIR/python-binding/pkg
if [ -f "$pkg/hvd/__init__.py" ] && [ -n "${PYTHON:-}" ]; then
        out=$(PYTHONPATH=$pkg HVD_GPU_MODULE=$mock MOCK_GPUS=1 timeout 120 "$PYTHON" \
                "$HVD_SRCDIR/tests/gpu/gpu_dlpack.py" "$mock" 2>&1)
        rc=$?
        printf 'python: %s\n' "$out"
        [ $rc -eq 0 ] || fail "device outputs as DLPack capsules (exit $rc)" "$out"
else
        echo "python: the binding is not built: DLPack capsules not checked"
fi
