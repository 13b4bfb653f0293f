/* tests/optim_cases.h: the parameter stores the optimizer and checkpoint tests (CPU and
 * CUDA) draw their cases from: the names of a small Mamba-like model, with whether the
 * default group rule decays each, and flat host copies of values and gradients. */
#ifndef TAPEGRAD_TESTS_OPTIM_CASES_H
#define TAPEGRAD_TESTS_OPTIM_CASES_H

#include "test_util.h"

#include <stdlib.h>

typedef struct {
    const char *name;
    bool decays; /* under tg_optim_default_no_decay */
    int ndim;
    int64_t shape[2];
} oc_param;

/* out_proj (8827 elements) spans more than two of the update's 4096-element ranges, and
 * decaying and non-decaying parameters alternate, so the group table has many runs. */
static const oc_param oc_model[] = {
    {"backbone.embedding.weight", false, 2, {13, 8}},
    {"backbone.layers.0.norm.weight", false, 1, {8}},
    {"backbone.layers.0.mixer.in_proj.weight", true, 2, {8, 32}},
    {"backbone.layers.0.mixer.conv1d.weight", true, 2, {16, 4}},
    {"backbone.layers.0.mixer.conv1d.bias", false, 1, {16}},
    {"backbone.layers.0.mixer.A_log", false, 2, {16, 4}},
    {"backbone.layers.0.mixer.D", false, 1, {16}},
    {"backbone.layers.0.mixer.dt_bias", false, 1, {16}},
    {"backbone.layers.0.mixer.out_proj.weight", true, 2, {97, 91}},
    {"backbone.norm_f.weight", false, 1, {8}},
    {"lm_head.weight", true, 2, {8, 13}},
};

#define OC_COUNT (sizeof oc_model / sizeof oc_model[0])

/* A store of the model's parameters on the device, with normal(0, 1) values. */
static inline tg_params *oc_store(tg_dtype dtype, tg_device device)
{
    tg_params *params = tg_params_create(device);
    cr_assert(params, "%s", tg_last_error());
    for (size_t i = 0; i < OC_COUNT; i++) {
        tg_tensor *p = tg_params_add(params, oc_model[i].name, dtype, oc_model[i].ndim, oc_model[i].shape);
        cr_assert(p, "%s", tg_last_error());
        tg_fill_normal(p, tt_rng(), 0.0, 1.0);
    }
    return params;
}

/* n normal(0, scale) values, rounded to bf16 when asked (so that every store dtype holds
 * them exactly). */
static inline double *oc_random(int64_t n, double scale, bool bf16_exact)
{
    double *v = malloc((size_t)n * sizeof *v);
    cr_assert(v);
    for (int64_t i = 0; i < n; i++) {
        v[i] = scale * tg_rng_normal(tt_rng());
        if (bf16_exact) v[i] = tg_bf16_to_f32(tg_f32_to_bf16((float)v[i]));
    }
    return v;
}

/* Copies flat host values (store order) into every parameter (or its gradient). */
static inline void oc_put(tg_params *params, const double *values, bool grads)
{
    int64_t at = 0;
    for (size_t i = 0; i < tg_params_count(params); i++) {
        tg_tensor *p = tg_params_get(params, i);
        cr_assert_eq(tg_copy_from_host(grads ? p->grad : p, values + at, TG_F64), TG_OK, "%s", tg_last_error());
        at += tg_numel(p);
    }
}

/* The flat values (or gradients) of every parameter, as doubles. */
static inline void oc_get(tg_params *params, double *values, bool grads)
{
    int64_t at = 0;
    for (size_t i = 0; i < tg_params_count(params); i++) {
        tg_tensor *p = tg_params_get(params, i);
        cr_assert_eq(tg_copy_to_host(grads ? p->grad : p, values + at, TG_F64), TG_OK, "%s", tg_last_error());
        at += tg_numel(p);
    }
}

/* The index of the parameter that holds flat element i. */
static inline size_t oc_param_of(tg_params *params, int64_t i)
{
    for (size_t k = 0;; k++) {
        i -= tg_numel(tg_params_get(params, k));
        if (i < 0) return k;
    }
}

#endif
