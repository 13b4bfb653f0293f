// kernels/cuda/conv1d.cu: causal conv1d forward and backward on the GPU.
// This file picks each call's kernels and launches them; the kernels are in
// kernels/cuda/conv1d/, one file per family.
//
// Notation as in kernels/conv1d.h, with the taps counted by look-back distance:
//   wl[i] = w[K−1−i] (i = 0 … K−1), so z[t] = bias + Σ_i wl[i]·x[t−i]
// where x[t] for t < 0 is the initial state xe[K−1+t] (or 0). Backward, g = dout·act'(z):
//   dx[s] = Σ_i wl[i]·g[s+i]      dwl[i] = Σ_{b,t} g[t]·x[t−i]      dbias = Σ_{b,t} g[t]
//
// Three kernel shapes, each one launch for the main work:
//   row kernels (channel-first: stride 1 along L): a block walks a chunk of one (b, c) row;
//     each thread owns EPT consecutive steps loaded as 16-byte vectors and takes the K−1
//     steps around them from its neighbouring lanes. Coalesced along L. Rows shorter than
//     a warp's steps go several to a block, side by side (in the forward, where it takes
//     rows one to a block, rows of a warp's steps too).
//   stream kernels (channel-last, C a multiple of 16 bytes, aligned): a warp takes 32 to 128
//     neighbouring channels and walks a segment of up to 256 steps in order (up to 1024 in
//     the backward), the steps arriving through a per-warp ring in shared memory; each thread
//     keeps its window of x (and g) in registers, so the K−1 halo is paid once per segment.
//   tile kernels (any other strides): a block stages a tile of 64 channels × 64 steps (plus
//     the K−1 halo) in shared memory with 16-byte loads along C where it can, element by
//     element where it cannot; each thread then walks 16 or 32 steps of its channels out of it.
// The backward writes per-block partials of dw and dbias to a workspace, and a second small
// kernel sums them per channel in a fixed order: no atomics, bitwise-repeatable gradients.
//
// Which kernel runs: the selection table, first match wins (forward_kernel_for and
// backward_kernel_for; the kernels' names are tg_conv1d_kernel's). "Rows" means x, out (and
// dout, dx) with stride 1 along L; "streams" channel-last data (stride 1 along C), 16-byte
// aligned, C a multiple of 16 bytes. A thread's steps: 8 in f32, 16 in 16-bit data (a warp's:
// 256 and 512, a block's: 1024 and 2048).
//   forward
//     row-staged           rows of a whole block, x aligned, at f32 K 9–16 and bf16 K 9–16
//                          (the latter on tensor cores); at 16-bit K 5–16 also from 8192 steps
//     row-side-by-side     aligned rows shorter than a warp's steps (or exactly a warp's in f32
//                          and 16-bit K ≤ 2), a multiple of a thread's steps, K − 1 ≤ a thread's
//     row-grouped          16-bit K ≥ 3, aligned rows of one pass, a multiple of 16 steps
//     row-direct           any other rows
//     stream-tensor-cores  streams at 16-bit K 9–16
//     stream               streams at any other K and dtype
//     tile                 everything else (strided, misaligned, C not a multiple of 16 bytes)
//   backward
//     row-tensor-cores     bf16 rows of at least 1024 steps at K ≥ 5
//     row-side-by-side     aligned rows shorter than a warp's steps, without initial states
//     row-staged           any other rows
//     stream-tensor-cores  streams at bf16 K 9–16 (where tensor maps of x and dout can be made)
//     stream               streams at any other K and dtype
//     tile                 everything else
// Each rule is the faster kernel where both could run (the comments at the predicates give
// the measurements' gist; docs/benchmarks.md the figures). tg_cuda_conv1d_force_kernel makes
// a pass run one kernel wherever it can (tests reach every kernel so), and
// tg_cuda_conv1d_last_kernel says which one ran.
//
// K is a template bucket KB ∈ {2, 3, 4, 8, 16} (any K ≤ KB runs in its bucket: the missing
// look-back taps have weight 0), so the tap loops unroll and the windows stay in registers.
//
// The kernels move many bytes and do little arithmetic, but with 16-bit data the arithmetic
// per byte doubles, and instruction issue, not DRAM, becomes the limit (docs/benchmarks.md
// has the counter readings). So the per-element work is kept lean: the sigmoid is one ex2 and
// one reciprocal (flush-to-zero forms, no subnormal fix-ups), the 16-bit backward's slope of
// SiLU one tanh and three FMAs (scaled_gradient), the activation is chosen by a select
// rather than a branch, and the row kernels do their 64-bit index maths once per row.
// In bf16 the row kernels' convolutions at larger K run as 16 × 16 tile products on the
// tensor cores (section "bf16 on tensor cores"), whose cost does not grow with K.
#include "kernels/conv1d.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/conv1d/rows.cuh"
#include "kernels/cuda/conv1d/small_kernels.cuh"
#include "kernels/cuda/conv1d/streams.cuh"
#include "kernels/cuda/conv1d/streams_mma.cuh"
#include "kernels/cuda/conv1d/tensor_cores.cuh"
#include "kernels/cuda/conv1d/tiles.cuh"

#include <cudaTypedefs.h> // the tensor maps' encoder (no link to the driver library: found at run time)
#include <type_traits>

namespace {
using namespace tg_conv1d;

t3 t3_of(const tg_tensor *t)
{
    t3 v = {};
    if (!t) return v;
    v.p = tg_bytes(t);
    v.s0 = t->strides[0];
    v.s1 = t->strides[1];
    v.s2 = t->strides[2];
    return v;
}

// ---- launching ---------------------------------------------------------------------------------------

conv_args make_args(const tg_conv1d_args *in, const tg_tensor *y, const tg_tensor *dx, const tg_tensor *dfinal)
{
    conv_args a = {};
    a.B = in->x->shape[0];
    a.C = in->x->shape[1];
    a.L = in->x->shape[2];
    a.K = (int)in->weight->shape[1];
    a.dtype = (int)in->x->dtype;
    a.silu = in->activation == TG_ACT_SILU;
    a.x = t3_of(in->x);
    a.y = t3_of(y);
    a.dx = t3_of(dx);
    a.init = t3_of(in->initial_states);
    a.dfinal = t3_of(dfinal);
    a.w = tg_bytes(in->weight);
    a.ws0 = in->weight->strides[0];
    a.ws1 = in->weight->strides[1];
    a.bias = in->bias ? tg_bytes(in->bias) : NULL;
    a.bs0 = in->bias ? in->bias->strides[0] : 0;
    return a;
}

bool time_contiguous(const tg_tensor *t) { return !t || t->strides[2] == 1 || t->shape[2] == 1; }

// Rows of t start on 16-byte boundaries (so the row kernels may use vector access).
bool rows_aligned(const tg_tensor *t, int vec)
{
    if (!t) return true;
    uintptr_t address = (uintptr_t)tg_bytes(t);
    return address % 16 == 0 && t->strides[0] % vec == 0 && t->strides[1] % vec == 0;
}

// Channel vectors of width cpt at channel multiples of cpt are aligned and contiguous.
bool channels_vectorisable(const tg_tensor *t, int cpt)
{
    if (!t) return true;
    uintptr_t address = (uintptr_t)tg_bytes(t);
    size_t bytes = (size_t)cpt * tg_dtype_size(t->dtype);
    return t->strides[1] == 1 && address % bytes == 0 && t->strides[0] % cpt == 0 && t->strides[2] % cpt == 0;
}

// Rows from this length on take the staged forward where the halo is wide (forward_may_stage;
// 16-bit K > 4, where it measured faster than the direct forward's shuffles); shorter rows
// take the direct one unless forward_stages_full_blocks, and so does every row at K ≤ 4, where
// the direct forward measured faster. f32 at K = 8 measured slower staged, and so did bf16
// K = 8 on short rows from full blocks on (docs/benchmarks.md).
constexpr int64_t kStagedForwardMinL = 8192;
// Where the staged forward serves, and is compiled: 16-bit data from K = 5 on, and f32 at
// K = 9–16, where the direct forward waits on its loads (Nsight Compute: `long_scoreboard`
// stalls above all others) with sixteen taps' work between them, and the staged one measured
// faster (docs/benchmarks.md).
template <typename T, int KB> __host__ __device__ constexpr bool forward_may_stage()
{
    return sizeof(T) == 2 ? KB > 4 : KB == 16;
}
// Whether it also takes rows shorter than kStagedForwardMinL, from full blocks on: on tensor
// cores and in f32, where that measured faster than the direct forward (on tensor cores with
// fewer threads per block, slower; docs/benchmarks.md).
template <typename T, int KB> __host__ __device__ constexpr bool forward_stages_full_blocks()
{
    return forward_on_tensor_cores<T, KB>() || sizeof(T) == 4;
}

// Threads per block of the row kernels: kBlock, or fewer (whole warps) for a short row.
int row_threads(int64_t L, int steps_per_thread)
{
    const int64_t threads = (L + steps_per_thread - 1) / steps_per_thread;
    return threads >= kBlock ? kBlock : (int)((threads + 31) / 32 * 32);
}

// Rows of one span (short rows) per block of the direct forward in 16-bit data: 2 at K = 3
// and 4, 4 from K = 5 on, one row per block below K = 3 and in f32 (row_fwd_direct_rows).
// A block of several rows loads the channel's taps once for them all. The counts are the ones
// that measured fastest on the short rows: two rows beat one from K = 3 on and four beat two
// from K = 5 on, while four slowed bf16 K = 2 to 4 and f32 (at K = 3 and 4 also with the
// grid and halo of row_fwd_direct_grouped; docs/benchmarks.md).
template <typename T, int KB> constexpr int direct_forward_rows()
{
    return sizeof(T) != 2 || KB < 3 ? 1 : KB <= 4 ? 2 : 4;
}

// Rows side by side in one block, for both passes: rows shorter than a warp's steps (alone
// they would leave lanes of their block idle: bf16 at L = 256 fills 16 threads of 32), or
// with `warp_rows` up to a warp's steps, of whole aligned vectors (L a multiple of EPT), as
// many as make up a block of kBlock threads (at most B); 0 for rows that do not qualify.
template <typename T> int64_t rows_to_a_block(const conv_args &a, const tg_tensor *x, bool warp_rows = false)
{
    constexpr int EPT = row_ept<T>();
    const int64_t longest = warp_rows ? 32 * EPT : 32 * EPT - 1;
    if (a.L % EPT != 0 || a.L > longest || !rows_aligned(x, vec_width<T>())) return 0;
    const int64_t fit = (int64_t)kBlock * EPT / a.L;
    return fit < a.B ? fit : a.B;
}

// Rows for row_fwd_side_by_side (rows_to_a_block), when the grid of C × ⌈B / rows⌉ fits and
// the halo lies in one lane's steps (f32 from K = 10 on: no); else 0. Rows of exactly a
// warp's steps go side by side too where the direct forward would take them one to a block
// (f32, and 16-bit data at K ≤ 2), where that measured faster; where the direct forward
// groups rows (16-bit from K = 3 on), side by side measured slower (docs/benchmarks.md).
template <typename T, int KB> int forward_rows_side_by_side(const conv_args &a, const tg_tensor *x)
{
    const int64_t rows = rows_to_a_block<T>(a, x, direct_forward_rows<T, KB>() == 1);
    if (KB - 1 > row_ept<T>() || rows == 0 || a.C > INT32_MAX) return 0;
    return (a.B + rows - 1) / rows <= 65535 ? (int)rows : 0;
}

// The direct forward's plan: chunk_len = threads · EPT steps per pass, at least 4 blocks per
// (b, c) row, up to 4 passes each (chunks is then blocks per row, spans unused).
template <typename T>
row_plan make_row_fwd_direct_plan(const conv_args &a, const tg_tensor *x, const tg_tensor *y, int threads)
{
    constexpr int kMinChunks = 4, kMaxPasses = 4;
    row_plan plan = {};
    plan.chunk_len = threads * row_ept<T>();
    const int64_t spans = (a.L + plan.chunk_len - 1) / plan.chunk_len;
    const int64_t passes = spans / kMinChunks;
    plan.passes = (int)(passes < 1 ? 1 : passes > kMaxPasses ? kMaxPasses : passes);
    plan.chunks = (spans + plan.passes - 1) / plan.passes;
    plan.vec_x = rows_aligned(x, vec_width<T>());
    plan.vec_y = rows_aligned(y, vec_width<T>());
    return plan;
}

// Spans per block when the grid is sized to the waves of resident blocks (`resident`: blocks
// the whole GPU holds at once). A block pays a fixed cost besides its spans: its taps, its
// bookkeeping, and at its end the dw and dbias partials. In the tensor-core backward its
// instructions came to nearly two spans' worth (kBlockCost), which argues for few, long
// blocks; a last wave left partly empty argues against. The time is modelled as waves ×
// (spans per block + kBlockCost) over 8 to 64 spans per block; the cheapest wins, the
// shorter blocks on a tie.
int row_passes_for_waves(int64_t items, int64_t C, int64_t resident)
{
    constexpr int kMinPasses = 8, kMaxPasses = 64;
    constexpr double kBlockCost = 2.0;
    if (items <= kMinPasses || resident <= 0) return (int)(items < kMinPasses ? items : kMinPasses);
    auto cost = [&](int passes) {
        const int64_t blocks = C * ((items + passes - 1) / passes);
        return (double)((blocks + resident - 1) / resident) * (passes + kBlockCost);
    };
    int best = kMinPasses;
    for (int passes = kMinPasses + 1; passes <= kMaxPasses && passes <= items; passes++)
        if (cost(passes) < cost(best)) best = passes;
    return best;
}

// Steps of one staged span: `rows` whole rows side by side, or threads · steps_per_thread.
inline int row_span_len(int rows, int64_t L, int threads, int steps_per_thread)
{
    return rows > 1 ? rows * (int)L : threads * steps_per_thread;
}

// The staged kernels' plan (struct row_plan): 8 spans per block (fewer where the channel's
// list is shorter), or with `resident` > 0 as many as fill whole waves of that many blocks
// (row_passes_for_waves). Fewer, longer blocks measured faster than a grid of more waves on
// the short sizes (8×1536×2048, 32×768×1024): a block's setup and first loads, not the partly
// idle last wave, dominate there.
//   The spans stage x from `halo` steps before the span to `right_halo` after it (dout, when
// staged, from the span's start to at most as far). `rows` > 1 puts that many whole rows in
// a span (rows_side_by_side says when).
//   `whole_lists`: one block per channel whatever the list's length (the caller has checked it
// is short: backward_takes_whole_lists).
template <typename T>
row_plan make_row_plan(const conv_args &a, const tg_tensor *x, const tg_tensor *y, const tg_tensor *dx, int threads,
                       int steps_per_thread, int halo, int right_halo, int64_t resident = 0, int rows = 1,
                       bool whole_lists = false)
{
    constexpr int V = vec_width<T>();
    row_plan plan = {};
    plan.chunk_len = row_span_len(rows, a.L, threads, steps_per_thread);
    plan.rows_per_span = rows;
    plan.spans = rows > 1 ? 1 : (a.L + plan.chunk_len - 1) / plan.chunk_len;
    const int64_t items = rows > 1 ? (a.B + rows - 1) / rows : a.B * plan.spans; // per channel
    // Spans of rows side by side: up to 16 per block, so that a block takes more of its
    // channel's rows (often all: no second kernel for the sums), which measured faster than 8
    // (docs/benchmarks.md).
    plan.passes = whole_lists ? (int)items
                  : rows > 1  ? (int)(items < 16 ? items : 16)
                              : row_passes_for_waves(items, a.C, resident);
    plan.chunks = (items + plan.passes - 1) / plan.passes;
    plan.items = (int)(items < INT32_MAX ? items : INT32_MAX); // larger fails fits_row_grid
    plan.vec_x = rows_aligned(x, V);
    plan.vec_y = rows_aligned(y, V);
    plan.vec_dx = rows_aligned(dx, V);
    const int64_t inside_end = a.L - a.L % V; // whole vectors end here
    const int64_t last = (inside_end - right_halo) / plan.chunk_len - 1;
    plan.inner_first = (halo + plan.chunk_len - 1) / plan.chunk_len;
    plan.inner_last =
        plan.vec_x && plan.vec_y && inside_end >= right_halo ? (int)(last < INT32_MAX ? last : INT32_MAX) : -1;
    plan.whole_rows = plan.spans == 1 && plan.vec_x && plan.vec_y && a.L % V == 0 && !a.init.p;
    return plan;
}

// Tiles of kTileT steps; a block walks several of them (its weights and setup then serve more
// steps, and the backward leaves fewer partials to sum), as long as the grid keeps about
// 16384 blocks: some 8 waves on a 132-SM card, so the last, partly filled wave costs little.
// (With 2–3 waves, the partly idle last one showed as a large share of the time.)
// x, and the dout the backward stages (NULL in the forward); out (or dx) is written.
template <typename T>
tile_plan make_tile_plan(const conv_args &a, const tg_tensor *x, const tg_tensor *y, const tg_tensor *out)
{
    constexpr int V = vec_width<T>();
    constexpr int64_t kWantedBlocks = 16384;
    tile_plan plan = {};
    plan.channel_blocks = (a.C + kTileC - 1) / kTileC;
    const int64_t tiles = (a.L + kTileT - 1) / kTileT;
    const int64_t others = plan.channel_blocks * a.B;
    const int64_t wanted_time_blocks = (kWantedBlocks + others - 1) / others;
    const int64_t passes = tiles / wanted_time_blocks;
    plan.passes = (int)(passes < 1 ? 1 : passes > 32 ? 32 : passes);
    plan.time_blocks = (tiles + plan.passes - 1) / plan.passes;
    plan.vec_x = channels_vectorisable(x, V);
    plan.vec_y = channels_vectorisable(y, V);
    plan.pair_y = channels_vectorisable(out, 2);
    return plan;
}

// Segments of at most `longest_segment` steps, 256 by default (the halo recomputed at each
// segment's start then costs (KB − 1)/256 of the work), shorter while the grid has fewer than
// `wanted_blocks` (by default about 4096), down to `shortest_segment` (64 steps by default,
// a multiple of every chunk; stream_fwd_mma asks for whole tiles): on the short rows 64
// measured faster forward+backward than 32 or 128, and the long rows did not move (the 16-bit
// forward at K ≤ 8 has since measured faster at 64, stream_forward_longest_segment;
// docs/benchmarks.md). `out` is the kernel's output (out, or dx). most_across:
// stream_most_warps_across.
template <typename T, int CPT>
stream_plan make_stream_plan(const conv_args &a, const tg_tensor *out, int most_across, int64_t longest_segment = 256,
                             int64_t wanted_blocks = 4096, int64_t shortest_segment = 64)
{
    using S = stream_shape<T, CPT>;
    static_assert(64 % S::U == 0, "segments of 64 steps, the shortest asked for, are whole chunks");
    stream_plan plan = {};
    const int64_t groups = (a.C + S::CHANNELS - 1) / S::CHANNELS; // warp-wide channel groups
    plan.across = groups % most_across == 0 ? most_across : 1;
    const int64_t along = S::LANES / plan.across;
    plan.channel_blocks = groups / plan.across;
    auto time_blocks = [&](int64_t seg_len) { return (a.L + along * seg_len - 1) / (along * seg_len); };
    plan.seg_len = longest_segment;
    while (plan.seg_len > shortest_segment && plan.channel_blocks * a.B * time_blocks(plan.seg_len) < wanted_blocks)
        plan.seg_len /= 2;
    plan.time_blocks = time_blocks(plan.seg_len);
    plan.whole_pieces = channels_vectorisable(out, vec_width<T>());
    return plan;
}

// The forward's longest segment: 64 steps for 16-bit data at K ≤ 8, where it measured faster
// than 256 on the long rows, the short rows level (docs/benchmarks.md). The kernel's work
// grows (each segment loads its window's K − 1 steps, in one round trip); what shorter
// segments buy is in the memory system: a plain copy that walks a channel-last tensor the
// same way (bench/strided_copy.cu) is faster in segments of 64 steps than of 256 too. At
// 16-bit K = 16 (a thread's one channel, 15 window loads per segment; before those rows took
// stream_fwd_mma) shorter segments measured slower, and f32 gained nothing: they keep 256.
template <typename T, int KB> constexpr int64_t stream_forward_longest_segment()
{
    return sizeof(T) == 2 && KB <= 8 ? 64 : 256;
}

// The stream kernels copy x (and dout) in 16-byte pieces of channels and write whole channel
// words: channel-last tensors with 16-byte aligned steps and C a multiple of 16 bytes' worth,
// the common case. Other layouts take the tile kernels.
template <typename T, int CPT>
bool streams_take(const conv_args &a, const tg_tensor *x, const tg_tensor *y, const tg_tensor *out)
{
    constexpr int V = vec_width<T>();
    return a.C % V == 0 && channels_vectorisable(x, V) && channels_vectorisable(y, V) &&
           channels_vectorisable(out, CPT);
}

// (Plan: stream_plan or mma_backward_plan, whose blocks are laid out the same way.)
template <typename Plan> bool fits_stream_grid(const conv_args &a, const Plan &plan)
{
    return plan.channel_blocks * plan.time_blocks <= INT32_MAX && a.B <= 65535;
}

template <typename Plan> dim3 stream_grid(const conv_args &a, const Plan &plan)
{
    return dim3((unsigned)(plan.channel_blocks * plan.time_blocks), (unsigned)a.B);
}

dim3 tile_grid(const conv_args &a, const tile_plan &plan)
{
    return dim3((unsigned)plan.time_blocks, (unsigned)plan.channel_blocks, (unsigned)a.B);
}

tg_status too_large(const conv_args &a)
{
    return tg_set_error(TG_ERR_OVERFLOW, "tg_causal_conv1d: (B, C, L) = (%lld, %lld, %lld) is beyond the CUDA grid",
                        (long long)a.B, (long long)a.C, (long long)a.L);
}

bool fits_tile_grid(const conv_args &a, const tile_plan &plan)
{
    return plan.time_blocks <= INT32_MAX && plan.channel_blocks <= 65535 && a.B <= 65535;
}

bool fits_row_grid(const conv_args &a, const row_plan &plan)
{
    return a.C * plan.chunks <= INT32_MAX && a.B * plan.spans <= INT32_MAX;
}

// A device buffer shaped like `like` (contiguous), standing in for a gradient the caller
// did not ask for (dx) or did not have (dout: zeros).
struct scratch {
    tg_storage storage;
    tg_tensor tensor;
    size_t bytes;
};

tg_status scratch_like(const tg_tensor *like, bool zero, scratch &s)
{
    s = scratch{};
    s.bytes = (size_t)tg_numel(like) * tg_dtype_size(like->dtype);
    void *ptr;
    tg_status status = tg_device_alloc(TG_DEVICE_CUDA, s.bytes, &ptr);
    if (status != TG_OK) return status;
    s.storage = tg_storage{ptr, s.bytes, TG_DEVICE_CUDA, TG_STORAGE_HEAP};
    s.tensor.dtype = like->dtype;
    s.tensor.device = TG_DEVICE_CUDA;
    s.tensor.ndim = like->ndim;
    for (int d = 0; d < like->ndim; d++) s.tensor.shape[d] = like->shape[d];
    tg_contiguous_strides(like->ndim, like->shape, s.tensor.strides);
    s.tensor.storage = &s.storage;
    return zero ? tg_cuda_memset_zero(ptr, s.bytes) : TG_OK;
}

void scratch_free(scratch &s)
{
    if (s.storage.data) tg_device_free(TG_DEVICE_CUDA, s.storage.data, s.bytes);
}

// Whether launches may carry the programmatic-dependent-launch attribute (compute capability
// 9.0 or newer; tapegrad runs on one device per process).
bool overlap_supported()
{
    static int major = -1;
    if (major < 0) major = tg_cuda_device_attribute(cudaDevAttrComputeCapabilityMajor, 0);
    return major >= 9;
}

// Launches kernel<<<grid, block, shared>>>(args...) allowed to overlap the end of the kernel
// before it (next_kernel_may_start, after_previous_kernels).
template <typename... Params, typename... Args>
tg_status launch_overlapped(const char *op, void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared,
                            Args... args)
{
    cudaLaunchAttribute overlap = {};
    overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    overlap.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = shared;
    config.attrs = &overlap;
    config.numAttrs = overlap_supported() ? 1 : 0;
    const cudaError_t error = cudaLaunchKernelEx(&config, kernel, args...);
    if (error != cudaSuccess)
        return tg_set_error(TG_ERR_DEVICE, "%s: CUDA kernel launch failed: %s", op, cudaGetErrorString(error));
    return TG_OK;
}

// The staged forward measured faster with fewer of its blocks resident (docs/causal_conv1d.md):
// the shared memory carveout at half leaves room for 7 of its blocks per SM instead of 10
// (reserving shared memory for 7 blocks gave the same at K ≤ 4). Why fewer blocks streaming
// rows at once pays is not established. A hint to the driver, so a failure is ignored.
// Set once per kernel: `done` is the caller's static flag for it (a race at worst sets it
// twice).
template <typename Kernel> void set_attribute_once(Kernel kernel, cudaFuncAttribute attribute, int value, bool &done)
{
    if (done) return;
    done = true;
    if (cudaFuncSetAttribute(kernel, attribute, value) != cudaSuccess)
        (void)cudaGetLastError(); // clear it: the next launch check must not report it
}
template <typename Kernel> void prefer_fewer_resident_blocks(Kernel kernel, bool &done, int carveout_percent = 50)
{
    set_attribute_once(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, carveout_percent, done);
}

// The carve-out (percent of an SM's most shared memory) that holds `blocks` blocks of
// `block_bytes` each, with the runtime's reserve per block; the driver rounds it up to a
// size it has, so that many blocks always fit.
int carveout_for_blocks(int blocks, int block_bytes)
{
    const int most = tg_cuda_device_attribute(cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0);
    const int reserve = tg_cuda_device_attribute(cudaDevAttrReservedSharedMemoryPerBlock, 1024);
    if (most <= 0) return 100;
    const int64_t wanted = (int64_t)blocks * (block_bytes + reserve);
    return wanted >= most ? 100 : (int)((100 * wanted + most - 1) / most);
}

// 16-bit channel-last rows at K = 9 … 16 take the forward on tensor cores (stream_fwd_mma),
// whose work does not grow with K: it measured faster than the float stream forward on long
// and short rows (docs/benchmarks.md).
template <typename T, int KB> constexpr bool forward_stream_on_tensor_cores() { return sizeof(T) == 2 && KB == 16; }

// stream_fwd_mma's plan: the stream plan of one channel per lane, with segments of 512 steps
// (4 tiles), halved down to 128 while the grid has fewer than about two and a half waves of
// blocks (two per SM). On the long rows 512 steps measured faster than longer or shorter
// segments; on the short rows halving to 256 measured faster, and on to 128 (one tile per
// segment) slower (docs/benchmarks.md). What shorter segments cost is not their starts (the
// first tile's wait, the taps' operands): warps that walk several segments in turn, carrying
// both over, measured no faster; nor is it what a plain copy of the same walk shows, which is
// faster in shorter segments (stream_forward_longest_segment). Not found.
template <typename T> stream_plan make_mma_stream_plan(const conv_args &a, const tg_tensor *out)
{
    const int64_t wanted_blocks = 5 * (int64_t)tg_cuda_multiprocessors();
    return make_stream_plan<T, 1>(a, out, stream_most_warps_across<false>(), 512, wanted_blocks,
                                  mma_stream_shape::TILE);
}

// bf16 channel-last rows at K = 9 … 16 take the backward on tensor cores (stream_bwd_mma).
// f16 keeps the float stream backward: g / tap_scale (twice g) can pass f16's largest value.
template <typename T, int KB> constexpr bool backward_stream_on_tensor_cores()
{
    return std::is_same<T, __nv_bfloat16>::value && KB == 16;
}

// The driver's tensor-map encoder, looked up once (NULL where the driver has none).
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder()
{
    static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
        void *entry = NULL;
        cudaDriverEntryPointQueryResult found;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &entry, 12000, cudaEnableDefault, &found) !=
                cudaSuccess ||
            found != cudaDriverEntryPointSuccess) {
            cudaGetLastError(); // not an error of the launch to come
            return (PFN_cuTensorMapEncodeTiled_v12000)NULL;
        }
        return (PFN_cuTensorMapEncodeTiled_v12000)entry;
    }();
    return encode;
}

// A tensor map of 16-bit channel-last data t (B, C, L with unit channel stride; copied as bits)
// in boxes of the tensor-core stream kernels' tiles (32 channels × 128 steps of one row) and
// their rings' layout (16-byte pieces swizzled by 64 bytes). False where the copy engine cannot
// take the tensor (steps not 16-byte aligned, coordinates past 2^31) or the driver cannot
// encode it. The L2 fetches 128 bytes around each 64-byte row, the neighbouring channel
// group's too, which another warp or block reads at about the same time: without that
// promotion the forward measured slower, with 256 bytes level (docs/benchmarks.md).
bool channel_last_box_map(const t3 &t, const conv_args &a, CUtensorMap *map)
{
    using M = mma_backward_shape;
    static_assert(M::CHANNELS == mma_stream_shape::CHANNELS && M::TILE == mma_stream_shape::TILE &&
                      M::ROW == mma_stream_shape::ROW,
                  "the forward's tiles are the backward's");
    const int64_t step_bytes = t.s2 * 2, row_bytes = t.s0 * 2;
    PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
    if (!encode || t.s1 != 1 || (uintptr_t)t.p % 16 != 0 || step_bytes % 16 != 0 || row_bytes % 16 != 0 ||
        step_bytes <= 0 || row_bytes <= 0 || a.C > INT32_MAX || a.L > INT32_MAX - 2 * M::TILE || a.B > INT32_MAX)
        return false;
    const cuuint64_t dims[3] = {(cuuint64_t)a.C, (cuuint64_t)a.L, (cuuint64_t)a.B};
    const cuuint64_t strides[2] = {(cuuint64_t)step_bytes, (cuuint64_t)row_bytes};
    const cuuint32_t box[3] = {M::CHANNELS, M::TILE, 1}, element_strides[3] = {1, 1, 1};
    return encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 3, t.p, dims, strides, box, element_strides,
                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_64B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// stream_bwd_mma's plan: blocks of 32 channels and one segment of up to 16384 steps, halved
// down to 256 while the grid has fewer than about two waves of blocks (two per SM). Each
// segment's walk takes one tile of g past its end, but longer segments measured faster by far
// more than that tile's share, up to a segment per row (docs/benchmarks.md).
mma_backward_plan make_mma_backward_plan(const conv_args &a, const tg_tensor *dx)
{
    using M = mma_backward_shape;
    const int64_t wanted_blocks = 4 * (int64_t)tg_cuda_multiprocessors();
    mma_backward_plan plan = {};
    plan.channel_blocks = (a.C + M::CHANNELS - 1) / M::CHANNELS;
    auto time_blocks = [&](int64_t seg_len) { return (a.L + seg_len - 1) / seg_len; };
    plan.seg_len = 16384;
    while (plan.seg_len > 2 * M::TILE && plan.channel_blocks * a.B * time_blocks(plan.seg_len) < wanted_blocks)
        plan.seg_len /= 2;
    plan.time_blocks = time_blocks(plan.seg_len);
    plan.whole_pieces = channels_vectorisable(dx, vec_width<__nv_bfloat16>());
    return plan;
}

// ---- choosing the kernels ------------------------------------------------------------------------------

tg_status cannot_take(const char *op, tg_conv1d_kernel kernel, const conv_args &a, const char *why)
{
    return tg_set_error(TG_ERR_INVALID,
                        "%s: the forced CUDA kernel %s cannot take (B, C, L) = (%lld, %lld, %lld), K = %d, %s: %s", op,
                        tg_conv1d_kernel_name(kernel), (long long)a.B, (long long)a.C, (long long)a.L, a.K,
                        tg_dtype_name((tg_dtype)a.dtype), why);
}

// The staged forward takes the rows (rows of whole blocks with aligned x; forward_may_stage).
template <typename T, int KB> bool forward_can_stage(const conv_args &a, const tg_tensor *x)
{
    return forward_may_stage<T, KB>() && row_threads(a.L, row_ept<T>()) == kBlock && rows_aligned(x, vec_width<T>());
}

// The grouped direct forward takes the rows: rows of one pass, of whole aligned vectors, in
// a grid of C × ⌈B / rows⌉ (direct_forward_rows).
template <typename T, int KB> bool forward_groups_rows(const conv_args &a, const tg_tensor *x, const tg_tensor *out)
{
    constexpr int kRows = direct_forward_rows<T, KB>();
    const row_plan plan = make_row_fwd_direct_plan<T>(a, x, out, row_threads(a.L, row_ept<T>()));
    return kRows > 1 && plan.chunks == 1 && plan.passes == 1 && plan.vec_x && a.L % row_ept<T>() == 0 &&
           (a.B + kRows - 1) / kRows <= 65535 && a.C <= INT32_MAX;
}

// The forward's row of the selection table for this call.
template <typename T, int KB>
tg_conv1d_kernel forward_kernel_for(const conv_args &a, const tg_tensor *x, const tg_tensor *out)
{
    if (time_contiguous(x) && time_contiguous(out)) {
        if (forward_can_stage<T, KB>(a, x) && (a.L >= kStagedForwardMinL || forward_stages_full_blocks<T, KB>()))
            return TG_CONV1D_ROW_STAGED;
        if (forward_rows_side_by_side<T, KB>(a, x)) return TG_CONV1D_ROW_SIDE_BY_SIDE;
        return forward_groups_rows<T, KB>(a, x, out) ? TG_CONV1D_ROW_GROUPED : TG_CONV1D_ROW_DIRECT;
    }
    if (forward_stream_on_tensor_cores<T, KB>())
        return streams_take<T, 1>(a, x, NULL, out) ? TG_CONV1D_STREAM_TENSOR_CORES : TG_CONV1D_TILE;
    return streams_take<T, stream_forward_cpt<T, KB>()>(a, x, NULL, out) ? TG_CONV1D_STREAM : TG_CONV1D_TILE;
}

// Why the forward kernel cannot take this call, or NULL when it can.
template <typename T, int KB>
const char *forward_refusal(tg_conv1d_kernel kernel, const conv_args &a, const tg_tensor *x, const tg_tensor *out)
{
    const bool rows = time_contiguous(x) && time_contiguous(out);
    const char *not_rows = "it wants x and out with stride 1 along L";
    switch (kernel) {
    case TG_CONV1D_ROW_DIRECT: return rows ? NULL : not_rows;
    case TG_CONV1D_ROW_GROUPED:
        return !rows                                   ? not_rows
               : forward_groups_rows<T, KB>(a, x, out) ? NULL
                                                       : "it takes aligned 16-bit rows of one pass at K >= 3";
    case TG_CONV1D_ROW_SIDE_BY_SIDE:
        return !rows ? not_rows
               : forward_rows_side_by_side<T, KB>(a, x)
                   ? NULL
                   : "it takes aligned rows shorter than a warp's steps, whose halo lies in one thread's steps";
    case TG_CONV1D_ROW_STAGED:
        return !rows ? not_rows
               : forward_can_stage<T, KB>(a, x)
                   ? NULL
                   : "it takes aligned rows of a whole block, 16-bit at K >= 5 or f32 at K >= 9";
    case TG_CONV1D_STREAM_TENSOR_CORES:
        return forward_stream_on_tensor_cores<T, KB>() && streams_take<T, 1>(a, x, NULL, out)
                   ? NULL
                   : "it takes aligned channel-last 16-bit data at K >= 9";
    case TG_CONV1D_STREAM:
        return !forward_stream_on_tensor_cores<T, KB>() && streams_take<T, stream_forward_cpt<T, KB>()>(a, x, NULL, out)
                   ? NULL
                   : "it takes aligned channel-last data with C a multiple of 16 bytes (16-bit data: K <= 8)";
    case TG_CONV1D_TILE: return NULL;
    default: return "it is not a forward kernel";
    }
}

// The forward's kernel for this call: the forced one (NULL and the error set when it cannot
// take the call), else the table's; recorded for tg_cuda_conv1d_last_kernel.
template <typename T, int KB>
bool pick_forward(const conv_args &a, const tg_tensor *x, const tg_tensor *out, tg_conv1d_kernel *kernel)
{
    *kernel = tg_cuda_conv1d_forced_kernel(TG_CONV1D_FORWARD);
    if (*kernel == TG_CONV1D_AUTO) {
        *kernel = forward_kernel_for<T, KB>(a, x, out);
    } else if (const char *why = forward_refusal<T, KB>(*kernel, a, x, out)) {
        cannot_take("tg_causal_conv1d", *kernel, a, why);
        return false;
    }
    tg_cuda_conv1d_note_kernel(TG_CONV1D_FORWARD, *kernel);
    return true;
}

template <typename T, int KB>
tg_status launch_row_forward(tg_conv1d_kernel kernel, const conv_args &a, const tg_tensor *x, const tg_tensor *out)
{
    const int threads = row_threads(a.L, row_ept<T>());
    if (kernel == TG_CONV1D_ROW_STAGED) {
        if constexpr (forward_may_stage<T, KB>()) {
            using S = row_shape<T, KB>;
            row_plan plan = make_row_plan<T>(a, x, out, NULL, threads, row_ept<T>(), S::H, 0);
            if (!fits_row_grid(a, plan)) return too_large(a);
            auto staged = a.silu ? row_fwd_staged<T, KB, true> : row_fwd_staged<T, KB, false>;
            static bool carveout_set[2]; // one per T, KB
            prefer_fewer_resident_blocks(staged, carveout_set[a.silu]);
            staged<<<(unsigned)(a.C * plan.chunks), threads>>>(a, plan);
        }
    } else if (kernel == TG_CONV1D_ROW_SIDE_BY_SIDE) {
        if constexpr (KB - 1 <= row_ept<T>()) {
            const int rows = forward_rows_side_by_side<T, KB>(a, x);
            const dim3 grid((unsigned)a.C, (unsigned)((a.B + rows - 1) / rows));
            row_fwd_side_by_side<T, KB>
                <<<grid, row_threads(rows * a.L, row_ept<T>())>>>(a, rows, rows_aligned(out, vec_width<T>()));
        }
    } else if (kernel == TG_CONV1D_ROW_GROUPED) {
        constexpr int kRows = direct_forward_rows<T, KB>();
        if constexpr (kRows > 1) { // compiled only where rows are grouped
            const dim3 grid((unsigned)a.C, (unsigned)((a.B + kRows - 1) / kRows));
            row_fwd_direct_grouped<T, KB, kRows><<<grid, threads>>>(a, rows_aligned(out, vec_width<T>()));
        }
    } else {
        row_plan plan = make_row_fwd_direct_plan<T>(a, x, out, threads);
        const int64_t blocks = a.B * a.C * plan.chunks;
        if (blocks > INT32_MAX) return too_large(a);
        row_fwd_direct<T, KB><<<(unsigned)blocks, threads>>>(a, plan);
    }
    return TG_OK;
}

template <typename T, int KB>
tg_status launch_stream_forward(tg_conv1d_kernel kernel, const conv_args &a, const tg_tensor *out)
{
    if (kernel == TG_CONV1D_STREAM_TENSOR_CORES) {
        if constexpr (forward_stream_on_tensor_cores<T, KB>()) {
            stream_plan plan = make_mma_stream_plan<T>(a, out);
            if (!fits_stream_grid(a, plan)) return too_large(a);
            auto mma = a.silu ? stream_fwd_mma<T, true> : stream_fwd_mma<T, false>;
            static bool shared_set[2]; // one per T, KB
            // Past the 48 KB a launch gets without asking (if refused, the launch fails and says so).
            set_attribute_once(mma, cudaFuncAttributeMaxDynamicSharedMemorySize, mma_stream_shape::BLOCK_BYTES,
                               shared_set[a.silu]);
            // x's and y's tiles by the copy engine where their tensor maps can be made (rows of fewer
            // than 2^31 − 256 steps); else by every lane.
            CUtensorMap x_map = {}, y_map = {};
            const bool by_tensors = channel_last_box_map(a.x, a, &x_map) && channel_last_box_map(a.y, a, &y_map);
            mma<<<stream_grid(a, plan), kBlock, mma_stream_shape::BLOCK_BYTES>>>(a, plan, x_map, y_map, by_tensors);
        }
    } else if constexpr (!forward_stream_on_tensor_cores<T, KB>()) {
        stream_plan plan = make_stream_plan<T, stream_forward_cpt<T, KB>()>(a, out, stream_most_warps_across<false>(),
                                                                            stream_forward_longest_segment<T, KB>());
        if (!fits_stream_grid(a, plan)) return too_large(a);
        stream_fwd<T, KB><<<stream_grid(a, plan), kBlock>>>(a, plan);
    }
    return TG_OK;
}

template <typename T, int KB> tg_status forward_with(const tg_conv1d_args *in, tg_tensor *out, tg_tensor *final_states)
{
    const char *op = "tg_causal_conv1d";
    conv_args a = make_args(in, out, NULL, NULL);
    tg_conv1d_kernel kernel;
    if (!pick_forward<T, KB>(a, in->x, out, &kernel)) return TG_ERR_INVALID;
    tg_status status;
    if (kernel == TG_CONV1D_STREAM || kernel == TG_CONV1D_STREAM_TENSOR_CORES) {
        status = launch_stream_forward<T, KB>(kernel, a, out);
    } else if (kernel == TG_CONV1D_TILE) {
        tile_plan plan = make_tile_plan<T>(a, in->x, NULL, out);
        if (!fits_tile_grid(a, plan)) return too_large(a);
        tile_fwd<T, KB><<<tile_grid(a, plan), kBlock>>>(a, plan);
        status = TG_OK;
    } else {
        status = launch_row_forward<T, KB>(kernel, a, in->x, out);
    }
    if (status == TG_OK) status = tg_cuda_check_launch(op);
    if (status == TG_OK && final_states && a.K > 1) {
        final_states_kernel<T><<<tg_blocks_for(a.B * a.C * (a.K - 1)), TG_THREADS>>>(a, t3_of(final_states));
        status = tg_cuda_check_launch(op);
    }
    return status;
}

// Whole rows side by side in one span of the float backward (row_plan::rows_per_span): the
// rows of rows_to_a_block when they are staged whole (row_plan::whole_rows: dout aligned too,
// no initial states), cut until the buffers fit 32 KB (each slot adds 2H steps: at K = 16
// and L = 8, more than the row; a launch gets 48 KB of shared memory in all without asking);
// else 1. One to a span, such rows leave most of a block's threads idle; side by side they
// measured much faster. Rows of a warp's steps or more measured faster one to a span
// (docs/benchmarks.md).
template <typename T, int KB> int rows_side_by_side(const conv_args &a, const tg_tensor *x, const tg_tensor *y)
{
    int rows = (int)rows_to_a_block<T>(a, x);
    if (rows == 0 || a.init.p || !rows_aligned(y, vec_width<T>())) return 1;
    while (rows > 1 && row_shape<T, KB>::backward_bytes(rows * (int)a.L, kStages, rows) > 32 * 1024) rows--;
    return rows;
}

// Whether each float-backward block takes its channel's whole list of spans (whole rows, one
// to a span), and so writes dw and dbias itself: no workspace and no second kernel. Up to 32
// spans, when the grid of one block per channel is resident at once and still gives every
// SM 8 warps, where it measured faster. Blocks of 16 spans (two per channel, all resident,
// the second kernel summing two parts) measured as 8: the second kernel, not the partly
// filled last wave, was the cost. With fewer warps per SM whole lists measured level or
// slower, and with more blocks than the GPU holds at once, slower (docs/benchmarks.md).
// `plan` is the one-row plan made without whole lists.
template <typename Kernel>
bool backward_takes_whole_lists(const conv_args &a, const row_plan &plan, Kernel kernel, int threads, size_t shared)
{
    constexpr int64_t kMaxSpans = 32, kMinWarpsPerMultiprocessor = 8;
    if (!plan.whole_rows || plan.chunks == 1 || plan.items > kMaxSpans) return false;
    if (a.C * (threads / 32) < kMinWarpsPerMultiprocessor * tg_cuda_multiprocessors()) return false;
    return a.C <= tg_cuda_resident_blocks(kernel, threads, shared);
}

// The backward's row of the selection table for this call. For the tensor-core stream
// backward it makes the tensor maps of x and dout (into the plan's maps).
template <typename T, int KB>
tg_conv1d_kernel backward_kernel_for(const conv_args &a, const tg_conv1d_args *in, const tg_tensor *dout,
                                     const tg_tensor *dx, CUtensorMap *x_map, CUtensorMap *d_map)
{
    if (time_contiguous(in->x) && time_contiguous(dout) && time_contiguous(dx)) {
        // Rows shorter than one warp's pass of the tensor-core backward (1024 steps) would leave
        // most of its lanes idle: they take the float backward, which measured faster there; from
        // L = 1024 on the tensor cores stay ahead (docs/benchmarks.md).
        if (backward_on_tensor_cores<T, KB>() && a.L >= 32 * kTensorCoreStepsPerThread)
            return TG_CONV1D_ROW_TENSOR_CORES;
        return rows_side_by_side<T, KB>(a, in->x, dout) > 1 ? TG_CONV1D_ROW_SIDE_BY_SIDE : TG_CONV1D_ROW_STAGED;
    }
    if (!streams_take<T, stream_backward_cpt<T, KB>()>(a, in->x, dout, dx)) return TG_CONV1D_TILE;
    if (!backward_stream_on_tensor_cores<T, KB>()) return TG_CONV1D_STREAM;
    // bf16 at K = 9–16: the tensor cores, whose tiles come in by the copy engine through tensor
    // maps of x and dout; where a map cannot be made (rows of more than 2^31 − 256 steps), the
    // tile kernel (the float stream kernel is not built for them).
    return channel_last_box_map(a.x, a, x_map) && channel_last_box_map(a.y, a, d_map) ? TG_CONV1D_STREAM_TENSOR_CORES
                                                                                      : TG_CONV1D_TILE;
}

// Why the backward kernel cannot take this call, or NULL when it can (as above, the tensor
// maps made for the tensor-core stream backward).
template <typename T, int KB>
const char *backward_refusal(tg_conv1d_kernel kernel, const conv_args &a, const tg_conv1d_args *in,
                             const tg_tensor *dout, const tg_tensor *dx, CUtensorMap *x_map, CUtensorMap *d_map)
{
    const bool rows = time_contiguous(in->x) && time_contiguous(dout) && time_contiguous(dx);
    const bool streams = !rows && streams_take<T, stream_backward_cpt<T, KB>()>(a, in->x, dout, dx);
    const char *not_rows = "it wants x, dout and dx with stride 1 along L";
    switch (kernel) {
    case TG_CONV1D_ROW_STAGED: return rows ? NULL : not_rows;
    case TG_CONV1D_ROW_SIDE_BY_SIDE:
        return !rows ? not_rows
               : rows_side_by_side<T, KB>(a, in->x, dout) > 1
                   ? NULL
                   : "it takes aligned rows shorter than a warp's steps, without initial states";
    case TG_CONV1D_ROW_TENSOR_CORES:
        return !rows ? not_rows
               : backward_on_tensor_cores<T, KB>() && a.L >= 32 * kTensorCoreStepsPerThread
                   ? NULL
                   : "it takes bf16 rows of at least 1024 steps at K >= 5";
    case TG_CONV1D_STREAM:
        return streams && !backward_stream_on_tensor_cores<T, KB>()
                   ? NULL
                   : "it takes aligned channel-last data with C a multiple of 16 bytes (bf16: K <= 8)";
    case TG_CONV1D_STREAM_TENSOR_CORES:
        return streams && backward_stream_on_tensor_cores<T, KB>() && channel_last_box_map(a.x, a, x_map) &&
                       channel_last_box_map(a.y, a, d_map)
                   ? NULL
                   : "it takes aligned channel-last bf16 data at K >= 9 with rows of fewer than 2^31 - 256 steps";
    case TG_CONV1D_TILE: return NULL;
    default: return "it is not a backward kernel";
    }
}

template <typename T, int KB>
bool pick_backward(const conv_args &a, const tg_conv1d_args *in, const tg_tensor *dout, const tg_tensor *dx,
                   CUtensorMap *x_map, CUtensorMap *d_map, tg_conv1d_kernel *kernel)
{
    *kernel = tg_cuda_conv1d_forced_kernel(TG_CONV1D_BACKWARD);
    if (*kernel == TG_CONV1D_AUTO) {
        *kernel = backward_kernel_for<T, KB>(a, in, dout, dx, x_map, d_map);
    } else if (const char *why = backward_refusal<T, KB>(*kernel, a, in, dout, dx, x_map, d_map)) {
        cannot_take("tg_causal_conv1d backward", *kernel, a, why);
        return false;
    }
    tg_cuda_conv1d_note_kernel(TG_CONV1D_BACKWARD, *kernel);
    return true;
}

template <typename T, int KB>
tg_status backward_kernels(const tg_conv1d_args *in, const tg_tensor *dout, const tg_tensor *dfinal, tg_tensor *dx,
                           tg_tensor *dweight, tg_tensor *dbias, tg_tensor *dinitial)
{
    conv_args a = make_args(in, dout, dx, dfinal);
    CUtensorMap x_map = {}, d_map = {}, dx_map = {};
    tg_conv1d_kernel chosen;
    if (!pick_backward<T, KB>(a, in, dout, dx, &x_map, &d_map, &chosen)) return TG_ERR_INVALID;
    const bool tensor_cores = chosen == TG_CONV1D_ROW_TENSOR_CORES;
    const bool rows = tensor_cores || chosen == TG_CONV1D_ROW_STAGED || chosen == TG_CONV1D_ROW_SIDE_BY_SIDE;
    const bool mma_streams = chosen == TG_CONV1D_STREAM_TENSOR_CORES, float_streams = chosen == TG_CONV1D_STREAM;
    int64_t parts;
    const int steps_per_thread = tensor_cores ? kTensorCoreStepsPerThread : row_ept<T>();
    const int span_stages = tensor_cores ? kTensorCoreStages : kStages;
    const int span_rows = chosen == TG_CONV1D_ROW_SIDE_BY_SIDE ? rows_side_by_side<T, KB>(a, in->x, dout) : 1;
    const int threads = row_threads(span_rows * a.L, steps_per_thread);
    const int span_len = row_span_len(span_rows, a.L, threads, steps_per_thread);
    row_plan rplan = {};
    stream_plan splan = {};
    mma_backward_plan mplan = {};
    tile_plan tplan = {};
    void (*row_kernel)(conv_args, row_plan, float *) = NULL;
    const size_t row_shared = row_shape<T, KB>::backward_bytes(span_len, span_stages, span_rows); // span buffers
    if (rows) {
        if (span_rows > 1)
            row_kernel = a.silu ? row_bwd<T, KB, true, true> : row_bwd<T, KB, false, true>;
        else
            row_kernel = a.silu ? row_bwd<T, KB, true, false> : row_bwd<T, KB, false, false>;
        if constexpr (backward_on_tensor_cores<T, KB>())
            if (tensor_cores)
                row_kernel = a.silu ? row_bwd_tensor_cores<T, KB, true> : row_bwd_tensor_cores<T, KB, false>;
        // The tensor-core backward's blocks end with costly partial sums: its grid fills whole
        // waves with long blocks, which measured faster. The float backward measured slower
        // that way: 8 spans per block; except where it shares the slopes (f32 K = 9–16 with
        // SiLU), whose 17 sums per thread at a block's end are a real share of its instructions
        // with 8 spans per block (Nsight Compute): there whole waves measured faster
        // (docs/benchmarks.md).
        const bool long_blocks = tensor_cores || row_shape<T, KB>::shares_slopes(a.silu);
        int64_t resident = 0;
        if (long_blocks) resident = tg_cuda_resident_blocks(row_kernel, threads, row_shared);
        auto plan_rows = [&](bool whole_lists) {
            return make_row_plan<T>(a, in->x, dout, dx, threads, steps_per_thread, row_shape<T, KB>::H,
                                    row_shape<T, KB>::H, resident, span_rows, whole_lists);
        };
        rplan = plan_rows(false);
        // Measured on spans of whole rows only (the others stage edges as well).
        if (!tensor_cores && span_rows == 1 && backward_takes_whole_lists(a, rplan, row_kernel, threads, row_shared))
            rplan = plan_rows(true);
        parts = rplan.chunks;
        if (!fits_row_grid(a, rplan)) return too_large(a);
    } else if (mma_streams) {
        mplan = make_mma_backward_plan(a, dx);
        mplan.dx_by_tensor = channel_last_box_map(a.dx, a, &dx_map);
        parts = a.B * mplan.time_blocks;
        if (!fits_stream_grid(a, mplan)) return too_large(a);
    } else if (float_streams) {
        // Wide taps take longer segments: each segment recomputes K − 1 steps past its end and
        // computes its first and last chunks with bounds tests, a larger share at K > 4. 512
        // steps measured faster than 256 at K = 8 but slower at K = 3 and 4 (half the blocks:
        // a larger last wave), and 1024 faster than 512 for 16-bit data at K = 8 and 16 but
        // slower for f32 (docs/benchmarks.md). The blocks wanted fall as the segments grow
        // (4096, 2048, 1024), the pairs measured.
        constexpr int64_t kSegment = KB < 8 ? 256 : sizeof(T) == 2 ? 1024 : 512;
        splan = make_stream_plan<T, stream_backward_cpt<T, KB>()>(a, dx, stream_most_warps_across<true>(), kSegment,
                                                                  4096 * 256 / kSegment);
        parts = a.B * splan.time_blocks;
        if (!fits_stream_grid(a, splan)) return too_large(a);
    } else {
        tplan = make_tile_plan<T>(a, in->x, dout, dx);
        parts = a.B * tplan.time_blocks;
        if (!fits_tile_grid(a, tplan)) return too_large(a);
    }
    // A row block that holds its channel's whole list (8 spans or fewer, or up to 32 when
    // backward_takes_whole_lists) writes dw and dbias itself: no workspace and no second
    // kernel, whose launch and run were a real share of short rows (docs/benchmarks.md). The
    // sum is the one the second kernel made (x + 0). Whole lists of up to 64 rows had measured
    // level in the float backward and slower on tensor cores; since spans are staged as whole
    // rows the float backward gains where backward_takes_whole_lists says.
    a.grads.dw = dweight ? tg_bytes(dweight) : NULL;
    a.grads.dws0 = dweight ? dweight->strides[0] : 0;
    a.grads.dws1 = dweight ? dweight->strides[1] : 0;
    a.grads.db = dbias ? tg_bytes(dbias) : NULL;
    a.grads.dbs0 = dbias ? dbias->strides[0] : 0;
    a.grads.dtype = a.dtype;
    a.grads.K = a.K;
    a.grads.KB = KB;
    a.final_grads = rows && parts == 1;
    size_t ws_bytes = a.final_grads ? 0 : (size_t)(parts * a.C * (KB + 1)) * sizeof(float);
    float *ws = NULL;
    tg_status status = ws_bytes ? tg_device_alloc(TG_DEVICE_CUDA, ws_bytes, (void **)&ws) : TG_OK;
    if (status != TG_OK) return status;
    const char *op = "tg_causal_conv1d backward";
    if (rows) {
        status = launch_overlapped(op, row_kernel, dim3((unsigned)(a.C * rplan.chunks)), dim3(threads), row_shared, a,
                                   rplan, ws);
    } else if (mma_streams) {
        if constexpr (backward_stream_on_tensor_cores<T, KB>()) {
            auto kernel = a.silu ? stream_bwd_mma<true> : stream_bwd_mma<false>;
            static bool shared_set[2]; // backward_kernels is one per T, KB
            // Past the 48 KB a launch gets without asking (if refused, the launch fails and says so).
            set_attribute_once(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, mma_backward_shape::BLOCK_BYTES,
                               shared_set[a.silu]);
            status = launch_overlapped(op, kernel, stream_grid(a, mplan), dim3(kBlock), mma_backward_shape::BLOCK_BYTES,
                                       a, mplan, ws, x_map, d_map, dx_map);
        }
    } else if (float_streams) {
        if constexpr (!backward_stream_on_tensor_cores<T, KB>()) {
            auto kernel = a.silu ? stream_bwd<T, KB, true> : stream_bwd<T, KB, false>;
            // At K ≤ 4 its registers let five blocks onto an SM; four measured faster
            // (docs/benchmarks.md): a carve-out for four blocks' rings keeps it there, and
            // leaves the rest of the SM's memory to L1.
            static const int carveout = carveout_for_blocks(kStreamBackwardBlocks, stream_backward_ring_bytes<KB>());
            static bool carveout_set[2];
            prefer_fewer_resident_blocks(kernel, carveout_set[a.silu], carveout);
            status = launch_overlapped(op, kernel, stream_grid(a, splan), dim3(kBlock), 0, a, splan, ws);
        }
    } else {
        auto kernel = a.silu ? tile_bwd<T, KB, true> : tile_bwd<T, KB, false>;
        status = launch_overlapped(op, kernel, tile_grid(a, tplan), dim3(kBlock), 0, a, tplan, ws);
    }
    if (status == TG_OK && (dweight || dbias) && !a.final_grads)
        status = launch_overlapped(op, sum_partials_kernel, dim3(tg_blocks_for(sum_partials_threads(parts, a.C, KB))),
                                   dim3(TG_THREADS), 0, (const float *)ws, parts, a.C, a.grads);
    if (status == TG_OK && dinitial && a.K > 1)
        status = launch_overlapped(op, initial_grad_kernel<T>, dim3(tg_blocks_for(a.B * a.C * (a.K - 1))),
                                   dim3(TG_THREADS), 0, a, t3_of(dinitial));
    if (ws) tg_device_free(TG_DEVICE_CUDA, ws, ws_bytes);
    return status;
}

// The kernels always read dout and write dx: stand-ins when there is no dout (only the
// final states had a gradient) or no dx wanted (only weights, bias or history).
template <typename T, int KB>
tg_status backward_with(const tg_conv1d_args *in, const tg_tensor *dout, const tg_tensor *dfinal, tg_tensor *dx,
                        tg_tensor *dweight, tg_tensor *dbias, tg_tensor *dinitial)
{
    scratch zero_dout = {}, unused_dx = {};
    tg_status status = TG_OK;
    if (!dout) status = scratch_like(in->x, true, zero_dout);
    if (status == TG_OK && !dx) status = scratch_like(in->x, false, unused_dx);
    if (status == TG_OK)
        status = backward_kernels<T, KB>(in, dout ? dout : &zero_dout.tensor, dfinal, dx ? dx : &unused_dx.tensor,
                                         dweight, dbias, dinitial);
    scratch_free(zero_dout);
    scratch_free(unused_dx);
    return status;
}

tg_status unsupported(const tg_conv1d_args *in, const char *why)
{
    return tg_set_error(TG_ERR_INVALID, "tg_causal_conv1d: the CUDA kernels %s (K = %lld, dtype %s)", why,
                        (long long)in->weight->shape[1], tg_dtype_name(in->x->dtype));
}

// The dispatch over dtype and K bucket, shared by forward and backward. `Launch` is a
// template functor with a static `run<T, KB>(args...)`.
template <template <typename, int> class Launch, typename... Args>
tg_status dispatch(const tg_conv1d_args *in, Args... args)
{
    int64_t K = in->weight->shape[1];
    if (K > kMaxK) return unsupported(in, "take K up to 16");
    switch (in->x->dtype) {
    case TG_F32:
        return K <= 2   ? Launch<float, 2>::run(in, args...)
               : K == 3 ? Launch<float, 3>::run(in, args...)
               : K == 4 ? Launch<float, 4>::run(in, args...)
               : K <= 8 ? Launch<float, 8>::run(in, args...)
                        : Launch<float, 16>::run(in, args...);
    case TG_BF16:
        return K <= 2   ? Launch<__nv_bfloat16, 2>::run(in, args...)
               : K == 3 ? Launch<__nv_bfloat16, 3>::run(in, args...)
               : K == 4 ? Launch<__nv_bfloat16, 4>::run(in, args...)
               : K <= 8 ? Launch<__nv_bfloat16, 8>::run(in, args...)
                        : Launch<__nv_bfloat16, 16>::run(in, args...);
    case TG_F16:
        return K <= 2   ? Launch<__half, 2>::run(in, args...)
               : K == 3 ? Launch<__half, 3>::run(in, args...)
               : K == 4 ? Launch<__half, 4>::run(in, args...)
               : K <= 8 ? Launch<__half, 8>::run(in, args...)
                        : Launch<__half, 16>::run(in, args...);
    default: return unsupported(in, "take f32, bf16 and f16");
    }
}

template <typename T, int KB> struct forward_launch {
    static tg_status run(const tg_conv1d_args *in, tg_tensor *out, tg_tensor *final_states)
    {
        return forward_with<T, KB>(in, out, final_states);
    }
};

template <typename T, int KB> struct backward_launch {
    static tg_status run(const tg_conv1d_args *in, const tg_tensor *dout, const tg_tensor *dfinal, tg_tensor *dx,
                         tg_tensor *dweight, tg_tensor *dbias, tg_tensor *dinitial)
    {
        return backward_with<T, KB>(in, dout, dfinal, dx, dweight, dbias, dinitial);
    }
};

} // namespace

extern "C" tg_status tg_cuda_causal_conv1d_fwd(const tg_conv1d_args *args, tg_tensor *out, tg_tensor *final_states)
{
    return dispatch<forward_launch>(args, out, final_states);
}

extern "C" tg_status tg_cuda_causal_conv1d_bwd(const tg_conv1d_args *args, const tg_tensor *dout,
                                               const tg_tensor *dfinal_states, tg_tensor *dx, tg_tensor *dweight,
                                               tg_tensor *dbias, tg_tensor *dinitial_states)
{
    return dispatch<backward_launch>(args, dout, dfinal_states, dx, dweight, dbias, dinitial_states);
}
