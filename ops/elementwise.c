/* ops/elementwise.c: add, sub, mul, div with broadcasting; scale, neg and the
 * activations exp, log, tanh, sigmoid, silu, softplus, relu.
 *
 * Binary backward (broadcasting undone by summing over the stretched dimensions):
 *   add: da = dy,      db = dy          sub: da = dy,      db = −dy
 *   mul: da = dy·b,    db = dy·a        div: da = dy / b,  db = −dy·a / b²
 * Unary backward: dx = dy · f'(x), with f' in kernels/cpu/elementwise.c. */
#include "kernels/elementwise.h"
#include "tapegrad/ops.h"

static const tg_unary_fwd_kernel unary_fwd[TG_DEVICE_COUNT] =
    TG_KERNELS(tg_cpu_unary_fwd, TG_CUDA_KERNEL(tg_cuda_unary_fwd));
static const tg_unary_bwd_kernel unary_bwd[TG_DEVICE_COUNT] =
    TG_KERNELS(tg_cpu_unary_bwd, TG_CUDA_KERNEL(tg_cuda_unary_bwd));
static const tg_binary_fwd_kernel binary_fwd[TG_DEVICE_COUNT] =
    TG_KERNELS(tg_cpu_binary_fwd, TG_CUDA_KERNEL(tg_cuda_binary_fwd));

/* ---- unary ----------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    tg_unary_op op;
    double param;
} unary_ctx;

static tg_status unary_backward(tg_node *node, tg_tensor *const *dy, tg_tensor **dx)
{
    const unary_ctx *ctx = node->ctx;
    tg_tensor *x = node->inputs[0], *y = node->outputs[0];
    dx[0] = tg_node_grad_buffer(node, 0);
    if (!dx[0]) return TG_ERR_NOMEM;
    return TG_DISPATCH(ctx->name, unary_bwd, x->device, ctx->op, ctx->param, x, y, dy[0], dx[0]);
}

static tg_tensor *unary(tg_tape *tape, const char *name, tg_unary_op op, double param, tg_tensor *x)
{
    if (!tg_check_tape(name, tape) || !tg_check_float(name, "x", x) || !tg_check_device_usable(name, "x", x))
        return NULL;
    tg_tape_mark mark = tg_tape_get_mark(tape);
    tg_tensor *y = tg_empty_like(tape, x);
    if (!y || TG_DISPATCH(name, unary_fwd, x->device, op, param, x, y) != TG_OK) return tg_op_fail(tape, mark);
    unary_ctx ctx = {name, op, param};
    tg_op_record record = {name, unary_backward, &x, 1, &y, 1, &ctx, sizeof ctx};
    if (tg_record(tape, &record) != TG_OK) return tg_op_fail(tape, mark);
    return y;
}

tg_tensor *tg_scale(tg_tape *tape, tg_tensor *x, double factor)
{
    return unary(tape, "tg_scale", TG_UNARY_SCALE, factor, x);
}
tg_tensor *tg_neg(tg_tape *tape, tg_tensor *x) { return unary(tape, "tg_neg", TG_UNARY_NEG, 0, x); }
tg_tensor *tg_exp(tg_tape *tape, tg_tensor *x) { return unary(tape, "tg_exp", TG_UNARY_EXP, 0, x); }
tg_tensor *tg_log(tg_tape *tape, tg_tensor *x) { return unary(tape, "tg_log", TG_UNARY_LOG, 0, x); }
tg_tensor *tg_tanh(tg_tape *tape, tg_tensor *x) { return unary(tape, "tg_tanh", TG_UNARY_TANH, 0, x); }
tg_tensor *tg_sigmoid(tg_tape *tape, tg_tensor *x) { return unary(tape, "tg_sigmoid", TG_UNARY_SIGMOID, 0, x); }
tg_tensor *tg_silu(tg_tape *tape, tg_tensor *x) { return unary(tape, "tg_silu", TG_UNARY_SILU, 0, x); }
tg_tensor *tg_softplus(tg_tape *tape, tg_tensor *x) { return unary(tape, "tg_softplus", TG_UNARY_SOFTPLUS, 0, x); }
tg_tensor *tg_relu(tg_tape *tape, tg_tensor *x) { return unary(tape, "tg_relu", TG_UNARY_RELU, 0, x); }

/* ---- binary ------------------------------------------------------------------------------ */

typedef struct {
    const char *name;
    tg_binary_op op;
} binary_ctx;

/* Undo broadcasting: sum g down to input's shape (g itself when nothing was stretched). */
static tg_tensor *unbroadcast(tg_tape *tape, tg_tensor *g, const tg_tensor *input)
{
    if (!g || tg_same_shape(g, input)) return g;
    return tg_reduce_to_shape(tape, g, input->ndim, input->shape);
}

static tg_status binary_backward(tg_node *node, tg_tensor *const *dy, tg_tensor **dx)
{
    const binary_ctx *ctx = node->ctx;
    tg_tape *tape = node->tape;
    tg_tensor *a = node->inputs[0], *b = node->inputs[1], *g = dy[0];
    tg_tensor *da = NULL, *db = NULL;
    switch (ctx->op) {
    case TG_BINARY_ADD:
        da = g;
        db = g;
        break;
    case TG_BINARY_SUB:
        da = g;
        db = tg_neg(tape, g);
        break;
    case TG_BINARY_MUL:
        if (tg_node_needs_grad(node, 0)) da = tg_mul(tape, g, b);
        if (tg_node_needs_grad(node, 1)) db = tg_mul(tape, g, a);
        break;
    case TG_BINARY_DIV:
        if (tg_node_needs_grad(node, 0)) da = tg_div(tape, g, b);
        if (tg_node_needs_grad(node, 1)) db = tg_neg(tape, tg_div(tape, tg_mul(tape, g, node->outputs[0]), b));
        break;
    case TG_BINARY_COUNT: return tg_set_error(TG_ERR_INVALID, "binary backward: op %d does not exist", (int)ctx->op);
    }
    if (tg_node_needs_grad(node, 0) && !(dx[0] = unbroadcast(tape, da, a))) return TG_ERR_NOMEM;
    if (tg_node_needs_grad(node, 1) && !(dx[1] = unbroadcast(tape, db, b))) return TG_ERR_NOMEM;
    return TG_OK;
}

static tg_tensor *binary(tg_tape *tape, const char *name, tg_binary_op op, tg_tensor *a, tg_tensor *b)
{
    if (!tg_check_tape(name, tape) || !tg_check_float(name, "a", a) || !tg_check_float(name, "b", b) ||
        !tg_check_same_kind(name, "a", a, "b", b) || !tg_check_device_usable(name, "a", a))
        return NULL;
    int ndim;
    int64_t shape[TG_MAX_DIMS];
    if (!tg_broadcast_shape(a->ndim, a->shape, b->ndim, b->shape, &ndim, shape)) {
        const char *names[2] = {"a", "b"};
        const tg_tensor *tensors[2] = {a, b};
        tg_error_tensors(TG_ERR_INVALID, 2, names, tensors, "%s: shapes do not broadcast", name);
        return NULL;
    }
    tg_tape_mark mark = tg_tape_get_mark(tape);
    tg_tensor *out = tg_empty(tape, a->dtype, a->device, ndim, shape);
    if (!out || TG_DISPATCH(name, binary_fwd, a->device, op, a, b, out) != TG_OK) return tg_op_fail(tape, mark);
    binary_ctx ctx = {name, op};
    tg_tensor *inputs[2] = {a, b};
    tg_op_record record = {name, binary_backward, inputs, 2, &out, 1, &ctx, sizeof ctx};
    if (tg_record(tape, &record) != TG_OK) return tg_op_fail(tape, mark);
    return out;
}

tg_tensor *tg_add(tg_tape *tape, tg_tensor *a, tg_tensor *b) { return binary(tape, "tg_add", TG_BINARY_ADD, a, b); }
tg_tensor *tg_sub(tg_tape *tape, tg_tensor *a, tg_tensor *b) { return binary(tape, "tg_sub", TG_BINARY_SUB, a, b); }
tg_tensor *tg_mul(tg_tape *tape, tg_tensor *a, tg_tensor *b) { return binary(tape, "tg_mul", TG_BINARY_MUL, a, b); }
tg_tensor *tg_div(tg_tape *tape, tg_tensor *a, tg_tensor *b) { return binary(tape, "tg_div", TG_BINARY_DIV, a, b); }
