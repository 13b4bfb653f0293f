// kernels/cuda/loss.cu: fused cross-entropy on the GPU. The target check counts valid
// targets and finds the first bad one with integer atomics (exact, so the answer does
// not depend on scheduling) and copies both to the host; during a capture it records a
// bad target on the device instead (tapegrad/graph.h). The forward gives each row to a
// group of lanes (a block for long rows), and each block adds its rows' losses in a fixed
// order and counts the rows that are not ignored; a single block then adds the blocks'
// sums in order, so the loss is the same bits on every run and every device, and keeps the
// count in a device scalar. The backward recomputes each row's log-sum-exp and writes
// (softmax − one_hot)·dloss/count, reading the count on the device.
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
//
// Rows of up to kGroupClasses classes go to lane groups: `lanes` neighbouring lanes of a warp
// (a power of two, up to 32, at least the row's length when that fits) own a row, so a
// vocabulary of 16 keeps two rows per warp busy instead of a block of 32 threads half idle,
// and the row's max and sum are warp shuffles with no block barrier. Longer rows keep a
// block each. Both write per block the sum of its rows' losses and the count of rows scored;
// ce_mean_kernel adds the blocks in order.

constexpr int64_t kGroupClasses = 1024; // longest row a lane group owns
constexpr int kGroupThreads = 256;
constexpr int64_t kMaxGroupBlocks = 2048; // fixed by the shape alone, so the sums' order is too

// The target of row `row`: targets have logits' leading shape, so the row number is their
// flat index (1-D logits have one row and a target of shape (1)).
__device__ inline int32_t row_target(const tg_cuda_view &targets, int64_t row)
{
    return ((const int32_t *)targets.data)[tg_offset_of(targets, row)];
}

// Lanes per row for rows of n classes.
static inline int group_lanes(int64_t n)
{
    int lanes = 1;
    while (lanes < 32 && lanes < n) lanes *= 2;
    return lanes;
}

static inline unsigned group_blocks(int64_t rows, int lanes)
{
    const int64_t per_block = kGroupThreads / lanes, blocks = (rows + per_block - 1) / per_block;
    return (unsigned)(blocks < kMaxGroupBlocks ? blocks : kMaxGroupBlocks);
}

// Op over the `lanes` lanes of a group; every lane of the warp must call it (lanes is the same
// for the whole block).
template <typename Op, typename T> __device__ inline T group_reduce(T value, int lanes)
{
    for (int mask = lanes / 2; mask > 0; mask /= 2) value = Op::apply(value, __shfl_xor_sync(0xffffffffu, value, mask));
    return value;
}

// row_logsumexp for a lane group: lane `lane` of `lanes` reads columns lane, lane + lanes, …
// of the n given (n = 0 for a lane whose group has no row to score). Every lane runs both
// reductions, so the shuffles never diverge.
template <typename Acc>
__device__ inline row_lse<Acc> group_logsumexp(const tg_cuda_view &x, int64_t start, int64_t n, int lane, int lanes)
{
    const int64_t step = row_step(x);
    Acc max = -INFINITY;
    for (int64_t j = lane; j < n; j += lanes) max = max_op::apply(max, row_load<Acc>(x, start + j * step));
    max = group_reduce<max_op>(max, lanes);
    const bool finite = !isinf(max) && !isnan(max);
    Acc sum = 0;
    for (int64_t j = lane; finite && j < n; j += lanes) sum += tg_exp(row_load<Acc>(x, start + j * step) - max);
    sum = group_reduce<sum_op>(sum, lanes);
    return finite ? row_lse<Acc>{max, tg_log(sum)} : row_lse<Acc>{max, (Acc)0};
}

// A group's row in a round that starts at row `first`: its target, whether it is scored (it
// exists and is not ignored), where it starts and its log-sum-exp. Every lane of the block
// calls it, rows or not, so that the group's shuffles never diverge.
template <typename Acc> struct group_row {
    int64_t row, start;
    int32_t t;
    bool counted;
    row_lse<Acc> lse;
};

template <typename Acc>
__device__ inline group_row<Acc> group_row_at(const tg_cuda_view &logits, const tg_cuda_view &targets,
                                              int32_t ignore_index, int64_t rows, int64_t first, int lane, int lanes)
{
    group_row<Acc> r;
    r.row = first + threadIdx.x / lanes;
    r.t = r.row < rows ? row_target(targets, r.row) : ignore_index;
    r.counted = r.row < rows && r.t != ignore_index;
    r.start = r.counted ? row_start(logits, r.row) : 0;
    const int64_t n = logits.shape[logits.ndim - 1];
    r.lse = group_logsumexp<Acc>(logits, r.start, r.counted ? n : 0, lane, lanes);
    return r;
}

// The loss of a row whose target t is not ignored: lse − row[t] (NaN rather than a stray read
// if t is not a class: the check has run).
template <typename Acc>
__device__ inline double row_loss(const tg_cuda_view &logits, int64_t start, int64_t n, int32_t t, row_lse<Acc> lse)
{
    return t >= 0 && t < n ? (double)((lse.max - row_load<Acc>(logits, start + t * row_step(logits))) + lse.log_sum)
                           : (double)NAN;
}

// partials[2·block] = Σ its rows' losses, partials[2·block + 1] = its rows scored. Rows go to
// groups in rounds: group g of block b takes rows (round·gridDim + b)·groups + g.
template <typename Acc>
__global__ void ce_fwd_groups_kernel(tg_cuda_view logits, tg_cuda_view targets, int32_t ignore_index, int64_t rows,
                                     int lanes, double *partials)
{
    __shared__ double shared[33];
    const int lane = threadIdx.x % lanes, groups = blockDim.x / lanes;
    const int64_t n = logits.shape[logits.ndim - 1];
    double loss = 0, scored = 0;
    for (int64_t first = (int64_t)blockIdx.x * groups; first < rows; first += (int64_t)gridDim.x * groups) {
        const group_row<Acc> r = group_row_at<Acc>(logits, targets, ignore_index, rows, first, lane, lanes);
        if (r.counted && lane == 0) {
            loss += row_loss(logits, r.start, n, r.t, r.lse);
            scored += 1;
        }
    }
    loss = block_sum(loss, shared);
    scored = block_sum(scored, shared);
    if (threadIdx.x == 0) partials[2 * blockIdx.x] = loss, partials[2 * blockIdx.x + 1] = scored;
}

// The same for longer rows, a block per row.
template <typename Acc>
__global__ void ce_fwd_rows_kernel(tg_cuda_view logits, tg_cuda_view targets, int32_t ignore_index, int64_t rows,
                                   double *partials)
{
    __shared__ Acc shared[33];
    const int64_t n = logits.shape[logits.ndim - 1];
    double loss = 0, scored = 0;
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const int32_t t = row_target(targets, row);
        if (t == ignore_index) continue; // the same for the whole block
        const int64_t start = row_start(logits, row);
        const row_lse<Acc> lse = row_logsumexp<Acc>(logits, start, n, shared);
        loss += row_loss(logits, start, n, t, lse);
        scored += 1;
    }
    if (threadIdx.x == 0) partials[2 * blockIdx.x] = loss, partials[2 * blockIdx.x + 1] = scored;
}

// count[0] = the rows scored; loss[0] = Σ losses / count (0 when none), the blocks' partials
// added in one block: the order depends on nothing but their number.
__global__ void ce_mean_kernel(const double *partials, int64_t blocks, tg_cuda_view loss, double *count)
{
    __shared__ double shared[33];
    double sum = 0, counted = 0;
    for (int64_t b = threadIdx.x; b < blocks; b += blockDim.x) {
        sum += partials[2 * b];
        counted += partials[2 * b + 1];
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
__device__ inline void write_row_gradient(const tg_cuda_view &logits, int64_t start, const tg_cuda_view &dlogits,
                                          int64_t dstart, int64_t n, int32_t t, row_lse<Acc> lse, Acc scale,
                                          int64_t first, int64_t stride)
{
    const int64_t step = row_step(logits), dstep = row_step(dlogits);
    for (int64_t j = first; j < n; j += stride) {
        Acc p = tg_exp((row_load<Acc>(logits, start + j * step) - lse.max) - lse.log_sum);
        row_store(dlogits, dstart + j * dstep, scale * (p - (j == t ? (Acc)1 : (Acc)0)));
    }
}

template <typename Acc> __device__ inline Acc gradient_scale(const double *count, const tg_cuda_view &dloss)
{
    const double n_valid = *count;
    return n_valid > 0 ? (Acc)(tg_load_any(dloss, 0) / n_valid) : (Acc)0;
}

template <typename Acc>
__global__ void ce_bwd_groups_kernel(tg_cuda_view logits, tg_cuda_view targets, int32_t ignore_index, int64_t rows,
                                     int lanes, const double *count, tg_cuda_view dloss, tg_cuda_view dlogits)
{
    const int lane = threadIdx.x % lanes, groups = blockDim.x / lanes;
    const int64_t n = logits.shape[logits.ndim - 1];
    const Acc scale = gradient_scale<Acc>(count, dloss);
    for (int64_t first = (int64_t)blockIdx.x * groups; first < rows; first += (int64_t)gridDim.x * groups) {
        const group_row<Acc> r = group_row_at<Acc>(logits, targets, ignore_index, rows, first, lane, lanes);
        if (r.row >= rows) continue;
        const int64_t dstart = row_start(dlogits, r.row);
        if (r.counted)
            write_row_gradient<Acc>(logits, r.start, dlogits, dstart, n, r.t, r.lse, scale, lane, lanes);
        else
            for (int64_t j = lane; j < n; j += lanes) row_store(dlogits, dstart + j * row_step(dlogits), (Acc)0);
    }
}

template <typename Acc>
__global__ void ce_bwd_rows_kernel(tg_cuda_view logits, tg_cuda_view targets, int32_t ignore_index, int64_t rows,
                                   const double *count, tg_cuda_view dloss, tg_cuda_view dlogits)
{
    __shared__ Acc shared[33];
    const int64_t n = logits.shape[logits.ndim - 1];
    const Acc scale = gradient_scale<Acc>(count, dloss);
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const int32_t t = row_target(targets, row);
        const int64_t dstart = row_start(dlogits, row);
        if (t == ignore_index) {
            for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
                row_store(dlogits, dstart + j * row_step(dlogits), (Acc)0);
            continue;
        }
        const int64_t start = row_start(logits, row);
        const row_lse<Acc> lse = row_logsumexp<Acc>(logits, start, n, shared);
        write_row_gradient<Acc>(logits, start, dlogits, dstart, n, t, lse, scale, threadIdx.x, blockDim.x);
    }
}

static int64_t row_count(const tg_tensor *logits)
{
    int64_t n = logits->shape[logits->ndim - 1];
    return n > 0 ? tg_numel(logits) / n : 0;
}

static int64_t class_count(const tg_tensor *logits) { return logits->shape[logits->ndim - 1]; }

// The forward's blocks: lane groups for short rows, a block per row otherwise.
static unsigned forward_blocks(const tg_tensor *logits, int64_t rows)
{
    const int64_t n = class_count(logits);
    return n <= kGroupClasses ? group_blocks(rows, group_lanes(n)) : row_blocks(rows);
}

template <typename Acc>
static void launch_forward(const tg_tensor *logits, const tg_tensor *targets, int32_t ignore_index, int64_t rows,
                           unsigned blocks, double *partials)
{
    const int64_t n = class_count(logits);
    const tg_cuda_view lv = tg_view_of(logits), tv = tg_view_of(targets);
    if (n <= kGroupClasses)
        ce_fwd_groups_kernel<Acc><<<blocks, kGroupThreads>>>(lv, tv, ignore_index, rows, group_lanes(n), partials);
    else
        ce_fwd_rows_kernel<Acc><<<blocks, row_threads(n)>>>(lv, tv, ignore_index, rows, partials);
}

extern "C" tg_status tg_cuda_cross_entropy_fwd(const tg_tensor *logits, const tg_tensor *targets, int32_t ignore_index,
                                               tg_tensor *loss, tg_tensor *count)
{
    int64_t rows = row_count(logits);
    if (rows == 0) { // no row: the loss is 0
        tg_status status = tg_cuda_fill(loss, 0.0);
        return status == TG_OK ? tg_cuda_fill(count, 0.0) : status;
    }
    const unsigned blocks = forward_blocks(logits, rows);
    const size_t bytes = sizeof(double) * 2 * blocks; // at most 2^21 rows' worth: no overflow
    double *partials = NULL;
    tg_status status = tg_device_alloc(TG_DEVICE_CUDA, bytes, (void **)&partials);
    if (status != TG_OK) return status;
    if (logits->dtype == TG_F64)
        launch_forward<double>(logits, targets, ignore_index, rows, blocks, partials);
    else
        launch_forward<float>(logits, targets, ignore_index, rows, blocks, partials);
    status = tg_cuda_check_launch("tg_cross_entropy");
    if (status == TG_OK) {
        ce_mean_kernel<<<1, 1024>>>(partials, blocks, tg_view_of(loss), (double *)tg_bytes(count));
        status = tg_cuda_check_launch("tg_cross_entropy");
    }
    tg_device_free(TG_DEVICE_CUDA, partials, bytes); // queued work finishes first: one stream
    return status;
}

template <typename Acc>
static void launch_backward(const tg_tensor *logits, const tg_tensor *targets, int32_t ignore_index, int64_t rows,
                            const tg_tensor *count, const tg_tensor *dloss, tg_tensor *dlogits)
{
    const int64_t n = class_count(logits);
    const tg_cuda_view lv = tg_view_of(logits), tv = tg_view_of(targets), gv = tg_view_of(dloss),
                       dv = tg_view_of(dlogits);
    const double *cv = (const double *)tg_bytes(count);
    if (n <= kGroupClasses) {
        const int lanes = group_lanes(n);
        ce_bwd_groups_kernel<Acc>
            <<<group_blocks(rows, lanes), kGroupThreads>>>(lv, tv, ignore_index, rows, lanes, cv, gv, dv);
    } else {
        ce_bwd_rows_kernel<Acc><<<row_blocks(rows), row_threads(n)>>>(lv, tv, ignore_index, rows, cv, gv, dv);
    }
}

extern "C" tg_status tg_cuda_cross_entropy_bwd(const tg_tensor *logits, const tg_tensor *targets, int32_t ignore_index,
                                               const tg_tensor *count, const tg_tensor *dloss, tg_tensor *dlogits)
{
    int64_t rows = row_count(logits);
    if (rows == 0) return TG_OK;
    if (logits->dtype == TG_F64)
        launch_backward<double>(logits, targets, ignore_index, rows, count, dloss, dlogits);
    else
        launch_backward<float>(logits, targets, ignore_index, rows, count, dloss, dlogits);
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
