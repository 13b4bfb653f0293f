/* The CUDA backend's core: the caching allocator (statistics, identical addresses for
 * identical steps), host-device copies in every dtype and layout, TG_DEVICE_AUTO, cuRAND
 * fills, parameters on the device, and the tg_to_device op with its backward. Skipped
 * without a GPU. */
#include "test_util.h"

#include "core/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

Test(cuda_core, allocator_counts_and_reuses)
{
    tt_require_cuda();
    tg_memory_stats before, during, after;
    cr_assert_eq(tg_memory_stats_get(TG_DEVICE_CUDA, &before), TG_OK, "%s", tg_last_error());
    tg_tensor *t = tg_tensor_new(TG_F32, TG_DEVICE_CUDA, 2, (int64_t[]){1024, 1024});
    cr_assert(t, "%s", tg_last_error());
    cr_assert_eq(tg_memory_stats_get(TG_DEVICE_CUDA, &during), TG_OK);
    cr_assert_geq(during.bytes_in_use, before.bytes_in_use + 4u * 1024 * 1024);
    cr_assert_geq(during.peak_bytes_in_use, during.bytes_in_use);
    cr_assert_geq(during.bytes_reserved, during.bytes_in_use);
    const void *first = t->storage->data;
    tg_tensor_free(t);
    cr_assert_eq(tg_memory_stats_get(TG_DEVICE_CUDA, &after), TG_OK);
    cr_assert_eq(after.bytes_in_use, before.bytes_in_use);
    cr_assert_eq(after.bytes_reserved, during.bytes_reserved, "a freed block stays cached");
    t = tg_tensor_new(TG_F32, TG_DEVICE_CUDA, 2, (int64_t[]){1024, 1024});
    cr_assert_eq(t->storage->data, first, "the same size gets the cached block back");
    tg_tensor_free(t);
    cr_assert_eq(tg_memory_empty_cache(), TG_OK);
    cr_assert_eq(tg_memory_stats_get(TG_DEVICE_CUDA, &after), TG_OK);
    cr_assert_eq(after.bytes_reserved, after.bytes_in_use, "an emptied cache holds nothing unused");
}

Test(cuda_core, identical_steps_get_identical_addresses)
{
    tt_require_cuda();
    tg_tape *tape = tg_tape_create();
    tg_params *params = tg_params_create(TG_DEVICE_CUDA);
    tg_tensor *w = tg_params_add(params, "w", TG_F32, 2, (int64_t[]){64, 64});
    cr_assert(w, "%s", tg_last_error());
    tg_fill_normal(w, tt_rng(), 0, 1);
    const void *seen[3] = {0};
    for (int step = 0; step < 4; step++) {
        tg_tensor *x = tg_full(tape, TG_F32, TG_DEVICE_CUDA, 2, (int64_t[]){128, 64}, 0.5);
        tg_tensor *h = tg_tanh(tape, tg_matmul(tape, x, w, false, false));
        tg_tensor *loss = tg_mean_all(tape, h);
        cr_assert(loss, "%s", tg_last_error());
        cr_assert_eq(tg_backward(tape, loss), TG_OK, "%s", tg_last_error());
        const void *now[3] = {x->storage->data, h->storage->data, loss->storage->data};
        for (int i = 0; step >= 2 && i < 3; i++) cr_assert_eq(now[i], seen[i], "step %d tensor %d moved", step, i);
        memcpy(seen, now, sizeof seen);
        tg_tape_reset(tape);
    }
    tg_params_free(params);
    tg_tape_free(tape);
}

Test(cuda_core, host_device_copies_round_trip_every_dtype_and_layout)
{
    tt_require_cuda();
    tg_tape *tape = tg_tape_create();
    const tg_dtype dtypes[5] = {TG_F32, TG_F64, TG_BF16, TG_F16, TG_I32};
    for (int d = 0; d < 5; d++) {
        int64_t shape[3] = {tt_randint(1, 5), tt_randint(1, 7), tt_randint(1, 300)};
        tg_tensor *cpu = tg_empty(tape, dtypes[d], TG_DEVICE_CPU, 3, shape);
        for (int64_t i = 0; i < tg_numel(cpu); i++) tg_set_flat(cpu, i, (double)tt_randint(-1000, 1000) / 8);
        /* contiguous there and back */
        tg_tensor *gpu = tg_empty(tape, dtypes[d], TG_DEVICE_CUDA, 3, shape);
        cr_assert_eq(tg_copy(gpu, cpu), TG_OK, "%s", tg_last_error());
        tg_tensor *back = tg_empty(tape, dtypes[d], TG_DEVICE_CPU, 3, shape);
        cr_assert_eq(tg_copy(back, gpu), TG_OK, "%s", tg_last_error());
        cr_assert_eq(memcmp(tg_data(back), tg_data(cpu), (size_t)tg_numel(cpu) * tg_dtype_size(dtypes[d])), 0,
                     "%s round trip", tg_dtype_name(dtypes[d]));
        /* a strided device view, written from the host and read back through another dtype */
        tg_tensor *base = tg_zeros(tape, dtypes[d], TG_DEVICE_CUDA, 3, (int64_t[]){shape[1], shape[0], 2 * shape[2]});
        tg_tensor *view = tg_view(tape, base, 3, shape, (int64_t[]){base->strides[1], base->strides[0], 2}, 1);
        cr_assert_eq(tg_copy(view, cpu), TG_OK, "%s", tg_last_error());
        double *values = malloc(sizeof(double) * (size_t)tg_numel(cpu));
        cr_assert_eq(tg_copy_to_host(view, values, TG_F64), TG_OK, "%s", tg_last_error());
        for (int64_t i = 0; i < tg_numel(cpu); i++)
            cr_assert_eq(values[i], tg_get_flat(cpu, i), "%s strided element %lld", tg_dtype_name(dtypes[d]),
                         (long long)i);
        free(values);
    }
    tg_tape_free(tape);
}

Test(cuda_core, auto_picks_the_gpu)
{
    tt_require_cuda();
    cr_assert_eq(tg_device_resolve(TG_DEVICE_AUTO), TG_DEVICE_CUDA);
    tg_tensor *t = tg_tensor_new(TG_F32, TG_DEVICE_AUTO, 1, (int64_t[]){3});
    cr_assert(t && t->device == TG_DEVICE_CUDA);
    tg_tensor_free(t);
}

Test(cuda_core, curand_fills_are_seeded_and_distributed)
{
    tt_require_cuda();
    tg_tape *tape = tg_tape_create();
    int64_t n = 1 << 20;
    tg_tensor *a = tg_empty(tape, TG_F32, TG_DEVICE_CUDA, 1, &n), *b = tg_empty(tape, TG_F32, TG_DEVICE_CUDA, 1, &n);
    tg_rng ra, rb;
    tg_rng_seed(&ra, 42);
    tg_rng_seed(&rb, 42);
    cr_assert_eq(tg_fill_normal(a, &ra, 1.5, 2.0), TG_OK, "%s", tg_last_error());
    cr_assert_eq(tg_fill_normal(b, &rb, 1.5, 2.0), TG_OK, "%s", tg_last_error());
    float *va = malloc(sizeof(float) * (size_t)n), *vb = malloc(sizeof(float) * (size_t)n);
    tg_copy_to_host(a, va, TG_F32);
    tg_copy_to_host(b, vb, TG_F32);
    cr_assert_eq(memcmp(va, vb, sizeof(float) * (size_t)n), 0, "the same seed gives the same values");
    double mean = 0, var = 0;
    for (int64_t i = 0; i < n; i++) mean += va[i];
    mean /= (double)n;
    for (int64_t i = 0; i < n; i++) var += (va[i] - mean) * (va[i] - mean);
    var /= (double)n;
    cr_assert_float_eq(mean, 1.5, 0.01);
    cr_assert_float_eq(sqrt(var), 2.0, 0.01);
    cr_assert_eq(tg_fill_uniform(a, &ra, -1.0, 3.0), TG_OK);
    tg_copy_to_host(a, va, TG_F32);
    for (int64_t i = 0; i < n; i++) cr_assert(va[i] >= -1.0f && va[i] <= 3.0f);
    free(va);
    free(vb);
    tg_tape_free(tape);
}

Test(cuda_core, parameters_on_the_device_train_like_on_the_host)
{
    tt_require_cuda();
    tg_params *cpu = tg_params_create(TG_DEVICE_CPU), *gpu = tg_params_create(TG_DEVICE_CUDA);
    tg_tensor *wc = tg_params_add(cpu, "w", TG_F32, 1, (int64_t[]){1000});
    tg_tensor *wg = tg_params_add(gpu, "w", TG_F32, 1, (int64_t[]){1000});
    for (int i = 0; i < 40; i++) /* growth moves the device buffer: values must follow */
        tg_params_add(gpu, (char[16]){'p', (char)('0' + i / 10), (char)('0' + i % 10), 0}, TG_F32, 1, (int64_t[]){500});
    tg_fill_normal(wc, tt_rng(), 0, 1);
    cr_assert_eq(tg_copy(wg, wc), TG_OK, "%s", tg_last_error());
    tg_tape *tape = tg_tape_create();
    tg_tensor *lc = tg_sum_all(tape, tg_mul(tape, wc, wc)), *lg = tg_sum_all(tape, tg_mul(tape, wg, wg));
    cr_assert_eq(tg_backward(tape, lc), TG_OK);
    cr_assert_eq(tg_backward(tape, lg), TG_OK, "%s", tg_last_error());
    tg_params_sgd_step(cpu, 0.1);
    cr_assert_eq(tg_params_sgd_step(gpu, 0.1), TG_OK, "%s", tg_last_error());
    cr_assert_lt(tt_rel_error(wg, wc), 1e-6);
    cr_assert_eq(tg_params_zero_grad(gpu), TG_OK);
    cr_assert_eq(tt_rel_error(wg->grad, tg_zeros_like(tape, wc)), 0.0);
    tg_tape_free(tape);
    tg_params_free(cpu);
    tg_params_free(gpu);
}

Test(cuda_core, to_device_carries_gradients_back)
{
    tt_require_cuda();
    tg_tape *tape = tg_tape_create();
    int64_t n = tt_randint(1, 5000);
    tg_tensor *x = tt_leaf(tape, TG_F32, 1, &n);
    tg_tensor *xg = tg_to_device(tape, x, TG_DEVICE_CUDA);
    cr_assert(xg && xg->device == TG_DEVICE_CUDA, "%s", tg_last_error());
    cr_assert_eq(tg_to_device(tape, xg, TG_DEVICE_CUDA), xg, "already there: the same tensor");
    /* loss = Σ x² computed on the GPU: the gradient 2x arrives on the host leaf */
    tg_tensor *loss = tg_sum_all(tape, tg_mul(tape, xg, xg));
    cr_assert_eq(tg_backward(tape, loss), TG_OK, "%s", tg_last_error());
    cr_assert_eq(x->grad->device, TG_DEVICE_CPU);
    tg_tensor *twice = tg_scale(tape, tg_detach(tape, x), 2.0);
    cr_assert_lt(tt_rel_error(x->grad, twice), 1e-6);
    tg_tape_free(tape);
}
