/* tapegrad/gradcheck.h: compare analytic gradients with finite differences.
 *
 * You give a function that builds a scalar from its inputs on a tape. tg_gradcheck
 * runs it once with gradients, then perturbs the inputs and compares each analytic
 * gradient with float64 central differences, (f(x + eps·v) − f(x − eps·v)) / 2eps:
 *   - small inputs (at most max_elements_per_input elements): v is each unit vector
 *     in turn, so every element is checked;
 *   - larger inputs: v is a random Gaussian direction and the analytic side is the
 *     directional derivative Σ grad·v, so no input is skipped for size.
 * An element passes when |analytic − numeric| ≤ atol + rtol·|numeric|. Inputs that
 * require gradients must be f64 CPU tensors (other inputs, such as i32 ids, are passed
 * through unchanged). Inputs may be strided views. Every buffer the checked backward is
 * given starts as NaN, so an element it never writes fails instead of passing by luck.
 *
 * tg_gradcheck_cuda (below) checks an op's CUDA kernels against its CPU ones instead.
 */
#ifndef TAPEGRAD_GRADCHECK_H
#define TAPEGRAD_GRADCHECK_H

#include "autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Builds the scalar (a one-element tensor) from inputs on the tape. */
typedef tg_tensor *(*tg_gradcheck_fn)(tg_tape *tape, tg_tensor *const *inputs, int n_inputs, void *user_data);

typedef struct {
    double eps;                     /* default 1e-6 */
    double atol;                    /* default 1e-6 */
    double rtol;                    /* default 1e-4 */
    int64_t max_elements_per_input; /* default 256: above, random directions */
    int n_directions;               /* default 4 */
    uint64_t seed;                  /* for the directions; default 1 */
} tg_gradcheck_options;

typedef struct {
    bool passed;                         /* no comparison over the tolerance */
    int worst_input;                     /* which input held the worst element (-1: none checked) */
    int64_t worst_index;                 /* its flat row-major index, or -1 for a direction */
    int64_t worst_position[TG_MAX_DIMS]; /* the same as a multi-index (the input's ndim entries) */
    double worst_input_value;            /* the input's value there (NaN for a direction) */
    int worst_direction;                 /* the direction number when worst_index is -1 */
    double analytic;                     /* the two values compared there */
    double numeric;
    double worst_ratio; /* |analytic − numeric| / (atol + rtol·|numeric|); ≤ 1 passes */
    int64_t n_checked;  /* comparisons made */
    int64_t n_failed;   /* comparisons over the tolerance */
    /* What the failures share, per input: how many, "every one" or "only the last one", an
     * index every failure has along a dimension, the sign and range of the input values at
     * them (e.g. "inputs[0]: 5 of 20 elements, all with index 3 along dimension 1, all at
     * negative input values (-1.9 to -0.2)"); "" when none failed. */
    char pattern[256];
    char message[768]; /* a one-line summary, with the pattern */
} tg_gradcheck_result;

TG_API tg_gradcheck_options tg_gradcheck_defaults(void);
/* Returns TG_OK when the check could run (then see result->passed), or an error when
 * it could not (bad inputs, the function failed). options may be NULL (defaults). */
TG_API tg_status tg_gradcheck(tg_gradcheck_fn fn, tg_tensor *const *inputs, int n_inputs, void *user_data,
                              const tg_gradcheck_options *options, tg_gradcheck_result *result);

/* An op's CUDA kernels against its CPU twin. inputs are CPU tensors of any dtype (the
 * reference); each gets a CUDA copy of the same dtype, values and strides. fn runs on both,
 * its output may have any shape, and each side's backward is seeded with the same random
 * output gradient (normal, from options->seed). Every element of the output and of every
 * input gradient is compared: the CUDA value ("analytic" in the result) passes when it is
 * within atol + rtol·|cpu value| ("numeric"). In the result, worst_input == n_inputs means
 * fn's output. eps, max_elements_per_input and n_directions are not used. The defaults suit
 * f32; 16-bit dtypes want rtol near 1e-2. An error when there is no CUDA device. */
TG_API tg_status tg_gradcheck_cuda(tg_gradcheck_fn fn, tg_tensor *const *inputs, int n_inputs, void *user_data,
                                   const tg_gradcheck_options *options, tg_gradcheck_result *result);

#ifdef __cplusplus
}
#endif
#endif
