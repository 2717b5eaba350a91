# common.sh — helpers for the shell tests (sourced).
: "${HVD_BUILDDIR:?run through make check}" "${HVD_SRCDIR:?run through make check}"

# fail MESSAGE [DETAILS]: print and exit 1
fail() {
        echo "FAIL: $1" >&2
        [ $# -gt 1 ] && printf '%s\n' "$2" | tail -n 40 >&2
        exit 1
}

# skip REASON: exit 77, which automake reports as SKIP
skip() {
        echo "SKIP: $1" >&2
        exit 77
}
