#!/bin/sh
# test-bench-python.sh — the Python benchmarks' scripts (run-python.sh,
# run-scaling.sh, run-one-rank.sh, run-synthetic.sh, torch_peers.py,
# torch_one_rank.py) refuse bad arguments with a clear message, and tiny
# real runs print their tables: run-python.sh (hvd and torch.distributed,
# two rounds, two sizes, a three-tensor step, the CNN's training step) a
# ratio for every size and step, with WHAT=colls a row for each of the
# other four collectives, and RAW= the same table from its raw lines;
# run-synthetic.sh the Horovod script's rate under hvdrun (and Horovod
# said missing, loudly, where it is not installed); run-one-rank.sh
# hvd both ways beside gloo; run-scaling.sh's tables from raw lines, of
# the step and of the sweeps (WHAT=sweep, colls). No timing is asserted. Skips
# without Debian's Python with torch.
. "$HVD_SRCDIR/tests/lib/common.sh"
py=/usr/bin/python3
"$py" -c 'import torch' 2>/dev/null || skip "$py cannot import torch"
[ -f "$HVD_BUILDDIR/python-binding/pkg/hvd/__init__.py" ] || fail "$HVD_BUILDDIR/python-binding/pkg/hvd is missing"
b=$HVD_SRCDIR/benchmarks
dir=$(mktemp -d /tmp/hvd-test-bench-XXXXXX)
trap 'rm -rf "$dir"' EXIT

# refused ARGS_MESSAGE CMD...: CMD exits 2 and says ARGS_MESSAGE on stderr
refused() {
        msg=$1
        shift
        "$@" >"$dir/out" 2>"$dir/err"
        st=$?
        [ "$st" = 2 ] || fail "$* exited $st, not 2" "$(cat "$dir/out" "$dir/err")"
        grep -q -- "$msg" "$dir/err" || fail "$*: no '$msg' on stderr" "$(cat "$dir/err")"
}
refused "NP=0 is not a positive integer" env NP=0 "$b/run-python.sh" "$HVD_BUILDDIR"
refused "ROUNDS=x is not a positive integer" env ROUNDS=x "$b/run-python.sh" "$HVD_BUILDDIR"
refused "MIN_TIME=1s is not a number of seconds" env MIN_TIME=1s "$b/run-python.sh" "$HVD_BUILDDIR"
refused "unknown peer mpi" env PEERS="hvd mpi" "$b/run-python.sh" "$HVD_BUILDDIR"
refused "unknown benchmark nope" env WHAT=sweep,nope "$b/run-python.sh" "$HVD_BUILDDIR"
refused "MIN=4096 is above MAX=1024" env MIN=4096 MAX=1024 "$b/run-python.sh" "$HVD_BUILDDIR"
refused "RAW=$dir/none: no such file" env RAW="$dir/none" "$b/run-python.sh" "$HVD_BUILDDIR"
refused "BATCH=0 is not a positive integer" env BATCH=0 "$b/run-synthetic.sh" "$HVD_BUILDDIR"
refused "MODEL=Res;Net is not a torchvision model name" env MODEL='Res;Net' "$b/run-synthetic.sh" "$HVD_BUILDDIR"
refused "unknown peer torch" env PEERS="hvd torch" "$b/run-synthetic.sh" "$HVD_BUILDDIR"
refused "NS: 1 is not a number of hosts above 1" env NS="2 1" "$b/run-scaling.sh" "$HVD_BUILDDIR"
refused "unknown peer gloo" env PEERS=gloo "$b/run-scaling.sh" "$HVD_BUILDDIR"
refused "WHAT=nope: scaling, sweep or colls" env WHAT=nope "$b/run-scaling.sh" "$HVD_BUILDDIR"
refused "MIN=2 MAX=8: 4 <= MIN <= MAX bytes" env WHAT=sweep MIN=2 MAX=8 "$b/run-scaling.sh" "$HVD_BUILDDIR"
refused "MAX=1M is not a number of bytes" env WHAT=sweep MAX=1M "$b/run-scaling.sh" "$HVD_BUILDDIR"
refused "ROUNDS=0 is not a positive integer" env ROUNDS=0 "$b/run-one-rank.sh" "$HVD_BUILDDIR"
refused "unknown peer mpi" env PEERS="hvd mpi" "$b/run-one-rank.sh" "$HVD_BUILDDIR"
refused "MIN=4096 is above MAX=1024" env MIN=4096 MAX=1024 "$b/run-one-rank.sh" "$HVD_BUILDDIR"
refused "need 4 <= --min-bytes" "$py" "$b/torch_one_rank.py" --impl gloo --min-bytes 8 --max-bytes 4
refused "unknown --what nope" "$py" "$b/torch_peers.py" --impl hvd --what nope
refused "need --model-tsv" "$py" "$b/torch_peers.py" --impl hvd --what step
refused "one of textcls" "$py" "$b/torch_peers.py" --impl hvd --what train --train-model resnet
refused "measures --what scaling only" "$py" "$b/torch_peers.py" --impl plain --what sweep

# run-scaling.sh RAW=: rate(N) is N times one rank's, efficiency rate(N) / (N x rate(1)),
# the link bound (60 + max(120, 2(N-1)/N x 50 MiB at 1 Gbit/s)) ms against 180 ms
{
        echo "#   round=0 rate=- bench=scaling model=m impl=plain np=1 batch=8 img_s=100.0 ms=80 fwd_ms=60 bwd_ms=120 mib=50"
        echo "#   round=0 rate=1gbit bench=scaling model=m impl=hvd np=2 batch=8 img_s=50.0 ms=160 fwd_ms=60 bwd_ms=120 mib=50"
        echo "#   round=1 rate=1gbit bench=scaling model=m impl=hvd np=2 batch=8 img_s=30.0 ms=260 fwd_ms=60 bwd_ms=120 mib=50"
        echo "#   round=0 rate=1gbit bench=scaling model=m impl=ddp np=2 batch=8 img_s=20.0 ms=400 fwd_ms=60 bwd_ms=120 mib=50"
} >"$dir/scaling.raw"
# tabulated RAW OUT: run-scaling.sh's tables of the raw lines in RAW, into OUT
tabulated() {
        RAW=$1 "$b/run-scaling.sh" "$HVD_BUILDDIR" >"$2" 2>&1 || fail "run-scaling.sh RAW=$1 failed" "$(cat "$2")"
}
tabulated "$dir/scaling.raw" "$dir/scaling"
grep -Eq '^ +1gbit +2 +80\.0 +0\.40 \[0\.30-0\.50\] +- +- +40\.0 +0\.20 \[0\.20-0\.20\] +- +2\.00 +0\.38$' "$dir/scaling" ||
        fail "run-scaling.sh RAW=: not the expected row" "$(cat "$dir/scaling")"

# run-scaling.sh RAW= of a sweep (WHAT=sweep): each system's median time
# a call, and hvd's speed over each peer's
{
        echo "#   round=0 rate=10gbit bench=allreduce impl=hvd mode=inplace bytes=8 np=2 time_us=300.0 busbw_gbs=0.0"
        echo "#   round=1 rate=10gbit bench=allreduce impl=hvd mode=inplace bytes=8 np=2 time_us=500.0 busbw_gbs=0.0"
        echo "#   round=0 rate=10gbit bench=allreduce impl=horovod mode=inplace bytes=8 np=2 time_us=1200.0 busbw_gbs=0.0"
        echo "#   round=0 rate=10gbit bench=allreduce impl=gloo mode=inplace bytes=8 np=2 time_us=600.0 busbw_gbs=0.0"
        echo "#   round=0 rate=10gbit bench=allreduce impl=hvd mode=unnamed bytes=8 np=2 time_us=250.0 busbw_gbs=0.0"
        echo "#   round=0 rate=10gbit bench=coll op=broadcast impl=hvd bytes=1024 np=2 time_us=100.0 busbw_gbs=0.0"
        echo "#   round=0 rate=10gbit bench=coll op=broadcast impl=gloo bytes=1024 np=2 time_us=250.0 busbw_gbs=0.0"
} >"$dir/sweep.raw"
tabulated "$dir/sweep.raw" "$dir/sweep"
grep -Eq '^ +10gbit +2 +inplace +8 +400\.0 +1200\.0 +600\.0 +3\.00 +1\.50$' "$dir/sweep" ||
        fail "run-scaling.sh RAW= of a sweep: not the expected in-place row" "$(cat "$dir/sweep")"
grep -Eq '^ +10gbit +2 +unnamed +8 +250\.0 +- +- +- +-$' "$dir/sweep" ||
        fail "run-scaling.sh RAW= of a sweep: not the expected unnamed row" "$(cat "$dir/sweep")"
grep -Eq '^ +10gbit +2 +broadcast +1024 +100\.0 +- +250\.0 +- +2\.50$' "$dir/sweep" ||
        fail "run-scaling.sh RAW= of a sweep: not the expected broadcast row (WHAT=colls)" "$(cat "$dir/sweep")"
# a file of both: both tables
cat "$dir/scaling.raw" "$dir/sweep.raw" >"$dir/both.raw"
tabulated "$dir/both.raw" "$dir/both"
for row in '^ +1gbit +2 +80\.0 ' '^ +10gbit +2 +inplace +8 +400\.0 '; do
        grep -Eq "$row" "$dir/both" || fail "run-scaling.sh RAW= of a step and a sweep: no row $row" "$(cat "$dir/both")"
done

# a three-tensor model in place of ResNet-50
printf 'name\tshape\tnumel\nfc.weight\t64x32\t2048\nfc.bias\t64\t64\nconv.weight\t16x3x3x3\t432\n' >"$dir/resnet50.tsv"

# the compute model alone: one line, the rate of batch / (fwd + bwd)
"$py" "$b/torch_peers.py" --impl plain --what scaling --model-tsv "$dir/resnet50.tsv" --steps 2 --reps 1 \
        --batch 8 --fwd-ms 1 --bwd-ms 2 >"$dir/plain" 2>&1 || fail "torch_peers.py --impl plain failed" "$(cat "$dir/plain")"
grep -Eq '^bench=scaling model=resnet50 impl=plain np=1 batch=8 img_s=[0-9.]+ ms=[0-9.]+ ' "$dir/plain" ||
        fail "torch_peers.py --impl plain: no scaling line" "$(cat "$dir/plain")"

# CHECK_ARGS=1: what would run, nothing run
CHECK_ARGS=1 PEERS="hvd torch" DATA=$dir "$b/run-python.sh" "$HVD_BUILDDIR" >"$dir/check" 2>&1 ||
        fail "run-python.sh CHECK_ARGS=1 failed" "$(cat "$dir/check")"
grep -q "peers: hvd torch" "$dir/check" || fail "run-python.sh CHECK_ARGS=1: peers not listed" "$(cat "$dir/check")"

# a tiny real run: hvd beside torch.distributed, alternating
PEERS="hvd torch" DATA=$dir ROUNDS=2 MIN=4096 MAX=8192 REPS=1 STEPS=1 TRAIN_MODELS=cnn BATCH=4 \
        timeout 240 "$b/run-python.sh" "$HVD_BUILDDIR" >"$dir/run" 2>&1 || fail "run-python.sh failed" "$(cat "$dir/run")"
! grep -q "PEER" "$dir/run" || fail "run-python.sh: a peer failed or is missing" "$(cat "$dir/run")"
for n in 4096 8192; do
        for mode in inplace outofplace grouped; do
                c=$(grep -c "^#   round=[01] bench=allreduce impl=\(hvd\|gloo\) mode=$mode bytes=$n np=2 " "$dir/run")
                [ "$c" = 4 ] || fail "run-python.sh: $c raw lines for $mode $n bytes, not 4 (2 peers x 2 rounds)" "$(cat "$dir/run")"
        done
        # hvd alone on shared tensors, in place, and without a name (gloo has no names)
        for mode in shared unnamed; do
                c=$(grep -c "^#   round=[01] bench=allreduce impl=hvd mode=$mode bytes=$n np=2 " "$dir/run")
                [ "$c" = 2 ] || fail "run-python.sh: $c raw lines for $mode $n bytes, not 2 (hvd x 2 rounds)" "$(cat "$dir/run")"
        done
        # one table row per mode (in place, out of place, unnamed beside gloo's
        # out of place, grouped, shared) with a ratio vs gloo: median [range]
        c=$(grep -Ec "^ +$n +[0-9.]+ \( *[0-9.]+\) +- +[0-9.]+ \( *[0-9.]+\) +- +[0-9.]+ \[[0-9.]+-[0-9.]+\]$" "$dir/run")
        [ "$c" = 5 ] || fail "run-python.sh: $c table rows for $n bytes with a ratio vs gloo, not 5" "$(cat "$dir/run")"
done
grep -Eq '^  hvd vs torch gloo, async per tensor: [0-9.]+ \[' "$dir/run" || fail "run-python.sh: no step ratio vs gloo" "$(cat "$dir/run")"
grep -Eq '^  hvd vs DDP.s 25 MiB buckets over gloo: [0-9.]+ \[' "$dir/run" || fail "run-python.sh: no step ratio vs DDP" "$(cat "$dir/run")"
grep -Eq '^  hvd with shared gradients vs hvd: [0-9.]+ \[' "$dir/run" ||
        fail "run-python.sh: no step ratio of shared gradients" "$(cat "$dir/run")"
grep -Eq '^  hvd vs ddp: [0-9.]+ \[' "$dir/run" || fail "run-python.sh: no training-step ratio vs DDP" "$(cat "$dir/run")"
grep -q "^## training step, cnn" "$dir/run" || fail "run-python.sh: no training-step table" "$(cat "$dir/run")"

# a tiny real WHAT=colls: broadcast, allgather, reducescatter and alltoall
# from Python beside gloo, a table row per op with hvd's time; gloo on torch
# 1.13 has no reduce_scatter, which the run says instead of a figure
PEERS="hvd torch" WHAT=colls ROUNDS=1 MIN=4096 MAX=4096 REPS=1 MIN_TIME=0.01 \
        timeout 120 "$b/run-python.sh" "$HVD_BUILDDIR" >"$dir/colls" 2>&1 || fail "run-python.sh WHAT=colls failed" "$(cat "$dir/colls")"
! grep -q "PEER" "$dir/colls" || fail "run-python.sh WHAT=colls: a peer failed or is missing" "$(cat "$dir/colls")"
for op in broadcast allgather reducescatter alltoall; do
        sed -n "/^## $op, /,/^\$/p" "$dir/colls" | grep -Eq '^ +4096 +[0-9.]+ \( *[0-9.]+\) ' ||
                fail "run-python.sh WHAT=colls: no $op row with hvd's time" "$(cat "$dir/colls")"
        if [ $op != reducescatter ] || ! grep -q "^#   # gloo (no reducescatter: " "$dir/colls"; then
                sed -n "/^## $op, /,/^\$/p" "$dir/colls" | grep -Eq '^ +4096 .* [0-9.]+$' ||
                        fail "run-python.sh WHAT=colls: no $op ratio vs gloo" "$(cat "$dir/colls")"
        fi
done

# a tiny real run-synthetic.sh, hvd alone: the Horovod script's own
# "Total img/sec" line, tabulated; Horovod asked for where it is not
# installed is said loudly (benchmarks/peers.sh), and hvd still runs
mkdir "$dir/nohorovod"
PEERS="hvd horovod" HOROVOD_DIR=$dir/nohorovod ROUNDS=1 BATCH=2 IMAGE=32 CLASSES=10 WARMUP=1 BATCHES=1 ITERS=1 \
        timeout 180 "$b/run-synthetic.sh" "$HVD_BUILDDIR" >"$dir/synth" 2>&1 || fail "run-synthetic.sh failed" "$(cat "$dir/synth")"
grep -q "^!!!!!!!!!! run-synthetic: PEER MISSING: Horovod 0.28.1 is not available: $dir/nohorovod has no bin/horovodrun" \
        "$dir/synth" || fail "run-synthetic.sh: no loud line for the missing Horovod" "$(cat "$dir/synth")"
grep -q "^round=0 impl=hvd total_img_s=[0-9.]*$" "$dir/synth" || fail "run-synthetic.sh: no hvd run" "$(cat "$dir/synth")"
grep -Eq "^  hvd +[0-9.]+  \[" "$dir/synth" || fail "run-synthetic.sh: no table" "$(cat "$dir/synth")"

# a tiny real run-one-rank.sh: hvd under hvdrun and without a launcher
# beside gloo's world of one, a row per system and size with its time
# over hvd's
PEERS="hvd gloo" ROUNDS=2 MIN=1024 MAX=4096 MIN_TIME=0.01 timeout 120 "$b/run-one-rank.sh" "$HVD_BUILDDIR" \
        >"$dir/one" 2>&1 || fail "run-one-rank.sh failed" "$(cat "$dir/one")"
for n in 1024 4096; do
        for sys in 'hvd(hvdrun)' 'hvd(none)'; do
                grep -Eq "^$(printf '%s' "$sys" | sed 's/[()]/\\&/g') +$n +[0-9.]+ +[0-9.]+ +[0-9.]+x$" "$dir/one" ||
                        fail "run-one-rank.sh: no row of $sys at $n bytes" "$(cat "$dir/one")"
        done
        grep -Eq "^gloo\(none\) +$n +[0-9.]+ +- +[0-9.]+x$" "$dir/one" ||
                fail "run-one-rank.sh: no row of gloo at $n bytes" "$(cat "$dir/one")"
done

# RAW=: the same table again from the raw lines
RAW=$dir/run "$b/run-python.sh" "$HVD_BUILDDIR" >"$dir/raw" 2>&1 || fail "run-python.sh RAW= failed" "$(cat "$dir/raw")"
sed -n '/^# medians/,$p' "$dir/run" >"$dir/a"
sed -n '/^# medians/,$p' "$dir/raw" >"$dir/b"
cmp -s "$dir/a" "$dir/b" || fail "run-python.sh RAW=: another table" "$(diff "$dir/a" "$dir/b")"
echo "PASS: run-python.sh, run-scaling.sh, run-one-rank.sh, run-synthetic.sh and torch_peers.py"
