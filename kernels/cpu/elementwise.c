/* kernels/cpu/elementwise.c: elementwise maths on strided CPU tensors, in double. The
 * iterator's rows are read into double buffers and written back with one dtype switch per
 * row (kernels/cpu/rows.h), not one per element. */
#include "kernels/elementwise.h"
#include "kernels/cpu/rows.h"
#include "kernels/unary_math.h"

#include <math.h>
#include <stdlib.h>

/* count row buffers of n doubles in one block, or NULL with the error set. */
static double *row_buffers(const char *op, int64_t n, int count)
{
    double *rows = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1) * (size_t)count);
    if (!rows) tg_set_error(TG_ERR_NOMEM, "%s: out of memory for %d rows of %lld doubles", op, count, (long long)n);
    return rows;
}

tg_status tg_cpu_unary_fwd(tg_unary_op op, double param, const tg_tensor *x, tg_tensor *y)
{
    tg_iter it;
    tg_iter_init(&it, x->ndim, x->shape, 2, (const int64_t *[]){x->strides, y->strides});
    if (it.empty) return TG_OK;
    double *v = row_buffers("unary op", it.row_length, 1);
    if (!v) return TG_ERR_NOMEM;
    do {
        tg_load_row(x, it.offset[0], it.row_stride[0], it.row_length, v);
        for (int64_t j = 0; j < it.row_length; j++) v[j] = tg_unary_value(op, param, v[j]);
        tg_store_row(y, it.offset[1], it.row_stride[1], it.row_length, v);
    } while (tg_iter_next_row(&it));
    free(v);
    return TG_OK;
}

tg_status tg_cpu_unary_bwd(tg_unary_op op, double param, const tg_tensor *x, const tg_tensor *y, const tg_tensor *dy,
                           tg_tensor *dx)
{
    tg_iter it;
    tg_iter_init(&it, x->ndim, x->shape, 4, (const int64_t *[]){x->strides, y->strides, dy->strides, dx->strides});
    if (it.empty) return TG_OK;
    const int64_t n = it.row_length;
    double *xv = row_buffers("unary op backward", n, 3), *yv = xv + n, *g = yv + n;
    if (!xv) return TG_ERR_NOMEM;
    do {
        tg_load_row(x, it.offset[0], it.row_stride[0], n, xv);
        tg_load_row(y, it.offset[1], it.row_stride[1], n, yv);
        tg_load_row(dy, it.offset[2], it.row_stride[2], n, g);
        for (int64_t j = 0; j < n; j++) g[j] *= tg_unary_derivative(op, param, xv[j], yv[j]);
        tg_store_row(dx, it.offset[3], it.row_stride[3], n, g);
    } while (tg_iter_next_row(&it));
    free(xv);
    return TG_OK;
}

static double binary(tg_binary_op op, double a, double b)
{
    switch (op) {
    case TG_BINARY_ADD: return a + b;
    case TG_BINARY_SUB: return a - b;
    case TG_BINARY_MUL: return a * b;
    case TG_BINARY_DIV: return a / b;
    case TG_BINARY_COUNT: break;
    }
    return NAN;
}

tg_status tg_cpu_binary_fwd(tg_binary_op op, const tg_tensor *a, const tg_tensor *b, tg_tensor *out)
{
    int64_t sa[TG_MAX_DIMS], sb[TG_MAX_DIMS];
    tg_broadcast_strides(a, out->ndim, out->shape, sa);
    tg_broadcast_strides(b, out->ndim, out->shape, sb);
    tg_iter it;
    tg_iter_init(&it, out->ndim, out->shape, 3, (const int64_t *[]){sa, sb, out->strides});
    if (it.empty) return TG_OK;
    const int64_t n = it.row_length;
    double *av = row_buffers("binary op", n, 2), *bv = av + n;
    if (!av) return TG_ERR_NOMEM;
    do {
        tg_load_row(a, it.offset[0], it.row_stride[0], n, av);
        tg_load_row(b, it.offset[1], it.row_stride[1], n, bv);
        for (int64_t j = 0; j < n; j++) av[j] = binary(op, av[j], bv[j]);
        tg_store_row(out, it.offset[2], it.row_stride[2], n, av);
    } while (tg_iter_next_row(&it));
    free(av);
    return TG_OK;
}
