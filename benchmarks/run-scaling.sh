#!/bin/bash
# run-scaling.sh — scaling efficiency, the Horovod paper's measure: images/s
# of a synthetic-data training step at 1 rank and at N ranks on N emulated
# hosts, efficiency = rate(N) / (N x rate(1)), for hvd.torch beside Horovod
# 0.28.1 and DDP's communication (torch.distributed gloo, 25 MiB buckets)
# on the same emulated link, in the same run, alternating.
#
# The step (benchmarks/torch_peers.py --what scaling): ResNet-50's 161
# gradient tensors (97.5 MiB, shared/data/resnet50.tsv) with a compute
# model: FWD_MS of forward, then BWD_MS of backward spread evenly over the
# tensors in backward order, each gradient's average started as soon as it
# is "computed", all waited for at the end of the step. The compute is a
# sleep, not arithmetic: this machine has 2 cores, and N ranks that burned
# CPU for their compute would share them, measuring the cores, not the
# link; sleeping ranks emulate N independent accelerators. The
# communication's own CPU work (reduction, copies, the TCP stack) is real
# and N ranks share the 2 cores for it. rate(1) is the compute model alone
# (no communication), the same for every system: BATCH / (FWD_MS + BWD_MS).
# The defaults, 60 + 120 ms at batch 64 (356 images/s), are a ResNet-50
# training step on one accelerator of the paper's time.
#
# Hosts: HOSTS network namespaces (the most of NS), each with one veth to a
# bridge in a hub namespace (a switch), a tc tbf limit of RATE on both ends
# of every host's link (so each host sends and receives at most RATE), one
# hvd-coordinatord per host, one rank per host. Needs root.
#
#   benchmarks/run-scaling.sh [BUILDDIR]           (after make)
# Environment:
#   NS="2 4" RATES="1gbit 10gbit" ROUNDS=2 STEPS=3 REPS=2 BATCH=64 FWD_MS=60 BWD_MS=120
#   BURST=1mb (tbf bucket, as run-step.sh)  PEERS="hvd horovod torch" (and hvdb:
#   hvd again with the environment HVDB_ENV added, e.g.
#   HVDB_ENV="HVD_TCP_SEND_THREAD=0", for a same-run comparison of two settings)
#   PYTHON=/usr/bin/python3  HOROVOD_DIR (default: scripts/horovod.sh's)  DATA
#   RAW=FILE: run nothing; tabulate an earlier run's raw lines
#   WHAT=sweep: instead of the step, the allreduce sweep of torch_peers.py
#   (float32 sum from MIN=8 to MAX=1048576 bytes, in place, out of place,
#   unnamed and grouped, MIN_TIME=0.1 s of calls a repetition) on the same
#   hosts: a lone call across hosts, each system beside the others;
#   WHAT=colls: broadcast, allgather, reducescatter and alltoall likewise
set -u
build=${1:-$(pwd)}
build=$(cd "$build" && pwd) || exit 2
src=$(cd "$(dirname "$0")/.." && pwd)
NS=${NS:-"2 4"} RATES=${RATES:-"1gbit 10gbit"} ROUNDS=${ROUNDS:-2} STEPS=${STEPS:-3} REPS=${REPS:-2}
BATCH=${BATCH:-64} FWD_MS=${FWD_MS:-60} BWD_MS=${BWD_MS:-120} BURST=${BURST:-1mb}
PEERS=${PEERS:-"hvd horovod torch"} PY=${PYTHON:-/usr/bin/python3}
WHAT=${WHAT:-scaling} MIN=${MIN:-8} MAX=${MAX:-1048576} MIN_TIME=${MIN_TIME:-0.1}
die() { echo "run-scaling: $*" >&2; exit 2; }
case $WHAT in scaling | sweep | colls) ;; *) die "WHAT=$WHAT: scaling, sweep or colls" ;; esac
for v in MIN MAX; do
        case ${!v} in '' | *[!0-9]*) die "$v=${!v} is not a number of bytes" ;; esac
done
if [ "$MIN" -lt 4 ] || [ "$MAX" -lt "$MIN" ]; then die "MIN=$MIN MAX=$MAX: 4 <= MIN <= MAX bytes"; fi
for v in ROUNDS STEPS REPS BATCH; do
        case ${!v} in '' | *[!0-9]* | 0) die "$v=${!v} is not a positive integer" ;; esac
done
maxh=0
for n in $NS; do
        case $n in '' | *[!0-9]* | 0 | 1) die "NS: $n is not a number of hosts above 1" ;; esac
        [ "$n" -gt "$maxh" ] && maxh=$n
done
[ "$maxh" -le 16 ] || die "NS: at most 16 hosts"
for p in $PEERS; do
        case $p in hvd | hvdb | horovod | torch) ;; *) die "PEERS: unknown peer $p (hvd, hvdb, horovod, torch)" ;; esac
done
if [ -z "${DATA:-}" ]; then
        for d in "$src/../shared/data" /work/shared/data; do [ -f "$d/resnet50.tsv" ] && DATA=$d && break; done
fi
tsv=${DATA:-}/resnet50.tsv
out=$(mktemp)
work=$(mktemp -d /tmp/hvd-scaling-XXXXXX)
tag=$(($$ % 10000)) hub=hvdsc$$hub net=10.219.$(($$ % 250)).
pids=()
loud() { printf '\n!!!!!!!!!! run-scaling: %s !!!!!!!!!!\n\n' "$*" | tee -a "$out" >&2; }
# shellcheck source=benchmarks/peers.sh
. "$src/benchmarks/peers.sh"
cleanup() {
        for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
        for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
        if [ -z "${RAW:-}" ]; then
                for ((h = 0; h < maxh; h++)); do
                        ip netns del "hvdsc$$h$h" 2>/dev/null
                        rm -rf "/etc/netns/hvdsc$$h$h"
                done
                ip netns del "$hub" 2>/dev/null
        fi
        rm -rf "$out" "$work"
}
trap cleanup EXIT

# the star: hub namespace with bridge br0; host h in namespace hvdsc<pid>h<h>,
# veth hsh<tag>x<h> (10.219.X.<h+1>) <-> hsb<tag>x<h> on the bridge
star_setup() {
        ip netns add "$hub" || { echo "run-scaling: cannot create a network namespace (root is needed)" >&2; exit 1; }
        ip -n "$hub" link add br0 type bridge && ip -n "$hub" link set br0 up || exit 1
        local h ns va vb
        for ((h = 0; h < maxh; h++)); do
                ns=hvdsc$$h$h va=hsh${tag}x$h vb=hsb${tag}x$h
                ip netns add "$ns" && ip -n "$ns" link set lo up || exit 1
                ip link add "$va" type veth peer name "$vb" || exit 1
                ip link set "$va" netns "$ns" && ip link set "$vb" netns "$hub" || exit 1
                ip -n "$hub" link set "$vb" master br0 && ip -n "$hub" link set "$vb" up || exit 1
                ip -n "$ns" addr add "$net$((h + 1))/24" dev "$va" && ip -n "$ns" link set "$va" up || exit 1
                # the host's name resolves to its address in its namespace (ip netns
                # exec mounts /etc/netns/NS/hosts over /etc/hosts): Horovod
                # 0.28.1's process-set contexts ignore HOROVOD_GLOO_IFACE and
                # bind to the address of the host name, which is loopback here
                mkdir -p "/etc/netns/$ns" && printf '127.0.0.1 localhost\n%s h%s\n' "$net$((h + 1))" "$h" \
                        >"/etc/netns/$ns/hosts" || exit 1
                tc -n "$ns" qdisc add dev "$va" root tbf rate 1gbit burst "$BURST" latency 100ms || exit 1
                tc -n "$hub" qdisc add dev "$vb" root tbf rate 1gbit burst "$BURST" latency 100ms || exit 1
                mkdir -p "$work/h$h"
                local listen=()
                [ "$h" = 0 ] && listen=(--peer-listen "tcp://${net}1:7100")
                ip netns exec "$ns" "$build/daemon/hvd-coordinatord" --runtime-dir "$work/h$h" "${listen[@]}" \
                        --log-level warning 2>"$work/h$h.log" &
                pids+=($!)
        done
        for ((h = 0; h < maxh; h++)); do
                for _ in $(seq 200); do [ -S "$work/h$h/worker.sock" ] && break; sleep 0.05; done
                [ -S "$work/h$h/worker.sock" ] || { echo "run-scaling: the daemon of host $h did not start" >&2; exit 1; }
        done
}

set_rate() {
        local h
        for ((h = 0; h < maxh; h++)); do
                tc -n "hvdsc$$h$h" qdisc change dev "hsh${tag}x$h" root tbf rate "$1" burst "$BURST" latency 100ms || exit 1
                tc -n "$hub" qdisc change dev "hsb${tag}x$h" root tbf rate "$1" burst "$BURST" latency 100ms || exit 1
        done
}

args=(--what scaling --model-tsv "$tsv" --steps "$STEPS" --reps "$REPS" --batch "$BATCH" --fwd-ms "$FWD_MS"
        --bwd-ms "$BWD_MS")
[ "$WHAT" = scaling ] || args=(--what "$WHAT" --min-bytes "$MIN" --max-bytes "$MAX" --reps "$REPS" --min-time "$MIN_TIME")
script=$src/benchmarks/torch_peers.py
export OMP_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1

# job PEER N RATE ROUND: one rank per host on hosts 0..N-1; rank 0's lines into $out
job() {
        local p=$1 n=$2 rate=$3 round=$4 h ns st=0 wp=() hosts='' port=$((20000 + RANDOM % 20000)) rdv=''
        local jobid=sc$tag-$RANDOM
        for ((h = 0; h < n; h++)); do hosts="${hosts}h$h:1,"; done
        hosts=${hosts%,}
        if [ "$p" = horovod ]; then
                # Horovod's rendezvous server, in host 0's namespace, serving while its input is open
                mkfifo "$work/rdv.in"
                ip netns exec "hvdsc$$h0" env PYTHONPATH="$HOROVOD_DIR" "$PY" "$src/benchmarks/horovod_rendezvous.py" \
                        "$hosts" "$n" <"$work/rdv.in" >"$work/rdv.out" 2>&1 &
                rdv=$!
                exec 8>"$work/rdv.in"
                for _ in $(seq 200); do grep -q '^port=' "$work/rdv.out" && break; sleep 0.05; done
                port=$(sed -n 's/^port=//p' "$work/rdv.out")
                [ -n "$port" ] || { loud "PEER FAILED: Horovod's rendezvous server: $(tail -n 2 "$work/rdv.out")"; exec 8>&-; wait "$rdv"; rm -f "$work/rdv.in"; return; }
        fi
        for ((h = 0; h < n; h++)); do
                ns=hvdsc$$h$h
                local ip=$net$((h + 1)) dev=hsh${tag}x$h
                local extra=()
                [ "$p" = hvdb ] && read -ra extra <<<"${HVDB_ENV:-}"
                case $p in
                hvd | hvdb)
                        ip netns exec "$ns" env "${extra[@]}" PYTHONPATH="$build/python-binding/pkg" HVD_JOB_ID="$jobid" \
                                HVD_JOB_SECRET=0123456789abcdef HVD_RANK=$h HVD_SIZE="$n" HVD_LOCAL_RANK=0 HVD_LOCAL_SIZE=1 \
                                HVD_CROSS_RANK=$h HVD_CROSS_SIZE="$n" HVD_HOSTS="$hosts" HVD_HOSTNAME=h$h \
                                HVD_ROOT_PEER="tcp://${net}1:7100" HVD_RUNTIME_DIR="$work/h$h" HVD_DATA_ADDR="$ip" \
                                timeout -k 5 900 "$PY" "$script" --impl hvd "${args[@]}" >"$work/r$h.out" 2>&1 &
                        ;;
                torch)
                        ip netns exec "$ns" env RANK=$h WORLD_SIZE="$n" MASTER_ADDR="${net}1" MASTER_PORT="$port" \
                                GLOO_SOCKET_IFNAME="$dev" timeout -k 5 900 "$PY" "$script" --impl torch "${args[@]}" \
                                >"$work/r$h.out" 2>&1 &
                        ;;
                horovod)
                        # shellcheck disable=SC2046 # the rendezvous server's line is words
                        # in a UTS namespace of its own named h<h>, whose name resolves to its address
                        # shellcheck disable=SC2016 # expanded by that sh
                        ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "h$h" \
                                env PYTHONPATH="$HOROVOD_DIR" HOROVOD_GLOO_RENDEZVOUS_ADDR="${net}1" \
                                HOROVOD_GLOO_RENDEZVOUS_PORT="$port" HOROVOD_CONTROLLER=gloo HOROVOD_CPU_OPERATIONS=gloo \
                                HOROVOD_GLOO_IFACE="$dev" $(sed -n "/HOROVOD_RANK=$h /p" "$work/rdv.out") \
                                timeout -k 5 900 "$PY" "$script" --impl horovod "${args[@]}" >"$work/r$h.out" 2>&1 &
                        ;;
                esac
                wp+=($!)
        done
        for h in "${wp[@]}"; do wait "$h" || st=1; done
        if [ -n "$rdv" ]; then
                exec 8>&-
                wait "$rdv"
                rm -f "$work/rdv.in"
        fi
        sed -n "s/^bench=/round=$round rate=$rate bench=/p" "$work/r0.out" | sed "s/ impl=hvd / impl=$p /" | tee -a "$out"
        [ "$st" = 0 ] || loud "PEER FAILED: $p at $n hosts, $rate, round $round: $(grep -hv '^bench=' "$work"/r*.out | tail -n 3 | tr '\n' ' ')"
}

if [ -n "${RAW:-}" ]; then
        [ -f "$RAW" ] || die "RAW=$RAW: no such file"
        sed -n 's/^#   //p' "$RAW" >"$out"
else
        [ "$WHAT" != scaling ] || [ -f "$tsv" ] || die "set DATA to the directory of resnet50.tsv"
        [ "$(id -u)" = 0 ] || die "root is needed (network namespaces)"
        peers=
        for p in $PEERS; do
                case $p in
                hvd | hvdb) peer_hvd "$build" ;;
                horovod) peer_horovod ;;
                *) peer_why= ;;
                esac
                [ -z "$peer_why" ] || { loud "PEER MISSING: $peer_why"; continue; }
                peers="$peers $p"
        done
        measured="compute model ${FWD_MS}+${BWD_MS} ms (sleep), batch $BATCH"
        [ "$WHAT" = scaling ] || measured="--what $WHAT, $MIN-$MAX bytes"
        echo "# run-scaling: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$src" rev-parse --short HEAD 2>/dev/null)," \
                "$(nproc --all) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $measured," \
                "tbf burst $BURST${HVDB_ENV:+; hvdb = hvd with $HVDB_ENV}" | tee -a "$out"
        [ "$WHAT" != scaling ] ||
                "$PY" "$script" --impl plain "${args[@]}" | sed 's/^bench=/round=0 rate=- bench=/' | tee -a "$out"
        star_setup
        read -ra order <<<"$peers"
        for rate in $RATES; do
                set_rate "$rate"
                for ((round = 0; round < ROUNDS; round++)); do
                        for n in $NS; do
                                echo "# $rate, $n hosts, round $round, load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out"
                                for ((i = 0; i < ${#order[@]}; i++)); do
                                        job "${order[(i + round) % ${#order[@]}]}" "$n" "$rate" "$round"
                                done
                        done
                done
        done
        echo "# raw lines"
        sed 's/^/#   /' "$out"
fi
"$PY" - "$out" <<'PY'
import re, statistics, sys
rows, cpu, loud, one, sweep = {}, {}, [], None, {}
for line in open(sys.argv[1]):
    if line.startswith("!!!"):
        loud.append(line.strip())
    if line.startswith("# run-scaling"):
        print("\n" + line.strip())
    m = dict(re.findall(r"(\w+)=(\S+)", line))
    if m.get("bench") in ("allreduce", "coll"):
        what = m["mode"] if m["bench"] == "allreduce" else m["op"]
        key = (m["rate"], int(m["np"]), what, int(m["bytes"]))
        sweep.setdefault(key, {}).setdefault(m["impl"], []).append(float(m["time_us"]))
        continue
    if m.get("bench") != "scaling":
        continue
    if m["impl"] == "plain":
        one = float(m["img_s"])
        continue
    # img_s is one rank's; the job's rate is N times it
    n = int(m["np"])
    rows.setdefault((m["rate"], n), {}).setdefault(m["impl"], []).append(n * float(m["img_s"]))
    if "cpu_ms" in m:
        cpu.setdefault((m["rate"], n), {}).setdefault(m["impl"], []).append(float(m["cpu_ms"]))
    step_ms = float(m["fwd_ms"]), float(m["bwd_ms"])
    mib = float(m.get("mib", 97.5))  # runs before mib= was printed: ResNet-50


def link_bound(rate, n):
    """The best efficiency the link allows: a ring moves 2(N-1)/N of the
    gradients through each host's link each way, which can start with
    backward, so a step takes at least fwd + max(bwd, that time)."""
    u = re.fullmatch(r"([0-9.]+)([kmg]?)bit", rate)
    if not u:
        return None
    bps = float(u.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[u.group(2)]
    wire = 2 * (n - 1) / n * mib * 2**20 * 8 / bps * 1e3
    fwd, bwd = step_ms
    return (fwd + bwd) / (fwd + max(bwd, wire))
if sweep:
    # a lone blocking call across the hosts, each system's median time over the rounds
    print("# blocking calls across the emulated hosts (mode: allreduce's; or the collective):"
          " time per call in us, medians over the rounds; ratios are hvd's speed over the peer's"
          " (above 1: hvd faster)")
    impls = [i for i in ("hvd", "hvdb", "horovod", "gloo") if any(i in c for c in sweep.values())]
    print(f"{'link':>7} {'N':>3} {'mode':>13} {'bytes':>9} " + " ".join(f"{i + ' us':>11}" for i in impls)
          + "".join(f" {'hvd/' + i:>11}" for i in impls if i != "hvd"))
    for (rate, n, mode, nbytes), c in sorted(sweep.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2], kv[0][3])):
        med = {i: statistics.median(c[i]) for i in impls if c.get(i)}
        cells = " ".join(f"{med[i]:11.1f}" if i in med else f"{'-':>11}" for i in impls)
        rats = "".join(f" {med[i] / med['hvd']:11.2f}" if i in med and "hvd" in med else f" {'-':>11}"
                       for i in impls if i != "hvd")
        print(f"{rate:>7} {n:>3} {mode:>13} {nbytes:>9} {cells}{rats}")
if sweep and not rows:
    for l in loud:
        print(l)
    sys.exit(0)
if one is None:
    print("run-scaling: no single-rank rate")
    sys.exit(1)
print(f"# rate(1) = {one:.1f} images/s (the compute model alone); rate(N) = the N ranks' images/s together;"
      " efficiency = rate(N) / (N x rate(1)); medians over the rounds [range]; link bound = the best"
      " efficiency the link's rate allows")
hvdb = any("hvdb" in r for r in rows.values())
print(f"\n{'link':>7} {'N':>3} {'hvd img/s':>10} {'eff [range]':>17} {'horovod':>10} {'eff [range]':>17}"
      f" {'ddp':>10} {'eff [range]':>17} {'hvd/horovod':>11} {'hvd/ddp':>8} {'link bound':>10}"
      + (f" {'hvdb':>10} {'eff [range]':>17} {'hvd/hvdb':>8}" if hvdb else ""))
for (rate, n), r in sorted(rows.items(), key=lambda kv: (float(re.sub(r"[a-z]", "", kv[0][0])), kv[0][1])):
    def cells(impl):
        v = r.get(impl)
        if not v:
            return f"{'-':>10} {'-':>17}"
        m = statistics.median(v)
        return f"{m:10.1f} {m / (n * one):5.2f} [{min(v) / (n * one):.2f}-{max(v) / (n * one):.2f}]"
    def rat(peer):
        if not r.get("hvd") or not r.get(peer):
            return "-"
        return f"{statistics.median(r['hvd']) / statistics.median(r[peer]):.2f}"
    lb = link_bound(rate, n)
    print(f"{rate:>7} {n:>3} {cells('hvd')} {cells('horovod')} {cells('ddp')} {rat('horovod'):>11} {rat('ddp'):>8}"
          f" {lb if lb is None else format(lb, '10.2f')}" + (f" {cells('hvdb')} {rat('hvdb'):>8}" if hvdb else ""))
if cpu:
    print("\n# CPU ms per step of one rank's process (user + system, all its threads; medians over the rounds)")
    impls = [i for i in ("hvd", "hvdb", "horovod", "ddp") if any(i in c for c in cpu.values())]
    print(f"{'link':>7} {'N':>3} " + " ".join(f"{i:>8}" for i in impls))
    for (rate, n), c in sorted(cpu.items(), key=lambda kv: (float(re.sub(r"[a-z]", "", kv[0][0])), kv[0][1])):
        print(f"{rate:>7} {n:>3} " + " ".join(f"{statistics.median(c[i]):8.1f}" if c.get(i) else f"{'-':>8}"
                                             for i in impls))
for l in loud:
    print(l)
PY
