/* ops/shape.c: reshape, permute, transpose, slice, concat and split.
 *
 * Views: permute, transpose, slice, split and the reshape of a contiguous tensor make
 * no copy. Their result is a tg_view of x's storage (writing through x is visible in
 * the view) and is recorded like any other op, so gradients still reach x. Concat and
 * the reshape of a non-contiguous tensor copy.
 *
 * These ops only move elements, so they accept any dtype, i32 ids included; only
 * float tensors carry gradients.
 *
 * Slice bounds follow NumPy: a negative start or end counts from the end of the axis,
 * then both are clamped to [0, dim]; start ≥ end gives an empty slice. step must be ≥ 1.
 */
#include "core/internal.h"
#include "tapegrad/ops.h"

#include <stdio.h>
#include <stdlib.h>

/* Block copies (dst ← src, same shape, any strides): the slice backward and the
 * concat forward write a whole input into a region of a bigger tensor. */
typedef tg_status (*copy_kernel)(tg_tensor *dst, const tg_tensor *src);
static const copy_kernel slice_bwd_copy[TG_DEVICE_COUNT] = TG_KERNELS(tg_copy, tg_copy);
static const copy_kernel concat_fwd_copy[TG_DEVICE_COUNT] = TG_KERNELS(tg_copy, tg_copy);

/* ---- shared helpers ------------------------------------------------------------------ */

/* Sets an error naming x (as "x"), like tg_error_tensors; returns status. */
static tg_status fail_on(tg_status status, const tg_tensor *x, const char *format, ...)
    __attribute__((format(printf, 3, 4)));
static tg_status fail_on(tg_status status, const tg_tensor *x, const char *format, ...)
{
    char message[512];
    va_list args;
    va_start(args, format);
    vsnprintf(message, sizeof message, format, args);
    va_end(args);
    const char *name = "x";
    return tg_error_tensors(status, 1, &name, &x, "%s", message);
}

static bool check_x(const char *op, const tg_tape *tape, const tg_tensor *x)
{
    return tg_check_tape(op, tape) && tg_check_tensor(op, "x", x) && tg_check_device_usable(op, "x", x);
}

/* The geometry of t's elements start, start + step, ... (count of them) along axis.
 * The step only matters when there are two or more elements; then step < dim, so the
 * stride product cannot overflow for a tensor whose elements are addressable. */
static tg_tensor part_along(const tg_tensor *t, int axis, int64_t start, int64_t count, int64_t step)
{
    tg_tensor part = *t;
    part.shape[axis] = count;
    part.offset += start * t->strides[axis];
    if (count > 1) part.strides[axis] *= step;
    part.requires_grad = false;
    part.grad = NULL;
    part.producer = NULL;
    return part;
}

/* A view of x (on the tape) with part's geometry. */
static tg_tensor *view_of(tg_tape *tape, const tg_tensor *x, const tg_tensor *part)
{
    return tg_view(tape, x, part->ndim, part->shape, part->strides, part->offset);
}

/* Records y = op(x) for a one-input op; on failure gives the tape back to mark. */
static tg_tensor *record_unary(tg_tape *tape, const char *op, tg_backward_fn backward, tg_tensor *x, tg_tensor *y,
                               const void *ctx, size_t ctx_size, tg_tape_mark mark)
{
    if (!y) return tg_op_fail(tape, mark);
    tg_op_record record = {op, backward, &x, 1, &y, 1, ctx, ctx_size};
    if (tg_record(tape, &record) != TG_OK) return tg_op_fail(tape, mark);
    return y;
}

/* ---- reshape -------------------------------------------------------------------------- */

/* Fills out with shape, its -1 (at most one) replaced by the size that makes the
 * element count equal x's; false (with a message) when that is impossible. */
static bool resolve_shape(const char *op, const tg_tensor *x, int ndim, const int64_t *shape, int64_t *out)
{
    if (ndim < 1 || ndim > TG_MAX_DIMS || !shape) {
        fail_on(TG_ERR_INVALID, x, "%s: the new shape needs 1..%d dimensions (got ndim %d%s)", op, TG_MAX_DIMS, ndim,
                shape ? "" : " and a NULL shape");
        return false;
    }
    char text[160];
    tg_shape_str(ndim, shape, text, sizeof text);
    int inferred = -1;
    int64_t known = 1; /* product of the given sizes */
    for (int i = 0; i < ndim; i++) {
        out[i] = shape[i];
        if (shape[i] == -1 && inferred < 0) {
            inferred = i;
        } else if (shape[i] == -1) {
            fail_on(TG_ERR_INVALID, x, "%s: more than one -1 in shape %s", op, text);
            return false;
        } else if (shape[i] < 0) {
            fail_on(TG_ERR_INVALID, x, "%s: bad size %lld in shape %s (sizes are ≥ 0, or -1 once)", op,
                    (long long)shape[i], text);
            return false;
        } else if (tg_mul_overflows(known, shape[i], &known)) {
            fail_on(TG_ERR_OVERFLOW, x, "%s: shape %s is too large (size overflows)", op, text);
            return false;
        }
    }
    int64_t numel = tg_numel(x);
    if (inferred >= 0 && known != 0 && numel % known == 0) {
        out[inferred] = numel / known;
        return true;
    }
    if (inferred < 0 && known == numel) return true;
    fail_on(TG_ERR_INVALID, x, "%s: cannot reshape %lld elements into shape %s", op, (long long)numel, text);
    return false;
}

/* y is x's elements in row-major order under another shape, so the gradient is dy's
 * elements in the same order under x's shape: dx = reshape(dy, x.shape). */
static tg_status reshape_backward(tg_node *node, tg_tensor *const *dy, tg_tensor **dx)
{
    const tg_tensor *x = node->inputs[0];
    dx[0] = tg_reshape(node->tape, dy[0], x->ndim, x->shape);
    return dx[0] ? TG_OK : TG_ERR_NOMEM;
}

tg_tensor *tg_reshape(tg_tape *tape, tg_tensor *x, int ndim, const int64_t *shape)
{
    const char *op = "tg_reshape";
    int64_t resolved[TG_MAX_DIMS], strides[TG_MAX_DIMS];
    if (!check_x(op, tape, x) || !resolve_shape(op, x, ndim, shape, resolved)) return NULL;
    tg_tape_mark mark = tg_tape_get_mark(tape);
    /* A view needs x's elements in row-major order in memory: otherwise copy first
     * (tg_contiguous records its own node, so the gradient passes through both). */
    tg_tensor *source = tg_contiguous(tape, x);
    if (!source) return tg_op_fail(tape, mark);
    tg_contiguous_strides(ndim, resolved, strides);
    tg_tensor *y = tg_view(tape, source, ndim, resolved, strides, source->offset);
    return record_unary(tape, op, reshape_backward, source, y, NULL, 0, mark);
}

/* ---- permute and transpose ------------------------------------------------------------- */

typedef struct {
    int perm[TG_MAX_DIMS];
} permute_ctx;

/* y's axis i is x's axis perm[i], so y[j] = x[k] with k[perm[i]] = j[i]. The gradient
 * goes back the same way: dx = permute(dy, inverse), where inverse[perm[i]] = i. */
static tg_status permute_backward(tg_node *node, tg_tensor *const *dy, tg_tensor **dx)
{
    const permute_ctx *ctx = node->ctx;
    int inverse[TG_MAX_DIMS];
    for (int i = 0; i < node->inputs[0]->ndim; i++) inverse[ctx->perm[i]] = i;
    dx[0] = tg_permute(node->tape, dy[0], inverse);
    return dx[0] ? TG_OK : TG_ERR_NOMEM;
}

/* The permuted view (perm already checked). */
static tg_tensor *permute_view(tg_tape *tape, const char *op, tg_tensor *x, const int *perm)
{
    permute_ctx ctx = {{0}};
    tg_tensor part = *x;
    for (int i = 0; i < x->ndim; i++) {
        ctx.perm[i] = perm[i];
        part.shape[i] = x->shape[perm[i]];
        part.strides[i] = x->strides[perm[i]];
    }
    tg_tape_mark mark = tg_tape_get_mark(tape);
    return record_unary(tape, op, permute_backward, x, view_of(tape, x, &part), &ctx, sizeof ctx, mark);
}

static bool check_perm(const char *op, const tg_tensor *x, const int *perm)
{
    if (!perm) {
        fail_on(TG_ERR_INVALID, x, "%s: perm is NULL", op);
        return false;
    }
    bool seen[TG_MAX_DIMS] = {false};
    char text[128];
    int used = 0;
    bool valid = true;
    for (int i = 0; i < x->ndim; i++) {
        used += snprintf(text + used, sizeof text - (size_t)used, "%s%d", i ? ", " : "", perm[i]);
        if (perm[i] < 0 || perm[i] >= x->ndim || seen[perm[i]])
            valid = false;
        else
            seen[perm[i]] = true;
    }
    if (!valid) fail_on(TG_ERR_INVALID, x, "%s: perm [%s] is not a permutation of 0..%d", op, text, x->ndim - 1);
    return valid;
}

tg_tensor *tg_permute(tg_tape *tape, tg_tensor *x, const int *perm)
{
    const char *op = "tg_permute";
    if (!check_x(op, tape, x) || !check_perm(op, x, perm)) return NULL;
    return permute_view(tape, op, x, perm);
}

tg_tensor *tg_transpose(tg_tape *tape, tg_tensor *x, int axis0, int axis1)
{
    const char *op = "tg_transpose";
    if (!check_x(op, tape, x) || !tg_check_axis(op, x, &axis0) || !tg_check_axis(op, x, &axis1)) return NULL;
    int perm[TG_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) perm[i] = i;
    perm[axis0] = axis1;
    perm[axis1] = axis0;
    return permute_view(tape, op, x, perm);
}

/* ---- slice ------------------------------------------------------------------------------- */

typedef struct {
    int axis;
    int64_t start;
    int64_t step;
} slice_ctx;

/* y[.., k, ..] = x[.., start + k·step, ..] along axis: each element of x is taken at most
 * once, so dx is zero except at the taken positions, where it is dy:
 *   dx = zeros(x.shape);  dx[.., start + k·step, ..] = dy[.., k, ..]. */
static tg_status slice_backward(tg_node *node, tg_tensor *const *dy, tg_tensor **dx)
{
    const slice_ctx *ctx = node->ctx;
    const tg_tensor *x = node->inputs[0];
    dx[0] = tg_zeros_like(node->tape, x);
    if (!dx[0]) return TG_ERR_NOMEM;
    tg_tensor region = part_along(dx[0], ctx->axis, ctx->start, dy[0]->shape[ctx->axis], ctx->step);
    return TG_DISPATCH(node->op, slice_bwd_copy, x->device, &region, dy[0]);
}

/* The recorded view of count elements from start, step apart, along axis (all checked). */
static tg_tensor *slice_view(tg_tape *tape, const char *op, tg_tensor *x, int axis, int64_t start, int64_t count,
                             int64_t step)
{
    tg_tape_mark mark = tg_tape_get_mark(tape);
    tg_tensor part = part_along(x, axis, start, count, step);
    slice_ctx ctx = {axis, start, step};
    return record_unary(tape, op, slice_backward, x, view_of(tape, x, &part), &ctx, sizeof ctx, mark);
}

/* A bound counted from the end when negative, then clamped to [0, dim] (NumPy's rule). */
static int64_t clamp_bound(int64_t bound, int64_t dim)
{
    if (bound < 0) bound += dim; /* a negative plus a non-negative: no overflow */
    return bound < 0 ? 0 : bound > dim ? dim : bound;
}

tg_tensor *tg_slice(tg_tape *tape, tg_tensor *x, int axis, int64_t start, int64_t end, int64_t step)
{
    const char *op = "tg_slice";
    if (!check_x(op, tape, x) || !tg_check_axis(op, x, &axis)) return NULL;
    if (step < 1) {
        fail_on(TG_ERR_INVALID, x, "%s: step must be ≥ 1, not %lld", op, (long long)step);
        return NULL;
    }
    int64_t dim = x->shape[axis];
    start = clamp_bound(start, dim);
    end = clamp_bound(end, dim);
    /* (end − start − 1) / step + 1 rather than a rounded-up division, which could overflow for a huge step. */
    int64_t count = end > start ? (end - start - 1) / step + 1 : 0;
    return slice_view(tape, op, x, axis, start, count, step);
}

/* ---- concat ------------------------------------------------------------------------------- */

typedef struct {
    int axis;
} concat_ctx;

/* y = [x0, x1, ...] along axis: input i fills its own block of y, so its gradient is
 * dy's block at the same place: dx_i = dy[.., offset_i : offset_i + size_i, ..] (a view). */
static tg_status concat_backward(tg_node *node, tg_tensor *const *dy, tg_tensor **dx)
{
    const concat_ctx *ctx = node->ctx;
    int64_t start = 0;
    for (int i = 0; i < node->n_inputs; i++) {
        int64_t size = node->inputs[i]->shape[ctx->axis];
        if (tg_node_needs_grad(node, i)) {
            tg_tensor block = part_along(dy[0], ctx->axis, start, size, 1);
            if (!(dx[i] = view_of(node->tape, dy[0], &block))) return TG_ERR_NOMEM;
        }
        start += size;
    }
    return TG_OK;
}

/* Every xs[i] matches xs[0] in rank and in every dimension but axis. */
static bool check_concat_shapes(const char *op, tg_tensor *const *xs, int n, int axis)
{
    for (int i = 1; i < n; i++) {
        bool match = xs[i]->ndim == xs[0]->ndim;
        for (int d = 0; match && d < xs[0]->ndim; d++) match = d == axis || xs[i]->shape[d] == xs[0]->shape[d];
        if (match) continue;
        char name[32];
        snprintf(name, sizeof name, "xs[%d]", i);
        const char *names[2] = {"xs[0]", name};
        const tg_tensor *tensors[2] = {xs[0], xs[i]};
        tg_error_tensors(TG_ERR_INVALID, 2, names, tensors, "%s: %s and xs[0] differ outside axis %d", op, name, axis);
        return false;
    }
    return true;
}

/* Tape, pointers, dtypes, devices, axis (normalised in place), shapes; the result's
 * shape goes to shape. */
static bool check_concat(const char *op, const tg_tape *tape, tg_tensor *const *xs, int n, int *axis, int64_t *shape)
{
    if (!tg_check_tape(op, tape)) return false;
    if (!xs || n < 1) {
        tg_set_error(TG_ERR_INVALID, "%s: needs at least one tensor (xs %s, n = %d)", op, xs ? "given" : "is NULL", n);
        return false;
    }
    char name[32];
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "xs[%d]", i);
        if (!tg_check_tensor(op, name, xs[i]) || !tg_check_same_kind(op, "xs[0]", xs[0], name, xs[i])) return false;
    }
    if (!tg_check_device_usable(op, "xs[0]", xs[0]) || !tg_check_axis(op, xs[0], axis) ||
        !check_concat_shapes(op, xs, n, *axis))
        return false;
    int64_t total = 0, numel, nbytes;
    bool overflow = false;
    for (int i = 0; i < n && !overflow; i++) overflow = __builtin_add_overflow(total, xs[i]->shape[*axis], &total);
    for (int d = 0; d < xs[0]->ndim; d++) shape[d] = d == *axis ? total : xs[0]->shape[d];
    if (overflow || !tg_shape_numel(xs[0]->ndim, shape, &numel) ||
        tg_mul_overflows(numel, (int64_t)tg_dtype_size(xs[0]->dtype), &nbytes)) {
        tg_set_error(TG_ERR_OVERFLOW, "%s: the result of joining %d tensors is too large (size overflows)", op, n);
        return false;
    }
    return true;
}

tg_tensor *tg_concat(tg_tape *tape, tg_tensor *const *xs, int n, int axis)
{
    const char *op = "tg_concat";
    int64_t shape[TG_MAX_DIMS];
    if (!check_concat(op, tape, xs, n, &axis, shape)) return NULL;
    tg_tape_mark mark = tg_tape_get_mark(tape);
    tg_tensor *y = tg_empty(tape, xs[0]->dtype, xs[0]->device, xs[0]->ndim, shape);
    if (!y) return tg_op_fail(tape, mark);
    int64_t start = 0;
    for (int i = 0; i < n; i++) {
        tg_tensor block = part_along(y, axis, start, xs[i]->shape[axis], 1);
        if (TG_DISPATCH(op, concat_fwd_copy, y->device, &block, xs[i]) != TG_OK) return tg_op_fail(tape, mark);
        start += xs[i]->shape[axis];
    }
    concat_ctx ctx = {axis};
    tg_op_record record = {op, concat_backward, xs, n, &y, 1, &ctx, sizeof ctx};
    if (tg_record(tape, &record) != TG_OK) return tg_op_fail(tape, mark);
    return y;
}

/* ---- split ---------------------------------------------------------------------------------- */

/* n ≥ 1, sizes and out given, every size ≥ 0, and they add up to x's dimension. */
static tg_status check_split_sizes(const char *op, const tg_tensor *x, int axis, int n, const int64_t *sizes,
                                   tg_tensor *const *out)
{
    if (n < 1 || !sizes || !out)
        return fail_on(TG_ERR_INVALID, x, "%s: needs n ≥ 1 pieces, sizes and out (n = %d%s%s)", op, n,
                       sizes ? "" : ", sizes NULL", out ? "" : ", out NULL");
    int64_t dim = x->shape[axis], total = 0;
    for (int i = 0; i < n; i++) {
        if (sizes[i] < 0)
            return fail_on(TG_ERR_INVALID, x, "%s: sizes[%d] = %lld is negative", op, i, (long long)sizes[i]);
        if (sizes[i] > dim - total) /* compared this way, the running sum never overflows */
            return fail_on(TG_ERR_INVALID, x, "%s: the sizes add up to more than dimension %d (size %lld)", op, axis,
                           (long long)dim);
        total += sizes[i];
    }
    if (total != dim)
        return fail_on(TG_ERR_INVALID, x, "%s: the sizes add up to %lld, not to dimension %d (size %lld)", op,
                       (long long)total, axis, (long long)dim);
    return TG_OK;
}

typedef struct {
    int axis;
} split_ctx;

/* The pieces tile x along axis, so x's gradient is their gradients side by side (zeros
 * where a piece got none): each block of dx written once, with no full-size zero fill
 * per piece and no sum of the pieces' full-size gradients. */
static tg_status split_backward(tg_node *node, tg_tensor *const *dy, tg_tensor **dx)
{
    const split_ctx *ctx = node->ctx;
    const tg_tensor *x = node->inputs[0];
    if (!(dx[0] = tg_node_grad_buffer(node, 0))) return TG_ERR_NOMEM;
    int64_t start = 0;
    for (int i = 0; i < node->n_outputs; i++) {
        const int64_t size = node->outputs[i]->shape[ctx->axis];
        tg_tensor block = part_along(dx[0], ctx->axis, start, size, 1);
        tg_status status =
            dy[i] ? TG_DISPATCH(node->op, slice_bwd_copy, x->device, &block, dy[i]) : tg_fill(&block, 0.0);
        if (status != TG_OK) return status;
        start += size;
    }
    return TG_OK;
}

/* The pieces are views of x, recorded as one node with n outputs. */
tg_status tg_split(tg_tape *tape, tg_tensor *x, int axis, int n, const int64_t *sizes, tg_tensor **out)
{
    const char *op = "tg_split";
    if (!tg_check_tape(op, tape) || !tg_check_tensor(op, "x", x) || !tg_check_axis(op, x, &axis))
        return tg_last_status();
    if (!tg_check_device_usable(op, "x", x)) return tg_last_status();
    tg_status status = check_split_sizes(op, x, axis, n, sizes, out);
    if (status != TG_OK) return status;
    /* The pieces go to out only once all exist, so a failure leaves out untouched. */
    tg_tape_mark mark = tg_tape_get_mark(tape);
    tg_tensor **pieces = tg_tape_alloc(tape, sizeof *pieces * (size_t)n);
    if (!pieces) {
        tg_set_error(TG_ERR_NOMEM, "%s: out of memory for %d pieces", op, n);
        return TG_ERR_NOMEM;
    }
    int64_t start = 0;
    for (int i = 0; i < n; i++) {
        tg_tensor part = part_along(x, axis, start, sizes[i], 1);
        if (!(pieces[i] = view_of(tape, x, &part))) {
            tg_op_fail(tape, mark);
            return TG_ERR_NOMEM;
        }
        start += sizes[i];
    }
    split_ctx ctx = {axis};
    tg_op_record record = {op, split_backward, &x, 1, pieces, n, &ctx, sizeof ctx};
    if ((status = tg_record(tape, &record)) != TG_OK) {
        tg_op_fail(tape, mark);
        return status;
    }
    for (int i = 0; i < n; i++) out[i] = pieces[i];
    return TG_OK;
}
