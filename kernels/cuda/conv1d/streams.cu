// kernels/cuda/conv1d/streams.cu: the stream kernels, forward and backward, for channel-last rows.
#include "kernels/cuda/conv1d/step_maths.cuh"
#include "kernels/cuda/conv1d/streams.cuh"

namespace {
using namespace tg_conv1d;

// ---- stream kernels: channel-last rows walked along time by whole warps -----------------------
//
// In a channel-last tensor the channels of one step lie side by side. A warp takes 32·CPT
// neighbouring channels (CPT per thread) and walks a segment of seg_len steps in order, each
// thread keeping x's last KB values (and, backward, g's) in registers: the KB − 1 steps of
// halo are paid once per segment, where a tile lane (16 steps) paid them every 16. The steps
// reach the warp through a ring of RING chunks of U steps in shared memory, filled with
// 16-byte asynchronous copies RING − 1 chunks ahead: the loads in flight hold no registers,
// and only the warp itself waits on them (no block-wide barrier in the walk).

// The forward takes five resident blocks where that measured faster on long channel-last
// rows: 16-bit K = 5–8 and f32 K = 9–16. At 16-bit K = 16 five and eight measured slower, so
// it kept six (those rows take stream_fwd_mma now; docs/benchmarks.md).
template <typename T, int KB> __host__ __device__ constexpr int stream_forward_blocks()
{
    return (sizeof(T) == 2 && KB == 8) || (sizeof(T) == 4 && KB == 16) ? 5 : kStreamForwardBlocks;
}

// CPT neighbouring values of T as one machine word (the unit a stream thread reads and writes).
template <typename T, int CPT>
using channel_word =
    std::conditional_t<sizeof(T) * CPT == 8, uint2, std::conditional_t<sizeof(T) * CPT == 4, unsigned, unsigned short>>;

template <typename T, int CPT> __device__ inline void unpack_word(channel_word<T, CPT> w, float (&v)[CPT])
{
    if constexpr (sizeof(T) == 4 && CPT == 2) {
        v[0] = __uint_as_float(w.x);
        v[1] = __uint_as_float(w.y);
    } else if constexpr (sizeof(T) == 4) {
        v[0] = __uint_as_float(w);
    } else if constexpr (CPT == 4) {
        unpack2(w.x, v[0], v[1], T());
        unpack2(w.y, v[2], v[3], T());
    } else if constexpr (CPT == 2) {
        unpack2(w, v[0], v[1], T());
    } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        v[0] = __uint_as_float((unsigned)w << 16);
    } else {
        v[0] = __half2float(__ushort_as_half(w));
    }
}

template <typename T, int CPT> __device__ inline channel_word<T, CPT> pack_word(const float (&v)[CPT])
{
    if constexpr (sizeof(T) == 4 && CPT == 2)
        return make_uint2(__float_as_uint(v[0]), __float_as_uint(v[1]));
    else if constexpr (sizeof(T) == 4)
        return __float_as_uint(v[0]);
    else if constexpr (CPT == 4)
        return make_uint2(pack2(v[0], v[1], T()), pack2(v[2], v[3], T()));
    else if constexpr (CPT == 2)
        return pack2(v[0], v[1], T());
    else if constexpr (std::is_same_v<T, __nv_bfloat16>)
        return __bfloat16_as_ushort(__float2bfloat16_rn(v[0]));
    else
        return __half_as_ushort(__float2half_rn(v[0]));
}

// The thread's taps and bias (a thread past C takes the last channel's: it writes nothing).
template <typename T, int KB, int CPT, bool SCALED>
__device__ inline void stream_taps(const conv_args &a, const stream_place &p, float (&wl)[CPT][KB], float (&bias)[CPT])
{
#pragma unroll
    for (int q = 0; q < CPT; q++) {
        const int64_t c = p.c + q < a.C ? p.c + q : a.C - 1;
        bias[q] = SCALED ? load_scaled_taps<T, KB>(a, c, wl[q]) : load_taps<T, KB>(a, c, wl[q]);
    }
}

// The window's first KB − 1 values, x[t0 − KB + 1 … t0 − 1] (the history before step 0):
// win[KB−1−i] = x[t − i] once step t's value is in win[KB−1]. A segment that starts KB − 1
// steps or more into its row reads them as KB − 1 channel words, all asked for before any is
// used (a thread past C reads its warp's first channels': it writes nothing). Element by
// element, with a branch around each load (x or the history), they had been (KB − 1)·CPT
// round trips one after another at every segment's start, which measured slower
// (docs/benchmarks.md).
template <typename T, int KB, int CPT>
__device__ inline void stream_window_start(const conv_args &a, const stream_place &p, float (&win)[KB][CPT])
{
    if (p.t0 >= KB - 1) { // the whole warp
        const int64_t step = a.x.s2 * (int64_t)sizeof(T);
        const char *at = (const char *)row_of<T>(a.x, p.b, p.inside_c ? p.c : p.c0) + (p.t0 - (KB - 1)) * step;
        channel_word<T, CPT> words[KB - 1];
#pragma unroll
        for (int j = 0; j < KB - 1; j++) words[j] = *(const channel_word<T, CPT> *)(at + j * step);
#pragma unroll
        for (int j = 0; j < KB - 1; j++) unpack_word<T, CPT>(words[j], win[j + 1]);
        return;
    }
#pragma unroll
    for (int j = 0; j < KB - 1; j++)
#pragma unroll
        for (int q = 0; q < CPT; q++) win[j + 1][q] = p.inside_c ? x_at<T>(a, p.b, p.c + q, p.t0 - (KB - 1) + j) : 0.0f;
}

// A lane's share of the copies that fill a warp's ring with one tensor: U steps of the warp's
// channels per chunk, each step a ROW of 16-byte pieces. Where the lane's pieces come from and
// go to is worked out once per warp, so issuing a chunk costs an address and the copies: the
// same arithmetic redone per chunk (the row's address, the shared window's, a bounds test per
// copy) had been a large share of the backward's instructions per chunk.
template <typename T, int CPT> struct stream_copies {
    using S = stream_shape<T, CPT>;
    static constexpr int PIECES = S::ROW / 16, ROWS_PER_PASS = 32 / PIECES, COPIES = S::U / ROWS_PER_PASS;
    static_assert(S::U % ROWS_PER_PASS == 0, "every lane copies the same number of pieces per chunk");
    const char *next; // the lane's piece of its first row in the next chunk to issue
    unsigned dst;     // shared address of the lane's piece of its first row in slot 0
    int row;          // the lane's first row of a chunk; it copies rows row + ROWS_PER_PASS·j

    // For the chunks from step t0 on, issued in order. A lane whose piece lies past C copies
    // its row's first piece instead: no lane computing from that place writes anything, and
    // every lane then issues the same copies, without a test per chunk.
    __device__ stream_copies(const conv_args &a, const t3 &v, const stream_place &p, const char *ring, int64_t t0)
    {
        const int lane = threadIdx.x % 32, piece = lane % PIECES;
        row = lane / PIECES;
        const bool inside_c = p.c0 + piece * (16 / (int)sizeof(T)) < a.C;
        next = (const char *)row_of<T>(v, p.b, p.c0) + (inside_c ? piece * 16 : 0) + (t0 + row) * step(v);
        dst = (unsigned)__cvta_generic_to_shared(ring) + row * S::ROW + piece * 16;
    }
    // Bytes from one step of v to the next (from the kernel's parameters: read when needed,
    // not held in registers).
    static __device__ int64_t step(const t3 &v) { return v.s2 * (int64_t)sizeof(T); }

    // Where the copies of the next chunk of v go and come from, into ring slot `slot` (then
    // `next` moves on a chunk). The callers issue them, so that a kernel that copies two
    // tensors issues all its copies back to back.
    __device__ void chunk(const t3 &v, int slot, unsigned (&to)[COPIES], const char *(&from)[COPIES])
    {
#pragma unroll
        for (int j = 0; j < COPIES; j++) {
            to[j] = dst + slot * S::SLOT + ROWS_PER_PASS * j * S::ROW;
            from[j] = next + ROWS_PER_PASS * j * step(v);
        }
        next += S::U * step(v);
    }
    // The copies of the next chunk of v, all of whose U steps lie before L.
    __device__ void issue_whole(const t3 &v, int slot)
    {
        unsigned to[COPIES];
        const char *from[COPIES];
        chunk(v, slot, to, from);
#pragma unroll
        for (int j = 0; j < COPIES; j++) copy16_async_to(to[j], from[j]);
    }
    // The copies of the next chunk of v, steps t … t + U − 1, of those steps before L.
    __device__ void issue_part(const conv_args &a, const t3 &v, int64_t t, int slot)
    {
        unsigned to[COPIES];
        const char *from[COPIES];
        chunk(v, slot, to, from);
#pragma unroll
        for (int j = 0; j < COPIES; j++)
            if (t + row + ROWS_PER_PASS * j < a.L) copy16_async_to(to[j], from[j]);
    }
};

// A warp's outputs of one chunk (U steps of its channels) stored as the 16-byte pieces the
// copies brought its inputs in as: each lane first writes its words over its own words of
// the chunk's ring slot (which only it reads), then, after a warp barrier, stores COPIES
// pieces of the slot, instead of one store per lane and step. Only where rows are 128 bytes
// or more (ROW), where that measured faster or level; with 64-byte rows (16-bit data at
// K = 16) it measured slower (docs/benchmarks.md).
template <typename T, int CPT> struct stream_stores {
    using S = stream_shape<T, CPT>;
    using Copies = stream_copies<T, CPT>;
    static constexpr bool PAYS = S::ROW >= 128;
    int64_t to;    // from the lane's word of a step to its piece of the chunk's first row
    unsigned from; // the lane's piece of its first row, from the start of a slot

    __device__ explicit stream_stores(const t3 &v)
    {
        const int lane = threadIdx.x % 32, piece = lane % Copies::PIECES, row = lane / Copies::PIECES;
        to = piece * 16 - lane * S::WORD + row * Copies::step(v);
        from = row * S::ROW + piece * 16;
    }
    // This lane's word of step r of the chunk, into the slot.
    static __device__ void stage(char *slot, int r, channel_word<T, CPT> w)
    {
        *(channel_word<T, CPT> *)(slot + r * S::ROW + threadIdx.x % 32 * S::WORD) = w;
    }
    // The staged chunk to the U steps from `at` (this lane's word of the first of them).
    __device__ void store(const t3 &v, const char *slot, char *at) const
    {
        __syncwarp(); // every lane's words are in the slot
#pragma unroll
        for (int j = 0; j < Copies::COPIES; j++)
            *(uint4 *)(at + to + Copies::ROWS_PER_PASS * j * Copies::step(v)) =
                *(const uint4 *)(slot + from + Copies::ROWS_PER_PASS * j * S::ROW);
    }
};

// Whether a warp may compute chunks unchecked at all: it lies wholly inside C, and where its
// output is staged (stream_stores), that output takes whole pieces.
template <typename T, int CPT>
__device__ inline bool stream_unchecked_allowed(const conv_args &a, const stream_place &p, const stream_plan &plan)
{
    return p.c0 + stream_shape<T, CPT>::CHANNELS <= a.C && (!stream_stores<T, CPT>::PAYS || plan.whole_pieces);
}

// This thread's word of step t + r, from a ring slot (0 past L when CHECKED).
template <typename T, int CPT, bool CHECKED>
__device__ inline channel_word<T, CPT> stream_word(const conv_args &a, const char *slot, int64_t t, int r)
{
    using S = stream_shape<T, CPT>;
    using word = channel_word<T, S::CPT>;
    if (CHECKED && t + r >= a.L) return word{};
    return *(const word *)(slot + r * S::ROW + threadIdx.x % 32 * S::WORD);
}

// A warp's walk over the chunks of U steps from t0 to `last` (chunk k: steps t0 + k·U on):
// chunk k goes to ring slot k mod RING, its copies (issue(k, slot, whole); `whole`: all its
// steps lie before L) issued RING − 1 chunks before it is computed (compute(unchecked, k,
// slot), called for k = 0, 1, … in order), into the slot the chunk before it was computed
// from. `unchecked` is true for the chunks wholly inside [unchecked_from, unchecked_end),
// whose steps need no test. start() runs once the first chunks' copies are issued, so that
// the loads it makes (the window's first values) are in flight alongside them. Which chunks
// are whole and which unchecked is worked out once, as 32-bit chunk counts (a segment is a few
// thousand steps at most), so that a chunk's bookkeeping is three compares.
template <int U, int RING, typename Issue, typename Start, typename Compute>
__device__ inline void stream_walk(int64_t t0, int64_t last, int64_t L, int64_t unchecked_from, int64_t unchecked_end,
                                   Issue issue, Start start, Compute compute)
{
    const int chunks = (int)((last - t0 + U - 1) / U);
    const int whole = L - t0 >= U ? (int)((L - t0) / U < chunks ? (L - t0) / U : chunks) : 0;
    const int unchecked_first = unchecked_from > t0 ? (int)((unchecked_from - t0 + U - 1) / U) : 0;
    const int unchecked_end_chunk = unchecked_end > t0 ? (int)((unchecked_end - t0) / U) : 0;
#pragma unroll
    for (int k = 0; k < RING - 1; k++) {
        if (k < chunks) issue(k, k, k < whole);
        copies_commit(); // one group per chunk, empty or not, so that the count below holds
    }
    start();
    for (int k = 0; k < chunks; k++) {
        copies_wait_groups<RING - 2>(); // chunk k's group has landed (the RING − 2 after it may not have)
        // One warp barrier for two things: every lane's copies of chunk k have landed, and
        // every lane is done with chunk k − 1, whose slot the copies issued next fill.
        __syncwarp();
        const int ahead = k + RING - 1;
        if (ahead < chunks) issue(ahead, ahead % RING, ahead < whole);
        copies_commit();
        const int slot = k % RING;
        if (k >= unchecked_first && k < unchecked_end_chunk)
            compute(std::true_type(), k, slot);
        else
            compute(std::false_type(), k, slot);
    }
}

template <typename T, int KB>
__global__ void __launch_bounds__(kBlock, stream_forward_blocks<T, KB>()) stream_fwd(conv_args a, stream_plan plan)
{
    using S = stream_shape<T, stream_forward_cpt<T, KB>()>;
    constexpr int CPT = S::CPT, U = S::U;
    constexpr int RING = stream_ring<KB, false>();
    __shared__ alignas(16) char ring[S::LANES][RING][U * S::ROW];
    const stream_place p = stream_place_of<T, CPT>(a, plan, plan.across);
    if (p.t0 >= a.L || p.c0 >= a.C) return; // the whole warp
    float wl[CPT][KB], bias[CPT];
    stream_taps<T, KB, CPT, false>(a, p, wl, bias);
    float win[KB][CPT];
    char(*slots)[U * S::ROW] = ring[p.warp];
    const int64_t y_step = a.y.s2 * (int64_t)sizeof(T);
    char *y_at = (char *)row_of<T>(a.y, p.b, p.inside_c ? p.c : p.c0) + p.t0 * y_step; // the chunk's first step
    stream_copies<T, CPT> x_copies(a, a.x, p, slots[0], p.t0);
    const stream_stores<T, CPT> y_stores(a.y);
    constexpr bool STAGED = stream_stores<T, CPT>::PAYS;
    auto issue = [&](int k, int slot, bool whole) {
        if (whole)
            x_copies.issue_whole(a.x, slot);
        else
            x_copies.issue_part(a, a.x, p.t0 + (int64_t)k * U, slot);
    };
    auto compute = [&](auto unchecked, int k, int slot) {
        constexpr bool CHECKED = !decltype(unchecked)::value;
        const int64_t t = p.t0 + (int64_t)k * U;
#pragma unroll
        for (int r = 0; r < U; r++) {
            shift_window(win);
            unpack_word<T, CPT>(stream_word<T, CPT, CHECKED>(a, slots[slot], t, r), win[KB - 1]);
            float o[CPT];
            step_outputs(wl, bias, win, a.silu, o);
            if (!CHECKED && STAGED)
                y_stores.stage(slots[slot], r, pack_word<T, CPT>(o));
            else if (!CHECKED || (p.inside_c && t + r < p.end))
                *(channel_word<T, CPT> *)(y_at + r * y_step) = pack_word<T, CPT>(o);
        }
        if (!CHECKED && STAGED) y_stores.store(a.y, slots[slot], y_at);
        y_at += U * y_step;
    };
    // Unchecked: chunks of the segment's own steps.
    const bool unchecked_allowed = stream_unchecked_allowed<T, CPT>(a, p, plan);
    auto start = [&] { stream_window_start<T, KB, CPT>(a, p, win); };
    stream_walk<U, RING>(p.t0, p.end, a.L, p.t0, unchecked_allowed ? p.end : p.t0, issue, start, compute);
}

// Each warp walks steps t0 … end + KB − 2: g = dout·act'(z) at every step, and at step t the
// dx of step u = t − (KB − 1), whose KB values of g are then all known. The steps past `end`
// are the next segment's first ones, recomputed for their g (dw and dbias take only the
// segment's own steps).
template <typename T, int KB, bool SILU>
__global__ void __launch_bounds__(kBlock, kStreamBackwardBlocks) stream_bwd(conv_args a, stream_plan plan, float *ws)
{
    next_kernel_may_start();
    after_previous_kernels();
    using S = stream_shape<T, stream_backward_cpt<T, KB>()>;
    constexpr int CPT = S::CPT, U = S::U, RING = stream_ring<KB, true>();
    __shared__ alignas(16) char ring[S::LANES][2][RING][U * S::ROW]; // per warp: x, dout
    static_assert(sizeof(ring) == stream_backward_ring_bytes<KB>(), "the ring the carve-out is sized for");
    constexpr int ACROSS = stream_most_warps_across<true>(), ALONG = S::LANES / ACROSS;
    const stream_place p = stream_place_of<T, CPT>(a, plan, ACROSS);
    float partial[CPT][KB + 1]; // dwl[0 … KB−1], dbias, over tap_scale
#pragma unroll
    for (int q = 0; q < CPT; q++)
#pragma unroll
        for (int i = 0; i <= KB; i++) partial[q][i] = 0.0f;
    if (p.t0 < a.L && p.c0 < a.C) {   // the whole warp
        float wl[CPT][KB], bias[CPT]; // scaled by tap_scale, as in row_bwd
        stream_taps<T, KB, CPT, true>(a, p, wl, bias);
        float win[KB][CPT], gw[KB][CPT]; // win[KB−1−i] = x[t − i], gw[KB−1−i] = g[t − i]
#pragma unroll
        for (int j = 0; j < KB; j++)
#pragma unroll
            for (int q = 0; q < CPT; q++) gw[j][q] = 0.0f; // before t0: never part of a written dx
        const int64_t final_from = final_states_from(a);
        char(*x_slots)[U * S::ROW] = ring[p.warp][0];
        char(*d_slots)[U * S::ROW] = ring[p.warp][1];
        const int64_t dx_step = a.dx.s2 * (int64_t)sizeof(T);
        // dx at u = t − (KB − 1) for the chunk's first step t
        char *dx_at = (char *)row_of<T>(a.dx, p.b, p.inside_c ? p.c : p.c0) + (p.t0 - (KB - 1)) * dx_step;
        stream_copies<T, CPT> x_copies(a, a.x, p, x_slots[0], p.t0), d_copies(a, a.y, p, d_slots[0], p.t0);
        const stream_stores<T, CPT> dx_stores(a.dx);
        constexpr bool STAGED = stream_stores<T, CPT>::PAYS;
        auto issue = [&](int k, int slot, bool whole) {
            if (whole) { // every chunk but a segment's last, near L
                constexpr int N = stream_copies<T, CPT>::COPIES;
                unsigned x_to[N], d_to[N];
                const char *x_from[N], *d_from[N];
                x_copies.chunk(a.x, slot, x_to, x_from);
                d_copies.chunk(a.y, slot, d_to, d_from);
#pragma unroll
                for (int j = 0; j < N; j++) {
                    copy16_async_to(x_to[j], x_from[j]);
                    copy16_async_to(d_to[j], d_from[j]);
                }
            } else {
                const int64_t t = p.t0 + (int64_t)k * U;
                x_copies.issue_part(a, a.x, t, slot);
                d_copies.issue_part(a, a.y, t, slot);
            }
        };
        auto compute = [&](auto unchecked, int k, int slot) {
            constexpr bool CHECKED = !decltype(unchecked)::value;
            const int64_t t = p.t0 + (int64_t)k * U;
#pragma unroll
            for (int r = 0; r < U; r++) {
                const int64_t u = t + r - (KB - 1);
                shift_window(win);
                shift_window(gw);
                unpack_word<T, CPT>(stream_word<T, CPT, CHECKED>(a, x_slots[slot], t, r), win[KB - 1]);
                float d_out[CPT];
                unpack_word<T, CPT>(stream_word<T, CPT, CHECKED>(a, d_slots[slot], t, r), d_out);
                // The maths of step_gradient, add_step_partials (with the segment's own steps
                // selected, not branched on) and oldest_step_dx, written out: through those
                // helpers the 16-bit K = 16 build spilled and its bf16 backward measured
                // slower.
                const bool own = !CHECKED || t + r < p.end;
#pragma unroll
                for (int q = 0; q < CPT; q++) {
                    float zs = bias[q];
#pragma unroll
                    for (int i = 0; i < KB; i++) zs += wl[q][i] * win[KB - 1 - i][q];
                    const float g = scaled_gradient<T, SILU>(zs, d_out[q]); // g / tap_scale; 0 past L
                    gw[KB - 1][q] = g;
                    const float g_own = own ? g : 0.0f;
                    partial[q][KB] += g_own;
#pragma unroll
                    for (int i = 0; i < KB; i++) partial[q][i] += g_own * win[KB - 1 - i][q];
                }
                float d[CPT];
#pragma unroll
                for (int q = 0; q < CPT; q++) {
                    d[q] = 0.0f;
#pragma unroll
                    for (int i = 0; i < KB; i++) d[q] += wl[q][i] * gw[i][q];
                }
                if (CHECKED) {
                    if (!p.inside_c || u < p.t0 || u >= p.end) continue;
                    if (u >= final_from)
#pragma unroll
                        for (int q = 0; q < CPT; q++) d[q] += ld<T>(a.dfinal, p.b, p.c + q, u - final_from);
                }
                if (!CHECKED && STAGED)
                    dx_stores.stage(x_slots[slot], r, pack_word<T, CPT>(d)); // over x[t + r], read above
                else
                    *(channel_word<T, CPT> *)(dx_at + r * dx_step) = pack_word<T, CPT>(d);
            }
            if (!CHECKED && STAGED) dx_stores.store(a.dx, x_slots[slot], dx_at);
            dx_at += U * dx_step;
        };
        // Unchecked: chunks whose steps are all the segment's own, each with a whole dx (from
        // t0 + KB − 1 on) away from the final states.
        const bool unchecked_allowed = stream_unchecked_allowed<T, CPT>(a, p, plan);
        const int64_t unchecked_end = !unchecked_allowed            ? p.t0
                                      : p.end < final_from + KB - 1 ? p.end
                                                                    : final_from + KB - 1;
        auto start = [&] { stream_window_start<T, KB, CPT>(a, p, win); };
        stream_walk<U, RING>(p.t0, p.end + KB - 1, a.L, p.t0 + KB - 1, unchecked_end, issue, start, compute);
    }
    // The block's partials: its warps' segments summed in order, per channel (through the
    // ring, which no warp reads any more after the barrier); warp w sums the segments of
    // the channels of warps w, w + ACROSS, ….
    __syncthreads();
    static_assert(sizeof(float) * S::LANES * (KB + 1) * S::CHANNELS <= sizeof(ring), "the partials fit in the ring");
    float(*sums)[KB + 1][S::CHANNELS] = (float(*)[KB + 1][S::CHANNELS])(void *)&ring[0][0][0][0];
    const int cg = threadIdx.x % 32 * CPT;
#pragma unroll
    for (int q = 0; q < CPT; q++)
#pragma unroll
        for (int i = 0; i <= KB; i++) sums[p.warp][i][cg + q] = tap_scale<T>() * partial[q][i];
    __syncthreads();
    if (p.warp < ACROSS && p.inside_c) { // C is a multiple of CPT on this path
        const int64_t parts = a.B * plan.time_blocks, part = p.b * plan.time_blocks + p.time_block;
#pragma unroll
        for (int q = 0; q < CPT; q++)
#pragma unroll
            for (int i = 0; i <= KB; i++) {
                float sum = 0.0f;
                for (int l = 0; l < ALONG; l++) sum += sums[l * ACROSS + p.warp][i][cg + q];
                partial_to_workspace(ws, parts, part, p.c + q, KB + 1, i, sum);
            }
    }
}

} // namespace

namespace tg_conv1d {

template <typename T, int KB> auto stream_fwd_instance() -> void (*)(conv_args, stream_plan)
{
    return ::stream_fwd<T, KB>;
}
template auto stream_fwd_instance<float, 2>() -> void (*)(conv_args, stream_plan);
template auto stream_fwd_instance<float, 3>() -> void (*)(conv_args, stream_plan);
template auto stream_fwd_instance<float, 4>() -> void (*)(conv_args, stream_plan);
template auto stream_fwd_instance<float, 8>() -> void (*)(conv_args, stream_plan);
template auto stream_fwd_instance<float, 16>() -> void (*)(conv_args, stream_plan);
template auto stream_fwd_instance<__nv_bfloat16, 2>() -> void (*)(conv_args, stream_plan);
template auto stream_fwd_instance<__nv_bfloat16, 3>() -> void (*)(conv_args, stream_plan);
template auto stream_fwd_instance<__nv_bfloat16, 4>() -> void (*)(conv_args, stream_plan);
template auto stream_fwd_instance<__nv_bfloat16, 8>() -> void (*)(conv_args, stream_plan);
template auto stream_fwd_instance<__half, 2>() -> void (*)(conv_args, stream_plan);
template auto stream_fwd_instance<__half, 3>() -> void (*)(conv_args, stream_plan);
template auto stream_fwd_instance<__half, 4>() -> void (*)(conv_args, stream_plan);
template auto stream_fwd_instance<__half, 8>() -> void (*)(conv_args, stream_plan);

template <typename T, int KB, bool SILU> auto stream_bwd_instance() -> void (*)(conv_args, stream_plan, float *)
{
    return ::stream_bwd<T, KB, SILU>;
}
template auto stream_bwd_instance<float, 2, false>() -> void (*)(conv_args, stream_plan, float *);
template auto stream_bwd_instance<float, 2, true>() -> void (*)(conv_args, stream_plan, float *);
template auto stream_bwd_instance<float, 3, false>() -> void (*)(conv_args, stream_plan, float *);
template auto stream_bwd_instance<float, 3, true>() -> void (*)(conv_args, stream_plan, float *);
template auto stream_bwd_instance<float, 4, false>() -> void (*)(conv_args, stream_plan, float *);
template auto stream_bwd_instance<float, 4, true>() -> void (*)(conv_args, stream_plan, float *);
template auto stream_bwd_instance<float, 8, false>() -> void (*)(conv_args, stream_plan, float *);
template auto stream_bwd_instance<float, 8, true>() -> void (*)(conv_args, stream_plan, float *);
template auto stream_bwd_instance<float, 16, false>() -> void (*)(conv_args, stream_plan, float *);
template auto stream_bwd_instance<float, 16, true>() -> void (*)(conv_args, stream_plan, float *);
template auto stream_bwd_instance<__nv_bfloat16, 2, false>() -> void (*)(conv_args, stream_plan, float *);
template auto stream_bwd_instance<__nv_bfloat16, 2, true>() -> void (*)(conv_args, stream_plan, float *);
template auto stream_bwd_instance<__nv_bfloat16, 3, false>() -> void (*)(conv_args, stream_plan, float *);
template auto stream_bwd_instance<__nv_bfloat16, 3, true>() -> void (*)(conv_args, stream_plan, float *);
template auto stream_bwd_instance<__nv_bfloat16, 4, false>() -> void (*)(conv_args, stream_plan, float *);
template auto stream_bwd_instance<__nv_bfloat16, 4, true>() -> void (*)(conv_args, stream_plan, float *);
template auto stream_bwd_instance<__nv_bfloat16, 8, false>() -> void (*)(conv_args, stream_plan, float *);
template auto stream_bwd_instance<__nv_bfloat16, 8, true>() -> void (*)(conv_args, stream_plan, float *);
template auto stream_bwd_instance<__half, 2, false>() -> void (*)(conv_args, stream_plan, float *);
template auto stream_bwd_instance<__half, 2, true>() -> void (*)(conv_args, stream_plan, float *);
template auto stream_bwd_instance<__half, 3, false>() -> void (*)(conv_args, stream_plan, float *);
template auto stream_bwd_instance<__half, 3, true>() -> void (*)(conv_args, stream_plan, float *);
template auto stream_bwd_instance<__half, 4, false>() -> void (*)(conv_args, stream_plan, float *);
template auto stream_bwd_instance<__half, 4, true>() -> void (*)(conv_args, stream_plan, float *);
template auto stream_bwd_instance<__half, 8, false>() -> void (*)(conv_args, stream_plan, float *);
template auto stream_bwd_instance<__half, 8, true>() -> void (*)(conv_args, stream_plan, float *);
template auto stream_bwd_instance<__half, 16, false>() -> void (*)(conv_args, stream_plan, float *);
template auto stream_bwd_instance<__half, 16, true>() -> void (*)(conv_args, stream_plan, float *);

} // namespace tg_conv1d
