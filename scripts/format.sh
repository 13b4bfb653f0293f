#!/usr/bin/env bash
# Formats the C and CUDA sources with clang-format (the style is .clang-format), or with
# --check only reports the files that differ from it and fails (CI runs that).
#   bash scripts/format.sh [--check]
# The style is settled for clang-format 14 (Debian 12's); other versions may lay out a few
# lines differently.
set -euo pipefail
cd "$(dirname "$0")/.."
# Tracked files and new ones not yet added (but not what .gitignore leaves out).
mapfile -t files < <(git ls-files --cached --others --exclude-standard '*.c' '*.h' '*.cu' '*.cuh')
if [ "${1:-}" = "--check" ]; then
    clang-format --dry-run --Werror "${files[@]}"
else
    clang-format -i "${files[@]}"
fi
