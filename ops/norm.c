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
 * to x's dtype, which for bf16 is 3 significant digits). */
#include "kernels/norm.h"

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
    if (tg_node_needs_grad(node, 0) && !(dx[0] = tg_empty_like(node->tape, x))) return TG_ERR_NOMEM;
    if (tg_node_needs_grad(node, 1) && !(dx[1] = tg_empty_like(node->tape, weight))) return TG_ERR_NOMEM;
    return TG_DISPATCH(node->op, rmsnorm_bwd, x->device, x, weight, ctx->eps, dy[0], dx[0], dx[1]);
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
    if (!y || TG_DISPATCH(name, rmsnorm_fwd, x->device, x, weight, eps, y) != TG_OK) return tg_op_fail(tape, mark);
    rmsnorm_ctx ctx = {eps};
    tg_tensor *inputs[2] = {x, weight};
    tg_op_record record = {name, rmsnorm_backward, inputs, 2, &y, 1, &ctx, sizeof ctx};
    if (tg_record(tape, &record) != TG_OK) return tg_op_fail(tape, mark);
    return y;
}
