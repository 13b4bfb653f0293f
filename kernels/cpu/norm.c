/* kernels/cpu/norm.c: fused RMS normalisation on strided CPU tensors, in double, with an
 * optional residual add before it. x is a list of rows (a row is the last dimension, D long). Each row is read into a
 * double buffer with one dtype switch, worked on there, and written back once; the rows
 * are split over CPU threads. dw, a sum over rows, is summed per block of
 * ROWS_PER_BLOCK rows and then over the blocks in order, so no thread count changes it. */
#include "kernels/norm.h"
#include "kernels/cpu/rows.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

enum { ROWS_PER_BLOCK = 64 };

/* Where row r of t starts: r taken apart over t's leading dimensions (one multiply when
 * they collapse into one, as in a dense tensor; the divisions cost more than a short row). */
static int64_t row_start(const tg_tensor *t, int64_t r)
{
    if (t->ndim < 2) return 0;
    bool collapses = true;
    for (int i = 0; i < t->ndim - 2; i++) collapses = collapses && t->strides[i] == t->strides[i + 1] * t->shape[i + 1];
    if (collapses) return r * t->strides[t->ndim - 2];
    int64_t offset = 0;
    for (int i = t->ndim - 2; i >= 0; i--) {
        offset += (r % t->shape[i]) * t->strides[i];
        r /= t->shape[i];
    }
    return offset;
}

/* Row r of a tensor of x's shape, along its last dimension. */
static void load_x_row(const tg_tensor *t, int64_t r, int64_t d, double *out)
{
    tg_load_row(t, row_start(t, r), t->strides[t->ndim - 1], d, out);
}

/* r = 1 / sqrt(mean(x²) + eps) over one row. */
static double inverse_rms(const double *x, int64_t d, double eps)
{
    double sum_sq = 0;
    for (int64_t j = 0; j < d; j++) sum_sq += x[j] * x[j];
    return 1.0 / sqrt(sum_sq / (double)d + eps);
}

typedef struct {
    const tg_tensor *x, *residual, *weight, *dy, *dsum;
    tg_tensor *y, *sum, *dx;
    double eps;
    int64_t d;
    double *dw_blocks; /* [blocks][d]: each block's share of dw, or NULL */
    atomic_bool out_of_memory;
} norm_job;

/* `count` row buffers of d doubles in one block, the first holding the weight; NULL when
 * out of memory. */
static double *alloc_rows(const norm_job *job, int count)
{
    double *rows = malloc(sizeof(double) * (size_t)(job->d > 0 ? job->d : 1) * (size_t)count);
    if (rows) tg_load_row(job->weight, 0, job->weight->strides[0], job->d, rows);
    return rows;
}

static void norm_forward_rows(void *context, int64_t begin, int64_t end)
{
    norm_job *job = context;
    const int64_t d = job->d;
    double *w = alloc_rows(job, 3), *x = w + d, *residual = x + d;
    if (!w) {
        atomic_store(&job->out_of_memory, true);
        return;
    }
    for (int64_t r = begin; r < end; r++) {
        load_x_row(job->x, r, d, x);
        if (job->residual) { /* the sum is normalised as stored: rounded to its dtype */
            load_x_row(job->residual, r, d, residual);
            for (int64_t j = 0; j < d; j++) x[j] += residual[j];
            const int64_t at = row_start(job->sum, r), step = job->sum->strides[job->sum->ndim - 1];
            tg_store_row(job->sum, at, step, d, x);
            tg_load_row(job->sum, at, step, d, x);
        }
        double inv = inverse_rms(x, d, job->eps);
        for (int64_t j = 0; j < d; j++) x[j] = x[j] * inv * w[j];
        tg_store_row(job->y, row_start(job->y, r), job->y->strides[job->y->ndim - 1], d, x);
    }
    free(w);
}

tg_status tg_cpu_rmsnorm_fwd(const tg_tensor *x, const tg_tensor *residual, const tg_tensor *weight, double eps,
                             tg_tensor *y, tg_tensor *sum)
{
    const int64_t d = x->shape[x->ndim - 1], rows = d ? tg_numel(x) / d : 0;
    norm_job job = {.x = x, .residual = residual, .weight = weight, .y = y, .sum = sum, .eps = eps, .d = d};
    tg_parallel_ranges(rows, 1 + 8192 / (d + 1), norm_forward_rows, &job);
    if (atomic_load(&job.out_of_memory))
        return tg_set_error(TG_ERR_NOMEM, "tg_rmsnorm: out of memory for a row buffer");
    return TG_OK;
}

/* One row of the backward: dx = r·(g − x·r²·mean(g·x)) (+ dsum) with g = dy·w, and
 * dw += dy·x·r. */
static void backward_row(norm_job *job, int64_t r, const double *w, double *x, double *g, double *dsum, double *dw)
{
    const int64_t d = job->d;
    load_x_row(job->x, r, d, x);
    load_x_row(job->dy, r, d, g);
    double inv = inverse_rms(x, d, job->eps);
    if (dw)
        for (int64_t j = 0; j < d; j++) dw[j] += g[j] * x[j] * inv;
    if (!job->dx) return;
    double sum_gx = 0;
    for (int64_t j = 0; j < d; j++) sum_gx += g[j] * w[j] * x[j];
    double c = inv * inv * sum_gx / (double)d;
    for (int64_t j = 0; j < d; j++) g[j] = inv * (g[j] * w[j] - x[j] * c);
    if (job->dsum) {
        load_x_row(job->dsum, r, d, dsum);
        for (int64_t j = 0; j < d; j++) g[j] += dsum[j];
    }
    tg_store_row(job->dx, row_start(job->dx, r), job->dx->strides[job->dx->ndim - 1], d, g);
}

/* Rows of whole blocks [begin, end) (block indices). */
static void norm_backward_blocks(void *context, int64_t begin, int64_t end)
{
    norm_job *job = context;
    const int64_t d = job->d, rows = d ? tg_numel(job->x) / d : 0;
    double *w = alloc_rows(job, 4), *x = w + d, *g = x + d, *dsum = g + d;
    if (!w) {
        atomic_store(&job->out_of_memory, true);
        return;
    }
    for (int64_t block = begin; block < end; block++) {
        double *dw = job->dw_blocks ? job->dw_blocks + block * d : NULL;
        for (int64_t j = 0; dw && j < d; j++) dw[j] = 0.0;
        const int64_t last = (block + 1) * ROWS_PER_BLOCK < rows ? (block + 1) * ROWS_PER_BLOCK : rows;
        for (int64_t r = block * ROWS_PER_BLOCK; r < last; r++) backward_row(job, r, w, x, g, dsum, dw);
    }
    free(w);
}

tg_status tg_cpu_rmsnorm_bwd(const tg_tensor *x, const tg_tensor *weight, double eps, const tg_tensor *dy,
                             const tg_tensor *dsum, tg_tensor *dx, tg_tensor *dw)
{
    const int64_t d = x->shape[x->ndim - 1], rows = d ? tg_numel(x) / d : 0;
    const int64_t blocks = (rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    norm_job job = {.x = x, .weight = weight, .dy = dy, .dsum = dsum, .dx = dx, .eps = eps, .d = d};
    if (dw && blocks > 0 && !(job.dw_blocks = malloc(sizeof(double) * (size_t)(blocks * d + 1))))
        return tg_set_error(TG_ERR_NOMEM, "tg_rmsnorm backward: out of memory for %lld doubles",
                            (long long)(blocks * d));
    tg_parallel_ranges(blocks, 1 + 256 / (d + 1), norm_backward_blocks, &job);
    if (!atomic_load(&job.out_of_memory) && dw) {
        for (int64_t j = 0; j < d; j++) {
            double sum = 0.0;
            for (int64_t block = 0; block < blocks; block++) sum += job.dw_blocks[block * d + j];
            tg_store(tg_bytes(dw), dw->dtype, j * dw->strides[0], sum);
        }
    }
    free(job.dw_blocks);
    if (atomic_load(&job.out_of_memory))
        return tg_set_error(TG_ERR_NOMEM, "tg_rmsnorm backward: out of memory for a row buffer");
    return TG_OK;
}
