#!/bin/sh
# test-demo.sh — the demo (scripts/demo.sh, without its setup) on 2 and 3
# ranks: its last lines give a held-out accuracy above the threshold on N
# ranks and on 1, a time per epoch for both, and N equal weights checksums;
# train_mlp's own output agrees. Then train_mlp's data: --synthetic learns,
# and a missing, truncated or malformed digits file is a clear error.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
. "$HVD_SRCDIR/tests/lib/train_mlp.sh"
if [ ! -f "$TRAIN_MLP_DIGITS" ]; then
        [ "${CI:-}" = true ] && fail "$TRAIN_MLP_DIGITS is missing (scripts/setup.sh installs python3-sklearn)"
        skip "$TRAIN_MLP_DIGITS is missing: apt-get install python3-sklearn"
fi
tmp=$(mktemp -d /tmp/hvd-test-demo-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
TMPDIR=$tmp
export TMPDIR
TRAIN_MLP=$HVD_BUILDDIR/examples/train_mlp
e=$TRAIN_MLP_EPOCHS

for n in 2 3; do
        BUILD_DIR=$HVD_BUILDDIR "$HVD_SRCDIR/scripts/demo.sh" --no-setup -np $n -e "$e" >"$tmp/out" 2>&1 ||
                fail "demo -np $n: exit status $?" "$(cat "$tmp/out")"
        tail -n 3 "$tmp/out" >"$tmp/last"
        # demo: held-out accuracy after 5 epochs (359 held-out samples): 0.955 on 2 ranks, 0.947 on 1 rank
        acc=$(sed -n "1s/^demo: held-out accuracy after $e epochs (359 held-out samples): \([0-9.]*\) on $n ranks, \([0-9.]*\) on 1 rank\$/\1 \2/p" "$tmp/last")
        [ -n "$acc" ] || fail "demo -np $n: no accuracy line" "$(cat "$tmp/out")"
        for a in $acc; do
                awk -v a="$a" -v min="$TRAIN_MLP_MIN_ACCURACY" 'BEGIN { exit !(a > min) }' ||
                        fail "demo -np $n: held-out accuracy $a, not above $TRAIN_MLP_MIN_ACCURACY" "$(cat "$tmp/out")"
        done
        # demo: time per epoch 25.1 ms on 2 ranks, 35.2 ms on 1 rank: 1.40x the speed of 1 rank
        times=$(sed -n "2s/^demo: time per epoch \([0-9.]*\) ms on $n ranks, \([0-9.]*\) ms on 1 rank: [0-9.]*x the speed of 1 rank\$/\1 \2/p" "$tmp/last")
        [ -n "$times" ] || fail "demo -np $n: no time line" "$(cat "$tmp/out")"
        # demo: weights identical on all 2 ranks: checksums 0:0x... 1:0x...
        sums=$(sed -n "3s/^demo: weights identical on all $n ranks: checksums //p" "$tmp/last")
        [ "$(echo "$sums" | wc -w)" -eq $n ] || fail "demo -np $n: not $n checksums" "$(cat "$tmp/out")"
        # the same as train_mlp's own lines, one run on N ranks, one on 1
        sed -n '/^demo: train_mlp on '$n' rank/,/^demo: train_mlp on 1 rank/p' "$tmp/out" >"$tmp/np$n"
        found=$(train_mlp_outcome "$tmp/np$n" $n) || fail "demo -np $n: train_mlp: $found" "$(cat "$tmp/out")"
        [ "$(grep -c "^\[0\] epoch [0-9]* loss .* held-out loss .* accuracy" "$tmp/np$n")" -eq $((e + 1)) ] ||
                fail "demo -np $n: not one accuracy line an epoch" "$(cat "$tmp/out")"
        sed -n '/^demo: train_mlp on 1 rank/,$p' "$tmp/out" >"$tmp/np1"
        found1=$(train_mlp_outcome "$tmp/np1" 1) || fail "demo -np $n: train_mlp on 1 rank: $found1" "$(cat "$tmp/out")"
        echo "ok: demo -np $n: $found; epoch $(echo "$times" | cut -d' ' -f1) ms, on 1 rank $(echo "$times" | cut -d' ' -f2) ms"
done

# --synthetic: generated data, no file read; the model learns well above chance (0.1)
"$HVD_SRCDIR/tests/lib/launch.sh" -t 60 -n 2 -- "$TRAIN_MLP" --synthetic --data /nonexistent -q -e 3 >"$tmp/out" 2>&1 ||
        fail "train_mlp --synthetic: exit status $?" "$(cat "$tmp/out")"
acc=$(sed -n 's/^.*held-out accuracy \([0-9.]*\) after 3 epochs (409 held-out samples)$/\1/p' "$tmp/out")
awk -v a="${acc:-0}" 'BEGIN { exit !(a > 0.4) }' || fail "train_mlp --synthetic: held-out accuracy '$acc'" "$(cat "$tmp/out")"
grep -q 'final weights identical on all 2 ranks' "$tmp/out" || fail "train_mlp --synthetic: no final line" "$(cat "$tmp/out")"
echo "ok: train_mlp --synthetic on 2 ranks: held-out accuracy $acc after 3 epochs"

# bad data: exit 1 and a message naming the file and what is wrong, before training
expect_error() { # FILE MESSAGE
        "$TRAIN_MLP" -q --data "$1" >"$tmp/out" 2>&1
        rc=$?
        [ $rc -eq 1 ] || fail "train_mlp --data $1: exit status $rc, expected 1" "$(cat "$tmp/out")"
        [ "$(cat "$tmp/out")" = "train_mlp: rank 0: $2" ] || fail "train_mlp --data $1: wrong message" "$(cat "$tmp/out")"
}
expect_error "$tmp/none.csv.gz" \
        "cannot open '$tmp/none.csv.gz': No such file or directory (Debian: apt-get install python3-sklearn, or --synthetic)"
head -c 3000 "$TRAIN_MLP_DIGITS" >"$tmp/cut.csv.gz"
expect_error "$tmp/cut.csv.gz" "$tmp/cut.csv.gz: unexpected end of file"
{ gzip -dc "$TRAIN_MLP_DIGITS" | head -n 2 && echo "0,0,17,0"; } | gzip >"$tmp/pixel.csv.gz"
expect_error "$tmp/pixel.csv.gz" "$tmp/pixel.csv.gz:3: field 3: expected a pixel value from 0 to 16"
gzip -dc "$TRAIN_MLP_DIGITS" | sed '5s/,[0-9]$/,10/' | gzip >"$tmp/label.csv.gz"
expect_error "$tmp/label.csv.gz" "$tmp/label.csv.gz:5: field 65: expected a label from 0 to 9"
printf '1,2,3\n' >"$tmp/short.csv"
expect_error "$tmp/short.csv" "$tmp/short.csv:1: after field 3: expected ',' (65 fields a line)"
echo "ok: a missing, truncated or malformed digits file: exit 1 and the file, line and field named"

out=$(BUILD_DIR=$HVD_BUILDDIR "$HVD_SRCDIR/scripts/demo.sh" --no-setup -np 0 2>&1) && fail "demo -np 0 succeeded"
[ "$out" = "demo: -np '0': expected a number of ranks from 1" ] || fail "demo -np 0: wrong message" "$out"
echo "ok: demo -np 0: $out"
