/* tests/fuzz/fuzz_checkpoint_seeds.c: writes valid checkpoints of the fuzz model into a
 * directory, the seed corpus of fuzz_checkpoint_load (scripts/fuzz.sh). */
#include "fuzz_model.h"

#include <stdio.h>

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_checkpoint_seeds DIR\n");
        return 2;
    }
    tg_optim *optim;
    tg_params *params = fuzz_model_build(&optim);
    tg_rng rng;
    tg_rng_seed(&rng, 7);
    char path[4096];
    bool ok = params != NULL;
    for (int seed = 0; ok && seed < 3; seed++) {
        for (size_t i = 0; i < tg_params_count(params); i++) {
            tg_fill_normal(tg_params_get(params, i), &rng, 0.0, 1.0);
            tg_fill_normal(tg_params_get(params, i)->grad, &rng, 0.0, 1.0);
        }
        ok = tg_optim_step(optim, 1) == TG_OK;
        tg_checkpoint_info info = {
            .step = seed * 1000, .rng = rng, .config = seed ? "{\"seed\": [1, 2.5, \"x\"]}" : NULL};
        snprintf(path, sizeof path, "%s/seed%d.safetensors", argv[1], seed);
        /* The last one without the optimizer's state: loading it into the optimizer fails. */
        ok = ok && tg_checkpoint_save(path, params, seed < 2 ? optim : NULL, &info) == TG_OK;
    }
    if (!ok) {
        fprintf(stderr, "fuzz_checkpoint_seeds: %s\n", tg_last_error());
        return 1;
    }
    tg_optim_free(optim);
    tg_params_free(params);
    return 0;
}
