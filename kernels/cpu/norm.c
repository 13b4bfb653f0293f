/* kernels/cpu/norm.c: fused RMS normalisation on strided CPU tensors, in double.
 * Each kernel walks x row by row (a row is the last dimension); the weight is an extra
 * operand whose stride is 0 along every leading dimension, so any layout works. */
#include "kernels/norm.h"

#include <math.h>
#include <stdlib.h>

/* The weight's strides in x's index space: it only moves along the last dimension. */
static void weight_strides(const tg_tensor *x, const tg_tensor *weight, int64_t *strides)
{
    for (int i = 0; i < x->ndim - 1; i++) strides[i] = 0;
    strides[x->ndim - 1] = weight->strides[0];
}

/* r = 1 / sqrt(mean(x²) + eps) over one row of n elements. */
static double inverse_rms(const char *xb, tg_dtype dtype, int64_t start, int64_t stride, int64_t n, double eps)
{
    double sum_sq = 0;
    for (int64_t j = 0; j < n; j++) {
        double v = tg_load(xb, dtype, start + j * stride);
        sum_sq += v * v;
    }
    return 1.0 / sqrt(sum_sq / (double)n + eps);
}

tg_status tg_cpu_rmsnorm_fwd(const tg_tensor *x, const tg_tensor *weight, double eps, tg_tensor *y)
{
    int64_t ws[TG_MAX_DIMS];
    weight_strides(x, weight, ws);
    tg_iter it;
    tg_iter_init(&it, x->ndim, x->shape, 3, (const int64_t *[]){x->strides, ws, y->strides});
    if (it.empty) return TG_OK;
    const char *xb = tg_bytes(x), *wb = tg_bytes(weight);
    char *yb = tg_bytes(y);
    do {
        double r = inverse_rms(xb, x->dtype, it.offset[0], it.row_stride[0], it.row_length, eps);
        for (int64_t j = 0; j < it.row_length; j++) {
            double xv = tg_load(xb, x->dtype, it.offset[0] + j * it.row_stride[0]);
            double wv = tg_load(wb, weight->dtype, it.offset[1] + j * it.row_stride[1]);
            tg_store(yb, y->dtype, it.offset[2] + j * it.row_stride[2], xv * r * wv);
        }
    } while (tg_iter_next_row(&it));
    return TG_OK;
}

/* Element j of the current row of operand k of the walk. */
static inline double row_load(const tg_tensor *t, const tg_iter *it, int k, int64_t j)
{
    return tg_load(tg_bytes(t), t->dtype, it->offset[k] + j * it->row_stride[k]);
}

/* One row of the backward (operands: 0 x, 1 weight, 2 dy, 3 dx):
 * dx = r·(g − x·r²·mean(g·x)) with g = dy·w, and dw_acc += dy·x·r. */
static void rmsnorm_bwd_row(const tg_tensor *x, const tg_tensor *weight, const tg_tensor *dy, tg_tensor *dx,
                            const tg_iter *it, double r, double *dw_acc)
{
    int64_t n = it->row_length;
    if (dx) {
        double sum_gx = 0;
        for (int64_t j = 0; j < n; j++)
            sum_gx += row_load(dy, it, 2, j) * row_load(weight, it, 1, j) * row_load(x, it, 0, j);
        double c = r * r * sum_gx / (double)n;
        char *dxb = tg_bytes(dx);
        for (int64_t j = 0; j < n; j++) {
            double g = row_load(dy, it, 2, j) * row_load(weight, it, 1, j);
            tg_store(dxb, dx->dtype, it->offset[3] + j * it->row_stride[3], r * (g - row_load(x, it, 0, j) * c));
        }
    }
    if (dw_acc)
        for (int64_t j = 0; j < n; j++) dw_acc[j] += row_load(dy, it, 2, j) * row_load(x, it, 0, j) * r;
}

tg_status tg_cpu_rmsnorm_bwd(const tg_tensor *x, const tg_tensor *weight, double eps, const tg_tensor *dy,
                             tg_tensor *dx, tg_tensor *dw)
{
    int64_t ws[TG_MAX_DIMS];
    weight_strides(x, weight, ws);
    /* dx may be absent: its slot then walks x's strides and is never written. */
    const int64_t *dxs = dx ? dx->strides : x->strides;
    tg_iter it;
    tg_iter_init(&it, x->ndim, x->shape, 4, (const int64_t *[]){x->strides, ws, dy->strides, dxs});
    int64_t d = x->shape[x->ndim - 1];
    /* dw is summed in double, row after row, then stored once: deterministic and not
     * rounded to a narrow dtype at every row. */
    double *dw_acc = NULL;
    if (dw) {
        dw_acc = calloc((size_t)(d > 0 ? d : 1), sizeof(double));
        if (!dw_acc) return tg_set_error(TG_ERR_NOMEM, "tg_rmsnorm backward: out of memory for %lld doubles", (long long)d);
    }
    if (!it.empty) {
        const char *xb = tg_bytes(x);
        do {
            double r = inverse_rms(xb, x->dtype, it.offset[0], it.row_stride[0], it.row_length, eps);
            rmsnorm_bwd_row(x, weight, dy, dx, &it, r, dw_acc);
        } while (tg_iter_next_row(&it));
    }
    if (dw) {
        char *dwb = tg_bytes(dw);
        for (int64_t j = 0; j < d; j++) tg_store(dwb, dw->dtype, j * dw->strides[0], dw_acc[j]);
        free(dw_acc);
    }
    return TG_OK;
}
