/* kernels/cuda_api.h: the CUDA backend's entry points for core/ (implemented in
 * kernels/cuda/runtime.cu). Core reaches them only through core/device.c, which also
 * answers for builds without CUDA. Each returns TG_OK or an error whose message names
 * the CUDA call and CUDA's own error string. */
#ifndef TAPEGRAD_KERNELS_CUDA_API_H
#define TAPEGRAD_KERNELS_CUDA_API_H

#include "core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

int tg_cuda_device_count(void);
tg_status tg_cuda_malloc(void **ptr, size_t bytes);
tg_status tg_cuda_free(void *ptr);
tg_status tg_cuda_memcpy(void *dst, const void *src, size_t bytes, tg_copy_direction direction);
/* Every byte ← value (0xff: NaN in every float dtype). */
tg_status tg_cuda_memset(void *ptr, int value, size_t bytes);
tg_status tg_cuda_memset_zero(void *ptr, size_t bytes);
tg_status tg_cuda_synchronize(void);
/* dst ← src elementwise: any strides, any dtypes, both on the device. */
tg_status tg_cuda_copy(tg_tensor *dst, const tg_tensor *src);
tg_status tg_cuda_fill(tg_tensor *t, double value);
/* dst += src (same shape, any layouts). */
tg_status tg_cuda_add_into(tg_tensor *dst, const tg_tensor *src);
/* out[i] = Σ of the elements of g that map to i, where out_strides are out's strides in g's
 * index space (0 along the summed dimensions). One thread per output, fixed order. */
tg_status tg_cuda_sum_to(tg_tensor *out, const int64_t *out_strides, const tg_tensor *g);
/* y[i] += alpha · x[i] over n contiguous elements of one float dtype. */
tg_status tg_cuda_axpy(void *y, const void *x, tg_dtype dtype, int64_t n, double alpha);
/* Fills t with normal(a, b) or uniform[a, b) values from cuRAND seeded with `seed`. */
tg_status tg_cuda_fill_random(tg_tensor *t, uint64_t seed, bool normal, double a, double b);

/* Capturing the stream into a CUDA graph (core/graph.c): begin, end (instantiating the
 * graph: *exec is the executable graph, *n_nodes its node count), replay and destroy.
 * tg_cuda_capturing says whether a capture is under way on the calling thread's stream:
 * ops that would wait for the device then defer their checks to it instead. */
tg_status tg_cuda_capture_begin(void);
tg_status tg_cuda_capture_end(void **exec, size_t *n_nodes);
bool tg_cuda_capturing(void);
tg_status tg_cuda_graph_launch(void *exec);
void tg_cuda_graph_destroy(void *exec);

/* A bad input that a kernel found where the host could not wait for the answer (during a
 * capture): the first one recorded, in device memory, until taken. The optimizer's step
 * reads `kind` and changes nothing while it is set. */
enum { TG_BAD_INPUT_NONE = 0, TG_BAD_EMBEDDING_ID = 1, TG_BAD_TARGET = 2 };
typedef struct {
    int32_t kind;     /* TG_BAD_INPUT_NONE when nothing was found */
    int32_t value;    /* the id or target */
    int64_t position; /* its flat row-major position */
    int64_t limit;    /* the number of rows or classes it had to stay under */
} tg_bad_input;
/* The record's device address (allocated and cleared on first use, outside a capture);
 * NULL with a message when that fails. */
tg_bad_input *tg_cuda_bad_input_record(void);
/* Waits for the device, copies the record out and clears it. */
tg_status tg_cuda_take_bad_input(tg_bad_input *out);

#ifdef __cplusplus
}
#endif
#endif
