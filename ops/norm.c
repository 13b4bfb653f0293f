/* ops/norm.c: RMS normalisation over the last axis.
 *
 * Forward, per row of D elements: m = mean(x²), r = (m + eps)^(−1/2), y_j = x_j · r · w_j.
 *
 * Backward. r depends on every x_k of its row: ∂r/∂x_k = −½ (m + eps)^(−3/2) · 2x_k / D
 * = −r³ x_k / D. With g = dy·w (the gradient reaching x·r),
 *   dx_k = Σ_j g_j ∂(x_j r)/∂x_k = g_k r + Σ_j g_j x_j (−r³ x_k / D)
 *        = r · (g_k − x_k · r² · mean(g·x)),
 *   dw_j = Σ_rows dy_j · x_j · r   (summed over rows in row order: deterministic).
 *
 * r is recomputed in the backward from x instead of being saved: it costs one more pass
 * over a row the backward reads anyway, keeps nothing extra on the tape between forward
 * and backward, and gives exactly the forward's r in double (a saved r would be rounded
 * to x's dtype, which for bf16 is 3 significant digits).
 *
 * tg_add_rmsnorm fuses the residual add before a norm: h = x + residual (rounded to the
 * dtype, as tg_add would) and y = rmsnorm(h), in one pass that writes both. h's gradient
 * is the norm's dx plus whatever reaches h directly, added in the kernel before rounding;
 * x and residual both take it whole. */
#include "kernels/norm.h"
#include "tapegrad/ops.h"

#include <math.h>

static const tg_rmsnorm_fwd_kernel rmsnorm_fwd[TG_DEVICE_COUNT] =
    TG_KERNELS(tg_cpu_rmsnorm_fwd, TG_CUDA_KERNEL(tg_cuda_rmsnorm_fwd));
static const tg_rmsnorm_bwd_kernel rmsnorm_bwd[TG_DEVICE_COUNT] =
    TG_KERNELS(tg_cpu_rmsnorm_bwd, TG_CUDA_KERNEL(tg_cuda_rmsnorm_bwd));

typedef struct {
    double eps;
} rmsnorm_ctx;

static tg_status rmsnorm_backward(tg_node *node, tg_tensor *const *dy, tg_tensor **dx)
{
    const rmsnorm_ctx *ctx = node->ctx;
    tg_tensor *x = node->inputs[0], *weight = node->inputs[1];
    if (tg_node_needs_grad(node, 0) && !(dx[0] = tg_node_grad_buffer(node, 0))) return TG_ERR_NOMEM;
    if (tg_node_needs_grad(node, 1) && !(dx[1] = tg_empty_like(node->tape, weight))) return TG_ERR_NOMEM;
    return TG_DISPATCH(node->op, rmsnorm_bwd, x->device, x, weight, ctx->eps, dy[0], NULL, dx[0], dx[1]);
}

static bool check_rmsnorm(const char *op, tg_tape *tape, tg_tensor *x, tg_tensor *weight, double eps)
{
    if (!tg_check_tape(op, tape) || !tg_check_float(op, "x", x) || !tg_check_float(op, "weight", weight) ||
        !tg_check_same_kind(op, "x", x, "weight", weight) || !tg_check_device_usable(op, "x", x))
        return false;
    const char *names[2] = {"x", "weight"};
    const tg_tensor *tensors[2] = {x, weight};
    int64_t d = x->shape[x->ndim - 1];
    if (weight->ndim != 1 || weight->shape[0] != d) {
        tg_error_tensors(TG_ERR_INVALID, 2, names, tensors,
                         "%s: weight must have shape [%lld] (the last dimension of x)", op, (long long)d);
        return false;
    }
    if (d == 0) {
        tg_error_tensors(TG_ERR_INVALID, 2, names, tensors,
                         "%s: the last dimension of x is 0 (the mean of zero elements is undefined)", op);
        return false;
    }
    if (!(eps > 0) || !isfinite(eps)) {
        tg_error_tensors(TG_ERR_INVALID, 2, names, tensors, "%s: eps must be > 0 and finite, not %g", op, eps);
        return false;
    }
    return true;
}

tg_tensor *tg_rmsnorm(tg_tape *tape, tg_tensor *x, tg_tensor *weight, double eps)
{
    const char *name = "tg_rmsnorm";
    if (!check_rmsnorm(name, tape, x, weight, eps)) return NULL;
    tg_tape_mark mark = tg_tape_get_mark(tape);
    tg_tensor *y = tg_empty_like(tape, x);
    if (!y || TG_DISPATCH(name, rmsnorm_fwd, x->device, x, NULL, weight, eps, y, NULL) != TG_OK)
        return tg_op_fail(tape, mark);
    rmsnorm_ctx ctx = {eps};
    tg_tensor *inputs[2] = {x, weight};
    tg_op_record record = {name, rmsnorm_backward, inputs, 2, &y, 1, &ctx, sizeof ctx};
    if (tg_record(tape, &record) != TG_OK) return tg_op_fail(tape, mark);
    return y;
}

/* Inputs: residual, x, weight; outputs: y, the sum h. dy[0] or dy[1] may be NULL (that
 * output unused); with only h's gradient, it passes straight through. */
static tg_status add_rmsnorm_backward(tg_node *node, tg_tensor *const *dy, tg_tensor **dx)
{
    const rmsnorm_ctx *ctx = node->ctx;
    tg_tensor *sum = node->outputs[1], *weight = node->inputs[2];
    const bool want_sum = tg_node_needs_grad(node, 0) || tg_node_needs_grad(node, 1);
    tg_tensor *dsum = NULL;
    if (!dy[0]) {
        dsum = dy[1];
    } else {
        /* the sum's gradient, in place as the residual's (or x's) when it may be */
        int first = tg_node_needs_grad(node, 0) ? 0 : 1;
        if (want_sum && !(dsum = tg_node_grad_buffer(node, first))) return TG_ERR_NOMEM;
        if (tg_node_needs_grad(node, 2) && !(dx[2] = tg_empty_like(node->tape, weight))) return TG_ERR_NOMEM;
        tg_status status =
            TG_DISPATCH(node->op, rmsnorm_bwd, sum->device, sum, weight, ctx->eps, dy[0], dy[1], dsum, dx[2]);
        if (status != TG_OK) return status;
    }
    dx[0] = dx[1] = dsum;
    return TG_OK;
}

tg_tensor *tg_add_rmsnorm(tg_tape *tape, tg_tensor *residual, tg_tensor *x, tg_tensor *weight, double eps,
                          tg_tensor **sum)
{
    const char *name = "tg_add_rmsnorm";
    if (!sum) {
        tg_set_error(TG_ERR_INVALID, "%s: sum must not be NULL (it receives residual + x)", name);
        return NULL;
    }
    *sum = NULL;
    if (!check_rmsnorm(name, tape, x, weight, eps) || !tg_check_float(name, "residual", residual) ||
        !tg_check_same_kind(name, "residual", residual, "x", x))
        return NULL;
    if (!tg_same_shape(residual, x)) {
        const char *names[2] = {"residual", "x"};
        const tg_tensor *tensors[2] = {residual, x};
        tg_error_tensors(TG_ERR_INVALID, 2, names, tensors, "%s: residual and x must have the same shape", name);
        return NULL;
    }
    tg_tape_mark mark = tg_tape_get_mark(tape);
    tg_tensor *h = tg_empty_like(tape, x), *y = h ? tg_empty_like(tape, x) : NULL;
    if (!y || TG_DISPATCH(name, rmsnorm_fwd, x->device, x, residual, weight, eps, y, h) != TG_OK)
        return tg_op_fail(tape, mark);
    rmsnorm_ctx ctx = {eps};
    tg_tensor *inputs[3] = {residual, x, weight}, *outputs[2] = {y, h};
    tg_op_record record = {name, add_rmsnorm_backward, inputs, 3, outputs, 2, &ctx, sizeof ctx};
    if (tg_record(tape, &record) != TG_OK) return tg_op_fail(tape, mark);
    *sum = h;
    return y;
}
