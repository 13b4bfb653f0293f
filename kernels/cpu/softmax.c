/* kernels/cpu/softmax.c: softmax and log-softmax rows on strided CPU tensors, in double. */
#include "kernels/softmax.h"

#include <math.h>

double tg_cpu_row_logsumexp(const void *base, tg_dtype dtype, int64_t start, int64_t stride, int64_t n)
{
    double max = -INFINITY;
    for (int64_t j = 0; j < n; j++) {
        double v = tg_load(base, dtype, start + j * stride);
        if (isnan(v)) return v;
        if (v > max) max = v;
    }
    /* All −inf (or n = 0), or a +inf: the sum below would compute inf − inf. */
    if (isinf(max)) return max;
    double sum = 0;
    for (int64_t j = 0; j < n; j++) sum += exp(tg_load(base, dtype, start + j * stride) - max);
    return max + log(sum);
}

tg_status tg_cpu_softmax_fwd(const tg_tensor *x, bool log, tg_tensor *y)
{
    tg_iter it;
    tg_iter_init(&it, x->ndim, x->shape, 2, (const int64_t *[]){x->strides, y->strides});
    if (it.empty) return TG_OK;
    const char *xb = tg_bytes(x);
    char *yb = tg_bytes(y);
    do {
        double lse = tg_cpu_row_logsumexp(xb, x->dtype, it.offset[0], it.row_stride[0], it.row_length);
        for (int64_t j = 0; j < it.row_length; j++) {
            double log_p = tg_load(xb, x->dtype, it.offset[0] + j * it.row_stride[0]) - lse;
            tg_store(yb, y->dtype, it.offset[1] + j * it.row_stride[1], log ? log_p : exp(log_p));
        }
    } while (tg_iter_next_row(&it));
    return TG_OK;
}

/* The row sum the backward needs: Σ dy·y for softmax, Σ dy for log-softmax. */
static double backward_row_sum(const tg_tensor *y, const tg_tensor *dy, bool log, const tg_iter *it)
{
    const char *yb = tg_bytes(y), *dyb = tg_bytes(dy);
    double sum = 0;
    for (int64_t j = 0; j < it->row_length; j++) {
        double g = tg_load(dyb, dy->dtype, it->offset[1] + j * it->row_stride[1]);
        sum += log ? g : g * tg_load(yb, y->dtype, it->offset[0] + j * it->row_stride[0]);
    }
    return sum;
}

tg_status tg_cpu_softmax_bwd(const tg_tensor *y, const tg_tensor *dy, bool log, tg_tensor *dx)
{
    tg_iter it;
    tg_iter_init(&it, y->ndim, y->shape, 3, (const int64_t *[]){y->strides, dy->strides, dx->strides});
    if (it.empty) return TG_OK;
    const char *yb = tg_bytes(y), *dyb = tg_bytes(dy);
    char *dxb = tg_bytes(dx);
    do {
        double sum = backward_row_sum(y, dy, log, &it);
        for (int64_t j = 0; j < it.row_length; j++) {
            double yv = tg_load(yb, y->dtype, it.offset[0] + j * it.row_stride[0]);
            double g = tg_load(dyb, dy->dtype, it.offset[1] + j * it.row_stride[1]);
            double grad = log ? g - exp(yv) * sum : yv * (g - sum);
            tg_store(dxb, dx->dtype, it.offset[2] + j * it.row_stride[2], grad);
        }
    } while (tg_iter_next_row(&it));
    return TG_OK;
}
