/* kernels/matmul.h: the (batched) matrix product behind ops/matmul.c. */
#ifndef TAPEGRAD_KERNELS_MATMUL_H
#define TAPEGRAD_KERNELS_MATMUL_H

#include "core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out[..., m, n] = Σ_k op(a)[..., m, k] · op(b)[..., k, n], where op(a) is a's last two
 * axes swapped when transpose_a (likewise b). out has shape (batch..., M, N) and any
 * strides; a and b have out's batch dimensions or none (a matrix shared by every batch)
 * and any strides. The caller has checked the shapes, and that M, N and K fit in an int.
 * K = 0 gives zeros. */
typedef tg_status (*tg_matmul_kernel)(const tg_tensor *a, const tg_tensor *b, bool transpose_a, bool transpose_b,
                                      tg_tensor *out);

tg_status tg_cpu_matmul(const tg_tensor *a, const tg_tensor *b, bool transpose_a, bool transpose_b, tg_tensor *out);

/* The same on CUDA tensors through cuBLAS (kernels/cuda/matmul.cu). */
tg_status tg_cuda_matmul(const tg_tensor *a, const tg_tensor *b, bool transpose_a, bool transpose_b, tg_tensor *out);

#ifdef __cplusplus
}
#endif

#endif
