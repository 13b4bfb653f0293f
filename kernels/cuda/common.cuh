// kernels/cuda/common.cuh: what every CUDA kernel file shares: error checks, launch
// sizes, a strided view of a tensor passed by value, and dtype loads and stores.
#ifndef TAPEGRAD_KERNELS_CUDA_COMMON_CUH
#define TAPEGRAD_KERNELS_CUDA_COMMON_CUH

#include "kernels/cuda_api.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

// Turns a failed CUDA runtime call into a tapegrad error naming the call.
#define TG_CUDA_CHECK(call)                                                                                            \
    do {                                                                                                               \
        cudaError_t tg_cuda_error_ = (call);                                                                           \
        if (tg_cuda_error_ != cudaSuccess)                                                                             \
            return tg_set_error(TG_ERR_DEVICE, "%s failed: %s", #call, cudaGetErrorString(tg_cuda_error_));            \
    } while (0)

// After a launch: the launch error, if any, named after the op.
static inline tg_status tg_cuda_check_launch(const char *op)
{
    cudaError_t error = cudaGetLastError();
    if (error != cudaSuccess)
        return tg_set_error(TG_ERR_DEVICE, "%s: CUDA kernel launch failed: %s", op, cudaGetErrorString(error));
    return TG_OK;
}

// The stream of all device work: the calling thread's default stream. The CUDA files are
// compiled with --default-stream per-thread, so <<<>>> and stream 0 mean it too; library
// handles (cuBLAS, cuRAND) are given it explicitly. One stream, in order, which a CUDA
// graph can capture (the legacy default stream cannot be captured).
static inline cudaStream_t tg_cuda_stream() { return cudaStreamPerThread; }

#define TG_THREADS 256

// Enough blocks for a grid-stride loop over n items, capped so huge n loops instead.
static inline unsigned tg_blocks_for(int64_t n)
{
    int64_t blocks = (n + TG_THREADS - 1) / TG_THREADS;
    return (unsigned)(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

// Records a bad input in the device's record (kernels/cuda_api.h) unless one is there already.
__device__ inline void tg_record_bad_input(tg_bad_input *record, int kind, int64_t position, int32_t value,
                                           int64_t limit)
{
    if (atomicCAS(&record->kind, TG_BAD_INPUT_NONE, kind) != TG_BAD_INPUT_NONE) return;
    record->value = value;
    record->position = position;
    record->limit = limit;
}

__device__ inline int64_t tg_global_index() { return (int64_t)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ inline int64_t tg_global_stride() { return (int64_t)gridDim.x * blockDim.x; }

// A tensor's geometry, by value, for kernels that take any layout.
struct tg_cuda_view {
    char *data; // element 0 of the view
    int dtype;
    int ndim;
    int64_t shape[TG_MAX_DIMS];
    int64_t strides[TG_MAX_DIMS];
};

static inline tg_cuda_view tg_view_of(const tg_tensor *t)
{
    tg_cuda_view v = {};
    v.data = tg_bytes(t);
    v.dtype = (int)t->dtype;
    v.ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++) {
        v.shape[d] = t->shape[d];
        v.strides[d] = t->strides[d];
    }
    return v;
}

// Element offset of the row-major logical index i.
__device__ inline int64_t tg_offset_of(const tg_cuda_view &v, int64_t i)
{
    int64_t offset = 0;
    for (int d = v.ndim - 1; d >= 0; d--) {
        offset += (i % v.shape[d]) * v.strides[d];
        i /= v.shape[d];
    }
    return offset;
}

__device__ inline double tg_load_raw(const char *base, int dtype, int64_t i)
{
    switch (dtype) {
    case TG_F32: return ((const float *)base)[i];
    case TG_F64: return ((const double *)base)[i];
    case TG_BF16: return __bfloat162float(((const __nv_bfloat16 *)base)[i]);
    case TG_F16: return __half2float(((const __half *)base)[i]);
    case TG_I32: return ((const int32_t *)base)[i];
    default: return 0.0;
    }
}

__device__ inline void tg_store_raw(char *base, int dtype, int64_t i, double value)
{
    switch (dtype) {
    case TG_F32: ((float *)base)[i] = (float)value; break;
    case TG_F64: ((double *)base)[i] = value; break;
    case TG_BF16: ((__nv_bfloat16 *)base)[i] = __float2bfloat16((float)value); break;
    case TG_F16: ((__half *)base)[i] = __float2half((float)value); break;
    case TG_I32: ((int32_t *)base)[i] = (int32_t)value; break;
    default: break;
    }
}

__device__ inline double tg_load_any(const tg_cuda_view &v, int64_t offset)
{
    return tg_load_raw(v.data, v.dtype, offset);
}
__device__ inline void tg_store_any(const tg_cuda_view &v, int64_t offset, double value)
{
    tg_store_raw(v.data, v.dtype, offset, value);
}

// Maths in the compute type: float for f32, bf16 and f16 storage, double for f64.
__device__ inline float tg_exp(float x) { return expf(x); }
__device__ inline double tg_exp(double x) { return exp(x); }
__device__ inline float tg_log(float x) { return logf(x); }
__device__ inline double tg_log(double x) { return log(x); }
__device__ inline float tg_log1p(float x) { return log1pf(x); }
__device__ inline double tg_log1p(double x) { return log1p(x); }
__device__ inline float tg_tanh(float x) { return tanhf(x); }
__device__ inline double tg_tanh(double x) { return tanh(x); }
__device__ inline float tg_abs(float x) { return fabsf(x); }
__device__ inline double tg_abs(double x) { return fabs(x); }
__device__ inline float tg_sqrt(float x) { return sqrtf(x); }
__device__ inline double tg_sqrt(double x) { return sqrt(x); }

// Typed conversions for kernels templated over the storage type (float math).
__device__ inline float tg_to_float(float x) { return x; }
__device__ inline float tg_to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ inline float tg_to_float(__half x) { return __half2float(x); }
// The same into double, for sums accumulated in double whatever the storage type.
__device__ inline double tg_to_double(float x) { return x; }
__device__ inline double tg_to_double(double x) { return x; }
__device__ inline double tg_to_double(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ inline double tg_to_double(__half x) { return __half2float(x); }
template <typename T> __device__ inline T tg_from_float(float x);
template <> __device__ inline float tg_from_float<float>(float x) { return x; }
template <> __device__ inline __nv_bfloat16 tg_from_float<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
template <> __device__ inline __half tg_from_float<__half>(float x) { return __float2half(x); }

// An attribute of the current device, or `fallback` when the runtime cannot say (its error is
// cleared, so that the next launch check does not report it).
static inline int tg_cuda_device_attribute(cudaDeviceAttr attribute, int fallback)
{
    int device = 0, value = 0;
    if (cudaGetDevice(&device) == cudaSuccess && cudaDeviceGetAttribute(&value, attribute, device) == cudaSuccess)
        return value;
    (void)cudaGetLastError();
    return fallback;
}

// The number of multiprocessors of the current device (read once): sizes grids (to
// whole waves of resident blocks, or so per-block partial results stay few).
static inline int tg_cuda_multiprocessors(void)
{
    static int count = 0;
    if (count == 0) {
        const int value = tg_cuda_device_attribute(cudaDevAttrMultiProcessorCount, 1);
        count = value > 0 ? value : 1; // 1: still correct, only slower
    }
    return count;
}

// Blocks of `kernel` the whole GPU holds at once (0 when the runtime cannot say: callers then
// fall back to fixed sizes).
template <typename Kernel> int64_t tg_cuda_resident_blocks(Kernel kernel, int threads, size_t shared)
{
    int per_multiprocessor = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_multiprocessor, kernel, threads, shared) != cudaSuccess) {
        (void)cudaGetLastError(); // clear it: the next launch check must not report it
        return 0;
    }
    return (int64_t)per_multiprocessor * tg_cuda_multiprocessors();
}

#endif
