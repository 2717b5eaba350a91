#!/bin/bash
# test-elastic-tune.sh — the autotuner of an elastic job goes on across a
# reset: 4 ranks on 2 emulated hosts with HVD_AUTOTUNE=1 take samples
# (settling, with 1 step a sample, before the kill), rank 1 is killed, and
# generation 2 (3 ranks) goes on in the tuner's state (settled stays
# settled on its values) from the values in force, which every rank has
# from generation 2's first schedule (hvd_tuning_get); the CSV goes on: one
# header, samples numbered without a gap across both generations, the
# elastic_generation column 1 then 2.
. "${HVD_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/elastic/lib.sh"

csv=$tmp/tune.csv
ELASTIC_EPOCHS=3 ELASTIC_TUNE=1 ELASTIC_EXIT=1:1:2:1:kill9 run tune -np 4 -H a:2,b:2 --min-np 2 --max-np 4 \
        --autotune --autotune-log-file "$csv" --autotune-warmup-samples 1 --autotune-steps-per-sample 1 \
        --autotune-bayes-opt-max-samples 3
[ "$rc" -eq 0 ] || fail "autotuned elastic run with rank 1 killed: exit status $rc"
check_generation 2 3 "a b b"
check_results 3
grep 'TUNE ' "$tmp/out" | sed 's/^/  /'
"$PYTHON" - "$csv" "$tmp/out" <<'PY' || fail "the tuner did not go on across the reset: $(cat "$csv")"
import re, sys
lines = open(sys.argv[1]).read().splitlines()
header = lines[0].split(",")
assert "elastic_generation" in header, "header: %r" % lines[0]
assert lines.count(lines[0]) == 1, "the header is written again"
rows = [dict(zip(header, l.split(","))) for l in lines[1:]]
assert all(len(l.split(",")) == len(header) for l in lines[1:]), "a row of the wrong width"
assert [int(r["sample"]) for r in rows] == list(range(1, len(rows) + 1)), "samples not numbered 1..N across generations"
gens = [int(r["elastic_generation"]) for r in rows]
assert gens == sorted(gens) and set(gens) == {1, 2}, "elastic generations of the rows: %s" % gens
g1 = [r for r in rows if r["elastic_generation"] == "1"]
g2 = [r for r in rows if r["elastic_generation"] == "2"]
assert g1[-1]["state"] != "warmup", "generation 1 never left warm-up before the kill"
assert g2[0]["state"] != "warmup", "generation 2 started the tuner again: %s" % g2[0]
if g1[-1]["state"] == "settled":
    assert g2[0]["state"] == "settled", "generation 2 did not stay settled"
    assert (g2[0]["tensor_fusion_threshold"], g2[0]["cycle_time_ms"]) == \
        (g1[-1]["tensor_fusion_threshold"], g1[-1]["cycle_time_ms"]), "generation 2 left the settled values"
# the carried values are one change at generation 2's first schedule, on every rank
assert int(g2[0]["generation"]) > int(g1[-1]["generation"]), "no change carried the values into generation 2"
tunes = [dict(kv.split("=") for kv in m.split()) for m in re.findall(r"TUNE (.*)", open(sys.argv[2]).read())]
starts = {}
for t in tunes:
    if t["gen"] == "2":
        starts.setdefault(t["rank"], t)
assert sorted(starts) == ["0", "1", "2"], "generation 2's ranks that reported: %s" % sorted(starts)
for t in starts.values():
    assert t["seq"] == "1", "rank %s: the values did not apply at generation 2's first schedule: %s" % (t["rank"], t)
    assert abs(int(t["threshold"]) / 1048576 - float(g2[0]["tensor_fusion_threshold"])) < 1e-4, "rank %s: threshold" % t["rank"]
    assert abs(int(t["cycle"]) / 1000 - float(g2[0]["cycle_time_ms"])) < 1e-3, "rank %s: cycle time" % t["rank"]
assert len({(u["change"], u["threshold"], u["cycle"]) for u in starts.values()}) == 1, "ranks differ: %s" % starts
best = (g2[0]["tensor_fusion_threshold"], g2[0]["cycle_time_ms"])
print("# %d samples, %d in generation 2 (from sample %s, %s); it starts at %s MiB, %s ms" % (len(rows), len(g2), g2[0]["sample"], g2[0]["state"], best[0], best[1]))
PY
ok "an autotuned elastic job loses rank 1: generation 2 goes on in the tuner's state, from its values on every rank; the CSV goes on"
