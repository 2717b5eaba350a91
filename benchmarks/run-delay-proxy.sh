#!/bin/bash
# run-delay-proxy.sh — tests/delay_proxy alone, the latency that
# run-step.sh NETNS=1 DELAY_US= adds: two network namespaces joined by a
# veth pair with a tc tbf limit of RATE (BURST) each way; a sink in b; from
# a, a 1-byte ping-pong (200 round trips, RTT percentiles) and a bulk
# transfer of MIB MiB (throughput), first direct, then through the proxy
# (in b) at each of DELAYS (µs one way), with the CPU the proxy took
# (proxy_cpu_s, and per GiB carried). Needs root.
#
#   benchmarks/run-delay-proxy.sh [BUILDDIR]     (after `make bench`)
# Environment: RATE=10gbit BURST=128kb DELAYS="0 50 250 1000" MIB=1000
#   PROXY=<a delay_proxy binary> (default BUILDDIR/tests/delay_proxy: another
#   build's, to compare two in turn)
set -u
build=$(cd "${1:-.}" && pwd)
RATE=${RATE:-10gbit} BURST=${BURST:-128kb} DELAYS=${DELAYS:-"0 50 250 1000"} MIB=${MIB:-1000}
PY=${PYTHON:-/usr/bin/python3}
proxy=${PROXY:-$build/tests/delay_proxy}
[ -x "$proxy" ] || { echo "run-delay-proxy: no $proxy (make bench builds it)" >&2; exit 2; }
na=hvdp$$a nb=hvdp$$b va=hpa$$ vb=hpb$$ net=10.219.$(($$ % 250)).
work=$(mktemp -d /tmp/hvd-proxy-XXXXXX)
pids=()
. "$(dirname "$0")/../tests/lib/netpair.sh"
cleanup() { netpair_teardown "$na" "$nb" "$work" "${pids[@]}"; }
trap cleanup EXIT
cat >"$work/tp.py" <<'EOF'
import socket, sys, time
if sys.argv[1] == "sink":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[2], int(sys.argv[3]))); s.listen(4)
    print("listening", flush=True)
    while True:
        c, _ = s.accept()
        if c.recv(1) == b"p":
            while (b := c.recv(1)):
                c.sendall(b)
        else:
            buf = bytearray(1 << 20)
            while c.recv_into(buf):
                pass
            c.sendall(b"x")
        c.close()
host, port, mib, what = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
c = socket.create_connection((host, port)); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
c.sendall(b"p"); ts = []
for i in range(200):
    t = time.perf_counter(); c.sendall(b"a"); c.recv(1); ts.append(time.perf_counter() - t)
c.close(); ts.sort()
c = socket.create_connection((host, port)); c.sendall(b"t"); buf = b"\0" * (1 << 20)
t = time.perf_counter()
for i in range(mib):
    c.sendall(buf)
c.shutdown(socket.SHUT_WR); c.recv(1); dt = time.perf_counter() - t
print(f"bench=delay_proxy path={what} rtt_us_p10={ts[20]*1e6:.0f} rtt_us_median={ts[100]*1e6:.0f} "
      f"rtt_us_p90={ts[180]*1e6:.0f} gbits={mib * 8 / 1024 / dt:.2f}")
EOF
netpair "$na" "$nb" "$va" "$vb" "${net}1" "${net}2" >&2 || { echo "run-delay-proxy: root is needed" >&2; exit 1; }
tc -n "$na" qdisc add dev "$va" root tbf rate "$RATE" burst "$BURST" latency 100ms || exit 1
tc -n "$nb" qdisc add dev "$vb" root tbf rate "$RATE" burst "$BURST" latency 100ms || exit 1
ip netns exec "$nb" "$PY" "$work/tp.py" sink "${net}2" 7300 >"$work/sink.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q listening "$work/sink.log" && break; sleep 0.05; done
echo "# tbf $RATE burst $BURST each way; a -> b: direct, then through tests/delay_proxy in b"
ip netns exec "$na" "$PY" "$work/tp.py" send "${net}2" 7300 "$MIB" direct
for d in $DELAYS; do
        ip netns exec "$nb" "$proxy" --max-seconds 600 "${net}2:7400" "${net}2:7300" "$d" \
                >"$work/proxy.log" 2>&1 &
        p=$!
        for _ in $(seq 100); do grep -q listening "$work/proxy.log" && break; sleep 0.05; done
        line=$(ip netns exec "$na" "$PY" "$work/tp.py" send "${net}2" 7400 "$MIB" "proxy_${d}us")
        # the proxy's own CPU (user + system) for the round trips and the transfer
        ticks=$(awk '{ print $14 + $15 }' "/proc/$p/stat" 2>/dev/null)
        [ -n "$line" ] && echo "$line${ticks:+ proxy_cpu_s=$(awk -v t="$ticks" -v hz="$(getconf CLK_TCK)" -v m="$MIB" \
                'BEGIN { printf "%.2f proxy_cpu_ms_per_gib=%.0f", t / hz, t / hz * 1000 / (m / 1024) }')}"
        kill "$p"
        wait "$p" 2>/dev/null || true
done
