// kernels/cuda/scan.cu: the selective scan forward and backward on the GPU.
//
// Notation as in kernels/scan.h. docs/selective_scan.md describes the design; in short:
//
//   Work split. A block owns kRows = 32 consecutive channels d of one batch row b and walks
//   one span of the sequence: the whole of it, unless the grid would leave SMs idle
//   (small B·D), when the sequence is cut into spans of whole chunks (below). Each (b, d)
//   state vector of N ≤ 16 entries is split over kLanes = 4 neighbouring lanes of
//   kStates = 4 entries each, so the recurrence runs in registers,
//   a warp holds 8 channels, and Bm, Cm (shared by every d) are read once per block.
//   Time goes in tiles of kTile = 16 steps: the block stages the tile's u, dt (softplus
//   applied once per element), dy and the Bm, Cm columns in shared memory while its
//   lanes still work on the previous tile from registers (the next tile's loads are
//   issued before the current tile is computed). Each lane loads, and finally stores,
//   kOwn = 4 consecutive steps of its channel: one 16-byte (f32) or 8-byte (bf16, f16)
//   access when the layout allows it, element by element through the strides otherwise.
//   Sums over n (the readout Cm·h, and du, ddt in the backward) are kept per lane for the
//   tile and reduced across the 4 lanes with a transposed butterfly, so a lane ends with
//   the full sums of its own 4 steps.
//
//   Forward. Per step one ex2 per state. The state at the start of every chunk is
//   written to chunk_states (f32).
//
//   Full tiles. A tile whose kTile steps all lie in the sequence (and its chunk) runs a copy
//   of the step loop with no per-step test, so the compiler can overlap the steps' loads and
//   exponentials; the last tile of a sequence or chunk runs the tested loop. Both kernels
//   are compiled per dtype, so each load and store is one access with no dtype branch.
//
//   Backward. Chunks are walked from the last to the first. Inside a chunk, a checkpoint
//   pass reruns the forward from the chunk's saved state and keeps the state at the start
//   of each tile but the last (in a small per-block workspace); then the tiles are walked
//   from the last: each recomputes its 16 states into registers, then runs the reverse
//   scan over them. No per-step state ever reaches memory.
//
//   Spans. The recurrences are linear, so a span can start before the one ahead of it is
//   done: a summary pass gives each span's end state from a zero start (forward) or the δh
//   it passes back from a zero carry (backward), and its Σ dt; a span's block then enters
//   with the true state, h_in = 2^(log2 e·Σdt·A) ⊙ h_in(previous) + summary, folded over
//   the spans before it. The summary pass is extra work, so spans are cut only where the
//   grid would leave most SMs idle (fewer blocks than half the SMs; choose_spans).
//
//   Deterministic sums. dBm, dCm (sums over d) are summed over the 8 channels of a warp
//   by a transposed butterfly of shuffles, then over the block's 4 warps in shared memory
//   in a fixed order, and written per block to a workspace; a second kernel adds the
//   blocks in order. dA, dDv and ddelta_bias (sums over b and t) are summed over t inside
//   the lane that owns the channel, written per (b, d) and added over b in order. No
//   float atomics: two runs give the same bits.
#include "kernels/scan.h"
#include "kernels/cuda/common.cuh"

#include <type_traits>

namespace {

constexpr int kLanes = 4;                // lanes per (b, d) state vector
constexpr int kStates = 4;               // state entries per lane
constexpr int kMaxN = kLanes * kStates;  // the largest N the kernels take
constexpr int kRows = 32;                // channels per block
constexpr int kThreads = kRows * kLanes; // 128
constexpr int kWarps = kThreads / 32;
constexpr int kTile = 16;                 // steps per tile
constexpr int kOwn = kTile / kLanes;      // steps each lane loads and finishes
constexpr int kPitch = kTile + 4;         // per-step tiles: rows of 20 floats (no bank conflicts)
constexpr int kNPitch = kMaxN + 4;        // Bm/Cm tiles: 16-byte aligned rows
constexpr int kMatLoaders = kThreads / 2; // threads loading Bm (and as many loading Cm)
constexpr float kLog2e = 1.4426950408889634f;
constexpr int kMaxSpans = 8;     // spans a sequence is cut into at most
constexpr int64_t kMinSpan = 64; // steps a span has at least

static_assert(kOwn == 4, "the vector loads are written for 4 steps per lane");
static_assert(kMatLoaders == kMaxN * (kTile / kOwn), "one Bm/Cm run of kOwn steps per loader");
static_assert(2 * kStates == 32 / kLanes, "the d-sum gives each lane one (kind, n) of its warp");

// A (B, X, L) tensor: element (b, x, t) at b·s0 + x·s1 + t·s2 elements from p (NULL:
// absent). vec: kOwn steps from a multiple of kOwn are one aligned vector.
struct seq {
    char *p;
    int64_t s0, s1, s2;
    bool vec;
};

// A tensor read or written element by element (A, Dv, bias, the states): strides only.
struct small {
    char *p;
    int64_t s0, s1, s2, s3;
};

struct scan_params {
    int64_t B, D, L, N, chunk, n_chunks, groups; // groups: blocks per batch row
    int64_t spans, span_chunks;                  // the sequence in spans of span_chunks chunks
    int dtype;                                   // of every tensor but the chunk states (f32)
    bool softplus;
    seq u, delta, z, Bm, Cm;
    small A, Dv, bias, init;
    // forward
    seq out;
    small final_state;
    small states; // chunk states (B, D, N, n_chunks), f32
    // backward
    seq dout;
    small dfinal;
    seq du, ddelta, dz;
    small dinit;
    float *ws_bc;         // (groups, B, 2, N, L): per block, Σ_d of the dBm and dCm terms
    float *ws_a;          // (spans, B, D, N): Σ_t over the span of the dA terms
    float *ws_dv, *ws_db; // (spans, B, D): Σ_t over the span of the dDv and ddelta_bias terms
    float *ckpt;          // per block: slots × kThreads × kStates tile start states
    int64_t slots;
    // spans
    float *span_state; // (spans, B, D, kMaxN): a span's summary (end state, or δh passed back)
    float *span_dt;    // (spans, B, D): Σ dt over the span
};

// ---- element access ----------------------------------------------------------------------

__device__ inline float half_bits_to_float(unsigned short bits, int dtype)
{
    return dtype == TG_BF16 ? __uint_as_float((unsigned)bits << 16) : __half2float(__ushort_as_half(bits));
}

__device__ inline unsigned short float_to_half_bits(float v, int dtype)
{
    return dtype == TG_BF16 ? __bfloat16_as_ushort(__float2bfloat16(v)) : __half_as_ushort(__float2half(v));
}

// Element i of a read-only input.
__device__ inline float ld(const char *p, int dtype, int64_t i)
{
    if (dtype == TG_F32) return __ldg((const float *)p + i);
    return half_bits_to_float(__ldg((const unsigned short *)p + i), dtype);
}

__device__ inline void st(char *p, int dtype, int64_t i, float v)
{
    if (dtype == TG_F32)
        ((float *)p)[i] = v;
    else
        ((unsigned short *)p)[i] = float_to_half_bits(v, dtype);
}

// The kOwn elements of a run as stored: f32 bits, or 16-bit values two to a word (the upper
// words unused). The next tile is loaded into these and converted only when staged: a
// conversion placed next to its load would stall the warp there until the load arrived,
// defeating the point of loading a tile ahead.
struct run_bits {
    unsigned w[kOwn];
};

// x = the stored v[b, row, t + k] for k < kOwn; 0 at and past t_end, and everywhere when v is
// absent.
__device__ inline void load_run(const seq v, int dtype, int64_t b, int64_t row, int64_t t, int64_t t_end, run_bits &x)
{
#pragma unroll
    for (int k = 0; k < kOwn; k++) x.w[k] = 0u;
    if (!v.p) return;
    const int64_t base = b * v.s0 + row * v.s1;
    if (v.vec && t % kOwn == 0 && t + kOwn <= t_end) {
        const int64_t i = base + t;
        if (dtype == TG_F32) {
            uint4 q = __ldg((const uint4 *)(v.p + i * 4));
            x.w[0] = q.x, x.w[1] = q.y, x.w[2] = q.z, x.w[3] = q.w;
        } else {
            uint2 q = __ldg((const uint2 *)(v.p + i * 2));
            x.w[0] = q.x, x.w[1] = q.y;
        }
        return;
    }
#pragma unroll
    for (int k = 0; k < kOwn; k++) {
        if (t + k >= t_end) continue;
        const int64_t i = base + (t + k) * v.s2;
        if (dtype == TG_F32)
            x.w[k] = __ldg((const unsigned *)v.p + i);
        else
            x.w[k / 2] |= (unsigned)__ldg((const unsigned short *)v.p + i) << (16 * (k % 2));
    }
}

// The run's elements as floats.
__device__ inline void unpack_run(const run_bits &x, int dtype, float (&out)[kOwn])
{
#pragma unroll
    for (int k = 0; k < kOwn; k++)
        out[k] = dtype == TG_F32 ? __uint_as_float(x.w[k])
                                 : half_bits_to_float((unsigned short)(x.w[k / 2] >> (16 * (k % 2))), dtype);
}

// v[b, row, t + k] = x[k] for the k with t + k < t_end.
__device__ inline void store_run(const seq v, int dtype, int64_t b, int64_t row, int64_t t, int64_t t_end,
                                 const float (&x)[kOwn])
{
    const int64_t base = b * v.s0 + row * v.s1;
    if (v.vec && t % kOwn == 0 && t + kOwn <= t_end) {
        const int64_t i = base + t;
        if (dtype == TG_F32) {
            *(float4 *)(v.p + i * 4) = make_float4(x[0], x[1], x[2], x[3]);
        } else {
            uint2 q;
            q.x = (unsigned)float_to_half_bits(x[0], dtype) | ((unsigned)float_to_half_bits(x[1], dtype) << 16);
            q.y = (unsigned)float_to_half_bits(x[2], dtype) | ((unsigned)float_to_half_bits(x[3], dtype) << 16);
            *(uint2 *)(v.p + i * 2) = q;
        }
        return;
    }
#pragma unroll
    for (int k = 0; k < kOwn; k++)
        if (t + k < t_end) st(v.p, dtype, base + (t + k) * v.s2, x[k]);
}

// ---- scalar maths ---------------------------------------------------------------------------

// 2^x from the special function unit; denormal results flush to 0 (a state decaying
// that far is 0 to float anyway).
__device__ inline float exp2_fast(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// 1/x from the special function unit, within an ulp, for x in [1, 2] (no special cases).
__device__ inline float recip_unit(float x)
{
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// 1/(1 + e^-v) from e = exp(−|v|), in the form that cannot overflow.
__device__ inline float sigmoid_from(float v, float e)
{
    const float r = recip_unit(1.0f + e);
    return v >= 0.0f ? r : e * r;
}

__device__ inline float sigmoid(float v) { return sigmoid_from(v, expf(-fabsf(v))); }

// dt from delta (+ bias): softplus, log(1 + e^v) = max(v, 0) + log1p(e^−|v|) (the CPU
// kernel's form), and d(dt)/d(delta) = sigmoid(v) in *slope, from the same exponential.
__device__ inline float step_dt(float v, bool use_softplus, float *slope)
{
    if (!use_softplus) {
        *slope = 1.0f;
        return v;
    }
    const float e = expf(-fabsf(v));
    *slope = sigmoid_from(v, e);
    return fmaxf(v, 0.0f) + log1pf(e);
}

// ---- reductions across lanes --------------------------------------------------------------

// v holds one lane's partial sums (over its states) for M steps; the result is the sum over
// the row's 4 lanes, lane l keeping steps [l·M/4, (l+1)·M/4). Two butterfly stages, each
// halving what a lane keeps: M/2 + M/4 shuffles instead of 2·M. The order of additions is
// fixed.
template <int M> __device__ inline void row_sum_transposed(const float (&v)[M], float (&out)[M / kLanes], int lane_n)
{
    static_assert(kLanes == 4 && M % 4 == 0, "two stages over four lanes");
    float w[M / 2];
    const bool hi = lane_n & 2;
#pragma unroll
    for (int m = 0; m < M / 2; m++) {
        float send = hi ? v[m] : v[m + M / 2], keep = hi ? v[m + M / 2] : v[m];
        w[m] = keep + __shfl_xor_sync(0xffffffffu, send, 2);
    }
    const bool lo = lane_n & 1;
#pragma unroll
    for (int m = 0; m < M / 4; m++) {
        float send = lo ? w[m] : w[m + M / 4], keep = lo ? w[m + M / 4] : w[m];
        out[m] = keep + __shfl_xor_sync(0xffffffffu, send, 1);
    }
}

// v: a lane's 8 terms of one step (dBm terms of its 4 states, then dCm terms). Returns the
// sum over the warp's 8 channels (lanes differing in bits 2–4) of term (lane >> 2) & 7:
// three halving stages of 4 + 2 + 1 shuffles.
__device__ inline float warp_channel_sum(const float (&v)[8], int lane)
{
    float w[4], x[2];
    bool up = lane & 16;
#pragma unroll
    for (int m = 0; m < 4; m++) {
        float send = up ? v[m] : v[m + 4], keep = up ? v[m + 4] : v[m];
        w[m] = keep + __shfl_xor_sync(0xffffffffu, send, 16);
    }
    up = lane & 8;
#pragma unroll
    for (int m = 0; m < 2; m++) {
        float send = up ? w[m] : w[m + 2], keep = up ? w[m + 2] : w[m];
        x[m] = keep + __shfl_xor_sync(0xffffffffu, send, 8);
    }
    up = lane & 4;
    float send = up ? x[0] : x[1], keep = up ? x[1] : x[0];
    return keep + __shfl_xor_sync(0xffffffffu, send, 4);
}

// ---- per-thread setup ------------------------------------------------------------------------

// Where a thread sits: channel row r of the block (lanes lane_n = 0..3 of it), and, for
// staging, which Bm/Cm run it loads.
struct place {
    int tid, lane, warp, lane_n, r;
    int64_t b, g, d, dr; // dr: the row read (rows past D read row D − 1 and store nothing)
    int64_t span;
    bool row_ok;
    int mat, mat_n, mat_q; // loads matrix mat (0: Bm, 1: Cm), state mat_n, steps [mat_q·kOwn, +kOwn)
};

// Blocks go span by span, each span's B·groups blocks in a row; first_span: the span of
// block 0 (1 for the backward's summary pass, which the first span does not need).
__device__ inline place place_of(const scan_params &P, int64_t first_span)
{
    place w;
    w.tid = threadIdx.x;
    w.lane = w.tid % 32;
    w.warp = w.tid / 32;
    w.lane_n = w.tid % kLanes;
    w.r = w.tid / kLanes;
    const int64_t cells = P.B * P.groups, cell = blockIdx.x % cells;
    w.span = first_span + blockIdx.x / cells;
    w.b = cell / P.groups;
    w.g = cell % P.groups;
    w.d = w.g * kRows + w.r;
    w.row_ok = w.d < P.D;
    w.dr = w.row_ok ? w.d : P.D - 1;
    w.mat = w.tid / kMatLoaders;
    w.mat_n = w.tid % kMaxN;
    w.mat_q = (w.tid % kMatLoaders) / kMaxN;
    return w;
}

__device__ inline int state_n(const place &w, int j) { return w.lane_n * kStates + j; }

// A[d, n] for the lane's states (0 past N: those states stay 0).
__device__ inline void load_A(const scan_params &P, int dtype, const place &w, float (&A)[kStates])
{
#pragma unroll
    for (int j = 0; j < kStates; j++) {
        int n = state_n(w, j);
        A[j] = n < P.N ? ld(P.A.p, dtype, w.dr * P.A.s0 + n * P.A.s1) : 0.0f;
    }
}

// x[j] = t[b, d, n] for a (B, D, N) tensor (0 when absent or past N).
__device__ inline void load_bdn(const small &t, int dtype, const scan_params &P, const place &w, float (&x)[kStates])
{
#pragma unroll
    for (int j = 0; j < kStates; j++) {
        int n = state_n(w, j);
        x[j] = t.p && n < P.N ? ld(t.p, dtype, w.b * t.s0 + w.dr * t.s1 + n * t.s2) : 0.0f;
    }
}

__device__ inline void store_bdn(const small &t, int dtype, const scan_params &P, const place &w,
                                 const float (&x)[kStates])
{
#pragma unroll
    for (int j = 0; j < kStates; j++) {
        int n = state_n(w, j);
        if (n < P.N) st(t.p, dtype, w.b * t.s0 + w.d * t.s1 + n * t.s2, x[j]);
    }
}

__device__ inline float load_channel(const small &t, int dtype, int64_t d)
{
    return t.p ? ld(t.p, dtype, d * t.s0) : 0.0f;
}

// The Bm (mat 0) or Cm (mat 1) run this thread stages: 0 past N.
__device__ inline void load_mat_run(const scan_params &P, int dtype, const place &w, int64_t t0, int64_t t_end,
                                    run_bits &x)
{
    const seq none = {};
    load_run(w.mat_n < P.N ? (w.mat == 0 ? P.Bm : P.Cm) : none, dtype, w.b, w.mat_n, t0 + w.mat_q * kOwn, t_end, x);
}

__device__ inline void store_mat_run(float (*tile)[kNPitch], const place &w, const run_bits &bits, int dtype)
{
    float x[kOwn];
    unpack_run(bits, dtype, x);
#pragma unroll
    for (int k = 0; k < kOwn; k++) tile[w.mat_q * kOwn + k][w.mat_n] = x[k];
}

__device__ inline void read4(const float (*tile)[kNPitch], int i, int lane_n, float (&x)[kStates])
{
    float4 q = *(const float4 *)&tile[i][lane_n * kStates];
    x[0] = q.x, x[1] = q.y, x[2] = q.z, x[3] = q.w;
}

__device__ inline float silu_of(float z) { return z * sigmoid(z); }

// silu'(z) from s = sigmoid(z).
__device__ inline float silu_slope(float z, float s) { return s * (1.0f + z * (1.0f - s)); }

// ---- spans -------------------------------------------------------------------------------------

// The first step of span s (L past the last span).
__device__ inline int64_t span_begin(const scan_params &P, int64_t s) { return min(s * P.span_chunks * P.chunk, P.L); }

__device__ inline int64_t span_index(const scan_params &P, const place &w, int64_t s)
{
    return (s * P.B + w.b) * P.D + w.dr;
}

// v ← 2^(log2 e·Σdt·A) ⊙ v + summary of span s: a state carried across the whole span.
__device__ inline void carry_across_span(const scan_params &P, const place &w, int64_t s, const float (&A)[kStates],
                                         float (&v)[kStates])
{
    const int64_t i = span_index(P, w, s);
    const float dt2 = P.span_dt[i] * kLog2e;
    const float4 q = *(const float4 *)(P.span_state + i * kMaxN + w.lane_n * kStates);
    const float summary[kStates] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int j = 0; j < kStates; j++) v[j] = fmaf(exp2_fast(dt2 * A[j]), v[j], summary[j]);
}

// A summary pass's result: v (the lane's states) and Σ dt (each lane's share of the steps).
__device__ inline void write_span_summary(const scan_params &P, const place &w, const float (&v)[kStates], float dt_sum)
{
    dt_sum += __shfl_xor_sync(0xffffffffu, dt_sum, 1);
    dt_sum += __shfl_xor_sync(0xffffffffu, dt_sum, 2);
    if (!w.row_ok) return;
    const int64_t i = span_index(P, w, w.span);
    *(float4 *)(P.span_state + i * kMaxN + w.lane_n * kStates) = make_float4(v[0], v[1], v[2], v[3]);
    if (w.lane_n == 0) P.span_dt[i] = dt_sum;
}

// ---- forward ---------------------------------------------------------------------------------

// The state at the start of chunk `index`, kept for the backward.
__device__ inline void save_chunk_state(const scan_params &P, const place &w, int64_t index, const float (&h)[kStates])
{
    if (!w.row_ok) return;
#pragma unroll
    for (int j = 0; j < kStates; j++) {
        int n = state_n(w, j);
        if (n < P.N)
            ((float *)P.states.p)[w.b * P.states.s0 + w.d * P.states.s1 + n * P.states.s2 + index * P.states.s3] = h[j];
    }
}

// One step of the recurrence from the staged tile, without the readout.
__device__ inline void advance_step(const float (*s_dt)[kPitch], const float (*s_u)[kPitch],
                                    const float (*s_B)[kNPitch], const place &w, int i, const float (&A)[kStates],
                                    float (&h)[kStates])
{
    const float dt = s_dt[w.r][i], dtu = dt * s_u[w.r][i], dt2 = dt * kLog2e;
    float Bv[kStates];
    read4(s_B, i, w.lane_n, Bv);
#pragma unroll
    for (int j = 0; j < kStates; j++) h[j] = fmaf(exp2_fast(dt2 * A[j]), h[j], dtu * Bv[j]);
}

// One step of the recurrence from the staged tile; returns this lane's share of Cm·h.
// exp(dt·A) = 2^((dt·log2 e)·A), formed exactly so in the backward's recomputation.
__device__ inline float fwd_step(const float (*s_dt)[kPitch], const float (*s_u)[kPitch], const float (*s_B)[kNPitch],
                                 const float (*s_C)[kNPitch], const place &w, int i, const float (&A)[kStates],
                                 float (&h)[kStates])
{
    const float dt = s_dt[w.r][i], dtu = dt * s_u[w.r][i], dt2 = dt * kLog2e;
    float Bv[kStates], Cv[kStates], y = 0.0f;
    read4(s_B, i, w.lane_n, Bv);
    read4(s_C, i, w.lane_n, Cv);
#pragma unroll
    for (int j = 0; j < kStates; j++) {
        h[j] = fmaf(exp2_fast(dt2 * A[j]), h[j], dtu * Bv[j]);
        y = fmaf(Cv[j], h[j], y);
    }
    return y;
}

// kDtype: the dtype of every tensor but the chunk states (a template argument, so that each
// load and store compiles to one access). kEndOnly: the spans' summary pass, which writes
// only each span's end state from a zero start and its Σ dt.
template <int kDtype, bool kEndOnly> __global__ void __launch_bounds__(kThreads) scan_fwd_kernel(scan_params P)
{
    __shared__ __align__(16) float s_dt[kRows][kPitch];
    __shared__ __align__(16) float s_u[kRows][kPitch];
    __shared__ __align__(16) float s_B[kTile][kNPitch];
    __shared__ __align__(16) float s_C[kTile][kNPitch];

    const place w = place_of(P, 0);
    const int64_t t_begin = span_begin(P, w.span), t_end = span_begin(P, w.span + 1);
    float A[kStates], h[kStates];
    load_A(P, kDtype, w, A);
    if (kEndOnly) {
#pragma unroll
        for (int j = 0; j < kStates; j++) h[j] = 0.0f;
    } else {
        load_bdn(P.init, kDtype, P, w, h);
        for (int64_t s = 0; s < w.span; s++) carry_across_span(P, w, s, A, h);
    }
    const float bias = load_channel(P.bias, kDtype, w.dr), skip = load_channel(P.Dv, kDtype, w.dr);
    const int own = w.lane_n * kOwn; // this lane's first step within a tile
    // Chunks that start on tile starts leave a full tile's steps without a branch.
    const bool tile_chunks = P.chunk % kTile == 0;
    const bool stages_mat = !kEndOnly || w.mat == 0; // the summary needs no Cm

    // The next tile's inputs, loaded one tile ahead.
    run_bits pu, pd, pz, pm;
    auto fetch = [&](int64_t t0) {
        const int64_t t_stop = min(t0 + kTile, t_end);
        load_run(P.u, kDtype, w.b, w.dr, t0 + own, t_stop, pu);
        load_run(P.delta, kDtype, w.b, w.dr, t0 + own, t_stop, pd);
        if (!kEndOnly) load_run(P.z, kDtype, w.b, w.dr, t0 + own, t_stop, pz);
        if (stages_mat) load_mat_run(P, kDtype, w, t0, t_stop, pm);
    };
    fetch(t_begin);
    int64_t next_save = P.states.p && !kEndOnly ? t_begin : INT64_MAX, save_index = t_begin / P.chunk;
    float dt_sum = 0.0f;

    for (int64_t t0 = t_begin; t0 < t_end; t0 += kTile) {
        const int len = (int)min((int64_t)kTile, t_end - t0);
        __syncthreads(); // the previous tile's readers are done with the shared tiles
        float own_u[kOwn], own_gate[kOwn], own_delta[kOwn], own_z[kOwn];
        unpack_run(pu, kDtype, own_u);
        unpack_run(pd, kDtype, own_delta);
        if (!kEndOnly) unpack_run(pz, kDtype, own_z);
#pragma unroll
        for (int k = 0; k < kOwn; k++) {
            float slope;
            const float dt = step_dt(own_delta[k] + bias, P.softplus, &slope);
            s_dt[w.r][own + k] = dt;
            s_u[w.r][own + k] = own_u[k];
            if (kEndOnly && own + k < len) dt_sum += dt;
            if (!kEndOnly) own_gate[k] = P.z.p ? silu_of(own_z[k]) : 1.0f;
        }
        if (stages_mat) store_mat_run(w.mat == 0 ? s_B : s_C, w, pm, kDtype);
        __syncthreads();
        if (t0 + kTile < t_end) fetch(t0 + kTile);

        if (kEndOnly) {
            if (len == kTile) {
#pragma unroll
                for (int i = 0; i < kTile; i++) advance_step(s_dt, s_u, s_B, w, i, A, h);
            } else {
#pragma unroll
                for (int i = 0; i < kTile; i++)
                    if (i < len) advance_step(s_dt, s_u, s_B, w, i, A, h);
            }
            continue;
        }
        float yp[kTile];                   // this lane's share of Cm·h per step
        if (len == kTile && tile_chunks) { // no step needs a test: the compiler can interleave them
            if (t0 == next_save) {
                save_chunk_state(P, w, save_index++, h);
                next_save += P.chunk;
            }
#pragma unroll
            for (int i = 0; i < kTile; i++) yp[i] = fwd_step(s_dt, s_u, s_B, s_C, w, i, A, h);
        } else {
#pragma unroll
            for (int i = 0; i < kTile; i++) {
                yp[i] = 0.0f;
                if (i < len) { // the same for the whole block
                    if (t0 + i == next_save) {
                        save_chunk_state(P, w, save_index++, h);
                        next_save += P.chunk;
                    }
                    yp[i] = fwd_step(s_dt, s_u, s_B, s_C, w, i, A, h);
                }
            }
        }
        float y[kOwn], out[kOwn];
        row_sum_transposed<kTile>(yp, y, w.lane_n);
#pragma unroll
        for (int k = 0; k < kOwn; k++) out[k] = fmaf(skip, own_u[k], y[k]) * own_gate[k];
        if (w.row_ok) store_run(P.out, kDtype, w.b, w.d, t0 + own, t0 + len, out);
    }
    if (kEndOnly)
        write_span_summary(P, w, h, dt_sum);
    else if (w.row_ok && P.final_state.p && w.span == P.spans - 1)
        store_bdn(P.final_state, kDtype, P, w, h);
}

// ---- backward --------------------------------------------------------------------------------

// One tile of the backward's walk. Chunks go from the span's last to its first (lo); inside
// chunk c of `tiles` tiles: checkpoint tiles k = 0 … tiles − 2 (forward only), then reverse
// tiles k = tiles − 1 … 0.
struct tile_item {
    int64_t c, k, tiles, lo; // c < 0: done
    bool rev;
};

__device__ inline int64_t tiles_in_chunk(const scan_params &P, int64_t c)
{
    const int64_t c0 = c * P.chunk, c1 = min(c0 + P.chunk, P.L);
    return (c1 - c0 + kTile - 1) / kTile;
}

__device__ inline tile_item chunk_first(const scan_params &P, int64_t c, int64_t lo)
{
    tile_item it;
    it.c = c >= lo ? c : -1;
    it.k = 0;
    it.lo = lo;
    it.tiles = it.c >= 0 ? tiles_in_chunk(P, c) : 0;
    it.rev = it.tiles == 1; // a one-tile chunk needs no checkpoints
    return it;
}

__device__ inline tile_item next_item(const scan_params &P, tile_item it)
{
    if (!it.rev) {
        if (it.k + 1 < it.tiles - 1) {
            it.k++;
        } else {
            it.rev = true;
            it.k = it.tiles - 1;
        }
        return it;
    }
    if (it.k > 0) {
        it.k--;
        return it;
    }
    return chunk_first(P, it.c - 1, it.lo);
}

__device__ inline int64_t item_t0(const scan_params &P, const tile_item &it) { return it.c * P.chunk + it.k * kTile; }

__device__ inline int64_t item_end(const scan_params &P, const tile_item &it)
{
    return min(item_t0(P, it) + kTile, min((it.c + 1) * P.chunk, P.L));
}

// Whether the tile starts from a stored state (the chunk's, or a checkpoint) rather than
// from the registers: all but the checkpoint tiles after the first, and the last reverse
// tile of a chunk that had checkpoint tiles (which ended exactly there).
__device__ inline bool item_loads_state(const tile_item &it)
{
    return it.rev ? !(it.k == it.tiles - 1 && it.tiles > 1) : it.k == 0;
}

__device__ inline float *ckpt_slot(const scan_params &P, const place &w, int64_t slot)
{
    return P.ckpt + ((blockIdx.x * P.slots + slot) * kThreads + w.tid) * kStates;
}

template <int kDtype> __global__ void __launch_bounds__(kThreads, 3) scan_bwd_kernel(scan_params P)
{
    __shared__ __align__(16) float s_dt[kRows][kPitch];
    __shared__ __align__(16) float s_u[kRows][kPitch];
    __shared__ __align__(16) float s_dy[kRows][kPitch];
    __shared__ __align__(16) float s_gz[kRows][kPitch];    // dout·silu'(z), for dz
    __shared__ __align__(16) float s_slope[kRows][kPitch]; // d(dt)/d(delta)
    __shared__ __align__(16) float s_B[kTile][kNPitch];
    __shared__ __align__(16) float s_C[kTile][kNPitch];
    __shared__ float s_red[kWarps][kTile][33]; // per warp and step: the warp's Σ_d terms, one per lane

    const place w = place_of(P, 0);
    float A[kStates], h[kStates], carry[kStates], dA_sum[kStates];
    load_A(P, kDtype, w, A);
#pragma unroll
    for (int j = 0; j < kStates; j++) {
        dA_sum[j] = 0.0f;
        h[j] = 0.0f;
    }
    load_bdn(P.dfinal, kDtype, P, w, carry); // δh flowing into the last step
    for (int64_t s = P.spans - 1; s > w.span; s--) carry_across_span(P, w, s, A, carry); // … and into this span
    if (!w.row_ok)
#pragma unroll
        for (int j = 0; j < kStates; j++) carry[j] = 0.0f; // padding rows add nothing to the d-sums
    const float bias = load_channel(P.bias, kDtype, w.dr), skip = load_channel(P.Dv, kDtype, w.dr);
    const int own = w.lane_n * kOwn;
    const bool want_bc = P.ws_bc != NULL;
    float dv_sum = 0.0f, db_sum = 0.0f;

    // The next tile's inputs (and start state), loaded one tile ahead.
    run_bits pu, pd, pz, po, pm;
    float ph[kStates];
    auto fetch = [&](const tile_item &it) {
        const int64_t t0 = item_t0(P, it), t_end = item_end(P, it);
        load_run(P.u, kDtype, w.b, w.dr, t0 + own, t_end, pu);
        load_run(P.delta, kDtype, w.b, w.dr, t0 + own, t_end, pd);
        if (it.rev) {
            load_run(P.z, kDtype, w.b, w.dr, t0 + own, t_end, pz);
            load_run(P.dout, kDtype, w.b, w.dr, t0 + own, t_end, po);
        }
        if (it.rev || w.mat == 0) load_mat_run(P, kDtype, w, t0, t_end, pm);
        if (item_loads_state(it)) {
            if (it.k == 0) {
#pragma unroll
                for (int j = 0; j < kStates; j++) {
                    int n = state_n(w, j);
                    ph[j] = n < P.N ? __ldg((const float *)P.states.p + w.b * P.states.s0 + w.dr * P.states.s1 +
                                            n * P.states.s2 + it.c * P.states.s3)
                                    : 0.0f;
                }
            } else { // written by this thread in this chunk's checkpoint pass
                float4 q = *(const float4 *)ckpt_slot(P, w, it.k - 1);
                ph[0] = q.x, ph[1] = q.y, ph[2] = q.z, ph[3] = q.w;
            }
        }
    };

    const int64_t first_chunk = w.span * P.span_chunks;
    tile_item it = chunk_first(P, min(first_chunk + P.span_chunks, P.n_chunks) - 1, first_chunk);
    fetch(it);
    while (it.c >= 0) {
        const int64_t t0 = item_t0(P, it), t_end = item_end(P, it);
        const int len = (int)(t_end - t0);
        __syncthreads(); // the previous tile's readers are done with the shared tiles
        {
            float u[kOwn], delta[kOwn], z[kOwn], dout[kOwn];
            unpack_run(pu, kDtype, u);
            unpack_run(pd, kDtype, delta);
            unpack_run(pz, kDtype, z);
            unpack_run(po, kDtype, dout);
#pragma unroll
            for (int k = 0; k < kOwn; k++) {
                float slope;
                s_dt[w.r][own + k] = step_dt(delta[k] + bias, P.softplus, &slope);
                s_u[w.r][own + k] = u[k];
                if (it.rev) { // dy = dout·silu(z); dz = dout·y·silu'(z) needs y, so keep dout·silu'(z)
                    const float sz = sigmoid(z[k]);
                    const float gate = P.z.p ? z[k] * sz : 1.0f;
                    s_gz[w.r][own + k] = P.z.p ? dout[k] * silu_slope(z[k], sz) : 0.0f;
                    s_dy[w.r][own + k] = w.row_ok ? dout[k] * gate : 0.0f;
                    s_slope[w.r][own + k] = slope;
                }
            }
        }
        if (w.mat == 0)
            store_mat_run(s_B, w, pm, kDtype);
        else if (it.rev)
            store_mat_run(s_C, w, pm, kDtype);
        if (item_loads_state(it))
#pragma unroll
            for (int j = 0; j < kStates; j++) h[j] = ph[j];
        __syncthreads();
        const tile_item next = next_item(P, it);

        // A reverse tile: first the states after each step, hs[i], and the readout; then the
        // reverse scan over the tile, with δh = Cm·dy + carry at each step:
        //   carry ← Ā·δh,  Σ_n δh·Bm (p1: for du, ddt),  Σ_n δh·A·Ā·h_prev (p2: for ddt),
        //   dA += δh·dt·Ā·h_prev,  dBm += δh·dt·u,  dCm += dy·h (the last two summed over d).
        // kFull: all kTile steps are in the tile, so no step needs a test.
        auto reverse_tile = [&](auto full_tile, float(&p1)[kTile], float(&p2)[kTile], float(&dA_tile)[kStates]) {
            constexpr bool kFull = decltype(full_tile)::value;
            float h0[kStates], hs[kTile][kStates], yp[kTile];
#pragma unroll
            for (int j = 0; j < kStates; j++) h0[j] = h[j];
#pragma unroll
            for (int i = 0; i < kTile; i++) {
                yp[i] = kFull || i < len ? fwd_step(s_dt, s_u, s_B, s_C, w, i, A, h) : 0.0f;
#pragma unroll
                for (int j = 0; j < kStates; j++) hs[i][j] = h[j];
            }
            { // dz = dout·y·silu'(z) with y = Cm·h + Dv·u: done here, so y need not wait for the walk
                float y_own[kOwn], dz[kOwn];
                row_sum_transposed<kTile>(yp, y_own, w.lane_n);
#pragma unroll
                for (int k = 0; k < kOwn; k++) dz[k] = s_gz[w.r][own + k] * fmaf(skip, s_u[w.r][own + k], y_own[k]);
                if (w.row_ok && P.dz.p) store_run(P.dz, kDtype, w.b, w.d, t0 + own, t_end, dz);
            }
#pragma unroll
            for (int j = 0; j < kStates; j++) dA_tile[j] = 0.0f;
#pragma unroll
            for (int i = kTile - 1; i >= 0; i--) {
                // The next tile's loads go out halfway, once half of hs is spent (fewer live registers).
                if (i == kTile / 2 - 1 && next.c >= 0) fetch(next);
                p1[i] = p2[i] = 0.0f;
                if (kFull || i < len) {
                    const float dt = s_dt[w.r][i], dtu = dt * s_u[w.r][i], dt2 = dt * kLog2e, dy = s_dy[w.r][i];
                    float Bv[kStates], Cv[kStates], terms[2 * kStates];
                    read4(s_B, i, w.lane_n, Bv);
                    read4(s_C, i, w.lane_n, Cv);
#pragma unroll
                    for (int j = 0; j < kStates; j++) {
                        const float decay = exp2_fast(dt2 * A[j]);
                        const float h_prev = i > 0 ? hs[i - 1][j] : h0[j];
                        const float dh = fmaf(Cv[j], dy, carry[j]);
                        const float q = dh * (decay * h_prev);
                        p1[i] = fmaf(dh, Bv[j], p1[i]);
                        p2[i] = fmaf(q, A[j], p2[i]);
                        dA_tile[j] = fmaf(q, dt, dA_tile[j]);
                        terms[j] = dh * dtu;
                        terms[kStates + j] = dy * hs[i][j];
                        carry[j] = decay * dh;
                    }
                    if (want_bc) s_red[w.warp][i][w.lane] = warp_channel_sum(terms, w.lane);
                }
            }
        };

        if (!it.rev) { // checkpoint tile: advance the state, keep it for reverse tile k + 1
            if (next.c >= 0) fetch(next);
            auto advance = [&](auto full_tile) {
                constexpr bool kFull = decltype(full_tile)::value; // no step needs a test
#pragma unroll
                for (int i = 0; i < kTile; i++)
                    if (kFull || i < len) advance_step(s_dt, s_u, s_B, w, i, A, h);
            };
            if (len == kTile)
                advance(std::true_type{});
            else
                advance(std::false_type{});
            *(float4 *)ckpt_slot(P, w, it.k) = make_float4(h[0], h[1], h[2], h[3]);
            it = next;
            continue;
        }

        // Reverse tile: the gradients of its steps, and δh carried to the tile before.
        float p1[kTile], p2[kTile], dA_tile[kStates];
        if (len == kTile)
            reverse_tile(std::true_type{}, p1, p2, dA_tile);
        else
            reverse_tile(std::false_type{}, p1, p2, dA_tile);
#pragma unroll
        for (int j = 0; j < kStates; j++) dA_sum[j] += dA_tile[j];

        // The per-step gradients of this lane's own steps.
        float s1[kOwn], s2[kOwn], du[kOwn], ddelta[kOwn], dv_tile = 0.0f, db_tile = 0.0f;
        row_sum_transposed<kTile>(p1, s1, w.lane_n);
        row_sum_transposed<kTile>(p2, s2, w.lane_n);
#pragma unroll
        for (int k = 0; k < kOwn; k++) {
            const int i = own + k;
            const float dt = s_dt[w.r][i], u = s_u[w.r][i], dy = s_dy[w.r][i];
            du[k] = fmaf(s1[k], dt, skip * dy);
            ddelta[k] = fmaf(s1[k], u, s2[k]) * s_slope[w.r][i];
            if (i < len) {
                dv_tile = fmaf(dy, u, dv_tile);
                db_tile += ddelta[k];
            }
        }
        dv_sum += dv_tile;
        db_sum += db_tile;
        if (w.row_ok) {
            if (P.du.p) store_run(P.du, kDtype, w.b, w.d, t0 + own, t_end, du);
            if (P.ddelta.p) store_run(P.ddelta, kDtype, w.b, w.d, t0 + own, t_end, ddelta);
        }

        // The block's Σ_d of the dBm and dCm terms: the warps' sums added in order.
        if (want_bc) {
            __syncthreads();
            for (int e = w.tid; e < kTile * 32; e += kThreads) {
                const int i = e % kTile, lane = e / kTile, group = lane >> 2, n = (lane & 3) * kStates + (group & 3);
                if (i < len && n < P.N) {
                    float sum = 0.0f;
#pragma unroll
                    for (int v = 0; v < kWarps; v++) sum += s_red[v][i][lane];
                    const int64_t kind = group >> 2; // 0: dBm, 1: dCm
                    P.ws_bc[(((w.g * P.B + w.b) * 2 + kind) * P.N + n) * P.L + t0 + i] = sum;
                }
            }
        }
        it = next;
    }

    // Σ_t of the dDv and ddelta_bias terms over the row's lanes, in a fixed order.
    dv_sum += __shfl_xor_sync(0xffffffffu, dv_sum, 1);
    dv_sum += __shfl_xor_sync(0xffffffffu, dv_sum, 2);
    db_sum += __shfl_xor_sync(0xffffffffu, db_sum, 1);
    db_sum += __shfl_xor_sync(0xffffffffu, db_sum, 2);
    if (!w.row_ok) return;
    const int64_t cell = span_index(P, w, w.span); // the sums per span, added over spans and b in order
    if (w.lane_n == 0 && P.ws_dv) P.ws_dv[cell] = dv_sum;
    if (w.lane_n == 0 && P.ws_db) P.ws_db[cell] = db_sum;
#pragma unroll
    for (int j = 0; j < kStates; j++) {
        int n = state_n(w, j);
        if (P.ws_a && n < P.N) P.ws_a[cell * P.N + n] = dA_sum[j];
    }
    if (P.dinit.p && w.span == 0) store_bdn(P.dinit, kDtype, P, w, carry); // what reaches h_{−1} through Ā_0
}

// The backward's summary pass for spans 1 … spans − 1: the δh each passes back to the span
// before it from a zero carry at its end, and its Σ dt. Only δh's recurrence, δh_t =
// Cm_t·dy_t + carry, carry ← Ā_t·δh_t, with the main pass's arithmetic.
template <int kDtype> __global__ void __launch_bounds__(kThreads) scan_bwd_summary_kernel(scan_params P)
{
    __shared__ __align__(16) float s_dt[kRows][kPitch];
    __shared__ __align__(16) float s_dy[kRows][kPitch];
    __shared__ __align__(16) float s_C[kTile][kNPitch];

    const place w = place_of(P, 1);
    const int64_t t_begin = span_begin(P, w.span), t_end = span_begin(P, w.span + 1);
    float A[kStates], carry[kStates];
    load_A(P, kDtype, w, A);
#pragma unroll
    for (int j = 0; j < kStates; j++) carry[j] = 0.0f;
    const float bias = load_channel(P.bias, kDtype, w.dr);
    const int own = w.lane_n * kOwn;
    float dt_sum = 0.0f;

    run_bits pd, pz, po, pm;
    auto fetch = [&](int64_t t0) {
        const int64_t t_stop = min(t0 + kTile, t_end);
        load_run(P.delta, kDtype, w.b, w.dr, t0 + own, t_stop, pd);
        load_run(P.z, kDtype, w.b, w.dr, t0 + own, t_stop, pz);
        load_run(P.dout, kDtype, w.b, w.dr, t0 + own, t_stop, po);
        if (w.mat == 1) load_mat_run(P, kDtype, w, t0, t_stop, pm);
    };
    const int64_t tiles = (t_end - t_begin + kTile - 1) / kTile;
    fetch(t_begin + (tiles - 1) * kTile);
    for (int64_t k = tiles - 1; k >= 0; k--) {
        const int64_t t0 = t_begin + k * kTile;
        const int len = (int)min((int64_t)kTile, t_end - t0);
        __syncthreads(); // the previous tile's readers are done with the shared tiles
        float delta[kOwn], z[kOwn], dout[kOwn];
        unpack_run(pd, kDtype, delta);
        unpack_run(pz, kDtype, z);
        unpack_run(po, kDtype, dout);
#pragma unroll
        for (int q = 0; q < kOwn; q++) {
            float slope;
            const float dt = step_dt(delta[q] + bias, P.softplus, &slope);
            s_dt[w.r][own + q] = dt;
            s_dy[w.r][own + q] = w.row_ok ? dout[q] * (P.z.p ? silu_of(z[q]) : 1.0f) : 0.0f;
            if (own + q < len) dt_sum += dt;
        }
        if (w.mat == 1) store_mat_run(s_C, w, pm, kDtype);
        __syncthreads();
        if (k > 0) fetch(t0 - kTile);
#pragma unroll
        for (int i = kTile - 1; i >= 0; i--) {
            if (i >= len) continue;
            const float dt2 = s_dt[w.r][i] * kLog2e, dy = s_dy[w.r][i];
            float Cv[kStates];
            read4(s_C, i, w.lane_n, Cv);
#pragma unroll
            for (int j = 0; j < kStates; j++) carry[j] = exp2_fast(dt2 * A[j]) * fmaf(Cv[j], dy, carry[j]);
        }
    }
    write_span_summary(P, w, carry, dt_sum);
}

// dBm[b, n, t], dCm[b, n, t]: the blocks' sums added over the blocks in order.
__global__ void sum_bc_kernel(const float *ws, int64_t groups, int64_t per_group, int64_t N, int64_t L, seq dBm,
                              seq dCm, int dtype)
{
    for (int64_t idx = tg_global_index(); idx < per_group; idx += tg_global_stride()) {
        const int64_t t = idx % L, n = (idx / L) % N, kind = (idx / (L * N)) % 2, b = idx / (2 * L * N);
        const seq dst = kind ? dCm : dBm;
        if (!dst.p) continue;
        float sum = 0.0f;
        for (int64_t g = 0; g < groups; g++) sum += ws[g * per_group + idx];
        st(dst.p, dtype, b * dst.s0 + n * dst.s1 + t * dst.s2, sum);
    }
}

// dA[d, n] = Σ_r ws_a[r, d, n] over the B rows of the workspaces (b of each span), in order;
// dDv[d], ddelta_bias[d] likewise.
__global__ void sum_channels_kernel(const float *ws_a, const float *ws_dv, const float *ws_db, int64_t B, int64_t D,
                                    int64_t N, small dA, small dDv, small db, int dtype)
{
    const int64_t n_a = D * N;
    for (int64_t idx = tg_global_index(); idx < n_a + 2 * D; idx += tg_global_stride()) {
        float sum = 0.0f;
        if (idx < n_a) {
            if (!ws_a) continue;
            for (int64_t b = 0; b < B; b++) sum += ws_a[b * n_a + idx];
            st(dA.p, dtype, (idx / N) * dA.s0 + (idx % N) * dA.s1, sum);
        } else {
            const bool is_dv = idx < n_a + D;
            const float *ws = is_dv ? ws_dv : ws_db;
            const small dst = is_dv ? dDv : db;
            const int64_t d = is_dv ? idx - n_a : idx - n_a - D;
            if (!ws) continue;
            for (int64_t b = 0; b < B; b++) sum += ws[b * D + d];
            st(dst.p, dtype, d * dst.s0, sum);
        }
    }
}

// ---- launching ------------------------------------------------------------------------------

const char *const OP = "tg_selective_scan";

seq seq_of(const tg_tensor *t)
{
    seq v = {};
    if (!t) return v;
    v.p = tg_bytes(t);
    v.s0 = t->strides[0];
    v.s1 = t->strides[1];
    v.s2 = t->strides[2];
    // A run of kOwn steps is one aligned vector when steps are adjacent and every row starts
    // on a vector boundary (strides of size-1 dimensions never matter).
    const size_t vec_bytes = (size_t)kOwn * tg_dtype_size(t->dtype);
    v.vec = t->strides[2] == 1 && (uintptr_t)v.p % vec_bytes == 0 && (t->shape[0] == 1 || t->strides[0] % kOwn == 0) &&
            (t->shape[1] == 1 || t->strides[1] % kOwn == 0);
    return v;
}

small small_of(const tg_tensor *t)
{
    small v = {};
    if (!t) return v;
    v.p = tg_bytes(t);
    v.s0 = t->strides[0];
    v.s1 = t->ndim > 1 ? t->strides[1] : 0;
    v.s2 = t->ndim > 2 ? t->strides[2] : 0;
    v.s3 = t->ndim > 3 ? t->strides[3] : 0;
    return v;
}

// The limits of the CUDA kernels, checked before anything runs.
tg_status check_supported(const tg_scan_args *a)
{
    const tg_dtype dtype = a->u->dtype;
    if (dtype != TG_F32 && dtype != TG_BF16 && dtype != TG_F16)
        return tg_set_error(TG_ERR_DTYPE, "%s: the CUDA kernels take f32, bf16 and f16 (u is %s; f64 runs on the cpu)",
                            OP, tg_dtype_name(dtype));
    if (a->A->shape[1] > kMaxN)
        return tg_set_error(TG_ERR_INVALID, "%s: the CUDA kernels take N up to %d (A is [%lld, %lld])", OP, kMaxN,
                            (long long)a->A->shape[0], (long long)a->A->shape[1]);
    return TG_OK;
}

// The parameters both kernels share, with one span (see choose_spans); an error when the
// grid would not fit. cells: the blocks of one span, B·⌈D/32⌉.
tg_status make_params(const tg_scan_args *a, scan_params &P, int64_t &cells)
{
    tg_status status = check_supported(a);
    if (status != TG_OK) return status;
    P = scan_params{};
    P.B = a->u->shape[0];
    P.D = a->u->shape[1];
    P.L = a->u->shape[2];
    P.N = a->A->shape[1];
    P.chunk = a->chunk;
    P.n_chunks = (P.L - 1) / P.chunk + 1;
    P.spans = 1;
    P.span_chunks = P.n_chunks;
    P.groups = (P.D + kRows - 1) / kRows;
    P.dtype = (int)a->u->dtype;
    P.softplus = a->delta_softplus;
    P.u = seq_of(a->u);
    P.delta = seq_of(a->delta);
    P.z = seq_of(a->z);
    P.Bm = seq_of(a->Bm);
    P.Cm = seq_of(a->Cm);
    P.A = small_of(a->A);
    P.Dv = small_of(a->Dv);
    P.bias = small_of(a->delta_bias);
    P.init = small_of(a->initial_state);
    if (P.B * P.groups > INT32_MAX / kMaxSpans)
        return tg_set_error(TG_ERR_OVERFLOW, "%s: B·⌈D/%d⌉ = %lld·%lld blocks is beyond the CUDA grid", OP, kRows,
                            (long long)P.B, (long long)P.groups);
    cells = P.B * P.groups;
    return TG_OK;
}

int forced_spans = 0;                       // tg_cuda_scan_force_spans
int last_fwd_spans = 0, last_bwd_spans = 0; // tg_cuda_scan_last_spans

// Cuts the sequence into spans of whole chunks when the grid of one block per (b, group)
// has fewer blocks than half the SMs: a block's steps form one chain of dependent updates, so
// such a grid runs the sequence no faster than one SM would while the rest of the GPU idles.
// Spans then multiply the blocks up to what the GPU holds at once (`resident`), in spans of
// at least kMinSpan steps. Fuller grids are not cut: from about one block per SM on, the
// extra blocks gained less than the summary pass costs. Sets P.spans and P.span_chunks.
void choose_spans(scan_params &P, int64_t cells, int64_t resident)
{
    int64_t spans = 1;
    if (forced_spans > 0) {
        spans = forced_spans;
    } else if (resident > 0 && 2 * cells <= tg_cuda_multiprocessors()) {
        spans = resident / cells;
        if (spans > P.L / kMinSpan) spans = P.L / kMinSpan;
        if (spans > kMaxSpans) spans = kMaxSpans;
        if (spans < 1) spans = 1;
    }
    P.span_chunks = (P.n_chunks + spans - 1) / spans; // whole chunks, so no chunk is split
    P.spans = (P.n_chunks + P.span_chunks - 1) / P.span_chunks;
}

// The spans' summaries: (spans, B, D, kMaxN) states and (spans, B, D) sums of dt, in one
// device block that the caller frees; NULL with one span.
tg_status alloc_span_summaries(scan_params &P, float **base, size_t *bytes)
{
    *base = NULL;
    *bytes = 0;
    if (P.spans == 1) return TG_OK;
    const int64_t cells = P.spans * P.B * P.D;
    *bytes = (size_t)(cells * (kMaxN + 1)) * sizeof(float);
    tg_status status = tg_device_alloc(TG_DEVICE_CUDA, *bytes, (void **)base);
    if (status != TG_OK) return status;
    P.span_state = *base;
    P.span_dt = *base + cells * kMaxN;
    return TG_OK;
}

// Every tensor but the chunk states has u's dtype (the op checks the inputs; outputs and
// gradients are made like them). Checked once more here, as the kernels rely on it.
tg_status check_dtypes(const tg_tensor *const *tensors, int n, tg_dtype dtype)
{
    for (int i = 0; i < n; i++)
        if (tensors[i] && tensors[i]->dtype != dtype)
            return tg_set_error(TG_ERR_DTYPE, "%s: the CUDA kernels need every tensor in %s (one is %s)", OP,
                                tg_dtype_name(dtype), tg_dtype_name(tensors[i]->dtype));
    return TG_OK;
}

tg_status check_states(const tg_tensor *states)
{
    if (states && states->dtype != TG_F32)
        return tg_set_error(TG_ERR_DTYPE, "%s: the CUDA kernels keep the chunk states in f32 (got %s)", OP,
                            tg_dtype_name(states->dtype));
    return TG_OK;
}

// Float counts of the backward's workspaces, each rounded up to 16 bytes.
struct bwd_workspace {
    int64_t bc, a, dv, db, ckpt, total;
};

int64_t round4(int64_t n) { return (n + 3) / 4 * 4; }

bwd_workspace workspace_sizes(const scan_params &P, const tg_scan_grads *g, int64_t cells)
{
    const int64_t sums = P.spans * P.B * P.D; // the sums over t: per span, b and d
    bwd_workspace s = {};
    s.bc = g->dBm || g->dCm ? round4(P.groups * P.B * 2 * P.N * P.L) : 0;
    s.a = g->dA ? round4(sums * P.N) : 0;
    s.dv = g->dDv ? round4(sums) : 0;
    s.db = g->ddelta_bias ? round4(sums) : 0;
    s.ckpt = cells * P.spans * P.slots * kThreads * kStates;
    s.total = s.bc + s.a + s.dv + s.db + s.ckpt;
    return s;
}

// The forward's kernels for one dtype: with spans, the summary pass, then the main one.
template <int kDtype> void launch_fwd(const scan_params &P, int64_t cells)
{
    if (P.spans > 1) scan_fwd_kernel<kDtype, true><<<(unsigned)(cells * (P.spans - 1)), kThreads>>>(P);
    scan_fwd_kernel<kDtype, false><<<(unsigned)(cells * P.spans), kThreads>>>(P);
}

template <int kDtype> void plan_fwd(scan_params &P, int64_t cells)
{
    choose_spans(P, cells, tg_cuda_resident_blocks(scan_fwd_kernel<kDtype, false>, kThreads, 0));
}

// The backward's kernels for one dtype: with spans, the summary pass (spans 1 on), then the
// main one.
template <int kDtype> void launch_bwd(const scan_params &P, int64_t cells)
{
    if (P.spans > 1) scan_bwd_summary_kernel<kDtype><<<(unsigned)(cells * (P.spans - 1)), kThreads>>>(P);
    scan_bwd_kernel<kDtype><<<(unsigned)(cells * P.spans), kThreads>>>(P);
}

template <int kDtype> void plan_bwd(scan_params &P, int64_t cells)
{
    choose_spans(P, cells, tg_cuda_resident_blocks(scan_bwd_kernel<kDtype>, kThreads, 0));
}

} // namespace

extern "C" int tg_cuda_scan_force_spans(int spans)
{
    const int previous = forced_spans;
    forced_spans = spans < 0 ? 0 : spans > kMaxSpans ? kMaxSpans : spans;
    return previous;
}

extern "C" void tg_cuda_scan_last_spans(int *fwd, int *bwd)
{
    if (fwd) *fwd = last_fwd_spans;
    if (bwd) *bwd = last_bwd_spans;
}

extern "C" tg_status tg_cuda_selective_scan_fwd(const tg_scan_args *args, tg_tensor *out, tg_tensor *final_state,
                                                tg_tensor *chunk_states)
{
    scan_params P;
    int64_t cells;
    tg_status status = make_params(args, P, cells);
    const tg_tensor *same[] = {args->delta,         args->A, args->Bm,   args->Cm, args->Dv, args->z, args->delta_bias,
                               args->initial_state, out,     final_state};
    if (status == TG_OK) status = check_dtypes(same, (int)(sizeof same / sizeof same[0]), args->u->dtype);
    if (status == TG_OK) status = check_states(chunk_states);
    if (status != TG_OK) return status;
    P.out = seq_of(out);
    P.final_state = small_of(final_state);
    P.states = small_of(chunk_states);
    switch (P.dtype) {
    case TG_F32: plan_fwd<TG_F32>(P, cells); break;
    case TG_BF16: plan_fwd<TG_BF16>(P, cells); break;
    default: plan_fwd<TG_F16>(P, cells); break; // check_supported left no other
    }
    last_fwd_spans = (int)P.spans;
    float *summaries;
    size_t summary_bytes;
    status = alloc_span_summaries(P, &summaries, &summary_bytes);
    if (status != TG_OK) return status;
    switch (P.dtype) {
    case TG_F32: launch_fwd<TG_F32>(P, cells); break;
    case TG_BF16: launch_fwd<TG_BF16>(P, cells); break;
    default: launch_fwd<TG_F16>(P, cells); break;
    }
    status = tg_cuda_check_launch(OP);
    if (summaries) tg_device_free(TG_DEVICE_CUDA, summaries, summary_bytes);
    return status;
}

extern "C" tg_status tg_cuda_selective_scan_bwd(const tg_scan_args *args, const tg_tensor *chunk_states,
                                                const tg_tensor *dout, const tg_tensor *dfinal,
                                                const tg_scan_grads *grads)
{
    scan_params P;
    int64_t cells;
    tg_status status = make_params(args, P, cells);
    const tg_scan_grads *g = grads;
    const tg_tensor *same[] = {args->delta,
                               args->A,
                               args->Bm,
                               args->Cm,
                               args->Dv,
                               args->z,
                               args->delta_bias,
                               args->initial_state,
                               dout,
                               dfinal,
                               g->du,
                               g->ddelta,
                               g->dA,
                               g->dBm,
                               g->dCm,
                               g->dDv,
                               g->dz,
                               g->ddelta_bias,
                               g->dinitial_state};
    if (status == TG_OK) status = check_dtypes(same, (int)(sizeof same / sizeof same[0]), args->u->dtype);
    if (status == TG_OK) status = check_states(chunk_states);
    if (status == TG_OK && !chunk_states)
        status = tg_set_error(TG_ERR_STATE, "%s backward: no chunk states were saved", OP);
    if (status != TG_OK) return status;
    P.states = small_of(chunk_states);
    P.dout = seq_of(dout);
    P.dfinal = small_of(dfinal);
    P.du = seq_of(g->du);
    P.ddelta = seq_of(g->ddelta);
    P.dz = seq_of(g->dz);
    P.dinit = small_of(g->dinitial_state);
    const int64_t longest = P.chunk < P.L ? P.chunk : P.L;
    const int64_t tiles = (longest + kTile - 1) / kTile;
    P.slots = tiles > 1 ? tiles - 1 : 1;

    switch (P.dtype) {
    case TG_F32: plan_bwd<TG_F32>(P, cells); break;
    case TG_BF16: plan_bwd<TG_BF16>(P, cells); break;
    default: plan_bwd<TG_F16>(P, cells); break; // check_supported left no other
    }
    last_bwd_spans = (int)P.spans;

    const bwd_workspace ws = workspace_sizes(P, g, cells);
    const size_t ws_bytes = (size_t)ws.total * sizeof(float);
    float *base = NULL, *summaries = NULL;
    size_t summary_bytes = 0;
    status = tg_device_alloc(TG_DEVICE_CUDA, ws_bytes, (void **)&base);
    if (status == TG_OK) status = alloc_span_summaries(P, &summaries, &summary_bytes);
    if (status != TG_OK) {
        if (base) tg_device_free(TG_DEVICE_CUDA, base, ws_bytes);
        return status;
    }
    float *next = base;
    P.ws_bc = ws.bc ? next : NULL;
    next += ws.bc;
    P.ws_a = ws.a ? next : NULL;
    next += ws.a;
    P.ws_dv = ws.dv ? next : NULL;
    next += ws.dv;
    P.ws_db = ws.db ? next : NULL;
    next += ws.db;
    P.ckpt = next;

    switch (P.dtype) {
    case TG_F32: launch_bwd<TG_F32>(P, cells); break;
    case TG_BF16: launch_bwd<TG_BF16>(P, cells); break;
    default: launch_bwd<TG_F16>(P, cells); break;
    }
    status = tg_cuda_check_launch("tg_selective_scan backward");
    if (status == TG_OK && P.ws_bc) {
        const int64_t per_group = P.B * 2 * P.N * P.L;
        sum_bc_kernel<<<tg_blocks_for(per_group), TG_THREADS>>>(P.ws_bc, P.groups, per_group, P.N, P.L, seq_of(g->dBm),
                                                                seq_of(g->dCm), P.dtype);
        status = tg_cuda_check_launch("tg_selective_scan backward");
    }
    if (status == TG_OK && (P.ws_a || P.ws_dv || P.ws_db)) {
        sum_channels_kernel<<<tg_blocks_for(P.D * P.N + 2 * P.D), TG_THREADS>>>(
            P.ws_a, P.ws_dv, P.ws_db, P.spans * P.B, P.D, P.N, small_of(g->dA), small_of(g->dDv),
            small_of(g->ddelta_bias), P.dtype);
        status = tg_cuda_check_launch("tg_selective_scan backward");
    }
    tg_device_free(TG_DEVICE_CUDA, base, ws_bytes);
    if (summaries) tg_device_free(TG_DEVICE_CUDA, summaries, summary_bytes);
    return status;
}
