/* kernels/cpu/loss_float.c: the fused cross-entropy on the CPU for dense f32, bf16 and f16
 * logits, in float32 maths (kernels/cpu/loss.c keeps the double path for f64 and for any
 * other layout).
 *
 * Rows are split over the library's threads. A row's exps come from the vectorised float
 * exp; their sum is added in double in index order and its log taken in double. The
 * forward keeps each row's loss and adds them in row order once the threads are done, so
 * the loss does not depend on the thread count. */
#include "kernels/loss.h"
#include "kernels/cpu/float_math.h"
#include "kernels/cpu/rows.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

/* out[j] = e^((x[j] − max) − log_sum) for j < n: with log_sum = 0, the shifted exps; with
 * the row's log Σ of them, its softmax. x[j] − max is taken first, exactly when x[j] is
 * near max, so large logits lose nothing to a rounded log-sum-exp. */
TG_VECTOR_CLONES
static void shifted_exps(const float *restrict x, float max, float log_sum, int64_t n, float *restrict out)
{
    for (int64_t j = 0; j < n; j++) out[j] = tg_exp_float((x[j] - max) - log_sum);
}

/* A row of V floats' log-sum-exp as max + *log_sum (exps: V floats of scratch). The max is
 * NaN when the row holds one, ±inf when its largest value is infinite (*log_sum is then 0). */
static float row_max_and_log_sum(const float *x, int64_t V, float *exps, float *log_sum)
{
    float max = -INFINITY;
    *log_sum = 0.0f;
    for (int64_t j = 0; j < V; j++) {
        if (isnan(x[j])) return x[j];
        if (x[j] > max) max = x[j];
    }
    if (isinf(max)) return max; /* all −inf, or a +inf: the sum below would compute inf − inf */
    shifted_exps(x, max, 0.0f, V, exps);
    double sum = 0.0;
    for (int64_t j = 0; j < V; j++) sum += exps[j];
    *log_sum = (float)log(sum);
    return max;
}

typedef struct {
    const tg_tensor *logits, *targets;
    int32_t ignore_index;
    int64_t V;
    double *row_loss; /* forward: each row's loss, 0 for an ignored row */
    float scale;      /* backward: dloss / count */
    tg_tensor *dlogits;
    atomic_bool out_of_memory;
} ce_job;

/* Target of row r (targets dense, like the logits' leading dimensions). */
static int32_t target_of(const ce_job *job, int64_t r) { return ((const int32_t *)tg_bytes(job->targets))[r]; }

/* `count` rows of V floats in one block, or NULL with the job's out-of-memory flag set. */
static float *row_buffers(ce_job *job, int count)
{
    float *rows = malloc(sizeof(float) * (size_t)(count * job->V));
    if (!rows) atomic_store(&job->out_of_memory, true);
    return rows;
}

/* Row r of the logits into x; its log-sum-exp as the returned max + *log_sum. */
static float load_row(const ce_job *job, int64_t r, float *x, float *exps, float *log_sum)
{
    tg_load_row_float(job->logits, r * job->V, 1, job->V, x);
    return row_max_and_log_sum(x, job->V, exps, log_sum);
}

static void ce_forward_rows(void *context, int64_t begin, int64_t end)
{
    ce_job *job = context;
    float *x = row_buffers(job, 2);
    if (!x) return;
    float *exps = x + job->V;
    for (int64_t r = begin; r < end; r++) {
        const int32_t t = target_of(job, r);
        if (t == job->ignore_index) {
            job->row_loss[r] = 0.0;
            continue;
        }
        float log_sum;
        const float max = load_row(job, r, x, exps, &log_sum);
        job->row_loss[r] = ((double)max - (double)x[t]) + (double)log_sum;
    }
    free(x);
}

static void ce_backward_rows(void *context, int64_t begin, int64_t end)
{
    ce_job *job = context;
    const int64_t V = job->V;
    float *x = row_buffers(job, 3);
    if (!x) return;
    float *exps = x + V, *grad = exps + V;
    for (int64_t r = begin; r < end; r++) {
        const int32_t t = target_of(job, r);
        if (t == job->ignore_index) {
            for (int64_t j = 0; j < V; j++) grad[j] = 0.0f;
        } else {
            float log_sum;
            const float max = load_row(job, r, x, exps, &log_sum);
            shifted_exps(x, max, log_sum, V, grad); /* the softmax */
            for (int64_t j = 0; j < V; j++) grad[j] *= job->scale;
            grad[t] -= job->scale;
        }
        tg_store_row_float(job->dlogits, r * V, 1, V, grad);
    }
    free(x);
}

/* Rows per thread at least: a row costs about V exps. */
static int64_t min_rows(int64_t V) { return 1 + 4096 / (V + 1); }

bool tg_cpu_cross_entropy_float_applies(const tg_tensor *logits, const tg_tensor *targets)
{
    return logits->dtype != TG_F64 && logits->ndim >= 1 && logits->shape[logits->ndim - 1] > 0 &&
           tg_is_contiguous(logits) && tg_is_contiguous(targets);
}

tg_status tg_cpu_cross_entropy_fwd_float(const tg_tensor *logits, const tg_tensor *targets, int32_t ignore_index,
                                         tg_tensor *loss, tg_tensor *count)
{
    const int64_t V = logits->shape[logits->ndim - 1], rows = tg_numel(logits) / V;
    ce_job job = {logits, targets, ignore_index, V, malloc(sizeof(double) * (size_t)(rows > 0 ? rows : 1))};
    if (!job.row_loss)
        return tg_set_error(TG_ERR_NOMEM, "tg_cross_entropy: out of memory for %lld row losses", (long long)rows);
    tg_parallel_ranges(rows, min_rows(V), ce_forward_rows, &job);
    double sum = 0.0;
    int64_t n_valid = 0;
    for (int64_t r = 0; r < rows; r++)
        if (target_of(&job, r) != ignore_index) sum += job.row_loss[r], n_valid++;
    free(job.row_loss);
    if (atomic_load(&job.out_of_memory))
        return tg_set_error(TG_ERR_NOMEM, "tg_cross_entropy: out of memory for a row buffer");
    tg_store(tg_bytes(loss), loss->dtype, 0, n_valid > 0 ? sum / (double)n_valid : 0.0);
    tg_store(tg_bytes(count), count->dtype, 0, (double)n_valid);
    return TG_OK;
}

tg_status tg_cpu_cross_entropy_bwd_float(const tg_tensor *logits, const tg_tensor *targets, int32_t ignore_index,
                                         double scale, tg_tensor *dlogits)
{
    const int64_t V = logits->shape[logits->ndim - 1], rows = tg_numel(logits) / V;
    ce_job job = {logits, targets, ignore_index, V, NULL, (float)scale, dlogits};
    tg_parallel_ranges(rows, min_rows(V), ce_backward_rows, &job);
    if (atomic_load(&job.out_of_memory))
        return tg_set_error(TG_ERR_NOMEM, "tg_cross_entropy backward: out of memory for a row buffer");
    return TG_OK;
}
