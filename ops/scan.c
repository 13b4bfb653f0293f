/* ops/scan.c: the selective state-space scan of Mamba.
 *
 * Forward, per (b, d), on a state h of N entries (h_{−1} = initial_state or zeros):
 *   dt_t = softplus(delta_t + bias) (or delta_t + bias),  Ā_t = exp(dt_t·A[d])
 *   h_t  = Ā_t ⊙ h_{t−1} + dt_t·u_t·Bm_t,  y_t = Cm_t·h_t + Dv·u_t,  out_t = y_t·silu(z_t)
 * Backward, a reverse scan with dy = dout·silu(z) and the total state gradient
 *   δh_t = Cm_t·dy_t + Ā_{t+1} ⊙ δh_{t+1}   (δh_{L−1} also gets dfinal)
 * from which every input gradient is a local product (kernels/cpu/scan.c lists them):
 *   dCm = Σ_d dy·h_t, dBm = Σ_d δh·dt·u, du = δh·dt·Bm + Dv·dy, dA = Σ_{b,t} δh·dt·Ā·h_{t−1},
 *   ddt = δh·(Bm·u + A·Ā·h_{t−1}), ddelta = ddt·σ(delta + bias) under softplus,
 *   dinitial = Ā_0·δh_0.
 *
 * What is saved: the inputs, plus the state at the start of every chunk of `chunk` steps,
 * (B, D, N, ⌈L/chunk⌉), in f64 for f64 inputs and f32 otherwise (a bf16 state would put
 * its rounding into every recomputed step): D·N·8/chunk bytes per token for f64 and
 * D·N·4/chunk for the others, instead of D·N·8 for every state. The backward recomputes
 * the states inside one chunk at a time from these. */
#include "kernels/scan.h"
#include "tapegrad/ops.h"

static const tg_scan_fwd_kernel scan_fwd[TG_DEVICE_COUNT] =
    TG_KERNELS(tg_cpu_selective_scan_fwd, TG_CUDA_KERNEL(tg_cuda_selective_scan_fwd));
static const tg_scan_bwd_kernel scan_bwd[TG_DEVICE_COUNT] =
    TG_KERNELS(tg_cpu_selective_scan_bwd, TG_CUDA_KERNEL(tg_cuda_selective_scan_bwd));

static const char *const OP = "tg_selective_scan";

enum { IN_U, IN_DELTA, IN_A, IN_BM, IN_CM, IN_DV, IN_Z, IN_DELTA_BIAS, IN_INITIAL, N_INPUTS };

enum { DEFAULT_CHUNK = 64 };

#ifndef TG_HAVE_CUDA
/* A build without CUDA cuts no sequence into spans (kernels/scan.h): nothing to force or
 * report, so that tests and tools calling these still link. */
int tg_cuda_scan_force_spans(int spans)
{
    (void)spans;
    return 0;
}

void tg_cuda_scan_last_spans(int *fwd, int *bwd)
{
    if (fwd) *fwd = 0;
    if (bwd) *bwd = 0;
}
#endif

typedef struct {
    bool delta_softplus;
    int64_t chunk;
    tg_tensor *chunk_states; /* (B, D, N, n_chunks), on the tape */
} scan_ctx;

static tg_scan_args args_of(const tg_node *node)
{
    const scan_ctx *ctx = node->ctx;
    tg_tensor *const *in = node->inputs;
    return (tg_scan_args){in[IN_U], in[IN_DELTA],      in[IN_A],       in[IN_BM],           in[IN_CM], in[IN_DV],
                          in[IN_Z], in[IN_DELTA_BIAS], in[IN_INITIAL], ctx->delta_softplus, ctx->chunk};
}

/* A gradient buffer for input i, or NULL when input i needs none. */
static tg_tensor *grad_for(tg_node *node, int i, bool *failed)
{
    if (!tg_node_needs_grad(node, i)) return NULL;
    tg_tensor *t = tg_node_grad_buffer(node, i);
    if (!t) *failed = true;
    return t;
}

static tg_status scan_backward(tg_node *node, tg_tensor *const *dy, tg_tensor **dx)
{
    bool failed = false;
    for (int i = 0; i < N_INPUTS; i++) dx[i] = grad_for(node, i, &failed);
    if (failed) return TG_ERR_NOMEM;
    const scan_ctx *ctx = node->ctx;
    tg_scan_args args = args_of(node);
    tg_scan_grads grads = {dx[IN_U],  dx[IN_DELTA], dx[IN_A],          dx[IN_BM],     dx[IN_CM],
                           dx[IN_DV], dx[IN_Z],     dx[IN_DELTA_BIAS], dx[IN_INITIAL]};
    const tg_tensor *dfinal = node->n_outputs > 1 ? dy[1] : NULL;
    return TG_DISPATCH(OP, scan_bwd, args.u->device, &args, ctx->chunk_states, dy[0], dfinal, &grads);
}

/* The message for a tensor whose shape is not the one required. */
static bool shape_error(const char *name, const tg_tensor *t, const tg_tensor *u, const tg_tensor *A, int ndim,
                        const int64_t *want)
{
    char buf[96];
    const char *names[3] = {"u", "A", name};
    const tg_tensor *tensors[3] = {u, A, t};
    tg_error_tensors(TG_ERR_INVALID, 3, names, tensors, "%s: %s must have shape %s", OP, name,
                     tg_shape_str(ndim, want, buf, sizeof buf));
    return false;
}

/* t (required unless optional) is float, of u's dtype and device, and of the given shape. */
static bool check_input(const char *name, const tg_tensor *t, bool optional, const tg_tensor *u, const tg_tensor *A,
                        int ndim, const int64_t *shape)
{
    if (!t && optional) return true;
    if (!tg_check_float(OP, name, t) || !tg_check_same_kind(OP, "u", u, name, t)) return false;
    bool ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = t->shape[i] == shape[i];
    return ok || shape_error(name, t, u, A, ndim, shape);
}

/* u and A come first: every other shape is stated in terms of B, D, L (u) and N (A). */
static bool check_u_and_A(const tg_tape *tape, const tg_tensor *u, const tg_tensor *A)
{
    if (!tg_check_tape(OP, tape) || !tg_check_float(OP, "u", u) || !tg_check_float(OP, "A", A) ||
        !tg_check_ndim(OP, "u", u, 3) || !tg_check_ndim(OP, "A", A, 2) || !tg_check_same_kind(OP, "u", u, "A", A) ||
        !tg_check_device_usable(OP, "u", u))
        return false;
    const char *names[2] = {"u", "A"};
    const tg_tensor *tensors[2] = {u, A};
    if (u->shape[0] < 1 || u->shape[1] < 1 || u->shape[2] < 1) {
        tg_error_tensors(TG_ERR_INVALID, 2, names, tensors, "%s: u must have B, D, L ≥ 1", OP);
        return false;
    }
    if (A->shape[0] != u->shape[1] || A->shape[1] < 1) {
        tg_error_tensors(TG_ERR_INVALID, 2, names, tensors, "%s: A must be (D, N) with D = %lld and N ≥ 1", OP,
                         (long long)u->shape[1]);
        return false;
    }
    return true;
}

static bool check_args(const tg_tape *tape, const tg_tensor *u, const tg_tensor *delta, const tg_tensor *A,
                       const tg_tensor *Bm, const tg_tensor *Cm, const tg_selective_scan_options *opt)
{
    if (!check_u_and_A(tape, u, A)) return false;
    const int64_t B = u->shape[0], D = u->shape[1], L = u->shape[2], N = A->shape[1];
    const int64_t bdl[3] = {B, D, L}, bnl[3] = {B, N, L}, bdn[3] = {B, D, N};
    if (!check_input("delta", delta, false, u, A, 3, bdl) || !check_input("Bm", Bm, false, u, A, 3, bnl) ||
        !check_input("Cm", Cm, false, u, A, 3, bnl) || !check_input("Dv", opt->Dv, true, u, A, 1, &D) ||
        !check_input("z", opt->z, true, u, A, 3, bdl) ||
        !check_input("delta_bias", opt->delta_bias, true, u, A, 1, &D) ||
        !check_input("initial_state", opt->initial_state, true, u, A, 3, bdn))
        return false;
    if (opt->chunk < 0) {
        tg_set_error(TG_ERR_INVALID, "%s: chunk must be ≥ 0 (0: %d), got %lld", OP, (int)DEFAULT_CHUNK,
                     (long long)opt->chunk);
        return false;
    }
    return true;
}

/* Whether tg_record will keep a node: only then are the chunk states worth saving. */
static bool will_record(const tg_tape *tape, tg_tensor *const *inputs)
{
    if (!tg_tape_grad_enabled(tape)) return false;
    for (int i = 0; i < N_INPUTS; i++)
        if (inputs[i] && inputs[i]->requires_grad) return true;
    return false;
}

/* The (B, D, N, ⌈L/chunk⌉) buffer of chunk start states, on the tape. */
static tg_tensor *alloc_chunk_states(tg_tape *tape, const tg_tensor *u, const tg_tensor *A, int64_t chunk)
{
    int64_t shape[4] = {u->shape[0], u->shape[1], A->shape[1], (u->shape[2] - 1) / chunk + 1}, numel;
    if (!tg_shape_numel(4, shape, &numel)) {
        tg_set_error(TG_ERR_INVALID, "%s: the saved chunk states (B·D·N·%lld) overflow; use a larger chunk", OP,
                     (long long)shape[3]);
        return NULL;
    }
    return tg_empty(tape, u->dtype == TG_F64 ? TG_F64 : TG_F32, u->device, 4, shape);
}

tg_tensor *tg_selective_scan(tg_tape *tape, tg_tensor *u, tg_tensor *delta, tg_tensor *A, tg_tensor *Bm, tg_tensor *Cm,
                             const tg_selective_scan_options *options)
{
    const tg_selective_scan_options none = {0};
    const tg_selective_scan_options *opt = options ? options : &none;
    if (!check_args(tape, u, delta, A, Bm, Cm, opt)) return NULL;
    const int64_t chunk = opt->chunk ? opt->chunk : DEFAULT_CHUNK;
    tg_tensor *inputs[N_INPUTS] = {u, delta, A, Bm, Cm, opt->Dv, opt->z, opt->delta_bias, opt->initial_state};

    tg_tape_mark mark = tg_tape_get_mark(tape);
    tg_tensor *out = tg_empty_like(tape, u), *final_state = NULL, *chunk_states = NULL;
    if (!out) return tg_op_fail(tape, mark);
    if (opt->final_state) {
        int64_t shape[3] = {u->shape[0], u->shape[1], A->shape[1]};
        if (!(final_state = tg_empty(tape, u->dtype, u->device, 3, shape))) return tg_op_fail(tape, mark);
    }
    if (will_record(tape, inputs) && !(chunk_states = alloc_chunk_states(tape, u, A, chunk)))
        return tg_op_fail(tape, mark);
    tg_scan_args args = {
        u, delta, A, Bm, Cm, opt->Dv, opt->z, opt->delta_bias, opt->initial_state, opt->delta_softplus, chunk};
    if (TG_DISPATCH(OP, scan_fwd, u->device, &args, out, final_state, chunk_states) != TG_OK)
        return tg_op_fail(tape, mark);

    tg_tensor *outputs[2] = {out, final_state};
    scan_ctx ctx = {opt->delta_softplus, chunk, chunk_states};
    tg_op_record record = {OP, scan_backward, inputs, N_INPUTS, outputs, final_state ? 2 : 1, &ctx, sizeof ctx};
    if (tg_record(tape, &record) != TG_OK) return tg_op_fail(tape, mark);
    if (opt->final_state) *opt->final_state = final_state;
    return out;
}
