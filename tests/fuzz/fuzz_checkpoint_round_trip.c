/* tests/fuzz/fuzz_checkpoint_round_trip.c: save → load with parameter sets the fuzzer makes
 * up (libFuzzer; scripts/fuzz.sh builds and runs it). The input decides the dtype, the
 * optimizer, and each parameter's name (any bytes), rank, shape and values, and the info.
 * A store that accepted its parameters must save; the file must load into a second store
 * built the same way, giving back every parameter, optimizer buffer, step count and info
 * field bit for bit. Anything else is a finding. */
#include "optim/internal.h"

#include <tapegrad.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Reads the input front to back; past its end, every read gives zeros. */
typedef struct {
    const uint8_t *data;
    size_t size, at;
} reader;

static uint8_t next(reader *r) { return r->at < r->size ? r->data[r->at++] : 0; }

static uint64_t next_u64(reader *r)
{
    uint64_t v = 0;
    for (int k = 0; k < 8; k++) v = v << 8 | next(r);
    return v;
}

#define MAX_PARAMS 6
#define MAX_NAME 48

typedef struct {
    char names[MAX_PARAMS][MAX_NAME + 1];
    int ndim[MAX_PARAMS];
    int64_t shape[MAX_PARAMS][3];
    int count;
    tg_dtype dtype;
    int optimizer; /* 0 none, 1 SGD with momentum, 2 AdamW */
} plan;

static plan read_plan(reader *r)
{
    static const tg_dtype dtypes[] = {TG_F32, TG_F64, TG_BF16, TG_F16};
    plan p = {.dtype = dtypes[next(r) % 4], .optimizer = next(r) % 3, .count = 1 + next(r) % MAX_PARAMS};
    for (int i = 0; i < p.count; i++) {
        int length = next(r) % (MAX_NAME + 1);
        for (int k = 0; k < length; k++) p.names[i][k] = (char)next(r);
        p.names[i][length] = '\0';
        p.ndim[i] = 1 + next(r) % 3;
        for (int d = 0; d < p.ndim[i]; d++) p.shape[i][d] = 1 + next(r) % 4;
    }
    return p;
}

/* The parameters of the plan that the store accepts (names it refuses are left out). */
static tg_params *build(const plan *p)
{
    tg_params *params = tg_params_create(TG_DEVICE_CPU);
    if (!params) abort();
    for (int i = 0; i < p->count; i++) tg_params_add(params, p->names[i], p->dtype, p->ndim[i], p->shape[i]);
    return params;
}

static tg_optim *optimizer(const plan *p, tg_params *params)
{
    if (p->optimizer == 0 || tg_params_count(params) == 0) return NULL;
    tg_optim_config config = p->optimizer == 1 ? tg_sgd_config(0.1, 0.9) : tg_adamw_config(0.01);
    tg_optim *optim = tg_optim_create(params, &config);
    if (!optim) abort();
    return optim;
}

static size_t store_bytes(tg_params *params)
{
    return (size_t)tg_params_numel(params) * tg_dtype_size(tg_params_get(params, 0)->dtype);
}

/* Every optimizer buffer of a and b holds the same bytes. */
static bool same_state(const tg_optim *a, const tg_optim *b, size_t numel)
{
    if (!a || !b) return a == b;
    tg_optim_buffer x[TG_OPTIM_MAX_BUFFERS], y[TG_OPTIM_MAX_BUFFERS];
    int n = tg_optim_buffers(a, x);
    if (n != tg_optim_buffers(b, y)) return false;
    for (int k = 0; k < n; k++)
        if (memcmp(x[k].data, y[k].data, numel * tg_dtype_size(x[k].dtype))) return false;
    return tg_optim_step_count(a) == tg_optim_step_count(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char path[64];
    if (!path[0]) snprintf(path, sizeof path, "/tmp/tg_fuzz_round_trip_%d.safetensors", (int)getpid());
    reader r = {data, size, 0};
    plan p = read_plan(&r);
    tg_params *saved = build(&p);
    if (tg_params_count(saved) == 0) { /* every name refused: nothing to save */
        tg_params_free(saved);
        return 0;
    }
    /* Values and one optimizer step from the input's bytes (any bit pattern, NaNs included). */
    unsigned char *values = tg_params_data(saved), *grads = tg_params_grad(saved);
    for (size_t k = 0; k < store_bytes(saved); k++) values[k] = next(&r), grads[k] = next(&r) & 0x3f;
    tg_optim *optim = optimizer(&p, saved);
    if (optim) tg_optim_step(optim, 1); /* a non-finite norm skips it: either way a state to keep */
    tg_checkpoint_info info = {.step = (int64_t)(next_u64(&r) >> 12), .config = "{\"fuzz\": true}"};
    for (int k = 0; k < 4; k++) info.rng.s[k] = next_u64(&r);

    if (tg_checkpoint_save(path, saved, optim, &info) != TG_OK) {
        fprintf(stderr, "a store the library accepted did not save: %s\n", tg_last_error());
        abort();
    }
    tg_params *loaded = build(&p);
    tg_optim *loaded_optim = optimizer(&p, loaded);
    tg_checkpoint_info back = {0};
    if (tg_checkpoint_load(path, loaded, loaded_optim, &back) != TG_OK) {
        fprintf(stderr, "a file the library saved did not load: %s\n", tg_last_error());
        abort();
    }
    bool same = !memcmp(tg_params_data(saved), tg_params_data(loaded), store_bytes(saved)) &&
                same_state(optim, loaded_optim, (size_t)tg_params_numel(saved)) && back.step == info.step &&
                !memcmp(&back.rng, &info.rng, sizeof info.rng) && !strcmp(back.config, info.config);
    if (!same) {
        fprintf(stderr, "the loaded checkpoint differs from the saved one\n");
        abort();
    }
    tg_checkpoint_info_clear(&back);
    tg_optim_free(loaded_optim), tg_optim_free(optim);
    tg_params_free(loaded), tg_params_free(saved);
    unlink(path);
    return 0;
}
