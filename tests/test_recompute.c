/* Activations given back after the forward and recomputed in the backward
 * (tg_recompute_in_backward): the gradients equal those of a run that keeps them, bit for
 * bit; a released tensor reads as NaN and no op may read it; a second backward recomputes
 * again; bad arguments and a recompute function that returns the wrong tensor fail clearly.
 * And tensors no backward reads, given back for good (tg_give_back). */
#include "test_util.h"

#include <math.h>
#include <string.h>

/* h = tanh(x·s) and g = exp(x) are what the backward needs again; recomputed from x. */
typedef struct {
    tg_tensor *x;
    double scale;
} model_inputs;

static tg_status recompute_h_and_g(tg_tape *tape, const void *ctx, tg_tensor **out)
{
    const model_inputs *in = ctx;
    out[0] = tg_tanh(tape, tg_scale(tape, in->x, in->scale));
    out[1] = tg_exp(tape, in->x);
    return out[0] && out[1] ? TG_OK : TG_ERR_INVALID;
}

/* loss = Σ (h·g)² + Σ h·w with h, g as above: mul and tanh read h and g in their backward.
 * With `release`, h and g are given back once the forward no longer reads them. */
static tg_tensor *forward(tg_tape *tape, tg_tensor *x, tg_tensor *w, double scale, bool release, tg_tensor **h_out)
{
    tg_tensor *h = tg_tanh(tape, tg_scale(tape, x, scale));
    tg_tensor *g = tg_exp(tape, x);
    tg_tensor *hg = tg_mul(tape, h, g);
    tg_tensor *hw = tg_mul(tape, h, w);
    cr_assert(hg && hw, "%s", tg_last_error());
    if (release) {
        model_inputs in = {x, scale};
        cr_assert_eq(tg_recompute_in_backward(tape, 2, (tg_tensor *[]){h, g}, recompute_h_and_g, &in, sizeof in), TG_OK,
                     "%s", tg_last_error());
    }
    if (h_out) *h_out = h;
    return tg_add(tape, tg_sum_all(tape, tg_mul(tape, hg, hg)), tg_sum_all(tape, hw));
}

static bool all_nan(const tg_tensor *t)
{
    for (int64_t i = 0; i < tg_numel(t); i++)
        if (!isnan(tg_get_flat(t, i))) return false;
    return true;
}

Test(recompute, gradients_equal_those_of_a_run_that_keeps_the_tensors)
{
    const tg_dtype dtypes[3] = {TG_F64, TG_F32, TG_BF16};
    for (int k = 0; k < 3; k++) {
        tg_tape *tape = tg_tape_create();
        const int64_t shape[3] = {tt_randint(1, 3), tt_randint(1, 9), tt_randint(1, 40)};
        tg_tensor *x = tt_leaf(tape, dtypes[k], 3, shape), *w = tt_leaf(tape, dtypes[k], 3, shape);
        const double scale = 0.5 + tt_randint(0, 10) / 10.0;
        tg_tensor *grads[2][2], *h;
        double losses[2];
        for (int release = 0; release < 2; release++) {
            tg_zero_grad(x);
            tg_zero_grad(w);
            tg_tensor *loss = forward(tape, x, w, scale, release, &h);
            cr_assert(loss, "%s", tg_last_error());
            if (release) cr_assert(all_nan(h), "a released CPU tensor reads as NaN");
            cr_assert_eq(tg_backward(tape, loss), TG_OK, "%s", tg_last_error());
            if (release) cr_assert(all_nan(h), "given back again once its producer's backward has run");
            losses[release] = tg_item(loss);
            grads[release][0] = tt_f64_copy(tape, x->grad, false);
            grads[release][1] = tt_f64_copy(tape, w->grad, false);
        }
        cr_assert(memcmp(&losses[0], &losses[1], sizeof(double)) == 0);
        for (int i = 0; i < 2; i++)
            for (int64_t e = 0; e < tg_numel(x); e++) {
                double kept = tg_get_flat(grads[0][i], e), again = tg_get_flat(grads[1][i], e);
                cr_assert(memcmp(&kept, &again, sizeof kept) == 0 && isfinite(kept),
                          "%s: gradient %d element %lld: %.17g kept, %.17g recomputed", tg_dtype_name(dtypes[k]), i,
                          (long long)e, kept, again);
            }
        tg_tape_free(tape);
    }
}

Test(recompute, a_second_backward_recomputes_again)
{
    tg_tape *tape = tg_tape_create();
    const int64_t shape[1] = {tt_randint(1, 50)};
    tg_tensor *x = tt_leaf(tape, TG_F64, 1, shape), *w = tt_leaf(tape, TG_F64, 1, shape);
    tg_tensor *loss = forward(tape, x, w, 0.7, true, NULL);
    cr_assert_eq(tg_backward(tape, loss), TG_OK, "%s", tg_last_error());
    tg_tensor *once = tt_f64_copy(tape, x->grad, false);
    cr_assert_eq(tg_backward(tape, loss), TG_OK, "%s", tg_last_error());
    for (int64_t e = 0; e < shape[0]; e++)
        cr_assert_float_eq(tg_get_flat(x->grad, e), 2 * tg_get_flat(once, e), 1e-12, "two backwards add up");
    tg_tape_free(tape);
}

Test(recompute, reading_a_released_tensor_fails_clearly)
{
    tg_tape *tape = tg_tape_create();
    tg_tensor *x = tt_leaf(tape, TG_F32, 2, (int64_t[]){3, 4});
    tg_tensor *h = tg_exp(tape, x);
    model_inputs in = {x, 1.0};
    cr_assert_eq(tg_recompute_in_backward(tape, 1, &h, recompute_h_and_g, &in, sizeof in), TG_OK);
    tt_state s = tt_snapshot(tape);
    tt_assert_failed_with(&s, tg_add(tape, h, x), "tg_add", "released", NULL);
    tt_assert_status_failed(&s, tg_recompute_in_backward(tape, 1, &h, recompute_h_and_g, &in, sizeof in),
                            "tg_recompute_in_backward");
    tg_tape_free(tape);
}

/* Returns tensors of the wrong shape: the backward stops with a message naming both. */
static tg_status recompute_wrong_shape(tg_tape *tape, const void *ctx, tg_tensor **out)
{
    const model_inputs *in = ctx;
    out[0] = tg_tanh(tape, tg_reshape(tape, in->x, 1, (int64_t[]){tg_numel(in->x)}));
    out[1] = tg_exp(tape, in->x);
    return TG_OK;
}

Test(recompute, a_recompute_function_giving_the_wrong_tensor_fails_the_backward)
{
    tg_tape *tape = tg_tape_create();
    tg_tensor *x = tt_leaf(tape, TG_F64, 2, (int64_t[]){2, 5}), *w = tt_leaf(tape, TG_F64, 2, (int64_t[]){2, 5});
    tg_tensor *h = tg_tanh(tape, tg_scale(tape, x, 1.0)), *g = tg_exp(tape, x);
    tg_tensor *loss = tg_sum_all(tape, tg_mul(tape, tg_mul(tape, h, g), w));
    model_inputs in = {x, 1.0};
    cr_assert_eq(tg_recompute_in_backward(tape, 2, (tg_tensor *[]){h, g}, recompute_wrong_shape, &in, sizeof in),
                 TG_OK);
    cr_assert_neq(tg_backward(tape, loss), TG_OK);
    cr_assert(strstr(tg_last_error(), "tg_recompute_in_backward") && strstr(tg_last_error(), "differs"), "%s",
              tg_last_error());
    tg_tape_free(tape);
}

Test(recompute, bad_arguments_are_refused_and_change_nothing)
{
    tg_tape *tape = tg_tape_create(), *other = tg_tape_create();
    tg_tensor *x = tt_leaf(tape, TG_F32, 2, (int64_t[]){4, 6});
    tg_tensor *h = tg_exp(tape, x), *g = tg_tanh(tape, x);
    tg_tensor *part = tg_slice(tape, h, 0, 1, 3, 1),
              *elsewhere = tg_exp(other, tt_leaf(other, TG_F32, 1, (int64_t[]){3}));
    tg_tensor *ids = tg_zeros(tape, TG_I32, TG_DEVICE_CPU, 1, (int64_t[]){3});
    cr_assert(part && elsewhere && ids, "%s", tg_last_error());
    tg_tensor *h_before = tt_f64_copy(tape, h, false);
    model_inputs in = {x, 1.0};
    const struct {
        int n;
        tg_tensor *tensors[2];
        tg_recompute_fn fn;
        const char *word;
    } cases[] = {
        {0, {h}, recompute_h_and_g, "n = 0"},
        {9, {h}, recompute_h_and_g, "n = 9"},
        {1, {h}, NULL, "fn NULL"},
        {1, {x}, recompute_h_and_g, "leaf"},
        {1, {part}, recompute_h_and_g, "view of part"},
        {1, {elsewhere}, recompute_h_and_g, "not an activation"},
        {1, {ids}, recompute_h_and_g, "float"},
        {2, {h, h}, recompute_h_and_g, "earlier entry"},
        {2, {g, NULL}, recompute_h_and_g, "tensors[1]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tt_state s = tt_snapshot(tape);
        tg_status status = tg_recompute_in_backward(tape, cases[i].n, cases[i].tensors, cases[i].fn, &in, sizeof in);
        tt_assert_status_failed(&s, status, "tg_recompute_in_backward");
        cr_assert(strstr(tg_last_error(), cases[i].word), "case %zu: %s", i, tg_last_error());
    }
    tt_state s = tt_snapshot(tape);
    tt_assert_status_failed(&s, tg_recompute_in_backward(tape, 1, &h, recompute_h_and_g, NULL, 8),
                            "tg_recompute_in_backward");
    for (int64_t e = 0; e < tg_numel(h); e++)
        cr_assert_eq(tg_get_flat(h, e), tg_get_flat(h_before, e), "a refused call leaves the tensors be");
    tg_tape_free(other);
    tg_tape_free(tape);
}

Test(recompute, a_tape_that_does_not_record_releases_nothing)
{
    tg_tape *tape = tg_tape_create();
    tg_tensor *x = tt_leaf(tape, TG_F64, 1, (int64_t[]){5});
    tg_tape_set_grad_enabled(tape, false);
    tg_tensor *h = tg_exp(tape, x);
    model_inputs in = {x, 1.0};
    const size_t nodes = tg_tape_node_count(tape);
    cr_assert_eq(tg_recompute_in_backward(tape, 1, &h, recompute_h_and_g, &in, sizeof in), TG_OK);
    cr_assert_eq(tg_tape_node_count(tape), nodes);
    for (int64_t e = 0; e < 5; e++) cr_assert_eq(tg_get_flat(h, e), exp(tg_get_flat(x, e)));
    tg_tape_free(tape);
}

/* The terms of a fused add-and-norm: its backward reads only the sum, so giving them back
 * changes nothing, with recording on or off. */
Test(recompute, giving_back_what_no_backward_reads_changes_no_gradient)
{
    tg_tape *tape = tg_tape_create();
    const int64_t shape[3] = {tt_randint(1, 3), tt_randint(1, 7), tt_randint(2, 16)};
    tg_tensor *a = tt_leaf(tape, TG_F32, 3, shape), *b = tt_leaf(tape, TG_F32, 3, shape);
    tg_tensor *w = tt_leaf(tape, TG_F32, 1, &shape[2]);
    tg_tensor *grads[2];
    for (int give = 0; give < 2; give++) {
        tg_zero_grad(a);
        tg_zero_grad(w);
        tg_tensor *term = tg_exp(tape, b), *sum;
        tg_tensor *normed = tg_add_rmsnorm(tape, a, term, w, 1e-5, &sum);
        cr_assert(normed, "%s", tg_last_error());
        if (give) {
            cr_assert_eq(tg_give_back(tape, 1, &term), TG_OK, "%s", tg_last_error());
            cr_assert(all_nan(term));
            tt_state s = tt_snapshot(tape);
            tt_assert_failed_with(&s, tg_mul(tape, term, term), "tg_mul", "released", NULL);
        }
        tg_tensor *loss = tg_sum_all(tape, tg_mul(tape, normed, tg_tanh(tape, sum)));
        cr_assert_eq(tg_backward(tape, loss), TG_OK, "%s", tg_last_error());
        grads[give] = tt_f64_copy(tape, a->grad, false);
    }
    for (int64_t e = 0; e < tg_numel(a); e++) cr_assert_eq(tg_get_flat(grads[0], e), tg_get_flat(grads[1], e));
    tt_state s = tt_snapshot(tape);
    tt_assert_status_failed(&s, tg_give_back(tape, 0, &a), "tg_give_back");
    tt_assert_status_failed(&s, tg_give_back(tape, 1, &a), "tg_give_back");
    tg_tape_set_grad_enabled(tape, false);
    tg_tensor *off = tg_exp(tape, a);
    cr_assert_eq(tg_give_back(tape, 1, &off), TG_OK, "%s", tg_last_error());
    cr_assert(all_nan(off));
    tg_tape_free(tape);
}
