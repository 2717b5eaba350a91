#!/bin/sh
# test.sh — set up, build and run the test suite, then print one summary
# line "N passed, N failed, N skipped".
#
# The full suite runs on the default build (with the NCCL module when CUDA
# and NCCL are installed); when that build has the module, a CPU-only build
# (--without-cuda) is made too and runs the tests that differ between the
# two (unit tests, the GPU-module checks, the collectives). Extra arguments
# go to configure (e.g. --enable-sanitizers). HVD_TEST_QUICK=1 skips the
# second build.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/setup.sh" || exit 1
"$top/scripts/build.sh" "$@" || exit 1

pass=0 fail=0 skip=0 status=0
# run_check DIR [TESTS]: make check in DIR, add its counts
run_check() {
        dir=$1
        shift
        (cd "$dir" && make -s -j2 check ${1:+TESTS="$1"}) >"$dir/check.out" 2>&1 || status=1
        grep -E '^(PASS|FAIL|XFAIL|XPASS|SKIP|ERROR):' "$dir/check.out" | sed "s|^|[$(basename "$dir")] |"
        if grep -qE '^(FAIL|ERROR|XPASS):' "$dir/check.out" || [ ! -f "$dir/test-suite.log" ]; then
                for trs in $(grep -lE '^:test-result: (FAIL|ERROR|XPASS)' $(find "$dir" -name '*.trs') 2>/dev/null); do
                        echo "===== ${trs%.trs}.log"
                        tail -n 60 "${trs%.trs}.log"
                done
                [ -f "$dir/test-suite.log" ] || tail -n 40 "$dir/check.out"
        fi
        count() { sed -n "s/^# $1: *//p" "$dir/test-suite.log" 2>/dev/null | head -n 1; }
        p=$(count PASS) f=$(count FAIL) x=$(count XFAIL) xp=$(count XPASS) s=$(count SKIP) e=$(count ERROR)
        pass=$((pass + ${p:-0}))
        skip=$((skip + ${s:-0} + ${x:-0}))
        fail=$((fail + ${f:-0} + ${xp:-0} + ${e:-0}))
}

run_check "$top/build"
if grep -q '^#define HAVE_NCCL 1' "$top/build/config.h" && [ -z "${HVD_TEST_QUICK:-}" ]; then
        echo "test: CPU-only build (--without-cuda)"
        if BUILD_DIR=build-cpu "$top/scripts/build.sh" --without-cuda "$@"; then
                cpu_tests=$(cd "$top/build-cpu" && make -s print-cpu-tests 2>/dev/null)
                run_check "$top/build-cpu" "$cpu_tests"
        else
                echo "test: the CPU-only build failed"
                status=1
                fail=$((fail + 1))
        fi
fi
[ $status -ne 0 ] && [ $fail -eq 0 ] && fail=1
echo "${pass} passed, ${fail} failed, ${skip} skipped"
exit $status
