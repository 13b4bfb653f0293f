// kernels/cuda/conv1d/rows.cuh: what the row kernels (channel-first) of rows_forward.cu and
// rows_backward.cu share: their plan and shapes, a block's run of spans, row loads and stores.
#ifndef TAPEGRAD_KERNELS_CUDA_CONV1D_ROWS_CUH
#define TAPEGRAD_KERNELS_CUDA_CONV1D_ROWS_CUH

#include "kernels/cuda/conv1d/common.cuh"

namespace tg_conv1d {

// ---- row kernels (channel-first) ------------------------------------------------------------

// Steps per thread and pass: two 16-byte vectors, 8 (f32) or 16 (16-bit) steps.
template <typename T> __host__ __device__ constexpr int row_ept() { return 2 * vec_width<T>(); }

// Both row kernels walk, for each channel, the spans of chunk_len steps of all B rows as one
// list (row b's spans are items b · spans … b · spans + spans − 1). A block takes `passes`
// consecutive items of one channel and stages them in shared memory ahead of the one it
// computes, so loads are in flight all the time, and its weights (and in the backward its
// dw, dbias partial sums) serve all of them.
struct row_plan {
    int64_t chunks; // blocks per channel
    int chunk_len;  // steps of one span (threads · EPT)
    int passes;     // spans per block (the channel's last block may have fewer)
    int64_t spans;  // spans per row
    // Rows side by side (the backward's SIDE_BY_SIDE kernels, whole rows only): a span holds
    // rows b … b + R − 1 of its channel, L steps each (chunk_len = R · L), and the channel's
    // list has ⌈B / R⌉ items. 1 otherwise.
    int rows_per_span;
    bool vec_x, vec_y, vec_dx; // rows 16-byte aligned: bulk copies and vector stores allowed
    // Spans inner_first … inner_last of every row have all they stage (halos included) inside
    // whole vectors of aligned rows: each is one bulk copy per tensor, with no edges to write.
    // This saves the other threads the edge arithmetic of stage_span.
    int inner_first, inner_last;
    __device__ bool is_inner(int index) const { return TG_BULK_COPY && index >= inner_first && index <= inner_last; }
    // Every span is a whole row (one per row), of aligned rows whose length is whole vectors,
    // with no initial states: the backward stages a span as one bulk copy per tensor, and the
    // zeros around the row (x's halo before step 0, both tensors past L) lie at the same place
    // in every buffer, so a block writes them once (backward_stage::zero_row_edges). Short
    // rows are all edge spans; through stage_span their staging and bookkeeping were a large
    // share of the short-row backward's instructions, and this path measured faster
    // (docs/benchmarks.md).
    bool whole_rows;
    __device__ bool stages_whole_rows() const { return TG_BULK_COPY && whole_rows; }
    // The side-by-side list's items per channel, ⌈B / R⌉, worked out here: in the kernel the
    // 64-bit division cost each block about a hundred instructions, which measured slower on
    // the shortest rows. Last in the struct: ahead of the fields above, it changed how the
    // one-row kernels load them.
    int items;
};

// Spans a row kernel has staged or in flight at a time: the one being computed and the next
// two, so a block keeps loads in flight while it waits for a span as well as while it computes.
constexpr int kStages = 3;

template <typename T, int KB> struct row_shape {
    static constexpr int V = vec_width<T>();
    static constexpr int EPT = row_ept<T>();
    // The float backward (row_bwd) shares g through shared memory instead of rebuilding the
    // K − 1 steps after each thread's EPT, at f32 K = 9–16, where those were two thirds of the
    // z and g it built, and where sharing measured faster. At K = 8 (7 rebuilt per 8) the
    // block barrier costs more than it saves (docs/benchmarks.md). 16-bit data would need a
    // float buffer for g beside its 16-bit dout. Only with SiLU: without it g is dout times
    // a constant, and nothing is rebuilt.
    __host__ __device__ static constexpr bool shares_slopes(bool silu) { return silu && sizeof(T) == 4 && KB == 16; }
    static constexpr int HV = (KB - 1 + V - 1) / V; // halo vectors (at least K−1 steps) on a side
    static constexpr int H = HV * V;                // halo steps on a side
    // Shared memory of the staged backward for spans of ch steps in `rows` slots: per stage,
    // backward_stage's xn + dn.
    static size_t backward_bytes(int ch, int stages, int rows = 1)
    {
        return stages * (size_t)(2 * ch + (2 * rows + 1) * H) * sizeof(T);
    }
};

// One span of a channel's list: row b (and with rows side by side the rows after it), steps
// from index · chunk_len. Walked in order, so the next one is found without a division.
// `rows` is plan.rows_per_span, or the constant 1 where the kernel takes one row to a span.
struct row_span {
    int b, index; // index: the span within its row (B · spans fits an int: fits_row_grid)
    __device__ row_span(int spans, int rows, int item) : b(item / spans * rows), index(item % spans) {}
    __device__ void advance(int spans, int rows)
    {
        if (++index == spans) index = 0, b += rows;
    }
};

// This block's channel and its run of the channel's list: items first … first + count − 1.
struct row_run {
    int64_t c, block_in_channel;
    int first, count;
};

template <bool SIDE_BY_SIDE = false> __device__ inline row_run row_run_of(const conv_args &a, const row_plan &plan)
{
    row_run r;
    // 32-bit: the grid fits an int (fits_row_grid), and a 64-bit division is a long
    // instruction sequence, paid by every block.
    const unsigned chunks = (unsigned)plan.chunks;
    r.c = blockIdx.x / chunks;
    r.block_in_channel = blockIdx.x % chunks;
    r.first = (int)r.block_in_channel * plan.passes;
    const int items = SIDE_BY_SIDE ? plan.items : (int)(a.B * plan.spans);
    const int left = items - r.first;
    r.count = left < plan.passes ? left : plan.passes;
    return r;
}

// out[j] = src[j] as float for j < N, read as 16-byte vectors (src 16-byte aligned).
template <typename T, int N> __device__ inline void read_shared(const T *src, float *out)
{
    constexpr int V = vec_width<T>();
    static_assert(N % V == 0, "whole vectors");
#pragma unroll
    for (int q = 0; q < N / V; q++) unpack16<T>(*(const uint4 *)(src + q * V), out + q * V);
}

__device__ inline void store16(void *global, uint4 v)
{
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(global), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
}

template <typename T, int N>
__device__ inline void store_row(T *row, bool vec_ok, int64_t L, int64_t t0, const float *values)
{
    constexpr int V = vec_width<T>();
    if (vec_ok && t0 + N <= L) {
#pragma unroll
        for (int q = 0; q < N / V; q++) store16(row + t0 + q * V, pack16<T>(values + q * V));
    } else {
#pragma unroll
        for (int e = 0; e < N; e++)
            if (t0 + e < L) row[t0 + e] = tg_from_float<T>(values[e]);
    }
}

// A thread's place among rows side by side in its block, L / EPT threads to a row: its row
// and its first step there. Past the block's rows (the block is whole warps) `row` is at
// least their count, and the caller leaves the thread idle.
struct side_by_side_place {
    int row, t0;
};
template <int EPT> __device__ inline side_by_side_place side_by_side_place_of(int64_t L)
{
    const int row_threads = (int)L / EPT, row = (int)threadIdx.x / row_threads;
    return {row, ((int)threadIdx.x - row * row_threads) * EPT};
}

// The kernels of rows_forward.cu and rows_backward.cu, as the launcher takes them. Each file
// keeps its kernels in an unnamed namespace (nvcc makes the launch stub of a kernel template
// internal to its file anyway), so X<…> here is a pointer to the kernel X<…> there, got from
// X_instance<…>(), which that file instantiates for each X<…> the launcher uses.
template <typename T, int KB> auto row_fwd_direct_instance() -> void (*)(conv_args, row_plan);
template <typename T, int KB> inline const auto row_fwd_direct = row_fwd_direct_instance<T, KB>();

template <typename T, int KB, int ROWS> auto row_fwd_direct_grouped_instance() -> void (*)(conv_args, bool);
template <typename T, int KB, int ROWS>
inline const auto row_fwd_direct_grouped = row_fwd_direct_grouped_instance<T, KB, ROWS>();

template <typename T, int KB> auto row_fwd_side_by_side_instance() -> void (*)(conv_args, int, bool);
template <typename T, int KB> inline const auto row_fwd_side_by_side = row_fwd_side_by_side_instance<T, KB>();

template <typename T, int KB, bool SILU> auto row_fwd_staged_instance() -> void (*)(conv_args, row_plan);
template <typename T, int KB, bool SILU> inline const auto row_fwd_staged = row_fwd_staged_instance<T, KB, SILU>();

template <typename T, int KB, bool SILU, bool SIDE_BY_SIDE>
auto row_bwd_instance() -> void (*)(conv_args, row_plan, float *);
template <typename T, int KB, bool SILU, bool SIDE_BY_SIDE>
inline const auto row_bwd = row_bwd_instance<T, KB, SILU, SIDE_BY_SIDE>();

template <typename T, int KB, bool SILU> auto row_bwd_tensor_cores_instance() -> void (*)(conv_args, row_plan, float *);
template <typename T, int KB, bool SILU>
inline const auto row_bwd_tensor_cores = row_bwd_tensor_cores_instance<T, KB, SILU>();

} // namespace tg_conv1d

#endif
