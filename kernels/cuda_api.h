/* kernels/cuda_api.h: the CUDA backend's entry points for core/ (implemented in
 * kernels/cuda/runtime.cu). Core reaches them only through core/device.c, which also
 * answers for builds without CUDA. Each returns TG_OK or an error whose message names
 * the CUDA call and CUDA's own error string. */
#ifndef TAPEGRAD_KERNELS_CUDA_API_H
#define TAPEGRAD_KERNELS_CUDA_API_H

#include "core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

int tg_cuda_device_count(void);
tg_status tg_cuda_malloc(void **ptr, size_t bytes);
tg_status tg_cuda_free(void *ptr);
tg_status tg_cuda_memcpy(void *dst, const void *src, size_t bytes, tg_copy_direction direction);
tg_status tg_cuda_memset_zero(void *ptr, size_t bytes);
tg_status tg_cuda_synchronize(void);
/* dst ← src elementwise: any strides, any dtypes, both on the device. */
tg_status tg_cuda_copy(tg_tensor *dst, const tg_tensor *src);
tg_status tg_cuda_fill(tg_tensor *t, double value);
/* dst += src (same shape, any layouts). */
tg_status tg_cuda_add_into(tg_tensor *dst, const tg_tensor *src);
/* out[i] = Σ of the elements of g that map to i, where out_strides are out's strides in g's
 * index space (0 along the summed dimensions). One thread per output, fixed order. */
tg_status tg_cuda_sum_to(tg_tensor *out, const int64_t *out_strides, const tg_tensor *g);
/* y[i] += alpha · x[i] over n contiguous elements of one float dtype. */
tg_status tg_cuda_axpy(void *y, const void *x, tg_dtype dtype, int64_t n, double alpha);
/* Fills t with normal(a, b) or uniform[a, b) values from cuRAND seeded with `seed`. */
tg_status tg_cuda_fill_random(tg_tensor *t, uint64_t seed, bool normal, double a, double b);

#ifdef __cplusplus
}
#endif
#endif
