/* core/params.c: parameters in one contiguous data buffer and one gradient buffer.
 *
 * Each parameter tensor points at the store's shared storage with its own offset, so
 * growing the buffers moves no tensor: only storage->data changes. The buffers live on
 * the store's device (host memory or CUDA memory from the caching allocator). */
#include "internal.h"
#include "io/safetensors.h"
#include "tapegrad/params.h"

#include <math.h>

#ifdef TG_HAVE_CUDA
#include "kernels/cuda_api.h"
#endif

#include <stdlib.h>
#include <string.h>

struct tg_params {
    tg_device device;
    tg_dtype dtype; /* set by the first parameter; all share it */
    tg_storage data;
    tg_storage grad;
    int64_t numel;       /* elements in use */
    int64_t capacity;    /* elements allocated */
    tg_tensor **tensors; /* each parameter, and its grad tensor through ->grad */
    size_t count;
    size_t tensors_capacity;
};

tg_params *tg_params_create(tg_device device)
{
    if (!tg_check_device_value("tg_params_create", device)) return NULL;
    device = tg_device_resolve(device);
    if (!tg_device_has_tensors(device)) {
        tg_set_error(TG_ERR_DEVICE, "tg_params_create: %s parameters are not supported by this build (CPU only)",
                     tg_device_name(device));
        return NULL;
    }
    tg_params *params = calloc(1, sizeof *params);
    if (!params) {
        tg_set_error(TG_ERR_NOMEM, "tg_params_create: out of memory");
        return NULL;
    }
    params->device = device;
    params->data = (tg_storage){NULL, 0, device, TG_STORAGE_PARAMS};
    params->grad = (tg_storage){NULL, 0, device, TG_STORAGE_PARAMS};
    return params;
}

void tg_params_free(tg_params *params)
{
    if (!params) return;
    for (size_t i = 0; i < params->count; i++) {
        free((char *)params->tensors[i]->name);
        free(params->tensors[i]->grad);
        free(params->tensors[i]);
    }
    free(params->tensors);
    tg_device_free(params->device, params->data.data, params->data.nbytes);
    tg_device_free(params->device, params->grad.data, params->grad.nbytes);
    free(params);
}

/* Moves one buffer into a larger allocation, keeping its first `used` bytes. */
static bool grow_buffer(tg_storage *storage, size_t used, size_t bytes)
{
    void *data;
    if (tg_device_alloc(storage->device, bytes, &data) != TG_OK) return false;
    tg_status status = TG_OK;
    if (used && storage->device == TG_DEVICE_CPU)
        memcpy(data, storage->data, used);
    else if (used)
        status = tg_device_memcpy(data, storage->data, used, TG_COPY_DEVICE_TO_DEVICE);
    if (status != TG_OK) {
        tg_device_free(storage->device, data, bytes);
        return false;
    }
    tg_device_free(storage->device, storage->data, storage->nbytes);
    storage->data = data;
    storage->nbytes = bytes;
    return true;
}

/* Makes room for `extra` more elements, doubling so that building a model is linear. */
static bool grow(tg_params *params, int64_t extra)
{
    int64_t need = params->numel + extra;
    if (need <= params->capacity) return true;
    int64_t capacity = params->capacity ? params->capacity : 1024;
    while (capacity < need) capacity = capacity > INT64_MAX / 2 ? need : capacity * 2;
    size_t size = tg_dtype_size(params->dtype), used = (size_t)params->numel * size;
    if ((uint64_t)capacity > SIZE_MAX / 2 / size) return false; /* the byte size would not fit */
    if (!grow_buffer(&params->data, used, (size_t)capacity * size) ||
        !grow_buffer(&params->grad, used, (size_t)capacity * size))
        return false;
    params->capacity = capacity;
    return true;
}

static tg_tensor *new_view(tg_storage *storage, tg_dtype dtype, int ndim, const int64_t *shape, int64_t offset)
{
    tg_tensor *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->dtype = dtype;
    t->device = storage->device;
    t->ndim = ndim;
    memcpy(t->shape, shape, sizeof(int64_t) * (size_t)ndim);
    tg_contiguous_strides(ndim, shape, t->strides);
    t->offset = offset;
    t->storage = storage;
    return t;
}

const char *tg_params_name_problem(const tg_params *params, const char *name)
{
    if (!name[0]) return "is empty";
    const char *wrong = tg_st_name_problem(name);
    if (wrong) return wrong; /* no checkpoint could hold it */
    if (!strncmp(name, "optim.", 6)) return "starts with 'optim.', which checkpoints keep for optimizer state";
    if (tg_params_lookup(params, name)) return "is taken: the store already holds a parameter of that name";
    return NULL;
}

tg_tensor *tg_params_add(tg_params *params, const char *name, tg_dtype dtype, int ndim, const int64_t *shape)
{
    const char *op = "tg_params_add";
    char text[128];
    int64_t numel;
    if (!params || !name || !shape) {
        tg_set_error(TG_ERR_INVALID, "%s: %s is NULL", op, !params ? "params" : !name ? "name" : "shape");
        return NULL;
    }
    const char *wrong = tg_params_name_problem(params, name);
    if (wrong) {
        tg_set_error(TG_ERR_INVALID, "%s: name '%s' %s", op, name, wrong);
        return NULL;
    }
    if (!tg_dtype_is_float(dtype)) {
        tg_set_error(TG_ERR_DTYPE, "%s: parameter '%s' must have a float dtype, not %s", op, name,
                     tg_dtype_name(dtype));
        return NULL;
    }
    if (params->count && dtype != params->dtype) {
        tg_set_error(TG_ERR_DTYPE, "%s: parameter '%s' has dtype %s but the store holds %s", op, name,
                     tg_dtype_name(dtype), tg_dtype_name(params->dtype));
        return NULL;
    }
    if (ndim < 1 || ndim > TG_MAX_DIMS) {
        tg_set_error(TG_ERR_INVALID, "%s: parameter '%s' must have ndim 1..%d (got %d)", op, name, TG_MAX_DIMS, ndim);
        return NULL;
    }
    int64_t total_bytes;
    if (!tg_shape_numel(ndim, shape, &numel) || numel == 0 || params->numel > INT64_MAX / 2 - numel ||
        tg_mul_overflows(params->numel + numel, 2 * (int64_t)tg_dtype_size(dtype), &total_bytes)) {
        tg_set_error(TG_ERR_INVALID,
                     "%s: parameter '%s' has an invalid or too large shape %s (a negative or zero dimension, "
                     "or more elements than a store can hold)",
                     op, name, tg_shape_str(ndim, shape, text, sizeof text));
        return NULL;
    }
    params->dtype = dtype;
    if (params->count == params->tensors_capacity) {
        size_t capacity = params->tensors_capacity ? params->tensors_capacity * 2 : 16;
        tg_tensor **tensors = realloc(params->tensors, capacity * sizeof *tensors);
        if (!tensors) goto nomem;
        params->tensors = tensors;
        params->tensors_capacity = capacity;
    }
    if (!grow(params, numel)) goto nomem;
    tg_tensor *t = new_view(&params->data, dtype, ndim, shape, params->numel);
    tg_tensor *g = new_view(&params->grad, dtype, ndim, shape, params->numel);
    char *copy = malloc(strlen(name) + 1);
    if (!t || !g || !copy) {
        free(t);
        free(g);
        free(copy);
        goto nomem;
    }
    strcpy(copy, name);
    t->name = copy;
    t->grad = g;
    t->requires_grad = true;
    size_t size = tg_dtype_size(dtype);
    if (tg_device_zero(params->device, (char *)params->data.data + params->numel * (int64_t)size,
                       (size_t)numel * size) != TG_OK ||
        tg_device_zero(params->device, (char *)params->grad.data + params->numel * (int64_t)size,
                       (size_t)numel * size) != TG_OK) {
        free(copy);
        free(t);
        free(g);
        return NULL;
    }
    params->numel += numel;
    params->tensors[params->count++] = t;
    return t;
nomem:
    tg_set_error(TG_ERR_NOMEM, "%s: out of memory adding '%s' %s", op, name,
                 tg_shape_str(ndim, shape, text, sizeof text));
    return NULL;
}

/* params is a store; else the error names op. */
static bool check_store(const char *op, const tg_params *params)
{
    if (params) return true;
    tg_set_error(TG_ERR_INVALID, "%s: params is NULL", op);
    return false;
}

size_t tg_params_count(const tg_params *params) { return check_store("tg_params_count", params) ? params->count : 0; }

tg_tensor *tg_params_get(const tg_params *params, size_t index)
{
    if (!check_store("tg_params_get", params)) return NULL;
    if (index < params->count) return params->tensors[index];
    tg_set_error(TG_ERR_INVALID, "tg_params_get: index %zu is past the %zu parameters", index, params->count);
    return NULL;
}

/* The parameter of that name, or NULL (no message: a lookup that may miss). */
tg_tensor *tg_params_lookup(const tg_params *params, const char *name)
{
    for (size_t i = 0; params && name && i < params->count; i++)
        if (strcmp(params->tensors[i]->name, name) == 0) return params->tensors[i];
    return NULL;
}

tg_tensor *tg_params_find(const tg_params *params, const char *name)
{
    if (!check_store("tg_params_find", params)) return NULL;
    if (!name) {
        tg_set_error(TG_ERR_INVALID, "tg_params_find: name is NULL");
        return NULL;
    }
    tg_tensor *t = tg_params_lookup(params, name);
    if (!t) tg_set_error(TG_ERR_INVALID, "tg_params_find: no parameter has the name '%s'", name);
    return t;
}

int64_t tg_params_numel(const tg_params *params) { return check_store("tg_params_numel", params) ? params->numel : 0; }

void *tg_params_data(tg_params *params) { return check_store("tg_params_data", params) ? params->data.data : NULL; }

void *tg_params_grad(tg_params *params) { return check_store("tg_params_grad", params) ? params->grad.data : NULL; }

tg_status tg_params_zero_grad(tg_params *params)
{
    if (!params) return tg_set_error(TG_ERR_INVALID, "tg_params_zero_grad: params is NULL");
    return tg_device_zero(params->device, params->grad.data, (size_t)params->numel * tg_dtype_size(params->dtype));
}

tg_status tg_params_sgd_step(tg_params *params, double lr)
{
    if (!params) return tg_set_error(TG_ERR_INVALID, "tg_params_sgd_step: params is NULL");
    if (!isfinite(lr)) return tg_set_error(TG_ERR_INVALID, "tg_params_sgd_step: lr must be finite (got %g)", lr);
    if (params->device != TG_DEVICE_CPU) {
#ifdef TG_HAVE_CUDA
        return tg_cuda_axpy(params->data.data, params->grad.data, params->dtype, params->numel, -lr);
#else
        return tg_error_no_kernel("tg_params_sgd_step", params->device);
#endif
    }
    char *data = params->data.data, *grad = params->grad.data;
    for (int64_t i = 0; i < params->numel; i++)
        tg_store(data, params->dtype, i, tg_load(data, params->dtype, i) - lr * tg_load(grad, params->dtype, i));
    return TG_OK;
}
