// kernels/cuda/nccl.cu: NCCL communicators and collectives for data parallelism
// (kernels/nccl.h). Communicators are non-blocking, so that no NCCL call can hang the
// process: each call is followed by settle(), which polls NCCL until the call is enqueued,
// and outside a capture by a deadline-checked wait for the stream.
#include "kernels/cuda/common.cuh"
#include "kernels/nccl.h"

#include <nccl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static_assert(sizeof(ncclUniqueId) == TG_NCCL_ID_BYTES, "NCCL's unique id changed size");

struct tg_nccl {
    ncclComm_t comm;
    int rank, size;
    double timeout_s;
    void *gathered; // rank_order's buffer: size × the largest gradient store, on the device
    size_t gathered_bytes;
    bool aborted;
};

static double now_s()
{
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void pause_briefly()
{
    timespec pause = {0, 50000};
    nanosleep(&pause, nullptr);
}

// After the deadline: the communicator is torn down (its kernels return) and the call fails.
static tg_status give_up(tg_nccl *c, const char *fn, const char *what)
{
    if (!c->aborted) ncclCommAbort(c->comm);
    c->aborted = true;
    return tg_set_error(
        TG_ERR_STATE, "%s: rank %d waited %.0f s for the other ranks %s (timeout_s): one has failed, died or is stuck",
        fn, c->rank, c->timeout_s, what);
}

// Polls the communicator until the last NCCL call has been enqueued (or failed).
static tg_status settle(tg_nccl *c, const char *fn, ncclResult_t result)
{
    const double start = now_s();
    while (result == ncclInProgress) {
        if (now_s() - start > c->timeout_s) return give_up(c, fn, "in NCCL");
        pause_briefly();
        ncclCommGetAsyncError(c->comm, &result);
    }
    if (result != ncclSuccess)
        return tg_set_error(TG_ERR_STATE, "%s: NCCL failed on rank %d: %s (%s)", fn, c->rank,
                            ncclGetErrorString(result), ncclGetLastError(c->comm));
    return TG_OK;
}

static bool usable(tg_nccl *c, const char *fn)
{
    if (c->aborted)
        tg_set_error(TG_ERR_STATE, "%s: the NCCL communicator of rank %d was aborted after an earlier failure", fn,
                     c->rank);
    return !c->aborted;
}

extern "C" tg_status tg_nccl_wait(tg_nccl *c, const char *fn)
{
    if (!usable(c, fn)) return TG_ERR_STATE;
    if (tg_cuda_capturing()) return TG_OK; // the replay runs it; the next wait outside covers it
    const double start = now_s();
    for (;;) {
        cudaError_t done = cudaStreamQuery(tg_cuda_stream());
        if (done == cudaSuccess) return TG_OK;
        if (done != cudaErrorNotReady) return tg_set_error(TG_ERR_DEVICE, "%s: %s", fn, cudaGetErrorString(done));
        ncclResult_t async;
        ncclCommGetAsyncError(c->comm, &async);
        if (async != ncclSuccess && async != ncclInProgress) return settle(c, fn, async);
        if (now_s() - start > c->timeout_s) return give_up(c, fn, "on the GPU");
        pause_briefly();
    }
}

extern "C" tg_status tg_nccl_select_device(int local_rank)
{
    int count = tg_cuda_device_count();
    if (count > 1) TG_CUDA_CHECK(cudaSetDevice(local_rank % count));
    return TG_OK;
}

extern "C" tg_status tg_nccl_unique_id(unsigned char id[TG_NCCL_ID_BYTES])
{
    ncclUniqueId unique;
    ncclResult_t result = ncclGetUniqueId(&unique);
    if (result != ncclSuccess)
        return tg_set_error(TG_ERR_STATE, "tg_dist_init: ncclGetUniqueId failed: %s", ncclGetErrorString(result));
    memcpy(id, &unique, sizeof unique);
    return TG_OK;
}

extern "C" tg_nccl *tg_nccl_create(int rank, int size, const unsigned char id[TG_NCCL_ID_BYTES], double timeout_s)
{
    tg_nccl *c = (tg_nccl *)calloc(1, sizeof *c);
    if (!c) return tg_set_error(TG_ERR_NOMEM, "tg_dist_init: out of memory"), nullptr;
    c->rank = rank, c->size = size, c->timeout_s = timeout_s;
    ncclUniqueId unique;
    memcpy(&unique, id, sizeof unique);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    if (settle(c, "tg_dist_init", ncclCommInitRankConfig(&c->comm, size, unique, rank, &config)) != TG_OK) {
        if (c->comm && !c->aborted) ncclCommAbort(c->comm);
        free(c);
        return nullptr;
    }
    return c;
}

extern "C" void tg_nccl_destroy(tg_nccl *c)
{
    if (!c) return;
    if (!c->aborted) {
        ncclResult_t result = ncclCommFinalize(c->comm);
        const double start = now_s();
        while (result == ncclInProgress && now_s() - start < c->timeout_s) {
            pause_briefly();
            ncclCommGetAsyncError(c->comm, &result);
        }
        if (result == ncclSuccess)
            ncclCommDestroy(c->comm);
        else
            ncclCommAbort(c->comm);
    }
    cudaFree(c->gathered);
    free(c);
}

static ncclDataType_t nccl_type(tg_dtype dtype)
{
    switch (dtype) {
    case TG_F64: return ncclFloat64;
    case TG_BF16: return ncclBfloat16;
    case TG_F16: return ncclFloat16;
    default: return ncclFloat32;
    }
}

// Waits unless a capture is under way (then the graph's replays run the collective).
static tg_status finish(tg_nccl *c, const char *fn, ncclResult_t result)
{
    tg_status status = settle(c, fn, result);
    return status == TG_OK ? tg_nccl_wait(c, fn) : status;
}

// The gathering buffer holds at least `bytes`; it cannot grow during a capture.
static tg_status gathered_room(tg_nccl *c, const char *fn, size_t bytes)
{
    if (bytes <= c->gathered_bytes) return TG_OK;
    if (tg_cuda_capturing())
        return tg_set_error(TG_ERR_STATE,
                            "%s: the first deterministic all-reduce of these gradients is being captured; run one step "
                            "outside the capture first (it allocates the buffer the ranks' gradients are gathered in)",
                            fn);
    cudaFree(c->gathered);
    c->gathered = nullptr, c->gathered_bytes = 0;
    TG_CUDA_CHECK(cudaMalloc(&c->gathered, bytes));
    c->gathered_bytes = bytes;
    return TG_OK;
}

extern "C" tg_status tg_nccl_allreduce(tg_nccl *c, const char *fn, void *data, tg_dtype dtype, int64_t n,
                                       bool rank_order)
{
    if (!usable(c, fn)) return TG_ERR_STATE;
    if (n == 0) return TG_OK;
    if (!rank_order)
        return finish(c, fn,
                      ncclAllReduce(data, data, (size_t)n, nccl_type(dtype), ncclSum, c->comm, tg_cuda_stream()));
    const size_t bytes = (size_t)n * tg_dtype_size(dtype);
    tg_status status = gathered_room(c, fn, bytes * (size_t)c->size);
    if (status == TG_OK)
        status = settle(c, fn, ncclAllGather(data, c->gathered, bytes, ncclUint8, c->comm, tg_cuda_stream()));
    if (status == TG_OK) status = tg_cuda_sum_in_order(data, c->gathered, c->size, n, dtype);
    return status == TG_OK ? tg_nccl_wait(c, fn) : status;
}

extern "C" tg_status tg_nccl_broadcast(tg_nccl *c, const char *fn, void *data, size_t bytes)
{
    if (!usable(c, fn)) return TG_ERR_STATE;
    return finish(c, fn, ncclBroadcast(data, data, bytes, ncclUint8, 0, c->comm, tg_cuda_stream()));
}

extern "C" tg_status tg_nccl_allgather_host(tg_nccl *c, const char *fn, const void *mine, void *all, size_t bytes)
{
    if (!usable(c, fn)) return TG_ERR_STATE;
    if (tg_cuda_capturing())
        return tg_set_error(TG_ERR_STATE, "%s: exchanges host values, which a CUDA graph capture cannot hold", fn);
    char *buffer = nullptr;
    const size_t total = bytes * (size_t)(c->size + 1);
    TG_CUDA_CHECK(cudaMalloc(&buffer, total ? total : 1));
    tg_status status = TG_OK;
    if (cudaMemcpy(buffer, mine, bytes, cudaMemcpyHostToDevice) != cudaSuccess)
        status = tg_set_error(TG_ERR_DEVICE, "%s: copying rank %d's values to the device failed", fn, c->rank);
    if (status == TG_OK)
        status = finish(c, fn, ncclAllGather(buffer, buffer + bytes, bytes, ncclUint8, c->comm, tg_cuda_stream()));
    if (status == TG_OK &&
        cudaMemcpy(all, buffer + bytes, bytes * (size_t)c->size, cudaMemcpyDeviceToHost) != cudaSuccess)
        status = tg_set_error(TG_ERR_DEVICE, "%s: copying the ranks' values to the host failed", fn);
    cudaFree(buffer);
    return status;
}

// ---- the sum in rank order ------------------------------------------------------------------

template <typename T> __device__ inline float to_float(T v) { return (float)v; }
template <> __device__ inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __device__ inline float to_float(__half v) { return __half2float(v); }
template <typename T> __device__ inline T from_float(float v) { return (T)v; }
template <> __device__ inline __nv_bfloat16 from_float(float v) { return __float2bfloat16_rn(v); }
template <> __device__ inline __half from_float(float v) { return __float2half_rn(v); }

// Each addition in float (double for f64), rounded to T before the next: the CPU's order.
template <typename T> __global__ void sum_in_order_kernel(T *out, const T *slices, int k, int64_t n)
{
    for (int64_t i = tg_global_index(); i < n; i += tg_global_stride()) {
        T acc = slices[i];
        for (int r = 1; r < k; r++) acc = from_float<T>(to_float(acc) + to_float(slices[(int64_t)r * n + i]));
        out[i] = acc;
    }
}

template <> __global__ void sum_in_order_kernel<double>(double *out, const double *slices, int k, int64_t n)
{
    for (int64_t i = tg_global_index(); i < n; i += tg_global_stride()) {
        double acc = slices[i];
        for (int r = 1; r < k; r++) acc += slices[(int64_t)r * n + i];
        out[i] = acc;
    }
}

template <typename T> static void launch_sum(void *out, const void *slices, int k, int64_t n)
{
    sum_in_order_kernel<T><<<tg_blocks_for(n), TG_THREADS, 0, tg_cuda_stream()>>>((T *)out, (const T *)slices, k, n);
}

extern "C" tg_status tg_cuda_sum_in_order(void *out, const void *slices, int k, int64_t n, tg_dtype dtype)
{
    if (n == 0 || k < 1) return TG_OK;
    switch (dtype) {
    case TG_F32: launch_sum<float>(out, slices, k, n); break;
    case TG_F64: launch_sum<double>(out, slices, k, n); break;
    case TG_BF16: launch_sum<__nv_bfloat16>(out, slices, k, n); break;
    case TG_F16: launch_sum<__half>(out, slices, k, n); break;
    default:
        return tg_set_error(TG_ERR_DTYPE, "tg_dist_allreduce_grads: the store's dtype %s cannot be summed",
                            tg_dtype_name(dtype));
    }
    return tg_cuda_check_launch("tg_dist_allreduce_grads");
}
