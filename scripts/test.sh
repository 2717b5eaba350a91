#!/bin/sh
# test.sh — set up, build and run the whole test suite (make check), then
# print one summary line "N passed, N failed, N skipped".
# Extra arguments go to configure (e.g. --enable-sanitizers).
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/setup.sh" || exit 1
"$top/scripts/build.sh" "$@" || exit 1
cd "$top/build"
make -s -j2 check >check.out 2>&1
status=$?
cat check.out | grep -E '^(PASS|FAIL|XFAIL|XPASS|SKIP|ERROR):' || true
if [ $status -ne 0 ]; then
        for log in $(grep -lE '^:test-result: (FAIL|ERROR|XPASS)' $(find . -name '*.trs') 2>/dev/null); do
                echo "===== ${log%.trs}.log"
                tail -n 60 "${log%.trs}.log"
        done
fi
count() { sed -n "s/^# $1: *//p" test-suite.log 2>/dev/null | head -n 1; }
pass=$(count PASS); fail=$(count FAIL); xfail=$(count XFAIL); xpass=$(count XPASS); skip=$(count SKIP); err=$(count ERROR)
pass=${pass:-0}; skip=$(( ${skip:-0} + ${xfail:-0} )); fail=$(( ${fail:-0} + ${xpass:-0} + ${err:-0} ))
[ $status -ne 0 ] && [ $fail -eq 0 ] && fail=1
echo "${pass} passed, ${fail} failed, ${skip:-0} skipped"
exit $status
