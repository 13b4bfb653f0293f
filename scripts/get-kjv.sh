#!/usr/bin/env bash
# Writes the King James Bible as plain text, one verse per line, to the given path
# (default data/kjv.txt, which git ignores), for character-level training.
#
#   bash scripts/get-kjv.sh [output]
#
# The text comes from Debian's bible-kjv-text package, whose /usr/lib/bible.data holds
# it in its own compressed format; the `bible` reader of the bible-kjv package prints it.
# Both are installed with apt-get when missing; nothing else is downloaded. With
# pretty-printing off (-f), `bible` prints "Ge1:1 In the beginning ..." per verse; the
# reference before the first space is dropped, because verse numbers are not prose and
# would teach a character model to count rather than to write. Nothing else is changed.
# The result: 31,102 lines, 4,137,850 bytes of ASCII, 63 distinct characters.
set -euo pipefail

out=${1:-data/kjv.txt}

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

if ! installed bible-kjv-text || ! installed bible-kjv; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "installing bible-kjv-text and its reader bible-kjv (apt-get)"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends bible-kjv-text bible-kjv \
        > /dev/null
fi

# Where the package put its data file (normally /usr/lib/bible.data).
data=$(dpkg -L bible-kjv-text | grep '/bible\.data$' | head -n 1)
if [ -z "$data" ] || [ ! -r "$data" ]; then
    echo "get-kjv.sh: bible-kjv-text is installed but its bible.data was not found" >&2
    exit 1
fi

mkdir -p "$(dirname "$out")"
tmp="$out.tmp.$$"
trap 'rm -f "$tmp" "$tmp.refs"' EXIT
# From Genesis 1:1 to Revelation 22:21, reading the data file where dpkg says it is.
bible -f -p "$(dirname "$data")" -d "$(basename "$data")" gen1:1-rev22:21 < /dev/null > "$tmp.refs"
verses=$(wc -l < "$tmp.refs")
unreferenced=$(grep -cv '^[1-3]\?[A-Za-z]\+[0-9]\+:[0-9]\+ ' "$tmp.refs" || true)
if [ "$verses" -ne 31102 ] || [ "$unreferenced" -ne 0 ]; then
    echo "get-kjv.sh: unexpected output from bible: $verses lines (31102 expected)," \
        "$unreferenced without a verse reference" >&2
    exit 1
fi
sed 's/^[^ ]* //' "$tmp.refs" > "$tmp"
rm -f "$tmp.refs"
mv "$tmp" "$out"

bytes=$(wc -c < "$out")
distinct=$(LC_ALL=C od -An -v -tu1 "$out" | tr -s ' ' '\n' | sed '/^$/d' | sort -un | wc -l)
awk -v out="$out" -v v="$verses" -v b="$bytes" -v d="$distinct" \
    'BEGIN { printf "%s: %d verses, %d bytes (%.2f MB), %d distinct characters\n", out, v, b, b / 1e6, d }'
