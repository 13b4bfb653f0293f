// kernels/cuda/conv1d/streams_mma_backward.cu: the bf16 channel-last backward on tensor cores.
#include "kernels/cuda/conv1d/streams_mma.cuh"
#include "kernels/cuda/conv1d/tensor_cores.cuh"

namespace {
using namespace tg_conv1d;

// ---- The bf16 channel-last backward on tensor cores, K = 9 … 16 ----------------------------
//
// stream_bwd does 3·16 float multiply-adds per element at K = 16 on one channel per thread and
// is bound by instruction issue (docs/benchmarks.md). Here the forward's operand form
// (stream_fwd_mma) carries over to all three products. A block of four warps takes 32 channels
// (64-byte rows) and one segment of time, which it walks in tiles of 128 steps, 16 blocks of 8;
// warp w takes the channels of 16-byte piece w of every row (8 channels). Per channel and tile:
//   z = X·T + bias, as in the forward (with the taps and bias scaled by tap_scale, so that z
//     comes out as scaled_gradient wants it); g = dout·act'(z) / tap_scale in the result's
//     layout: lane (g, q) holds steps 8g + 2q, 8g + 2q + 1 of blocks g and g + 8, and reads
//     dout from those rows;
//   dx = G·T′, the forward's product mirrored: output row r is block r − 2 (dx trails g by 16
//     steps), its window g of blocks r − 2, r − 1, r, and T′[j][n] = wl[j − n]. The A operand
//     is g's words of blocks g − 2, g + 6, g − 1, g + 7 (m16n8k16) and g, g + 8 (m16n8k8): the
//     lane's own two words and, by shuffles from the lanes 4 and 8 before it (modulo the 8
//     groups), theirs; where that wraps (blocks −2, −1), the sender's block g + 8 word of the
//     previous tile, which each lane keeps. g is rounded to bf16 for all the products, as in
//     tensor_core_backward (carried as hi + lo, it measured slower here);
//   dw: P = Xwinᵀ·G (24 window steps × 8 steps, summed over the 16 blocks), two m16n8k16.
//     Their operands are movmatrix transposes of words the lane already holds: X's six
//     (m-tile 0: blocks g − 2, g − 1, g + 6, g + 7; m-tile 1: g, g + 8, its rows 24–31 zero)
//     and g's two. P[j][n] is the sum at lag 16 + n − j; each lane folds its results into four
//     sums, lags D0 or D0 + 16, D0 + 1 or D0 + 17 (whichever lies in 0 … 15), D0 + 8 and
//     D0 + 9, D0 = 2q − g. At the segment's end the sums meet by lag in shared memory, in a
//     fixed order (no atomics);
//   dbias: each lane's float32 sum of its g before the rounding, met across the lanes at the
//     segment's end in a fixed order.
// A tile's dx (the 16 steps before it and its first 112) is written over dout's rows of the
// steps 16 later (the lane's own rows: each lane writes what it read), and copied out a tile
// later: by one tensor copy from thread 0 where the tile lies inside the segment and away from
// the final states (every thread copying its pieces at the segment's ends, or where dx's
// tensor map cannot be made). A segment's walk takes one tile more than its steps, for g of
// the 16 steps after it (the next segment's, or zeros past L); those steps stay out of dw and
// dbias.
// x's and dout's tiles come in by the copy engine into two rings of four tiles per block (64
// KB): thread 0 issues one tensor copy per tile and tensor (a box of 32 channels × 128 steps,
// swizzled as the rings are, zeros past L and C), counted on the slot's barrier; before Hopper
// every thread issues 16-byte cp.async copies instead. Tile k's window reaches the 16 rows
// before it in the ring (a wrap at its start), so no halo is copied; two tiles are in flight
// while one is computed and one copied out, and one block barrier per tile orders them. With
// the taps' tables and the lanes' sums a block holds 95 KB: 2 blocks per SM, 8 warps of
// 236–245 registers.
//   It measured faster than the float stream backward (docs/benchmarks.md). The products are
// a small part of a warp's instructions per tile; in the first form the L1 pipe (shared memory
// and the copies) was its busiest unit (Nsight Compute), with x's window reads, the lag sums
// and the cp.async writes (each 512 bytes in rows of 64 bytes takes 8 wavefronts, not 4).
// Three blocks per SM (one tile in flight, 168 registers) measured slower: the L1 pipe, more
// than each channel's chain of latencies, sets its pace. The tensor copies took the cp.async
// writes and their address arithmetic off that pipe, and measured faster, as did dx's tensor
// copies out.

// The 16-bit tap at look-back distance d of channel c times tap_scale (exact in bf16), as bits.
__device__ inline unsigned short scaled_tap_bits(const conv_args &a, int64_t c, int d)
{
    const float w = __uint_as_float(tap_bits(a, c, d) << 16);
    return __bfloat16_as_ushort(__float2bfloat16_rn(tap_scale<__nv_bfloat16>() * w));
}

// The 8 × 8 16-bit matrix whose row g, columns 2q, 2q + 1 lane (g, q) holds, transposed.
__device__ inline unsigned transposed8(unsigned m)
{
    unsigned t;
    asm("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(t) : "r"(m));
    return t;
}

template <bool SILU>
__global__ void __launch_bounds__(kBlock, 2)
    stream_bwd_mma(conv_args a, mma_backward_plan plan, float *ws, const __grid_constant__ CUtensorMap x_map,
                   const __grid_constant__ CUtensorMap d_map, const __grid_constant__ CUtensorMap dx_map)
{
    using T = __nv_bfloat16;
    using M = mma_backward_shape;
    next_kernel_may_start();
    after_previous_kernels();
    const int64_t b = blockIdx.y, c0 = blockIdx.x % plan.channel_blocks * M::CHANNELS;
    const int64_t time_block = blockIdx.x / plan.channel_blocks, t0 = time_block * plan.seg_len;
    const int64_t end = t0 + plan.seg_len < a.L ? t0 + plan.seg_len : a.L;
    // g is wanted 16 steps past the segment (for its last dx); nothing is read past L.
    const int64_t copy_end = end + M::LAG < a.L ? end + M::LAG : a.L;
    const int tiles = (int)((end + M::LAG - t0 + M::TILE - 1) / M::TILE);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    char *x_ring = (char *)mma_stream_memory, *d_ring;
    if (TG_BULK_COPY) x_ring += (M::ALIGNMENT - (shared_address(x_ring) & (M::ALIGNMENT - 1))) & (M::ALIGNMENT - 1);
    d_ring = x_ring + M::RING;
    unsigned *forward_table = (unsigned *)(d_ring + M::RING);
    unsigned *mirror_table = forward_table + M::CHANNELS * kTapPairStride;
    float4 *lag_sums = (float4 *)(d_ring + M::RING + M::TABLES) + warp * 8 * 32; // [channel][lane]
    float2 *bias_sums = (float2 *)(d_ring + M::RING + M::TABLES + M::CHANNELS * 32 * 16) + warp * 4 * 32; // [m][lane]
    float *bias = (float *)(d_ring + M::RING + M::TABLES + M::SUMS);
    uint64_t *slot_arrivals = (uint64_t *)(bias + M::CHANNELS); // [slot]: tile k's tensor copies, phase k / SLOTS
    const bool warp_inside = c0 + 8 * warp < a.C;               // this warp's piece has channels

    // The taps' tables: threads 0–31 write the forward's pairs of channel `lane` (P[k] = w′[k − 8]
    // as in stream_fwd_mma), threads 32–63 the mirrored product's (P[k] = wl[k − 8]), both
    // scaled by tap_scale. Each lane keeps its forward operands in registers (24) and reads
    // the mirrored ones at each tile: with both in registers the kernel spilled.
    if (threadIdx.x < 64) {
        const int64_t c = c0 + lane < a.C ? c0 + lane : a.C - 1;
        const bool mirror = threadIdx.x >= 32;
        unsigned short padded[2 * kTapPairs];
#pragma unroll
        for (int k = 0; k < 2 * kTapPairs; k++)
            padded[k] = k >= 8 && k < 24 ? scaled_tap_bits(a, c, mirror ? k - 8 : 23 - k) : 0;
        write_tap_pairs(mirror ? mirror_table : forward_table, lane, padded);
        if (!mirror)
            bias[lane] =
                a.bias && c0 + lane < a.C ? tap_scale<T>() * tg_to_float(((const T *)a.bias)[c * a.bs0]) : 0.0f;
    }
    if (TG_BULK_COPY && threadIdx.x == 0) arrival_barriers_init(slot_arrivals, M::SLOTS);
    __syncthreads();
    unsigned taps[8][3]; // the forward's operands of this warp's 8 channels
    read_tap_pairs(forward_table, 2 * q - g - 1 + 8, 8 * warp, taps);
    // z's bias comes out of the product: B[0][n] (lanes q = 0, low half) meets no x step, so it
    // holds the bias, and A's column 0 (the same lanes' low halves) is patched to 1.
    if (q == 0)
#pragma unroll
        for (int j = 0; j < 8; j++)
            taps[j][0] = (taps[j][0] & 0xffff0000u) | __bfloat16_as_ushort(__float2bfloat16_rn(bias[8 * warp + j]));
    const unsigned column0_keep = q == 0 ? 0xffff0000u : 0xffffffffu, column0_one = q == 0 ? 0x3f80u : 0u;
    const unsigned *mirror_pairs = tap_pairs_of(mirror_table, 2 * q - g + 8, 8 * warp);

    // This thread's copies: piece threadIdx.x % 4 of rows threadIdx.x / 4 + 32j of a tile.
    const int piece = threadIdx.x % 4, prow = threadIdx.x / 4;
    const bool piece_inside = c0 + 8 * piece < a.C;
    const unsigned swizzled = (unsigned)((piece ^ ((prow >> 1) & 3)) << 4);
    const unsigned x_at = shared_address(x_ring), d_at = shared_address(d_ring);
    const int64_t x_step = a.x.s2 * (int64_t)sizeof(T), d_step = a.y.s2 * (int64_t)sizeof(T);
    const int64_t dx_step = a.dx.s2 * (int64_t)sizeof(T);
    const char *x_row = (const char *)row_of<T>(a.x, b, c0) + piece * 16;
    const char *d_row = (const char *)row_of<T>(a.y, b, c0) + piece * 16;
    char *dx_row = (char *)row_of<T>(a.dx, b, c0) + piece * 16;
    auto issue = [&](int k) {
#if TG_BULK_COPY
        if (threadIdx.x == 0) { // both tiles by the copy engine; rows past L and channels past C as zeros
            uint64_t *arrival = &slot_arrivals[k % M::SLOTS];
            const int t = (int)(t0 + (int64_t)M::TILE * k), slot = (k % M::SLOTS) * M::TILE * M::ROW;
            tensor_stores_wait(); // tile k − 4's dx has left this slot
            async_copies_follow();
            tensor_box_to_shared(x_ring + slot, &x_map, (int)c0, t, (int)b, M::TILE * M::ROW, arrival);
            tensor_box_to_shared(d_ring + slot, &d_map, (int)c0, t, (int)b, M::TILE * M::ROW, arrival);
            arrival_arrive(arrival);
        }
        return;
#endif
        const int64_t t = t0 + (int64_t)M::TILE * k + prow;
        const unsigned at = ((k % M::SLOTS) * M::TILE + prow) * M::ROW + swizzled;
        if (piece_inside && t0 + (int64_t)M::TILE * (k + 1) <= copy_end) { // the whole tile: no tests
            const char *x_from = x_row + t * x_step, *d_from = d_row + t * d_step;
#pragma unroll
            for (int j = 0; j < M::TILE / 32; j++) {
                copy16_async_to(x_at + at + j * 32 * M::ROW, x_from + j * 32 * x_step);
                copy16_async_to(d_at + at + j * 32 * M::ROW, d_from + j * 32 * d_step);
            }
            return;
        }
#pragma unroll
        for (int j = 0; j < M::TILE / 32; j++) {
            const bool inside = piece_inside && t + 32 * j < copy_end;
            copy16_async_or_zero(x_at + at + j * 32 * M::ROW, inside ? x_row + (t + 32 * j) * x_step : x_row,
                                 inside ? 16 : 0);
            copy16_async_or_zero(d_at + at + j * 32 * M::ROW, inside ? d_row + (t + 32 * j) * d_step : d_row,
                                 inside ? 16 : 0);
        }
    };
    // Tile k's dx (steps 16 before its rows') from dout's ring to dx: steps t0 … end − 1 only.
    const int64_t final_from = final_states_from(a);
    auto copy_out = [&](int k) {
        const int64_t first = t0 + (int64_t)M::TILE * k - M::LAG, u = first + prow;
        const bool whole = first >= t0 && first + M::TILE <= end && first + M::TILE <= final_from;
        if (TG_BULK_COPY && plan.dx_by_tensor && whole) { // the whole tile in one tensor copy from thread 0
            if (threadIdx.x == 0)                         // after every thread's dx writes (the barrier before)
                tensor_box_from_shared(&dx_map, (int)c0, (int)first, (int)b,
                                       d_ring + (k % M::SLOTS) * M::TILE * M::ROW);
            return;
        }
        const char *from = d_ring + ((k % M::SLOTS) * M::TILE + prow) * M::ROW + swizzled;
        if (piece_inside && plan.whole_pieces && whole) {
            char *to = dx_row + u * dx_step; // the whole tile: no tests
#pragma unroll
            for (int j = 0; j < M::TILE / 32; j++)
                *(uint4 *)(to + j * 32 * dx_step) = *(const uint4 *)(from + j * 32 * M::ROW);
            return;
        }
#pragma unroll
        for (int j = 0; j < M::TILE / 32; j++) {
            const int64_t s = u + 32 * j;
            if (!piece_inside || s < t0 || s >= end) continue;
            uint4 v = *(const uint4 *)(from + j * 32 * M::ROW);
            if (s >= final_from) { // the final states' gradient joins the last K − 1 steps
                float f[8];
                unpack16<T>(v, f);
                for (int e = 0; e < 8; e++)
                    if (c0 + 8 * piece + e < a.C) f[e] += ld<T>(a.dfinal, b, c0 + 8 * piece + e, s - final_from);
                v = pack16<T>(f);
            }
            if (plan.whole_pieces) {
                *(uint4 *)(dx_row + s * dx_step) = v;
            } else { // dx's steps not 16-byte aligned: value by value
                for (int e = 0; e < 8 && c0 + 8 * piece + e < a.C; e++)
                    ((unsigned short *)(dx_row + s * dx_step))[e] =
                        (unsigned short)(word_of(v, e / 2) >> (16 * (e % 2)));
            }
        }
    };
    // The first tile's window reaches the 16 rows before it (the ring's last): x before t0, or
    // the history (zero without one) before step 0.
    const unsigned halo_at = (M::RING_ROWS - M::LAG) * M::ROW;
    if (t0 >= M::LAG) {
        if (prow < M::LAG)
            copy16_async_or_zero(x_at + halo_at + prow * M::ROW + swizzled, x_row + (t0 - M::LAG + prow) * x_step,
                                 piece_inside ? 16 : 0);
    } else if (threadIdx.x < 32) { // t0 = 0: thread = channel
        stage_history_rows<T>(a, b, c0 + lane, lane, x_ring, M::RING_ROWS - M::LAG);
    }
    issue(0);
    copies_commit();
    if (tiles > 1) issue(1);
    copies_commit();

    // The rows this lane reads (and, in dout's ring, writes): 8s + 2q + e of a tile, e = 0 first
    // for even g and 1 first for odd g, as in stream_fwd_mma, and the permutes that pair them.
    const step_pair_rows pair_rows = step_pair_rows_of(g, q);
    const unsigned pair_low = pair_rows.pair_low, pair_high = pair_rows.pair_high;
    const int first_row = pair_rows.first, second_row = pair_rows.second;
    const bool odd_first = pair_rows.odd_first;
    const int column = (warp ^ q) << 4;      // piece `warp`, swizzled by the rows' bits 1–2 (= q)
    const int64_t lane_step = 8 * g + 2 * q; // this lane's first step of block g in a tile
    // The lags of this lane's dw sums (see above), as the selects of the folding.
    const int d0 = 2 * q - g;
    const bool lag0_late = d0 >= 0, lag1_late = d0 >= -1;
    // The lag sums live in shared memory between the tiles (each lane its own): in registers
    // (32) they made the kernel spill, and measured slower even with g in one part. dbias'
    // sums (8) fit in registers, and measured faster there than read and written back per tile.
    unsigned previous[8]; // [channel]: g's word of block g + 8 in the previous tile
#pragma unroll
    for (int j = 0; j < 8; j++) {
        lag_sums[j * 32 + lane] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        previous[j] = 0u; // before t0: no dx written
    }
    float bias_acc[8] = {}; // [channel]: dbias' sums of this lane's steps, in float32

    for (int k = 0; k < tiles; k++) {
        if (TG_BULK_COPY) {
            if (k == 0) copies_wait_all(); // the first tile's window history
            arrival_wait(&slot_arrivals[k % M::SLOTS], k / M::SLOTS % 2);
        } else {
            copies_wait_groups<1>(); // tile k's copies have landed
        }
        __syncthreads(); // everyone's; tile k − 1's dx is all in, tile k − 2's slot free
        // Tile k + 2's copies go out before tile k − 1's dx: then the tensor copy that took tile
        // k − 2's dx out of the slot they land in is the last one thread 0 waits for.
        if (k + 2 < tiles) issue(k + 2);
        copies_commit();
        if (k > 0) copy_out(k - 1);
        if (!warp_inside) continue;
        const int base = (k % M::SLOTS) * M::TILE; // the tile's first ring row
        const int64_t tile_t = t0 + (int64_t)M::TILE * k;
        // The tiles that reach past the segment (its last one or two) mask g's steps from
        // `end` on out of dw and dbias; the others are compiled without the masks.
        auto compute = [&](auto past_end) {
            constexpr bool PAST_END = decltype(past_end)::value;
            // Masks of this lane's steps that are the segment's own (dw and dbias take only those).
            auto own = [&](int64_t s) { return (s < end ? 0xffffu : 0u) | (s + 1 < end ? 0xffff0000u : 0u); };
            const unsigned own_g = own(tile_t + lane_step), own_g8 = own(tile_t + lane_step + 64);
            uint4 u0[6], u1[6];
#pragma unroll
            for (int i = 0; i < 6; i++) { // blocks g + s, s = −2, 6, −1, 7, 0, 8 (the operand's order)
                const int s = i / 2 - 2 + 8 * (i % 2);
                u0[i] = *(const uint4 *)(x_ring + ((base + first_row + 8 * s) & (M::RING_ROWS - 1)) * M::ROW + column);
                u1[i] = *(const uint4 *)(x_ring + ((base + second_row + 8 * s) & (M::RING_ROWS - 1)) * M::ROW + column);
            }
            // dout's rows (and dx's, written over them): steps 2q, 2q + 1 of blocks g and g + 8,
            // the odd step first for odd g as X's rows, so that these four reads and writes
            // meet no bank conflicts; a word holds one step of two channels, put in step order
            // by a select (in step order for all lanes, the rows conflicted two ways, which
            // measured slower).
            uint4 *dout_rows[4] = {(uint4 *)(d_ring + (base + first_row) * M::ROW + column),
                                   (uint4 *)(d_ring + (base + second_row) * M::ROW + column),
                                   (uint4 *)(d_ring + (base + first_row + 64) * M::ROW + column),
                                   (uint4 *)(d_ring + (base + second_row + 64) * M::ROW + column)};
            uint4 dout[4], dx_rows[4];
#pragma unroll
            for (int r = 0; r < 4; r++) dout[r] = *dout_rows[r];
#pragma unroll
            for (int m = 0; m < 4; m++) { // channels 2m, 2m + 1 of the piece, side by side (h)
                // Each step of the maths is written for both channels before the next: one
                // channel's chain (z, its slope, g, its transposes, the products) is long,
                // and the other's instructions fill its waits.
                unsigned w[2][6];
                float gv[2][4]; // g at steps 2q, 2q + 1 of blocks g (0, 1) and g + 8 (2, 3)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const unsigned sel = h ? pair_high : pair_low;
#pragma unroll
                    for (int i = 0; i < 6; i++) w[h][i] = __byte_perm(word_of(u0[i], m), word_of(u1[i], m), sel);
                }
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    const unsigned mine = word_of(dout[r], m), other = word_of(dout[r ^ 1], m);
                    unpack2(odd_first ? other : mine, gv[0][r], gv[1][r], T()); // in step order
                }
                if (SILU) {
                    float z[2][4];
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const int ch = 2 * m + h;
                        const unsigned x16[4] = {(w[h][0] & column0_keep) | column0_one,
                                                 (w[h][1] & column0_keep) | column0_one, w[h][2], w[h][3]};
                        z[h][0] = z[h][1] = z[h][2] = z[h][3] = 0.0f;
                        mma16<T>(z[h], x16, taps[ch][0], taps[ch][1]);
                        mma8<T>(z[h], w[h][4], w[h][5], taps[ch][2]);
                    }
#pragma unroll
                    for (int h = 0; h < 2; h++)
#pragma unroll
                        for (int i = 0; i < 4; i++) gv[h][i] = scaled_gradient<T, true>(z[h][i], gv[h][i]);
                } else {
#pragma unroll
                    for (int h = 0; h < 2; h++)
#pragma unroll
                        for (int i = 0; i < 4; i++) gv[h][i] = scaled_gradient<T, false>(0.0f, gv[h][i]);
                }
#pragma unroll
                for (int h = 0; h < 2; h++) { // dbias of g before its rounding: the segment's own steps only
                    if (PAST_END)             // own_g, own_g8: a half set per step of the segment's
                        bias_acc[2 * m + h] +=
                            ((own_g & 0xffffu ? gv[h][0] : 0.0f) + (own_g >> 16 ? gv[h][1] : 0.0f)) +
                            ((own_g8 & 0xffffu ? gv[h][2] : 0.0f) + (own_g8 >> 16 ? gv[h][3] : 0.0f));
                    else
                        bias_acc[2 * m + h] += (gv[h][0] + gv[h][1]) + (gv[h][2] + gv[h][3]);
                }
                unsigned own_words[2][2]; // [h][block g, block g + 8]
                unsigned xt[2][6];        // X's words transposed, for dw
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    own_words[h][0] = pack2(gv[h][0], gv[h][1], T());
                    own_words[h][1] = pack2(gv[h][2], gv[h][3], T());
#pragma unroll
                    for (int i = 0; i < 6; i++) xt[h][i] = transposed8(w[h][i]);
                }
                float d[2][4], p0[2][4], p1[2][4];
#pragma unroll
                for (int h = 0; h < 2; h++)
#pragma unroll
                    for (int i = 0; i < 4; i++) d[h][i] = p0[h][i] = p1[h][i] = 0.0f;
                unsigned window[2][4], gt[2][2];
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int ch = 2 * m + h;
                    const unsigned lo = own_words[h][0], hi = own_words[h][1];
                    // The lanes 4 (8) before send what block g − 1 (g − 2) and g + 7 (g + 6) are:
                    // their blocks g and g + 8, or where that wraps (to blocks −1, −2 and 7, 6),
                    // their block g + 8 of the previous tile and their block g of this one.
                    const bool wraps4 = g == 7, wraps8 = g >= 6;
                    window[h][0] = __shfl_sync(0xffffffffu, wraps8 ? previous[ch] : lo, (lane + 24) & 31); // g − 2
                    window[h][1] = __shfl_sync(0xffffffffu, wraps8 ? lo : hi, (lane + 24) & 31);           // g + 6
                    window[h][2] = __shfl_sync(0xffffffffu, wraps4 ? previous[ch] : lo, (lane + 28) & 31); // g − 1
                    window[h][3] = __shfl_sync(0xffffffffu, wraps4 ? lo : hi, (lane + 28) & 31);           // g + 7
                    previous[ch] = hi;
                    // dw: the segment's own steps only
                    gt[h][0] = transposed8(PAST_END ? lo & own_g : lo);
                    gt[h][1] = transposed8(PAST_END ? hi & own_g8 : hi);
                }
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const unsigned *pairs = mirror_pairs + (2 * m + h) * kTapPairStride;
                    mma16<T>(d[h], window[h], pairs[0], pairs[4]);
                    mma8<T>(d[h], own_words[h][0], own_words[h][1], pairs[8]);
                    const unsigned xt0[4] = {xt[h][0], xt[h][2], xt[h][1], xt[h][3]};
                    const unsigned xt1[4] = {xt[h][4], 0u, xt[h][5], 0u};
                    mma16<T>(p0[h], xt0, gt[h][0], gt[h][1]);
                    mma16<T>(p1[h], xt1, gt[h][0], gt[h][1]);
                }
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int ch = 2 * m + h;
                    float4 sums = lag_sums[ch * 32 + lane];
                    sums.x += lag0_late ? p1[h][0] : p0[h][0];
                    sums.y += lag1_late ? p1[h][1] : p0[h][1];
                    sums.z += p0[h][2];
                    sums.w += p0[h][3];
                    lag_sums[ch * 32 + lane] = sums;
                }
                // d[h][0], [1]: channel h's dx at steps 2q, 2q + 1
                // of block g − 2; [2], [3]: of block g + 6. They go over dout's rows of blocks g
                // and g + 8, which this lane read.
                const unsigned e0 = pack2(d[0][0], d[1][0], T());
                const unsigned e1 = pack2(d[0][1], d[1][1], T());
                const unsigned f0 = pack2(d[0][2], d[1][2], T());
                const unsigned f1 = pack2(d[0][3], d[1][3], T());
                word_of(dx_rows[0], m) = odd_first ? e1 : e0;
                word_of(dx_rows[1], m) = odd_first ? e0 : e1;
                word_of(dx_rows[2], m) = odd_first ? f1 : f0;
                word_of(dx_rows[3], m) = odd_first ? f0 : f1;
            }
#pragma unroll
            for (int r = 0; r < 4; r++) *dout_rows[r] = dx_rows[r];
        };
        if (tile_t + M::TILE > end)
            compute(std::true_type());
        else
            compute(std::false_type());
    }
    __syncthreads(); // the last tile's dx is in
    copy_out(tiles - 1);
    if (threadIdx.x == 0) tensor_stores_wait<true>(); // dx's tensor copies are done with the ring
#pragma unroll
    for (int m = 0; m < 4; m++) bias_sums[m * 32 + lane] = make_float2(bias_acc[2 * m], bias_acc[2 * m + 1]);

    // dw and dbias: the lanes' sums by lag are added in a fixed order: lag i takes
    // P[16 + n − i][n], n = 0 … 7, from lane ((16 + n − i) mod 8, n / 2), sum (rows 8–15 of
    // m-tile 0 ? 2 : 0) + n mod 2.
    __syncwarp();
    if (!warp_inside) return;
    const int64_t parts = a.B * plan.time_blocks, part = b * plan.time_blocks + time_block;
    for (int o = lane; o < 8 * 17; o += 32) {
        const int j = o / 17, i = o % 17;
        const int64_t c = c0 + 8 * warp + j;
        if (c >= a.C) continue;
        float sum = 0.0f;
        if (i == 16) { // dbias: every lane's float32 sum
            for (int l = 0; l < 32; l++) sum += j % 2 ? bias_sums[j / 2 * 32 + l].y : bias_sums[j / 2 * 32 + l].x;
        } else {
            for (int n = 0; n < 8; n++) {
                const int row = 16 + n - i;
                const float4 v = lag_sums[j * 32 + (row % 8) * 4 + n / 2];
                sum += row & 8 ? (n % 2 ? v.w : v.z) : (n % 2 ? v.y : v.x);
            }
        }
        partial_to_workspace(ws, parts, part, c, 17, i, tap_scale<T>() * sum);
    }
}

} // namespace

namespace tg_conv1d {

template <bool SILU>
auto stream_bwd_mma_instance() -> void (*)(conv_args, mma_backward_plan, float *, CUtensorMap, CUtensorMap, CUtensorMap)
{
    return ::stream_bwd_mma<SILU>;
}
template auto stream_bwd_mma_instance<false>()
    -> void (*)(conv_args, mma_backward_plan, float *, CUtensorMap, CUtensorMap, CUtensorMap);
template auto stream_bwd_mma_instance<true>()
    -> void (*)(conv_args, mma_backward_plan, float *, CUtensorMap, CUtensorMap, CUtensorMap);

} // namespace tg_conv1d
