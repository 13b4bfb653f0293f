#!/usr/bin/env bash
# scripts/compare-sass.sh: compares the GPU code of two builds kernel by kernel, for a change
# that should not touch it (a refactor, a file split). Each side is a set of object files,
# libraries or executables; cuobjdump lists their SASS and resource usage, which are split
# per function and arch, keyed by the demangled name with "(anonymous namespace)::" (and any
# namespace given with -n) dropped, since moving code between files or namespaces changes
# only that part of a name. Reports the functions found on one side only, those whose SASS
# differs and those whose SASS is the same but not their resources (registers, stack, static
# shared memory and so on); exits 0 only when every function matches in both.
#
#   scripts/compare-sass.sh [-n NAMESPACE]... [-s] [-k DIR] [-d] BEFORE... -- AFTER...
#
#   -n NAMESPACE  also drop NAMESPACE:: from the names (repeatable)
#   -s            SASS only: differences in resources are reported but do not fail
#   -k DIR        keep the per-function listings in DIR/before and DIR/after (to diff them)
#   -d            print the diff of each function whose SASS differs
#
# cuobjdump comes from CUOBJDUMP, else PATH, else /usr/local/cuda/bin; it needs nvdisasm
# beside it or on PATH. A function found in several files of one side (say, a kernel
# built into two objects) counts once when its copies agree and as a difference otherwise.
# Instructions are compared as listed, runs of blanks made one (cuobjdump aligns its columns
# to the widest line of the whole listing); addresses there are offsets within the function,
# so only a kernel that reads a module-scope variable whose place in its module moved would
# show a difference for it, to be looked at with -d. Resources can differ with the module
# alone: ptxas gives a kernel that has no static shared memory a 1 KB section of it when
# another kernel of the same module uses dynamic shared memory (-s leaves such cases out of
# the exit status).
set -euo pipefail
export LC_ALL=C

usage() {
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" >&2
    exit 2
}

namespaces=()
keep=""
show_diff=0
sass_only=0
while getopts "n:sk:dh" opt; do
    case $opt in
    n) namespaces+=("$OPTARG") ;;
    s) sass_only=1 ;;
    k) keep=$OPTARG ;;
    d) show_diff=1 ;;
    *) usage ;;
    esac
done
shift $((OPTIND - 1))

before=()
after=()
side=before
for arg in "$@"; do
    if [ "$arg" = "--" ]; then
        side=after
    elif [ $side = before ]; then
        before+=("$arg")
    else
        after+=("$arg")
    fi
done
if [ ${#before[@]} = 0 ] || [ ${#after[@]} = 0 ]; then usage; fi

cuobjdump=${CUOBJDUMP:-$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)}
[ -x "$cuobjdump" ] || { echo "compare-sass: no cuobjdump (set CUOBJDUMP)" >&2; exit 2; }
command -v c++filt >/dev/null || { echo "compare-sass: c++filt (binutils) is needed" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The demangled names with the namespaces dropped, one per line (stdin: mangled names).
normalise_names() {
    local script='s/\(anonymous namespace\):://g'
    local ns
    for ns in "${namespaces[@]+"${namespaces[@]}"}"; do
        script="$script; s/\\b${ns}:://g"
    done
    c++filt | sed -E "$script"
}

# split SIDE FILE...: one SASS listing per function and arch in $work/SIDE/NNNNNN, and
# $work/SIDE.index: "arch name<TAB>SASS hash<TAB>resources<TAB>listing", sorted.
split_side() {
    local name=$1
    shift
    mkdir -p "$work/$name"
    : >"$work/$name.raw"
    local f
    for f in "$@"; do
        [ -r "$f" ] || { echo "compare-sass: cannot read $f" >&2; exit 2; }
        "$cuobjdump" -sass "$f" >"$work/$name.sass"
        "$cuobjdump" -res-usage "$f" >"$work/$name.res"
        # Resource usage first (arch and name -> its line), then the SASS, each function ending
        # at the row of dots cuobjdump closes it with.
        local start
        start=$(wc -l <"$work/$name.raw")
        awk -v dir="$work/$name" -v start="$start" -v resfile="$work/$name.res" '
            FILENAME == resfile {
                if ($1 == "arch" && $2 == "=") arch = $3
                if ($1 == "Function" && $2 ~ /:$/) { fn = arch " " substr($2, 1, length($2) - 1); next }
                if (fn != "" && $0 ~ /REG:/) { sub(/^[ \t]+/, ""); res[fn] = $0; fn = "" }
                next
            }
            /^[ \t]*code for sm_/ { arch = $3 }
            /^[ \t]*Function : / {
                n++
                name = $3
                file = sprintf("%s/%06d", dir, start + n)
                key = arch " " name
                print arch "\t" name "\t" file "\t" (key in res ? res[key] : "(none listed)")
                inside = 1
                next
            }
            inside && /^[ \t]*\.\.\.\.\.\.\.\.\.\./ {
                close(file)
                inside = 0
                next
            }
            inside { $1 = $1; print > file }
        ' "$work/$name.res" "$work/$name.sass" >>"$work/$name.raw"
    done
    # key = arch + normalised name
    cut -f2 "$work/$name.raw" | normalise_names >"$work/$name.names"
    local arch file res key hash
    paste "$work/$name.raw" "$work/$name.names" | while IFS=$'\t' read -r arch _ file res key; do
        hash=$(sha256sum "$file" | cut -c1-64)
        printf '%s %s\t%s\t%s\t%s\n' "$arch" "$key" "$hash" "$res" "$file"
    done | sort >"$work/$name.index"
}

split_side before "${before[@]}"
split_side after "${after[@]}"

status=0
# One entry per key; copies of a function on one side must agree.
for name in before after; do
    cut -f1-3 "$work/$name.index" | sort -u | cut -f1 | uniq -d >"$work/$name.conflicts"
    if [ -s "$work/$name.conflicts" ]; then
        echo "== functions with differing copies within $name:"
        sed 's/^/   /' "$work/$name.conflicts"
        status=1
    fi
    sort -u -t$'\t' -k1,1 "$work/$name.index" >"$work/$name.unique"
    cut -f1 "$work/$name.unique" >"$work/$name.keys"
done

comm -23 "$work/before.keys" "$work/after.keys" >"$work/only_before"
comm -13 "$work/before.keys" "$work/after.keys" >"$work/only_after"
join -t$'\t' "$work/before.unique" "$work/after.unique" >"$work/both"
compared=$(wc -l <"$work/both")
differ=0
resources=0
identical=0
while IFS=$'\t' read -r key hash_b res_b file_b hash_a res_a file_a; do
    if [ "$hash_b" != "$hash_a" ]; then
        differ=$((differ + 1))
        echo "== SASS differs: $key"
        if [ $show_diff = 1 ]; then diff "$file_b" "$file_a" | head -40 || true; fi
    elif [ "$res_b" != "$res_a" ]; then
        resources=$((resources + 1))
        echo "== same SASS, resources differ: $key"
        echo "   before: $res_b"
        echo "   after:  $res_a"
    else
        identical=$((identical + 1))
    fi
done <"$work/both"

for name in before after; do
    if [ -s "$work/only_$name" ]; then
        echo "== only $name ($(wc -l <"$work/only_$name")):"
        sed 's/^/   /' "$work/only_$name"
    fi
done
if [ -n "$keep" ]; then
    mkdir -p "$keep"
    cp -r "$work/before" "$work/after" "$keep"/
    for name in before after; do sed "s|$work/|$keep/|" "$work/$name.index" >"$keep/$name.index"; done
fi

n_before=$(wc -l <"$work/before.keys")
n_after=$(wc -l <"$work/after.keys")
echo "compare-sass: $n_before functions before, $n_after after; $compared compared: $identical identical," \
    "$differ with different SASS, $resources with the same SASS but other resources;" \
    "$(wc -l <"$work/only_before") only before, $(wc -l <"$work/only_after") only after"
if [ "$differ" != 0 ] || [ -s "$work/only_before" ] || [ -s "$work/only_after" ]; then status=1; fi
if [ "$resources" != 0 ] && [ $sass_only = 0 ]; then status=1; fi
exit $status
