/* The gradient checker itself: it passes correct gradients, catches a wrong one and
 * reports where, covers large inputs through random directions, and rejects bad use. */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* A user-level op whose backward is wrong by a chosen factor at one chosen element (or
 * at every element): y = x², backward claims dx = 2x·dy except at `bad_index`. */
#define EVERY_ELEMENT (-2)
typedef struct {
    int64_t bad_index;
    double factor;
} faulty;

static tg_status faulty_square_backward(tg_node *node, tg_tensor *const *dy, tg_tensor **dx)
{
    const faulty *f = node->ctx;
    tg_tensor *x = node->inputs[0];
    dx[0] = tg_empty_like(node->tape, x);
    for (int64_t i = 0; i < tg_numel(x); i++) {
        double g = 2 * tg_get_flat(x, i) * tg_get_flat(dy[0], i);
        bool wrong = i == f->bad_index || f->bad_index == EVERY_ELEMENT;
        tg_set_flat(dx[0], i, wrong ? g * f->factor : g);
    }
    return TG_OK;
}

static tg_tensor *faulty_square(tg_tape *tape, tg_tensor *x, faulty f)
{
    tg_tensor *y = tg_empty_like(tape, x);
    for (int64_t i = 0; i < tg_numel(x); i++) tg_set_flat(y, i, tg_get_flat(x, i) * tg_get_flat(x, i));
    tg_op_record record = {"faulty_square", faulty_square_backward, &x, 1, &y, 1, &f, sizeof f};
    return tg_record(tape, &record) == TG_OK ? y : NULL;
}

static tg_tensor *faulty_loss(tg_tape *tape, tg_tensor *const *in, int n, void *user)
{
    (void)n;
    return tg_sum_all(tape, tg_mul(tape, faulty_square(tape, in[0], *(faulty *)user), in[1]));
}

Test(gradcheck, passes_a_correct_gradient_and_pinpoints_a_wrong_one)
{
    tg_tape *tape = tg_tape_create();
    int64_t n = tt_randint(2, 50);
    tg_tensor *x = tt_leaf(tape, TG_F64, 1, &n), *w = tt_randn(tape, TG_F64, 1, &n);
    for (int64_t i = 0; i < n; i++) /* keep |2x·w| well above atol so a wrong factor shows */
        tg_set_flat(x, i, copysign(0.5 + fabs(tg_get_flat(x, i)), tg_get_flat(x, i)));
    for (int64_t i = 0; i < n; i++) tg_set_flat(w, i, copysign(0.5 + fabs(tg_get_flat(w, i)), tg_get_flat(w, i)));
    tg_tensor *inputs[2] = {x, w};
    tg_gradcheck_result result;
    faulty ok = {-1, 1.0};
    cr_assert_eq(tg_gradcheck(faulty_loss, inputs, 2, &ok, NULL, &result), TG_OK, "%s", tg_last_error());
    cr_assert(result.passed, "%s", result.message);
    cr_assert_eq(result.n_checked, n);

    faulty bad = {tt_randint(0, n - 1), 1.01};
    cr_assert_eq(tg_gradcheck(faulty_loss, inputs, 2, &bad, NULL, &result), TG_OK, "%s", tg_last_error());
    cr_assert(!result.passed, "a 1%% error must fail: %s", result.message);
    cr_assert_eq(result.worst_input, 0);
    cr_assert_eq(result.worst_index, bad.bad_index, "%s", result.message);
    cr_assert_float_eq(result.analytic, result.numeric * 1.01, 1e-6 * fabs(result.numeric) + 1e-9);
    cr_assert(strstr(result.message, "FAILED"), "%s", result.message);
    /* The inputs are restored after all the perturbations. */
    tg_gradcheck_result again;
    tg_gradcheck(faulty_loss, inputs, 2, &ok, NULL, &again);
    cr_assert(again.passed);
    tg_tape_free(tape);
}

Test(gradcheck, large_inputs_use_random_directions)
{
    tg_tape *tape = tg_tape_create();
    int64_t n = 1000;
    tg_tensor *x = tt_leaf(tape, TG_F64, 1, &n), *w = tt_randn(tape, TG_F64, 1, &n);
    tg_tensor *inputs[2] = {x, w};
    tg_gradcheck_options opt = tg_gradcheck_defaults();
    opt.n_directions = 3;
    tg_gradcheck_result result;
    faulty ok = {-1, 1.0};
    cr_assert_eq(tg_gradcheck(faulty_loss, inputs, 2, &ok, &opt, &result), TG_OK);
    cr_assert(result.passed, "%s", result.message);
    cr_assert_eq(result.n_checked, 3);
    cr_assert_eq(result.worst_index, -1);
    /* A gradient 2% off everywhere fails along the random directions. */
    faulty bad = {EVERY_ELEMENT, 1.02};
    cr_assert_eq(tg_gradcheck(faulty_loss, inputs, 2, &bad, &opt, &result), TG_OK);
    cr_assert(!result.passed, "%s", result.message);
    cr_assert_eq(result.worst_index, -1);
    tg_tape_free(tape);
}

static tg_tensor *sum_loss(tg_tape *tape, tg_tensor *const *in, int n, void *user)
{
    (void)n;
    (void)user;
    return tg_sum_all(tape, in[0]);
}

static tg_tensor *failing_loss(tg_tape *tape, tg_tensor *const *in, int n, void *user)
{
    (void)n;
    (void)user;
    return tg_add(tape, in[0], NULL);
}

Test(gradcheck, rejects_bad_use)
{
    tg_tape *tape = tg_tape_create();
    tg_tensor *x32 = tt_leaf(tape, TG_F32, 1, (int64_t[]){3});
    tg_tensor *x64 = tt_leaf(tape, TG_F64, 1, (int64_t[]){3});
    tg_tensor *plain = tt_randn(tape, TG_F64, 1, (int64_t[]){3});
    tg_gradcheck_result result;
    cr_assert_eq(tg_gradcheck(sum_loss, &x32, 1, NULL, NULL, &result), TG_ERR_DTYPE);
    cr_assert(strstr(tg_last_error(), "f64") && strstr(tg_last_error(), "f32"), "%s", tg_last_error());
    cr_assert_eq(tg_gradcheck(sum_loss, &plain, 1, NULL, NULL, &result), TG_ERR_INVALID);
    cr_assert(strstr(tg_last_error(), "none of the 1 inputs requires"), "%s", tg_last_error());
    cr_assert_eq(tg_gradcheck(NULL, &x64, 1, NULL, NULL, &result), TG_ERR_INVALID);
    cr_assert_neq(tg_gradcheck(failing_loss, &x64, 1, NULL, NULL, &result), TG_OK);
    cr_assert(strstr(tg_last_error(), "tg_add"), "the function's own error is kept: %s", tg_last_error());
    tg_gradcheck_options opt = tg_gradcheck_defaults();
    opt.eps = 0;
    cr_assert_eq(tg_gradcheck(sum_loss, &x64, 1, NULL, &opt, &result), TG_ERR_INVALID);
    tg_tape_free(tape);
}
