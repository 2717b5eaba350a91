#!/bin/sh
# format.sh — the C sources as clang-format writes them (.clang-format at
# the top of the tree; Debian 12's clang-format 14).
#   scripts/format.sh           rewrite every tracked .c and .h in place
#   scripts/format.sh --check   change nothing; name each file that differs,
#                               with the start of its diff, and exit 1
# Only files git tracks are touched: generated sources (proto/*.pb-c.[ch],
# config.h) never are. CLANG_FORMAT=/path/to/clang-format picks the binary
# (default: clang-format-14, else clang-format). Exit status 2: no git
# checkout, or no clang-format.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
check=
case "${1:-}" in
--check) check=1 ;;
"") ;;
*) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

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
        echo "format: clang-format not found: apt-get install clang-format (or set CLANG_FORMAT)" >&2
        exit 2
fi
# the tree's own files, not those of a checkout that merely contains it
if [ "$(git -C "$top" rev-parse --show-toplevel 2>/dev/null)" != "$(cd "$top" && pwd -P)" ]; then
        echo "format: $top is not a git checkout: nothing to format" >&2
        exit 2
fi
cd "$top" || exit 2
files='' n=0
for f in $(git ls-files -- '*.c' '*.h'); do
        case $f in
        *.pb-c.[ch]) continue ;;
        esac
        [ -f "$f" ] || continue
        files="$files $f"
        n=$((n + 1))
done
[ -n "$files" ] || { echo "format: no .c or .h file is tracked" >&2; exit 2; }

if [ -z "$check" ]; then
        # shellcheck disable=SC2086 # the tracked paths have no spaces (ls-files quotes odd names)
        exec "$cf" -i $files
fi
tmp=$(mktemp "${TMPDIR:-/tmp}/hvd-format.XXXXXX") || exit 2
trap 'rm -f "$tmp"' EXIT
bad=0
for f in $files; do
        "$cf" "$f" >"$tmp" || { echo "format: $cf failed on $f" >&2; exit 2; }
        cmp -s "$f" "$tmp" && continue
        bad=$((bad + 1))
        echo "$f: not as clang-format writes it:"
        diff -u "$f" "$tmp" | sed -e '1,2d' -e '16,$d' -e 's/^/    /'
done
if [ $bad -ne 0 ]; then
        echo "format: $bad file(s) differ from $("$cf" --version | sed -n '1s/.*version \([0-9.]*\).*/clang-format \1/p'); 'make format' rewrites them"
        exit 1
fi
echo "format: $n files as clang-format writes them"
