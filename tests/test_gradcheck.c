/* The gradient checker itself: it passes correct gradients, catches a wrong one and
 * reports where, covers large inputs through random directions, catches each bug class a
 * student plants with a message that points at it, and rejects bad use. */
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

/* ---- the bugs a student plants ------------------------------------------------------------
 * One elementwise op on a (rows, cols) input, y = f(x), with a backward that holds one of the
 * classic mistakes; the loss is Σ y·w for a random w, so that every dy differs. */
typedef enum { CORRECT, DROPPED_FACTOR, WRONG_SIGN_BRANCH, BRANCH_ON_OUTPUT, LAST_UNWRITTEN, WRONG_STRIDE } bug;

/* f per bug: x² for DROPPED_FACTOR and WRONG_STRIDE, |x| for WRONG_SIGN_BRANCH, x − 1 above 0 and
 * x/2 below for BRANCH_ON_OUTPUT, tanh otherwise. */
static double f_of(bug b, double x)
{
    switch (b) {
    case DROPPED_FACTOR:
    case WRONG_STRIDE: return x * x;
    case WRONG_SIGN_BRANCH: return fabs(x);
    case BRANCH_ON_OUTPUT: return x > 0 ? x - 1 : 0.5 * x;
    default: return tanh(x);
    }
}

static double slope_of(bug b, double x, double y)
{
    switch (b) {
    case DROPPED_FACTOR: return x; /* the 2 of 2x is gone */
    case WRONG_STRIDE: return 2 * x;
    case WRONG_SIGN_BRANCH: return 1.0;              /* x < 0 should give −1 */
    case BRANCH_ON_OUTPUT: return y > 0 ? 1.0 : 0.5; /* should test x > 0 */
    default: return 1 - y * y;
    }
}

static tg_status student_backward(tg_node *node, tg_tensor *const *dy, tg_tensor **dx)
{
    bug b = *(const bug *)node->ctx;
    tg_tensor *x = node->inputs[0], *y = node->outputs[0];
    const int64_t rows = x->shape[0], cols = x->shape[1], n = rows * cols;
    dx[0] = tg_empty_like(node->tape, x);
    for (int64_t e = 0; e < (b == LAST_UNWRITTEN ? n - 1 : n); e++) {
        /* WRONG_STRIDE walks dy as if it were stored column by column */
        int64_t from = b == WRONG_STRIDE ? (e % cols) * rows + e / cols : e;
        double xe = tg_get_flat(x, e), ye = tg_get_flat(y, e);
        tg_set_flat(dx[0], e, slope_of(b, xe, ye) * tg_get_flat(dy[0], from));
    }
    return TG_OK;
}

static tg_tensor *student_loss(tg_tape *tape, tg_tensor *const *in, int n, void *user)
{
    (void)n;
    bug b = *(const bug *)user;
    tg_tensor *x = in[0], *y = tg_empty_like(tape, x);
    for (int64_t e = 0; e < tg_numel(x); e++) tg_set_flat(y, e, f_of(b, tg_get_flat(x, e)));
    tg_op_record record = {"student", student_backward, &x, 1, &y, 1, &b, sizeof b};
    if (tg_record(tape, &record) != TG_OK) return NULL;
    return tg_sum_all(tape, tg_mul(tape, y, in[1]));
}

/* Runs the check on a fresh (3, 5) input drawn from ±[0.2, 1.8], away from every kink. */
static tg_gradcheck_result check_student(bug b)
{
    tg_tape *tape = tg_tape_create();
    const int64_t shape[2] = {3, 5};
    tg_tensor *x = tt_leaf(tape, TG_F64, 2, shape), *w = tt_randn(tape, TG_F64, 2, shape);
    for (int64_t e = 0; e < 15; e++) {
        double u = tt_randint(0, 1000) / 1000.0;
        tg_set_flat(x, e, (e % 2 ? -1 : 1) * (0.2 + 1.6 * u));
        tg_set_flat(w, e, copysign(0.5 + fabs(tg_get_flat(w, e)), tg_get_flat(w, e)));
    }
    tg_set_flat(x, 1, -0.3), tg_set_flat(x, 2, 0.5), tg_set_flat(x, 4, 1.5); /* each sign, each side of 1 */
    tg_tensor *inputs[2] = {x, w};
    tg_gradcheck_result result;
    cr_assert_eq(tg_gradcheck(student_loss, inputs, 2, &b, NULL, &result), TG_OK, "%s", tg_last_error());
    tg_tape_free(tape);
    return result;
}

Test(gradcheck, the_correct_student_op_passes)
{
    tg_gradcheck_result r = check_student(CORRECT);
    cr_assert(r.passed, "%s", r.message);
    cr_assert_eq(r.n_failed, 0);
    cr_assert_str_eq(r.pattern, "");
}

Test(gradcheck, a_dropped_factor_fails_every_element)
{
    tg_gradcheck_result r = check_student(DROPPED_FACTOR);
    cr_assert(!r.passed && r.n_failed == 15, "%s", r.message);
    cr_assert(strstr(r.pattern, "inputs[0]: 15 of 15 elements (every one)"), "%s", r.message);
    cr_assert_float_eq(r.analytic * 2, r.numeric, 1e-6 * fabs(r.numeric), "%s", r.message);
}

Test(gradcheck, a_wrong_sign_on_one_branch_names_the_sign)
{
    tg_gradcheck_result r = check_student(WRONG_SIGN_BRANCH);
    cr_assert(!r.passed, "%s", r.message);
    cr_assert(strstr(r.pattern, "all at negative input values"), "%s", r.message);
    cr_assert_lt(r.worst_input_value, 0.0, "%s", r.message);
}

Test(gradcheck, branching_on_the_output_shows_in_the_input_range)
{
    tg_gradcheck_result r = check_student(BRANCH_ON_OUTPUT);
    cr_assert(!r.passed, "%s", r.message);
    /* Only inputs in (0, 1] take the wrong branch: the pattern's range says so. */
    cr_assert(strstr(r.pattern, "all at positive input values"), "%s", r.message);
    cr_assert(r.worst_input_value > 0 && r.worst_input_value <= 1, "%s", r.message);
    cr_assert_lt(r.n_failed, 15, "%s", r.message);
    cr_log_info("%s", r.message);
}

Test(gradcheck, an_unwritten_last_element_fails_loudly)
{
    tg_gradcheck_result r = check_student(LAST_UNWRITTEN);
    cr_assert(!r.passed && r.n_failed == 1, "%s", r.message);
    cr_assert(strstr(r.pattern, "(only the last one)"), "%s", r.message);
    cr_assert(isnan(r.analytic), "the unwritten element should read NaN: %s", r.message);
    cr_assert(r.worst_position[0] == 2 && r.worst_position[1] == 4, "%s", r.message);
    cr_assert(strstr(r.message, "inputs[0][2, 4]"), "%s", r.message);
}

Test(gradcheck, a_wrong_stride_fails_off_the_shared_positions)
{
    tg_gradcheck_result r = check_student(WRONG_STRIDE);
    /* Column-major and row-major order agree only at elements 0, 7 and 14 of (3, 5). */
    cr_assert(!r.passed && r.n_failed >= 10 && r.n_failed <= 13, "%s", r.message);
    cr_assert(strstr(r.message, "worst at inputs[0]["), "the worst names a multi-index: %s", r.message);
    int64_t flat = r.worst_position[0] * 5 + r.worst_position[1];
    cr_assert_eq(flat, r.worst_index);
    cr_assert(flat != 0 && flat != 7 && flat != 14, "%s", r.message);
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

static tg_tensor *sum_of_squares_f32(tg_tape *tape, tg_tensor *const *in, int n, void *user)
{
    (void)n, (void)user;
    return tg_sum_all(tape, tg_mul(tape, in[0], in[0]));
}

/* Without a GPU the CUDA check says so, naming itself, and leaves the result alone. */
Test(gradcheck, the_cuda_check_needs_a_gpu)
{
    if (tg_device_available(TG_DEVICE_CUDA)) cr_skip_test("a GPU is present: tests/test_cuda_gradcheck.c checks it");
    tg_tape *tape = tg_tape_create();
    tg_tensor *x = tt_leaf(tape, TG_F32, 1, (int64_t[]){4});
    tg_gradcheck_result result = {.n_checked = 7};
    cr_assert_eq(tg_gradcheck_cuda(sum_of_squares_f32, &x, 1, NULL, NULL, &result), TG_ERR_DEVICE);
    cr_assert(strstr(tg_last_error(), "tg_gradcheck_cuda") && strstr(tg_last_error(), "CUDA"), "%s", tg_last_error());
    cr_assert_eq(result.n_checked, 7);
    tg_tape_free(tape);
}
