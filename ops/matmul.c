/* ops/matmul.c: the batched matrix product C = op(A)·op(B), where op(X) is X or, when
 * asked, X with its last two axes swapped.
 *
 * Shapes: op(A) is (..., M, K), op(B) is (..., K, N), C is (..., M, N) and contiguous.
 * The batch axes (all but the last two) of A and B are equal, or one of them is a 2-D
 * matrix used by every batch. Empty sizes follow NumPy: K = 0 gives zeros (a sum of
 * nothing), M = 0, N = 0 or an empty batch gives an empty result.
 *
 * Backward. Per batch, C[m,n] = Σ_k op(A)[m,k]·op(B)[k,n], so
 *   d op(A) = dC·op(B)ᵀ        d op(B) = op(A)ᵀ·dC,
 * and an input given transposed gets the transpose of that:
 *   dA = dC·op(B)ᵀ,  or with transpose_a  dA = (dC·op(B)ᵀ)ᵀ = op(B)·dCᵀ
 *   dB = op(A)ᵀ·dC,  or with transpose_b  dB = (op(A)ᵀ·dC)ᵀ = dCᵀ·op(A)
 * each one product with the matching transpose flags, written into the input's gradient. A matrix shared by every batch
 * receives the sum of its per-batch gradients, Σ_b X_b·Y_b, which is the single product
 * [X_1 … X_B]·[Y_1; …; Y_B] when the batch folds into the inner dimension of both
 * (for a linear layer x (B, T, D) @ W (D, N): dW = x_flatᵀ·dC_flat with x_flat (B·T, D)).
 */
#include "kernels/matmul.h"
#include "tapegrad/ops.h"

#include <limits.h>
#include <string.h>

static const tg_matmul_kernel matmul_fwd[TG_DEVICE_COUNT] = TG_KERNELS(tg_cpu_matmul, TG_CUDA_KERNEL(tg_cuda_matmul));

static bool tf32_allowed; /* tg_matmul_set_tf32 */

bool tg_matmul_set_tf32(bool enabled)
{
    bool previous = tf32_allowed;
    tf32_allowed = enabled;
    return previous;
}

bool tg_matmul_tf32(void) { return tf32_allowed; }

typedef struct {
    bool transpose_a;
    bool transpose_b;
} matmul_ctx;

/* Whether t's batch axes and its axis `axis` step through memory like one axis, so
 * that they can be viewed as one; *size and *stride describe that axis. */
static bool batch_merges(const tg_tensor *t, int axis, int64_t *size, int64_t *stride)
{
    int n_batch = t->ndim - 2;
    int64_t total = t->shape[axis], span = 1, expected;
    for (int i = 0; i < n_batch; i++)
        if (tg_mul_overflows(total, t->shape[i], &total)) return false;
    *size = total;
    *stride = t->strides[axis];
    if (total == 0) return true;
    bool found = false; /* the innermost axis of size > 1 sets the stride */
    for (int k = n_batch; k >= 0; k--) {
        int d = k == n_batch ? axis : k;
        if (t->shape[d] == 1) continue;
        if (!found)
            *stride = t->strides[d];
        else if (tg_mul_overflows(*stride, span, &expected) || t->strides[d] != expected)
            return false;
        found = true;
        span *= t->shape[d];
    }
    return true;
}

/* A 2-D view of t (batch..., X, Y) with the batch axes merged into `axis` (ndim − 2: X,
 * ndim − 1: Y), when they merge and the merged size still suits BLAS; else *view is
 * NULL. Fails only when the view cannot be allocated. */
static tg_status fold_batch(tg_tape *tape, const tg_tensor *t, int axis, tg_tensor **view)
{
    *view = NULL;
    int64_t size, stride;
    if (!batch_merges(t, axis, &size, &stride) || size > INT_MAX) return TG_OK;
    int nd = t->ndim, k = axis - (nd - 2);
    int64_t shape[2] = {t->shape[nd - 2], t->shape[nd - 1]}, strides[2] = {t->strides[nd - 2], t->strides[nd - 1]};
    shape[k] = size;
    strides[k] = stride;
    *view = tg_view(tape, t, 2, shape, strides, t->offset);
    return *view ? TG_OK : TG_ERR_NOMEM;
}

/* Σ over the batch of op(X_b)·op(Y_b) (x and y have the same batch axes). Placing the
 * batch side by side along the inner dimension makes it one product,
 * [op(X_1) … op(X_B)]·[op(Y_1); …; op(Y_B)], whenever both layouts allow that view. */
static tg_tensor *product_summed_over_batch(tg_tape *tape, tg_tensor *x, bool tx, tg_tensor *y, bool ty)
{
    tg_tensor *x_folded, *y_folded;
    if (fold_batch(tape, x, x->ndim - (tx ? 2 : 1), &x_folded) != TG_OK ||
        fold_batch(tape, y, y->ndim - (ty ? 1 : 2), &y_folded) != TG_OK)
        return NULL;
    if (x_folded && y_folded) return tg_matmul(tape, x_folded, y_folded, tx, ty);
    /* The layouts do not fold: one product per batch, then their sum. */
    tg_tensor *each = tg_matmul(tape, x, y, tx, ty);
    if (!each) return NULL;
    int nd = each->ndim;
    int64_t shape[3] = {1, each->shape[nd - 2], each->shape[nd - 1]}, strides[3];
    for (int i = 0; i < nd - 2; i++) shape[0] *= each->shape[i];
    tg_contiguous_strides(3, shape, strides);
    tg_tensor *stacked = tg_view(tape, each, 3, shape, strides, each->offset);
    return stacked ? tg_sum(tape, stacked, 0, false) : NULL;
}

/* Checks ranks, batch axes and the inner dimension; writes the result's shape. */
static bool check_shapes(const tg_tensor *a, const tg_tensor *b, bool ta, bool tb, int *ndim, int64_t *shape)
{
    const char *op = "tg_matmul";
    const char *names[2] = {"a", "b"};
    const tg_tensor *tensors[2] = {a, b};
    if (a->ndim < 2 || b->ndim < 2) {
        tg_error_tensors(TG_ERR_INVALID, 2, names, tensors,
                         "%s: %s must have at least 2 dimensions (a matrix or a batch of matrices), not %d", op,
                         a->ndim < 2 ? "a" : "b", a->ndim < 2 ? a->ndim : b->ndim);
        return false;
    }
    int batch_a = a->ndim - 2, batch_b = b->ndim - 2;
    if (batch_a > 0 && batch_b > 0 &&
        (batch_a != batch_b || memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)batch_a) != 0)) {
        tg_error_tensors(TG_ERR_INVALID, 2, names, tensors,
                         "%s: the batch dimensions of a and b differ (they must be equal, or one of a and b must "
                         "be a 2-D matrix shared by every batch)",
                         op);
        return false;
    }
    int64_t m = a->shape[a->ndim - (ta ? 1 : 2)], k_a = a->shape[a->ndim - (ta ? 2 : 1)];
    int64_t k_b = b->shape[b->ndim - (tb ? 1 : 2)], n = b->shape[b->ndim - (tb ? 2 : 1)];
    if (k_a != k_b) {
        tg_error_tensors(TG_ERR_INVALID, 2, names, tensors,
                         "%s: inner dimensions differ: op(a) is M x K = %lld x %lld but op(b) is K x N = %lld x %lld "
                         "(transpose_a %s, transpose_b %s)",
                         op, (long long)m, (long long)k_a, (long long)k_b, (long long)n, ta ? "true" : "false",
                         tb ? "true" : "false");
        return false;
    }
    if (m > INT_MAX || n > INT_MAX || k_a > INT_MAX) {
        tg_error_tensors(TG_ERR_OVERFLOW, 2, names, tensors,
                         "%s: M = %lld, N = %lld and K = %lld must each fit in a 32-bit int (a BLAS limit)", op,
                         (long long)m, (long long)n, (long long)k_a);
        return false;
    }
    const tg_tensor *batched = batch_a > 0 ? a : b;
    *ndim = batched->ndim;
    memcpy(shape, batched->shape, sizeof(int64_t) * (size_t)*ndim);
    shape[*ndim - 2] = m;
    shape[*ndim - 1] = n;
    int64_t numel, bytes;
    if (!tg_shape_numel(*ndim, shape, &numel) || tg_mul_overflows(numel, (int64_t)tg_dtype_size(a->dtype), &bytes)) {
        char text[128];
        tg_error_tensors(TG_ERR_OVERFLOW, 2, names, tensors, "%s: the result %s is too large (its size overflows)", op,
                         tg_shape_str(*ndim, shape, text, sizeof text));
        return false;
    }
    return true;
}

/* The kernel call. A batch of matrices times one shared matrix goes as a single
 * (batch·M) × K product when a's batch axes fold into its M axis (a linear layer). */
static tg_status run_forward(tg_tape *tape, tg_tensor *a, tg_tensor *b, bool ta, bool tb, tg_tensor *out)
{
    if (a->ndim > 2 && b->ndim == 2) {
        tg_tensor *a_folded, *out_folded = NULL;
        if (fold_batch(tape, a, a->ndim - (ta ? 1 : 2), &a_folded) != TG_OK ||
            (a_folded && fold_batch(tape, out, out->ndim - 2, &out_folded) != TG_OK))
            return TG_ERR_NOMEM;
        if (a_folded && out_folded)
            return TG_DISPATCH("tg_matmul", matmul_fwd, a->device, a_folded, b, ta, tb, out_folded);
    }
    return TG_DISPATCH("tg_matmul", matmul_fwd, a->device, a, b, ta, tb, out);
}

/* op(X)·op(Y) as input i's gradient, written into its gradient buffer; summed over the
 * batch when the gradient is for a shared 2-D matrix. */
static tg_tensor *gradient_product(tg_node *node, int i, tg_tensor *x, bool tx, tg_tensor *y, bool ty, bool shared)
{
    if (shared) return product_summed_over_batch(node->tape, x, tx, y, ty);
    tg_tensor *out = tg_node_grad_buffer(node, i);
    return out && run_forward(node->tape, x, y, tx, ty, out) == TG_OK ? out : NULL;
}

/* dA = dC·op(B)ᵀ, or op(B)·dCᵀ with transpose_a; dB = op(A)ᵀ·dC, or dCᵀ·op(A) with
 * transpose_b (derived at the top of the file); summed over the batch for a shared matrix. */
static tg_status matmul_backward(tg_node *node, tg_tensor *const *dy, tg_tensor **dx)
{
    const matmul_ctx *ctx = node->ctx;
    tg_tensor *a = node->inputs[0], *b = node->inputs[1], *g = dy[0];
    bool ta = ctx->transpose_a, tb = ctx->transpose_b;
    if (tg_node_needs_grad(node, 0)) {
        bool shared = a->ndim == 2 && b->ndim > 2;
        dx[0] = ta ? gradient_product(node, 0, b, tb, g, true, shared)
                   : gradient_product(node, 0, g, false, b, !tb, shared);
        if (!dx[0]) return TG_ERR_NOMEM;
    }
    if (tg_node_needs_grad(node, 1)) {
        bool shared = b->ndim == 2 && a->ndim > 2;
        dx[1] = tb ? gradient_product(node, 1, g, true, a, ta, shared)
                   : gradient_product(node, 1, a, !ta, g, false, shared);
        if (!dx[1]) return TG_ERR_NOMEM;
    }
    return TG_OK;
}

tg_tensor *tg_matmul(tg_tape *tape, tg_tensor *a, tg_tensor *b, bool transpose_a, bool transpose_b)
{
    const char *name = "tg_matmul";
    if (!tg_check_tape(name, tape) || !tg_check_float(name, "a", a) || !tg_check_float(name, "b", b) ||
        !tg_check_same_kind(name, "a", a, "b", b) || !tg_check_device_usable(name, "a", a))
        return NULL;
    int ndim;
    int64_t shape[TG_MAX_DIMS];
    if (!check_shapes(a, b, transpose_a, transpose_b, &ndim, shape)) return NULL;
    tg_tape_mark mark = tg_tape_get_mark(tape);
    tg_tensor *out = tg_empty(tape, a->dtype, a->device, ndim, shape);
    if (!out || run_forward(tape, a, b, transpose_a, transpose_b, out) != TG_OK) return tg_op_fail(tape, mark);
    matmul_ctx ctx = {transpose_a, transpose_b};
    tg_tensor *inputs[2] = {a, b};
    tg_op_record record = {name, matmul_backward, inputs, 2, &out, 1, &ctx, sizeof ctx};
    if (tg_record(tape, &record) != TG_OK) return tg_op_fail(tape, mark);
    return out;
}
