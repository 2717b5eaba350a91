#!/bin/bash
# launch.sh — test harness: run N ranks of one job against an hvd-coordinatord,
# without hvdrun (so tests of the core do not depend on the launcher).
#
#   launch.sh [-r RUNTIME_DIR] [-j JOB_ID] [-s SECRET_HEX] [-t TIMEOUT_S] -n N -- CMD ARGS...
#
# Without -r, a private daemon is started in a fresh directory and stopped
# afterwards. Each rank's output goes to stdout prefixed "[rank] ". The exit
# status is 0 when every rank exited 0, else the first non-zero status.
# Needs HVD_BUILDDIR (set by `make check`).
set -u
builddir=${HVD_BUILDDIR:?HVD_BUILDDIR must point at the build tree}
rt='' job="job-$$-$RANDOM" secret=$(printf '%08x%08x' $RANDOM$RANDOM $$) n=1 tmo=120
while getopts "r:j:s:n:t:" o; do
        case $o in
        r) rt=$OPTARG ;; j) job=$OPTARG ;; s) secret=$OPTARG ;; n) n=$OPTARG ;; t) tmo=$OPTARG ;;
        *) echo "usage: $0 [-r DIR] [-j JOB] [-s SECRET] [-t SEC] -n N -- CMD..." >&2; exit 2 ;;
        esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift
own_daemon=
if [ -z "$rt" ]; then
        rt=$(mktemp -d /tmp/hvd-test-XXXXXX)
        read -r -a daemon_args <<<"${HVD_TEST_DAEMON_ARGS:-}"
        "$builddir/daemon/hvd-coordinatord" --runtime-dir "$rt" --log-level "${HVD_TEST_LOG_LEVEL:-warning}" \
                "${daemon_args[@]}" 2>"$rt/daemon.log" &
        own_daemon=$!
        for _ in $(seq 100); do [ -S "$rt/worker.sock" ] && break; sleep 0.05; done
fi
pids=()
for ((r = 0; r < n; r++)); do
        ( HVD_JOB_ID=$job HVD_JOB_SECRET=$secret HVD_RANK=$r HVD_SIZE=$n HVD_LOCAL_RANK=$r \
          HVD_LOCAL_SIZE=$n HVD_RUNTIME_DIR=$rt exec timeout -k 5 "$tmo" "$@" 2>&1 | sed -u "s/^/[$r] /" ;
          exit "${PIPESTATUS[0]}" ) &
        pids+=($!)
done
status=0
for p in "${pids[@]}"; do
        wait "$p"; s=$?
        [ $status -eq 0 ] && [ $s -ne 0 ] && status=$s
done
if [ -n "$own_daemon" ]; then
        kill -TERM "$own_daemon" 2>/dev/null; wait "$own_daemon" 2>/dev/null
        if [ -s "$rt/daemon.log" ] && [ $status -ne 0 ]; then sed 's/^/[daemon] /' "$rt/daemon.log"; fi
        rm -rf "$rt"
fi
exit $status
