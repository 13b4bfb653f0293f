// kernels/cuda/conv1d/streams.cuh: the stream kernels' shapes, plan and a thread's place, for
// streams.cu, the tensor-core stream kernels and the launcher.
#ifndef TAPEGRAD_KERNELS_CUDA_CONV1D_STREAMS_CUH
#define TAPEGRAD_KERNELS_CUDA_CONV1D_STREAMS_CUH

#include "kernels/cuda/conv1d/common.cuh"

namespace tg_conv1d {

// Neighbouring channels per thread: two (one 4- or 8-byte word) while the registers allow.
// The 16-bit forward at K ≤ 4 takes four, so that a warp reads 256-byte rows, which measured
// faster; the backward measured slower with four (docs/benchmarks.md).
template <typename T, int KB> __host__ __device__ constexpr int stream_forward_cpt()
{
    return sizeof(T) == 2 && KB <= 4 ? 4 : KB <= 8 ? 2 : 1;
}
template <typename T, int KB> __host__ __device__ constexpr int stream_backward_cpt() { return KB <= 8 ? 2 : 1; }

template <typename T, int CPT_> struct stream_shape {
    static constexpr int CPT = CPT_;
    static constexpr int WORD = CPT * (int)sizeof(T); // bytes of one step a thread reads
    static_assert(WORD == 2 || WORD == 4 || WORD == 8, "a channel word (channel_word) is 2, 4 or 8 bytes");
    static constexpr int ROW = 32 * WORD;     // bytes of one step a warp reads (64–256)
    static constexpr int U = 1024 / ROW;      // steps per chunk: 1 KB of each tensor
    static constexpr int SLOT = U * ROW;      // bytes of one chunk
    static constexpr int CHANNELS = 32 * CPT; // channels per block: one warp's width
    static constexpr int LANES = kBlock / 32; // warps per block, each its own segment
};

// Chunks in a stream kernel's ring: four, three in flight while one is computed. The backward
// past K = 8 takes six: a thread there takes one channel, so a chunk is 16 steps of 64-byte
// rows, and each warp's copies in flight are fewer bytes; six chunks (five in flight; 48 KB
// per block, 4 blocks per SM) measured faster than four. Elsewhere deeper rings measured
// level, forward and backward (docs/benchmarks.md).
template <int KB, bool BACKWARD> __host__ __device__ constexpr int stream_ring() { return BACKWARD && KB > 8 ? 6 : 4; }
// A stream backward block's shared memory: per warp, a ring of 1 KB chunks for x and for dout.
template <int KB> __host__ __device__ constexpr int stream_backward_ring_bytes()
{
    return kBlock / 32 * 2 * stream_ring<KB, true>() * 1024;
}

// Resident blocks per SM the stream kernels are compiled for (at most 65536 / (128·blocks)
// registers per thread): 6 and 4 measured faster than 8 and 5 at K ≤ 4, where those fit
// without spills (docs/benchmarks.md).
constexpr int kStreamForwardBlocks = 6, kStreamBackwardBlocks = 4;
// A stream block's warps side by side across C (each with its own channels, at the same
// steps), the rest one after another along L. The forward takes up to two across: its block
// then asks for 2·ROW neighbouring bytes per step, which measured faster at 16-bit K = 8,
// level at K ≤ 4 and in f32. Where C's warp-wide channel groups do not pair up (one group,
// or an odd count) it takes one, as the second warp would have no channels (two across
// measured slower there; docs/benchmarks.md). The backward takes one: across C it
// measured slower at K = 4, in f32 and on short rows, and its block sums need a block's warps
// on the same channels.
template <bool BACKWARD> __host__ __device__ constexpr int stream_most_warps_across() { return BACKWARD ? 1 : 2; }

struct stream_plan {
    int64_t channel_blocks; // blocks across C
    int64_t time_blocks;    // blocks along L, each LANES / across segments
    int64_t seg_len;        // steps per warp, a multiple of U
    bool whole_pieces;      // the output (out, dx) takes 16-byte stores (stream_stores)
    int across;             // warps side by side across C in a block (stream_most_warps_across)
};

// Where a stream thread sits: channels c … c + CPT − 1 of batch b (c0: its warp's first),
// steps t0 … end − 1 (its warp's segment, cut at L), its block's warps `across` side by side
// across C (plan.across; a constant where the kernel knows it, which the compiler folds). A
// warp with t0 ≥ L or c0 ≥ C has nothing to do; a thread past C (`inside_c` false) walks with
// its warp but writes nothing.
struct stream_place {
    int64_t b, c0, c, t0, end, time_block;
    int warp;
    bool inside_c;
};

template <typename T, int CPT>
__device__ inline stream_place stream_place_of(const conv_args &a, const stream_plan &plan, int across)
{
    using S = stream_shape<T, CPT>;
    const int along = S::LANES / across;
    stream_place p;
    p.warp = threadIdx.x / 32;
    p.time_block = blockIdx.x / plan.channel_blocks;
    p.b = blockIdx.y;
    p.c0 = (blockIdx.x % plan.channel_blocks * across + p.warp % across) * S::CHANNELS;
    p.c = p.c0 + threadIdx.x % 32 * S::CPT;
    p.t0 = (p.time_block * along + p.warp / across) * plan.seg_len;
    p.end = p.t0 + plan.seg_len < a.L ? p.t0 + plan.seg_len : a.L;
    p.inside_c = p.c < a.C;
    return p;
}

// The kernels of streams.cu, as the launcher takes them. Each file keeps its kernels in an
// unnamed namespace (nvcc makes the launch stub of a kernel template internal to its file
// anyway), so X<…> here is a pointer to the kernel X<…> there, got from X_instance<…>(), which
// that file instantiates for each X<…> the launcher uses.
template <typename T, int KB> auto stream_fwd_instance() -> void (*)(conv_args, stream_plan);
template <typename T, int KB> inline const auto stream_fwd = stream_fwd_instance<T, KB>();

template <typename T, int KB, bool SILU> auto stream_bwd_instance() -> void (*)(conv_args, stream_plan, float *);
template <typename T, int KB, bool SILU> inline const auto stream_bwd = stream_bwd_instance<T, KB, SILU>();

} // namespace tg_conv1d

#endif
