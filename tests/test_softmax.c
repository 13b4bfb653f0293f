/* Softmax and log-softmax over the last axis: gradient checks on random shapes (1-D to
 * 3-D, D = 1, strided), values against a naive formula and identities, stability with
 * huge inputs, f32/bf16 against f64, and the bad-input matrix. */
#include "test_util.h"

#include <math.h>
#include <stdio.h>

typedef tg_tensor *(*softmax_fn)(tg_tape *, tg_tensor *);

static const struct {
    const char *name;
    softmax_fn fn;
} ops[] = {{"tg_softmax", tg_softmax}, {"tg_log_softmax", tg_log_softmax}};
#define N_OPS (sizeof ops / sizeof ops[0])

/* inputs: x, loss weight; user: the op. loss = Σ op(x) · w. */
static tg_tensor *softmax_loss(tg_tape *tape, tg_tensor *const *in, int n, void *user)
{
    (void)n;
    return tg_sum_all(tape, tg_mul(tape, ((softmax_fn)user)(tape, in[0]), in[1]));
}

static void check_case(size_t k, int ndim, const int64_t *shape, bool strided)
{
    tg_tape *tape = tg_tape_create();
    tg_tensor *x = strided ? tt_strided_leaf(tape, TG_F64, ndim, shape) : tt_leaf(tape, TG_F64, ndim, shape);
    tg_tensor *w = tt_randn(tape, TG_F64, ndim, shape);
    tg_tensor *inputs[2] = {x, w};
    char what[128], dims[64];
    snprintf(what, sizeof what, "%s x %s", ops[k].name, tg_describe(x, dims, sizeof dims));
    tt_gradcheck(what, softmax_loss, inputs, 2, (void *)ops[k].fn, NULL);
    tg_tape_free(tape);
}

Test(softmax, gradcheck_random_shapes)
{
    for (size_t k = 0; k < N_OPS; k++)
        for (int ndim = 1; ndim <= 3; ndim++)
            for (int strided = 0; strided < 2; strided++) {
                int64_t shape[3];
                for (int i = 0; i < ndim; i++) shape[i] = tt_randint(1, 4);
                shape[ndim - 1] = tt_randint(1, 7);
                check_case(k, ndim, shape, strided);
            }
}

Test(softmax, gradcheck_d_equal_one)
{
    /* softmax of one element is 1 and log_softmax 0: the gradient is exactly 0. */
    for (size_t k = 0; k < N_OPS; k++) {
        int64_t shape[2] = {tt_randint(1, 5), 1};
        check_case(k, 2, shape, k == 1);
    }
}

/* Naive log Σ_j exp(x[row, j]) for a row of length d (no max trick: inputs are small). */
static double naive_logsumexp(const tg_tensor *x, int64_t row, int64_t d)
{
    double sum = 0;
    for (int64_t j = 0; j < d; j++) sum += exp(tg_get_flat(x, row * d + j));
    return log(sum);
}

Test(softmax, values_match_naive_formula)
{
    tg_tape *tape = tg_tape_create();
    int64_t shape[3] = {tt_randint(1, 4), tt_randint(1, 4), tt_randint(1, 20)}, d = shape[2];
    tg_tensor *x = tt_strided_leaf(tape, TG_F64, 3, shape);
    tg_tensor *p = tg_softmax(tape, x), *logp = tg_log_softmax(tape, x);
    cr_assert(p && logp, "%s", tg_last_error());
    cr_assert(tg_same_shape(p, x) && tg_same_shape(logp, x) && tg_is_contiguous(p) && tg_is_contiguous(logp));
    for (int64_t row = 0; row < tg_numel(x) / d; row++) {
        double lse = naive_logsumexp(x, row, d), row_sum = 0;
        for (int64_t j = 0; j < d; j++) {
            int64_t i = row * d + j;
            double expected_log = tg_get_flat(x, i) - lse;
            cr_assert_float_eq(tg_get_flat(logp, i), expected_log, 1e-12 * (1 + fabs(expected_log)));
            cr_assert_float_eq(tg_get_flat(p, i), exp(expected_log), 1e-14);
            cr_assert_float_eq(exp(tg_get_flat(logp, i)), tg_get_flat(p, i), 1e-14);
            row_sum += tg_get_flat(p, i);
        }
        cr_assert_float_eq(row_sum, 1.0, 1e-12, "row %lld", (long long)row);
    }
    tg_tape_free(tape);
}

Test(softmax, invariant_to_shifting_a_row)
{
    tg_tape *tape = tg_tape_create();
    int64_t shape[2] = {tt_randint(1, 5), tt_randint(1, 12)};
    tg_tensor *x = tt_randn(tape, TG_F64, 2, shape);
    /* A different shift per row: c (rows, 1) broadcast along the row. */
    tg_tensor *c = tt_randn(tape, TG_F64, 2, (int64_t[]){shape[0], 1});
    tg_tensor *shifted = tg_add(tape, x, tg_scale(tape, c, 50.0));
    for (size_t k = 0; k < N_OPS; k++)
        cr_assert_lt(tt_rel_error(ops[k].fn(tape, shifted), ops[k].fn(tape, x)), 1e-12, "%s", ops[k].name);
    tg_tape_free(tape);
}

Test(softmax, stable_with_huge_inputs)
{
    const tg_dtype dtypes[3] = {TG_F64, TG_F32, TG_BF16};
    for (int k = 0; k < 3; k++) {
        tg_tape *tape = tg_tape_create();
        double values[2][3] = {{1e4, -1e4, 0}, {-1e4, -1e4, -1e4}};
        tg_tensor *x64 = tg_from_data(tape, TG_F64, TG_DEVICE_CPU, 2, (int64_t[]){2, 3}, values);
        tg_tensor *x = tg_empty(tape, dtypes[k], TG_DEVICE_CPU, 2, (int64_t[]){2, 3});
        tg_copy(x, x64);
        tg_set_requires_grad(x, true);
        tg_tensor *p = tg_softmax(tape, x), *logp = tg_log_softmax(tape, x);
        cr_assert(p && logp, "%s", tg_last_error());
        /* Row 0: a one-hot softmax and log_softmax = x − max (from the stored values,
         * which bf16 rounds). Row 1: uniform. */
        const double tolerance[3] = {1e-12, 1e-6, 1e-2};
        for (int i = 0; i < 6; i++) {
            double expected_p = i < 3 ? (i == 0) : 1.0 / 3;
            double expected_logp = i < 3 ? tg_get_flat(x, i) - tg_get_flat(x, 0) : -log(3.0);
            cr_assert_float_eq(tg_get_flat(p, i), expected_p, tolerance[k], "%s %d", tg_dtype_name(dtypes[k]), i);
            cr_assert_float_eq(tg_get_flat(logp, i), expected_logp, tolerance[k] * (1 + fabs(expected_logp)), "%s %d",
                               tg_dtype_name(dtypes[k]), i);
        }
        /* Gradients through both, with a random weight: finite everywhere. */
        tg_tensor *w = tg_to_dtype(tape, tt_randn(tape, TG_F64, 2, (int64_t[]){2, 3}), dtypes[k]);
        tg_tensor *loss = tg_add(tape, tg_sum_all(tape, tg_mul(tape, p, w)), tg_sum_all(tape, tg_mul(tape, logp, w)));
        cr_assert_eq(tg_backward(tape, loss), TG_OK, "%s", tg_last_error());
        /* Expected: row 0 gets 0 from the one-hot softmax and w − onehot·Σw from log_softmax;
         * row 1 (uniform) gets (1/3)(w − mean w) + (w − mean w). */
        double w_sum[2] = {0, 0};
        for (int i = 0; i < 6; i++) w_sum[i / 3] += tg_get_flat(w, i);
        for (int i = 0; i < 6; i++) {
            double wv = tg_get_flat(w, i);
            double expected = i < 3 ? wv - (i == 0) * w_sum[0] : 4.0 / 3 * (wv - w_sum[1] / 3);
            double grad = tg_get_flat(x->grad, i);
            cr_assert(isfinite(grad), "%s %d", tg_dtype_name(dtypes[k]), i);
            cr_assert_float_eq(grad, expected, tolerance[k] * 10 * (1 + fabs(expected)), "%s %d: %g vs %g",
                               tg_dtype_name(dtypes[k]), i, grad, expected);
        }
        tg_tape_free(tape);
    }
}

Test(softmax, masked_entries_at_minus_infinity)
{
    /* −inf entries (a mask) get probability 0 and gradient 0; the rest renormalise. */
    tg_tape *tape = tg_tape_create();
    double values[4] = {0.5, -INFINITY, 1.5, -INFINITY};
    tg_tensor *x = tg_from_data(tape, TG_F64, TG_DEVICE_CPU, 1, (int64_t[]){4}, values);
    tg_set_requires_grad(x, true);
    tg_tensor *p = tg_softmax(tape, x), *logp = tg_log_softmax(tape, x);
    double lse = log(exp(0.5) + exp(1.5));
    cr_assert_float_eq(tg_get_flat(p, 0), exp(0.5 - lse), 1e-14);
    cr_assert_float_eq(tg_get_flat(p, 2), exp(1.5 - lse), 1e-14);
    cr_assert_eq(tg_get_flat(p, 1), 0.0);
    cr_assert_float_eq(tg_get_flat(logp, 2), 1.5 - lse, 1e-14);
    cr_assert(isinf(tg_get_flat(logp, 3)) && tg_get_flat(logp, 3) < 0);
    tg_tensor *w = tt_randn(tape, TG_F64, 1, (int64_t[]){4});
    cr_assert_eq(tg_backward(tape, tg_sum_all(tape, tg_mul(tape, p, w))), TG_OK, "%s", tg_last_error());
    for (int i = 0; i < 4; i++) cr_assert(isfinite(tg_get_flat(x->grad, i)), "%d", i);
    cr_assert_eq(tg_get_flat(x->grad, 1), 0.0);
    cr_assert_eq(tg_get_flat(x->grad, 3), 0.0);
    tg_tape_free(tape);
}

Test(softmax, f32_and_bf16_match_f64)
{
    tg_tape *tape = tg_tape_create();
    int64_t shape[2] = {tt_randint(1, 8), tt_randint(1, 40)};
    tg_tensor *x64 = tt_randn(tape, TG_F64, 2, shape), *w64 = tt_randn(tape, TG_F64, 2, shape);
    const tg_dtype dtypes[2] = {TG_F32, TG_BF16};
    const double tolerance[2] = {1e-5, 1e-2};
    for (size_t k = 0; k < N_OPS; k++)
        for (int d = 0; d < 2; d++) {
            /* The narrow input, and an f64 leaf holding exactly its values as the reference. */
            tg_tensor *x = tg_empty(tape, dtypes[d], TG_DEVICE_CPU, 2, shape);
            tg_tensor *xr = tg_empty(tape, TG_F64, TG_DEVICE_CPU, 2, shape);
            tg_copy(x, x64);
            tg_copy(xr, x);
            tg_set_requires_grad(x, true);
            tg_set_requires_grad(xr, true);
            tg_tensor *w = tg_to_dtype(tape, w64, dtypes[d]), *wr = tg_to_dtype(tape, w, TG_F64);
            tg_tensor *y = ops[k].fn(tape, x), *yr = ops[k].fn(tape, xr);
            cr_assert_eq(tg_backward(tape, tg_sum_all(tape, tg_mul(tape, y, w))), TG_OK, "%s", tg_last_error());
            cr_assert_eq(tg_backward(tape, tg_sum_all(tape, tg_mul(tape, yr, wr))), TG_OK, "%s", tg_last_error());
            cr_assert_eq(y->dtype, dtypes[d]);
            cr_assert_lt(tt_rel_error(y, yr), tolerance[d], "%s %s y", ops[k].name, tg_dtype_name(dtypes[d]));
            /* dx can be far smaller than dy when the backward's terms cancel (a short row, one
             * dominant probability); its rounding error is relative to those terms, which are
             * at most ‖dy‖ = ‖w‖ in size (softmax ≤ 1): measured against ‖dx‖ + ‖dy‖. */
            double scale = tt_norm(xr->grad) + tt_norm(wr);
            cr_assert_lt(tt_distance(x->grad, xr->grad), tolerance[d] * scale,
                         "%s %s dx: error %g, scale %g (seed %llu)", ops[k].name, tg_dtype_name(dtypes[d]),
                         tt_distance(x->grad, xr->grad), scale, (unsigned long long)tt_seed());
        }
    tg_tape_free(tape);
}

Test(softmax, empty_rows_give_empty_outputs)
{
    tg_tape *tape = tg_tape_create();
    const int64_t shapes[2][2] = {{0, 4}, {3, 0}};
    for (size_t k = 0; k < N_OPS; k++)
        for (int s = 0; s < 2; s++) {
            tg_tensor *x = tt_randn(tape, TG_F64, 2, shapes[s]);
            tg_tensor *y = ops[k].fn(tape, x);
            cr_assert(y, "%s: %s", ops[k].name, tg_last_error());
            cr_assert(tg_same_shape(y, x));
        }
    tg_tape_free(tape);
}

Test(softmax, bad_inputs_fail_cleanly)
{
    tg_tape *tape = tg_tape_create();
    tg_tensor *x = tt_leaf(tape, TG_F32, 2, (int64_t[]){2, 3});
    tg_tensor *ids = tt_ids(tape, 2, (int64_t[]){2, 3}, 5);
    tg_tensor *cuda = tt_fake_cuda(tape, x);
    tt_state s = tt_snapshot(tape);
    for (size_t k = 0; k < N_OPS; k++) {
        const char *op = ops[k].name;
        tt_assert_failed_with(&s, ops[k].fn(NULL, x), op, "tape", NULL);
        tt_assert_failed_with(&s, ops[k].fn(tape, NULL), op, "NULL", NULL);
        tt_assert_failed_with(&s, ops[k].fn(tape, ids), op, "float", "i32", NULL);
        tt_assert_failed_with(&s, ops[k].fn(tape, cuda), op, "cuda", NULL);
    }
    for (int64_t i = 0; i < 6; i++) cr_assert_eq(tg_get_flat(x->grad, i), 0.0);
    tg_tape_free(tape);
}
