/* ops/conv1d.c: the depthwise causal convolution of Mamba-style models.
 *
 * Forward (xe = x with K−1 steps of history in front: initial states or zeros):
 *   z[b,c,t]   = bias[c] + Σ_k w[c,k]·xe[b,c,t+k],   out = act(z)
 *   final[b,c,j] = xe[b,c,L+j]  (the last K−1 steps, to carry into the next piece)
 * Backward, with g = dout·act'(z) (SiLU recomputed from x, never saved):
 *   dx[b,c,s]  = Σ_k w[c,k]·g[b,c,s+K−1−k]   the reversed, shifted sum (anti-causal)
 *   dw[c,k]    = Σ_{b,t} g[b,c,t]·xe[b,c,t+k]  a per-tap reduction over batch and time
 *   dbias[c]   = Σ_{b,t} g[b,c,t]
 *   dinitial   = the first K−1 entries of dxe; dfinal adds into the last K−1 entries of dxe.
 * docs/causal_conv1d.md derives these. */
#include "kernels/conv1d.h"
#include "tapegrad/ops.h"

#include <stdatomic.h>

static const tg_conv1d_fwd_kernel conv1d_fwd[TG_DEVICE_COUNT] =
    TG_KERNELS(tg_cpu_causal_conv1d_fwd, TG_CUDA_KERNEL(tg_cuda_causal_conv1d_fwd));
static const tg_conv1d_bwd_kernel conv1d_bwd[TG_DEVICE_COUNT] =
    TG_KERNELS(tg_cpu_causal_conv1d_bwd, TG_CUDA_KERNEL(tg_cuda_causal_conv1d_bwd));

static const char *const OP = "tg_causal_conv1d";

enum { IN_X, IN_WEIGHT, IN_BIAS, IN_INITIAL, N_INPUTS };

typedef struct {
    tg_activation activation;
} conv1d_ctx;

static tg_conv1d_args args_of(const tg_node *node)
{
    const conv1d_ctx *ctx = node->ctx;
    return (tg_conv1d_args){node->inputs[IN_X], node->inputs[IN_WEIGHT], node->inputs[IN_BIAS],
                            node->inputs[IN_INITIAL], ctx->activation};
}

/* A gradient buffer for input i, or NULL when input i needs none; laid out like the input
 * when same_layout (the kernels then take the layout they ran in). */
static tg_tensor *grad_for(tg_node *node, int i, bool same_layout, bool *failed)
{
    if (!tg_node_needs_grad(node, i)) return NULL;
    tg_tensor *t = same_layout && !tg_activation_grad_is_contiguous(node->inputs[i])
                       ? tg_empty_same_layout(node->tape, node->inputs[i])
                       : tg_node_grad_buffer(node, i);
    if (!t) *failed = true;
    return t;
}

static tg_status conv1d_backward(tg_node *node, tg_tensor *const *dy, tg_tensor **dx)
{
    bool failed = false;
    for (int i = 0; i < N_INPUTS; i++) dx[i] = grad_for(node, i, i == IN_X, &failed);
    if (failed) return TG_ERR_NOMEM;
    tg_conv1d_args args = args_of(node);
    const tg_tensor *dfinal = node->n_outputs > 1 ? dy[1] : NULL;
    return TG_DISPATCH(OP, conv1d_bwd, args.x->device, &args, dy[0], dfinal, dx[IN_X], dx[IN_WEIGHT], dx[IN_BIAS],
                       dx[IN_INITIAL]);
}

/* The optional inputs must be float, of x's dtype and device, and of the given shape. */
static bool check_optional(const char *name, const tg_tensor *t, const tg_tensor *x, int ndim, const int64_t *shape)
{
    if (!t) return true;
    if (!tg_check_float(OP, name, t) || !tg_check_same_kind(OP, "x", x, name, t)) return false;
    bool ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = t->shape[i] == shape[i];
    if (ok) return true;
    char want[96];
    const char *names[2] = {"x", name};
    const tg_tensor *tensors[2] = {x, t};
    tg_error_tensors(TG_ERR_INVALID, 2, names, tensors, "%s: %s must have shape %s", OP, name,
                     tg_shape_str(ndim, shape, want, sizeof want));
    return false;
}

static bool check_args(const tg_tape *tape, const tg_tensor *x, const tg_tensor *weight,
                       const tg_causal_conv1d_options *opt)
{
    if (!tg_check_tape(OP, tape) || !tg_check_float(OP, "x", x) || !tg_check_float(OP, "weight", weight) ||
        !tg_check_ndim(OP, "x", x, 3) || !tg_check_ndim(OP, "weight", weight, 2) ||
        !tg_check_same_kind(OP, "x", x, "weight", weight) || !tg_check_device_usable(OP, "x", x))
        return false;
    const char *names[2] = {"x", "weight"};
    const tg_tensor *tensors[2] = {x, weight};
    if (x->shape[0] < 1 || x->shape[1] < 1 || x->shape[2] < 1) {
        tg_error_tensors(TG_ERR_INVALID, 2, names, tensors, "%s: x must have B, C, L ≥ 1", OP);
        return false;
    }
    if (weight->shape[0] != x->shape[1] || weight->shape[1] < 1) {
        tg_error_tensors(TG_ERR_INVALID, 2, names, tensors, "%s: weight must be (C, K) with C = %lld and K ≥ 1", OP,
                         (long long)x->shape[1]);
        return false;
    }
    if (!opt) return true;
    if (opt->activation != TG_ACT_NONE && opt->activation != TG_ACT_SILU) {
        tg_set_error(TG_ERR_INVALID, "%s: unknown activation %d", OP, (int)opt->activation);
        return false;
    }
    const int64_t states_shape[3] = {x->shape[0], x->shape[1], weight->shape[1] - 1};
    return check_optional("bias", opt->bias, x, 1, &x->shape[1]) &&
           check_optional("initial_states", opt->initial_states, x, 3, states_shape);
}

tg_tensor *tg_causal_conv1d(tg_tape *tape, tg_tensor *x, tg_tensor *weight, const tg_causal_conv1d_options *options)
{
    if (!check_args(tape, x, weight, options)) return NULL;
    const tg_causal_conv1d_options none = {0};
    const tg_causal_conv1d_options *opt = options ? options : &none;
    tg_tape_mark mark = tg_tape_get_mark(tape);
    /* The output keeps x's layout (channel-last in, channel-last out). */
    tg_tensor *out = tg_empty_same_layout(tape, x), *final_states = NULL;
    if (!out) return tg_op_fail(tape, mark);
    if (opt->final_states) {
        int64_t shape[3] = {x->shape[0], x->shape[1], weight->shape[1] - 1};
        if (!(final_states = tg_empty(tape, x->dtype, x->device, 3, shape))) return tg_op_fail(tape, mark);
    }
    tg_conv1d_args args = {x, weight, opt->bias, opt->initial_states, opt->activation};
    if (TG_DISPATCH(OP, conv1d_fwd, x->device, &args, out, final_states) != TG_OK) return tg_op_fail(tape, mark);

    tg_tensor *inputs[N_INPUTS] = {x, weight, opt->bias, opt->initial_states};
    tg_tensor *outputs[2] = {out, final_states};
    conv1d_ctx ctx = {opt->activation};
    tg_op_record record = {OP, conv1d_backward, inputs, N_INPUTS, outputs, final_states ? 2 : 1, &ctx, sizeof ctx};
    if (tg_record(tape, &record) != TG_OK) return tg_op_fail(tape, mark);
    if (opt->final_states) *opt->final_states = final_states;
    return out;
}

/* ---- which CUDA kernel runs (kernels/cuda/conv1d.cu reads and notes these) ---------------------- */

static atomic_int forced_kernel[2];
static _Thread_local tg_conv1d_kernel last_kernel[2];

const char *tg_conv1d_kernel_name(tg_conv1d_kernel kernel)
{
    static const char *const names[TG_CONV1D_KERNELS] = {
        "auto",   "row-direct",          "row-grouped", "row-side-by-side", "row-staged", "row-tensor-cores",
        "stream", "stream-tensor-cores", "tile"};
    return kernel >= 0 && kernel < TG_CONV1D_KERNELS ? names[kernel] : "?";
}

bool tg_conv1d_pass_has(tg_conv1d_pass pass, tg_conv1d_kernel kernel)
{
    if (kernel <= TG_CONV1D_AUTO || kernel >= TG_CONV1D_KERNELS) return false;
    if (pass == TG_CONV1D_FORWARD) return kernel != TG_CONV1D_ROW_TENSOR_CORES;
    return kernel != TG_CONV1D_ROW_DIRECT && kernel != TG_CONV1D_ROW_GROUPED;
}

void tg_cuda_conv1d_force_kernel(tg_conv1d_pass pass, tg_conv1d_kernel kernel)
{
    atomic_store(&forced_kernel[pass == TG_CONV1D_BACKWARD], (int)kernel);
}

tg_conv1d_kernel tg_cuda_conv1d_forced_kernel(tg_conv1d_pass pass)
{
    return (tg_conv1d_kernel)atomic_load(&forced_kernel[pass == TG_CONV1D_BACKWARD]);
}

void tg_cuda_conv1d_note_kernel(tg_conv1d_pass pass, tg_conv1d_kernel kernel)
{
    last_kernel[pass == TG_CONV1D_BACKWARD] = kernel;
}

tg_conv1d_kernel tg_cuda_conv1d_last_kernel(tg_conv1d_pass pass) { return last_kernel[pass == TG_CONV1D_BACKWARD]; }
