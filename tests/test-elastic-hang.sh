#!/bin/bash
# test-elastic-hang.sh — a hung worker in an elastic job (SIGSTOP of one
# rank of 4, its background thread and all): its daemon declares it lost
# after --heartbeat-timeout 2 s without a heartbeat, the survivors get
# HorovodInternalError (a reset) while it is still stopped and go on as
# generation 2 of 3 ranks; resumed 12 s later, the worker finds itself left
# out, enrols again and joins generation 3, and the training ends with the
# same weights on all 4 ranks.
. "${HVD_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/elastic/lib.sh"

ELASTIC_EXIT=1:0:2:1:stop ELASTIC_STOP_SEC=12 ELASTIC_WAIT=1:4:a+a+b+b run hang -np 4 -H a:2,b:2 --min-np 2 --max-np 4 \
        --heartbeat-timeout 2
[ "$rc" -eq 0 ] || fail "a stopped rank: exit status $rc"
check_generation 1 4 "a a b b"
check_generation 2 3 "a b b"
victim=$(gen_lines 1 | grep " rank=1 " | field pid)
! gen_lines 2 | grep -q " pid=$victim " || fail "the stopped rank (pid $victim) is in generation 2"
{ [ -s "$tmp/progress.stopped" ] && [ -s "$tmp/progress.resumed" ]; } || fail "rank 1 was not stopped and resumed"
stopped=$(cat "$tmp/progress.stopped")
resumed=$(cat "$tmp/progress.resumed")
reset=$(gen_lines 2 | grep " rank=0 " | field t)
# the survivors went on while rank 1 was still stopped: the heartbeat timeout, not its return
"$PYTHON" - "$stopped" "$reset" "$resumed" <<'PY' || fail "generation 2 started only after rank 1 was resumed"
import sys
stopped, reset, resumed = (float(v) for v in sys.argv[1:])
print(f"# rank 1 stopped; generation 2 started {(reset - stopped) * 1e3:.0f} ms later, "
      f"{(resumed - reset) * 1e3:.0f} ms before rank 1 was resumed")
sys.exit(0 if stopped < reset < resumed else 1)
PY
last=$(grep -o 'ELASTIC gen=[0-9]*' "$tmp/out" | sort -t= -k2 -n | tail -n 1 | cut -d= -f2)
[ "$last" -ge 3 ] || fail "the resumed rank did not join again (last generation $last)"
check_generation "$last" 4 "a a b b"
gen_lines "$last" | grep -q " pid=$victim " || fail "the resumed rank (pid $victim) is not in generation $last"
check_results 4
ok "rank 1 stopped (SIGSTOP): generation 2 of 3 ranks while it was stopped, back in generation $last after SIGCONT"
