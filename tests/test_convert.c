/* Copies that are ops: tg_contiguous, tg_to_dtype, tg_to_device. Their gradients (a copy
 * back, in the input's dtype and on its device) and their bad-input matrix. */
#include "test_util.h"

#include "core/internal.h"

static tg_tensor *contiguous_loss(tg_tape *tape, tg_tensor *const *in, int n, void *user)
{
    (void)n;
    (void)user;
    tg_tensor *c = tg_contiguous(tape, in[0]);
    return c && tg_is_contiguous(c) ? tg_sum_all(tape, tg_mul(tape, tg_tanh(tape, c), in[1])) : NULL;
}

static tg_tensor *round_trip_loss(tg_tape *tape, tg_tensor *const *in, int n, void *user)
{
    (void)n;
    tg_dtype via = *(const tg_dtype *)user; /* f64 → via → f64: the gradient crosses both ways */
    tg_tensor *y = tg_to_dtype(tape, tg_to_dtype(tape, in[0], via), TG_F64);
    return tg_sum_all(tape, tg_mul(tape, tg_exp(tape, y), in[1]));
}

Test(convert, gradients_copy_back)
{
    tg_tape *tape = tg_tape_create();
    int64_t shape[3] = {tt_randint(1, 3), tt_randint(1, 4), tt_randint(1, 5)};
    tg_tensor *x = tt_strided_leaf(tape, TG_F64, 3, shape), *w = tt_randn(tape, TG_F64, 3, shape);
    tg_tensor *inputs[2] = {x, w};
    tt_gradcheck("tg_contiguous of a strided view", contiguous_loss, inputs, 2, NULL, NULL);
    tg_dtype via = TG_F64;
    tt_gradcheck("tg_to_dtype f64 → f64", round_trip_loss, inputs, 2, &via, NULL);
    /* to f32: the gradient comes back as an f64 copy of dy */
    tg_zero_grad(x);
    tg_tensor *y32 = tg_to_dtype(tape, x, TG_F32);
    cr_assert(y32 && y32->dtype == TG_F32 && tg_is_contiguous(y32), "%s", tg_last_error());
    tg_tensor *dy = tt_randn(tape, TG_F32, 3, shape);
    cr_assert_eq(tg_backward_with_grad(tape, y32, dy), TG_OK, "%s", tg_last_error());
    cr_assert_eq(x->grad->dtype, TG_F64);
    cr_assert_lt(tt_rel_error(x->grad, dy), 1e-12);
    tg_tape_free(tape);
}

Test(convert, bad_inputs_fail_cleanly)
{
    tg_tape *tape = tg_tape_create();
    tg_tensor *x = tt_leaf(tape, TG_F32, 2, (int64_t[]){2, 3});
    tg_tensor *ids = tt_ids(tape, 2, (int64_t[]){2, 3}, 5);
    tg_tensor *fake = tt_fake_cuda(tape, x);
    tt_state s = tt_snapshot(tape);
    tt_assert_failed_with(&s, tg_contiguous(NULL, x), "tg_contiguous", "tape", NULL);
    tt_assert_failed_with(&s, tg_contiguous(tape, NULL), "tg_contiguous", "NULL", NULL);
    tt_assert_failed_with(&s, tg_contiguous(tape, fake), "tg_contiguous", "cuda", NULL);
    tt_assert_failed_with(&s, tg_to_dtype(tape, NULL, TG_F64), "tg_to_dtype", "NULL", NULL);
    tt_assert_failed_with(&s, tg_to_dtype(tape, ids, TG_F32), "tg_to_dtype", "i32", NULL);
    tt_assert_failed_with(&s, tg_to_dtype(tape, x, TG_I32), "tg_to_dtype", "float dtype", "i32", NULL);
    tt_assert_failed_with(&s, tg_to_dtype(tape, x, (tg_dtype)99), "tg_to_dtype", "float dtype", NULL);
    tt_assert_failed_with(&s, tg_to_device(tape, NULL, TG_DEVICE_CPU), "tg_to_device", "NULL", NULL);
    tt_assert_failed_with(&s, tg_to_device(tape, fake, TG_DEVICE_CPU), "tg_to_device", "cuda", NULL);
    if (!tg_device_available(TG_DEVICE_CUDA))
        tt_assert_failed_with(&s, tg_to_device(tape, x, TG_DEVICE_CUDA), "tg_to_device", "cuda", "not available", NULL);
    cr_assert_eq(tg_to_device(tape, x, TG_DEVICE_CPU), x, "already there: the same tensor");
    cr_assert_eq(tg_tape_node_count(tape), s.nodes);
    for (int64_t i = 0; i < 6; i++) cr_assert_eq(tg_get_flat(x->grad, i), 0.0);
    tg_tape_free(tape);
}
