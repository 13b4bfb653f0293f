// kernels/cuda/conv1d/rows_forward.cu: the forward kernels of channel-first rows: in registers
// (one row, rows in turn, rows side by side) and staged in shared memory.
#include "kernels/cuda/conv1d/rows.cuh"
#include "kernels/cuda/conv1d/tensor_cores.cuh"

namespace {
using namespace tg_conv1d;

// The forward's maths for EPT steps: out[e] = act(bias + Σ_i wl[i]·xw[KB − 1 + e − i]), where
// xw starts KB − 1 steps before the first output step.
template <int KB, int EPT>
__device__ inline void forward_window(const float (&wl)[KB], float bias, const float *xw, bool silu, float (&out)[EPT])
{
#pragma unroll
    for (int e = 0; e < EPT; e++) {
        float z = bias;
#pragma unroll
        for (int i = 0; i < KB; i++) z += wl[i] * xw[KB - 1 + e - i];
        out[e] = activate(z, silu);
    }
}

// The forward in registers, for f32 and for short rows: each thread loads its EPT steps
// straight into registers and takes the K − 1 before them from the neighbouring lane by a
// shuffle. It has no shared memory and no barriers, and measured faster than the staged
// forward below except on long 16-bit rows (docs/benchmarks.md). chunks blocks per (b, c)
// row, each making up to `passes` passes of chunk_len steps.
// The K−1 steps left of each thread's window, x[t0 − (KB−1)] … x[t0 − 1], mostly taken from
// the neighbouring lanes' registers (a shuffle instead of a second read); the first lanes of
// a warp read theirs from memory (or the history). All 32 lanes must call this, also those
// whose window lies past the row's end (they read nothing there: their result is unused).
template <typename T, int KB, int EPT>
__device__ inline void left_halo(const conv_args &a, const T *x, bool vec_x, int64_t b, int64_t c, int64_t t0,
                                 const float *body, float *halo)
{
    const int lane = threadIdx.x % 32;
    constexpr int V = vec_width<T>(), NV = (KB - 1 + V - 1) / V, LOADERS = (KB - 1 + EPT - 1) / EPT;
    // From K = 8 on the first lanes take their steps before the warp's window as 16-byte
    // vectors where the row allows, instead of one load and branch per step, which measured
    // faster in f32 (docs/benchmarks.md).
    float before[NV * V]; // x[t0 − NV·V] … x[t0 − 1]
    const bool vectors = KB >= 8 && lane < LOADERS && vec_x && t0 >= NV * V && t0 <= a.L;
    if (vectors) {
#pragma unroll
        for (int q = 0; q < NV; q++) unpack16<T>(*(const uint4 *)(x + t0 - (NV - q) * V), before + q * V);
    }
#pragma unroll
    for (int m = 1; m < KB; m++) {
        const int q = (m + EPT - 1) / EPT; // step t0 − m is in lane − q's window, at EPT·q − m
        float v = __shfl_up_sync(0xffffffffu, body[EPT * q - m], q);
        if (lane < q)
            v = vectors         ? before[NV * V - m]
                : t0 - m >= a.L ? 0.0f
                : t0 - m >= 0   ? tg_to_float(x[t0 - m])
                                : history_at<T>(a, b, c, t0 - m);
        halo[KB - 1 - m] = v;
    }
}

// left_halo for rows of whole aligned vectors (the grouped forward's): every thread's steps
// start at a multiple of EPT, so the KB − 1 steps before lane 0's window are the previous
// warp's last ones, and lane 0 takes them with one or two 16-byte loads instead of a load and
// a branch per step (each load waited for before the next: at K = 8 seven in a row, per row).
// A thread past the row's end loads nothing (it stores nothing). With ROWS_IN_WARP a warp
// holds several rows (row_fwd_side_by_side): a thread at a row's first step takes the
// history (or zeros) instead of the previous lane's steps, which belong to another row.
template <typename T, int KB, int EPT, bool ROWS_IN_WARP = false>
__device__ inline void aligned_left_halo(const conv_args &a, const T *x, int64_t b, int64_t c, int64_t t0,
                                         const float *body, float *halo)
{
    constexpr int V = vec_width<T>(), NV = (KB - 1 + V - 1) / V; // vectors holding the halo
    static_assert(KB - 1 <= EPT, "the halo lies in the previous lane's window");
#pragma unroll
    for (int m = 1; m < KB; m++) halo[KB - 1 - m] = __shfl_up_sync(0xffffffffu, body[EPT - m], 1);
    const bool own_halo = threadIdx.x % 32 == 0 || (ROWS_IN_WARP && t0 == 0);
    if (!own_halo || t0 >= a.L) return;
    if (t0 >= NV * V) {
        float before[NV * V]; // x[t0 − NV·V] … x[t0 − 1]
#pragma unroll
        for (int q = 0; q < NV; q++) unpack16<T>(*(const uint4 *)(x + t0 - (NV - q) * V), before + q * V);
#pragma unroll
        for (int m = 1; m < KB; m++) halo[KB - 1 - m] = before[NV * V - m];
    } else { // the row's first steps: the history, or zeros
#pragma unroll
        for (int m = 1; m < KB; m++) halo[KB - 1 - m] = history_at<T>(a, b, c, t0 - m);
    }
}

// win[j] = row[t0 + j] for j in [0, N), 0 past the end (vector loads where aligned and inside
// the row). The row kernels only run on rows with stride 1 along L (or L = 1).
template <typename T, int N>
__device__ inline void load_row(const T *row, bool vec_ok, int64_t L, int64_t t0, float *win)
{
    constexpr int V = vec_width<T>();
    if (vec_ok && t0 + N <= L) {
#pragma unroll
        for (int q = 0; q < N / V; q++) unpack16<T>(*(const uint4 *)(row + t0 + q * V), win + q * V);
    } else {
#pragma unroll
        for (int e = 0; e < N; e++) win[e] = t0 + e < L ? tg_to_float(row[t0 + e]) : 0.0f;
    }
}

// The direct forward's passes over row (b, c): chunk_len steps each, from this block's chunk.
template <typename T, int KB>
__device__ inline void row_fwd_direct_passes(const conv_args &a, const row_plan &plan, int64_t b, int64_t c,
                                             unsigned chunk, const float (&wl)[KB], float bias)
{
    constexpr int EPT = row_ept<T>();
    const T *x = row_of<T>(a.x, b, c);
    T *y = row_of<T>(a.y, b, c);
    for (int pass = 0; pass < plan.passes; pass++) {
        const int64_t base = (chunk * plan.passes + pass) * plan.chunk_len;
        if (base >= a.L) break; // uniform across the block
        const int64_t t0 = base + (int64_t)threadIdx.x * EPT;
        float win[KB - 1 + EPT]; // x[t0 − (KB−1)] … x[t0 + EPT − 1]
        load_row<T, EPT>(x, plan.vec_x, a.L, t0, win + KB - 1);
        left_halo<T, KB, EPT>(a, x, plan.vec_x, b, c, t0, win + KB - 1, win);
        if (t0 >= a.L) continue;
        float out[EPT];
        forward_window<KB, EPT>(wl, bias, win, a.silu, out);
        store_row<T, EPT>(y, plan.vec_y, a.L, t0, out);
    }
}

// Rows first_b … first_b + ROWS − 1 of channel c, each one pass of whole 16-byte vectors per
// thread (aligned rows, L a multiple of EPT: the host's choice), the next row's x asked for
// before this row is computed, so a block keeps loads in flight while it computes. Only this
// path is compiled into the ROWS > 1 kernels: with the general one beside it (rows not
// aligned, a last thread inside the row) ptxas gave them 72 registers at K = 4 instead of 48,
// and with the loop over rows unrolled 80.
template <typename T, int KB, int ROWS>
__device__ inline void row_fwd_direct_rows(const conv_args &a, bool vec_y, int64_t first_b, int64_t c,
                                           const float (&wl)[KB], float bias)
{
    constexpr int EPT = row_ept<T>(), V = vec_width<T>();
    const int64_t t0 = (int64_t)threadIdx.x * EPT;
    uint4 ahead[EPT / V]; // x[t0 … t0 + EPT − 1] of the next row, as stored
    // Threads past the row's end load nothing: what they hold is never stored, and the halo's
    // shuffles carry values only to later lanes, which lie past the end too.
    auto fetch = [&](int64_t b) {
        if (t0 >= a.L) return;
        const T *x = row_of<T>(a.x, b, c);
#pragma unroll
        for (int q = 0; q < EPT / V; q++) ahead[q] = *(const uint4 *)(x + t0 + q * V);
    };
    fetch(first_b);
#pragma unroll 1
    for (int r = 0; r < ROWS; r++) {
        const int64_t b = first_b + r;
        if (b >= a.B) break;     // uniform across the block
        float win[KB - 1 + EPT]; // x[t0 − (KB−1)] … x[t0 + EPT − 1]
#pragma unroll
        for (int q = 0; q < EPT / V; q++) unpack16<T>(ahead[q], win + KB - 1 + q * V);
        if (r + 1 < ROWS && b + 1 < a.B) fetch(b + 1);
        aligned_left_halo<T, KB, EPT>(a, row_of<T>(a.x, b, c), b, c, t0, win + KB - 1, win);
        if (t0 >= a.L) continue;
        float out[EPT];
        forward_window<KB, EPT>(wl, bias, win, a.silu, out);
        store_row<T, EPT>(row_of<T>(a.y, b, c), vec_y, a.L, t0, out);
    }
}

// Chunks blocks per (b, c) row, each making up to `passes` passes.
template <typename T, int KB> __global__ void __launch_bounds__(kBlock) row_fwd_direct(conv_args a, row_plan plan)
{
    // 32-bit divisions (the grid fits an int): blocks of short rows make one pass, so this
    // arithmetic is a real share of their work.
    const unsigned chunks = (unsigned)plan.chunks, row = blockIdx.x / chunks, chunk = blockIdx.x % chunks;
    const int64_t b = row / (unsigned)a.C, c = row % (unsigned)a.C;
    float wl[KB];
    const float bias = load_taps<T, KB>(a, c, wl);
    row_fwd_direct_passes<T, KB>(a, plan, b, c, chunk, wl, bias);
}

// Resident blocks per SM the grouped forward is compiled for: the registers it used when
// nothing told ptxas (48 at K ≤ 4, 64 at K = 8, 118 at K = 16), which small changes to the
// kernel moved by up to 30 (K = 8: 94 registers, 5 blocks per SM instead of 8). At K = 16 the
// f16 kernel now spills 8 bytes under it.
template <int KB> constexpr int grouped_forward_min_blocks() { return KB <= 4 ? 10 : KB <= 8 ? 8 : 4; }

// Short rows (direct_forward_rows): a block per ROWS rows of a channel, which loads the
// channel's taps once for all of them (row_fwd_direct_rows), on a grid of C × ⌈B / ROWS⌉
// blocks, so that a block finds its channel and rows without a division. A block of 2 rows
// used to spend about a third of its code before its first row: the division, 64-bit
// arithmetic per tap, the loads. With this grid, the taps loaded by one stepped pointer
// (load_taps) and the halo by aligned_left_halo, the forward measured faster on the short
// rows (docs/benchmarks.md).
template <typename T, int KB, int ROWS>
__global__ void __launch_bounds__(kBlock, grouped_forward_min_blocks<KB>())
    row_fwd_direct_grouped(conv_args a, bool vec_y)
{
    const int64_t c = blockIdx.x, first_b = (int64_t)blockIdx.y * ROWS;
    float wl[KB];
    const float bias = load_taps<T, KB>(a, c, wl);
    row_fwd_direct_rows<T, KB, ROWS>(a, vec_y, first_b, c, wl, bias);
}

// Rows shorter than a warp's steps, and some rows of exactly a warp's steps
// (forward_rows_side_by_side): one row per block would leave lanes idle (bf16 at L = 256: 16
// of 32), and rows in turn (row_fwd_direct_grouped) leave them idle too. Here a block takes
// `rows` rows of its channel side by side, L / EPT threads each, all at once; threads past
// them (the block is whole warps) or past B compute nothing. On a C × ⌈B / rows⌉ grid. On
// the shortest rows it measured much faster than rows one to a block or in turn
// (docs/benchmarks.md).
template <typename T, int KB>
__global__ void __launch_bounds__(kBlock, grouped_forward_min_blocks<KB>())
    row_fwd_side_by_side(conv_args a, int rows, bool vec_y)
{
    constexpr int EPT = row_ept<T>(), V = vec_width<T>();
    const int64_t c = blockIdx.x;
    const side_by_side_place place = side_by_side_place_of<EPT>(a.L);
    const int64_t b = (int64_t)blockIdx.y * rows + place.row;
    const bool active = place.row < rows && b < a.B;
    // An idle thread takes steps past the row's end: it loads and stores nothing.
    const int64_t t0 = active ? place.t0 : a.L;
    float wl[KB];
    const float bias = load_taps<T, KB>(a, c, wl);
    const T *x = row_of<T>(a.x, active ? b : 0, c);
    float win[KB - 1 + EPT]; // x[t0 − (KB−1)] … x[t0 + EPT − 1]
    if (active)
#pragma unroll
        for (int q = 0; q < EPT / V; q++) unpack16<T>(*(const uint4 *)(x + t0 + q * V), win + KB - 1 + q * V);
    aligned_left_halo<T, KB, EPT, true>(a, x, b, c, t0, win + KB - 1, win);
    if (!active) return;
    float out[EPT];
    forward_window<KB, EPT>(wl, bias, win, a.silu, out);
    store_row<T, EPT>(row_of<T>(a.y, b, c), vec_y, a.L, t0, out);
}

// The staged forward, for long aligned 16-bit rows (at K = 8 its shared-memory halo measured
// faster than the direct forward's seven shuffles and first-lane loads per pass,
// docs/benchmarks.md) and for aligned f32 rows at K = 9–16 (forward_may_stage).
// Its walk is a producer/consumer pipeline without block-wide barriers: thread 0 stages each
// span (stage_span_alone) two ahead of the one being computed, into one of four buffers, and
// before it reuses a buffer it waits until every thread has said, on that buffer's `consumed`
// barrier, that it is done with it. A thread that finishes a span goes on to the next as soon
// as that one has arrived, so the warps of a block are not held in step (a block barrier per
// span measured slightly slower). The backward keeps
// walk_spans: there the pipeline measured slower.
constexpr int kForwardStages = 4, kForwardAhead = 2;

// Thread 0 alone stages x[first, first + count) of an aligned row (b, c) into dst: the whole
// vectors inside the row by one bulk copy, the history before step 0 and a last, partial
// vector element by element. Steps from L on are left unstaged: the forward computes
// outputs there but never stores them, so what the buffer holds there does not matter,
// except on tensor cores (ZERO_TAIL), where a product with a zero tap still turns a NaN
// into a NaN: there they are zeroed.
template <typename T, bool ZERO_TAIL>
__device__ inline void stage_span_alone(const conv_args &a, int64_t b, int64_t c, int64_t first, int count, T *dst,
                                        uint64_t *ready)
{
    constexpr int V = vec_width<T>();
    const T *row = row_of<T>(a.x, b, c);
    const int64_t end = first + count, inside_end = a.L - a.L % V;
    const int64_t lo = first > 0 ? first : 0, hi = end < inside_end ? end : inside_end;
    if (hi > lo) {
#if TG_BULK_COPY
        bulk_copy_to_shared(dst + (lo - first), row + lo, (unsigned)((hi - lo) * sizeof(T)), ready);
#else // built for an older GPU: correct, but one thread copies the span
        for (int64_t u = lo; u < hi; u += V) *(uint4 *)(dst + (u - first)) = *(const uint4 *)(row + u);
#endif
    }
    for (int64_t u = first; u < lo && u < end; u++) dst[u - first] = tg_from_float<T>(history_at<T>(a, b, c, u));
    for (int64_t u = hi > lo ? hi : lo; u < end && u < a.L; u++) dst[u - first] = row[u];
    if constexpr (ZERO_TAIL) {
        int64_t u = a.L > first ? a.L : first;
        for (; u < end && (u - first) % V; u++) dst[u - first] = tg_from_float<T>(0.0f);
        for (; u < end; u += V) *(uint4 *)(dst + (u - first)) = make_uint4(0, 0, 0, 0);
    }
}

// The walk: stage(span, buffer) runs on thread 0 only; compute(span, buffer) on every thread
// once the span is in; setup() while the first spans are in flight. Buffer uses are counted
// per buffer, so the n-th use of a buffer waits for parity n & 1 of its barriers.
template <typename Stage, typename Setup, typename Compute>
__device__ inline void walk_spans_pipelined(const row_run &run, const row_plan &plan, uint64_t (&ready)[kForwardStages],
                                            uint64_t (&consumed)[kForwardStages], Stage stage, Setup setup,
                                            Compute compute)
{
    const int spans = (int)plan.spans;
    row_span current(spans, 1, run.first), ahead = current;
    int staged = 0; // thread 0's count of spans staged
    auto stage_ahead = [&] {
        const int buffer = staged % kForwardStages, use = staged / kForwardStages;
        if (use > 0) arrival_wait(&consumed[buffer], (use - 1) & 1); // its last span is done with
        async_copies_follow();
        stage(ahead, buffer);
        arrival_arrive(&ready[buffer]);
        ahead.advance(spans, 1);
        staged++;
    };
    if (threadIdx.x == 0) {
        for (int i = 0; i < kForwardStages; i++) {
            arrival_barrier_init(&ready[i]);
            arrival_barrier_init(&consumed[i], blockDim.x);
        }
        arrival_barriers_published();
        while (staged < kForwardAhead && staged < run.count) stage_ahead();
    }
    setup();
    __syncthreads(); // the barriers are initialised
    for (int pass = 0; pass < run.count; pass++) {
        if (threadIdx.x == 0 && staged < run.count) stage_ahead();
        const int buffer = pass % kForwardStages;
        arrival_wait(&ready[buffer], (pass / kForwardStages) & 1);
        compute(current, buffer);
        arrival_arrive(&consumed[buffer]);
        current.advance(spans, 1);
    }
}

template <typename T, int KB, bool SILU>
__global__ void __launch_bounds__(kBlock) row_fwd_staged(conv_args a, row_plan plan)
{
    using S = row_shape<T, KB>;
    constexpr int EPT = S::EPT, H = S::H;
    // Static shared memory here: this kernel only runs on long rows (full blocks), and the
    // same buffers in dynamic shared memory measured slower.
    constexpr int XN = kBlock * EPT + H; // x over [t0 − H, t0 + ch), ch ≤ kBlock · EPT
    __shared__ alignas(16) T xs[kForwardStages][XN];
    __shared__ uint64_t ready[kForwardStages], consumed[kForwardStages];
    const row_run run = row_run_of(a, plan);
    const int64_t c = run.c;
    const int ch = plan.chunk_len, xn = ch + H;
    constexpr bool kTensorCores = forward_on_tensor_cores<T, KB>();
    auto stage = [&](row_span span, int buf) { // thread 0
        const int64_t first = (int64_t)span.index * ch - H;
        if (plan.is_inner(span.index)) // the common case: one copy
            bulk_copy_to_shared(xs[buf], row_of<T>(a.x, span.b, c) + first, xn * sizeof(T), &ready[buf]);
        else
            stage_span_alone<T, kTensorCores>(a, span.b, c, first, xn, xs[buf], &ready[buf]);
    };
    if constexpr (kTensorCores) { // a warp's 512 steps as two tiles of 16 × 16 (tensor_core_z)
        tensor_core_z<KB> zt;
        __shared__ uint4 ops[64];
        const int warp_first = threadIdx.x / 32 * 32 * EPT;
        auto compute = [&](row_span span, int buf) {
            const int64_t t_first = (int64_t)span.index * ch + warp_first;
            if (t_first >= a.L) return; // uniform across the warp
            const tile_rows rows(tensor_core_z<KB>::kWide);
            const bool pairs = plan.vec_y && t_first + 32 * EPT <= a.L;
            __nv_bfloat16 *out = row_of<__nv_bfloat16>(a.y, span.b, c);
            unsigned wc[2][2], wp[2][2];
            zt.operands(wc, wp);
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                unsigned x[4], xp[4];
                float z[2][4];
                zt.load_x(xs[buf] + H + warp_first + 256 * mt, rows, x, xp);
                zt.tile(x, xp, wc, wp, z);
#pragma unroll
                for (int e = 0; e < 8; e++) z[e / 4][e % 4] = activate(z[e / 4][e % 4], SILU);
                store_tile(out, a.L, pairs, t_first + 256 * mt, z, [](int64_t, float v) { return v; });
            }
        };
        walk_spans_pipelined(
            run, plan, ready, consumed, stage, [&] { zt.setup(a, c, ops); }, compute);
        return;
    }
    float wl[KB];
    float bias = 0.0f;
    auto compute = [&](row_span span, int buf) {
        const int64_t t0 = (int64_t)span.index * ch + (int64_t)threadIdx.x * EPT;
        if (t0 >= a.L) return;
        float xv[EPT + H]; // x from t0 − H
        read_shared<T, EPT + H>(xs[buf] + threadIdx.x * EPT, xv);
        const float *xw = xv + H - (KB - 1); // xw[KB − 1 + e − i] = x[t0 + e − i]
        float out[EPT];
        forward_window<KB, EPT>(wl, bias, xw, SILU, out);
        store_row<T, EPT>(row_of<T>(a.y, span.b, c), plan.vec_y, a.L, t0, out);
    };
    walk_spans_pipelined(
        run, plan, ready, consumed, stage, [&] { bias = load_taps<T, KB>(a, c, wl); }, compute);
}

} // namespace

namespace tg_conv1d {

template <typename T, int KB> auto row_fwd_direct_instance() -> void (*)(conv_args, row_plan)
{
    return ::row_fwd_direct<T, KB>;
}
template auto row_fwd_direct_instance<float, 2>() -> void (*)(conv_args, row_plan);
template auto row_fwd_direct_instance<float, 3>() -> void (*)(conv_args, row_plan);
template auto row_fwd_direct_instance<float, 4>() -> void (*)(conv_args, row_plan);
template auto row_fwd_direct_instance<float, 8>() -> void (*)(conv_args, row_plan);
template auto row_fwd_direct_instance<float, 16>() -> void (*)(conv_args, row_plan);
template auto row_fwd_direct_instance<__nv_bfloat16, 2>() -> void (*)(conv_args, row_plan);
template auto row_fwd_direct_instance<__nv_bfloat16, 3>() -> void (*)(conv_args, row_plan);
template auto row_fwd_direct_instance<__nv_bfloat16, 4>() -> void (*)(conv_args, row_plan);
template auto row_fwd_direct_instance<__nv_bfloat16, 8>() -> void (*)(conv_args, row_plan);
template auto row_fwd_direct_instance<__nv_bfloat16, 16>() -> void (*)(conv_args, row_plan);
template auto row_fwd_direct_instance<__half, 2>() -> void (*)(conv_args, row_plan);
template auto row_fwd_direct_instance<__half, 3>() -> void (*)(conv_args, row_plan);
template auto row_fwd_direct_instance<__half, 4>() -> void (*)(conv_args, row_plan);
template auto row_fwd_direct_instance<__half, 8>() -> void (*)(conv_args, row_plan);
template auto row_fwd_direct_instance<__half, 16>() -> void (*)(conv_args, row_plan);

template <typename T, int KB, int ROWS> auto row_fwd_direct_grouped_instance() -> void (*)(conv_args, bool)
{
    return ::row_fwd_direct_grouped<T, KB, ROWS>;
}
template auto row_fwd_direct_grouped_instance<__nv_bfloat16, 3, 2>() -> void (*)(conv_args, bool);
template auto row_fwd_direct_grouped_instance<__nv_bfloat16, 4, 2>() -> void (*)(conv_args, bool);
template auto row_fwd_direct_grouped_instance<__nv_bfloat16, 8, 4>() -> void (*)(conv_args, bool);
template auto row_fwd_direct_grouped_instance<__nv_bfloat16, 16, 4>() -> void (*)(conv_args, bool);
template auto row_fwd_direct_grouped_instance<__half, 3, 2>() -> void (*)(conv_args, bool);
template auto row_fwd_direct_grouped_instance<__half, 4, 2>() -> void (*)(conv_args, bool);
template auto row_fwd_direct_grouped_instance<__half, 8, 4>() -> void (*)(conv_args, bool);
template auto row_fwd_direct_grouped_instance<__half, 16, 4>() -> void (*)(conv_args, bool);

template <typename T, int KB> auto row_fwd_side_by_side_instance() -> void (*)(conv_args, int, bool)
{
    return ::row_fwd_side_by_side<T, KB>;
}
template auto row_fwd_side_by_side_instance<float, 2>() -> void (*)(conv_args, int, bool);
template auto row_fwd_side_by_side_instance<float, 3>() -> void (*)(conv_args, int, bool);
template auto row_fwd_side_by_side_instance<float, 4>() -> void (*)(conv_args, int, bool);
template auto row_fwd_side_by_side_instance<float, 8>() -> void (*)(conv_args, int, bool);
template auto row_fwd_side_by_side_instance<__nv_bfloat16, 2>() -> void (*)(conv_args, int, bool);
template auto row_fwd_side_by_side_instance<__nv_bfloat16, 3>() -> void (*)(conv_args, int, bool);
template auto row_fwd_side_by_side_instance<__nv_bfloat16, 4>() -> void (*)(conv_args, int, bool);
template auto row_fwd_side_by_side_instance<__nv_bfloat16, 8>() -> void (*)(conv_args, int, bool);
template auto row_fwd_side_by_side_instance<__nv_bfloat16, 16>() -> void (*)(conv_args, int, bool);
template auto row_fwd_side_by_side_instance<__half, 2>() -> void (*)(conv_args, int, bool);
template auto row_fwd_side_by_side_instance<__half, 3>() -> void (*)(conv_args, int, bool);
template auto row_fwd_side_by_side_instance<__half, 4>() -> void (*)(conv_args, int, bool);
template auto row_fwd_side_by_side_instance<__half, 8>() -> void (*)(conv_args, int, bool);
template auto row_fwd_side_by_side_instance<__half, 16>() -> void (*)(conv_args, int, bool);

template <typename T, int KB, bool SILU> auto row_fwd_staged_instance() -> void (*)(conv_args, row_plan)
{
    return ::row_fwd_staged<T, KB, SILU>;
}
template auto row_fwd_staged_instance<float, 16, false>() -> void (*)(conv_args, row_plan);
template auto row_fwd_staged_instance<float, 16, true>() -> void (*)(conv_args, row_plan);
template auto row_fwd_staged_instance<__nv_bfloat16, 8, false>() -> void (*)(conv_args, row_plan);
template auto row_fwd_staged_instance<__nv_bfloat16, 8, true>() -> void (*)(conv_args, row_plan);
template auto row_fwd_staged_instance<__nv_bfloat16, 16, false>() -> void (*)(conv_args, row_plan);
template auto row_fwd_staged_instance<__nv_bfloat16, 16, true>() -> void (*)(conv_args, row_plan);
template auto row_fwd_staged_instance<__half, 8, false>() -> void (*)(conv_args, row_plan);
template auto row_fwd_staged_instance<__half, 8, true>() -> void (*)(conv_args, row_plan);
template auto row_fwd_staged_instance<__half, 16, false>() -> void (*)(conv_args, row_plan);
template auto row_fwd_staged_instance<__half, 16, true>() -> void (*)(conv_args, row_plan);

} // namespace tg_conv1d
