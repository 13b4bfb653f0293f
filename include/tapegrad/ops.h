/* tapegrad/ops.h: the differentiable ops.
 *
 * Conventions, for every op:
 *   - the first argument is the tape, which owns the result;
 *   - floating inputs must share one dtype (f32, f64, bf16 or f16) and one device;
 *   - inputs may be strided views (transposed, sliced, channel-last);
 *   - on error the op returns NULL (or a status), tg_last_error() names the op, the
 *     shapes, dtypes and devices, and the tape is left exactly as it was.
 * Each op's backward lives next to its forward in ops/<family>.c.
 */
#ifndef TAPEGRAD_OPS_H
#define TAPEGRAD_OPS_H

#include "autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- elementwise (ops/elementwise.c) -------------------------------------------
 * Binary ops broadcast NumPy-style: shapes are aligned on the right, and a dimension
 * of size 1 (or a missing one) stretches to match. */
TG_API tg_tensor *tg_add(tg_tape *tape, tg_tensor *a, tg_tensor *b);
TG_API tg_tensor *tg_sub(tg_tape *tape, tg_tensor *a, tg_tensor *b);
TG_API tg_tensor *tg_mul(tg_tape *tape, tg_tensor *a, tg_tensor *b);
TG_API tg_tensor *tg_div(tg_tape *tape, tg_tensor *a, tg_tensor *b);
TG_API tg_tensor *tg_scale(tg_tape *tape, tg_tensor *x, double factor);
TG_API tg_tensor *tg_neg(tg_tape *tape, tg_tensor *x);
TG_API tg_tensor *tg_exp(tg_tape *tape, tg_tensor *x);
TG_API tg_tensor *tg_log(tg_tape *tape, tg_tensor *x);
TG_API tg_tensor *tg_tanh(tg_tape *tape, tg_tensor *x);
TG_API tg_tensor *tg_sigmoid(tg_tape *tape, tg_tensor *x);
TG_API tg_tensor *tg_silu(tg_tape *tape, tg_tensor *x);
TG_API tg_tensor *tg_softplus(tg_tape *tape, tg_tensor *x);
TG_API tg_tensor *tg_relu(tg_tape *tape, tg_tensor *x);

/* ---- matmul (ops/matmul.c) ------------------------------------------------------
 * a: (..., M, K) or, with transpose_a, (..., K, M); b: (..., K, N) or (..., N, K).
 * Leading (batch) dimensions must match, or one side has none and is shared by every
 * batch (x @ W for a linear layer). Result: (..., M, N). */
TG_API tg_tensor *tg_matmul(tg_tape *tape, tg_tensor *a, tg_tensor *b, bool transpose_a, bool transpose_b);
/* Whether f32 products on CUDA may use the TF32 tensor cores: inputs rounded to 10 bits of
 * mantissa, sums in f32; several times faster, about 1e-3 relative error instead of 1e-6.
 * Off by default, as in PyTorch. bf16 and f16 products always use the tensor cores (with
 * f32 sums); the CPU multiplies f64 in f64 and the other dtypes in f32. Returns the previous
 * setting. */
TG_API bool tg_matmul_set_tf32(bool enabled);
TG_API bool tg_matmul_tf32(void);

/* ---- reductions (ops/reduce.c) --------------------------------------------------
 * axis may be negative (counted from the end). keepdim keeps a dimension of size 1. */
TG_API tg_tensor *tg_sum(tg_tape *tape, tg_tensor *x, int axis, bool keepdim);
TG_API tg_tensor *tg_mean(tg_tape *tape, tg_tensor *x, int axis, bool keepdim);
TG_API tg_tensor *tg_sum_all(tg_tape *tape, tg_tensor *x);  /* shape (1) */
TG_API tg_tensor *tg_mean_all(tg_tape *tape, tg_tensor *x); /* shape (1) */

/* ---- shape ops (ops/shape.c): views where the layout allows, copies otherwise ------ */
/* One entry of shape may be -1 (inferred). A view when x is contiguous. */
TG_API tg_tensor *tg_reshape(tg_tape *tape, tg_tensor *x, int ndim, const int64_t *shape);
/* Result dimension i is x's dimension perm[i]. Always a view. */
TG_API tg_tensor *tg_permute(tg_tape *tape, tg_tensor *x, const int *perm);
TG_API tg_tensor *tg_transpose(tg_tape *tape, tg_tensor *x, int axis0, int axis1);
/* Elements start, start+step, ... below end along axis (step ≥ 1). Always a view. As in
 * NumPy, a negative start or end counts from the end of the axis, and both are then clamped
 * to [0, dimension], so a slice past the end is shorter (or empty), not an error. */
TG_API tg_tensor *tg_slice(tg_tape *tape, tg_tensor *x, int axis, int64_t start, int64_t end, int64_t step);
/* Joins n tensors along axis (all other dimensions equal). */
TG_API tg_tensor *tg_concat(tg_tape *tape, tg_tensor *const *xs, int n, int axis);
/* Cuts x along axis into n views of the given sizes (they must add up to the
 * dimension); writes them to out[0..n-1]. */
TG_API tg_status tg_split(tg_tape *tape, tg_tensor *x, int axis, int n, const int64_t *sizes, tg_tensor **out);
/* A contiguous copy (or x itself when it already is contiguous). */
TG_API tg_tensor *tg_contiguous(tg_tape *tape, tg_tensor *x);
/* A copy in another float dtype (gradient converted back). */
TG_API tg_tensor *tg_to_dtype(tg_tape *tape, tg_tensor *x, tg_dtype dtype);
/* A contiguous copy on another device (gradient copied back); x itself when it is already
 * there. TG_DEVICE_AUTO picks the GPU when one is usable. */
TG_API tg_tensor *tg_to_device(tg_tape *tape, tg_tensor *x, tg_device device);

/* ---- embedding (ops/embedding.c) -------------------------------------------------
 * table: (V, D) float; ids: i32 of any shape S with values in [0, V). Result: (S..., D).
 * The table's gradient is a scatter-add (in a fixed order: deterministic). */
TG_API tg_tensor *tg_embedding(tg_tape *tape, tg_tensor *table, tg_tensor *ids);

/* ---- normalisation and softmax (ops/norm.c, ops/softmax.c), over the last axis ------- */
/* y = x / sqrt(mean(x²) + eps) · weight; weight has shape (last dimension of x). */
TG_API tg_tensor *tg_rmsnorm(tg_tape *tape, tg_tensor *x, tg_tensor *weight, double eps);
/* A residual add fused into the norm: *sum = residual + x (same shape, dtype and device;
 * rounded to the dtype as tg_add rounds it) and the result is tg_rmsnorm(*sum, weight, eps),
 * both written in one pass (and both gradients taken in one). The values are those of
 * tg_add followed by tg_rmsnorm; gradients agree with that pair to rounding. */
TG_API tg_tensor *tg_add_rmsnorm(tg_tape *tape, tg_tensor *residual, tg_tensor *x, tg_tensor *weight, double eps,
                                 tg_tensor **sum);
TG_API tg_tensor *tg_softmax(tg_tape *tape, tg_tensor *x);
TG_API tg_tensor *tg_log_softmax(tg_tape *tape, tg_tensor *x);

/* ---- loss (ops/loss.c) ------------------------------------------------------------
 * logits: (..., V); targets: i32 with logits' leading shape. Mean over the targets
 * not equal to ignore_index (a loss of 0 when all are ignored). Fused and stable:
 * log-sum-exp with the maximum subtracted; backward is softmax − one_hot. */
TG_API tg_tensor *tg_cross_entropy(tg_tape *tape, tg_tensor *logits, tg_tensor *targets, int32_t ignore_index);
/* How many rows the arg-max of logits gets right: a (2) f64 tensor holding [correct,
 * scored] over the rows whose target is not ignore_index. The arg-max is the first index
 * of the largest logit (a NaN never counts as the largest); a target outside [0, V) is
 * never right. Not recorded (no gradient). It stays where the logits are: on CUDA reading
 * it is the only wait, and a training loop can leave it on the device for a while. */
TG_API tg_tensor *tg_count_correct(tg_tape *tape, tg_tensor *logits, tg_tensor *targets, int32_t ignore_index);

/* ---- causal conv1d (ops/conv1d.c) ---------------------------------------------------
 * x: (B, C, L), channel-first (stride 1 along L) or channel-last (a view of a (B, L, C)
 * tensor, stride 1 along C) or any other strides. weight: (C, K), K ≥ 1.
 *   out[b,c,t] = act(bias[c] + Σ_k weight[c,k] · xe[b,c,t+k]),
 * where xe is x with K−1 steps of history in front: initial_states (B, C, K−1) when
 * given, else zeros. The output has x's layout. final_states (B, C, K−1), when asked
 * for, are the last K−1 steps of xe: feed them as the next piece's initial_states.
 * Gradients flow to x, weight, bias and initial_states (and from final_states). */
typedef enum {
    TG_ACT_NONE = 0,
    TG_ACT_SILU = 1,
} tg_activation;

typedef struct {
    tg_tensor *bias;           /* (C) or NULL */
    tg_tensor *initial_states; /* (B, C, K−1) or NULL (zeros) */
    tg_activation activation;
    tg_tensor **final_states; /* if non-NULL, receives (B, C, K−1) */
} tg_causal_conv1d_options;

TG_API tg_tensor *tg_causal_conv1d(tg_tape *tape, tg_tensor *x, tg_tensor *weight,
                                   const tg_causal_conv1d_options *options);

/* ---- selective scan (ops/scan.c) -----------------------------------------------------------
 * The selective state-space scan of Mamba. u, delta: (B, D, L); A: (D, N); Bm, Cm: (B, N, L).
 *   dt[b,d,t] = softplus(delta + delta_bias[d]) when delta_softplus, else delta (+ bias)
 *   h[b,d,n,t] = exp(dt·A[d,n])·h[b,d,n,t−1] + dt·Bm[b,n,t]·u[b,d,t]    (h[−1] = initial or 0)
 *   y[b,d,t]  = Σ_n Cm[b,n,t]·h[b,d,n,t] + Dv[d]·u[b,d,t]
 *   out       = y · silu(z) when z is given, else y.
 * The backward keeps only the states at chunk boundaries and recomputes inside each chunk. */
typedef struct {
    tg_tensor *Dv;         /* (D) skip, or NULL */
    tg_tensor *z;          /* (B, D, L) gate, or NULL */
    tg_tensor *delta_bias; /* (D), or NULL */
    bool delta_softplus;
    tg_tensor *initial_state; /* (B, D, N), or NULL (zeros) */
    tg_tensor **final_state;  /* if non-NULL, receives h at t = L−1, (B, D, N) */
    int64_t chunk;            /* steps per recompute chunk in the backward; 0: 64 */
} tg_selective_scan_options;

TG_API tg_tensor *tg_selective_scan(tg_tape *tape, tg_tensor *u, tg_tensor *delta, tg_tensor *A, tg_tensor *Bm,
                                    tg_tensor *Cm, const tg_selective_scan_options *options);

#ifdef __cplusplus
}
#endif
#endif
