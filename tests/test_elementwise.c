/* Elementwise ops: gradient checks on random shapes (broadcast, strided), values
 * against their definitions, and the bad-input matrix. */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef tg_tensor *(*unary_op_fn)(tg_tape *, tg_tensor *);
typedef tg_tensor *(*binary_op_fn)(tg_tape *, tg_tensor *, tg_tensor *);

static const struct {
    const char *name;
    unary_op_fn fn;
    double (*reference)(double);
    bool positive_input; /* log needs x > 0 */
} unary_ops[] = {
    {"tg_neg", tg_neg, NULL, false},
    {"tg_exp", tg_exp, exp, false},
    {"tg_log", tg_log, log, true},
    {"tg_tanh", tg_tanh, tanh, false},
    {"tg_sigmoid", tg_sigmoid, NULL, false},
    {"tg_silu", tg_silu, NULL, false},
    {"tg_softplus", tg_softplus, NULL, false},
    {"tg_relu", tg_relu, NULL, false},
};
#define N_UNARY (sizeof unary_ops / sizeof unary_ops[0])

static const struct {
    const char *name;
    binary_op_fn fn;
} binary_ops[] = {{"tg_add", tg_add}, {"tg_sub", tg_sub}, {"tg_mul", tg_mul}, {"tg_div", tg_div}};
#define N_BINARY (sizeof binary_ops / sizeof binary_ops[0])

/* loss = Σ op(x) · w, with w a fixed random weight so every gradient entry differs. */
static tg_tensor *unary_loss(tg_tape *tape, tg_tensor *const *in, int n, void *user)
{
    (void)n;
    unary_op_fn fn = (unary_op_fn)user;
    return tg_sum_all(tape, tg_mul(tape, fn(tape, in[0]), in[1]));
}

static void keep_away_from_kinks(tg_tensor *x, bool positive)
{
    /* relu's kink at 0 and log's domain: move values to |x| ≥ 0.1 (and x > 0 for log). */
    for (int64_t i = 0; i < tg_numel(x); i++) {
        double v = tg_get_flat(x, i);
        if (positive)
            v = fabs(v) + 0.1;
        else if (fabs(v) < 0.1)
            v = v < 0 ? -0.1 - fabs(v) : 0.1 + v;
        tg_set_flat(x, i, v);
    }
}

Test(elementwise, unary_gradcheck_random_shapes)
{
    for (size_t k = 0; k < N_UNARY; k++) {
        for (int strided = 0; strided < 2; strided++) {
            tg_tape *tape = tg_tape_create();
            int64_t shape[3] = {tt_randint(1, 4), tt_randint(1, 5), tt_randint(1, 6)};
            tg_tensor *x = strided ? tt_strided_leaf(tape, TG_F64, 3, shape) : tt_leaf(tape, TG_F64, 3, shape);
            keep_away_from_kinks(x, unary_ops[k].positive_input);
            tg_tensor *w = tt_randn(tape, TG_F64, 3, shape);
            tg_tensor *inputs[2] = {x, w};
            char what[64];
            snprintf(what, sizeof what, "%s%s", unary_ops[k].name, strided ? " strided" : "");
            tt_gradcheck(what, unary_loss, inputs, 2, (void *)unary_ops[k].fn, NULL);
            tg_tape_free(tape);
        }
    }
}

static tg_tensor *scale_loss(tg_tape *tape, tg_tensor *const *in, int n, void *user)
{
    (void)n;
    return tg_sum_all(tape, tg_mul(tape, tg_scale(tape, in[0], *(double *)user), in[1]));
}

Test(elementwise, scale_gradcheck_and_values)
{
    tg_tape *tape = tg_tape_create();
    int64_t shape[2] = {tt_randint(1, 5), tt_randint(1, 7)};
    tg_tensor *x = tt_leaf(tape, TG_F64, 2, shape), *w = tt_randn(tape, TG_F64, 2, shape);
    double factor = tg_rng_normal(tt_rng()) * 3;
    tg_tensor *inputs[2] = {x, w};
    tt_gradcheck("tg_scale", scale_loss, inputs, 2, &factor, NULL);
    tg_tensor *y = tg_scale(tape, x, factor);
    for (int64_t i = 0; i < tg_numel(x); i++) cr_assert_float_eq(tg_get_flat(y, i), factor * tg_get_flat(x, i), 1e-12);
    tg_tape_free(tape);
}

Test(elementwise, unary_values_match_definitions)
{
    tg_tape *tape = tg_tape_create();
    int64_t shape[1] = {tt_randint(5, 50)};
    tg_tensor *x = tt_randn(tape, TG_F64, 1, shape);
    keep_away_from_kinks(x, false);
    tg_tensor *neg = tg_neg(tape, x), *sig = tg_sigmoid(tape, x), *silu = tg_silu(tape, x);
    tg_tensor *sp = tg_softplus(tape, x), *relu = tg_relu(tape, x), *ex = tg_exp(tape, x), *th = tg_tanh(tape, x);
    for (int64_t i = 0; i < shape[0]; i++) {
        double v = tg_get_flat(x, i), s = 1 / (1 + exp(-v));
        cr_assert_float_eq(tg_get_flat(neg, i), -v, 1e-12);
        cr_assert_float_eq(tg_get_flat(sig, i), s, 1e-12);
        cr_assert_float_eq(tg_get_flat(silu, i), v * s, 1e-12);
        cr_assert_float_eq(tg_get_flat(sp, i), log(1 + exp(v)), 1e-12);
        cr_assert_float_eq(tg_get_flat(relu, i), v > 0 ? v : 0, 1e-12);
        cr_assert_float_eq(tg_get_flat(ex, i), exp(v), 1e-9 * exp(v));
        cr_assert_float_eq(tg_get_flat(th, i), tanh(v), 1e-12);
    }
    tg_tape_free(tape);
}

Test(elementwise, stable_at_extremes)
{
    tg_tape *tape = tg_tape_create();
    double values[4] = {-800, -50, 50, 800};
    tg_tensor *x = tg_from_data(tape, TG_F64, TG_DEVICE_CPU, 1, (int64_t[]){4}, values);
    tg_tensor *sig = tg_sigmoid(tape, x), *sp = tg_softplus(tape, x), *silu = tg_silu(tape, x);
    for (int i = 0; i < 4; i++) {
        cr_assert(isfinite(tg_get_flat(sig, i)) && isfinite(tg_get_flat(sp, i)) && isfinite(tg_get_flat(silu, i)));
    }
    cr_assert_float_eq(tg_get_flat(sp, 3), 800.0, 1e-9);
    cr_assert_float_eq(tg_get_flat(sp, 0), 0.0, 1e-300);
    tg_tape_free(tape);
}

static tg_tensor *binary_loss(tg_tape *tape, tg_tensor *const *in, int n, void *user)
{
    (void)n;
    binary_op_fn fn = (binary_op_fn)user;
    tg_tensor *y = fn(tape, in[0], in[1]);
    return tg_sum_all(tape, tg_mul(tape, y, in[2]));
}

/* Random broadcastable shapes: b drops leading dims and/or has 1s where a does not. */
static void random_broadcast_shapes(int64_t *a, int *ndim_b, int64_t *b)
{
    for (int i = 0; i < 3; i++) a[i] = tt_randint(1, 4);
    *ndim_b = (int)tt_randint(1, 3);
    for (int i = 0; i < *ndim_b; i++) b[i] = tt_randint(0, 1) ? a[3 - *ndim_b + i] : 1;
}

Test(elementwise, binary_gradcheck_broadcast)
{
    for (size_t k = 0; k < N_BINARY; k++) {
        for (int swap = 0; swap < 2; swap++) {
            tg_tape *tape = tg_tape_create();
            int64_t sa[3], sb[3];
            int nb;
            random_broadcast_shapes(sa, &nb, sb);
            tg_tensor *big = tt_leaf(tape, TG_F64, 3, sa), *small = tt_leaf(tape, TG_F64, nb, sb);
            keep_away_from_kinks(small, true); /* a divisor away from 0 */
            if (swap) keep_away_from_kinks(big, true);
            tg_tensor *a = swap ? small : big, *b = swap ? big : small;
            tg_tensor *w = tt_randn(tape, TG_F64, 3, sa);
            tg_tensor *inputs[3] = {a, b, w};
            tt_gradcheck(binary_ops[k].name, binary_loss, inputs, 3, (void *)binary_ops[k].fn, NULL);
            tg_tape_free(tape);
        }
    }
}

Test(elementwise, binary_gradcheck_strided_inputs)
{
    for (size_t k = 0; k < N_BINARY; k++) {
        tg_tape *tape = tg_tape_create();
        int64_t shape[2] = {tt_randint(1, 5), tt_randint(1, 5)};
        tg_tensor *a = tt_strided_leaf(tape, TG_F64, 2, shape), *b = tt_strided_leaf(tape, TG_F64, 2, shape);
        keep_away_from_kinks(b, true);
        tg_tensor *w = tt_randn(tape, TG_F64, 2, shape);
        tg_tensor *inputs[3] = {a, b, w};
        tt_gradcheck(binary_ops[k].name, binary_loss, inputs, 3, (void *)binary_ops[k].fn, NULL);
        tg_tape_free(tape);
    }
}

Test(elementwise, same_tensor_used_twice_accumulates)
{
    tg_tape *tape = tg_tape_create();
    int64_t shape[1] = {tt_randint(1, 20)};
    tg_tensor *x = tt_leaf(tape, TG_F64, 1, shape);
    /* loss = Σ (x·x + x): gradient 2x + 1, with x reaching the loss three times. */
    tg_tensor *loss = tg_sum_all(tape, tg_add(tape, tg_mul(tape, x, x), x));
    cr_assert_eq(tg_backward(tape, loss), TG_OK, "%s", tg_last_error());
    for (int64_t i = 0; i < shape[0]; i++)
        cr_assert_float_eq(tg_get_flat(x->grad, i), 2 * tg_get_flat(x, i) + 1, 1e-12);
    tg_tape_free(tape);
}

Test(elementwise, f32_and_bf16_forward_match_f64)
{
    tg_tape *tape = tg_tape_create();
    int64_t shape[2] = {tt_randint(1, 8), tt_randint(1, 40)};
    tg_tensor *a64 = tt_randn(tape, TG_F64, 2, shape), *b64 = tt_randn(tape, TG_F64, 2, shape);
    const tg_dtype dtypes[2] = {TG_F32, TG_BF16};
    const double tolerance[2] = {1e-6, 1e-2};
    for (int d = 0; d < 2; d++) {
        tg_tensor *a = tg_to_dtype(tape, a64, dtypes[d]), *b = tg_to_dtype(tape, b64, dtypes[d]);
        tg_tensor *y = tg_silu(tape, tg_mul(tape, a, b));
        tg_tensor *ref = tg_silu(tape, tg_mul(tape, tg_to_dtype(tape, a, TG_F64), tg_to_dtype(tape, b, TG_F64)));
        cr_assert_eq(y->dtype, dtypes[d]);
        cr_assert_lt(tt_rel_error(y, ref), tolerance[d], "%s", tg_dtype_name(dtypes[d]));
    }
    tg_tape_free(tape);
}

/* ---- bad input ---------------------------------------------------------------------- */

Test(elementwise, bad_inputs_fail_cleanly)
{
    tg_tape *tape = tg_tape_create();
    tg_tensor *a = tt_leaf(tape, TG_F32, 2, (int64_t[]){2, 3});
    tg_tensor *b = tt_randn(tape, TG_F32, 2, (int64_t[]){4, 3});
    tg_tensor *d = tt_randn(tape, TG_F64, 2, (int64_t[]){2, 3});
    tg_tensor *ids = tt_ids(tape, 2, (int64_t[]){2, 3}, 5);
    tg_tensor *cuda = tt_fake_cuda(tape, a);
    tt_state s = tt_snapshot(tape);
    for (size_t k = 0; k < N_BINARY; k++) {
        const char *op = binary_ops[k].name;
        binary_op_fn fn = binary_ops[k].fn;
        tt_assert_failed_with(&s, fn(tape, a, NULL), op, "NULL", NULL);
        tt_assert_failed_with(&s, fn(tape, NULL, a), op, "NULL", NULL);
        tt_assert_failed_with(&s, fn(NULL, a, a), op, "tape", NULL);
        tt_assert_failed_with(&s, fn(tape, a, b), op, "broadcast", "[2, 3]", "[4, 3]", NULL);
        tt_assert_failed_with(&s, fn(tape, a, d), op, "dtype", "f32", "f64", NULL);
        tt_assert_failed_with(&s, fn(tape, a, ids), op, "i32", NULL);
        tt_assert_failed_with(&s, fn(tape, a, cuda), op, "device", "cuda", NULL);
    }
    for (size_t k = 0; k < N_UNARY; k++) {
        const char *op = unary_ops[k].name;
        tt_assert_failed_with(&s, unary_ops[k].fn(tape, NULL), op, "NULL", NULL);
        tt_assert_failed_with(&s, unary_ops[k].fn(NULL, a), op, "tape", NULL);
        tt_assert_failed_with(&s, unary_ops[k].fn(tape, ids), op, "float", "i32", NULL);
        tt_assert_failed_with(&s, unary_ops[k].fn(tape, cuda), op, "cuda", NULL);
    }
    tt_assert_failed_with(&s, tg_scale(tape, ids, 2.0), "tg_scale", "i32", NULL);
    /* a's gradient is untouched by all of that */
    for (int64_t i = 0; i < 6; i++) cr_assert_eq(tg_get_flat(a->grad, i), 0.0);
    tg_tape_free(tape);
}
