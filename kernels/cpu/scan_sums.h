/* kernels/cpu/scan_sums.h: the sums across rows of the CPU scan's backward, which both paths
 * (scan.c in double, scan_float.c in float32) keep the same way: per (b, d) row its sums over
 * t (dA, dDv, ddelta_bias), added over b in order once the threads are done, and per batch
 * row b the sums over d of dBm and dCm, which only the thread that owns b adds to. So the
 * results do not depend on how the rows were split over threads. */
#ifndef TAPEGRAD_KERNELS_CPU_SCAN_SUMS_H
#define TAPEGRAD_KERNELS_CPU_SCAN_SUMS_H

#include "kernels/scan.h"

#include <stdatomic.h>
#include <stdlib.h>

typedef struct {
    double *dBm, *dCm;        /* B·N·L sums over d (NULL when not wanted), in the path's own order */
    double *dA, *dDv, *dbias; /* per (b, d): B·D·N, B·D, B·D */
} scan_sums;

static inline void scan_sums_free(scan_sums *s)
{
    free(s->dBm), free(s->dCm), free(s->dA), free(s->dDv), free(s->dbias);
    *s = (scan_sums){0};
}

static inline bool scan_sums_alloc(scan_sums *s, const tg_scan_grads *g, int64_t B, int64_t D, int64_t N, int64_t L)
{
    const size_t steps = (size_t)(B * N * L), rows = (size_t)(B * D);
    *s = (scan_sums){g->dBm ? calloc(steps, sizeof(double)) : NULL, g->dCm ? calloc(steps, sizeof(double)) : NULL,
                     malloc(sizeof(double) * rows * (size_t)N), malloc(sizeof(double) * rows),
                     malloc(sizeof(double) * rows)};
    if ((!g->dBm || s->dBm) && (!g->dCm || s->dCm) && s->dA && s->dDv && s->dbias) return true;
    scan_sums_free(s);
    return false;
}

/* dA[d, n], dDv[d], ddelta_bias[d]: the rows' sums added over b in order. */
static inline void scan_sums_store_channels(const scan_sums *s, const tg_scan_grads *g, int64_t B, int64_t D, int64_t N)
{
    for (int64_t d = 0; d < D; d++) {
        for (int64_t n = 0; g->dA && n < N; n++) {
            double sum = 0.0;
            for (int64_t b = 0; b < B; b++) sum += s->dA[(b * D + d) * N + n];
            tg_store(tg_bytes(g->dA), g->dA->dtype, d * g->dA->strides[0] + n * g->dA->strides[1], sum);
        }
        double dDv = 0.0, dbias = 0.0;
        for (int64_t b = 0; b < B; b++) dDv += s->dDv[b * D + d], dbias += s->dbias[b * D + d];
        if (g->dDv) tg_store(tg_bytes(g->dDv), g->dDv->dtype, d * g->dDv->strides[0], dDv);
        if (g->ddelta_bias)
            tg_store(tg_bytes(g->ddelta_bias), g->ddelta_bias->dtype, d * g->ddelta_bias->strides[0], dbias);
    }
}

/* dst (B, N, L) from a sum over d kept as (B, L, N) when by_step, else as (B, N, L). */
static inline void scan_sums_store_steps(const double *sum, tg_tensor *dst, int64_t B, int64_t N, int64_t L,
                                         bool by_step)
{
    for (int64_t b = 0; b < B; b++)
        for (int64_t n = 0; n < N; n++)
            for (int64_t t = 0; t < L; t++)
                tg_store(tg_bytes(dst), dst->dtype, b * dst->strides[0] + n * dst->strides[1] + t * dst->strides[2],
                         sum[by_step ? (b * L + t) * N + n : (b * N + n) * L + t]);
}

/* Stores every sum the grads want. */
static inline void scan_sums_store(const scan_sums *s, const tg_scan_grads *g, int64_t B, int64_t D, int64_t N,
                                   int64_t L, bool by_step)
{
    scan_sums_store_channels(s, g, B, D, N);
    if (g->dBm) scan_sums_store_steps(s->dBm, g->dBm, B, N, L, by_step);
    if (g->dCm) scan_sums_store_steps(s->dCm, g->dCm, B, N, L, by_step);
}

/* A backward over the batch rows split over threads: rows(job, b_begin, b_end) fills
 * job->sums for its rows (and the per-position gradients); then the sums are stored. */
typedef struct {
    const tg_scan_args *a;
    const tg_tensor *chunk_states, *dout, *dfinal;
    const tg_scan_grads *g;
    scan_sums sums;
    atomic_bool out_of_memory; /* set by a range that could not get its buffers */
} scan_backward_job;

static inline tg_status scan_backward_run(const tg_scan_args *a, const tg_tensor *chunk_states, const tg_tensor *dout,
                                          const tg_tensor *dfinal, const tg_scan_grads *g, tg_range_fn rows,
                                          bool by_step)
{
    const int64_t B = a->u->shape[0], D = a->u->shape[1], L = a->u->shape[2], N = a->A->shape[1];
    scan_backward_job job = {a, chunk_states, dout, dfinal, g, {0}, false};
    bool ok = scan_sums_alloc(&job.sums, g, B, D, N, L);
    if (ok) tg_parallel_ranges(B, 1, rows, &job);
    ok = ok && !atomic_load(&job.out_of_memory);
    if (ok) scan_sums_store(&job.sums, g, B, D, N, L, by_step);
    scan_sums_free(&job.sums);
    return ok ? TG_OK : tg_set_error(TG_ERR_NOMEM, "tg_selective_scan backward: out of memory for scratch buffers");
}

#endif
