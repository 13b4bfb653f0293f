/* kernels/cpu/conv1d_float.c: causal conv1d on the CPU for f32, bf16 and f16 storage, in
 * float32 maths (kernels/cpu/conv1d.c keeps the double path for f64, the reference).
 *
 * As there, each (b, c) row is gathered into a buffer (K−1 history steps, then x) and the
 * channels are split over threads, a channel's rows in batch order on one thread. Here the
 * buffers hold floats, so the tap loops (each tap one pass over the row, taps added in k
 * order) run 16 lanes to an AVX-512 vector. The weight and bias gradients are sums over
 * b and t: each product g·xe is taken in double (exactly), a row's products are added in 8
 * double lanes (lane j holds the steps t ≡ j mod 8) that are then added in a fixed tree,
 * and the rows are added in batch order. The build never contracts a product into a sum,
 * so every instruction set and thread count gives the same bits. */
#include "kernels/cpu/conv1d_job.h"
#include "kernels/cpu/float_math.h"
#include "kernels/cpu/rows.h"
#include "tapegrad/ops.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define LANES 8 /* doubles per vector of the weight-gradient sums */

/* The 8 double lanes as two halves of 4 (lanes 0–3 and 4–7): one AVX2 register each. GCC
 * keeps a loop-carried 8-double vector in memory on CPUs whose registers are narrower. */
typedef tg_four_doubles four_doubles;
typedef struct {
    four_doubles low, high;
} sum_lanes;
#if defined(__GNUC__)                    /* GCC and Clang */
#pragma GCC diagnostic ignored "-Wpsabi" /* vectors passed by value between static functions only */
#endif

/* Rows padded to whole vectors: the padding holds zeros, so it adds nothing to a sum. */
static int64_t padded(int64_t n) { return (n + LANES - 1) / LANES * LANES; }

/* xe for row (b, c): K−1 history steps (or zeros), then the L steps of x. */
static void gather_row(const tg_conv1d_args *a, int64_t b, int64_t c, int64_t K, int64_t L, float *xe)
{
    const tg_tensor *h = a->initial_states, *x = a->x;
    if (h)
        tg_load_row_float(h, b * h->strides[0] + c * h->strides[1], h->strides[2], K - 1, xe);
    else
        memset(xe, 0, sizeof(float) * (size_t)(K - 1));
    tg_load_row_float(x, b * x->strides[0] + c * x->strides[1], x->strides[2], L, xe + K - 1);
}

static void load_row3(const tg_tensor *t, int64_t b, int64_t c, int64_t n, float *out)
{
    tg_load_row_float(t, b * t->strides[0] + c * t->strides[1], t->strides[2], n, out);
}

static void store_row3(tg_tensor *t, int64_t b, int64_t c, int64_t n, const float *values)
{
    tg_store_row_float(t, b * t->strides[0] + c * t->strides[1], t->strides[2], n, values);
}

/* z[t] = bias + Σ_k w[k]·xe[t+k], the taps added in k order. */
TG_VECTOR_CLONES
static void pre_activations(const float *restrict xe, const float *restrict w, int64_t K, float bias, int64_t L,
                            float *restrict z)
{
    for (int64_t t = 0; t < L; t++) z[t] = bias;
    for (int64_t k = 0; k < K; k++)
        for (int64_t t = 0; t < L; t++) z[t] += w[k] * xe[t + k];
}

TG_VECTOR_CLONES
static void silu_row(float *z, int64_t L)
{
    for (int64_t t = 0; t < L; t++) z[t] *= tg_sigmoid_float(z[t]);
}

/* g[t] ← g[t]·silu'(z[t]) = g·σ·(1 + z·(1 − σ)). */
TG_VECTOR_CLONES
static void silu_slope_row(float *restrict g, const float *restrict z, int64_t L)
{
    for (int64_t t = 0; t < L; t++) {
        const float sigma = tg_sigmoid_float(z[t]);
        g[t] *= sigma * (1.0f + z[t] * (1.0f - sigma));
    }
}

/* dxe[e] = Σ_k w[k]·g[e−k] over the K − 1 + L steps of xe, the taps added in k order. */
TG_VECTOR_CLONES
static void input_gradient(const float *restrict w, const float *restrict g, int64_t K, int64_t L, float *restrict dxe)
{
    memset(dxe, 0, sizeof(float) * (size_t)(K - 1 + L));
    for (int64_t k = 0; k < K; k++)
        for (int64_t t = 0; t < L; t++) dxe[t + k] += w[k] * g[t];
}

/* p[0 .. 4) in double. */
static four_doubles load_widened(const float *p)
{
    tg_four_floats v;
    memcpy(&v, p, sizeof v);
    return tg_widen_four(v);
}

/* The lanes' sum, always in the same tree: ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)). */
static double add_lanes(sum_lanes v)
{
    const four_doubles pairs = v.low + v.high;
    return (pairs[0] + pairs[2]) + (pairs[1] + pairs[3]);
}

/* dw[k] += Σ_t g[t]·xe[t+k] and *db += Σ_t g[t] over a row whose g is padded with zeros to
 * `steps`, a multiple of LANES (xe has K − 1 + steps readable floats). */
TG_VECTOR_CLONES
static void weight_gradient(const float *g, const float *xe, int64_t K, int64_t steps, double *dw, double *db)
{
    sum_lanes bias_sum = {{0}, {0}};
    for (int64_t t = 0; t < steps; t += LANES) {
        bias_sum.low += load_widened(g + t);
        bias_sum.high += load_widened(g + t + 4);
    }
    *db += add_lanes(bias_sum);
    for (int64_t k = 0; k < K; k++) {
        sum_lanes sum = {{0}, {0}};
        for (int64_t t = 0; t < steps; t += LANES) {
            sum.low += load_widened(g + t) * load_widened(xe + t + k);
            sum.high += load_widened(g + t + 4) * load_widened(xe + t + k + 4);
        }
        dw[k] += add_lanes(sum);
    }
}

/* One thread's buffers: rows of xe and dxe (K − 1 + padded L), g and z (padded L), and the
 * channel's taps and their gradient sums. */
typedef struct {
    float *xe, *dxe, *g, *z, *w;
    double *dw;
} conv_scratch;

static bool scratch_alloc(conv_scratch *s, int64_t K, int64_t L)
{
    const int64_t steps = padded(L), rows = K - 1 + steps, z = steps > K - 1 ? steps : K - 1;
    *s = (conv_scratch){calloc((size_t)rows, sizeof(float)),      calloc((size_t)rows, sizeof(float)),
                        calloc((size_t)steps + 1, sizeof(float)), calloc((size_t)z + 1, sizeof(float)),
                        calloc((size_t)K, sizeof(float)),         calloc((size_t)K, sizeof(double))};
    return s->xe && s->dxe && s->g && s->z && s->w && s->dw;
}

static void scratch_free(conv_scratch *s)
{
    free(s->xe), free(s->dxe), free(s->g), free(s->z), free(s->w), free(s->dw);
}

/* Weight row c into w; bias c (0 without one). */
static float load_channel(const tg_conv1d_args *a, int64_t c, int64_t K, float *w)
{
    tg_load_row_float(a->weight, c * a->weight->strides[0], a->weight->strides[1], K, w);
    return a->bias ? (float)tg_load(tg_bytes(a->bias), a->bias->dtype, c * a->bias->strides[0]) : 0.0f;
}

void conv_float_forward_channels(void *context, int64_t c_begin, int64_t c_end)
{
    conv_job *job = context;
    const tg_conv1d_args *a = job->a;
    const int64_t B = a->x->shape[0], L = a->x->shape[2], K = a->weight->shape[1];
    conv_scratch s;
    const bool ok = scratch_alloc(&s, K, L);
    if (!ok) atomic_store(&job->out_of_memory, true);
    for (int64_t c = c_begin; ok && c < c_end; c++) {
        const float bias = load_channel(a, c, K, s.w);
        for (int64_t b = 0; b < B; b++) {
            gather_row(a, b, c, K, L, s.xe);
            pre_activations(s.xe, s.w, K, bias, L, s.z);
            if (a->activation == TG_ACT_SILU) silu_row(s.z, L);
            store_row3(job->out, b, c, L, s.z);
            if (job->final_states) store_row3(job->final_states, b, c, K - 1, s.xe + L);
        }
    }
    scratch_free(&s);
}

/* Row (b, c)'s share of dweight and dbias, and its dx and dinitial_states. g past L stays 0
 * (the buffers start zeroed and only the first L are written). */
static void backward_row(const conv_job *job, int64_t b, int64_t c, float bias, double *db, conv_scratch *s)
{
    const tg_conv1d_args *a = job->a;
    const int64_t L = a->x->shape[2], K = a->weight->shape[1];
    gather_row(a, b, c, K, L, s->xe);
    if (job->dout)
        load_row3(job->dout, b, c, L, s->g);
    else
        memset(s->g, 0, sizeof(float) * (size_t)L);
    if (a->activation == TG_ACT_SILU) {
        pre_activations(s->xe, s->w, K, bias, L, s->z);
        silu_slope_row(s->g, s->z, L);
    }
    weight_gradient(s->g, s->xe, K, padded(L), s->dw, db);
    input_gradient(s->w, s->g, K, L, s->dxe);
    if (job->dfinal) { /* final_states are xe[L .. L + K − 2] */
        load_row3(job->dfinal, b, c, K - 1, s->z);
        for (int64_t j = 0; j < K - 1; j++) s->dxe[L + j] += s->z[j];
    }
    if (job->dx) store_row3(job->dx, b, c, L, s->dxe + K - 1);
    if (job->dinitial) store_row3(job->dinitial, b, c, K - 1, s->dxe);
}

void conv_float_backward_channels(void *context, int64_t c_begin, int64_t c_end)
{
    conv_job *job = context;
    const tg_conv1d_args *a = job->a;
    const int64_t B = a->x->shape[0], L = a->x->shape[2], K = a->weight->shape[1];
    conv_scratch s;
    if (!scratch_alloc(&s, K, L)) {
        atomic_store(&job->out_of_memory, true);
        scratch_free(&s);
        return;
    }
    for (int64_t c = c_begin; c < c_end; c++) {
        const float bias = load_channel(a, c, K, s.w);
        double db = 0.0;
        memset(s.dw, 0, sizeof(double) * (size_t)K);
        for (int64_t b = 0; b < B; b++) backward_row(job, b, c, bias, &db, &s); /* batch order: fixed sums */
        if (job->dweight) {
            for (int64_t k = 0; k < K; k++)
                tg_store(tg_bytes(job->dweight), job->dweight->dtype,
                         c * job->dweight->strides[0] + k * job->dweight->strides[1], s.dw[k]);
        }
        if (job->dbias) tg_store(tg_bytes(job->dbias), job->dbias->dtype, c * job->dbias->strides[0], db);
    }
    scratch_free(&s);
}
