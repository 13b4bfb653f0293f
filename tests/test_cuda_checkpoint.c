/* Checkpoints of CUDA stores: saved from the device (through the staging buffer), they
 * load into a CPU store and into a fresh CUDA store with every byte of the parameters and
 * the optimizer's state (moments, master) intact; a refused file leaves the device model
 * unchanged. Skipped without a GPU. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include "cuda_util.h"
#include "optim_cases.h"

#include "optim/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Every byte of the parameters and the optimizer's buffers, copied to the host. */
static unsigned char *model_bytes(tg_params *params, tg_optim *optim, size_t *size)
{
    size_t n = (size_t)tg_params_numel(params), esize = tg_dtype_size(tg_params_get(params, 0)->dtype);
    tg_device device = tg_params_get(params, 0)->device;
    tg_optim_buffer buffers[TG_OPTIM_MAX_BUFFERS];
    int nb = tg_optim_buffers(optim, buffers);
    *size = n * esize;
    for (int b = 0; b < nb; b++) *size += n * tg_dtype_size(buffers[b].dtype);
    unsigned char *bytes = malloc(*size), *at = bytes;
    const void *sources[1 + TG_OPTIM_MAX_BUFFERS] = {tg_params_data(params)};
    size_t sizes[1 + TG_OPTIM_MAX_BUFFERS] = {n * esize};
    for (int b = 0; b < nb; b++) {
        sources[1 + b] = buffers[b].data;
        sizes[1 + b] = n * tg_dtype_size(buffers[b].dtype);
    }
    for (int k = 0; k <= nb; k++) {
        if (device == TG_DEVICE_CPU)
            memcpy(at, sources[k], sizes[k]);
        else
            cr_assert_eq(tg_device_memcpy(at, sources[k], sizes[k], TG_COPY_DEVICE_TO_HOST), TG_OK);
        at += sizes[k];
    }
    return bytes;
}

static tg_optim *trained(tg_params *params, int steps)
{
    tg_optim_config config = tg_adamw_config(0.01);
    tg_optim *optim = tg_optim_create(params, &config);
    cr_assert(optim, "%s", tg_last_error());
    for (int s = 0; s < steps; s++) {
        double *grad = oc_random(tg_params_numel(params), 1.0, true);
        oc_put(params, grad, true);
        cr_assert_eq(tg_optim_step(optim, 1), TG_OK, "%s", tg_last_error());
        free(grad);
    }
    return optim;
}

Test(cuda_checkpoint, device_models_round_trip_through_the_cpu)
{
    tt_require_cuda();
    char dir[] = "/tmp/tg_cuda_checkpoint_XXXXXX", path[96];
    cr_assert(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    const tg_dtype dtypes[2] = {TG_F32, TG_BF16};
    for (int d = 0; d < 2; d++) {
        tg_params *gpu = oc_store(dtypes[d], TG_DEVICE_CUDA), *cpu = oc_store(dtypes[d], TG_DEVICE_CPU);
        tg_params *again = oc_store(dtypes[d], TG_DEVICE_CUDA);
        tg_optim *gpu_optim = trained(gpu, 3), *cpu_optim = trained(cpu, 1), *again_optim = trained(again, 2);
        tg_checkpoint_info info = {.step = 5, .config = (char *)"{}"};
        cr_assert_eq(tg_checkpoint_save(path, gpu, gpu_optim, &info), TG_OK, "%s", tg_last_error());
        cr_assert_eq(tg_checkpoint_load(path, cpu, cpu_optim, NULL), TG_OK, "%s", tg_last_error());
        cr_assert_eq(tg_checkpoint_load(path, again, again_optim, NULL), TG_OK, "%s", tg_last_error());
        size_t n1, n2, n3;
        unsigned char *a = model_bytes(gpu, gpu_optim, &n1), *b = model_bytes(cpu, cpu_optim, &n2),
                      *c = model_bytes(again, again_optim, &n3);
        cr_assert(n1 == n2 && n1 == n3 && !memcmp(a, b, n1) && !memcmp(a, c, n1),
                  "%s: bytes differ after the round trip", tg_dtype_name(dtypes[d]));
        cr_assert_eq(tg_optim_step_count(cpu_optim), 3);
        /* A damaged file leaves the device model as it was. */
        FILE *f = fopen(path, "r+b");
        cr_assert(f);
        fseek(f, -3, SEEK_END);
        int byte = fgetc(f);
        fseek(f, -3, SEEK_END);
        fputc(byte ^ 0xff, f);
        fclose(f);
        cr_assert_eq(tg_checkpoint_load(path, again, again_optim, NULL), TG_ERR_INVALID);
        free(c);
        c = model_bytes(again, again_optim, &n3);
        cr_assert(!memcmp(a, c, n1), "a refused file changed the device model");
        free(a), free(b), free(c);
        tg_optim_free(gpu_optim), tg_optim_free(cpu_optim), tg_optim_free(again_optim);
        tg_params_free(gpu), tg_params_free(cpu), tg_params_free(again);
    }
    unlink(path);
    rmdir(dir);
}
