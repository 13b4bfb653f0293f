// kernels/cuda/strided.cuh: several strided operands walked together over one index
// space, for kernels that take any layout. The host merges dimensions first (drops
// size-1 ones, joins neighbours whose strides chain for every operand), so contiguous
// operands become one dimension of stride 1 and the device divides as little as it can.
#ifndef TAPEGRAD_KERNELS_CUDA_STRIDED_CUH
#define TAPEGRAD_KERNELS_CUDA_STRIDED_CUH

#include "kernels/cuda/common.cuh"

// N operands over one index space of ndim dimensions (row-major logical order).
template <int N> struct tg_strided {
    int ndim;
    int64_t shape[TG_MAX_DIMS];
    int64_t strides[N][TG_MAX_DIMS];
    char *data[N]; // element 0 of each operand
    int dtype[N];
};

// The merged index space of `shape` for N operands with the given strides (0 where an
// operand is broadcast). Keeps the row-major order of the elements, so logical index i
// still means the same element. Always at least one dimension.
template <int N>
static inline tg_strided<N> tg_strided_plan(int ndim, const int64_t *shape, const int64_t *const *strides)
{
    tg_strided<N> plan = {};
    int k = 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 1) continue; // index always 0: its stride never matters
        bool chains = k > 0;
        for (int op = 0; op < N && chains; op++) chains = plan.strides[op][k - 1] == strides[op][d] * shape[d];
        if (chains) { // the outer dimension steps exactly over the inner one: one dimension
            plan.shape[k - 1] *= shape[d];
            for (int op = 0; op < N; op++) plan.strides[op][k - 1] = strides[op][d];
            continue;
        }
        plan.shape[k] = shape[d];
        for (int op = 0; op < N; op++) plan.strides[op][k] = strides[op][d];
        k++;
    }
    if (k == 0) { // one element (or every dimension of size 1)
        plan.shape[0] = 1;
        for (int op = 0; op < N; op++) plan.strides[op][0] = 0;
        k = 1;
    }
    plan.ndim = k;
    return plan;
}

// Operand op is t itself (data and dtype); its strides were given to tg_strided_plan.
template <int N> static inline void tg_strided_bind(tg_strided<N> &plan, int op, const tg_tensor *t)
{
    plan.data[op] = tg_bytes(t);
    plan.dtype[op] = (int)t->dtype;
}

// Whether every operand walks its memory densely in order (offset = i for all).
template <int N> static inline bool tg_strided_is_dense(const tg_strided<N> &plan)
{
    if (plan.ndim != 1) return false;
    for (int op = 0; op < N; op++)
        if (plan.strides[op][0] != 1 && plan.shape[0] != 1) return false;
    return true;
}

// The element offsets of logical index i (0 ≤ i < the plan's element count) in each
// operand: one division per dimension but the outermost, whose digit is what is left.
template <int N> __device__ inline void tg_strided_offsets(const tg_strided<N> &plan, int64_t i, int64_t *offset)
{
    for (int op = 0; op < N; op++) offset[op] = 0;
    for (int d = plan.ndim - 1; d > 0; d--) {
        int64_t next = i / plan.shape[d], digit = i - next * plan.shape[d];
        for (int op = 0; op < N; op++) offset[op] += digit * plan.strides[op][d];
        i = next;
    }
    for (int op = 0; op < N; op++) offset[op] += i * plan.strides[op][0];
}

#endif
