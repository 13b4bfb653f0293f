#!/usr/bin/env bash
# bench/gpu-check.sh: build, test, sanitize and benchmark tapegrad on a GPU machine in one call.
#
#   source .device-debs/env.sh && bash bench/gpu-check.sh [--bench-only] [--no-peers] [--only STEPS]
#
# Run it from the repository root. Criterion and OpenBLAS must be findable: installed
# (scripts/deps.sh), or unpacked into a private prefix whose env.sh, sourced first, points
# pkg-config, the compiler and the loader at it. Steps, in order; each runs even when an
# earlier one failed (a step whose program was not built is "skipped"):
#   nvidia-smi               the card and its clocks as found (nothing is changed)
#   configure, build         Release, CUDA on, sm_90, tests and examples on, in ./build
#   ctest                    the whole suite, -j8, except install_pkgconfig (CTEST_EXCLUDE, a ctest
#                            -E regex; set it empty to run everything): with a private prefix
#                            announced through PKG_CONFIG_SYSROOT_DIR, pkg-config also prefixes the
#                            freshly installed tapegrad.pc's paths, so that packaging test fails;
#                            CTEST_INCLUDE, a ctest -R regex, runs only the tests it matches
#   memcheck-test_cuda_conv1d-N, racecheck-test_cuda_conv1d-N, racecheck-test_cuda_scan-N
#                            compute-sanitizer on the CUDA conv1d and scan tests (--jobs 1;
#                            every sanitizer step runs at the same time as the others; the
#                            conv1d tests, and the scan tests for racecheck, are dealt into
#                            SANITIZE_SHARDS processes, default 4, steps -1 to -4, since one
#                            racecheck of either binary's tests outlasts the budget);
#                            racecheck leaves out the conv1d test of tensors beyond 2^31
#                            elements (minutes on its 6 GB tensors; memcheck takes 2 s) and
#                            the grid-limit one (131071 rows of 512 steps, about a minute: its
#                            forward keeps nothing in shared memory, and its backward is the
#                            one-row kernel the other tests race-check)
#   memcheck-test_cuda_*     compute-sanitizer memcheck on every other CUDA test binary
#   gpu-to-ourselves         waits until no other process uses the GPU (fails after 60 s: the
#                            timings after it are then not to be trusted)
#   bench                    build/bench/conv1d_bench --csv $OUT/tapegrad.csv
#   bench-short-rows         the same at 128x768x256, channel-first (rows shorter than a warp's
#                            steps, which go side by side): --csv $OUT/short-rows.csv
#   strided-copy             build/bench/strided_copy_bench: a plain copy walking a channel-last
#                            tensor in the stream kernels' pattern (and with warps that read
#                            16 streams of time each), against the tensor's copy
#   scan-bench               build/bench/scan_bench (CSV lines also in $OUT/scan.csv; SCAN_ARGS:
#                            more options, e.g. "--spans 0,1,4")
#   mamba-memory             build/bench/mamba_memory --device cuda (B 8, L 2048, d_model 768)
#   train-bench              build/bench/train_bench --profile --csv $OUT/train.csv: the whole
#                            training step at the five model sizes, f32 and bf16, and where each
#                            step's GPU time goes (TRAIN_ARGS: more options)
#   scan-peers               python3 bench/scan_peers.py (CSV lines also in $OUT/scan_peers.csv)
#   peers                    python3 bench/peers.py --csv $OUT/peers.csv
#   train-peers              python3 bench/train_peers.py --csv $OUT/train_peers.csv: the same
#                            steps in PyTorch with the reference kernels (needs PEER_DIR)
# --bench-only skips ctest and the sanitizers; --no-peers skips the peers (their times do not
# change when tapegrad's kernels do: run them once per machine and software version).
# --only takes a comma-separated list of the steps above (the machine and the build always
# run; "sanitizers" names them all), e.g. --only train-bench,train-peers.
# BUILD_TARGETS limits the build to those targets (e.g. "train_bench scan_bench").
# PEER_SDIST names a folder with the source distributions of mamba-ssm and causal-conv1d
# (pip download --no-deps --no-binary :all: mamba-ssm causal-conv1d): the peers are then
# built from them (bench/build_peers.py, this machine's PyTorch) into PEER_DIR (default
# /tmp/tg-peers) while tapegrad builds and tests, and the step build-peers waits for them.
# PEER_DIR names the folder bench/build_peers.py filled (the reference kernels built from
# their source distributions, for this machine's PyTorch): with it, the scan peers include
# mamba-ssm's selective scan, the conv1d peers Dao-AILab's kernel, and train-peers runs.
#
# Output goes to $OUT (./gpu-out when OUT is unset): logs/<step>.log for each step, the two
# CSV files and summary.txt. When OUT was given, the logs are packed into logs.tar.gz instead
# (a handful of files to copy back rather than one per step). The summary (each step's status
# and time, and per benchmark row tapegrad's times next to the peers', "ok*" where the driver
# held the SM clock down while the row ran) is printed last.
#
# Time: every step has a limit, and the tests and sanitizers only get what is left after
# keeping BENCH_RESERVE + PEERS_RESERVE seconds for the two benchmarks, so the script ends
# within GPU_CHECK_SECONDS (default 480). With --no-peers every step fit in 309–365 s (build
# 81–106, ctest 79–102, the sanitizers side by side 128–135); the peers took about 230 s
# more in an earlier run, so a check with them wants GPU_CHECK_SECONDS near 560 (less
# leaves the sanitizers short of time). In a later run the scan peers alone took 223 s and
# the conv1d peers at K = 4 64 s: at GPU_CHECK_SECONDS=585 the sanitizers got 110 s and
# stopped short. Within one call of ten minutes, run the check with --no-peers and the
# peers in a second call (--bench-only). The sanitizers run the whole conv1d test binary, in
# shards; to sanitize part of it in one process, set SANITIZE_FILTER to a Criterion --filter
# pattern (e.g. '*/fwd_*');
# SANITIZE_OTHERS=0 leaves the other CUDA test binaries out of memcheck; SANITIZE_SECONDS
# caps each sanitizer step (default 150; they run side by side); BENCH_ARGS passes
# options to the benchmark (e.g. "--runs 30"); TG_COMMIT names the commit in the header when
# the tree was copied without its history.
set -u
cd "$(dirname "$0")/.." || exit 2

bench_only=0
peers=1
only=""
while [ $# -gt 0 ]; do
    case $1 in
    --bench-only) bench_only=1 ;;
    --no-peers) peers=0 ;;
    --only) only=",$2,"; shift ;;
    *) echo "usage: bash bench/gpu-check.sh [--bench-only] [--no-peers] [--only STEPS]" >&2; exit 2 ;;
    esac
    shift
done
# wanted STEP: whether --only (when given) lists the step.
wanted() { [ -z "$only" ] || [[ $only == *",$1,"* ]]; }
[ -n "${PEER_SDIST:-}" ] && PEER_DIR=${PEER_DIR:-/tmp/tg-peers} && mkdir -p "$PEER_DIR"
PEER_DIR=${PEER_DIR:+$(cd "$PEER_DIR" && pwd)}

pack_logs=0
[ -n "${OUT:-}" ] && pack_logs=1
OUT=${OUT:-./gpu-out}
OUT=$(mkdir -p "$OUT" && cd "$OUT" && pwd)
LOGS=$OUT/logs
rm -rf "$LOGS" "$OUT/logs.tar.gz"
mkdir -p "$LOGS"

BUDGET=${GPU_CHECK_SECONDS:-480}
BENCH_RESERVE=${BENCH_RESERVE:-90}
PEERS_RESERVE=${PEERS_RESERVE:-180}
[ "$peers" = 0 ] && PEERS_RESERVE=0
CTEST_EXCLUDE=${CTEST_EXCLUDE-install_pkgconfig}
SANITIZER=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
SECONDS=0

step_names=()
step_results=()
step_seconds=()

finish() {
    if [ "$pack_logs" = 1 ] && [ -d "$LOGS" ]; then
        tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$LOGS"
    fi
}
trap finish EXIT
trap 'echo "gpu-check: interrupted" >&2; exit 143' TERM INT

# The seconds a step may take: its own cap, but never eating into what later steps reserve.
limit_for() { # limit_for CAP RESERVE
    local left=$((BUDGET - SECONDS - $2))
    echo $(($1 < left ? $1 : left))
}

record() { # record NAME RESULT SECONDS
    step_names+=("$1")
    step_results+=("$2")
    step_seconds+=("$3")
    printf '[%4ds] %-32s %s (%ds)\n' "$SECONDS" "$1" "$2" "$3"
}

# A step stopped by its limit can leave a test binary running behind it (a sanitizer is
# killed, the test it started is not): that test then shares the GPU with the benchmarks,
# whose long rows measured runs 2.5 ms slower (time slices) in one such run.
kill_leftover_tests() {
    pkill -KILL -f 'build/tests/test_' 2>/dev/null
    sleep 1
}

# The benchmarks need the GPU to themselves: waits up to 60 s for every other process on it
# to end. A step, so that the summary says when the timings after it are not to be trusted.
gpu_to_ourselves() {
    local apps
    for _ in $(seq 60); do
        apps=$(nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader 2>&1) || return 0 # no nvidia-smi: cannot tell
        [ -z "$apps" ] && return 0
        sleep 1
    done
    echo "other processes on the GPU (the timings that follow are not to be trusted):"
    echo "$apps"
    return 1
}

# run_limited NAME LIMIT COMMAND...: runs the command under the limit, output in
# logs/NAME.log; prints its seconds and result ("12 pass").
run_limited() {
    local name=$1 limit=$2
    shift 2
    local log=$LOGS/$name.log start=$SECONDS rc result
    printf '$ %s\n(limit %ss)\n' "$*" "$limit" >"$log"
    timeout --kill-after=10 "$limit" "$@" >>"$log" 2>&1
    rc=$?
    case $rc in
    0) result=pass ;;
    124 | 137) result="TIMEOUT (${limit}s)" ;;
    *) result="FAIL (exit $rc)" ;;
    esac
    echo "(exit $rc after $((SECONDS - start))s)" >>"$log"
    echo "$((SECONDS - start)) $result"
}

# run_step NAME LIMIT COMMAND...: run_limited, then the step's line in the summary.
run_step() {
    local name=$1 limit=$2 outcome
    if [ "$limit" -lt 5 ]; then
        echo "skipped: no time left in the ${BUDGET}s budget" >"$LOGS/$name.log"
        record "$name" "skipped (no time left)" 0
        return
    fi
    outcome=$(run_limited "$@")
    case ${outcome#* } in TIMEOUT*) kill_leftover_tests ;; esac
    record "$name" "${outcome#* }" "${outcome%% *}"
}

skip_step() { # skip_step NAME WHY
    echo "skipped: $2" >"$LOGS/$1.log"
    record "$1" "skipped ($2)" 0
}

# A copy of the tree without its history (or with a stale one) cannot say its commit: the
# caller may name it in TG_COMMIT.
echo "gpu-check: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), commit ${TG_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}," \
    "budget ${BUDGET}s, output in $OUT"

# ---- the machine, the build ------------------------------------------------------------------
peer_build=""
if [ -n "${PEER_SDIST:-}" ] && [ "$peers" = 1 ]; then # in the background, while tapegrad builds
    nice python3 bench/build_peers.py --sdist "$PEER_SDIST" --out "$PEER_DIR" --jobs 16 >"$LOGS/build-peers.log" 2>&1 &
    peer_build=$!
    peer_build_start=$SECONDS
fi
run_step nvidia-smi 30 bash -c 'nvidia-smi && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw --format=csv'
# Everything after needs the build, so it keeps no reserve.
# Tests and examples named on: a build directory configured earlier without them would
# otherwise keep them out, and ctest and the sanitizers would find nothing to run.
run_step configure "$(limit_for 120 0)" \
    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DTG_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DTG_BUILD_TESTS=ON -DTG_BUILD_EXAMPLES=ON
# shellcheck disable=SC2086 # BUILD_TARGETS: a space-separated list of targets (default: all)
run_step build "$(limit_for 360 0)" cmake --build build -j16 ${BUILD_TARGETS:+--target $BUILD_TARGETS}
reserve=$((BENCH_RESERVE + PEERS_RESERVE))

# ---- tests and sanitizers ------------------------------------------------------------------------
# The sanitizer steps run side by side: each compute-sanitizer keeps about one CPU core busy,
# and one after the other they no longer fit the default budget (conv1d's racecheck alone
# took two minutes). sanitize starts one in the background; the steps are recorded, in the
# order they were started, once all have ended (sanitizers_done).
sanitizer_steps=()
sanitizer_pids=()
# conv1d tests that racecheck leaves out (see the list of steps above), a |-separated list.
racecheck_left_out='tensors_beyond_2_31_elements|grouped_forward_at_the_grid_limit'
# start_sanitizer NAME TOOL BINARY LIMIT [ARGS...]: compute-sanitizer as step NAME, in the
# background; ARGS go to the sanitizer before the binary, then the binary runs its tests
# one at a time (filters come in ARGS as well, after a --).
start_sanitizer() {
    local name=$1 tool=$2 binary=$3 limit=$4 sanitizer_args=() test_args=()
    shift 4
    while [ $# -gt 0 ] && [ "$1" != -- ]; do sanitizer_args+=("$1") && shift; done
    [ $# -gt 0 ] && shift && test_args=("$@")
    sanitizer_steps+=("$name")
    run_limited "$name" "$limit" "$SANITIZER" --tool "$tool" --target-processes all --error-exitcode 1 \
        "${sanitizer_args[@]}" --print-limit 20 "$binary" --jobs 1 "${test_args[@]}" >"$LOGS/$name.outcome" &
    sanitizer_pids+=($!)
}
# shard_filters BINARY SHARDS EXCLUDED: Criterion filters that deal the binary's tests (but the
# excluded ones, a |-separated list) round-robin into SHARDS groups, one filter a line.
shard_filters() {
    local binary=$1 shards=$2 excluded=$3 names=() k i
    mapfile -t names < <("$binary" --list 2>/dev/null | sed -n 's/^[^a-z_]*\([a-z0-9_]*\)$/\1/p' |
        grep -vxE "${excluded:-^$}")
    for ((k = 0; k < shards; k++)); do
        local group=()
        for ((i = k; i < ${#names[@]}; i += shards)); do group+=("${names[i]}"); done
        [ ${#group[@]} -gt 0 ] && (IFS='|' && echo "*/@(${group[*]})")
    done
}
sanitize() { # sanitize TOOL BINARY LIMIT: one compute-sanitizer step, started in the background
    local tool=$1 binary=$2 limit=$3 pattern=${SANITIZE_FILTER:-} args=()
    [ -z "$pattern" ] && [ "$tool" = racecheck ] && pattern="!(*/${racecheck_left_out//|/|*/})"
    [ -n "$pattern" ] && [ "$(basename "$binary")" = test_cuda_conv1d ] && args=(-- --filter "$pattern")
    # Each NCCL communicator takes about half a minute to start under the sanitizer: keep the
    # tests of the library's own kernels (the rank-order sum, the all-reduce in a graph).
    # NCCL probes its kernels with a call that fails on purpose (no image for this device), which
    # memcheck would count as an error: leave API errors out there, memory errors stay in.
    [ "$(basename "$binary")" = test_cuda_dist ] && args=(--report-api-errors no -- --filter
        '*/@(the_rank_order_sum_matches_the_host|steps_with_a_deterministic_allreduce_in_a_graph_equal_plain_ones)')
    start_sanitizer "$tool-$(basename "$binary")" "$tool" "$binary" "$limit" "${args[@]}"
}
# sanitize_sharded TOOL BINARY LIMIT EXCLUDED: the binary's tests in SANITIZE_SHARDS processes
# side by side (steps TOOL-BINARY-1, -2, ...), each with its share of the tests.
sanitize_sharded() {
    local tool=$1 binary=$2 limit=$3 excluded=$4 k=0 filter
    while read -r filter; do
        k=$((k + 1))
        start_sanitizer "$tool-$(basename "$binary")-$k" "$tool" "$binary" "$limit" -- --filter "$filter"
    done < <(shard_filters "$binary" "${SANITIZE_SHARDS:-4}" "$excluded")
}
sanitizers_done() {
    local name outcome timed_out=0
    wait "${sanitizer_pids[@]}" # only these: the peers' build may still run, and is waited for later
    for name in "${sanitizer_steps[@]}"; do
        outcome=$(cat "$LOGS/$name.outcome")
        rm -f "$LOGS/$name.outcome"
        case ${outcome#* } in TIMEOUT*) timed_out=1 ;; esac
        record "$name" "${outcome#* }" "${outcome%% *}"
    done
    [ "$timed_out" = 1 ] && kill_leftover_tests
}

cuda_tests=()
for binary in build/tests/test_cuda_*; do
    [ -x "$binary" ] && cuda_tests+=("$binary")
done
if [ "$bench_only" = 1 ] || ! { wanted ctest || wanted sanitizers; }; then
    skip_step ctest "${only:+not in --only}${only:---bench-only}"
    skip_step sanitizers "${only:+not in --only}${only:---bench-only}"
elif [ ! -f build/CTestTestfile.cmake ]; then
    skip_step ctest "not configured"
    skip_step sanitizers "not configured"
else
    wanted ctest && run_step ctest "$(limit_for 240 "$reserve")" ctest --test-dir build --output-on-failure --no-tests=error -j8 \
        ${CTEST_EXCLUDE:+-E "$CTEST_EXCLUDE"} ${CTEST_INCLUDE:+-R "$CTEST_INCLUDE"}
    limit=$(limit_for "${SANITIZE_SECONDS:-150}" "$reserve")
    if ! wanted sanitizers; then
        skip_step sanitizers "not in --only"
    elif [ "$limit" -lt 5 ]; then
        skip_step sanitizers "no time left"
    elif [ ${#cuda_tests[@]} -eq 0 ]; then
        skip_step sanitizers "no test_cuda_* binary built"
    else
        if [ -x build/tests/test_cuda_conv1d ] && [ -n "${SANITIZE_FILTER:-}" ]; then
            sanitize memcheck build/tests/test_cuda_conv1d "$limit"
            sanitize racecheck build/tests/test_cuda_conv1d "$limit"
        elif [ -x build/tests/test_cuda_conv1d ]; then
            sanitize_sharded memcheck build/tests/test_cuda_conv1d "$limit" ""
            sanitize_sharded racecheck build/tests/test_cuda_conv1d "$limit" "$racecheck_left_out"
        else
            skip_step sanitize-test_cuda_conv1d "build/tests/test_cuda_conv1d not built"
        fi
        # The scan kernels share memory between threads too: racecheck them (and memcheck below).
        [ -x build/tests/test_cuda_scan ] && sanitize_sharded racecheck build/tests/test_cuda_scan "$limit" ""
        for binary in "${cuda_tests[@]}"; do # SANITIZE_OTHERS=0: the conv1d kernels only
            [ "${SANITIZE_OTHERS:-1}" = 0 ] || [ "$(basename "$binary")" = test_cuda_conv1d ] ||
                sanitize memcheck "$binary" "$limit"
        done
        sanitizers_done
    fi
fi

# ---- benchmarks ---------------------------------------------------------------------------------------
# The benchmarks want the CPU to themselves too: the peers' build ends first.
if [ -n "$peer_build" ]; then
    wait "$peer_build"
    peer_build_rc=$?
    record build-peers "$([ "$peer_build_rc" = 0 ] && echo pass || echo "FAIL (exit $peer_build_rc)")" \
        "$((SECONDS - peer_build_start))"
fi
rm -f "$OUT/tapegrad.csv" "$OUT/short-rows.csv" "$OUT/peers.csv" "$OUT/train.csv" "$OUT/train_peers.csv"
run_step gpu-to-ourselves 70 bash -c "$(declare -f gpu_to_ourselves); gpu_to_ourselves"
if ! wanted bench; then
    :
elif [ -x build/bench/conv1d_bench ]; then
    # shellcheck disable=SC2086 # BENCH_ARGS is a list of options, e.g. "--runs 30"
    run_step bench "$(limit_for 240 "$PEERS_RESERVE")" build/bench/conv1d_bench --csv "$OUT/tapegrad.csv" ${BENCH_ARGS:-}
    # shellcheck disable=SC2086
    run_step bench-short-rows "$(limit_for 60 "$PEERS_RESERVE")" build/bench/conv1d_bench --size 128x768x256 \
        --layout cf --csv "$OUT/short-rows.csv" ${BENCH_ARGS:-}
else
    skip_step bench "build/bench/conv1d_bench not built"
fi
if wanted strided-copy && [ -x build/bench/strided_copy_bench ]; then
    run_step strided-copy "$(limit_for 30 "$PEERS_RESERVE")" build/bench/strided_copy_bench
fi
if wanted scan-bench && [ -x build/bench/scan_bench ]; then
    # shellcheck disable=SC2086 # SCAN_ARGS: options for scan_bench, e.g. "--spans 0,1,4"
    run_step scan-bench "$(limit_for 240 "$PEERS_RESERVE")" build/bench/scan_bench ${SCAN_ARGS:-}
    grep -v '^#' "$LOGS/scan-bench.log" | grep ',' > "$OUT/scan.csv" || true
fi
if wanted mamba-memory && [ -x build/bench/mamba_memory ]; then # the Mamba model's memory at B 8, L 2048, d_model 768
    run_step mamba-memory "$(limit_for 120 "$PEERS_RESERVE")" build/bench/mamba_memory --device cuda
fi
if wanted train-bench && [ -x build/bench/train_bench ]; then
    # shellcheck disable=SC2086 # TRAIN_ARGS: options for train_bench, e.g. "--sizes 130m"
    run_step train-bench "$(limit_for 300 "$PEERS_RESERVE")" build/bench/train_bench --device cuda --profile \
        --csv "$OUT/train.csv" ${TRAIN_ARGS:-}
fi
peer_dir_args=()
[ -n "$PEER_DIR" ] && peer_dir_args=(--peer-dir "$PEER_DIR")
if [ "$peers" = 1 ]; then
    if wanted scan-peers; then
        scan_limit=$(limit_for 300 "$((PEERS_RESERVE / 2))")
        # shellcheck disable=SC2086 # SCAN_PEERS_ARGS: options for scan_peers.py, e.g. "--peers mamba"
        run_step scan-peers "$scan_limit" env PYTHONUNBUFFERED=1 python3 bench/scan_peers.py "${peer_dir_args[@]}" \
            ${SCAN_PEERS_ARGS:-} --max-seconds $((scan_limit > 60 ? scan_limit - 30 : scan_limit / 2))
        grep -v '^#' "$LOGS/scan-peers.log" | grep ',' > "$OUT/scan_peers.csv" || true
    fi
    if wanted peers; then
        peers_limit=$(limit_for 600 "$( wanted train-peers && [ -n "$PEER_DIR" ] && echo "$((PEERS_RESERVE / 2))" || echo 0)")
        # shellcheck disable=SC2086 # PEERS_ARGS: options for peers.py, e.g. "--ks 4"
        run_step peers "$peers_limit" env PYTHONUNBUFFERED=1 python3 bench/peers.py --csv "$OUT/peers.csv" \
            "${peer_dir_args[@]}" ${PEERS_ARGS:-} --max-seconds $((peers_limit > 60 ? peers_limit - 45 : peers_limit / 2))
    fi
    if ! wanted train-peers; then
        :
    elif [ -z "$PEER_DIR" ]; then
        skip_step train-peers "no PEER_DIR"
    else
        train_limit=$(limit_for 600 0)
        # shellcheck disable=SC2086 # TRAIN_PEERS_ARGS: options for train_peers.py, e.g. "--variants fast"
        run_step train-peers "$train_limit" env PYTHONUNBUFFERED=1 python3 bench/train_peers.py --peers "$PEER_DIR" \
            --csv "$OUT/train_peers.csv" ${TRAIN_PEERS_ARGS:-}
    fi
else
    skip_step peers --no-peers
fi

# ---- summary -----------------------------------------------------------------------------------------
{
    for i in "${!step_names[@]}"; do
        case ${step_results[$i]} in
        pass | skipped*) ;;
        *)
            echo "---- ${step_names[$i]}: ${step_results[$i]}; the end of logs/${step_names[$i]}.log:"
            tail -n 15 "$LOGS/${step_names[$i]}.log"
            ;;
        esac
    done
    echo
    python3 - "$OUT/tapegrad.csv" "$OUT/peers.csv" "$OUT/short-rows.csv" <<'PY'
import csv, os, sys

def read(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))

def num(row, key):
    try:
        value = float(row[key])
        return "-" if value != value else f"{value:.0f}" if value >= 100 else f"{value:.1f}"
    except (KeyError, TypeError, ValueError):
        return "-"

# "*" marks a row whose forward + backward ran while the driver held the SM clock down
# (NVML's clock reasons, e.g. the power cap): its times do not compare with the other rows'.
def flags(row):
    return "*" if row.get("clock_reasons", "0") not in ("0", "") else ""

ours, peers = read(sys.argv[1]) + read(sys.argv[3]), read(sys.argv[2])
by_key = {(p["peer"], p["B"], p["C"], p["L"], p["dtype"], p["layout"], p["K"]): p for p in peers}
if not ours:
    print("no tapegrad benchmark rows")
    sys.exit(0)
print("benchmark (median us; % of the measured copy bandwidth for the floor's bytes; MHz: the SM clock during tapegrad's fwd+bwd)")
print(f"{'B x C x L':<14} {'dt':<4} {'ly':<2} {'K':>1} | {'tg fwd':>7} {'%':>3} {'tg f+b':>7} {'%':>3} "
      f"| {'comp fwd':>8} {'comp f+b':>8} | {'cudnn fwd':>9} {'cudnn f+b':>9} | {'clone':>6} {'x copy':>6} {'MHz':>5} {'ok':>3}")
for r in ours:
    key = (r["B"], r["C"], r["L"], r["dtype"], r["layout"])
    compiled = by_key.get(("compiled" if r["layout"] == "cf" else "compiled-cl",) + key + (r["K"],), {})
    cudnn = by_key.get(("cudnn",) + key + (r["K"],), {})
    clone = by_key.get(("clone",) + key + ("0",), {})
    pct = lambda k: num(r, k).split(".")[0]
    ok = ("ok" if r["status"] == "ok" else "NO") + flags(r)
    print(f"{r['B'] + 'x' + r['C'] + 'x' + r['L']:<14} {r['dtype']:<4} {r['layout']:<2} {r['K']:>1} | "
          f"{num(r, 'fwd_us'):>7} {pct('fwd_pct_copy'):>3} {num(r, 'fwdbwd_us'):>7} {pct('fwdbwd_pct_copy'):>3} | "
          f"{num(compiled, 'fwd_us'):>8} {num(compiled, 'fwdbwd_us'):>8} | "
          f"{num(cudnn, 'fwd_us'):>9} {num(cudnn, 'fwdbwd_us'):>9} | {num(clone, 'fwd_us'):>6} {num(r, 'xcopy_us'):>6} "
          f"{num(r, 'fwdbwd_sm_mhz'):>5} {ok:>3}")
copy = ours[0].get("copy_GBps", "")
peer_copy = peers[0].get("copy_GBps", "") if peers else ""
print(f"copy bandwidth: tapegrad run {copy} GB/s, peers run {peer_copy} GB/s")
if any(flags(r) for r in ours):
    print("ok*: the driver held the SM clock down while the row's fwd+bwd ran (the CSV's clock_reasons)")
PY
    python3 - "$OUT/train.csv" "$OUT/train_peers.csv" "$OUT/scan.csv" "$OUT/scan_peers.csv" <<'PY'
import csv, os, sys

def read(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return [r for r in csv.DictReader(f)]

ours, peers = read(sys.argv[1]), read(sys.argv[2])
if ours:
    print("\ntraining step (median ms; best PyTorch variant of the same precision; x: PyTorch / tapegrad)")
    print(f"{'size':<16} {'dt':<4} {'graph':<5} | {'tapegrad':>9} {'peak MiB':>9} | {'torch best':>10} {'variant':<14} {'peak MiB':>9} | {'x':>5}")
    for r in ours:
        same = [p for p in peers if p["size"] == r["size"] and p["precision"] == r["precision"]]
        best = min(same, key=lambda p: float(p["median_ms"])) if same else None
        ratio = f"{float(best['median_ms']) / float(r['median_ms']):.2f}" if best else "-"
        print(f"{r['size']:<16} {r['precision']:<4} {r['graph']:<5} | {float(r['median_ms']):9.3f} {float(r['peak_mib']):9.0f} | "
              f"{float(best['median_ms']) if best else float('nan'):10.3f} {best['impl'] if best else '-':<14} "
              f"{float(best['peak_mib']) if best else float('nan'):9.0f} | {ratio:>5}")
scan = [r for r in read(sys.argv[3]) if r.get("impl") == "tapegrad"]
mamba = {(r["B"], r["D"], r["N"], r["L"], r["dtype"]): r for r in read(sys.argv[4]) if r.get("impl") == "mamba-ssm"}
if scan and mamba:
    print("\nselective scan (median us; x: mamba-ssm / tapegrad)")
    print(f"{'B, D, N, L':<18} {'dt':<4} | {'tg fwd':>8} {'mamba fwd':>9} {'x':>5} | {'tg f+b':>8} {'mamba f+b':>9} {'x':>5}")
    for r in scan:
        m = mamba.get((r["B"], r["D"], r["N"], r["L"], r["dtype"]))
        if not m:
            continue
        x = lambda k: f"{float(m[k]) / float(r[k]):.2f}" if float(r[k]) > 0 else "-"
        print(f"{r['B'] + ', ' + r['D'] + ', ' + r['N'] + ', ' + r['L']:<18} {r['dtype']:<4} | {float(r['fwd_us']):8.1f} "
              f"{float(m['fwd_us']):9.1f} {x('fwd_us'):>5} | {float(r['fwdbwd_us']):8.1f} {float(m['fwdbwd_us']):9.1f} {x('fwdbwd_us'):>5}")
PY
    echo
    echo "steps (total ${SECONDS}s of ${BUDGET}s):"
    for i in "${!step_names[@]}"; do
        printf '  %-32s %5ss  %s\n' "${step_names[$i]}" "${step_seconds[$i]}" "${step_results[$i]}"
    done
} | tee "$OUT/summary.txt"

failed=0
for result in "${step_results[@]}"; do
    case $result in pass | skipped*) ;; *) failed=1 ;; esac
done
exit $failed
