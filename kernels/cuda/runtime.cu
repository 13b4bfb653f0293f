// kernels/cuda/runtime.cu: the CUDA runtime calls core/ needs (memory, copies, sync) and
// the general-purpose kernels behind tensors on the device: strided copy with dtype
// conversion, fill, add-into, the deterministic sum that undoes broadcasting, axpy and
// random fills through cuRAND. Only the extern "C" functions of kernels/cuda_api.h leave.
#include "kernels/cuda/strided.cuh"

#include <curand.h>
#include <stdio.h>

extern "C" int tg_cuda_device_count(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError(); // clear the sticky "no device" error
        return 0;
    }
    return count;
}

extern "C" tg_status tg_cuda_malloc(void **ptr, size_t bytes)
{
    TG_CUDA_CHECK(cudaMalloc(ptr, bytes ? bytes : 1));
    return TG_OK;
}

extern "C" tg_status tg_cuda_free(void *ptr)
{
    TG_CUDA_CHECK(cudaFree(ptr));
    return TG_OK;
}

// Copies that involve the host wait for them (the host buffer is ready, or free to reuse,
// on return); a copy within the device is queued on the stream like a kernel.
static tg_status refuse_wait_in_capture(const char *what);

extern "C" tg_status tg_cuda_memcpy(void *dst, const void *src, size_t bytes, tg_copy_direction direction)
{
    if (!bytes) return TG_OK;
    if (direction == TG_COPY_DEVICE_TO_DEVICE) {
        TG_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, tg_cuda_stream()));
        return TG_OK;
    }
    tg_status refused =
        refuse_wait_in_capture(direction == TG_COPY_HOST_TO_DEVICE ? "a copy from the host" : "a copy to the host");
    if (refused != TG_OK) return refused;
    cudaMemcpyKind kind = direction == TG_COPY_HOST_TO_DEVICE ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
    TG_CUDA_CHECK(cudaMemcpy(dst, src, bytes, kind));
    return TG_OK;
}

extern "C" tg_status tg_cuda_memset(void *ptr, int value, size_t bytes)
{
    if (bytes) TG_CUDA_CHECK(cudaMemsetAsync(ptr, value, bytes, tg_cuda_stream()));
    return TG_OK;
}

extern "C" tg_status tg_cuda_memset_zero(void *ptr, size_t bytes) { return tg_cuda_memset(ptr, 0, bytes); }

extern "C" tg_status tg_cuda_synchronize(void)
{
    tg_status refused = refuse_wait_in_capture("a wait for the device");
    if (refused != TG_OK) return refused;
    TG_CUDA_CHECK(cudaDeviceSynchronize());
    return TG_OK;
}

// ---- strided elementwise kernels ----------------------------------------------------------
//
// copy, fill and add-into serve every layout and dtype through a merged index plan
// (strided.cuh: contiguous operands become one dimension, so the device divides as little
// as it can), with the values in double and rounded once on store. The gradient sums of a
// training step are mostly dense f32 pairs, which get 16-byte accesses and float maths:
// a float sum of two floats equals their double sum rounded to float, so the bits are
// the same either way. Same-dtype copies between row blocks (a split's gradient pieces
// written into the whole's) move 16-byte vectors row by row.

enum elementwise_kind { COPY, ADD_INTO };

template <elementwise_kind Kind> __global__ void strided_kernel(tg_strided<2> plan, int64_t n)
{
    for (int64_t i = tg_global_index(); i < n; i += tg_global_stride()) {
        int64_t at[2];
        tg_strided_offsets(plan, i, at);
        double v = tg_load_raw(plan.data[1], plan.dtype[1], at[1]);
        if (Kind == ADD_INTO) v += tg_load_raw(plan.data[0], plan.dtype[0], at[0]);
        tg_store_raw(plan.data[0], plan.dtype[0], at[0], v);
    }
}

// dst (+)= src over n dense floats; both start 16-byte aligned.
template <elementwise_kind Kind> __global__ void dense_f32_kernel(float *dst, const float *src, int64_t n)
{
    const int64_t quads = n / 4;
    float4 *dst4 = (float4 *)dst;
    const float4 *src4 = (const float4 *)src;
    for (int64_t i = tg_global_index(); i < quads; i += tg_global_stride()) {
        float4 v = src4[i];
        if (Kind == ADD_INTO) {
            const float4 d = dst4[i];
            v.x += d.x, v.y += d.y, v.z += d.z, v.w += d.w;
        }
        dst4[i] = v;
    }
    for (int64_t i = 4 * quads + tg_global_index(); i < n; i += tg_global_stride())
        dst[i] = Kind == ADD_INTO ? dst[i] + src[i] : src[i];
}

// dst (+)= src over n dense bf16 or f16 values, the sum in float and rounded once (the
// same bits as the strided kernel's double sum rounded through f32). With `vectors`, both
// start 16-byte aligned and go 8 values per access, the last n % 8 one by one.
template <elementwise_kind Kind, typename T>
__global__ void dense_16_kernel(T *dst, const T *src, int64_t n, bool vectors)
{
    const int64_t octets = vectors ? n / 8 : 0;
    for (int64_t i = tg_global_index(); i < octets; i += tg_global_stride()) {
        uint4 v = ((const uint4 *)src)[i];
        if (Kind == ADD_INTO) {
            const uint4 d = ((const uint4 *)dst)[i];
            T *sum = reinterpret_cast<T *>(&v);
            const T *old = reinterpret_cast<const T *>(&d);
#pragma unroll
            for (int k = 0; k < 8; k++) sum[k] = tg_from_float<T>(tg_to_float(old[k]) + tg_to_float(sum[k]));
        }
        ((uint4 *)dst)[i] = v;
    }
    for (int64_t i = 8 * octets + tg_global_index(); i < n; i += tg_global_stride())
        dst[i] = Kind == ADD_INTO ? tg_from_float<T>(tg_to_float(dst[i]) + tg_to_float(src[i])) : src[i];
}

// A copy of `rows` rows of vecs_per_row 16-byte vectors each, the rows dst_pitch and
// src_pitch bytes apart in the two operands: the blocks of a split or a concat, in any dtype.
__global__ void copy_rows_kernel(char *dst, int64_t dst_pitch, const char *src, int64_t src_pitch, int64_t rows,
                                 int64_t vecs_per_row)
{
    const int64_t n = rows * vecs_per_row;
    for (int64_t i = tg_global_index(); i < n; i += tg_global_stride()) {
        const int64_t r = i / vecs_per_row, v = i - r * vecs_per_row;
        ((uint4 *)(dst + r * dst_pitch))[v] = ((const uint4 *)(src + r * src_pitch))[v];
    }
}

// Whether a same-dtype copy's plan is rows that copy_rows_kernel takes: two dimensions, the
// inner one contiguous in both operands, every row a whole number of 16-byte vectors that
// start 16-byte aligned.
static bool copies_as_rows(const tg_strided<2> &plan, int64_t elem_bytes)
{
    if (plan.ndim != 2 || plan.strides[0][1] != 1 || plan.strides[1][1] != 1 || plan.shape[1] * elem_bytes % 16)
        return false;
    for (int op = 0; op < 2; op++)
        if ((uintptr_t)plan.data[op] % 16 || plan.strides[op][0] <= 0 || plan.strides[op][0] * elem_bytes % 16)
            return false;
    return true;
}

__global__ void fill_kernel(tg_strided<1> plan, double value, int64_t n)
{
    for (int64_t i = tg_global_index(); i < n; i += tg_global_stride()) {
        int64_t at;
        tg_strided_offsets(plan, i, &at);
        tg_store_raw(plan.data[0], plan.dtype[0], at, value);
    }
}

template <elementwise_kind Kind, typename T>
static void launch_dense_16(const tg_strided<2> &plan, int64_t n, bool aligned)
{
    dense_16_kernel<Kind><<<tg_blocks_for(aligned ? (n + 7) / 8 : n), TG_THREADS>>>(
        (T *)plan.data[0], (const T *)plan.data[1], n, aligned);
}

template <elementwise_kind Kind>
static tg_status launch_elementwise(tg_tensor *dst, const tg_tensor *src, const char *op)
{
    const int64_t n = tg_numel(dst);
    if (n == 0) return TG_OK;
    const int64_t *strides[2] = {dst->strides, src->strides};
    tg_strided<2> plan = tg_strided_plan<2>(dst->ndim, dst->shape, strides);
    tg_strided_bind(plan, 0, dst);
    tg_strided_bind(plan, 1, src);
    const bool aligned = (uintptr_t)plan.data[0] % 16 == 0 && (uintptr_t)plan.data[1] % 16 == 0;
    const bool dense_same = tg_strided_is_dense(plan) && dst->dtype == src->dtype;
    const int64_t elem = (int64_t)tg_dtype_size(dst->dtype);
    if (dense_same && dst->dtype == TG_F32 && aligned)
        dense_f32_kernel<Kind>
            <<<tg_blocks_for((n + 3) / 4), TG_THREADS>>>((float *)plan.data[0], (const float *)plan.data[1], n);
    else if (dense_same && dst->dtype == TG_BF16)
        launch_dense_16<Kind, __nv_bfloat16>(plan, n, aligned);
    else if (dense_same && dst->dtype == TG_F16)
        launch_dense_16<Kind, __half>(plan, n, aligned);
    else if (Kind == COPY && dst->dtype == src->dtype && copies_as_rows(plan, elem)) {
        const int64_t vecs_per_row = plan.shape[1] * elem / 16;
        copy_rows_kernel<<<tg_blocks_for(plan.shape[0] * vecs_per_row), TG_THREADS>>>(
            plan.data[0], plan.strides[0][0] * elem, plan.data[1], plan.strides[1][0] * elem, plan.shape[0],
            vecs_per_row);
    } else
        strided_kernel<Kind><<<tg_blocks_for(n), TG_THREADS>>>(plan, n);
    return tg_cuda_check_launch(op);
}

extern "C" tg_status tg_cuda_copy(tg_tensor *dst, const tg_tensor *src)
{
    return launch_elementwise<COPY>(dst, src, "tg_copy");
}

extern "C" tg_status tg_cuda_add_into(tg_tensor *dst, const tg_tensor *src)
{
    return launch_elementwise<ADD_INTO>(dst, src, "tg_accumulate_grad");
}

extern "C" tg_status tg_cuda_fill(tg_tensor *t, double value)
{
    const int64_t n = tg_numel(t);
    if (n == 0) return TG_OK;
    const int64_t *strides[1] = {t->strides};
    tg_strided<1> plan = tg_strided_plan<1>(t->ndim, t->shape, strides);
    tg_strided_bind(plan, 0, t);
    fill_kernel<<<tg_blocks_for(n), TG_THREADS>>>(plan, value, n);
    return tg_cuda_check_launch("tg_fill");
}

// ---- the sum that undoes broadcasting -------------------------------------------------------

// g's dimensions split in two: kept (they index the output) and summed (out's stride 0).
struct sum_plan {
    int n_kept, n_summed;
    int64_t kept_shape[TG_MAX_DIMS], kept_g_stride[TG_MAX_DIMS];
    int64_t summed_shape[TG_MAX_DIMS], summed_g_stride[TG_MAX_DIMS];
    int64_t summed_count;
};

__global__ void sum_to_kernel(tg_cuda_view out, tg_cuda_view g, sum_plan plan, int64_t n_out)
{
    for (int64_t i = tg_global_index(); i < n_out; i += tg_global_stride()) {
        int64_t rest = i, base = 0;
        for (int d = plan.n_kept - 1; d >= 0; d--) {
            base += (rest % plan.kept_shape[d]) * plan.kept_g_stride[d];
            rest /= plan.kept_shape[d];
        }
        double sum = 0.0; // in a fixed order: the result does not depend on scheduling
        for (int64_t r = 0; r < plan.summed_count; r++) {
            int64_t left = r, offset = base;
            for (int d = plan.n_summed - 1; d >= 0; d--) {
                offset += (left % plan.summed_shape[d]) * plan.summed_g_stride[d];
                left /= plan.summed_shape[d];
            }
            sum += tg_load_any(g, offset);
        }
        tg_store_any(out, tg_offset_of(out, i), sum);
    }
}

extern "C" tg_status tg_cuda_sum_to(tg_tensor *out, const int64_t *out_strides, const tg_tensor *g)
{
    sum_plan plan = {};
    plan.summed_count = 1;
    for (int d = 0; d < g->ndim; d++) {
        if (out_strides[d] == 0 && g->shape[d] != 1) {
            plan.summed_shape[plan.n_summed] = g->shape[d];
            plan.summed_g_stride[plan.n_summed++] = g->strides[d];
            plan.summed_count *= g->shape[d];
        } else {
            plan.kept_shape[plan.n_kept] = g->shape[d];
            plan.kept_g_stride[plan.n_kept++] = g->strides[d];
        }
    }
    int64_t n_out = tg_numel(out);
    if (n_out == 0) return TG_OK;
    sum_to_kernel<<<tg_blocks_for(n_out), TG_THREADS>>>(tg_view_of(out), tg_view_of(g), plan, n_out);
    return tg_cuda_check_launch("tg_reduce_to_shape");
}

// ---- parameter update and random fills -----------------------------------------------------------

__global__ void axpy_kernel(char *y, const char *x, int dtype, int64_t n, double alpha)
{
    for (int64_t i = tg_global_index(); i < n; i += tg_global_stride())
        tg_store_raw(y, dtype, i, tg_load_raw(y, dtype, i) + alpha * tg_load_raw(x, dtype, i));
}

extern "C" tg_status tg_cuda_axpy(void *y, const void *x, tg_dtype dtype, int64_t n, double alpha)
{
    if (n == 0) return TG_OK;
    axpy_kernel<<<tg_blocks_for(n), TG_THREADS>>>((char *)y, (const char *)x, (int)dtype, n, alpha);
    return tg_cuda_check_launch("axpy");
}

// t[i] = a + b·u[i] (u contiguous floats), written into t's layout and dtype.
__global__ void affine_kernel(tg_cuda_view t, const float *u, double a, double b, int64_t n)
{
    for (int64_t i = tg_global_index(); i < n; i += tg_global_stride())
        tg_store_any(t, tg_offset_of(t, i), a + b * u[i]);
}

#define TG_CURAND_CHECK(call)                                                                                          \
    do {                                                                                                               \
        curandStatus_t curand_status_ = (call);                                                                        \
        if (curand_status_ != CURAND_STATUS_SUCCESS) {                                                                 \
            status = tg_set_error(TG_ERR_DEVICE, "%s failed with cuRAND status %d", #call, (int)curand_status_);       \
            goto done;                                                                                                 \
        }                                                                                                              \
    } while (0)

extern "C" tg_status tg_cuda_fill_random(tg_tensor *t, uint64_t seed, bool normal, double a, double b)
{
    int64_t n = tg_numel(t);
    if (n == 0) return TG_OK;
    size_t count = (size_t)(n + (n & 1)); // cuRAND's normal generator wants an even count
    float *u = NULL;
    curandGenerator_t generator = NULL;
    tg_status status = tg_device_alloc(TG_DEVICE_CUDA, count * sizeof(float), (void **)&u);
    if (status != TG_OK) return status;
    TG_CURAND_CHECK(curandCreateGenerator(&generator, CURAND_RNG_PSEUDO_PHILOX4_32_10));
    TG_CURAND_CHECK(curandSetStream(generator, tg_cuda_stream()));
    TG_CURAND_CHECK(curandSetPseudoRandomGeneratorSeed(generator, seed));
    if (normal)
        TG_CURAND_CHECK(curandGenerateNormal(generator, u, count, 0.0f, 1.0f));
    else
        TG_CURAND_CHECK(curandGenerateUniform(generator, u, count)); // (0, 1]
    affine_kernel<<<tg_blocks_for(n), TG_THREADS>>>(tg_view_of(t), u, a, normal ? b : b - a, n);
    status = tg_cuda_check_launch("tg_fill_random");
done:
    if (generator) curandDestroyGenerator(generator);
    tg_device_free(TG_DEVICE_CUDA, u, count * sizeof(float));
    return status;
}

// ---- stream capture into CUDA graphs ------------------------------------------------------------
//
// Relaxed capture: calls that are unsafe while another thread captures (cudaMalloc, say) stay
// allowed. A call that would wait for the stream (a copy to or from the host) is refused
// before it reaches CUDA, and the capture is marked broken: tg_cuda_capture_end then
// throws the graph away and names the call.

static char capture_broken_by[128]; // empty while the capture is sound

static tg_status refuse_wait_in_capture(const char *what)
{
    if (!tg_cuda_capturing()) return TG_OK;
    if (!capture_broken_by[0]) snprintf(capture_broken_by, sizeof capture_broken_by, "%s", what);
    return tg_set_error(TG_ERR_STATE,
                        "%s waits for the device, which a CUDA graph capture cannot record "
                        "(the capture is now broken: tg_graph_end will fail)",
                        what);
}

extern "C" bool tg_cuda_capturing(void)
{
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(tg_cuda_stream(), &status) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return status == cudaStreamCaptureStatusActive;
}

extern "C" tg_status tg_cuda_capture_begin(void)
{
    capture_broken_by[0] = '\0';
    TG_CUDA_CHECK(cudaStreamBeginCapture(tg_cuda_stream(), cudaStreamCaptureModeRelaxed));
    return TG_OK;
}

extern "C" tg_status tg_cuda_capture_end(void **exec, size_t *n_nodes)
{
    *exec = NULL;
    *n_nodes = 0;
    cudaGraph_t graph = NULL;
    cudaError_t error = cudaStreamEndCapture(tg_cuda_stream(), &graph);
    if (error != cudaSuccess || !graph) {
        cudaGetLastError();
        return tg_set_error(TG_ERR_DEVICE,
                            "the capture failed: %s (a call during it waited for the device, or a "
                            "kernel could not be recorded)",
                            cudaGetErrorString(error == cudaSuccess ? cudaErrorStreamCaptureInvalidated : error));
    }
    if (capture_broken_by[0]) {
        cudaGraphDestroy(graph);
        tg_status status = tg_set_error(TG_ERR_STATE,
                                        "the capture failed: %s was called during it, and waits for "
                                        "the device",
                                        capture_broken_by);
        capture_broken_by[0] = '\0';
        return status;
    }
    cudaGraphGetNodes(graph, NULL, n_nodes);
    cudaGraphExec_t instance = NULL;
    error = cudaGraphInstantiate(&instance, graph, 0);
    cudaGraphDestroy(graph);
    if (error != cudaSuccess) {
        cudaGetLastError();
        return tg_set_error(TG_ERR_DEVICE, "cudaGraphInstantiate failed: %s", cudaGetErrorString(error));
    }
    *exec = instance;
    return TG_OK;
}

extern "C" tg_status tg_cuda_graph_launch(void *exec)
{
    TG_CUDA_CHECK(cudaGraphLaunch((cudaGraphExec_t)exec, tg_cuda_stream()));
    return TG_OK;
}

extern "C" void tg_cuda_graph_destroy(void *exec)
{
    if (exec) cudaGraphExecDestroy((cudaGraphExec_t)exec);
}

// ---- bad inputs found on the device --------------------------------------------------------------

static tg_bad_input *bad_input_record;

extern "C" tg_bad_input *tg_cuda_bad_input_record(void)
{
    if (bad_input_record) return bad_input_record;
    tg_bad_input none = {};
    void *record = NULL;
    cudaError_t error = cudaMalloc(&record, sizeof none);
    if (error == cudaSuccess) error = cudaMemcpy(record, &none, sizeof none, cudaMemcpyHostToDevice);
    if (error != cudaSuccess) {
        cudaGetLastError();
        if (record) cudaFree(record);
        tg_set_error(TG_ERR_DEVICE, "no device memory for the record of bad inputs: %s", cudaGetErrorString(error));
        return NULL;
    }
    return bad_input_record = (tg_bad_input *)record;
}

extern "C" tg_status tg_cuda_take_bad_input(tg_bad_input *out)
{
    *out = tg_bad_input{};
    if (!bad_input_record) return TG_OK; // nothing could have been recorded
    tg_status refused = refuse_wait_in_capture("reading the record of bad inputs");
    if (refused != TG_OK) return refused;
    tg_bad_input none = {};
    TG_CUDA_CHECK(cudaMemcpy(out, bad_input_record, sizeof *out, cudaMemcpyDeviceToHost));
    if (out->kind != TG_BAD_INPUT_NONE)
        TG_CUDA_CHECK(cudaMemcpy(bad_input_record, &none, sizeof none, cudaMemcpyHostToDevice));
    return TG_OK;
}
