/* tests/python/write_checkpoint.c: the C side of the Python interoperability check
 * (check_safetensors.py).
 *
 *   write_checkpoint write DIR SEED   writes DIR/{f32,f64,bf16}.safetensors and, beside each,
 *                                     DIR/<name>.json: every tensor the file must hold (dtype,
 *                                     shape, values as this program reads them from memory)
 *                                     and the metadata
 *   write_checkpoint resave IN OUT    loads IN, an f32 AdamW checkpoint of the same model (one
 *                                     Python wrote), and saves it again as OUT
 *
 * Exits 0 on success, 1 with a message on stderr otherwise. */
#include <tapegrad.h>

#include "optim/internal.h"

#include <cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    int ndim;
    int64_t shape[3];
} model[] = {
    {"backbone.embedding.weight", 2, {11, 6}},
    {"backbone.layers.0.norm.weight", 1, {6}},
    {"backbone.layers.0.mixer.in_proj.weight", 2, {6, 24}},
    {"backbone.layers.0.mixer.conv1d.weight", 3, {12, 1, 4}},
    {"backbone.layers.0.mixer.conv1d.bias", 1, {12}},
    {"backbone.layers.0.mixer.A_log", 2, {12, 3}},
    {"backbone.layers.0.mixer.D", 1, {12}},
    {"backbone.layers.0.mixer.out_proj.weight", 2, {12, 6}},
    {"backbone.norm_f.weight", 1, {6}},
};

#define COUNT (sizeof model / sizeof model[0])

static int fail(const char *what)
{
    fprintf(stderr, "write_checkpoint: %s: %s\n", what, tg_last_error());
    return 1;
}

static tg_params *build(tg_dtype dtype, tg_rng *rng)
{
    tg_params *params = tg_params_create(TG_DEVICE_CPU);
    for (size_t i = 0; params && i < COUNT; i++) {
        tg_tensor *p = tg_params_add(params, model[i].name, dtype, model[i].ndim, model[i].shape);
        if (!p) return NULL;
        tg_fill_normal(p, rng, 0.0, 1.0);
    }
    return params;
}

/* Optimizer steps with random gradients, so that every state buffer holds values. */
static tg_status train(tg_params *params, tg_optim *optim, tg_rng *rng, int steps)
{
    for (int step = 0; step < steps; step++) {
        for (size_t i = 0; i < COUNT; i++) tg_fill_normal(tg_params_get(params, i)->grad, rng, 0.0, 1.0);
        tg_status status = tg_optim_step(optim, 1);
        if (status != TG_OK) return status;
    }
    return TG_OK;
}

static const char *dtype_name(tg_dtype dtype) { return dtype == TG_F32 ? "F32" : dtype == TG_F64 ? "F64" : "BF16"; }

static void describe(cJSON *tensors, const char *name, const tg_tensor *p, const char *data, tg_dtype dtype)
{
    cJSON *t = cJSON_AddObjectToObject(tensors, name);
    cJSON_AddStringToObject(t, "dtype", dtype_name(dtype));
    cJSON *shape = cJSON_AddArrayToObject(t, "shape"), *values = cJSON_AddArrayToObject(t, "values");
    for (int d = 0; d < p->ndim; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)p->shape[d]));
    for (int64_t i = 0; i < tg_numel(p); i++) {
        double v = dtype == TG_F64   ? ((const double *)data)[i]
                   : dtype == TG_F32 ? ((const float *)data)[i]
                                     : tg_bf16_to_f32(((const uint16_t *)data)[i]);
        char text[32];
        snprintf(text, sizeof text, "%.17g", v); /* exact: cJSON's own printing may drop the last bit */
        cJSON_AddItemToArray(values, cJSON_CreateRaw(text));
    }
}

static void add_text(cJSON *object, const char *key, const char *format, ...) __attribute__((format(printf, 3, 4)));
static void add_text(cJSON *object, const char *key, const char *format, ...)
{
    char text[128];
    va_list args;
    va_start(args, format);
    vsnprintf(text, sizeof text, format, args);
    va_end(args);
    cJSON_AddStringToObject(object, key, text);
}

/* What the checkpoint must hold, read from memory rather than from the file. */
static int write_reference(const char *path, tg_params *params, const tg_optim *optim, const tg_checkpoint_info *info)
{
    cJSON *root = cJSON_CreateObject(), *tensors = cJSON_AddObjectToObject(root, "tensors");
    for (size_t i = 0; i < COUNT; i++) {
        tg_tensor *p = tg_params_get(params, i);
        describe(tensors, p->name, p, tg_data(p), p->dtype);
    }
    tg_optim_buffer buffers[TG_OPTIM_MAX_BUFFERS];
    int n = tg_optim_buffers(optim, buffers);
    for (int b = 0; b < n; b++)
        for (size_t i = 0; i < COUNT; i++) {
            tg_tensor *p = tg_params_get(params, i);
            char name[160];
            snprintf(name, sizeof name, "optim.%s.%s", buffers[b].name, p->name);
            describe(tensors, name, p,
                     (const char *)buffers[b].data + p->offset * (int64_t)tg_dtype_size(buffers[b].dtype),
                     buffers[b].dtype);
        }
    cJSON *metadata = cJSON_AddObjectToObject(root, "metadata");
    cJSON_AddStringToObject(metadata, "format", "tapegrad.checkpoint");
    cJSON_AddStringToObject(metadata, "format_version", "2");
    add_text(metadata, "step", "%lld", (long long)info->step);
    add_text(metadata, "rng", "%016llx %016llx %016llx %016llx", (unsigned long long)info->rng.s[0],
             (unsigned long long)info->rng.s[1], (unsigned long long)info->rng.s[2],
             (unsigned long long)info->rng.s[3]);
    cJSON_AddStringToObject(metadata, "optimizer",
                            tg_optim_get_config(optim)->kind == TG_OPTIM_ADAMW ? "adamw" : "sgd");
    add_text(metadata, "optimizer_step", "%lld", (long long)tg_optim_step_count(optim));
    cJSON_AddStringToObject(metadata, "config", info->config);
    char *json = cJSON_Print(root);
    FILE *f = fopen(path, "w");
    int status = !json || !f || fputs(json, f) < 0;
    if (f) fclose(f);
    free(json);
    cJSON_Delete(root);
    return status;
}

static int write_one(const char *dir, const char *name, tg_dtype dtype, tg_optim_config config, tg_rng *rng)
{
    tg_params *params = build(dtype, rng);
    tg_optim *optim = params ? tg_optim_create(params, &config) : NULL;
    if (!optim || train(params, optim, rng, 3) != TG_OK) return fail(name);
    char config_text[160], path[512];
    snprintf(config_text, sizeof config_text,
             "{\"name\": \"%s\", \"dims\": [6, 12], \"note\": \"caf\\u00e9 \\\"q\\\"\"}", name);
    tg_checkpoint_info info = {.step = (int64_t)tg_rng_below(rng, 1000000), .rng = *rng, .config = config_text};
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
    if (tg_checkpoint_save(path, params, optim, &info) != TG_OK) return fail(path);
    snprintf(path, sizeof path, "%s/%s.json", dir, name);
    if (write_reference(path, params, optim, &info)) return fail(path);
    tg_optim_free(optim);
    tg_params_free(params);
    return 0;
}

static int resave(const char *in, const char *out)
{
    tg_rng rng;
    tg_rng_seed(&rng, 1);
    tg_params *params = build(TG_F32, &rng);
    tg_optim_config config = tg_adamw_config(0.01);
    tg_optim *optim = params ? tg_optim_create(params, &config) : NULL;
    tg_checkpoint_info info;
    if (!optim || tg_checkpoint_load(in, params, optim, &info) != TG_OK) return fail(in);
    tg_status status = tg_checkpoint_save(out, params, optim, &info);
    tg_checkpoint_info_clear(&info);
    tg_optim_free(optim);
    tg_params_free(params);
    return status == TG_OK ? 0 : fail(out);
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "write")) {
        tg_rng rng;
        tg_rng_seed(&rng, strtoull(argv[3], NULL, 10));
        tg_optim_config sgd = tg_sgd_config(0.1, 0.9);
        sgd.weight_decay = 0.01;
        return write_one(argv[2], "f32", TG_F32, tg_adamw_config(0.01), &rng) ||
               write_one(argv[2], "f64", TG_F64, sgd, &rng) ||
               write_one(argv[2], "bf16", TG_BF16, tg_adamw_config(0.01), &rng);
    }
    if (argc == 4 && !strcmp(argv[1], "resave")) return resave(argv[2], argv[3]);
    fprintf(stderr, "usage: write_checkpoint write DIR SEED | resave IN OUT\n");
    return 2;
}
