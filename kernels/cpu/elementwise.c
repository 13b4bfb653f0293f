/* kernels/cpu/elementwise.c: elementwise maths on strided CPU tensors, in double. */
#include "kernels/elementwise.h"
#include "kernels/cpu/scalar_math.h"

#include <math.h>

static double unary(tg_unary_op op, double param, double x)
{
    switch (op) {
    case TG_UNARY_SCALE: return param * x;
    case TG_UNARY_NEG: return -x;
    case TG_UNARY_EXP: return exp(x);
    case TG_UNARY_LOG: return log(x);
    case TG_UNARY_TANH: return tanh(x);
    case TG_UNARY_SIGMOID: return tg_sigmoid_of(x);
    case TG_UNARY_SILU: return x * tg_sigmoid_of(x);
    case TG_UNARY_SOFTPLUS: return fmax(x, 0.0) + log1p(exp(-fabs(x))); /* log(1 + eˣ), stable */
    case TG_UNARY_RELU: return x > 0 ? x : 0.0;
    }
    return NAN;
}

/* d f(x) / dx, written with y = f(x) where that is cheaper. */
static double unary_derivative(tg_unary_op op, double param, double x, double y)
{
    switch (op) {
    case TG_UNARY_SCALE: return param;
    case TG_UNARY_NEG: return -1.0;
    case TG_UNARY_EXP: return y;
    case TG_UNARY_LOG: return 1.0 / x;
    case TG_UNARY_TANH: return 1.0 - y * y;
    case TG_UNARY_SIGMOID: return y * (1.0 - y);
    case TG_UNARY_SILU: return tg_silu_derivative(x);
    case TG_UNARY_SOFTPLUS: return tg_sigmoid_of(x);
    case TG_UNARY_RELU: return x > 0 ? 1.0 : 0.0;
    }
    return NAN;
}

tg_status tg_cpu_unary_fwd(tg_unary_op op, double param, const tg_tensor *x, tg_tensor *y)
{
    tg_iter it;
    tg_iter_init(&it, x->ndim, x->shape, 2, (const int64_t *[]){x->strides, y->strides});
    if (it.empty) return TG_OK;
    const char *xb = tg_bytes(x);
    char *yb = tg_bytes(y);
    do {
        for (int64_t j = 0; j < it.row_length; j++) {
            double v = tg_load(xb, x->dtype, it.offset[0] + j * it.row_stride[0]);
            tg_store(yb, y->dtype, it.offset[1] + j * it.row_stride[1], unary(op, param, v));
        }
    } while (tg_iter_next_row(&it));
    return TG_OK;
}

tg_status tg_cpu_unary_bwd(tg_unary_op op, double param, const tg_tensor *x, const tg_tensor *y,
                           const tg_tensor *dy, tg_tensor *dx)
{
    tg_iter it;
    tg_iter_init(&it, x->ndim, x->shape, 4, (const int64_t *[]){x->strides, y->strides, dy->strides, dx->strides});
    if (it.empty) return TG_OK;
    const char *xb = tg_bytes(x), *yb = tg_bytes(y), *dyb = tg_bytes(dy);
    char *dxb = tg_bytes(dx);
    do {
        for (int64_t j = 0; j < it.row_length; j++) {
            double xv = tg_load(xb, x->dtype, it.offset[0] + j * it.row_stride[0]);
            double yv = tg_load(yb, y->dtype, it.offset[1] + j * it.row_stride[1]);
            double g = tg_load(dyb, dy->dtype, it.offset[2] + j * it.row_stride[2]);
            tg_store(dxb, dx->dtype, it.offset[3] + j * it.row_stride[3], g * unary_derivative(op, param, xv, yv));
        }
    } while (tg_iter_next_row(&it));
    return TG_OK;
}

static double binary(tg_binary_op op, double a, double b)
{
    switch (op) {
    case TG_BINARY_ADD: return a + b;
    case TG_BINARY_SUB: return a - b;
    case TG_BINARY_MUL: return a * b;
    case TG_BINARY_DIV: return a / b;
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
    const char *ab = tg_bytes(a), *bb = tg_bytes(b);
    char *ob = tg_bytes(out);
    do {
        for (int64_t j = 0; j < it.row_length; j++) {
            double av = tg_load(ab, a->dtype, it.offset[0] + j * it.row_stride[0]);
            double bv = tg_load(bb, b->dtype, it.offset[1] + j * it.row_stride[1]);
            tg_store(ob, out->dtype, it.offset[2] + j * it.row_stride[2], binary(op, av, bv));
        }
    } while (tg_iter_next_row(&it));
    return TG_OK;
}
