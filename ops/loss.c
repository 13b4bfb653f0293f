/* ops/loss.c: cross-entropy over the last axis, fused with its log-softmax.
 *
 * Forward: with n the number of rows whose target t is not ignore_index,
 *   loss = (1/n) Σ_rows (lse(x) − x_t),  lse(x) = m + log Σ_j exp(x_j − m), m = max_j x_j,
 * and loss = 0 when n = 0.
 * Backward: ∂lse/∂x_j = softmax(x)_j and ∂x_t/∂x_j = δ_jt, so on a counted row
 *   dx_j = dy · (softmax(x)_j − δ_jt) / n,
 * and 0 on an ignored row. The backward recomputes the softmax from the logits, so the
 * op saves nothing larger than two numbers: ignore_index, and n in a one-element tensor
 * the forward kernel fills (on CUDA it stays on the device, so no step waits for it). */
#include "kernels/loss.h"
#include "tapegrad/ops.h"

static const tg_cross_entropy_check_kernel ce_check[TG_DEVICE_COUNT] =
    TG_KERNELS(tg_cpu_cross_entropy_check, TG_CUDA_KERNEL(tg_cuda_cross_entropy_check));
static const tg_cross_entropy_fwd_kernel ce_fwd[TG_DEVICE_COUNT] =
    TG_KERNELS(tg_cpu_cross_entropy_fwd, TG_CUDA_KERNEL(tg_cuda_cross_entropy_fwd));
static const tg_cross_entropy_bwd_kernel ce_bwd[TG_DEVICE_COUNT] =
    TG_KERNELS(tg_cpu_cross_entropy_bwd, TG_CUDA_KERNEL(tg_cuda_cross_entropy_bwd));
static const tg_count_correct_kernel count_correct[TG_DEVICE_COUNT] =
    TG_KERNELS(tg_cpu_count_correct, TG_CUDA_KERNEL(tg_cuda_count_correct));

typedef struct {
    int32_t ignore_index;
    tg_tensor *count; /* (1) f64: the rows counted */
} cross_entropy_ctx;

static tg_status cross_entropy_backward(tg_node *node, tg_tensor *const *dy, tg_tensor **dx)
{
    const cross_entropy_ctx *ctx = node->ctx;
    const tg_tensor *logits = node->inputs[0], *targets = node->inputs[1];
    dx[0] = tg_node_grad_buffer(node, 0);
    if (!dx[0]) return TG_ERR_NOMEM;
    return TG_DISPATCH(node->op, ce_bwd, logits->device, logits, targets, ctx->ignore_index, ctx->count, dy[0], dx[0]);
}

/* targets must have logits' leading shape; 1-D logits (one row) take targets of shape (1). */
static bool targets_fit(const tg_tensor *logits, const tg_tensor *targets)
{
    if (logits->ndim == 1) return targets->ndim == 1 && targets->shape[0] == 1;
    if (targets->ndim != logits->ndim - 1) return false;
    for (int i = 0; i < targets->ndim; i++)
        if (targets->shape[i] != logits->shape[i]) return false;
    return true;
}

static bool check_cross_entropy(const char *op, tg_tape *tape, tg_tensor *logits, tg_tensor *targets)
{
    if (!tg_check_tape(op, tape) || !tg_check_float(op, "logits", logits) || !tg_check_tensor(op, "targets", targets) ||
        !tg_check_device_usable(op, "logits", logits))
        return false;
    const char *names[2] = {"logits", "targets"};
    const tg_tensor *tensors[2] = {logits, targets};
    if (targets->dtype != TG_I32) {
        tg_error_tensors(TG_ERR_DTYPE, 2, names, tensors, "%s: targets must be i32, not %s", op,
                         tg_dtype_name(targets->dtype));
        return false;
    }
    if (targets->device != logits->device) {
        tg_error_tensors(TG_ERR_DEVICE, 2, names, tensors, "%s: logits and targets are on different devices", op);
        return false;
    }
    if (!targets_fit(logits, targets)) {
        const int64_t one_row[1] = {1};
        char shape[128];
        if (logits->ndim > 1)
            tg_shape_str(logits->ndim - 1, logits->shape, shape, sizeof shape);
        else
            tg_shape_str(1, one_row, shape, sizeof shape);
        tg_error_tensors(TG_ERR_INVALID, 2, names, tensors, "%s: targets must have logits' leading shape %s", op,
                         shape);
        return false;
    }
    if (logits->shape[logits->ndim - 1] == 0) {
        tg_error_tensors(TG_ERR_INVALID, 2, names, tensors, "%s: logits have no classes (last dimension V = 0)", op);
        return false;
    }
    return true;
}

/* Scans the targets before anything is allocated. Fails naming the first target outside
 * [0, V) (during a CUDA capture, the device records it instead: tapegrad/graph.h). */
static bool check_targets(const char *op, const tg_tensor *logits, const tg_tensor *targets, int32_t ignore_index)
{
    int64_t classes = logits->shape[logits->ndim - 1], bad_index = -1, n_valid = 0;
    int32_t bad_value = 0;
    if (TG_DISPATCH(op, ce_check, targets->device, targets, ignore_index, classes, &n_valid, &bad_index, &bad_value) !=
        TG_OK)
        return false;
    if (bad_index < 0) return true;
    int64_t position[TG_MAX_DIMS]; /* the multi-index of the flat row-major bad_index */
    for (int i = targets->ndim - 1; i >= 0; i--) {
        position[i] = bad_index % targets->shape[i];
        bad_index /= targets->shape[i];
    }
    char where[128];
    const char *names[2] = {"logits", "targets"};
    const tg_tensor *tensors[2] = {logits, targets};
    tg_error_tensors(TG_ERR_INVALID, 2, names, tensors,
                     "%s: target %d at position %s is outside [0, V) with V = %lld (and is not ignore_index %d)", op,
                     (int)bad_value, tg_shape_str(targets->ndim, position, where, sizeof where), (long long)classes,
                     (int)ignore_index);
    return false;
}

tg_tensor *tg_cross_entropy(tg_tape *tape, tg_tensor *logits, tg_tensor *targets, int32_t ignore_index)
{
    const char *name = "tg_cross_entropy";
    if (!check_cross_entropy(name, tape, logits, targets) || !check_targets(name, logits, targets, ignore_index))
        return NULL;
    tg_tape_mark mark = tg_tape_get_mark(tape);
    tg_tensor *loss = tg_empty(tape, logits->dtype, logits->device, 1, (int64_t[]){1});
    tg_tensor *count = loss ? tg_empty(tape, TG_F64, logits->device, 1, (int64_t[]){1}) : NULL;
    if (!count || TG_DISPATCH(name, ce_fwd, logits->device, logits, targets, ignore_index, loss, count) != TG_OK)
        return tg_op_fail(tape, mark);
    cross_entropy_ctx ctx = {ignore_index, count};
    tg_tensor *inputs[2] = {logits, targets};
    tg_op_record record = {name, cross_entropy_backward, inputs, 2, &loss, 1, &ctx, sizeof ctx};
    if (tg_record(tape, &record) != TG_OK) return tg_op_fail(tape, mark);
    return loss;
}

tg_tensor *tg_count_correct(tg_tape *tape, tg_tensor *logits, tg_tensor *targets, int32_t ignore_index)
{
    const char *name = "tg_count_correct";
    if (!check_cross_entropy(name, tape, logits, targets)) return NULL;
    tg_tape_mark mark = tg_tape_get_mark(tape);
    tg_tensor *counts = tg_zeros(tape, TG_F64, logits->device, 1, (int64_t[]){2});
    if (!counts || TG_DISPATCH(name, count_correct, logits->device, logits, targets, ignore_index, counts) != TG_OK)
        return tg_op_fail(tape, mark);
    return counts;
}
