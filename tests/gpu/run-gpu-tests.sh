#!/bin/sh
# run-gpu-tests.sh — `make check-gpu`: runs the GPU tests of gpu_harness
# (one GPU per rank) and prints PASS / SKIP (with the reason) / FAIL per
# case, then a summary. Logs: tests/gpu/<test>-<np>.log in the build tree.
# Exit 1 if any case failed; skips are not failures. HVD_GPU_HARNESS and
# HVD_GPU_LOG_PREFIX run another build of the harness (test-gpu-mock.sh).
: "${HVD_BUILDDIR:?run through make check-gpu}"
h=${HVD_GPU_HARNESS:-$HVD_BUILDDIR/tests/gpu/gpu_harness}
[ -x "$h" ] || { echo "check-gpu: $h not built" >&2; exit 1; }

cases="collectives:1 collectives:all fusion:1 fusion:all stream:1 stream:all abort-init:1 abort:2 psets:all async-error:2 alloc:1 alloc:all"
pass=0 fail=0 skip=0
for c in $cases; do
        t=${c%%:*} np=${c#*:}
        log=$HVD_BUILDDIR/tests/gpu/${HVD_GPU_LOG_PREFIX:-}$t-$np.log
        "$h" "$t" "$np" >"$log" 2>&1
        rc=$?
        case $rc in
        0)
                pass=$((pass + 1))
                echo "PASS: $t (np=$np)"
                ;;
        77)
                skip=$((skip + 1))
                echo "SKIP: $t (np=$np): $(sed -n 's/^SKIP: //p' "$log" | head -n 1)"
                ;;
        *)
                fail=$((fail + 1))
                echo "FAIL: $t (np=$np), exit $rc; last lines of $log:"
                tail -n 20 "$log" | sed 's/^/    /'
                ;;
        esac
done
echo "============================================================"
echo "check-gpu: $pass passed, $skip skipped, $fail failed"
echo "============================================================"
[ "$fail" -eq 0 ]
