/* core/tensor.c: making tensors, describing them, reading and writing elements. */
#include "internal.h"

#ifdef TG_HAVE_CUDA
#include "kernels/cuda_api.h"
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- geometry ---------------------------------------------------------------------- */

/* t is a tensor struct whose geometry can be read (else the error names op; storage aside). */
static bool readable_geometry(const char *op, const char *name, const tg_tensor *t)
{
    if (!t) {
        tg_set_error(TG_ERR_INVALID, "%s: %s is NULL", op, name);
        return false;
    }
    if (t->ndim >= 1 && t->ndim <= TG_MAX_DIMS) return true;
    tg_set_error(TG_ERR_INVALID, "%s: %s is not a valid tensor (ndim %d)", op, name, t->ndim);
    return false;
}

int64_t tg_numel(const tg_tensor *t)
{
    if (!readable_geometry("tg_numel", "t", t)) return 0;
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i]; /* checked when the tensor was made */
    return n;
}

bool tg_is_contiguous(const tg_tensor *t)
{
    if (!readable_geometry("tg_is_contiguous", "t", t)) return false;
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] == 0) return true; /* no element to be out of place (tg_empty's strides) */
    int64_t expected = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->strides[i] != expected) return false;
        expected *= t->shape[i];
    }
    return true;
}

bool tg_same_shape(const tg_tensor *a, const tg_tensor *b)
{
    if (!readable_geometry("tg_same_shape", "a", a) || !readable_geometry("tg_same_shape", "b", b)) return false;
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

char *tg_describe(const tg_tensor *t, char *buf, size_t size)
{
    if (!buf || size == 0) {
        tg_set_error(TG_ERR_INVALID, "tg_describe: buf is %s and size %zu; it needs room for the text",
                     buf ? "given" : "NULL", size);
        return NULL;
    }
    if (!t) {
        snprintf(buf, size, "NULL");
        return buf;
    }
    char shape[128];
    int ndim = t->ndim < 0 ? 0 : t->ndim > TG_MAX_DIMS ? TG_MAX_DIMS : t->ndim;
    snprintf(buf, size, "%s %s %s%s", tg_shape_str(ndim, t->shape, shape, sizeof shape), tg_dtype_name(t->dtype),
             tg_device_name(t->device), t->storage && !tg_is_contiguous(t) ? " strided" : "");
    return buf;
}

/* ---- making tensors ------------------------------------------------------------------ */

/* Validates a creation request; on success *nbytes holds the byte size. */
static bool check_new(const char *op, tg_dtype dtype, tg_device device, int ndim, const int64_t *shape, size_t *nbytes)
{
    if (!tg_dtype_size(dtype)) {
        tg_set_error(TG_ERR_DTYPE, "%s: dtype %d does not exist", op, (int)dtype);
        return false;
    }
    if (device != TG_DEVICE_CPU && device != TG_DEVICE_CUDA && device != TG_DEVICE_AUTO) {
        tg_set_error(TG_ERR_DEVICE, "%s: device %d does not exist", op, (int)device);
        return false;
    }
    if (ndim < 1 || ndim > TG_MAX_DIMS) {
        tg_set_error(TG_ERR_INVALID, "%s: ndim must be 1..%d (got %d)", op, TG_MAX_DIMS, ndim);
        return false;
    }
    if (!shape) {
        tg_set_error(TG_ERR_INVALID, "%s: shape is NULL", op);
        return false;
    }
    char text[128];
    int64_t numel, bytes;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) {
            tg_set_error(TG_ERR_INVALID, "%s: negative dimension in shape %s", op,
                         tg_shape_str(ndim, shape, text, sizeof text));
            return false;
        }
    }
    if (!tg_shape_numel(ndim, shape, &numel) || tg_mul_overflows(numel, (int64_t)tg_dtype_size(dtype), &bytes) ||
        (uint64_t)bytes > SIZE_MAX / 2) {
        tg_set_error(TG_ERR_OVERFLOW, "%s: shape %s %s is too large (size overflows)", op,
                     tg_shape_str(ndim, shape, text, sizeof text), tg_dtype_name(dtype));
        return false;
    }
    device = tg_device_resolve(device);
    if (!tg_device_has_tensors(device)) {
        tg_set_error(TG_ERR_DEVICE, "%s: %s tensors are not supported by this build (CPU only)", op,
                     tg_device_name(device));
        return false;
    }
    *nbytes = (size_t)bytes;
    return true;
}

static void init_tensor(tg_tensor *t, tg_storage *storage, tg_dtype dtype, int ndim, const int64_t *shape)
{
    memset(t, 0, sizeof *t);
    t->dtype = dtype;
    t->device = storage->device;
    t->ndim = ndim;
    memcpy(t->shape, shape, sizeof(int64_t) * (size_t)ndim);
    tg_contiguous_strides(ndim, shape, t->strides);
    t->storage = storage;
}

/* tg_empty, with messages that name op. */
static tg_tensor *empty_on_tape(const char *op, tg_tape *tape, tg_dtype dtype, tg_device device, int ndim,
                                const int64_t *shape)
{
    size_t nbytes;
    if (!tg_check_tape(op, tape) || !check_new(op, dtype, device, ndim, shape, &nbytes)) return NULL;
    device = tg_device_resolve(device);
    tg_tape_mark mark = tg_tape_get_mark(tape);
    tg_tensor *t = tg_tape_alloc(tape, sizeof *t);
    tg_storage *storage = tg_tape_alloc(tape, sizeof *storage);
    void *data = device == TG_DEVICE_CPU ? tg_tape_alloc(tape, nbytes) : tg_tape_alloc_device(tape, device, nbytes);
    if (!t || !storage || !data) {
        tg_tape_rewind(tape, mark);
        tg_set_error(TG_ERR_NOMEM, "%s: out of %s memory for %zu bytes", op, tg_device_name(device), nbytes);
        return NULL;
    }
    if (tg_tape_poisons(tape) && tg_device_poison(device, data, nbytes) != TG_OK) {
        tg_tape_rewind(tape, mark);
        return NULL;
    }
    *storage = (tg_storage){data, nbytes, device, TG_STORAGE_ARENA};
    init_tensor(t, storage, dtype, ndim, shape);
    t->tape = tape;
    return t;
}

tg_tensor *tg_empty(tg_tape *tape, tg_dtype dtype, tg_device device, int ndim, const int64_t *shape)
{
    return empty_on_tape("tg_empty", tape, dtype, device, ndim, shape);
}

/* tg_zeros, with messages that name op. */
static tg_tensor *zeros_on_tape(const char *op, tg_tape *tape, tg_dtype dtype, tg_device device, int ndim,
                                const int64_t *shape)
{
    tg_tape_mark mark;
    if (tape) mark = tg_tape_get_mark(tape);
    tg_tensor *t = empty_on_tape(op, tape, dtype, device, ndim, shape);
    if (t && tg_device_zero(t->device, t->storage->data, t->storage->nbytes) != TG_OK) {
        tg_tape_rewind(tape, mark);
        return NULL;
    }
    return t;
}

tg_tensor *tg_zeros(tg_tape *tape, tg_dtype dtype, tg_device device, int ndim, const int64_t *shape)
{
    return zeros_on_tape("tg_zeros", tape, dtype, device, ndim, shape);
}

/* A value that can be stored into a tensor of dtype: any value for the float dtypes; for
 * i32, a finite value in the i32 range (it is then truncated toward zero). */
static bool value_fits(tg_dtype dtype, double value)
{
    return dtype != TG_I32 || (value > (double)INT32_MIN - 1.0 && value < (double)INT32_MAX + 1.0);
}

static bool check_value(const char *op, tg_dtype dtype, double value)
{
    if (value_fits(dtype, value)) return true;
    tg_set_error(TG_ERR_INVALID, "%s: value %g does not fit in %s", op, value, tg_dtype_name(dtype));
    return false;
}

tg_tensor *tg_full(tg_tape *tape, tg_dtype dtype, tg_device device, int ndim, const int64_t *shape, double value)
{
    const char *op = "tg_full";
    if (tg_dtype_size(dtype) && !check_value(op, dtype, value)) return NULL;
    tg_tape_mark mark;
    if (tape) mark = tg_tape_get_mark(tape);
    tg_tensor *t = empty_on_tape(op, tape, dtype, device, ndim, shape);
    if (t && tg_fill(t, value) != TG_OK) {
        tg_tape_rewind(tape, mark);
        return NULL;
    }
    return t;
}

tg_tensor *tg_from_data(tg_tape *tape, tg_dtype dtype, tg_device device, int ndim, const int64_t *shape,
                        const void *data)
{
    const char *op = "tg_from_data";
    if (!tg_check_tape(op, tape)) return NULL;
    if (!data) {
        tg_set_error(TG_ERR_INVALID, "%s: data is NULL", op);
        return NULL;
    }
    tg_tape_mark mark = tg_tape_get_mark(tape);
    tg_tensor *t = empty_on_tape(op, tape, dtype, device, ndim, shape);
    if (t && tg_copy_from_host(t, data, dtype) != TG_OK) {
        tg_tape_rewind(tape, mark);
        return NULL;
    }
    return t;
}

tg_tensor *tg_empty_like(tg_tape *tape, const tg_tensor *x)
{
    const char *op = "tg_empty_like";
    if (!tg_check_tape(op, tape) || !tg_check_tensor(op, "x", x)) return NULL;
    return empty_on_tape(op, tape, x->dtype, x->device, x->ndim, x->shape);
}

tg_tensor *tg_zeros_like(tg_tape *tape, const tg_tensor *x)
{
    const char *op = "tg_zeros_like";
    if (!tg_check_tape(op, tape) || !tg_check_tensor(op, "x", x)) return NULL;
    return zeros_on_tape(op, tape, x->dtype, x->device, x->ndim, x->shape);
}

tg_tensor *tg_empty_as(tg_tape *tape, const tg_tensor *x, tg_dtype dtype)
{
    return tg_empty(tape, dtype, x->device, x->ndim, x->shape);
}

void tg_dense_strides_like(const tg_tensor *x, int64_t *strides)
{
    /* Order x's dimensions from the largest stride to the smallest (stable), then lay
     * the new tensor out densely in that order. */
    int order[TG_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) order[i] = i;
    for (int i = 1; i < x->ndim; i++)
        for (int j = i; j > 0 && x->strides[order[j]] > x->strides[order[j - 1]]; j--) {
            int swap = order[j];
            order[j] = order[j - 1];
            order[j - 1] = swap;
        }
    int64_t stride = 1;
    for (int k = x->ndim - 1; k >= 0; k--) {
        strides[order[k]] = stride;
        stride *= x->shape[order[k]] > 0 ? x->shape[order[k]] : 1;
    }
}

tg_tensor *tg_empty_same_layout(tg_tape *tape, const tg_tensor *x)
{
    tg_tensor *t = tg_empty_like(tape, x);
    if (t) tg_dense_strides_like(x, t->strides);
    return t;
}

tg_tensor *tg_view(tg_tape *tape, const tg_tensor *base, int ndim, const int64_t *shape, const int64_t *strides,
                   int64_t offset)
{
    tg_tensor *t = tg_tape_alloc(tape, sizeof *t);
    if (!t) {
        tg_set_error(TG_ERR_NOMEM, "tg_view: out of memory");
        return NULL;
    }
    memset(t, 0, sizeof *t);
    t->dtype = base->dtype;
    t->device = base->device;
    t->ndim = ndim;
    memcpy(t->shape, shape, sizeof(int64_t) * (size_t)ndim);
    memcpy(t->strides, strides, sizeof(int64_t) * (size_t)ndim);
    t->offset = offset;
    t->storage = base->storage;
    t->tape = tape;
    return t;
}

/* A heap tensor whose bytes are zeroed when `zero`, else left as the allocator gives them. */
static tg_tensor *new_heap_tensor(const char *op, tg_dtype dtype, tg_device device, int ndim, const int64_t *shape,
                                  bool zero)
{
    size_t nbytes;
    if (!check_new(op, dtype, device, ndim, shape, &nbytes)) return NULL;
    device = tg_device_resolve(device);
    tg_tensor *t = calloc(1, sizeof *t);
    tg_storage *storage = calloc(1, sizeof *storage);
    void *data = NULL;
    if (!t || !storage || tg_device_alloc(device, nbytes, &data) != TG_OK ||
        (zero && tg_device_zero(device, data, nbytes) != TG_OK)) {
        free(t);
        free(storage);
        tg_device_free(device, data, nbytes);
        tg_set_error(TG_ERR_NOMEM, "%s: out of %s memory for %zu bytes", op, tg_device_name(device), nbytes);
        return NULL;
    }
    *storage = (tg_storage){data, nbytes, device, TG_STORAGE_HEAP};
    init_tensor(t, storage, dtype, ndim, shape);
    return t;
}

tg_tensor *tg_tensor_new(tg_dtype dtype, tg_device device, int ndim, const int64_t *shape)
{
    return new_heap_tensor("tg_tensor_new", dtype, device, ndim, shape, true);
}

tg_tensor *tg_tensor_new_uninitialized(tg_dtype dtype, tg_device device, int ndim, const int64_t *shape)
{
    return new_heap_tensor("tg_tensor_new", dtype, device, ndim, shape, false);
}

void tg_tensor_release(tg_tensor *t)
{
    if (!t || t->tape || !t->storage || t->storage->kind != TG_STORAGE_HEAP) return;
    tg_tensor *grad = t->grad;
    tg_device_free(t->device, t->storage->data, t->storage->nbytes);
    free(t->storage);
    free(t);
    if (grad) tg_tensor_release(grad);
}

void tg_tensor_free(tg_tensor *t)
{
    if (!t) return;
    if (t->tape || !t->storage || t->storage->kind != TG_STORAGE_HEAP) {
        tg_set_error(TG_ERR_INVALID,
                     "tg_tensor_free: t is not a tensor from tg_tensor_new (it is %s); nothing was freed",
                     t->tape                                               ? "a tape's, freed by tg_tape_reset"
                     : t->storage && t->storage->kind == TG_STORAGE_PARAMS ? "a parameter, freed with its store"
                                                                           : "not a valid tensor");
        return;
    }
    tg_tensor_release(t);
}

/* ---- gradients of leaves ----------------------------------------------------------------- */

tg_status tg_set_requires_grad(tg_tensor *t, bool requires_grad)
{
    if (!tg_check_tensor("tg_set_requires_grad", "t", t)) return tg_last_status();
    if (t->producer) {
        const char *name = "t";
        const tg_tensor *tensor = t;
        return tg_error_tensors(TG_ERR_STATE, 1, &name, &tensor,
                                "tg_set_requires_grad: t was made by an op; only leaves can be marked");
    }
    if (!requires_grad && t->storage->kind == TG_STORAGE_PARAMS) {
        const char *name = "t";
        const tg_tensor *tensor = t;
        return tg_error_tensors(TG_ERR_STATE, 1, &name, &tensor,
                                "tg_set_requires_grad: t is a parameter, and parameters always require gradients");
    }
    if (requires_grad && !tg_dtype_is_float(t->dtype)) {
        const char *name = "t";
        const tg_tensor *tensor = t;
        return tg_error_tensors(TG_ERR_DTYPE, 1, &name, &tensor,
                                "tg_set_requires_grad: only float tensors can have gradients");
    }
    if (requires_grad && !t->grad) {
        /* The gradient lives with its tensor: on the same tape, or on the heap. */
        t->grad = t->tape ? tg_zeros(t->tape, t->dtype, t->device, t->ndim, t->shape)
                          : tg_tensor_new(t->dtype, t->device, t->ndim, t->shape);
        if (!t->grad) return TG_ERR_NOMEM;
    }
    t->requires_grad = requires_grad;
    return TG_OK;
}

tg_status tg_zero_grad(tg_tensor *t)
{
    if (!tg_check_tensor("tg_zero_grad", "t", t)) return tg_last_status();
    return t->grad ? tg_fill(t->grad, 0.0) : TG_OK;
}

/* ---- element access ------------------------------------------------------------------------ */

void *tg_data(const tg_tensor *t)
{
    if (!tg_check_tensor("tg_data", "t", t)) return NULL;
    if (t->device != TG_DEVICE_CPU) {
        tg_set_error(TG_ERR_DEVICE, "tg_data: the tensor is on %s; copy it to the host first",
                     tg_device_name(t->device));
        return NULL;
    }
    return tg_bytes(t);
}

static int64_t offset_of_flat(const tg_tensor *t, int64_t flat)
{
    int64_t offset = 0;
    for (int i = t->ndim - 1; i >= 0; i--) {
        int64_t n = t->shape[i] ? t->shape[i] : 1;
        offset += (flat % n) * t->strides[i];
        flat /= n;
    }
    return offset;
}

static int64_t offset_of_index(const tg_tensor *t, const int64_t *index)
{
    int64_t offset = 0;
    for (int i = 0; i < t->ndim; i++) offset += index[i] * t->strides[i];
    return offset;
}

/* One element, wherever it lives (a device element costs a copy: fine for tests, losses
 * and checks, not for loops over a tensor). */
static double load_element(const tg_tensor *t, int64_t offset)
{
    if (t->device == TG_DEVICE_CPU) return tg_load(tg_bytes(t), t->dtype, offset);
    unsigned char bytes[8] = {0};
    size_t size = tg_dtype_size(t->dtype);
    if (tg_device_memcpy(bytes, tg_bytes(t) + offset * (int64_t)size, size, TG_COPY_DEVICE_TO_HOST) != TG_OK)
        return NAN;
    return tg_load(bytes, t->dtype, 0);
}

static void store_element(tg_tensor *t, int64_t offset, double value)
{
    if (t->device == TG_DEVICE_CPU) {
        tg_store(tg_bytes(t), t->dtype, offset, value);
        return;
    }
    unsigned char bytes[8];
    size_t size = tg_dtype_size(t->dtype);
    tg_store(bytes, t->dtype, 0, value);
    tg_device_memcpy(tg_bytes(t) + offset * (int64_t)size, bytes, size, TG_COPY_HOST_TO_DEVICE);
}

/* t is a tensor and flat indexes one of its elements; else the error names op. */
static bool check_flat(const char *op, const tg_tensor *t, int64_t flat)
{
    if (!tg_check_tensor(op, "t", t)) return false;
    if (flat >= 0 && flat < tg_numel(t)) return true;
    const char *name = "t";
    tg_error_tensors(TG_ERR_INVALID, 1, &name, &t, "%s: flat_index %lld is outside [0, %lld)", op, (long long)flat,
                     (long long)tg_numel(t));
    return false;
}

/* t is a tensor and index (ndim entries) names one of its elements; else the error names op. */
static bool check_index(const char *op, const tg_tensor *t, const int64_t *index)
{
    if (!tg_check_tensor(op, "t", t)) return false;
    if (!index) {
        tg_set_error(TG_ERR_INVALID, "%s: index is NULL", op);
        return false;
    }
    for (int i = 0; i < t->ndim; i++) {
        if (index[i] >= 0 && index[i] < t->shape[i]) continue;
        const char *name = "t";
        tg_error_tensors(TG_ERR_INVALID, 1, &name, &t, "%s: index[%d] = %lld is outside [0, %lld)", op, i,
                         (long long)index[i], (long long)t->shape[i]);
        return false;
    }
    return true;
}

double tg_get(const tg_tensor *t, const int64_t *index)
{
    return check_index("tg_get", t, index) ? load_element(t, offset_of_index(t, index)) : NAN;
}

void tg_set(tg_tensor *t, const int64_t *index, double value)
{
    if (check_index("tg_set", t, index) && check_value("tg_set", t->dtype, value))
        store_element(t, offset_of_index(t, index), value);
}

double tg_get_flat(const tg_tensor *t, int64_t flat_index)
{
    return check_flat("tg_get_flat", t, flat_index) ? load_element(t, offset_of_flat(t, flat_index)) : NAN;
}

void tg_set_flat(tg_tensor *t, int64_t flat_index, double value)
{
    if (check_flat("tg_set_flat", t, flat_index) && check_value("tg_set_flat", t->dtype, value))
        store_element(t, offset_of_flat(t, flat_index), value);
}

double tg_item(const tg_tensor *t)
{
    if (!tg_check_tensor("tg_item", "t", t)) return NAN;
    if (tg_numel(t) != 1) {
        const char *name = "t";
        tg_error_tensors(TG_ERR_INVALID, 1, &name, &t, "tg_item: t must have exactly one element, not %lld",
                         (long long)tg_numel(t));
        return NAN;
    }
    return load_element(t, offset_of_flat(t, 0));
}

/* ---- copies ---------------------------------------------------------------------------------- */

/* Copies between two strided element sequences of the same shape, in host memory,
 * converting dtypes. */
static void copy_strided(void *dst, tg_dtype dst_dtype, const int64_t *dst_strides, const void *src, tg_dtype src_dtype,
                         const int64_t *src_strides, int ndim, const int64_t *shape)
{
    tg_iter it;
    tg_iter_init(&it, ndim, shape, 2, (const int64_t *[]){dst_strides, src_strides});
    if (it.empty) return;
    if (dst_dtype == src_dtype && it.row_stride[0] == 1 && it.row_stride[1] == 1) {
        size_t size = tg_dtype_size(dst_dtype);
        do
            memcpy((char *)dst + it.offset[0] * (int64_t)size, (const char *)src + it.offset[1] * (int64_t)size,
                   (size_t)it.row_length * size);
        while (tg_iter_next_row(&it));
        return;
    }
    do {
        for (int64_t j = 0; j < it.row_length; j++)
            tg_store(dst, dst_dtype, it.offset[0] + j * it.row_stride[0],
                     tg_load(src, src_dtype, it.offset[1] + j * it.row_stride[1]));
    } while (tg_iter_next_row(&it));
}

/* A contiguous tensor of `like`'s shape over raw memory: staging for copies that cross
 * between host and device. */
static tg_tensor staging_view(tg_storage *storage, void *data, tg_dtype dtype, tg_device device, const tg_tensor *like)
{
    *storage = (tg_storage){data, (size_t)tg_numel(like) * tg_dtype_size(dtype), device, TG_STORAGE_HEAP};
    tg_tensor t = {.dtype = dtype, .device = device, .ndim = like->ndim, .storage = storage};
    memcpy(t.shape, like->shape, sizeof t.shape);
    tg_contiguous_strides(like->ndim, like->shape, t.strides);
    return t;
}

/* dst (on the device) ← contiguous host values of host_dtype: to the device as they are,
 * then one device copy into dst's layout and dtype. */
/* tg_copy keeps floats and i32 apart, so a copy between the two converts on the host. */
static bool crosses_kinds(tg_dtype a, tg_dtype b) { return tg_dtype_is_float(a) != tg_dtype_is_float(b); }

static tg_status host_to_device(tg_tensor *dst, const void *host, tg_dtype host_dtype)
{
    if (crosses_kinds(host_dtype, dst->dtype)) { /* the host values in dst's dtype first */
        int64_t strides[TG_MAX_DIMS];
        tg_contiguous_strides(dst->ndim, dst->shape, strides);
        const size_t converted_bytes = (size_t)tg_numel(dst) * tg_dtype_size(dst->dtype);
        void *converted = malloc(converted_bytes ? converted_bytes : 1);
        if (!converted) return tg_set_error(TG_ERR_NOMEM, "tg_copy_from_host: out of host memory");
        copy_strided(converted, dst->dtype, strides, host, host_dtype, strides, dst->ndim, dst->shape);
        tg_status status = host_to_device(dst, converted, dst->dtype);
        free(converted);
        return status;
    }
    size_t bytes = (size_t)tg_numel(dst) * tg_dtype_size(host_dtype);
    if (host_dtype == dst->dtype && tg_is_contiguous(dst))
        return tg_device_memcpy(tg_bytes(dst), host, bytes, TG_COPY_HOST_TO_DEVICE);
    void *buffer;
    tg_status status = tg_device_alloc(dst->device, bytes, &buffer);
    if (status != TG_OK) return status;
    tg_storage storage;
    tg_tensor staged = staging_view(&storage, buffer, host_dtype, dst->device, dst);
    status = tg_device_memcpy(buffer, host, bytes, TG_COPY_HOST_TO_DEVICE);
    if (status == TG_OK) status = tg_copy(dst, &staged);
    tg_device_free(dst->device, buffer, bytes);
    return status;
}

/* Contiguous host values of host_dtype ← src (on the device). */
static tg_status device_to_host(void *host, tg_dtype host_dtype, const tg_tensor *src)
{
    if (crosses_kinds(host_dtype, src->dtype)) { /* src's own values first, converted on the host */
        int64_t strides[TG_MAX_DIMS];
        tg_contiguous_strides(src->ndim, src->shape, strides);
        const size_t staged_bytes = (size_t)tg_numel(src) * tg_dtype_size(src->dtype);
        void *staged = malloc(staged_bytes ? staged_bytes : 1);
        if (!staged) return tg_set_error(TG_ERR_NOMEM, "tg_copy_to_host: out of host memory");
        tg_status status = device_to_host(staged, src->dtype, src);
        if (status == TG_OK)
            copy_strided(host, host_dtype, strides, staged, src->dtype, strides, src->ndim, src->shape);
        free(staged);
        return status;
    }
    size_t bytes = (size_t)tg_numel(src) * tg_dtype_size(host_dtype);
    if (host_dtype == src->dtype && tg_is_contiguous(src))
        return tg_device_memcpy(host, tg_bytes(src), bytes, TG_COPY_DEVICE_TO_HOST);
    void *buffer;
    tg_status status = tg_device_alloc(src->device, bytes, &buffer);
    if (status != TG_OK) return status;
    tg_storage storage;
    tg_tensor staged = staging_view(&storage, buffer, host_dtype, src->device, src);
    status = tg_copy(&staged, src);
    if (status == TG_OK) status = tg_device_memcpy(host, buffer, bytes, TG_COPY_DEVICE_TO_HOST);
    tg_device_free(src->device, buffer, bytes);
    return status;
}

/* Whether every value of a strided float sequence fits the i32 it is copied into (always true
 * when to is not i32 or from is not float); else the error names op, the argument and the value. */
static bool values_fit(const char *op, const char *name, const void *values, tg_dtype from, const int64_t *strides,
                       int ndim, const int64_t *shape, tg_dtype to)
{
    if (to != TG_I32 || !tg_dtype_is_float(from)) return true;
    tg_iter it;
    tg_iter_init(&it, ndim, shape, 1, (const int64_t *[]){strides});
    if (it.empty) return true;
    do {
        for (int64_t j = 0; j < it.row_length; j++) {
            double v = tg_load(values, from, it.offset[0] + j * it.row_stride[0]);
            if (value_fits(TG_I32, v)) continue;
            tg_set_error(TG_ERR_INVALID, "%s: %s holds %g, which does not fit in i32; nothing was copied", op, name, v);
            return false;
        }
    } while (tg_iter_next_row(&it));
    return true;
}

/* Host i32 ← float values on the device: staged on the host in their own dtype, so that every
 * value is checked before any is converted. */
static tg_status device_floats_to_host_ids(const char *op, const tg_tensor *t, int32_t *host)
{
    int64_t n = tg_numel(t);
    size_t bytes = (size_t)n * tg_dtype_size(t->dtype);
    void *staged = malloc(bytes ? bytes : 1);
    if (!staged) return tg_set_error(TG_ERR_NOMEM, "%s: out of host memory for %zu bytes", op, bytes);
    int64_t strides[TG_MAX_DIMS];
    tg_contiguous_strides(t->ndim, t->shape, strides);
    tg_status status = device_to_host(staged, t->dtype, t);
    if (status == TG_OK && !values_fit(op, "t", staged, t->dtype, strides, t->ndim, t->shape, TG_I32))
        status = TG_ERR_INVALID;
    for (int64_t i = 0; status == TG_OK && i < n; i++) host[i] = (int32_t)tg_load(staged, t->dtype, i);
    free(staged);
    return status;
}

static bool check_host_copy(const char *op, const tg_tensor *t, const void *host, tg_dtype host_dtype)
{
    if (!tg_check_tensor(op, "t", t)) return false;
    if (!host) {
        tg_set_error(TG_ERR_INVALID, "%s: host is NULL", op);
        return false;
    }
    if (!tg_dtype_size(host_dtype)) {
        tg_set_error(TG_ERR_DTYPE, "%s: host_dtype %d does not exist", op, (int)host_dtype);
        return false;
    }
    return true;
}

tg_status tg_copy_from_host(tg_tensor *t, const void *host, tg_dtype host_dtype)
{
    const char *op = "tg_copy_from_host";
    if (!check_host_copy(op, t, host, host_dtype)) return tg_last_status();
    int64_t strides[TG_MAX_DIMS];
    tg_contiguous_strides(t->ndim, t->shape, strides);
    if (!values_fit(op, "host", host, host_dtype, strides, t->ndim, t->shape, t->dtype)) return tg_last_status();
    if (t->device != TG_DEVICE_CPU) return host_to_device(t, host, host_dtype);
    copy_strided(tg_bytes(t), t->dtype, t->strides, host, host_dtype, strides, t->ndim, t->shape);
    return TG_OK;
}

tg_status tg_copy_to_host(const tg_tensor *t, void *host, tg_dtype host_dtype)
{
    const char *op = "tg_copy_to_host";
    if (!check_host_copy(op, t, host, host_dtype)) return tg_last_status();
    int64_t strides[TG_MAX_DIMS];
    tg_contiguous_strides(t->ndim, t->shape, strides);
    if (t->device != TG_DEVICE_CPU) {
        if (host_dtype != TG_I32 || !tg_dtype_is_float(t->dtype)) return device_to_host(host, host_dtype, t);
        return device_floats_to_host_ids(op, t, host);
    }
    if (!values_fit(op, "t", tg_bytes(t), t->dtype, t->strides, t->ndim, t->shape, host_dtype)) return tg_last_status();
    copy_strided(host, host_dtype, strides, tg_bytes(t), t->dtype, t->strides, t->ndim, t->shape);
    return TG_OK;
}

/* A host tensor's values as a contiguous host buffer of its own dtype (itself when it
 * already is contiguous; else *owned is a malloc'd copy to free). */
static const void *contiguous_host_values(const tg_tensor *t, void **owned)
{
    *owned = NULL;
    if (tg_is_contiguous(t)) return tg_bytes(t);
    size_t bytes = (size_t)tg_numel(t) * tg_dtype_size(t->dtype);
    if (!(*owned = malloc(bytes ? bytes : 1))) return NULL;
    tg_copy_to_host(t, *owned, t->dtype);
    return *owned;
}

tg_status tg_copy(tg_tensor *dst, const tg_tensor *src)
{
    if (!tg_check_tensor("tg_copy", "dst", dst) || !tg_check_tensor("tg_copy", "src", src)) return tg_last_status();
    const char *names[2] = {"dst", "src"};
    const tg_tensor *tensors[2] = {dst, src};
    if (!tg_same_shape(dst, src))
        return tg_error_tensors(TG_ERR_INVALID, 2, names, tensors, "tg_copy: dst and src shapes differ");
    if (tg_dtype_is_float(dst->dtype) != tg_dtype_is_float(src->dtype))
        return tg_error_tensors(
            TG_ERR_DTYPE, 2, names, tensors,
            "tg_copy: dst and src must both be float, or both i32 (use tg_copy_to_host to convert)");
    if (dst->device == TG_DEVICE_CPU && src->device == TG_DEVICE_CPU) {
        copy_strided(tg_bytes(dst), dst->dtype, dst->strides, tg_bytes(src), src->dtype, src->strides, dst->ndim,
                     dst->shape);
        return TG_OK;
    }
    if (dst->device == TG_DEVICE_CPU) { /* device → host: through the host in dst's dtype */
        void *owned = NULL, *values = NULL;
        tg_status status = TG_ERR_NOMEM;
        size_t bytes = (size_t)tg_numel(dst) * tg_dtype_size(dst->dtype);
        if ((values = malloc(bytes ? bytes : 1)) && (status = tg_copy_to_host(src, values, dst->dtype)) == TG_OK)
            status = tg_copy_from_host(dst, values, dst->dtype);
        free(values);
        free(owned);
        return status;
    }
    if (src->device == TG_DEVICE_CPU) { /* host → device */
        void *owned;
        const void *values = contiguous_host_values(src, &owned);
        tg_status status = values ? tg_copy_from_host(dst, values, src->dtype)
                                  : tg_set_error(TG_ERR_NOMEM, "tg_copy: out of host memory");
        free(owned);
        return status;
    }
#ifdef TG_HAVE_CUDA
    return tg_cuda_copy(dst, src);
#else
    return tg_error_no_kernel("tg_copy", dst->device);
#endif
}

tg_status tg_fill(tg_tensor *t, double value)
{
    if (!tg_check_tensor("tg_fill", "t", t)) return tg_last_status();
    if (!check_value("tg_fill", t->dtype, value)) return tg_last_status();
    if (t->device != TG_DEVICE_CPU) {
#ifdef TG_HAVE_CUDA
        return tg_cuda_fill(t, value);
#else
        return tg_error_no_kernel("tg_fill", t->device);
#endif
    }
    tg_iter it;
    tg_iter_init(&it, t->ndim, t->shape, 1, (const int64_t *[]){t->strides});
    if (it.empty) return TG_OK;
    char *base = tg_bytes(t);
    do {
        for (int64_t j = 0; j < it.row_length; j++)
            tg_store(base, t->dtype, it.offset[0] + j * it.row_stride[0], value);
    } while (tg_iter_next_row(&it));
    return TG_OK;
}
