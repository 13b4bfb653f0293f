/* ops/softmax.c: softmax and log-softmax over the last axis.
 *
 * Forward, per row: y_j = exp(x_j − lse) or log y_j = x_j − lse, with
 * lse = m + log Σ_k exp(x_k − m) and m the row maximum (so no exp overflows).
 *
 * Backward, per row, from the output alone:
 *   softmax:     ∂y_j/∂x_k = y_j (δ_jk − y_k), so dx_k = Σ_j dy_j y_j (δ_jk − y_k)
 *                = y_k · (dy_k − Σ_j dy_j y_j);
 *   log_softmax: ∂(log y_j)/∂x_k = δ_jk − y_k, so dx_k = dy_k − softmax(x)_k · Σ_j dy_j,
 *                with softmax(x) = exp(out). */
#include "kernels/softmax.h"
#include "tapegrad/ops.h"

static const tg_softmax_fwd_kernel softmax_fwd[TG_DEVICE_COUNT] =
    TG_KERNELS(tg_cpu_softmax_fwd, TG_CUDA_KERNEL(tg_cuda_softmax_fwd));
static const tg_softmax_bwd_kernel softmax_bwd[TG_DEVICE_COUNT] =
    TG_KERNELS(tg_cpu_softmax_bwd, TG_CUDA_KERNEL(tg_cuda_softmax_bwd));

typedef struct {
    bool log;
} softmax_ctx;

static tg_status softmax_backward(tg_node *node, tg_tensor *const *dy, tg_tensor **dx)
{
    const softmax_ctx *ctx = node->ctx;
    const tg_tensor *y = node->outputs[0];
    dx[0] = tg_node_grad_buffer(node, 0);
    if (!dx[0]) return TG_ERR_NOMEM;
    return TG_DISPATCH(node->op, softmax_bwd, y->device, y, dy[0], ctx->log, dx[0]);
}

static tg_tensor *softmax(tg_tape *tape, const char *name, bool log, tg_tensor *x)
{
    if (!tg_check_tape(name, tape) || !tg_check_float(name, "x", x) || !tg_check_device_usable(name, "x", x))
        return NULL;
    tg_tape_mark mark = tg_tape_get_mark(tape);
    tg_tensor *y = tg_empty_like(tape, x);
    if (!y || TG_DISPATCH(name, softmax_fwd, x->device, x, log, y) != TG_OK) return tg_op_fail(tape, mark);
    softmax_ctx ctx = {log};
    tg_op_record record = {name, softmax_backward, &x, 1, &y, 1, &ctx, sizeof ctx};
    if (tg_record(tape, &record) != TG_OK) return tg_op_fail(tape, mark);
    return y;
}

tg_tensor *tg_softmax(tg_tape *tape, tg_tensor *x) { return softmax(tape, "tg_softmax", false, x); }
tg_tensor *tg_log_softmax(tg_tape *tape, tg_tensor *x) { return softmax(tape, "tg_log_softmax", true, x); }
