#!/usr/bin/python3
"""timeline_check.py — checks an hvd timeline (Chrome trace-event JSON).

  timeline_check.py FILE --ranks N [--expect NAME:COUNT ...] [--absent PREFIX ...]
                    [--cycles] [--fused] [--max-negotiations NAME:COUNT]

The file must be strict JSON (json.load). Per tensor row (pid named by a
process_name event): timestamps never go backwards in file order; B and E
nest and balance; every negotiation phase NEGOTIATE_<KIND> holds exactly one
instant mark per rank (names "0".."N-1") inside it and is followed by the
operation phase <KIND>, starting no earlier than the negotiation ended; an
allreduce holds MEMCPY_IN_FUSION_BUFFER, SHM_ALLREDUCE and
MEMCPY_OUT_FUSION_BUFFER in that order. --expect: tensor NAME was
negotiated and executed at least COUNT times. --absent: no tensor's name
starts with PREFIX. --activity NAME: some phase NAME occurs. --cycles: CYCLE_START markers are present. --fused: some
operation carried more than one tensor. Prints a summary; exit 1 on the
first violation."""
import argparse
import json
import re
import sys


def fail(msg):
    print("timeline_check: " + msg, file=sys.stderr)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--expect", action="append", default=[])
    ap.add_argument("--absent", action="append", default=[])
    ap.add_argument("--max-negotiations", action="append", default=[])
    ap.add_argument("--cycles", action="store_true")
    ap.add_argument("--fused", action="store_true")
    ap.add_argument("--activity", action="append", default=[], help="an activity that must occur")
    a = ap.parse_args()

    with open(a.file) as f:
        try:
            events = json.load(f)
        except ValueError as e:
            fail("%s is not valid JSON: %s" % (a.file, e))
    if not isinstance(events, list):
        fail("not a JSON array of events")

    names = {}
    rows = {}
    cycles = 0
    for e in events:
        for k in ("ph", "pid"):
            if k not in e:
                fail("event without %r: %r" % (k, e))
        if e["ph"] == "M":
            if e.get("name") == "process_name":
                names[e["pid"]] = e["args"]["name"]
            continue
        if e["ph"] == "i" and e.get("name") == "CYCLE_START":
            if e.get("s") != "g" or not isinstance(e.get("ts"), int):
                fail("bad cycle marker %r" % e)
            cycles += 1
            continue
        if e["pid"] == 0:
            fail("unexpected event in the hvd row: %r" % e)
        rows.setdefault(e["pid"], []).append(e)

    activities = set()
    done = {}      # tensor name -> completed (negotiation, op) pairs
    fused = 0
    for pid, evs in rows.items():
        name = names.get(pid)
        if name is None:
            fail("row %d has no process_name" % pid)
        last = None
        stack = []   # open B events: [event, children, marks]
        pending_neg = None
        count = 0
        for e in evs:
            ts = e.get("ts")
            if not isinstance(ts, int):
                fail("%s: event without an integer ts: %r" % (name, e))
            if last is not None and ts < last:
                fail("%s: time goes backwards (%d after %d): %r" % (name, ts, last, e))
            last = ts
            if e["ph"] == "B":
                activities.add(e["name"])
                if stack:
                    stack[-1][1].append(e["name"])
                if not stack and not e["name"].startswith("NEGOTIATE_"):
                    if pending_neg is None:
                        fail("%s: operation %s without a negotiation before it" % (name, e["name"]))
                    if "NEGOTIATE_" + e["name"] != pending_neg[0]:
                        fail("%s: %s negotiated, %s executed" % (name, pending_neg[0], e["name"]))
                    if ts < pending_neg[1]:
                        fail("%s: operation starts (%d) before its negotiation ended (%d)" %
                             (name, ts, pending_neg[1]))
                elif not stack and pending_neg is not None:
                    fail("%s: negotiated twice without an operation in between" % name)
                stack.append([e, [], []])
            elif e["ph"] == "E":
                if not stack:
                    fail("%s: E without B at ts %d" % (name, ts))
                b, children, marks = stack.pop()
                if b["name"].startswith("NEGOTIATE_"):
                    ranks = sorted(int(m["name"]) for m in marks)
                    if ranks != list(range(a.ranks)):
                        fail("%s: negotiation at %d has marks for ranks %r, expected 0..%d" %
                             (name, b["ts"], ranks, a.ranks - 1))
                    for m in marks:
                        if not b["ts"] <= m["ts"] <= ts:
                            fail("%s: mark of rank %s outside its negotiation" % (name, m["name"]))
                    pending_neg = (b["name"], ts)
                elif not stack:
                    kind = b["name"]
                    if kind == "ALLREDUCE":
                        # per chunk: copy in, the collective (in shared memory,
                        # and across nodes over TCP), copy out
                        code = {"MEMCPY_IN_FUSION_BUFFER": "I", "SHM_ALLREDUCE": "S",
                                "TCP_RING_ALLREDUCE": "T", "MEMCPY_OUT_FUSION_BUFFER": "O"}
                        seq = "".join(code.get(c, "?") for c in children)
                        if not re.fullmatch(r"(I[ST]+O)+", seq):
                            fail("%s: allreduce phases %r, expected MEMCPY_IN_FUSION_BUFFER, SHM_ALLREDUCE "
                                 "(and TCP_RING_ALLREDUCE), MEMCPY_OUT_FUSION_BUFFER per chunk" % (name, children))
                    elif not children:
                        fail("%s: %s has no activity inside" % (name, kind))
                    if b.get("args", {}).get("tensors", 1) > 1:
                        fused += 1
                    pending_neg = None
                    count += 1
            elif e["ph"] == "i":
                if not stack or not stack[-1][0]["name"].startswith("NEGOTIATE_"):
                    fail("%s: rank mark outside a negotiation: %r" % (name, e))
                stack[-1][2].append(e)
            else:
                fail("%s: unexpected event type %r" % (name, e["ph"]))
        if stack:
            fail("%s: %d phases never end (%s)" % (name, len(stack), stack[-1][0]["name"]))
        done[name] = count

    for x in a.expect:
        n, c = x.rsplit(":", 1)
        if done.get(n, 0) < int(c):
            fail("tensor %s executed %d times, expected at least %s (rows: %s)" %
                 (n, done.get(n, 0), c, sorted(done)))
    for x in a.max_negotiations:
        n, c = x.rsplit(":", 1)
        if done.get(n, 0) > int(c):
            fail("tensor %s appears %d times, at most %s expected" % (n, done.get(n, 0), c))
    for p in a.absent:
        bad = [n for n in done if n.startswith(p)]
        if bad:
            fail("tensors %r should not be in the timeline" % bad)
    if a.cycles and cycles == 0:
        fail("no CYCLE_START markers")
    if not a.cycles and cycles:
        fail("%d CYCLE_START markers without mark_cycles" % cycles)
    for x in a.activity:
        if x not in activities:
            fail("no %s in the timeline (there are %s)" % (x, sorted(activities)))
    if a.fused and not fused:
        fail("no operation carried more than one tensor")
    print("timeline_check: %s: %d events, %d tensors, %d fused op rows, %d cycle markers: ok" %
          (a.file, len(events), len(done), fused, cycles))
    for n in sorted(done):
        print("  %s %d" % (n, done[n]))


if __name__ == "__main__":
    main()
