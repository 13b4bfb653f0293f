/* kernels/cpu/optim.c: the optimizer updates and the gradient-norm helpers on the CPU, in
 * double. Each element is read once, updated, and rounded once into its buffer's dtype;
 * the ranges are walked in order, so results are bitwise reproducible. */
#include "kernels/optim.h"

#include <math.h>

/* The parameter's current value: the f32 master when there is one, else the store. */
static inline double load_param(const tg_optim_update *u, int64_t i)
{
    return u->master ? (double)u->master[i] : tg_load(u->param, u->param_dtype, i);
}

static inline void store_param(const tg_optim_update *u, int64_t i, double p)
{
    if (u->master) {
        u->master[i] = (float)p;
        p = u->master[i]; /* the store gets the rounded master, as on CUDA */
    }
    tg_store(u->param, u->param_dtype, i, p);
}

/* p ← p·(1 − lr·wd); m ← β1·m + (1 − β1)·g; v ← β2·v + (1 − β2)·g²;
 * p ← p − lr · (m / (1 − β1^t)) / (√(v / (1 − β2^t)) + eps) */
tg_status tg_cpu_adamw(const tg_optim_update *u)
{
    const tg_optim_scalars *s = u->scalars;
    if (s->skip) return TG_OK;
    for (int64_t r = 0; r < u->n_ranges; r++) {
        const tg_optim_range range = u->ranges[r];
        const double lr = s->lr[range.group], decay = 1.0 - lr * s->weight_decay[range.group];
        for (int64_t i = range.begin; i < range.begin + range.length; i++) {
            double g = s->grad_scale * tg_load(u->grad, u->param_dtype, i);
            double m = s->beta1 * tg_load(u->state0, u->state_dtype, i) + (1.0 - s->beta1) * g;
            double v = s->beta2 * tg_load(u->state1, u->state_dtype, i) + (1.0 - s->beta2) * g * g;
            tg_store(u->state0, u->state_dtype, i, m);
            tg_store(u->state1, u->state_dtype, i, v);
            double p = load_param(u, i) * decay;
            p -= lr * (m / s->bias_correction1) / (sqrt(v / s->bias_correction2) + u->eps);
            store_param(u, i, p);
        }
    }
    return TG_OK;
}

/* g ← grad + wd·p; buf ← μ·buf + g; p ← p − lr·(nesterov ? g + μ·buf : buf) (buf = g when μ = 0) */
tg_status tg_cpu_sgd(const tg_optim_update *u)
{
    const tg_optim_scalars *s = u->scalars;
    if (s->skip) return TG_OK;
    for (int64_t r = 0; r < u->n_ranges; r++) {
        const tg_optim_range range = u->ranges[r];
        const double lr = s->lr[range.group], wd = s->weight_decay[range.group];
        for (int64_t i = range.begin; i < range.begin + range.length; i++) {
            double p = load_param(u, i);
            double g = s->grad_scale * tg_load(u->grad, u->param_dtype, i) + wd * p, d = g;
            if (u->state0) {
                double buf = u->momentum * tg_load(u->state0, u->state_dtype, i) + g;
                tg_store(u->state0, u->state_dtype, i, buf);
                d = u->nesterov ? g + u->momentum * buf : buf;
            }
            store_param(u, i, p - lr * d);
        }
    }
    return TG_OK;
}

tg_status tg_cpu_sum_squares(const void *x, tg_dtype dtype, int64_t n, double *out)
{
    double sum = 0.0; /* double, in index order: the same gradients give the same norm */
    for (int64_t i = 0; i < n; i++) {
        double v = tg_load(x, dtype, i);
        sum += v * v;
    }
    *out = sum;
    return TG_OK;
}

tg_status tg_cpu_scale(void *x, tg_dtype dtype, int64_t n, double scale)
{
    for (int64_t i = 0; i < n; i++) tg_store(x, dtype, i, scale * tg_load(x, dtype, i));
    return TG_OK;
}

tg_status tg_cpu_convert(void *dst, tg_dtype dst_dtype, const void *src, tg_dtype src_dtype, int64_t n)
{
    for (int64_t i = 0; i < n; i++) tg_store(dst, dst_dtype, i, tg_load(src, src_dtype, i));
    return TG_OK;
}
