/* ops/embedding.c: row lookup in a (V, D) table by i32 ids of any shape S, giving
 * (S..., D). Every id is checked against [0, V) before anything is allocated. */
#include "kernels/embedding.h"
#include "tapegrad/ops.h"

#include <stdio.h>

static const tg_embedding_find_bad_id_kernel find_bad_id[TG_DEVICE_COUNT] =
    TG_KERNELS(tg_cpu_embedding_find_bad_id, TG_CUDA_KERNEL(tg_cuda_embedding_find_bad_id));
static const tg_embedding_fwd_kernel embedding_fwd[TG_DEVICE_COUNT] =
    TG_KERNELS(tg_cpu_embedding_fwd, TG_CUDA_KERNEL(tg_cuda_embedding_fwd));
static const tg_embedding_bwd_kernel embedding_bwd[TG_DEVICE_COUNT] =
    TG_KERNELS(tg_cpu_embedding_bwd, TG_CUDA_KERNEL(tg_cuda_embedding_bwd));

/* y[p, :] = table[ids[p], :], so ∂L/∂table[v, :] = Σ over positions p with ids[p] = v of
 * dy[p, :]: a scatter-add of dy's rows into zeros, in position order (deterministic).
 * Rows no id points at get 0. ids are integers and get no gradient. */
static tg_status embedding_backward(tg_node *node, tg_tensor *const *dy, tg_tensor **dx)
{
    if (!tg_node_needs_grad(node, 0)) return TG_OK;
    const tg_tensor *table = node->inputs[0], *ids = node->inputs[1];
    dx[0] = tg_zeros_like(node->tape, table);
    if (!dx[0]) return TG_ERR_NOMEM;
    return TG_DISPATCH(node->op, embedding_bwd, table->device, dy[0], ids, dx[0]);
}

/* Sets an error naming both tensors; always false. */
static bool reject(tg_status status, const tg_tensor *table, const tg_tensor *ids, const char *message)
{
    const char *names[2] = {"table", "ids"};
    const tg_tensor *tensors[2] = {table, ids};
    tg_error_tensors(status, 2, names, tensors, "tg_embedding: %s", message);
    return false;
}

/* Everything but the id values; the result's shape (S..., D) goes to shape. */
static bool check_embedding(const tg_tape *tape, const tg_tensor *table, const tg_tensor *ids, int64_t *shape)
{
    const char *op = "tg_embedding";
    if (!tg_check_tape(op, tape) || !tg_check_float(op, "table", table) || !tg_check_tensor(op, "ids", ids) ||
        !tg_check_ndim(op, "table", table, 2))
        return false;
    if (ids->dtype != TG_I32) return reject(TG_ERR_DTYPE, table, ids, "ids must be i32 token ids");
    if (ids->device != table->device)
        return reject(TG_ERR_DEVICE, table, ids, "table and ids are on different devices");
    if (!tg_check_device_usable(op, "table", table)) return false;
    if (ids->ndim >= TG_MAX_DIMS)
        return reject(TG_ERR_INVALID, table, ids, "ids has too many dimensions: the result adds one to them");
    for (int i = 0; i < ids->ndim; i++) shape[i] = ids->shape[i];
    shape[ids->ndim] = table->shape[1];
    int64_t numel, nbytes;
    if (!tg_shape_numel(ids->ndim + 1, shape, &numel) ||
        tg_mul_overflows(numel, (int64_t)tg_dtype_size(table->dtype), &nbytes))
        return reject(TG_ERR_OVERFLOW, table, ids, "the result is too large (size overflows)");
    return true;
}

/* Every id lies in [0, V); otherwise an error that names the first bad one, where it
 * is (flat position and index) and V. */
static bool check_ids(const tg_tensor *table, const tg_tensor *ids)
{
    int64_t position = -1, id = 0, vocab = table->shape[0];
    if (TG_DISPATCH("tg_embedding", find_bad_id, ids->device, ids, vocab, &position, &id) != TG_OK) return false;
    if (position < 0) return true;
    int64_t index[TG_MAX_DIMS];
    int64_t rest = position; /* the flat position as a row-major index (no dimension is 0: an id exists) */
    for (int i = ids->ndim - 1; i >= 0; i--) {
        index[i] = rest % ids->shape[i];
        rest /= ids->shape[i];
    }
    char where[128], message[320];
    tg_shape_str(ids->ndim, index, where, sizeof where);
    snprintf(message, sizeof message, "id %lld at position %lld (index %s) is outside [0, V) for V = %lld",
             (long long)id, (long long)position, where, (long long)vocab);
    return reject(TG_ERR_INVALID, table, ids, message);
}

tg_tensor *tg_embedding(tg_tape *tape, tg_tensor *table, tg_tensor *ids)
{
    const char *op = "tg_embedding";
    int64_t shape[TG_MAX_DIMS];
    if (!check_embedding(tape, table, ids, shape) || !check_ids(table, ids)) return NULL;
    tg_tape_mark mark = tg_tape_get_mark(tape);
    tg_tensor *out = tg_empty(tape, table->dtype, table->device, ids->ndim + 1, shape);
    if (!out || TG_DISPATCH(op, embedding_fwd, table->device, table, ids, out) != TG_OK) return tg_op_fail(tape, mark);
    tg_tensor *inputs[2] = {table, ids};
    tg_op_record record = {op, embedding_backward, inputs, 2, &out, 1, NULL, 0};
    if (tg_record(tape, &record) != TG_OK) return tg_op_fail(tape, mark);
    return out;
}
