/* tg_softmax and tg_log_softmax on CUDA against the CPU kernels: forward and gradient on
 * random shapes (1-D to 4-D, odd row lengths, strided input and output gradient) in f32,
 * bf16 and f64; long rows and many short rows; rows with huge values; reproducible
 * gradients; empty rows. Skipped without a GPU. (One input: no mixed-device case.) */
#include "cuda_util.h"

#include <math.h>
#include <stdio.h>

typedef tg_tensor *(*softmax_fn)(tg_tape *, tg_tensor *);

static const struct {
    const char *name;
    softmax_fn fn;
} ops[2] = {{"tg_softmax", tg_softmax}, {"tg_log_softmax", tg_log_softmax}};

/* For each element of dx, Σ|t| over the terms of the sums that make it (cu_assert_within_terms),
 * per row of the last axis: softmax's dx_i = y_i·(dy_i − Σ_j y_j·dy_j), log_softmax's
 * dx_i = dy_i − p_i·Σ_j dy_j with p = exp(y). */
static tg_tensor *dx_terms(tg_tape *tape, int k, const tg_tensor *y, const tg_tensor *dy)
{
    const double *yv = tg_data(tt_f64_copy(tape, y, false)), *dyv = tg_data(tt_f64_copy(tape, dy, true));
    tg_tensor *terms = tg_empty(tape, TG_F64, TG_DEVICE_CPU, y->ndim, y->shape);
    cr_assert(terms, "%s", tg_last_error());
    double *tv = tg_data(terms);
    const int64_t n = y->shape[y->ndim - 1], rows = n ? tg_numel(y) / n : 0;
    for (int64_t r = 0; r < rows; r++) {
        const double *yr = yv + r * n, *dyr = dyv + r * n;
        double weighted = 0, plain = 0; /* Σ p_j·|dy_j|, Σ |dy_j| */
        for (int64_t j = 0; j < n; j++) {
            weighted += (k ? exp(yr[j]) : yr[j]) * dyr[j];
            plain += dyr[j];
        }
        for (int64_t i = 0; i < n; i++) tv[r * n + i] = k ? dyr[i] + exp(yr[i]) * plain : yr[i] * (dyr[i] + weighted);
    }
    return terms;
}

/* The op on x (CPU) and on its CUDA twin, then backward from one random output gradient
 * (strided when asked): output and input gradient must agree, dx within the rounding of its
 * sums' terms when `dx_by_terms` (rows whose softmax is nearly one-hot: there dx is a
 * difference of nearly equal terms, tiny against them, and two correct float32 sums of those
 * terms, rounded differently, differ in relative terms by up to about 1), else relative to dx. */
static void compare_tensor(tg_tape *tape, int k, tg_tensor *x, bool strided_dy, bool dx_by_terms)
{
    tg_tensor *cx = tt_cuda_twin(tape, x, true);
    char what[160], dims[64];
    snprintf(what, sizeof what, "%s x %s%s", ops[k].name, tg_describe(x, dims, sizeof dims),
             tg_is_contiguous(x) ? "" : " strided");
    tg_tensor *y = ops[k].fn(tape, x), *cy = ops[k].fn(tape, cx);
    cu_assert_close(tape, what, cy, y);
    tg_tensor *dy = cu_input(tape, x->dtype, x->ndim, x->shape, strided_dy, false);
    cu_backward(tape, y, dy);
    cu_backward(tape, cy, tt_cuda_twin(tape, dy, true));
    char grad_what[200];
    snprintf(grad_what, sizeof grad_what, "%s: dx", what);
    if (dx_by_terms)
        cu_assert_within_terms(tape, grad_what, cx->grad, x->grad, dx_terms(tape, k, y, dy));
    else
        cu_assert_close(tape, grad_what, cx->grad, x->grad);
}

static void compare_case(int k, tg_dtype dtype, int ndim, const int64_t *shape, bool strided)
{
    tg_tape *tape = tg_tape_create();
    compare_tensor(tape, k, cu_input(tape, dtype, ndim, shape, strided, true), tt_randint(0, 1), false);
    tg_tape_free(tape);
}

Test(cuda_softmax, random_shapes_match_cpu)
{
    tt_require_cuda();
    const tg_dtype dtypes[3] = {TG_F32, TG_BF16, TG_F64};
    for (int k = 0; k < 2; k++)
        for (int d = 0; d < 3; d++)
            for (int ndim = 1; ndim <= 4; ndim++)
                for (int strided = 0; strided < 2; strided++) {
                    int64_t shape[4];
                    for (int i = 0; i < ndim; i++) shape[i] = tt_randint(1, 5);
                    shape[ndim - 1] = tt_randint(1, 70); /* one element up to past two warps */
                    compare_case(k, dtypes[d], ndim, shape, strided);
                }
}

Test(cuda_softmax, long_rows_and_many_short_rows_match_cpu)
{
    tt_require_cuda();
    for (int k = 0; k < 2; k++) {
        /* Rows far longer than a block (V ≥ 4096), over a thousand of them. */
        int64_t long_rows[2] = {tt_randint(1000, 1100), tt_randint(4096, 5200)};
        compare_case(k, TG_F32, 2, long_rows, false);
        /* 100k+ rows of a few elements each; and bf16 rows of a large vocabulary. */
        int64_t short_rows[2] = {tt_randint(100000, 120000), tt_randint(2, 5)};
        compare_case(k, TG_F32, 2, short_rows, tt_randint(0, 1));
        int64_t bf16_rows[2] = {tt_randint(20, 40), tt_randint(8000, 9000)};
        compare_case(k, TG_BF16, 2, bf16_rows, tt_randint(0, 1));
    }
}

Test(cuda_softmax, huge_values_stay_finite_and_match_cpu)
{
    tt_require_cuda();
    /* Rows spread over ±3e4: exp would overflow without the maximum subtracted. */
    for (int k = 0; k < 2; k++) {
        tg_tape *tape = tg_tape_create();
        int64_t shape[2] = {tt_randint(2, 10), tt_randint(3, 300)};
        tg_tensor *x = tt_randn(tape, TG_F32, 2, shape);
        tg_tensor *scaled = tg_empty(tape, TG_F32, TG_DEVICE_CPU, 2, shape);
        for (int64_t i = 0; i < tg_numel(x); i++) tg_set_flat(scaled, i, 1e4 * tg_get_flat(x, i));
        tg_set_requires_grad(scaled, true);
        tg_tensor *cy = ops[k].fn(tape, tt_cuda_twin(tape, scaled, false));
        tg_tensor *host = cu_host(tape, cy);
        for (int64_t i = 0; i < tg_numel(host); i++) {
            double v = tg_get_flat(host, i);
            cr_assert(k == 1 ? isfinite(v) : v >= 0 && v <= 1, "%s element %lld: %g", ops[k].name, (long long)i, v);
        }
        compare_tensor(tape, k, scaled, false, true);
        tg_tape_free(tape);
    }
}

Test(cuda_softmax, gradients_are_reproducible)
{
    tt_require_cuda();
    for (int k = 0; k < 2; k++) {
        tg_tape *tape = tg_tape_create();
        int64_t shape[2] = {tt_randint(500, 1000), tt_randint(1000, 3000)};
        tg_tensor *x = tt_leaf(tape, TG_F32, 2, shape);
        tg_tensor *cdy = tt_cuda_twin(tape, tt_randn(tape, TG_F32, 2, shape), false), *cx[2], *cy[2];
        for (int run = 0; run < 2; run++) {
            cx[run] = tt_cuda_twin(tape, x, false);
            cy[run] = ops[k].fn(tape, cx[run]);
            cu_backward(tape, cy[run], cdy);
        }
        cr_assert(cu_bitwise_equal(tape, cy[0], cy[1]), "%s: the outputs differ between two runs", ops[k].name);
        cr_assert(cu_bitwise_equal(tape, cx[0]->grad, cx[1]->grad), "%s: dx differs between two runs", ops[k].name);
        tg_tape_free(tape);
    }
}

Test(cuda_softmax, empty_rows_give_empty_outputs)
{
    tt_require_cuda();
    tg_tape *tape = tg_tape_create();
    const int64_t shapes[2][2] = {{0, 4}, {3, 0}};
    for (int k = 0; k < 2; k++)
        for (int s = 0; s < 2; s++) {
            tg_tensor *x = tg_zeros(tape, TG_F32, TG_DEVICE_CUDA, 2, shapes[s]);
            tg_tensor *y = ops[k].fn(tape, x);
            cr_assert(y, "%s: %s", ops[k].name, tg_last_error());
            cr_assert(tg_same_shape(y, x) && y->device == TG_DEVICE_CUDA);
        }
    tg_tape_free(tape);
}
