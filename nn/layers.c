/* nn/layers.c: Linear, Embedding and RMSNorm, and the helpers every layer uses to add
 * and fill its parameters.
 *
 * The default initialisations are PyTorch's, so that a model built here starts where
 * the same model in PyTorch would: nn.Linear draws weight and bias from U(±1/√fan_in)
 * (Kaiming-uniform with a = √5 gives gain √(2/(1 + 5)) and bound gain·√(3/fan_in) =
 * 1/√fan_in); nn.Embedding draws from a normal; norms start at one. */
#include "nn/internal.h"
#include "tapegrad/nn.h"
#include "tapegrad/ops.h"
#include "tapegrad/params.h"
#include "tapegrad/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- shared helpers --------------------------------------------------------------------- */

/* "<prefix>.<suffix>" (or "<suffix>") into name; false (message naming fn) when too long. */
static bool param_name(const char *fn, const char *prefix, const char *suffix, char *name)
{
    int n = snprintf(name, TG_NN_NAME_MAX, "%s%s%s", prefix, *prefix ? "." : "", suffix);
    if (n >= 0 && n < TG_NN_NAME_MAX) return true;
    tg_set_error(TG_ERR_INVALID, "%s: prefix '%s': the parameter name '%s.%s' is longer than %d characters", fn, prefix,
                 prefix, suffix, TG_NN_NAME_MAX - 1);
    return false;
}

bool tg_nn_check_new_params(const char *fn, const tg_params *params, const char *prefix, tg_dtype dtype,
                            const char *const *suffixes, int n)
{
    if (!tg_dtype_is_float(dtype)) {
        tg_set_error(TG_ERR_DTYPE, "%s: dtype must be a float dtype (f32, f64, bf16 or f16), not %s", fn,
                     tg_dtype_name(dtype));
        return false;
    }
    if (tg_params_count(params) && tg_params_get(params, 0)->dtype != dtype) {
        tg_set_error(TG_ERR_DTYPE, "%s: dtype is %s but the store holds %s parameters", fn, tg_dtype_name(dtype),
                     tg_dtype_name(tg_params_get(params, 0)->dtype));
        return false;
    }
    char name[TG_NN_NAME_MAX];
    for (int i = 0; i < n; i++) {
        if (!param_name(fn, prefix, suffixes[i], name)) return false;
        const char *wrong = tg_params_name_problem(params, name);
        if (wrong) {
            tg_set_error(TG_ERR_INVALID, "%s: prefix '%s': the parameter name '%s' %s", fn, prefix, name, wrong);
            return false;
        }
    }
    return true;
}

tg_tensor *tg_nn_add_param(const char *fn, tg_params *params, const char *prefix, const char *suffix, tg_dtype dtype,
                           int ndim, const int64_t *shape)
{
    char name[TG_NN_NAME_MAX];
    if (!param_name(fn, prefix, suffix, name)) return NULL;
    tg_tensor *t = tg_params_add(params, name, dtype, ndim, shape);
    if (!t) {
        char inner[768];
        snprintf(inner, sizeof inner, "%s", tg_last_error());
        tg_set_error(TG_ERR_INVALID, "%s: %s", fn, inner);
    }
    return t;
}

double *tg_nn_host_buffer(const char *fn, int64_t n)
{
    double *values = n > 0 && (uint64_t)n <= SIZE_MAX / sizeof(double) ? malloc(sizeof(double) * (size_t)n) : NULL;
    if (!values) tg_set_error(TG_ERR_NOMEM, "%s: out of host memory for %lld initial values", fn, (long long)n);
    return values;
}

tg_status tg_nn_fill_values(const char *fn, tg_tensor *t, const double *values)
{
    /* Rounded to t's dtype on the host whatever t's device, so that every device gets the
     * same bits (a device's own conversion of bf16 or f16 need not round the same way). */
    tg_status status;
    if (t->device == TG_DEVICE_CPU) {
        status = tg_copy_from_host(t, values, TG_F64);
    } else {
        tg_tensor *host = tg_tensor_new(t->dtype, TG_DEVICE_CPU, t->ndim, t->shape);
        status = host ? tg_copy_from_host(host, values, TG_F64) : TG_ERR_NOMEM;
        if (status == TG_OK) status = tg_copy(t, host);
        tg_tensor_free(host);
    }
    if (status != TG_OK) {
        char inner[768];
        snprintf(inner, sizeof inner, "%s", tg_last_error());
        tg_set_error(status, "%s: %s", fn, inner);
    }
    return status;
}

/* Fills t from a draw per element; `normal` picks mean + std·N(0,1) over a + (b − a)·U[0,1). */
static tg_status fill_random(const char *fn, tg_tensor *t, tg_rng *rng, double a, double b, bool normal)
{
    if (!rng) return tg_set_error(TG_ERR_INVALID, "%s: rng is NULL", fn);
    int64_t n = tg_numel(t);
    double *values = tg_nn_host_buffer(fn, n);
    if (!values) return TG_ERR_NOMEM;
    for (int64_t i = 0; i < n; i++) values[i] = normal ? a + b * tg_rng_normal(rng) : a + (b - a) * tg_rng_uniform(rng);
    tg_status status = tg_nn_fill_values(fn, t, values);
    free(values);
    return status;
}

tg_status tg_nn_fill_uniform(const char *fn, tg_tensor *t, tg_rng *rng, double low, double high)
{
    return fill_random(fn, t, rng, low, high, false);
}

tg_status tg_nn_fill_normal(const char *fn, tg_tensor *t, tg_rng *rng, double mean, double std)
{
    return fill_random(fn, t, rng, mean, std, true);
}

tg_tensor *tg_nn_fail(tg_tape *tape, tg_tape_mark mark, const char *fn, const char *where)
{
    char inner[768];
    snprintf(inner, sizeof inner, "%s", tg_last_error());
    tg_set_error(TG_ERR_INVALID, "%s: %s%s%s", fn, where, *where ? ": " : "", inner);
    tg_tape_rewind(tape, mark);
    return NULL;
}

/* The arguments every init shares: no NULL, and each named size ≥ 1 (size_b may be unnamed). */
static bool check_init(const char *fn, const void *layer, const tg_params *params, const char *prefix,
                       const char *name_a, int64_t size_a, const char *name_b, int64_t size_b)
{
    if (!layer || !params || !prefix) {
        tg_set_error(TG_ERR_INVALID, "%s: %s is NULL", fn, !layer ? "layer" : !params ? "params" : "prefix");
        return false;
    }
    if (size_a < 1 || (name_b && size_b < 1)) {
        tg_set_error(TG_ERR_INVALID, "%s: prefix '%s': %s must be ≥ 1 (got %lld)", fn, prefix,
                     size_a < 1 ? name_a : name_b, (long long)(size_a < 1 ? size_a : size_b));
        return false;
    }
    int64_t product;
    if (name_b && tg_mul_overflows(size_a, size_b, &product)) {
        tg_set_error(TG_ERR_OVERFLOW, "%s: prefix '%s': %s × %s = %lld × %lld overflows", fn, prefix, name_a, name_b,
                     (long long)size_a, (long long)size_b);
        return false;
    }
    return true;
}

/* ---- Linear -------------------------------------------------------------------------------- */

tg_status tg_nn_linear_init(tg_nn_linear *layer, tg_params *params, const char *prefix, int64_t in_features,
                            int64_t out_features, bool bias, tg_dtype dtype, tg_rng *rng)
{
    const char *fn = "tg_nn_linear_init";
    if (!check_init(fn, layer, params, prefix, "in_features", in_features, "out_features", out_features))
        return tg_last_status();
    if (!rng) return tg_set_error(TG_ERR_INVALID, "%s: rng is NULL", fn);
    const char *const names[2] = {"weight", "bias"};
    if (!tg_nn_check_new_params(fn, params, prefix, dtype, names, bias ? 2 : 1)) return tg_last_status();
    tg_nn_linear made = {0};
    const int64_t shape[2] = {out_features, in_features};
    const double bound = 1.0 / sqrt((double)in_features);
    if (!(made.weight = tg_nn_add_param(fn, params, prefix, "weight", dtype, 2, shape))) return tg_last_status();
    tg_status status = tg_nn_fill_uniform(fn, made.weight, rng, -bound, bound);
    if (status != TG_OK) return status;
    if (bias) {
        if (!(made.bias = tg_nn_add_param(fn, params, prefix, "bias", dtype, 1, &out_features)))
            return tg_last_status();
        if ((status = tg_nn_fill_uniform(fn, made.bias, rng, -bound, bound)) != TG_OK) return status;
    }
    *layer = made;
    return TG_OK;
}

/* y = x·Wᵀ (+ b). A 1-D x is one row: viewed as (1, in) and the result as (out). */
tg_tensor *tg_nn_linear_forward(tg_tape *tape, const tg_nn_linear *layer, tg_tensor *x)
{
    const char *fn = "tg_nn_linear_forward";
    if (!tg_check_tape(fn, tape)) return NULL;
    if (!layer || !layer->weight) {
        tg_set_error(TG_ERR_INVALID, "%s: layer (or its weight) is NULL", fn);
        return NULL;
    }
    if (!tg_check_float(fn, "x", x) || !tg_check_same_kind(fn, "x", x, "weight", layer->weight)) return NULL;
    const int64_t in = layer->weight->shape[1], out = layer->weight->shape[0];
    if (x->shape[x->ndim - 1] != in) {
        const char *names[2] = {"x", "weight"};
        const tg_tensor *tensors[2] = {x, layer->weight};
        tg_error_tensors(TG_ERR_INVALID, 2, names, tensors, "%s: x's last dimension must be in_features = %lld", fn,
                         (long long)in);
        return NULL;
    }
    tg_tape_mark mark = tg_tape_get_mark(tape);
    tg_tensor *rows = x->ndim == 1 ? tg_reshape(tape, x, 2, (int64_t[]){1, in}) : x;
    tg_tensor *y = rows ? tg_matmul(tape, rows, layer->weight, false, true) : NULL;
    if (y && layer->bias) y = tg_add(tape, y, layer->bias);
    if (y && x->ndim == 1) y = tg_reshape(tape, y, 1, &out);
    return y ? y : tg_nn_fail(tape, mark, fn, "");
}

/* ---- Embedding -------------------------------------------------------------------------------- */

tg_status tg_nn_embedding_init(tg_nn_embedding *layer, tg_params *params, const char *prefix, int64_t num_embeddings,
                               int64_t dim, double std, tg_dtype dtype, tg_rng *rng)
{
    const char *fn = "tg_nn_embedding_init";
    if (!check_init(fn, layer, params, prefix, "num_embeddings", num_embeddings, "dim", dim)) return tg_last_status();
    if (!rng) return tg_set_error(TG_ERR_INVALID, "%s: rng is NULL", fn);
    if (!(std >= 0) || !isfinite(std))
        return tg_set_error(TG_ERR_INVALID, "%s: prefix '%s': std must be finite and ≥ 0, got %g", fn, prefix, std);
    const char *const names[1] = {"weight"};
    if (!tg_nn_check_new_params(fn, params, prefix, dtype, names, 1)) return tg_last_status();
    tg_tensor *weight = tg_nn_add_param(fn, params, prefix, "weight", dtype, 2, (int64_t[]){num_embeddings, dim});
    if (!weight) return tg_last_status();
    tg_status status = tg_nn_fill_normal(fn, weight, rng, 0.0, std);
    if (status == TG_OK) layer->weight = weight;
    return status;
}

tg_tensor *tg_nn_embedding_forward(tg_tape *tape, const tg_nn_embedding *layer, tg_tensor *ids)
{
    const char *fn = "tg_nn_embedding_forward";
    if (!tg_check_tape(fn, tape)) return NULL;
    if (!layer || !layer->weight) {
        tg_set_error(TG_ERR_INVALID, "%s: layer (or its weight) is NULL", fn);
        return NULL;
    }
    tg_tape_mark mark = tg_tape_get_mark(tape);
    tg_tensor *y = tg_embedding(tape, layer->weight, ids);
    return y ? y : tg_nn_fail(tape, mark, fn, "");
}

/* ---- RMSNorm -------------------------------------------------------------------------------- */

tg_status tg_nn_rmsnorm_init(tg_nn_rmsnorm *layer, tg_params *params, const char *prefix, int64_t dim, double eps,
                             tg_dtype dtype)
{
    const char *fn = "tg_nn_rmsnorm_init";
    if (!check_init(fn, layer, params, prefix, "dim", dim, NULL, 1)) return tg_last_status();
    if (!(eps >= 0) || !isfinite(eps))
        return tg_set_error(TG_ERR_INVALID, "%s: prefix '%s': eps must be finite and ≥ 0, got %g", fn, prefix, eps);
    const char *const names[1] = {"weight"};
    if (!tg_nn_check_new_params(fn, params, prefix, dtype, names, 1)) return tg_last_status();
    tg_tensor *weight = tg_nn_add_param(fn, params, prefix, "weight", dtype, 1, &dim);
    if (!weight) return tg_last_status();
    tg_status status = tg_fill(weight, 1.0);
    if (status != TG_OK) return status;
    *layer = (tg_nn_rmsnorm){weight, eps};
    return TG_OK;
}

tg_tensor *tg_nn_rmsnorm_forward(tg_tape *tape, const tg_nn_rmsnorm *layer, tg_tensor *x)
{
    const char *fn = "tg_nn_rmsnorm_forward";
    if (!tg_check_tape(fn, tape)) return NULL;
    if (!layer || !layer->weight) {
        tg_set_error(TG_ERR_INVALID, "%s: layer (or its weight) is NULL", fn);
        return NULL;
    }
    tg_tape_mark mark = tg_tape_get_mark(tape);
    tg_tensor *y = tg_rmsnorm(tape, x, layer->weight, layer->eps);
    return y ? y : tg_nn_fail(tape, mark, fn, "");
}
