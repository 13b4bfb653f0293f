/* core/grad.c: the one function that sums gradients into ->grad, and the reduction
 * that undoes broadcasting. */
#include "internal.h"

#ifdef TG_HAVE_CUDA
#include "kernels/cuda_api.h"
#endif

#include <stdlib.h>
#include <string.h>

/* out[...] += in[...] over `shape`, with any strides (0 where `out` is broadcast). */
static void add_strided(char *out, tg_dtype out_dtype, const int64_t *out_strides, const char *in, tg_dtype in_dtype,
                        const int64_t *in_strides, int ndim, const int64_t *shape)
{
    tg_iter it;
    tg_iter_init(&it, ndim, shape, 2, (const int64_t *[]){out_strides, in_strides});
    if (it.empty) return;
    if (out_dtype == TG_F32 && in_dtype == TG_F32 && it.row_stride[0] == 1 && it.row_stride[1] == 1) {
        /* A float sum of two floats is their double sum rounded: the same bits, vectorised. */
        do {
            float *o = (float *)out + it.offset[0];
            const float *i = (const float *)in + it.offset[1];
            for (int64_t j = 0; j < it.row_length; j++) o[j] += i[j];
        } while (tg_iter_next_row(&it));
        return;
    }
    do {
        for (int64_t j = 0; j < it.row_length; j++) {
            int64_t o = it.offset[0] + j * it.row_stride[0];
            double sum = tg_load(out, out_dtype, o) + tg_load(in, in_dtype, it.offset[1] + j * it.row_stride[1]);
            tg_store(out, out_dtype, o, sum);
        }
    } while (tg_iter_next_row(&it));
}

/* The strides of an activation's gradient. When t is dense in another order than the
 * contiguous one, its gradient is laid out like it, so that a producer whose kernels follow
 * its output's layout gets its gradient in that layout (a channel-last conv1d output: the
 * stream kernels, not the tile ones). Other views (slices, broadcasts) get contiguous
 * gradients. */
static void activation_grad_strides(const tg_tensor *t, int64_t *strides)
{
    const size_t stride_bytes = sizeof strides[0] * (size_t)t->ndim;
    tg_dense_strides_like(t, strides);
    if (memcmp(strides, t->strides, stride_bytes) != 0) tg_contiguous_strides(t->ndim, t->shape, strides);
}

bool tg_activation_grad_is_contiguous(const tg_tensor *t)
{
    int64_t strides[TG_MAX_DIMS], contiguous[TG_MAX_DIMS];
    activation_grad_strides(t, strides);
    tg_contiguous_strides(t->ndim, t->shape, contiguous);
    return memcmp(strides, contiguous, sizeof strides[0] * (size_t)t->ndim) == 0;
}

/* A new, unwritten gradient for the activation t, off the tape (the backward frees it as
 * soon as t's producer has used it). */
static tg_tensor *new_activation_grad(const tg_tensor *t)
{
    tg_tensor *grad = tg_tensor_new_uninitialized(t->dtype, t->device, t->ndim, t->shape);
    if (grad) activation_grad_strides(t, grad->strides);
    return grad;
}

tg_tensor *tg_node_grad_buffer(tg_node *node, int input_index)
{
    if (!node || input_index < 0 || input_index >= node->n_inputs || !node->inputs[input_index]) {
        if (!node)
            tg_set_error(TG_ERR_INVALID, "tg_node_grad_buffer: node is NULL");
        else
            tg_set_error(TG_ERR_INVALID, "tg_node_grad_buffer: input_index %d is not an input of %s (it has %d)",
                         input_index, node->op, node->n_inputs);
        return NULL;
    }
    tg_tensor *x = node->inputs[input_index];
    if (x->producer && !x->grad && input_index < 64 && tg_node_needs_grad(node, input_index) &&
        tg_activation_grad_is_contiguous(x)) {
        if ((x->grad = new_activation_grad(x)) && tg_tape_poisons(node->tape))
            tg_device_poison(x->device, x->grad->storage->data, x->grad->storage->nbytes);
        if (!x->grad) {
            tg_set_error(TG_ERR_NOMEM, "tg_node_grad_buffer: out of memory for the gradient of %s's input %d", node->op,
                         input_index);
            return NULL;
        }
        node->grads_in_place |= (uint64_t)1 << input_index;
        return x->grad;
    }
    return tg_empty_like(node->tape, x);
}

tg_status tg_accumulate_grad(tg_tape *tape, tg_tensor *t, const tg_tensor *g)
{
    if (!tg_same_shape(t, g)) {
        const char *names[2] = {"tensor", "gradient"};
        const tg_tensor *tensors[2] = {t, g};
        return tg_error_tensors(TG_ERR_INVALID, 2, names, tensors,
                                "%s backward: gradient shape differs from its tensor",
                                t->producer ? t->producer->op : "leaf");
    }
    if (t->device != g->device) {
        const char *names[2] = {"tensor", "gradient"};
        const tg_tensor *tensors[2] = {t, g};
        return tg_error_tensors(TG_ERR_DEVICE, 2, names, tensors, "%s backward: gradient on another device",
                                t->producer ? t->producer->op : "leaf");
    }
    if (!t->grad && t->producer) {
        /* An activation's first contribution is copied in (rounded once to t's dtype, as
         * 0 + g would be): no zero fill, no read of zeros. */
        if (!(t->grad = new_activation_grad(t))) return TG_ERR_NOMEM;
        tg_status status = tg_copy(t->grad, g);
        if (status != TG_OK) {
            tg_tensor_release(t->grad);
            t->grad = NULL;
        }
        return status;
    }
    if (!t->grad) { /* a leaf's gradient lives on the tape until the reset */
        t->grad = tg_zeros(tape, t->dtype, t->device, t->ndim, t->shape);
        if (!t->grad) return TG_ERR_NOMEM;
    }
    if (t->device != TG_DEVICE_CPU) {
#ifdef TG_HAVE_CUDA
        return tg_cuda_add_into(t->grad, g);
#else
        return tg_error_no_kernel("tg_accumulate_grad", t->device);
#endif
    }
    add_strided(tg_bytes(t->grad), t->grad->dtype, t->grad->strides, tg_bytes(g), g->dtype, g->strides, t->ndim,
                t->shape);
    return TG_OK;
}

tg_tensor *tg_reduce_to_shape(tg_tape *tape, const tg_tensor *g, int ndim, const int64_t *shape)
{
    tg_tensor *out = tg_zeros(tape, g->dtype, g->device, ndim, shape);
    if (!out) return NULL;
    /* Strides of out seen in g's index space: 0 where out is broadcast (missing or 1). */
    int64_t out_strides[TG_MAX_DIMS] = {0};
    int lead = g->ndim - ndim;
    for (int i = 0; i < ndim; i++)
        out_strides[lead + i] = shape[i] == 1 && g->shape[lead + i] != 1 ? 0 : out->strides[i];
    if (g->device != TG_DEVICE_CPU) {
#ifdef TG_HAVE_CUDA
        return tg_cuda_sum_to(out, out_strides, g) == TG_OK ? out : NULL;
#else
        tg_error_no_kernel("tg_reduce_to_shape", g->device);
        return NULL;
#endif
    }
    /* Sum in double, then round once: summing many terms straight into f32 or bf16
     * storage would round after every term. */
    int64_t n = tg_numel(out);
    double *sums = calloc((size_t)(n ? n : 1), sizeof *sums);
    if (!sums) {
        tg_set_error(TG_ERR_NOMEM, "tg_reduce_to_shape: out of memory");
        return NULL;
    }
    add_strided((char *)sums, TG_F64, out_strides, tg_bytes(g), g->dtype, g->strides, g->ndim, g->shape);
    for (int64_t i = 0; i < n; i++) tg_store(tg_bytes(out), out->dtype, i, sums[i]);
    free(sums);
    return out;
}
