#!/bin/bash
# launch-multi.sh — test harness: several "nodes" on this machine, each an
# hvd-coordinatord with its own runtime directory and peer port on loopback,
# and one job spread over them (without hvdrun).
#
#   launch-multi.sh -H a:2,b:1,c:3 [-t TIMEOUT_S] [-k] -- CMD ARGS...
#
# Ranks are numbered in host order. Each rank's output goes to stdout
# prefixed "[rank@host] ". Exit status: 0 when every rank exited 0, else the
# first non-zero status. -k keeps the daemons' logs on failure (printed).
# HVD_TEST_SKIP_HOSTS="c" starts host c's daemon but none of its ranks.
# HVD_TEST_RANK_ORDER=cyclic numbers ranks round-robin over the hosts
# (host i's local rank l is rank l * hosts + i; every host the same count),
# as mpirun --map-by node or Slurm's cyclic distribution do.
# HVD_TEST_LOG_DIR=DIR keeps each host's daemon log as DIR/daemon-HOST.log.
set -u
builddir=${HVD_BUILDDIR:?HVD_BUILDDIR must point at the build tree}
hosts='' tmo=120 job="job-$$-$RANDOM" secret=$(printf '%08x%08x' $RANDOM$RANDOM $$)
while getopts "H:t:j:" o; do
        case $o in
        H) hosts=$OPTARG ;; t) tmo=$OPTARG ;; j) job=$OPTARG ;;
        *) echo "usage: $0 -H host:n,... [-t SEC] -- CMD..." >&2; exit 2 ;;
        esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift
IFS=, read -r -a specs <<<"$hosts"
base=$(mktemp -d /tmp/hvd-multi-XXXXXX)
dpids=()
read -r -a daemon_args <<<"${HVD_TEST_DAEMON_ARGS:-}"
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
        for p in "${dpids[@]}"; do kill -TERM "$p" 2>/dev/null; done
        for p in "${dpids[@]}"; do wait "$p" 2>/dev/null; done
        if [ -n "${HVD_TEST_LOG_DIR:-}" ]; then
                for n in "${names[@]}"; do cp "$base/$n/daemon.log" "$HVD_TEST_LOG_DIR/daemon-$n.log" 2>/dev/null; done
        fi
        rm -rf "$base"
}
trap cleanup EXIT
names=() counts=()
for s in "${specs[@]}"; do names+=("${s%%:*}"); counts+=("${s##*:}"); done
K=${#names[@]}
world=0
for c in "${counts[@]}"; do world=$((world + c)); done
for ((i = 0; i < K; i++)); do
        dir=$base/${names[$i]}
        mkdir -p "$dir"
        "$builddir/daemon/hvd-coordinatord" --runtime-dir "$dir" --peer-listen 'tcp://127.0.0.1:*' \
                --log-level "${HVD_TEST_LOG_LEVEL:-warning}" "${daemon_args[@]}" 2>"$dir/daemon.log" &
        dpids+=($!)
done
for ((i = 0; i < K; i++)); do
        for _ in $(seq 200); do [ -s "$base/${names[$i]}/peer.endpoint" ] && break; sleep 0.05; done
done
root_peer=$(cat "$base/${names[0]}/peer.endpoint")
pids=()
rank=0
for ((i = 0; i < K; i++)); do
        skip=
        for h in ${HVD_TEST_SKIP_HOSTS:-}; do [ "$h" = "${names[$i]}" ] && skip=1; done
        for ((l = 0; l < counts[i]; l++)); do
                [ "${HVD_TEST_RANK_ORDER:-}" = cyclic ] && rank=$((l * K + i))
                if [ -z "$skip" ]; then
                        ( HVD_JOB_ID=$job HVD_JOB_SECRET=$secret HVD_RANK=$rank HVD_SIZE=$world HVD_LOCAL_RANK=$l \
                          HVD_LOCAL_SIZE=${counts[$i]} HVD_CROSS_RANK=$i HVD_CROSS_SIZE=$K HVD_HOSTS=$hosts \
                          HVD_HOSTNAME=${names[$i]} HVD_ROOT_PEER=$root_peer HVD_RUNTIME_DIR=$base/${names[$i]} \
                          HVD_DATA_ADDR=127.0.0.1 exec timeout -k 5 "$tmo" "$@" 2>&1 | sed -u "s/^/[$rank@${names[$i]}] /";
                          exit "${PIPESTATUS[0]}" ) &
                        pids+=($!)
                fi
                rank=$((rank + 1))
        done
done
status=0
for p in "${pids[@]}"; do
        wait "$p"; s=$?
        [ $status -eq 0 ] && [ $s -ne 0 ] && status=$s
done
if [ $status -ne 0 ]; then
        for ((i = 0; i < K; i++)); do sed "s/^/[daemon ${names[$i]}] /" "$base/${names[$i]}/daemon.log"; done
fi
exit $status
