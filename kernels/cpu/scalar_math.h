/* kernels/cpu/scalar_math.h: scalar functions shared by the CPU kernels. */
#ifndef TAPEGRAD_KERNELS_CPU_SCALAR_MATH_H
#define TAPEGRAD_KERNELS_CPU_SCALAR_MATH_H

#include <math.h>

/* σ(x) = 1 / (1 + e^−x), in the form whose exp cannot overflow. */
static inline double tg_sigmoid_of(double x)
{
    if (x >= 0) return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

/* silu'(x) = σ(x)·(1 + x·(1 − σ(x))) */
static inline double tg_silu_derivative(double x)
{
    double s = tg_sigmoid_of(x);
    return s * (1.0 + x * (1.0 - s));
}

#endif
