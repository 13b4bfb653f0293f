/* The tape: recording, the reverse walk, accumulation, no-grad mode, detach, reset,
 * seeded backward, the layout of an activation's gradient, and a 100,000-op chain (backward
 * must not recurse). */
#include "test_util.h"

#include "core/internal.h"

#include <math.h>
#include <string.h>

Test(tape, chain_of_100000_ops_does_not_overflow_the_stack)
{
    tg_tape *tape = tg_tape_create();
    const int n_ops = 100000;
    tg_tensor *x = tt_leaf(tape, TG_F64, 1, (int64_t[]){1});
    tg_set_flat(x, 0, 0.3);
    /* y = x·a^n with a = 1 + 1e-6: dy/dx = a^n, computed through 100,000 nodes. */
    double a = 1.0 + 1e-6;
    tg_tensor *y = x;
    for (int i = 0; i < n_ops; i++) y = tg_scale(tape, y, a);
    cr_assert(y, "%s", tg_last_error());
    cr_assert_eq(tg_tape_node_count(tape), (size_t)n_ops);
    cr_assert_eq(tg_backward(tape, y), TG_OK, "%s", tg_last_error());
    cr_assert_float_eq(tg_get_flat(x->grad, 0), pow(a, n_ops), 1e-9);
    tg_tape_free(tape);
}

Test(tape, gradients_accumulate_across_uses_and_calls)
{
    tg_tape *tape = tg_tape_create();
    int64_t n = tt_randint(1, 30);
    tg_tensor *x = tt_leaf(tape, TG_F64, 1, &n), *y = tt_leaf(tape, TG_F64, 1, &n);
    /* f = Σ x·y + x: df/dx = y + 1, df/dy = x. Two backward passes double the leaves' grads. */
    tg_tensor *f = tg_sum_all(tape, tg_add(tape, tg_mul(tape, x, y), x));
    cr_assert_eq(tg_backward(tape, f), TG_OK, "%s", tg_last_error());
    cr_assert_eq(tg_backward(tape, f), TG_OK, "%s", tg_last_error());
    for (int64_t i = 0; i < n; i++) {
        cr_assert_float_eq(tg_get_flat(x->grad, i), 2 * (tg_get_flat(y, i) + 1), 1e-12);
        cr_assert_float_eq(tg_get_flat(y->grad, i), 2 * tg_get_flat(x, i), 1e-12);
    }
    tg_zero_grad(x);
    for (int64_t i = 0; i < n; i++) cr_assert_eq(tg_get_flat(x->grad, i), 0.0);
    tg_tape_free(tape);
}

Test(tape, diamond_graph_sums_both_paths)
{
    tg_tape *tape = tg_tape_create();
    tg_tensor *x = tt_leaf(tape, TG_F64, 1, (int64_t[]){1});
    /* u = exp(x), v = tanh(x), f = u·v: f' = exp(x)·tanh(x) + exp(x)·(1 − tanh²(x)) */
    tg_tensor *f = tg_mul(tape, tg_exp(tape, x), tg_tanh(tape, x));
    cr_assert_eq(tg_backward(tape, f), TG_OK, "%s", tg_last_error());
    double v = tg_item(x), t = tanh(v);
    cr_assert_float_eq(tg_item(x->grad), exp(v) * t + exp(v) * (1 - t * t), 1e-12);
    tg_tape_free(tape);
}

Test(tape, no_grad_mode_records_nothing)
{
    tg_tape *tape = tg_tape_create();
    tg_tensor *x = tt_leaf(tape, TG_F64, 1, (int64_t[]){4});
    cr_assert(tg_tape_set_grad_enabled(tape, false));
    tg_tensor *y = tg_exp(tape, x);
    cr_assert_eq(tg_tape_node_count(tape), 0u);
    cr_assert(!y->requires_grad);
    cr_assert_neq(tg_backward(tape, tg_sum_all(tape, y)), TG_OK);
    cr_assert(strstr(tg_last_error(), "does not require a gradient"), "%s", tg_last_error());
    cr_assert(!tg_tape_set_grad_enabled(tape, true));
    cr_assert(tg_exp(tape, x)->requires_grad);
    cr_assert_eq(tg_tape_node_count(tape), 1u);
    tg_tape_free(tape);
}

Test(tape, detach_stops_gradients_and_shares_data)
{
    tg_tape *tape = tg_tape_create();
    tg_tensor *x = tt_leaf(tape, TG_F64, 1, (int64_t[]){3});
    tg_tensor *d = tg_detach(tape, x);
    cr_assert(!d->requires_grad);
    tg_set_flat(x, 1, 42.0);
    cr_assert_eq(tg_get_flat(d, 1), 42.0, "a detached view shares its data");
    /* f = Σ x·detach(x): df/dx = detach(x) only (the detached path gives nothing). */
    tg_tensor *f = tg_sum_all(tape, tg_mul(tape, x, d));
    cr_assert_eq(tg_backward(tape, f), TG_OK, "%s", tg_last_error());
    for (int64_t i = 0; i < 3; i++) cr_assert_eq(tg_get_flat(x->grad, i), tg_get_flat(x, i));
    tg_tape_free(tape);
}

Test(tape, backward_with_given_output_gradient)
{
    tg_tape *tape = tg_tape_create();
    int64_t shape[2] = {tt_randint(1, 4), tt_randint(1, 6)};
    tg_tensor *x = tt_leaf(tape, TG_F64, 2, shape);
    tg_tensor *y = tg_tanh(tape, x);
    tg_tensor *dy = tt_randn(tape, TG_F64, 2, shape);
    cr_assert_eq(tg_backward_with_grad(tape, y, dy), TG_OK, "%s", tg_last_error());
    for (int64_t i = 0; i < tg_numel(x); i++) {
        double t = tanh(tg_get_flat(x, i));
        cr_assert_float_eq(tg_get_flat(x->grad, i), tg_get_flat(dy, i) * (1 - t * t), 1e-12);
    }
    tg_tensor *wrong = tt_randn(tape, TG_F64, 1, (int64_t[]){7});
    tt_state s = tt_snapshot(tape);
    tt_assert_status_failed(&s, tg_backward_with_grad(tape, y, wrong), "tg_backward");
    tg_tensor *not_scalar = tg_tanh(tape, tt_leaf(tape, TG_F64, 2, (int64_t[]){2, 3}));
    s = tt_snapshot(tape);
    tt_assert_status_failed(&s, tg_backward(tape, not_scalar), "tg_backward");
    tg_tape_free(tape);
}

/* An op whose output is x's values in a view of a buffer of `span` elements with the given
 * strides; its backward notes the strides of the gradient it is handed and passes the
 * gradient through. */
static int64_t handed_strides[3];
enum { LAYOUT_B = 2, LAYOUT_C = 3, LAYOUT_L = 5 }; /* the shape of those outputs */

static tg_status strided_copy_backward(tg_node *node, tg_tensor *const *dy, tg_tensor **dx)
{
    memcpy(handed_strides, dy[0]->strides, sizeof handed_strides);
    dx[0] = tg_empty_like(node->tape, node->inputs[0]);
    return tg_copy(dx[0], dy[0]);
}

static tg_tensor *strided_copy(tg_tape *tape, tg_tensor *x, const int64_t *strides, int64_t span)
{
    tg_tensor *base = tg_empty(tape, x->dtype, x->device, 1, &span);
    tg_tensor *y = tg_view(tape, base, 3, x->shape, strides, 0);
    cr_assert_eq(tg_copy(y, x), TG_OK, "%s", tg_last_error());
    tg_op_record record = {"strided_copy", strided_copy_backward, &x, 1, &y, 1, NULL, 0};
    cr_assert_eq(tg_record(tape, &record), TG_OK, "%s", tg_last_error());
    return y;
}

/* The strides handed to strided_copy's backward when its output, laid out as given, is
 * used by tg_mul (whose gradient is dense channel-first); x's gradient is checked too. */
static void check_handed_layout(const int64_t *strides, int64_t span, const int64_t *expected)
{
    tg_tape *tape = tg_tape_create();
    const int64_t shape[3] = {LAYOUT_B, LAYOUT_C, LAYOUT_L};
    tg_tensor *x = tt_leaf(tape, TG_F64, 3, shape), *r = tt_randn(tape, TG_F64, 3, shape);
    tg_tensor *y = strided_copy(tape, x, strides, span);
    handed_strides[0] = handed_strides[1] = handed_strides[2] = 0;
    cr_assert_eq(tg_backward(tape, tg_sum_all(tape, tg_mul(tape, y, r))), TG_OK, "%s", tg_last_error());
    cr_assert(memcmp(handed_strides, expected, sizeof handed_strides) == 0,
              "strides handed to the backward: %lld %lld %lld, expected %lld %lld %lld", (long long)handed_strides[0],
              (long long)handed_strides[1], (long long)handed_strides[2], (long long)expected[0],
              (long long)expected[1], (long long)expected[2]);
    for (int64_t i = 0; i < tg_numel(x); i++) /* d Σ y·r / dx = r */
        cr_assert_eq(tg_get_flat(x->grad, i), tg_get_flat(r, i), "element %lld", (long long)i);
    tg_tape_free(tape);
}

/* An activation dense in another order than the contiguous one (channel-last, as a
 * channel-last conv1d's output) hands its producer a gradient in its own layout; one with
 * gaps (channel-last, every other element) a contiguous gradient, as before. */
Test(tape, an_activation_gradient_is_laid_out_like_a_dense_activation)
{
    const int64_t B = LAYOUT_B, C = LAYOUT_C, L = LAYOUT_L;
    check_handed_layout((int64_t[]){L * C, 1, C}, B * C * L, (int64_t[]){L * C, 1, C});
    check_handed_layout((int64_t[]){2 * L * C, 2, 2 * C}, 2 * B * C * L, (int64_t[]){C * L, L, 1});
}

/* y = p + q as an op whose backward writes p's gradient in place (tg_node_grad_buffer)
 * and hands the same tensor on as q's; it fails instead when pair_sum_fails is set. */
static bool pair_sum_fails;

static tg_status pair_sum_backward(tg_node *node, tg_tensor *const *dy, tg_tensor **dx)
{
    tg_tensor *g = tg_node_grad_buffer(node, 0);
    if (!g || tg_copy(g, dy[0]) != TG_OK) return TG_ERR_NOMEM;
    dx[0] = dx[1] = g;
    return pair_sum_fails ? tg_set_error(TG_ERR_STATE, "pair_sum backward: asked to fail") : TG_OK;
}

static tg_tensor *pair_sum(tg_tape *tape, tg_tensor *p, tg_tensor *q)
{
    bool was_enabled = tg_tape_set_grad_enabled(tape, false); /* the values, unrecorded */
    tg_tensor *y = tg_add(tape, p, q), *inputs[2] = {p, q};
    tg_tape_set_grad_enabled(tape, was_enabled);
    cr_assert(y, "%s", tg_last_error());
    tg_op_record record = {"pair_sum", pair_sum_backward, inputs, 2, &y, 1, NULL, 0};
    cr_assert_eq(tg_record(tape, &record), TG_OK, "%s", tg_last_error());
    return y;
}

/* loss = Σ r1·pair_sum(a, a) + Σ r2·(3a) with a = tanh(x): the first backward to reach a
 * (3a's, recorded last) writes a's gradient; pair_sum's in-place gradient and the same tensor
 * as its second input's must both still count: dx = (2·r1 + 3·r2)·(1 − a²). */
static void check_in_place_sum(tg_tape *tape, tg_tensor *x, tg_tensor *r1, tg_tensor *r2)
{
    tg_tensor *a = tg_tanh(tape, x);
    tg_tensor *loss = tg_add(tape, tg_sum_all(tape, tg_mul(tape, pair_sum(tape, a, a), r1)),
                             tg_sum_all(tape, tg_mul(tape, tg_scale(tape, a, 3.0), r2)));
    tg_zero_grad(x);
    tg_status status = tg_backward(tape, loss);
    if (pair_sum_fails) {
        cr_assert_neq(status, TG_OK);
        cr_assert(strstr(tg_last_error(), "asked to fail"), "%s", tg_last_error());
        return;
    }
    cr_assert_eq(status, TG_OK, "%s", tg_last_error());
    for (int64_t i = 0; i < tg_numel(x); i++) {
        double av = tanh(tg_get_flat(x, i));
        double expected = (2 * tg_get_flat(r1, i) + 3 * tg_get_flat(r2, i)) * (1 - av * av);
        cr_assert_float_eq(tg_get_flat(x->grad, i), expected, 1e-12, "element %lld", (long long)i);
    }
}

Test(tape, gradients_written_in_place_still_sum_with_the_others)
{
    tg_tape *tape = tg_tape_create();
    int64_t shape[2] = {tt_randint(1, 5), tt_randint(1, 7)};
    tg_tensor *x = tt_leaf(tape, TG_F64, 2, shape), *r1 = tt_randn(tape, TG_F64, 2, shape);
    tg_tensor *r2 = tt_randn(tape, TG_F64, 2, shape);
    pair_sum_fails = false;
    check_in_place_sum(tape, x, r1, r2);
    /* a backward that fails after writing in place leaves nothing behind for the next */
    pair_sum_fails = true;
    check_in_place_sum(tape, x, r1, r2);
    pair_sum_fails = false;
    check_in_place_sum(tape, x, r1, r2);
    tg_tape_free(tape);
}

Test(tape, backward_rejects_bad_arguments)
{
    tg_tape *tape = tg_tape_create();
    tg_tensor *x = tt_leaf(tape, TG_F64, 1, (int64_t[]){2});
    tg_tensor *loss = tg_sum_all(tape, x);
    cr_assert_neq(tg_backward(NULL, loss), TG_OK);
    cr_assert(strstr(tg_last_error(), "tg_backward"));
    cr_assert_neq(tg_backward(tape, NULL), TG_OK);
    cr_assert(strstr(tg_last_error(), "NULL"));
    tg_tensor *not_scalar = tg_exp(tape, x);
    cr_assert_neq(tg_backward(tape, not_scalar), TG_OK);
    cr_assert(strstr(tg_last_error(), "one element"), "%s", tg_last_error());
    /* a loss recorded on another tape: refused, and nothing reaches x */
    tg_tape *other = tg_tape_create();
    tg_tensor *x_other = tt_leaf(other, TG_F64, 1, (int64_t[]){2});
    cr_assert_neq(tg_backward(tape, tg_sum_all(other, tg_exp(other, x_other))), TG_OK);
    cr_assert(strstr(tg_last_error(), "another tape"), "%s", tg_last_error());
    for (int64_t i = 0; i < 2; i++) cr_assert_eq(tg_get_flat(x_other->grad, i), 0.0);
    tg_tape_free(other);
    tg_tape_free(tape);
}

Test(tape, reset_frees_the_step_and_reuses_addresses)
{
    tg_tape *tape = tg_tape_create();
    tg_tensor *w = tg_tensor_new(TG_F32, TG_DEVICE_CPU, 2, (int64_t[]){64, 64});
    tg_set_requires_grad(w, true);
    const void *first_addresses[3] = {0};
    size_t bytes_after_first = 0;
    for (int step = 0; step < 4; step++) {
        /* A step that outgrows the first arena chunk, to exercise the merge on reset. */
        tg_tensor *a = tg_full(tape, TG_F32, TG_DEVICE_CPU, 2, (int64_t[]){512, 512}, 1.0);
        tg_tensor *h = tg_mul(tape, tg_exp(tape, a), tg_sum_all(tape, w));
        tg_tensor *loss = tg_mean_all(tape, h);
        cr_assert_eq(tg_backward(tape, loss), TG_OK, "%s", tg_last_error());
        const void *addresses[3] = {tg_data(a), tg_data(h), tg_data(loss)};
        if (step == 1) {
            for (int i = 0; i < 3; i++) first_addresses[i] = addresses[i];
            bytes_after_first = tg_tape_bytes_in_use(tape);
        } else if (step > 1) {
            for (int i = 0; i < 3; i++)
                cr_assert_eq(addresses[i], first_addresses[i], "step %d tensor %d moved", step, i);
            cr_assert_eq(tg_tape_bytes_in_use(tape), bytes_after_first);
        }
        tg_tape_reset(tape);
        cr_assert_eq(tg_tape_bytes_in_use(tape), 0u);
        cr_assert_eq(tg_tape_node_count(tape), 0u);
    }
    /* The leaf outlives the tape's steps, with four steps' gradients summed. */
    cr_assert_float_eq(tg_get_flat(w->grad, 0), 4.0 * exp(1.0), 1e-4, "got %g", tg_get_flat(w->grad, 0));
    tg_tensor_free(w);
    tg_tape_free(tape);
}
