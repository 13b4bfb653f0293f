// kernels/cuda/matmul.cu: matrix products on the GPU through cuBLAS.
//
// cuBLAS is column-major, and a row-major matrix read as column-major is its transpose.
// So the row-major product C = op(A)·op(B) is asked for as the column-major product
// Cᵀ = op(B)ᵀ·op(A)ᵀ: B goes first, A second, and cuBLAS's column-major Cᵀ is exactly C
// in row-major order.
//
// Precision: f32 uses CUBLAS_COMPUTE_32F in the default math mode, which multiplies in
// full f32 — no TF32 tensor cores — so f32 results agree with the CPU's f32 GEMM to
// rounding; with tg_matmul_set_tf32(true) it uses CUBLAS_COMPUTE_32F_FAST_TF32 instead. bf16 and f16 are read as stored and accumulated in float
// (CUBLAS_COMPUTE_32F), the result rounded once to the storage type. f64 uses
// CUBLAS_COMPUTE_64F.
//
// Layouts, as in the CPU kernel: a matrix stored row-major with a unit column step, or
// column-major (the transpose of that; the cuBLAS transpose flag absorbs it), is read in
// place; batches whose matrices lie one fixed stride apart (0 for a matrix shared by every
// batch) go to a single strided-batched call. Any other input is first copied whole
// into contiguous scratch so the product stays one call; an output that cannot be
// written in place is computed into scratch and copied back.
#include "kernels/cuda/common.cuh"
#include "kernels/matmul.h"
#include "tapegrad/ops.h"

#include <cublas_v2.h>
#include <limits.h>

// Created on first use and kept for the life of the process (a handle is costly to make).
// It runs on the backend's stream with a workspace of its own, so that a product can be
// captured into a CUDA graph (cuBLAS would otherwise allocate its workspace during capture).
static cublasHandle_t cublas_handle;
static void *cublas_workspace;
static const size_t cublas_workspace_bytes = (size_t)32 << 20; // what cuBLAS recommends for Hopper

static tg_status cublas_failed(const char *call, cublasStatus_t status)
{
    return tg_set_error(TG_ERR_DEVICE, "tg_matmul: %s failed: %s", call, cublasGetStatusString(status));
}

static tg_status get_handle(cublasHandle_t *handle)
{
    if (!cublas_handle) {
        cublasHandle_t created;
        cublasStatus_t status = cublasCreate(&created);
        if (status != CUBLAS_STATUS_SUCCESS) return cublas_failed("cublasCreate", status);
        // The default already; set so that f32 products never go through TF32.
        status = cublasSetMathMode(created, CUBLAS_DEFAULT_MATH);
        if (status == CUBLAS_STATUS_SUCCESS) status = cublasSetStream(created, tg_cuda_stream());
        if (status == CUBLAS_STATUS_SUCCESS && !cublas_workspace &&
            cudaMalloc(&cublas_workspace, cublas_workspace_bytes) != cudaSuccess) {
            cudaGetLastError();
            cublasDestroy(created);
            return tg_set_error(TG_ERR_NOMEM, "tg_matmul: no CUDA memory for cuBLAS's workspace of %zu bytes",
                                cublas_workspace_bytes);
        }
        if (status == CUBLAS_STATUS_SUCCESS)
            status = cublasSetWorkspace(created, cublas_workspace, cublas_workspace_bytes);
        if (status != CUBLAS_STATUS_SUCCESS) {
            cublasDestroy(created);
            return cublas_failed("setting up the cuBLAS handle", status);
        }
        cublas_handle = created;
    }
    *handle = cublas_handle;
    return TG_OK;
}

static bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

// One operand (or the output) as cuBLAS reaches it.
struct operand {
    char *data;           // batch 0's matrix
    int64_t ld;           // cuBLAS's leading dimension
    int64_t batch_stride; // elements from one batch's matrix to the next; 0 when shared
    bool flipped;         // stored column-major: the cuBLAS transpose flag is toggled
    bool copied;          // data is `scratch`, a contiguous copy of the whole tensor
    tg_storage storage;   // scratch's memory
    tg_tensor scratch;
};

// Whether cuBLAS can read t's matrices (its last two axes) where they lie: row-major with
// a unit column step (ld is the row stride) or, when may_flip, column-major (ld is the
// column stride). The stride of a size-1 axis never matters; ld must fit in an int and
// be at least the length of a stored column, as cuBLAS requires.
static bool matrix_in_place(const tg_tensor *t, bool may_flip, int64_t *ld, bool *flipped)
{
    int nd = t->ndim;
    int64_t rows = t->shape[nd - 2], cols = t->shape[nd - 1], rs = t->strides[nd - 2], cs = t->strides[nd - 1];
    *flipped = false;
    if ((cols == 1 || cs == 1) && (rows == 1 || (rs >= cols && fits_int(rs)))) {
        *ld = rows == 1 ? cols : rs;
        return true;
    }
    if (may_flip && (rows == 1 || rs == 1) && (cols == 1 || (cs >= rows && fits_int(cs)))) {
        *ld = cols == 1 ? rows : cs;
        *flipped = true;
        return true;
    }
    return false;
}

// The one stride between consecutive batches (numbered row-major over out's batch
// axes), when one stride serves them all; 0 for a 2-D matrix used by every batch.
static bool batch_stride(const tg_tensor *t, const tg_tensor *out, int64_t *stride)
{
    *stride = 0;
    if (t->ndim != out->ndim) return true;
    int64_t span = 1; // batches spanned by the axes after d
    bool found = false;
    for (int d = t->ndim - 3; d >= 0; d--) {
        if (t->shape[d] == 1) continue;
        int64_t expected;
        if (!found)
            *stride = t->strides[d];
        else if (tg_mul_overflows(*stride, span, &expected) || t->strides[d] != expected)
            return false;
        found = true;
        span *= t->shape[d];
    }
    return true;
}

// Points op at a contiguous copy of t (all of its batches) in new device memory; with
// fill the copy receives t's values (an input), else it is left for cuBLAS to write.
static tg_status use_scratch(operand *op, const tg_tensor *t, const tg_tensor *out, bool fill)
{
    int nd = t->ndim;
    int64_t numel, bytes;
    if (!tg_shape_numel(nd, t->shape, &numel) || tg_mul_overflows(numel, (int64_t)tg_dtype_size(t->dtype), &bytes))
        return tg_set_error(TG_ERR_OVERFLOW, "tg_matmul: a contiguous copy of a %d-D operand is too large", nd);
    void *data = NULL;
    tg_status status = tg_device_alloc(TG_DEVICE_CUDA, (size_t)bytes, &data);
    if (status != TG_OK) return status;
    op->storage = tg_storage{data, (size_t)bytes, TG_DEVICE_CUDA, TG_STORAGE_HEAP};
    op->scratch = *t;
    op->scratch.storage = &op->storage;
    op->scratch.offset = 0;
    tg_contiguous_strides(nd, t->shape, op->scratch.strides);
    op->copied = true;
    op->data = (char *)data;
    op->ld = t->shape[nd - 1];
    op->flipped = false;
    op->batch_stride = nd == out->ndim ? t->shape[nd - 2] * t->shape[nd - 1] : 0;
    return fill ? tg_cuda_copy(&op->scratch, t) : TG_OK;
}

// Decides how cuBLAS reaches t: in place or through scratch. The output may not be
// column-major (cuBLAS writes it row-major here), and its batches must not overlap.
static tg_status operand_init(operand *op, const tg_tensor *t, const tg_tensor *out, int64_t batches, bool is_output)
{
    int64_t stride = 0;
    bool in_place = matrix_in_place(t, !is_output, &op->ld, &op->flipped) && batch_stride(t, out, &stride);
    if (in_place && is_output && batches > 1) in_place = stride >= t->shape[t->ndim - 2] * op->ld;
    if (!in_place) return use_scratch(op, t, out, !is_output);
    op->data = tg_bytes(t);
    op->batch_stride = stride;
    return TG_OK;
}

static void operand_release(operand *op)
{
    if (op->copied) tg_device_free(TG_DEVICE_CUDA, op->storage.data, op->storage.nbytes);
}

// Batches per cuBLAS call: at most 65535 (a CUDA grid's y and z limit), a precaution in
// case a GEMM kernel lays the batch on one of those dimensions; more calls cost little.
#define MAX_BATCHES_PER_CALL 65535

// C = op(A)·op(B) for every batch, as the column-major Cᵀ = op(B)ᵀ·op(A)ᵀ (see the top).
static tg_status gemm_batches(cublasHandle_t handle, tg_dtype dtype, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                              int64_t batches, const operand *a, const operand *b, const operand *c)
{
    cudaDataType_t type = CUDA_R_32F;
    cublasComputeType_t compute =
        dtype == TG_F32 && tg_matmul_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const float one_f = 1.0f, zero_f = 0.0f;
    const double one_d = 1.0, zero_d = 0.0;
    const void *alpha = &one_f, *beta = &zero_f; // float scalars for CUBLAS_COMPUTE_32F
    if (dtype == TG_F64) {
        type = CUDA_R_64F;
        compute = CUBLAS_COMPUTE_64F;
        alpha = &one_d;
        beta = &zero_d;
    } else if (dtype == TG_BF16) {
        type = CUDA_R_16BF;
    } else if (dtype == TG_F16) {
        type = CUDA_R_16F;
    }
    cublasOperation_t op_a = ta != a->flipped ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = tb != b->flipped ? CUBLAS_OP_T : CUBLAS_OP_N;
    int64_t size = (int64_t)tg_dtype_size(dtype);
    for (int64_t first = 0; first < batches; first += MAX_BATCHES_PER_CALL) {
        int count = (int)(batches - first < MAX_BATCHES_PER_CALL ? batches - first : MAX_BATCHES_PER_CALL);
        const char *pa = a->data + first * a->batch_stride * size, *pb = b->data + first * b->batch_stride * size;
        char *pc = c->data + first * c->batch_stride * size;
        cublasStatus_t status = cublasGemmStridedBatchedEx(
            handle, op_b, op_a, (int)n, (int)m, (int)k, alpha, pb, type, (int)b->ld, (long long)b->batch_stride, pa,
            type, (int)a->ld, (long long)a->batch_stride, beta, pc, type, (int)c->ld, (long long)c->batch_stride, count,
            compute, CUBLAS_GEMM_DEFAULT);
        if (status != CUBLAS_STATUS_SUCCESS) return cublas_failed("cublasGemmStridedBatchedEx", status);
    }
    return TG_OK;
}

extern "C" tg_status tg_cuda_matmul(const tg_tensor *a, const tg_tensor *b, bool transpose_a, bool transpose_b,
                                    tg_tensor *out)
{
    int nd = out->ndim;
    int64_t m = out->shape[nd - 2], n = out->shape[nd - 1], k = a->shape[a->ndim - (transpose_a ? 2 : 1)];
    int64_t batches = 1;
    for (int i = 0; i < nd - 2; i++) batches *= out->shape[i];
    if (m == 0 || n == 0 || batches == 0) return TG_OK;
    if (k == 0) return tg_cuda_fill(out, 0.0); // a sum of nothing
    if (!fits_int(m) || !fits_int(n) || !fits_int(k))
        return tg_set_error(TG_ERR_OVERFLOW, "tg_matmul: M = %lld, N = %lld and K = %lld must each fit in a 32-bit int",
                            (long long)m, (long long)n, (long long)k);
    cublasHandle_t handle = NULL;
    tg_status status = get_handle(&handle);
    if (status != TG_OK) return status;
    operand oa = {}, ob = {}, oc = {};
    status = operand_init(&oa, a, out, batches, false);
    if (status == TG_OK) status = operand_init(&ob, b, out, batches, false);
    if (status == TG_OK) status = operand_init(&oc, out, out, batches, true);
    if (status == TG_OK)
        status = gemm_batches(handle, out->dtype, transpose_a, transpose_b, m, n, k, batches, &oa, &ob, &oc);
    if (status == TG_OK && oc.copied) status = tg_cuda_copy(out, &oc.scratch);
    // Scratch goes back to the cache at once: later work on the one stream runs after.
    operand_release(&oa);
    operand_release(&ob);
    operand_release(&oc);
    return status;
}
