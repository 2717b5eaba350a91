#!/bin/sh
# test-shellcheck.sh — the shell scripts (scripts/, tests/, benchmarks/,
# fuzz/run.sh, bootstrap, .ci/run) are clean under shellcheck: any finding
# fails, listed with its line (scripts/check-shell.sh). Skipped when the
# tool is missing, except in CI (CI=true), where scripts/setup.sh installs
# it.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
sc=${SHELLCHECK:-shellcheck}
if ! command -v "$sc" >/dev/null 2>&1; then
        [ "${CI:-}" = true ] && fail "$sc is not installed (scripts/setup.sh installs it)"
        skip "$sc is not installed (apt-get install shellcheck)"
fi
exec sh "$HVD_SRCDIR/scripts/check-shell.sh"
