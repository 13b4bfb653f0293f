/* kernels/cpu/conv1d.c: causal conv1d forward and backward on the CPU, in double.
 *
 * Each (b, c) row is handled on its own: the row of xe (history + x, length K−1+L) is
 * gathered once into a scratch buffer, so the tap loops read contiguous memory whatever
 * the layout of x (channel-first, channel-last or any other strides). */
#include "kernels/conv1d.h"
#include "kernels/cpu/scalar_math.h"

#include <math.h>
#include <stdlib.h>

/* Element (i0, i1, i2) of a rank-3 tensor, as a double. */
static double at3(const tg_tensor *t, int64_t i0, int64_t i1, int64_t i2)
{
    return tg_load(tg_bytes(t), t->dtype, i0 * t->strides[0] + i1 * t->strides[1] + i2 * t->strides[2]);
}

static void put3(tg_tensor *t, int64_t i0, int64_t i1, int64_t i2, double v)
{
    tg_store(tg_bytes(t), t->dtype, i0 * t->strides[0] + i1 * t->strides[1] + i2 * t->strides[2], v);
}

static double at2(const tg_tensor *t, int64_t i0, int64_t i1)
{
    return tg_load(tg_bytes(t), t->dtype, i0 * t->strides[0] + i1 * t->strides[1]);
}

static double at1(const tg_tensor *t, int64_t i0) { return tg_load(tg_bytes(t), t->dtype, i0 * t->strides[0]); }

/* xe for row (b, c): K−1 history steps, then the L steps of x. */
static void gather_row(const tg_conv1d_args *a, int64_t b, int64_t c, int64_t K, int64_t L, double *xe)
{
    for (int64_t j = 0; j < K - 1; j++) xe[j] = a->initial_states ? at3(a->initial_states, b, c, j) : 0.0;
    for (int64_t t = 0; t < L; t++) xe[K - 1 + t] = at3(a->x, b, c, t);
}

static double pre_activation(const double *xe, const double *w, int64_t K, double bias, int64_t t)
{
    double z = bias;
    for (int64_t k = 0; k < K; k++) z += w[k] * xe[t + k];
    return z;
}

/* Weight row c and bias c as doubles. */
static double load_channel(const tg_conv1d_args *a, int64_t c, int64_t K, double *w)
{
    for (int64_t k = 0; k < K; k++) w[k] = at2(a->weight, c, k);
    return a->bias ? at1(a->bias, c) : 0.0;
}

tg_status tg_cpu_causal_conv1d_fwd(const tg_conv1d_args *a, tg_tensor *out, tg_tensor *final_states)
{
    const int64_t B = a->x->shape[0], C = a->x->shape[1], L = a->x->shape[2], K = a->weight->shape[1];
    double *xe = malloc(sizeof(double) * (size_t)(K - 1 + L)), *w = malloc(sizeof(double) * (size_t)K);
    if (!xe || !w) {
        free(xe);
        free(w);
        return tg_set_error(TG_ERR_NOMEM, "tg_causal_conv1d: out of memory for a row buffer");
    }
    for (int64_t c = 0; c < C; c++) {
        double bias = load_channel(a, c, K, w);
        for (int64_t b = 0; b < B; b++) {
            gather_row(a, b, c, K, L, xe);
            for (int64_t t = 0; t < L; t++) {
                double z = pre_activation(xe, w, K, bias, t);
                put3(out, b, c, t, a->activation == TG_ACT_SILU ? z * tg_sigmoid_of(z) : z);
            }
            for (int64_t j = 0; final_states && j < K - 1; j++) put3(final_states, b, c, j, xe[L + j]);
        }
    }
    free(xe);
    free(w);
    return TG_OK;
}

/* g[t] = dout[t] · act'(z[t]), recomputing z from xe (the activation is never saved). */
static void output_gradient(const tg_conv1d_args *a, const tg_tensor *dout, int64_t b, int64_t c, const double *xe,
                            const double *w, double bias, int64_t K, int64_t L, double *g)
{
    for (int64_t t = 0; t < L; t++) {
        double d = dout ? at3(dout, b, c, t) : 0.0;
        if (a->activation == TG_ACT_SILU) d *= tg_silu_derivative(pre_activation(xe, w, K, bias, t));
        g[t] = d;
    }
}

tg_status tg_cpu_causal_conv1d_bwd(const tg_conv1d_args *a, const tg_tensor *dout, const tg_tensor *dfinal,
                                   tg_tensor *dx, tg_tensor *dweight, tg_tensor *dbias, tg_tensor *dinitial)
{
    const int64_t B = a->x->shape[0], C = a->x->shape[1], L = a->x->shape[2], K = a->weight->shape[1];
    const int64_t E = K - 1 + L; /* length of xe */
    double *xe = malloc(sizeof(double) * (size_t)E), *dxe = malloc(sizeof(double) * (size_t)E);
    double *g = malloc(sizeof(double) * (size_t)L), *w = malloc(sizeof(double) * (size_t)K);
    double *dw = malloc(sizeof(double) * (size_t)K);
    tg_status status = TG_OK;
    if (!xe || !dxe || !g || !w || !dw) {
        status = tg_set_error(TG_ERR_NOMEM, "tg_causal_conv1d backward: out of memory for a row buffer");
        goto done;
    }
    for (int64_t c = 0; c < C; c++) {
        double bias = load_channel(a, c, K, w), db = 0.0;
        for (int64_t k = 0; k < K; k++) dw[k] = 0.0;
        for (int64_t b = 0; b < B; b++) { /* fixed order over b and t: deterministic sums */
            gather_row(a, b, c, K, L, xe);
            output_gradient(a, dout, b, c, xe, w, bias, K, L, g);
            /* dw[k] = Σ_t g[t]·xe[t+k]; dbias = Σ_t g[t] */
            for (int64_t t = 0; t < L; t++) {
                db += g[t];
                for (int64_t k = 0; k < K; k++) dw[k] += g[t] * xe[t + k];
            }
            /* dxe[s] = Σ_k w[k]·g[s−k] (the reversed, shifted sum), plus the gradient of
             * final_states, which are xe[L .. L+K−2]. */
            for (int64_t s = 0; s < E; s++) {
                double sum = 0.0;
                for (int64_t k = 0; k < K; k++)
                    if (s - k >= 0 && s - k < L) sum += w[k] * g[s - k];
                if (dfinal && s >= L) sum += at3(dfinal, b, c, s - L);
                dxe[s] = sum;
            }
            for (int64_t t = 0; dx && t < L; t++) put3(dx, b, c, t, dxe[K - 1 + t]);
            for (int64_t j = 0; dinitial && j < K - 1; j++) put3(dinitial, b, c, j, dxe[j]);
        }
        for (int64_t k = 0; dweight && k < K; k++)
            tg_store(tg_bytes(dweight), dweight->dtype, c * dweight->strides[0] + k * dweight->strides[1], dw[k]);
        if (dbias) tg_store(tg_bytes(dbias), dbias->dtype, c * dbias->strides[0], db);
    }
done:
    free(xe);
    free(dxe);
    free(g);
    free(w);
    free(dw);
    return status;
}
