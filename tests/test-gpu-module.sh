#!/bin/sh
# test-gpu-module.sh — the GPU data plane's link facts and its no-device
# path, in every build: libhvd itself never links CUDA or NCCL (one
# installed libhvd serves CPU-only hosts); the module libhvd-nccl links
# libnccl and libcudart, resolves every symbol and exports only
# hvd_gpu_module_v1; dlopen'ed on a host without a usable GPU, its probe()
# and open() fail with "no CUDA device: <reason>" instead of crashing.
. "${HVD_SRCDIR:?run through make check}/tests/lib/common.sh"
command -v readelf >/dev/null 2>&1 || skip "readelf (binutils) is not installed"

lib=$HVD_BUILDDIR/client/.libs/libhvd.so
mod=$HVD_BUILDDIR/client/.libs/libhvd-nccl.so
[ -f "$lib" ] || fail "libhvd not built: $lib"

cuda_re='libcuda|libcudart|libnccl|libnvidia'
needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
echo "libhvd NEEDED: $(echo "$needed" | paste -sd' ')"
echo "$needed" | grep -Eq "$cuda_re" && fail "libhvd links CUDA/NCCL directly" "$needed"
deps=$(ldd "$lib" 2>&1) || fail "ldd $lib failed" "$deps"
echo "$deps" | grep -Eq "$cuda_re" && fail "libhvd pulls in CUDA/NCCL" "$deps"
undef=$(nm -D --undefined-only "$lib" 2>/dev/null | grep -E ' (cuda|cu|nccl)[A-Z]' || true)
[ -z "$undef" ] || fail "libhvd references CUDA/NCCL symbols" "$undef"
echo "ok: libhvd has no CUDA or NCCL dependency"

if ! grep -q '^#define HAVE_NCCL 1' "$HVD_BUILDDIR/config.h"; then
        echo "ok: CPU-only configuration: the NCCL module is not built"
        exit 0
fi
[ -f "$mod" ] || fail "the NCCL module was configured but not built: $mod"
mneeded=$(readelf -d "$mod" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
echo "libhvd-nccl NEEDED: $(echo "$mneeded" | paste -sd' ')"
echo "$mneeded" | grep -q '^libnccl\.so' || fail "the module does not link libnccl" "$mneeded"
echo "$mneeded" | grep -q '^libcudart\.so' || fail "the module does not link libcudart" "$mneeded"
echo "$mneeded" | grep -q '^libhvd\.so' && fail "the module links libhvd (it must only use gpu_module.h)" "$mneeded"
exported=$(nm -D --defined-only "$mod" | awk '$2 ~ /^[A-Z]$/ && $2 != "U" { print $3 }' | sort)
[ "$exported" = "hvd_gpu_module_v1" ] || fail "the module must export exactly hvd_gpu_module_v1" "$exported"
unresolved=$(ldd -r "$mod" 2>&1 | grep -i 'undefined symbol' || true)
[ -z "$unresolved" ] || fail "the module has unresolved symbols" "$unresolved"
echo "ok: module $(wc -c <"$mod") bytes, exports hvd_gpu_module_v1 only, all symbols resolved"

harness=$HVD_BUILDDIR/tests/gpu/gpu_harness
[ -x "$harness" ] || fail "tests/gpu/gpu_harness not built"
out=$(HVD_NCCL_MODULE=$mod "$harness" probe 2>&1)
rc=$?
printf '%s\n' "$out" | sed 's/^/  /'
[ "$rc" -eq 0 ] || fail "the module's probe/open contract failed" "$out"
if printf '%s\n' "$out" | grep -q '^probe: -'; then
        printf '%s\n' "$out" | grep -q '^probe: -1010 no CUDA device: ' || fail "probe: unexpected message" "$out"
        echo "ok: no usable GPU here: probe() and open() fail cleanly with the reason"
else
        echo "ok: a GPU is present (make check-gpu runs the GPU tests)"
fi
