/* kernels/norm.h: the RMS normalisation kernels behind ops/norm.c.
 * x is viewed as rows along its last dimension (D); weight has shape (D). */
#ifndef TAPEGRAD_KERNELS_NORM_H
#define TAPEGRAD_KERNELS_NORM_H

#include "core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y = s · r · weight per row, with r = 1 / sqrt(mean(s²) + eps) and s = x, or, when residual
 * is not NULL (x's shape), s = x + residual rounded to x's dtype and written to sum (the
 * fused residual add); y and sum are contiguous. */
typedef tg_status (*tg_rmsnorm_fwd_kernel)(const tg_tensor *x, const tg_tensor *residual, const tg_tensor *weight,
                                           double eps, tg_tensor *y, tg_tensor *sum);
/* Given dy (any layout), writes dx (contiguous, x's shape) and dw (contiguous, (D)); either
 * may be NULL when that gradient is not wanted. When dsum is not NULL (any layout) it is
 * added to dx before dx is rounded: the gradient that reaches a fused add's sum directly.
 * dw is summed over blocks of 64 rows in row order, then over the blocks in order (the
 * same bits for any thread count). */
typedef tg_status (*tg_rmsnorm_bwd_kernel)(const tg_tensor *x, const tg_tensor *weight, double eps, const tg_tensor *dy,
                                           const tg_tensor *dsum, tg_tensor *dx, tg_tensor *dw);

tg_status tg_cpu_rmsnorm_fwd(const tg_tensor *x, const tg_tensor *residual, const tg_tensor *weight, double eps,
                             tg_tensor *y, tg_tensor *sum);
tg_status tg_cpu_rmsnorm_bwd(const tg_tensor *x, const tg_tensor *weight, double eps, const tg_tensor *dy,
                             const tg_tensor *dsum, tg_tensor *dx, tg_tensor *dw);

/* The same on CUDA tensors (kernels/cuda/norm.cu); dw is summed in another fixed order
 * (per-block partial sums, then the blocks in order), reproducible from run to run. */
tg_status tg_cuda_rmsnorm_fwd(const tg_tensor *x, const tg_tensor *residual, const tg_tensor *weight, double eps,
                              tg_tensor *y, tg_tensor *sum);
tg_status tg_cuda_rmsnorm_bwd(const tg_tensor *x, const tg_tensor *weight, double eps, const tg_tensor *dy,
                              const tg_tensor *dsum, tg_tensor *dx, tg_tensor *dw);

#ifdef __cplusplus
}
#endif

#endif
