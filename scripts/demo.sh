#!/bin/sh
# demo.sh — set up, build, and run the main job: examples/train_mlp, a small
# MLP trained data-parallel on scikit-learn's handwritten digits by N workers
# (default 4) that hvdrun starts on a private, embedded hvd-coordinatord,
# then the same training on 1 worker. The last lines give the held-out
# accuracy reached, the time per epoch on N ranks against 1 rank, and every
# rank's weights checksum, compared.
#   scripts/demo.sh [-np N] [TRAIN_MLP OPTIONS...]   e.g. --epochs 20, --synthetic
#   scripts/demo.sh --no-setup ...   installs and builds nothing: runs the build
#                                    in $BUILD_DIR (default build)
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
die() {
        echo "demo: $*" >&2
        exit 1
}
setup=1 np=4
while [ $# -gt 0 ]; do
        case $1 in
        --no-setup) setup=0 && shift ;;
        -np)
                [ $# -ge 2 ] || die "-np needs a number of ranks"
                np=$2 && shift 2
                ;;
        *) break ;;
        esac
done
case $np in
'' | *[!0-9]* | 0*) die "-np '$np': expected a number of ranks from 1" ;;
esac
if [ $setup = 1 ]; then
        "$top/scripts/setup.sh" --demo
        "$top/scripts/build.sh"
fi
dir=${BUILD_DIR:-build}
case $dir in /*) ;; *) dir=$top/$dir ;; esac
[ -x "$dir/examples/train_mlp" ] || die "no $dir/examples/train_mlp: build first (scripts/build.sh)"
out=$(mktemp -d "${TMPDIR:-/tmp}/hvd-demo-XXXXXX")
trap 'rm -rf "$out"' EXIT

# run N ARGS...: train_mlp on N ranks, shown as it goes and kept in $out/N
run() {
        n=$1 && shift
        if [ "$n" = 1 ]; then echo "demo: train_mlp on 1 rank"; else echo "demo: train_mlp on $n ranks"; fi
        {
                rc=0
                "$dir/tools/hvdrun" -np "$n" "$dir/examples/train_mlp" "$@" 2>&1 || rc=$?
                echo "$rc" >"$out/rc"
        } | tee "$out/$n"
        [ "$(cat "$out/rc")" = 0 ] || die "train_mlp on $n rank(s) failed (exit status $(cat "$out/rc"))"
}
# field N PATTERN: the line of rank 0's output in $out/N that starts with PATTERN
field() {
        line=$(sed -n "s/^\[0\] $2//p" "$out/$1" | tail -n 1)
        [ -n "$line" ] || die "train_mlp on $1 rank(s) printed no '$2' line"
        echo "$line"
}

run "$np" "$@"
[ "$np" = 1 ] || run 1 "$@" -q

# "held-out accuracy 0.967 after 10 epochs (359 held-out samples)"
after=$(field "$np" 'held-out accuracy ' | cut -d' ' -f2-)
acc_n=$(field "$np" 'held-out accuracy ' | cut -d' ' -f1)
acc_1=$(field 1 'held-out accuracy ' | cut -d' ' -f1)
ms_n=$(field "$np" 'time per epoch ' | cut -d' ' -f1)
ms_1=$(field 1 'time per epoch ' | cut -d' ' -f1)
sums=$(field "$np" 'weights checksum per rank: ')
[ "$(echo "$sums" | wc -w)" = "$np" ] || die "not $np checksums, one per rank: $sums"
ranks="$np ranks"
[ "$np" != 1 ] || ranks="1 rank"
echo
echo "demo: held-out accuracy $after: $acc_n on $ranks, $acc_1 on 1 rank"
echo "demo: time per epoch $ms_n ms on $ranks, $ms_1 ms on 1 rank:" \
        "$(awk -v n="$ms_n" -v one="$ms_1" 'BEGIN { printf "%.2fx the speed of 1 rank", one / n }')"
# every rank's checksum, gathered by train_mlp; compared here again
[ "$(echo "$sums" | tr ' ' '\n' | cut -d: -f2 | sort -u | wc -l)" = 1 ] ||
        die "weights differ across the $ranks: checksums $sums"
echo "demo: weights identical on all $ranks: checksums $sums"
