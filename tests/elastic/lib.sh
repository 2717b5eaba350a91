# shellcheck shell=bash
# tests/elastic/lib.sh — sourced by the elastic tests: runs
# tests/elastic/train.py (or ELASTIC_TRAIN) under hvdrun's elastic mode on emulated hosts and
# checks what every generation and every rank reported.
set -u
B=${HVD_BUILDDIR:?HVD_BUILDDIR must point at the build tree}
S=${HVD_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
# PYTHON runs ELASTIC_TRAIN (tests/elastic/train.py, with torch; the
# TensorFlow test sets both, and ELASTIC_NEEDS, before sourcing this)
PYTHON=${PYTHON:-/usr/bin/python3}
ELASTIC_TRAIN=${ELASTIC_TRAIN:-train.py}
ELASTIC_NEEDS=${ELASTIC_NEEDS:-torch}
if ! "$PYTHON" -c "import $ELASTIC_NEEDS" >/dev/null 2>&1; then
        echo "SKIP: $PYTHON cannot import $ELASTIC_NEEDS"
        exit 77
fi
tmp=$(mktemp -d /tmp/hvd-test-elastic-XXXXXX)
export TMPDIR=$tmp/tmpdir
mkdir "$TMPDIR"
export PYTHONPATH=$B/python-binding/pkg${PYTHONPATH:+:$PYTHONPATH}
export OMP_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT
fail() {
        echo "FAIL: $*"
        [ -f "$tmp/out" ] && sed 's/^/  out: /' "$tmp/out" | tail -n 40
        exit 1
}
ok() { echo "ok - $*"; }

# run NAME [HVDRUN OPTIONS...]: the training under hvdrun, output in
# $tmp/out (and $tmp/NAME.out), exit status in $rc; ELASTIC_* variables
# are passed on.
run() {
        name=$1
        shift
        : >"$tmp/progress"
        rm -f "$tmp/progress.GARBAGE" "$tmp/progress.FAIL"
        start=$(date +%s%3N)
        timeout -k 5 150 "$B/tools/hvdrun" --emulate-hosts --discovery-interval 0.2 \
                -x ELASTIC_EPOCHS -x ELASTIC_EXIT -x ELASTIC_SYNC_EXIT -x ELASTIC_WAIT -x ELASTIC_HOLD -x ELASTIC_PROGRESS -x ELASTIC_TUNE -x ELASTIC_STOP_SEC -x HVD_ELASTIC_SETTLE \
                "$@" "$PYTHON" "$S/tests/elastic/$ELASTIC_TRAIN" >"$tmp/out" 2>&1
        rc=$?
        cp "$tmp/out" "$tmp/$name.out"
        echo "# $name: exit status $rc after $(($(date +%s%3N) - start)) ms"
}
export ELASTIC_EPOCHS=2 ELASTIC_EXIT='' ELASTIC_SYNC_EXIT='' ELASTIC_WAIT='' ELASTIC_HOLD='' ELASTIC_TUNE='' ELASTIC_STOP_SEC="" ELASTIC_PROGRESS=$tmp/progress HVD_ELASTIC_SETTLE=10

# gen_lines G: the "ELASTIC gen=G" lines of the last run, prefix cut off
gen_lines() { grep -o "ELASTIC gen=$1 .*" "$tmp/out"; }
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p"; }

# check_generation G SIZE HOSTS: generation G has SIZE ranks 0..SIZE-1,
# once each, on the hosts HOSTS ("a a b": by rank), local ranks dense per host
check_generation() {
        g=$1 size=$2 hosts=$3
        lines=$(gen_lines "$g")
        [ "$(echo "$lines" | grep -c .)" -eq "$size" ] || fail "generation $g: $(echo "$lines" | grep -c .) ranks reported, expected $size"
        want_rank=0
        for h in $hosts; do
                l=$(echo "$lines" | grep " rank=$want_rank ") || fail "generation $g: no rank $want_rank"
                [ "$(echo "$l" | field size)" -eq "$size" ] || fail "generation $g rank $want_rank: $l"
                [ "$(echo "$l" | field host)" = "$h" ] || fail "generation $g rank $want_rank on $(echo "$l" | field host), expected $h"
                lr=$(echo "$l" | field local_rank)
                before=$(echo "$hosts" | tr ' ' '\n' | head -n "$want_rank" | grep -cx "$h")
                [ "$lr" -eq "$before" ] || fail "generation $g rank $want_rank: local rank $lr, expected $before"
                want_rank=$((want_rank + 1))
        done
}

# check_results N [PADDED]: N ranks finished, every one with the same
# weights, near the true ones (1.5 -2 0.5 3), no sample seen twice (with
# PADDED, fewer than N: an epoch resumed on N ranks may repeat a few of
# its remainder, as the sampler pads it); $weights holds them
check_results() {
        n=$1
        res=$(grep -o 'RESULT .*' "$tmp/out")
        [ "$(echo "$res" | grep -c .)" -eq "$n" ] || fail "$(echo "$res" | grep -c .) ranks finished, expected $n"
        [ "$(echo "$res" | field weights | sort -u | wc -l)" -eq 1 ] || fail "ranks ended with different weights: $res"
        weights=$(echo "$res" | field weights | head -n 1)
        if [ -n "${2:-}" ]; then
                for d in $(echo "$res" | field dup); do [ "$d" -lt "$n" ] || fail "$d samples processed twice: $res"; done
        else
                [ "$(echo "$res" | field dup | sort -u)" = 0 ] || fail "samples processed twice: $res"
        fi
        "$PYTHON" - "$weights" <<'PY' || fail "weights $weights are not the true ones"
import sys
w = [float(v) for v in sys.argv[1].split(",")]
sys.exit(0 if max(abs(a - b) for a, b in zip(w, [1.5, -2.0, 0.5, 3.0])) < 1e-3 else 1)
PY
}
