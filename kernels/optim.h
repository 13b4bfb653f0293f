/* kernels/optim.h: the kernels behind optim/: the fused AdamW and SGD updates over a
 * store's flat buffers, the gradients' sum of squares, scaling and dtype conversion.
 *
 * Groups reach the update through a table of ranges: each range is a run of at most
 * TG_OPTIM_CHUNK consecutive elements of one group (optim/optim.c cuts the parameters'
 * runs of equal groups into such pieces). A CUDA block takes one range at a time and
 * reads its group once, so the per-element group lookup costs nothing, and the whole
 * update is one launch. The table lives on the store's device. */
#ifndef TAPEGRAD_KERNELS_OPTIM_H
#define TAPEGRAD_KERNELS_OPTIM_H

#include "core/internal.h"
#include "tapegrad/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TG_OPTIM_CHUNK 4096

typedef struct {
    int64_t begin;  /* first element */
    int32_t length; /* 1 .. TG_OPTIM_CHUNK */
    int32_t group;
} tg_optim_range;

/* What one step needs per group: the step's learning rate (base · schedule · lr_scale)
 * and the group's weight decay. */
typedef struct {
    double lr[TG_OPTIM_MAX_GROUPS];
    double weight_decay[TG_OPTIM_MAX_GROUPS];
} tg_optim_group_values;

/* The buffers and scalars of one update. param and grad have the store's dtype; state
 * buffers (moments, momentum) have state_dtype (f64 for an f64 store, else f32); master is
 * f32 or NULL. When master is set, the update reads and writes it and rounds the result
 * into param. Every gradient is multiplied by grad_scale (1/micro-batches · clip) first. */
typedef struct {
    void *param;
    const void *grad;
    float *master;
    void *state0; /* AdamW: exp_avg;    SGD: momentum buffer (NULL without momentum) */
    void *state1; /* AdamW: exp_avg_sq; SGD: unused */
    tg_dtype param_dtype, state_dtype;
    const tg_optim_range *ranges; /* on the buffers' device */
    int64_t n_ranges;
    tg_optim_group_values groups;
    double grad_scale;
    double beta1, beta2, eps;                   /* AdamW */
    double bias_correction1, bias_correction2;  /* AdamW: 1 − β^t */
    double momentum;                            /* SGD */
    bool nesterov;                              /* SGD */
} tg_optim_update;

typedef tg_status (*tg_optim_update_kernel)(const tg_optim_update *u);
/* *out = Σ x[i]² over n contiguous elements, in a fixed order. */
typedef tg_status (*tg_sum_squares_kernel)(const void *x, tg_dtype dtype, int64_t n, double *out);
/* x[i] ← scale · x[i]. */
typedef tg_status (*tg_scale_kernel)(void *x, tg_dtype dtype, int64_t n, double scale);
/* dst[i] ← src[i], converted (n contiguous elements, both on one device). */
typedef tg_status (*tg_convert_kernel)(void *dst, tg_dtype dst_dtype, const void *src, tg_dtype src_dtype, int64_t n);

tg_status tg_cpu_adamw(const tg_optim_update *u);
tg_status tg_cpu_sgd(const tg_optim_update *u);
tg_status tg_cpu_sum_squares(const void *x, tg_dtype dtype, int64_t n, double *out);
tg_status tg_cpu_scale(void *x, tg_dtype dtype, int64_t n, double scale);
tg_status tg_cpu_convert(void *dst, tg_dtype dst_dtype, const void *src, tg_dtype src_dtype, int64_t n);

/* The same on CUDA (kernels/cuda/optim.cu): float maths for f32, bf16 and f16 stores,
 * double for f64; the sum of squares in double per thread, per block and over blocks, in
 * an order fixed by n alone. */
tg_status tg_cuda_adamw(const tg_optim_update *u);
tg_status tg_cuda_sgd(const tg_optim_update *u);
tg_status tg_cuda_sum_squares(const void *x, tg_dtype dtype, int64_t n, double *out);
tg_status tg_cuda_scale(void *x, tg_dtype dtype, int64_t n, double scale);
tg_status tg_cuda_convert(void *dst, tg_dtype dst_dtype, const void *src, tg_dtype src_dtype, int64_t n);

#ifdef __cplusplus
}
#endif

#endif
