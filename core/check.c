/* core/check.c: argument checks shared by every op. Each sets a message that names
 * the op and the tensors, and returns false. */
#include "internal.h"

#include <stdio.h>

bool tg_check_tape(const char *op, const tg_tape *tape)
{
    if (tape) return true;
    tg_set_error(TG_ERR_INVALID, "%s: tape is NULL", op);
    return false;
}

bool tg_check_device_value(const char *op, tg_device device)
{
    if (device == TG_DEVICE_CPU || device == TG_DEVICE_CUDA || device == TG_DEVICE_AUTO) return true;
    tg_set_error(TG_ERR_DEVICE, "%s: device %d does not exist", op, (int)device);
    return false;
}

bool tg_check_tensor(const char *op, const char *name, const tg_tensor *t)
{
    if (!t) {
        /* Usually an earlier op failed and its NULL was passed on: keep its message. */
        char earlier[512];
        snprintf(earlier, sizeof earlier, "%s", tg_last_error());
        if (earlier[0])
            tg_set_error(TG_ERR_INVALID, "%s: %s is NULL (the last error before it: %s)", op, name, earlier);
        else
            tg_set_error(TG_ERR_INVALID, "%s: %s is NULL", op, name);
        return false;
    }
    if (!t->storage || t->ndim < 1 || t->ndim > TG_MAX_DIMS || !tg_dtype_size(t->dtype)) {
        tg_set_error(TG_ERR_INVALID, "%s: %s is not a valid tensor (ndim %d)", op, name, t->ndim);
        return false;
    }
    if (t->device != t->storage->device) { /* a hand-edited struct: never run a kernel on it */
        tg_error_tensors(TG_ERR_DEVICE, 1, &name, &t, "%s: %s claims to be on %s, but its memory is on the %s device",
                         op, name, tg_device_name(t->device), tg_device_name(t->storage->device));
        return false;
    }
    if (t->storage->state == TG_DATA_RELEASED) {
        tg_error_tensors(TG_ERR_STATE, 1, &name, &t,
                         "%s: %s was released to be recomputed in the backward (tg_recompute_in_backward); "
                         "nothing may read it before the backward recomputes it",
                         op, name);
        return false;
    }
    return true;
}

bool tg_check_float(const char *op, const char *name, const tg_tensor *t)
{
    if (!tg_check_tensor(op, name, t)) return false;
    if (tg_dtype_is_float(t->dtype)) return true;
    tg_error_tensors(TG_ERR_DTYPE, 1, &name, &t, "%s: %s must be a float tensor (f32, f64, bf16 or f16)", op, name);
    return false;
}

bool tg_check_same_kind(const char *op, const char *name_a, const tg_tensor *a, const char *name_b, const tg_tensor *b)
{
    const char *names[2] = {name_a, name_b};
    const tg_tensor *tensors[2] = {a, b};
    if (a->dtype != b->dtype) {
        tg_error_tensors(TG_ERR_DTYPE, 2, names, tensors, "%s: %s and %s have different dtypes", op, name_a, name_b);
        return false;
    }
    if (a->device != b->device) {
        tg_error_tensors(TG_ERR_DEVICE, 2, names, tensors, "%s: %s and %s are on different devices", op, name_a,
                         name_b);
        return false;
    }
    return true;
}

bool tg_check_ndim(const char *op, const char *name, const tg_tensor *t, int ndim)
{
    if (t->ndim == ndim) return true;
    tg_error_tensors(TG_ERR_INVALID, 1, &name, &t, "%s: %s must have %d dimensions, not %d", op, name, ndim, t->ndim);
    return false;
}

bool tg_device_has_tensors(tg_device device)
{
    return device == TG_DEVICE_CPU || (device == TG_DEVICE_CUDA && tg_device_available(TG_DEVICE_CUDA));
}

bool tg_check_device_usable(const char *op, const char *name, const tg_tensor *t)
{
    if (tg_device_has_tensors(t->device)) return true;
    tg_error_tensors(TG_ERR_DEVICE, 1, &name, &t, "%s: %s is on %s, which this build cannot compute on", op, name,
                     tg_device_name(t->device));
    return false;
}

bool tg_check_axis(const char *op, const tg_tensor *t, int *axis)
{
    int a = *axis < 0 ? *axis + t->ndim : *axis;
    if (a >= 0 && a < t->ndim) {
        *axis = a;
        return true;
    }
    const char *name = "x";
    tg_error_tensors(TG_ERR_INVALID, 1, &name, &t, "%s: axis %d is out of range for %d dimensions", op, *axis, t->ndim);
    return false;
}

bool tg_mul_overflows(int64_t a, int64_t b, int64_t *out) { return __builtin_mul_overflow(a, b, out); }

bool tg_shape_numel(int ndim, const int64_t *shape, int64_t *out)
{
    /* The product with zeros counted as ones must fit too: it is the largest contiguous
     * stride, which a zero-element tensor has as well. */
    int64_t n = 1, strides_product = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || tg_mul_overflows(strides_product, shape[i] ? shape[i] : 1, &strides_product)) return false;
        n *= shape[i]; /* at most strides_product in size */
    }
    *out = n;
    return true;
}

void tg_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides)
{
    int64_t stride = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = stride;
        stride *= shape[i] > 0 ? shape[i] : 1;
    }
}

char *tg_shape_str(int ndim, const int64_t *shape, char *buf, size_t size)
{
    size_t used = 0;
    used += (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < ndim && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (used < size) snprintf(buf + used, size - used, "]");
    return buf;
}
