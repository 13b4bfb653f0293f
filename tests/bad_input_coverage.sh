#!/usr/bin/env bash
# Every function the public headers declare has a case in the bad-input matrix
# (tests/test_bad_input_*.c), or is listed below with the reason it has none. A new public
# function fails this test until it joins the matrix.
#   bash tests/bad_input_coverage.sh <source dir>
set -euo pipefail
root=${1:-$(dirname "$0")/..}

# No wrong call exists: no arguments, or every value of every argument is valid.
no_bad_input=(
    tg_last_error tg_clear_error tg_graph_capturing tg_matmul_tf32 tg_memory_reset_peak
    tg_memory_empty_cache tg_num_threads tg_tape_create tg_gradcheck_defaults tg_text_defaults
    tg_bf16_to_f32 tg_f16_to_f32 tg_f32_to_bf16 tg_f32_to_f16 tg_matmul_set_tf32
    tg_set_num_threads  # n < 1 restores the default, n above the cap is capped
    tg_adamw_config tg_sgd_config  # build a config; tg_optim_create checks it (in the matrix)
    tg_dist_defaults tg_dist_mpi_built tg_dist_nccl_built
)
# Frees: NULL does nothing, as with free(); anything else must come from the matching create.
frees=(tg_tape_free tg_params_free tg_optim_free tg_mamba_free tg_text_free tg_graph_free tg_dist_finalize)
# Total queries on enum values: an out-of-range value gets the documented answer ("invalid-dtype",
# 0, false, the value itself) and no error, because the checks that build error messages call
# them (test_bad_input_core.c checks those answers).
enum_queries=(tg_status_name tg_dtype_name tg_dtype_size tg_dtype_is_float tg_device_name
              tg_device_available tg_device_resolve)
exempt=" ${no_bad_input[*]} ${frees[*]} ${enum_queries[*]} "

# The declared functions: an identifier starting with tg_ followed by "(" at the start of a
# declaration, after a return type, in the public headers (comments stripped first).
functions=$(for header in "$root"/include/tapegrad/*.h; do
    sed -e 's|/\*.*\*/||g' -e '/\/\*/,/\*\//d' "$header"
done | grep -oE '^(TG_API )?[a-z_][a-z0-9_ ]*[ *]+tg_[a-z0-9_]+\(' | grep -oE 'tg_[a-z0-9_]+\($' | tr -d '(' | sort -u)

count=$(echo "$functions" | wc -l)
if [ "$count" -lt 150 ]; then
    echo "found only $count public functions: the header scan is broken" >&2
    exit 1
fi
missing=0
for fn in $functions; do
    if grep -qE "(BAD_INPUT|OP)\($fn," "$root"/tests/test_bad_input_*.c; then continue; fi
    case "$exempt" in *" $fn "*) continue ;; esac
    echo "no bad-input case for $fn (add one to tests/test_bad_input_*.c, or list it here with the reason)" >&2
    missing=$((missing + 1))
done
cases=$(grep -cE "^BAD_INPUT\(" "$root"/tests/test_bad_input_*.c | awk -F: '{s += $2} END {print s}')
echo "$count public functions; $cases hand-written cases (the op table adds generated ones); $missing missing"
if [ "$cases" -lt 300 ]; then
    echo "the matrix has $cases hand-written cases; it should keep at least 300" >&2
    exit 1
fi
[ "$missing" -eq 0 ]
