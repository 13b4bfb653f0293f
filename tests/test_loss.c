/* Cross-entropy: gradient checks on random shapes (1-D to 3-D logits, V = 1, strided
 * logits and targets, ignored rows, all rows ignored), values and gradients against a
 * naive formula, stability with huge logits, f32/bf16 against f64, and the bad-input
 * matrix (out-of-range targets named with their position). */
#include "test_util.h"
#include "loss_cases.h"

#include "core/internal.h" /* tg_view, for strided i32 targets */

#include <math.h>
#include <stdio.h>

#define IGNORE (-100)

/* Naive mean over counted rows of −log_softmax(row)[target], with the row maximum
 * subtracted; *n_valid receives the count. */
static double naive_cross_entropy(const tg_tensor *logits, const tg_tensor *targets, int32_t ignore_index,
                                  int64_t *n_valid)
{
    int64_t v = logits->shape[logits->ndim - 1], rows = tg_numel(logits) / v;
    double sum = 0;
    *n_valid = 0;
    for (int64_t r = 0; r < rows; r++) {
        int32_t t = (int32_t)tg_get_flat(targets, r);
        if (t == ignore_index) continue;
        double max = -INFINITY, sum_exp = 0;
        for (int64_t j = 0; j < v; j++) max = fmax(max, tg_get_flat(logits, r * v + j));
        for (int64_t j = 0; j < v; j++) sum_exp += exp(tg_get_flat(logits, r * v + j) - max);
        double log_softmax_t = tg_get_flat(logits, r * v + t) - max - log(sum_exp);
        sum -= log_softmax_t;
        (*n_valid)++;
    }
    return *n_valid ? sum / (double)*n_valid : 0.0;
}

/* Naive d(loss)/d(logits[r, j]) = (softmax(row)_j − [j = t]) / n, 0 on ignored rows. */
static double naive_gradient(const tg_tensor *logits, const tg_tensor *targets, int32_t ignore_index, int64_t n_valid,
                             int64_t r, int64_t j)
{
    int64_t v = logits->shape[logits->ndim - 1];
    int32_t t = (int32_t)tg_get_flat(targets, r);
    if (t == ignore_index) return 0.0;
    double max = -INFINITY, sum_exp = 0;
    for (int64_t k = 0; k < v; k++) max = fmax(max, tg_get_flat(logits, r * v + k));
    for (int64_t k = 0; k < v; k++) sum_exp += exp(tg_get_flat(logits, r * v + k) - max);
    double p = exp(tg_get_flat(logits, r * v + j) - max) / sum_exp;
    return (p - (j == t)) / (double)n_valid;
}

typedef struct {
    int32_t ignore_index;
    double factor; /* the loss is scaled, so the backward's dy is not 1 */
} loss_params;

/* inputs: logits, targets. */
static tg_tensor *ce_loss(tg_tape *tape, tg_tensor *const *in, int n, void *user)
{
    (void)n;
    const loss_params *params = user;
    return tg_scale(tape, tg_cross_entropy(tape, in[0], in[1], params->ignore_index), params->factor);
}

static void check_case(int ndim, const int64_t *shape, bool strided, double p_ignore)
{
    tg_tape *tape = tg_tape_create();
    int32_t v = (int32_t)shape[ndim - 1];
    /* ignore_index is either outside the classes or one of them (those rows still count as ignored). */
    loss_params params = {tt_randint(0, 1) ? IGNORE : (int32_t)tt_randint(0, v - 1),
                          0.5 + 3 * tg_rng_uniform(tt_rng())};
    int64_t tshape[TG_MAX_DIMS];
    int tndim = lc_targets_shape(ndim, shape, tshape);
    tg_tensor *logits = strided ? tt_strided_leaf(tape, TG_F64, ndim, shape) : tt_leaf(tape, TG_F64, ndim, shape);
    tg_tensor *targets = lc_random_targets(tape, tndim, tshape, v, strided, params.ignore_index, p_ignore);
    tg_tensor *inputs[2] = {logits, targets};
    char what[128], dims[64];
    snprintf(what, sizeof what, "tg_cross_entropy logits %s ignore %d", tg_describe(logits, dims, sizeof dims),
             (int)params.ignore_index);
    tt_gradcheck(what, ce_loss, inputs, 2, &params, NULL);
    tg_tape_free(tape);
}

Test(cross_entropy, gradcheck_random_shapes_with_ignored_rows)
{
    for (int ndim = 1; ndim <= 3; ndim++)
        for (int strided = 0; strided < 2; strided++) {
            int64_t shape[3];
            for (int i = 0; i < ndim; i++) shape[i] = tt_randint(1, 4);
            shape[ndim - 1] = tt_randint(1, 7);
            check_case(ndim, shape, strided, 0.3);
        }
}

Test(cross_entropy, gradcheck_one_class_and_all_rows_ignored)
{
    int64_t one_class[2] = {tt_randint(1, 5), 1}, shape[2] = {tt_randint(1, 5), tt_randint(1, 6)};
    check_case(2, one_class, false, 0.3);
    check_case(2, shape, true, 1.0);
}

Test(cross_entropy, values_and_gradients_match_naive_formula)
{
    for (int strided = 0; strided < 2; strided++) {
        tg_tape *tape = tg_tape_create();
        int64_t shape[3] = {tt_randint(1, 4), tt_randint(2, 5), tt_randint(1, 12)}, v = shape[2];
        tg_tensor *logits = strided ? tt_strided_leaf(tape, TG_F64, 3, shape) : tt_leaf(tape, TG_F64, 3, shape);
        tg_fill_normal(logits, tt_rng(), 0.0, 3.0);
        tg_tensor *targets = lc_random_targets(tape, 2, shape, (int32_t)v, strided, IGNORE, 0.3);
        int64_t n_valid;
        double expected = naive_cross_entropy(logits, targets, IGNORE, &n_valid);
        tg_tensor *loss = tg_cross_entropy(tape, logits, targets, IGNORE);
        cr_assert(loss, "%s", tg_last_error());
        cr_assert(loss->ndim == 1 && loss->shape[0] == 1 && loss->dtype == TG_F64);
        cr_assert_float_eq(tg_item(loss), expected, 1e-12 * (1 + fabs(expected)));
        cr_assert_eq(tg_backward(tape, loss), TG_OK, "%s", tg_last_error());
        for (int64_t i = 0; i < tg_numel(logits); i++) {
            double g = naive_gradient(logits, targets, IGNORE, n_valid, i / v, i % v);
            cr_assert_float_eq(tg_get_flat(logits->grad, i), g, 1e-14, "element %lld", (long long)i);
        }
        tg_tape_free(tape);
    }
}

Test(cross_entropy, all_ignored_gives_zero_loss_and_zero_gradient)
{
    tg_tape *tape = tg_tape_create();
    int64_t shape[2] = {tt_randint(1, 6), tt_randint(1, 6)};
    tg_tensor *logits = tt_leaf(tape, TG_F64, 2, shape);
    tg_tensor *targets = lc_random_targets(tape, 1, shape, (int32_t)shape[1], false, IGNORE, 1.0);
    tg_tensor *loss = tg_cross_entropy(tape, logits, targets, IGNORE);
    cr_assert(loss, "%s", tg_last_error());
    cr_assert_eq(tg_item(loss), 0.0);
    cr_assert_eq(tg_backward(tape, loss), TG_OK, "%s", tg_last_error());
    for (int64_t i = 0; i < tg_numel(logits); i++) cr_assert_eq(tg_get_flat(logits->grad, i), 0.0);
    tg_tape_free(tape);
}

Test(cross_entropy, one_dimensional_logits_and_zero_rows)
{
    tg_tape *tape = tg_tape_create();
    /* 1-D logits are one row; the target is a (1) tensor. */
    int64_t v = tt_randint(1, 9);
    tg_tensor *logits = tt_leaf(tape, TG_F64, 1, &v);
    tg_tensor *target = tt_ids(tape, 1, (int64_t[]){1}, (int32_t)v);
    int64_t n_valid;
    double expected = naive_cross_entropy(logits, target, IGNORE, &n_valid);
    tg_tensor *loss = tg_cross_entropy(tape, logits, target, IGNORE);
    cr_assert(loss, "%s", tg_last_error());
    cr_assert_float_eq(tg_item(loss), expected, 1e-12 * (1 + fabs(expected)));
    /* No rows at all: the loss is 0, like all rows ignored. */
    tg_tensor *none = tt_leaf(tape, TG_F64, 2, (int64_t[]){0, v});
    tg_tensor *no_targets = tt_ids(tape, 1, (int64_t[]){0}, 1);
    tg_tensor *zero = tg_cross_entropy(tape, none, no_targets, IGNORE);
    cr_assert(zero, "%s", tg_last_error());
    cr_assert_eq(tg_item(zero), 0.0);
    cr_assert_eq(tg_backward(tape, zero), TG_OK, "%s", tg_last_error());
    tg_tape_free(tape);
}

Test(cross_entropy, stable_with_huge_logits)
{
    const tg_dtype dtypes[3] = {TG_F64, TG_F32, TG_BF16};
    const double tolerance[3] = {1e-12, 1e-6, 1e-2};
    for (int k = 0; k < 3; k++) {
        tg_tape *tape = tg_tape_create();
        const double values[3][3] = {{1e4, -1e4, 0}, {-1e4, 1e4, 1e4}, {0, 0, 1e4}};
        const int32_t classes[3] = {1, 2, IGNORE};
        tg_tensor *x64 = tg_from_data(tape, TG_F64, TG_DEVICE_CPU, 2, (int64_t[]){3, 3}, values);
        tg_tensor *logits = tg_empty(tape, dtypes[k], TG_DEVICE_CPU, 2, (int64_t[]){3, 3});
        tg_copy(logits, x64);
        tg_set_requires_grad(logits, true);
        tg_tensor *targets = tg_from_data(tape, TG_I32, TG_DEVICE_CPU, 1, (int64_t[]){3}, classes);
        tg_tensor *loss = tg_cross_entropy(tape, logits, targets, IGNORE);
        cr_assert(loss, "%s", tg_last_error());
        /* Row 0 costs x00 − x01 (2e4 before rounding), row 1 costs log 2; two rows count. */
        double expected = (tg_get_flat(logits, 0) - tg_get_flat(logits, 1) + log(2.0)) / 2;
        const char *name = tg_dtype_name(dtypes[k]);
        cr_assert(isfinite(tg_item(loss)), "%s", name);
        cr_assert_float_eq(tg_item(loss), expected, tolerance[k] * expected, "%s: %g vs %g", name, tg_item(loss),
                           expected);
        if (dtypes[k] == TG_F64) cr_assert_float_eq(tg_item(loss), (2e4 + log(2.0)) / 2, 1e-12 * 1e4);
        cr_assert_eq(tg_backward(tape, loss), TG_OK, "%s", tg_last_error());
        const double expected_grad[9] = {0.5, -0.5, 0, 0, 0.25, -0.25, 0, 0, 0};
        for (int i = 0; i < 9; i++) {
            double g = tg_get_flat(logits->grad, i);
            cr_assert(isfinite(g), "%s %d", name, i);
            cr_assert_float_eq(g, expected_grad[i], tolerance[k], "%s %d: %g", name, i, g);
        }
        tg_tape_free(tape);
    }
}

Test(cross_entropy, f32_and_bf16_match_f64)
{
    tg_tape *tape = tg_tape_create();
    int64_t shape[2] = {tt_randint(2, 10), tt_randint(2, 40)};
    tg_tensor *x64 = tt_randn(tape, TG_F64, 2, shape);
    tg_tensor *targets = lc_random_targets(tape, 1, shape, (int32_t)shape[1], false, IGNORE, 0.2);
    const tg_dtype dtypes[2] = {TG_F32, TG_BF16};
    const double tolerance[2] = {1e-5, 1e-2};
    for (int d = 0; d < 2; d++) {
        /* The narrow logits, and an f64 leaf holding exactly their values as the reference. */
        tg_tensor *x = tg_empty(tape, dtypes[d], TG_DEVICE_CPU, 2, shape);
        tg_tensor *xr = tg_empty(tape, TG_F64, TG_DEVICE_CPU, 2, shape);
        tg_copy(x, x64);
        tg_copy(xr, x);
        tg_set_requires_grad(x, true);
        tg_set_requires_grad(xr, true);
        tg_tensor *loss = tg_cross_entropy(tape, x, targets, IGNORE);
        tg_tensor *ref = tg_cross_entropy(tape, xr, targets, IGNORE);
        cr_assert(loss && ref, "%s", tg_last_error());
        cr_assert_eq(loss->dtype, dtypes[d]);
        cr_assert_eq(tg_backward(tape, loss), TG_OK, "%s", tg_last_error());
        cr_assert_eq(tg_backward(tape, ref), TG_OK, "%s", tg_last_error());
        const char *name = tg_dtype_name(dtypes[d]);
        cr_assert_lt(tt_rel_error(loss, ref), tolerance[d], "%s loss", name);
        cr_assert_lt(tt_rel_error(x->grad, xr->grad), tolerance[d], "%s dlogits", name);
    }
    tg_tape_free(tape);
}

Test(cross_entropy, bad_inputs_fail_cleanly)
{
    tg_tape *tape = tg_tape_create();
    const char *op = "tg_cross_entropy";
    tg_tensor *logits = tt_leaf(tape, TG_F32, 3, (int64_t[]){2, 3, 5});
    tg_tensor *targets = tt_ids(tape, 2, (int64_t[]){2, 3}, 5);
    tg_tensor *wrong_shape = tt_ids(tape, 2, (int64_t[]){3, 2}, 5);
    tg_tensor *wrong_rank = tt_ids(tape, 3, (int64_t[]){2, 3, 1}, 5);
    tg_tensor *float_targets = tt_randn(tape, TG_F32, 2, (int64_t[]){2, 3});
    tg_tensor *int_logits = tt_ids(tape, 3, (int64_t[]){2, 3, 5}, 5);
    tg_tensor *no_classes = tt_randn(tape, TG_F32, 3, (int64_t[]){2, 3, 0});
    tg_tensor *row = tt_randn(tape, TG_F32, 1, (int64_t[]){5}), *two_targets = tt_ids(tape, 1, (int64_t[]){2}, 5);
    tg_tensor *cuda_logits = tt_fake_cuda(tape, logits), *cuda_targets = tt_fake_cuda(tape, targets);
    tt_state s = tt_snapshot(tape);
    tt_assert_failed_with(&s, tg_cross_entropy(NULL, logits, targets, IGNORE), op, "tape", NULL);
    tt_assert_failed_with(&s, tg_cross_entropy(tape, NULL, targets, IGNORE), op, "logits", "NULL", NULL);
    tt_assert_failed_with(&s, tg_cross_entropy(tape, logits, NULL, IGNORE), op, "targets", "NULL", NULL);
    tt_assert_failed_with(&s, tg_cross_entropy(tape, int_logits, targets, IGNORE), op, "float", "i32", NULL);
    tt_assert_failed_with(&s, tg_cross_entropy(tape, logits, float_targets, IGNORE), op, "i32", "f32", NULL);
    tt_assert_failed_with(&s, tg_cross_entropy(tape, logits, wrong_shape, IGNORE), op, "[2, 3]", "[3, 2]", NULL);
    tt_assert_failed_with(&s, tg_cross_entropy(tape, logits, wrong_rank, IGNORE), op, "[2, 3]", "[2, 3, 1]", NULL);
    tt_assert_failed_with(&s, tg_cross_entropy(tape, row, two_targets, IGNORE), op, "[1]", "[2]", NULL);
    tt_assert_failed_with(&s, tg_cross_entropy(tape, no_classes, targets, IGNORE), op, "V = 0", NULL);
    tt_assert_failed_with(&s, tg_cross_entropy(tape, cuda_logits, cuda_targets, IGNORE), op, "cuda", NULL);
    tt_assert_failed_with(&s, tg_cross_entropy(tape, logits, cuda_targets, IGNORE), op, "device", "cuda", NULL);
    tt_assert_failed_with(&s, tg_cross_entropy(tape, cuda_logits, targets, IGNORE), op, "cuda", NULL);

    /* Out-of-range targets: every one is checked (the bad one is last), a negative one
     * that is not ignore_index is bad, and the message names value, position and V. */
    int32_t *t = tg_data(targets);
    for (int i = 0; i < 6; i++) t[i] = i % 2 ? IGNORE : i % 5;
    t[5] = 5;
    tt_assert_failed_with(&s, tg_cross_entropy(tape, logits, targets, IGNORE), op, "target 5", "[1, 2]", "V = 5", NULL);
    t[5] = IGNORE;
    t[3] = -3;
    tt_assert_failed_with(&s, tg_cross_entropy(tape, logits, targets, IGNORE), op, "target -3", "[1, 0]", "V = 5",
                          NULL);
    /* With ignore_index -3, the -3 passes and the first -100 is the bad one. */
    tt_assert_failed_with(&s, tg_cross_entropy(tape, logits, targets, -3), op, "target -100", "[0, 1]", NULL);
    for (int i = 0; i < 6; i++) t[i] = i % 2 ? -3 : i % 5;
    cr_assert(tg_cross_entropy(tape, logits, targets, -3), "%s", tg_last_error());
    for (int64_t i = 0; i < 30; i++) cr_assert_eq(tg_get_flat(logits->grad, i), 0.0);
    tg_tape_free(tape);
}

/* ---- the arg-max's hits ---------------------------------------------------------------------- */

/* [correct, scored] by a plain loop over the rows: the first index of the largest non-NaN logit. */
static void naive_hits(const tg_tensor *logits, const tg_tensor *targets, int32_t ignore_index, double *hits)
{
    int64_t v = logits->shape[logits->ndim - 1], rows = tg_numel(logits) / v;
    hits[0] = hits[1] = 0;
    for (int64_t r = 0; r < rows; r++) {
        int32_t t = (int32_t)tg_get_flat(targets, r);
        if (t == ignore_index) continue;
        int64_t best = -1;
        for (int64_t j = 0; j < v; j++) {
            double x = tg_get_flat(logits, r * v + j);
            if (!isnan(x) && (best < 0 || x > tg_get_flat(logits, r * v + best))) best = j;
        }
        hits[1] += 1;
        hits[0] += best == t;
    }
}

Test(count_correct, matches_a_plain_loop_with_ties_nans_and_ignored_rows)
{
    for (int round = 0; round < 20; round++) {
        tg_tape *tape = tg_tape_create();
        const int64_t shape[3] = {tt_randint(1, 4), tt_randint(1, 9), tt_randint(1, 12)};
        tg_tensor *logits = tt_randn(tape, TG_F32, 3, shape);
        for (int64_t i = 0; i < tg_numel(logits); i++) { /* ties and NaNs, where an arg-max can go wrong */
            int64_t kind = tt_randint(0, 9);
            if (kind == 0)
                tg_set_flat(logits, i, 1.5);
            else if (kind == 1)
                tg_set_flat(logits, i, NAN);
        }
        tg_tensor *targets = lc_random_targets(tape, 2, shape, (int32_t)shape[2], round % 2 == 1, -100, 0.2);
        /* a few "right" rows for sure: the target is the first largest */
        double expected[2];
        naive_hits(logits, targets, -100, expected);
        tg_tensor *hits = tg_count_correct(tape, logits, targets, -100);
        cr_assert(hits, "%s", tg_last_error());
        cr_assert(hits->dtype == TG_F64 && hits->ndim == 1 && hits->shape[0] == 2);
        cr_assert(tg_get_flat(hits, 0) == expected[0] && tg_get_flat(hits, 1) == expected[1],
                  "got %g of %g, expected %g of %g (seed %llu)", tg_get_flat(hits, 0), tg_get_flat(hits, 1),
                  expected[0], expected[1], (unsigned long long)tt_seed());
        cr_assert_eq(tg_tape_node_count(tape), 0, "the count is not recorded");
        tg_tape_free(tape);
    }
}

Test(count_correct, bad_inputs_fail_cleanly)
{
    tg_tape *tape = tg_tape_create();
    tg_tensor *logits = tt_leaf(tape, TG_F32, 2, (int64_t[]){3, 4});
    tg_tensor *wrong_shape = tt_ids(tape, 1, (int64_t[]){2}, 4);
    tt_state s = tt_snapshot(tape);
    tt_assert_failed_with(&s, tg_count_correct(tape, logits, wrong_shape, -100), "tg_count_correct", "leading shape",
                          NULL);
    tt_assert_failed_with(&s, tg_count_correct(tape, logits, NULL, -100), "tg_count_correct", "NULL", NULL);
    tg_tape_free(tape);
}
