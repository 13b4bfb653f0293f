// kernels/cuda/conv1d/tiles.cu: the tile kernels, for the layouts the stream kernels do not take.
#include "kernels/cuda/conv1d/step_maths.cuh"
#include "kernels/cuda/conv1d/tiles.cuh"

namespace {
using namespace tg_conv1d;

// ---- tile kernels (the layouts the stream kernels do not take) ------------------------------------

// dst[r][j] = v[b, c0 + j, t_first + r], for r < ROWS and j < kTileC: 0 past the end of C or
// L; before step 0, x's history (X_HISTORY) or 0. Every thread of the block takes part; the
// caller waits (copies_wait_all, then a barrier) before reading. With `vectorised` (stride 1
// along C, aligned), vectors inside the tensor are copied 16 bytes at a time; the vectors
// at the edges (history, past the end of C or L) and the odd layouts go element by element.
template <typename T, int ROWS, bool X_HISTORY>
__device__ inline void stage_tile(const conv_args &a, const t3 &v, bool vectorised, int64_t b, int64_t c0,
                                  int64_t t_first, T (*dst)[kTileC])
{
    constexpr int V = vec_width<T>();
    constexpr int VPR = kTileC / V; // vectors per tile row
    static_assert(kBlock % VPR == 0, "each thread keeps its column of vectors");
    if (vectorised && t_first >= 0 && t_first + ROWS <= a.L && c0 + kTileC <= a.C) { // the whole tile inside
        const int j = threadIdx.x % VPR * V;
        const T *src = (const T *)v.p + (b * v.s0 + (c0 + j) * v.s1 + (t_first + threadIdx.x / VPR) * v.s2);
        const int64_t row_step = (int64_t)(kBlock / VPR) * v.s2;
        for (int r = threadIdx.x / VPR; r < ROWS; r += kBlock / VPR, src += row_step) copy16_async(&dst[r][j], src);
        return;
    }
    for (int idx = threadIdx.x; idx < ROWS * VPR; idx += kBlock) {
        const int r = idx / VPR, j = idx % VPR * V;
        const int64_t t = t_first + r, c = c0 + j;
        if (vectorised && t >= 0 && t < a.L && c + V <= a.C) {
            copy16_async(&dst[r][j], v.p + (b * v.s0 + c * v.s1 + t * v.s2) * (int64_t)sizeof(T));
            continue;
        }
        for (int e = 0; e < V; e++) {
            const bool inside = c + e < a.C && t < a.L;
            float value = !inside     ? 0.0f
                          : t >= 0    ? ld<T>(v, b, c + e, t)
                          : X_HISTORY ? history_at<T>(a, b, c + e, t)
                                      : 0.0f;
            dst[r][j + e] = tg_from_float<T>(value); // exact: the value came from a T
        }
    }
}

// How a tile kernel's threads cover the 64 channels × 64 steps of a tile: CPT neighbouring
// channels each (two, read and written as one 4- or 8-byte pair, while the registers allow),
// and LANES threads one after the other along time for each channel group, LS steps each.
template <typename T, int KB> struct tile_shape {
    static constexpr int CPT = KB <= 8 ? 2 : 1;
    static constexpr int GROUPS = kTileC / CPT; // channel groups per tile (threads per time lane)
    static constexpr int LANES = kBlock / GROUPS;
    static constexpr int LS = kTileT / LANES;
};

// v[q] = p[q] as float for q < CPT (p: a shared-memory tile row, CPT-aligned).
template <typename T, int CPT> __device__ inline void read_channels(const T *p, float (&v)[CPT])
{
    if constexpr (CPT == 1) {
        v[0] = tg_to_float(p[0]);
    } else if constexpr (sizeof(T) == 4) {
        const float2 pair = *(const float2 *)p;
        v[0] = pair.x;
        v[1] = pair.y;
    } else {
        unpack2(*(const unsigned *)p, v[0], v[1], T());
    }
}

// p[q·stride] = v[q] for the `count` channels inside C; one paired store when allowed.
template <typename T, int CPT>
__device__ inline void write_channels(T *p, int64_t stride, bool pair_ok, int count, const float (&v)[CPT])
{
    if constexpr (CPT == 2) {
        if (pair_ok && count == 2) {
            if constexpr (sizeof(T) == 4)
                *(float2 *)p = make_float2(v[0], v[1]);
            else
                *(unsigned *)p = pack2(v[0], v[1], T());
            return;
        }
    }
#pragma unroll
    for (int q = 0; q < CPT; q++)
        if (q < count) p[q * stride] = tg_from_float<T>(v[q]);
}

// Tiles a tile kernel keeps in shared memory: two where two fit in the 48 KB of static shared
// memory (16-bit data), so the next tile's loads are in flight while this one is computed;
// else one (f32, which is near the copy bandwidth without the overlap).
template <int TILE_BYTES> __host__ __device__ constexpr int tile_buffers()
{
    return 2 * TILE_BYTES <= 48 * 1024 ? 2 : 1;
}

// The walk over a block's tiles along L that both tile kernels share: stage(t0, buffer)
// issues the copies of the tile starting at step t0, compute(t0, buffer) works on it once
// every thread's copies have landed.
template <int BUFFERS, typename Stage, typename Compute>
__device__ inline void walk_tiles(const conv_args &a, const tile_plan &plan, Stage stage, Compute compute)
{
    const int64_t first = (int64_t)blockIdx.x * plan.passes, tiles = (a.L + kTileT - 1) / kTileT;
    const int count = (int)(tiles - first < plan.passes ? tiles - first : plan.passes); // ≥ 1: the grid
    if (BUFFERS == 2) {
        stage(first * kTileT, 0);
        copies_commit();
    }
    for (int pass = 0; pass < count; pass++) {
        const int64_t t0 = (first + pass) * kTileT;
        const int buffer = BUFFERS == 2 ? pass & 1 : 0;
        if (BUFFERS == 1) {
            stage(t0, 0);
            copies_wait_all();
        } else if (pass + 1 < count) {
            stage(t0 + kTileT, buffer ^ 1); // into the buffer computed last pass
            copies_commit();
            copies_wait_groups<1>(); // this tile's group has landed, the next one's may not have
        } else {
            copies_wait_groups<0>();
        }
        __syncthreads(); // every thread's copies (and element-wise writes) are in
        compute(t0, buffer);
        __syncthreads(); // the buffer is no longer read before it is staged again
    }
}

template <typename T, int KB> __global__ void __launch_bounds__(kBlock, 8) tile_fwd(conv_args a, tile_plan plan)
{
    using S = tile_shape<T, KB>;
    constexpr int CPT = S::CPT, LS = S::LS;
    constexpr int XR = kTileT + KB - 1; // x at t0 − (KB−1) … t0 + kTileT − 1
    constexpr int BUFFERS = tile_buffers<XR * kTileC * sizeof(T)>();
    __shared__ alignas(16) T xs[BUFFERS][XR][kTileC];
    const int cg = threadIdx.x % S::GROUPS * CPT, r0 = threadIdx.x / S::GROUPS * LS;
    const int64_t c0 = (int64_t)blockIdx.y * kTileC, b = blockIdx.z, c = c0 + cg;
    const bool active = c < a.C;
    const int count = active ? (a.C - c < CPT ? (int)(a.C - c) : CPT) : 0;
    float wl[CPT][KB], bias[CPT];
#pragma unroll
    for (int q = 0; q < CPT; q++) bias[q] = load_taps<T, KB>(a, c + q < a.C ? c + q : a.C - 1, wl[q]);
    auto stage = [&](int64_t t0, int buf) {
        stage_tile<T, XR, true>(a, a.x, plan.vec_x, b, c0, t0 - (KB - 1), xs[buf]);
    };
    auto compute = [&](int64_t t0, int buf) {
        if (!active) return;
        float win[KB][CPT]; // win[KB−1−i] = x[t − i]
#pragma unroll
        for (int j = 0; j < KB - 1; j++) read_channels<T, CPT>(&xs[buf][r0 + j][cg], win[j + 1]);
        T *out = (T *)a.y.p + (b * a.y.s0 + c * a.y.s1 + (t0 + r0) * a.y.s2);
        const int64_t step = a.y.s2;
        const int64_t left = a.L - (t0 + r0); // steps of this thread inside the row (may be ≤ 0)
        const int steps = left < LS ? (int)(left > 0 ? left : 0) : LS;
#pragma unroll
        for (int s = 0; s < LS; s++) {
            shift_window(win);
            read_channels<T, CPT>(&xs[buf][r0 + s + KB - 1][cg], win[KB - 1]);
            float o[CPT];
            step_outputs(wl, bias, win, a.silu, o);
            if (s < steps) write_channels<T, CPT>(out, a.y.s1, plan.pair_y, count, o);
            out += step; // a pointer walk: no 64-bit multiply per step
        }
    };
    walk_tiles<BUFFERS>(a, plan, stage, compute);
}

// Each thread walks its LS steps and the K−1 after them: g = dout·act'(z) at every step, and
// dx for a step as soon as the K values of g it needs are known, K−1 steps later. (The K−1
// extra steps of g are the next lane's first ones, recomputed: cheaper than a second pass
// through shared memory.)
template <typename T, int KB, bool SILU>
__global__ void __launch_bounds__(kBlock) tile_bwd(conv_args a, tile_plan plan, float *ws)
{
    next_kernel_may_start();
    after_previous_kernels();
    using S = tile_shape<T, KB>;
    constexpr int CPT = S::CPT, LS = S::LS;
    constexpr int XR = kTileT + 2 * (KB - 1); // x at t0 − (KB−1) … t0 + kTileT + KB − 2
    constexpr int DR = kTileT + KB - 1;       // dout at t0 … t0 + kTileT + KB − 2
    constexpr int BUFFERS = tile_buffers<(XR + DR) * kTileC * sizeof(T)>();
    __shared__ alignas(16) T xs[BUFFERS][XR][kTileC];
    __shared__ alignas(16) T ds[BUFFERS][DR][kTileC];
    const int cg = threadIdx.x % S::GROUPS * CPT, lane = threadIdx.x / S::GROUPS, r0 = lane * LS;
    const int64_t c0 = (int64_t)blockIdx.y * kTileC, b = blockIdx.z, c = c0 + cg;
    const bool active = c < a.C;
    const int count = active ? (a.C - c < CPT ? (int)(a.C - c) : CPT) : 0;
    float wl[CPT][KB], bias[CPT]; // scaled by tap_scale, as in row_bwd
#pragma unroll
    for (int q = 0; q < CPT; q++) bias[q] = load_scaled_taps<T, KB>(a, c + q < a.C ? c + q : a.C - 1, wl[q]);
    const int64_t final_from = final_states_from(a);
    float partial[CPT][KB + 1]; // dwl[0 … KB−1], dbias, over tap_scale
#pragma unroll
    for (int q = 0; q < CPT; q++)
#pragma unroll
        for (int i = 0; i <= KB; i++) partial[q][i] = 0.0f;
    auto stage = [&](int64_t t0, int buf) {
        stage_tile<T, XR, true>(a, a.x, plan.vec_x, b, c0, t0 - (KB - 1), xs[buf]);
        stage_tile<T, DR, false>(a, a.y, plan.vec_y, b, c0, t0, ds[buf]);
    };
    auto compute = [&](int64_t t0, int buf) {
        if (!active) return;
        float win[KB][CPT]; // win[KB−1−i] = x[t − i]
        float gw[KB][CPT];  // gw[KB−1−i] = g[t − i]
#pragma unroll
        for (int j = 0; j < KB - 1; j++) {
            read_channels<T, CPT>(&xs[buf][r0 + j][cg], win[j + 1]);
#pragma unroll
            for (int q = 0; q < CPT; q++) gw[j + 1][q] = 0.0f; // never read: dx starts once K values of g are in
        }
        T *dx = (T *)a.dx.p + (b * a.dx.s0 + c * a.dx.s1 + (t0 + r0) * a.dx.s2);
        const int64_t step = a.dx.s2;
        const int64_t left = a.L - (t0 + r0); // steps of this thread inside the row (may be ≤ 0)
        const int steps = left < LS ? (int)(left > 0 ? left : 0) : LS;
        const bool near_final = t0 + r0 + LS > final_from;
#pragma unroll
        for (int s = 0; s < LS + KB - 1; s++) { // step t = t0 + r0 + s
            shift_window(win);
            shift_window(gw);
            read_channels<T, CPT>(&xs[buf][r0 + s + KB - 1][cg], win[KB - 1]);
            float d_out[CPT];
            read_channels<T, CPT>(&ds[buf][r0 + s][cg], d_out); // 0 past the end
            step_gradient<T, SILU>(wl, bias, win, d_out, gw);
            if (s < LS) add_step_partials(gw[KB - 1], win, partial); // own steps (the later ones are the next lane's)
            if (s >= KB - 1) {                                       // dx[u], u = s − (KB − 1)
                const int u = s - (KB - 1);
                float d[CPT];
                oldest_step_dx(wl, gw, d);
                if (near_final) { // only the threads holding the last K−1 steps
                    const int64_t t = t0 + r0 + u;
                    if (t >= final_from && t < a.L)
#pragma unroll
                        for (int q = 0; q < CPT; q++)
                            if (q < count) d[q] += ld<T>(a.dfinal, b, c + q, t - final_from);
                }
                if (u < steps) write_channels<T, CPT>(dx, a.dx.s1, plan.pair_y, count, d);
                dx += step;
            }
        }
    };
    walk_tiles<BUFFERS>(a, plan, stage, compute);
    // The block's partials: the time lanes of each channel summed in order (through xs, which
    // no thread reads any more: walk_tiles ends with a barrier).
    static_assert(sizeof(float) * S::LANES * (KB + 1) * kTileC <= sizeof(xs), "the partials fit in xs");
    float(*sums)[KB + 1][kTileC] = (float(*)[KB + 1][kTileC])(void *)&xs[0][0][0];
#pragma unroll
    for (int q = 0; q < CPT; q++)
#pragma unroll
        for (int i = 0; i <= KB; i++) sums[lane][i][cg + q] = tap_scale<T>() * partial[q][i];
    __syncthreads();
    if (lane == 0 && active) {
        const int64_t parts = a.B * plan.time_blocks, part = b * plan.time_blocks + blockIdx.x;
        for (int q = 0; q < count; q++)
#pragma unroll
            for (int i = 0; i <= KB; i++) {
                float sum = 0.0f;
                for (int l = 0; l < S::LANES; l++) sum += sums[l][i][cg + q];
                partial_to_workspace(ws, parts, part, c + q, KB + 1, i, sum);
            }
    }
}

} // namespace

namespace tg_conv1d {

template <typename T, int KB> auto tile_fwd_instance() -> void (*)(conv_args, tile_plan) { return ::tile_fwd<T, KB>; }
template auto tile_fwd_instance<float, 2>() -> void (*)(conv_args, tile_plan);
template auto tile_fwd_instance<float, 3>() -> void (*)(conv_args, tile_plan);
template auto tile_fwd_instance<float, 4>() -> void (*)(conv_args, tile_plan);
template auto tile_fwd_instance<float, 8>() -> void (*)(conv_args, tile_plan);
template auto tile_fwd_instance<float, 16>() -> void (*)(conv_args, tile_plan);
template auto tile_fwd_instance<__nv_bfloat16, 2>() -> void (*)(conv_args, tile_plan);
template auto tile_fwd_instance<__nv_bfloat16, 3>() -> void (*)(conv_args, tile_plan);
template auto tile_fwd_instance<__nv_bfloat16, 4>() -> void (*)(conv_args, tile_plan);
template auto tile_fwd_instance<__nv_bfloat16, 8>() -> void (*)(conv_args, tile_plan);
template auto tile_fwd_instance<__nv_bfloat16, 16>() -> void (*)(conv_args, tile_plan);
template auto tile_fwd_instance<__half, 2>() -> void (*)(conv_args, tile_plan);
template auto tile_fwd_instance<__half, 3>() -> void (*)(conv_args, tile_plan);
template auto tile_fwd_instance<__half, 4>() -> void (*)(conv_args, tile_plan);
template auto tile_fwd_instance<__half, 8>() -> void (*)(conv_args, tile_plan);
template auto tile_fwd_instance<__half, 16>() -> void (*)(conv_args, tile_plan);

template <typename T, int KB, bool SILU> auto tile_bwd_instance() -> void (*)(conv_args, tile_plan, float *)
{
    return ::tile_bwd<T, KB, SILU>;
}
template auto tile_bwd_instance<float, 2, false>() -> void (*)(conv_args, tile_plan, float *);
template auto tile_bwd_instance<float, 2, true>() -> void (*)(conv_args, tile_plan, float *);
template auto tile_bwd_instance<float, 3, false>() -> void (*)(conv_args, tile_plan, float *);
template auto tile_bwd_instance<float, 3, true>() -> void (*)(conv_args, tile_plan, float *);
template auto tile_bwd_instance<float, 4, false>() -> void (*)(conv_args, tile_plan, float *);
template auto tile_bwd_instance<float, 4, true>() -> void (*)(conv_args, tile_plan, float *);
template auto tile_bwd_instance<float, 8, false>() -> void (*)(conv_args, tile_plan, float *);
template auto tile_bwd_instance<float, 8, true>() -> void (*)(conv_args, tile_plan, float *);
template auto tile_bwd_instance<float, 16, false>() -> void (*)(conv_args, tile_plan, float *);
template auto tile_bwd_instance<float, 16, true>() -> void (*)(conv_args, tile_plan, float *);
template auto tile_bwd_instance<__nv_bfloat16, 2, false>() -> void (*)(conv_args, tile_plan, float *);
template auto tile_bwd_instance<__nv_bfloat16, 2, true>() -> void (*)(conv_args, tile_plan, float *);
template auto tile_bwd_instance<__nv_bfloat16, 3, false>() -> void (*)(conv_args, tile_plan, float *);
template auto tile_bwd_instance<__nv_bfloat16, 3, true>() -> void (*)(conv_args, tile_plan, float *);
template auto tile_bwd_instance<__nv_bfloat16, 4, false>() -> void (*)(conv_args, tile_plan, float *);
template auto tile_bwd_instance<__nv_bfloat16, 4, true>() -> void (*)(conv_args, tile_plan, float *);
template auto tile_bwd_instance<__nv_bfloat16, 8, false>() -> void (*)(conv_args, tile_plan, float *);
template auto tile_bwd_instance<__nv_bfloat16, 8, true>() -> void (*)(conv_args, tile_plan, float *);
template auto tile_bwd_instance<__nv_bfloat16, 16, false>() -> void (*)(conv_args, tile_plan, float *);
template auto tile_bwd_instance<__nv_bfloat16, 16, true>() -> void (*)(conv_args, tile_plan, float *);
template auto tile_bwd_instance<__half, 2, false>() -> void (*)(conv_args, tile_plan, float *);
template auto tile_bwd_instance<__half, 2, true>() -> void (*)(conv_args, tile_plan, float *);
template auto tile_bwd_instance<__half, 3, false>() -> void (*)(conv_args, tile_plan, float *);
template auto tile_bwd_instance<__half, 3, true>() -> void (*)(conv_args, tile_plan, float *);
template auto tile_bwd_instance<__half, 4, false>() -> void (*)(conv_args, tile_plan, float *);
template auto tile_bwd_instance<__half, 4, true>() -> void (*)(conv_args, tile_plan, float *);
template auto tile_bwd_instance<__half, 8, false>() -> void (*)(conv_args, tile_plan, float *);
template auto tile_bwd_instance<__half, 8, true>() -> void (*)(conv_args, tile_plan, float *);
template auto tile_bwd_instance<__half, 16, false>() -> void (*)(conv_args, tile_plan, float *);
template auto tile_bwd_instance<__half, 16, true>() -> void (*)(conv_args, tile_plan, float *);

} // namespace tg_conv1d
