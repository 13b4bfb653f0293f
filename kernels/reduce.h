/* kernels/reduce.h: summing over one axis (sum_all reshapes to one axis first). */
#ifndef TAPEGRAD_KERNELS_REDUCE_H
#define TAPEGRAD_KERNELS_REDUCE_H

#include "core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The axis value that means "every axis" (out has one element). */
#define TG_AXIS_ALL (-1)

/* out[outer, inner] = scale · Σ_r x[outer, r, inner], where x is viewed as
 * (outer, reduced, inner) around `axis`; out is contiguous with x's shape minus axis. */
typedef tg_status (*tg_sum_axis_kernel)(const tg_tensor *x, int axis, double scale, tg_tensor *out);
/* dx[outer, r, inner] = scale · dy[outer, inner]: the broadcast back. */
typedef tg_status (*tg_sum_axis_bwd_kernel)(const tg_tensor *dy, int axis, double scale, tg_tensor *dx);

tg_status tg_cpu_sum_axis(const tg_tensor *x, int axis, double scale, tg_tensor *out);
tg_status tg_cpu_sum_axis_bwd(const tg_tensor *dy, int axis, double scale, tg_tensor *dx);

/* The same on CUDA (kernels/cuda/reduce.cu). */
tg_status tg_cuda_sum_axis(const tg_tensor *x, int axis, double scale, tg_tensor *out);
tg_status tg_cuda_sum_axis_bwd(const tg_tensor *dy, int axis, double scale, tg_tensor *dx);

#ifdef __cplusplus
}
#endif

#endif
