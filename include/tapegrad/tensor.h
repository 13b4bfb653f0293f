/* tapegrad/tensor.h: dtypes, devices, status codes and the strided tensor.
 *
 * A tensor is a view: a dtype, a shape, strides (in elements, not bytes), an
 * element offset and a pointer to the storage that owns the bytes. Views such as
 * transpose or slice share storage and cost no copy.
 *
 * Who owns memory (see docs/architecture.md):
 *   - tensors made on a tape (tg_empty, op outputs) live until tg_tape_reset;
 *   - parameters live in a tg_params store, one contiguous buffer for all of them;
 *   - tensors from tg_tensor_new are the caller's, freed with tg_tensor_free.
 */
#ifndef TAPEGRAD_TENSOR_H
#define TAPEGRAD_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the public API: the shared library exports these functions and nothing else. */
#if defined(__GNUC__)
#define TG_API __attribute__((visibility("default")))
#else
#define TG_API
#endif

#define TG_MAX_DIMS 6

typedef enum {
    TG_OK = 0,
    TG_ERR_INVALID = 1,  /* bad argument: NULL, shape, rank, axis, value */
    TG_ERR_DTYPE = 2,    /* unsupported or mismatched dtype */
    TG_ERR_DEVICE = 3,   /* mismatched device, or a device this build cannot reach */
    TG_ERR_OVERFLOW = 4, /* a size or offset does not fit in 64 bits */
    TG_ERR_NOMEM = 5,    /* an allocation failed */
    TG_ERR_STATE = 6,    /* the call does not fit the object's state */
} tg_status;

typedef enum {
    TG_F32 = 0,
    TG_F64 = 1,
    TG_BF16 = 2, /* storage type: converted to float for arithmetic */
    TG_I32 = 3,  /* token ids and other integer data */
    TG_F16 = 4,  /* IEEE half: storage type, converted to float for arithmetic */
    TG_DTYPE_COUNT
} tg_dtype;

typedef enum {
    TG_DEVICE_CPU = 0,
    TG_DEVICE_CUDA = 1,
    TG_DEVICE_COUNT = 2,
    TG_DEVICE_AUTO = 3, /* a request only: CUDA when a GPU is present, else CPU */
} tg_device;

typedef struct tg_storage tg_storage;
typedef struct tg_node tg_node;
typedef struct tg_tape tg_tape;

/* Fields are public to read; change them only through the API. */
typedef struct tg_tensor {
    tg_dtype dtype;
    tg_device device;
    int ndim;
    int64_t shape[TG_MAX_DIMS];
    int64_t strides[TG_MAX_DIMS]; /* in elements */
    int64_t offset;               /* in elements, from the start of storage */
    tg_storage *storage;
    bool requires_grad;
    struct tg_tensor *grad; /* same shape and dtype, contiguous (an activation laid out densely
                             * in another order gets that order); NULL until a gradient
                             * arrives or tg_set_requires_grad allocates it */
    tg_node *producer;      /* the tape node that made it; NULL for leaves */
    tg_tape *tape;          /* the tape that owns it; NULL for parameters and free tensors */
    const char *name;       /* optional, used in messages */
} tg_tensor;

/* ---- errors ---------------------------------------------------------------- */

/* The message of the last failed call on this thread ("" when none). */
TG_API const char *tg_last_error(void);
TG_API void tg_clear_error(void);
/* Sets this thread's message (printf-style) and returns status. For ops written outside
 * the library, so that they report failures through tg_last_error like built-in ops. */
TG_API tg_status tg_set_error(tg_status status, const char *format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
TG_API const char *tg_status_name(tg_status status);

/* ---- dtypes and devices ----------------------------------------------------
 * These queries never fail and set no error (the checks that build error messages call
 * them): a value outside the enum gets "invalid-dtype" / "invalid-device" / "unknown status",
 * size 0, false, and tg_device_resolve returns it unchanged. */

TG_API const char *tg_dtype_name(tg_dtype dtype);
TG_API size_t tg_dtype_size(tg_dtype dtype);
TG_API bool tg_dtype_is_float(tg_dtype dtype);
TG_API const char *tg_device_name(tg_device device);
/* Whether this build and machine can run on the device (CPU: always). */
TG_API bool tg_device_available(tg_device device);
/* TG_DEVICE_AUTO → the device that will be used; others are returned as given. */
TG_API tg_device tg_device_resolve(tg_device device);
/* CPU threads the CPU kernels may use (the selective scan splits its batch rows over them,
 * conv1d its channels, RMSNorm and the float cross-entropy their rows, matmul its batches). Default: the environment's TG_NUM_THREADS, else
 * the CPUs the process may run on (its affinity mask on Linux, as taskset or a container's
 * cpuset set it, and no more than its control groups' CPU quota, as `docker --cpus` sets it,
 * rounded up; elsewhere the online CPUs), counted once. Results are the same bits for any
 * count. n < 1 restores the default; n above 64 is taken as 64.
 * OpenBLAS, which the CPU matmul calls, runs on one thread unless OPENBLAS_NUM_THREADS or
 * OMP_NUM_THREADS is set. */
TG_API void tg_set_num_threads(int n);
TG_API int tg_num_threads(void);

TG_API float tg_bf16_to_f32(uint16_t value);
TG_API uint16_t tg_f32_to_bf16(float value); /* round to nearest even; NaN stays NaN */
TG_API float tg_f16_to_f32(uint16_t value);
TG_API uint16_t tg_f32_to_f16(float value); /* round to nearest even; overflow gives ±inf */

/* ---- device memory ------------------------------------------------------------------
 * CUDA memory comes from a caching allocator: freed blocks are kept and reused, so a
 * training loop does not call cudaMalloc after its first steps. Host memory (tape chunks,
 * tensors the caller owns, gradients) is counted too, with nothing cached: for
 * TG_DEVICE_CPU, bytes_reserved equals bytes_in_use. */
typedef struct {
    size_t bytes_in_use;      /* handed out to tensors now */
    size_t peak_bytes_in_use; /* the most ever in use (since tg_memory_reset_peak) */
    size_t bytes_reserved;    /* in use + kept in the cache */
} tg_memory_stats;

TG_API tg_status tg_memory_stats_get(tg_device device, tg_memory_stats *stats);
TG_API void tg_memory_reset_peak(void);
/* Gives every cached (unused) block back to the driver. */
TG_API tg_status tg_memory_empty_cache(void);
/* Waits until all queued work on the device has finished (CPU: returns at once). */
TG_API tg_status tg_synchronize(tg_device device);

/* ---- creation -------------------------------------------------------------- */

/* Uninitialised / zero-filled tensors owned by the tape (freed by tg_tape_reset). The shape's
 * element count, byte size and largest stride (zeros counted as ones) must fit in 63 bits;
 * tg_full's value must fit the dtype (see tg_fill). */
TG_API tg_tensor *tg_empty(tg_tape *tape, tg_dtype dtype, tg_device device, int ndim, const int64_t *shape);
TG_API tg_tensor *tg_zeros(tg_tape *tape, tg_dtype dtype, tg_device device, int ndim, const int64_t *shape);
TG_API tg_tensor *tg_full(tg_tape *tape, tg_dtype dtype, tg_device device, int ndim, const int64_t *shape,
                          double value);
/* A contiguous tensor on the tape filled from host memory holding `dtype` values. */
TG_API tg_tensor *tg_from_data(tg_tape *tape, tg_dtype dtype, tg_device device, int ndim, const int64_t *shape,
                               const void *data);
/* A contiguous tensor with the shape, dtype and device of x (its data uninitialised). */
TG_API tg_tensor *tg_empty_like(tg_tape *tape, const tg_tensor *x);
TG_API tg_tensor *tg_zeros_like(tg_tape *tape, const tg_tensor *x);

/* A tensor the caller owns: zero-filled, freed with tg_tensor_free (with its gradient).
 * tg_tensor_free(NULL) does nothing; a tensor it does not own (a tape's, a parameter) is
 * refused (error set, nothing freed). */
TG_API tg_tensor *tg_tensor_new(tg_dtype dtype, tg_device device, int ndim, const int64_t *shape);
TG_API void tg_tensor_free(tg_tensor *t);

/* ---- properties --------------------------------------------------------------
 * A NULL tensor, or one whose ndim is outside 1..TG_MAX_DIMS, sets the error and gives 0
 * (tg_numel) or false (the two predicates). */

TG_API int64_t tg_numel(const tg_tensor *t);
TG_API bool tg_is_contiguous(const tg_tensor *t);
TG_API bool tg_same_shape(const tg_tensor *a, const tg_tensor *b);
/* Writes "[2, 3] f32 cpu" (shape, dtype, device, then " strided" for a non-contiguous view;
 * "NULL" for a NULL t) into buf; returns buf, or NULL (error set) when buf is NULL or size
 * is 0. */
TG_API char *tg_describe(const tg_tensor *t, char *buf, size_t size);

/* Marks a leaf as needing a gradient; its grad buffer is allocated (zeroed) now. */
TG_API tg_status tg_set_requires_grad(tg_tensor *t, bool requires_grad);
/* Sets t->grad to zeros if it has one. */
TG_API tg_status tg_zero_grad(tg_tensor *t);

/* ---- element access (any dtype, values as double) ------------------------------------
 * The getters and setters also work on device tensors, one element copied per call (for
 * tests and losses, not for loops). */

/* Raw pointer to element 0 of the view (storage + offset); NULL (error set) for a tensor
 * that is not on the CPU. */
TG_API void *tg_data(const tg_tensor *t);
/* Element at a multi-index (ndim entries) or at a flat row-major logical index. A NULL or
 * invalid tensor, an index outside the shape, or (setters) a value that does not fit an i32
 * tensor sets the error: the getters then return NaN and the setters change nothing. */
TG_API double tg_get(const tg_tensor *t, const int64_t *index);
TG_API void tg_set(tg_tensor *t, const int64_t *index, double value);
TG_API double tg_get_flat(const tg_tensor *t, int64_t flat_index);
TG_API void tg_set_flat(tg_tensor *t, int64_t flat_index, double value);
/* The single value of a one-element tensor; NaN (error set) for any other. */
TG_API double tg_item(const tg_tensor *t);
/* Copies between host memory (contiguous, row-major, `host_dtype` values) and a tensor of
 * any layout, converting dtypes as needed. A float converted to i32 is truncated toward zero;
 * one that does not fit (NaN, ±inf, out of range) fails the whole copy before anything is
 * written. */
TG_API tg_status tg_copy_from_host(tg_tensor *t, const void *host, tg_dtype host_dtype);
TG_API tg_status tg_copy_to_host(const tg_tensor *t, void *host, tg_dtype host_dtype);
/* dst ← src elementwise (same shape; any layouts; both float, of any float dtypes, or both
 * i32; no tape record). */
TG_API tg_status tg_copy(tg_tensor *dst, const tg_tensor *src);
/* Every element ← value (for an i32 tensor, a value that fits in i32, truncated). */
TG_API tg_status tg_fill(tg_tensor *t, double value);

#ifdef __cplusplus
}
#endif
#endif
