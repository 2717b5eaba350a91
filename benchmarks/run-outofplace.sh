#!/bin/sh
# run-outofplace.sh — hvd.torch's allreduce out of place (hvd.allreduce(t))
# against in place (hvd.allreduce_(t)) from Python, 2 ranks:
# benchmarks/torch_outofplace.py once per repeat, Python and package, in an
# order that rotates from repeat to repeat. Each run alternates the modes
# itself (same-run ratios); with BASE_REF the Python modules of that git
# revision run beside this tree's, on the same libhvd and extension, so the
# two packages alternate too. Prints every run's table, then per Python,
# package and size the median over the repeats of in place's busbw over out
# of place's (the target is <= 1.25) and of the busbw itself, and beside
# it the machine's own floor for that ratio (MODES add_ and add: torch.add
# in place, and into two outputs in turn, on both ranks at once).
#
#   benchmarks/run-outofplace.sh [BUILDDIR]          (after make)
# Environment:
#   PYTHONS="/usr/bin/python3"  the interpreters (each with its torch)
#   REPEATS=3 ROUNDS=5 MINB=1024 MAXB=1048576 MODES=inplace,outofplace
#   BASE_REF=<git revision>: also run that revision's Python modules
#   (with torch 1.x not before f665586: older modules read the use counts
#   without hvd._core.c10_layout, which this extension refuses; compare
#   against a build of the older revision instead)
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/build}
pkg=$build/python-binding/pkg
hvdrun=$build/tools/hvdrun
PYTHONS=${PYTHONS:-/usr/bin/python3}
REPEATS=${REPEATS:-3}
export ROUNDS="${ROUNDS:-5}" MINB="${MINB:-1024}" MAXB="${MAXB:-1048576}" MODES="${MODES:-inplace,outofplace,add_,add}"
if [ ! -x "$hvdrun" ] || [ ! -f "$pkg/hvd/__init__.py" ]; then
        echo "run-outofplace.sh: no hvdrun or Python package under $build: run make first" >&2
        exit 1
fi
case ",$MODES," in
*,inplace,*outofplace,* | *,outofplace,*inplace,*) ;;
*) echo "run-outofplace.sh: MODES must hold inplace and outofplace" >&2; exit 2 ;;
esac

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
pkgs="this=$pkg"
if [ -n "${BASE_REF:-}" ]; then
        # the base: this package with the revision's Python modules
        cp -rL "$pkg" "$tmp/base"  # the package links to the sources: copy the files
        git -C "$top" ls-tree -r --name-only "$BASE_REF" python-binding/hvd | grep '\.py$' | while read -r f; do
                mkdir -p "$tmp/base/$(dirname "${f#python-binding/}")"
                git -C "$top" show "$BASE_REF:$f" >"$tmp/base/${f#python-binding/}"
        done
        pkgs="$pkgs base=$tmp/base"
fi

commit=$(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo '?')
echo "# run-outofplace.sh $(date -u '+%Y-%m-%d %H:%M UTC') commit $commit${BASE_REF:+ base $BASE_REF ($(git -C "$top" rev-parse --short "$BASE_REF"))}"
echo "# $(nproc) CPUs; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# REPEATS=$REPEATS ROUNDS=$ROUNDS MINB=$MINB MAXB=$MAXB MODES=$MODES PYTHONS=$PYTHONS"
rep=0
while [ "$rep" -lt "$REPEATS" ]; do
        # rotate the packages and the Pythons from one repeat to the next
        order=$pkgs
        [ $((rep % 2)) -eq 1 ] && order=$(echo "$pkgs" | tr ' ' '\n' | sort | tr '\n' ' ')
        for py in $PYTHONS; do
                for entry in $order; do
                        label=${entry%%=*}
                        echo "## repeat=$rep python=$py package=$label load=$(cut -d' ' -f1-3 /proc/loadavg)"
                        PYTHONPATH=${entry#*=} COMMIT=$commit "$hvdrun" -np 2 "$py" "$top/benchmarks/torch_outofplace.py" 2>&1 |
                                grep -v '# raw ' | tee -a "$tmp/out" | sed "s|^|  |"
                        # the table's lines, tagged for the summary
                        sed -n "s|^\[0\] *\([0-9][0-9]*\) \(.*\)|$py $label \1 \2|p" "$tmp/out" >>"$tmp/rows"
                        : >"$tmp/out"
                done
        done
        rep=$((rep + 1))
done

modes=$(echo "$MODES" | tr ',' ' ')
ip_col=0 oop_col=0 i=0 others=0 adds=0
for m in $modes; do
        i=$((i + 1))
        [ "$m" = inplace ] && ip_col=$i
        [ "$m" = outofplace ] && oop_col=$i
        case $m in inplace | gloo) ;; add_ | add) adds=$((adds + 1)) ;; *) others=$((others + 1)) ;; esac
done
# torch_outofplace.py's floor column follows the modes and their ratios
floor_col=0
[ "$adds" -eq 2 ] && floor_col=$((i + others + 1))
echo "# medians over the repeats: python package bytes in_place_gbs out_of_place_gbs ip/oop (target <= 1.25)$([ "$floor_col" -gt 0 ] && echo " floor (torch.add's own ratio)")"
awk -v ip="$ip_col" -v oop="$oop_col" -v fl="$floor_col" '
function median(list, n,   a, k, j, t) {
        n = split(list, a, " ")
        for (k = 1; k <= n; k++) for (j = k + 1; j <= n; j++) if (a[j] < a[k]) { t = a[k]; a[k] = a[j]; a[j] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{
        key = $1 " " $2 " " $3
        if (!(key in seen)) { seen[key] = 1; keys[++nk] = key }
        bi[key] = bi[key] " " $(3 + ip); bo[key] = bo[key] " " $(3 + oop); r[key] = r[key] " " $(3 + ip) / $(3 + oop)
        if (fl) f[key] = f[key] " " $(3 + fl)
}
END {
        for (k = 1; k <= nk; k++) {
                printf "%s %.3f %.3f %.2f", keys[k], median(bi[keys[k]]), median(bo[keys[k]]), median(r[keys[k]])
                if (fl) printf " %.2f", median(f[keys[k]])
                printf "\n"
        }
}' "$tmp/rows"
