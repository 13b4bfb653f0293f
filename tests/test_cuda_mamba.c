/* The Mamba model on CUDA against the same model on the CPU: one seed gives bit-identical
 * parameters on both devices (the initial values are drawn and rounded on the host), and
 * one f32 forward and backward give the same logits, loss and parameter gradients; on CUDA,
 * recomputing u and delta in the backward gives the gradients of keeping them, bit for bit,
 * in less memory. Skipped
 * without a GPU; the comparison is also skipped while the build has no CUDA kernel for an
 * op the model uses (the message names it). */
#include "cuda_util.h"

#include <stdio.h>
#include <stdlib.h>

static tg_mamba *model_on(tg_device device, const tg_mamba_config *config, uint64_t seed, tg_params **params)
{
    tg_rng rng;
    tg_rng_seed(&rng, seed);
    *params = tg_params_create(device);
    cr_assert(*params, "%s", tg_last_error());
    tg_mamba *model = tg_mamba_create(config, *params, &rng);
    cr_assert(model, "%s", tg_last_error());
    return model;
}

Test(cuda_mamba, one_seed_gives_the_same_parameters_on_both_devices)
{
    tt_require_cuda();
    const tg_dtype dtypes[2] = {TG_F32, TG_BF16};
    for (int k = 0; k < 2; k++) {
        tg_mamba_config config = {.vocab_size = 17, .d_model = 24, .n_layer = 2, .dtype = dtypes[k]};
        const uint64_t seed = tg_rng_next(tt_rng());
        tg_params *cpu, *gpu;
        tg_mamba *a = model_on(TG_DEVICE_CPU, &config, seed, &cpu), *b = model_on(TG_DEVICE_CUDA, &config, seed, &gpu);
        cr_assert_eq(tg_params_count(cpu), tg_params_count(gpu));
        tg_tape *tape = tg_tape_create();
        for (size_t i = 0; i < tg_params_count(cpu); i++)
            cu_assert_equal(tape, tg_params_get(gpu, i)->name, tg_params_get(gpu, i), tg_params_get(cpu, i));
        tg_tape_free(tape);
        tg_mamba_free(a);
        tg_mamba_free(b);
        tg_params_free(cpu);
        tg_params_free(gpu);
    }
}

/* The whole model compounds each op's float rounding over two layers: a relative error
 * of 1e-4 on every result leaves room for that and still catches any wrong kernel. */
static void compare(tg_dtype dtype, double limit)
{
    tt_require_cuda();
    tg_mamba_config config = {.vocab_size = 19, .d_model = 32, .n_layer = 2, .dtype = dtype, .scan_chunk = 16};
    const uint64_t seed = tg_rng_next(tt_rng());
    tg_params *cpu, *gpu;
    tg_mamba *a = model_on(TG_DEVICE_CPU, &config, seed, &cpu), *b = model_on(TG_DEVICE_CUDA, &config, seed, &gpu);
    tg_tape *tape = tg_tape_create();
    const int64_t shape[2] = {3, 50};
    tg_tensor *ids = tt_ids(tape, 2, shape, 19), *targets = tt_ids(tape, 2, shape, 19);
    tg_tensor *gpu_ids = tg_to_device(tape, ids, TG_DEVICE_CUDA);
    tg_tensor *gpu_targets = tg_to_device(tape, targets, TG_DEVICE_CUDA);
    cr_assert(gpu_ids && gpu_targets, "%s", tg_last_error());

    tg_tensor *gpu_logits = tg_mamba_forward(tape, b, gpu_ids, NULL, NULL);
    if (!gpu_logits && strstr(tg_last_error(), "no cuda kernel"))
        cr_skip_test("the model needs an op without a CUDA kernel in this build: %s", tg_last_error());
    cr_assert(gpu_logits, "%s", tg_last_error());
    tg_tensor *logits = tg_mamba_forward(tape, a, ids, NULL, NULL);
    tg_tensor *loss = tg_cross_entropy(tape, logits, targets, -1);
    tg_tensor *gpu_loss = tg_cross_entropy(tape, gpu_logits, gpu_targets, -1);
    cu_assert_within(tape, "logits", gpu_logits, logits, limit);
    cu_assert_within(tape, "loss", gpu_loss, loss, limit);
    cr_assert_eq(tg_backward(tape, loss), TG_OK, "%s", tg_last_error());
    cr_assert_eq(tg_backward(tape, gpu_loss), TG_OK, "%s", tg_last_error());
    for (size_t i = 0; i < tg_params_count(cpu); i++) {
        tg_tensor *p = tg_params_get(cpu, i), *q = tg_params_get(gpu, i);
        char what[160];
        snprintf(what, sizeof what, "gradient of %s", p->name);
        cu_assert_within(tape, what, q->grad, p->grad, limit);
    }
    tg_tape_free(tape);
    tg_mamba_free(a);
    tg_mamba_free(b);
    tg_params_free(cpu);
    tg_params_free(gpu);
}

Test(cuda_mamba, f32_forward_and_backward_match_the_cpu) { compare(TG_F32, 1e-4); }

/* One step's loss, gradients (as doubles) and peak device bytes above what was in use before. */
static double *step_on_cuda(tg_mamba *model, tg_params *params, tg_tensor *ids, tg_tensor *targets, double *loss_value,
                            size_t *peak)
{
    tg_tape *tape = tg_tape_create();
    cr_assert_eq(tg_params_zero_grad(params), TG_OK);
    tg_memory_stats before, after;
    cr_assert_eq(tg_memory_stats_get(TG_DEVICE_CUDA, &before), TG_OK);
    tg_memory_reset_peak();
    tg_tensor *loss = tg_mamba_loss(tape, model, ids, targets, -1);
    cr_assert(loss, "%s", tg_last_error());
    cr_assert_eq(tg_backward(tape, loss), TG_OK, "%s", tg_last_error());
    cr_assert_eq(tg_memory_stats_get(TG_DEVICE_CUDA, &after), TG_OK);
    *peak = after.peak_bytes_in_use - before.bytes_in_use;
    *loss_value = tg_item(loss);
    double *grads = tt_params_grads(params);
    tg_tape_free(tape);
    return grads;
}

Test(cuda_mamba, recomputed_activations_give_the_gradients_of_kept_ones_in_less_memory)
{
    tt_require_cuda();
    const tg_dtype dtypes[2] = {TG_F32, TG_BF16};
    for (int k = 0; k < 2; k++) {
        const uint64_t seed = tg_rng_next(tt_rng());
        tg_params *params[2];
        tg_mamba *models[2];
        for (int m = 0; m < 2; m++) {
            tg_mamba_config config = {.vocab_size = 19,
                                      .d_model = 64,
                                      .n_layer = 3,
                                      .dtype = dtypes[k],
                                      .activations = m ? TG_ACTIVATIONS_AUTO : TG_ACTIVATIONS_KEEP};
            models[m] = model_on(TG_DEVICE_CUDA, &config, seed, &params[m]);
        }
        tg_tape *data = tg_tape_create();
        const int64_t shape[2] = {4, 512};
        tg_tensor *ids = tg_to_device(data, tt_ids(data, 2, shape, 19), TG_DEVICE_CUDA);
        tg_tensor *targets = tg_to_device(data, tt_ids(data, 2, shape, 19), TG_DEVICE_CUDA);
        cr_assert(ids && targets, "%s", tg_last_error());
        double loss[2], *grads[2];
        size_t peak[2];
        for (int m = 0; m < 2; m++) grads[m] = step_on_cuda(models[m], params[m], ids, targets, &loss[m], &peak[m]);
        cr_assert(memcmp(&loss[0], &loss[1], sizeof loss[0]) == 0, "%s loss: %.17g kept, %.17g recomputed",
                  tg_dtype_name(dtypes[k]), loss[0], loss[1]);
        for (int64_t i = 0; i < tg_params_numel(params[0]); i++)
            cr_assert(memcmp(&grads[0][i], &grads[1][i], sizeof(double)) == 0 && isfinite(grads[0][i]),
                      "%s gradient element %lld: %.17g kept, %.17g recomputed", tg_dtype_name(dtypes[k]), (long long)i,
                      grads[0][i], grads[1][i]);
        /* u and delta: 2·B·d_inner·L elements per layer, of which all but one layer's come off */
        const size_t saved = (size_t)2 * 4 * 128 * 512 * tg_dtype_size(dtypes[k]) * 2;
        cr_assert(peak[1] + saved <= peak[0], "%s: peak %zu bytes recomputing, %zu keeping", tg_dtype_name(dtypes[k]),
                  peak[1], peak[0]);
        for (int m = 0; m < 2; m++) {
            free(grads[m]);
            tg_mamba_free(models[m]);
            tg_params_free(params[m]);
        }
        tg_tape_free(data);
    }
}
