// kernels/cuda/conv1d/rows_backward.cu: the backward kernels of channel-first rows, in float
// and (bf16) on tensor cores, and the staging and walk over spans they share.
#include "kernels/cuda/conv1d/rows.cuh"
#include "kernels/cuda/conv1d/tensor_cores.cuh"

namespace {
using namespace tg_conv1d;

// The backward's staged spans, in dynamic shared memory sized to the plan's spans (row_shape):
// short rows take blocks of fewer threads, and buffers sized for kBlock threads would cap how
// many of those blocks an SM holds (at L = 1024, 9 blocks of 64 threads instead of 16).
extern __shared__ uint4 row_stage_memory[];

// Stages v[first, first + count) of row (b, c) into dst (first and count multiples of V).
// What lies inside the row goes by one bulk copy from thread 0 (counted on `ready`) when the
// row is aligned; the rest (before step 0: the history when X_HISTORY, else 0; past the end:
// 0; everything when the row is not aligned) the threads write, a vector of zeros at once and
// element by element otherwise, visible after the caller's next __syncthreads. The common
// case, all inside, costs the other threads a few comparisons.
template <typename T, bool X_HISTORY>
__device__ inline void stage_span(const conv_args &a, const t3 &v, bool vec_ok, int64_t b, int64_t c, int64_t first,
                                  int count, T *dst, uint64_t *ready)
{
    constexpr int V = vec_width<T>();
    const int64_t inside_end = a.L - a.L % V; // whole vectors inside the row end here
    if (TG_BULK_COPY && vec_ok && first >= 0 && first + count <= inside_end) {
        if (threadIdx.x == 0) bulk_copy_to_shared(dst, row_of<T>(v, b, c) + first, count * sizeof(T), ready);
        return;
    }
    int64_t lo = first > 0 ? first : 0, hi = first + count < inside_end ? first + count : inside_end;
    if (!TG_BULK_COPY || !vec_ok || hi <= lo) lo = hi = first; // no bulk part
    const T *row = row_of<T>(v, b, c);
    if (threadIdx.x == 0 && hi > lo)
        bulk_copy_to_shared(dst + (lo - first), row + lo, (unsigned)((hi - lo) * sizeof(T)), ready);
    const int before = (int)((lo - first) / V), bulk_end = (int)((hi - first) / V);
    const int edges = before + count / V - bulk_end; // vectors left to the threads
    // Counted from the last thread down: thread 0's warp has issued the bulk copies, and the
    // block waits at its next barrier for the slowest warp.
    for (int e = blockDim.x - 1 - threadIdx.x; e < edges; e += blockDim.x) {
        const int k = e < before ? e : bulk_end + (e - before);
        const int64_t u0 = first + (int64_t)k * V;
        if (u0 >= a.L || (u0 + V <= 0 && !(X_HISTORY && a.init.p))) { // all zeros: one store
            *(uint4 *)(dst + k * V) = make_uint4(0, 0, 0, 0);
            continue;
        }
        for (int j = 0; j < V; j++) {
            const int64_t u = first + (int64_t)k * V + j;
            const float value = u >= a.L    ? 0.0f
                                : u >= 0    ? tg_to_float(row[u])
                                : X_HISTORY ? history_at<T>(a, b, c, u)
                                            : 0.0f;
            dst[k * V + j] = tg_from_float<T>(value); // exact: the value came from a T
        }
    }
}

// dst[j] = v[j] as T for j < N, written as 16-byte vectors (dst 16-byte aligned): read_shared's
// counterpart.
template <typename T, int N> __device__ inline void write_shared(T *dst, const float *v)
{
    constexpr int V = vec_width<T>();
    static_assert(N % V == 0, "whole vectors");
#pragma unroll
    for (int q = 0; q < N / V; q++) *(uint4 *)(dst + q * V) = pack16<T>(v + q * V);
}

// The pipelined walk both row kernels share: stage(span, buffer) stages one span (its bulk
// copies counted on ready[buffer]), compute(span, buffer) works on a staged one; setup() runs
// while the first spans are in flight. Each buffer's barrier completes one phase per use, so
// a buffer's uses wait for parity 0, 1, 0, …
//   The spans' bulk copies are issued by thread 0, or with rows side by side by one thread per
// row (backward_stage); each issuer arrives on the span's barrier after its copies, so the
// barrier's phase cannot complete before every copy has announced its bytes.
template <int STAGES, bool SIDE_BY_SIDE = false, typename Stage, typename Setup, typename Compute>
__device__ inline void walk_spans(const row_run &run, const row_plan &plan, uint64_t (&ready)[STAGES], Stage stage,
                                  Setup setup, Compute compute)
{
    const int spans = (int)plan.spans, rows = SIDE_BY_SIDE ? plan.rows_per_span : 1;
    row_span current(spans, rows, run.first), ahead = current;
    int ahead_buffer = 0, staged = 0;
    const unsigned issuers = SIDE_BY_SIDE && plan.stages_whole_rows() ? (unsigned)rows : 1u;
    auto stage_ahead = [&] {
        if (threadIdx.x < issuers) async_copies_follow();
        stage(ahead, ahead_buffer);
        if (threadIdx.x < issuers) arrival_arrive(&ready[ahead_buffer]);
        ahead.advance(spans, rows);
        ahead_buffer = ahead_buffer + 1 == STAGES ? 0 : ahead_buffer + 1;
        staged++;
    };
    if (threadIdx.x == 0) {
        for (int i = 0; i < STAGES; i++) arrival_barrier_init(&ready[i], issuers);
        arrival_barriers_published();
    }
    // Until the barrier after setup() only thread 0 arrives on the barriers. Yet the compiler
    // may initialise them from warp 0's uniform datapath, which racecheck reported as a
    // hazard against thread 0's first arrivals (with two stages): this block barrier keeps
    // the initialisation apart from the arrivals, once per block.
    __syncthreads();
    while (staged < STAGES - 1 && staged < run.count) stage_ahead();
    setup();
    __syncthreads(); // the barriers and the first spans' edge elements, for every thread
    int buffer = 0;
    unsigned parity = 0;
    for (int pass = 0; pass < run.count; pass++) {
        if (staged < run.count) stage_ahead(); // into the buffer computed last pass
        arrival_wait(&ready[buffer], parity);
        compute(current, buffer);
        current.advance(spans, rows);
        if (++buffer == STAGES) buffer = 0, parity ^= 1;
        if (pass + 1 < run.count) __syncthreads(); // before this buffer is staged again; edges written
    }
}

// The transpose of an 8 × 8 matrix of 16-bit values held one pair per lane.
__device__ inline unsigned transposed(unsigned pair)
{
    unsigned t;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(t) : "r"(pair));
    return t;
}

template <int KB, bool SILU> struct tensor_core_backward {
    static constexpr bool kWide = tensor_core_z<KB>::kWide;
    tensor_core_z<KB> zt;
    const uint4 *vops;       // the taps for dx as B operands, Vc and Vn (store_tap_operands)
    float p[2][4], pp[2][4]; // P, Pp (per n-tile)
    float g_sum;             // Σ g over this lane's elements, for dbias
    const float *wl;         // the taps in shared memory, for z after the warp's steps (kWide)

    // taps: KB floats, ops: 128 words of shared memory, readable by every thread after the
    // caller's next barrier.
    __device__ __forceinline__ void setup(const conv_args &a, int64_t c, float *taps, uint4 *ops)
    {
        zt.setup(a, c, ops);
        store_tap_operands(a, c, -1, ops + 64);
        vops = ops + 64;
        if (threadIdx.x < KB) taps[threadIdx.x] = __uint_as_float(tap_bits(a, c, threadIdx.x) << 16); // bf16 → float
        wl = taps;
        g_sum = 0.0f;
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) p[nt][e] = pp[nt][e] = 0.0f;
    }

    // g on one tile, as the A operand gr (SiLU's slope recomputed from z and g rounded to bf16;
    // without SiLU g is dout itself, exact in bf16); adds its terms of P, Pp and Σ g (this one
    // of the unrounded g).
    __device__ __forceinline__ void gradient_tile(const __nv_bfloat16 *xt, const __nv_bfloat16 *dt, unsigned (&gr)[4])
    {
        const tile_rows rows(kWide);
        load_matrices(gr, dt + rows.own); // dout, in the A layout
        if constexpr (SILU) {
            unsigned x[4], xp[4];
            float z[2][4];
            unsigned wc[2][2], wp[2][2];
            zt.operands(wc, wp);
            zt.load_x(xt, rows, x, xp);
            zt.tile(x, xp, wc, wp, z);
#pragma unroll
            for (int r = 0; r < 4; r++) { // A register r holds result tile r / 2, rows r % 2
                const float *zr = &z[r / 2][2 * (r % 2)];
                float d0, d1;
                unpack2(gr[r], d0, d1, __nv_bfloat16());
                d0 *= activation_slope(zr[0], true), d1 *= activation_slope(zr[1], true);
                g_sum += d0 + d1;
                gr[r] = pack2(d0, d1, __nv_bfloat16());
            }
        } else {
#pragma unroll
            for (int r = 0; r < 4; r++) {
                float d0, d1;
                unpack2(gr[r], d0, d1, __nv_bfloat16());
                g_sum += d0 + d1;
            }
        }
        // dw and dbias: Gᵀ as an A operand (the 8 × 8 blocks transposed and the two off the
        // diagonal swapped), X and Xp as B operands.
        unsigned xb[4], xpb[4];
        zt.template load_x<true>(xt, rows, xb, xpb);
        const unsigned gt[4] = {transposed(gr[0]), transposed(gr[2]), transposed(gr[1]), transposed(gr[3])};
        multiply_add(p[0], gt, {xb[0], xb[1]});
        multiply_add(p[1], gt, {xb[2], xb[3]});
        if constexpr (kWide) multiply_add(pp[0], gt, {xpb[0], xpb[1]});
        multiply_add(pp[1], gt, {xpb[2], xpb[3]});
    }

    // g on the first K − 1 steps after the warp's pass (the next warp's first, or the next
    // span's), which the warp's last segment needs for dx: the pairs (2q, 2q + 1) and, with
    // kWide, (2q + 8, 2q + 9) at every lane, rounded to bf16 as the tiles' are.
    __device__ __forceinline__ void gradient_after(const __nv_bfloat16 *xe, const __nv_bfloat16 *de,
                                                   unsigned (&ga)[2]) const
    {
        if constexpr (kWide)
            gradient_after_by_lanes(xe, de, ga);
        else
            ga[0] = gradient_after_on_tensor_cores(xe, de);
    }

    // Without kWide the 8 steps after the warp are z's row of a product like a tile's: each of
    // rows 0–7 of X is those 8 steps (columns 0–7; 8–15 meet only zero taps) and of Xp the 8
    // before them, so each of the result's rows 0–7 holds z at the pairs (2q, 2q + 1). One
    // ldmatrix and two products, where the sum in gradient_after_by_lanes took ~50
    // instructions per pass.
    __device__ __forceinline__ unsigned gradient_after_on_tensor_cores(const __nv_bfloat16 *xe,
                                                                       const __nv_bfloat16 *de) const
    {
        const int q = threadIdx.x % 4;
        float d0, d1;
        unpack2(*(const unsigned *)(de + 2 * q), d0, d1, __nv_bfloat16());
        if constexpr (SILU) {
            unsigned rows[2]; // lanes 0–7 give matrix 0's rows, lanes 8–15 matrix 1's
            load_matrices(rows, threadIdx.x % 32 < 8 ? xe : xe - 8);
            const unsigned x[4] = {rows[0], 0u, 0u, 0u}, xp[4] = {0u, 0u, rows[1], 0u};
            unsigned wc[2][2], wp[2][2];
            zt.operands(wc, wp);
            const float biases[4] = {zt.bias, zt.bias, zt.bias, zt.bias};
            float z[4];
            multiply(z, x, wc[0], biases);
            multiply_add(z, xp, wp[0]);
            d0 *= activation_slope(z[0], true), d1 *= activation_slope(z[1], true);
        }
        // From step K − 1 on the taps are zero; zeros there keep an inf or NaN of x or dout
        // out of dx.
        if (2 * q >= KB - 1) d0 = 0.0f;
        if (2 * q + 1 >= KB - 1) d1 = 0.0f;
        return pack2(d0, d1, __nv_bfloat16());
    }

    __device__ __forceinline__ void gradient_after_by_lanes(const __nv_bfloat16 *xe, const __nv_bfloat16 *de,
                                                            unsigned (&ga)[2]) const
    {
        const int lane = threadIdx.x % 32, s = lane % 16, q = lane % 4;
        float gs = 0.0f;
        if (s < KB - 1) {
            const float d = tg_to_float(de[s]);
            if constexpr (SILU) {
                float z = zt.bias;
#pragma unroll
                for (int i = 0; i < KB; i++) z += wl[i] * tg_to_float(xe[s - i]);
                gs = d * activation_slope(z, true);
            } else {
                gs = d;
            }
        }
        ga[0] = pack2(__shfl_sync(~0u, gs, 2 * q), __shfl_sync(~0u, gs, 2 * q + 1), __nv_bfloat16());
        if constexpr (kWide)
            ga[1] = pack2(__shfl_sync(~0u, gs, 2 * q + 8), __shfl_sync(~0u, gs, 2 * q + 9), __nv_bfloat16());
    }

    // dx += G·Vc + Gn·Vn on one tile. Gn's rows gr + 1 come from lane + 4; the last row group
    // takes row 8 from lane q's second register and row 16 from `next`, the pairs of the row
    // after the tile (at every lane, for its q).
    __device__ __forceinline__ void input_gradient_tile(const unsigned (&gr)[4], const unsigned (&next)[2],
                                                        float (&dx)[2][4]) const
    {
        const int lane = threadIdx.x % 32, q = lane % 4;
        const bool last_rows = lane / 4 == 7;
        unsigned gn[4] = {0, 0, 0, 0};
#pragma unroll
        for (int h = 0; h < (kWide ? 2 : 1); h++) { // columns 0–7, and with kWide 8–15
            const unsigned down0 = __shfl_down_sync(~0u, gr[2 * h], 4), down1 = __shfl_down_sync(~0u, gr[2 * h + 1], 4);
            const unsigned row8 = __shfl_sync(~0u, gr[2 * h + 1], q);
            gn[2 * h] = last_rows ? row8 : down0;
            gn[2 * h + 1] = last_rows ? next[h] : down1;
        }
        unsigned vc[2][2], vn[2][2];
        load_tap_operands(vops, vc, vn);
        multiply_add(dx[0], gr, vc[0]);
        multiply_add(dx[1], gr, vc[1]);
        if constexpr (kWide) multiply_add(dx[0], gn, vn[0]);
        multiply_add(dx[1], gn, vn[1]);
    }

    // The warp's TILES · 256 steps of a span from step t_first: x and dout point at that step in
    // the staged buffers (x with the steps before it staged too). A tile's dx needs the first
    // row of the next tile's g, so g runs a tile ahead of dx: two tiles of g are live at a time.
    template <int TILES>
    __device__ __forceinline__ void pass(const conv_args &a, const row_plan &plan, const __nv_bfloat16 *x,
                                         const __nv_bfloat16 *d, int64_t b, int64_t c, int64_t t_first,
                                         int64_t final_from)
    {
        const int q = threadIdx.x % 4;
        unsigned gr[2][4], after[2] = {0, 0};
        gradient_after(x + 256 * TILES, d + 256 * TILES, after); // first: fewer registers live
        gradient_tile(x, d, gr[0]);
        // Tiles wholly before this step store pairs (an aligned row, no final states to add).
        const int64_t pairs_end = plan.vec_dx ? (a.L < final_from ? a.L : final_from) : 0;
        __nv_bfloat16 *out = row_of<__nv_bfloat16>(a.dx, b, c);
#pragma unroll
        for (int mt = 0; mt < TILES; mt++) {
            const int now = mt % 2, next = 1 - now;
            unsigned next_rows[2] = {after[0], after[1]};
            if (mt + 1 < TILES) {
                gradient_tile(x + 256 * (mt + 1), d + 256 * (mt + 1), gr[next]);
                next_rows[0] = __shfl_sync(~0u, gr[next][0], q);
                if constexpr (kWide) next_rows[1] = __shfl_sync(~0u, gr[next][2], q);
            }
            float dx[2][4] = {};
            input_gradient_tile(gr[now], next_rows, dx);
            const int64_t t0 = t_first + 256 * mt;
            store_tile(out, a.L, t0 + 256 <= pairs_end, t0, dx, [&](int64_t u, float v) {
                return u >= final_from ? v + ld<__nv_bfloat16>(a.dfinal, b, c, u - final_from) : v;
            });
        }
    }

    // The block's dw and dbias partials for this thread: the lag diagonals of P and Pp it
    // holds, and its Σ g.
    __device__ __forceinline__ void partials(float (&partial)[KB + 1]) const
    {
        const int lane = threadIdx.x % 32, gr = lane / 4, q = lane % 4;
#pragma unroll
        for (int i = 0; i < KB; i++) partial[i] = 0.0f;
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int lag = gr + 8 * (e / 2) - (8 * nt + 2 * q + e % 2); // n − k'
#pragma unroll
                for (int i = 0; i < KB; i++) { // selects: a branch on lag made the compiler index partial[] in memory
                    partial[i] += lag == i ? p[nt][e] : 0.0f;
                    if (kWide || nt == 1) partial[i] += lag + 16 == i ? pp[nt][e] : 0.0f;
                }
            }
        partial[KB] = g_sum;
    }
};

// Sums each of the block's N partials over its threads (fixed shuffle tree, then warps in
// order) and writes them to the workspace, or, with a.final_grads (the block took its
// channel's whole list), as dw[c, K − 1 − i] and dbias[c] themselves.
template <int N>
__device__ inline void write_block_sums(const conv_args &a, float (&partial)[N], float *ws, int64_t parts, int64_t part,
                                        int64_t c)
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
        const int i = threadIdx.x;
        float sum = 0.0f;
        for (int w = 0; w < (int)(blockDim.x / 32); w++) sum += warp_sums[w][i];
        if (!a.final_grads)
            partial_to_workspace(ws, parts, part, c, N, i, sum);
        else if (a.grads.wanted(i))
            a.grads.store(c, i, sum);
    }
}

// The backward's buffers and staging, shared by both backward kernels: x over
// [t0 − H, t0 + ch + H) and dout over [t0, t0 + ch + H) of each span, STAGES of each.
//   With rows side by side (SIDE_BY_SIDE, row_plan::rows_per_span = R) a span's R rows of L
// steps lie in slots `pitch` = L + H apart, x's from H on and dout's from 0:
//   x:    [H] [row 0] [H] [row 1] [H] … [row R−1] [H]
//   dout: [row 0] [H] [row 1] [H] … [row R−1] [H]
// so that row r's x over [−H, L + H) and dout over [0, L + H) are contiguous, the H zeros
// between two rows serving as the one's right halo and the next one's left. The one-row
// kernels are compiled without this (SIDE_BY_SIDE false): as one general form it measured
// slower on the short rows (docs/benchmarks.md).
template <typename T, int KB, int STAGES, bool SIDE_BY_SIDE = false> struct backward_stage {
    static constexpr int H = row_shape<T, KB>::H;
    const conv_args &a;
    const row_plan &plan;
    int64_t c;
    int ch, pitch, xn, dn; // span, slot pitch (side by side), x and dout buffer lengths
    T *xs, *ds;
    uint64_t *ready;
    __device__ backward_stage(const conv_args &a_, const row_plan &plan_, int64_t c_, uint64_t *ready_)
        : a(a_), plan(plan_), c(c_), ch(plan_.chunk_len), pitch(SIDE_BY_SIDE ? (int)a_.L + H : 0),
          xn(SIDE_BY_SIDE ? plan_.rows_per_span * pitch + H : ch + 2 * H),
          dn(SIDE_BY_SIDE ? plan_.rows_per_span * pitch : ch + H), xs((T *)row_stage_memory), ds(xs + STAGES * xn),
          ready(ready_)
    {
    }
    __device__ const T *x(int buf) const { return xs + buf * xn; }    // from the span's first step − H
    __device__ const T *dout(int buf) const { return ds + buf * dn; } // from the span's first step
    // Once per block, before the first span is computed (visible after walk_spans' barrier):
    // the zeros around each buffer's rows when every span is whole rows. Bulk copies never
    // write there, so they stay for every span.
    __device__ void zero_row_edges() const
    {
        if (!plan.stages_whole_rows()) return;
        constexpr int V = vec_width<T>();
        const int L = (int)a.L; // ≤ ch: one span per row
        // Counted from the last thread down: thread 0 is issuing the first spans' copies.
        const int first = blockDim.x - 1 - threadIdx.x;
        if constexpr (SIDE_BY_SIDE) { // H before the first row, H after every row in both
            constexpr int G = H / V;  // vectors of one gap
            const int per_stage = G + 2 * G * plan.rows_per_span;
            for (int e = first; e < STAGES * per_stage; e += blockDim.x) {
                const int buf = e / per_stage, k = e % per_stage - G;
                T *at = k < 0 ? xs + buf * xn + (k + G) * V
                        : k < G * plan.rows_per_span
                            ? xs + buf * xn + (k / G + 1) * pitch + k % G * V
                            : ds + buf * dn + (k / G - plan.rows_per_span) * pitch + L + k % G * V;
                *(uint4 *)at = make_uint4(0, 0, 0, 0);
            }
        } else { // H before the row, the rest of x's and dout's buffers after it
            const int x_before = H / V, x_after = (xn - H - L) / V, d_after = (dn - L) / V;
            const int per_stage = x_before + x_after + d_after;
            for (int e = first; e < STAGES * per_stage; e += blockDim.x) {
                const int buf = e / per_stage, k = e % per_stage;
                T *at = k < x_before             ? xs + buf * xn + k * V
                        : k < x_before + x_after ? xs + buf * xn + H + L + (k - x_before) * V
                                                 : ds + buf * dn + L + (k - x_before - x_after) * V;
                *(uint4 *)at = make_uint4(0, 0, 0, 0);
            }
        }
    }
    __device__ void operator()(row_span span, int buf) const
    {
        if constexpr (SIDE_BY_SIDE)
            stage_rows(span, buf);
        else
            stage_one_row(span, buf);
    }

  private:
    __device__ void stage_one_row(row_span span, int buf) const
    {
        const int64_t base = (int64_t)span.index * ch;
        if (plan.stages_whole_rows()) { // row b's steps 0 … L − 1 only; the zeros are in place
            if (threadIdx.x == 0) {
                const unsigned bytes = (unsigned)(a.L * sizeof(T));
                bulk_copy_to_shared(xs + buf * xn + H, row_of<T>(a.x, span.b, c), bytes, &ready[buf]);
                bulk_copy_to_shared(ds + buf * dn, row_of<T>(a.y, span.b, c), bytes, &ready[buf]);
            }
            return;
        }
        if (plan.is_inner(span.index)) { // the common case: thread 0 issues two copies, no edges
            if (threadIdx.x == 0) {
                bulk_copy_to_shared(xs + buf * xn, row_of<T>(a.x, span.b, c) + base - H, xn * sizeof(T), &ready[buf]);
                bulk_copy_to_shared(ds + buf * dn, row_of<T>(a.y, span.b, c) + base, dn * sizeof(T), &ready[buf]);
            }
            return;
        }
        stage_span<T, true>(a, a.x, plan.vec_x, span.b, c, base - H, xn, xs + buf * xn, &ready[buf]);
        stage_span<T, false>(a, a.y, plan.vec_y, span.b, c, base, dn, ds + buf * dn, &ready[buf]);
    }
    // Rows b … b + R − 1 (those before B), steps 0 … L − 1 of each; the zeros are in place.
    // Thread r copies row r (one instruction for the R threads, where a loop in thread 0 cost
    // the kernel registers); walk_spans counts them as the span's issuers.
    __device__ void stage_rows(row_span span, int buf) const
    {
#if TG_BULK_COPY
        const int r = (int)threadIdx.x;
        if (r < plan.rows_per_span && span.b + r < a.B) {
            const unsigned bytes = (unsigned)(a.L * sizeof(T));
            bulk_copy_to_shared(xs + buf * xn + r * pitch + H, row_of<T>(a.x, span.b + r, c), bytes, &ready[buf]);
            bulk_copy_to_shared(ds + buf * dn + r * pitch, row_of<T>(a.y, span.b + r, c), bytes, &ready[buf]);
        }
#else // built for an older GPU: the threads stage each row and its zeros as a span
        for (int r = 0; r < plan.rows_per_span && span.b + r < a.B; r++) {
            stage_span<T, true>(a, a.x, plan.vec_x, span.b + r, c, -H, pitch + H, xs + buf * xn + r * pitch,
                                &ready[buf]);
            stage_span<T, false>(a, a.y, plan.vec_y, span.b + r, c, 0, pitch, ds + buf * dn + r * pitch, &ready[buf]);
        }
#endif
    }
};

// g[j] = dout[j] · act'(z[j]) / tap_scale for j < N, over dout in g, z rebuilt from xw (which
// starts KB − 1 steps before g's first step).
template <typename T, int KB, int N, bool SILU>
__device__ inline void slopes_over_dout(const float (&wl)[KB], float bias, const float *xw, float *g)
{
#pragma unroll
    for (int j = 0; j < N; j++) {
        float zs = bias;
#pragma unroll
        for (int i = 0; i < KB; i++) zs += wl[i] * xw[KB - 1 + j - i];
        g[j] = scaled_gradient<T, SILU>(zs, g[j]);
    }
}

// The g of the K − 1 steps after a span (the next span's first, or zeros past the row), which
// its last threads' dx needs: one step each for the block's last lanes, over the dout staged
// there. x is the span's buffer (from its first step − H), g its dout buffer, both f32.
template <int KB, int H>
__device__ inline void next_span_slopes(const float (&wl)[KB], float bias, int ch, const float *x, float *g)
{
    const int j = (int)threadIdx.x - ((int)blockDim.x - 32);
    if (j < 0 || j >= KB - 1) return;
    slopes_over_dout<float, KB, 1, true>(wl, bias, x + H + ch + j - (KB - 1), g + ch + j);
}

// The float backward: each thread rebuilds z and g for its EPT steps and the K − 1 after them;
// or, where row_shape::shares_slopes, for its own steps only, writes g over its dout
// in the staged span and, after a block barrier, reads the K − 1 after them from its
// neighbours' (the span's last K − 1 from the block's last lanes: next_span_slopes).
// SIDE_BY_SIDE: spans of several whole rows (backward_stage), for rows shorter than a warp's
// steps (rows_side_by_side).
template <typename T, int KB, bool SILU, bool SIDE_BY_SIDE>
__global__ void __launch_bounds__(kBlock) row_bwd(conv_args a, row_plan plan, float *ws)
{
    next_kernel_may_start();
    after_previous_kernels();
    using S = row_shape<T, KB>;
    constexpr int EPT = S::EPT, H = S::H;
    constexpr bool SHARE_SLOPES = S::shares_slopes(SILU);
    __shared__ uint64_t ready[kStages];
    const row_run run = row_run_of<SIDE_BY_SIDE>(a, plan);
    const int64_t c = run.c;
    const backward_stage<T, KB, kStages, SIDE_BY_SIDE> stage(a, plan, c, ready);
    const int ch = plan.chunk_len, xn = stage.xn, dn = stage.dn;
    // This thread's row in every span (backward_stage's slot), its first step there, and where
    // that lies in the buffers (the same offset in x's, which start H steps earlier, and
    // dout's). With one row to a span, the span's threads in order. A thread past the rows
    // takes slot 0's steps past the row's end: it computes nothing.
    int slot = 0, slot_thread = (int)threadIdx.x;
    if constexpr (SIDE_BY_SIDE) {
        const side_by_side_place place = side_by_side_place_of<EPT>(a.L);
        const bool in_slots = place.row < plan.rows_per_span;
        slot = in_slots ? place.row : 0;
        slot_thread = in_slots ? place.t0 / EPT : (int)a.L / EPT;
    }
    const int offset = slot * stage.pitch + slot_thread * EPT;
    const T *const xs = stage.xs, *const ds = stage.ds;
    T *const gs = stage.ds; // g over the dout of a span, when the slopes are shared
    const int64_t final_from = final_states_from(a);
    float wl[KB]; // taps and bias scaled by tap_scale (scaled_gradient)
    float bias = 0.0f;
    float partial[KB + 1]; // dwl[0 … KB−1], dbias, over tap_scale: sums over every span of the block
#pragma unroll
    for (int i = 0; i <= KB; i++) partial[i] = 0.0f;
    auto compute = [&](row_span span, int buf) {
        const int64_t b = span.b + slot, t0 = (int64_t)span.index * ch + (int64_t)slot_thread * EPT;
        const bool inside = t0 < a.L && !(SIDE_BY_SIDE && b >= a.B);
        float g[EPT + H]; // dout, then g, from t0; 0 past the end
        // x from t0 − H: to t0 + EPT when the slopes are shared, else to t0 + EPT + H (the K − 1
        // steps after this thread's rebuilt as well). xw starts at t0 − (KB − 1).
        float xv[SHARE_SLOPES ? EPT + H : EPT + 2 * H];
        const float *xw = xv + H - (KB - 1);
        if constexpr (SHARE_SLOPES) {
            if (inside) {
                read_shared<T, EPT + H>(xs + buf * xn + offset, xv);
                read_shared<T, EPT>(ds + buf * dn + offset, g);
                slopes_over_dout<T, KB, EPT, true>(wl, bias, xw, g);
                write_shared<T, EPT>(gs + buf * dn + offset, g);
            }
            if (!SIDE_BY_SIDE) next_span_slopes<KB, H>(wl, bias, ch, xs + buf * xn, gs + buf * dn);
            // The next bulk copies into this buffer write where g now is: ordered after these
            // writes by each writer's proxy fence, then the block barrier before they are issued.
            async_copies_follow();
            __syncthreads(); // every thread's g written
            if (!inside) return;
            read_shared<T, EPT + H>(ds + buf * dn + offset, g);
        } else {
            if (!inside) return;
            read_shared<T, EPT + 2 * H>(xs + buf * xn + offset, xv);
            read_shared<T, EPT + H>(ds + buf * dn + offset, g);
            slopes_over_dout<T, KB, EPT + KB - 1, SILU>(wl, bias, xw, g);
        }
        // Steps past the end have g = 0, so they add nothing to the partials: no bounds test.
        float dx[EPT];
#pragma unroll
        for (int e = 0; e < EPT; e++) {
            float d = 0.0f;
#pragma unroll
            for (int i = 0; i < KB; i++) d += wl[i] * g[e + i];
            dx[e] = d;
            partial[KB] += g[e];
#pragma unroll
            for (int i = 0; i < KB; i++) partial[i] += g[e] * xw[KB - 1 + e - i];
        }
        if (t0 + EPT > final_from) { // only the threads holding the last K−1 steps
#pragma unroll
            for (int e = 0; e < EPT; e++) {
                const int64_t s = t0 + e;
                if (s >= final_from && s < a.L) dx[e] += ld<T>(a.dfinal, b, c, s - final_from);
            }
        }
        store_row<T, EPT>(row_of<T>(a.dx, b, c), plan.vec_dx, a.L, t0, dx);
    };
    auto setup = [&] {
        stage.zero_row_edges();
        bias = load_scaled_taps<T, KB>(a, c, wl);
    };
    walk_spans<kStages, SIDE_BY_SIDE>(run, plan, ready, stage, setup, compute);
#pragma unroll
    for (int i = 0; i <= KB; i++) partial[i] *= tap_scale<T>();
    write_block_sums<KB + 1>(a, partial, ws, plan.chunks, run.block_in_channel, c);
}

template <typename T, int KB, bool SILU>
__global__ void __launch_bounds__(kBlock, 4) row_bwd_tensor_cores(conv_args a, row_plan plan, float *ws)
{
    next_kernel_may_start();
    after_previous_kernels();
    constexpr int H = row_shape<T, KB>::H;
    __shared__ uint64_t ready[kTensorCoreStages];
    __shared__ float taps[KB];
    __shared__ uint4 ops[128];
    const row_run run = row_run_of(a, plan);
    const backward_stage<T, KB, kTensorCoreStages> stage(a, plan, run.c, ready);
    const int64_t final_from = final_states_from(a);
    tensor_core_backward<KB, SILU> tc;
    const int warp_first = threadIdx.x / 32 * 32 * kTensorCoreStepsPerThread;
    auto compute = [&](row_span span, int buf) {
        const int64_t t_first = (int64_t)span.index * plan.chunk_len + warp_first;
        if (t_first >= a.L) return; // uniform across the warp
        tc.template pass<kTensorCoreTiles>(a, plan, stage.x(buf) + H + warp_first, stage.dout(buf) + warp_first, span.b,
                                           run.c, t_first, final_from);
    };
    auto setup = [&] {
        stage.zero_row_edges();
        tc.setup(a, run.c, taps, ops);
    };
    walk_spans(run, plan, ready, stage, setup, compute);
    float partial[KB + 1];
    tc.partials(partial);
    write_block_sums<KB + 1>(a, partial, ws, plan.chunks, run.block_in_channel, run.c);
}

} // namespace

namespace tg_conv1d {

template <typename T, int KB, bool SILU, bool SIDE_BY_SIDE>
auto row_bwd_instance() -> void (*)(conv_args, row_plan, float *)
{
    return ::row_bwd<T, KB, SILU, SIDE_BY_SIDE>;
}
template auto row_bwd_instance<float, 2, false, false>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<float, 2, false, true>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<float, 2, true, false>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<float, 2, true, true>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<float, 3, false, false>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<float, 3, false, true>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<float, 3, true, false>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<float, 3, true, true>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<float, 4, false, false>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<float, 4, false, true>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<float, 4, true, false>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<float, 4, true, true>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<float, 8, false, false>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<float, 8, false, true>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<float, 8, true, false>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<float, 8, true, true>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<float, 16, false, false>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<float, 16, false, true>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<float, 16, true, false>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<float, 16, true, true>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__nv_bfloat16, 2, false, false>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__nv_bfloat16, 2, false, true>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__nv_bfloat16, 2, true, false>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__nv_bfloat16, 2, true, true>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__nv_bfloat16, 3, false, false>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__nv_bfloat16, 3, false, true>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__nv_bfloat16, 3, true, false>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__nv_bfloat16, 3, true, true>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__nv_bfloat16, 4, false, false>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__nv_bfloat16, 4, false, true>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__nv_bfloat16, 4, true, false>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__nv_bfloat16, 4, true, true>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__nv_bfloat16, 8, false, false>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__nv_bfloat16, 8, false, true>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__nv_bfloat16, 8, true, false>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__nv_bfloat16, 8, true, true>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__nv_bfloat16, 16, false, false>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__nv_bfloat16, 16, false, true>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__nv_bfloat16, 16, true, false>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__nv_bfloat16, 16, true, true>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__half, 2, false, false>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__half, 2, false, true>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__half, 2, true, false>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__half, 2, true, true>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__half, 3, false, false>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__half, 3, false, true>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__half, 3, true, false>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__half, 3, true, true>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__half, 4, false, false>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__half, 4, false, true>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__half, 4, true, false>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__half, 4, true, true>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__half, 8, false, false>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__half, 8, false, true>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__half, 8, true, false>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__half, 8, true, true>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__half, 16, false, false>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__half, 16, false, true>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__half, 16, true, false>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_instance<__half, 16, true, true>() -> void (*)(conv_args, row_plan, float *);

template <typename T, int KB, bool SILU> auto row_bwd_tensor_cores_instance() -> void (*)(conv_args, row_plan, float *)
{
    return ::row_bwd_tensor_cores<T, KB, SILU>;
}
template auto row_bwd_tensor_cores_instance<__nv_bfloat16, 8, false>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_tensor_cores_instance<__nv_bfloat16, 8, true>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_tensor_cores_instance<__nv_bfloat16, 16, false>() -> void (*)(conv_args, row_plan, float *);
template auto row_bwd_tensor_cores_instance<__nv_bfloat16, 16, true>() -> void (*)(conv_args, row_plan, float *);

} // namespace tg_conv1d
