#!/bin/sh
# test-bench-step.sh — benchmarks/run-step.sh's tabulation (RAW=) of an
# autotuned run beside Horovod: from raw lines of three rounds whose load
# doubles in the second, it gives each tuned point's speed against its
# grid's best by the medians and by the median of the per-round ratios
# (which the doubled round does not move), the settled samples' step time,
# the switches hvd settled with, and hvd against Horovod. Runs nothing else; no timing is measured.
. "$HVD_SRCDIR/tests/lib/common.sh"
command -v /usr/bin/python3 >/dev/null 2>&1 || skip "/usr/bin/python3 is missing"
dir=$(mktemp -d /tmp/hvd-test-bench-step-XXXXXX)
trap 'rm -rf "$dir"' EXIT
printf 'name\tshape\tnumel\nfc.weight\t64\t64\n' >"$dir/resnet50.tsv"

# line IMPL MODE FUSION_BYTES CYCLE_MS MS ROUND
line() {
        echo "#   bench=step impl=$1 model=m np=2 mode=$2 fusion_bytes=$3 cycle_ms=$4 tensors=3 bytes=104857600 steps=5 ms_median=$5 round=$6"
}
{
        echo "#   bench=autotune impl=hvd model=m np=2 threshold=4194304 cycle_ms=10 samples=21 settled_score=209715200 send_thread=0 small_chunks=1"
        echo "#   bench=autotune impl=horovod model=m np=2 threshold=8388608 cycle_ms=10 samples=9 rows=22"
        # round 1 runs at half the speed of rounds 0 and 2
        for r in 0 1 2; do
                k=1
                [ $r = 1 ] && k=2
                line hvd fusion 0 1 $((1000 * k)) $r
                line hvd fusion 67108864 1 $((500 * k)) $r
                line hvd fusion 67108864 10 $((600 * k)) $r
                line horovod fusion 0 1 $((1200 * k)) $r
                line horovod fusion 67108864 1 $((550 * k)) $r
                line horovod tuned 8388608 10 $((500 * k)) $r
        done
        # hvd's tuned point: 80 %, 90 %, 95 % of the best point's speed, round by round
        line hvd tuned 4194304 10 625 0
        line hvd tuned 4194304 10 1111.111 1
        line hvd tuned 4194304 10 526.316 2
} >"$dir/raw"
RAW=$dir/raw NETNS=1 DATA=$dir PNG=$dir/step.png "$HVD_SRCDIR/benchmarks/run-step.sh" "$HVD_BUILDDIR" >"$dir/out" 2>&1 ||
        fail "run-step.sh RAW= failed" "$(cat "$dir/out")"

# expect TEXT: the table has TEXT as a line of its own
expect() {
        grep -Fxq -- "$1" "$dir/out" || fail "run-step.sh RAW=: no line '$1'" "$(cat "$dir/out")"
}
expect "  hvd autotuned: 4.00 MiB, 10 ms with small chunks (best after 21 samples): 625.0 ms, 80% of the grid's best (hvd 64M 1ms) speed by medians, 90% by the median per-round ratio (80%, 90%, 95%); its own settled samples' median 500.0 ms"
expect "  horovod autotuned: 8.00 MiB, 10 ms (best after 9 samples, of 22 rows): 500.0 ms, 110% of the grid's best (horovod 64M 1ms) speed by medians, 110% by the median per-round ratio (110%, 110%, 110%)"
expect "  hvd vs Horovod, hvd 64M 1ms vs horovod 64M 1ms: 1.10x by medians, 1.10x by the median per-round ratio"
expect "  hvd vs Horovod, hvd tuned vs horovod tuned: 0.80x by medians, 0.90x by the median per-round ratio"
expect "  fusion on (best) vs off (best): 2.00x"
echo "PASS: run-step.sh tabulates the tuned points against the grid, per round and by medians"
