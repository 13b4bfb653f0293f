/* core/tape.c: the tape (an arena plus a list of nodes) and reverse-mode backward.
 *
 * Memory: every activation of a step (tensor structs, their bytes, nodes, the gradients of
 * leaves) is bump-allocated from the tape's arena. tg_tape_reset rewinds the arena; when a
 * step needed several chunks, reset merges them into one, so from the second identical
 * step on, every allocation lands at the same address. During backward, each op's
 * temporaries are rewound as soon as the op is done, and the gradients of activations
 * live off the tape (heap or device blocks) and are freed once their producer has run.
 *
 * Backward: the nodes form a singly linked list in recording order, which is a
 * topological order. Walking it from the newest node to the oldest visits every node
 * after all the nodes that consume its outputs, so one loop (no recursion, no
 * explicit graph sort) computes all gradients, however long the chain.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TG_ARENA_ALIGN 64
#define TG_ARENA_MIN_CHUNK ((size_t)1 << 20)

typedef struct tg_chunk {
    struct tg_chunk *next;
    size_t size;
    size_t used;
    char *data;
} tg_chunk;

/* A device allocation owned by the tape (the list lives in the arena, newest first). */
typedef struct tg_device_block {
    struct tg_device_block *next;
    void *ptr;
    size_t bytes;
    tg_device device;
} tg_device_block;

struct tg_tape {
    tg_chunk *first;
    tg_chunk *current;
    tg_device_block *device_blocks;
    bool grad_enabled;
    tg_node *last;
    size_t n_nodes;
    size_t high_water; /* the most arena bytes in use at once since the last reset */
    bool poison;       /* new tensors and gradient buffers start as NaN (the gradient checkers' tapes) */
};

/* ---- arena ----------------------------------------------------------------------- */

static tg_chunk *chunk_new(size_t size)
{
    tg_chunk *chunk = calloc(1, sizeof *chunk);
    if (!chunk) return NULL;
    size = (size + TG_ARENA_ALIGN - 1) / TG_ARENA_ALIGN * TG_ARENA_ALIGN;
    chunk->data = aligned_alloc(TG_ARENA_ALIGN, size);
    if (!chunk->data) {
        free(chunk);
        return NULL;
    }
    chunk->size = size;
    tg_host_memory_account(size, true);
    return chunk;
}

static void chunks_free(tg_chunk *chunk)
{
    while (chunk) {
        tg_chunk *next = chunk->next;
        tg_host_memory_account(chunk->size, false);
        free(chunk->data);
        free(chunk);
        chunk = next;
    }
}

static size_t align_up(size_t n) { return (n + TG_ARENA_ALIGN - 1) & ~(size_t)(TG_ARENA_ALIGN - 1); }

/* tg_tape_alloc without the messages, for the library's own allocations (which report
 * running out of memory in their own words). */
static void *arena_alloc(tg_tape *tape, size_t nbytes)
{
    if (nbytes > SIZE_MAX / 4) return NULL;
    size_t need = align_up(nbytes ? nbytes : 1);
    tg_chunk *chunk = tape->current;
    while (chunk->used + need > chunk->size) {
        /* Later chunks are free (left over from a rewind or an earlier step): reuse one
         * that fits, else put a new chunk right after the current one. */
        if (chunk->next && chunk->next->size >= need) {
            chunk = chunk->next;
            chunk->used = 0;
            break;
        }
        size_t size = need > TG_ARENA_MIN_CHUNK ? need : TG_ARENA_MIN_CHUNK;
        if (chunk->size * 2 > size && chunk->size * 2 <= ((size_t)1 << 32)) size = chunk->size * 2;
        tg_chunk *fresh = chunk_new(size);
        if (!fresh) return NULL;
        fresh->next = chunk->next;
        chunk->next = fresh;
        chunk = fresh;
    }
    tape->current = chunk;
    void *out = chunk->data + chunk->used;
    chunk->used += need;
    if (chunk == tape->first) {
        if (chunk->used > tape->high_water) tape->high_water = chunk->used;
    } else {
        size_t in_use = tg_tape_bytes_in_use(tape); /* a walk over the few chunks */
        if (in_use > tape->high_water) tape->high_water = in_use;
    }
    return out;
}

void *tg_tape_alloc(tg_tape *tape, size_t nbytes)
{
    if (!tg_check_tape("tg_tape_alloc", tape)) return NULL;
    void *out = arena_alloc(tape, nbytes);
    if (!out) tg_set_error(TG_ERR_NOMEM, "tg_tape_alloc: cannot allocate nbytes = %zu from the arena", nbytes);
    return out;
}

/* ---- device memory owned by the tape ---------------------------------------------------- */

void *tg_tape_alloc_device(tg_tape *tape, tg_device device, size_t nbytes)
{
    tg_device_block *block = tg_tape_alloc(tape, sizeof *block);
    if (!block) return NULL;
    void *ptr;
    if (tg_device_alloc(device, nbytes, &ptr) != TG_OK) return NULL;
    *block = (tg_device_block){tape->device_blocks, ptr, nbytes, device};
    tape->device_blocks = block;
    return ptr;
}

/* Gives back the tape's device blocks newer than `keep`, newest first: the allocator
 * then hands them out again in the order this step took them. */
static void free_device_blocks(tg_tape *tape, const tg_device_block *keep)
{
    while (tape->device_blocks && tape->device_blocks != keep) {
        tg_device_block *block = tape->device_blocks;
        if (block->ptr) tg_device_free(block->device, block->ptr, block->bytes);
        tape->device_blocks = block->next;
    }
}

bool tg_tape_free_device_data(tg_tape *tape, const void *ptr)
{
    for (tg_device_block *block = tape->device_blocks; block; block = block->next) {
        if (block->ptr != ptr) continue;
        tg_device_free(block->device, block->ptr, block->bytes);
        block->ptr = NULL;
        return true;
    }
    return false;
}

tg_tape_mark tg_tape_get_mark(const tg_tape *tape)
{
    if (!tg_check_tape("tg_tape_get_mark", tape)) return (tg_tape_mark){0};
    tg_tape_mark mark = {tape->current->used, tape->n_nodes, tape->current, tape->device_blocks};
    return mark;
}

/* Whether mark was taken on this tape and is not later than its present state: its chunk is
 * the current one or an earlier one, and its nodes and device blocks are still there. */
static bool mark_is_past(const tg_tape *tape, tg_tape_mark mark)
{
    if (mark.n_nodes > tape->n_nodes) return false;
    bool chunk_found = false;
    for (const tg_chunk *c = tape->first; c && !chunk_found; c = c->next) {
        if (c == mark.arena_chunk) chunk_found = mark.arena_used <= c->used;
        if (c == tape->current) break;
    }
    if (!chunk_found) return false;
    if (!mark.device_blocks) return true;
    for (const tg_device_block *b = tape->device_blocks; b; b = b->next)
        if (b == mark.device_blocks) return true;
    return false;
}

void tg_tape_rewind(tg_tape *tape, tg_tape_mark mark)
{
    if (!tg_check_tape("tg_tape_rewind", tape)) return;
    if (!mark_is_past(tape, mark)) {
        tg_set_error(TG_ERR_INVALID, "tg_tape_rewind: mark was not taken on this tape since its last reset, or is "
                                     "later than the tape's present state; nothing was rewound");
        return;
    }
    free_device_blocks(tape, mark.device_blocks);
    tape->current = mark.arena_chunk;
    tape->current->used = mark.arena_used;
    while (tape->n_nodes > mark.n_nodes) {
        tape->last = tape->last->prev;
        tape->n_nodes--;
    }
}

/* ---- tape ------------------------------------------------------------------------- */

tg_tape *tg_tape_create(void)
{
    tg_tape *tape = calloc(1, sizeof *tape);
    if (!tape) {
        tg_set_error(TG_ERR_NOMEM, "tg_tape_create: out of memory");
        return NULL;
    }
    tape->first = tape->current = chunk_new(TG_ARENA_MIN_CHUNK);
    if (!tape->first) {
        free(tape);
        tg_set_error(TG_ERR_NOMEM, "tg_tape_create: out of memory");
        return NULL;
    }
    tape->grad_enabled = true;
    return tape;
}

void tg_tape_free(tg_tape *tape)
{
    if (!tape) return;
    free_device_blocks(tape, NULL);
    chunks_free(tape->first);
    free(tape);
}

void tg_tape_reset(tg_tape *tape)
{
    if (!tg_check_tape("tg_tape_reset", tape)) return;
    free_device_blocks(tape, NULL);
    tape->last = NULL;
    tape->n_nodes = 0;
    if (tape->first->next) {
        /* The step outgrew one chunk: merge into one as big as the most the step had in use
         * at once (not the sum of the chunks, which grew by doubling and waste up to half). */
        tg_chunk *merged = chunk_new(tape->high_water);
        if (merged) {
            chunks_free(tape->first);
            tape->first = merged;
        }
    }
    for (tg_chunk *c = tape->first; c; c = c->next) c->used = 0;
    tape->current = tape->first;
    tape->high_water = 0;
}

bool tg_tape_set_grad_enabled(tg_tape *tape, bool enabled)
{
    if (!tg_check_tape("tg_tape_set_grad_enabled", tape)) return false;
    bool previous = tape->grad_enabled;
    tape->grad_enabled = enabled;
    return previous;
}

void tg_tape_set_poison(tg_tape *tape, bool poison) { tape->poison = poison; }

bool tg_tape_poisons(const tg_tape *tape) { return tape->poison; }

bool tg_tape_grad_enabled(const tg_tape *tape)
{
    return tg_check_tape("tg_tape_grad_enabled", tape) && tape->grad_enabled;
}

size_t tg_tape_node_count(const tg_tape *tape) { return tg_check_tape("tg_tape_node_count", tape) ? tape->n_nodes : 0; }

size_t tg_tape_bytes_in_use(const tg_tape *tape)
{
    if (!tg_check_tape("tg_tape_bytes_in_use", tape)) return 0;
    size_t total = 0;
    for (tg_chunk *c = tape->first; c; c = c->next) {
        total += c->used;
        if (c == tape->current) break;
    }
    return total;
}

size_t tg_tape_peak_bytes(const tg_tape *tape)
{
    return tg_check_tape("tg_tape_peak_bytes", tape) ? tape->high_water : 0;
}

/* ---- recording -------------------------------------------------------------------- */

bool tg_node_needs_grad(const tg_node *node, int input_index)
{
    if (!node) {
        tg_set_error(TG_ERR_INVALID, "tg_node_needs_grad: node is NULL");
        return false;
    }
    if (input_index < 0 || input_index >= node->n_inputs) {
        tg_set_error(TG_ERR_INVALID, "tg_node_needs_grad: input_index %d is outside [0, %d) of %s", input_index,
                     node->n_inputs, node->op ? node->op : "the node");
        return false;
    }
    const tg_tensor *input = node->inputs[input_index];
    return input && input->requires_grad;
}

/* What is wrong with a record (NULL when nothing): the counts, the arrays and the outputs,
 * which must be tensors of this tape that no op has produced yet. */
static const char *record_problem(const tg_tape *tape, const tg_op_record *r, char *why, size_t size)
{
    if (!r->backward) return "backward is NULL";
    if (r->n_inputs < 0 || (r->n_inputs > 0 && !r->inputs)) return "n_inputs is negative, or inputs is NULL";
    if (r->n_outputs < 1 || !r->outputs) return "n_outputs must be at least 1, with outputs not NULL";
    if (r->ctx_size && !r->ctx) return "ctx is NULL but ctx_size is not 0";
    for (int j = 0; j < r->n_outputs; j++) {
        const tg_tensor *out = r->outputs[j];
        if (!out) continue; /* an optional output that was not asked for */
        if (out->tape != tape || out->producer) {
            snprintf(why, size,
                     "outputs[%d] must be a tensor made on this tape and not yet produced by an op "
                     "(a parameter, a free tensor or another op's output cannot be)",
                     j);
            return why;
        }
    }
    return NULL;
}

tg_status tg_record(tg_tape *tape, const tg_op_record *record)
{
    if (!tg_check_tape("tg_record", tape)) return tg_last_status();
    if (!record) return tg_set_error(TG_ERR_INVALID, "tg_record: record is NULL");
    char why[160];
    const char *problem = record_problem(tape, record, why, sizeof why);
    if (problem)
        return tg_set_error(TG_ERR_INVALID, "tg_record: %s (op %s)", problem, record->op ? record->op : "unnamed");
    if (!tape->grad_enabled) return TG_OK;
    bool any_input_needs_grad = false;
    for (int i = 0; i < record->n_inputs; i++)
        if (record->inputs[i] && record->inputs[i]->requires_grad) any_input_needs_grad = true;
    if (!any_input_needs_grad) return TG_OK;

    tg_tape_mark mark = tg_tape_get_mark(tape);
    tg_node *node = arena_alloc(tape, sizeof *node);
    tg_tensor **inputs = arena_alloc(tape, sizeof(tg_tensor *) * ((size_t)record->n_inputs + 1));
    tg_tensor **outputs = arena_alloc(tape, sizeof(tg_tensor *) * (size_t)record->n_outputs);
    void *ctx = record->ctx_size ? arena_alloc(tape, record->ctx_size) : NULL;
    if (!node || !inputs || !outputs || (record->ctx_size && !ctx)) {
        tg_tape_rewind(tape, mark);
        return tg_set_error(TG_ERR_NOMEM, "%s: out of memory while recording", record->op);
    }
    memcpy(inputs, record->inputs, sizeof(tg_tensor *) * (size_t)record->n_inputs);
    memcpy(outputs, record->outputs, sizeof(tg_tensor *) * (size_t)record->n_outputs);
    if (ctx) memcpy(ctx, record->ctx, record->ctx_size);
    *node = (tg_node){
        .op = record->op,
        .backward = record->backward,
        .tape = tape,
        .n_inputs = record->n_inputs,
        .inputs = inputs,
        .n_outputs = record->n_outputs,
        .outputs = outputs,
        .ctx = ctx,
    };
    tg_tape_push_node(tape, node);
    for (int j = 0; j < record->n_outputs; j++) {
        if (!outputs[j]) continue;
        outputs[j]->requires_grad = true;
        outputs[j]->producer = node;
    }
    return TG_OK;
}

void tg_tape_push_node(tg_tape *tape, tg_node *node)
{
    node->prev = tape->last;
    tape->last = node;
    tape->n_nodes++;
}

/* ---- backward ---------------------------------------------------------------------- */

/* A gradient buffer for each input of the node that is a leaf and has none yet. They are made
 * on the tape before the node's backward runs, so the rewind after it leaves them be. */
static tg_status prepare_leaf_grads(tg_tape *tape, tg_node *node)
{
    for (int i = 0; i < node->n_inputs; i++) {
        tg_tensor *input = node->inputs[i];
        if (!tg_node_needs_grad(node, i) || input->producer || input->grad) continue;
        input->grad = tg_zeros(tape, input->dtype, input->device, input->ndim, input->shape);
        if (!input->grad) return TG_ERR_NOMEM;
    }
    return TG_OK;
}

/* Frees the gradients of the node's outputs: once the node's backward has run, nothing reads
 * them again (every consumer of an output was recorded later, so its backward ran earlier). */
static void release_output_grads(tg_node *node)
{
    for (int j = 0; j < node->n_outputs; j++) {
        tg_tensor *out = node->outputs[j];
        if (!out || !out->grad) continue;
        tg_tensor_release(out->grad);
        out->grad = NULL;
    }
}

/* One node's backward. What it allocates on the tape (its dx, its temporaries) is given back
 * as soon as dx has been added into the inputs' gradients, and the gradients of its outputs
 * are freed: a backward pass holds only the gradients still waiting for their producer, not
 * every gradient of the step. */
static tg_status run_node_backward(tg_tape *tape, tg_node *node)
{
    if (tg_recompute_is_marker(node)) return tg_recompute_run(tape, node);
    bool any = false;
    for (int j = 0; j < node->n_outputs; j++) any = any || (node->outputs[j] && node->outputs[j]->grad);
    if (!any) return TG_OK; /* no gradient reaches this node */
    tg_status status = prepare_leaf_grads(tape, node);
    if (status != TG_OK) return status;
    tg_tape_mark mark = tg_tape_get_mark(tape);
    tg_tensor **dy = tg_tape_alloc(tape, sizeof(tg_tensor *) * (size_t)node->n_outputs);
    tg_tensor **dx = tg_tape_alloc(tape, sizeof(tg_tensor *) * (size_t)(node->n_inputs + 1));
    if (!dy || !dx) return tg_set_error(TG_ERR_NOMEM, "tg_backward: out of memory at %s", node->op);
    for (int j = 0; j < node->n_outputs; j++) dy[j] = node->outputs[j] ? node->outputs[j]->grad : NULL;
    memset(dx, 0, sizeof(tg_tensor *) * (size_t)(node->n_inputs + 1));
    node->grads_in_place = 0;
    status = node->backward(node, dy, dx);
    for (int i = 0; i < node->n_inputs && status == TG_OK; i++) {
        if (!dx[i] || !tg_node_needs_grad(node, i)) continue;
        /* written in place: already the input's gradient (the bit, not the pointer, says so:
         * the same tensor given as the gradient of a second input is still added) */
        if (i < 64 && node->grads_in_place >> i & 1 && dx[i] == node->inputs[i]->grad) continue;
        status = tg_accumulate_grad(tape, node->inputs[i], dx[i]);
    }
    if (status != TG_OK) return status;
    release_output_grads(node);
    tg_tape_rewind(tape, mark);
    tg_recompute_release_outputs(tape, node);
    return TG_OK;
}

/* Frees every activation gradient still held (after a failed backward, or one left over). */
static void clear_activation_grads(tg_tape *tape)
{
    for (tg_node *node = tape->last; node; node = node->prev) release_output_grads(node);
}

/* The output a backward starts from: a float tensor that an op recorded on this tape made
 * (or a leaf that requires a gradient); else the error names op and the argument. */
static bool check_backward_output(const char *op, const char *name, const tg_tape *tape, const tg_tensor *output)
{
    if (!tg_check_tape(op, tape) || !tg_check_float(op, name, output)) return false;
    const tg_tensor *tensors[1] = {output};
    if (output->producer && output->tape != tape) {
        tg_error_tensors(TG_ERR_INVALID, 1, &name, tensors, "%s: %s was recorded on another tape than the one given",
                         op, name);
        return false;
    }
    if (!output->requires_grad) {
        tg_error_tensors(TG_ERR_STATE, 1, &name, tensors,
                         "%s: %s does not require a gradient (no recorded op with a gradient-requiring input made it)",
                         op, name);
        return false;
    }
    return true;
}

/* The backward itself, once the arguments are checked. */
static tg_status run_backward(tg_tape *tape, tg_tensor *output, const tg_tensor *output_grad)
{
    /* Gradients of activations belong to one backward pass: none is left from earlier ones. */
    clear_activation_grads(tape);

    /* Backward functions may call ops (on the same tape): they must not be recorded. */
    bool was_enabled = tg_tape_set_grad_enabled(tape, false);
    tg_status status = tg_accumulate_grad(tape, output, output_grad);
    for (tg_node *node = tape->last; node && status == TG_OK; node = node->prev) status = run_node_backward(tape, node);
    tg_tape_set_grad_enabled(tape, was_enabled);
    if (status != TG_OK) clear_activation_grads(tape);
    return status;
}

tg_status tg_backward_with_grad(tg_tape *tape, tg_tensor *output, const tg_tensor *output_grad)
{
    const char *op = "tg_backward_with_grad";
    if (!check_backward_output(op, "output", tape, output) || !tg_check_float(op, "output_grad", output_grad))
        return tg_last_status();
    const char *names[2] = {"output", "output_grad"};
    const tg_tensor *tensors[2] = {output, output_grad};
    if (!tg_same_shape(output, output_grad))
        return tg_error_tensors(TG_ERR_INVALID, 2, names, tensors, "%s: output_grad's shape differs from output's", op);
    if (output_grad->dtype != output->dtype || output_grad->device != output->device)
        return tg_error_tensors(TG_ERR_DTYPE, 2, names, tensors, "%s: output_grad must have output's dtype and device",
                                op);
    return run_backward(tape, output, output_grad);
}

tg_status tg_backward(tg_tape *tape, tg_tensor *loss)
{
    const char *op = "tg_backward";
    if (!check_backward_output(op, "loss", tape, loss)) return tg_last_status();
    if (tg_numel(loss) != 1) {
        const char *name = "loss";
        const tg_tensor *t = loss;
        return tg_error_tensors(TG_ERR_INVALID, 1, &name, &t,
                                "%s: the loss must have one element; use tg_backward_with_grad for other outputs", op);
    }
    tg_tape_mark mark = tg_tape_get_mark(tape);
    tg_tensor *seed = tg_full(tape, loss->dtype, loss->device, loss->ndim, loss->shape, 1.0);
    if (!seed) return TG_ERR_NOMEM;
    tg_status status = run_backward(tape, loss, seed);
    if (status != TG_OK) tg_tape_rewind(tape, mark);
    return status;
}

tg_tensor *tg_detach(tg_tape *tape, tg_tensor *x)
{
    if (!tg_check_tape("tg_detach", tape) || !tg_check_tensor("tg_detach", "x", x)) return NULL;
    return tg_view(tape, x, x->ndim, x->shape, x->strides, x->offset);
}
