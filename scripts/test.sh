#!/bin/sh
# test.sh — set up, build and run the test suite, then print one summary
# line "N passed, N failed, N skipped".
#
# The full suite runs on the default build (with the NCCL module when CUDA
# and NCCL are installed, and hvd.tensorflow's op library against the
# environment scripts/venv-tf.sh makes once and caches), its Python tests
# with Debian's torch; then the Python tests again with the newest torch
# from PyPI, in a cached virtual environment (scripts/venv-torch.sh;
# HVD_TORCH_VENV=DIR: one made elsewhere). Where that environment cannot
# be made (no network) the second run counts as skipped, and says so.
# Then a CPU-only build (--without-cuda) with AddressSanitizer and UBSan
# (--enable-sanitizers) runs the tests that differ between the two builds
# (unit tests, the GPU-module checks, the collectives, several nodes), and,
# when clang is here, a libFuzzer build (--enable-fuzzing) runs every fuzz
# harness for a few seconds (docs/FUZZING.md). Each build is configured
# with --enable-werror: a compiler warning fails it. Extra arguments go to
# the first configure.
# The benchmarks are built (make bench), not run. HVD_TEST_QUICK=1 skips
# the second and third builds.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/setup.sh" || exit 1
# Debian has no TensorFlow: configure finds the environment venv-tf.sh makes
# (or reuses from its cache); without one, hvd.tensorflow's tests skip
if ! "$top/scripts/venv-tf.sh" >/dev/null; then
        echo "test: no TensorFlow environment (scripts/venv-tf.sh): hvd.tensorflow's tests will skip"
fi
if ! "$top/scripts/build.sh" --enable-werror "$@"; then
        echo "test: the build failed (configured with --enable-werror: a compiler warning is an error)"
        echo "0 passed, 1 failed, 0 skipped"
        exit 1
fi

pass=0 fail=0 skip=0 status=0
# run_check DIR [TESTS [MAKE ARGS...]]: make check in DIR, add its counts;
# its lines are labelled [$label], DIR's name by default
run_check() {
        dir=$1
        tests=${2:-}
        shift
        [ $# -gt 0 ] && shift
        (cd "$dir" && make -s -j2 check ${tests:+TESTS="$tests"} "$@") >"$dir/check.out" 2>&1 || status=1
        grep -E '^(PASS|FAIL|XFAIL|XPASS|SKIP|ERROR):' "$dir/check.out" | sed "s|^|[${label:-$(basename "$dir")}] |"
        if grep -qE '^(FAIL|ERROR|XPASS):' "$dir/check.out" || [ ! -f "$dir/test-suite.log" ]; then
                find "$dir" -name '*.trs' -exec grep -lE '^:test-result: (FAIL|ERROR|XPASS)' {} + 2>/dev/null |
                        while read -r trs; do
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

# the Python suite with the newest torch (the first run had Debian's)
python_tests="tests/python/run-np2.sh tests/python/run-np3.sh tests/python/run-hosts.sh tests/test-launch-torchrun.sh"
echo "test: the Python suite with the newest torch from PyPI (scripts/venv-torch.sh)"
if [ ! -f "$top/build/python-binding/pkg/hvd/__init__.py" ]; then
        echo "SKIP: the Python suite with the newest torch: this build has no Python binding"
        skip=$((skip + $(echo "$python_tests" | wc -w)))
elif venv_python=$("$top/scripts/venv-torch.sh"); then
        version=$("$venv_python" -c 'import torch; print(torch.__version__)')
        label="build, torch $version"
        # torch.compile in the tests makes this run slower than the one with torch 1.13
        run_check "$top/build" "$python_tests" PYTHON="$venv_python" \
                HVD_PYTEST_TIMEOUT="${HVD_PYTEST_TIMEOUT:-600}"
        label=
else
        echo "test: ######################################################################"
        echo "test: SKIP: the Python suite did NOT run with the newest torch: no environment"
        echo "test: could be made (no network?); see venv-torch's message above"
        echo "test: ######################################################################"
        for t in $python_tests; do echo "SKIP: $t (newest torch)"; done
        skip=$((skip + $(echo "$python_tests" | wc -w)))
fi
# the benchmarks build (make bench) but are not run here: their timings are
# compared side by side with their peers by benchmarks/run-*.sh, never asserted
echo "test: the benchmarks build (make bench)"
if (cd "$top/build" && make -s -j2 bench) >"$top/build/bench.out" 2>&1; then
        echo "PASS: make bench"
        pass=$((pass + 1))
else
        echo "FAIL: make bench"
        tail -n 40 "$top/build/bench.out"
        status=1
        fail=$((fail + 1))
fi
if [ -z "${HVD_TEST_QUICK:-}" ]; then
        echo "test: CPU-only build with sanitizers (--without-cuda --enable-sanitizers --enable-werror)"
        if BUILD_DIR=build-cpu "$top/scripts/build.sh" --without-cuda --enable-sanitizers --enable-werror; then
                cpu_tests=$(cd "$top/build-cpu" && make -s print-cpu-tests 2>/dev/null)
                run_check "$top/build-cpu" "$cpu_tests"
        else
                echo "test: the CPU-only build failed"
                status=1
                fail=$((fail + 1))
        fi
fi
# a short libFuzzer run of every harness, when clang is here
if command -v clang >/dev/null 2>&1 && [ -z "${HVD_TEST_QUICK:-}" ]; then
        echo "test: fuzzing build (--enable-fuzzing --enable-werror) and a short fuzz run"
        if BUILD_DIR=build-fuzz "$top/scripts/build.sh" --without-cuda --disable-python --enable-fuzzing --enable-werror &&
           "$top/fuzz/run.sh" -t 6 "$top/build-fuzz"; then
                pass=$((pass + 1))
        else
                echo "test: the fuzzing build or the fuzz run failed (inputs kept, see above)"
                status=1
                fail=$((fail + 1))
        fi
fi
[ $status -ne 0 ] && [ $fail -eq 0 ] && fail=1
echo "${pass} passed, ${fail} failed, ${skip} skipped"
exit $status
