/* kernels/cpu/float_math.h: float32 functions without branches or calls, so that loops of
 * them vectorise, and TG_VECTOR_CLONES, which builds a function for AVX-512, AVX2 and plain
 * x86-64 and lets the CPU pick one when the program loads. A file using them in vector
 * loops is compiled with -fno-trapping-math (CMakeLists.txt): the clamps' comparisons may
 * then be assumed not to raise an exception flag; the values are the same. */
#ifndef TAPEGRAD_KERNELS_CPU_FLOAT_MATH_H
#define TAPEGRAD_KERNELS_CPU_FLOAT_MATH_H

#include <math.h>
#include <stdint.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TG_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TG_VECTOR_CLONES
#endif

/* Four floats and four doubles: one SSE and one AVX2 register. */
typedef float tg_four_floats __attribute__((vector_size(4 * sizeof(float))));
typedef double tg_four_doubles __attribute__((vector_size(4 * sizeof(double))));

/* v in double, element by element: GCC 12 lowers __builtin_convertvector of 4 floats to two
 * 2-wide conversions through the stack, even for AVX2, and this form to one vcvtps2pd. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi" /* static inline: no call crosses the ABI */
static inline tg_four_doubles tg_widen_four(tg_four_floats v) { return (tg_four_doubles){v[0], v[1], v[2], v[3]}; }
#pragma GCC diagnostic pop

/* e^x to about 2 ulp (at most 1.3 measured against double on [−87, 88]): x = k·ln2 + r with
 * |r| ≤ ln2/2, e^r = 1 + r + r²·p(r) with Cephes' coefficients, 2^k from its bits. p is
 * evaluated in Estrin's form, pairs first, so that its chain of dependent operations is
 * half as long as Horner's (the scan's loops wait on it). x is clamped to [−87.3, 88.3],
 * whose results stay normal floats (below, e^x < 1.2e-38 comes back as about that). */
static inline float tg_exp_float(float x)
{
    x = x < -87.3f ? -87.3f : x > 88.3f ? 88.3f : x;
    const float k = floorf(x * 1.44269504088896341f + 0.5f);
    const float r = (x - k * 0.693359375f) - k * -2.12194440e-4f;
    const float r2 = r * r, r4 = r2 * r2;
    const float p01 = 1.9875691500e-4f * r + 1.3981999507e-3f;
    const float p23 = 8.3334519073e-3f * r + 4.1665795894e-2f;
    const float p45 = 1.6666665459e-1f * r + 5.0000001201e-1f;
    const float p = (p01 * r4 + (p23 * r2 + p45)) * r2 + (r + 1.0f);
    union {
        int32_t bits;
        float value;
    } scale = {((int32_t)k + 127) << 23};
    return p * scale.value;
}

/* σ(x) = 1 / (1 + e^−x) from e^−|x|, which cannot overflow. */
static inline float tg_sigmoid_float(float x)
{
    const float e = tg_exp_float(x > 0 ? -x : x);
    return x > 0 ? 1.0f / (1.0f + e) : e / (1.0f + e);
}

#endif
