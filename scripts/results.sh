#!/usr/bin/env bash
# scripts/results.sh: the runs behind docs/results.md, on a GPU machine.
#
#   bash scripts/results.sh speed   [OUTDIR]   the README's demo; each run alone for a few hundred
#                                              steps (tokens/s); the induction table's time
#   bash scripts/results.sh train   [OUTDIR]   the three runs in full, one after the other
#   bash scripts/results.sh profile [OUTDIR]   a few steps of each under Nsight Compute: each
#                                              kernel's time, summed by name (<run>-kernels.txt)
#
# OUTDIR defaults to $OUT, else ./results-out. Each run writes there its CSV log
# (<run>.csv), its progress and messages (<run>.err) and its results (<run>.txt: the final
# held-out figures, the induction table, the sampled text). The build is Release with CUDA
# on, in ./build-results (RESULTS_BUILD_TESTS=ON configures the tests too); data/kjv.txt must
# exist (scripts/get-kjv.sh).
#
# The three runs (docs/results.md gives the paper's figures beside ours):
#   induction   the paper's model (2 layers, d_model 64, d_state 16, vocabulary 16), trained
#               at length 256, then tested at 2^6 .. 2^20 (INDUCTION_STEPS)
#   copying     Selective Copying at the paper's size: 4096 noise tokens, 16 to copy, 2
#               layers, d_model 64, d_state 16, batch 64 (COPYING_STEPS, COPYING_LR);
#               copying-N: the same with N noise tokens (1024 and 256 by default)
#   char        a 4-layer, d_model 256 character model of the King James Bible, then 600
#               sampled characters (CHAR_STEPS)
# and, named in RESULTS_RUNS only (S is the seed):
#   copying-curriculum-S   Selective Copying at 4096 noise tokens reached by a length
#               curriculum: 16,000 steps in bf16, the first 3,000 with 256 noise tokens and the
#               next 2,000 with 1024, each stage resuming the last one's checkpoint
#   induction-paper-S      Induction Heads with the paper's recipe: batch 8, constant lr 1e-3,
#               no warm-up or weight decay, 204,800 steps, tested to 2^20; continues from
#               OUTDIR/induction-paper-S.safetensors when it is there, and stops after step
#               RESULTS_STOP_AT when that is set (a run longer than one job, in parts)
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-}
case $mode in
speed | train | profile) ;;
*) echo "usage: bash scripts/results.sh speed|train|profile [OUTDIR]" >&2; exit 2 ;;
esac
out=${2:-${OUT:-./results-out}}
mkdir -p "$out"
out=$(cd "$out" && pwd)

[ -f data/kjv.txt ] || { echo "data/kjv.txt is missing: run scripts/get-kjv.sh first" >&2; exit 2; }
cmake -S . -B build-results -DCMAKE_BUILD_TYPE=Release -DTG_CUDA=ON -DTG_BUILD_TESTS="${RESULTS_BUILD_TESTS:-OFF}" > "$out/build.log"
cmake --build build-results -j "$(nproc)" --target train_induction train_selective_copy train_char \
    >> "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.total --format=csv > "$out/gpu.txt" 2>&1 || true

bin=./build-results
# The runs' fixed settings; the step counts differ between the modes.
induction=(--device cuda --seq-len 256 --layers 2 --d-model 64 --d-state 16 --batch 32 --lr 2e-3)
copying=(--device cuda --seq-len 4128 --copy 16 --layers 2 --d-model 64 --d-state 16 --batch 64 --lr 2e-3
    --eval-rows 256)
paper_induction=(--device cuda --seq-len 256 --layers 2 --d-model 64 --d-state 16 --batch 8 --lr 1e-3 --schedule constant
    --warmup 0 --weight-decay 0 --steps 204800 --eval-every 8192 --eval-max-log2 20)
curriculum=(--device cuda --copy 16 --layers 2 --d-model 64 --d-state 16 --batch 64 --lr 2e-3 --eval-rows 256
    --precision bf16 --steps 16000 --eval-every 1000)
char=(--device cuda --data data/kjv.txt --seq-len 256 --layers 4 --d-model 256 --d-state 16 --batch 32
    --lr 2e-3 --weight-decay 0.1)

# run NAME PROGRAM ARGS...: one run, its outputs named after NAME
run() {
    local name=$1 program=$2
    shift 2
    local start=$SECONDS status=0
    "$bin/$program" --csv "$out/$name.csv" "$@" > "$out/$name.txt" 2> "$out/$name.err" || status=$?
    echo "$name: exit $status after $((SECONDS - start)) s" >> "$out/runs.txt"
    return $status
}

# Median tokens/s of a run's CSV rows past its first 20 steps (warm-up: the allocator
# fills its cache, cuBLAS picks its kernels).
median_speed() {
    awk -F, 'NR > 21 { print $5 }' "$1" | sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'
}

# kernels NAME PROGRAM ARGS...: every kernel's duration over the run, summed by name
kernels() {
    local name=$1 program=$2
    shift 2
    ncu --metrics gpu__time_duration.sum --csv --log-file "$out/$name-ncu.csv" "$bin/$program" "$@" \
        > /dev/null 2> "$out/$name-ncu.err" || { tail -5 "$out/$name-ncu.err"; return 0; }
    python3 bench/ncu_kernel_times.py "$out/$name-ncu.csv" > "$out/$name-kernels.txt"
    echo "== $name"
    head -14 "$out/$name-kernels.txt"
}

if [ "$mode" = profile ]; then
    kernels induction train_induction "${induction[@]}" --steps 4 --eval-every 0 --eval-max-log2 5
    kernels copying train_selective_copy "${copying[@]}" --steps 2 --eval-every 0 --eval-rows 64
    kernels char train_char "${char[@]}" --steps 4 --eval-every 0 --eval-windows 8
    exit 0
fi

if [ "$mode" = speed ]; then
    # the demo as the README runs it, and how long the induction table to 2^20 takes
    run demo train_selective_copy --device cuda || true
    run induction-speed train_induction "${induction[@]}" --steps 300 --eval-every 0 --eval-max-log2 20 || true
    run copying-speed train_selective_copy "${copying[@]}" --steps 100 --eval-every 0 || true
    run char-speed train_char "${char[@]}" --steps 300 --eval-every 0 --eval-windows 64 || true
    printf '\n%-16s %14s\n' run "tokens/s (median)" | tee -a "$out/runs.txt"
    for name in induction-speed copying-speed char-speed; do
        printf '%-16s %14s\n' "$name" "$(median_speed "$out/$name.csv" 2> /dev/null || echo -)" | tee -a "$out/runs.txt"
    done
    exit 0
fi

# One after the other, so that each run's tokens/s are its own. RESULTS_RUNS picks some.
status=0
for name in ${RESULTS_RUNS:-char induction copying copying-1024 copying-256}; do
    case $name in
    char)
        run char train_char "${char[@]}" --steps "${CHAR_STEPS:-2500}" --eval-every 500 --ckpt "$out/char.safetensors" &&
            "$bin/train_char" --device cuda --resume "$out/char.safetensors" --sample 600 --temperature 0.6 \
                --prompt "And the LORD said unto Moses, " > "$out/char-sample.txt" 2> "$out/char-sample.err" || status=1
        rm -f "$out/char.safetensors" ;; # 21 MB; the run can be repeated
    induction)
        run induction train_induction "${induction[@]}" --steps "${INDUCTION_STEPS:-16000}" --eval-every 1000 \
            --eval-max-log2 20 || status=1 ;;
    copying) # the paper's length: 4096 noise tokens
        run copying train_selective_copy "${copying[@]}" --steps "${COPYING_STEPS:-10000}" --eval-every 500 \
            --lr "${COPYING_LR:-2e-3}" || status=1 ;;
    copying-curriculum-*) # three stages of one run, in one CSV
        seed=${name#copying-curriculum-}
        ckpt="$out/$name.safetensors"
        run "$name" train_selective_copy "${curriculum[@]}" --seed "$seed" --seq-len 288 --stop-at 3000 --ckpt "$ckpt" &&
            run "$name" train_selective_copy --device cuda --resume "$ckpt" --seq-len 1056 --stop-at 5000 --ckpt "$ckpt" &&
            run "$name" train_selective_copy --device cuda --resume "$ckpt" --seq-len 4128 --ckpt "$ckpt" || status=1 ;;
    induction-paper-*)
        seed=${name#induction-paper-}
        ckpt="$out/$name.safetensors"
        from=("${paper_induction[@]}" --seed "$seed")
        [ -f "$ckpt" ] && from=(--device cuda --resume "$ckpt")
        run "$name" train_induction "${from[@]}" --ckpt "$ckpt" --ckpt-every 8192 \
            ${RESULTS_STOP_AT:+--stop-at "$RESULTS_STOP_AT"} || status=1 ;;
    copying-*) # shorter: copying-N has N noise tokens
        noise=${name#copying-}
        run "$name" train_selective_copy "${copying[@]}" --seq-len $((noise + 32)) --steps "${COPYING_STEPS:-10000}" \
            --eval-every 500 || status=1 ;;
    *) echo "unknown run '$name'" >&2; status=1 ;;
    esac
done
cat "$out/runs.txt"
exit $status
