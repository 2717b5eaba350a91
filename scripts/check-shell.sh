#!/bin/sh
# check-shell.sh — shellcheck over the project's shell scripts: scripts/,
# tests/ (all levels), benchmarks/, fuzz/run.sh, bootstrap and .ci/run.
#   scripts/check-shell.sh [SHELLCHECK ARGS...]
# Any finding, of any severity, fails (exit 1). A finding where the code is
# right is silenced on its line by a "# shellcheck disable=SCnnnn # why"
# directive; .shellcheckrc at the top holds what applies to every script.
# In a git checkout the tracked scripts are checked, elsewhere (a release
# tarball) those present. SHELLCHECK=/path/to/shellcheck picks the binary.
# Exit status 2: no shellcheck.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
sc=${SHELLCHECK:-shellcheck}
if ! command -v "$sc" >/dev/null 2>&1; then
        echo "check-shell: $sc not found: apt-get install shellcheck (or set SHELLCHECK)" >&2
        exit 2
fi
cd "$top" || exit 2
if [ "$(git rev-parse --show-toplevel 2>/dev/null)" = "$(pwd -P)" ]; then
        files=$(git ls-files -- 'scripts/*.sh' 'tests/*.sh' 'benchmarks/*.sh' fuzz/run.sh bootstrap .ci/run)
else
        files=$(find scripts tests benchmarks -name '*.sh' -type f 2>/dev/null | sort)
        for f in fuzz/run.sh bootstrap .ci/run; do
                [ -f "$f" ] && files="$files $f"
        done
fi
list='' n=0
for f in $files; do
        [ -f "$f" ] || continue
        list="$list $f"
        n=$((n + 1))
done
# shellcheck disable=SC2086 # a list of paths without spaces, split on purpose
if "$sc" "$@" $list; then
        echo "check-shell: $n scripts, no finding ($("$sc" --version | sed -n 's/^version: /shellcheck /p'))"
else
        echo "check-shell: shellcheck found the above in the scripts; fix them, or silence one where the code is right with '# shellcheck disable=SCnnnn # reason'"
        exit 1
fi
