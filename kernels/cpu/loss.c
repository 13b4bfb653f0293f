/* kernels/cpu/loss.c: fused cross-entropy on strided CPU tensors, in double, for f64 logits
 * and any layout; dense f32, bf16 and f16 logits go to kernels/cpu/loss_float.c.
 * Rows are summed in row order, so the loss does not depend on anything but the data. */
#include "kernels/loss.h"
#include "kernels/softmax.h"

#include <math.h>

tg_status tg_cpu_cross_entropy_check(const tg_tensor *targets, int32_t ignore_index, int64_t classes, int64_t *n_valid,
                                     int64_t *bad_index, int32_t *bad_value)
{
    *n_valid = 0;
    *bad_index = -1;
    tg_iter it;
    tg_iter_init(&it, targets->ndim, targets->shape, 1, (const int64_t *[]){targets->strides});
    if (it.empty) return TG_OK;
    const char *tb = tg_bytes(targets);
    int64_t flat = 0;
    do {
        for (int64_t j = 0; j < it.row_length; j++, flat++) {
            int32_t t = ((const int32_t *)tb)[it.offset[0] + j * it.row_stride[0]];
            if (t == ignore_index) continue;
            if (t < 0 || t >= classes) {
                *bad_index = flat;
                *bad_value = t;
                return TG_OK;
            }
            (*n_valid)++;
        }
    } while (tg_iter_next_row(&it));
    return TG_OK;
}

/* The targets' strides in logits' index space: one target per row, so 0 along the last
 * dimension (and 0 everywhere for 1-D logits, whose single target is element 0). */
static void target_strides(const tg_tensor *logits, const tg_tensor *targets, int64_t *strides)
{
    for (int i = 0; i < logits->ndim - 1; i++) strides[i] = targets->strides[i];
    strides[logits->ndim - 1] = 0;
}

static int32_t row_target(const tg_tensor *targets, const tg_iter *it)
{
    return ((const int32_t *)tg_bytes(targets))[it->offset[1]];
}

tg_status tg_cpu_cross_entropy_fwd(const tg_tensor *logits, const tg_tensor *targets, int32_t ignore_index,
                                   tg_tensor *loss, tg_tensor *count)
{
    if (tg_cpu_cross_entropy_float_applies(logits, targets))
        return tg_cpu_cross_entropy_fwd_float(logits, targets, ignore_index, loss, count);
    int64_t ts[TG_MAX_DIMS];
    target_strides(logits, targets, ts);
    tg_iter it;
    tg_iter_init(&it, logits->ndim, logits->shape, 2, (const int64_t *[]){logits->strides, ts});
    double sum = 0;
    int64_t n_valid = 0;
    const char *lb = tg_bytes(logits);
    if (!it.empty) {
        do {
            int32_t t = row_target(targets, &it);
            if (t == ignore_index) continue;
            double lse = tg_cpu_row_logsumexp(lb, logits->dtype, it.offset[0], it.row_stride[0], it.row_length);
            sum += lse - tg_load(lb, logits->dtype, it.offset[0] + t * it.row_stride[0]);
            n_valid++;
        } while (tg_iter_next_row(&it));
    }
    tg_store(tg_bytes(loss), loss->dtype, 0, n_valid > 0 ? sum / (double)n_valid : 0.0);
    tg_store(tg_bytes(count), count->dtype, 0, (double)n_valid);
    return TG_OK;
}

tg_status tg_cpu_cross_entropy_bwd(const tg_tensor *logits, const tg_tensor *targets, int32_t ignore_index,
                                   const tg_tensor *count, const tg_tensor *dloss, tg_tensor *dlogits)
{
    const double n_valid = tg_load(tg_bytes(count), count->dtype, 0);
    int64_t ts[TG_MAX_DIMS];
    target_strides(logits, targets, ts);
    tg_iter it;
    tg_iter_init(&it, logits->ndim, logits->shape, 3, (const int64_t *[]){logits->strides, ts, dlogits->strides});
    if (it.empty) return TG_OK;
    double scale = n_valid > 0 ? tg_load(tg_bytes(dloss), dloss->dtype, 0) / n_valid : 0.0;
    if (tg_cpu_cross_entropy_float_applies(logits, targets) && tg_is_contiguous(dlogits))
        return tg_cpu_cross_entropy_bwd_float(logits, targets, ignore_index, scale, dlogits);
    const char *lb = tg_bytes(logits);
    char *db = tg_bytes(dlogits);
    do {
        int32_t t = row_target(targets, &it);
        bool ignored = t == ignore_index;
        double lse =
            ignored ? 0.0 : tg_cpu_row_logsumexp(lb, logits->dtype, it.offset[0], it.row_stride[0], it.row_length);
        for (int64_t j = 0; j < it.row_length; j++) {
            double grad = 0.0;
            if (!ignored) {
                double p = exp(tg_load(lb, logits->dtype, it.offset[0] + j * it.row_stride[0]) - lse);
                grad = scale * (p - (j == t ? 1.0 : 0.0));
            }
            tg_store(db, dlogits->dtype, it.offset[2] + j * it.row_stride[2], grad);
        }
    } while (tg_iter_next_row(&it));
    return TG_OK;
}

/* The first index of the largest of n strided values; NaN never counts as the largest. */
static int64_t row_argmax(const char *base, tg_dtype dtype, int64_t offset, int64_t step, int64_t n)
{
    int64_t best = -1;
    double best_value = 0;
    for (int64_t j = 0; j < n; j++) {
        double v = tg_load(base, dtype, offset + j * step);
        if (v == v && (best < 0 || v > best_value)) best = j, best_value = v;
    }
    return best;
}

tg_status tg_cpu_count_correct(const tg_tensor *logits, const tg_tensor *targets, int32_t ignore_index,
                               tg_tensor *counts)
{
    int64_t ts[TG_MAX_DIMS];
    target_strides(logits, targets, ts);
    tg_iter it;
    tg_iter_init(&it, logits->ndim, logits->shape, 2, (const int64_t *[]){logits->strides, ts});
    double correct = 0, scored = 0;
    const char *lb = tg_bytes(logits);
    if (!it.empty) {
        do {
            int32_t t = row_target(targets, &it);
            if (t == ignore_index) continue;
            scored++;
            correct += row_argmax(lb, logits->dtype, it.offset[0], it.row_stride[0], it.row_length) == t;
        } while (tg_iter_next_row(&it));
    }
    char *cb = tg_bytes(counts);
    tg_store(cb, counts->dtype, 0, tg_load(cb, counts->dtype, 0) + correct);
    tg_store(cb, counts->dtype, counts->strides[0], tg_load(cb, counts->dtype, counts->strides[0]) + scored);
    return TG_OK;
}
