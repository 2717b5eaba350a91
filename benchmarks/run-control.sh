#!/bin/bash
# run-control.sh — control-plane benchmark: synthetic ranks (no data
# movement, benchmarks/bench_control) negotiate a model's gradients through
# one or more hvd-coordinatord (one per emulated node), cold (names seen for
# the first time) and in the steady state (cached ids); a table against the
# targets (1,024 ranks on 64 nodes: cold < 5 ms, steady < 1 ms). The
# projection columns are what bounds a real cluster's latency, where every
# daemon has its own machine and every rank its own process: the root
# daemon's CPU per step and the most any other daemon used (cold and
# steady).
#
#   benchmarks/run-control.sh [BUILDDIR]       (after `make bench`)
# Environment: CONFIGS="2:1 16:1 16:8 128:1 128:8 128:64 1024:1 1024:8 1024:64"
# (ranks:nodes), ROUNDS=3, STEPS=50, MODEL=resnet50, DATA=<dir of the tsv files>,
# BEFORE=<another build tree> (an older version: each round runs it, then
# BUILDDIR, and a table is printed for each), RELAYS="0 8" (the daemons'
# --relay-fanout: each round runs every config with each, a table each;
# unset: the daemons' default, 8), BOARD="on off" (each node's ranks post
# their steady state on a shared-memory board that speaks once for the
# host, as libhvd does, or each rank sends its own readiness: --no-board,
# HVD_FAST_PATH=0; a table each; unset: on), COLD_STEPS=1 (cold steps per
# run, each with new names: their median), BATCHES="1 8" (the Readys a rank
# cuts a cold step's requests into, differently on neighbouring ranks, as
# clients batch them: a table each; unset: 1). Every build runs under this
# build's bench_control (the same synthetic ranks), with its own daemon.
set -u
build=${1:-$(pwd)}
build=$(cd "$build" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
CONFIGS=${CONFIGS:-"2:1 16:1 16:8 128:1 128:8 128:64 1024:1 1024:8 1024:64"}
ROUNDS=${ROUNDS:-3} STEPS=${STEPS:-50} MODEL=${MODEL:-resnet50}
PY=${PYTHON:-/usr/bin/python3}
if [ -z "${DATA:-}" ]; then
        for d in "$src/../shared/data" /work/shared/data; do [ -f "$d/$MODEL.tsv" ] && DATA=$d && break; done
fi
[ -f "${DATA:-}/$MODEL.tsv" ] || { echo "run-control: set DATA to the directory of $MODEL.tsv" >&2; exit 2; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
builds=("$build")
if [ -n "${BEFORE:-}" ]; then
        BEFORE=$(cd "$BEFORE" && pwd)
        builds=("$BEFORE" "$build")
fi
for ((round = 0; round < ROUNDS; round++)); do
        for b in "${builds[@]}"; do
                tag=after
                [ "$b" = "${BEFORE:-}" ] && tag=before
                [ ${#builds[@]} -eq 1 ] && tag=this
                for c in $CONFIGS; do
                        for rf in ${RELAYS:--}; do
                                for bd in ${BOARD:--}; do
                                        for cb in ${BATCHES:--}; do
                                        rargs=(--cold-steps "${COLD_STEPS:-1}") rtag=
                                        [ "$rf" != - ] && rargs+=(--relay-fanout "$rf") rtag+=" relay=$rf"
                                        [ "$bd" = off ] && rargs+=(--no-board)
                                        [ "$bd" != - ] && rtag+=" board=$bd"
                                        [ "$cb" != - ] && rargs+=(--cold-batches "$cb") rtag+=" batches=$cb"
                                        timeout 900 "$build/benchmarks/bench_control" --daemon "$b/daemon/hvd-coordinatord" \
                                                --model "$DATA/$MODEL.tsv" --ranks "${c%%:*}" --nodes "${c##*:}" \
                                                --steps "$STEPS" "${rargs[@]}" | sed "s/\$/ build=$tag$rtag/" >>"$out"
                                        [ "${PIPESTATUS[0]}" -eq 0 ] ||
                                                echo "run-control: ${c%%:*} ranks on ${c##*:} nodes failed ($tag$rtag)" >&2
                                        done
                                done
                        done
                done
        done
done
echo "# raw lines"
sed 's/^/#   /' "$out"
"$PY" - "$out" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    m = dict(re.findall(r"(\w+)=(\S+)", line))
    if m.get("bench") != "control":
        continue
    b = m.get("build", "this") + (f", relay fanout {m['relay']}" if "relay" in m else "") + \
        (f", board {m['board']}" if "board" in m else "") + \
        (f", cold step in {m['batches']} batches a rank" if "batches" in m else "") + \
        (f", first-step hold {m['hold']}" if "hold" in m else "")
    r = rows.setdefault((b, int(m["ranks"]), int(m["nodes"])), {"cold": [], "steady": [], "drv": [], "dmn": [], "root": [], "node": [],
                                                              "croot": [], "cnode": [], "nroot": [], "ncroot": [], "t": m["tensors"]})
    r[m["phase"]].append(float(m["ms_median"]))
    if m["phase"] == "steady":
        r["drv"].append(float(m["driver_cpu_ms"]))
        r["dmn"].append(float(m["daemons_cpu_ms"]))
        r["root"].append(float(m.get("root_cpu_ms", "nan")))
        r["node"].append(float(m.get("node_cpu_ms", "nan")))
        r["nroot"].append(float(m.get("root_net_cpu_ms", "nan")))
    else:
        r["croot"].append(float(m.get("root_cpu_ms", "nan")))
        r["cnode"].append(float(m.get("node_cpu_ms", "nan")))
        r["ncroot"].append(float(m.get("root_net_cpu_ms", "nan")))
med = lambda v: statistics.median(v) if v else float("nan")
print("# control plane: one step of tensors negotiated by every rank; medians of the rounds")
print("# targets (1024 ranks, 64 nodes): cold < 5 ms, steady < 1 ms; CPU ms per steady step: synthetic driver / all daemons / root daemon")
print("# projection (a real cluster: a machine per daemon): CPU ms of the root daemon and of the busiest other daemon, cold step / steady step;")
print("# net_*: the root's, less what it spends idle (heartbeats, housekeeping) for as long as the step lasts here")
print(f"{'ranks':>6} {'nodes':>6} {'tensors':>7} {'cold_ms':>9} {'steady_ms':>10} {'tensors/s':>10} {'drv_cpu':>8} {'dmn_cpu':>8} {'root_cpu':>8} {'cold/target':>11} {'steady/target':>13} {'proj_cold_root':>14} {'proj_cold_node':>14} {'proj_root':>9} {'proj_node':>9} {'net_cold_root':>13} {'net_root':>8}")
order = {"before": 0, "after": 1, "this": 2}
last = None
for (b, n, k), r in sorted(rows.items(), key=lambda kv: (order.get(kv[0][0].split(",")[0], 3), kv[0][0], kv[0][1], kv[0][2])):
    if b != "this" and b != last:
        print(f"# {b}")
        last = b
    c, s = med(r["cold"]), med(r["steady"])
    print(f"{n:>6} {k:>6} {r['t']:>7} {c:9.2f} {s:10.3f} {int(r['t']) / s * 1e3:10.0f} {med(r['drv']):8.2f} {med(r['dmn']):8.2f} {med(r['root']):8.2f} {c / 5:10.1f}x {s / 1:12.1f}x "
          f"{med(r['croot']):14.2f} {med(r['cnode']):14.2f} {med(r['root']):9.2f} {med(r['node']):9.2f} "
          f"{med(r['ncroot']):13.2f} {med(r['nroot']):8.2f}")
PY
