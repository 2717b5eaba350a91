#!/bin/bash
# test-delay-proxy.sh — tests/delay_proxy itself, which the namespace
# tests and benchmarks put on their links: on loopback, through an echo
# server, with its pipes (splice) and with its ring (--copy): the delay
# it adds (a lower bound), bytes intact and in order in bulk and in
# small writes while its buffer fills, and its stall (SIGUSR1/SIGUSR2).
# tests/lib/delay_proxy_check.py does the checks.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
py=${PYTHON:-/usr/bin/python3}
for mode in pipes copy; do
        args=()
        [ $mode = copy ] && args=(--copy)
        out=$(timeout 300 "$py" "$HVD_SRCDIR/tests/lib/delay_proxy_check.py" "$HVD_BUILDDIR/tests/delay_proxy" 20000 \
                "${args[@]}" 2>&1) || fail "delay_proxy ($mode)" "$out"
        printf '%s\n' "$out" | sed "s/^ok: /ok: $mode: /"
done
