// kernels/cuda/conv1d/streams_mma_forward.cu: the 16-bit channel-last forward on tensor cores.
#include "kernels/cuda/conv1d/streams_mma.cuh"
#include "kernels/cuda/conv1d/tensor_cores.cuh"

namespace {
using namespace tg_conv1d;

// ---- The 16-bit channel-last forward on tensor cores, K = 9 … 16 -----------------------------
//
// At K = 16 the stream forward does 16 float multiply-adds per element on one channel per
// thread, and is bound by instruction issue. Here a warp takes 32 channels (64-byte rows, as
// the stream kernels read them) and walks its segment in tiles of 128 steps, and each channel's
// tile is one product on the tensor cores, 16 blocks of 8 steps by 8 outputs:
//     Z (16 blocks × 8 steps) = X (16 blocks × 24 window steps) · T (24 × 8) + bias,
// where block b's window is x[8b − 16 … 8b + 7] and T[j][i] = w′[j − i − 1], w′ the taps
// padded to 16 on the left (w′[k] multiplies x[t − 15 + k]; 0 outside 0 … 15). An m16n8k16
// takes window steps 0–15 (the 16 steps before the block) and an m16n8k8 steps 16–23 (the
// block's own). The taps' operand T depends on the lane, not on the step: each lane keeps it
// for its 32 channels in 96 registers for the whole segment.
//
// A lane (g, q) of the product's operand X needs, of one channel, the pairs of steps
// (8s + 2q, 8s + 2q + 1) for the blocks s = g − 2, g − 1, g and g + 6, g + 7, g + 8 of the
// tile: one channel's steps from rows of channels. It reads the two rows 8s + 2q and
// 8s + 2q + 1 as 16-byte pieces (8 channels each) and one byte permute per channel pairs the
// two steps. The rows are staged in a ring of three slots per warp (one computed, two in
// flight) with the 16-byte pieces of a row swizzled by the row's bits 1–2, and the lanes
// of odd g read the odd row first, so that every 16-byte read of a quarter-warp meets eight
// distinct bank groups. Each slot holds 16 rows before its tile (the next slot's are copied
// from the tile's last 16 rows as soon as they land), so every window is in one slot.
//
// The product's result Z holds, at lane (g, q), steps 8g + 2q, 8g + 2q + 1 of blocks g and
// g + 8: for the 8 channels of a piece, the whole piece of those four rows. After SiLU the
// lane writes them back over x's rows (every lane has read its windows of that piece by then).
//
// Lane 0 moves a tile in and out by the copy engine: x's rows as one tensor copy (a box of 32
// channels × 128 steps, swizzled as the ring is, zeros past L and C) counted on the slot's
// barrier, y's rows as another from the slot to y (a segment's steps are whole tiles or end at
// L, where the box stops). Before it copies a tile into a slot, it waits until the copy out
// of that slot, issued at the end of the tile before, has read it. Where a tensor map cannot
// be made, and before Hopper, every lane copies 16-byte pieces in (cp.async) and out instead.
// The copy engine measured faster than the lanes' copies, for x and again for y; issuing each
// tile's copy in after the maths of the tile before, where that wait is a tile old, measured
// slower (docs/benchmarks.md).
//
// A block of 4 warps holds 109 KB (three 9 KB slots per warp, the bias, the barriers and 512
// bytes to align the ring for the copies' swizzle), so 2 blocks fit on an SM: 8 warps of
// 212–223 registers (the taps' 96 among them). Rows past L are staged as
// zeros: a window reaches up to 7 steps past its output, with zero taps, and a zero tap times a
// NaN is a NaN (so, as in the channel-first product, an inf or NaN in x can reach the outputs of
// the up to 7 steps before it in its block of 8). Per tile a warp issues about 1000 instructions
// (12 16-byte reads and 48 byte permutes per piece, 2 products and the SiLU per channel) for
// 4096 outputs, against 16 multiply-adds per output and lane in the stream forward. Predicted
// near the copy rate, it measured about as fast as a plain copy that reads 128 bytes per block
// and step, as this walk does (docs/benchmarks.md).

// SiLU from one tanh: z·σ(z) = h + h·tanh(h), h = z/2 (16-bit outputs only: the tanh is good
// to about 2⁻¹¹, scaled_gradient).
__device__ inline float silu_by_tanh(float z)
{
    const float h = 0.5f * z;
    float th;
    asm("tanh.approx.f32 %0, %1;" : "=f"(th) : "f"(h));
    return fmaf(h, th, h);
}

template <typename T, bool SILU>
__global__ void __launch_bounds__(kBlock, 2)
    stream_fwd_mma(conv_args a, stream_plan plan, const __grid_constant__ CUtensorMap x_map,
                   const __grid_constant__ CUtensorMap y_map, bool by_tensors)
{
    using M = mma_stream_shape;
    const stream_place p = stream_place_of<T, 1>(a, plan, plan.across);
    if (p.t0 >= a.L || p.c0 >= a.C) return; // the whole warp
    char *memory = (char *)mma_stream_memory;
    if (TG_BULK_COPY) memory += (M::ALIGNMENT - (shared_address(memory) & (M::ALIGNMENT - 1))) & (M::ALIGNMENT - 1);
    char *ring = memory + p.warp * M::WARP_BYTES;
    float *bias = (float *)(memory + kBlock / 32 * M::WARP_BYTES) + p.warp * M::CHANNELS;
    uint64_t *arrivals = (uint64_t *)(memory + kBlock / 32 * (M::WARP_BYTES + M::CHANNELS * (int)sizeof(float))) +
                         p.warp * M::RING; // [slot]: tile k's tensor copy, phase k / RING (with by_tensors)
    const int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    const bool by_tensor = TG_BULK_COPY && by_tensors;
    if (by_tensor && lane == 0) arrival_barriers_init(arrivals, M::RING);

    // The taps' operands of each channel, for this lane: T[j][i] at j = 2q (+1), 2q + 8 (+1)
    // and 2q + 16 (+1), i = g, that is the pairs (w′[m + 8r], w′[m + 8r + 1]), m = 2q − g − 1,
    // r = 0, 1, 2 (a channel past C takes the last one's: it writes nothing). Lane j first
    // writes channel j's pairs into the third slot of the ring (free until tile 2's copies):
    // from even and from odd starts, 20 words each, w′ padded with 8 zeros before and 16 after.
    unsigned taps[M::CHANNELS][3];
    {
        unsigned *pairs = (unsigned *)(ring + 2 * M::SLOT);
        {
            const int64_t c = p.c0 + lane < a.C ? p.c0 + lane : a.C - 1;
            unsigned short padded[2 * kTapPairs]; // w′[k − 8]
#pragma unroll
            for (int k = 0; k < 2 * kTapPairs; k++)
                padded[k] = k >= 8 && k < 24 ? (unsigned short)tap_bits(a, c, 23 - k) : 0;
            write_tap_pairs(pairs, lane, padded);
        }
        __syncwarp();
        read_tap_pairs(pairs, 2 * q - g - 1 + 8, 0, taps);
        __syncwarp(); // every lane has its operands before tile 2's copies land over the pairs
    }
    {
        const int64_t c = p.c0 + lane;
        bias[lane] = a.bias && c < a.C ? tg_to_float(((const T *)a.bias)[c * a.bs0]) : 0.0f;
    }

    // This lane's copies: piece lane % 4 of rows lane / 4 + 8j.
    const int piece = lane % 4, prow = lane / 4;
    const bool piece_inside = p.c0 + 8 * piece < a.C;
    const unsigned swizzled = (unsigned)((piece ^ ((prow >> 1) & 3)) << 4);
    const unsigned ring_at = shared_address(ring);
    const int64_t x_step = a.x.s2 * (int64_t)sizeof(T), y_step = a.y.s2 * (int64_t)sizeof(T);
    const char *x_row = (const char *)row_of<T>(a.x, p.b, p.c0) + piece * 16;
    char *y_row = (char *)row_of<T>(a.y, p.b, p.c0) + piece * 16;
    const int tiles = (int)((p.end - p.t0 + M::TILE - 1) / M::TILE);
    auto issue = [&](int k) {
        if (by_tensor) { // the tile by the copy engine from lane 0; rows past L and channels past C as zeros
            if (lane == 0) {
                uint64_t *arrival = &arrivals[k % M::RING];
                tensor_stores_wait();  // tile k − 3's outputs (issued last) have left the slot
                async_copies_follow(); // after the warp's reads and writes of the slot (a __syncwarp before)
                tensor_box_to_shared(ring + (k % M::RING) * M::SLOT + M::HALO * M::ROW, &x_map, (int)p.c0,
                                     (int)(p.t0 + (int64_t)M::TILE * k), (int)p.b, M::TILE * M::ROW, arrival);
                arrival_arrive(arrival);
            }
            return;
        }
        const int64_t t = p.t0 + (int64_t)M::TILE * k + prow;
        const unsigned at = ring_at + (k % M::RING) * M::SLOT + (M::HALO + prow) * M::ROW + swizzled;
#pragma unroll
        for (int j = 0; j < M::TILE / 8; j++) {
            const bool inside = piece_inside && t + 8 * j < a.L;
            copy16_async_or_zero(at + j * 8 * M::ROW, inside ? x_row + (t + 8 * j) * x_step : x_row, inside ? 16 : 0);
        }
    };
    // The first tile's halo: x before t0, or the history (zero without one) before step 0.
    if (p.t0 >= M::HALO) {
#pragma unroll
        for (int j = 0; j < 2; j++)
            copy16_async_or_zero(ring_at + (prow + 8 * j) * M::ROW + swizzled,
                                 x_row + (p.t0 - M::HALO + prow + 8 * j) * x_step, piece_inside ? 16 : 0);
    } else { // t0 = 0: lane = channel
        stage_history_rows<T>(a, p.b, p.c0 + lane, lane, ring, 0);
    }
    issue(0);
    copies_commit();
    if (tiles > 1) issue(1);
    copies_commit();

    // The rows this lane reads and writes: 8s + 2q + e of a tile, e = 0 first for even g and
    // e = 1 first for odd g (odd_first), and the byte permutes that pair them per channel.
    const step_pair_rows pair_rows = step_pair_rows_of(g, q);
    const bool odd_first = pair_rows.odd_first;
    const unsigned pair_low = pair_rows.pair_low, pair_high = pair_rows.pair_high;
    const int first_row = M::HALO + pair_rows.first, second_row = first_row + (odd_first ? -1 : 1);
    for (int k = 0; k < tiles; k++) {
        if (by_tensor) {
            if (k == 0) copies_wait_all(); // the first tile's halo
            arrival_wait(&arrivals[k % M::RING], k / M::RING % 2);
        } else {
            copies_wait_groups<1>(); // tile k's copies have landed
        }
        __syncwarp(); // everyone's, and everyone is done with tile k − 1's slot
        if (k + 2 < tiles) issue(k + 2);
        copies_commit();
        char *slot = ring + (k % M::RING) * M::SLOT;
        if (k + 1 < tiles) { // the next slot's halo: this tile's last 16 rows, before they are overwritten
            char *next = ring + ((k + 1) % M::RING) * M::SLOT;
#pragma unroll
            for (int j = 0; j < 2; j++)
                *(uint4 *)(next + 16 * lane + 512 * j) =
                    *(const uint4 *)(slot + M::TILE * M::ROW + 16 * lane + 512 * j);
        }
#pragma unroll // (the taps' registers are indexed by channel: unrolled, they stay registers)
        for (int pc = 0; pc < M::PIECES; pc++) {
            char *first = slot + first_row * M::ROW + ((pc ^ q) << 4);
            char *second = slot + second_row * M::ROW + ((pc ^ q) << 4);
            // Register i of the operand holds block s = g + i / 2 − 2 + 8·(i mod 2): −2, 6, −1, 7, 0, 8.
            uint4 u0[6], u1[6];
#pragma unroll
            for (int i = 0; i < 6; i++) {
                const int s = i / 2 - 2 + 8 * (i % 2);
                u0[i] = *(const uint4 *)(first + 8 * M::ROW * s);
                u1[i] = *(const uint4 *)(second + 8 * M::ROW * s);
            }
            __syncwarp();  // every lane has its windows of this piece before any writes over them
            uint4 rows[4]; // out: rows first, second of block g, then of block g + 8
#pragma unroll
            for (int m = 0; m < 4; m++) { // channels 2m, 2m + 1 of the piece
                float v[2][4];
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int ch = 8 * pc + 2 * m + h;
                    const unsigned sel = h ? pair_high : pair_low;
                    unsigned w[6];
#pragma unroll
                    for (int i = 0; i < 6; i++) w[i] = __byte_perm(word_of(u0[i], m), word_of(u1[i], m), sel);
                    const float b = bias[ch];
                    float d[4] = {b, b, b, b};
                    const unsigned x16[4] = {w[0], w[1], w[2], w[3]};
                    mma16<T>(d, x16, taps[ch][0], taps[ch][1]);
                    mma8<T>(d, w[4], w[5], taps[ch][2]);
#pragma unroll
                    for (int i = 0; i < 4; i++) v[h][i] = SILU ? silu_by_tanh(d[i]) : d[i];
                }
                // d0, d1: steps 8g + 2q, + 1; d2, d3: the same of block g + 8.
                const unsigned e0 = pack2(v[0][0], v[1][0], T()), e1 = pack2(v[0][1], v[1][1], T());
                const unsigned f0 = pack2(v[0][2], v[1][2], T()), f1 = pack2(v[0][3], v[1][3], T());
                word_of(rows[0], m) = odd_first ? e1 : e0;
                word_of(rows[1], m) = odd_first ? e0 : e1;
                word_of(rows[2], m) = odd_first ? f1 : f0;
                word_of(rows[3], m) = odd_first ? f0 : f1;
            }
            *(uint4 *)first = rows[0];
            *(uint4 *)second = rows[1];
            *(uint4 *)(first + 64 * M::ROW) = rows[2];
            *(uint4 *)(second + 64 * M::ROW) = rows[3];
        }
        __syncwarp();    // the tile's outputs are all in the slot
        if (by_tensor) { // one tensor copy from lane 0 (a segment's steps are whole tiles, or end at L)
            if (lane == 0)
                tensor_box_from_shared(&y_map, (int)p.c0, (int)(p.t0 + (int64_t)M::TILE * k), (int)p.b,
                                       slot + M::HALO * M::ROW);
            continue;
        }
        const int64_t t = p.t0 + (int64_t)M::TILE * k + prow;
        const char *from = slot + (M::HALO + prow) * M::ROW + swizzled;
        if (plan.whole_pieces) {
#pragma unroll
            for (int j = 0; j < M::TILE / 8; j++)
                if (piece_inside && t + 8 * j < p.end)
                    *(uint4 *)(y_row + (t + 8 * j) * y_step) = *(const uint4 *)(from + j * 8 * M::ROW);
        } else { // output steps not 16-byte aligned: value by value
            for (int j = 0; j < M::TILE / 8; j++)
                if (piece_inside && t + 8 * j < p.end)
                    for (int e = 0; e < 8 && p.c0 + 8 * piece + e < a.C; e++)
                        ((T *)(y_row + (t + 8 * j) * y_step))[e] = ((const T *)(from + j * 8 * M::ROW))[e];
        }
    }
    if (by_tensor && lane == 0) tensor_stores_wait<true>(); // y's tensor copies are done with the ring
}

} // namespace

namespace tg_conv1d {

template <typename T, bool SILU>
auto stream_fwd_mma_instance() -> void (*)(conv_args, stream_plan, CUtensorMap, CUtensorMap, bool)
{
    return ::stream_fwd_mma<T, SILU>;
}
template auto stream_fwd_mma_instance<__nv_bfloat16, false>()
    -> void (*)(conv_args, stream_plan, CUtensorMap, CUtensorMap, bool);
template auto stream_fwd_mma_instance<__nv_bfloat16, true>()
    -> void (*)(conv_args, stream_plan, CUtensorMap, CUtensorMap, bool);
template auto stream_fwd_mma_instance<__half, false>()
    -> void (*)(conv_args, stream_plan, CUtensorMap, CUtensorMap, bool);
template auto stream_fwd_mma_instance<__half, true>()
    -> void (*)(conv_args, stream_plan, CUtensorMap, CUtensorMap, bool);

} // namespace tg_conv1d
