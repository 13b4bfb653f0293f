#!/usr/bin/env bash
# A training program on a GPU as one NCCL rank (TG_WORLD_SIZE=1: its gradients go through
# NCCL's all-reduce every step, inside the step's CUDA graph or not) gives the losses and
# accuracies of the same run without a world, bit for bit. Skipped (77) without a GPU.
#   bash tests/dist/nccl_programs.sh <train_selective_copy>
set -euo pipefail
program=$1
nvidia-smi -L > /dev/null 2>&1 || { echo "nccl_programs.sh: no GPU"; exit 77; }
dir=$(mktemp -d /tmp/tg_nccl_programs_XXXXXX)
trap 'rm -rf "$dir"' EXIT
args=(--device cuda --layers 1 --d-model 16 --d-state 4 --batch 4 --seq-len 24 --copy 3 --vocab 6 --eval-rows 8
      --steps 12 --eval-every 6 --seed "${RANDOM}")
fail() { echo "nccl_programs.sh: $*" >&2; exit 1; }

for graph in on off; do
    "$program" "${args[@]}" --graph "$graph" --csv "$dir/plain.csv" > /dev/null 2> "$dir/plain.err" ||
        fail "the run without a world failed: $(cat "$dir/plain.err")"
    TG_WORLD_SIZE=1 TG_RANK=0 TG_DIST_INIT_FILE="$dir/id" "$program" "${args[@]}" --graph "$graph" \
        --csv "$dir/nccl.csv" > /dev/null 2> "$dir/nccl.err" || fail "the NCCL rank failed: $(cat "$dir/nccl.err")"
    [ ! -e "$dir/id" ] || fail "rank 0 left its id file behind"
    python3 - "$dir/plain.csv" "$dir/nccl.csv" <<'PY' || fail "graph $graph: the losses differ"
import csv, sys
a, b = (list(csv.DictReader(open(p))) for p in sys.argv[1:3])
assert len(a) == len(b) == 12, (len(a), len(b))
for x, y in zip(a, b):
    assert (x["step"], x["loss"], x["accuracy"]) == (y["step"], y["loss"], y["accuracy"]), (x, y)
PY
done
echo "nccl_programs.sh: one NCCL rank trains bit for bit like no world, graph on and off"
