/* kernels/cpu/reduce.c: sums over one axis, accumulated in double in index order
 * (deterministic). */
#include "kernels/reduce.h"

#include <stdlib.h>
#include <string.h>

/* x's shape and strides with `axis` moved to the end, so each row of the walk is one
 * reduction (TG_AXIS_ALL keeps the order: the whole walk is one reduction). */
static void axis_last(const tg_tensor *t, int axis, int64_t *shape, int64_t *strides)
{
    if (axis == TG_AXIS_ALL) {
        memcpy(shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
        memcpy(strides, t->strides, sizeof(int64_t) * (size_t)t->ndim);
        return;
    }
    int k = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (i == axis) continue;
        shape[k] = t->shape[i];
        strides[k++] = t->strides[i];
    }
    shape[k] = t->shape[axis];
    strides[k] = t->strides[axis];
}

static double sum_all(const tg_tensor *x)
{
    tg_iter it;
    tg_iter_init(&it, x->ndim, x->shape, 1, (const int64_t *[]){x->strides});
    double sum = 0;
    if (it.empty) return sum;
    const char *xb = tg_bytes(x);
    do {
        for (int64_t j = 0; j < it.row_length; j++) sum += tg_load(xb, x->dtype, it.offset[0] + j * it.row_stride[0]);
    } while (tg_iter_next_row(&it));
    return sum;
}

/* The sum over `axis` of a contiguous f32 x into a contiguous out, seen as (outer, axis,
 * inner): each output's double sum runs over the axis in index order, as in the general
 * walk (the same bits), but whole inner rows at a time, which the compiler vectorises.
 * false (nothing done) when the layouts or the memory for the sums do not allow it. */
static bool sum_contiguous_f32(const tg_tensor *x, int axis, double scale, tg_tensor *out)
{
    if (x->dtype != TG_F32 || !tg_is_contiguous(x) || !tg_is_contiguous(out)) return false;
    int64_t outer = 1, inner = 1, n = x->shape[axis];
    for (int i = 0; i < axis; i++) outer *= x->shape[i];
    for (int i = axis + 1; i < x->ndim; i++) inner *= x->shape[i];
    double *sums = malloc(sizeof(double) * (size_t)(inner > 0 ? inner : 1));
    if (!sums) return false;
    const float *xf = (const float *)tg_bytes(x);
    char *ob = tg_bytes(out);
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t i = 0; i < inner; i++) sums[i] = 0.0;
        for (int64_t a = 0; a < n; a++) {
            const float *row = xf + (o * n + a) * inner;
            for (int64_t i = 0; i < inner; i++) sums[i] += row[i];
        }
        for (int64_t i = 0; i < inner; i++) tg_store(ob, out->dtype, o * inner + i, scale * sums[i]);
    }
    free(sums);
    return true;
}

tg_status tg_cpu_sum_axis(const tg_tensor *x, int axis, double scale, tg_tensor *out)
{
    if (axis == TG_AXIS_ALL) {
        tg_store(tg_bytes(out), out->dtype, 0, scale * sum_all(x));
        return TG_OK;
    }
    if (sum_contiguous_f32(x, axis, scale, out)) return TG_OK;
    int64_t shape[TG_MAX_DIMS], xs[TG_MAX_DIMS], os[TG_MAX_DIMS] = {0};
    axis_last(x, axis, shape, xs);
    tg_contiguous_strides(x->ndim - 1, shape, os); /* out's strides over the kept dims; 0 on the axis */
    os[x->ndim - 1] = 0;
    tg_iter it;
    tg_iter_init(&it, x->ndim, shape, 2, (const int64_t *[]){xs, os});
    if (tg_numel(out) == 0) return TG_OK;
    char *ob = tg_bytes(out);
    if (it.empty) { /* a sum over an empty axis is 0 */
        for (int64_t i = 0; i < tg_numel(out); i++) tg_store(ob, out->dtype, i, 0.0);
        return TG_OK;
    }
    const char *xb = tg_bytes(x);
    do {
        double sum = 0;
        for (int64_t j = 0; j < it.row_length; j++) sum += tg_load(xb, x->dtype, it.offset[0] + j * it.row_stride[0]);
        tg_store(ob, out->dtype, it.offset[1], scale * sum);
    } while (tg_iter_next_row(&it));
    return TG_OK;
}

tg_status tg_cpu_sum_axis_bwd(const tg_tensor *dy, int axis, double scale, tg_tensor *dx)
{
    int64_t shape[TG_MAX_DIMS], dxs[TG_MAX_DIMS], dys[TG_MAX_DIMS] = {0};
    axis_last(dx, axis, shape, dxs);
    int k = 0; /* dy's strides over the kept dims (dy may be any layout); 0 on the axis */
    for (int i = 0; axis != TG_AXIS_ALL && i < dy->ndim && k < dx->ndim - 1; i++) dys[k++] = dy->strides[i];
    if (axis != TG_AXIS_ALL) dys[dx->ndim - 1] = 0;
    tg_iter it;
    tg_iter_init(&it, dx->ndim, shape, 2, (const int64_t *[]){dxs, dys});
    if (it.empty) return TG_OK;
    const char *dyb = tg_bytes(dy);
    char *dxb = tg_bytes(dx);
    do {
        double g = scale * tg_load(dyb, dy->dtype, it.offset[1]);
        for (int64_t j = 0; j < it.row_length; j++) tg_store(dxb, dx->dtype, it.offset[0] + j * it.row_stride[0], g);
    } while (tg_iter_next_row(&it));
    return TG_OK;
}
