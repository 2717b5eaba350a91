#!/bin/sh
# run.sh — a short libFuzzer run of every harness in fuzz/ (for CI), or a
# long one (docs/FUZZING.md).
#   fuzz/run.sh [-t SECONDS_EACH] [-o DIR] [BUILDDIR] [HARNESS...]
# BUILDDIR is a build configured with --enable-fuzzing (default:
# $HVD_BUILDDIR, else build/). Each harness starts from the committed
# corpus fuzz/corpus/NAME (read only) and writes what it finds new to
# DIR/NAME (default: a temporary directory, removed afterwards). A crash,
# leak or timeout fails the run; the input is kept as DIR/NAME-crash-*
# (printed) to be added to fuzz/corpus/NAME once fixed.
# Prints one line per harness: fuzz=NAME seconds=S execs=N execs_per_s=R
# and exits 0 when no harness found anything, 77 when no fuzzer is built.
set -u
secs=6
out=
while getopts t:o: opt; do
        case $opt in
        t) secs=$OPTARG ;;
        o) out=$OPTARG ;;
        *) echo "usage: $0 [-t SECONDS_EACH] [-o DIR] [BUILDDIR] [HARNESS...]" >&2; exit 2 ;;
        esac
done
shift $((OPTIND - 1))
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-${HVD_BUILDDIR:-$src/build}}
[ $# -gt 0 ] && shift
harnesses=${*:-envelope negotiate conf hostfile dispatch}

if [ ! -x "$build/fuzz/fuzz-envelope" ]; then
        echo "fuzz: no fuzzers in $build/fuzz (configure --enable-fuzzing, needs clang): skipped"
        exit 77
fi
keep=1
if [ -z "$out" ]; then
        out=$(mktemp -d "${TMPDIR:-/tmp}/hvd-fuzz.XXXXXX")
        keep=0
fi
status=0
for h in $harnesses; do
        mkdir -p "$out/$h"
        log="$out/$h.log"
        extra=
        [ "$h" = hostfile ] && extra=-close_fd_mask=2
        # shellcheck disable=SC2086 # extra is no word or one
        "$build/fuzz/fuzz-$h" -max_total_time="$secs" -print_final_stats=1 -timeout=10 \
                -rss_limit_mb=2048 -max_len=65536 -artifact_prefix="$out/$h-" $extra \
                "$out/$h" "$src/fuzz/corpus/$h" >"$log" 2>&1
        rc=$?
        execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
        rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
        cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | sed 's/cov: //')
        echo "fuzz=$h seconds=$secs execs=${execs:-0} execs_per_s=${rate:-0} edges=${cov:-0}"
        if [ $rc -ne 0 ]; then
                status=1
                echo "fuzz: $h FAILED (exit $rc); its input and log:"
                ls "$out/$h"-* 2>/dev/null
                grep -E '^(==[0-9]+==|SUMMARY|invariant broken)|runtime error' "$log" | head -n 20
                keep=1
        fi
done
if [ $keep -eq 0 ]; then
        rm -rf "$out"
else
        echo "fuzz: inputs and logs kept in $out"
fi
exit $status
