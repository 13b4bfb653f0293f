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
 * in *bad_index and its value in *bad_value (*bad_index is −1 when all are fine). During
 * a CUDA graph capture the CUDA kernel cannot wait for the answer: it records a bad target
 * on the device (kernels/cuda_api.h) and answers *n_valid = −1, *bad_index = −1. */
typedef tg_status (*tg_cross_entropy_check_kernel)(const tg_tensor *targets, int32_t ignore_index, int64_t classes,
                                                   int64_t *n_valid, int64_t *bad_index, int32_t *bad_value);
/* count[0] (f64) = n, the rows whose target is not ignore_index, counted by the kernel;
 * loss[0] = Σ over those rows of (logsumexp(row) − row[target]) / n (0 when n is 0).
 * Targets must have passed the check (on CUDA, a target outside [0, classes) that a
 * capture recorded gives that row a NaN loss rather than a stray read). */
typedef tg_status (*tg_cross_entropy_fwd_kernel)(const tg_tensor *logits, const tg_tensor *targets,
                                                 int32_t ignore_index, tg_tensor *loss, tg_tensor *count);
/* dlogits (contiguous) = dloss[0] · (softmax(row) − one_hot(target)) / count[0], and 0 on
 * rows whose target is ignore_index; count is the forward's. */
typedef tg_status (*tg_cross_entropy_bwd_kernel)(const tg_tensor *logits, const tg_tensor *targets,
                                                 int32_t ignore_index, const tg_tensor *count, const tg_tensor *dloss,
                                                 tg_tensor *dlogits);

/* counts[0] += the rows whose arg-max is their target, counts[1] += the rows whose target
 * is not ignore_index (counts: a (2) f64 tensor holding zeros on entry). */
typedef tg_status (*tg_count_correct_kernel)(const tg_tensor *logits, const tg_tensor *targets, int32_t ignore_index,
                                             tg_tensor *counts);

/* The float32 path of the CPU kernels (kernels/cpu/loss_float.c), which they take when it
 * applies: dense f32, bf16 or f16 logits and dense targets. The backward is given
 * dloss / count as scale and a dense dlogits. */
bool tg_cpu_cross_entropy_float_applies(const tg_tensor *logits, const tg_tensor *targets);
tg_status tg_cpu_cross_entropy_fwd_float(const tg_tensor *logits, const tg_tensor *targets, int32_t ignore_index,
                                         tg_tensor *loss, tg_tensor *count);
tg_status tg_cpu_cross_entropy_bwd_float(const tg_tensor *logits, const tg_tensor *targets, int32_t ignore_index,
                                         double scale, tg_tensor *dlogits);

tg_status tg_cpu_count_correct(const tg_tensor *logits, const tg_tensor *targets, int32_t ignore_index,
                               tg_tensor *counts);
tg_status tg_cuda_count_correct(const tg_tensor *logits, const tg_tensor *targets, int32_t ignore_index,
                                tg_tensor *counts);

tg_status tg_cpu_cross_entropy_check(const tg_tensor *targets, int32_t ignore_index, int64_t classes, int64_t *n_valid,
                                     int64_t *bad_index, int32_t *bad_value);
tg_status tg_cpu_cross_entropy_fwd(const tg_tensor *logits, const tg_tensor *targets, int32_t ignore_index,
                                   tg_tensor *loss, tg_tensor *count);
tg_status tg_cpu_cross_entropy_bwd(const tg_tensor *logits, const tg_tensor *targets, int32_t ignore_index,
                                   const tg_tensor *count, const tg_tensor *dloss, tg_tensor *dlogits);

/* The same on CUDA tensors (kernels/cuda/loss.cu). Outside a capture the check copies its
 * two results to the host, so it waits for the queued work; the forward and backward
 * never wait (the count stays on the device). */
tg_status tg_cuda_cross_entropy_check(const tg_tensor *targets, int32_t ignore_index, int64_t classes, int64_t *n_valid,
                                      int64_t *bad_index, int32_t *bad_value);
tg_status tg_cuda_cross_entropy_fwd(const tg_tensor *logits, const tg_tensor *targets, int32_t ignore_index,
                                    tg_tensor *loss, tg_tensor *count);
tg_status tg_cuda_cross_entropy_bwd(const tg_tensor *logits, const tg_tensor *targets, int32_t ignore_index,
                                    const tg_tensor *count, const tg_tensor *dloss, tg_tensor *dlogits);

#ifdef __cplusplus
}
#endif

#endif
