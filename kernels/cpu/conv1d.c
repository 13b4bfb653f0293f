/* kernels/cpu/conv1d.c: causal conv1d forward and backward on the CPU in double, for f64
 * (the reference the gradient checks use); for other dtypes its entry points run the range
 * functions of kernels/cpu/conv1d_float.c (kernels/cpu/conv1d_job.h).
 *
 * Each (b, c) row is handled on its own: the row of xe (history + x, length K−1+L) is
 * gathered once into a scratch buffer, so the tap loops read contiguous memory whatever
 * the layout of x (channel-first, channel-last or any other strides). The channels are
 * split over CPU threads: a channel's rows, and its dweight and dbias sums (over b, then t,
 * in that fixed order), belong to one thread, so the split changes no result. */
#include "kernels/cpu/conv1d_job.h"
#include "kernels/cpu/rows.h"
#include "kernels/cpu/float_math.h"
#include "kernels/unary_math.h"
#include "tapegrad/ops.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

/* Row (b, c) of a rank-3 tensor, along its last dimension. */
static void load_row3(const tg_tensor *t, int64_t b, int64_t c, int64_t n, double *out)
{
    tg_load_row(t, b * t->strides[0] + c * t->strides[1], t->strides[2], n, out);
}

static void store_row3(tg_tensor *t, int64_t b, int64_t c, int64_t n, const double *values)
{
    tg_store_row(t, b * t->strides[0] + c * t->strides[1], t->strides[2], n, values);
}

/* xe for row (b, c): K−1 history steps, then the L steps of x. */
static void gather_row(const tg_conv1d_args *a, int64_t b, int64_t c, int64_t K, int64_t L, double *xe)
{
    if (a->initial_states)
        load_row3(a->initial_states, b, c, K - 1, xe);
    else
        for (int64_t j = 0; j < K - 1; j++) xe[j] = 0.0;
    load_row3(a->x, b, c, L, xe + K - 1);
}

/* z[t] = bias + Σ_k w[k]·xe[t+k] for every t of the row, the taps added in k order (a
 * tap's pass over the row vectorises). */
TG_VECTOR_CLONES
static void pre_activations(const double *restrict xe, const double *restrict w, int64_t K, double bias, int64_t L,
                            double *restrict z)
{
    for (int64_t t = 0; t < L; t++) z[t] = bias;
    for (int64_t k = 0; k < K; k++)
        for (int64_t t = 0; t < L; t++) z[t] += w[k] * xe[t + k];
}

static void silu_row(double *z, int64_t L)
{
    for (int64_t t = 0; t < L; t++) z[t] *= tg_sigmoid_of(z[t]);
}

/* g[t] ← g[t]·silu'(z[t]). */
static void silu_slope_row(double *restrict g, const double *restrict z, int64_t L)
{
    for (int64_t t = 0; t < L; t++) g[t] *= tg_silu_derivative(z[t]);
}

/* Weight row c and bias c as doubles. */
static double load_channel(const tg_conv1d_args *a, int64_t c, int64_t K, double *w)
{
    tg_load_row(a->weight, c * a->weight->strides[0], a->weight->strides[1], K, w);
    return a->bias ? tg_load(tg_bytes(a->bias), a->bias->dtype, c * a->bias->strides[0]) : 0.0;
}

/* A row buffer of n doubles (at least one, so that an empty row is no failure). */
static double *alloc_doubles(int64_t n) { return malloc(sizeof(double) * (size_t)(n > 0 ? n : 1)); }

static void conv_forward_channels(void *context, int64_t c_begin, int64_t c_end)
{
    conv_job *job = context;
    const tg_conv1d_args *a = job->a;
    const int64_t B = a->x->shape[0], L = a->x->shape[2], K = a->weight->shape[1];
    double *xe = alloc_doubles(K - 1 + L), *z = alloc_doubles(L), *w = alloc_doubles(K);
    if (!xe || !z || !w) atomic_store(&job->out_of_memory, true);
    for (int64_t c = c_begin; xe && z && w && c < c_end; c++) {
        double bias = load_channel(a, c, K, w);
        for (int64_t b = 0; b < B; b++) {
            gather_row(a, b, c, K, L, xe);
            pre_activations(xe, w, K, bias, L, z);
            if (a->activation == TG_ACT_SILU) silu_row(z, L);
            store_row3(job->out, b, c, L, z);
            if (job->final_states) store_row3(job->final_states, b, c, K - 1, xe + L);
        }
    }
    free(xe), free(z), free(w);
}

tg_status tg_cpu_causal_conv1d_fwd(const tg_conv1d_args *a, tg_tensor *out, tg_tensor *final_states)
{
    conv_job job = {.a = a, .out = out, .final_states = final_states};
    const int64_t work_per_channel = a->x->shape[0] * a->x->shape[2];
    tg_parallel_ranges(a->x->shape[1], 1 + 4096 / (work_per_channel + 1),
                       a->x->dtype == TG_F64 ? conv_forward_channels : conv_float_forward_channels, &job);
    if (atomic_load(&job.out_of_memory))
        return tg_set_error(TG_ERR_NOMEM, "tg_causal_conv1d: out of memory for a row buffer");
    return TG_OK;
}

/* One thread's row buffers for the backward. */
typedef struct {
    double *xe, *dxe; /* K−1+L */
    double *g;        /* L: the gradient at z */
    double *d;        /* max(L, K−1): the pre-activations, then dfinal_states' row */
    double *w, *dw;   /* K */
} conv_scratch;

static bool scratch_alloc(conv_scratch *s, int64_t K, int64_t L)
{
    *s = (conv_scratch){alloc_doubles(K - 1 + L), alloc_doubles(K - 1 + L),
                        alloc_doubles(L),         alloc_doubles(L > K - 1 ? L : K - 1),
                        alloc_doubles(K),         alloc_doubles(K)};
    return s->xe && s->dxe && s->g && s->d && s->w && s->dw;
}

static void scratch_free(conv_scratch *s)
{
    free(s->xe), free(s->dxe), free(s->g), free(s->d), free(s->w), free(s->dw);
}

/* g[t] = dout[t] · act'(z[t]), recomputing z from xe (the activation is never saved). */
static void output_gradient(const conv_job *job, int64_t b, int64_t c, double bias, int64_t K, int64_t L,
                            conv_scratch *s)
{
    if (job->dout)
        load_row3(job->dout, b, c, L, s->g);
    else
        for (int64_t t = 0; t < L; t++) s->g[t] = 0.0;
    if (job->a->activation != TG_ACT_SILU) return;
    pre_activations(s->xe, s->w, K, bias, L, s->d);
    silu_slope_row(s->g, s->d, L);
}

/* dxe[e] = Σ_k w[k]·g[e−k] over the K − 1 + L steps of xe, the taps added in k order (a
 * tap's pass over the row vectorises). */
TG_VECTOR_CLONES
static void input_gradient(const double *restrict w, const double *restrict g, int64_t K, int64_t L,
                           double *restrict dxe)
{
    for (int64_t e = 0; e < K - 1 + L; e++) dxe[e] = 0.0;
    for (int64_t k = 0; k < K; k++)
        for (int64_t t = 0; t < L; t++) dxe[t + k] += w[k] * g[t];
}

/* Row (b, c)'s share of dweight and dbias, and its dx and dinitial_states. */
static void backward_row(const conv_job *job, int64_t b, int64_t c, double bias, double *db, conv_scratch *s)
{
    const tg_conv1d_args *a = job->a;
    const int64_t L = a->x->shape[2], K = a->weight->shape[1], E = K - 1 + L;
    gather_row(a, b, c, K, L, s->xe);
    output_gradient(job, b, c, bias, K, L, s);
    const double *g = s->g, *xe = s->xe, *w = s->w;
    /* dw[k] = Σ_t g[t]·xe[t+k]; dbias = Σ_t g[t] */
    for (int64_t t = 0; t < L; t++) {
        *db += g[t];
        for (int64_t k = 0; k < K; k++) s->dw[k] += g[t] * xe[t + k];
    }
    /* dxe[s] = Σ_k w[k]·g[s−k] (the reversed, shifted sum), plus the gradient of
     * final_states, which are xe[L .. L+K−2]. */
    input_gradient(w, g, K, L, s->dxe);
    if (job->dfinal) {
        load_row3(job->dfinal, b, c, K - 1, s->d);
        for (int64_t e = L; e < E; e++) s->dxe[e] += s->d[e - L];
    }
    if (job->dx) store_row3(job->dx, b, c, L, s->dxe + K - 1);
    if (job->dinitial) store_row3(job->dinitial, b, c, K - 1, s->dxe);
}

static void conv_backward_channels(void *context, int64_t c_begin, int64_t c_end)
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
        double bias = load_channel(a, c, K, s.w), db = 0.0;
        for (int64_t k = 0; k < K; k++) s.dw[k] = 0.0;
        for (int64_t b = 0; b < B; b++) backward_row(job, b, c, bias, &db, &s); /* fixed order: deterministic sums */
        if (job->dweight) tg_store_row(job->dweight, c * job->dweight->strides[0], job->dweight->strides[1], K, s.dw);
        if (job->dbias) tg_store(tg_bytes(job->dbias), job->dbias->dtype, c * job->dbias->strides[0], db);
    }
    scratch_free(&s);
}

tg_status tg_cpu_causal_conv1d_bwd(const tg_conv1d_args *a, const tg_tensor *dout, const tg_tensor *dfinal,
                                   tg_tensor *dx, tg_tensor *dweight, tg_tensor *dbias, tg_tensor *dinitial)
{
    conv_job job = {
        .a = a, .dout = dout, .dfinal = dfinal, .dx = dx, .dweight = dweight, .dbias = dbias, .dinitial = dinitial};
    const int64_t work_per_channel = a->x->shape[0] * a->x->shape[2];
    tg_parallel_ranges(a->x->shape[1], 1 + 2048 / (work_per_channel + 1),
                       a->x->dtype == TG_F64 ? conv_backward_channels : conv_float_backward_channels, &job);
    if (atomic_load(&job.out_of_memory))
        return tg_set_error(TG_ERR_NOMEM, "tg_causal_conv1d backward: out of memory for a row buffer");
    return TG_OK;
}
