// kernels/cuda/rows.cuh: what the row-wise kernels (RMS norm, softmax, cross-entropy)
// share: a block per row over a strided view, block reductions whose order of additions
// depends only on the block size (so two runs give the same bits), float or double math
// chosen by the storage dtype, and the max-subtracted log-sum-exp of a row.
#ifndef TAPEGRAD_KERNELS_CUDA_ROWS_CUH
#define TAPEGRAD_KERNELS_CUDA_ROWS_CUH

#include "kernels/cuda/common.cuh"

#include <math.h>

// Element `offset` of a view, converted to the compute type.
template <typename Acc> __device__ inline Acc row_load(const tg_cuda_view &v, int64_t offset)
{
    return (Acc)tg_load_raw(v.data, v.dtype, offset);
}

template <typename Acc> __device__ inline void row_store(const tg_cuda_view &v, int64_t offset, Acc value)
{
    tg_store_raw(v.data, v.dtype, offset, (double)value);
}

// ---- rows of a view ---------------------------------------------------------------------
// A row is the last dimension; rows are numbered row-major over the leading dimensions.

// Element offset of the first element of row `row`.
__device__ inline int64_t row_start(const tg_cuda_view &v, int64_t row)
{
    int64_t offset = 0;
    for (int d = v.ndim - 2; d >= 0; d--) {
        offset += (row % v.shape[d]) * v.strides[d];
        row /= v.shape[d];
    }
    return offset;
}

__device__ inline int64_t row_step(const tg_cuda_view &v) { return v.strides[v.ndim - 1]; }

// Threads for a block that owns a row of n elements: a power of two from one warp up to
// 512, so short rows do not leave most of a large block idle.
static inline unsigned row_threads(int64_t n)
{
    unsigned threads = 32;
    while (threads < 512 && threads < n) threads *= 2;
    return threads;
}

// Blocks for `rows` rows, one row per block at a time; kernels loop over rows with a
// stride of gridDim.x, so the cap only matters for very many rows.
static inline unsigned row_blocks(int64_t rows)
{
    const int64_t cap = (int64_t)1 << 20;
    return (unsigned)(rows < 1 ? 1 : rows < cap ? rows : cap);
}

// ---- block reductions ---------------------------------------------------------------------
// blockDim.x must be a multiple of 32 (row_threads gives one). Every thread of the block
// must call them (they synchronise) and every thread receives the result.

struct sum_op {
    template <typename T> __device__ static T apply(T a, T b) { return a + b; }
};
// The larger value, or NaN when either is NaN (fmax would drop a NaN).
struct max_op {
    template <typename T> __device__ static T apply(T a, T b) { return (a > b || a != a) ? a : b; }
};
struct min_op {
    template <typename T> __device__ static T apply(T a, T b) { return a < b ? a : b; }
};

template <typename Op, typename T> __device__ inline T warp_reduce(T value)
{
    for (int lane_mask = 16; lane_mask > 0; lane_mask >>= 1)
        value = Op::apply(value, __shfl_xor_sync(0xffffffffu, value, lane_mask));
    return value;
}

// `shared` holds at least 33 values. A tree in a fixed shape: each warp reduces its
// lanes, then warp 0 reduces the warps' results.
template <typename Op, typename T> __device__ inline T block_reduce(T value, T identity, T *shared)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    value = warp_reduce<Op>(value);
    __syncthreads(); // earlier readers of `shared` are done
    if (lane == 0) shared[warp] = value;
    __syncthreads();
    if (warp == 0) {
        value = warp_reduce<Op>(lane < n_warps ? shared[lane] : identity);
        if (lane == 0) shared[32] = value;
    }
    __syncthreads();
    return shared[32];
}

template <typename T> __device__ inline T block_sum(T value, T *shared)
{
    return block_reduce<sum_op>(value, (T)0, shared);
}

// ---- log-sum-exp of a row ----------------------------------------------------------------

// log Σ_j exp(x_j) = max + log_sum, kept as two parts so that x_j − lse can be formed as
// (x_j − max) − log_sum without losing x_j's digits to a large max.
template <typename Acc> struct row_lse {
    Acc max;
    Acc log_sum;
};

// With the maximum subtracted no exp overflows. A NaN anywhere gives NaN; a row whose
// maximum is ±inf gives lse = max (log_sum 0), as the CPU kernel does, rather than
// forming inf − inf.
template <typename Acc>
__device__ inline row_lse<Acc> row_logsumexp(const tg_cuda_view &x, int64_t start, int64_t n, Acc *shared)
{
    int64_t step = row_step(x);
    Acc max = -INFINITY;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) max = max_op::apply(max, row_load<Acc>(x, start + j * step));
    max = block_reduce<max_op>(max, (Acc)-INFINITY, shared);
    if (isinf(max) || isnan(max)) return {max, (Acc)0};
    Acc sum = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) sum += tg_exp(row_load<Acc>(x, start + j * step) - max);
    return {max, tg_log(block_sum(sum, shared))};
}

#endif
