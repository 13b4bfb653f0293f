// kernels/cuda/conv1d.cu: causal conv1d forward and backward on the GPU.
//
// Notation as in kernels/conv1d.h, with the taps counted by look-back distance:
//   wl[i] = w[K−1−i] (i = 0 … K−1), so z[t] = bias + Σ_i wl[i]·x[t−i]
// where x[t] for t < 0 is the initial state xe[K−1+t] (or 0). Backward, g = dout·act'(z):
//   dx[s] = Σ_i wl[i]·g[s+i]      dwl[i] = Σ_{b,t} g[t]·x[t−i]      dbias = Σ_{b,t} g[t]
//
// Two kernel shapes, both one launch for the main work:
//   row kernels (channel-first: stride 1 along L): a block walks a chunk of one (b, c) row;
//     each thread owns EPT consecutive steps loaded as 16-byte vectors, plus a K−1 halo read
//     again from L1. Coalesced along L.
//   time-walk kernels (channel-last, or any other strides): a thread owns CPT neighbouring
//     channels and walks T steps in time, keeping the last K−1 inputs in registers. A warp
//     reads 32·CPT consecutive channels of one step: coalesced along C.
// The backward writes per-block partials of dw and dbias to a workspace, and a second small
// kernel sums them per channel in a fixed order: no atomics, bitwise-repeatable gradients.
//
// K is a template bucket KB ∈ {2, 3, 4, 8, 16} (any K ≤ KB runs in its bucket: the missing
// look-back taps have weight 0), so the tap loops unroll and the windows stay in registers.
#include "kernels/conv1d.h"
#include "kernels/cuda/common.cuh"

namespace {

constexpr int kBlock = 128;     // threads per block
constexpr int kMaxK = 16;       // the largest kernel width the GPU path takes
constexpr int kTimeSteps = 32;  // steps each time-walk thread owns
constexpr int kTimeRows = 4;    // time-walk threads per block along time (blockDim.y)

// A rank-3 tensor for the kernels: element pointer and element strides.
struct t3 {
    char *p;
    int64_t s0, s1, s2;
};

t3 t3_of(const tg_tensor *t)
{
    t3 v = {};
    if (!t) return v;
    v.p = tg_bytes(t);
    v.s0 = t->strides[0];
    v.s1 = t->strides[1];
    v.s2 = t->strides[2];
    return v;
}

struct conv_args {
    int64_t B, C, L;
    int K;
    int dtype;   // storage dtype of every tensor (the op checks they agree)
    bool silu;
    t3 x, y;     // forward: x in, y = out; backward: x in, y = dout
    t3 dx;       // backward only
    t3 init;     // (B, C, K−1) or p == NULL
    t3 dfinal;   // backward only, or p == NULL
    const char *w;
    int64_t ws0, ws1;
    const char *bias; // or NULL
    int64_t bs0;
};

template <typename T> __device__ inline float ld(const t3 &v, int64_t b, int64_t c, int64_t t)
{
    return tg_to_float(*(const T *)(v.p + (b * v.s0 + c * v.s1 + t * v.s2) * (int64_t)sizeof(T)));
}

template <typename T> __device__ inline void st(const t3 &v, int64_t b, int64_t c, int64_t t, float value)
{
    *(T *)(v.p + (b * v.s0 + c * v.s1 + t * v.s2) * (int64_t)sizeof(T)) = tg_from_float<T>(value);
}

// x at time t (t may be negative: the history, or 0).
template <typename T> __device__ inline float x_at(const conv_args &a, int64_t b, int64_t c, int64_t t)
{
    if (t >= 0) return ld<T>(a.x, b, c, t);
    int64_t j = a.K - 1 + t; // index into the initial states
    return (a.init.p && j >= 0) ? ld<T>(a.init, b, c, j) : 0.0f;
}

// The channel's weights by look-back distance (zero past K) and its bias.
template <typename T, int KB> __device__ inline float load_taps(const conv_args &a, int64_t c, float (&wl)[KB])
{
    const T *w = (const T *)a.w + c * a.ws0;
#pragma unroll
    for (int i = 0; i < KB; i++) wl[i] = i < a.K ? tg_to_float(w[(a.K - 1 - i) * a.ws1]) : 0.0f;
    return a.bias ? tg_to_float(((const T *)a.bias)[c * a.bs0]) : 0.0f;
}

__device__ inline float sigmoid(float z) { return __fdividef(1.0f, 1.0f + __expf(-z)); }
__device__ inline float activate(float z, bool silu) { return silu ? z * sigmoid(z) : z; }
__device__ inline float activation_slope(float z, bool silu)
{
    if (!silu) return 1.0f;
    float s = sigmoid(z);
    return s * (1.0f + z * (1.0f - s));
}

template <typename T, int N> struct alignas(sizeof(T) * N) vec {
    T v[N];
};

// ---- row kernels (channel-first) ------------------------------------------------------------

template <typename T> __host__ __device__ constexpr int vec_width() { return 16 / (int)sizeof(T); }
template <typename T> __host__ __device__ constexpr int row_ept() { return 2 * vec_width<T>(); } // two 16-byte vectors per thread

struct row_plan {
    int64_t chunks; // blocks per row
    int chunk_len;  // steps one pass of the block covers (threads · EPT)
    int passes;     // passes per block: a block covers passes · chunk_len steps
    bool vec_x, vec_y, vec_dx; // rows 16-byte aligned: vector loads and stores allowed
};

// The K−1 steps left of each thread's window, x[t0 − (KB−1)] … x[t0 − 1], mostly taken from
// the neighbouring lanes' registers (a shuffle instead of a second read); the first lanes of
// a warp read theirs from memory (or the history). All 32 lanes must call this.
template <typename T, int KB, int EPT>
__device__ inline void left_halo(const conv_args &a, int64_t b, int64_t c, int64_t t0, const float *body, float *halo)
{
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int m = 1; m < KB; m++) {
        const int q = (m + EPT - 1) / EPT; // step t0 − m is in lane − q's window, at EPT·q − m
        float v = __shfl_up_sync(0xffffffffu, body[EPT * q - m], q);
        if (lane < q) v = x_at<T>(a, b, c, t0 - m);
        halo[KB - 1 - m] = v;
    }
}

// The K−1 steps right of each thread's window, v[t0 + EPT] … v[t0 + EPT + KB − 2], from the
// next lanes (the last lanes of a warp read theirs; 0 past the end of the row).
template <typename T, int KB, int EPT>
__device__ inline void right_halo(const conv_args &a, const t3 &tensor, int64_t b, int64_t c, int64_t t0,
                                  const float *body, float *halo)
{
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int m = 0; m < KB - 1; m++) {
        const int q = m / EPT + 1; // step t0 + EPT + m is in lane + q's window, at m − EPT·(q − 1)
        float v = __shfl_down_sync(0xffffffffu, body[m - EPT * (q - 1)], q);
        int64_t t = t0 + EPT + m;
        if (lane >= 32 - q) v = t < a.L ? ld<T>(tensor, b, c, t) : 0.0f;
        halo[m] = t < a.L ? v : 0.0f;
    }
}

// win[j] = x[t0 + j] for j in [0, N) (vector loads where aligned and inside the row).
template <typename T, int N>
__device__ inline void load_row(const conv_args &a, const t3 &v, bool vec_ok, int64_t b, int64_t c, int64_t t0,
                                float *win)
{
    constexpr int V = vec_width<T>();
    const T *row = (const T *)(v.p + (b * v.s0 + c * v.s1) * (int64_t)sizeof(T));
    if (vec_ok && t0 + N <= a.L) {
#pragma unroll
        for (int q = 0; q < N / V; q++) {
            vec<T, V> chunk = *(const vec<T, V> *)(row + t0 + q * V);
#pragma unroll
            for (int e = 0; e < V; e++) win[q * V + e] = tg_to_float(chunk.v[e]);
        }
    } else {
#pragma unroll
        for (int e = 0; e < N; e++) win[e] = t0 + e < a.L ? tg_to_float(row[(t0 + e) * v.s2]) : 0.0f;
    }
}

template <typename T, int N>
__device__ inline void store_row(const conv_args &a, const t3 &v, bool vec_ok, int64_t b, int64_t c, int64_t t0,
                                 const float *values)
{
    constexpr int V = vec_width<T>();
    T *row = (T *)(v.p + (b * v.s0 + c * v.s1) * (int64_t)sizeof(T));
    if (vec_ok && t0 + N <= a.L) {
#pragma unroll
        for (int q = 0; q < N / V; q++) {
            vec<T, V> chunk;
#pragma unroll
            for (int e = 0; e < V; e++) chunk.v[e] = tg_from_float<T>(values[q * V + e]);
            *(vec<T, V> *)(row + t0 + q * V) = chunk;
        }
    } else {
#pragma unroll
        for (int e = 0; e < N; e++)
            if (t0 + e < a.L) row[(t0 + e) * v.s2] = tg_from_float<T>(values[e]);
    }
}

template <typename T, int KB>
__global__ void __launch_bounds__(kBlock) row_fwd(conv_args a, row_plan plan)
{
    constexpr int EPT = row_ept<T>();
    const int64_t row = blockIdx.x / plan.chunks, chunk = blockIdx.x % plan.chunks;
    const int64_t b = row / a.C, c = row % a.C;
    float wl[KB];
    const float bias = load_taps<T, KB>(a, c, wl);
    for (int pass = 0; pass < plan.passes; pass++) {
        const int64_t base = (chunk * plan.passes + pass) * plan.chunk_len;
        if (base >= a.L) break; // uniform across the block
        const int64_t t0 = base + (int64_t)threadIdx.x * EPT;
        float win[KB - 1 + EPT]; // x[t0 − (KB−1)] … x[t0 + EPT − 1]
        load_row<T, EPT>(a, a.x, plan.vec_x, b, c, t0, win + KB - 1);
        left_halo<T, KB, EPT>(a, b, c, t0, win + KB - 1, win);
        if (t0 >= a.L) continue;
        float out[EPT];
#pragma unroll
        for (int e = 0; e < EPT; e++) {
            float z = bias;
#pragma unroll
            for (int i = 0; i < KB; i++) z += wl[i] * win[KB - 1 + e - i];
            out[e] = activate(z, a.silu);
        }
        store_row<T, EPT>(a, a.y, plan.vec_y, b, c, t0, out);
    }
}

// Sums each of the block's N partials over its threads (fixed shuffle tree, then warps in
// order) and writes them to ws[part][c][0 … N).
template <int N>
__device__ inline void block_partials_to_workspace(float (&partial)[N], float *ws, int64_t part, int64_t C, int64_t c)
{
    __shared__ float warp_sums[kBlock / 32][kMaxK + 1];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
    for (int i = 0; i < N; i++) {
        float v = partial[i];
#pragma unroll
        for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
        if (lane == 0) warp_sums[warp][i] = v;
    }
    __syncthreads();
    if (threadIdx.x < N) {
        float sum = 0.0f;
        for (int w = 0; w < (int)(blockDim.x / 32); w++) sum += warp_sums[w][threadIdx.x];
        ws[(part * C + c) * N + threadIdx.x] = sum;
    }
}

template <typename T, int KB>
__global__ void __launch_bounds__(kBlock) row_bwd(conv_args a, row_plan plan, float *ws)
{
    constexpr int EPT = row_ept<T>();
    const int64_t row = blockIdx.x / plan.chunks, chunk = blockIdx.x % plan.chunks;
    const int64_t b = row / a.C, c = row % a.C;
    float wl[KB];
    const float bias = load_taps<T, KB>(a, c, wl);
    float partial[KB + 1]; // dwl[0 … KB−1], dbias
#pragma unroll
    for (int i = 0; i <= KB; i++) partial[i] = 0.0f;
    for (int pass = 0; pass < plan.passes; pass++) {
        const int64_t base = (chunk * plan.passes + pass) * plan.chunk_len;
        if (base >= a.L) break; // uniform across the block
        const int64_t t0 = base + (int64_t)threadIdx.x * EPT;
        // x over [t0 − (KB−1), t0 + EPT + KB − 1): enough to rebuild z on [t0, t0 + EPT + KB − 1)
        float xw[EPT + 2 * (KB - 1)];
        float g[EPT + KB - 1]; // dout, then g, on [t0, t0 + EPT + KB − 1); 0 past the end
        load_row<T, EPT>(a, a.x, plan.vec_x, b, c, t0, xw + KB - 1);
        load_row<T, EPT>(a, a.y, plan.vec_y, b, c, t0, g);
        left_halo<T, KB, EPT>(a, b, c, t0, xw + KB - 1, xw);
        right_halo<T, KB, EPT>(a, a.x, b, c, t0, xw + KB - 1, xw + KB - 1 + EPT);
        right_halo<T, KB, EPT>(a, a.y, b, c, t0, g, g + EPT);
        if (t0 >= a.L) continue;
#pragma unroll
        for (int j = 0; j < EPT + KB - 1; j++) { // g = dout · act'(z), z rebuilt from x
            float z = bias;
#pragma unroll
            for (int i = 0; i < KB; i++) z += wl[i] * xw[KB - 1 + j - i];
            g[j] *= activation_slope(z, a.silu); // dout is 0 past the end, so g is too
        }
        float dx[EPT];
#pragma unroll
        for (int e = 0; e < EPT; e++) {
            float d = 0.0f;
#pragma unroll
            for (int i = 0; i < KB; i++) d += wl[i] * g[e + i];
            int64_t s = t0 + e, j = s - (a.L - (a.K - 1)); // final state j is x[L − (K−1) + j]
            if (a.dfinal.p && j >= 0 && s < a.L) d += ld<T>(a.dfinal, b, c, j);
            dx[e] = d;
            if (s < a.L) {
                partial[KB] += g[e];
#pragma unroll
                for (int i = 0; i < KB; i++) partial[i] += g[e] * xw[KB - 1 + e - i];
            }
        }
        store_row<T, EPT>(a, a.dx, plan.vec_dx, b, c, t0, dx);
    }
    block_partials_to_workspace<KB + 1>(partial, ws, b * plan.chunks + chunk, a.C, c);
}

// ---- time-walk kernels (channel-last or any strides) ----------------------------------------------

// Channels per thread: a 16-byte vector for narrow K; fewer where registers would run out.
template <typename T, int KB> __host__ __device__ constexpr int walk_cpt() { return KB <= 4 ? 16 / (int)sizeof(T) : KB <= 8 ? 4 : 2; }

struct walk_plan {
    int64_t time_blocks; // blocks along L
    bool vec_x, vec_y, vec_dx; // stride 1 along C and aligned for CPT-wide vectors
};

template <typename T, int CPT, bool VEC>
__device__ inline void load_channels(const conv_args &a, const t3 &v, int64_t b, int64_t c0, int64_t t,
                                     float (&out)[CPT])
{
    const T *p = (const T *)(v.p + (b * v.s0 + c0 * v.s1 + t * v.s2) * (int64_t)sizeof(T));
    if (VEC && c0 + CPT <= a.C) {
        vec<T, CPT> chunk = *(const vec<T, CPT> *)p;
#pragma unroll
        for (int q = 0; q < CPT; q++) out[q] = tg_to_float(chunk.v[q]);
    } else {
#pragma unroll
        for (int q = 0; q < CPT; q++) out[q] = c0 + q < a.C ? tg_to_float(p[q * v.s1]) : 0.0f;
    }
}

template <typename T, int CPT, bool VEC>
__device__ inline void store_channels(const conv_args &a, const t3 &v, int64_t b, int64_t c0, int64_t t,
                                      const float (&values)[CPT])
{
    T *p = (T *)(v.p + (b * v.s0 + c0 * v.s1 + t * v.s2) * (int64_t)sizeof(T));
    if (VEC && c0 + CPT <= a.C) {
        vec<T, CPT> chunk;
#pragma unroll
        for (int q = 0; q < CPT; q++) chunk.v[q] = tg_from_float<T>(values[q]);
        *(vec<T, CPT> *)p = chunk;
    } else {
#pragma unroll
        for (int q = 0; q < CPT; q++)
            if (c0 + q < a.C) p[q * v.s1] = tg_from_float<T>(values[q]);
    }
}

// x at time t for the thread's channels: the history for t < 0.
template <typename T, int CPT, bool VEC>
__device__ inline void load_x_or_history(const conv_args &a, int64_t b, int64_t c0, int64_t t, float (&out)[CPT])
{
    if (t >= 0) {
        load_channels<T, CPT, VEC>(a, a.x, b, c0, t, out);
        return;
    }
#pragma unroll
    for (int q = 0; q < CPT; q++) out[q] = c0 + q < a.C ? x_at<T>(a, b, c0 + q, t) : 0.0f;
}

// VEC: x, out (and dout, dx) have stride 1 along C and aligned channel vectors. The
// other layouts take VEC = false, instantiated for the widest bucket only.
template <typename T, int KB, bool VEC>
__global__ void __launch_bounds__(32 * kTimeRows) walk_fwd(conv_args a, walk_plan plan)
{
    constexpr int CPT = walk_cpt<T, KB>();
    const int64_t c0 = ((int64_t)blockIdx.y * blockDim.x + threadIdx.x) * CPT;
    const int64_t t0 = ((int64_t)blockIdx.x * kTimeRows + threadIdx.y) * kTimeSteps;
    const int64_t b = blockIdx.z;
    if (c0 >= a.C || t0 >= a.L) return;
    float wl[CPT][KB], bias[CPT];
#pragma unroll
    for (int q = 0; q < CPT; q++) {
        int64_t c = c0 + q < a.C ? c0 + q : a.C - 1; // channels past C are computed but never stored
        bias[q] = load_taps<T, KB>(a, c, wl[q]);
    }
    float hist[KB][CPT]; // hist[KB−1] is x[t]; hist[KB−1−i] is x[t−i]
#pragma unroll
    for (int j = 0; j < KB - 1; j++) load_x_or_history<T, CPT, VEC>(a, b, c0, t0 - (KB - 1) + j, hist[j]);
    const int64_t t_end = t0 + kTimeSteps < a.L ? t0 + kTimeSteps : a.L;
    for (int64_t t = t0; t < t_end; t++) {
        load_channels<T, CPT, VEC>(a, a.x, b, c0, t, hist[KB - 1]);
        float out[CPT];
#pragma unroll
        for (int q = 0; q < CPT; q++) {
            float z = bias[q];
#pragma unroll
            for (int i = 0; i < KB; i++) z += wl[q][i] * hist[KB - 1 - i][q];
            out[q] = activate(z, a.silu);
        }
        store_channels<T, CPT, VEC>(a, a.y, b, c0, t, out);
#pragma unroll
        for (int j = 0; j < KB - 1; j++)
#pragma unroll
            for (int q = 0; q < CPT; q++) hist[j][q] = hist[j + 1][q];
    }
}

template <typename T, int KB, bool VEC>
__global__ void __launch_bounds__(32 * kTimeRows) walk_bwd(conv_args a, walk_plan plan, float *ws)
{
    constexpr int CPT = walk_cpt<T, KB>();
    const int64_t c0 = ((int64_t)blockIdx.y * blockDim.x + threadIdx.x) * CPT;
    const int64_t t0 = ((int64_t)blockIdx.x * kTimeRows + threadIdx.y) * kTimeSteps;
    const int64_t b = blockIdx.z;
    const bool active = c0 < a.C && t0 < a.L;
    float partial[CPT][KB + 1];
#pragma unroll
    for (int q = 0; q < CPT; q++)
#pragma unroll
        for (int i = 0; i <= KB; i++) partial[q][i] = 0.0f;
    if (active) {
        float wl[CPT][KB], bias[CPT];
#pragma unroll
        for (int q = 0; q < CPT; q++) bias[q] = load_taps<T, KB>(a, c0 + q < a.C ? c0 + q : a.C - 1, wl[q]);
        float hist[KB][CPT];  // x[t−KB+1 … t]
        float grads[KB][CPT]; // g[t−KB+1 … t]
#pragma unroll
        for (int j = 0; j < KB - 1; j++) {
            load_x_or_history<T, CPT, VEC>(a, b, c0, t0 - (KB - 1) + j, hist[j]);
#pragma unroll
            for (int q = 0; q < CPT; q++) grads[j][q] = 0.0f; // g before t0 is not this thread's
        }
        // Walk t over [t0, t0 + T + KB − 1): at step t, g[t] is new and dx[t − KB + 1] complete.
        const int64_t t_last = t0 + kTimeSteps + KB - 1;
        const int64_t own_end = t0 + kTimeSteps < a.L ? t0 + kTimeSteps : a.L;
        for (int64_t t = t0; t < t_last; t++) {
            const bool inside = t < a.L;
            float dout[CPT];
            if (inside) {
                load_channels<T, CPT, VEC>(a, a.x, b, c0, t, hist[KB - 1]);
                load_channels<T, CPT, VEC>(a, a.y, b, c0, t, dout);
            }
#pragma unroll
            for (int q = 0; q < CPT; q++) {
                float gq = 0.0f;
                if (inside) {
                    float z = bias[q];
#pragma unroll
                    for (int i = 0; i < KB; i++) z += wl[q][i] * hist[KB - 1 - i][q];
                    gq = dout[q] * activation_slope(z, a.silu);
                }
                grads[KB - 1][q] = gq;
                if (t < own_end) {
                    partial[q][KB] += gq;
#pragma unroll
                    for (int i = 0; i < KB; i++) partial[q][i] += gq * hist[KB - 1 - i][q];
                }
            }
            const int64_t s = t - (KB - 1); // dx[s] = Σ_i wl[i]·g[s+i]: all of g[s … t] is known
            if (s >= t0 && s < own_end) {
                float dx[CPT];
                const int64_t j = s - (a.L - (a.K - 1));
#pragma unroll
                for (int q = 0; q < CPT; q++) {
                    float d = 0.0f;
#pragma unroll
                    for (int i = 0; i < KB; i++) d += wl[q][i] * grads[i][q]; // grads[i] = g[s + i]
                    if (a.dfinal.p && j >= 0 && c0 + q < a.C) d += ld<T>(a.dfinal, b, c0 + q, j);
                    dx[q] = d;
                }
                store_channels<T, CPT, VEC>(a, a.dx, b, c0, s, dx);
            }
#pragma unroll
            for (int j = 0; j < KB - 1; j++)
#pragma unroll
                for (int q = 0; q < CPT; q++) {
                    hist[j][q] = hist[j + 1][q];
                    grads[j][q] = grads[j + 1][q];
                }
        }
    }
    // Sum the partials over the block's time rows (threadIdx.y) in order, then write them.
    constexpr int N = CPT * (KB + 1);
    __shared__ float rows[kTimeRows][32][N];
#pragma unroll
    for (int q = 0; q < CPT; q++)
#pragma unroll
        for (int i = 0; i <= KB; i++) rows[threadIdx.y][threadIdx.x][q * (KB + 1) + i] = partial[q][i];
    __syncthreads();
    if (threadIdx.y == 0 && c0 < a.C) {
        const int64_t part = b * plan.time_blocks + blockIdx.x;
#pragma unroll
        for (int q = 0; q < CPT; q++) {
            if (c0 + q >= a.C) break;
#pragma unroll
            for (int i = 0; i <= KB; i++) {
                float sum = 0.0f;
                for (int r = 0; r < kTimeRows; r++) sum += rows[r][threadIdx.x][q * (KB + 1) + i];
                ws[(part * a.C + c0 + q) * (KB + 1) + i] = sum;
            }
        }
    }
}

// ---- small kernels: final states, the history's gradient, the dw/dbias sum -----------------------

template <typename T> __global__ void final_states_kernel(conv_args a, t3 final_states)
{
    const int64_t n = a.B * a.C * (a.K - 1);
    for (int64_t idx = tg_global_index(); idx < n; idx += tg_global_stride()) {
        int64_t j = idx % (a.K - 1), c = (idx / (a.K - 1)) % a.C, b = idx / ((a.K - 1) * a.C);
        st<T>(final_states, b, c, j, x_at<T>(a, b, c, a.L - (a.K - 1) + j)); // xe[L + j]
    }
}

// dinitial[j] = dxe[j] = Σ_i wl[i]·g[j − (K−1) + i] (+ dfinal[j − L] when the history reaches
// into the final states, i.e. L < K − 1). One thread per (b, c, j); g rebuilt from x.
template <typename T> __global__ void initial_grad_kernel(conv_args a, t3 dinitial)
{
    const int64_t n = a.B * a.C * (a.K - 1);
    for (int64_t idx = tg_global_index(); idx < n; idx += tg_global_stride()) {
        int64_t j = idx % (a.K - 1), c = (idx / (a.K - 1)) % a.C, b = idx / ((a.K - 1) * a.C);
        float bias = a.bias ? (float)tg_load_raw(a.bias, a.dtype, c * a.bs0) : 0.0f, d = 0.0f;
        for (int i = 0; i < a.K; i++) {
            int64_t t = j - (a.K - 1) + i; // output step that reads xe[j] through look-back i
            if (t < 0 || t >= a.L) continue;
            float z = bias;
            for (int k = 0; k < a.K; k++) z += (float)tg_load_raw(a.w, a.dtype, c * a.ws0 + (a.K - 1 - k) * a.ws1) * x_at<T>(a, b, c, t - k);
            float g = ld<T>(a.y, b, c, t) * activation_slope(z, a.silu);
            d += (float)tg_load_raw(a.w, a.dtype, c * a.ws0 + (a.K - 1 - i) * a.ws1) * g;
        }
        if (a.dfinal.p && j >= a.L) d += ld<T>(a.dfinal, b, c, j - a.L);
        st<T>(dinitial, b, c, j, d);
    }
}

// dw[c, K−1−i] and dbias[c] from ws[part][c][0 … KB], summed over parts in order.
__global__ void sum_partials_kernel(const float *ws, int64_t parts, int64_t C, int K, int KB, char *dw, int64_t dws0,
                                    int64_t dws1, char *db, int64_t dbs0, int dtype)
{
    const int64_t n = C * (KB + 1);
    for (int64_t idx = tg_global_index(); idx < n; idx += tg_global_stride()) {
        int64_t c = idx / (KB + 1);
        int i = (int)(idx % (KB + 1));
        bool is_bias = i == KB;
        if ((is_bias && !db) || (!is_bias && (i >= K || !dw))) continue;
        float sum = 0.0f;
        for (int64_t p = 0; p < parts; p++) sum += ws[(p * C + c) * (KB + 1) + i];
        if (is_bias) tg_store_raw(db, dtype, c * dbs0, sum);
        else tg_store_raw(dw, dtype, c * dws0 + (K - 1 - i) * dws1, sum);
    }
}

// ---- launching ---------------------------------------------------------------------------------------

conv_args make_args(const tg_conv1d_args *in, const tg_tensor *y, const tg_tensor *dx, const tg_tensor *dfinal)
{
    conv_args a = {};
    a.B = in->x->shape[0];
    a.C = in->x->shape[1];
    a.L = in->x->shape[2];
    a.K = (int)in->weight->shape[1];
    a.dtype = (int)in->x->dtype;
    a.silu = in->activation == TG_ACT_SILU;
    a.x = t3_of(in->x);
    a.y = t3_of(y);
    a.dx = t3_of(dx);
    a.init = t3_of(in->initial_states);
    a.dfinal = t3_of(dfinal);
    a.w = tg_bytes(in->weight);
    a.ws0 = in->weight->strides[0];
    a.ws1 = in->weight->strides[1];
    a.bias = in->bias ? tg_bytes(in->bias) : NULL;
    a.bs0 = in->bias ? in->bias->strides[0] : 0;
    return a;
}

bool time_contiguous(const tg_tensor *t) { return !t || t->strides[2] == 1 || t->shape[2] == 1; }

// Rows of t start on 16-byte boundaries (so the row kernels may use vector access).
bool rows_aligned(const tg_tensor *t, int vec)
{
    if (!t) return true;
    uintptr_t address = (uintptr_t)tg_bytes(t);
    return address % 16 == 0 && t->strides[0] % vec == 0 && t->strides[1] % vec == 0;
}

// Channel vectors of width cpt at channel multiples of cpt are aligned and contiguous.
bool channels_vectorisable(const tg_tensor *t, int cpt)
{
    if (!t) return true;
    uintptr_t address = (uintptr_t)tg_bytes(t);
    size_t bytes = (size_t)cpt * tg_dtype_size(t->dtype);
    return t->strides[1] == 1 && address % bytes == 0 && t->strides[0] % cpt == 0 && t->strides[2] % cpt == 0;
}

template <typename T> row_plan make_row_plan(const conv_args &a, const tg_tensor *x, const tg_tensor *y, const tg_tensor *dx)
{
    constexpr int EPT = row_ept<T>(), V = vec_width<T>();
    int64_t threads = (a.L + EPT - 1) / EPT;
    int block = threads >= kBlock ? kBlock : (int)((threads + 31) / 32 * 32);
    row_plan plan = {};
    plan.chunk_len = block * EPT;
    int64_t spans = (a.L + plan.chunk_len - 1) / plan.chunk_len;
    // Long rows: a block makes several passes, so its weights and setup serve more steps;
    // keep at least four blocks per row so the grid still fills the GPU.
    plan.passes = spans >= 16 ? 4 : spans >= 8 ? 2 : 1;
    plan.chunks = (spans + plan.passes - 1) / plan.passes;
    plan.vec_x = rows_aligned(x, V);
    plan.vec_y = rows_aligned(y, V);
    plan.vec_dx = rows_aligned(dx, V);
    return plan;
}

int row_block(const row_plan &plan, int ept) { return plan.chunk_len / ept; }

template <typename T, int KB> walk_plan make_walk_plan(const conv_args &a, const tg_tensor *x, const tg_tensor *y, const tg_tensor *dx)
{
    constexpr int CPT = walk_cpt<T, KB>();
    walk_plan plan = {};
    plan.time_blocks = (a.L + (int64_t)kTimeSteps * kTimeRows - 1) / ((int64_t)kTimeSteps * kTimeRows);
    plan.vec_x = channels_vectorisable(x, CPT);
    plan.vec_y = channels_vectorisable(y, CPT);
    plan.vec_dx = channels_vectorisable(dx, CPT);
    return plan;
}

template <typename T, int KB> dim3 walk_grid(const conv_args &a, const walk_plan &plan)
{
    constexpr int CPT = walk_cpt<T, KB>();
    int64_t channel_blocks = (a.C + 32 * CPT - 1) / (32 * CPT);
    return dim3((unsigned)plan.time_blocks, (unsigned)channel_blocks, (unsigned)a.B);
}

tg_status too_large(const conv_args &a)
{
    return tg_set_error(TG_ERR_OVERFLOW, "tg_causal_conv1d: (B, C, L) = (%lld, %lld, %lld) is beyond the CUDA grid",
                        (long long)a.B, (long long)a.C, (long long)a.L);
}

template <typename T, int KB> bool fits_walk_grid(const conv_args &a, const walk_plan &plan)
{
    dim3 grid = walk_grid<T, KB>(a, plan);
    return plan.time_blocks < INT32_MAX && grid.y <= 65535 && a.B <= 65535 && grid.x == plan.time_blocks;
}

bool fits_row_grid(const conv_args &a, const row_plan &plan) { return a.B * a.C * plan.chunks <= INT32_MAX; }

// A device buffer shaped like `like` (contiguous), standing in for a gradient the caller
// did not ask for (dx) or did not have (dout: zeros).
struct scratch {
    tg_storage storage;
    tg_tensor tensor;
    size_t bytes;
};

tg_status scratch_like(const tg_tensor *like, bool zero, scratch &s)
{
    s = scratch{};
    s.bytes = (size_t)tg_numel(like) * tg_dtype_size(like->dtype);
    void *ptr;
    tg_status status = tg_device_alloc(TG_DEVICE_CUDA, s.bytes, &ptr);
    if (status != TG_OK) return status;
    s.storage = tg_storage{ptr, s.bytes, TG_DEVICE_CUDA, TG_STORAGE_HEAP};
    s.tensor.dtype = like->dtype;
    s.tensor.device = TG_DEVICE_CUDA;
    s.tensor.ndim = like->ndim;
    for (int d = 0; d < like->ndim; d++) s.tensor.shape[d] = like->shape[d];
    tg_contiguous_strides(like->ndim, like->shape, s.tensor.strides);
    s.tensor.storage = &s.storage;
    return zero ? tg_cuda_memset_zero(ptr, s.bytes) : TG_OK;
}

void scratch_free(scratch &s)
{
    if (s.storage.data) tg_device_free(TG_DEVICE_CUDA, s.storage.data, s.bytes);
}

template <typename T, int KB>
tg_status forward_with(const tg_conv1d_args *in, tg_tensor *out, tg_tensor *final_states)
{
    conv_args a = make_args(in, out, NULL, NULL);
    if (time_contiguous(in->x) && time_contiguous(out)) {
        row_plan plan = make_row_plan<T>(a, in->x, out, NULL);
        if (!fits_row_grid(a, plan)) return too_large(a);
        row_fwd<T, KB><<<(unsigned)(a.B * a.C * plan.chunks), row_block(plan, row_ept<T>())>>>(a, plan);
    } else {
        walk_plan plan = make_walk_plan<T, KB>(a, in->x, out, NULL);
        if (plan.vec_x && plan.vec_y) {
            if (!fits_walk_grid<T, KB>(a, plan)) return too_large(a);
            walk_fwd<T, KB, true><<<walk_grid<T, KB>(a, plan), dim3(32, kTimeRows)>>>(a, plan);
        } else {
            walk_plan generic = make_walk_plan<T, kMaxK>(a, in->x, out, NULL);
            if (!fits_walk_grid<T, kMaxK>(a, generic)) return too_large(a);
            walk_fwd<T, kMaxK, false><<<walk_grid<T, kMaxK>(a, generic), dim3(32, kTimeRows)>>>(a, generic);
        }
    }
    tg_status status = tg_cuda_check_launch("tg_causal_conv1d");
    if (status == TG_OK && final_states && a.K > 1) {
        final_states_kernel<T><<<tg_blocks_for(a.B * a.C * (a.K - 1)), TG_THREADS>>>(a, t3_of(final_states));
        status = tg_cuda_check_launch("tg_causal_conv1d");
    }
    return status;
}

template <typename T, int KB>
tg_status backward_kernels(const tg_conv1d_args *in, const tg_tensor *dout, const tg_tensor *dfinal, tg_tensor *dx,
                           tg_tensor *dweight, tg_tensor *dbias, tg_tensor *dinitial)
{
    conv_args a = make_args(in, dout, dx, dfinal);
    const bool rows = time_contiguous(in->x) && time_contiguous(dout) && time_contiguous(dx);
    int64_t parts;
    row_plan rplan = {};
    walk_plan wplan = {};
    if (rows) {
        rplan = make_row_plan<T>(a, in->x, dout, dx);
        parts = a.B * rplan.chunks;
        if (!fits_row_grid(a, rplan)) return too_large(a);
    } else {
        wplan = make_walk_plan<T, KB>(a, in->x, dout, dx);
        parts = a.B * wplan.time_blocks;
        if (!fits_walk_grid<T, KB>(a, wplan)) return too_large(a);
    }
    const bool vec_walk = wplan.vec_x && wplan.vec_y && wplan.vec_dx;
    if (!rows && !vec_walk) { /* odd layouts: the generic time walk, in the widest bucket */
        if (KB != kMaxK) return backward_kernels<T, kMaxK>(in, dout, dfinal, dx, dweight, dbias, dinitial);
    }
    size_t ws_bytes = (size_t)(parts * a.C * (KB + 1)) * sizeof(float);
    float *ws = NULL;
    tg_status status = tg_device_alloc(TG_DEVICE_CUDA, ws_bytes, (void **)&ws);
    if (status != TG_OK) return status;
    if (rows)
        row_bwd<T, KB><<<(unsigned)(a.B * a.C * rplan.chunks), row_block(rplan, row_ept<T>())>>>(a, rplan, ws);
    else if (vec_walk)
        walk_bwd<T, KB, true><<<walk_grid<T, KB>(a, wplan), dim3(32, kTimeRows)>>>(a, wplan, ws);
    else if constexpr (KB == kMaxK) // (other buckets were sent here above)
        walk_bwd<T, KB, false><<<walk_grid<T, KB>(a, wplan), dim3(32, kTimeRows)>>>(a, wplan, ws);
    status = tg_cuda_check_launch("tg_causal_conv1d backward");
    if (status == TG_OK && (dweight || dbias)) {
        sum_partials_kernel<<<tg_blocks_for(a.C * (KB + 1)), TG_THREADS>>>(
            ws, parts, a.C, a.K, KB, dweight ? tg_bytes(dweight) : NULL, dweight ? dweight->strides[0] : 0,
            dweight ? dweight->strides[1] : 0, dbias ? tg_bytes(dbias) : NULL, dbias ? dbias->strides[0] : 0,
            (int)in->x->dtype);
        status = tg_cuda_check_launch("tg_causal_conv1d backward");
    }
    if (status == TG_OK && dinitial && a.K > 1) {
        initial_grad_kernel<T><<<tg_blocks_for(a.B * a.C * (a.K - 1)), TG_THREADS>>>(a, t3_of(dinitial));
        status = tg_cuda_check_launch("tg_causal_conv1d backward");
    }
    tg_device_free(TG_DEVICE_CUDA, ws, ws_bytes);
    return status;
}

// The kernels always read dout and write dx: stand-ins when there is no dout (only the
// final states had a gradient) or no dx wanted (only weights, bias or history).
template <typename T, int KB>
tg_status backward_with(const tg_conv1d_args *in, const tg_tensor *dout, const tg_tensor *dfinal, tg_tensor *dx,
                        tg_tensor *dweight, tg_tensor *dbias, tg_tensor *dinitial)
{
    scratch zero_dout = {}, unused_dx = {};
    tg_status status = TG_OK;
    if (!dout) status = scratch_like(in->x, true, zero_dout);
    if (status == TG_OK && !dx) status = scratch_like(in->x, false, unused_dx);
    if (status == TG_OK)
        status = backward_kernels<T, KB>(in, dout ? dout : &zero_dout.tensor, dfinal, dx ? dx : &unused_dx.tensor,
                                         dweight, dbias, dinitial);
    scratch_free(zero_dout);
    scratch_free(unused_dx);
    return status;
}

tg_status unsupported(const tg_conv1d_args *in, const char *why)
{
    return tg_set_error(TG_ERR_INVALID, "tg_causal_conv1d: the CUDA kernels %s (K = %lld, dtype %s)", why,
                        (long long)in->weight->shape[1], tg_dtype_name(in->x->dtype));
}

// The dispatch over dtype and K bucket, shared by forward and backward. `Launch` is a
// template functor with a static `run<T, KB>(args...)`.
template <template <typename, int> class Launch, typename... Args>
tg_status dispatch(const tg_conv1d_args *in, Args... args)
{
    int64_t K = in->weight->shape[1];
    if (K > kMaxK) return unsupported(in, "take K up to 16");
    switch (in->x->dtype) {
    case TG_F32:
        return K <= 2 ? Launch<float, 2>::run(in, args...) : K == 3 ? Launch<float, 3>::run(in, args...)
               : K == 4 ? Launch<float, 4>::run(in, args...) : K <= 8 ? Launch<float, 8>::run(in, args...)
                        : Launch<float, 16>::run(in, args...);
    case TG_BF16:
        return K <= 2 ? Launch<__nv_bfloat16, 2>::run(in, args...) : K == 3 ? Launch<__nv_bfloat16, 3>::run(in, args...)
               : K == 4 ? Launch<__nv_bfloat16, 4>::run(in, args...) : K <= 8 ? Launch<__nv_bfloat16, 8>::run(in, args...)
                        : Launch<__nv_bfloat16, 16>::run(in, args...);
    case TG_F16:
        return K <= 2 ? Launch<__half, 2>::run(in, args...) : K == 3 ? Launch<__half, 3>::run(in, args...)
               : K == 4 ? Launch<__half, 4>::run(in, args...) : K <= 8 ? Launch<__half, 8>::run(in, args...)
                        : Launch<__half, 16>::run(in, args...);
    default: return unsupported(in, "take f32, bf16 and f16");
    }
}

template <typename T, int KB> struct forward_launch {
    static tg_status run(const tg_conv1d_args *in, tg_tensor *out, tg_tensor *final_states)
    {
        return forward_with<T, KB>(in, out, final_states);
    }
};

template <typename T, int KB> struct backward_launch {
    static tg_status run(const tg_conv1d_args *in, const tg_tensor *dout, const tg_tensor *dfinal, tg_tensor *dx,
                         tg_tensor *dweight, tg_tensor *dbias, tg_tensor *dinitial)
    {
        return backward_with<T, KB>(in, dout, dfinal, dx, dweight, dbias, dinitial);
    }
};

} // namespace

extern "C" tg_status tg_cuda_causal_conv1d_fwd(const tg_conv1d_args *args, tg_tensor *out, tg_tensor *final_states)
{
    return dispatch<forward_launch>(args, out, final_states);
}

extern "C" tg_status tg_cuda_causal_conv1d_bwd(const tg_conv1d_args *args, const tg_tensor *dout,
                                               const tg_tensor *dfinal_states, tg_tensor *dx, tg_tensor *dweight,
                                               tg_tensor *dbias, tg_tensor *dinitial_states)
{
    return dispatch<backward_launch>(args, dout, dfinal_states, dx, dweight, dbias, dinitial_states);
}
