/* kernels/cpu/scan_float.c: the selective scan on the CPU for f32, bf16 and f16 storage,
 * in float32 maths (kernels/cpu/scan.c keeps the double path for f64, the reference).
 *
 * Each (b, d) row is a recurrence that is sequential in t, so the vector lanes go across
 * channels instead: a group of G neighbouring channels d of one batch row b advances
 * together, lane g holding channel d0 + g, and every step's loops over the state n run
 * G lanes wide (Bm and Cm, shared by the channels, are broadcast). A thread stages what a
 * group reads into float arrays in that layout ([t][g] for u, dt, z; [n][g] for A and the
 * state), so the hot loops read contiguous floats, call a branch-free exp and vectorise:
 * they are built for AVX-512, AVX2 and plain x86-64, and the CPU picks one when the
 * program loads. A lane's sums (the readout Cm·h over n, the gradients' sums over n) run
 * in n order, as in the scalar path; the build never contracts a product and a sum into
 * one fused operation (ISO C mode); so every instruction set gives the same bits. Sums
 * across channels (dBm, dCm over d) and over t and b (dA, dDv, dbias) are taken in double,
 * in the order of the double path. Threads split the batch rows as there, so results do
 * not depend on the thread count either. Channels past D in the last group are zeros
 * (dt = 0, no input) and are never stored. */
#include "kernels/scan.h"
#include "kernels/cpu/scan_sums.h"
#include "kernels/cpu/scalar_math.h"

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TG_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TG_VECTOR_CLONES
#endif

#define G 16 /* channels advanced together: one AVX-512 vector of floats, two of AVX2 */

/* e^x to about 2 ulp, without branches or calls, so that a loop of it vectorises:
 * x = k·ln2 + r with |r| ≤ ln2/2, e^r by Cephes' polynomial, 2^k from its bits. x is
 * clamped to [−87.3, 88.3], whose results stay normal floats (below, e^x < 1.2e-38 comes
 * back as about that: a decay so small is zero to the scan). */
static inline float exp_float(float x)
{
    x = x < -87.3f ? -87.3f : x > 88.3f ? 88.3f : x;
    const float k = floorf(x * 1.44269504088896341f + 0.5f);
    const float r = (x - k * 0.693359375f) - k * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    union {
        int32_t bits;
        float value;
    } scale = {((int32_t)k + 127) << 23};
    return p * scale.value;
}

/* log x for x in [1, 2], to about 2 ulp, without branches: Cephes' polynomial on the
 * mantissa folded into [√½, √2). */
static inline float log_1_2(float x)
{
    const float e = x > 1.41421356f ? 1.0f : 0.0f;
    const float m = (x > 1.41421356f ? 0.5f * x : x) - 1.0f, z = m * m;
    float y = 7.0376836292e-2f;
    y = y * m - 1.1514610310e-1f;
    y = y * m + 1.1676998740e-1f;
    y = y * m - 1.2420140846e-1f;
    y = y * m + 1.4249322787e-1f;
    y = y * m - 1.6668057665e-1f;
    y = y * m + 2.0000714765e-1f;
    y = y * m - 2.4999993993e-1f;
    y = y * m + 3.3333331174e-1f;
    y = y * m * z + e * -2.12194440e-4f - 0.5f * z;
    return m + y + e * 0.693359375f;
}

/* log(1 + w) for w in [0, 1], accurate for tiny w too: with s = 1 + w rounded,
 * log(s)·w / (s − 1) corrects the rounding of s (and s = 1 means log(1 + w) ≈ w). */
static inline float log1p_0_1(float w)
{
    const float s = 1.0f + w, d = s - 1.0f;
    return d == 0.0f ? w : log_1_2(s) * (w / d);
}

/* softplus(v) = max(v, 0) + log(1 + e^−|v|), and its slope σ(v) = 1 / (1 + e^−v): both
 * from one exp, without branches, so a loop of them vectorises. */
static inline float softplus_float(float v, float *slope)
{
    const float w = exp_float(v > 0 ? -v : v); /* e^−|v| */
    *slope = v > 0 ? 1.0f / (1.0f + w) : w / (1.0f + w);
    return (v > 0 ? v : 0.0f) + log1p_0_1(w);
}

static inline float silu_float(float x) { return x / (1.0f + exp_float(-x)); }

static float load_at(const tg_tensor *t, int64_t offset) { return (float)tg_load(tg_bytes(t), t->dtype, offset); }

/* x[i·x_step] = v's elements at + i·step for i < count, with the dtype switch outside the loop. */
static void load_run(const tg_tensor *v, int64_t at, int64_t step, int64_t count, float *x, int64_t x_step)
{
    const char *base = tg_bytes(v);
    if (v->dtype == TG_F32) {
        const float *p = (const float *)base + at;
        for (int64_t i = 0; i < count; i++) x[i * x_step] = p[i * step];
    } else if (v->dtype == TG_BF16) {
        const uint16_t *p = (const uint16_t *)base + at;
        for (int64_t i = 0; i < count; i++) {
            union {
                uint32_t bits;
                float value;
            } f = {(uint32_t)p[i * step] << 16};
            x[i * x_step] = f.value;
        }
    } else {
        for (int64_t i = 0; i < count; i++) x[i * x_step] = (float)tg_load(base, v->dtype, at + i * step);
    }
}

/* v's elements at + i·step = x[i·x_step] for i < count, rounded once to v's dtype. */
static void store_run(tg_tensor *v, int64_t at, int64_t step, int64_t count, const float *x, int64_t x_step)
{
    char *base = tg_bytes(v);
    if (v->dtype == TG_F32) {
        float *p = (float *)base + at;
        for (int64_t i = 0; i < count; i++) p[i * step] = x[i * x_step];
    } else {
        for (int64_t i = 0; i < count; i++) tg_store(base, v->dtype, at + i * step, x[i * x_step]);
    }
}

/* ---- a group of channels ----------------------------------------------------------------------- */

/* One thread's staging for a group of G channels d0 .. d0 + G − 1 of batch row b. */
typedef struct {
    int64_t b, d0, channels, N, L; /* channels: the group's real ones (≤ G) */
    float *Bt, *Ct;                /* (L, N): the batch row's Bm and Cm, one step's values together */
    float *A;                      /* (N, G) */
    float bias[G], skip[G];
    float *u, *dt, *slope, *z, *y; /* (L, G) each; z NULL without a gate; y: Cm·h + Dv·u */
    float *h;                      /* (N, G): the state */
} group;

/* x[t·G + g] = v[b, d0 + g, t], 0 for the padding channels. */
static void load_rows(const tg_tensor *v, const group *q, float *x)
{
    memset(x, 0, sizeof(float) * (size_t)(q->L * G));
    for (int64_t g = 0; g < q->channels; g++)
        load_run(v, q->b * v->strides[0] + (q->d0 + g) * v->strides[1], v->strides[2], q->L, x + g, G);
}

static void store_rows(tg_tensor *v, const group *q, const float *x)
{
    for (int64_t g = 0; g < q->channels; g++)
        store_run(v, q->b * v->strides[0] + (q->d0 + g) * v->strides[1], v->strides[2], q->L, x + g, G);
}

/* xt[t·N + n] = v[b, n, t]. */
static void load_transposed(const tg_tensor *v, int64_t b, int64_t N, int64_t L, float *xt)
{
    for (int64_t n = 0; n < N; n++) load_run(v, b * v->strides[0] + n * v->strides[1], v->strides[2], L, xt + n, N);
}

/* v[b, d0 + g, n] (a (B, D, N) state) into x[n·G + g], 0 for padding; NULL v gives zeros. */
static void load_state(const tg_tensor *v, const group *q, float *x)
{
    memset(x, 0, sizeof(float) * (size_t)(q->N * G));
    for (int64_t g = 0; v && g < q->channels; g++)
        for (int64_t n = 0; n < q->N; n++)
            x[n * G + g] = load_at(v, q->b * v->strides[0] + (q->d0 + g) * v->strides[1] + n * v->strides[2]);
}

static void store_state(tg_tensor *v, const group *q, const float *x)
{
    for (int64_t g = 0; g < q->channels; g++)
        for (int64_t n = 0; n < q->N; n++)
            tg_store(tg_bytes(v), v->dtype, q->b * v->strides[0] + (q->d0 + g) * v->strides[1] + n * v->strides[2],
                     x[n * G + g]);
}

/* dt = softplus(delta + bias) and its slope, in place of delta (padding channels: dt = 0). */
TG_VECTOR_CLONES
static void delta_to_dt(group *q)
{
    float pad[G];
    for (int g = 0; g < G; g++) pad[g] = g < q->channels ? 1.0f : 0.0f;
    for (int64_t t = 0; t < q->L; t++)
        for (int g = 0; g < G; g++) {
            float *dt = q->dt + t * G, *slope = q->slope + t * G;
            dt[g] = pad[g] * softplus_float(dt[g] + q->bias[g], &slope[g]);
        }
}

/* The group's channels: A, bias, skip, u, dt = softplus(delta + bias) (or delta + bias) and
 * its slope, z. */
static void load_group(const tg_scan_args *a, group *q)
{
    memset(q->A, 0, sizeof(float) * (size_t)(q->N * G));
    for (int64_t g = 0; g < G; g++) {
        const bool real = g < q->channels;
        const int64_t d = q->d0 + g;
        for (int64_t n = 0; real && n < q->N; n++) q->A[n * G + g] = load_at(a->A, d * a->A->strides[0] + n * a->A->strides[1]);
        q->bias[g] = real && a->delta_bias ? load_at(a->delta_bias, d * a->delta_bias->strides[0]) : 0.0f;
        q->skip[g] = real && a->Dv ? load_at(a->Dv, d * a->Dv->strides[0]) : 0.0f;
    }
    load_rows(a->u, q, q->u);
    load_rows(a->delta, q, q->dt);
    if (a->delta_softplus) delta_to_dt(q);
    else
        for (int64_t t = 0; t < q->L; t++)
            for (int g = 0; g < G; g++) q->dt[t * G + g] += q->bias[g], q->slope[t * G + g] = 1.0f;
    if (q->z) load_rows(a->z, q, q->z);
}

/* ---- the recurrence ---------------------------------------------------------------------------- */

/* Steps [t0, t1) of the group from q->h: h ← exp(dt·A) ⊙ h + dt·u·Bm_t, y_t = Cm_t·h + Dv·u_t.
 * When H is not NULL, the state after each step also goes to H[(t − t0 + 1)·N·G] and the
 * decays exp(dt·A) to E[(t − t0)·N·G] (the backward's recompute). */
TG_VECTOR_CLONES
static void run_steps(group *q, int64_t t0, int64_t t1, float *restrict H, float *restrict E)
{
    const int64_t N = q->N;
    float *restrict h = q->h;
    for (int64_t t = t0; t < t1; t++) {
        const float *dt = q->dt + t * G, *u = q->u + t * G;
        float du[G], y[G];
        for (int g = 0; g < G; g++) du[g] = dt[g] * u[g], y[g] = 0.0f;
        for (int64_t n = 0; n < N; n++) {
            const float bn = q->Bt[t * N + n], cn = q->Ct[t * N + n];
            const float *A = q->A + n * G;
            float *hn = h + n * G;
            float e[G];
            for (int g = 0; g < G; g++) e[g] = exp_float(dt[g] * A[g]);
            for (int g = 0; g < G; g++) {
                hn[g] = e[g] * hn[g] + du[g] * bn;
                y[g] += cn * hn[g];
            }
            if (E) {
                memcpy(E + ((t - t0) * N + n) * G, e, sizeof e);
                memcpy(H + ((t - t0 + 1) * N + n) * G, hn, sizeof e);
            }
        }
        for (int g = 0; g < G; g++) q->y[t * G + g] = y[g] + q->skip[g] * u[g];
    }
}

/* ---- forward ----------------------------------------------------------------------------------- */

/* One thread's buffers. */
typedef struct {
    float *Bt, *Ct, *A, *u, *dt, *slope, *z, *y, *h;
} group_buffers;

static void free_buffers(group_buffers *s)
{
    free(s->Bt), free(s->Ct), free(s->A), free(s->u), free(s->dt), free(s->slope), free(s->z), free(s->y), free(s->h);
}

static bool alloc_buffers(group_buffers *s, int64_t N, int64_t L)
{
    const size_t nl = sizeof(float) * (size_t)(N * L), lg = sizeof(float) * (size_t)(L * G);
    const size_t ng = sizeof(float) * (size_t)(N * G);
    *s = (group_buffers){malloc(nl), malloc(nl), malloc(ng), malloc(lg), malloc(lg), malloc(lg), malloc(lg),
                         malloc(lg), malloc(ng)};
    return s->Bt && s->Ct && s->A && s->u && s->dt && s->slope && s->z && s->y && s->h;
}

static group group_of(const tg_scan_args *a, const group_buffers *s, int64_t b, int64_t d0)
{
    const int64_t D = a->u->shape[1];
    return (group){b, d0, D - d0 < G ? D - d0 : G, a->A->shape[1], a->u->shape[2], s->Bt, s->Ct, s->A, {0}, {0},
                   s->u, s->dt, s->slope, a->z ? s->z : NULL, s->y, s->h};
}

typedef struct {
    const tg_scan_args *a;
    tg_tensor *out, *final_state, *chunk_states;
    atomic_bool out_of_memory;
} forward_job;

/* chunk_states[b, d, n, c] = the state (f32 for every dtype but f64). */
static void save_chunk_state(tg_tensor *chunk_states, const group *q, int64_t c)
{
    const int64_t *s = chunk_states->strides;
    for (int64_t g = 0; g < q->channels; g++)
        for (int64_t n = 0; n < q->N; n++)
            tg_store(tg_bytes(chunk_states), chunk_states->dtype, q->b * s[0] + (q->d0 + g) * s[1] + n * s[2] + c * s[3],
                     q->h[n * G + g]);
}

static void forward_group(forward_job *job, group *q)
{
    const tg_scan_args *a = job->a;
    const int64_t L = q->L, chunk = a->chunk;
    load_state(a->initial_state, q, q->h);
    for (int64_t t0 = 0; t0 < L; t0 += chunk) {
        if (job->chunk_states) save_chunk_state(job->chunk_states, q, t0 / chunk);
        run_steps(q, t0, t0 + chunk < L ? t0 + chunk : L, NULL, NULL);
    }
    if (q->z)
        for (int64_t i = 0; i < L * G; i++) q->y[i] *= silu_float(q->z[i]);
    store_rows(job->out, q, q->y);
    if (job->final_state) store_state(job->final_state, q, q->h);
}

static void forward_rows(void *context, int64_t b_begin, int64_t b_end)
{
    forward_job *job = context;
    const tg_scan_args *a = job->a;
    const int64_t D = a->u->shape[1], L = a->u->shape[2], N = a->A->shape[1];
    group_buffers s;
    if (!alloc_buffers(&s, N, L)) {
        atomic_store(&job->out_of_memory, true);
    } else {
        for (int64_t b = b_begin; b < b_end; b++) {
            load_transposed(a->Bm, b, N, L, s.Bt);
            load_transposed(a->Cm, b, N, L, s.Ct);
            for (int64_t d0 = 0; d0 < D; d0 += G) {
                group q = group_of(a, &s, b, d0);
                load_group(a, &q);
                forward_group(job, &q);
            }
        }
    }
    free_buffers(&s);
}

tg_status tg_cpu_selective_scan_fwd_float(const tg_scan_args *a, tg_tensor *out, tg_tensor *final_state,
                                          tg_tensor *chunk_states)
{
    forward_job job = {a, out, final_state, chunk_states, false};
    tg_parallel_ranges(a->u->shape[0], 1, forward_rows, &job);
    if (atomic_load(&job.out_of_memory)) return tg_set_error(TG_ERR_NOMEM, "tg_selective_scan: out of memory for a state buffer");
    return TG_OK;
}

/* ---- backward ----------------------------------------------------------------------------------- */

/* What the reverse scan of a group reads and adds to, besides its inputs. */
typedef struct {
    float *H;          /* (chunk + 1)·N·G: H[0] the state before the chunk, H[k + 1] after its step k */
    float *E;          /* chunk·N·G: the decays exp(dt·A) of the chunk's steps */
    float *carry;      /* N·G: the state gradient flowing back into the step before */
    float *dy, *gout;  /* L·G: dout·silu(z) (or dout), and dout (then dz) */
    float *du, *ddt;   /* L·G: the gradients of u and of delta */
    double *dA;        /* N·G: Σ_t of each channel */
    double dDv[G], dbias[G];
    double *dBt, *dCt; /* (L, N) of the batch row: Σ_d (or NULL) */
} reverse_buffers;

/* Steps t1 − 1 … t0 of the reverse scan, with dy = dout·silu(z) and δh = Cm_t·dy + carry:
 *   dCm_t += dy·h_t        dBm_t += δh·dt·u      du = Σ_n δh·dt·Bm_t + Dv·dy
 *   ddt = Σ_n δh·(Bm_t·u + A·Ā·h_{t−1})          dA += δh·dt·Ā·h_{t−1}
 *   dDv += dy·u            ddelta = ddt·slope     dbias += ddelta
 * and the carry into step t − 1 is Ā·δh (Ā = exp(dt·A), from the chunk's recompute). */
TG_VECTOR_CLONES
static void reverse_steps(const group *q, int64_t t0, int64_t t1, reverse_buffers *s)
{
    const int64_t N = q->N;
    float *restrict carry = s->carry;
    double *restrict dA = s->dA;
    for (int64_t t = t1 - 1; t >= t0; t--) {
        const float *dt = q->dt + t * G, *u = q->u + t * G, *dy = s->dy + t * G;
        float du[G], ddt[G];
        for (int g = 0; g < G; g++) du[g] = ddt[g] = 0.0f;
        for (int64_t n = 0; n < N; n++) {
            const float bn = q->Bt[t * N + n], cn = q->Ct[t * N + n];
            const float *A = q->A + n * G, *decay = s->E + ((t - t0) * N + n) * G;
            const float *h = s->H + ((t - t0 + 1) * N + n) * G, *h_prev = s->H + ((t - t0) * N + n) * G;
            float *cn_carry = carry + n * G, dh[G];
            for (int g = 0; g < G; g++) {
                dh[g] = cn * dy[g] + cn_carry[g];
                const float dh_decay_prev = dh[g] * decay[g] * h_prev[g];
                du[g] += dh[g] * dt[g] * bn;
                ddt[g] += dh[g] * bn * u[g] + A[g] * dh_decay_prev;
                dA[n * G + g] += (double)(dt[g] * dh_decay_prev);
                cn_carry[g] = decay[g] * dh[g];
            }
            /* the sums over channels, in channel order */
            for (int g = 0; s->dBt && g < q->channels; g++) s->dBt[t * N + n] += (double)(dh[g] * (dt[g] * u[g]));
            for (int g = 0; s->dCt && g < q->channels; g++) s->dCt[t * N + n] += (double)(dy[g] * h[g]);
        }
        for (int g = 0; g < G; g++) {
            s->du[t * G + g] = du[g] + q->skip[g] * dy[g];
            s->ddt[t * G + g] = ddt[g] * q->slope[t * G + g];
            s->dDv[g] += (double)(dy[g] * u[g]);
            s->dbias[g] += (double)s->ddt[t * G + g];
        }
    }
}

/* v[b, d0 + g, n, c] (the chunk states) into the group's state. */
static void load_chunk_state(const tg_tensor *v, const group *q, int64_t c, float *x)
{
    const int64_t *s = v->strides;
    memset(x, 0, sizeof(float) * (size_t)(q->N * G));
    for (int64_t g = 0; g < q->channels; g++)
        for (int64_t n = 0; n < q->N; n++) x[n * G + g] = load_at(v, q->b * s[0] + (q->d0 + g) * s[1] + n * s[2] + c * s[3]);
}

/* The group's gradients: chunks from the last, each recomputed from its saved state. */
static void backward_group(const scan_backward_job *job, group *q, reverse_buffers *s)
{
    const tg_scan_args *a = job->a;
    const tg_scan_grads *g = job->g;
    const int64_t N = q->N, L = q->L, chunk = a->chunk, n_chunks = (L - 1) / chunk + 1;
    if (job->dout) load_rows(job->dout, q, s->gout);
    else memset(s->gout, 0, sizeof(float) * (size_t)(L * G));
    for (int64_t i = 0; i < L * G; i++) s->dy[i] = q->z ? s->gout[i] * silu_float(q->z[i]) : s->gout[i];
    load_state(job->dfinal, q, s->carry);
    for (int64_t i = 0; i < N * G; i++) s->dA[i] = 0.0;
    for (int k = 0; k < G; k++) s->dDv[k] = s->dbias[k] = 0.0;
    for (int64_t c = n_chunks - 1; c >= 0; c--) {
        const int64_t t0 = c * chunk, t1 = t0 + chunk < L ? t0 + chunk : L;
        load_chunk_state(job->chunk_states, q, c, q->h);
        memcpy(s->H, q->h, sizeof(float) * (size_t)(N * G));
        run_steps(q, t0, t1, s->H, s->E);
        reverse_steps(q, t0, t1, s);
    }
    if (g->dz) { /* dz = dout·y·silu'(z), y the output before the gate */
        for (int64_t i = 0; i < L * G; i++) {
            const float sigma = 1.0f / (1.0f + exp_float(-q->z[i])); /* silu' = σ·(1 + z·(1 − σ)) */
            s->gout[i] *= q->y[i] * (sigma * (1.0f + q->z[i] * (1.0f - sigma)));
        }
        store_rows(g->dz, q, s->gout);
    }
    if (g->du) store_rows(g->du, q, s->du);
    if (g->ddelta) store_rows(g->ddelta, q, s->ddt);
    if (g->dinitial_state) store_state(g->dinitial_state, q, s->carry);
}

static void free_reverse(reverse_buffers *s)
{
    free(s->H), free(s->E), free(s->carry), free(s->dy), free(s->gout), free(s->du), free(s->ddt), free(s->dA);
}

static bool alloc_reverse(reverse_buffers *s, int64_t N, int64_t L, int64_t len)
{
    const size_t lg = sizeof(float) * (size_t)(L * G);
    *s = (reverse_buffers){0};
    s->H = malloc(sizeof(float) * (size_t)((len + 1) * N * G));
    s->E = malloc(sizeof(float) * (size_t)(len * N * G));
    s->carry = malloc(sizeof(float) * (size_t)(N * G));
    s->dy = malloc(lg), s->gout = malloc(lg), s->du = malloc(lg), s->ddt = malloc(lg);
    s->dA = malloc(sizeof(double) * (size_t)(N * G));
    return s->H && s->E && s->carry && s->dy && s->gout && s->du && s->ddt && s->dA;
}

static void backward_rows(void *context, int64_t b_begin, int64_t b_end)
{
    scan_backward_job *job = context;
    const tg_scan_args *a = job->a;
    const int64_t D = a->u->shape[1], L = a->u->shape[2], N = a->A->shape[1];
    group_buffers gb;
    reverse_buffers s;
    bool ok = alloc_buffers(&gb, N, L) & alloc_reverse(&s, N, L, a->chunk < L ? a->chunk : L);
    for (int64_t b = b_begin; ok && b < b_end; b++) {
        load_transposed(a->Bm, b, N, L, gb.Bt);
        load_transposed(a->Cm, b, N, L, gb.Ct);
        s.dBt = job->sums.dBm ? job->sums.dBm + b * L * N : NULL;
        s.dCt = job->sums.dCm ? job->sums.dCm + b * L * N : NULL;
        for (int64_t d0 = 0; d0 < D; d0 += G) {
            group q = group_of(a, &gb, b, d0);
            load_group(a, &q);
            backward_group(job, &q, &s);
            for (int64_t k = 0; k < q.channels; k++) {
                const int64_t row = b * D + d0 + k;
                for (int64_t n = 0; n < N; n++) job->sums.dA[row * N + n] = s.dA[n * G + k];
                job->sums.dDv[row] = s.dDv[k];
                job->sums.dbias[row] = s.dbias[k];
            }
        }
    }
    if (!ok) atomic_store(&job->out_of_memory, true);
    free_buffers(&gb);
    free_reverse(&s);
}

tg_status tg_cpu_selective_scan_bwd_float(const tg_scan_args *a, const tg_tensor *chunk_states, const tg_tensor *dout,
                                          const tg_tensor *dfinal, const tg_scan_grads *g)
{
    return scan_backward_run(a, chunk_states, dout, dfinal, g, backward_rows, true);
}
