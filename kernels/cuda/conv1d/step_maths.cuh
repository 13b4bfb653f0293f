// kernels/cuda/conv1d/step_maths.cuh: the per-step maths of the tile and stream kernels.
#ifndef TAPEGRAD_KERNELS_CUDA_CONV1D_STEP_MATHS_CUH
#define TAPEGRAD_KERNELS_CUDA_CONV1D_STEP_MATHS_CUH

#include "kernels/cuda/conv1d/common.cuh"

namespace tg_conv1d {

// ---- the per-step maths of the kernels that walk time (tile and stream) -------------------------
//
// A thread walks its CPT channels step by step, holding win[KB−1−i] = x[t − i] (and in the
// backward gw[KB−1−i] = g[t − i]); each step shifts the windows by one and puts the new
// step's values last.

template <typename V, int N, int M> __device__ inline void shift_window(V (&v)[N][M])
{
#pragma unroll
    for (int j = 0; j < N - 1; j++)
#pragma unroll
        for (int q = 0; q < M; q++) v[j][q] = v[j + 1][q];
}

// The forward's outputs at step t: act(bias + Σ_i wl[i]·x[t − i]) per channel.
template <int KB, int CPT>
__device__ inline void step_outputs(const float (&wl)[CPT][KB], const float (&bias)[CPT], const float (&win)[KB][CPT],
                                    bool silu, float (&out)[CPT])
{
#pragma unroll
    for (int q = 0; q < CPT; q++) {
        float z = bias[q];
#pragma unroll
        for (int i = 0; i < KB; i++) z += wl[q][i] * win[KB - 1 - i][q];
        out[q] = activate(z, silu);
    }
}

// The backward's g at step t, over tap_scale (taps and bias scaled by it, as in row_bwd),
// into gw[KB − 1]; 0 where dout is.
template <typename T, bool SILU, int KB, int CPT>
__device__ inline void step_gradient(const float (&wl)[CPT][KB], const float (&bias)[CPT], const float (&win)[KB][CPT],
                                     const float (&d_out)[CPT], float (&gw)[KB][CPT])
{
#pragma unroll
    for (int q = 0; q < CPT; q++) {
        float zs = bias[q];
#pragma unroll
        for (int i = 0; i < KB; i++) zs += wl[q][i] * win[KB - 1 - i][q];
        gw[KB - 1][q] = scaled_gradient<T, SILU>(zs, d_out[q]);
    }
}

// dw's lag sums and dbias gain step t's terms: partial[q][i] += g·x[t − i], partial[q][KB] += g.
template <int KB, int CPT>
__device__ inline void add_step_partials(const float (&g)[CPT], const float (&win)[KB][CPT],
                                         float (&partial)[CPT][KB + 1])
{
#pragma unroll
    for (int q = 0; q < CPT; q++) {
        partial[q][KB] += g[q];
#pragma unroll
        for (int i = 0; i < KB; i++) partial[q][i] += g[q] * win[KB - 1 - i][q];
    }
}

// dx of step u = t − (KB − 1), whose KB values of g the window then holds: Σ_i wl[i]·g[u + i].
template <int KB, int CPT>
__device__ inline void oldest_step_dx(const float (&wl)[CPT][KB], const float (&gw)[KB][CPT], float (&d)[CPT])
{
#pragma unroll
    for (int q = 0; q < CPT; q++) {
        d[q] = 0.0f;
#pragma unroll
        for (int i = 0; i < KB; i++) d[q] += wl[q][i] * gw[i][q];
    }
}

} // namespace tg_conv1d

#endif
