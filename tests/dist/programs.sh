#!/usr/bin/env bash
# The training programs under mpirun: 2 and 3 ranks train like one process (the same losses
# within float rounding: the ranks' shard means are added in another order), only rank 0
# prints and writes, a run stopped on 2 ranks resumes on 3 and continues the same batches,
# and a batch that does not split over the ranks is refused.
#   bash tests/dist/programs.sh <mpiexec> <train_selective_copy>
set -euo pipefail
mpiexec=$1
program=$2
dir=$(mktemp -d /tmp/tg_dist_programs_XXXXXX)
trap 'rm -rf "$dir"' EXIT
args=(--device cpu --layers 1 --d-model 8 --d-state 4 --batch 6 --seq-len 12 --copy 3 --vocab 6 --eval-rows 5
      --steps 8 --eval-every 4 --seed "${RANDOM}")
fail() { echo "programs.sh: $*" >&2; exit 1; }

# Columns 2 (loss) and 3 (accuracy) of two CSVs agree from step $3 on.
same_losses() {
    python3 - "$1" "$2" "$3" <<'PY' || fail "$1 and $2 differ"
import csv, sys
a, b = (list(csv.DictReader(open(p))) for p in sys.argv[1:3])
first = int(sys.argv[3])
rows = [(x, y) for x, y in zip(a, b) if int(x["step"]) >= first]
assert len(rows) == 8 - first + 1, f"{len(rows)} rows"
for x, y in rows:
    assert x["step"] == y["step"]
    assert abs(float(x["loss"]) - float(y["loss"])) <= 1e-5 * abs(float(x["loss"])), (x, y)
    assert x["accuracy"] == y["accuracy"], (x, y)
PY
}

"$program" "${args[@]}" --csv "$dir/one.csv" > "$dir/one.out" 2> /dev/null || fail "the one-process run failed"
for ranks in 2 3; do
    "$mpiexec" -np "$ranks" --oversubscribe "$program" "${args[@]}" --csv "$dir/n$ranks.csv" > "$dir/n$ranks.out" \
        2> "$dir/n$ranks.err" || fail "the $ranks-rank run failed: $(cat "$dir/n$ranks.err")"
    same_losses "$dir/one.csv" "$dir/n$ranks.csv" 1
    [ "$(grep -c "held-out accuracy" "$dir/n$ranks.out")" = 1 ] || fail "$ranks ranks: not one result line"
    grep -q "data parallel: $ranks ranks" "$dir/n$ranks.err" || fail "$ranks ranks: no summary line"
done

"$mpiexec" -np 2 --oversubscribe "$program" "${args[@]}" --csv "$dir/resumed.csv" --ckpt "$dir/run.safetensors" \
    --stop-at 4 > /dev/null 2>&1 || fail "the run stopped at step 4 failed"
# --device is not among the flags a checkpoint keeps: without it, a machine with a GPU would
# resume these CPU ranks on it.
"$mpiexec" -np 3 --oversubscribe "$program" --resume "$dir/run.safetensors" --device cpu --csv "$dir/resumed.csv" \
    > /dev/null 2> "$dir/resumed.err" || fail "resuming on 3 ranks failed: $(cat "$dir/resumed.err")"
same_losses "$dir/one.csv" "$dir/resumed.csv" 1

if "$mpiexec" -np 2 --oversubscribe "$program" "${args[@]}" --batch 5 > /dev/null 2> "$dir/odd.err"; then
    fail "a batch of 5 on 2 ranks was taken"
fi
grep -q "batch 5: it must split evenly over the 2 ranks" "$dir/odd.err" || fail "no message for --batch 5"
echo "programs.sh: 1, 2 and 3 ranks agree; resumed from 2 ranks on 3; an uneven batch refused"
