/* tapegrad/autograd.h: the tape, recording ops, and running backward.
 *
 * Every op takes the tape as its first argument. The tape owns the op's output
 * (an arena allocation freed by tg_tape_reset) and, when gradients are enabled and
 * some input requires a gradient, records a node: the op's backward function, its
 * inputs, its outputs and a small copy of its parameters. tg_backward walks the
 * nodes in reverse order (a loop, not recursion) and hands each node's output
 * gradients to its backward function; the returned input gradients are summed into
 * ->grad by one accumulate function.
 *
 * This header is also what a custom op needs: see docs/writing-an-op.md.
 */
#ifndef TAPEGRAD_AUTOGRAD_H
#define TAPEGRAD_AUTOGRAD_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The tape functions below set the error for a NULL tape: the queries then give 0 or false,
 * the others do nothing. tg_tape_free(NULL) does nothing, as free does. */
TG_API tg_tape *tg_tape_create(void);
TG_API void tg_tape_free(tg_tape *tape);
/* Frees every activation, activation gradient and node of the step. The arena keeps
 * its memory, so the next identical step gets identical addresses. Tensors made on
 * the tape must not be used after this. */
TG_API void tg_tape_reset(tg_tape *tape);
/* Enables or disables recording; returns the previous setting. */
TG_API bool tg_tape_set_grad_enabled(tg_tape *tape, bool enabled);
TG_API bool tg_tape_grad_enabled(const tg_tape *tape);
TG_API size_t tg_tape_node_count(const tg_tape *tape);
TG_API size_t tg_tape_bytes_in_use(const tg_tape *tape);
/* The most bytes of the tape's arena in use at once since the last reset (a backward gives
 * each op's temporaries back when the op is done, so this can exceed the bytes in use). */
TG_API size_t tg_tape_peak_bytes(const tg_tape *tape);

/* Backward from a one-element loss (seeded with 1). The loss must have been recorded on this
 * tape (or be a leaf that requires a gradient); anything else is refused before any gradient
 * changes. */
TG_API tg_status tg_backward(tg_tape *tape, tg_tensor *loss);
/* Backward from any recorded output, seeded with the given gradient (same shape, dtype and
 * device). */
TG_API tg_status tg_backward_with_grad(tg_tape *tape, tg_tensor *output, const tg_tensor *output_grad);

/* A view of x that shares its data but is cut off from the tape (no gradient flows). */
TG_API tg_tensor *tg_detach(tg_tape *tape, tg_tensor *x);

/* ---- writing an op ------------------------------------------------------------ */

/* A backward function. dy[j] is the gradient of output j, or NULL when none reached
 * it (treat as zeros; a single-output node is only called with dy[0] != NULL).
 * It stores in dx[i] the gradient of input i (a tensor of input i's shape and dtype,
 * allocated with tg_node_grad_buffer, or with tg_empty on node->tape) or leaves it NULL
 * when tg_node_needs_grad(node, i) is false. It never touches ->grad itself. */
typedef tg_status (*tg_backward_fn)(tg_node *node, tg_tensor *const *dy, tg_tensor **dx);

struct tg_node {
    const char *op; /* name, for messages */
    tg_backward_fn backward;
    tg_tape *tape; /* where backward allocates */
    int n_inputs;
    tg_tensor **inputs;
    int n_outputs;
    tg_tensor **outputs;
    void *ctx;               /* the op's saved parameters (a copy made by tg_record) */
    tg_node *prev;           /* the node recorded before this one */
    uint64_t grads_in_place; /* bit i: input i's gradient was written in place (tg_node_grad_buffer) */
};

/* Where a backward writes input i's gradient: when it is the first gradient to reach an
 * activation (a tensor an op produced) whose gradient is laid out contiguously, the
 * input's own gradient buffer, so the tape has nothing left to add or copy; otherwise a
 * new tensor on node->tape, which the tape adds into the gradient after the backward. The
 * backward must write every element. NULL (error set) for a NULL node, an index that is
 * not one of its inputs, or when out of memory. */
TG_API tg_tensor *tg_node_grad_buffer(tg_node *node, int input_index);

typedef struct {
    const char *op;
    tg_backward_fn backward;
    tg_tensor *const *inputs; /* entries may be NULL (an absent optional input) */
    int n_inputs;
    tg_tensor *const *outputs;
    int n_outputs;
    const void *ctx; /* copied into the tape; may hold tensor pointers */
    size_t ctx_size;
} tg_op_record;

/* Records a node when gradients are enabled and some input requires a gradient, and
 * then marks the outputs as requiring gradients; otherwise does nothing. Refused: a NULL
 * backward, n_outputs < 1, n_inputs < 0, NULL arrays for non-zero counts, ctx NULL with
 * ctx_size > 0, and an output that is not a tensor made on this tape or that an op already
 * produced (an output entry may be NULL: an optional output nobody asked for). The arrays
 * must hold as many entries as the counts say (not checkable). */
TG_API tg_status tg_record(tg_tape *tape, const tg_op_record *record);
/* False (error set) for a NULL node or an index that is not one of its inputs. */
TG_API bool tg_node_needs_grad(const tg_node *node, int input_index);

/* Arena marks, so a failing op can give back what it allocated. tg_tape_rewind refuses (error
 * set, nothing rewound) a mark that was not taken on this tape since its last reset, or one
 * later than the tape's present state. */
typedef struct {
    size_t arena_used;
    size_t n_nodes;
    void *arena_chunk;
    void *device_blocks;
} tg_tape_mark;
TG_API tg_tape_mark tg_tape_get_mark(const tg_tape *tape);
TG_API void tg_tape_rewind(tg_tape *tape, tg_tape_mark mark);

/* Raw bytes from the tape's arena (64-byte aligned, freed by reset); NULL (error set) when
 * they cannot be had. */
TG_API void *tg_tape_alloc(tg_tape *tape, size_t nbytes);

/* ---- trading compute for memory ------------------------------------------------ */

/* Recomputes activations in the backward instead of keeping them through the step. Call it
 * once no later op of the forward reads `tensors` (outputs of ops on this tape, each owning
 * its whole storage): their device memory is given back now (a CPU tensor's bytes stay in
 * the arena, overwritten with NaN, so a read before the recompute stands out), and a node
 * recorded here runs `fn` when the backward reaches it, that is before the backward of any
 * op recorded earlier, the only ones that may read them. fn is called with recording off and
 * returns, through out[i], a tensor equal to tensors[i] (same dtype, device, shape, strides;
 * made by ops on the tape it is given, and nothing else that is large); its bytes become
 * tensors[i]'s until the backward of the op that made tensors[i] is done, when they are
 * given back again. ctx (ctx_size bytes, copied onto the tape) is fn's; tensors it names
 * must outlive the backward. An op reading a released tensor fails with a message that says
 * so. Does nothing when the tape is not recording. At most 8 tensors per call. */
typedef tg_status (*tg_recompute_fn)(tg_tape *tape, const void *ctx, tg_tensor **out);
TG_API tg_status tg_recompute_in_backward(tg_tape *tape, int n, tg_tensor *const *tensors, tg_recompute_fn fn,
                                          const void *ctx, size_t ctx_size);
/* Gives back, for good, activations that no later forward op and no backward reads: an op's
 * output whose consumers' backwards read only other tensors (tg_add_rmsnorm's backward reads
 * the sum, not its two terms). Same rules for `tensors` as above, and the same message for
 * an op that reads one; the caller vouches for the backwards: one that reads a given-back
 * tensor reads NaN on the CPU and no memory at all on CUDA. Works with recording on or off. */
TG_API tg_status tg_give_back(tg_tape *tape, int n, tg_tensor *const *tensors);

#ifdef __cplusplus
}
#endif
#endif
