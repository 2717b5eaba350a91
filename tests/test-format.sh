#!/bin/sh
# test-format.sh — every tracked .c and .h is what clang-format 14 writes
# with the tree's .clang-format; a file that is not is named, with the start
# of its diff (scripts/format.sh --check; `make format` rewrites them).
# Skipped outside a git checkout (a release tarball: what it holds was
# checked in the tree it came from), with another clang-format version
# (which lays some constructs out differently), and without clang-format,
# except in CI (CI=true), where scripts/setup.sh installs it.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
command -v git >/dev/null 2>&1 || skip "git is needed to list the tracked files"
[ "$(git -C "$HVD_SRCDIR" rev-parse --show-toplevel 2>/dev/null)" = "$(cd "$HVD_SRCDIR" && pwd -P)" ] ||
        skip "$HVD_SRCDIR is not a git checkout"
cf=${CLANG_FORMAT:-}
if [ -z "$cf" ]; then
        for c in clang-format-14 clang-format; do
                if command -v "$c" >/dev/null 2>&1; then
                        cf=$c
                        break
                fi
        done
fi
if [ -z "$cf" ]; then
        [ "${CI:-}" = true ] && fail "clang-format is not installed (scripts/setup.sh installs it)"
        skip "clang-format is not installed (apt-get install clang-format)"
fi
v=$("$cf" --version | sed -n 's/.*clang-format version \([0-9]*\)\..*/\1/p')
[ "$v" = 14 ] || skip "$cf is version ${v:-unknown}; the tree is formatted with clang-format 14 (CLANG_FORMAT=...)"
CLANG_FORMAT=$cf exec sh "$HVD_SRCDIR/scripts/format.sh" --check
