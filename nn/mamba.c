/* nn/mamba.c: the Mamba mixer and language model, composed from ops.
 *
 * Layout. The mixer works channel-first, as the reference implementation does: in_proj
 * is computed as W·xᵀ per batch, which gives xz as (B, 2E, L) with time contiguous, the
 * layout in which the causal conv1d and the selective scan walk each channel along time.
 * x_proj and dt_proj are then plain W·u products in the same layout, the split of
 * x_proj's output into dt_low, Bm and Cm is three views (Bm and Cm come out as the
 * scan's (B, N, L)), and out_proj is yᵀ·Wᵀ, which brings the result back to (B, L, D)
 * for the residual stream. No transposed copy is made anywhere.
 *
 * Initialisation follows the reference Mamba (mamba_simple.py and mixer_seq_simple.py):
 *   A_log[d, n] = log(n + 1)           A = −(n + 1), the S4D-real choice
 *   D = 1
 *   in_proj, x_proj                    PyTorch's Linear default, U(±1/√fan_in)
 *   conv1d weight and bias             PyTorch's Conv1d default: fan_in = K for a depthwise
 *                                      kernel, so U(±1/√K) (the reference zeroes only the
 *                                      biases of Linear layers, not this one)
 *   dt_proj.weight                     U(±dt_rank^−½)
 *   dt_proj.bias                       softplus⁻¹(dt) = dt + log(−expm1(−dt)) with
 *                                      dt = exp(U(log dt_min, log dt_max)), at least dt_init_floor
 *   out_proj.weight                    the Linear default, then divided by √n_layer
 *   embedding                          N(0, embedding_std²); norms: ones
 * Each is drawn directly from its final distribution (the reference draws a default first
 * and then redraws or rescales it in place; the distributions are the same). */
#include "nn/internal.h"
#include "tapegrad/nn.h"
#include "tapegrad/ops.h"
#include "tapegrad/params.h"
#include "tapegrad/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- configuration ------------------------------------------------------------------------- */

/* A field that must be ≥ 0, where 0 picks the default. */
static bool resolve_size(const char *fn, const char *field, int64_t *value, int64_t fallback)
{
    if (*value < 0) {
        tg_set_error(TG_ERR_INVALID, "%s: config %s must be ≥ 1 (or 0 for the default, %lld), got %lld", fn, field,
                     (long long)fallback, (long long)*value);
        return false;
    }
    if (*value == 0) *value = fallback;
    return true;
}

static bool resolve_real(const char *fn, const char *field, double *value, double fallback)
{
    if (!(*value >= 0) || !isfinite(*value)) {
        tg_set_error(TG_ERR_INVALID, "%s: config %s must be finite and > 0 (or 0 for the default, %g), got %g", fn,
                     field, fallback, *value);
        return false;
    }
    if (*value == 0) *value = fallback;
    return true;
}

static bool require_positive(const char *fn, const char *field, int64_t value)
{
    if (value >= 1) return true;
    tg_set_error(TG_ERR_INVALID, "%s: config %s must be ≥ 1 (it has no default), got %lld", fn, field,
                 (long long)value);
    return false;
}

/* Whether all parameter counts fit comfortably in int64_t (computed in double: any total
 * below 2^62 is far from the limit whatever the rounding). */
static bool sizes_fit(const char *fn, const tg_mamba_config *c)
{
    double d = (double)c->d_model, e = (double)c->expand * d, n = (double)c->d_state, r = (double)c->dt_rank;
    double k = (double)c->d_conv, v = (double)c->vocab_size;
    double per_layer = e * n + e + 2 * e * d + e * k + e + (r + 2 * n) * e + e * r + e + d * e + d;
    double total = v * d + (double)c->n_layer * per_layer + d;
    if (total < 0x1p62) return true;
    tg_set_error(TG_ERR_OVERFLOW,
                 "%s: config sizes are too large: about %.3g parameters (vocab_size %lld, d_model "
                 "%lld, n_layer %lld, expand %lld, d_state %lld)",
                 fn, total, (long long)c->vocab_size, (long long)c->d_model, (long long)c->n_layer,
                 (long long)c->expand, (long long)c->d_state);
    return false;
}

static tg_status resolve(const char *fn, const tg_mamba_config *config, tg_mamba_config *out)
{
    if (!config || !out) return tg_set_error(TG_ERR_INVALID, "%s: %s is NULL", fn, !config ? "config" : "resolved");
    tg_mamba_config c = *config;
    if (!require_positive(fn, "vocab_size", c.vocab_size) || !require_positive(fn, "d_model", c.d_model) ||
        !require_positive(fn, "n_layer", c.n_layer) || !resolve_size(fn, "d_state", &c.d_state, 16) ||
        !resolve_size(fn, "expand", &c.expand, 2) || !resolve_size(fn, "d_conv", &c.d_conv, 4) ||
        !resolve_size(fn, "dt_rank", &c.dt_rank, (c.d_model + 15) / 16) ||
        !resolve_size(fn, "scan_chunk", &c.scan_chunk, 64) || !resolve_real(fn, "eps", &c.eps, 1e-5) ||
        !resolve_real(fn, "dt_min", &c.dt_min, 1e-3) || !resolve_real(fn, "dt_max", &c.dt_max, 0.1) ||
        !resolve_real(fn, "dt_init_floor", &c.dt_init_floor, 1e-4) ||
        !resolve_real(fn, "embedding_std", &c.embedding_std, 0.02))
        return tg_last_status();
    if ((int)c.dtype < 0 || c.dtype >= TG_DTYPE_COUNT || !tg_dtype_is_float(c.dtype))
        return tg_set_error(TG_ERR_DTYPE, "%s: config dtype must be a float dtype (f32, f64, bf16 or f16), not %s", fn,
                            (int)c.dtype >= 0 && c.dtype < TG_DTYPE_COUNT ? tg_dtype_name(c.dtype) : "unknown");
    if ((int)c.activations < TG_ACTIVATIONS_AUTO || c.activations > TG_ACTIVATIONS_KEEP)
        return tg_set_error(TG_ERR_INVALID,
                            "%s: config activations must be TG_ACTIVATIONS_AUTO, _RECOMPUTE or "
                            "_KEEP (got %d)",
                            fn, (int)c.activations);
    if (c.dt_min > c.dt_max)
        return tg_set_error(TG_ERR_INVALID, "%s: config dt_min (%g) must not exceed dt_max (%g)", fn, c.dt_min,
                            c.dt_max);
    if (!sizes_fit(fn, &c)) return TG_ERR_OVERFLOW;
    *out = c;
    return TG_OK;
}

tg_status tg_mamba_config_resolve(const tg_mamba_config *config, tg_mamba_config *resolved)
{
    return resolve("tg_mamba_config_resolve", config, resolved);
}

/* ---- the mixer: parameters and initialisation ---------------------------------------------- */

/* A_log[d, n] = log(n + 1). */
static tg_status init_A_log(const char *fn, tg_tensor *A_log, int64_t d_inner, int64_t d_state)
{
    double *values = tg_nn_host_buffer(fn, d_inner * d_state);
    if (!values) return TG_ERR_NOMEM;
    for (int64_t d = 0; d < d_inner; d++)
        for (int64_t n = 0; n < d_state; n++) values[d * d_state + n] = log((double)(n + 1));
    tg_status status = tg_nn_fill_values(fn, A_log, values);
    free(values);
    return status;
}

/* The bias whose softplus is dt, dt log-uniform in [dt_min, dt_max] and at least the floor:
 * softplus(b) = log(1 + e^b) = dt  ⇔  b = log(e^dt − 1) = dt + log(1 − e^−dt), written with
 * expm1 so that it stays accurate for small dt. */
static tg_status init_dt_bias(const char *fn, tg_tensor *bias, const tg_mamba_config *c, tg_rng *rng)
{
    int64_t n = tg_numel(bias);
    double *values = tg_nn_host_buffer(fn, n);
    if (!values) return TG_ERR_NOMEM;
    const double lo = log(c->dt_min), hi = log(c->dt_max);
    for (int64_t i = 0; i < n; i++) {
        double dt = fmax(exp(lo + (hi - lo) * tg_rng_uniform(rng)), c->dt_init_floor);
        values[i] = dt + log(-expm1(-dt));
    }
    tg_status status = tg_nn_fill_values(fn, bias, values);
    free(values);
    return status;
}

/* The Linear default U(±1/√in), then divided by √n_layer: the residual branches' outputs
 * add up over the layers, and this keeps the residual stream's variance from growing with
 * depth at initialisation. */
static tg_status init_out_proj(const char *fn, tg_tensor *weight, int64_t n_layer, tg_rng *rng)
{
    int64_t n = tg_numel(weight);
    double *values = tg_nn_host_buffer(fn, n);
    if (!values) return TG_ERR_NOMEM;
    const double bound = 1.0 / sqrt((double)weight->shape[1]), scale = 1.0 / sqrt((double)n_layer);
    for (int64_t i = 0; i < n; i++) values[i] = (-bound + 2 * bound * tg_rng_uniform(rng)) * scale;
    tg_status status = tg_nn_fill_values(fn, weight, values);
    free(values);
    return status;
}

/* Adds the parameters in the reference checkpoint's order (the module's own A_log and D
 * first, then its submodules). Fills each as soon as it exists, so the draws from rng
 * follow that order too. */
static tg_status mixer_init(const char *fn, tg_mamba_mixer *m, tg_params *params, const char *prefix,
                            const tg_mamba_config *c, tg_rng *rng)
{
    const int64_t D = c->d_model, E = c->expand * c->d_model, N = c->d_state, K = c->d_conv, R = c->dt_rank;
    tg_mamba_mixer made = {D, E, N, K, R, c->scan_chunk};
    made.activations = c->activations;
    tg_status status;
    tg_dtype dt = c->dtype;
    const double conv_bound = 1.0 / sqrt((double)K), dt_bound = 1.0 / sqrt((double)R);
    char name[TG_NN_NAME_MAX];

    if (!(made.A_log = tg_nn_add_param(fn, params, prefix, "A_log", dt, 2, (int64_t[]){E, N}))) return tg_last_status();
    if ((status = init_A_log(fn, made.A_log, E, N)) != TG_OK) return status;
    if (!(made.D = tg_nn_add_param(fn, params, prefix, "D", dt, 1, &E))) return tg_last_status();
    if ((status = tg_fill(made.D, 1.0)) != TG_OK) return status;

    snprintf(name, sizeof name, "%s%sin_proj", prefix, *prefix ? "." : "");
    if ((status = tg_nn_linear_init(&made.in_proj, params, name, D, 2 * E, false, dt, rng)) != TG_OK) return status;

    if (!(made.conv_weight = tg_nn_add_param(fn, params, prefix, "conv1d.weight", dt, 3, (int64_t[]){E, 1, K})))
        return tg_last_status();
    if ((status = tg_nn_fill_uniform(fn, made.conv_weight, rng, -conv_bound, conv_bound)) != TG_OK) return status;
    if (!(made.conv_bias = tg_nn_add_param(fn, params, prefix, "conv1d.bias", dt, 1, &E))) return tg_last_status();
    if ((status = tg_nn_fill_uniform(fn, made.conv_bias, rng, -conv_bound, conv_bound)) != TG_OK) return status;

    snprintf(name, sizeof name, "%s%sx_proj", prefix, *prefix ? "." : "");
    if ((status = tg_nn_linear_init(&made.x_proj, params, name, E, R + 2 * N, false, dt, rng)) != TG_OK) return status;

    if (!(made.dt_proj.weight = tg_nn_add_param(fn, params, prefix, "dt_proj.weight", dt, 2, (int64_t[]){E, R})))
        return tg_last_status();
    if ((status = tg_nn_fill_uniform(fn, made.dt_proj.weight, rng, -dt_bound, dt_bound)) != TG_OK) return status;
    if (!(made.dt_proj.bias = tg_nn_add_param(fn, params, prefix, "dt_proj.bias", dt, 1, &E))) return tg_last_status();
    if ((status = init_dt_bias(fn, made.dt_proj.bias, c, rng)) != TG_OK) return status;

    if (!(made.out_proj.weight = tg_nn_add_param(fn, params, prefix, "out_proj.weight", dt, 2, (int64_t[]){D, E})))
        return tg_last_status();
    if ((status = init_out_proj(fn, made.out_proj.weight, c->n_layer, rng)) != TG_OK) return status;
    *m = made;
    return TG_OK;
}

tg_status tg_mamba_mixer_init(tg_mamba_mixer *mixer, tg_params *params, const char *prefix,
                              const tg_mamba_config *config, tg_rng *rng)
{
    const char *fn = "tg_mamba_mixer_init";
    tg_mamba_config c;
    if (!mixer || !params || !prefix || !rng)
        return tg_set_error(TG_ERR_INVALID, "%s: %s is NULL", fn,
                            !mixer    ? "mixer"
                            : !params ? "params"
                            : !prefix ? "prefix"
                                      : "rng");
    tg_status status = resolve(fn, config, &c);
    if (status != TG_OK) return status;
    static const char *const names[] = {"A_log",          "D",
                                        "in_proj.weight", "conv1d.weight",
                                        "conv1d.bias",    "x_proj.weight",
                                        "dt_proj.weight", "dt_proj.bias",
                                        "out_proj.weight"};
    if (!tg_nn_check_new_params(fn, params, prefix, c.dtype, names, (int)(sizeof names / sizeof names[0])))
        return tg_last_status();
    return mixer_init(fn, mixer, params, prefix, &c, rng);
}

/* ---- the mixer: forward ---------------------------------------------------------------------- */

/* What the backward needs to make u and delta again: the conv's input and weights, and
 * dt_low (tensors the step keeps anyway). */
typedef struct {
    const tg_mamba_mixer *m;
    tg_tensor *conv_in, *conv_weight, *conv_initial, *dt_low;
} mixer_recompute;

static tg_status recompute_u_and_delta(tg_tape *tape, const void *ctx, tg_tensor **out)
{
    const mixer_recompute *r = ctx;
    tg_causal_conv1d_options conv = {r->m->conv_bias, r->conv_initial, TG_ACT_SILU, NULL};
    out[0] = tg_causal_conv1d(tape, r->conv_in, r->conv_weight, &conv);
    out[1] = out[0] ? tg_matmul(tape, r->m->dt_proj.weight, r->dt_low, false, false) : NULL;
    return out[1] ? TG_OK : tg_last_status();
}

/* Whether the mixer gives u and delta back after the forward, and the model the mixer's
 * output once the residual add has read it (tg_mamba_activations). */
static bool recomputes(const tg_mamba_mixer *m, const tg_tensor *x)
{
    return m->activations == TG_ACTIVATIONS_RECOMPUTE ||
           (m->activations == TG_ACTIVATIONS_AUTO && x->device != TG_DEVICE_CPU);
}

/* The mixer on x (B, L, d_model); *where names the step, for a message when a step fails.
 * final (when not NULL) receives the states; it is the caller's to publish on success. */
static tg_tensor *mixer_run(tg_tape *tape, const tg_mamba_mixer *m, tg_tensor *x, const tg_mamba_state *initial,
                            tg_mamba_state *final, const char **where)
{
    const int64_t E = m->d_inner, N = m->d_state, R = m->dt_rank, K = m->d_conv;
    tg_tensor *xz_parts[2], *x_dbl_parts[3];

    *where = "in_proj"; /* W (2E, D) times each batch's xᵀ (D, L): xz (B, 2E, L) */
    tg_tensor *xz = tg_matmul(tape, m->in_proj.weight, x, false, true);
    if (!xz || tg_split(tape, xz, 1, 2, (int64_t[]){E, E}, xz_parts) != TG_OK) return NULL;

    *where = "conv1d"; /* the (E, 1, K) checkpoint layout is the op's (E, K) weight as a view */
    tg_tensor *conv_weight = tg_reshape(tape, m->conv_weight, 2, (int64_t[]){E, K});
    tg_causal_conv1d_options conv = {m->conv_bias, initial ? initial->conv : NULL, TG_ACT_SILU,
                                     final && K > 1 ? &final->conv : NULL};
    tg_tensor *u = conv_weight ? tg_causal_conv1d(tape, xz_parts[0], conv_weight, &conv) : NULL;
    if (!u) return NULL;

    *where = "x_proj"; /* (R + 2N, E)·u: dt_low (B, R, L), Bm and Cm (B, N, L) */
    tg_tensor *x_dbl = tg_matmul(tape, m->x_proj.weight, u, false, false);
    if (!x_dbl || tg_split(tape, x_dbl, 1, 3, (int64_t[]){R, N, N}, x_dbl_parts) != TG_OK) return NULL;

    *where = "dt_proj"; /* its bias goes into the scan, inside the softplus */
    tg_tensor *delta = tg_matmul(tape, m->dt_proj.weight, x_dbl_parts[0], false, false);
    if (!delta) return NULL;

    *where = "A = -exp(A_log)";
    tg_tensor *A = tg_neg(tape, tg_exp(tape, m->A_log));
    if (!A) return NULL;

    *where = "selective scan"; /* y = (scan + D·u) · silu(z) */
    tg_selective_scan_options scan = {
        m->D,         xz_parts[1], m->dt_proj.bias, true, initial ? initial->ssm : NULL, final ? &final->ssm : NULL,
        m->scan_chunk};
    tg_tensor *y = tg_selective_scan(tape, u, delta, A, x_dbl_parts[1], x_dbl_parts[2], &scan);
    if (!y) return NULL;

    *where = "giving back u and delta until the backward";
    mixer_recompute again = {m, xz_parts[0], conv_weight, conv.initial_states, x_dbl_parts[0]};
    if (recomputes(m, x) && tg_recompute_in_backward(tape, 2, (tg_tensor *[]){u, delta}, recompute_u_and_delta, &again,
                                                     sizeof again) != TG_OK)
        return NULL;

    *where = "out_proj"; /* yᵀ (L, E) times Wᵀ (E, D) per batch: back to (B, L, D) */
    return tg_matmul(tape, y, m->out_proj.weight, true, true);
}

/* One part of an initial state: absent, or a float tensor of the mixer's dtype and device
 * with the given shape (B, d_inner, width). */
static bool check_state_part(const char *fn, const char *name, const tg_tensor *part, const tg_tensor *like, int64_t B,
                             int64_t d_inner, int64_t width)
{
    if (!part) return true;
    if (!tg_check_float(fn, name, part) || !tg_check_same_kind(fn, name, part, "the mixer's parameters", like))
        return false;
    const int64_t shape[3] = {B, d_inner, width};
    if (part->ndim == 3 && memcmp(part->shape, shape, sizeof shape) == 0) return true;
    char want[64];
    tg_error_tensors(TG_ERR_INVALID, 1, &name, &part, "%s: %s must have shape %s", fn, name,
                     tg_shape_str(3, shape, want, sizeof want));
    return false;
}

/* A mixer's initial state for a batch of B rows: conv (B, d_inner, d_conv − 1) and ssm
 * (B, d_inner, d_state), either may be NULL. `name` says which state ("initial[2]"). */
static bool check_initial_state(const char *fn, const char *name, const tg_mamba_mixer *m,
                                const tg_mamba_state *initial, int64_t B)
{
    if (!initial) return true;
    char conv[48], ssm[48];
    snprintf(conv, sizeof conv, "%s.conv", name);
    snprintf(ssm, sizeof ssm, "%s.ssm", name);
    const tg_tensor *like = m->in_proj.weight;
    if (initial->conv && m->d_conv == 1) {
        tg_set_error(TG_ERR_INVALID, "%s: %s must be NULL: a mixer with d_conv = 1 keeps no conv state", fn, conv);
        return false;
    }
    return check_state_part(fn, conv, initial->conv, like, B, m->d_inner, m->d_conv - 1) &&
           check_state_part(fn, ssm, initial->ssm, like, B, m->d_inner, m->d_state);
}

tg_tensor *tg_mamba_mixer_forward(tg_tape *tape, const tg_mamba_mixer *mixer, tg_tensor *x,
                                  const tg_mamba_state *initial, tg_mamba_state *final)
{
    const char *fn = "tg_mamba_mixer_forward";
    if (!tg_check_tape(fn, tape)) return NULL;
    if (!mixer || !mixer->in_proj.weight) {
        tg_set_error(TG_ERR_INVALID, "%s: mixer is NULL or not initialised", fn);
        return NULL;
    }
    if (!tg_check_float(fn, "x", x) || !tg_check_ndim(fn, "x", x, 3) ||
        !tg_check_same_kind(fn, "x", x, "in_proj.weight", mixer->in_proj.weight))
        return NULL;
    if (x->shape[2] != mixer->d_model) {
        const char *names[1] = {"x"};
        const tg_tensor *tensors[1] = {x};
        tg_error_tensors(TG_ERR_INVALID, 1, names, tensors, "%s: x must be (B, L, d_model) with d_model = %lld", fn,
                         (long long)mixer->d_model);
        return NULL;
    }
    if (!check_initial_state(fn, "initial", mixer, initial, x->shape[0])) return NULL;
    tg_tape_mark mark = tg_tape_get_mark(tape);
    tg_mamba_state state = {0};
    const char *where = "";
    tg_tensor *y = mixer_run(tape, mixer, x, initial, final ? &state : NULL, &where);
    if (!y) return tg_nn_fail(tape, mark, fn, where);
    if (final) *final = state;
    return y;
}

/* ---- the language model ----------------------------------------------------------------------- */

/* A layer's RMSNorm(h), the mixer's input, made again from h in the backward: the fused
 * add-and-norm normalises the sum as stored, so this is the forward's value bit for bit. */
typedef struct {
    tg_tensor *h, *weight;
    double eps;
} norm_recompute;

static tg_status recompute_normed(tg_tape *tape, const void *ctx, tg_tensor **out)
{
    const norm_recompute *r = ctx;
    out[0] = tg_rmsnorm(tape, r->h, r->weight, r->eps);
    return out[0] ? TG_OK : tg_last_status();
}

/* Once a mixer has run, in_proj has read its input normed = RMSNorm(h) and nothing else of
 * the forward will: it is given back and recomputed (with u and delta, where they are). */
static tg_status give_back_mixer_input(tg_tape *tape, const tg_mamba_mixer *m, tg_tensor *normed, tg_tensor *h,
                                       const tg_nn_rmsnorm *norm)
{
    if (!recomputes(m, normed)) return TG_OK;
    norm_recompute again = {h, norm->weight, norm->eps};
    return tg_recompute_in_backward(tape, 1, &normed, recompute_normed, &again, sizeof again);
}

void tg_mamba_free(tg_mamba *model)
{
    if (!model) return;
    free(model->layers);
    free(model);
}

/* The store must not hold any of the model's names already, and must share its dtype:
 * checked before anything is added, so a rejected model leaves the store as it was. */
static bool store_fits(const char *fn, const tg_params *params, tg_dtype dtype)
{
    for (size_t i = 0; i < tg_params_count(params); i++) {
        const tg_tensor *p = tg_params_get(params, i);
        if (strncmp(p->name, "backbone.", 9) == 0) {
            tg_set_error(TG_ERR_INVALID, "%s: params already holds '%s' (one model per store)", fn, p->name);
            return false;
        }
        if (p->dtype != dtype) {
            tg_set_error(TG_ERR_DTYPE, "%s: config dtype is %s but params holds %s parameters ('%s')", fn,
                         tg_dtype_name(dtype), tg_dtype_name(p->dtype), p->name);
            return false;
        }
    }
    return true;
}

static tg_status model_init(const char *fn, tg_mamba *model, tg_params *params, tg_rng *rng)
{
    const tg_mamba_config *c = &model->config;
    char prefix[TG_NN_NAME_MAX];
    tg_status status = tg_nn_embedding_init(&model->embedding, params, "backbone.embedding", c->vocab_size, c->d_model,
                                            c->embedding_std, c->dtype, rng);
    for (int64_t i = 0; status == TG_OK && i < c->n_layer; i++) {
        snprintf(prefix, sizeof prefix, "backbone.layers.%lld.mixer", (long long)i);
        status = mixer_init(fn, &model->layers[i].mixer, params, prefix, c, rng);
        snprintf(prefix, sizeof prefix, "backbone.layers.%lld.norm", (long long)i);
        if (status == TG_OK)
            status = tg_nn_rmsnorm_init(&model->layers[i].norm, params, prefix, c->d_model, c->eps, c->dtype);
    }
    if (status == TG_OK)
        status = tg_nn_rmsnorm_init(&model->norm_f, params, "backbone.norm_f", c->d_model, c->eps, c->dtype);
    return status;
}

tg_mamba *tg_mamba_create(const tg_mamba_config *config, tg_params *params, tg_rng *rng)
{
    const char *fn = "tg_mamba_create";
    tg_mamba_config c;
    if (resolve(fn, config, &c) != TG_OK) return NULL;
    if (!params || !rng) {
        tg_set_error(TG_ERR_INVALID, "%s: %s is NULL", fn, !params ? "params" : "rng");
        return NULL;
    }
    if (!store_fits(fn, params, c.dtype)) return NULL;
    tg_mamba *model = calloc(1, sizeof *model);
    tg_mamba_layer *layers = NULL;
    if ((uint64_t)c.n_layer <= SIZE_MAX / sizeof *layers) layers = calloc((size_t)c.n_layer, sizeof *layers);
    if (!model || !layers) {
        free(model);
        free(layers);
        tg_set_error(TG_ERR_NOMEM, "%s: out of memory for %lld layers", fn, (long long)c.n_layer);
        return NULL;
    }
    *model = (tg_mamba){.config = c, .params = params, .layers = layers};
    if (model_init(fn, model, params, rng) != TG_OK) {
        /* Only an allocation can fail here (the checks above ran first); the parameters
         * added so far stay in the store. */
        if (strncmp(tg_last_error(), fn, strlen(fn)) != 0) {
            char inner[768];
            snprintf(inner, sizeof inner, "%s", tg_last_error());
            tg_set_error(TG_ERR_NOMEM, "%s: %s", fn, inner);
        }
        tg_mamba_free(model);
        return NULL;
    }
    return model;
}

/* The checks a forward makes before it records anything. */
static bool check_forward(const char *fn, const tg_tape *tape, const tg_mamba *model, const tg_tensor *ids)
{
    if (!tg_check_tape(fn, tape)) return false;
    if (!model || !model->layers || !model->embedding.weight) {
        tg_set_error(TG_ERR_INVALID, "%s: model is NULL or not created", fn);
        return false;
    }
    if (!tg_check_tensor(fn, "ids", ids) || !tg_check_ndim(fn, "ids", ids, 2)) return false;
    const char *names[2] = {"ids", "embedding"};
    const tg_tensor *tensors[2] = {ids, model->embedding.weight};
    if (ids->dtype != TG_I32) {
        tg_error_tensors(TG_ERR_DTYPE, 2, names, tensors, "%s: ids must be i32 token ids (B, L), not %s", fn,
                         tg_dtype_name(ids->dtype));
        return false;
    }
    if (ids->device != model->embedding.weight->device) {
        tg_error_tensors(TG_ERR_DEVICE, 2, names, tensors, "%s: ids must be on the model's device (%s)", fn,
                         tg_device_name(model->embedding.weight->device));
        return false;
    }
    return true;
}

/* embedding → n_layer × (h += mixer(norm(h))) → norm_f → tied head, each residual add fused
 * into the norm after it (the next layer's, or norm_f). *where names the failing step;
 * final[i] are written as the layers run. */
static tg_tensor *model_run(tg_tape *tape, const tg_mamba *model, tg_tensor *ids, const tg_mamba_state *initial,
                            tg_mamba_state *final, char *where, size_t where_size)
{
    const tg_mamba_config *c = &model->config;
    snprintf(where, where_size, "embedding");
    tg_tensor *h = tg_embedding(tape, model->embedding.weight, ids);
    const tg_nn_rmsnorm *first = c->n_layer > 0 ? &model->layers[0].norm : &model->norm_f;
    snprintf(where, where_size, c->n_layer > 0 ? "layer 0 norm" : "norm_f");
    tg_tensor *normed = h ? tg_rmsnorm(tape, h, first->weight, first->eps) : NULL;
    for (int64_t i = 0; normed && i < c->n_layer; i++) {
        const char *step = "";
        tg_tensor *mixed = mixer_run(tape, &model->layers[i].mixer, normed, initial ? &initial[i] : NULL,
                                     final ? &final[i] : NULL, &step);
        if (!mixed) {
            snprintf(where, where_size, "layer %lld mixer: %s", (long long)i, step);
            return NULL;
        }
        snprintf(where, where_size, "layer %lld: giving back the norm's output until the backward", (long long)i);
        if (give_back_mixer_input(tape, &model->layers[i].mixer, normed, h, &model->layers[i].norm) != TG_OK)
            return NULL;
        const tg_nn_rmsnorm *next = i + 1 < c->n_layer ? &model->layers[i + 1].norm : &model->norm_f;
        snprintf(where, where_size, "layer %lld residual and the next norm", (long long)i);
        normed = tg_add_rmsnorm(tape, h, mixed, next->weight, next->eps, &h);
        /* the norm's backward reads the sum h, not the mixer's output */
        if (normed && recomputes(&model->layers[i].mixer, mixed) && tg_give_back(tape, 1, &mixed) != TG_OK) return NULL;
    }
    if (!normed) return NULL;
    snprintf(where, where_size, "lm_head (tied to the embedding)");
    return tg_matmul(tape, normed, model->embedding.weight, false, true);
}

tg_tensor *tg_mamba_forward(tg_tape *tape, const tg_mamba *model, tg_tensor *ids, const tg_mamba_state *initial,
                            tg_mamba_state *final)
{
    const char *fn = "tg_mamba_forward";
    if (!check_forward(fn, tape, model, ids)) return NULL;
    for (int64_t i = 0; initial && i < model->config.n_layer; i++) {
        char name[32];
        snprintf(name, sizeof name, "initial[%lld]", (long long)i);
        if (!check_initial_state(fn, name, &model->layers[i].mixer, &initial[i], ids->shape[0])) return NULL;
    }
    tg_tape_mark mark = tg_tape_get_mark(tape);
    char where[96] = "";
    /* The states go to the tape first and to the caller only once the whole forward worked. */
    size_t n = (size_t)model->config.n_layer;
    tg_mamba_state *states = final ? tg_tape_alloc(tape, n * sizeof *states) : NULL;
    if (final && !states) {
        tg_set_error(TG_ERR_NOMEM, "%s: out of memory for %zu layer states", fn, n);
        return tg_op_fail(tape, mark);
    }
    if (states) memset(states, 0, n * sizeof *states);
    tg_tensor *logits = model_run(tape, model, ids, initial, states, where, sizeof where);
    if (!logits) return tg_nn_fail(tape, mark, fn, where);
    if (final) memcpy(final, states, n * sizeof *states);
    return logits;
}

tg_tensor *tg_mamba_loss(tg_tape *tape, const tg_mamba *model, tg_tensor *ids, tg_tensor *targets, int32_t ignore_index)
{
    const char *fn = "tg_mamba_loss";
    if (!check_forward(fn, tape, model, ids)) return NULL;
    tg_tape_mark mark = tg_tape_get_mark(tape);
    char where[96] = "";
    tg_tensor *logits = model_run(tape, model, ids, NULL, NULL, where, sizeof where);
    if (!logits) return tg_nn_fail(tape, mark, fn, where);
    tg_tensor *loss = tg_cross_entropy(tape, logits, targets, ignore_index);
    return loss ? loss : tg_nn_fail(tape, mark, fn, "cross-entropy");
}
