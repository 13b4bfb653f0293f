// kernels/cuda/loss.cu: fused cross-entropy on the GPU. The target check counts valid
// targets and finds the first bad one with integer atomics (exact, so the answer does
// not depend on scheduling) and copies both to the host; during a capture it records a
// bad target on the device instead (tapegrad/graph.h). The forward writes one loss per
// row (a block per row), then a single block adds the rows in a fixed order: thread i
// sums rows i, i + blockDim, ... in turn and a block tree adds the threads' sums, so the
// loss is the same bits on every run and every device; the same block counts the rows
// that are not ignored into a device scalar. The backward recomputes each row's
// log-sum-exp and writes (softmax − one_hot)·dloss/count, reading the count on the device.
#include "kernels/cuda/rows.cuh"
#include "kernels/loss.h"

#include <limits.h>

// ---- the target check ------------------------------------------------------------------

// result[0] += targets not equal to ignore_index and inside [0, classes);
// result[1] = min(result[1], flat index of any target outside [0, classes)).
__global__ void ce_check_kernel(tg_cuda_view targets, int64_t n, int32_t ignore_index, int64_t classes,
                                long long *result)
{
    __shared__ long long shared[33];
    long long valid = 0, first_bad = LLONG_MAX;
    for (int64_t i = tg_global_index(); i < n; i += tg_global_stride()) {
        int32_t t = ((const int32_t *)targets.data)[tg_offset_of(targets, i)];
        if (t == ignore_index) continue;
        if (t >= 0 && t < classes)
            valid++;
        else if (i < first_bad)
            first_bad = i;
    }
    valid = block_sum(valid, shared);
    first_bad = block_reduce<min_op>(first_bad, (long long)LLONG_MAX, shared);
    if (threadIdx.x == 0) {
        if (valid) atomicAdd((unsigned long long *)&result[0], (unsigned long long)valid);
        if (first_bad != LLONG_MAX) atomicMin(&result[1], first_bad);
    }
}

// Every target outside [0, classes) that is not ignore_index goes to the record of bad inputs.
__global__ void record_bad_targets_kernel(tg_cuda_view targets, int64_t n, int32_t ignore_index, int64_t classes,
                                          tg_bad_input *record)
{
    for (int64_t i = tg_global_index(); i < n; i += tg_global_stride()) {
        int32_t t = ((const int32_t *)targets.data)[tg_offset_of(targets, i)];
        if (t != ignore_index && (t < 0 || t >= classes)) tg_record_bad_input(record, TG_BAD_TARGET, i, t, classes);
    }
}

// Element offset in t of the row-major flat index `flat`.
static int64_t host_offset_of(const tg_tensor *t, int64_t flat)
{
    int64_t offset = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        offset += flat % t->shape[d] * t->strides[d];
        flat /= t->shape[d];
    }
    return offset;
}

extern "C" tg_status tg_cuda_cross_entropy_check(const tg_tensor *targets, int32_t ignore_index, int64_t classes,
                                                 int64_t *n_valid, int64_t *bad_index, int32_t *bad_value)
{
    *n_valid = 0;
    *bad_index = -1;
    int64_t n = tg_numel(targets);
    if (n == 0) return TG_OK;
    if (tg_cuda_capturing()) { // no waiting in a capture: the device keeps the answer
        *n_valid = -1;
        tg_bad_input *record = tg_cuda_bad_input_record();
        if (!record) return TG_ERR_DEVICE;
        record_bad_targets_kernel<<<tg_blocks_for(n), TG_THREADS>>>(tg_view_of(targets), n, ignore_index, classes,
                                                                    record);
        return tg_cuda_check_launch("tg_cross_entropy");
    }
    long long host[2] = {0, LLONG_MAX};
    long long *result = NULL;
    tg_status status = tg_device_alloc(TG_DEVICE_CUDA, sizeof host, (void **)&result);
    if (status != TG_OK) return status;
    status = tg_device_memcpy(result, host, sizeof host, TG_COPY_HOST_TO_DEVICE);
    if (status == TG_OK) {
        ce_check_kernel<<<tg_blocks_for(n), TG_THREADS>>>(tg_view_of(targets), n, ignore_index, classes, result);
        status = tg_cuda_check_launch("tg_cross_entropy");
    }
    if (status == TG_OK) status = tg_device_memcpy(host, result, sizeof host, TG_COPY_DEVICE_TO_HOST);
    tg_device_free(TG_DEVICE_CUDA, result, sizeof host);
    if (status != TG_OK) return status;
    *n_valid = host[0];
    if (host[1] == LLONG_MAX) return TG_OK;
    *bad_index = host[1];
    const int32_t *value = (const int32_t *)tg_bytes(targets) + host_offset_of(targets, host[1]);
    return tg_device_memcpy(bad_value, value, sizeof *bad_value, TG_COPY_DEVICE_TO_HOST);
}

// ---- forward and backward ----------------------------------------------------------------

// The target of row `row`: targets have logits' leading shape, so the row number is their
// flat index (1-D logits have one row and a target of shape (1)).
__device__ inline int32_t row_target(const tg_cuda_view &targets, int64_t row)
{
    return ((const int32_t *)targets.data)[tg_offset_of(targets, row)];
}

// row_loss[row] = lse(row) − row[target], or 0 on an ignored row.
template <typename Acc>
__global__ void ce_fwd_kernel(tg_cuda_view logits, tg_cuda_view targets, int32_t ignore_index, int64_t rows,
                              double *row_loss)
{
    __shared__ Acc shared[33];
    int64_t n = logits.shape[logits.ndim - 1], step = row_step(logits);
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        int32_t t = row_target(targets, row);
        if (t == ignore_index) { // the same for the whole block
            if (threadIdx.x == 0) row_loss[row] = 0.0;
            continue;
        }
        int64_t start = row_start(logits, row);
        row_lse<Acc> lse = row_logsumexp<Acc>(logits, start, n, shared);
        if (threadIdx.x == 0) {
            // The check has run, so t is a class; a NaN rather than a stray read if not.
            Acc loss = t >= 0 && t < n ? (lse.max - row_load<Acc>(logits, start + t * step)) + lse.log_sum : (Acc)NAN;
            row_loss[row] = (double)loss;
        }
    }
}

// count[0] = the rows whose target is not ignore_index; loss[0] = Σ row_loss / count (0
// when none), in one block: the order of the additions depends on nothing but `rows` and
// the block size.
__global__ void mean_kernel(const double *row_loss, tg_cuda_view targets, int32_t ignore_index, int64_t rows,
                            tg_cuda_view loss, double *count)
{
    __shared__ double shared[33];
    double sum = 0, counted = 0;
    for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
        sum += row_loss[r];
        counted += row_target(targets, r) != ignore_index;
    }
    sum = block_sum(sum, shared);
    counted = block_sum(counted, shared);
    if (threadIdx.x == 0) {
        *count = counted;
        tg_store_any(loss, 0, counted > 0 ? sum / counted : 0.0);
    }
}

// dlogits = dloss[0]/count · (softmax(row) − one_hot(target)), 0 on ignored rows.
template <typename Acc>
__global__ void ce_bwd_kernel(tg_cuda_view logits, tg_cuda_view targets, int32_t ignore_index, int64_t rows,
                              const double *count, tg_cuda_view dloss, tg_cuda_view dlogits)
{
    __shared__ Acc shared[33];
    int64_t n = logits.shape[logits.ndim - 1], step = row_step(logits), dstep = row_step(dlogits);
    const double n_valid = *count;
    Acc scale = n_valid > 0 ? (Acc)(tg_load_any(dloss, 0) / n_valid) : (Acc)0;
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        int32_t t = row_target(targets, row);
        int64_t dstart = row_start(dlogits, row);
        if (t == ignore_index) {
            for (int64_t j = threadIdx.x; j < n; j += blockDim.x) row_store(dlogits, dstart + j * dstep, (Acc)0);
            continue;
        }
        int64_t start = row_start(logits, row);
        row_lse<Acc> lse = row_logsumexp<Acc>(logits, start, n, shared);
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
            Acc p = tg_exp((row_load<Acc>(logits, start + j * step) - lse.max) - lse.log_sum);
            row_store(dlogits, dstart + j * dstep, scale * (p - (j == t ? (Acc)1 : (Acc)0)));
        }
    }
}

static int64_t row_count(const tg_tensor *logits)
{
    int64_t n = logits->shape[logits->ndim - 1];
    return n > 0 ? tg_numel(logits) / n : 0;
}

extern "C" tg_status tg_cuda_cross_entropy_fwd(const tg_tensor *logits, const tg_tensor *targets, int32_t ignore_index,
                                               tg_tensor *loss, tg_tensor *count)
{
    int64_t rows = row_count(logits);
    if (rows == 0) { // no row: the loss is 0
        tg_status status = tg_cuda_fill(loss, 0.0);
        return status == TG_OK ? tg_cuda_fill(count, 0.0) : status;
    }
    int64_t bytes;
    if (tg_mul_overflows(rows, (int64_t)sizeof(double), &bytes))
        return tg_set_error(TG_ERR_OVERFLOW, "tg_cross_entropy: %lld row losses are too many", (long long)rows);
    double *row_loss = NULL;
    tg_status status = tg_device_alloc(TG_DEVICE_CUDA, (size_t)bytes, (void **)&row_loss);
    if (status != TG_OK) return status;
    unsigned threads = row_threads(logits->shape[logits->ndim - 1]), blocks = row_blocks(rows);
    tg_cuda_view lv = tg_view_of(logits), tv = tg_view_of(targets);
    if (logits->dtype == TG_F64)
        ce_fwd_kernel<double><<<blocks, threads>>>(lv, tv, ignore_index, rows, row_loss);
    else
        ce_fwd_kernel<float><<<blocks, threads>>>(lv, tv, ignore_index, rows, row_loss);
    status = tg_cuda_check_launch("tg_cross_entropy");
    if (status == TG_OK) {
        mean_kernel<<<1, 1024>>>(row_loss, tv, ignore_index, rows, tg_view_of(loss), (double *)tg_bytes(count));
        status = tg_cuda_check_launch("tg_cross_entropy");
    }
    tg_device_free(TG_DEVICE_CUDA, row_loss, (size_t)bytes); // queued work finishes first: one stream
    return status;
}

extern "C" tg_status tg_cuda_cross_entropy_bwd(const tg_tensor *logits, const tg_tensor *targets, int32_t ignore_index,
                                               const tg_tensor *count, const tg_tensor *dloss, tg_tensor *dlogits)
{
    int64_t rows = row_count(logits);
    if (rows == 0) return TG_OK;
    unsigned threads = row_threads(logits->shape[logits->ndim - 1]), blocks = row_blocks(rows);
    tg_cuda_view lv = tg_view_of(logits), tv = tg_view_of(targets), gv = tg_view_of(dloss), dv = tg_view_of(dlogits);
    const double *cv = (const double *)tg_bytes(count);
    if (logits->dtype == TG_F64)
        ce_bwd_kernel<double><<<blocks, threads>>>(lv, tv, ignore_index, rows, cv, gv, dv);
    else
        ce_bwd_kernel<float><<<blocks, threads>>>(lv, tv, ignore_index, rows, cv, gv, dv);
    return tg_cuda_check_launch("tg_cross_entropy backward");
}

// ---- the arg-max's hits ---------------------------------------------------------------------
//
// A warp per row: each lane keeps the first largest of its columns, then the warp keeps the
// larger value, the smaller column on a tie (so the row's first largest). The counts are
// whole numbers added with atomics: exact in double, so in any order the same.

struct best_column {
    float value;
    int64_t column; // -1: none yet (or only NaN)
};

__device__ inline best_column better(best_column a, best_column b)
{
    if (b.column < 0) return a;
    if (a.column < 0) return b;
    return b.value > a.value || (b.value == a.value && b.column < a.column) ? b : a;
}

__global__ void count_correct_kernel(tg_cuda_view logits, tg_cuda_view targets, int32_t ignore_index, int64_t rows,
                                     double *counts)
{
    const int lane = threadIdx.x % 32;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
    const int64_t n = logits.shape[logits.ndim - 1], step = row_step(logits);
    double correct = 0, scored = 0;
    for (int64_t row = tg_global_index() / 32; row < rows; row += warps) {
        const int32_t t = row_target(targets, row);
        if (t == ignore_index) continue;
        const int64_t start = row_start(logits, row);
        best_column best = {0.0f, -1};
        for (int64_t j = lane; j < n; j += 32) {
            float v = (float)tg_load_raw(logits.data, logits.dtype, start + j * step);
            if (v == v && (best.column < 0 || v > best.value)) best = {v, j};
        }
        for (int offset = 16; offset > 0; offset /= 2) {
            best_column other = {__shfl_down_sync(0xffffffffu, best.value, offset),
                                 (int64_t)__shfl_down_sync(0xffffffffu, (long long)best.column, offset)};
            best = better(best, other);
        }
        scored += 1;
        correct += best.column == t;
    }
    if (lane == 0 && scored > 0) {
        atomicAdd(&counts[0], correct);
        atomicAdd(&counts[1], scored);
    }
}

extern "C" tg_status tg_cuda_count_correct(const tg_tensor *logits, const tg_tensor *targets, int32_t ignore_index,
                                           tg_tensor *counts)
{
    int64_t rows = row_count(logits);
    if (rows == 0) return TG_OK;
    int64_t blocks = (rows + 7) / 8; // 8 warps of 256 threads, a row each
    count_correct_kernel<<<(unsigned)(blocks < 4096 ? blocks : 4096), 256>>>(
        tg_view_of(logits), tg_view_of(targets), ignore_index, rows, (double *)tg_bytes(counts));
    return tg_cuda_check_launch("tg_count_correct");
}
