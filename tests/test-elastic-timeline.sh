#!/bin/bash
# test-elastic-timeline.sh — the timeline of an elastic job marks its
# resets: kill -9 of rank 1 of 4 with --timeline-filename; rank 0, a
# survivor, goes on with the same file in generation 2, which is strict
# JSON at the end and holds an ELASTIC_RESET span and a global
# "GENERATION 2" instant (generation, sizes, who left and why) between the
# operations of generation 1 and those of generation 2.
. "${HVD_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/elastic/lib.sh"

ELASTIC_EXIT=1:1:3:1:kill9 run timeline -np 4 -H a:2,b:2 --min-np 2 --max-np 4 --timeline-filename "$tmp/tl.json"
[ "$rc" -eq 0 ] || fail "kill -9 of rank 1 with a timeline: exit status $rc"
check_generation 2 3 "a b b"
check_results 3
"$PYTHON" - "$tmp/tl.json" <<'PY' || fail "the timeline does not mark the reset: $(tail -c 2000 "$tmp/tl.json")"
import json
import sys

events = json.load(open(sys.argv[1]))  # strict JSON: the file was continued, then closed
resets = [e for e in events if e.get("name") == "ELASTIC_RESET"]
marks = [e for e in events if e.get("name") == "GENERATION 2"]
assert len(resets) == 1 and len(marks) == 1, f"{len(resets)} ELASTIC_RESET and {len(marks)} GENERATION 2 events"
r, m = resets[0], marks[0]
assert r["ph"] == "X" and r["pid"] == 0 and r["dur"] >= 0, r
assert m["ph"] == "i" and m["s"] == "g" and m["ts"] == r["ts"] + r["dur"], m
a = r["args"]
assert a == m["args"], (a, m["args"])
assert (a["generation"], a["size"], a["previous_size"], a["left"], a["joined"], a["sync"]) == (2, 3, 4, 1, 0, True), a
assert a["left_names"] == "rank 1 on a (lost)", a["left_names"]
assert "rank 1" in a["cause"], a["cause"]
ops = [e["ts"] for e in events if e.get("name") == "ALLREDUCE" and e.get("ph") == "B"]
before = sum(t < r["ts"] for t in ops)
after = sum(t > m["ts"] for t in ops)
assert before > 0 and after > 0, f"{before} allreduces before the reset, {after} after"
# one row per tensor: generation 2 goes on with generation 1's rows
names = [e["args"]["name"] for e in events if e.get("name") == "process_name"]
assert len(names) == len(set(names)), f"rows named twice: {names}"
print(f"# reset drawn: {r['dur'] / 1e3:.0f} ms, cause: {a['cause']}; {before} allreduces before it, {after} after")
PY
ok "kill -9 of rank 1: rank 0's timeline goes on in generation 2 and marks the reset (ELASTIC_RESET, GENERATION 2)"
