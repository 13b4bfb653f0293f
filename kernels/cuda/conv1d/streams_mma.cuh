// kernels/cuda/conv1d/streams_mma.cuh: what the channel-last kernels on tensor cores share: the
// forward's tiles and rings, the products, the taps' table, and the backward's shape and plan
// (streams_mma_forward.cu and streams_mma_backward.cu describe them).
#ifndef TAPEGRAD_KERNELS_CUDA_CONV1D_STREAMS_MMA_CUH
#define TAPEGRAD_KERNELS_CUDA_CONV1D_STREAMS_MMA_CUH

#include "kernels/cuda/conv1d/streams.cuh"

namespace tg_conv1d {

struct mma_stream_shape {
    static constexpr int CHANNELS = 32;              // a warp's channels (64-byte rows)
    static constexpr int PIECES = 4;                 // 16-byte pieces of a row, 8 channels each
    static constexpr int ROW = 64;                   // bytes of a staged row
    static constexpr int TILE = 128;                 // steps per tile: 16 blocks of 8
    static constexpr int HALO = 16;                  // rows before a tile that its windows reach
    static constexpr int SLOT = (HALO + TILE) * ROW; // bytes of one slot of the ring
    static constexpr int RING = 3;                   // slots per warp
    static constexpr int WARP_BYTES = RING * SLOT;
    static constexpr int BARRIERS = RING * (int)sizeof(uint64_t); // per warp: a tile's arrival per slot
    static constexpr int ALIGNMENT = 512; // the tensor copies' 64-byte swizzle follows address bits 4–8
    static constexpr int BLOCK_BYTES =
        kBlock / 32 * (WARP_BYTES + CHANNELS * (int)sizeof(float) + BARRIERS) + ALIGNMENT; // + bias, barriers
};

extern __shared__ uint4 mma_stream_memory[];

// Byte offset of row r, piece `piece` in a slot: the piece swizzled by the row's bits 1–2.
__device__ inline unsigned mma_stream_offset(int r, int piece) { return r * 64 + ((piece ^ ((r >> 1) & 3)) << 4); }

// d += a·b with T's 16-bit operands: m16n8k16 (a: 4 registers, b: 2) and m16n8k8 (a: 2, b: 1).
template <typename T> __device__ inline void mma16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1)
{
    if constexpr (std::is_same<T, __half>::value)
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <typename T> __device__ inline void mma8(float (&d)[4], unsigned a0, unsigned a1, unsigned b0)
{
    if constexpr (std::is_same<T, __half>::value)
        asm("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a0), "r"(a1), "r"(b0));
    else
        asm("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a0), "r"(a1), "r"(b0));
}

// Word m of a 16-byte vector (m a constant once unrolled).
__device__ inline unsigned &word_of(uint4 &v, int m) { return m == 0 ? v.x : m == 1 ? v.y : m == 2 ? v.z : v.w; }

constexpr int kTapPairs = 20, kTapPairStride = 2 * kTapPairs + 1;
// The taps' operands of the products on tensor cores come from a table of tap pairs in shared
// memory: a channel's 40 padded taps P as 32-bit pairs (P[2i], P[2i + 1]) in words 0–19 and
// (P[2i + 1], P[2i + 2]) in words 20–39, 41 words per channel (odd: the lanes' reads meet
// distinct banks). A lane then reads its three pairs (P[m + 8r], P[m + 8r + 1]), r = 0, 1, 2.
__device__ inline void write_tap_pairs(unsigned *table, int channel, const unsigned short (&padded)[2 * kTapPairs])
{
    unsigned *mine = table + channel * kTapPairStride;
#pragma unroll
    for (int i = 0; i < kTapPairs; i++) {
        mine[i] = padded[2 * i] | (unsigned)padded[2 * i + 1] << 16;
        mine[kTapPairs + i] = padded[2 * i + 1] | (unsigned)(2 * i + 2 < 2 * kTapPairs ? padded[2 * i + 2] : 0) << 16;
    }
}
__device__ inline const unsigned *tap_pairs_of(const unsigned *table, int m, int first_channel)
{
    return table + first_channel * kTapPairStride + (m % 2 == 0 ? m / 2 : kTapPairs + (m - 1) / 2);
}
template <int N>
__device__ inline void read_tap_pairs(const unsigned *table, int m, int first_channel, unsigned (&taps)[N][3])
{
    const unsigned *mine = tap_pairs_of(table, m, first_channel);
#pragma unroll
    for (int j = 0; j < N; j++)
#pragma unroll
        for (int r = 0; r < 3; r++) taps[j][r] = mine[j * kTapPairStride + 4 * r];
}

// The 16 steps before step 0 of channel c (its history, or zeros) into rows first_row …
// first_row + 15 of a ring laid out by mma_stream_offset, `lane` being the channel's place in
// the row (one lane per channel).
template <typename T>
__device__ inline void stage_history_rows(const conv_args &a, int64_t b, int64_t c, int lane, char *ring, int first_row)
{
    for (int r = 0; r < 16; r++) {
        const float v = c < a.C ? history_at<T>(a, b, c, r - 16) : 0.0f;
        *(T *)(ring + mma_stream_offset(first_row + r, lane / 8) + lane % 8 * 2) = tg_from_float<T>(v);
    }
}

// The rows lane (g, q) reads for a block's step pair, 8s + 2q and 8s + 2q + 1 (as offsets from
// the block's first row): the odd one first for odd g, so that a quarter-warp's 16-byte reads
// meet eight bank groups, and the byte permutes that pair each channel's two steps (the lower
// step in the lower half) from the words of the first and second row.
struct step_pair_rows {
    bool odd_first;
    unsigned pair_low, pair_high; // channels 2m and 2m + 1 of a word
    int first, second;
};
__device__ inline step_pair_rows step_pair_rows_of(int g, int q)
{
    step_pair_rows rows;
    rows.odd_first = g & 1;
    rows.pair_low = rows.odd_first ? 0x1054 : 0x5410;
    rows.pair_high = rows.odd_first ? 0x3276 : 0x7632;
    rows.first = 8 * g + 2 * q + (rows.odd_first ? 1 : 0);
    rows.second = rows.first + (rows.odd_first ? -1 : 1);
    return rows;
}

struct mma_backward_shape {
    static constexpr int CHANNELS = 32;            // a block's channels: 64-byte rows
    static constexpr int ROW = 64;                 // bytes of a staged row
    static constexpr int TILE = 128;               // steps per tile: 16 blocks of 8
    static constexpr int LAG = 16;                 // steps by which a tile's dx trails its g
    static constexpr int SLOTS = 4;                // tiles a ring holds
    static constexpr int RING_ROWS = SLOTS * TILE; // a power of two: ring rows wrap by a mask
    static constexpr int RING = RING_ROWS * ROW;   // bytes of one ring (x or dout)
    static constexpr int TABLES = 2 * CHANNELS * kTapPairStride * (int)sizeof(unsigned); // two tables of tap pairs
    static constexpr int SUMS = CHANNELS * 32 * 5 * (int)sizeof(float); // each lane's dw and dbias sums
    static constexpr int BARRIERS = SLOTS * (int)sizeof(uint64_t);      // a tile's arrival per slot (tensor copies)
    static constexpr int ALIGNMENT = 512; // the tensor copies' 64-byte swizzle follows address bits 4–8
    static constexpr int BLOCK_BYTES = 2 * RING + TABLES + SUMS + CHANNELS * (int)sizeof(float) + BARRIERS + ALIGNMENT;
};

struct mma_backward_plan {
    int64_t channel_blocks; // blocks across C, 32 channels each
    int64_t time_blocks;    // segments along L
    int64_t seg_len;        // steps per segment, a multiple of the tile
    bool whole_pieces;      // dx takes 16-byte stores
    bool dx_by_tensor;      // dx's whole tiles leave by the copy engine (its tensor map could be made)
};

// The kernels of streams_mma_forward.cu and streams_mma_backward.cu, as the launcher takes
// them. Each file keeps its kernels in an unnamed namespace (nvcc makes the launch stub of a
// kernel template internal to its file anyway), so X<…> here is a pointer to the kernel X<…>
// there, got from X_instance<…>(), which that file instantiates for each X<…> the launcher
// uses.
template <typename T, bool SILU>
auto stream_fwd_mma_instance() -> void (*)(conv_args, stream_plan, CUtensorMap, CUtensorMap, bool);
template <typename T, bool SILU> inline const auto stream_fwd_mma = stream_fwd_mma_instance<T, SILU>();

template <bool SILU>
auto stream_bwd_mma_instance()
    -> void (*)(conv_args, mma_backward_plan, float *, CUtensorMap, CUtensorMap, CUtensorMap);
template <bool SILU> inline const auto stream_bwd_mma = stream_bwd_mma_instance<SILU>();

} // namespace tg_conv1d

#endif
