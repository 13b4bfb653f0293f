/* core/recompute.c: activations given back after the forward and recomputed in the backward
 * (tg_recompute_in_backward, include/tapegrad/autograd.h), or given back for good
 * (tg_give_back: tensors no backward reads).
 *
 * A release gives back a tensor's device block (a CPU tensor's bytes stay in the arena,
 * overwritten with NaN) and marks its storage released. The marker node recorded with it
 * runs the caller's function when the backward reaches it, takes over the device bytes of
 * what the function returns (on the CPU, copies them back and rewinds), and marks the
 * storage recomputed. Once the backward of the op that made a recomputed tensor has run,
 * nothing reads it again, so it is released once more: a backward holds the recomputed
 * tensors of the part of the model it is in, not all of them at once.
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

#define MAX_RECOMPUTED 8

typedef struct {
    tg_recompute_fn fn;
    void *ctx; /* the caller's, copied onto the tape */
} marker_ctx;

/* Never called: it tells markers apart (tg_recompute_run does their work). */
static tg_status marker_backward(tg_node *node, tg_tensor *const *dy, tg_tensor **dx)
{
    (void)node, (void)dy, (void)dx;
    return TG_OK;
}

bool tg_recompute_is_marker(const tg_node *node) { return node->backward == marker_backward; }

static void release_data(tg_tape *tape, tg_storage *storage)
{
    if (storage->device == TG_DEVICE_CPU)
        memset(storage->data, 0xff, storage->nbytes); /* NaN in every float dtype */
    else if (tg_tape_free_device_data(tape, storage->data))
        storage->data = NULL;
    storage->state = TG_DATA_RELEASED;
}

/* An op's output on this tape that owns its whole storage, on the first tensor's device,
 * given once. */
static bool releasable(const char *op, const tg_tape *tape, tg_tensor *const *tensors, int i)
{
    char name[24];
    snprintf(name, sizeof name, "tensors[%d]", i);
    const tg_tensor *t = tensors[i];
    const char *names[1] = {name};
    if (!tg_check_float(op, name, t)) return false;
    const char *why = NULL;
    if (t->tape != tape || t->storage->kind != TG_STORAGE_ARENA)
        why = "is not an activation of this tape (a parameter, a free tensor or another tape's)";
    else if (t->requires_grad && !t->producer)
        why = "is a leaf that requires a gradient, not an op's output";
    else if (t->offset != 0 || (size_t)tg_numel(t) * tg_dtype_size(t->dtype) != t->storage->nbytes)
        why = "is a view of part of a larger tensor; only a tensor that owns its bytes can be released";
    else if (t->device != tensors[0]->device)
        why = "is on another device than tensors[0]";
    for (int j = 0; !why && j < i; j++)
        if (tensors[j]->storage == t->storage) why = "shares its bytes with an earlier entry";
    if (!why) return true;
    tg_error_tensors(TG_ERR_INVALID, 1, names, &t, "%s: %s %s", op, name, why);
    return false;
}

tg_status tg_recompute_in_backward(tg_tape *tape, int n, tg_tensor *const *tensors, tg_recompute_fn fn, const void *ctx,
                                   size_t ctx_size)
{
    const char *op = "tg_recompute_in_backward";
    if (!tg_check_tape(op, tape)) return tg_last_status();
    if (n < 1 || n > MAX_RECOMPUTED || !tensors || !fn || (ctx_size && !ctx))
        return tg_set_error(TG_ERR_INVALID,
                            "%s: needs 1 to %d tensors, a function, and ctx when ctx_size > 0 (got n = %d, "
                            "tensors %s, fn %s, ctx %s with ctx_size %zu)",
                            op, MAX_RECOMPUTED, n, tensors ? "given" : "NULL", fn ? "given" : "NULL",
                            ctx ? "given" : "NULL", ctx_size);
    for (int i = 0; i < n; i++)
        if (!releasable(op, tape, tensors, i)) return tg_last_status();
    if (!tg_tape_grad_enabled(tape)) return TG_OK;

    tg_tape_mark mark = tg_tape_get_mark(tape);
    tg_node *node = tg_tape_alloc(tape, sizeof *node);
    tg_tensor **inputs = tg_tape_alloc(tape, sizeof(tg_tensor *) * (size_t)n);
    marker_ctx *marker = tg_tape_alloc(tape, sizeof *marker);
    void *ctx_copy = ctx_size ? tg_tape_alloc(tape, ctx_size) : NULL;
    if (!node || !inputs || !marker || (ctx_size && !ctx_copy)) {
        tg_tape_rewind(tape, mark);
        return tg_set_error(TG_ERR_NOMEM, "%s: out of memory while recording", op);
    }
    memcpy(inputs, tensors, sizeof(tg_tensor *) * (size_t)n);
    if (ctx_size) memcpy(ctx_copy, ctx, ctx_size);
    *marker = (marker_ctx){fn, ctx_copy};
    *node = (tg_node){
        .op = "recompute", .backward = marker_backward, .tape = tape, .n_inputs = n, .inputs = inputs, .ctx = marker};
    tg_tape_push_node(tape, node);
    for (int i = 0; i < n; i++) release_data(tape, tensors[i]->storage);
    return TG_OK;
}

tg_status tg_give_back(tg_tape *tape, int n, tg_tensor *const *tensors)
{
    const char *op = "tg_give_back";
    if (!tg_check_tape(op, tape)) return tg_last_status();
    if (n < 1 || n > MAX_RECOMPUTED || !tensors)
        return tg_set_error(TG_ERR_INVALID, "%s: needs 1 to %d tensors (got n = %d, tensors %s)", op, MAX_RECOMPUTED, n,
                            tensors ? "given" : "NULL");
    for (int i = 0; i < n; i++)
        if (!releasable(op, tape, tensors, i)) return tg_last_status();
    for (int i = 0; i < n; i++) release_data(tape, tensors[i]->storage);
    return TG_OK;
}

/* What fn returned for released tensor i: the same dtype, device and geometry, owning
 * bytes of the same size. */
static tg_status check_recomputed(const tg_node *marker, int i, const tg_tensor *out)
{
    const char *op = "tg_recompute_in_backward";
    const tg_tensor *released = marker->inputs[i];
    if (!out)
        return tg_set_error(TG_ERR_INVALID, "%s: the recompute function gave no tensor %d (%s)", op, i,
                            tg_last_error());
    bool same = out->dtype == released->dtype && out->device == released->device && tg_same_shape(out, released) &&
                out->offset == 0 && out->storage && out->storage->nbytes == released->storage->nbytes;
    for (int d = 0; same && d < out->ndim; d++) same = out->strides[d] == released->strides[d];
    if (same) return TG_OK;
    const char *names[2] = {"recomputed", "released"};
    const tg_tensor *tensors[2] = {out, released};
    return tg_error_tensors(TG_ERR_INVALID, 2, names, tensors,
                            "%s: tensor %d from the recompute function differs from the released one in dtype, "
                            "device, shape, strides or size",
                            op, i);
}

tg_status tg_recompute_run(tg_tape *tape, tg_node *marker)
{
    const marker_ctx *m = marker->ctx;
    bool any = false;
    for (int i = 0; i < marker->n_inputs; i++) any = any || marker->inputs[i]->storage->state == TG_DATA_RELEASED;
    if (!any) return TG_OK;
    tg_tape_mark mark = tg_tape_get_mark(tape);
    tg_tensor *out[MAX_RECOMPUTED] = {0};
    bool was_enabled = tg_tape_set_grad_enabled(tape, false);
    tg_status status = m->fn(tape, m->ctx, out);
    tg_tape_set_grad_enabled(tape, was_enabled);
    for (int i = 0; i < marker->n_inputs && status == TG_OK; i++) status = check_recomputed(marker, i, out[i]);
    if (status != TG_OK) {
        tg_tape_rewind(tape, mark);
        return status;
    }
    const bool on_cpu = marker->inputs[0]->device == TG_DEVICE_CPU;
    for (int i = 0; i < marker->n_inputs; i++) {
        tg_storage *storage = marker->inputs[i]->storage;
        if (storage->state != TG_DATA_RELEASED) continue;
        if (on_cpu)
            memcpy(storage->data, out[i]->storage->data, storage->nbytes);
        else
            storage->data = out[i]->storage->data; /* the block stays on the tape's list */
        storage->state = TG_DATA_RECOMPUTED;
    }
    if (on_cpu) tg_tape_rewind(tape, mark);
    return TG_OK;
}

void tg_recompute_release_outputs(tg_tape *tape, tg_node *node)
{
    for (int j = 0; j < node->n_outputs; j++) {
        tg_tensor *t = node->outputs[j];
        if (t && t->storage->state == TG_DATA_RECOMPUTED) release_data(tape, t->storage);
    }
}
