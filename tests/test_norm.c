/* RMS normalisation: gradient checks on random shapes (1-D to 3-D, D = 1, strided x and
 * weight, either input alone requiring a gradient), values against a naive formula and
 * an identity, f32/bf16 against f64, determinism of the weight gradient, and the
 * bad-input matrix. */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A random eps spread over several decades, 1e-6 .. 1e-1. */
static double random_eps(void) { return pow(10.0, -6.0 + 5.0 * tg_rng_uniform(tt_rng())); }

/* inputs: x, weight, loss weight; user: eps. loss = Σ rmsnorm(x, weight) · w. */
static tg_tensor *rmsnorm_loss(tg_tape *tape, tg_tensor *const *in, int n, void *user)
{
    (void)n;
    return tg_sum_all(tape, tg_mul(tape, tg_rmsnorm(tape, in[0], in[1], *(double *)user), in[2]));
}

static void random_shape(int ndim, int64_t *shape, int64_t max_d)
{
    for (int i = 0; i < ndim; i++) shape[i] = tt_randint(1, 4);
    shape[ndim - 1] = tt_randint(1, max_d);
}

/* Gradcheck one case: which inputs require gradients and which are strided views. */
static void check_case(int ndim, const int64_t *shape, bool x_grad, bool w_grad, bool strided)
{
    tg_tape *tape = tg_tape_create();
    int64_t d = shape[ndim - 1];
    tg_tensor *x = strided ? tt_strided_leaf(tape, TG_F64, ndim, shape) : tt_leaf(tape, TG_F64, ndim, shape);
    tg_tensor *w = strided ? tt_strided_leaf(tape, TG_F64, 1, &d) : tt_leaf(tape, TG_F64, 1, &d);
    tg_set_requires_grad(x, x_grad);
    tg_set_requires_grad(w, w_grad);
    tg_tensor *loss_weight = tt_randn(tape, TG_F64, ndim, shape);
    double eps = random_eps();
    tg_tensor *inputs[3] = {x, w, loss_weight};
    char what[128], dims[64];
    snprintf(what, sizeof what, "tg_rmsnorm x %s%s%s eps %g", tg_describe(x, dims, sizeof dims), x_grad ? " dx" : "",
             w_grad ? " dw" : "", eps);
    tt_gradcheck(what, rmsnorm_loss, inputs, 3, &eps, NULL);
    tg_tape_free(tape);
}

Test(rmsnorm, gradcheck_random_shapes)
{
    for (int ndim = 1; ndim <= 3; ndim++)
        for (int strided = 0; strided < 2; strided++) {
            int64_t shape[3];
            random_shape(ndim, shape, 7);
            check_case(ndim, shape, true, true, strided);
        }
}

Test(rmsnorm, gradcheck_d_equal_one)
{
    /* One element per row: y = x·w / sqrt(x² + eps), the most eps-sensitive case. */
    for (int ndim = 1; ndim <= 3; ndim++) {
        int64_t shape[3];
        random_shape(ndim, shape, 1);
        check_case(ndim, shape, true, true, ndim == 2);
    }
}

Test(rmsnorm, gradcheck_one_input_at_a_time)
{
    /* Only x, then only the weight: the backward must fill just the one asked for. */
    int64_t shape[2] = {tt_randint(1, 4), tt_randint(1, 6)};
    check_case(2, shape, true, false, false);
    check_case(2, shape, false, true, true);
}

/* Naive y[row, j] = x[row, j] · w[j] / sqrt(Σ_k x[row, k]² / D + eps), any layout. */
static double naive_rmsnorm(const tg_tensor *x, const tg_tensor *w, double eps, int64_t row, int64_t j)
{
    int64_t d = w->shape[0];
    double sum_sq = 0;
    for (int64_t k = 0; k < d; k++) sum_sq += pow(tg_get_flat(x, row * d + k), 2);
    return tg_get_flat(x, row * d + j) * tg_get_flat(w, j) / sqrt(sum_sq / (double)d + eps);
}

Test(rmsnorm, values_match_naive_formula_and_identity)
{
    tg_tape *tape = tg_tape_create();
    int64_t shape[3] = {tt_randint(1, 4), tt_randint(1, 4), tt_randint(1, 16)}, d = shape[2];
    tg_tensor *x = tt_strided_leaf(tape, TG_F64, 3, shape), *w = tt_strided_leaf(tape, TG_F64, 1, &d);
    double eps = random_eps();
    tg_tensor *y = tg_rmsnorm(tape, x, w, eps);
    cr_assert(y, "%s", tg_last_error());
    cr_assert(tg_same_shape(y, x) && tg_is_contiguous(y));
    for (int64_t row = 0; row < tg_numel(x) / d; row++) {
        /* mean(y²/w²) = mean(x²)·r² = mean(x²) / (mean(x²) + eps) = 1 / (1 + eps / mean(x²)) */
        double mean_x2 = 0, mean_ratio = 0;
        for (int64_t j = 0; j < d; j++) {
            double yv = tg_get_flat(y, row * d + j), wv = tg_get_flat(w, j);
            cr_assert_float_eq(yv, naive_rmsnorm(x, w, eps, row, j), 1e-12 * (1 + fabs(yv)), "row %lld j %lld",
                               (long long)row, (long long)j);
            mean_x2 += pow(tg_get_flat(x, row * d + j), 2) / (double)d;
            mean_ratio += yv * yv / (wv * wv) / (double)d;
        }
        cr_assert_float_eq(mean_ratio, 1.0 / (1.0 + eps / mean_x2), 1e-9, "row %lld", (long long)row);
    }
    tg_tape_free(tape);
}

Test(rmsnorm, scale_invariant_when_eps_is_negligible)
{
    tg_tape *tape = tg_tape_create();
    int64_t shape[2] = {tt_randint(1, 5), tt_randint(2, 20)};
    tg_tensor *x = tt_randn(tape, TG_F64, 2, shape), *w = tt_randn(tape, TG_F64, 1, &shape[1]);
    double c = 1 + 100 * tg_rng_uniform(tt_rng());
    tg_tensor *y = tg_rmsnorm(tape, x, w, 1e-300), *yc = tg_rmsnorm(tape, tg_scale(tape, x, c), w, 1e-300);
    cr_assert_lt(tt_rel_error(yc, y), 1e-12);
    tg_tape_free(tape);
}

/* A leaf of `dtype` holding src's values (converted). */
static tg_tensor *leaf_copy(tg_tape *tape, const tg_tensor *src, tg_dtype dtype)
{
    tg_tensor *t = tg_empty(tape, dtype, TG_DEVICE_CPU, src->ndim, src->shape);
    cr_assert(t && tg_copy(t, src) == TG_OK, "%s", tg_last_error());
    cr_assert_eq(tg_set_requires_grad(t, true), TG_OK);
    return t;
}

/* Forward and backward of loss = Σ rmsnorm(x, w) · lw; returns y. */
static tg_tensor *run_rmsnorm(tg_tape *tape, tg_tensor *x, tg_tensor *w, tg_tensor *lw, double eps)
{
    tg_tensor *y = tg_rmsnorm(tape, x, w, eps);
    cr_assert(y, "%s", tg_last_error());
    cr_assert_eq(tg_backward(tape, tg_sum_all(tape, tg_mul(tape, y, lw))), TG_OK, "%s", tg_last_error());
    return y;
}

Test(rmsnorm, f32_and_bf16_match_f64)
{
    tg_tape *tape = tg_tape_create();
    int64_t shape[2] = {tt_randint(1, 8), tt_randint(1, 40)};
    tg_tensor *x64 = tt_randn(tape, TG_F64, 2, shape), *w64 = tt_randn(tape, TG_F64, 1, &shape[1]);
    tg_tensor *lw64 = tt_randn(tape, TG_F64, 2, shape);
    const tg_dtype dtypes[2] = {TG_F32, TG_BF16};
    const double tolerance[2] = {1e-5, 1e-2};
    for (int k = 0; k < 2; k++) {
        /* The narrow inputs, and f64 copies of exactly those values as the reference. */
        tg_tensor *x = leaf_copy(tape, x64, dtypes[k]), *w = leaf_copy(tape, w64, dtypes[k]);
        tg_tensor *lw = tg_to_dtype(tape, lw64, dtypes[k]);
        tg_tensor *xr = leaf_copy(tape, x, TG_F64), *wr = leaf_copy(tape, w, TG_F64);
        tg_tensor *lwr = tg_to_dtype(tape, lw, TG_F64);
        tg_tensor *y = run_rmsnorm(tape, x, w, lw, 1e-5), *yr = run_rmsnorm(tape, xr, wr, lwr, 1e-5);
        cr_assert_eq(y->dtype, dtypes[k]);
        cr_assert_eq(x->grad->dtype, dtypes[k]);
        const char *name = tg_dtype_name(dtypes[k]);
        cr_assert_lt(tt_rel_error(y, yr), tolerance[k], "%s y", name);
        cr_assert_lt(tt_rel_error(x->grad, xr->grad), tolerance[k], "%s dx", name);
        cr_assert_lt(tt_rel_error(w->grad, wr->grad), tolerance[k], "%s dw", name);
    }
    tg_tape_free(tape);
}

Test(rmsnorm, weight_gradient_is_deterministic)
{
    tg_tape *tape = tg_tape_create();
    int64_t shape[2] = {tt_randint(50, 80), tt_randint(8, 32)};
    tg_tensor *x = tt_randn(tape, TG_F32, 2, shape), *lw = tt_randn(tape, TG_F32, 2, shape);
    tg_tensor *w1 = tt_leaf(tape, TG_F32, 1, &shape[1]);
    tg_tensor *w2 = leaf_copy(tape, w1, TG_F32);
    run_rmsnorm(tape, x, w1, lw, 1e-6);
    run_rmsnorm(tape, x, w2, lw, 1e-6);
    cr_assert_eq(memcmp(tg_data(w1->grad), tg_data(w2->grad), sizeof(float) * (size_t)shape[1]), 0);
    tg_tape_free(tape);
}

/* Rows are split over CPU threads and dw is summed in fixed blocks of rows: 1, 2, 3 or
 * many threads give the same bits for y, dx and dw (rows enough for several blocks, and
 * dy in a transposed layout). */
Test(rmsnorm, thread_count_changes_nothing)
{
    tg_tape *tape = tg_tape_create();
    int64_t shape[3] = {tt_randint(2, 5), tt_randint(30, 90), tt_randint(1, 70)};
    tg_tensor *x = tt_leaf(tape, TG_F32, 3, shape), *lw = tt_randn(tape, TG_F32, 3, shape);
    tg_tensor *w_init = tt_randn(tape, TG_F32, 1, &shape[2]);
    const int64_t n = shape[0] * shape[1] * shape[2];
    float *base = malloc(sizeof(float) * (size_t)(2 * n + shape[2])),
          *now = malloc(sizeof *now * (size_t)(2 * n + shape[2]));
    const int threads[] = {1, 2, 3, 16};
    for (size_t k = 0; k < sizeof threads / sizeof threads[0]; k++) {
        tg_set_num_threads(threads[k]);
        tg_zero_grad(x);
        tg_tensor *w = leaf_copy(tape, w_init, TG_F32);
        tg_tensor *y = run_rmsnorm(tape, x, w, lw, 1e-5);
        float *out = k ? now : base;
        tg_copy_to_host(y, out, TG_F32);
        tg_copy_to_host(x->grad, out + n, TG_F32);
        tg_copy_to_host(w->grad, out + 2 * n, TG_F32);
        for (int64_t i = 0; k && i < 2 * n + shape[2]; i++)
            cr_assert(now[i] == base[i], "%d threads vs 1: %s[%lld]: %.9g vs %.9g", threads[k],
                      i < n       ? "y"
                      : i < 2 * n ? "dx"
                                  : "dw",
                      (long long)(i < n       ? i
                                  : i < 2 * n ? i - n
                                              : i - 2 * n),
                      now[i], base[i]);
    }
    tg_set_num_threads(0);
    free(base), free(now);
    tg_tape_free(tape);
}

Test(rmsnorm, zero_rows_give_an_empty_output_and_zero_weight_gradient)
{
    tg_tape *tape = tg_tape_create();
    int64_t shape[2] = {0, tt_randint(1, 6)};
    tg_tensor *x = tt_leaf(tape, TG_F64, 2, shape), *w = tt_leaf(tape, TG_F64, 1, &shape[1]);
    tg_fill(w->grad, 7.0); /* the backward must add exact zeros to it */
    tg_tensor *y = run_rmsnorm(tape, x, w, tg_zeros(tape, TG_F64, TG_DEVICE_CPU, 2, shape), 1e-5);
    cr_assert_eq(tg_numel(y), 0);
    for (int64_t j = 0; j < shape[1]; j++) cr_assert_eq(tg_get_flat(w->grad, j), 7.0);
    tg_tape_free(tape);
}

Test(rmsnorm, bad_inputs_fail_cleanly)
{
    tg_tape *tape = tg_tape_create();
    const char *op = "tg_rmsnorm";
    tg_tensor *x = tt_leaf(tape, TG_F32, 2, (int64_t[]){2, 3});
    tg_tensor *w = tt_leaf(tape, TG_F32, 1, (int64_t[]){3});
    tg_tensor *w4 = tt_randn(tape, TG_F32, 1, (int64_t[]){4});
    tg_tensor *w2d = tt_randn(tape, TG_F32, 2, (int64_t[]){1, 3});
    tg_tensor *w64 = tt_randn(tape, TG_F64, 1, (int64_t[]){3});
    tg_tensor *x_empty_rows = tt_randn(tape, TG_F32, 2, (int64_t[]){2, 0});
    tg_tensor *w_empty = tt_randn(tape, TG_F32, 1, (int64_t[]){0});
    tg_tensor *ids = tt_ids(tape, 2, (int64_t[]){2, 3}, 5), *wids = tt_ids(tape, 1, (int64_t[]){3}, 5);
    tg_tensor *cuda_x = tt_fake_cuda(tape, x), *cuda_w = tt_fake_cuda(tape, w);
    tt_state s = tt_snapshot(tape);
    tt_assert_failed_with(&s, tg_rmsnorm(NULL, x, w, 1e-5), op, "tape", NULL);
    tt_assert_failed_with(&s, tg_rmsnorm(tape, NULL, w, 1e-5), op, "x", "NULL", NULL);
    tt_assert_failed_with(&s, tg_rmsnorm(tape, x, NULL, 1e-5), op, "weight", "NULL", NULL);
    tt_assert_failed_with(&s, tg_rmsnorm(tape, x, w4, 1e-5), op, "weight", "[3]", "[4]", NULL);
    tt_assert_failed_with(&s, tg_rmsnorm(tape, x, w2d, 1e-5), op, "weight", "[1, 3]", NULL);
    tt_assert_failed_with(&s, tg_rmsnorm(tape, x, w64, 1e-5), op, "dtype", "f32", "f64", NULL);
    tt_assert_failed_with(&s, tg_rmsnorm(tape, ids, wids, 1e-5), op, "float", "i32", NULL);
    tt_assert_failed_with(&s, tg_rmsnorm(tape, x, wids, 1e-5), op, "float", "i32", NULL);
    tt_assert_failed_with(&s, tg_rmsnorm(tape, x, w, 0.0), op, "eps", NULL);
    tt_assert_failed_with(&s, tg_rmsnorm(tape, x, w, -1e-5), op, "eps", NULL);
    tt_assert_failed_with(&s, tg_rmsnorm(tape, x, w, NAN), op, "eps", "nan", NULL);
    tt_assert_failed_with(&s, tg_rmsnorm(tape, x, w, INFINITY), op, "eps", NULL);
    tt_assert_failed_with(&s, tg_rmsnorm(tape, x_empty_rows, w_empty, 1e-5), op, "[2, 0]", NULL);
    tt_assert_failed_with(&s, tg_rmsnorm(tape, cuda_x, cuda_w, 1e-5), op, "cuda", NULL);
    tt_assert_failed_with(&s, tg_rmsnorm(tape, x, cuda_w, 1e-5), op, "device", "cuda", NULL);
    tt_assert_failed_with(&s, tg_rmsnorm(tape, cuda_x, w, 1e-5), op, "device", "cuda", NULL);
    /* the leaves' gradients are untouched by all of that */
    for (int64_t i = 0; i < 6; i++) cr_assert_eq(tg_get_flat(x->grad, i), 0.0);
    for (int64_t i = 0; i < 3; i++) cr_assert_eq(tg_get_flat(w->grad, i), 0.0);
    tg_tape_free(tape);
}
