// kernels/cuda/conv1d/tiles.cuh: the tile kernels' plan, for tiles.cu and the launcher.
#ifndef TAPEGRAD_KERNELS_CUDA_CONV1D_TILES_CUH
#define TAPEGRAD_KERNELS_CUDA_CONV1D_TILES_CUH

#include "kernels/cuda/conv1d/common.cuh"

namespace tg_conv1d {

struct tile_plan {
    int64_t time_blocks;    // blocks along L
    int64_t channel_blocks; // blocks along C
    int passes;             // tiles each block walks along L, one after the other
    bool vec_x, vec_y;      // x (dout) has stride 1 along C and 16-byte aligned channel vectors
    bool pair_y;            // out (dx) takes two neighbouring channels in one store
};

// The kernels of tiles.cu, as the launcher takes them. Each file keeps its kernels in an
// unnamed namespace (nvcc makes the launch stub of a kernel template internal to its file
// anyway), so X<…> here is a pointer to the kernel X<…> there, got from X_instance<…>(), which
// that file instantiates for each X<…> the launcher uses.
template <typename T, int KB> auto tile_fwd_instance() -> void (*)(conv_args, tile_plan);
template <typename T, int KB> inline const auto tile_fwd = tile_fwd_instance<T, KB>();

template <typename T, int KB, bool SILU> auto tile_bwd_instance() -> void (*)(conv_args, tile_plan, float *);
template <typename T, int KB, bool SILU> inline const auto tile_bwd = tile_bwd_instance<T, KB, SILU>();

} // namespace tg_conv1d

#endif
