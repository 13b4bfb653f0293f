/* kernels/loss.h: the fused cross-entropy kernels behind ops/loss.c.
 * logits (..., V) are walked row by row; targets (i32) hold one class per row, with
 * logits' leading shape (shape (1) when logits are 1-D). */
#ifndef TAPEGRAD_KERNELS_LOSS_H
#define TAPEGRAD_KERNELS_LOSS_H

#include "core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reads every target in row-major order: *n_valid counts those not equal to
 * ignore_index; the first one outside [0, classes) stops the scan with its flat index
 * in *bad_index and its value in *bad_value (*bad_index is −1 when all are fine). */
typedef tg_status (*tg_cross_entropy_check_kernel)(const tg_tensor *targets, int32_t ignore_index, int64_t classes,
                                                   int64_t *n_valid, int64_t *bad_index, int32_t *bad_value);
/* loss[0] = Σ over rows whose target is not ignore_index of (logsumexp(row) − row[target]),
 * divided by n_valid (0 when n_valid is 0). Targets must have passed the check. */
typedef tg_status (*tg_cross_entropy_fwd_kernel)(const tg_tensor *logits, const tg_tensor *targets,
                                                 int32_t ignore_index, int64_t n_valid, tg_tensor *loss);
/* dlogits (contiguous) = dloss[0] · (softmax(row) − one_hot(target)) / n_valid, and 0 on
 * rows whose target is ignore_index. */
typedef tg_status (*tg_cross_entropy_bwd_kernel)(const tg_tensor *logits, const tg_tensor *targets,
                                                 int32_t ignore_index, int64_t n_valid, const tg_tensor *dloss,
                                                 tg_tensor *dlogits);

tg_status tg_cpu_cross_entropy_check(const tg_tensor *targets, int32_t ignore_index, int64_t classes,
                                     int64_t *n_valid, int64_t *bad_index, int32_t *bad_value);
tg_status tg_cpu_cross_entropy_fwd(const tg_tensor *logits, const tg_tensor *targets, int32_t ignore_index,
                                   int64_t n_valid, tg_tensor *loss);
tg_status tg_cpu_cross_entropy_bwd(const tg_tensor *logits, const tg_tensor *targets, int32_t ignore_index,
                                   int64_t n_valid, const tg_tensor *dloss, tg_tensor *dlogits);

/* The same on CUDA tensors (kernels/cuda/loss.cu). The check copies its two results to
 * the host, so it waits for the queued work. */
tg_status tg_cuda_cross_entropy_check(const tg_tensor *targets, int32_t ignore_index, int64_t classes,
                                      int64_t *n_valid, int64_t *bad_index, int32_t *bad_value);
tg_status tg_cuda_cross_entropy_fwd(const tg_tensor *logits, const tg_tensor *targets, int32_t ignore_index,
                                    int64_t n_valid, tg_tensor *loss);
tg_status tg_cuda_cross_entropy_bwd(const tg_tensor *logits, const tg_tensor *targets, int32_t ignore_index,
                                    int64_t n_valid, const tg_tensor *dloss, tg_tensor *dlogits);

#ifdef __cplusplus
}
#endif

#endif
