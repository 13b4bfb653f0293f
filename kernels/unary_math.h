/* kernels/unary_math.h: each unary op's value and derivative, written once for both devices.
 *
 * A C file (the CPU kernels) gets them in double, through libm. A CUDA file includes it after
 * kernels/cuda/common.cuh and gets templates over the computing type (float for the dense
 * 16- and 32-bit kernels, double for the generic ones) that call common.cuh's tg_exp family.
 * Adding a unary op means adding its case to both switches here (and its enum value in
 * kernels/elementwise.h): both devices then compute it from the same lines. */
#ifndef TAPEGRAD_KERNELS_UNARY_MATH_H
#define TAPEGRAD_KERNELS_UNARY_MATH_H

#include "kernels/elementwise.h"

#include <math.h>

#ifdef __CUDACC__
#define TG_MATH_FN template <typename tg_real> __device__ inline
#define TG_MATH_EXP(x) tg_exp(x)
#define TG_MATH_LOG(x) tg_log(x)
#define TG_MATH_LOG1P(x) tg_log1p(x)
#define TG_MATH_TANH(x) tg_tanh(x)
#define TG_MATH_ABS(x) tg_abs(x)
#else
typedef double tg_real;
#define TG_MATH_FN static inline
#define TG_MATH_EXP(x) exp(x)
#define TG_MATH_LOG(x) log(x)
#define TG_MATH_LOG1P(x) log1p(x)
#define TG_MATH_TANH(x) tanh(x)
#define TG_MATH_ABS(x) fabs(x)
#endif

/* σ(x) = 1 / (1 + e^−x), in the form whose exp cannot overflow. */
TG_MATH_FN tg_real tg_sigmoid_of(tg_real x)
{
    if (x >= (tg_real)0) return (tg_real)1 / ((tg_real)1 + TG_MATH_EXP(-x));
    const tg_real e = TG_MATH_EXP(x);
    return e / ((tg_real)1 + e);
}

/* silu'(x) = σ(x)·(1 + x·(1 − σ(x))) */
TG_MATH_FN tg_real tg_silu_derivative(tg_real x)
{
    const tg_real s = tg_sigmoid_of(x);
    return s * ((tg_real)1 + x * ((tg_real)1 - s));
}

TG_MATH_FN tg_real tg_unary_value(tg_unary_op op, tg_real param, tg_real x)
{
    switch (op) {
    case TG_UNARY_SCALE: return param * x;
    case TG_UNARY_NEG: return -x;
    case TG_UNARY_EXP: return TG_MATH_EXP(x);
    case TG_UNARY_LOG: return TG_MATH_LOG(x);
    case TG_UNARY_TANH: return TG_MATH_TANH(x);
    case TG_UNARY_SIGMOID: return tg_sigmoid_of(x);
    case TG_UNARY_SILU: return x * tg_sigmoid_of(x);
    case TG_UNARY_SOFTPLUS: /* log(1 + eˣ), stable */
        return (x > (tg_real)0 ? x : (tg_real)0) + TG_MATH_LOG1P(TG_MATH_EXP(-TG_MATH_ABS(x)));
    case TG_UNARY_RELU: return x > (tg_real)0 ? x : (tg_real)0;
    case TG_UNARY_COUNT: break;
    }
    return (tg_real)NAN;
}

/* d f(x) / dx, written with y = f(x) where that is cheaper. */
TG_MATH_FN tg_real tg_unary_derivative(tg_unary_op op, tg_real param, tg_real x, tg_real y)
{
    switch (op) {
    case TG_UNARY_SCALE: return param;
    case TG_UNARY_NEG: return (tg_real)-1;
    case TG_UNARY_EXP: return y;
    case TG_UNARY_LOG: return (tg_real)1 / x;
    case TG_UNARY_TANH: return (tg_real)1 - y * y;
    case TG_UNARY_SIGMOID: return y * ((tg_real)1 - y);
    case TG_UNARY_SILU: return tg_silu_derivative(x);
    case TG_UNARY_SOFTPLUS: return tg_sigmoid_of(x);
    case TG_UNARY_RELU: return x > (tg_real)0 ? (tg_real)1 : (tg_real)0;
    case TG_UNARY_COUNT: break;
    }
    return (tg_real)NAN;
}

#endif
