/* kernels/conv1d.h: the causal conv1d kernels behind ops/conv1d.c.
 *
 * Notation (docs/causal_conv1d.md): x (B, C, L), weight (C, K), xe = x with K−1 steps of history in
 * front (initial states, or zeros), so xe[j] = history[j] for j < K−1 and
 * xe[j] = x[j − K + 1] after. z[t] = bias + Σ_k w[k]·xe[t+k]; out[t] = act(z[t]). */
#ifndef TAPEGRAD_KERNELS_CONV1D_H
#define TAPEGRAD_KERNELS_CONV1D_H

#include "core/internal.h"
#include "tapegrad/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const tg_tensor *x;              /* (B, C, L), any strides */
    const tg_tensor *weight;         /* (C, K), any strides */
    const tg_tensor *bias;           /* (C) or NULL */
    const tg_tensor *initial_states; /* (B, C, K−1) or NULL for zeros */
    tg_activation activation;
} tg_conv1d_args;

/* out (B, C, L) any layout; final_states (B, C, K−1) or NULL. */
typedef tg_status (*tg_conv1d_fwd_kernel)(const tg_conv1d_args *args, tg_tensor *out, tg_tensor *final_states);

/* Gradients from dout (or NULL: zeros) and dfinal_states (or NULL: zeros). Any output
 * pointer may be NULL when that gradient is not wanted. dweight and dbias are reduced over
 * batch and time in a fixed order, so results are bitwise reproducible. */
typedef tg_status (*tg_conv1d_bwd_kernel)(const tg_conv1d_args *args, const tg_tensor *dout,
                                          const tg_tensor *dfinal_states, tg_tensor *dx, tg_tensor *dweight,
                                          tg_tensor *dbias, tg_tensor *dinitial_states);

tg_status tg_cpu_causal_conv1d_fwd(const tg_conv1d_args *args, tg_tensor *out, tg_tensor *final_states);
tg_status tg_cpu_causal_conv1d_bwd(const tg_conv1d_args *args, const tg_tensor *dout, const tg_tensor *dfinal_states,
                                   tg_tensor *dx, tg_tensor *dweight, tg_tensor *dbias, tg_tensor *dinitial_states);

/* The CUDA kernels (launched from kernels/cuda/conv1d.cu, written in kernels/cuda/conv1d/):
 * f32, bf16 and f16 storage, K ≤ 16. */
tg_status tg_cuda_causal_conv1d_fwd(const tg_conv1d_args *args, tg_tensor *out, tg_tensor *final_states);
tg_status tg_cuda_causal_conv1d_bwd(const tg_conv1d_args *args, const tg_tensor *dout, const tg_tensor *dfinal_states,
                                    tg_tensor *dx, tg_tensor *dweight, tg_tensor *dbias, tg_tensor *dinitial_states);

#ifdef __cplusplus
}
#endif

#endif
