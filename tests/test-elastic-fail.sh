#!/bin/bash
# test-elastic-fail.sh — elastic jobs on emulated hosts that lose ranks: a
# kill -9 of one rank of 4 (the survivors keep their order, the state comes
# from the last commit, and the training ends where an uninterrupted run
# over the same samples does). A job that is not elastic still aborts
# (test-kill-worker.sh, test-faults.sh); test-elastic-host.sh loses a
# host and a rank during the state sync.
. "${HVD_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/elastic/lib.sh"

run reference -np 4 -H a:2,b:2 --min-np 2 --max-np 4
[ "$rc" -eq 0 ] || fail "uninterrupted run: exit status $rc"
check_generation 1 4 "a a b b"
check_results 4
reference=$weights
ok "uninterrupted elastic run of 4 ranks: weights $reference"

ELASTIC_EXIT=1:1:3:1:kill9 run kill9 -np 4 -H a:2,b:2 --min-np 2 --max-np 4
[ "$rc" -eq 0 ] || fail "kill -9 of rank 1: exit status $rc"
check_generation 2 3 "a b b"
# the survivors keep their order: ranks 0, 2, 3 are now 0, 1, 2
for old_new in 0:0 2:1 3:2; do
        pid=$(gen_lines 1 | grep " rank=${old_new%:*} " | field pid)
        [ "$(gen_lines 2 | grep " pid=$pid " | field rank)" = "${old_new#*:}" ] ||
                fail "rank ${old_new%:*} (pid $pid) is not rank ${old_new#*:} of generation 2"
done
[ "$(gen_lines 2 | field sync | sort -u)" = 1 ] || fail "generation 2 does not sync on every rank"
# each survivor listens on the same one data-plane port in both generations
for r in 0 2 3; do
        pid=$(gen_lines 1 | grep " rank=$r " | field pid)
        l1=$(gen_lines 1 | grep " pid=$pid " | field listen) l2=$(gen_lines 2 | grep " pid=$pid " | field listen)
        case $l1 in '' | - | *,*) fail "rank $r (pid $pid) of generation 1 listens on '$l1', not one port" ;; esac
        [ "$l2" = "$l1" ] || fail "rank $r (pid $pid) listens on '$l2' in generation 2, on '$l1' in generation 1"
done
check_results 3
grep -q 'RESULT .*resets=1' "$tmp/out" || fail "the survivors did not reset once"
"$PYTHON" - "$weights" "$reference" <<'PY' || fail "weights $weights differ from the uninterrupted run's $reference"
import sys
a, b = ([float(v) for v in s.split(",")] for s in sys.argv[1:3])
sys.exit(0 if max(abs(x - y) for x, y in zip(a, b)) < 1e-3 else 1)
PY
ok "kill -9 of rank 1 of 4: generation 2 of 3 ranks, order kept, every sample once, weights as uninterrupted"
