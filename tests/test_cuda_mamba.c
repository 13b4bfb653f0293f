/* The Mamba model on CUDA against the same model on the CPU: one seed gives bit-identical
 * parameters on both devices (the initial values are drawn and rounded on the host), and
 * one f32 forward and backward give the same logits, loss and parameter gradients. Skipped
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
