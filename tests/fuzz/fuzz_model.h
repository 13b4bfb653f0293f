/* tests/fuzz/fuzz_model.h: the small model whose checkpoints the fuzz target loads and the
 * seed program writes. Small, so that each input is short and the fuzzer runs fast. */
#ifndef TAPEGRAD_TESTS_FUZZ_MODEL_H
#define TAPEGRAD_TESTS_FUZZ_MODEL_H

#include <tapegrad.h>

static const struct {
    const char *name;
    int ndim;
    int64_t shape[2];
} fuzz_model_params[] = {
    {"embedding.weight", 2, {3, 2}},
    {"layers.0.mixer.A_log", 2, {2, 2}},
    {"layers.0.mixer.D", 1, {2}},
    {"head.bias", 1, {3}},
};

/* The store and an AdamW optimizer over it (NULL on failure). */
static inline tg_params *fuzz_model_build(tg_optim **optim)
{
    tg_params *params = tg_params_create(TG_DEVICE_CPU);
    for (size_t i = 0; params && i < sizeof fuzz_model_params / sizeof *fuzz_model_params; i++)
        if (!tg_params_add(params, fuzz_model_params[i].name, TG_F32, fuzz_model_params[i].ndim,
                           fuzz_model_params[i].shape))
            return NULL;
    tg_optim_config config = tg_adamw_config(0.01);
    *optim = params ? tg_optim_create(params, &config) : NULL;
    return *optim ? params : NULL;
}

#endif
