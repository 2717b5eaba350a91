#!/bin/bash
# test-elastic-tf.sh — hvd.tensorflow.elastic on emulated hosts
# (tests/elastic/train_tf.py: a Keras model and its SGD-with-momentum
# optimizer in a KerasState, a custom loop): after a kill -9 of rank 1 of
# 4 (before a step, and after a step's update, before its commit), the 3
# survivors go on from the last commit and end with the same weights on
# every rank as an uninterrupted run. With the Python configure
# used for TensorFlow (else scripts/venv-tf.sh's); skipped (77) without
# the op library or a Python with TensorFlow.
B=${HVD_BUILDDIR:?HVD_BUILDDIR must point at the build tree}
S=${HVD_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
# shellcheck source=tests/elastic/tf_python.sh
. "$S/tests/elastic/tf_python.sh"
ELASTIC_TRAIN=train_tf.py ELASTIC_NEEDS=tensorflow
export TF_CPP_MIN_LOG_LEVEL=3
. "$S/tests/elastic/lib.sh"

# check_tf_results N: N ranks finished with the same weights; $weights
check_tf_results() {
        res=$(grep -o 'RESULT .*' "$tmp/out")
        [ "$(echo "$res" | grep -c .)" -eq "$1" ] || fail "$(echo "$res" | grep -c .) ranks finished, expected $1"
        [ "$(echo "$res" | field weights | sort -u | wc -l)" -eq 1 ] || fail "ranks ended with different weights: $res"
        weights=$(echo "$res" | field weights | head -n 1)
}

run reference -np 4 -H a:2,b:2 --min-np 2 --max-np 4
[ "$rc" -eq 0 ] || fail "uninterrupted run: exit status $rc"
[ "$(gen_lines 1 | grep -c .)" -eq 4 ] || fail "generation 1 does not have 4 ranks"
check_tf_results 4
reference=$weights
ok "uninterrupted elastic TensorFlow run of 4 ranks: weights $reference"

ELASTIC_EXIT=1:1:3:1:kill9 run kill9 -np 4 -H a:2,b:2 --min-np 2 --max-np 4
[ "$rc" -eq 0 ] || fail "kill -9 of rank 1: exit status $rc"
lines=$(gen_lines 2)
[ "$(echo "$lines" | grep -c .)" -eq 3 ] || fail "generation 2: $(echo "$lines" | grep -c .) ranks, expected 3"
[ "$(echo "$lines" | field size | sort -u)" = 3 ] || fail "generation 2 is not of size 3: $lines"
[ "$(echo "$lines" | field sync | sort -u)" = 1 ] || fail "generation 2 does not sync on every rank"
check_tf_results 3
grep -q 'RESULT .*resets=1' "$tmp/out" || fail "the survivors did not reset once"
"$PYTHON" - "$weights" "$reference" <<'PY' || fail "weights $weights differ from the uninterrupted run's $reference"
import sys
a, b = ([float(v) for v in s.split(",")] for s in sys.argv[1:3])
sys.exit(0 if max(abs(x - y) for x, y in zip(a, b)) < 1e-4 else 1)
PY
ok "kill -9 of rank 1 of 4: 3 ranks go on from the last commit, weights as uninterrupted"

# killed after the step's update: the survivors have applied it too and
# fail in the loss's allreduce; without restoring the model and the
# optimizer (momentum) to the commit they would apply that step twice
ELASTIC_EXIT=1:0:5:2:kill9-after run kill9-after -np 4 -H a:2,b:2 --min-np 2 --max-np 4
[ "$rc" -eq 0 ] || fail "kill -9 of rank 2 after its update: exit status $rc"
[ "$(gen_lines 2 | field size | sort -u)" = 3 ] || fail "generation 2 is not of size 3"
check_tf_results 3
grep -q 'RESULT .*resets=1' "$tmp/out" || fail "the survivors did not reset once"
"$PYTHON" - "$weights" "$reference" <<'PY' || fail "weights $weights differ from the uninterrupted run's $reference"
import sys
a, b = ([float(v) for v in s.split(",")] for s in sys.argv[1:3])
sys.exit(0 if max(abs(x - y) for x, y in zip(a, b)) < 1e-4 else 1)
PY
ok "kill -9 of rank 2 of 4 after its update: the survivors restore the commit, weights as uninterrupted"
