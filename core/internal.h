/* core/internal.h: what ops/ and kernels/ share with core/ but users do not see. */
#ifndef TAPEGRAD_CORE_INTERNAL_H
#define TAPEGRAD_CORE_INTERNAL_H

#include "tapegrad/autograd.h"
#include "tapegrad/tensor.h"

#include <stdarg.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- storage ----------------------------------------------------------------- */

typedef enum {
    TG_STORAGE_ARENA, /* bytes from a tape's arena: freed by reset */
    TG_STORAGE_HEAP,  /* allocated with its tensor (host or device): freed by tg_tensor_free */
    TG_STORAGE_PARAMS /* one buffer of a tg_params store, which may move it while growing */
} tg_storage_kind;

/* Whether an activation's bytes are there (core/recompute.c): released ones were given back
 * after the forward and come back, recomputed, when the backward reaches them. */
typedef enum { TG_DATA_PRESENT, TG_DATA_RELEASED, TG_DATA_RECOMPUTED } tg_data_state;

struct tg_storage {
    void *data;
    size_t nbytes;
    tg_device device;
    tg_storage_kind kind;
    tg_data_state state;
};

/* ---- CPU threads (core/parallel.c) -------------------------------------------------------
 * tg_parallel_ranges runs fn(context, begin, end) over contiguous ranges that cover
 * [0, n), each of at least min_per_thread indices but the last, on up to tg_num_threads()
 * threads (the calling thread among them; which thread runs which range, and how many
 * ranges there are, vary), and returns when all are done. fn must only
 * write memory no other range writes, and must not call the library's error functions
 * (report failures through the context); sums across ranges belong after the call, in a
 * fixed order, so that results do not depend on the thread count. */
typedef void (*tg_range_fn)(void *context, int64_t begin, int64_t end);
void tg_parallel_ranges(int64_t n, int64_t min_per_thread, tg_range_fn fn, void *context);
/* CPUs' worth of time the process's control groups allow, rounded up (core/cpu_quota.c):
 * the tightest cgroup v2 cpu.max or v1 CFS quota on its groups' paths, read from the
 * /proc/self/cgroup-style file proc_cgroup and the hierarchy mounted at cgroup_root
 * (/sys/fs/cgroup); 0 when none is set or nothing can be read. */
int64_t tg_cgroup_cpu_limit(const char *proc_cgroup, const char *cgroup_root);

/* ---- device memory (core/device.c) ------------------------------------------------
 * Host memory comes from malloc or a tape's arena; CUDA memory from a caching
 * allocator: freed blocks are kept by size and handed out again, most recently freed
 * first, so a step that allocates the same sizes in the same order as the step before
 * gets the same addresses. All work runs on one stream (the calling thread's default
 * stream), in order, so a block freed after its last kernel was queued can be reused by the
 * next kernel at once. */

typedef enum { TG_COPY_HOST_TO_DEVICE, TG_COPY_DEVICE_TO_HOST, TG_COPY_DEVICE_TO_DEVICE } tg_copy_direction;

tg_status tg_device_alloc(tg_device device, size_t bytes, void **out);
/* Counts host bytes taken (allocated) or given back, for tg_memory_stats_get(TG_DEVICE_CPU). */
void tg_host_memory_account(size_t bytes, bool allocated);
void tg_device_free(tg_device device, void *ptr, size_t bytes);
/* Raw bytes between host and device, or within a device. */
tg_status tg_device_memcpy(void *dst, const void *src, size_t bytes, tg_copy_direction direction);
tg_status tg_device_zero(tg_device device, void *ptr, size_t bytes);
/* Every byte ← 0xff: NaN in every float dtype (a poisoned tape's new buffers). */
tg_status tg_device_poison(tg_device device, void *ptr, size_t bytes);

/* Device bytes owned by the tape: given back by tg_tape_reset (or a rewind past them). */
void *tg_tape_alloc_device(tg_tape *tape, tg_device device, size_t nbytes);
/* Gives back one of the tape's device blocks before the reset (its entry stays in the tape's
 * list, empty, so marks taken earlier stay valid); false when the tape does not own ptr. */
bool tg_tape_free_device_data(tg_tape *tape, const void *ptr);
/* Makes every tensor the tape hands out from now on (and every activation gradient made for
 * its nodes), on any device, start with all bits set, NaN in every float dtype, instead of
 * whatever the memory held: the gradient checkers' tapes, so that a backward that leaves an
 * element unwritten fails. */
void tg_tape_set_poison(tg_tape *tape, bool poison);
bool tg_tape_poisons(const tg_tape *tape);
/* Appends a node built by the library itself (not through tg_record). */
void tg_tape_push_node(tg_tape *tape, tg_node *node);

/* Released activations (core/recompute.c, tg_recompute_in_backward). A marker node runs in
 * the backward whether or not a gradient reaches it, and without the rewind after it: what
 * it recomputes must outlive it. After each node's backward, the node's recomputed outputs
 * are released again: nothing recorded before their producer reads them. */
bool tg_recompute_is_marker(const tg_node *node);
tg_status tg_recompute_run(tg_tape *tape, tg_node *marker);
void tg_recompute_release_outputs(tg_tape *tape, tg_node *node);

/* CUDA graphs' memory (core/graph.c). Tracking on records every device block handed out or
 * given back; tg_device_reserve_captured then gives the recorded blocks to `owner` (and
 * stops tracking): given back, they are parked instead of cached, until
 * tg_device_release_reserved(owner) returns them to the cache. */
void tg_device_capture_track(bool on);
tg_status tg_device_reserve_captured(const void *owner);
void tg_device_release_reserved(const void *owner);

/* ---- errors -------------------------------------------------------------------- */

/* tg_set_error (public, tensor.h) sets the thread's message and returns the status, so
 * callers can `return tg_set_error(TG_ERR_INVALID, "tg_add: ...")`. */
/* The status that came with the thread's last error (TG_OK after tg_clear_error): what a
 * function returns when a check it called has failed and set the error. */
tg_status tg_last_status(void);
/* Like tg_set_error, then appends " (name0: [2, 3] f32 cpu, name1: ...)" for the tensors. */
tg_status tg_error_tensors(tg_status status, int n, const char *const *names, const tg_tensor *const *tensors,
                           const char *format, ...) __attribute__((format(printf, 5, 6)));
/* "tg_add: no cuda kernel" style error for a missing dispatch entry. */
tg_status tg_error_no_kernel(const char *op, tg_device device);

/* ---- argument checks: each sets a message naming op and returns false ---------- */

/* device is one of the tg_device values (CPU, CUDA or AUTO). */
bool tg_check_device_value(const char *op, tg_device device);
/* t is non-NULL, has storage, 1 ≤ ndim ≤ TG_MAX_DIMS and a dtype that exists, is on the
 * device its memory is on, and is not released for recompute. */
bool tg_check_tensor(const char *op, const char *name, const tg_tensor *t);
/* As above and a float dtype (f32, f64, bf16, f16). */
bool tg_check_float(const char *op, const char *name, const tg_tensor *t);
/* a and b have one dtype and one device (both already checked non-NULL). */
bool tg_check_same_kind(const char *op, const char *name_a, const tg_tensor *a, const char *name_b, const tg_tensor *b);
bool tg_check_ndim(const char *op, const char *name, const tg_tensor *t, int ndim);
/* Whether this build can hold tensors on the device. */
bool tg_device_has_tensors(tg_device device);
/* The tensor lives on a device this build can hold tensors on. */
bool tg_check_device_usable(const char *op, const char *name, const tg_tensor *t);
/* Normalises a possibly negative axis into [0, ndim); false (with message) when out of range. */
bool tg_check_axis(const char *op, const tg_tensor *t, int *axis);

/* ---- sizes ----------------------------------------------------------------------- */

/* *out = product of shape; false on overflow or a negative entry. */
bool tg_shape_numel(int ndim, const int64_t *shape, int64_t *out);
bool tg_mul_overflows(int64_t a, int64_t b, int64_t *out);
void tg_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides);
char *tg_shape_str(int ndim, const int64_t *shape, char *buf, size_t size);

/* ---- tensors made by ops ------------------------------------------------------------ */

/* A view of base's storage with the given geometry, allocated on the tape. */
tg_tensor *tg_view(tg_tape *tape, const tg_tensor *base, int ndim, const int64_t *shape, const int64_t *strides,
                   int64_t offset);
/* tg_tensor_new without the zero fill: for a buffer that is written whole before it is read
 * (an activation's gradient on its first contribution). */
tg_tensor *tg_tensor_new_uninitialized(tg_dtype dtype, tg_device device, int ndim, const int64_t *shape);
/* The store's parameter of that name, or NULL, setting no error (a lookup that may miss). */
typedef struct tg_params tg_params;
tg_tensor *tg_params_lookup(const tg_params *params, const char *name);
/* Why tg_params_add would refuse the name (empty, not a name a checkpoint can hold, the
 * optimizer's "optim." prefix, or taken), or NULL. */
const char *tg_params_name_problem(const tg_params *params, const char *name);
/* tg_tensor_free without the complaint: frees t only when it is a heap tensor (a gradient). */
void tg_tensor_release(tg_tensor *t);
/* A contiguous tensor on the tape with x's shape but the given dtype. */
tg_tensor *tg_empty_as(tg_tape *tape, const tg_tensor *x, tg_dtype dtype);
/* A tensor laid out like x (same stride order, dense) on the tape: used so that an op on
 * a channel-last input gives a channel-last output. */
tg_tensor *tg_empty_same_layout(tg_tape *tape, const tg_tensor *x);
/* The strides of a dense tensor of x's shape whose dimensions are in x's stride order. */
void tg_dense_strides_like(const tg_tensor *x, int64_t *strides);
/* Whether the gradient an activation t gets (laid out like t when t is dense, else
 * contiguous: core/grad.c) is contiguous. */
bool tg_activation_grad_is_contiguous(const tg_tensor *t);

/* tg_dtype_size inline (0 for an invalid dtype): kernels ask for it on every row they stage. */
#ifdef __cplusplus
static_assert(TG_DTYPE_COUNT == 5, "tg_element_size lists every dtype");
#else
_Static_assert(TG_DTYPE_COUNT == 5, "tg_element_size lists every dtype");
#endif
static inline int64_t tg_element_size(tg_dtype dtype)
{
    switch (dtype) {
    case TG_F64: return 8;
    case TG_F32:
    case TG_I32: return 4;
    case TG_BF16:
    case TG_F16: return 2;
    default: return 0;
    }
}

/* Element pointer helpers for CPU kernels: base address of element 0 of the view. */
static inline char *tg_bytes(const tg_tensor *t)
{
    return (char *)t->storage->data + t->offset * tg_element_size(t->dtype);
}

/* bf16 to float and back, inline for the kernels' loops (tg_bf16_to_f32 and tg_f32_to_bf16
 * are these): bf16 is the top half of an IEEE float32; the way back rounds to nearest, ties
 * to even, and keeps a NaN a (quiet) NaN. */
static inline float tg_bf16_bits_to_float(uint16_t value)
{
    uint32_t bits = (uint32_t)value << 16;
    float out;
    memcpy(&out, &bits, sizeof out);
    return out;
}

static inline uint16_t tg_float_to_bf16_bits(float value)
{
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu)) return (uint16_t)((bits >> 16) | 0x0040u);
    uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)((bits + rounding) >> 16);
}

static inline double tg_load(const void *base, tg_dtype dtype, int64_t i)
{
    switch (dtype) {
    case TG_F32: return ((const float *)base)[i];
    case TG_F64: return ((const double *)base)[i];
    case TG_BF16: return tg_bf16_bits_to_float(((const uint16_t *)base)[i]);
    case TG_I32: return ((const int32_t *)base)[i];
    case TG_F16: return tg_f16_to_f32(((const uint16_t *)base)[i]);
    default: return 0.0;
    }
}

static inline void tg_store(void *base, tg_dtype dtype, int64_t i, double v)
{
    switch (dtype) {
    case TG_F32: ((float *)base)[i] = (float)v; break;
    case TG_F64: ((double *)base)[i] = v; break;
    case TG_BF16: ((uint16_t *)base)[i] = tg_float_to_bf16_bits((float)v); break;
    case TG_I32: /* saturated, so that no conversion is undefined; the public functions refuse such values */
        ((int32_t *)base)[i] = v >= 2147483647.0 ? INT32_MAX : v <= -2147483648.0 ? INT32_MIN : v == v ? (int32_t)v : 0;
        break;
    case TG_F16: ((uint16_t *)base)[i] = tg_f32_to_f16((float)v); break;
    default: break;
    }
}

/* ---- strided iteration -------------------------------------------------------------
 * Walks an n-dimensional index space row by row (the last dimension is the row) and
 * keeps, for up to TG_ITER_MAX operands, the element offset of the row's start. Each
 * operand has its own strides in that index space (0 for a broadcast dimension):
 *
 *   tg_iter it; tg_iter_init(&it, ndim, shape, 2, (const int64_t *[]){sa, sb});
 *   do { for (j = 0; j < it.row_length; j++) use(it.offset[0] + j * it.row_stride[0], ...); }
 *   while (tg_iter_next_row(&it));
 */
#define TG_ITER_MAX 4
typedef struct {
    int ndim;
    int n_operands;
    int64_t shape[TG_MAX_DIMS];
    int64_t strides[TG_ITER_MAX][TG_MAX_DIMS];
    int64_t index[TG_MAX_DIMS];
    int64_t offset[TG_ITER_MAX];
    int64_t row_length;
    int64_t row_stride[TG_ITER_MAX];
    bool empty;
} tg_iter;

void tg_iter_init(tg_iter *it, int ndim, const int64_t *shape, int n_operands, const int64_t *const *strides);
bool tg_iter_next_row(tg_iter *it);

/* ---- broadcasting -------------------------------------------------------------------- */

/* The NumPy broadcast of two shapes; false when they do not broadcast. */
bool tg_broadcast_shape(int ndim_a, const int64_t *shape_a, int ndim_b, const int64_t *shape_b, int *ndim,
                        int64_t *shape);
/* t's strides seen in a larger, broadcast index space (0 for stretched dimensions). */
void tg_broadcast_strides(const tg_tensor *t, int ndim, const int64_t *shape, int64_t *strides);

/* ---- gradients ------------------------------------------------------------------------ */

/* The one place gradients are summed: t->grad += g (g may be any layout and float dtype,
 * same shape and device). An activation's first contribution is copied into a new gradient
 * off the tape (laid out like t when t is dense, else contiguous); a leaf without a
 * gradient gets zeros on the tape first. */
tg_status tg_accumulate_grad(tg_tape *tape, tg_tensor *t, const tg_tensor *g);

/* Sum g over broadcast dimensions so it has `shape` (the inverse of broadcasting). */
tg_tensor *tg_reduce_to_shape(tg_tape *tape, const tg_tensor *g, int ndim, const int64_t *shape);

/* ---- device dispatch ------------------------------------------------------------------
 * Each op keeps a small table of kernels, one entry per device, in its own file:
 *
 *   static const silu_fwd_fn silu_fwd[TG_DEVICE_COUNT] =
 *       TG_KERNELS(tg_cpu_silu_fwd, TG_CUDA_KERNEL(tg_cuda_silu_fwd));
 *   status = TG_DISPATCH("tg_silu", silu_fwd, x->device, x, y);
 *
 * A device without a kernel yet answers with a clear error. Adding the CUDA kernel is
 * a change to that one table line, never to the op's checks or its tape record. */
#ifdef TG_HAVE_CUDA
#define TG_CUDA_KERNEL(kernel) (kernel)
#else
#define TG_CUDA_KERNEL(kernel) NULL /* a build without CUDA has no such function */
#endif
#define TG_KERNELS(cpu_kernel, cuda_kernel)                                                                            \
    {                                                                                                                  \
        [TG_DEVICE_CPU] = (cpu_kernel), [TG_DEVICE_CUDA] = (cuda_kernel)                                               \
    }
#define TG_DISPATCH(op, table, device, ...)                                                                            \
    ((table)[(device)] ? (table)[(device)](__VA_ARGS__) : tg_error_no_kernel((op), (device)))

/* ---- op scaffolding ---------------------------------------------------------------------
 * Every op takes a mark when it starts and rewinds to it when it fails, so a failed op
 * leaves no half-made tensor or node on the tape. */
static inline tg_tensor *tg_op_fail(tg_tape *tape, tg_tape_mark mark)
{
    tg_tape_rewind(tape, mark);
    return NULL;
}

/* The tape must be non-NULL; ops call this first. */
bool tg_check_tape(const char *op, const tg_tape *tape);

#ifdef __cplusplus
}
#endif

#endif
