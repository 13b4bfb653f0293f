/* tests/fuzz/fuzz_checkpoint_load.c: feeds arbitrary bytes to the checkpoint loader
 * (libFuzzer; scripts/fuzz.sh builds and runs it). Besides the sanitizers' own findings
 * (out-of-bounds reads, leaks, undefined behaviour), an input is a failure when the loader
 * refuses it but the model, the optimizer or the info changed anyway. */
#include "fuzz_model.h"

#include "optim/internal.h"

#include <stdlib.h>
#include <string.h>

static tg_params *params;
static tg_optim *optim;
static unsigned char *pristine;
static size_t pristine_size;

/* Every byte of the model and the optimizer's state, appended to out (or only counted). */
static size_t model_bytes(unsigned char *out)
{
    size_t n = (size_t)tg_params_numel(params), at = n * 4;
    if (out) memcpy(out, tg_params_data(params), at);
    tg_optim_buffer buffers[TG_OPTIM_MAX_BUFFERS];
    int nb = tg_optim_buffers(optim, buffers);
    for (int b = 0; b < nb; b++) {
        if (out) memcpy(out + at, buffers[b].data, n * tg_dtype_size(buffers[b].dtype));
        at += n * tg_dtype_size(buffers[b].dtype);
    }
    return at;
}

static void restore(void)
{
    size_t n = (size_t)tg_params_numel(params), at = n * 4;
    memcpy(tg_params_data(params), pristine, at);
    tg_optim_buffer buffers[TG_OPTIM_MAX_BUFFERS];
    int nb = tg_optim_buffers(optim, buffers);
    for (int b = 0; b < nb; b++) {
        memcpy(buffers[b].data, pristine + at, n * tg_dtype_size(buffers[b].dtype));
        at += n * tg_dtype_size(buffers[b].dtype);
    }
    tg_optim_set_step_count(optim, 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!params) {
        if (!(params = fuzz_model_build(&optim))) abort();
        pristine_size = model_bytes(NULL);
        if (!(pristine = malloc(pristine_size))) abort();
        model_bytes(pristine);
    }
    tg_checkpoint_info info = {.step = -1, .config = NULL};
    tg_status status = tg_checkpoint_load_buffer(data, size, "input", params, optim, &info);
    if (status == TG_OK) {
        tg_checkpoint_info_clear(&info);
        restore();
        return 0;
    }
    unsigned char *now = malloc(pristine_size);
    if (!now) abort();
    model_bytes(now);
    bool changed = memcmp(now, pristine, pristine_size) != 0 || tg_optim_step_count(optim) != 0 || info.step != -1 ||
                   info.config != NULL;
    free(now);
    if (changed) __builtin_trap(); /* a refused file must leave everything as it was */
    return 0;
}
