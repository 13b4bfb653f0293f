/* ops/reduce.c: sum and mean over one axis or over all elements.
 * Backward: every input element contributed once (with weight 1/n for mean), so
 * dx = dy broadcast back over the reduced axis, times that weight. */
#include "kernels/reduce.h"
#include "tapegrad/ops.h"

static const tg_sum_axis_kernel sum_fwd[TG_DEVICE_COUNT] =
    TG_KERNELS(tg_cpu_sum_axis, TG_CUDA_KERNEL(tg_cuda_sum_axis));
static const tg_sum_axis_bwd_kernel sum_bwd[TG_DEVICE_COUNT] =
    TG_KERNELS(tg_cpu_sum_axis_bwd, TG_CUDA_KERNEL(tg_cuda_sum_axis_bwd));

typedef struct {
    const char *name;
    int axis; /* TG_AXIS_ALL for all */
    double scale;
} sum_ctx;

static tg_status sum_backward(tg_node *node, tg_tensor *const *dy, tg_tensor **dx)
{
    const sum_ctx *ctx = node->ctx;
    const tg_tensor *x = node->inputs[0];
    dx[0] = tg_node_grad_buffer(node, 0);
    if (!dx[0]) return TG_ERR_NOMEM;
    /* With keepdim, dy still has the reduced axis (of size 1): view it without. */
    const tg_tensor *g = dy[0];
    if (ctx->axis != TG_AXIS_ALL && g->ndim == x->ndim && x->ndim > 1) {
        int64_t shape[TG_MAX_DIMS], strides[TG_MAX_DIMS];
        for (int i = 0, k = 0; i < g->ndim; i++)
            if (i != ctx->axis) {
                shape[k] = g->shape[i];
                strides[k++] = g->strides[i];
            }
        g = tg_view(node->tape, g, g->ndim - 1, shape, strides, g->offset);
        if (!g) return TG_ERR_NOMEM;
    }
    return TG_DISPATCH(ctx->name, sum_bwd, x->device, g, ctx->axis, ctx->scale, dx[0]);
}

static tg_tensor *reduce(tg_tape *tape, const char *name, tg_tensor *x, int axis, bool keepdim, bool all, bool mean)
{
    if (!tg_check_tape(name, tape) || !tg_check_float(name, "x", x) || !tg_check_device_usable(name, "x", x))
        return NULL;
    if (!all && !tg_check_axis(name, x, &axis)) return NULL;
    int64_t count = all ? tg_numel(x) : x->shape[axis];
    if (mean && count == 0) {
        const char *names[1] = {"x"};
        const tg_tensor *tensors[1] = {x};
        tg_error_tensors(TG_ERR_INVALID, 1, names, tensors, "%s: the mean of zero elements is undefined", name);
        return NULL;
    }
    /* Output shape: x without the axis (or with a 1 there); (1) when nothing is left. */
    int64_t shape[TG_MAX_DIMS] = {1};
    int ndim = 0;
    for (int i = 0; !all && i < x->ndim; i++) {
        if (i != axis)
            shape[ndim++] = x->shape[i];
        else if (keepdim)
            shape[ndim++] = 1;
    }
    if (ndim == 0) ndim = 1, shape[0] = 1;
    tg_tape_mark mark = tg_tape_get_mark(tape);
    tg_tensor *out = tg_empty(tape, x->dtype, x->device, ndim, shape);
    sum_ctx ctx = {name, all ? TG_AXIS_ALL : axis, mean ? 1.0 / (double)count : 1.0};
    if (!out || TG_DISPATCH(name, sum_fwd, x->device, x, ctx.axis, ctx.scale, out) != TG_OK)
        return tg_op_fail(tape, mark);
    tg_op_record record = {name, sum_backward, &x, 1, &out, 1, &ctx, sizeof ctx};
    if (tg_record(tape, &record) != TG_OK) return tg_op_fail(tape, mark);
    return out;
}

tg_tensor *tg_sum(tg_tape *tape, tg_tensor *x, int axis, bool keepdim)
{
    return reduce(tape, "tg_sum", x, axis, keepdim, false, false);
}
tg_tensor *tg_mean(tg_tape *tape, tg_tensor *x, int axis, bool keepdim)
{
    return reduce(tape, "tg_mean", x, axis, keepdim, false, true);
}
tg_tensor *tg_sum_all(tg_tape *tape, tg_tensor *x) { return reduce(tape, "tg_sum_all", x, 0, false, true, false); }
tg_tensor *tg_mean_all(tg_tape *tape, tg_tensor *x) { return reduce(tape, "tg_mean_all", x, 0, false, true, true); }
