/* The parameter store: one contiguous buffer for data and one for gradients, names,
 * growth that keeps tensors valid, zeroing and the SGD step. */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

Test(params, one_contiguous_buffer_survives_growth)
{
    tg_params *params = tg_params_create(TG_DEVICE_CPU);
    tg_tensor *first = tg_params_add(params, "first", TG_F32, 2, (int64_t[]){3, 4});
    tg_fill_normal(first, tt_rng(), 0, 1);
    float saved[12];
    tg_copy_to_host(first, saved, TG_F32);
    int64_t total = 12;
    int n = (int)tt_randint(20, 60);
    for (int i = 0; i < n; i++) { /* enough parameters to force several reallocations */
        char name[32];
        snprintf(name, sizeof name, "layer.%d.weight", i);
        int64_t shape[2] = {tt_randint(1, 40), tt_randint(1, 40)};
        cr_assert(tg_params_add(params, name, TG_F32, 2, shape), "%s", tg_last_error());
        total += shape[0] * shape[1];
    }
    cr_assert_eq(tg_params_numel(params), total);
    cr_assert_eq(tg_params_count(params), (size_t)n + 1);
    float now[12];
    tg_copy_to_host(first, now, TG_F32);
    cr_assert(memcmp(saved, now, sizeof now) == 0, "growing the store must keep earlier values");
    /* Tensors sit back to back in the one buffer, gradients likewise. */
    int64_t offset = 0;
    for (size_t i = 0; i < tg_params_count(params); i++) {
        tg_tensor *p = tg_params_get(params, i);
        cr_assert_eq((char *)tg_data(p), (char *)tg_params_data(params) + offset * 4);
        cr_assert_eq((char *)tg_data(p->grad), (char *)tg_params_grad(params) + offset * 4);
        offset += tg_numel(p);
    }
    cr_assert_eq(tg_params_find(params, "layer.3.weight"), tg_params_get(params, 4));
    cr_assert_null(tg_params_find(params, "missing"));
    tg_params_free(params);
}

Test(params, sgd_step_and_zero_grad)
{
    tg_params *params = tg_params_create(TG_DEVICE_AUTO);
    tg_tensor *w = tg_params_add(params, "w", TG_F64, 1, (int64_t[]){5});
    tg_fill_normal(w, tt_rng(), 0, 1);
    tg_tape *tape = tg_tape_create();
    double before[5], lr = 0.1;
    tg_copy_to_host(w, before, TG_F64);
    /* loss = Σ w²: grad 2w; SGD gives w − lr·2w. */
    tg_tensor *loss = tg_sum_all(tape, tg_mul(tape, w, w));
    cr_assert_eq(tg_backward(tape, loss), TG_OK, "%s", tg_last_error());
    /* a learning rate that is not finite is refused, and w stays as it was */
    const double bad_lrs[3] = {NAN, INFINITY, -INFINITY};
    for (int k = 0; k < 3; k++) {
        cr_assert_eq(tg_params_sgd_step(params, bad_lrs[k]), TG_ERR_INVALID);
        cr_assert(strstr(tg_last_error(), "tg_params_sgd_step") && strstr(tg_last_error(), "lr"), "%s",
                  tg_last_error());
        for (int64_t i = 0; i < 5; i++) cr_assert_eq(tg_get_flat(w, i), before[i]);
    }
    cr_assert_eq(tg_params_sgd_step(params, lr), TG_OK);
    for (int64_t i = 0; i < 5; i++) cr_assert_float_eq(tg_get_flat(w, i), before[i] * (1 - 2 * lr), 1e-12);
    cr_assert_eq(tg_params_zero_grad(params), TG_OK);
    for (int64_t i = 0; i < 5; i++) cr_assert_eq(tg_get_flat(w->grad, i), 0.0);
    tg_tape_free(tape);
    tg_params_free(params);
}

/* A store with no parameters yet has no buffers: zeroing its gradients and stepping it do
 * nothing and succeed (and hand no null pointer to memset, which the sanitizer run checks). */
Test(params, an_empty_store_zeroes_and_steps)
{
    tg_params *params = tg_params_create(TG_DEVICE_CPU);
    cr_assert_eq(tg_params_numel(params), 0);
    cr_assert_eq(tg_params_zero_grad(params), TG_OK, "%s", tg_last_error());
    cr_assert_eq(tg_params_sgd_step(params, 0.1), TG_OK, "%s", tg_last_error());
    tg_params_free(params);
}

Test(params, bad_requests)
{
    tg_params *params = tg_params_create(TG_DEVICE_CPU);
    cr_assert(tg_params_add(params, "w", TG_F32, 1, (int64_t[]){3}));
    cr_assert_null(tg_params_add(params, "w", TG_F32, 1, (int64_t[]){3}));
    cr_assert(strstr(tg_last_error(), "is taken"), "%s", tg_last_error());
    cr_assert_null(tg_params_add(params, "v", TG_F64, 1, (int64_t[]){3}));
    cr_assert(strstr(tg_last_error(), "f64") && strstr(tg_last_error(), "f32"), "%s", tg_last_error());
    cr_assert_null(tg_params_add(params, "ids", TG_I32, 1, (int64_t[]){3}));
    cr_assert_null(tg_params_add(params, "empty", TG_F32, 2, (int64_t[]){3, 0}));
    cr_assert(strstr(tg_last_error(), "[3, 0]"), "%s", tg_last_error());
    cr_assert_null(tg_params_add(params, "huge", TG_F32, 2, (int64_t[]){INT64_MAX / 2, 4}));
    cr_assert_null(tg_params_add(params, NULL, TG_F32, 1, (int64_t[]){3}));
    cr_assert_eq(tg_params_count(params), 1u, "failed adds leave the store as it was");
    cr_assert_eq(tg_params_numel(params), 3);
    tg_params_free(params);
}
