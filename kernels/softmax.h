/* kernels/softmax.h: softmax and log-softmax over the last dimension, behind ops/softmax.c
 * (the CPU log-sum-exp is shared with the cross-entropy kernels). */
#ifndef TAPEGRAD_KERNELS_SOFTMAX_H
#define TAPEGRAD_KERNELS_SOFTMAX_H

#include "core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y = softmax(x) or, with log, y = log_softmax(x), row by row; y is contiguous. */
typedef tg_status (*tg_softmax_fwd_kernel)(const tg_tensor *x, bool log, tg_tensor *y);
/* From the forward output y and dy (any layouts) writes dx (contiguous):
 *   softmax: dx = y·(dy − Σ dy·y);   log_softmax: dx = dy − exp(y)·Σ dy. */
typedef tg_status (*tg_softmax_bwd_kernel)(const tg_tensor *y, const tg_tensor *dy, bool log, tg_tensor *dx);

tg_status tg_cpu_softmax_fwd(const tg_tensor *x, bool log, tg_tensor *y);
tg_status tg_cpu_softmax_bwd(const tg_tensor *y, const tg_tensor *dy, bool log, tg_tensor *dx);

/* log Σ_j exp(v_j) over the n values base[start + j·stride] (as `dtype`), with the
 * maximum subtracted first so no exp overflows; −inf when n is 0. */
double tg_cpu_row_logsumexp(const void *base, tg_dtype dtype, int64_t start, int64_t stride, int64_t n);

/* The same on CUDA tensors (kernels/cuda/softmax.cu). */
tg_status tg_cuda_softmax_fwd(const tg_tensor *x, bool log, tg_tensor *y);
tg_status tg_cuda_softmax_bwd(const tg_tensor *y, const tg_tensor *dy, bool log, tg_tensor *dx);

#ifdef __cplusplus
}
#endif

#endif
