#!/bin/bash
# test-elastic-keras-fit.sh — Keras 3 model.fit under real elastic resets
# on emulated hosts (tests/elastic/fit_keras.py: hvd.keras, a
# DistributedOptimizer, @hvd.elastic.run around model.fit with
# UpdateEpochStateCallback, UpdateBatchStateCallback and
# CommitStateCallback every 2 batches, fit(initial_epoch=state.epoch)):
# after a kill -9 of rank 1 of 4 mid-epoch, the 3 survivors' fit resumes
# at the committed epoch and batch, finishes every epoch and ends with the
# weights of an uninterrupted run on every rank; a host added by the
# discovery script mid-fit joins with the state. With the Python
# configure used for TensorFlow (else scripts/venv-tf.sh's); skipped (77)
# without the op library or a Python with TensorFlow.
B=${HVD_BUILDDIR:?HVD_BUILDDIR must point at the build tree}
S=${HVD_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
TF_IMPORTS="tensorflow, keras, numpy"
# shellcheck source=tests/elastic/tf_python.sh
. "$S/tests/elastic/tf_python.sh"
ELASTIC_TRAIN=fit_keras.py ELASTIC_NEEDS=keras
export TF_CPP_MIN_LOG_LEVEL=3 KERAS_BACKEND=tensorflow
. "$S/tests/elastic/lib.sh"
# 3 epochs of 8 batches
export ELASTIC_EPOCHS=3

# check_fit N: N ranks finished with the same weights; $weights, $res
check_fit() {
        res=$(grep -o 'RESULT .*' "$tmp/out")
        [ "$(echo "$res" | grep -c .)" -eq "$1" ] || fail "$(echo "$res" | grep -c .) ranks finished, expected $1"
        [ "$(echo "$res" | field weights | sort -u | wc -l)" -eq 1 ] || fail "ranks ended with different weights: $res"
        weights=$(echo "$res" | field weights | head -n 1)
}
# same_weights: $weights are the uninterrupted run's
same_weights() {
        "$PYTHON" - "$weights" "$reference" <<'PY' || fail "weights $weights differ from the uninterrupted run's $reference"
import sys
a, b = ([float(v) for v in s.split(",")] for s in sys.argv[1:3])
sys.exit(0 if max(abs(x - y) for x, y in zip(a, b)) < 1e-4 else 1)
PY
}

run reference -np 4 -H a:2,b:2 --min-np 2 --max-np 4
[ "$rc" -eq 0 ] || fail "uninterrupted run: exit status $rc"
check_generation 1 4 "a a b b"
check_fit 4
[ "$(echo "$res" | field batches | sort -u)" = 24 ] || fail "the uninterrupted fit did not run 3 epochs of 8 batches: $res"
[ "$(echo "$res" | field resets | sort -u)" = 0 ] || fail "the uninterrupted run reset: $res"
reference=$weights
ok "uninterrupted model.fit of 4 ranks, 24 batches: weights $reference"

# rank 1 dies before the 6th batch of epoch 1; the last commit was after
# its 4th: the survivors redo that one batch only (8 + 5 + 4 + 8 = 25)
ELASTIC_EXIT=1:1:5:1:kill9 run kill9 -np 4 -H a:2,b:2 --min-np 2 --max-np 4
[ "$rc" -eq 0 ] || fail "kill -9 of rank 1 mid-fit: exit status $rc"
check_generation 2 3 "a b b"
lines=$(gen_lines 2)
[ "$(echo "$lines" | field sync | sort -u)" = 1 ] || fail "generation 2 does not sync on every rank"
[ "$(echo "$lines" | field epoch | sort -u)" = 1 ] || fail "generation 2 does not resume at the committed epoch 1: $lines"
[ "$(echo "$lines" | field batch | sort -u)" = 4 ] || fail "generation 2 does not resume at the committed batch 4: $lines"
[ -z "$(gen_lines 3)" ] || fail "more than one reset"
check_fit 3
[ "$(echo "$res" | field resets | sort -u)" = 1 ] || fail "the survivors did not reset once: $res"
[ "$(echo "$res" | field batches | sort -u)" = 25 ] || fail "the survivors did not run 25 batches (the committed batch on): $res"
same_weights
ok "kill -9 of rank 1 of 4 mid-epoch: fit resumes at epoch 1 batch 4 on 3 ranks, weights as uninterrupted"

# host b discovered once epoch 1 begins; at its 3rd batch the ranks commit
# until b's workers wait to join: they get the state and run the rest
disc="$S/tests/elastic/discover.sh $tmp/progress $tmp/schedule"
printf '0 0 a:2\n1 0 a:2,b:2\n' >"$tmp/schedule"
ELASTIC_WAIT=1:2:a+a+b+b run grow -np 2 -H a:2 --min-np 2 --max-np 4 --host-discovery-script "$disc"
[ "$rc" -eq 0 ] || fail "host b added mid-fit: exit status $rc"
check_generation 1 2 "a a"
last=$(grep -o 'ELASTIC gen=[0-9]*' "$tmp/out" | sort -t= -k2 -n | tail -n 1 | cut -d= -f2)
check_generation "$last" 4 "a a b b"
lines=$(gen_lines "$last")
[ "$(echo "$lines" | field sync | sort -u)" = 1 ] || fail "generation $last does not sync on every rank"
[ "$(echo "$lines" | field epoch | sort -u)" = 1 ] || fail "generation $last does not start at epoch 1: $lines"
[ "$(echo "$lines" | field batch | sort -u)" = 2 ] || fail "generation $last does not start at batch 2: $lines"
check_fit 4
# the first ranks run every batch once, b's the 6 + 8 from epoch 1 batch 2 on
[ "$(echo "$res" | grep ' rank=[01] ' | field batches | sort -u)" = 24 ] || fail "ranks 0 and 1 did not run 24 batches: $res"
[ "$(echo "$res" | grep ' rank=[23] ' | field batches | sort -u)" = 14 ] || fail "b's ranks did not run 14 batches: $res"
same_weights
ok "host b added mid-fit: generation $last of 4 ranks from epoch 1 batch 2, weights as uninterrupted"
