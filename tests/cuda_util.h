/* tests/cuda_util.h: what the CPU-vs-CUDA tests share (header only, static helpers).
 *
 * Each such test makes its inputs on the CPU, gives the CUDA twins (tt_cuda_twin) the
 * same values and layout, runs the op and its backward on both, and compares the CUDA
 * results, copied back to the host, with the CPU ones. */
#ifndef TAPEGRAD_TESTS_CUDA_UTIL_H
#define TAPEGRAD_TESTS_CUDA_UTIL_H

#include "test_util.h"

#include "core/internal.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* A contiguous CPU copy of t (any device and layout, same dtype). */
static inline tg_tensor *cu_host(tg_tape *tape, const tg_tensor *t)
{
    cr_assert(t, "cu_host: no tensor (%s)", tg_last_error());
    tg_tensor *h = tg_empty(tape, t->dtype, TG_DEVICE_CPU, t->ndim, t->shape);
    cr_assert(h, "cu_host: %s", tg_last_error());
    cr_assert_eq(tg_copy(h, t), TG_OK, "cu_host: %s", tg_last_error());
    return h;
}

/* The agreement asked of a CUDA result with the CPU one, by storage dtype. */
static inline double cu_tolerance(tg_dtype dtype) { return dtype == TG_F64 ? 1e-10 : dtype == TG_F32 ? 1e-5 : 1e-2; }

/* The CUDA result is on the GPU and has the CPU result's shape and dtype. */
static inline void cu_assert_comparable(const char *what, const tg_tensor *cuda, const tg_tensor *cpu)
{
    cr_assert(cuda, "%s: no CUDA result (%s)", what, tg_last_error());
    cr_assert(cpu, "%s: no CPU result (%s)", what, tg_last_error());
    cr_assert_eq(cuda->device, TG_DEVICE_CUDA, "%s: the result left the GPU", what);
    cr_assert_eq(cuda->dtype, cpu->dtype, "%s: dtypes differ", what);
    cr_assert(tg_same_shape(cuda, cpu), "%s: shapes differ (ndim %d vs %d)", what, cuda->ndim, cpu->ndim);
}

/* The CUDA result is on the GPU, has the CPU result's shape and dtype, and lies within
 * `limit` of it (relative error over all elements). */
static inline void cu_assert_within(tg_tape *tape, const char *what, const tg_tensor *cuda, const tg_tensor *cpu,
                                    double limit)
{
    cu_assert_comparable(what, cuda, cpu);
    double error = tt_rel_error(cu_host(tape, cuda), cpu);
    cr_assert(error <= limit, "%s (%s): CUDA vs CPU relative error %g, limit %g (seed %llu)", what,
              tg_dtype_name(cpu->dtype), error, limit, (unsigned long long)tt_seed());
}

/* The tolerance on a result relative to the magnitude of its terms (cu_assert_within_terms):
 * the float32 maths of every dtype's kernels. For 16-bit storage it is looser than float32
 * rounding alone, as the conv1d backward takes SiLU's slope from a hardware tanh (within about
 * 10^-5) and its bf16 tensor-core products take g rounded to bf16 (up to 2^-9 of each term, of
 * independent signs, so that over many terms they stay far under this limit; over few, the
 * limit relative to the result covers them, as it covers the result's own rounding to 16
 * bits). */
static inline double cu_terms_tolerance(tg_dtype dtype)
{
    return dtype == TG_F64 ? 1e-10 : dtype == TG_F32 ? 1e-5 : 1e-4;
}

/* ‖cuda − cpu‖ ≤ max(tol · ‖cpu‖, terms_tol · ‖terms‖), Euclidean norms over all elements,
 * tol and terms_tol those of cpu's dtype (cu_tolerance, cu_terms_tolerance). terms (on the
 * CPU, cpu's shape, any float dtype) holds for each element an upper estimate of Σ|t| over
 * the terms t of the sum that makes it. The rounding of a float sum is bounded relative to
 * its terms, not to its value: when a sum of many terms of both signs lands near zero (a
 * bias gradient over B·L steps, say), float32 cannot give it to a small relative error, and
 * the limit follows what it can give. A missing, extra or misplaced term is an error the
 * size of a whole term, far above terms_tol · Σ|t| while a sum has fewer than about
 * 1/terms_tol terms. Nor is a sum's rounding relative below the smallest normal number of
 * the arithmetic (float32, or float64 for f64): there whether a kernel flushes subnormals to
 * zero (the GPU's fast paths do, the CPU does not) decides the last bits, so each element may
 * be off by that much (a gradient that decays through many steps lands there). When both
 * norms are zero the limit is tol itself, as in tt_rel_error. */
static inline void cu_assert_within_terms(tg_tape *tape, const char *what, const tg_tensor *cuda, const tg_tensor *cpu,
                                          const tg_tensor *terms)
{
    cu_assert_comparable(what, cuda, cpu);
    cr_assert(terms && terms->device == TG_DEVICE_CPU && tg_same_shape(terms, cpu),
              "%s: the term magnitudes must be a CPU tensor of the result's shape", what);
    const double tol = cu_tolerance(cpu->dtype), terms_tol = cu_terms_tolerance(cpu->dtype);
    const double subnormal = (cpu->dtype == TG_F64 ? DBL_MIN : FLT_MIN) * sqrt((double)tg_numel(cpu));
    double error = tt_distance(cu_host(tape, cuda), cpu), norm = tt_norm(cpu), terms_norm = tt_norm(terms);
    double limit = fmax(fmax(tol * norm, terms_tol * terms_norm), subnormal);
    if (norm == 0 && terms_norm == 0) limit = tol;
    cr_assert(error <= limit,
              "%s (%s): CUDA vs CPU error %g, limit %g (max(%g × ‖CPU‖ %g, %g × ‖terms‖ %g)) (seed %llu)", what,
              tg_dtype_name(cpu->dtype), error, limit, tol, norm, terms_tol, terms_norm, (unsigned long long)tt_seed());
}

/* Asserts the CUDA tensor matches the CPU one within cu_tolerance of its dtype. */
static inline void cu_assert_close(tg_tape *tape, const char *what, const tg_tensor *cuda, const tg_tensor *cpu)
{
    cr_assert(cpu, "%s: no CPU result (%s)", what, tg_last_error());
    cu_assert_within(tape, what, cuda, cpu, cu_tolerance(cpu->dtype));
}

/* The CUDA result equals the CPU one element for element. */
static inline void cu_assert_equal(tg_tape *tape, const char *what, const tg_tensor *cuda, const tg_tensor *cpu)
{
    cr_assert(cuda && cpu, "%s: missing result: %s", what, tg_last_error());
    cr_assert_eq(cuda->device, TG_DEVICE_CUDA, "%s: the result left the GPU", what);
    cr_assert(cuda->dtype == cpu->dtype && tg_same_shape(cuda, cpu), "%s: dtype or shape differs", what);
    tg_tensor *h = cu_host(tape, cuda);
    for (int64_t i = 0; i < tg_numel(h); i++) {
        double got = tg_get_flat(h, i), expected = tg_get_flat(cpu, i);
        cr_assert(got == expected, "%s: element %lld is %.9g on CUDA, %.9g on the CPU (seed %llu)", what, (long long)i,
                  got, expected, (unsigned long long)tt_seed());
    }
}

/* Whether a and b (same shape and dtype, any devices and layouts) hold the same bits. */
static inline bool cu_bitwise_equal(tg_tape *tape, const tg_tensor *a, const tg_tensor *b)
{
    cr_assert(a && b && tg_same_shape(a, b) && a->dtype == b->dtype);
    tg_tensor *ha = cu_host(tape, a), *hb = cu_host(tape, b);
    return memcmp(tg_data(ha), tg_data(hb), (size_t)tg_numel(ha) * tg_dtype_size(a->dtype)) == 0;
}

/* A random CPU tensor of the given shape, strided (tt_strided_leaf's layout) when asked;
 * it requires a gradient when grad is set. */
static inline tg_tensor *cu_input(tg_tape *tape, tg_dtype dtype, int ndim, const int64_t *shape, bool strided,
                                  bool grad)
{
    tg_tensor *t = strided ? tt_strided_leaf(tape, dtype, ndim, shape) : tt_randn(tape, dtype, ndim, shape);
    cr_assert_eq(tg_set_requires_grad(t, grad), TG_OK, "%s", tg_last_error());
    return t;
}

/* Backward from y seeded with dy (on y's device). */
static inline void cu_backward(tg_tape *tape, tg_tensor *y, const tg_tensor *dy)
{
    cr_assert(y, "the op failed: %s", tg_last_error());
    cr_assert_eq(tg_backward_with_grad(tape, y, dy), TG_OK, "backward: %s", tg_last_error());
}

/* Makes the next `count` device allocations of numel elements of dtype reuse memory full
 * of NaNs: the caching allocator hands out the most recently freed block of a size
 * first, so an output a kernel forgot to write shows as NaN instead of a lucky zero. */
static inline void cu_dirty_device_memory(int64_t numel, tg_dtype dtype, int count)
{
    tg_tape *scratch = tg_tape_create();
    for (int i = 0; i < count; i++)
        cr_assert(tg_full(scratch, dtype, TG_DEVICE_CUDA, 1, &numel, NAN), "%s", tg_last_error());
    tg_tape_free(scratch);
}

#endif
