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
 * program loads (without AVX-512, the step loops' twins *_by_eights hold a group as two
 * 8-float halves). A lane's sums (the readout Cm·h over n, the gradients' sums over n) run
 * in n order, as in the scalar path; the build never contracts a product and a sum into
 * one fused operation (ISO C mode); so every instruction set gives the same bits. Sums
 * over t and b (dA, dDv, dbias) are taken in double, in the order of the double path; sums
 * across channels (dBm, dCm over d) in double too, a group's G lanes in a fixed tree and
 * the groups in channel order. Threads split the batch rows as there, so results do not
 * depend on the thread count either. Channels past D in the last group are zeros
 * (dt = 0, no input) and are never stored. */
#include "kernels/scan.h"
#include "kernels/cpu/scan_sums.h"
#include "kernels/cpu/float_math.h"

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define G 16 /* channels advanced together: one AVX-512 vector of floats, two of AVX2 */

/* log x for x in [1, 2], to about 2 ulp, without branches: Cephes' polynomial on the
 * mantissa folded into [√½, √2), evaluated in Estrin's form (pairs, then pairs of pairs)
 * so that its chain of dependent operations is short. */
static inline float log_1_2(float x)
{
    const float e = x > 1.41421356f ? 1.0f : 0.0f;
    const float m = (x > 1.41421356f ? 0.5f * x : x) - 1.0f, z = m * m, z2 = z * z;
    const float p01 = -2.4999993993e-1f * m + 3.3333331174e-1f;
    const float p23 = -1.6668057665e-1f * m + 2.0000714765e-1f;
    const float p45 = -1.2420140846e-1f * m + 1.4249322787e-1f;
    const float p67 = -1.1514610310e-1f * m + 1.1676998740e-1f;
    const float p = 7.0376836292e-2f * (z2 * z2) + ((p67 * z + p45) * z2 + (p23 * z + p01));
    const float y = p * m * z + e * -2.12194440e-4f - 0.5f * z;
    return m + y + e * 0.693359375f;
}

/* softplus(v) = max(v, 0) + log(1 + e^−|v|), and its slope σ(v) = 1 / (1 + e^−v): both
 * from one exp and one division, without branches, so a loop of them vectorises. With
 * w = e^−|v| and s = 1 + w rounded, log(1 + w) = log(s) + (w − (s − 1))/s to first order:
 * the second term puts back what rounding s lost (all of w when s rounds to 1). */
static inline float softplus_float(float v, float *slope)
{
    const float w = tg_exp_float(v > 0 ? -v : v), s = 1.0f + w, r = 1.0f / s;
    *slope = v > 0 ? r : w * r;
    return (v > 0 ? v : 0.0f) + (log_1_2(s) + (w - (s - 1.0f)) * r);
}

static inline float silu_float(float x) { return x / (1.0f + tg_exp_float(-x)); }

/* The gate over count values: y ← y·silu(z). */
TG_VECTOR_CLONES
static void gate(float *restrict y, const float *restrict z, int64_t count)
{
    for (int64_t i = 0; i < count; i++) y[i] *= silu_float(z[i]);
}

/* The gradient reaching the output before the gate: dy = dout·silu(z), over count values. */
TG_VECTOR_CLONES
static void gate_backward(const float *restrict dout, const float *restrict z, int64_t count, float *restrict dy)
{
    for (int64_t i = 0; i < count; i++) dy[i] = dout[i] * silu_float(z[i]);
}

/* The gate's own gradient, in place of dout: dz = dout·y·silu'(z), y the output before the
 * gate, silu' = σ·(1 + z·(1 − σ)). */
TG_VECTOR_CLONES
static void gate_gradient(float *restrict dout, const float *restrict z, const float *restrict y, int64_t count)
{
    for (int64_t i = 0; i < count; i++) {
        const float sigma = 1.0f / (1.0f + tg_exp_float(-z[i]));
        dout[i] *= y[i] * (sigma * (1.0f + z[i] * (1.0f - sigma)));
    }
}

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
        for (int64_t i = 0; i < count; i++) x[i * x_step] = tg_bf16_bits_to_float(p[i * step]);
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
    const float *A;                /* (N, G) */
    const float *bias, *skip;      /* (G) */
    float *u, *dt, *slope, *z, *y; /* (L, G) each; z NULL without a gate; y: Cm·h + Dv·u */
    float *h;                      /* (N, G): the state */
    float *decay;                  /* (N, G): one step's exp(dt·A) */
} group;

/* A group's G channels as one vector (GCC and Clang vector extensions): one AVX-512 register,
 * two AVX2 ones or four SSE ones, as the clone the CPU picked compiles it. Written as
 * vectors because the compiler turned the per-lane loops of the state update into scalar
 * code; lane-wise IEEE maths gives the same bits either way. */
typedef float lanes __attribute__((vector_size(G * sizeof(float))));
#if defined(__GNUC__)
/* The helpers below pass vectors by value; they are static, so no call crosses the ABI that
 * GCC and Clang warn about (AVX-512 registers or memory, depending on the clone). */
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

static inline lanes load_lanes(const float *p)
{
    lanes v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void store_lanes(float *p, lanes v) { memcpy(p, &v, sizeof v); }

/* Transposes the G × G block m in place: four rounds of interleaving row i with row i + G/2,
 * each of which rotates the bits of (row, column) by one place, so four give (column, row). */
static inline void transpose_block(lanes m[G])
{
    for (int round = 0; round < 4; round++) {
        lanes next[G];
        for (int i = 0; i < G / 2; i++) {
            next[2 * i] =
                __builtin_shufflevector(m[i], m[i + G / 2], 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
            next[2 * i + 1] = __builtin_shufflevector(m[i], m[i + G / 2], 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29,
                                                      14, 30, 15, 31);
        }
        memcpy(m, next, sizeof next);
    }
}

/* x[t·G + g] = rows[g·row_stride + t] for g < channels (0 beyond), t < L: the f32 rows of a
 * group, contiguous along t, turned into lanes a block of G steps at a time. */
TG_VECTOR_CLONES
static void rows_to_lanes(const float *rows, int64_t row_stride, int64_t channels, int64_t L, float *x)
{
    int64_t t0 = 0;
    for (; t0 + G <= L; t0 += G) {
        lanes m[G] = {{0}};
        for (int64_t g = 0; g < channels; g++) m[g] = load_lanes(rows + g * row_stride + t0);
        transpose_block(m);
        for (int k = 0; k < G; k++) store_lanes(x + (t0 + k) * G, m[k]);
    }
    for (int64_t t = t0; t < L; t++)
        for (int64_t g = 0; g < G; g++) x[t * G + g] = g < channels ? rows[g * row_stride + t] : 0.0f;
}

/* The way back: rows[g·row_stride + t] = x[t·G + g] for g < channels, t < L. */
TG_VECTOR_CLONES
static void lanes_to_rows(const float *x, int64_t channels, int64_t L, float *rows, int64_t row_stride)
{
    int64_t t0 = 0;
    for (; t0 + G <= L; t0 += G) {
        lanes m[G];
        for (int k = 0; k < G; k++) m[k] = load_lanes(x + (t0 + k) * G);
        transpose_block(m);
        for (int64_t g = 0; g < channels; g++) store_lanes(rows + g * row_stride + t0, m[g]);
    }
    for (int64_t t = t0; t < L; t++)
        for (int64_t g = 0; g < channels; g++) rows[g * row_stride + t] = x[t * G + g];
}

/* The same two copies in 8 × 8 blocks, for CPUs whose vectors hold 8 floats (AVX2): a G × G
 * block is four 8 × 8 ones, each transposed with the in-lane interleaves and 128-bit swaps
 * AVX2 has (24 shuffles), where the shuffles of whole G-wide rows cross lanes at every step. */
typedef float eight __attribute__((vector_size(8 * sizeof(float))));

static inline eight load_eight(const float *p)
{
    eight v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void store_eight(float *p, eight v) { memcpy(p, &v, sizeof v); }

static inline void transpose_eight(eight r[8])
{
    eight t[8], u[8];
    for (int i = 0; i < 4; i++) { /* rows 2i, 2i + 1 interleaved within each 128-bit half */
        t[2 * i] = __builtin_shufflevector(r[2 * i], r[2 * i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
        t[2 * i + 1] = __builtin_shufflevector(r[2 * i], r[2 * i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
    }
    for (int h = 0; h < 2; h++) /* four rows' columns together, within each half */
        for (int i = 0; i < 2; i++) {
            eight a = t[4 * h + i], b = t[4 * h + i + 2];
            u[4 * h + 2 * i] = __builtin_shufflevector(a, b, 0, 1, 8, 9, 4, 5, 12, 13);
            u[4 * h + 2 * i + 1] = __builtin_shufflevector(a, b, 2, 3, 10, 11, 6, 7, 14, 15);
        }
    for (int i = 0; i < 4; i++) { /* the halves swapped across */
        r[i] = __builtin_shufflevector(u[i], u[i + 4], 0, 1, 2, 3, 8, 9, 10, 11);
        r[i + 4] = __builtin_shufflevector(u[i], u[i + 4], 4, 5, 6, 7, 12, 13, 14, 15);
    }
}

/* rows_to_lanes in 8 × 8 blocks: block (c, s) holds channels 8c … 8c + 7 at steps
 * t0 + 8s … t0 + 8s + 7, and its transpose goes to lanes 8c … of those steps. */
TG_VECTOR_CLONES
static void rows_to_lanes_by_eights(const float *rows, int64_t row_stride, int64_t channels, int64_t L, float *x)
{
    int64_t t0 = 0;
    for (; t0 + G <= L; t0 += G)
        for (int c = 0; c < 2; c++)
            for (int s = 0; s < 2; s++) {
                eight r[8] = {{0}};
                for (int64_t j = 0; j < 8 && 8 * c + j < channels; j++)
                    r[j] = load_eight(rows + (8 * c + j) * row_stride + t0 + 8 * s);
                transpose_eight(r);
                for (int k = 0; k < 8; k++) store_eight(x + (t0 + 8 * s + k) * G + 8 * c, r[k]);
            }
    for (int64_t t = t0; t < L; t++)
        for (int64_t g = 0; g < G; g++) x[t * G + g] = g < channels ? rows[g * row_stride + t] : 0.0f;
}

TG_VECTOR_CLONES
static void lanes_to_rows_by_eights(const float *x, int64_t channels, int64_t L, float *rows, int64_t row_stride)
{
    int64_t t0 = 0;
    for (; t0 + G <= L; t0 += G)
        for (int c = 0; c < 2 && 8 * c < channels; c++)
            for (int s = 0; s < 2; s++) {
                eight r[8];
                for (int k = 0; k < 8; k++) r[k] = load_eight(x + (t0 + 8 * s + k) * G + 8 * c);
                transpose_eight(r);
                for (int64_t j = 0; j < 8 && 8 * c + j < channels; j++)
                    store_eight(rows + (8 * c + j) * row_stride + t0 + 8 * s, r[j]);
            }
    for (int64_t t = t0; t < L; t++)
        for (int64_t g = 0; g < channels; g++) rows[g * row_stride + t] = x[t * G + g];
}

/* Whether the CPU's vectors hold G floats (AVX-512), so that whole-row shuffles are cheap. */
static bool vectors_hold_a_group(void)
{
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    return __builtin_cpu_supports("avx512f");
#else
    return false;
#endif
}

/* x[t·G + g] = v[b, d0 + g, t], 0 for the padding channels. */
static void load_rows(const tg_tensor *v, const group *q, float *x)
{
    const int64_t at = q->b * v->strides[0] + q->d0 * v->strides[1];
    if (v->dtype == TG_F32 && v->strides[2] == 1) {
        const float *rows = (const float *)tg_bytes(v) + at;
        if (vectors_hold_a_group())
            rows_to_lanes(rows, v->strides[1], q->channels, q->L, x);
        else
            rows_to_lanes_by_eights(rows, v->strides[1], q->channels, q->L, x);
        return;
    }
    memset(x, 0, sizeof(float) * (size_t)(q->L * G));
    for (int64_t g = 0; g < q->channels; g++) load_run(v, at + g * v->strides[1], v->strides[2], q->L, x + g, G);
}

static void store_rows(tg_tensor *v, const group *q, const float *x)
{
    const int64_t at = q->b * v->strides[0] + q->d0 * v->strides[1];
    if (v->dtype == TG_F32 && v->strides[2] == 1) {
        float *rows = (float *)tg_bytes(v) + at;
        if (vectors_hold_a_group())
            lanes_to_rows(x, q->channels, q->L, rows, v->strides[1]);
        else
            lanes_to_rows_by_eights(x, q->channels, q->L, rows, v->strides[1]);
        return;
    }
    for (int64_t g = 0; g < q->channels; g++) store_run(v, at + g * v->strides[1], v->strides[2], q->L, x + g, G);
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

/* Every group's A (N, G), bias and skip (G each), 0 for the padding channels: they do not
 * depend on the batch row, so a thread stages them once. */
static void load_channels(const tg_scan_args *a, float *A, float *bias, float *skip)
{
    const int64_t D = a->u->shape[1], N = a->A->shape[1], groups = (D + G - 1) / G;
    memset(A, 0, sizeof(float) * (size_t)(groups * N * G));
    memset(bias, 0, sizeof(float) * (size_t)(groups * G));
    memset(skip, 0, sizeof(float) * (size_t)(groups * G));
    for (int64_t d = 0; d < D; d++) {
        const int64_t group_at = d / G, g = d % G;
        for (int64_t n = 0; n < N; n++)
            A[(group_at * N + n) * G + g] = load_at(a->A, d * a->A->strides[0] + n * a->A->strides[1]);
        if (a->delta_bias) bias[group_at * G + g] = load_at(a->delta_bias, d * a->delta_bias->strides[0]);
        if (a->Dv) skip[group_at * G + g] = load_at(a->Dv, d * a->Dv->strides[0]);
    }
}

/* The group's rows: u, dt = softplus(delta + bias) (or delta + bias) and its slope, z. */
static void load_group(const tg_scan_args *a, group *q)
{
    load_rows(a->u, q, q->u);
    load_rows(a->delta, q, q->dt);
    if (a->delta_softplus)
        delta_to_dt(q);
    else
        for (int64_t t = 0; t < q->L; t++)
            for (int g = 0; g < G; g++) q->dt[t * G + g] += q->bias[g], q->slope[t * G + g] = 1.0f;
    if (q->z) load_rows(a->z, q, q->z);
}

/* ---- the recurrence ---------------------------------------------------------------------------- */

typedef double wide_lanes __attribute__((vector_size(G * sizeof(double))));
typedef double half_lanes __attribute__((vector_size(G / 2 * sizeof(double))));

static inline wide_lanes load_wide(const double *p)
{
    wide_lanes v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void store_wide(double *p, wide_lanes v) { memcpy(p, &v, sizeof v); }

/* The lanes' sum in double, always in the same tree: halves added, then quarters, … */
static inline double sum_lanes(lanes v)
{
    const wide_lanes w = __builtin_convertvector(v, wide_lanes);
    half_lanes low, high;
    memcpy(&low, &w, sizeof low);
    memcpy(&high, (const char *)&w + sizeof low, sizeof high);
    const half_lanes s = low + high;
    return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

/* decay[n·G + g] = exp(dt[g]·A[n·G + g]) for the N states of one step. */
static inline void decays(const float *dt, const float *A, int64_t N, float *decay)
{
    for (int64_t n = 0; n < N; n++)
        for (int g = 0; g < G; g++) decay[n * G + g] = tg_exp_float(dt[g] * A[n * G + g]);
}

/* Steps [t0, t1) of the group from q->h: h ← exp(dt·A) ⊙ h + dt·u·Bm_t, y_t = Cm_t·h + Dv·u_t.
 * When H and E are not NULL, the state after step t also goes to H[(t − t0 + 1)·N·G] and its
 * decays exp(dt·A) to E[(t − t0)·N·G] (the backward's recompute). */
TG_VECTOR_CLONES
static void run_steps(group *q, int64_t t0, int64_t t1, float *restrict H, float *restrict E)
{
    const int64_t N = q->N;
    const lanes skip = load_lanes(q->skip);
    for (int64_t t = t0; t < t1; t++) {
        const lanes dt = load_lanes(q->dt + t * G), u = load_lanes(q->u + t * G), du = dt * u;
        float *decay = E ? E + (t - t0) * N * G : q->decay;
        decays(q->dt + t * G, q->A, N, decay);
        lanes y = {0};
        for (int64_t n = 0; n < N; n++) {
            const lanes h = load_lanes(decay + n * G) * load_lanes(q->h + n * G) + du * q->Bt[t * N + n];
            y += q->Ct[t * N + n] * h;
            store_lanes(q->h + n * G, h);
            if (H) store_lanes(H + ((t - t0 + 1) * N + n) * G, h);
        }
        store_lanes(q->y + t * G, y + skip * u);
    }
}

/* run_steps in two halves of 8 floats, for CPUs without AVX-512. GCC keeps a G-wide vector
 * that a loop carries (the readout y) in memory when the CPU's vectors are narrower, and
 * moves it through general registers at every step; two 8-float vectors stay in registers.
 * The operations and their order are run_steps' own, lane by lane, so the bits are too. */
TG_VECTOR_CLONES
static void run_steps_by_eights(group *q, int64_t t0, int64_t t1, float *restrict H, float *restrict E)
{
    const int64_t N = q->N;
    const eight skip[2] = {load_eight(q->skip), load_eight(q->skip + 8)};
    for (int64_t t = t0; t < t1; t++) {
        eight u[2], du[2], y[2] = {{0}, {0}};
        for (int k = 0; k < 2; k++) {
            u[k] = load_eight(q->u + t * G + 8 * k);
            du[k] = load_eight(q->dt + t * G + 8 * k) * u[k];
        }
        float *decay = E ? E + (t - t0) * N * G : q->decay;
        decays(q->dt + t * G, q->A, N, decay);
        for (int64_t n = 0; n < N; n++) {
            const float bn = q->Bt[t * N + n], cn = q->Ct[t * N + n];
            for (int k = 0; k < 2; k++) {
                const int64_t at = n * G + 8 * k;
                const eight h = load_eight(decay + at) * load_eight(q->h + at) + du[k] * bn;
                y[k] += cn * h;
                store_eight(q->h + at, h);
                if (H) store_eight(H + (t - t0 + 1) * N * G + at, h);
            }
        }
        for (int k = 0; k < 2; k++) store_eight(q->y + t * G + 8 * k, y[k] + skip[k] * u[k]);
    }
}

/* Steps [t0, t1) with the loop that suits the CPU's vectors. */
static void advance(group *q, int64_t t0, int64_t t1, float *restrict H, float *restrict E)
{
    if (vectors_hold_a_group())
        run_steps(q, t0, t1, H, E);
    else
        run_steps_by_eights(q, t0, t1, H, E);
}

/* ---- forward ----------------------------------------------------------------------------------- */

/* One thread's buffers; A, bias and skip hold every group's (load_channels). */
typedef struct {
    float *Bt, *Ct, *A, *bias, *skip, *u, *dt, *slope, *z, *y, *h, *decay;
} group_buffers;

static void free_buffers(group_buffers *s)
{
    free(s->Bt), free(s->Ct), free(s->A), free(s->bias), free(s->skip), free(s->u), free(s->dt), free(s->slope);
    free(s->z), free(s->y), free(s->h), free(s->decay);
}

/* The buffers, with every group's A, bias and skip loaded; false when out of memory. */
static bool alloc_buffers(group_buffers *s, const tg_scan_args *a)
{
    const int64_t D = a->u->shape[1], L = a->u->shape[2], N = a->A->shape[1], groups = (D + G - 1) / G;
    const size_t nl = sizeof(float) * (size_t)(N * L), lg = sizeof(float) * (size_t)(L * G);
    const size_t ng = sizeof(float) * (size_t)(N * G), channels = sizeof(float) * (size_t)(groups * G);
    *s = (group_buffers){malloc(nl),       malloc(nl),       malloc(ng * (size_t)groups),
                         malloc(channels), malloc(channels), malloc(lg),
                         malloc(lg),       malloc(lg),       malloc(lg),
                         malloc(lg),       malloc(ng),       malloc(ng)};
    const bool ok =
        s->Bt && s->Ct && s->A && s->bias && s->skip && s->u && s->dt && s->slope && s->z && s->y && s->h && s->decay;
    if (ok) load_channels(a, s->A, s->bias, s->skip);
    return ok;
}

static group group_of(const tg_scan_args *a, const group_buffers *s, int64_t b, int64_t d0)
{
    const int64_t D = a->u->shape[1], N = a->A->shape[1];
    return (group){b,
                   d0,
                   D - d0 < G ? D - d0 : G,
                   N,
                   a->u->shape[2],
                   s->Bt,
                   s->Ct,
                   s->A + d0 * N,
                   s->bias + d0,
                   s->skip + d0,
                   s->u,
                   s->dt,
                   s->slope,
                   a->z ? s->z : NULL,
                   s->y,
                   s->h,
                   s->decay};
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
            tg_store(tg_bytes(chunk_states), chunk_states->dtype,
                     q->b * s[0] + (q->d0 + g) * s[1] + n * s[2] + c * s[3], q->h[n * G + g]);
}

static void forward_group(forward_job *job, group *q)
{
    const tg_scan_args *a = job->a;
    const int64_t L = q->L, chunk = a->chunk;
    load_state(a->initial_state, q, q->h);
    for (int64_t t0 = 0; t0 < L; t0 += chunk) {
        if (job->chunk_states) save_chunk_state(job->chunk_states, q, t0 / chunk);
        advance(q, t0, t0 + chunk < L ? t0 + chunk : L, NULL, NULL);
    }
    if (q->z) gate(q->y, q->z, L * G);
    store_rows(job->out, q, q->y);
    if (job->final_state) store_state(job->final_state, q, q->h);
}

static void forward_rows(void *context, int64_t b_begin, int64_t b_end)
{
    forward_job *job = context;
    const tg_scan_args *a = job->a;
    const int64_t D = a->u->shape[1], L = a->u->shape[2], N = a->A->shape[1];
    group_buffers s;
    if (!alloc_buffers(&s, a)) {
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
    if (atomic_load(&job.out_of_memory))
        return tg_set_error(TG_ERR_NOMEM, "tg_selective_scan: out of memory for a state buffer");
    return TG_OK;
}

/* ---- backward ----------------------------------------------------------------------------------- */

/* What the reverse scan of a group reads and adds to, besides its inputs. */
typedef struct {
    float *H;         /* (chunk + 1)·N·G: H[0] the state before the chunk, H[k + 1] after its step k */
    float *E;         /* chunk·N·G: the decays exp(dt·A) of the chunk's steps */
    float *carry;     /* N·G: the state gradient flowing back into the step before */
    float *dy, *gout; /* L·G: dout·silu(z) (or dout), and dout (then dz) */
    float *du, *ddt;  /* L·G: the gradients of u and of delta */
    double *dA;       /* N·G: Σ_t of each channel */
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
    const lanes skip = load_lanes(q->skip);
    wide_lanes dDv = load_wide(s->dDv), dbias = load_wide(s->dbias);
    for (int64_t t = t1 - 1; t >= t0; t--) {
        const lanes dt = load_lanes(q->dt + t * G), u = load_lanes(q->u + t * G), dy = load_lanes(s->dy + t * G);
        const lanes dtu = dt * u;
        lanes du = {0}, ddt = {0};
        for (int64_t n = 0; n < N; n++) {
            const float bn = q->Bt[t * N + n], cn = q->Ct[t * N + n];
            const int64_t at = ((t - t0) * N + n) * G;
            const lanes decay = load_lanes(s->E + at), h_prev = load_lanes(s->H + at);
            const lanes dh = cn * dy + load_lanes(s->carry + n * G);
            const lanes dh_decay_prev = dh * decay * h_prev;
            du += dh * dt * bn;
            ddt += dh * bn * u + load_lanes(q->A + n * G) * dh_decay_prev;
            store_wide(s->dA + n * G,
                       load_wide(s->dA + n * G) + __builtin_convertvector(dt * dh_decay_prev, wide_lanes));
            store_lanes(s->carry + n * G, decay * dh);
            /* the sums over channels (padding lanes hold zeros) */
            if (s->dBt) s->dBt[t * N + n] += sum_lanes(dh * dtu);
            if (s->dCt) s->dCt[t * N + n] += sum_lanes(dy * load_lanes(s->H + at + N * G));
        }
        const lanes ddelta = ddt * load_lanes(q->slope + t * G);
        store_lanes(s->du + t * G, du + skip * dy);
        store_lanes(s->ddt + t * G, ddelta);
        dDv += __builtin_convertvector(dy * u, wide_lanes);
        dbias += __builtin_convertvector(ddelta, wide_lanes);
    }
    store_wide(s->dDv, dDv);
    store_wide(s->dbias, dbias);
}

typedef tg_four_doubles four_doubles; /* a quarter of a group's double lanes */

/* Lanes 0–3 and 4–7 of v in double. */
static inline four_doubles low_four(eight v) { return tg_widen_four(__builtin_shufflevector(v, v, 0, 1, 2, 3)); }

static inline four_doubles high_four(eight v) { return tg_widen_four(__builtin_shufflevector(v, v, 4, 5, 6, 7)); }

static inline void add_to_doubles(double *p, eight v)
{
    four_doubles low, high;
    memcpy(&low, p, sizeof low);
    memcpy(&high, p + 4, sizeof high);
    low += low_four(v), high += high_four(v);
    memcpy(p, &low, sizeof low);
    memcpy(p + 4, &high, sizeof high);
}

/* sum_lanes of the group whose lanes 0–7 are a and 8–15 are b, in sum_lanes' tree. */
static inline double sum_halves(eight a, eight b)
{
    const four_doubles s = (low_four(a) + low_four(b)) + (high_four(a) + high_four(b));
    return (s[0] + s[2]) + (s[1] + s[3]);
}

/* reverse_steps in two halves of 8 floats, for CPUs without AVX-512 (see run_steps_by_eights):
 * the same operations in the same order, lane by lane, and the same sums. */
TG_VECTOR_CLONES
static void reverse_steps_by_eights(const group *q, int64_t t0, int64_t t1, reverse_buffers *s)
{
    const int64_t N = q->N;
    const eight skip[2] = {load_eight(q->skip), load_eight(q->skip + 8)};
    for (int64_t t = t1 - 1; t >= t0; t--) {
        eight dt[2], u[2], dy[2], dtu[2], du[2] = {{0}, {0}}, ddt[2] = {{0}, {0}};
        for (int k = 0; k < 2; k++) {
            dt[k] = load_eight(q->dt + t * G + 8 * k), u[k] = load_eight(q->u + t * G + 8 * k);
            dy[k] = load_eight(s->dy + t * G + 8 * k), dtu[k] = dt[k] * u[k];
        }
        for (int64_t n = 0; n < N; n++) {
            const float bn = q->Bt[t * N + n], cn = q->Ct[t * N + n];
            eight dh_dtu[2], dy_h[2];
            for (int k = 0; k < 2; k++) {
                const int64_t at = ((t - t0) * N + n) * G + 8 * k, nk = n * G + 8 * k;
                const eight decay = load_eight(s->E + at), h_prev = load_eight(s->H + at);
                const eight dh = cn * dy[k] + load_eight(s->carry + nk);
                const eight dh_decay_prev = dh * decay * h_prev;
                du[k] += dh * dt[k] * bn;
                ddt[k] += dh * bn * u[k] + load_eight(q->A + nk) * dh_decay_prev;
                add_to_doubles(s->dA + nk, dt[k] * dh_decay_prev);
                store_eight(s->carry + nk, decay * dh);
                dh_dtu[k] = dh * dtu[k];
                dy_h[k] = dy[k] * load_eight(s->H + at + N * G);
            }
            if (s->dBt) s->dBt[t * N + n] += sum_halves(dh_dtu[0], dh_dtu[1]);
            if (s->dCt) s->dCt[t * N + n] += sum_halves(dy_h[0], dy_h[1]);
        }
        for (int k = 0; k < 2; k++) {
            const eight ddelta = ddt[k] * load_eight(q->slope + t * G + 8 * k);
            store_eight(s->du + t * G + 8 * k, du[k] + skip[k] * dy[k]);
            store_eight(s->ddt + t * G + 8 * k, ddelta);
            add_to_doubles(s->dDv + 8 * k, dy[k] * u[k]);
            add_to_doubles(s->dbias + 8 * k, ddelta);
        }
    }
}

/* Steps t1 − 1 … t0 of the reverse scan with the loop that suits the CPU's vectors. */
static void retreat(const group *q, int64_t t0, int64_t t1, reverse_buffers *s)
{
    if (vectors_hold_a_group())
        reverse_steps(q, t0, t1, s);
    else
        reverse_steps_by_eights(q, t0, t1, s);
}

/* v[b, d0 + g, n, c] (the chunk states) into the group's state. */
static void load_chunk_state(const tg_tensor *v, const group *q, int64_t c, float *x)
{
    const int64_t *s = v->strides;
    memset(x, 0, sizeof(float) * (size_t)(q->N * G));
    for (int64_t g = 0; g < q->channels; g++)
        for (int64_t n = 0; n < q->N; n++)
            x[n * G + g] = load_at(v, q->b * s[0] + (q->d0 + g) * s[1] + n * s[2] + c * s[3]);
}

/* The group's gradients: chunks from the last, each recomputed from its saved state. */
static void backward_group(const scan_backward_job *job, group *q, reverse_buffers *s)
{
    const tg_scan_args *a = job->a;
    const tg_scan_grads *g = job->g;
    const int64_t N = q->N, L = q->L, chunk = a->chunk, n_chunks = (L - 1) / chunk + 1;
    if (job->dout)
        load_rows(job->dout, q, s->gout);
    else
        memset(s->gout, 0, sizeof(float) * (size_t)(L * G));
    if (q->z)
        gate_backward(s->gout, q->z, L * G, s->dy);
    else
        memcpy(s->dy, s->gout, sizeof(float) * (size_t)(L * G));
    load_state(job->dfinal, q, s->carry);
    for (int64_t i = 0; i < N * G; i++) s->dA[i] = 0.0;
    for (int k = 0; k < G; k++) s->dDv[k] = s->dbias[k] = 0.0;
    for (int64_t c = n_chunks - 1; c >= 0; c--) {
        const int64_t t0 = c * chunk, t1 = t0 + chunk < L ? t0 + chunk : L;
        load_chunk_state(job->chunk_states, q, c, q->h);
        memcpy(s->H, q->h, sizeof(float) * (size_t)(N * G));
        advance(q, t0, t1, s->H, s->E);
        retreat(q, t0, t1, s);
    }
    if (g->dz) {
        gate_gradient(s->gout, q->z, q->y, L * G);
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
    /* Both allocations run even if one fails, so the frees below see every pointer set. */
    const bool have_groups = alloc_buffers(&gb, a);
    const bool have_reverse = alloc_reverse(&s, N, L, a->chunk < L ? a->chunk : L);
    bool ok = have_groups && have_reverse;
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
