/* kernels/optim.h: the kernels behind optim/: the fused AdamW and SGD updates over a
 * store's flat buffers, the gradients' sum of squares, scaling and dtype conversion, and
 * the step's scalars (learning rates, clipping, bias corrections) worked out from the
 * optimizer's counters.
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

#include <math.h>

#ifdef __CUDACC__
#define TG_HOST_DEVICE __host__ __device__
#else
#define TG_HOST_DEVICE
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define TG_OPTIM_CHUNK 4096

typedef struct {
    int64_t begin;  /* first element */
    int32_t length; /* 1 .. TG_OPTIM_CHUNK */
    int32_t group;
} tg_optim_range;

/* The optimizer's scalars. The configuration comes first (the host writes it when it
 * changes), then the counters and the values of the step being taken, which the step
 * works out itself (tg_optim_prepare). On CUDA the struct lives on the device and the step
 * prepares it there, from the gradients' sum of squares, so a step never waits for the
 * device and a replayed CUDA graph of it sees each step's own learning rate. */
typedef struct {
    /* configuration */
    double base_lr, beta1, beta2, max_grad_norm;
    tg_schedule schedule;
    double lr_scale[TG_OPTIM_MAX_GROUPS];
    double weight_decay[TG_OPTIM_MAX_GROUPS];
    /* counters */
    int64_t step;     /* updates made: the next one is t = step + 1 */
    int64_t skipped;  /* steps that changed nothing (a norm that was not finite, a bad input) */
    double last_norm; /* the norm the last step measured, NaN without clipping */
    /* the step being taken */
    double grad_scale; /* 1/micro-batches · the clip factor */
    double lr[TG_OPTIM_MAX_GROUPS];
    double bias_correction1, bias_correction2; /* AdamW: 1 − β^t */
    int32_t skip;                              /* nonzero: the update changes nothing */
} tg_optim_scalars;

/* The schedule's factor at `step` (tg_schedule_factor, for a schedule already checked). */
static inline TG_HOST_DEVICE double tg_schedule_factor_at(const tg_schedule *s, int64_t step)
{
    if (step < s->warmup_steps) return (double)(step + 1) / (double)s->warmup_steps;
    if (s->kind == TG_SCHEDULE_CONSTANT) return 1.0;
    if (step >= s->total_steps) return s->min_factor;
    double progress = (double)(step - s->warmup_steps) / (double)(s->total_steps - s->warmup_steps);
    return s->min_factor + (1.0 - s->min_factor) * 0.5 * (1.0 + cos(3.14159265358979323846 * progress));
}

/* Works out the step's values from the counters: the norm √sum_squares / micro_batches
 * (when clip), the gradient scale, each group's learning rate at this step, the bias
 * corrections for t = step + 1; then counts the step as made, or as skipped when the norm
 * is not finite or bad_input is set. The same code on the host and on the device. */
static inline TG_HOST_DEVICE void tg_optim_prepare(tg_optim_scalars *s, double sum_squares, int micro_batches,
                                                   bool clip, bool bad_input, int n_groups)
{
    const double inverse = 1.0 / micro_batches;
    s->grad_scale = inverse;
    s->last_norm = NAN;
    if (clip) {
        const double norm = sqrt(sum_squares) * inverse;
        s->last_norm = norm;
        if (norm > s->max_grad_norm) s->grad_scale = inverse * (s->max_grad_norm / norm);
    }
    s->skip = bad_input || (clip && !isfinite(s->last_norm));
    const double t = (double)(s->step + 1), factor = tg_schedule_factor_at(&s->schedule, s->step);
    s->bias_correction1 = 1.0 - pow(s->beta1, t);
    s->bias_correction2 = 1.0 - pow(s->beta2, t);
    for (int g = 0; g < n_groups; g++) s->lr[g] = s->base_lr * factor * s->lr_scale[g];
    if (s->skip)
        s->skipped++;
    else
        s->step++;
}

/* The buffers of one update, and its scalars (on the buffers' device). param and grad
 * have the store's dtype; state buffers (moments, momentum) have state_dtype (f64 for an
 * f64 store, else f32); master is f32 or NULL. When master is set, the update reads and
 * writes it and rounds the result into param. Every gradient is multiplied by the step's
 * grad_scale first; when the step's skip is set, nothing changes. */
typedef struct {
    void *param;
    const void *grad;
    float *master;
    void *state0; /* AdamW: exp_avg;    SGD: momentum buffer (NULL without momentum) */
    void *state1; /* AdamW: exp_avg_sq; SGD: unused */
    tg_dtype param_dtype, state_dtype;
    const tg_optim_range *ranges; /* on the buffers' device */
    int64_t n_ranges;
    const tg_optim_scalars *scalars;
    double eps;      /* AdamW */
    double momentum; /* SGD */
    bool nesterov;   /* SGD */
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
/* tg_optim_prepare on the device scalars, after summing the squares of n gradients (when
 * clip) into `partials` (TG_OPTIM_NORM_BLOCKS doubles of device scratch) in the fixed order
 * of tg_cuda_sum_squares; a bad input recorded on the device skips the step. Queued, not
 * waited for. */
#define TG_OPTIM_NORM_BLOCKS 1024
tg_status tg_cuda_optim_prepare(tg_optim_scalars *scalars, const void *grad, tg_dtype dtype, int64_t n,
                                int micro_batches, bool clip, int n_groups, double *partials);

#ifdef __cplusplus
}
#endif

#endif
