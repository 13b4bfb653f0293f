#!/usr/bin/env bash
# The shared library's dynamic symbol table holds exactly the functions the public headers
# declare: no internal function leaks out to clash with a program's own, and none of the
# API is missing.
#   bash tests/exported_symbols.sh <libtapegrad.so> <source dir>
set -euo pipefail
lib=$1
root=$2
# Defined, global symbols (functions and data; weak and unique ones too), minus the linker's own.
exported=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRWVu]$/ {print $3}' \
    | grep -vE '^(_init|_fini|_edata|_end|__bss_start)$' | sort -u)
declared=$(for header in "$root"/include/tapegrad/*.h; do
    sed -e 's|/\*.*\*/||g' -e '/\/\*/,/\*\//d' "$header"
done | grep -oE '^TG_API [a-z_][a-z0-9_ ]*[ *]+tg_[a-z0-9_]+\(' | grep -oE 'tg_[a-z0-9_]+\($' | tr -d '(' | sort -u)
extra=$(comm -23 <(echo "$exported") <(echo "$declared"))
missing=$(comm -13 <(echo "$exported") <(echo "$declared"))
echo "$(echo "$declared" | wc -l) public functions, $(echo "$exported" | wc -l) exported symbols"
if [ -n "$extra" ]; then
    echo "exported but not public:" >&2
    echo "$extra" | head -40 >&2
fi
if [ -n "$missing" ]; then
    echo "public but not exported:" >&2
    echo "$missing" >&2
fi
[ -z "$extra" ] && [ -z "$missing" ]
