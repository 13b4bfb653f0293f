// kernels/cuda/conv1d.cu: causal conv1d forward and backward on the GPU.
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
// K is a template bucket KB ∈ {2, 3, 4, 8, 16} (any K ≤ KB runs in its bucket: the missing
// look-back taps have weight 0), so the tap loops unroll and the windows stay in registers.
//
// The kernels move many bytes and do little arithmetic, but with 16-bit data the arithmetic
// per byte doubles, and instruction issue, not DRAM, becomes the limit (bench/NOTES.md has
// the counter readings). So the per-element work is kept lean: the sigmoid is one ex2 and
// one reciprocal (flush-to-zero forms, no subnormal fix-ups), the 16-bit backward's slope of
// SiLU one tanh and three FMAs (scaled_gradient), the activation is chosen by a select
// rather than a branch, and the row kernels do their 64-bit index maths once per row.
// In bf16 the row kernels' convolutions at larger K run as 16 × 16 tile products on the
// tensor cores (section "bf16 on tensor cores"), whose cost does not grow with K.
#include "kernels/conv1d.h"
#include "kernels/cuda/common.cuh"

#include <cudaTypedefs.h> // the tensor maps' encoder (no link to the driver library: found at run time)
#include <type_traits>


namespace {

constexpr int kBlock = 128;    // threads per block
constexpr int kMaxK = 16;      // the largest kernel width the GPU path takes
constexpr int kTileC = 64;     // tile kernels: channels per tile (a warp covers 32 of them)
constexpr int kTileT = 64;     // tile kernels: steps per tile

// A rank-3 tensor for the kernels: element pointer and element strides.
struct t3 {
    char *p;
    int64_t s0, s1, s2;
};

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

// Where the backward's dw and dbias go (either may be NULL): partial sum i of channel c is
// dw[c, K − 1 − i] for i < K, dbias[c] for i = KB; the sums for K ≤ i < KB are not stored.
struct weight_grads {
    char *dw, *db;
    int64_t dws0, dws1, dbs0;
    int dtype, K, KB;
    __device__ bool wanted(int i) const { return i == KB ? db != NULL : i < K && dw != NULL; }
    __device__ void store(int64_t c, int i, float sum) const
    {
        if (i == KB) tg_store_raw(db, dtype, c * dbs0, sum);
        else tg_store_raw(dw, dtype, c * dws0 + (K - 1 - i) * dws1, sum);
    }
};

struct conv_args {
    int64_t B, C, L;
    int K;
    int dtype;   // storage dtype of every tensor (the op checks they agree)
    bool silu;
    t3 x, y;     // forward: x in, y = out; backward: x in, y = dout
    t3 dx;       // backward only
    t3 init;     // (B, C, K−1) or p == NULL
    t3 dfinal;   // backward only, or p == NULL
    const char *w;
    int64_t ws0, ws1;
    const char *bias; // or NULL
    int64_t bs0;
    // Backward: with final_grads, a block that holds its channel's whole list writes dw and
    // dbias (grads) itself instead of partials for sum_partials_kernel.
    bool final_grads;
    weight_grads grads;
};

template <typename T> __device__ inline float ld(const t3 &v, int64_t b, int64_t c, int64_t t)
{
    return tg_to_float(*(const T *)(v.p + (b * v.s0 + c * v.s1 + t * v.s2) * (int64_t)sizeof(T)));
}

template <typename T> __device__ inline void st(const t3 &v, int64_t b, int64_t c, int64_t t, float value)
{
    *(T *)(v.p + (b * v.s0 + c * v.s1 + t * v.s2) * (int64_t)sizeof(T)) = tg_from_float<T>(value);
}

// Element (b, c, 0) of v.
template <typename T> __device__ inline T *row_of(const t3 &v, int64_t b, int64_t c)
{
    return (T *)(v.p + (b * v.s0 + c * v.s1) * (int64_t)sizeof(T));
}

// The history (initial state) for a step t < 0, or 0 when there is none.
template <typename T> __device__ inline float history_at(const conv_args &a, int64_t b, int64_t c, int64_t t)
{
    int64_t j = a.K - 1 + t; // index into the initial states
    return (a.init.p && j >= 0) ? ld<T>(a.init, b, c, j) : 0.0f;
}

// x at time t (t may be negative: the history, or 0).
template <typename T> __device__ inline float x_at(const conv_args &a, int64_t b, int64_t c, int64_t t)
{
    return t >= 0 ? ld<T>(a.x, b, c, t) : history_at<T>(a, b, c, t);
}

// The channel's weights by look-back distance (zero past K) and its bias.
template <typename T, int KB> __device__ inline float load_taps(const conv_args &a, int64_t c, float (&wl)[KB])
{
    // wl[0], then a step back per tap: a 64-bit multiply per tap had been a real share of the
    // short-row blocks' setup, and of the stream kernels' (bf16 cl K = 8 fwd+bwd 1250 → 1235 µs).
    const T *w = (const T *)a.w + c * a.ws0 + (a.K - 1) * a.ws1;
#pragma unroll
    for (int i = 0; i < KB; i++, w -= a.ws1) wl[i] = i < a.K ? tg_to_float(*w) : 0.0f;
    return a.bias ? tg_to_float(((const T *)a.bias)[c * a.bs0]) : 0.0f;
}

// σ(z) = 1 / (1 + 2^(−z·log2 e)) from one ex2 and one reciprocal. The flush-to-zero forms
// skip the subnormal fix-up sequences of the plain ones; a subnormal 2^(…) only ever meets
// the 1 it is added to. Large −z gives 2^(…) = inf and σ = 0, as it should.
__device__ inline float sigmoid(float z)
{
    float e, s;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(-1.4426950408889634f * z));
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(s) : "f"(1.0f + e));
    return s;
}
// Both computed, one selected: cheaper than a branch per element in unrolled loops.
__device__ inline float activate(float z, bool silu)
{
    float s = sigmoid(z);
    return silu ? z * s : z;
}
__device__ inline float activation_slope(float z, bool silu)
{
    float s = sigmoid(z);
    return silu ? s * (1.0f + z * (1.0f - s)) : 1.0f;
}

// The backward kernels rebuild z from taps and bias scaled by a constant, carry g / scale
// instead of g (the scaled taps turn it back into dx: Σ wl·g = Σ (scale·wl)·(g / scale)), and
// scale the dw and dbias sums back once at the end. The scale is chosen so that the slope of
// SiLU comes out in the fewest instructions:
//   float32 storage: scale = −log2 e, zs = −z·log2 e, and with σ = 1 / (1 + 2^zs) from one ex2
//     and one reciprocal, s' = −σ·ln 2 = 1 / ((1 + 2^zs)·(−1/ln 2)):
//       g / scale = dout·act'(z)·(−ln 2) = dout·s'·(1 − zs·(s' + ln 2))        (7 instructions)
//   16-bit storage: scale = 1/2, zh = z/2, and with th = tanh(zh) from one tanh.approx,
//     σ = (1 + th)/2 and z·(1 − σ) = zh·(1 − th):
//       g / scale = 2·dout·σ·(1 + z·(1 − σ)) = m·(1 + zh·(1 − th)), m = dout·(1 + th)
//                                                                              (4 instructions)
// The PTX ISA promises the tanh to about 2⁻¹¹; on the H200 it measured within 2⁻¹⁷ of tanh over
// [−12, 12], and the slope 2·act'(z) within 1.8·10⁻⁵ for z in [−24, 24], far under the 2⁻⁹ at
// which a 16-bit dx, dw or dbias is stored (the tests hold dx to one storage step). It cuts the
// stream backward's unchecked bf16 K = 8 chunk from 579 to 530 instructions: bf16 channel-last
// K = 8 (16×1536×16384) fwd+bwd 1149.3–1150.0 → 1134.8–1137.1 µs, K = 16 1801.5–1803.1 →
// 1713.8–1725.8 (bench/NOTES.md, v35). Float32 storage keeps the slope to float32
// accuracy. Scaling by 1/2 is exact, so the 16-bit taps and bias lose nothing either.
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;
template <typename T> __host__ __device__ constexpr float tap_scale()
{
    return sizeof(T) == 2 ? 0.5f : -kLog2e;
}
// SILU is a template parameter of the backward kernels: a select per step (and, without SiLU,
// rebuilding z at all) is a measurable share of their instructions.
template <typename T, bool SILU> __device__ inline float scaled_gradient(float zs, float dout)
{
    if constexpr (!SILU) return dout * (sizeof(T) == 2 ? 2.0f : -kLn2); // 1 / tap_scale
    if constexpr (sizeof(T) == 2) {
        float th;
        asm("tanh.approx.f32 %0, %1;" : "=f"(th) : "f"(zs));
        const float m = fmaf(dout, th, dout);
        return fmaf(m, fmaf(-zs, th, zs), m);
    } else {
        float e, s;
        asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(zs));
        asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(s) : "f"(fmaf(e, -kLog2e, -kLog2e)));
        return dout * (s * fmaf(-zs, s + kLn2, 1.0f));
    }
}

// The channel's taps (as load_taps) and bias, scaled by tap_scale for scaled_gradient.
template <typename T, int KB> __device__ inline float load_scaled_taps(const conv_args &a, int64_t c, float (&wl)[KB])
{
    const float bias = load_taps<T, KB>(a, c, wl);
#pragma unroll
    for (int i = 0; i < KB; i++) wl[i] *= tap_scale<T>();
    return tap_scale<T>() * bias;
}

template <typename T> __host__ __device__ constexpr int vec_width() { return 16 / (int)sizeof(T); }

// Writes this block's N partial sums for channel c to ws[c][i][part] (part fastest, so the
// final sum over parts reads contiguous memory).
__device__ inline void partial_to_workspace(float *ws, int64_t parts, int64_t part, int64_t c, int N, int i, float v)
{
    ws[((int64_t)c * N + i) * parts + part] = v;
}

// 16 bytes from global to shared memory without passing through registers (cp.async): the
// whole tile's loads are in flight at once, and no register holds them. copy16_async_to takes
// the destination as a shared-memory address (what __cvta_generic_to_shared gives).
__device__ inline void copy16_async_to(unsigned shared, const void *global)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared), "l"(global));
}
// The same, or 16 zero bytes where `bytes` is 0 (nothing read).
__device__ inline void copy16_async_or_zero(unsigned shared, const void *global, unsigned bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared), "l"(global), "r"(bytes));
}
__device__ inline void copy16_async(void *shared, const void *global)
{
    copy16_async_to((unsigned)__cvta_generic_to_shared(shared), global);
}
__device__ inline void copies_wait_all() { asm volatile("cp.async.wait_all;\n" ::); }
// Closes the group of this thread's cp.async copies issued since the last one.
__device__ inline void copies_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N> __device__ inline void copies_wait_groups() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// The backward's kernels are launched with Hopper's programmatic dependent launch
// (launch_overlapped): each may be scheduled while the kernel before it finishes, which hides
// the few microseconds between two kernels (a real share at the short benchmark sizes, where
// a pass takes 25–60 µs). A kernel allows the next one from its start
// (next_kernel_may_start), and touches no global memory before after_previous_kernels, which
// returns once the kernels before it have finished and their writes are visible (at once
// without the attribute). The main backward launched so measured 1.5–1.9 µs faster
// forward+backward on the short rows (8×1536×2048 bf16 K = 4: 82.1 → 80.5 µs), the same on
// the long ones. The forwards are launched plainly: a wait at the start of every block
// measured slower (the short-row forward's blocks live a few microseconds each), and letting
// the backward's blocks in from the forward's start slowed the forward (32×768×1024: 31.8 →
// 33.8 µs).
__device__ inline void next_kernel_may_start()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ inline void after_previous_kernels()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// ---- bulk copies into shared memory ---------------------------------------------------------

// Hopper copies a contiguous, 16-byte aligned span of global memory into shared memory with
// one instruction (cp.async.bulk, the 1-D form of the tensor memory accelerator), counting the
// bytes that arrived on an mbarrier in shared memory. The row kernels stage each span of a
// row this way from one thread, instead of every thread issuing its share of 16-byte copies:
// in the 16-bit backward those per-thread loops were about a quarter of all instructions.
// Bulk copies, and the barrier forms that go with them, are Hopper's (sm_90): built for an
// older GPU, the threads stage every vector themselves (the same results, slower).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define TG_BULK_COPY 0
#else
#define TG_BULK_COPY 1
#endif

__device__ inline unsigned shared_address(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

// A barrier that completes a phase when `arrivals` threads have arrived and every announced
// byte is in (by default: thread 0 alone arrives).
__device__ inline void arrival_barrier_init(uint64_t *barrier, unsigned arrivals = 1)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(barrier)), "r"(arrivals) : "memory");
}
// Makes the initialised barriers visible to the copy engine (then a __syncthreads for the block).
__device__ inline void arrival_barriers_published()
{
#if TG_BULK_COPY
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

// `count` barriers of one arrival each, published to the copy engine (then a barrier for the
// threads that wait on them: __syncthreads, or __syncwarp where one warp uses them).
__device__ inline void arrival_barriers_init(uint64_t *barriers, int count)
{
    for (int i = 0; i < count; i++) arrival_barrier_init(&barriers[i]);
    arrival_barriers_published();
}

// Thread 0, before staging a span: orders the block's earlier ordinary accesses to shared
// memory (all threads passed a __syncthreads since) before the bulk copies that follow.
__device__ inline void async_copies_follow()
{
#if TG_BULK_COPY
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// Thread 0: `bytes` more are to arrive on the barrier's current phase, by the copy issued next.
__device__ inline void bulk_copy_to_shared(void *shared, const void *global, unsigned bytes, uint64_t *barrier)
{
#if TG_BULK_COPY
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n"
                 "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%2], [%3], %1, [%0];\n" ::"r"(
                     shared_address(barrier)),
                 "r"(bytes), "r"(shared_address(shared)), "l"(global)
                 : "memory");
#endif
}

// Thread 0, after the span's copies are issued: the phase completes once their bytes are in.
__device__ inline void arrival_arrive(uint64_t *barrier)
{
    asm volatile("{\n"
                 ".reg .b64 state;\n" // the phase the arrival was counted in: not needed
                 "mbarrier.arrive.shared.b64 state, [%0];\n"
                 "}\n" ::"r"(shared_address(barrier))
                 : "memory");
}

// Waits until the barrier's phase of the given parity (0 for its first use, then 1, 0, …) has
// completed.
__device__ inline void arrival_wait(uint64_t *barrier, unsigned parity)
{
    asm volatile("{\n"
                 ".reg .pred done;\n"
                 "WAIT:\n"
#if TG_BULK_COPY
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
#else
                 "mbarrier.test_wait.parity.shared.b64 done, [%0], %1;\n"
#endif
                 "@!done bra WAIT;\n"
                 "}\n" ::"r"(shared_address(barrier)),
                 "r"(parity)
                 : "memory");
}

// Thread 0: the box of a tensor map at coordinates (c, t, b) into shared memory, laid out (and
// swizzled) as the map says, its bytes counted on the barrier as by bulk_copy_to_shared.
// Coordinates past the tensor's ends read as zeros.
__device__ inline void tensor_box_to_shared(void *shared, const CUtensorMap *map, int c, int t, int b, unsigned bytes,
                                            uint64_t *barrier)
{
#if TG_BULK_COPY
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n"
                 "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%2], [%3, {%4, %5, %6}], [%0];\n" ::"r"(
                     shared_address(barrier)),
                 "r"(bytes), "r"(shared_address(shared)), "l"(map), "r"(c), "r"(t), "r"(b)
                 : "memory");
#endif
}

// Thread 0: the box of a tensor map at coordinates (c, t, b) from shared memory (laid out as
// the map says) to global memory, as one bulk group; coordinates past the tensor's ends are
// not written. The threads' ordinary writes of that memory must come first (a barrier); the
// copy is ordered after them here.
__device__ inline void tensor_box_from_shared(const CUtensorMap *map, int c, int t, int b, const void *shared)
{
#if TG_BULK_COPY
    async_copies_follow();
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%1, %2, %3}], [%4];\n"
                 "cp.async.bulk.commit_group;\n" ::"l"(map),
                 "r"(c), "r"(t), "r"(b), "r"(shared_address(shared))
                 : "memory");
#endif
}

// Thread 0: waits until every bulk group it issued has read its shared memory (which may then
// be written again), or with `written`, until their writes to global memory are done too.
template <bool written = false> __device__ inline void tensor_stores_wait()
{
#if TG_BULK_COPY
    if (written) asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
    else asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
#endif
}

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
    // rows are all edge spans; through stage_span their staging and bookkeeping were 43% of
    // the backward's instructions at 8×1536×2048 bf16, and this path took that size's K = 4
    // fwd+bwd from 80.8 to 76.5 µs, 32×768×1024's from 85.4 to 79.8 (bench/NOTES.md, v26).
    bool whole_rows;
    __device__ bool stages_whole_rows() const { return TG_BULK_COPY && whole_rows; }
    // The side-by-side list's items per channel, ⌈B / R⌉, worked out here: in the kernel the
    // 64-bit division cost each block about a hundred instructions, and the 128×768×256 rows
    // 0.6–1.2 µs (bench/NOTES.md). Last in the struct: ahead of the fields above, it changed
    // how the one-row kernels load them.
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
    // z and g it built. f32 channel-first fwd+bwd at K = 16: 16×1536×16384 2748–2840 →
    // 2249–2322 µs, 8×1536×2048 222.9–223.3 → 184.0–184.4, 32×768×1024 203.3–203.7 →
    // 172.6–172.7. At K = 8 (7 rebuilt per 8) the block barrier costs more than it saves:
    // 8×1536×2048 147.7–148.1 → 149.1–149.8 (bench/NOTES.md, v38). 16-bit data would need a
    // float buffer for g beside its 16-bit dout. Only with SiLU: without it g is dout times
    // a constant, and nothing is rebuilt.
    __host__ __device__ static constexpr bool shares_slopes(bool silu) { return silu && sizeof(T) == 4 && KB == 16; }
    static constexpr int HV = (KB - 1 + V - 1) / V; // halo vectors (at least K−1 steps) on a side
    static constexpr int H = HV * V;                 // halo steps on a side
    // Shared memory of the staged backward for spans of ch steps in `rows` slots: per stage,
    // backward_stage's xn + dn.
    static size_t backward_bytes(int ch, int stages, int rows = 1)
    {
        return stages * (size_t)(2 * ch + (2 * rows + 1) * H) * sizeof(T);
    }
};

// The backward's staged spans, in dynamic shared memory sized to the plan's spans (row_shape):
// short rows take blocks of fewer threads, and buffers sized for kBlock threads would cap how
// many of those blocks an SM holds (at L = 1024, 9 blocks of 64 threads instead of 16).
extern __shared__ uint4 row_stage_memory[];

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

// Stages v[first, first + count) of row (b, c) into dst (first and count multiples of V).
// What lies inside the row goes by one bulk copy from thread 0 (counted on `ready`) when the
// row is aligned; the rest (before step 0: the history when X_HISTORY, else 0; past the end:
// 0; everything when the row is not aligned) the threads write, a vector of zeros at once and
// element by element otherwise, visible after the caller's next __syncthreads. The common
// case, all inside, costs the other threads a few comparisons.
template <typename T, bool X_HISTORY>
__device__ inline void stage_span(const conv_args &a, const t3 &v, bool vec_ok, int64_t b, int64_t c, int64_t first,
                                  int count, T *dst, uint64_t *ready)
{
    constexpr int V = vec_width<T>();
    const int64_t inside_end = a.L - a.L % V; // whole vectors inside the row end here
    if (TG_BULK_COPY && vec_ok && first >= 0 && first + count <= inside_end) {
        if (threadIdx.x == 0) bulk_copy_to_shared(dst, row_of<T>(v, b, c) + first, count * sizeof(T), ready);
        return;
    }
    int64_t lo = first > 0 ? first : 0, hi = first + count < inside_end ? first + count : inside_end;
    if (!TG_BULK_COPY || !vec_ok || hi <= lo) lo = hi = first; // no bulk part
    const T *row = row_of<T>(v, b, c);
    if (threadIdx.x == 0 && hi > lo)
        bulk_copy_to_shared(dst + (lo - first), row + lo, (unsigned)((hi - lo) * sizeof(T)), ready);
    const int before = (int)((lo - first) / V), bulk_end = (int)((hi - first) / V);
    const int edges = before + count / V - bulk_end; // vectors left to the threads
    // Counted from the last thread down: thread 0's warp has issued the bulk copies, and the
    // block waits at its next barrier for the slowest warp.
    for (int e = blockDim.x - 1 - threadIdx.x; e < edges; e += blockDim.x) {
        const int k = e < before ? e : bulk_end + (e - before);
        const int64_t u0 = first + (int64_t)k * V;
        if (u0 >= a.L || (u0 + V <= 0 && !(X_HISTORY && a.init.p))) { // all zeros: one store
            *(uint4 *)(dst + k * V) = make_uint4(0, 0, 0, 0);
            continue;
        }
        for (int j = 0; j < V; j++) {
            const int64_t u = first + (int64_t)k * V + j;
            const float value = u >= a.L ? 0.0f : u >= 0 ? tg_to_float(row[u]) : X_HISTORY ? history_at<T>(a, b, c, u) : 0.0f;
            dst[k * V + j] = tg_from_float<T>(value); // exact: the value came from a T
        }
    }
}

// Two 16-bit values packed in one 32-bit word, as floats. A bf16 is the upper half of an
// f32, so a shift and a mask are the whole conversion; converting each bf16 on its own made
// the compiler extract the upper one first (two instructions instead of one), which in the
// 16-bit kernels, bound by instruction issue, is worth avoiding.
__device__ inline void unpack2(unsigned w, float &lo, float &hi, __nv_bfloat16)
{
    lo = __uint_as_float(w << 16);
    hi = __uint_as_float(w & 0xffff0000u);
}
__device__ inline void unpack2(unsigned w, float &lo, float &hi, __half)
{
    const float2 pair = __half22float2(*(const __half2 *)&w);
    lo = pair.x;
    hi = pair.y;
}

// The V values of T in 16 bytes, as floats.
template <typename T> __device__ inline void unpack16(uint4 raw, float *out)
{
    if constexpr (sizeof(T) == 4) {
        out[0] = __uint_as_float(raw.x);
        out[1] = __uint_as_float(raw.y);
        out[2] = __uint_as_float(raw.z);
        out[3] = __uint_as_float(raw.w);
    } else {
        unpack2(raw.x, out[0], out[1], T());
        unpack2(raw.y, out[2], out[3], T());
        unpack2(raw.z, out[4], out[5], T());
        unpack2(raw.w, out[6], out[7], T());
    }
}

// out[j] = src[j] as float for j < N, read as 16-byte vectors (src 16-byte aligned).
template <typename T, int N> __device__ inline void read_shared(const T *src, float *out)
{
    constexpr int V = vec_width<T>();
    static_assert(N % V == 0, "whole vectors");
#pragma unroll
    for (int q = 0; q < N / V; q++) unpack16<T>(*(const uint4 *)(src + q * V), out + q * V);
}

// 16 bytes of T from V floats, as one uint4, stored by store16 in one 16-byte instruction.
// (Written in plain C++, the compiler merged the vector store with the scalar tail path
// and split it into four 4-byte stores, which halved the forward's speed.)
__device__ inline unsigned pack2(float lo, float hi, __nv_bfloat16)
{
    __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
    return *(unsigned *)&pair;
}
__device__ inline unsigned pack2(float lo, float hi, __half)
{
    __half2 pair = __floats2half2_rn(lo, hi);
    return *(unsigned *)&pair;
}
template <typename T> __device__ inline uint4 pack16(const float *v)
{
    if constexpr (sizeof(T) == 4)
        return make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]), __float_as_uint(v[3]));
    else
        return make_uint4(pack2(v[0], v[1], T()), pack2(v[2], v[3], T()), pack2(v[4], v[5], T()), pack2(v[6], v[7], T()));
}

// dst[j] = v[j] as T for j < N, written as 16-byte vectors (dst 16-byte aligned): read_shared's
// counterpart.
template <typename T, int N> __device__ inline void write_shared(T *dst, const float *v)
{
    constexpr int V = vec_width<T>();
    static_assert(N % V == 0, "whole vectors");
#pragma unroll
    for (int q = 0; q < N / V; q++) *(uint4 *)(dst + q * V) = pack16<T>(v + q * V);
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

// The pipelined walk both row kernels share: stage(span, buffer) stages one span (its bulk
// copies counted on ready[buffer]), compute(span, buffer) works on a staged one; setup() runs
// while the first spans are in flight. Each buffer's barrier completes one phase per use, so
// a buffer's uses wait for parity 0, 1, 0, …
//   The spans' bulk copies are issued by thread 0, or with rows side by side by one thread per
// row (backward_stage); each issuer arrives on the span's barrier after its copies, so the
// barrier's phase cannot complete before every copy has announced its bytes.
template <int STAGES, bool SIDE_BY_SIDE = false, typename Stage, typename Setup, typename Compute>
__device__ inline void walk_spans(const row_run &run, const row_plan &plan, uint64_t (&ready)[STAGES], Stage stage,
                                  Setup setup, Compute compute)
{
    const int spans = (int)plan.spans, rows = SIDE_BY_SIDE ? plan.rows_per_span : 1;
    row_span current(spans, rows, run.first), ahead = current;
    int ahead_buffer = 0, staged = 0;
    const unsigned issuers = SIDE_BY_SIDE && plan.stages_whole_rows() ? (unsigned)rows : 1u;
    auto stage_ahead = [&] {
        if (threadIdx.x < issuers) async_copies_follow();
        stage(ahead, ahead_buffer);
        if (threadIdx.x < issuers) arrival_arrive(&ready[ahead_buffer]);
        ahead.advance(spans, rows);
        ahead_buffer = ahead_buffer + 1 == STAGES ? 0 : ahead_buffer + 1;
        staged++;
    };
    if (threadIdx.x == 0) {
        for (int i = 0; i < STAGES; i++) arrival_barrier_init(&ready[i], issuers);
        arrival_barriers_published();
    }
    // Until the barrier after setup() only thread 0 arrives on the barriers. Yet the compiler
    // may initialise them from warp 0's uniform datapath, which racecheck reported as a
    // hazard against thread 0's first arrivals (with two stages): this block barrier keeps
    // the initialisation apart from the arrivals, once per block.
    __syncthreads();
    while (staged < STAGES - 1 && staged < run.count) stage_ahead();
    setup();
    __syncthreads(); // the barriers and the first spans' edge elements, for every thread
    int buffer = 0;
    unsigned parity = 0;
    for (int pass = 0; pass < run.count; pass++) {
        if (staged < run.count) stage_ahead(); // into the buffer computed last pass
        arrival_wait(&ready[buffer], parity);
        compute(current, buffer);
        current.advance(spans, rows);
        if (++buffer == STAGES) buffer = 0, parity ^= 1;
        if (pass + 1 < run.count) __syncthreads(); // before this buffer is staged again; edges written
    }
}

// The forward's maths for EPT steps: out[e] = act(bias + Σ_i wl[i]·xw[KB − 1 + e − i]), where
// xw starts KB − 1 steps before the first output step.
template <int KB, int EPT>
__device__ inline void forward_window(const float (&wl)[KB], float bias, const float *xw, bool silu, float (&out)[EPT])
{
#pragma unroll
    for (int e = 0; e < EPT; e++) {
        float z = bias;
#pragma unroll
        for (int i = 0; i < KB; i++) z += wl[i] * xw[KB - 1 + e - i];
        out[e] = activate(z, silu);
    }
}

// The forward in registers, for f32 and for short rows: each thread loads its EPT steps
// straight into registers and takes the K − 1 before them from the neighbouring lane by a
// shuffle. It has no shared memory and no barriers, and measured faster than the staged
// forward below except on long 16-bit rows (bench/NOTES.md, v10). chunks blocks per (b, c)
// row, each making up to `passes` passes of chunk_len steps.
// The K−1 steps left of each thread's window, x[t0 − (KB−1)] … x[t0 − 1], mostly taken from
// the neighbouring lanes' registers (a shuffle instead of a second read); the first lanes of
// a warp read theirs from memory (or the history). All 32 lanes must call this, also those
// whose window lies past the row's end (they read nothing there: their result is unused).
template <typename T, int KB, int EPT>
__device__ inline void left_halo(const conv_args &a, const T *x, bool vec_x, int64_t b, int64_t c, int64_t t0,
                                 const float *body, float *halo)
{
    const int lane = threadIdx.x % 32;
    constexpr int V = vec_width<T>(), NV = (KB - 1 + V - 1) / V, LOADERS = (KB - 1 + EPT - 1) / EPT;
    // From K = 8 on the first lanes take their steps before the warp's window as 16-byte
    // vectors where the row allows, instead of one load and branch per step (f32 8×1536×2048
    // forward at K = 8 57.0 → 56.1 µs, at K = 16 79.1 → 77.3; bench/NOTES.md, v39).
    float before[NV * V]; // x[t0 − NV·V] … x[t0 − 1]
    const bool vectors = KB >= 8 && lane < LOADERS && vec_x && t0 >= NV * V && t0 <= a.L;
    if (vectors) {
#pragma unroll
        for (int q = 0; q < NV; q++) unpack16<T>(*(const uint4 *)(x + t0 - (NV - q) * V), before + q * V);
    }
#pragma unroll
    for (int m = 1; m < KB; m++) {
        const int q = (m + EPT - 1) / EPT; // step t0 − m is in lane − q's window, at EPT·q − m
        float v = __shfl_up_sync(0xffffffffu, body[EPT * q - m], q);
        if (lane < q)
            v = vectors          ? before[NV * V - m]
                : t0 - m >= a.L ? 0.0f
                : t0 - m >= 0   ? tg_to_float(x[t0 - m])
                                : history_at<T>(a, b, c, t0 - m);
        halo[KB - 1 - m] = v;
    }
}

// left_halo for rows of whole aligned vectors (the grouped forward's): every thread's steps
// start at a multiple of EPT, so the KB − 1 steps before lane 0's window are the previous
// warp's last ones, and lane 0 takes them with one or two 16-byte loads instead of a load and
// a branch per step (each load waited for before the next: at K = 8 seven in a row, per row).
// A thread past the row's end loads nothing (it stores nothing). With ROWS_IN_WARP a warp
// holds several rows (row_fwd_side_by_side): a thread at a row's first step takes the
// history (or zeros) instead of the previous lane's steps, which belong to another row.
template <typename T, int KB, int EPT, bool ROWS_IN_WARP = false>
__device__ inline void aligned_left_halo(const conv_args &a, const T *x, int64_t b, int64_t c, int64_t t0,
                                         const float *body, float *halo)
{
    constexpr int V = vec_width<T>(), NV = (KB - 1 + V - 1) / V; // vectors holding the halo
    static_assert(KB - 1 <= EPT, "the halo lies in the previous lane's window");
#pragma unroll
    for (int m = 1; m < KB; m++) halo[KB - 1 - m] = __shfl_up_sync(0xffffffffu, body[EPT - m], 1);
    const bool own_halo = threadIdx.x % 32 == 0 || (ROWS_IN_WARP && t0 == 0);
    if (!own_halo || t0 >= a.L) return;
    if (t0 >= NV * V) {
        float before[NV * V]; // x[t0 − NV·V] … x[t0 − 1]
#pragma unroll
        for (int q = 0; q < NV; q++) unpack16<T>(*(const uint4 *)(x + t0 - (NV - q) * V), before + q * V);
#pragma unroll
        for (int m = 1; m < KB; m++) halo[KB - 1 - m] = before[NV * V - m];
    } else { // the row's first steps: the history, or zeros
#pragma unroll
        for (int m = 1; m < KB; m++) halo[KB - 1 - m] = history_at<T>(a, b, c, t0 - m);
    }
}

// win[j] = row[t0 + j] for j in [0, N), 0 past the end (vector loads where aligned and inside
// the row). The row kernels only run on rows with stride 1 along L (or L = 1).
template <typename T, int N>
__device__ inline void load_row(const T *row, bool vec_ok, int64_t L, int64_t t0, float *win)
{
    constexpr int V = vec_width<T>();
    if (vec_ok && t0 + N <= L) {
#pragma unroll
        for (int q = 0; q < N / V; q++) unpack16<T>(*(const uint4 *)(row + t0 + q * V), win + q * V);
    } else {
#pragma unroll
        for (int e = 0; e < N; e++) win[e] = t0 + e < L ? tg_to_float(row[t0 + e]) : 0.0f;
    }
}

// The direct forward's passes over row (b, c): chunk_len steps each, from this block's chunk.
template <typename T, int KB>
__device__ inline void row_fwd_direct_passes(const conv_args &a, const row_plan &plan, int64_t b, int64_t c,
                                             unsigned chunk, const float (&wl)[KB], float bias)
{
    constexpr int EPT = row_ept<T>();
    const T *x = row_of<T>(a.x, b, c);
    T *y = row_of<T>(a.y, b, c);
    for (int pass = 0; pass < plan.passes; pass++) {
        const int64_t base = (chunk * plan.passes + pass) * plan.chunk_len;
        if (base >= a.L) break; // uniform across the block
        const int64_t t0 = base + (int64_t)threadIdx.x * EPT;
        float win[KB - 1 + EPT]; // x[t0 − (KB−1)] … x[t0 + EPT − 1]
        load_row<T, EPT>(x, plan.vec_x, a.L, t0, win + KB - 1);
        left_halo<T, KB, EPT>(a, x, plan.vec_x, b, c, t0, win + KB - 1, win);
        if (t0 >= a.L) continue;
        float out[EPT];
        forward_window<KB, EPT>(wl, bias, win, a.silu, out);
        store_row<T, EPT>(y, plan.vec_y, a.L, t0, out);
    }
}

// Rows first_b … first_b + ROWS − 1 of channel c, each one pass of whole 16-byte vectors per
// thread (aligned rows, L a multiple of EPT: the host's choice), the next row's x asked for
// before this row is computed, so a block keeps loads in flight while it computes. Only this
// path is compiled into the ROWS > 1 kernels: with the general one beside it (rows not
// aligned, a last thread inside the row) ptxas gave them 72 registers at K = 4 instead of 48,
// and with the loop over rows unrolled 80.
template <typename T, int KB, int ROWS>
__device__ inline void row_fwd_direct_rows(const conv_args &a, bool vec_y, int64_t first_b, int64_t c,
                                           const float (&wl)[KB], float bias)
{
    constexpr int EPT = row_ept<T>(), V = vec_width<T>();
    const int64_t t0 = (int64_t)threadIdx.x * EPT;
    uint4 ahead[EPT / V]; // x[t0 … t0 + EPT − 1] of the next row, as stored
    // Threads past the row's end load nothing: what they hold is never stored, and the halo's
    // shuffles carry values only to later lanes, which lie past the end too.
    auto fetch = [&](int64_t b) {
        if (t0 >= a.L) return;
        const T *x = row_of<T>(a.x, b, c);
#pragma unroll
        for (int q = 0; q < EPT / V; q++) ahead[q] = *(const uint4 *)(x + t0 + q * V);
    };
    fetch(first_b);
#pragma unroll 1
    for (int r = 0; r < ROWS; r++) {
        const int64_t b = first_b + r;
        if (b >= a.B) break; // uniform across the block
        float win[KB - 1 + EPT]; // x[t0 − (KB−1)] … x[t0 + EPT − 1]
#pragma unroll
        for (int q = 0; q < EPT / V; q++) unpack16<T>(ahead[q], win + KB - 1 + q * V);
        if (r + 1 < ROWS && b + 1 < a.B) fetch(b + 1);
        aligned_left_halo<T, KB, EPT>(a, row_of<T>(a.x, b, c), b, c, t0, win + KB - 1, win);
        if (t0 >= a.L) continue;
        float out[EPT];
        forward_window<KB, EPT>(wl, bias, win, a.silu, out);
        store_row<T, EPT>(row_of<T>(a.y, b, c), vec_y, a.L, t0, out);
    }
}

// Chunks blocks per (b, c) row, each making up to `passes` passes.
template <typename T, int KB> __global__ void __launch_bounds__(kBlock) row_fwd_direct(conv_args a, row_plan plan)
{
    // 32-bit divisions (the grid fits an int): blocks of short rows make one pass, so this
    // arithmetic is a real share of their work.
    const unsigned chunks = (unsigned)plan.chunks, row = blockIdx.x / chunks, chunk = blockIdx.x % chunks;
    const int64_t b = row / (unsigned)a.C, c = row % (unsigned)a.C;
    float wl[KB];
    const float bias = load_taps<T, KB>(a, c, wl);
    row_fwd_direct_passes<T, KB>(a, plan, b, c, chunk, wl, bias);
}

// Resident blocks per SM the grouped forward is compiled for: the registers it used when
// nothing told ptxas (48 at K ≤ 4, 64 at K = 8, 118 at K = 16), which small changes to the
// kernel moved by up to 30 (K = 8: 94 registers, 5 blocks per SM instead of 8). At K = 16 the
// f16 kernel now spills 8 bytes under it.
template <int KB> constexpr int grouped_forward_min_blocks() { return KB <= 4 ? 10 : KB <= 8 ? 8 : 4; }

// Short rows (direct_forward_rows): a block per ROWS rows of a channel, which loads the
// channel's taps once for all of them (row_fwd_direct_rows), on a grid of C × ⌈B / ROWS⌉
// blocks, so that a block finds its channel and rows without a division. A block of 2 rows
// used to spend about a third of its code (190 of 640 instructions) before its
// first row: the division, 64-bit arithmetic per tap, the loads. With this grid, the taps
// loaded by one stepped pointer (load_taps) and the halo by aligned_left_halo, the forward
// measured 30.2–30.5 → 29.2–29.8 µs at bf16 K = 4 and 35.0–35.7 → 31.7–33.5 at K = 8
// (8×1536×2048, 32×768×1024; bench/NOTES.md, v29).
template <typename T, int KB, int ROWS>
__global__ void __launch_bounds__(kBlock, grouped_forward_min_blocks<KB>()) row_fwd_direct_grouped(conv_args a,
                                                                                                 bool vec_y)
{
    const int64_t c = blockIdx.x, first_b = (int64_t)blockIdx.y * ROWS;
    float wl[KB];
    const float bias = load_taps<T, KB>(a, c, wl);
    row_fwd_direct_rows<T, KB, ROWS>(a, vec_y, first_b, c, wl, bias);
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

// Rows shorter than a warp's steps, and some rows of exactly a warp's steps
// (forward_rows_side_by_side): one row per block would leave lanes idle (bf16 at L = 256: 16
// of 32), and rows in turn (row_fwd_direct_grouped) leave them idle too. Here a block takes
// `rows` rows of its channel side by side, L / EPT threads each, all at once; threads past
// them (the block is whole warps) or past B compute nothing. On a C × ⌈B / rows⌉ grid. At
// 128×768×256 bf16 the forward went 64.8 → 30.4 µs at K = 2 (one row per block before),
// 41.8 → 31.8 at K = 3 and 45.2 → 32.3 at K = 4 (two rows in turn), 58.4 → 42.7 at K = 8
// (four); bench/NOTES.md, v30.
template <typename T, int KB>
__global__ void __launch_bounds__(kBlock, grouped_forward_min_blocks<KB>()) row_fwd_side_by_side(conv_args a, int rows,
                                                                                                bool vec_y)
{
    constexpr int EPT = row_ept<T>(), V = vec_width<T>();
    const int64_t c = blockIdx.x;
    const side_by_side_place place = side_by_side_place_of<EPT>(a.L);
    const int64_t b = (int64_t)blockIdx.y * rows + place.row;
    const bool active = place.row < rows && b < a.B;
    // An idle thread takes steps past the row's end: it loads and stores nothing.
    const int64_t t0 = active ? place.t0 : a.L;
    float wl[KB];
    const float bias = load_taps<T, KB>(a, c, wl);
    const T *x = row_of<T>(a.x, active ? b : 0, c);
    float win[KB - 1 + EPT]; // x[t0 − (KB−1)] … x[t0 + EPT − 1]
    if (active)
#pragma unroll
        for (int q = 0; q < EPT / V; q++) unpack16<T>(*(const uint4 *)(x + t0 + q * V), win + KB - 1 + q * V);
    aligned_left_halo<T, KB, EPT, true>(a, x, b, c, t0, win + KB - 1, win);
    if (!active) return;
    float out[EPT];
    forward_window<KB, EPT>(wl, bias, win, a.silu, out);
    store_row<T, EPT>(row_of<T>(a.y, b, c), vec_y, a.L, t0, out);
}

// ---- bf16 on tensor cores --------------------------------------------------------
//
// With 16-bit storage the row backward is bound by instruction issue, and most of its
// instructions are the three convolutions with the channel's taps: z rebuilt from x, dx from
// g, and the per-lag sums of dw (about 3·K multiply-adds per step, plus the K − 1 steps of z
// and g rebuilt past each thread's own). All three are small matrix products in disguise, so
// in bf16 the tensor cores do them where K makes the float maths long (the backward from
// K = 5 on, the staged forward, z alone, from K = 9 on: backward_on_tensor_cores). A warp
// takes a span's steps as tiles of 16 segments (rows j) × 16 steps (columns n), two per pass
// in the forward, four in the backward; for a tile starting at step T0:
//   z[j][n]  = bias + Σ_k X[j][k]·Wc[k][n] + Σ_k Xp[j][k]·Wp[k][n]
//              X[j][k] = x[T0 + 16j + k], Xp the segment before (X one row earlier),
//              Wc[k][n] = wl[n − k], Wp[k][n] = wl[n − k + 16]
//   dx[j][n] = Σ_k G[j][k]·Vc[k][n] + Σ_k Gn[j][k]·Vn[k][n]
//              G[j][k] = g[T0 + 16j + k], Gn the segment after,
//              Vc[k][n] = wl[k − n], Vn[k][n] = wl[k + 16 − n]
//   dwl[i]   = Σ_n P[n][n − i] + Σ_n Pp[n][n − i + 16],   P += Gᵀ·X and Pp += Gᵀ·Xp per tile
//              (P[n][k'] sums g[16j + n]·x[16j + k'] over the segments: its diagonals are the
//              lag sums dw needs, and it is reduced to them once, at the end of the block)
//   dbias    = Σ g, in float32 per lane as g is made (a product with a tile of ones costs
//              four accumulator registers, and at 6 resident blocks the kernel spilled),
// with wl[i] = 0 outside 0 … K − 1. x and the taps are bf16 values, so their products are
// exact and z is summed in float32 as before. g is made in float32 and enters the products
// rounded to bf16, as an unfused bf16 pipeline would store it between SiLU's backward and the
// convolution's: each term of dx and dw then carries up to 2⁻⁹ of its size, rounding errors
// of independent signs that the float32 sums do not grow (dx and dw are stored in bf16, 2⁻⁹
// too). Carrying g as two bf16 parts, hi + lo, kept them within 2⁻¹⁶ of the float32 result but
// doubled the products and their operands' moves: bf16 16×1536×16384 fwd+bwd 1172–1187 →
// 1053–1055 µs at K = 16, 1063 → 1042 at K = 8 (bench/NOTES.md, v47). dbias sums g in float32,
// unrounded. The slope of SiLU stays per element, in float32.
//   The operands come from shared memory by ldmatrix (x and dout are staged there already, a
// segment being 32 contiguous bytes); g goes from the product's result layout to the operand
// layout of the next without leaving registers (the two layouts agree for row-major tiles),
// its transpose for dw by movmatrix, and Gn by shuffles, except for the segment after the
// warp's last, whose first K − 1 steps the warp computes on its own.
//   Fragment layouts (PTX ISA, mma.m16n8k16): lane = 4·gr + q holds, of a 16 × 16 row-major
// operand A, rows gr and gr + 8 at columns 2q, 2q + 1 and 2q + 8, 2q + 9 (four registers of two
// bf16: a0 rows gr, a1 rows gr + 8, a2 and a3 the same 8 columns on); of a 16 × 8 operand B,
// rows 2q, 2q + 1 (b0) and 2q + 8, 2q + 9 (b1) of column gr; of the 16 × 8 float result,
// rows gr (d0, d1) and gr + 8 (d2, d3) at columns 2q, 2q + 1. So result tiles n 0–7 and 8–15 of
// one product are, packed in pairs, the A operand a0 … a3 of the next.

// Four (or two) 8 × 8 matrices of 16-bit values from shared memory, lanes 8m … 8m + 7 giving
// the rows of matrix m; the transposed forms deliver them as B operands.
__device__ inline void load_matrices(unsigned (&r)[4], const void *rows)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(rows))
                 : "memory");
}
__device__ inline void load_matrices_transposed(unsigned (&r)[4], const void *rows)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(rows))
                 : "memory");
}
__device__ inline void load_matrices(unsigned (&r)[2], const void *rows)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(shared_address(rows))
                 : "memory");
}
__device__ inline void load_matrices_transposed(unsigned (&r)[2], const void *rows)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(shared_address(rows))
                 : "memory");
}

// The transpose of an 8 × 8 matrix of 16-bit values held one pair per lane.
__device__ inline unsigned transposed(unsigned pair)
{
    unsigned t;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(t) : "r"(pair));
    return t;
}

// d = a·b + c: a 16 × 16 bf16 tile times a 16 × 8 one, summed in float32 onto c.
__device__ inline void multiply(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2], const float (&c)[4])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%10, %11, %12, %13};\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
                   "f"(c[3]));
}
// d += a·b.
__device__ inline void multiply_add(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// The channel's tap at look-back distance d as raw bf16 bits, 0 outside 0 … K − 1.
__device__ inline unsigned tap_bits(const conv_args &a, int64_t c, int d)
{
    const unsigned short *w = (const unsigned short *)a.w + c * a.ws0;
    return d >= 0 && d < a.K ? w[(a.K - 1 - d) * a.ws1] : 0u;
}
// The B operand of n-tile nt whose element (k, n) is the tap at distance sign·(n − k) + offset.
__device__ inline void tap_operand(const conv_args &a, int64_t c, int nt, int sign, int offset, unsigned (&b)[2])
{
    const int lane = threadIdx.x % 32, n = 8 * nt + lane / 4, k = 2 * (lane % 4);
    auto tap = [&](int kk) { return tap_bits(a, c, sign * (n - kk) + offset); };
    b[0] = tap(k) | tap(k + 1) << 16;
    b[1] = tap(k + 8) | tap(k + 9) << 16;
}

// The tap operands of one direction (sign as in tap_operand) are read from shared memory at
// each tile rather than kept in registers: 12 registers fewer let the backward keep 7 blocks
// per SM without spills (bench/NOTES.md, v16). Warp 0 writes each lane's operands, offsets
// 0 (both n-tiles) and 16, as two 16-byte words: ops[2·lane], ops[2·lane + 1].
__device__ inline void store_tap_operands(const conv_args &a, int64_t c, int sign, uint4 *ops)
{
    if (threadIdx.x >= 32) return;
    unsigned b[2][2][2]; // [offset][n-tile]
    for (int nt = 0; nt < 2; nt++) {
        tap_operand(a, c, nt, sign, 0, b[0][nt]);
        tap_operand(a, c, nt, sign, 16, b[1][nt]);
    }
    ops[2 * threadIdx.x] = make_uint4(b[0][0][0], b[0][0][1], b[0][1][0], b[0][1][1]);
    ops[2 * threadIdx.x + 1] = make_uint4(b[1][0][0], b[1][0][1], b[1][1][0], b[1][1][1]);
}
// This lane's operands (after the barrier that follows store_tap_operands), per n-tile.
__device__ inline void load_tap_operands(const uint4 *ops, unsigned (&at0)[2][2], unsigned (&at16)[2][2])
{
    const int lane = threadIdx.x % 32;
    const uint4 first = ops[2 * lane], second = ops[2 * lane + 1];
    at0[0][0] = first.x, at0[0][1] = first.y, at0[1][0] = first.z, at0[1][1] = first.w;
    at16[0][0] = second.x, at16[0][1] = second.y, at16[1][0] = second.z, at16[1][1] = second.w;
}

// This lane's row addresses for ldmatrix, in steps from a tile's first: its row of the four
// 8 × 8 matrices of the tile (own), and of the segments before (before: with `wide`, all 16
// columns; else columns 8–15, the only ones taps of K ≤ 9 reach, as the last two matrices).
struct tile_rows {
    int own, before;
    __device__ tile_rows(bool wide)
    {
        const int lane = threadIdx.x % 32, m = lane / 8, row = lane % 8 + 8 * (m & 1);
        own = 16 * row + 8 * (m >> 1);
        before = 16 * row - 16 + (wide ? 8 * (m >> 1) : 8);
    }
};

// z = bias + X·Wc + Xp·Wp on tiles of a channel: the taps as B operands.
template <int KB> struct tensor_core_z {
    // With K ≤ 9 the taps reach back (and, for dx, ahead) at most 8 steps, so only the
    // neighbouring segments' columns 8–15 (and 0–7) take part; K = 16 needs them whole.
    static constexpr bool kWide = KB > 9;
    const uint4 *ops; // 64 words of shared memory: the taps as B operands (store_tap_operands)
    float bias;

    __device__ __forceinline__ void setup(const conv_args &a, int64_t c, uint4 *shared_ops)
    {
        bias = a.bias ? tg_to_float(((const __nv_bfloat16 *)a.bias)[c * a.bs0]) : 0.0f;
        store_tap_operands(a, c, 1, shared_ops);
        ops = shared_ops;
    }
    // The operands X and Xp of the tile from xt (its first step; the 16 steps before it staged):
    // as A operands, or TRANSPOSED, as the B operands of the two n-tiles (registers 0–1, 2–3).
    template <bool TRANSPOSED = false>
    __device__ __forceinline__ static void load_x(const __nv_bfloat16 *xt, const tile_rows &rows, unsigned (&x)[4],
                                                  unsigned (&xp)[4])
    {
        auto load = [](unsigned (&r)[4], const __nv_bfloat16 *p) {
            if constexpr (TRANSPOSED) load_matrices_transposed(r, p);
            else load_matrices(r, p);
        };
        load(x, xt + rows.own);
        if constexpr (kWide) {
            load(xp, xt + rows.before);
        } else {
            unsigned half[2];
            if constexpr (TRANSPOSED) load_matrices_transposed(half, xt + rows.before);
            else load_matrices(half, xt + rows.before);
            xp[0] = xp[1] = 0, xp[2] = half[0], xp[3] = half[1];
        }
    }
    // Wc and Wp, per n-tile.
    __device__ __forceinline__ void operands(unsigned (&wc)[2][2], unsigned (&wp)[2][2]) const
    {
        load_tap_operands(ops, wc, wp);
    }
    __device__ __forceinline__ void tile(const unsigned (&x)[4], const unsigned (&xp)[4], const unsigned (&wc)[2][2],
                                         const unsigned (&wp)[2][2], float (&z)[2][4]) const
    {
        const float biases[4] = {bias, bias, bias, bias};
        multiply(z[0], x, wc[0], biases);
        multiply_add(z[0], xp, wp[0]);
        multiply(z[1], x, wc[1], biases);
        if constexpr (kWide) multiply_add(z[1], xp, wp[1]);
    }
};

// Stores a tile's 16 × 16 results (first step t0 of row `out`, the result layout of two
// n-tiles): pairs of steps when `pairs` (the tile inside the row, an aligned row, nothing to
// add); else step by step inside the row, each value passed through finish(step, value).
template <typename Finish>
__device__ inline void store_tile(__nv_bfloat16 *out, int64_t L, bool pairs, int64_t t0, const float (&v)[2][4],
                                  Finish finish)
{
    const int lane = threadIdx.x % 32, gr = lane / 4, q = lane % 4;
    if (pairs) { // uniform across the warp
        unsigned *p = (unsigned *)(out + t0 + 16 * gr + 2 * q);
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int h = 0; h < 2; h++) p[64 * h + 4 * nt] = pack2(v[nt][2 * h], v[nt][2 * h + 1], __nv_bfloat16());
        return;
    }
#pragma unroll
    for (int nt = 0; nt < 2; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int64_t u = t0 + 16 * (gr + 8 * (e / 2)) + 8 * nt + 2 * q + e % 2;
            if (u < L) out[u] = tg_from_float<__nv_bfloat16>(finish(u, v[nt][e]));
        }
}

template <int KB, bool SILU> struct tensor_core_backward {
    static constexpr bool kWide = tensor_core_z<KB>::kWide;
    tensor_core_z<KB> zt;
    const uint4 *vops;           // the taps for dx as B operands, Vc and Vn (store_tap_operands)
    float p[2][4], pp[2][4];     // P, Pp (per n-tile)
    float g_sum;                 // Σ g over this lane's elements, for dbias
    const float *wl;             // the taps in shared memory, for z after the warp's steps (kWide)

    // taps: KB floats, ops: 128 words of shared memory, readable by every thread after the
    // caller's next barrier.
    __device__ __forceinline__ void setup(const conv_args &a, int64_t c, float *taps, uint4 *ops)
    {
        zt.setup(a, c, ops);
        store_tap_operands(a, c, -1, ops + 64);
        vops = ops + 64;
        if (threadIdx.x < KB) taps[threadIdx.x] = __uint_as_float(tap_bits(a, c, threadIdx.x) << 16); // bf16 → float
        wl = taps;
        g_sum = 0.0f;
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) p[nt][e] = pp[nt][e] = 0.0f;
    }

    // g on one tile, as the A operand gr (SiLU's slope recomputed from z and g rounded to bf16;
    // without SiLU g is dout itself, exact in bf16); adds its terms of P, Pp and Σ g (this one
    // of the unrounded g).
    __device__ __forceinline__ void gradient_tile(const __nv_bfloat16 *xt, const __nv_bfloat16 *dt, unsigned (&gr)[4])
    {
        const tile_rows rows(kWide);
        load_matrices(gr, dt + rows.own); // dout, in the A layout
        if constexpr (SILU) {
            unsigned x[4], xp[4];
            float z[2][4];
            unsigned wc[2][2], wp[2][2];
            zt.operands(wc, wp);
            zt.load_x(xt, rows, x, xp);
            zt.tile(x, xp, wc, wp, z);
#pragma unroll
            for (int r = 0; r < 4; r++) { // A register r holds result tile r / 2, rows r % 2
                const float *zr = &z[r / 2][2 * (r % 2)];
                float d0, d1;
                unpack2(gr[r], d0, d1, __nv_bfloat16());
                d0 *= activation_slope(zr[0], true), d1 *= activation_slope(zr[1], true);
                g_sum += d0 + d1;
                gr[r] = pack2(d0, d1, __nv_bfloat16());
            }
        } else {
#pragma unroll
            for (int r = 0; r < 4; r++) {
                float d0, d1;
                unpack2(gr[r], d0, d1, __nv_bfloat16());
                g_sum += d0 + d1;
            }
        }
        // dw and dbias: Gᵀ as an A operand (the 8 × 8 blocks transposed and the two off the
        // diagonal swapped), X and Xp as B operands.
        unsigned xb[4], xpb[4];
        zt.template load_x<true>(xt, rows, xb, xpb);
        const unsigned gt[4] = {transposed(gr[0]), transposed(gr[2]), transposed(gr[1]), transposed(gr[3])};
        multiply_add(p[0], gt, {xb[0], xb[1]});
        multiply_add(p[1], gt, {xb[2], xb[3]});
        if constexpr (kWide) multiply_add(pp[0], gt, {xpb[0], xpb[1]});
        multiply_add(pp[1], gt, {xpb[2], xpb[3]});
    }

    // g on the first K − 1 steps after the warp's pass (the next warp's first, or the next
    // span's), which the warp's last segment needs for dx: the pairs (2q, 2q + 1) and, with
    // kWide, (2q + 8, 2q + 9) at every lane, rounded to bf16 as the tiles' are.
    __device__ __forceinline__ void gradient_after(const __nv_bfloat16 *xe, const __nv_bfloat16 *de, unsigned (&ga)[2]) const
    {
        if constexpr (kWide) gradient_after_by_lanes(xe, de, ga);
        else ga[0] = gradient_after_on_tensor_cores(xe, de);
    }

    // Without kWide the 8 steps after the warp are z's row of a product like a tile's: each of
    // rows 0–7 of X is those 8 steps (columns 0–7; 8–15 meet only zero taps) and of Xp the 8
    // before them, so each of the result's rows 0–7 holds z at the pairs (2q, 2q + 1). One
    // ldmatrix and two products, where the sum in gradient_after_by_lanes took ~50
    // instructions per pass.
    __device__ __forceinline__ unsigned gradient_after_on_tensor_cores(const __nv_bfloat16 *xe, const __nv_bfloat16 *de) const
    {
        const int q = threadIdx.x % 4;
        float d0, d1;
        unpack2(*(const unsigned *)(de + 2 * q), d0, d1, __nv_bfloat16());
        if constexpr (SILU) {
            unsigned rows[2]; // lanes 0–7 give matrix 0's rows, lanes 8–15 matrix 1's
            load_matrices(rows, threadIdx.x % 32 < 8 ? xe : xe - 8);
            const unsigned x[4] = {rows[0], 0u, 0u, 0u}, xp[4] = {0u, 0u, rows[1], 0u};
            unsigned wc[2][2], wp[2][2];
            zt.operands(wc, wp);
            const float biases[4] = {zt.bias, zt.bias, zt.bias, zt.bias};
            float z[4];
            multiply(z, x, wc[0], biases);
            multiply_add(z, xp, wp[0]);
            d0 *= activation_slope(z[0], true), d1 *= activation_slope(z[1], true);
        }
        // From step K − 1 on the taps are zero; zeros there keep an inf or NaN of x or dout
        // out of dx.
        if (2 * q >= KB - 1) d0 = 0.0f;
        if (2 * q + 1 >= KB - 1) d1 = 0.0f;
        return pack2(d0, d1, __nv_bfloat16());
    }

    __device__ __forceinline__ void gradient_after_by_lanes(const __nv_bfloat16 *xe, const __nv_bfloat16 *de,
                                                            unsigned (&ga)[2]) const
    {
        const int lane = threadIdx.x % 32, s = lane % 16, q = lane % 4;
        float gs = 0.0f;
        if (s < KB - 1) {
            const float d = tg_to_float(de[s]);
            if constexpr (SILU) {
                float z = zt.bias;
#pragma unroll
                for (int i = 0; i < KB; i++) z += wl[i] * tg_to_float(xe[s - i]);
                gs = d * activation_slope(z, true);
            } else {
                gs = d;
            }
        }
        ga[0] = pack2(__shfl_sync(~0u, gs, 2 * q), __shfl_sync(~0u, gs, 2 * q + 1), __nv_bfloat16());
        if constexpr (kWide) ga[1] = pack2(__shfl_sync(~0u, gs, 2 * q + 8), __shfl_sync(~0u, gs, 2 * q + 9), __nv_bfloat16());
    }

    // dx += G·Vc + Gn·Vn on one tile. Gn's rows gr + 1 come from lane + 4; the last row group
    // takes row 8 from lane q's second register and row 16 from `next`, the pairs of the row
    // after the tile (at every lane, for its q).
    __device__ __forceinline__ void input_gradient_tile(const unsigned (&gr)[4], const unsigned (&next)[2], float (&dx)[2][4]) const
    {
        const int lane = threadIdx.x % 32, q = lane % 4;
        const bool last_rows = lane / 4 == 7;
        unsigned gn[4] = {0, 0, 0, 0};
#pragma unroll
        for (int h = 0; h < (kWide ? 2 : 1); h++) { // columns 0–7, and with kWide 8–15
            const unsigned down0 = __shfl_down_sync(~0u, gr[2 * h], 4), down1 = __shfl_down_sync(~0u, gr[2 * h + 1], 4);
            const unsigned row8 = __shfl_sync(~0u, gr[2 * h + 1], q);
            gn[2 * h] = last_rows ? row8 : down0;
            gn[2 * h + 1] = last_rows ? next[h] : down1;
        }
        unsigned vc[2][2], vn[2][2];
        load_tap_operands(vops, vc, vn);
        multiply_add(dx[0], gr, vc[0]);
        multiply_add(dx[1], gr, vc[1]);
        if constexpr (kWide) multiply_add(dx[0], gn, vn[0]);
        multiply_add(dx[1], gn, vn[1]);
    }

    // The warp's TILES · 256 steps of a span from step t_first: x and dout point at that step in
    // the staged buffers (x with the steps before it staged too). A tile's dx needs the first
    // row of the next tile's g, so g runs a tile ahead of dx: two tiles of g are live at a time.
    template <int TILES>
    __device__ __forceinline__ void pass(const conv_args &a, const row_plan &plan, const __nv_bfloat16 *x,
                                         const __nv_bfloat16 *d, int64_t b, int64_t c, int64_t t_first,
                                         int64_t final_from)
    {
        const int q = threadIdx.x % 4;
        unsigned gr[2][4], after[2] = {0, 0};
        gradient_after(x + 256 * TILES, d + 256 * TILES, after); // first: fewer registers live
        gradient_tile(x, d, gr[0]);
        // Tiles wholly before this step store pairs (an aligned row, no final states to add).
        const int64_t pairs_end = plan.vec_dx ? (a.L < final_from ? a.L : final_from) : 0;
        __nv_bfloat16 *out = row_of<__nv_bfloat16>(a.dx, b, c);
#pragma unroll
        for (int mt = 0; mt < TILES; mt++) {
            const int now = mt % 2, next = 1 - now;
            unsigned next_rows[2] = {after[0], after[1]};
            if (mt + 1 < TILES) {
                gradient_tile(x + 256 * (mt + 1), d + 256 * (mt + 1), gr[next]);
                next_rows[0] = __shfl_sync(~0u, gr[next][0], q);
                if constexpr (kWide) next_rows[1] = __shfl_sync(~0u, gr[next][2], q);
            }
            float dx[2][4] = {};
            input_gradient_tile(gr[now], next_rows, dx);
            const int64_t t0 = t_first + 256 * mt;
            store_tile(out, a.L, t0 + 256 <= pairs_end, t0, dx, [&](int64_t u, float v) {
                return u >= final_from ? v + ld<__nv_bfloat16>(a.dfinal, b, c, u - final_from) : v;
            });
        }
    }

    // The block's dw and dbias partials for this thread: the lag diagonals of P and Pp it
    // holds, and its Σ g.
    __device__ __forceinline__ void partials(float (&partial)[KB + 1]) const
    {
        const int lane = threadIdx.x % 32, gr = lane / 4, q = lane % 4;
#pragma unroll
        for (int i = 0; i < KB; i++) partial[i] = 0.0f;
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int lag = gr + 8 * (e / 2) - (8 * nt + 2 * q + e % 2); // n − k'
#pragma unroll
                for (int i = 0; i < KB; i++) { // selects: a branch on lag made the compiler index partial[] in memory
                    partial[i] += lag == i ? p[nt][e] : 0.0f;
                    if (kWide || nt == 1) partial[i] += lag + 16 == i ? pp[nt][e] : 0.0f;
                }
            }
        partial[KB] = g_sum;
    }
};

// Where bf16 runs on tensor cores: where the float maths grows with K, the backward from
// K = 5 on (bucket 8; at K ≤ 4 its float form is faster, bench/NOTES.md) and the staged
// forward at K > 8. (mma with bf16 operands needs sm_80, as the tile kernels' cp.async does.)
template <typename T, int KB> __host__ __device__ constexpr bool backward_on_tensor_cores()
{
    return std::is_same<T, __nv_bfloat16>::value && KB >= 8;
}
template <typename T, int KB> __host__ __device__ constexpr bool forward_on_tensor_cores()
{
    return std::is_same<T, __nv_bfloat16>::value && KB > 8;
}

// The staged forward, for long aligned 16-bit rows (at K = 8 its shared-memory halo beats the
// direct forward's seven shuffles and first-lane loads per pass: 93% of copy bandwidth
// against 73%, bench/NOTES.md v10) and for aligned f32 rows at K = 9–16 (forward_may_stage).
// Its walk is a producer/consumer pipeline without block-wide barriers: thread 0 stages each
// span (stage_span_alone) two ahead of the one being computed, into one of four buffers, and
// before it reuses a buffer it waits until every thread has said, on that buffer's `consumed`
// barrier, that it is done with it. A thread that finishes a span goes on to the next as soon
// as that one has arrived, so the warps of a block are not held in step (a block barrier per
// span measured 91% of the copy bandwidth, this walk 92%, bench/NOTES.md). The backward keeps
// walk_spans: there the pipeline measured slower.
constexpr int kForwardStages = 4, kForwardAhead = 2;

// Thread 0 alone stages x[first, first + count) of an aligned row (b, c) into dst: the whole
// vectors inside the row by one bulk copy, the history before step 0 and a last, partial
// vector element by element. Steps from L on are left unstaged: the forward computes
// outputs there but never stores them, so what the buffer holds there does not matter,
// except on tensor cores (ZERO_TAIL), where a product with a zero tap still turns a NaN
// into a NaN: there they are zeroed.
template <typename T, bool ZERO_TAIL>
__device__ inline void stage_span_alone(const conv_args &a, int64_t b, int64_t c, int64_t first, int count, T *dst,
                                        uint64_t *ready)
{
    constexpr int V = vec_width<T>();
    const T *row = row_of<T>(a.x, b, c);
    const int64_t end = first + count, inside_end = a.L - a.L % V;
    const int64_t lo = first > 0 ? first : 0, hi = end < inside_end ? end : inside_end;
    if (hi > lo) {
#if TG_BULK_COPY
        bulk_copy_to_shared(dst + (lo - first), row + lo, (unsigned)((hi - lo) * sizeof(T)), ready);
#else // built for an older GPU: correct, but one thread copies the span
        for (int64_t u = lo; u < hi; u += V) *(uint4 *)(dst + (u - first)) = *(const uint4 *)(row + u);
#endif
    }
    for (int64_t u = first; u < lo && u < end; u++) dst[u - first] = tg_from_float<T>(history_at<T>(a, b, c, u));
    for (int64_t u = hi > lo ? hi : lo; u < end && u < a.L; u++) dst[u - first] = row[u];
    if constexpr (ZERO_TAIL) {
        int64_t u = a.L > first ? a.L : first;
        for (; u < end && (u - first) % V; u++) dst[u - first] = tg_from_float<T>(0.0f);
        for (; u < end; u += V) *(uint4 *)(dst + (u - first)) = make_uint4(0, 0, 0, 0);
    }
}

// The walk: stage(span, buffer) runs on thread 0 only; compute(span, buffer) on every thread
// once the span is in; setup() while the first spans are in flight. Buffer uses are counted
// per buffer, so the n-th use of a buffer waits for parity n & 1 of its barriers.
template <typename Stage, typename Setup, typename Compute>
__device__ inline void walk_spans_pipelined(const row_run &run, const row_plan &plan,
                                            uint64_t (&ready)[kForwardStages], uint64_t (&consumed)[kForwardStages],
                                            Stage stage, Setup setup, Compute compute)
{
    const int spans = (int)plan.spans;
    row_span current(spans, 1, run.first), ahead = current;
    int staged = 0; // thread 0's count of spans staged
    auto stage_ahead = [&] {
        const int buffer = staged % kForwardStages, use = staged / kForwardStages;
        if (use > 0) arrival_wait(&consumed[buffer], (use - 1) & 1); // its last span is done with
        async_copies_follow();
        stage(ahead, buffer);
        arrival_arrive(&ready[buffer]);
        ahead.advance(spans, 1);
        staged++;
    };
    if (threadIdx.x == 0) {
        for (int i = 0; i < kForwardStages; i++) {
            arrival_barrier_init(&ready[i]);
            arrival_barrier_init(&consumed[i], blockDim.x);
        }
        arrival_barriers_published();
        while (staged < kForwardAhead && staged < run.count) stage_ahead();
    }
    setup();
    __syncthreads(); // the barriers are initialised
    for (int pass = 0; pass < run.count; pass++) {
        if (threadIdx.x == 0 && staged < run.count) stage_ahead();
        const int buffer = pass % kForwardStages;
        arrival_wait(&ready[buffer], (pass / kForwardStages) & 1);
        compute(current, buffer);
        arrival_arrive(&consumed[buffer]);
        current.advance(spans, 1);
    }
}

template <typename T, int KB, bool SILU>
__global__ void __launch_bounds__(kBlock) row_fwd_staged(conv_args a, row_plan plan)
{
    using S = row_shape<T, KB>;
    constexpr int EPT = S::EPT, H = S::H;
    // Static shared memory here: this kernel only runs on long rows (full blocks), and the
    // same buffers in dynamic shared memory measured 4% slower (bench/NOTES.md, v12).
    constexpr int XN = kBlock * EPT + H; // x over [t0 − H, t0 + ch), ch ≤ kBlock · EPT
    __shared__ alignas(16) T xs[kForwardStages][XN];
    __shared__ uint64_t ready[kForwardStages], consumed[kForwardStages];
    const row_run run = row_run_of(a, plan);
    const int64_t c = run.c;
    const int ch = plan.chunk_len, xn = ch + H;
    constexpr bool kTensorCores = forward_on_tensor_cores<T, KB>();
    auto stage = [&](row_span span, int buf) { // thread 0
        const int64_t first = (int64_t)span.index * ch - H;
        if (plan.is_inner(span.index)) // the common case: one copy
            bulk_copy_to_shared(xs[buf], row_of<T>(a.x, span.b, c) + first, xn * sizeof(T), &ready[buf]);
        else
            stage_span_alone<T, kTensorCores>(a, span.b, c, first, xn, xs[buf], &ready[buf]);
    };
    if constexpr (kTensorCores) { // a warp's 512 steps as two tiles of 16 × 16 (tensor_core_z)
        tensor_core_z<KB> zt;
        __shared__ uint4 ops[64];
        const int warp_first = threadIdx.x / 32 * 32 * EPT;
        auto compute = [&](row_span span, int buf) {
            const int64_t t_first = (int64_t)span.index * ch + warp_first;
            if (t_first >= a.L) return; // uniform across the warp
            const tile_rows rows(tensor_core_z<KB>::kWide);
            const bool pairs = plan.vec_y && t_first + 32 * EPT <= a.L;
            __nv_bfloat16 *out = row_of<__nv_bfloat16>(a.y, span.b, c);
            unsigned wc[2][2], wp[2][2];
            zt.operands(wc, wp);
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                unsigned x[4], xp[4];
                float z[2][4];
                zt.load_x(xs[buf] + H + warp_first + 256 * mt, rows, x, xp);
                zt.tile(x, xp, wc, wp, z);
#pragma unroll
                for (int e = 0; e < 8; e++) z[e / 4][e % 4] = activate(z[e / 4][e % 4], SILU);
                store_tile(out, a.L, pairs, t_first + 256 * mt, z, [](int64_t, float v) { return v; });
            }
        };
        walk_spans_pipelined(run, plan, ready, consumed, stage, [&] { zt.setup(a, c, ops); }, compute);
        return;
    }
    float wl[KB];
    float bias = 0.0f;
    auto compute = [&](row_span span, int buf) {
        const int64_t t0 = (int64_t)span.index * ch + (int64_t)threadIdx.x * EPT;
        if (t0 >= a.L) return;
        float xv[EPT + H]; // x from t0 − H
        read_shared<T, EPT + H>(xs[buf] + threadIdx.x * EPT, xv);
        const float *xw = xv + H - (KB - 1); // xw[KB − 1 + e − i] = x[t0 + e − i]
        float out[EPT];
        forward_window<KB, EPT>(wl, bias, xw, SILU, out);
        store_row<T, EPT>(row_of<T>(a.y, span.b, c), plan.vec_y, a.L, t0, out);
    };
    walk_spans_pipelined(run, plan, ready, consumed, stage, [&] { bias = load_taps<T, KB>(a, c, wl); }, compute);
}

// Sums each of the block's N partials over its threads (fixed shuffle tree, then warps in
// order) and writes them to the workspace, or, with a.final_grads (the block took its
// channel's whole list), as dw[c, K − 1 − i] and dbias[c] themselves.
template <int N>
__device__ inline void write_block_sums(const conv_args &a, float (&partial)[N], float *ws, int64_t parts,
                                                   int64_t part, int64_t c)
{
    __shared__ float warp_sums[kBlock / 32][kMaxK + 1];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
    for (int i = 0; i < N; i++) {
        float v = partial[i];
#pragma unroll
        for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
        if (lane == 0) warp_sums[warp][i] = v;
    }
    __syncthreads();
    if (threadIdx.x < N) {
        const int i = threadIdx.x;
        float sum = 0.0f;
        for (int w = 0; w < (int)(blockDim.x / 32); w++) sum += warp_sums[w][i];
        if (!a.final_grads) partial_to_workspace(ws, parts, part, c, N, i, sum);
        else if (a.grads.wanted(i)) a.grads.store(c, i, sum);
    }
}

// The backward's buffers and staging, shared by both backward kernels: x over
// [t0 − H, t0 + ch + H) and dout over [t0, t0 + ch + H) of each span, STAGES of each.
//   With rows side by side (SIDE_BY_SIDE, row_plan::rows_per_span = R) a span's R rows of L
// steps lie in slots `pitch` = L + H apart, x's from H on and dout's from 0:
//   x:    [H] [row 0] [H] [row 1] [H] … [row R−1] [H]
//   dout: [row 0] [H] [row 1] [H] … [row R−1] [H]
// so that row r's x over [−H, L + H) and dout over [0, L + H) are contiguous, the H zeros
// between two rows serving as the one's right halo and the next one's left. The one-row
// kernels are compiled without this (SIDE_BY_SIDE false): as one general form it measured
// 1.1–1.3 µs slower fwd+bwd at 32×768×1024 bf16 (bench/NOTES.md, v30).
template <typename T, int KB, int STAGES, bool SIDE_BY_SIDE = false> struct backward_stage {
    static constexpr int H = row_shape<T, KB>::H;
    const conv_args &a;
    const row_plan &plan;
    int64_t c;
    int ch, pitch, xn, dn; // span, slot pitch (side by side), x and dout buffer lengths
    T *xs, *ds;
    uint64_t *ready;
    __device__ backward_stage(const conv_args &a_, const row_plan &plan_, int64_t c_, uint64_t *ready_)
        : a(a_), plan(plan_), c(c_), ch(plan_.chunk_len), pitch(SIDE_BY_SIDE ? (int)a_.L + H : 0),
          xn(SIDE_BY_SIDE ? plan_.rows_per_span * pitch + H : ch + 2 * H),
          dn(SIDE_BY_SIDE ? plan_.rows_per_span * pitch : ch + H),
          xs((T *)row_stage_memory), ds(xs + STAGES * xn), ready(ready_)
    {
    }
    __device__ const T *x(int buf) const { return xs + buf * xn; } // from the span's first step − H
    __device__ const T *dout(int buf) const { return ds + buf * dn; } // from the span's first step
    // Once per block, before the first span is computed (visible after walk_spans' barrier):
    // the zeros around each buffer's rows when every span is whole rows. Bulk copies never
    // write there, so they stay for every span.
    __device__ void zero_row_edges() const
    {
        if (!plan.stages_whole_rows()) return;
        constexpr int V = vec_width<T>();
        const int L = (int)a.L; // ≤ ch: one span per row
        // Counted from the last thread down: thread 0 is issuing the first spans' copies.
        const int first = blockDim.x - 1 - threadIdx.x;
        if constexpr (SIDE_BY_SIDE) { // H before the first row, H after every row in both
            constexpr int G = H / V;  // vectors of one gap
            const int per_stage = G + 2 * G * plan.rows_per_span;
            for (int e = first; e < STAGES * per_stage; e += blockDim.x) {
                const int buf = e / per_stage, k = e % per_stage - G;
                T *at = k < 0 ? xs + buf * xn + (k + G) * V
                        : k < G * plan.rows_per_span ? xs + buf * xn + (k / G + 1) * pitch + k % G * V
                                                     : ds + buf * dn + (k / G - plan.rows_per_span) * pitch + L + k % G * V;
                *(uint4 *)at = make_uint4(0, 0, 0, 0);
            }
        } else { // H before the row, the rest of x's and dout's buffers after it
            const int x_before = H / V, x_after = (xn - H - L) / V, d_after = (dn - L) / V;
            const int per_stage = x_before + x_after + d_after;
            for (int e = first; e < STAGES * per_stage; e += blockDim.x) {
                const int buf = e / per_stage, k = e % per_stage;
                T *at = k < x_before ? xs + buf * xn + k * V
                        : k < x_before + x_after ? xs + buf * xn + H + L + (k - x_before) * V
                                                 : ds + buf * dn + L + (k - x_before - x_after) * V;
                *(uint4 *)at = make_uint4(0, 0, 0, 0);
            }
        }
    }
    __device__ void operator()(row_span span, int buf) const
    {
        if constexpr (SIDE_BY_SIDE) stage_rows(span, buf);
        else stage_one_row(span, buf);
    }

  private:
    __device__ void stage_one_row(row_span span, int buf) const
    {
        const int64_t base = (int64_t)span.index * ch;
        if (plan.stages_whole_rows()) { // row b's steps 0 … L − 1 only; the zeros are in place
            if (threadIdx.x == 0) {
                const unsigned bytes = (unsigned)(a.L * sizeof(T));
                bulk_copy_to_shared(xs + buf * xn + H, row_of<T>(a.x, span.b, c), bytes, &ready[buf]);
                bulk_copy_to_shared(ds + buf * dn, row_of<T>(a.y, span.b, c), bytes, &ready[buf]);
            }
            return;
        }
        if (plan.is_inner(span.index)) { // the common case: thread 0 issues two copies, no edges
            if (threadIdx.x == 0) {
                bulk_copy_to_shared(xs + buf * xn, row_of<T>(a.x, span.b, c) + base - H, xn * sizeof(T), &ready[buf]);
                bulk_copy_to_shared(ds + buf * dn, row_of<T>(a.y, span.b, c) + base, dn * sizeof(T), &ready[buf]);
            }
            return;
        }
        stage_span<T, true>(a, a.x, plan.vec_x, span.b, c, base - H, xn, xs + buf * xn, &ready[buf]);
        stage_span<T, false>(a, a.y, plan.vec_y, span.b, c, base, dn, ds + buf * dn, &ready[buf]);
    }
    // Rows b … b + R − 1 (those before B), steps 0 … L − 1 of each; the zeros are in place.
    // Thread r copies row r (one instruction for the R threads, where a loop in thread 0 cost
    // the kernel registers); walk_spans counts them as the span's issuers.
    __device__ void stage_rows(row_span span, int buf) const
    {
#if TG_BULK_COPY
        const int r = (int)threadIdx.x;
        if (r < plan.rows_per_span && span.b + r < a.B) {
            const unsigned bytes = (unsigned)(a.L * sizeof(T));
            bulk_copy_to_shared(xs + buf * xn + r * pitch + H, row_of<T>(a.x, span.b + r, c), bytes, &ready[buf]);
            bulk_copy_to_shared(ds + buf * dn + r * pitch, row_of<T>(a.y, span.b + r, c), bytes, &ready[buf]);
        }
#else // built for an older GPU: the threads stage each row and its zeros as a span
        for (int r = 0; r < plan.rows_per_span && span.b + r < a.B; r++) {
            stage_span<T, true>(a, a.x, plan.vec_x, span.b + r, c, -H, pitch + H, xs + buf * xn + r * pitch, &ready[buf]);
            stage_span<T, false>(a, a.y, plan.vec_y, span.b + r, c, 0, pitch, ds + buf * dn + r * pitch, &ready[buf]);
        }
#endif
    }
};

// The last K−1 steps also get the final states' gradient: dfinal[j] is x[L − (K−1) + j]'s.
__device__ inline int64_t final_states_from(const conv_args &a) { return a.dfinal.p ? a.L - (a.K - 1) : a.L; }

// g[j] = dout[j] · act'(z[j]) / tap_scale for j < N, over dout in g, z rebuilt from xw (which
// starts KB − 1 steps before g's first step).
template <typename T, int KB, int N, bool SILU>
__device__ inline void slopes_over_dout(const float (&wl)[KB], float bias, const float *xw, float *g)
{
#pragma unroll
    for (int j = 0; j < N; j++) {
        float zs = bias;
#pragma unroll
        for (int i = 0; i < KB; i++) zs += wl[i] * xw[KB - 1 + j - i];
        g[j] = scaled_gradient<T, SILU>(zs, g[j]);
    }
}

// The g of the K − 1 steps after a span (the next span's first, or zeros past the row), which
// its last threads' dx needs: one step each for the block's last lanes, over the dout staged
// there. x is the span's buffer (from its first step − H), g its dout buffer, both f32.
template <int KB, int H>
__device__ inline void next_span_slopes(const float (&wl)[KB], float bias, int ch, const float *x, float *g)
{
    const int j = (int)threadIdx.x - ((int)blockDim.x - 32);
    if (j < 0 || j >= KB - 1) return;
    slopes_over_dout<float, KB, 1, true>(wl, bias, x + H + ch + j - (KB - 1), g + ch + j);
}

// The float backward: each thread rebuilds z and g for its EPT steps and the K − 1 after them;
// or, where row_shape::shares_slopes, for its own steps only, writes g over its dout
// in the staged span and, after a block barrier, reads the K − 1 after them from its
// neighbours' (the span's last K − 1 from the block's last lanes: next_span_slopes).
// SIDE_BY_SIDE: spans of several whole rows (backward_stage), for rows shorter than a warp's
// steps (rows_side_by_side).
template <typename T, int KB, bool SILU, bool SIDE_BY_SIDE>
__global__ void __launch_bounds__(kBlock) row_bwd(conv_args a, row_plan plan, float *ws)
{
    next_kernel_may_start();
    after_previous_kernels();
    using S = row_shape<T, KB>;
    constexpr int EPT = S::EPT, H = S::H;
    constexpr bool SHARE_SLOPES = S::shares_slopes(SILU);
    __shared__ uint64_t ready[kStages];
    const row_run run = row_run_of<SIDE_BY_SIDE>(a, plan);
    const int64_t c = run.c;
    const backward_stage<T, KB, kStages, SIDE_BY_SIDE> stage(a, plan, c, ready);
    const int ch = plan.chunk_len, xn = stage.xn, dn = stage.dn;
    // This thread's row in every span (backward_stage's slot), its first step there, and where
    // that lies in the buffers (the same offset in x's, which start H steps earlier, and
    // dout's). With one row to a span, the span's threads in order. A thread past the rows
    // takes slot 0's steps past the row's end: it computes nothing.
    int slot = 0, slot_thread = (int)threadIdx.x;
    if constexpr (SIDE_BY_SIDE) {
        const side_by_side_place place = side_by_side_place_of<EPT>(a.L);
        const bool in_slots = place.row < plan.rows_per_span;
        slot = in_slots ? place.row : 0;
        slot_thread = in_slots ? place.t0 / EPT : (int)a.L / EPT;
    }
    const int offset = slot * stage.pitch + slot_thread * EPT;
    const T *const xs = stage.xs, *const ds = stage.ds;
    T *const gs = stage.ds; // g over the dout of a span, when the slopes are shared
    const int64_t final_from = final_states_from(a);
    float wl[KB]; // taps and bias scaled by tap_scale (scaled_gradient)
    float bias = 0.0f;
    float partial[KB + 1]; // dwl[0 … KB−1], dbias, over tap_scale: sums over every span of the block
#pragma unroll
    for (int i = 0; i <= KB; i++) partial[i] = 0.0f;
    auto compute = [&](row_span span, int buf) {
        const int64_t b = span.b + slot, t0 = (int64_t)span.index * ch + (int64_t)slot_thread * EPT;
        const bool inside = t0 < a.L && !(SIDE_BY_SIDE && b >= a.B);
        float g[EPT + H]; // dout, then g, from t0; 0 past the end
        // x from t0 − H: to t0 + EPT when the slopes are shared, else to t0 + EPT + H (the K − 1
        // steps after this thread's rebuilt as well). xw starts at t0 − (KB − 1).
        float xv[SHARE_SLOPES ? EPT + H : EPT + 2 * H];
        const float *xw = xv + H - (KB - 1);
        if constexpr (SHARE_SLOPES) {
            if (inside) {
                read_shared<T, EPT + H>(xs + buf * xn + offset, xv);
                read_shared<T, EPT>(ds + buf * dn + offset, g);
                slopes_over_dout<T, KB, EPT, true>(wl, bias, xw, g);
                write_shared<T, EPT>(gs + buf * dn + offset, g);
            }
            if (!SIDE_BY_SIDE) next_span_slopes<KB, H>(wl, bias, ch, xs + buf * xn, gs + buf * dn);
            // The next bulk copies into this buffer write where g now is: ordered after these
            // writes by each writer's proxy fence, then the block barrier before they are issued.
            async_copies_follow();
            __syncthreads(); // every thread's g written
            if (!inside) return;
            read_shared<T, EPT + H>(ds + buf * dn + offset, g);
        } else {
            if (!inside) return;
            read_shared<T, EPT + 2 * H>(xs + buf * xn + offset, xv);
            read_shared<T, EPT + H>(ds + buf * dn + offset, g);
            slopes_over_dout<T, KB, EPT + KB - 1, SILU>(wl, bias, xw, g);
        }
        // Steps past the end have g = 0, so they add nothing to the partials: no bounds test.
        float dx[EPT];
#pragma unroll
        for (int e = 0; e < EPT; e++) {
            float d = 0.0f;
#pragma unroll
            for (int i = 0; i < KB; i++) d += wl[i] * g[e + i];
            dx[e] = d;
            partial[KB] += g[e];
#pragma unroll
            for (int i = 0; i < KB; i++) partial[i] += g[e] * xw[KB - 1 + e - i];
        }
        if (t0 + EPT > final_from) { // only the threads holding the last K−1 steps
#pragma unroll
            for (int e = 0; e < EPT; e++) {
                const int64_t s = t0 + e;
                if (s >= final_from && s < a.L) dx[e] += ld<T>(a.dfinal, b, c, s - final_from);
            }
        }
        store_row<T, EPT>(row_of<T>(a.dx, b, c), plan.vec_dx, a.L, t0, dx);
    };
    auto setup = [&] {
        stage.zero_row_edges();
        bias = load_scaled_taps<T, KB>(a, c, wl);
    };
    walk_spans<kStages, SIDE_BY_SIDE>(run, plan, ready, stage, setup, compute);
#pragma unroll
    for (int i = 0; i <= KB; i++) partial[i] *= tap_scale<T>();
    write_block_sums<KB + 1>(a, partial, ws, plan.chunks, run.block_in_channel, c);
}

// The bf16 backward from K = 5 on: each warp takes 1024 steps of a span (four tiles) per pass
// on tensor cores (tensor_core_backward), twice the float kernel's 512. The work paid once per
// pass (g after the warp's steps, addresses, the wait for the span) and once per span (the
// walk, its barrier, the staging) then serves twice the steps; spans of 4096 steps in two
// stages take 33 KB of shared memory. Registers decide the rest: at 6 resident blocks
// (80 registers) the four tiles spilled and bf16 K = 8 fwd+bwd measured 1295 µs, at 5 (96)
// 1063 µs, at 4 (up to 128, no spills) 1067 µs, with K = 16 1250 → 1165 µs and the short
// rows 107 → 101 µs from 5 to 4 (bench/NOTES.md, v17). Three stages at 4 blocks: no change.
constexpr int kTensorCoreTiles = 4, kTensorCoreStages = 2;
constexpr int kTensorCoreStepsPerThread = kTensorCoreTiles * 256 / 32;

template <typename T, int KB, bool SILU>
__global__ void __launch_bounds__(kBlock, 4) row_bwd_tensor_cores(conv_args a, row_plan plan, float *ws)
{
    next_kernel_may_start();
    after_previous_kernels();
    constexpr int H = row_shape<T, KB>::H;
    __shared__ uint64_t ready[kTensorCoreStages];
    __shared__ float taps[KB];
    __shared__ uint4 ops[128];
    const row_run run = row_run_of(a, plan);
    const backward_stage<T, KB, kTensorCoreStages> stage(a, plan, run.c, ready);
    const int64_t final_from = final_states_from(a);
    tensor_core_backward<KB, SILU> tc;
    const int warp_first = threadIdx.x / 32 * 32 * kTensorCoreStepsPerThread;
    auto compute = [&](row_span span, int buf) {
        const int64_t t_first = (int64_t)span.index * plan.chunk_len + warp_first;
        if (t_first >= a.L) return; // uniform across the warp
        tc.template pass<kTensorCoreTiles>(a, plan, stage.x(buf) + H + warp_first, stage.dout(buf) + warp_first,
                                           span.b, run.c, t_first, final_from);
    };
    auto setup = [&] {
        stage.zero_row_edges();
        tc.setup(a, run.c, taps, ops);
    };
    walk_spans(run, plan, ready, stage, setup, compute);
    float partial[KB + 1];
    tc.partials(partial);
    write_block_sums<KB + 1>(a, partial, ws, plan.chunks, run.block_in_channel, run.c);
}

// ---- the per-step maths of the kernels that walk time (tile and stream) -------------------------
//
// A thread walks its CPT channels step by step, holding win[KB−1−i] = x[t − i] (and in the
// backward gw[KB−1−i] = g[t − i]); each step shifts the windows by one and puts the new
// step's values last.

template <typename V, int N, int M> __device__ inline void shift_window(V (&v)[N][M])
{
#pragma unroll
    for (int j = 0; j < N - 1; j++)
#pragma unroll
        for (int q = 0; q < M; q++) v[j][q] = v[j + 1][q];
}

// The forward's outputs at step t: act(bias + Σ_i wl[i]·x[t − i]) per channel.
template <int KB, int CPT>
__device__ inline void step_outputs(const float (&wl)[CPT][KB], const float (&bias)[CPT], const float (&win)[KB][CPT],
                                    bool silu, float (&out)[CPT])
{
#pragma unroll
    for (int q = 0; q < CPT; q++) {
        float z = bias[q];
#pragma unroll
        for (int i = 0; i < KB; i++) z += wl[q][i] * win[KB - 1 - i][q];
        out[q] = activate(z, silu);
    }
}

// The backward's g at step t, over tap_scale (taps and bias scaled by it, as in row_bwd),
// into gw[KB − 1]; 0 where dout is.
template <typename T, bool SILU, int KB, int CPT>
__device__ inline void step_gradient(const float (&wl)[CPT][KB], const float (&bias)[CPT], const float (&win)[KB][CPT],
                                     const float (&d_out)[CPT], float (&gw)[KB][CPT])
{
#pragma unroll
    for (int q = 0; q < CPT; q++) {
        float zs = bias[q];
#pragma unroll
        for (int i = 0; i < KB; i++) zs += wl[q][i] * win[KB - 1 - i][q];
        gw[KB - 1][q] = scaled_gradient<T, SILU>(zs, d_out[q]);
    }
}

// dw's lag sums and dbias gain step t's terms: partial[q][i] += g·x[t − i], partial[q][KB] += g.
template <int KB, int CPT>
__device__ inline void add_step_partials(const float (&g)[CPT], const float (&win)[KB][CPT], float (&partial)[CPT][KB + 1])
{
#pragma unroll
    for (int q = 0; q < CPT; q++) {
        partial[q][KB] += g[q];
#pragma unroll
        for (int i = 0; i < KB; i++) partial[q][i] += g[q] * win[KB - 1 - i][q];
    }
}

// dx of step u = t − (KB − 1), whose KB values of g the window then holds: Σ_i wl[i]·g[u + i].
template <int KB, int CPT>
__device__ inline void oldest_step_dx(const float (&wl)[CPT][KB], const float (&gw)[KB][CPT], float (&d)[CPT])
{
#pragma unroll
    for (int q = 0; q < CPT; q++) {
        d[q] = 0.0f;
#pragma unroll
        for (int i = 0; i < KB; i++) d[q] += wl[q][i] * gw[i][q];
    }
}

// ---- tile kernels (the layouts the stream kernels do not take) ------------------------------------

struct tile_plan {
    int64_t time_blocks;    // blocks along L
    int64_t channel_blocks; // blocks along C
    int passes;             // tiles each block walks along L, one after the other
    bool vec_x, vec_y;      // x (dout) has stride 1 along C and 16-byte aligned channel vectors
    bool pair_y;            // out (dx) takes two neighbouring channels in one store
};

// dst[r][j] = v[b, c0 + j, t_first + r], for r < ROWS and j < kTileC: 0 past the end of C or
// L; before step 0, x's history (X_HISTORY) or 0. Every thread of the block takes part; the
// caller waits (copies_wait_all, then a barrier) before reading. With `vectorised` (stride 1
// along C, aligned), vectors inside the tensor are copied 16 bytes at a time; the vectors
// at the edges (history, past the end of C or L) and the odd layouts go element by element.
template <typename T, int ROWS, bool X_HISTORY>
__device__ inline void stage_tile(const conv_args &a, const t3 &v, bool vectorised, int64_t b, int64_t c0,
                                  int64_t t_first, T (*dst)[kTileC])
{
    constexpr int V = vec_width<T>();
    constexpr int VPR = kTileC / V; // vectors per tile row
    static_assert(kBlock % VPR == 0, "each thread keeps its column of vectors");
    if (vectorised && t_first >= 0 && t_first + ROWS <= a.L && c0 + kTileC <= a.C) { // the whole tile inside
        const int j = threadIdx.x % VPR * V;
        const T *src = (const T *)v.p + (b * v.s0 + (c0 + j) * v.s1 + (t_first + threadIdx.x / VPR) * v.s2);
        const int64_t row_step = (int64_t)(kBlock / VPR) * v.s2;
        for (int r = threadIdx.x / VPR; r < ROWS; r += kBlock / VPR, src += row_step) copy16_async(&dst[r][j], src);
        return;
    }
    for (int idx = threadIdx.x; idx < ROWS * VPR; idx += kBlock) {
        const int r = idx / VPR, j = idx % VPR * V;
        const int64_t t = t_first + r, c = c0 + j;
        if (vectorised && t >= 0 && t < a.L && c + V <= a.C) {
            copy16_async(&dst[r][j], v.p + (b * v.s0 + c * v.s1 + t * v.s2) * (int64_t)sizeof(T));
            continue;
        }
        for (int e = 0; e < V; e++) {
            const bool inside = c + e < a.C && t < a.L;
            float value = !inside ? 0.0f
                          : t >= 0 ? ld<T>(v, b, c + e, t)
                          : X_HISTORY ? history_at<T>(a, b, c + e, t) : 0.0f;
            dst[r][j + e] = tg_from_float<T>(value); // exact: the value came from a T
        }
    }
}

// How a tile kernel's threads cover the 64 channels × 64 steps of a tile: CPT neighbouring
// channels each (two, read and written as one 4- or 8-byte pair, while the registers allow),
// and LANES threads one after the other along time for each channel group, LS steps each.
template <typename T, int KB> struct tile_shape {
    static constexpr int CPT = KB <= 8 ? 2 : 1;
    static constexpr int GROUPS = kTileC / CPT;  // channel groups per tile (threads per time lane)
    static constexpr int LANES = kBlock / GROUPS;
    static constexpr int LS = kTileT / LANES;
};

// v[q] = p[q] as float for q < CPT (p: a shared-memory tile row, CPT-aligned).
template <typename T, int CPT> __device__ inline void read_channels(const T *p, float (&v)[CPT])
{
    if constexpr (CPT == 1) {
        v[0] = tg_to_float(p[0]);
    } else if constexpr (sizeof(T) == 4) {
        const float2 pair = *(const float2 *)p;
        v[0] = pair.x;
        v[1] = pair.y;
    } else {
        unpack2(*(const unsigned *)p, v[0], v[1], T());
    }
}

// p[q·stride] = v[q] for the `count` channels inside C; one paired store when allowed.
template <typename T, int CPT>
__device__ inline void write_channels(T *p, int64_t stride, bool pair_ok, int count, const float (&v)[CPT])
{
    if constexpr (CPT == 2) {
        if (pair_ok && count == 2) {
            if constexpr (sizeof(T) == 4) *(float2 *)p = make_float2(v[0], v[1]);
            else *(unsigned *)p = pack2(v[0], v[1], T());
            return;
        }
    }
#pragma unroll
    for (int q = 0; q < CPT; q++)
        if (q < count) p[q * stride] = tg_from_float<T>(v[q]);
}

// Tiles a tile kernel keeps in shared memory: two where two fit in the 48 KB of static shared
// memory (16-bit data), so the next tile's loads are in flight while this one is computed;
// else one (f32, which is near the copy bandwidth without the overlap).
template <int TILE_BYTES> __host__ __device__ constexpr int tile_buffers() { return 2 * TILE_BYTES <= 48 * 1024 ? 2 : 1; }

// The walk over a block's tiles along L that both tile kernels share: stage(t0, buffer)
// issues the copies of the tile starting at step t0, compute(t0, buffer) works on it once
// every thread's copies have landed.
template <int BUFFERS, typename Stage, typename Compute>
__device__ inline void walk_tiles(const conv_args &a, const tile_plan &plan, Stage stage, Compute compute)
{
    const int64_t first = (int64_t)blockIdx.x * plan.passes, tiles = (a.L + kTileT - 1) / kTileT;
    const int count = (int)(tiles - first < plan.passes ? tiles - first : plan.passes); // ≥ 1: the grid
    if (BUFFERS == 2) {
        stage(first * kTileT, 0);
        copies_commit();
    }
    for (int pass = 0; pass < count; pass++) {
        const int64_t t0 = (first + pass) * kTileT;
        const int buffer = BUFFERS == 2 ? pass & 1 : 0;
        if (BUFFERS == 1) {
            stage(t0, 0);
            copies_wait_all();
        } else if (pass + 1 < count) {
            stage(t0 + kTileT, buffer ^ 1); // into the buffer computed last pass
            copies_commit();
            copies_wait_groups<1>(); // this tile's group has landed, the next one's may not have
        } else {
            copies_wait_groups<0>();
        }
        __syncthreads(); // every thread's copies (and element-wise writes) are in
        compute(t0, buffer);
        __syncthreads(); // the buffer is no longer read before it is staged again
    }
}

template <typename T, int KB>
__global__ void __launch_bounds__(kBlock, 8) tile_fwd(conv_args a, tile_plan plan)
{
    using S = tile_shape<T, KB>;
    constexpr int CPT = S::CPT, LS = S::LS;
    constexpr int XR = kTileT + KB - 1; // x at t0 − (KB−1) … t0 + kTileT − 1
    constexpr int BUFFERS = tile_buffers<XR * kTileC * sizeof(T)>();
    __shared__ alignas(16) T xs[BUFFERS][XR][kTileC];
    const int cg = threadIdx.x % S::GROUPS * CPT, r0 = threadIdx.x / S::GROUPS * LS;
    const int64_t c0 = (int64_t)blockIdx.y * kTileC, b = blockIdx.z, c = c0 + cg;
    const bool active = c < a.C;
    const int count = active ? (a.C - c < CPT ? (int)(a.C - c) : CPT) : 0;
    float wl[CPT][KB], bias[CPT];
#pragma unroll
    for (int q = 0; q < CPT; q++) bias[q] = load_taps<T, KB>(a, c + q < a.C ? c + q : a.C - 1, wl[q]);
    auto stage = [&](int64_t t0, int buf) {
        stage_tile<T, XR, true>(a, a.x, plan.vec_x, b, c0, t0 - (KB - 1), xs[buf]);
    };
    auto compute = [&](int64_t t0, int buf) {
        if (!active) return;
        float win[KB][CPT]; // win[KB−1−i] = x[t − i]
#pragma unroll
        for (int j = 0; j < KB - 1; j++) read_channels<T, CPT>(&xs[buf][r0 + j][cg], win[j + 1]);
        T *out = (T *)a.y.p + (b * a.y.s0 + c * a.y.s1 + (t0 + r0) * a.y.s2);
        const int64_t step = a.y.s2;
        const int64_t left = a.L - (t0 + r0); // steps of this thread inside the row (may be ≤ 0)
        const int steps = left < LS ? (int)(left > 0 ? left : 0) : LS;
#pragma unroll
        for (int s = 0; s < LS; s++) {
            shift_window(win);
            read_channels<T, CPT>(&xs[buf][r0 + s + KB - 1][cg], win[KB - 1]);
            float o[CPT];
            step_outputs(wl, bias, win, a.silu, o);
            if (s < steps) write_channels<T, CPT>(out, a.y.s1, plan.pair_y, count, o);
            out += step; // a pointer walk: no 64-bit multiply per step
        }
    };
    walk_tiles<BUFFERS>(a, plan, stage, compute);
}

// Each thread walks its LS steps and the K−1 after them: g = dout·act'(z) at every step, and
// dx for a step as soon as the K values of g it needs are known, K−1 steps later. (The K−1
// extra steps of g are the next lane's first ones, recomputed: cheaper than a second pass
// through shared memory.)
template <typename T, int KB, bool SILU>
__global__ void __launch_bounds__(kBlock) tile_bwd(conv_args a, tile_plan plan, float *ws)
{
    next_kernel_may_start();
    after_previous_kernels();
    using S = tile_shape<T, KB>;
    constexpr int CPT = S::CPT, LS = S::LS;
    constexpr int XR = kTileT + 2 * (KB - 1); // x at t0 − (KB−1) … t0 + kTileT + KB − 2
    constexpr int DR = kTileT + KB - 1;       // dout at t0 … t0 + kTileT + KB − 2
    constexpr int BUFFERS = tile_buffers<(XR + DR) * kTileC * sizeof(T)>();
    __shared__ alignas(16) T xs[BUFFERS][XR][kTileC];
    __shared__ alignas(16) T ds[BUFFERS][DR][kTileC];
    const int cg = threadIdx.x % S::GROUPS * CPT, lane = threadIdx.x / S::GROUPS, r0 = lane * LS;
    const int64_t c0 = (int64_t)blockIdx.y * kTileC, b = blockIdx.z, c = c0 + cg;
    const bool active = c < a.C;
    const int count = active ? (a.C - c < CPT ? (int)(a.C - c) : CPT) : 0;
    float wl[CPT][KB], bias[CPT]; // scaled by tap_scale, as in row_bwd
#pragma unroll
    for (int q = 0; q < CPT; q++) bias[q] = load_scaled_taps<T, KB>(a, c + q < a.C ? c + q : a.C - 1, wl[q]);
    const int64_t final_from = final_states_from(a);
    float partial[CPT][KB + 1]; // dwl[0 … KB−1], dbias, over tap_scale
#pragma unroll
    for (int q = 0; q < CPT; q++)
#pragma unroll
        for (int i = 0; i <= KB; i++) partial[q][i] = 0.0f;
    auto stage = [&](int64_t t0, int buf) {
        stage_tile<T, XR, true>(a, a.x, plan.vec_x, b, c0, t0 - (KB - 1), xs[buf]);
        stage_tile<T, DR, false>(a, a.y, plan.vec_y, b, c0, t0, ds[buf]);
    };
    auto compute = [&](int64_t t0, int buf) {
        if (!active) return;
        float win[KB][CPT]; // win[KB−1−i] = x[t − i]
        float gw[KB][CPT];  // gw[KB−1−i] = g[t − i]
#pragma unroll
        for (int j = 0; j < KB - 1; j++) {
            read_channels<T, CPT>(&xs[buf][r0 + j][cg], win[j + 1]);
#pragma unroll
            for (int q = 0; q < CPT; q++) gw[j + 1][q] = 0.0f; // never read: dx starts once K values of g are in
        }
        T *dx = (T *)a.dx.p + (b * a.dx.s0 + c * a.dx.s1 + (t0 + r0) * a.dx.s2);
        const int64_t step = a.dx.s2;
        const int64_t left = a.L - (t0 + r0); // steps of this thread inside the row (may be ≤ 0)
        const int steps = left < LS ? (int)(left > 0 ? left : 0) : LS;
        const bool near_final = t0 + r0 + LS > final_from;
#pragma unroll
        for (int s = 0; s < LS + KB - 1; s++) { // step t = t0 + r0 + s
            shift_window(win);
            shift_window(gw);
            read_channels<T, CPT>(&xs[buf][r0 + s + KB - 1][cg], win[KB - 1]);
            float d_out[CPT];
            read_channels<T, CPT>(&ds[buf][r0 + s][cg], d_out); // 0 past the end
            step_gradient<T, SILU>(wl, bias, win, d_out, gw);
            if (s < LS) add_step_partials(gw[KB - 1], win, partial); // own steps (the later ones are the next lane's)
            if (s >= KB - 1) { // dx[u], u = s − (KB − 1)
                const int u = s - (KB - 1);
                float d[CPT];
                oldest_step_dx(wl, gw, d);
                if (near_final) { // only the threads holding the last K−1 steps
                    const int64_t t = t0 + r0 + u;
                    if (t >= final_from && t < a.L)
#pragma unroll
                        for (int q = 0; q < CPT; q++)
                            if (q < count) d[q] += ld<T>(a.dfinal, b, c + q, t - final_from);
                }
                if (u < steps) write_channels<T, CPT>(dx, a.dx.s1, plan.pair_y, count, d);
                dx += step;
            }
        }
    };
    walk_tiles<BUFFERS>(a, plan, stage, compute);
    // The block's partials: the time lanes of each channel summed in order (through xs, which
    // no thread reads any more: walk_tiles ends with a barrier).
    static_assert(sizeof(float) * S::LANES * (KB + 1) * kTileC <= sizeof(xs), "the partials fit in xs");
    float(*sums)[KB + 1][kTileC] = (float(*)[KB + 1][kTileC])(void *)&xs[0][0][0];
#pragma unroll
    for (int q = 0; q < CPT; q++)
#pragma unroll
        for (int i = 0; i <= KB; i++) sums[lane][i][cg + q] = tap_scale<T>() * partial[q][i];
    __syncthreads();
    if (lane == 0 && active) {
        const int64_t parts = a.B * plan.time_blocks, part = b * plan.time_blocks + blockIdx.x;
        for (int q = 0; q < count; q++)
#pragma unroll
            for (int i = 0; i <= KB; i++) {
                float sum = 0.0f;
                for (int l = 0; l < S::LANES; l++) sum += sums[l][i][cg + q];
                partial_to_workspace(ws, parts, part, c + q, KB + 1, i, sum);
            }
    }
}

// ---- stream kernels: channel-last rows walked along time by whole warps -----------------------
//
// In a channel-last tensor the channels of one step lie side by side. A warp takes 32·CPT
// neighbouring channels (CPT per thread) and walks a segment of seg_len steps in order, each
// thread keeping x's last KB values (and, backward, g's) in registers: the KB − 1 steps of
// halo are paid once per segment, where a tile lane (16 steps) paid them every 16. The steps
// reach the warp through a ring of RING chunks of U steps in shared memory, filled with
// 16-byte asynchronous copies RING − 1 chunks ahead: the loads in flight hold no registers,
// and only the warp itself waits on them (no block-wide barrier in the walk).

// Neighbouring channels per thread: two (one 4- or 8-byte word) while the registers allow.
// The 16-bit forward at K ≤ 4 takes four, so that a warp reads 256-byte rows: 420 against
// 440 µs at K = 4 (bf16 16×1536×16384); the backward measured 20 µs slower with four.
template <typename T, int KB> __host__ __device__ constexpr int stream_forward_cpt()
{
    return sizeof(T) == 2 && KB <= 4 ? 4 : KB <= 8 ? 2 : 1;
}
template <typename T, int KB> __host__ __device__ constexpr int stream_backward_cpt() { return KB <= 8 ? 2 : 1; }

template <typename T, int CPT_> struct stream_shape {
    static constexpr int CPT = CPT_;
    static constexpr int WORD = CPT * (int)sizeof(T);  // bytes of one step a thread reads
    static_assert(WORD == 2 || WORD == 4 || WORD == 8, "a channel word (channel_word) is 2, 4 or 8 bytes");
    static constexpr int ROW = 32 * WORD;              // bytes of one step a warp reads (64–256)
    static constexpr int U = 1024 / ROW;               // steps per chunk: 1 KB of each tensor
    static constexpr int SLOT = U * ROW;               // bytes of one chunk
    static constexpr int CHANNELS = 32 * CPT;          // channels per block: one warp's width
    static constexpr int LANES = kBlock / 32;          // warps per block, each its own segment
};

// Chunks in a stream kernel's ring: four, three in flight while one is computed. The backward
// past K = 8 takes six: a thread there takes one channel, so a chunk is 16 steps of 64-byte
// rows, and each warp's copies in flight are fewer bytes; six chunks (five in flight; 48 KB
// per block, 4 blocks per SM) against four measured bf16 channel-last K = 16 fwd+bwd
// 2040 → 1960 µs. Otherwise deeper rings were within 1%, forward and backward
// (bench/NOTES.md, v25 and v26).
template <int KB, bool BACKWARD> __host__ __device__ constexpr int stream_ring() { return BACKWARD && KB > 8 ? 6 : 4; }
// A stream backward block's shared memory: per warp, a ring of 1 KB chunks for x and for dout.
template <int KB> __host__ __device__ constexpr int stream_backward_ring_bytes()
{
    return kBlock / 32 * 2 * stream_ring<KB, true>() * 1024;
}

// Resident blocks per SM the stream kernels are compiled for (at most 65536 / (128·blocks)
// registers per thread): 6 and 4 measured 1–2% faster than 8 and 5 at K ≤ 4, where those
// fit without spills (bench/NOTES.md, v16).
constexpr int kStreamForwardBlocks = 6, kStreamBackwardBlocks = 4;
// The forward takes five where that measured faster on long rows (bench/NOTES.md, v37;
// 16×1536×16384 channel-last): 16-bit K = 5–8, bf16 forward 439.8–440.3 → 434.5–435.0 µs
// (fwd+bwd 1135.8–1137.5 → 1132.0–1132.5); f32 K = 9–16, 876.8–877.4 → 868.8–869.4. At
// 16-bit K = 16 five measured 520.4 → 555.1 µs and eight 613.0, so it kept six (those rows
// take stream_fwd_mma now).
template <typename T, int KB> __host__ __device__ constexpr int stream_forward_blocks()
{
    return (sizeof(T) == 2 && KB == 8) || (sizeof(T) == 4 && KB == 16) ? 5 : kStreamForwardBlocks;
}

// A stream block's warps side by side across C (each with its own channels, at the same
// steps), the rest one after another along L. The forward takes up to two across: its block
// then asks for 2·ROW neighbouring bytes per step; bf16 channel-last K = 8 (16×1536×16384)
// forward measured 440.2 → 436.6 µs and fwd+bwd 1168 → 1148 µs (the backward's unchecked
// chunk also took another schedule then, same instructions), K ≤ 4 and f32 level
// (bench/NOTES.md, after v34). Where C's warp-wide channel groups do not pair up (one group,
// or an odd count) it takes one, as the second warp would have no channels: the bf16 forward
// with two measured 114.0 → 127.2 µs at 256×64×4096 K = 4 and 154.7 → 171.3 at 512×32×4096
// K = 8, with this choice 113.7–114.0 and 153.9–154.5. The backward takes one: across C it
// measured slower at K = 4, in f32 and on short rows, and its block sums need a block's warps
// on the same channels.
template <bool BACKWARD> __host__ __device__ constexpr int stream_most_warps_across() { return BACKWARD ? 1 : 2; }

struct stream_plan {
    int64_t channel_blocks; // blocks across C
    int64_t time_blocks;    // blocks along L, each LANES / across segments
    int64_t seg_len;        // steps per warp, a multiple of U
    bool whole_pieces;      // the output (out, dx) takes 16-byte stores (stream_stores)
    int across;             // warps side by side across C in a block (stream_most_warps_across)
};

// CPT neighbouring values of T as one machine word (the unit a stream thread reads and writes).
template <typename T, int CPT>
using channel_word = std::conditional_t<sizeof(T) * CPT == 8, uint2,
                                        std::conditional_t<sizeof(T) * CPT == 4, unsigned, unsigned short>>;

template <typename T, int CPT> __device__ inline void unpack_word(channel_word<T, CPT> w, float (&v)[CPT])
{
    if constexpr (sizeof(T) == 4 && CPT == 2) {
        v[0] = __uint_as_float(w.x);
        v[1] = __uint_as_float(w.y);
    } else if constexpr (sizeof(T) == 4) {
        v[0] = __uint_as_float(w);
    } else if constexpr (CPT == 4) {
        unpack2(w.x, v[0], v[1], T());
        unpack2(w.y, v[2], v[3], T());
    } else if constexpr (CPT == 2) {
        unpack2(w, v[0], v[1], T());
    } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        v[0] = __uint_as_float((unsigned)w << 16);
    } else {
        v[0] = __half2float(__ushort_as_half(w));
    }
}

template <typename T, int CPT> __device__ inline channel_word<T, CPT> pack_word(const float (&v)[CPT])
{
    if constexpr (sizeof(T) == 4 && CPT == 2) return make_uint2(__float_as_uint(v[0]), __float_as_uint(v[1]));
    else if constexpr (sizeof(T) == 4) return __float_as_uint(v[0]);
    else if constexpr (CPT == 4) return make_uint2(pack2(v[0], v[1], T()), pack2(v[2], v[3], T()));
    else if constexpr (CPT == 2) return pack2(v[0], v[1], T());
    else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat16_as_ushort(__float2bfloat16_rn(v[0]));
    else return __half_as_ushort(__float2half_rn(v[0]));
}

// Where a stream thread sits: channels c … c + CPT − 1 of batch b (c0: its warp's first),
// steps t0 … end − 1 (its warp's segment, cut at L), its block's warps `across` side by side
// across C (plan.across; a constant where the kernel knows it, which the compiler folds). A
// warp with t0 ≥ L or c0 ≥ C has nothing to do; a thread past C (`inside_c` false) walks with
// its warp but writes nothing.
struct stream_place {
    int64_t b, c0, c, t0, end, time_block;
    int warp;
    bool inside_c;
};

template <typename T, int CPT>
__device__ inline stream_place stream_place_of(const conv_args &a, const stream_plan &plan, int across)
{
    using S = stream_shape<T, CPT>;
    const int along = S::LANES / across;
    stream_place p;
    p.warp = threadIdx.x / 32;
    p.time_block = blockIdx.x / plan.channel_blocks;
    p.b = blockIdx.y;
    p.c0 = (blockIdx.x % plan.channel_blocks * across + p.warp % across) * S::CHANNELS;
    p.c = p.c0 + threadIdx.x % 32 * S::CPT;
    p.t0 = (p.time_block * along + p.warp / across) * plan.seg_len;
    p.end = p.t0 + plan.seg_len < a.L ? p.t0 + plan.seg_len : a.L;
    p.inside_c = p.c < a.C;
    return p;
}

// The thread's taps and bias (a thread past C takes the last channel's: it writes nothing).
template <typename T, int KB, int CPT, bool SCALED>
__device__ inline void stream_taps(const conv_args &a, const stream_place &p, float (&wl)[CPT][KB], float (&bias)[CPT])
{
#pragma unroll
    for (int q = 0; q < CPT; q++) {
        const int64_t c = p.c + q < a.C ? p.c + q : a.C - 1;
        bias[q] = SCALED ? load_scaled_taps<T, KB>(a, c, wl[q]) : load_taps<T, KB>(a, c, wl[q]);
    }
}

// The window's first KB − 1 values, x[t0 − KB + 1 … t0 − 1] (the history before step 0):
// win[KB−1−i] = x[t − i] once step t's value is in win[KB−1]. A segment that starts KB − 1
// steps or more into its row reads them as KB − 1 channel words, all asked for before any is
// used (a thread past C reads its warp's first channels': it writes nothing). Element by
// element, with a branch around each load (x or the history), they had been (KB − 1)·CPT
// round trips one after another at every segment's start: bf16 channel-last K = 16 fwd+bwd
// 1906 → 1800 µs, K = 8 1177 → 1169, 8×1536×2048 K = 4 93.5 → 86.4 (bench/NOTES.md, v34).
template <typename T, int KB, int CPT>
__device__ inline void stream_window_start(const conv_args &a, const stream_place &p, float (&win)[KB][CPT])
{
    if (p.t0 >= KB - 1) { // the whole warp
        const int64_t step = a.x.s2 * (int64_t)sizeof(T);
        const char *at = (const char *)row_of<T>(a.x, p.b, p.inside_c ? p.c : p.c0) + (p.t0 - (KB - 1)) * step;
        channel_word<T, CPT> words[KB - 1];
#pragma unroll
        for (int j = 0; j < KB - 1; j++) words[j] = *(const channel_word<T, CPT> *)(at + j * step);
#pragma unroll
        for (int j = 0; j < KB - 1; j++) unpack_word<T, CPT>(words[j], win[j + 1]);
        return;
    }
#pragma unroll
    for (int j = 0; j < KB - 1; j++)
#pragma unroll
        for (int q = 0; q < CPT; q++)
            win[j + 1][q] = p.inside_c ? x_at<T>(a, p.b, p.c + q, p.t0 - (KB - 1) + j) : 0.0f;
}

// A lane's share of the copies that fill a warp's ring with one tensor: U steps of the warp's
// channels per chunk, each step a ROW of 16-byte pieces. Where the lane's pieces come from and
// go to is worked out once per warp, so issuing a chunk costs an address and the copies: the
// same arithmetic redone per chunk (the row's address, the shared window's, a bounds test per
// copy) had been about 180 of the backward's 760 instructions per chunk at bf16 K = 8
// (bench/NOTES.md, v25).
template <typename T, int CPT> struct stream_copies {
    using S = stream_shape<T, CPT>;
    static constexpr int PIECES = S::ROW / 16, ROWS_PER_PASS = 32 / PIECES, COPIES = S::U / ROWS_PER_PASS;
    static_assert(S::U % ROWS_PER_PASS == 0, "every lane copies the same number of pieces per chunk");
    const char *next; // the lane's piece of its first row in the next chunk to issue
    unsigned dst;     // shared address of the lane's piece of its first row in slot 0
    int row;          // the lane's first row of a chunk; it copies rows row + ROWS_PER_PASS·j

    // For the chunks from step t0 on, issued in order. A lane whose piece lies past C copies
    // its row's first piece instead: no lane computing from that place writes anything, and
    // every lane then issues the same copies, without a test per chunk.
    __device__ stream_copies(const conv_args &a, const t3 &v, const stream_place &p, const char *ring, int64_t t0)
    {
        const int lane = threadIdx.x % 32, piece = lane % PIECES;
        row = lane / PIECES;
        const bool inside_c = p.c0 + piece * (16 / (int)sizeof(T)) < a.C;
        next = (const char *)row_of<T>(v, p.b, p.c0) + (inside_c ? piece * 16 : 0) + (t0 + row) * step(v);
        dst = (unsigned)__cvta_generic_to_shared(ring) + row * S::ROW + piece * 16;
    }
    // Bytes from one step of v to the next (from the kernel's parameters: read when needed,
    // not held in registers).
    static __device__ int64_t step(const t3 &v) { return v.s2 * (int64_t)sizeof(T); }

    // Where the copies of the next chunk of v go and come from, into ring slot `slot` (then
    // `next` moves on a chunk). The callers issue them, so that a kernel that copies two
    // tensors issues all its copies back to back.
    __device__ void chunk(const t3 &v, int slot, unsigned (&to)[COPIES], const char *(&from)[COPIES])
    {
#pragma unroll
        for (int j = 0; j < COPIES; j++) {
            to[j] = dst + slot * S::SLOT + ROWS_PER_PASS * j * S::ROW;
            from[j] = next + ROWS_PER_PASS * j * step(v);
        }
        next += S::U * step(v);
    }
    // The copies of the next chunk of v, all of whose U steps lie before L.
    __device__ void issue_whole(const t3 &v, int slot)
    {
        unsigned to[COPIES];
        const char *from[COPIES];
        chunk(v, slot, to, from);
#pragma unroll
        for (int j = 0; j < COPIES; j++) copy16_async_to(to[j], from[j]);
    }
    // The copies of the next chunk of v, steps t … t + U − 1, of those steps before L.
    __device__ void issue_part(const conv_args &a, const t3 &v, int64_t t, int slot)
    {
        unsigned to[COPIES];
        const char *from[COPIES];
        chunk(v, slot, to, from);
#pragma unroll
        for (int j = 0; j < COPIES; j++)
            if (t + row + ROWS_PER_PASS * j < a.L) copy16_async_to(to[j], from[j]);
    }
};

// A warp's outputs of one chunk (U steps of its channels) stored as the 16-byte pieces the
// copies brought its inputs in as: each lane first writes its words over its own words of
// the chunk's ring slot (which only it reads), then, after a warp barrier, stores COPIES
// pieces of the slot, instead of one store per lane and step. Where rows are 128 bytes or
// more (ROW): the bf16 channel-last backward at K = 8 measured 1193 → 1177 µs fwd+bwd, f32
// K = 16 2389 → 2353, K ≤ 4 level; with 64-byte rows (16-bit data at K = 16) 1907 → 1950
// (bench/NOTES.md, v33).
template <typename T, int CPT> struct stream_stores {
    using S = stream_shape<T, CPT>;
    using Copies = stream_copies<T, CPT>;
    static constexpr bool PAYS = S::ROW >= 128;
    int64_t to;    // from the lane's word of a step to its piece of the chunk's first row
    unsigned from; // the lane's piece of its first row, from the start of a slot

    __device__ explicit stream_stores(const t3 &v)
    {
        const int lane = threadIdx.x % 32, piece = lane % Copies::PIECES, row = lane / Copies::PIECES;
        to = piece * 16 - lane * S::WORD + row * Copies::step(v);
        from = row * S::ROW + piece * 16;
    }
    // This lane's word of step r of the chunk, into the slot.
    static __device__ void stage(char *slot, int r, channel_word<T, CPT> w)
    {
        *(channel_word<T, CPT> *)(slot + r * S::ROW + threadIdx.x % 32 * S::WORD) = w;
    }
    // The staged chunk to the U steps from `at` (this lane's word of the first of them).
    __device__ void store(const t3 &v, const char *slot, char *at) const
    {
        __syncwarp(); // every lane's words are in the slot
#pragma unroll
        for (int j = 0; j < Copies::COPIES; j++)
            *(uint4 *)(at + to + Copies::ROWS_PER_PASS * j * Copies::step(v)) =
                *(const uint4 *)(slot + from + Copies::ROWS_PER_PASS * j * S::ROW);
    }
};

// Whether a warp may compute chunks unchecked at all: it lies wholly inside C, and where its
// output is staged (stream_stores), that output takes whole pieces.
template <typename T, int CPT>
__device__ inline bool stream_unchecked_allowed(const conv_args &a, const stream_place &p, const stream_plan &plan)
{
    return p.c0 + stream_shape<T, CPT>::CHANNELS <= a.C && (!stream_stores<T, CPT>::PAYS || plan.whole_pieces);
}

// This thread's word of step t + r, from a ring slot (0 past L when CHECKED).
template <typename T, int CPT, bool CHECKED>
__device__ inline channel_word<T, CPT> stream_word(const conv_args &a, const char *slot, int64_t t, int r)
{
    using S = stream_shape<T, CPT>;
    using word = channel_word<T, S::CPT>;
    if (CHECKED && t + r >= a.L) return word{};
    return *(const word *)(slot + r * S::ROW + threadIdx.x % 32 * S::WORD);
}

// A warp's walk over the chunks of U steps from t0 to `last` (chunk k: steps t0 + k·U on):
// chunk k goes to ring slot k mod RING, its copies (issue(k, slot, whole); `whole`: all its
// steps lie before L) issued RING − 1 chunks before it is computed (compute(unchecked, k,
// slot), called for k = 0, 1, … in order), into the slot the chunk before it was computed
// from. `unchecked` is true for the chunks wholly inside [unchecked_from, unchecked_end),
// whose steps need no test. start() runs once the first chunks' copies are issued, so that
// the loads it makes (the window's first values) are in flight alongside them. Which chunks
// are whole and which unchecked is worked out once, as 32-bit chunk counts (a segment is a few
// thousand steps at most), so that a chunk's bookkeeping is three compares.
template <int U, int RING, typename Issue, typename Start, typename Compute>
__device__ inline void stream_walk(int64_t t0, int64_t last, int64_t L, int64_t unchecked_from, int64_t unchecked_end,
                                   Issue issue, Start start, Compute compute)
{
    const int chunks = (int)((last - t0 + U - 1) / U);
    const int whole = L - t0 >= U ? (int)((L - t0) / U < chunks ? (L - t0) / U : chunks) : 0;
    const int unchecked_first = unchecked_from > t0 ? (int)((unchecked_from - t0 + U - 1) / U) : 0;
    const int unchecked_end_chunk = unchecked_end > t0 ? (int)((unchecked_end - t0) / U) : 0;
#pragma unroll
    for (int k = 0; k < RING - 1; k++) {
        if (k < chunks) issue(k, k, k < whole);
        copies_commit(); // one group per chunk, empty or not, so that the count below holds
    }
    start();
    for (int k = 0; k < chunks; k++) {
        copies_wait_groups<RING - 2>(); // chunk k's group has landed (the RING − 2 after it may not have)
        // One warp barrier for two things: every lane's copies of chunk k have landed, and
        // every lane is done with chunk k − 1, whose slot the copies issued next fill.
        __syncwarp();
        const int ahead = k + RING - 1;
        if (ahead < chunks) issue(ahead, ahead % RING, ahead < whole);
        copies_commit();
        const int slot = k % RING;
        if (k >= unchecked_first && k < unchecked_end_chunk) compute(std::true_type(), k, slot);
        else compute(std::false_type(), k, slot);
    }
}

template <typename T, int KB>
__global__ void __launch_bounds__(kBlock, stream_forward_blocks<T, KB>()) stream_fwd(conv_args a, stream_plan plan)
{
    using S = stream_shape<T, stream_forward_cpt<T, KB>()>;
    constexpr int CPT = S::CPT, U = S::U;
    constexpr int RING = stream_ring<KB, false>();
    __shared__ alignas(16) char ring[S::LANES][RING][U * S::ROW];
    const stream_place p = stream_place_of<T, CPT>(a, plan, plan.across);
    if (p.t0 >= a.L || p.c0 >= a.C) return; // the whole warp
    float wl[CPT][KB], bias[CPT];
    stream_taps<T, KB, CPT, false>(a, p, wl, bias);
    float win[KB][CPT];
    char(*slots)[U * S::ROW] = ring[p.warp];
    const int64_t y_step = a.y.s2 * (int64_t)sizeof(T);
    char *y_at = (char *)row_of<T>(a.y, p.b, p.inside_c ? p.c : p.c0) + p.t0 * y_step; // the chunk's first step
    stream_copies<T, CPT> x_copies(a, a.x, p, slots[0], p.t0);
    const stream_stores<T, CPT> y_stores(a.y);
    constexpr bool STAGED = stream_stores<T, CPT>::PAYS;
    auto issue = [&](int k, int slot, bool whole) {
        if (whole) x_copies.issue_whole(a.x, slot);
        else x_copies.issue_part(a, a.x, p.t0 + (int64_t)k * U, slot);
    };
    auto compute = [&](auto unchecked, int k, int slot) {
        constexpr bool CHECKED = !decltype(unchecked)::value;
        const int64_t t = p.t0 + (int64_t)k * U;
#pragma unroll
        for (int r = 0; r < U; r++) {
            shift_window(win);
            unpack_word<T, CPT>(stream_word<T, CPT, CHECKED>(a, slots[slot], t, r), win[KB - 1]);
            float o[CPT];
            step_outputs(wl, bias, win, a.silu, o);
            if (!CHECKED && STAGED) y_stores.stage(slots[slot], r, pack_word<T, CPT>(o));
            else if (!CHECKED || (p.inside_c && t + r < p.end))
                *(channel_word<T, CPT> *)(y_at + r * y_step) = pack_word<T, CPT>(o);
        }
        if (!CHECKED && STAGED) y_stores.store(a.y, slots[slot], y_at);
        y_at += U * y_step;
    };
    // Unchecked: chunks of the segment's own steps.
    const bool unchecked_allowed = stream_unchecked_allowed<T, CPT>(a, p, plan);
    auto start = [&] { stream_window_start<T, KB, CPT>(a, p, win); };
    stream_walk<U, RING>(p.t0, p.end, a.L, p.t0, unchecked_allowed ? p.end : p.t0, issue, start, compute);
}

// ---- The 16-bit channel-last forward on tensor cores, K = 9 … 16 -----------------------------
//
// At K = 16 the stream forward does 16 float multiply-adds per element on one channel per
// thread, and is bound by instruction issue. Here a warp takes 32 channels (64-byte rows, as
// the stream kernels read them) and walks its segment in tiles of 128 steps, and each channel's
// tile is one product on the tensor cores, 16 blocks of 8 steps by 8 outputs:
//     Z (16 blocks × 8 steps) = X (16 blocks × 24 window steps) · T (24 × 8) + bias,
// where block b's window is x[8b − 16 … 8b + 7] and T[j][i] = w′[j − i − 1], w′ the taps
// padded to 16 on the left (w′[k] multiplies x[t − 15 + k]; 0 outside 0 … 15). An m16n8k16
// takes window steps 0–15 (the 16 steps before the block) and an m16n8k8 steps 16–23 (the
// block's own). The taps' operand T depends on the lane, not on the step: each lane keeps it
// for its 32 channels in 96 registers for the whole segment.
//
// A lane (g, q) of the product's operand X needs, of one channel, the pairs of steps
// (8s + 2q, 8s + 2q + 1) for the blocks s = g − 2, g − 1, g and g + 6, g + 7, g + 8 of the
// tile: one channel's steps from rows of channels. It reads the two rows 8s + 2q and
// 8s + 2q + 1 as 16-byte pieces (8 channels each) and one byte permute per channel pairs the
// two steps. The rows are staged in a ring of three slots per warp (one computed, two in
// flight) with the 16-byte pieces of a row swizzled by the row's bits 1–2, and the lanes
// of odd g read the odd row first, so that every 16-byte read of a quarter-warp meets eight
// distinct bank groups. Each slot holds 16 rows before its tile (the next slot's are copied
// from the tile's last 16 rows as soon as they land), so every window is in one slot.
//
// The product's result Z holds, at lane (g, q), steps 8g + 2q, 8g + 2q + 1 of blocks g and
// g + 8: for the 8 channels of a piece, the whole piece of those four rows. After SiLU the
// lane writes them back over x's rows (every lane has read its windows of that piece by then).
//
// Lane 0 moves a tile in and out by the copy engine: x's rows as one tensor copy (a box of 32
// channels × 128 steps, swizzled as the ring is, zeros past L and C) counted on the slot's
// barrier, y's rows as another from the slot to y (a segment's steps are whole tiles or end at
// L, where the box stops). Before it copies a tile into a slot, it waits until the copy out
// of that slot, issued at the end of the tile before, has read it. Where a tensor map cannot
// be made, and before Hopper, every lane copies 16-byte pieces in (cp.async) and out instead.
// bf16 16×1536×16384 K = 16 forward (bench/NOTES.md, v46): 443.2–443.3 µs with the lanes'
// copies, 429.6–429.7 with x by the copy engine, 424.4–425.7 with y too (8×1536×2048 39.3–39.6
// → 37.0–37.5); with each tile's copy in issued after the maths of the tile before, where that
// wait is a tile old, 427.0–427.8.
//
// A block of 4 warps holds 109 KB (three 9 KB slots per warp, the bias, the barriers and 512
// bytes to align the ring for the copies' swizzle), so 2 blocks fit on an SM: 8 warps of
// 212–223 registers (the taps' 96 among them). Rows past L are staged as
// zeros: a window reaches up to 7 steps past its output, with zero taps, and a zero tap times a
// NaN is a NaN (so, as in the channel-first product, an inf or NaN in x can reach the outputs of
// the up to 7 steps before it in its block of 8). Per tile a warp issues about 1000 instructions
// (12 16-byte reads and 48 byte permutes per piece, 2 products and the SiLU per channel) for
// 4096 outputs, against 16 multiply-adds per output and lane in the stream forward. Predicted
// near the copy rate; measured 86% of it on the long rows with the lanes' copies (bench/NOTES.md,
// v43), where a plain copy that reads 128 bytes per block and step, as this walk does, measured
// 84.6% (segments of 256 steps) to 89.4% (64); 89% with the tensor copies (v46).
struct mma_stream_shape {
    static constexpr int CHANNELS = 32;                 // a warp's channels (64-byte rows)
    static constexpr int PIECES = 4;                    // 16-byte pieces of a row, 8 channels each
    static constexpr int ROW = 64;                      // bytes of a staged row
    static constexpr int TILE = 128;                    // steps per tile: 16 blocks of 8
    static constexpr int HALO = 16;                     // rows before a tile that its windows reach
    static constexpr int SLOT = (HALO + TILE) * ROW;    // bytes of one slot of the ring
    static constexpr int RING = 3;                      // slots per warp
    static constexpr int WARP_BYTES = RING * SLOT;
    static constexpr int BARRIERS = RING * (int)sizeof(uint64_t); // per warp: a tile's arrival per slot
    static constexpr int ALIGNMENT = 512; // the tensor copies' 64-byte swizzle follows address bits 4–8
    static constexpr int BLOCK_BYTES =
        kBlock / 32 * (WARP_BYTES + CHANNELS * (int)sizeof(float) + BARRIERS) + ALIGNMENT; // + bias, barriers
};

extern __shared__ uint4 mma_stream_memory[];

// Byte offset of row r, piece `piece` in a slot: the piece swizzled by the row's bits 1–2.
__device__ inline unsigned mma_stream_offset(int r, int piece) { return r * 64 + ((piece ^ ((r >> 1) & 3)) << 4); }

// d += a·b with T's 16-bit operands: m16n8k16 (a: 4 registers, b: 2) and m16n8k8 (a: 2, b: 1).
template <typename T> __device__ inline void mma16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1)
{
    if constexpr (std::is_same<T, __half>::value)
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <typename T> __device__ inline void mma8(float (&d)[4], unsigned a0, unsigned a1, unsigned b0)
{
    if constexpr (std::is_same<T, __half>::value)
        asm("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a0), "r"(a1), "r"(b0));
    else
        asm("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a0), "r"(a1), "r"(b0));
}

// SiLU from one tanh: z·σ(z) = h + h·tanh(h), h = z/2 (16-bit outputs only: the tanh is good
// to about 2⁻¹¹, scaled_gradient).
__device__ inline float silu_by_tanh(float z)
{
    const float h = 0.5f * z;
    float th;
    asm("tanh.approx.f32 %0, %1;" : "=f"(th) : "f"(h));
    return fmaf(h, th, h);
}

// Word m of a 16-byte vector (m a constant once unrolled).
__device__ inline unsigned &word_of(uint4 &v, int m) { return m == 0 ? v.x : m == 1 ? v.y : m == 2 ? v.z : v.w; }

constexpr int kTapPairs = 20, kTapPairStride = 2 * kTapPairs + 1;
// The taps' operands of the products on tensor cores come from a table of tap pairs in shared
// memory: a channel's 40 padded taps P as 32-bit pairs (P[2i], P[2i + 1]) in words 0–19 and
// (P[2i + 1], P[2i + 2]) in words 20–39, 41 words per channel (odd: the lanes' reads meet
// distinct banks). A lane then reads its three pairs (P[m + 8r], P[m + 8r + 1]), r = 0, 1, 2.
__device__ inline void write_tap_pairs(unsigned *table, int channel, const unsigned short (&padded)[2 * kTapPairs])
{
    unsigned *mine = table + channel * kTapPairStride;
#pragma unroll
    for (int i = 0; i < kTapPairs; i++) {
        mine[i] = padded[2 * i] | (unsigned)padded[2 * i + 1] << 16;
        mine[kTapPairs + i] = padded[2 * i + 1] | (unsigned)(2 * i + 2 < 2 * kTapPairs ? padded[2 * i + 2] : 0) << 16;
    }
}
__device__ inline const unsigned *tap_pairs_of(const unsigned *table, int m, int first_channel)
{
    return table + first_channel * kTapPairStride + (m % 2 == 0 ? m / 2 : kTapPairs + (m - 1) / 2);
}
template <int N>
__device__ inline void read_tap_pairs(const unsigned *table, int m, int first_channel, unsigned (&taps)[N][3])
{
    const unsigned *mine = tap_pairs_of(table, m, first_channel);
#pragma unroll
    for (int j = 0; j < N; j++)
#pragma unroll
        for (int r = 0; r < 3; r++) taps[j][r] = mine[j * kTapPairStride + 4 * r];
}

// The 16 steps before step 0 of channel c (its history, or zeros) into rows first_row …
// first_row + 15 of a ring laid out by mma_stream_offset, `lane` being the channel's place in
// the row (one lane per channel).
template <typename T>
__device__ inline void stage_history_rows(const conv_args &a, int64_t b, int64_t c, int lane, char *ring, int first_row)
{
    for (int r = 0; r < 16; r++) {
        const float v = c < a.C ? history_at<T>(a, b, c, r - 16) : 0.0f;
        *(T *)(ring + mma_stream_offset(first_row + r, lane / 8) + lane % 8 * 2) = tg_from_float<T>(v);
    }
}

// The rows lane (g, q) reads for a block's step pair, 8s + 2q and 8s + 2q + 1 (as offsets from
// the block's first row): the odd one first for odd g, so that a quarter-warp's 16-byte reads
// meet eight bank groups, and the byte permutes that pair each channel's two steps (the lower
// step in the lower half) from the words of the first and second row.
struct step_pair_rows {
    bool odd_first;
    unsigned pair_low, pair_high; // channels 2m and 2m + 1 of a word
    int first, second;
};
__device__ inline step_pair_rows step_pair_rows_of(int g, int q)
{
    step_pair_rows rows;
    rows.odd_first = g & 1;
    rows.pair_low = rows.odd_first ? 0x1054 : 0x5410;
    rows.pair_high = rows.odd_first ? 0x3276 : 0x7632;
    rows.first = 8 * g + 2 * q + (rows.odd_first ? 1 : 0);
    rows.second = rows.first + (rows.odd_first ? -1 : 1);
    return rows;
}

template <typename T, bool SILU>
__global__ void __launch_bounds__(kBlock, 2)
    stream_fwd_mma(conv_args a, stream_plan plan, const __grid_constant__ CUtensorMap x_map,
                   const __grid_constant__ CUtensorMap y_map, bool by_tensors)
{
    using M = mma_stream_shape;
    const stream_place p = stream_place_of<T, 1>(a, plan, plan.across);
    if (p.t0 >= a.L || p.c0 >= a.C) return; // the whole warp
    char *memory = (char *)mma_stream_memory;
    if (TG_BULK_COPY) memory += (M::ALIGNMENT - (shared_address(memory) & (M::ALIGNMENT - 1))) & (M::ALIGNMENT - 1);
    char *ring = memory + p.warp * M::WARP_BYTES;
    float *bias = (float *)(memory + kBlock / 32 * M::WARP_BYTES) + p.warp * M::CHANNELS;
    uint64_t *arrivals = (uint64_t *)(memory + kBlock / 32 * (M::WARP_BYTES + M::CHANNELS * (int)sizeof(float))) +
                         p.warp * M::RING; // [slot]: tile k's tensor copy, phase k / RING (with by_tensors)
    const int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    const bool by_tensor = TG_BULK_COPY && by_tensors;
    if (by_tensor && lane == 0) arrival_barriers_init(arrivals, M::RING);

    // The taps' operands of each channel, for this lane: T[j][i] at j = 2q (+1), 2q + 8 (+1)
    // and 2q + 16 (+1), i = g, that is the pairs (w′[m + 8r], w′[m + 8r + 1]), m = 2q − g − 1,
    // r = 0, 1, 2 (a channel past C takes the last one's: it writes nothing). Lane j first
    // writes channel j's pairs into the third slot of the ring (free until tile 2's copies):
    // from even and from odd starts, 20 words each, w′ padded with 8 zeros before and 16 after.
    unsigned taps[M::CHANNELS][3];
    {
        unsigned *pairs = (unsigned *)(ring + 2 * M::SLOT);
        {
            const int64_t c = p.c0 + lane < a.C ? p.c0 + lane : a.C - 1;
            unsigned short padded[2 * kTapPairs]; // w′[k − 8]
#pragma unroll
            for (int k = 0; k < 2 * kTapPairs; k++) padded[k] = k >= 8 && k < 24 ? (unsigned short)tap_bits(a, c, 23 - k) : 0;
            write_tap_pairs(pairs, lane, padded);
        }
        __syncwarp();
        read_tap_pairs(pairs, 2 * q - g - 1 + 8, 0, taps);
        __syncwarp(); // every lane has its operands before tile 2's copies land over the pairs
    }
    {
        const int64_t c = p.c0 + lane;
        bias[lane] = a.bias && c < a.C ? tg_to_float(((const T *)a.bias)[c * a.bs0]) : 0.0f;
    }

    // This lane's copies: piece lane % 4 of rows lane / 4 + 8j.
    const int piece = lane % 4, prow = lane / 4;
    const bool piece_inside = p.c0 + 8 * piece < a.C;
    const unsigned swizzled = (unsigned)((piece ^ ((prow >> 1) & 3)) << 4);
    const unsigned ring_at = shared_address(ring);
    const int64_t x_step = a.x.s2 * (int64_t)sizeof(T), y_step = a.y.s2 * (int64_t)sizeof(T);
    const char *x_row = (const char *)row_of<T>(a.x, p.b, p.c0) + piece * 16;
    char *y_row = (char *)row_of<T>(a.y, p.b, p.c0) + piece * 16;
    const int tiles = (int)((p.end - p.t0 + M::TILE - 1) / M::TILE);
    auto issue = [&](int k) {
        if (by_tensor) { // the tile by the copy engine from lane 0; rows past L and channels past C as zeros
            if (lane == 0) {
                uint64_t *arrival = &arrivals[k % M::RING];
                tensor_stores_wait();  // tile k − 3's outputs (issued last) have left the slot
                async_copies_follow(); // after the warp's reads and writes of the slot (a __syncwarp before)
                tensor_box_to_shared(ring + (k % M::RING) * M::SLOT + M::HALO * M::ROW, &x_map, (int)p.c0,
                                     (int)(p.t0 + (int64_t)M::TILE * k), (int)p.b, M::TILE * M::ROW, arrival);
                arrival_arrive(arrival);
            }
            return;
        }
        const int64_t t = p.t0 + (int64_t)M::TILE * k + prow;
        const unsigned at = ring_at + (k % M::RING) * M::SLOT + (M::HALO + prow) * M::ROW + swizzled;
#pragma unroll
        for (int j = 0; j < M::TILE / 8; j++) {
            const bool inside = piece_inside && t + 8 * j < a.L;
            copy16_async_or_zero(at + j * 8 * M::ROW, inside ? x_row + (t + 8 * j) * x_step : x_row, inside ? 16 : 0);
        }
    };
    // The first tile's halo: x before t0, or the history (zero without one) before step 0.
    if (p.t0 >= M::HALO) {
#pragma unroll
        for (int j = 0; j < 2; j++)
            copy16_async_or_zero(ring_at + (prow + 8 * j) * M::ROW + swizzled,
                                 x_row + (p.t0 - M::HALO + prow + 8 * j) * x_step, piece_inside ? 16 : 0);
    } else { // t0 = 0: lane = channel
        stage_history_rows<T>(a, p.b, p.c0 + lane, lane, ring, 0);
    }
    issue(0);
    copies_commit();
    if (tiles > 1) issue(1);
    copies_commit();

    // The rows this lane reads and writes: 8s + 2q + e of a tile, e = 0 first for even g and
    // e = 1 first for odd g (odd_first), and the byte permutes that pair them per channel.
    const step_pair_rows pair_rows = step_pair_rows_of(g, q);
    const bool odd_first = pair_rows.odd_first;
    const unsigned pair_low = pair_rows.pair_low, pair_high = pair_rows.pair_high;
    const int first_row = M::HALO + pair_rows.first, second_row = first_row + (odd_first ? -1 : 1);
    for (int k = 0; k < tiles; k++) {
        if (by_tensor) {
            if (k == 0) copies_wait_all(); // the first tile's halo
            arrival_wait(&arrivals[k % M::RING], k / M::RING % 2);
        } else {
            copies_wait_groups<1>(); // tile k's copies have landed
        }
        __syncwarp(); // everyone's, and everyone is done with tile k − 1's slot
        if (k + 2 < tiles) issue(k + 2);
        copies_commit();
        char *slot = ring + (k % M::RING) * M::SLOT;
        if (k + 1 < tiles) { // the next slot's halo: this tile's last 16 rows, before they are overwritten
            char *next = ring + ((k + 1) % M::RING) * M::SLOT;
#pragma unroll
            for (int j = 0; j < 2; j++)
                *(uint4 *)(next + 16 * lane + 512 * j) = *(const uint4 *)(slot + M::TILE * M::ROW + 16 * lane + 512 * j);
        }
#pragma unroll // (the taps' registers are indexed by channel: unrolled, they stay registers)
        for (int pc = 0; pc < M::PIECES; pc++) {
            char *first = slot + first_row * M::ROW + ((pc ^ q) << 4);
            char *second = slot + second_row * M::ROW + ((pc ^ q) << 4);
            // Register i of the operand holds block s = g + i / 2 − 2 + 8·(i mod 2): −2, 6, −1, 7, 0, 8.
            uint4 u0[6], u1[6];
#pragma unroll
            for (int i = 0; i < 6; i++) {
                const int s = i / 2 - 2 + 8 * (i % 2);
                u0[i] = *(const uint4 *)(first + 8 * M::ROW * s);
                u1[i] = *(const uint4 *)(second + 8 * M::ROW * s);
            }
            __syncwarp(); // every lane has its windows of this piece before any writes over them
            uint4 rows[4]; // out: rows first, second of block g, then of block g + 8
#pragma unroll
            for (int m = 0; m < 4; m++) { // channels 2m, 2m + 1 of the piece
                float v[2][4];
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int ch = 8 * pc + 2 * m + h;
                    const unsigned sel = h ? pair_high : pair_low;
                    unsigned w[6];
#pragma unroll
                    for (int i = 0; i < 6; i++) w[i] = __byte_perm(word_of(u0[i], m), word_of(u1[i], m), sel);
                    const float b = bias[ch];
                    float d[4] = {b, b, b, b};
                    const unsigned x16[4] = {w[0], w[1], w[2], w[3]};
                    mma16<T>(d, x16, taps[ch][0], taps[ch][1]);
                    mma8<T>(d, w[4], w[5], taps[ch][2]);
#pragma unroll
                    for (int i = 0; i < 4; i++) v[h][i] = SILU ? silu_by_tanh(d[i]) : d[i];
                }
                // d0, d1: steps 8g + 2q, + 1; d2, d3: the same of block g + 8.
                const unsigned e0 = pack2(v[0][0], v[1][0], T()), e1 = pack2(v[0][1], v[1][1], T());
                const unsigned f0 = pack2(v[0][2], v[1][2], T()), f1 = pack2(v[0][3], v[1][3], T());
                word_of(rows[0], m) = odd_first ? e1 : e0;
                word_of(rows[1], m) = odd_first ? e0 : e1;
                word_of(rows[2], m) = odd_first ? f1 : f0;
                word_of(rows[3], m) = odd_first ? f0 : f1;
            }
            *(uint4 *)first = rows[0];
            *(uint4 *)second = rows[1];
            *(uint4 *)(first + 64 * M::ROW) = rows[2];
            *(uint4 *)(second + 64 * M::ROW) = rows[3];
        }
        __syncwarp(); // the tile's outputs are all in the slot
        if (by_tensor) { // one tensor copy from lane 0 (a segment's steps are whole tiles, or end at L)
            if (lane == 0)
                tensor_box_from_shared(&y_map, (int)p.c0, (int)(p.t0 + (int64_t)M::TILE * k), (int)p.b,
                                       slot + M::HALO * M::ROW);
            continue;
        }
        const int64_t t = p.t0 + (int64_t)M::TILE * k + prow;
        const char *from = slot + (M::HALO + prow) * M::ROW + swizzled;
        if (plan.whole_pieces) {
#pragma unroll
            for (int j = 0; j < M::TILE / 8; j++)
                if (piece_inside && t + 8 * j < p.end)
                    *(uint4 *)(y_row + (t + 8 * j) * y_step) = *(const uint4 *)(from + j * 8 * M::ROW);
        } else { // output steps not 16-byte aligned: value by value
            for (int j = 0; j < M::TILE / 8; j++)
                if (piece_inside && t + 8 * j < p.end)
                    for (int e = 0; e < 8 && p.c0 + 8 * piece + e < a.C; e++)
                        ((T *)(y_row + (t + 8 * j) * y_step))[e] = ((const T *)(from + j * 8 * M::ROW))[e];
        }
    }
    if (by_tensor && lane == 0) tensor_stores_wait<true>(); // y's tensor copies are done with the ring
}

// Each warp walks steps t0 … end + KB − 2: g = dout·act'(z) at every step, and at step t the
// dx of step u = t − (KB − 1), whose KB values of g are then all known. The steps past `end`
// are the next segment's first ones, recomputed for their g (dw and dbias take only the
// segment's own steps).
template <typename T, int KB, bool SILU>
__global__ void __launch_bounds__(kBlock, kStreamBackwardBlocks) stream_bwd(conv_args a, stream_plan plan, float *ws)
{
    next_kernel_may_start();
    after_previous_kernels();
    using S = stream_shape<T, stream_backward_cpt<T, KB>()>;
    constexpr int CPT = S::CPT, U = S::U, RING = stream_ring<KB, true>();
    __shared__ alignas(16) char ring[S::LANES][2][RING][U * S::ROW]; // per warp: x, dout
    static_assert(sizeof(ring) == stream_backward_ring_bytes<KB>(), "the ring the carve-out is sized for");
    constexpr int ACROSS = stream_most_warps_across<true>(), ALONG = S::LANES / ACROSS;
    const stream_place p = stream_place_of<T, CPT>(a, plan, ACROSS);
    float partial[CPT][KB + 1]; // dwl[0 … KB−1], dbias, over tap_scale
#pragma unroll
    for (int q = 0; q < CPT; q++)
#pragma unroll
        for (int i = 0; i <= KB; i++) partial[q][i] = 0.0f;
    if (p.t0 < a.L && p.c0 < a.C) { // the whole warp
        float wl[CPT][KB], bias[CPT]; // scaled by tap_scale, as in row_bwd
        stream_taps<T, KB, CPT, true>(a, p, wl, bias);
        float win[KB][CPT], gw[KB][CPT]; // win[KB−1−i] = x[t − i], gw[KB−1−i] = g[t − i]
#pragma unroll
        for (int j = 0; j < KB; j++)
#pragma unroll
            for (int q = 0; q < CPT; q++) gw[j][q] = 0.0f; // before t0: never part of a written dx
        const int64_t final_from = final_states_from(a);
        char(*x_slots)[U * S::ROW] = ring[p.warp][0];
        char(*d_slots)[U * S::ROW] = ring[p.warp][1];
        const int64_t dx_step = a.dx.s2 * (int64_t)sizeof(T);
        // dx at u = t − (KB − 1) for the chunk's first step t
        char *dx_at = (char *)row_of<T>(a.dx, p.b, p.inside_c ? p.c : p.c0) + (p.t0 - (KB - 1)) * dx_step;
        stream_copies<T, CPT> x_copies(a, a.x, p, x_slots[0], p.t0), d_copies(a, a.y, p, d_slots[0], p.t0);
        const stream_stores<T, CPT> dx_stores(a.dx);
        constexpr bool STAGED = stream_stores<T, CPT>::PAYS;
        auto issue = [&](int k, int slot, bool whole) {
            if (whole) { // every chunk but a segment's last, near L
                constexpr int N = stream_copies<T, CPT>::COPIES;
                unsigned x_to[N], d_to[N];
                const char *x_from[N], *d_from[N];
                x_copies.chunk(a.x, slot, x_to, x_from);
                d_copies.chunk(a.y, slot, d_to, d_from);
#pragma unroll
                for (int j = 0; j < N; j++) {
                    copy16_async_to(x_to[j], x_from[j]);
                    copy16_async_to(d_to[j], d_from[j]);
                }
            } else {
                const int64_t t = p.t0 + (int64_t)k * U;
                x_copies.issue_part(a, a.x, t, slot);
                d_copies.issue_part(a, a.y, t, slot);
            }
        };
        auto compute = [&](auto unchecked, int k, int slot) {
            constexpr bool CHECKED = !decltype(unchecked)::value;
            const int64_t t = p.t0 + (int64_t)k * U;
#pragma unroll
            for (int r = 0; r < U; r++) {
                const int64_t u = t + r - (KB - 1);
                shift_window(win);
                shift_window(gw);
                unpack_word<T, CPT>(stream_word<T, CPT, CHECKED>(a, x_slots[slot], t, r), win[KB - 1]);
                float d_out[CPT];
                unpack_word<T, CPT>(stream_word<T, CPT, CHECKED>(a, d_slots[slot], t, r), d_out);
                // The maths of step_gradient, add_step_partials (with the segment's own steps
                // selected, not branched on) and oldest_step_dx, written out: through those
                // helpers the 16-bit K = 16 build spilled 16–24 bytes and its bf16 backward
                // measured 9% slower (bench/NOTES.md, v16).
                const bool own = !CHECKED || t + r < p.end;
#pragma unroll
                for (int q = 0; q < CPT; q++) {
                    float zs = bias[q];
#pragma unroll
                    for (int i = 0; i < KB; i++) zs += wl[q][i] * win[KB - 1 - i][q];
                    const float g = scaled_gradient<T, SILU>(zs, d_out[q]); // g / tap_scale; 0 past L
                    gw[KB - 1][q] = g;
                    const float g_own = own ? g : 0.0f;
                    partial[q][KB] += g_own;
#pragma unroll
                    for (int i = 0; i < KB; i++) partial[q][i] += g_own * win[KB - 1 - i][q];
                }
                float d[CPT];
#pragma unroll
                for (int q = 0; q < CPT; q++) {
                    d[q] = 0.0f;
#pragma unroll
                    for (int i = 0; i < KB; i++) d[q] += wl[q][i] * gw[i][q];
                }
                if (CHECKED) {
                    if (!p.inside_c || u < p.t0 || u >= p.end) continue;
                    if (u >= final_from)
#pragma unroll
                        for (int q = 0; q < CPT; q++) d[q] += ld<T>(a.dfinal, p.b, p.c + q, u - final_from);
                }
                if (!CHECKED && STAGED) dx_stores.stage(x_slots[slot], r, pack_word<T, CPT>(d)); // over x[t + r], read above
                else *(channel_word<T, CPT> *)(dx_at + r * dx_step) = pack_word<T, CPT>(d);
            }
            if (!CHECKED && STAGED) dx_stores.store(a.dx, x_slots[slot], dx_at);
            dx_at += U * dx_step;
        };
        // Unchecked: chunks whose steps are all the segment's own, each with a whole dx (from
        // t0 + KB − 1 on) away from the final states.
        const bool unchecked_allowed = stream_unchecked_allowed<T, CPT>(a, p, plan);
        const int64_t unchecked_end = !unchecked_allowed ? p.t0 : p.end < final_from + KB - 1 ? p.end : final_from + KB - 1;
        auto start = [&] { stream_window_start<T, KB, CPT>(a, p, win); };
        stream_walk<U, RING>(p.t0, p.end + KB - 1, a.L, p.t0 + KB - 1, unchecked_end, issue, start, compute);
    }
    // The block's partials: its warps' segments summed in order, per channel (through the
    // ring, which no warp reads any more after the barrier); warp w sums the segments of
    // the channels of warps w, w + ACROSS, ….
    __syncthreads();
    static_assert(sizeof(float) * S::LANES * (KB + 1) * S::CHANNELS <= sizeof(ring), "the partials fit in the ring");
    float(*sums)[KB + 1][S::CHANNELS] = (float(*)[KB + 1][S::CHANNELS])(void *)&ring[0][0][0][0];
    const int cg = threadIdx.x % 32 * CPT;
#pragma unroll
    for (int q = 0; q < CPT; q++)
#pragma unroll
        for (int i = 0; i <= KB; i++) sums[p.warp][i][cg + q] = tap_scale<T>() * partial[q][i];
    __syncthreads();
    if (p.warp < ACROSS && p.inside_c) { // C is a multiple of CPT on this path
        const int64_t parts = a.B * plan.time_blocks, part = p.b * plan.time_blocks + p.time_block;
#pragma unroll
        for (int q = 0; q < CPT; q++)
#pragma unroll
            for (int i = 0; i <= KB; i++) {
                float sum = 0.0f;
                for (int l = 0; l < ALONG; l++) sum += sums[l * ACROSS + p.warp][i][cg + q];
                partial_to_workspace(ws, parts, part, p.c + q, KB + 1, i, sum);
            }
    }
}

// ---- The bf16 channel-last backward on tensor cores, K = 9 … 16 ----------------------------
//
// stream_bwd does 3·16 float multiply-adds per element at K = 16 on one channel per thread and
// is bound by instruction issue (bench/NOTES.md, v33). Here the forward's operand form
// (stream_fwd_mma) carries over to all three products. A block of four warps takes 32 channels
// (64-byte rows) and one segment of time, which it walks in tiles of 128 steps, 16 blocks of 8;
// warp w takes the channels of 16-byte piece w of every row (8 channels). Per channel and tile:
//   z = X·T + bias, as in the forward (with the taps and bias scaled by tap_scale, so that z
//     comes out as scaled_gradient wants it); g = dout·act'(z) / tap_scale in the result's
//     layout: lane (g, q) holds steps 8g + 2q, 8g + 2q + 1 of blocks g and g + 8, and reads
//     dout from those rows;
//   dx = G·T′, the forward's product mirrored: output row r is block r − 2 (dx trails g by 16
//     steps), its window g of blocks r − 2, r − 1, r, and T′[j][n] = wl[j − n]. The A operand
//     is g's words of blocks g − 2, g + 6, g − 1, g + 7 (m16n8k16) and g, g + 8 (m16n8k8): the
//     lane's own two words and, by shuffles from the lanes 4 and 8 before it (modulo the 8
//     groups), theirs; where that wraps (blocks −2, −1), the sender's block g + 8 word of the
//     previous tile, which each lane keeps. g is rounded to bf16 for all the products, as in
//     tensor_core_backward (carried as hi + lo, it took 1265–1277 µs here against 1140–1149);
//   dw: P = Xwinᵀ·G (24 window steps × 8 steps, summed over the 16 blocks), two m16n8k16.
//     Their operands are movmatrix transposes of words the lane already holds: X's six
//     (m-tile 0: blocks g − 2, g − 1, g + 6, g + 7; m-tile 1: g, g + 8, its rows 24–31 zero)
//     and g's two. P[j][n] is the sum at lag 16 + n − j; each lane folds its results into four
//     sums, lags D0 or D0 + 16, D0 + 1 or D0 + 17 (whichever lies in 0 … 15), D0 + 8 and
//     D0 + 9, D0 = 2q − g. At the segment's end the sums meet by lag in shared memory, in a
//     fixed order (no atomics);
//   dbias: each lane's float32 sum of its g before the rounding, met across the lanes at the
//     segment's end in a fixed order.
// A tile's dx (the 16 steps before it and its first 112) is written over dout's rows of the
// steps 16 later (the lane's own rows: each lane writes what it read), and copied out a tile
// later: by one tensor copy from thread 0 where the tile lies inside the segment and away from
// the final states (every thread copying its pieces at the segment's ends, or where dx's
// tensor map cannot be made). A segment's walk takes one tile more than its steps, for g of
// the 16 steps after it (the next segment's, or zeros past L); those steps stay out of dw and
// dbias.
// x's and dout's tiles come in by the copy engine into two rings of four tiles per block (64
// KB): thread 0 issues one tensor copy per tile and tensor (a box of 32 channels × 128 steps,
// swizzled as the rings are, zeros past L and C), counted on the slot's barrier; before Hopper
// every thread issues 16-byte cp.async copies instead. Tile k's window reaches the 16 rows
// before it in the ring (a wrap at its start), so no halo is copied; two tiles are in flight
// while one is computed and one copied out, and one block barrier per tile orders them. With
// the taps' tables and the lanes' sums a block holds 95 KB: 2 blocks per SM, 8 warps of
// 236–245 registers.
//   Measured (bench/NOTES.md, v44, v45): bf16 16×1536×16384 K = 16 fwd+bwd 1637.0 µs with the
// stream backward, 1388–1394 with this one's first form, 1367–1368 now; 8×1536×2048 160.4 →
// 136–137. A warp issues about 1120 instructions per tile of 1024 outputs (80 of them the
// products) at 45% of the issue slots, and the L1 pipe (shared memory and the copies) was 78%
// busy in the first form (Nsight, v45), at about 330 shared-memory wavefronts per warp and
// tile: x's window reads 48, the lag sums 64, the cp.async writes 64 (each 512 bytes in rows of
// 64 bytes takes 8, not 4). Three blocks per SM (one tile in flight, 168 registers) measured
// slower (1484 µs, v45): the L1 pipe, more than each channel's chain of latencies, sets its pace.
// The tensor copies took the cp.async writes off that pipe (and their ~30 instructions per
// warp and tile): 1359–1366 → 1315 µs, 8×1536×2048 136.0–136.3 → 130.2–130.3 (v45); dx's
// tensor copies out 1323.3–1326.1 → 1280.6–1283.1 µs with the forward's x in by the copy
// engine too, the backward 879–883 → 851–852 (v46).
struct mma_backward_shape {
    static constexpr int CHANNELS = 32;               // a block's channels: 64-byte rows
    static constexpr int ROW = 64;                    // bytes of a staged row
    static constexpr int TILE = 128;                  // steps per tile: 16 blocks of 8
    static constexpr int LAG = 16;                    // steps by which a tile's dx trails its g
    static constexpr int SLOTS = 4;                   // tiles a ring holds
    static constexpr int RING_ROWS = SLOTS * TILE;    // a power of two: ring rows wrap by a mask
    static constexpr int RING = RING_ROWS * ROW;      // bytes of one ring (x or dout)
    static constexpr int TABLES = 2 * CHANNELS * kTapPairStride * (int)sizeof(unsigned); // two tables of tap pairs
    static constexpr int SUMS = CHANNELS * 32 * 5 * (int)sizeof(float); // each lane's dw and dbias sums
    static constexpr int BARRIERS = SLOTS * (int)sizeof(uint64_t); // a tile's arrival per slot (tensor copies)
    static constexpr int ALIGNMENT = 512; // the tensor copies' 64-byte swizzle follows address bits 4–8
    static constexpr int BLOCK_BYTES = 2 * RING + TABLES + SUMS + CHANNELS * (int)sizeof(float) + BARRIERS + ALIGNMENT;
};

// The 16-bit tap at look-back distance d of channel c times tap_scale (exact in bf16), as bits.
__device__ inline unsigned short scaled_tap_bits(const conv_args &a, int64_t c, int d)
{
    const float w = __uint_as_float(tap_bits(a, c, d) << 16);
    return __bfloat16_as_ushort(__float2bfloat16_rn(tap_scale<__nv_bfloat16>() * w));
}

// The 8 × 8 16-bit matrix whose row g, columns 2q, 2q + 1 lane (g, q) holds, transposed.
__device__ inline unsigned transposed8(unsigned m)
{
    unsigned t;
    asm("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(t) : "r"(m));
    return t;
}

struct mma_backward_plan {
    int64_t channel_blocks; // blocks across C, 32 channels each
    int64_t time_blocks;    // segments along L
    int64_t seg_len;        // steps per segment, a multiple of the tile
    bool whole_pieces;      // dx takes 16-byte stores
    bool dx_by_tensor;      // dx's whole tiles leave by the copy engine (its tensor map could be made)
};

template <bool SILU>
__global__ void __launch_bounds__(kBlock, 2)
    stream_bwd_mma(conv_args a, mma_backward_plan plan, float *ws, const __grid_constant__ CUtensorMap x_map,
                   const __grid_constant__ CUtensorMap d_map, const __grid_constant__ CUtensorMap dx_map)
{
    using T = __nv_bfloat16;
    using M = mma_backward_shape;
    next_kernel_may_start();
    after_previous_kernels();
    const int64_t b = blockIdx.y, c0 = blockIdx.x % plan.channel_blocks * M::CHANNELS;
    const int64_t time_block = blockIdx.x / plan.channel_blocks, t0 = time_block * plan.seg_len;
    const int64_t end = t0 + plan.seg_len < a.L ? t0 + plan.seg_len : a.L;
    // g is wanted 16 steps past the segment (for its last dx); nothing is read past L.
    const int64_t copy_end = end + M::LAG < a.L ? end + M::LAG : a.L;
    const int tiles = (int)((end + M::LAG - t0 + M::TILE - 1) / M::TILE);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    char *x_ring = (char *)mma_stream_memory, *d_ring;
    if (TG_BULK_COPY) x_ring += (M::ALIGNMENT - (shared_address(x_ring) & (M::ALIGNMENT - 1))) & (M::ALIGNMENT - 1);
    d_ring = x_ring + M::RING;
    unsigned *forward_table = (unsigned *)(d_ring + M::RING);
    unsigned *mirror_table = forward_table + M::CHANNELS * kTapPairStride;
    float4 *lag_sums = (float4 *)(d_ring + M::RING + M::TABLES) + warp * 8 * 32; // [channel][lane]
    float2 *bias_sums = (float2 *)(d_ring + M::RING + M::TABLES + M::CHANNELS * 32 * 16) + warp * 4 * 32; // [m][lane]
    float *bias = (float *)(d_ring + M::RING + M::TABLES + M::SUMS);
    uint64_t *slot_arrivals = (uint64_t *)(bias + M::CHANNELS); // [slot]: tile k's tensor copies, phase k / SLOTS
    const bool warp_inside = c0 + 8 * warp < a.C; // this warp's piece has channels

    // The taps' tables: threads 0–31 write the forward's pairs of channel `lane` (P[k] = w′[k − 8]
    // as in stream_fwd_mma), threads 32–63 the mirrored product's (P[k] = wl[k − 8]), both
    // scaled by tap_scale. Each lane keeps its forward operands in registers (24) and reads
    // the mirrored ones at each tile: with both in registers the kernel spilled.
    if (threadIdx.x < 64) {
        const int64_t c = c0 + lane < a.C ? c0 + lane : a.C - 1;
        const bool mirror = threadIdx.x >= 32;
        unsigned short padded[2 * kTapPairs];
#pragma unroll
        for (int k = 0; k < 2 * kTapPairs; k++)
            padded[k] = k >= 8 && k < 24 ? scaled_tap_bits(a, c, mirror ? k - 8 : 23 - k) : 0;
        write_tap_pairs(mirror ? mirror_table : forward_table, lane, padded);
        if (!mirror)
            bias[lane] = a.bias && c0 + lane < a.C ? tap_scale<T>() * tg_to_float(((const T *)a.bias)[c * a.bs0]) : 0.0f;
    }
    if (TG_BULK_COPY && threadIdx.x == 0) arrival_barriers_init(slot_arrivals, M::SLOTS);
    __syncthreads();
    unsigned taps[8][3]; // the forward's operands of this warp's 8 channels
    read_tap_pairs(forward_table, 2 * q - g - 1 + 8, 8 * warp, taps);
    // z's bias comes out of the product: B[0][n] (lanes q = 0, low half) meets no x step, so it
    // holds the bias, and A's column 0 (the same lanes' low halves) is patched to 1.
    if (q == 0)
#pragma unroll
        for (int j = 0; j < 8; j++)
            taps[j][0] = (taps[j][0] & 0xffff0000u) | __bfloat16_as_ushort(__float2bfloat16_rn(bias[8 * warp + j]));
    const unsigned column0_keep = q == 0 ? 0xffff0000u : 0xffffffffu, column0_one = q == 0 ? 0x3f80u : 0u;
    const unsigned *mirror_pairs = tap_pairs_of(mirror_table, 2 * q - g + 8, 8 * warp);

    // This thread's copies: piece threadIdx.x % 4 of rows threadIdx.x / 4 + 32j of a tile.
    const int piece = threadIdx.x % 4, prow = threadIdx.x / 4;
    const bool piece_inside = c0 + 8 * piece < a.C;
    const unsigned swizzled = (unsigned)((piece ^ ((prow >> 1) & 3)) << 4);
    const unsigned x_at = shared_address(x_ring), d_at = shared_address(d_ring);
    const int64_t x_step = a.x.s2 * (int64_t)sizeof(T), d_step = a.y.s2 * (int64_t)sizeof(T);
    const int64_t dx_step = a.dx.s2 * (int64_t)sizeof(T);
    const char *x_row = (const char *)row_of<T>(a.x, b, c0) + piece * 16;
    const char *d_row = (const char *)row_of<T>(a.y, b, c0) + piece * 16;
    char *dx_row = (char *)row_of<T>(a.dx, b, c0) + piece * 16;
    auto issue = [&](int k) {
#if TG_BULK_COPY
        if (threadIdx.x == 0) { // both tiles by the copy engine; rows past L and channels past C as zeros
            uint64_t *arrival = &slot_arrivals[k % M::SLOTS];
            const int t = (int)(t0 + (int64_t)M::TILE * k), slot = (k % M::SLOTS) * M::TILE * M::ROW;
            tensor_stores_wait(); // tile k − 4's dx has left this slot
            async_copies_follow();
            tensor_box_to_shared(x_ring + slot, &x_map, (int)c0, t, (int)b, M::TILE * M::ROW, arrival);
            tensor_box_to_shared(d_ring + slot, &d_map, (int)c0, t, (int)b, M::TILE * M::ROW, arrival);
            arrival_arrive(arrival);
        }
        return;
#endif
        const int64_t t = t0 + (int64_t)M::TILE * k + prow;
        const unsigned at = ((k % M::SLOTS) * M::TILE + prow) * M::ROW + swizzled;
        if (piece_inside && t0 + (int64_t)M::TILE * (k + 1) <= copy_end) { // the whole tile: no tests
            const char *x_from = x_row + t * x_step, *d_from = d_row + t * d_step;
#pragma unroll
            for (int j = 0; j < M::TILE / 32; j++) {
                copy16_async_to(x_at + at + j * 32 * M::ROW, x_from + j * 32 * x_step);
                copy16_async_to(d_at + at + j * 32 * M::ROW, d_from + j * 32 * d_step);
            }
            return;
        }
#pragma unroll
        for (int j = 0; j < M::TILE / 32; j++) {
            const bool inside = piece_inside && t + 32 * j < copy_end;
            copy16_async_or_zero(x_at + at + j * 32 * M::ROW, inside ? x_row + (t + 32 * j) * x_step : x_row, inside ? 16 : 0);
            copy16_async_or_zero(d_at + at + j * 32 * M::ROW, inside ? d_row + (t + 32 * j) * d_step : d_row, inside ? 16 : 0);
        }
    };
    // Tile k's dx (steps 16 before its rows') from dout's ring to dx: steps t0 … end − 1 only.
    const int64_t final_from = final_states_from(a);
    auto copy_out = [&](int k) {
        const int64_t first = t0 + (int64_t)M::TILE * k - M::LAG, u = first + prow;
        const bool whole = first >= t0 && first + M::TILE <= end && first + M::TILE <= final_from;
        if (TG_BULK_COPY && plan.dx_by_tensor && whole) { // the whole tile in one tensor copy from thread 0
            if (threadIdx.x == 0) // after every thread's dx writes (the barrier before)
                tensor_box_from_shared(&dx_map, (int)c0, (int)first, (int)b,
                                       d_ring + (k % M::SLOTS) * M::TILE * M::ROW);
            return;
        }
        const char *from = d_ring + ((k % M::SLOTS) * M::TILE + prow) * M::ROW + swizzled;
        if (piece_inside && plan.whole_pieces && whole) {
            char *to = dx_row + u * dx_step; // the whole tile: no tests
#pragma unroll
            for (int j = 0; j < M::TILE / 32; j++)
                *(uint4 *)(to + j * 32 * dx_step) = *(const uint4 *)(from + j * 32 * M::ROW);
            return;
        }
#pragma unroll
        for (int j = 0; j < M::TILE / 32; j++) {
            const int64_t s = u + 32 * j;
            if (!piece_inside || s < t0 || s >= end) continue;
            uint4 v = *(const uint4 *)(from + j * 32 * M::ROW);
            if (s >= final_from) { // the final states' gradient joins the last K − 1 steps
                float f[8];
                unpack16<T>(v, f);
                for (int e = 0; e < 8; e++)
                    if (c0 + 8 * piece + e < a.C) f[e] += ld<T>(a.dfinal, b, c0 + 8 * piece + e, s - final_from);
                v = pack16<T>(f);
            }
            if (plan.whole_pieces) {
                *(uint4 *)(dx_row + s * dx_step) = v;
            } else { // dx's steps not 16-byte aligned: value by value
                for (int e = 0; e < 8 && c0 + 8 * piece + e < a.C; e++)
                    ((unsigned short *)(dx_row + s * dx_step))[e] = (unsigned short)(word_of(v, e / 2) >> (16 * (e % 2)));
            }
        }
    };
    // The first tile's window reaches the 16 rows before it (the ring's last): x before t0, or
    // the history (zero without one) before step 0.
    const unsigned halo_at = (M::RING_ROWS - M::LAG) * M::ROW;
    if (t0 >= M::LAG) {
        if (prow < M::LAG)
            copy16_async_or_zero(x_at + halo_at + prow * M::ROW + swizzled, x_row + (t0 - M::LAG + prow) * x_step,
                                 piece_inside ? 16 : 0);
    } else if (threadIdx.x < 32) { // t0 = 0: thread = channel
        stage_history_rows<T>(a, b, c0 + lane, lane, x_ring, M::RING_ROWS - M::LAG);
    }
    issue(0);
    copies_commit();
    if (tiles > 1) issue(1);
    copies_commit();

    // The rows this lane reads (and, in dout's ring, writes): 8s + 2q + e of a tile, e = 0 first
    // for even g and 1 first for odd g, as in stream_fwd_mma, and the permutes that pair them.
    const step_pair_rows pair_rows = step_pair_rows_of(g, q);
    const unsigned pair_low = pair_rows.pair_low, pair_high = pair_rows.pair_high;
    const int first_row = pair_rows.first, second_row = pair_rows.second;
    const bool odd_first = pair_rows.odd_first;
    const int column = (warp ^ q) << 4; // piece `warp`, swizzled by the rows' bits 1–2 (= q)
    const int64_t lane_step = 8 * g + 2 * q; // this lane's first step of block g in a tile
    // The lags of this lane's dw sums (see above), as the selects of the folding.
    const int d0 = 2 * q - g;
    const bool lag0_late = d0 >= 0, lag1_late = d0 >= -1;
    // The lag sums live in shared memory between the tiles (each lane its own): in registers
    // (32) they made the kernel spill, and still lost with g in one part (1212–1214 µs against
    // 1142–1143, bench/NOTES.md, v47). dbias' sums (8) fit in registers, and measured faster
    // there than read and written back per tile (v45).
    unsigned previous[8]; // [channel]: g's word of block g + 8 in the previous tile
#pragma unroll
    for (int j = 0; j < 8; j++) {
        lag_sums[j * 32 + lane] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        previous[j] = 0u; // before t0: no dx written
    }
    float bias_acc[8] = {}; // [channel]: dbias' sums of this lane's steps, in float32

    for (int k = 0; k < tiles; k++) {
        if (TG_BULK_COPY) {
            if (k == 0) copies_wait_all(); // the first tile's window history
            arrival_wait(&slot_arrivals[k % M::SLOTS], k / M::SLOTS % 2);
        } else {
            copies_wait_groups<1>(); // tile k's copies have landed
        }
        __syncthreads();         // everyone's; tile k − 1's dx is all in, tile k − 2's slot free
        // Tile k + 2's copies go out before tile k − 1's dx: then the tensor copy that took tile
        // k − 2's dx out of the slot they land in is the last one thread 0 waits for.
        if (k + 2 < tiles) issue(k + 2);
        copies_commit();
        if (k > 0) copy_out(k - 1);
        if (!warp_inside) continue;
        const int base = (k % M::SLOTS) * M::TILE; // the tile's first ring row
        const int64_t tile_t = t0 + (int64_t)M::TILE * k;
        // The tiles that reach past the segment (its last one or two) mask g's steps from
        // `end` on out of dw and dbias; the others are compiled without the masks.
        auto compute = [&](auto past_end) {
            constexpr bool PAST_END = decltype(past_end)::value;
            // Masks of this lane's steps that are the segment's own (dw and dbias take only those).
            auto own = [&](int64_t s) { return (s < end ? 0xffffu : 0u) | (s + 1 < end ? 0xffff0000u : 0u); };
            const unsigned own_g = own(tile_t + lane_step), own_g8 = own(tile_t + lane_step + 64);
            uint4 u0[6], u1[6];
#pragma unroll
            for (int i = 0; i < 6; i++) { // blocks g + s, s = −2, 6, −1, 7, 0, 8 (the operand's order)
                const int s = i / 2 - 2 + 8 * (i % 2);
                u0[i] = *(const uint4 *)(x_ring + ((base + first_row + 8 * s) & (M::RING_ROWS - 1)) * M::ROW + column);
                u1[i] = *(const uint4 *)(x_ring + ((base + second_row + 8 * s) & (M::RING_ROWS - 1)) * M::ROW + column);
            }
            // dout's rows (and dx's, written over them): steps 2q, 2q + 1 of blocks g and g + 8,
            // the odd step first for odd g as X's rows, so that these four reads and writes
            // meet no bank conflicts; a word holds one step of two channels, put in step order
            // by a select (in step order for all lanes, the rows conflicted two ways: 1392 µs
            // against 1372, bench/NOTES.md, v45).
            uint4 *dout_rows[4] = {(uint4 *)(d_ring + (base + first_row) * M::ROW + column),
                                   (uint4 *)(d_ring + (base + second_row) * M::ROW + column),
                                   (uint4 *)(d_ring + (base + first_row + 64) * M::ROW + column),
                                   (uint4 *)(d_ring + (base + second_row + 64) * M::ROW + column)};
            uint4 dout[4], dx_rows[4];
#pragma unroll
            for (int r = 0; r < 4; r++) dout[r] = *dout_rows[r];
#pragma unroll
            for (int m = 0; m < 4; m++) { // channels 2m, 2m + 1 of the piece, side by side (h)
                // Each step of the maths is written for both channels before the next: one
                // channel's chain (z, its slope, g, its transposes, the products) is long,
                // and the other's instructions fill its waits.
                unsigned w[2][6];
                float gv[2][4]; // g at steps 2q, 2q + 1 of blocks g (0, 1) and g + 8 (2, 3)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const unsigned sel = h ? pair_high : pair_low;
#pragma unroll
                    for (int i = 0; i < 6; i++) w[h][i] = __byte_perm(word_of(u0[i], m), word_of(u1[i], m), sel);
                }
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    const unsigned mine = word_of(dout[r], m), other = word_of(dout[r ^ 1], m);
                    unpack2(odd_first ? other : mine, gv[0][r], gv[1][r], T()); // in step order
                }
                if (SILU) {
                    float z[2][4];
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const int ch = 2 * m + h;
                        const unsigned x16[4] = {(w[h][0] & column0_keep) | column0_one,
                                                 (w[h][1] & column0_keep) | column0_one, w[h][2], w[h][3]};
                        z[h][0] = z[h][1] = z[h][2] = z[h][3] = 0.0f;
                        mma16<T>(z[h], x16, taps[ch][0], taps[ch][1]);
                        mma8<T>(z[h], w[h][4], w[h][5], taps[ch][2]);
                    }
#pragma unroll
                    for (int h = 0; h < 2; h++)
#pragma unroll
                        for (int i = 0; i < 4; i++) gv[h][i] = scaled_gradient<T, true>(z[h][i], gv[h][i]);
                } else {
#pragma unroll
                    for (int h = 0; h < 2; h++)
#pragma unroll
                        for (int i = 0; i < 4; i++) gv[h][i] = scaled_gradient<T, false>(0.0f, gv[h][i]);
                }
#pragma unroll
                for (int h = 0; h < 2; h++) { // dbias of g before its rounding: the segment's own steps only
                    if (PAST_END) // own_g, own_g8: a half set per step of the segment's
                        bias_acc[2 * m + h] += ((own_g & 0xffffu ? gv[h][0] : 0.0f) + (own_g >> 16 ? gv[h][1] : 0.0f)) +
                                               ((own_g8 & 0xffffu ? gv[h][2] : 0.0f) + (own_g8 >> 16 ? gv[h][3] : 0.0f));
                    else
                        bias_acc[2 * m + h] += (gv[h][0] + gv[h][1]) + (gv[h][2] + gv[h][3]);
                }
                unsigned own_words[2][2]; // [h][block g, block g + 8]
                unsigned xt[2][6];        // X's words transposed, for dw
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    own_words[h][0] = pack2(gv[h][0], gv[h][1], T());
                    own_words[h][1] = pack2(gv[h][2], gv[h][3], T());
#pragma unroll
                    for (int i = 0; i < 6; i++) xt[h][i] = transposed8(w[h][i]);
                }
                float d[2][4], p0[2][4], p1[2][4];
#pragma unroll
                for (int h = 0; h < 2; h++)
#pragma unroll
                    for (int i = 0; i < 4; i++) d[h][i] = p0[h][i] = p1[h][i] = 0.0f;
                unsigned window[2][4], gt[2][2];
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int ch = 2 * m + h;
                    const unsigned lo = own_words[h][0], hi = own_words[h][1];
                    // The lanes 4 (8) before send what block g − 1 (g − 2) and g + 7 (g + 6) are:
                    // their blocks g and g + 8, or where that wraps (to blocks −1, −2 and 7, 6),
                    // their block g + 8 of the previous tile and their block g of this one.
                    const bool wraps4 = g == 7, wraps8 = g >= 6;
                    window[h][0] = __shfl_sync(0xffffffffu, wraps8 ? previous[ch] : lo, (lane + 24) & 31); // g − 2
                    window[h][1] = __shfl_sync(0xffffffffu, wraps8 ? lo : hi, (lane + 24) & 31);                 // g + 6
                    window[h][2] = __shfl_sync(0xffffffffu, wraps4 ? previous[ch] : lo, (lane + 28) & 31); // g − 1
                    window[h][3] = __shfl_sync(0xffffffffu, wraps4 ? lo : hi, (lane + 28) & 31);                 // g + 7
                    previous[ch] = hi;
                    // dw: the segment's own steps only
                    gt[h][0] = transposed8(PAST_END ? lo & own_g : lo);
                    gt[h][1] = transposed8(PAST_END ? hi & own_g8 : hi);
                }
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const unsigned *pairs = mirror_pairs + (2 * m + h) * kTapPairStride;
                    mma16<T>(d[h], window[h], pairs[0], pairs[4]);
                    mma8<T>(d[h], own_words[h][0], own_words[h][1], pairs[8]);
                    const unsigned xt0[4] = {xt[h][0], xt[h][2], xt[h][1], xt[h][3]};
                    const unsigned xt1[4] = {xt[h][4], 0u, xt[h][5], 0u};
                    mma16<T>(p0[h], xt0, gt[h][0], gt[h][1]);
                    mma16<T>(p1[h], xt1, gt[h][0], gt[h][1]);
                }
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int ch = 2 * m + h;
                    float4 sums = lag_sums[ch * 32 + lane];
                    sums.x += lag0_late ? p1[h][0] : p0[h][0];
                    sums.y += lag1_late ? p1[h][1] : p0[h][1];
                    sums.z += p0[h][2];
                    sums.w += p0[h][3];
                    lag_sums[ch * 32 + lane] = sums;
                }
                // d[h][0], [1]: channel h's dx at steps 2q, 2q + 1
                // of block g − 2; [2], [3]: of block g + 6. They go over dout's rows of blocks g
                // and g + 8, which this lane read.
                const unsigned e0 = pack2(d[0][0], d[1][0], T());
                const unsigned e1 = pack2(d[0][1], d[1][1], T());
                const unsigned f0 = pack2(d[0][2], d[1][2], T());
                const unsigned f1 = pack2(d[0][3], d[1][3], T());
                word_of(dx_rows[0], m) = odd_first ? e1 : e0;
                word_of(dx_rows[1], m) = odd_first ? e0 : e1;
                word_of(dx_rows[2], m) = odd_first ? f1 : f0;
                word_of(dx_rows[3], m) = odd_first ? f0 : f1;
            }
#pragma unroll
            for (int r = 0; r < 4; r++) *dout_rows[r] = dx_rows[r];
        };
        if (tile_t + M::TILE > end) compute(std::true_type());
        else compute(std::false_type());
    }
    __syncthreads(); // the last tile's dx is in
    copy_out(tiles - 1);
    if (threadIdx.x == 0) tensor_stores_wait<true>(); // dx's tensor copies are done with the ring
#pragma unroll
    for (int m = 0; m < 4; m++) bias_sums[m * 32 + lane] = make_float2(bias_acc[2 * m], bias_acc[2 * m + 1]);

    // dw and dbias: the lanes' sums by lag are added in a fixed order: lag i takes
    // P[16 + n − i][n], n = 0 … 7, from lane ((16 + n − i) mod 8, n / 2), sum (rows 8–15 of
    // m-tile 0 ? 2 : 0) + n mod 2.
    __syncwarp();
    if (!warp_inside) return;
    const int64_t parts = a.B * plan.time_blocks, part = b * plan.time_blocks + time_block;
    for (int o = lane; o < 8 * 17; o += 32) {
        const int j = o / 17, i = o % 17;
        const int64_t c = c0 + 8 * warp + j;
        if (c >= a.C) continue;
        float sum = 0.0f;
        if (i == 16) { // dbias: every lane's float32 sum
            for (int l = 0; l < 32; l++) sum += j % 2 ? bias_sums[j / 2 * 32 + l].y : bias_sums[j / 2 * 32 + l].x;
        } else {
            for (int n = 0; n < 8; n++) {
                const int row = 16 + n - i;
                const float4 v = lag_sums[j * 32 + (row % 8) * 4 + n / 2];
                sum += row & 8 ? (n % 2 ? v.w : v.z) : (n % 2 ? v.y : v.x);
            }
        }
        partial_to_workspace(ws, parts, part, c, 17, i, tap_scale<T>() * sum);
    }
}

// ---- small kernels: final states, the history's gradient, the dw/dbias sum -----------------------

template <typename T> __global__ void final_states_kernel(conv_args a, t3 final_states)
{
    const int64_t n = a.B * a.C * (a.K - 1);
    for (int64_t idx = tg_global_index(); idx < n; idx += tg_global_stride()) {
        int64_t j = idx % (a.K - 1), c = (idx / (a.K - 1)) % a.C, b = idx / ((a.K - 1) * a.C);
        st<T>(final_states, b, c, j, x_at<T>(a, b, c, a.L - (a.K - 1) + j)); // xe[L + j]
    }
}

// dinitial[j] = dxe[j] = Σ_i wl[i]·g[j − (K−1) + i] (+ dfinal[j − L] when the history reaches
// into the final states, i.e. L < K − 1). One thread per (b, c, j); g rebuilt from x.
template <typename T> __global__ void initial_grad_kernel(conv_args a, t3 dinitial)
{
    after_previous_kernels();
    const int64_t n = a.B * a.C * (a.K - 1);
    for (int64_t idx = tg_global_index(); idx < n; idx += tg_global_stride()) {
        int64_t j = idx % (a.K - 1), c = (idx / (a.K - 1)) % a.C, b = idx / ((a.K - 1) * a.C);
        float bias = a.bias ? (float)tg_load_raw(a.bias, a.dtype, c * a.bs0) : 0.0f, d = 0.0f;
        for (int i = 0; i < a.K; i++) {
            int64_t t = j - (a.K - 1) + i; // output step that reads xe[j] through look-back i
            if (t < 0 || t >= a.L) continue;
            float z = bias;
            for (int k = 0; k < a.K; k++) z += (float)tg_load_raw(a.w, a.dtype, c * a.ws0 + (a.K - 1 - k) * a.ws1) * x_at<T>(a, b, c, t - k);
            float g = ld<T>(a.y, b, c, t) * activation_slope(z, a.silu);
            d += (float)tg_load_raw(a.w, a.dtype, c * a.ws0 + (a.K - 1 - i) * a.ws1) * g;
        }
        if (a.dfinal.p && j >= a.L) d += ld<T>(a.dfinal, b, c, j - a.L);
        st<T>(dinitial, b, c, j, d);
    }
}

// dw[c, K−1−i] and dbias[c] from ws[c][i][0 … parts). Up to kFewParts parts a thread per
// output adds them in order; more, a warp per output, its lanes taking every 32nd part and
// then a fixed shuffle tree. Either way the order of the sum never changes.
constexpr int64_t kFewParts = 8;
__global__ void sum_partials_kernel(const float *ws, int64_t parts, int64_t C, weight_grads grads)
{
    after_previous_kernels();
    const int KB = grads.KB;
    const int64_t n = C * (KB + 1);
    // 32×768×1024 bf16 K = 4 has 4 parts: with a thread per output its fwd+bwd less fwd fell
    // from 48.0 to 47.6–47.7 µs (bench/NOTES.md, v27); a warp per output left 28 lanes idle.
    if (parts <= kFewParts) {
        for (int64_t idx = tg_global_index(); idx < n; idx += tg_global_stride()) {
            const int i = (int)(idx % (KB + 1));
            if (!grads.wanted(i)) continue;
            const float *row = ws + idx * parts;
            float sum = 0.0f;
#pragma unroll // all loads in flight at once, the additions still in order
            for (int p = 0; p < kFewParts; p++)
                if (p < parts) sum += row[p];
            grads.store(idx / (KB + 1), i, sum);
        }
        return;
    }
    const int lane = threadIdx.x % 32;
    for (int64_t idx = tg_global_index() / 32; idx < n; idx += tg_global_stride() / 32) {
        const int64_t c = idx / (KB + 1);
        const int i = (int)(idx % (KB + 1));
        if (!grads.wanted(i)) continue; // uniform across the warp
        const float *row = ws + idx * parts;
        float sum = 0.0f;
        for (int64_t p = lane; p < parts; p += 32) sum += row[p];
#pragma unroll
        for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
        if (lane == 0) grads.store(c, i, sum);
    }
}

// Threads sum_partials_kernel takes for C channels' KB + 1 outputs.
int64_t sum_partials_threads(int64_t parts, int64_t C, int KB) { return (parts <= kFewParts ? 1 : 32) * C * (KB + 1); }

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
// 16-bit K > 4: at K = 8, 93% of the copy bandwidth against 73% direct, bench/NOTES.md v10);
// shorter rows the direct one unless forward_stages_full_blocks, and every row at K ≤ 4
// (16×1536×16384 bf16 at K = 2, 3, 4: 391, 397, 404 µs against 408 µs staged, v15). f32 at
// K = 8 measured slower staged (772 → 795 µs; 8×1536×2048 55.9 → 58.0), and so did bf16 K = 8
// at 8×1536×2048 from full blocks on (31.6 → 38.8; bench/NOTES.md, v40).
constexpr int64_t kStagedForwardMinL = 8192;
// Where the staged forward serves, and is compiled: 16-bit data from K = 5 on, and f32 at
// K = 9–16, where the direct forward waits on its loads (Nsight, f32 16×1536×16384 K = 16:
// 73% DRAM, `long_scoreboard` three times any other stall) with sixteen taps' work between
// them: staged, that row's forward measured 912 → 797 µs (83.6% → 95.6% of the copy
// bandwidth) and K = 12 910 → 796 (bench/NOTES.md, v40).
template <typename T, int KB> __host__ __device__ constexpr bool forward_may_stage()
{
    return sizeof(T) == 2 ? KB > 4 : KB == 16;
}
// Whether it also takes rows shorter than kStagedForwardMinL, from full blocks on: on tensor
// cores (L = 2048: 45 against 62 µs at 8×1536×2048, bf16 K = 16; with fewer threads per
// block it measured slower, 77 against 64 µs at 32×768×1024) and in f32 (K = 16 forward
// 77.4 → 59.0 µs at 8×1536×2048, 80.3 → 66.4 at 32×768×1024; bench/NOTES.md, v40).
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
// Measured (bench/NOTES.md, v27), forward µs at 8×1536×2048 and 32×768×1024, one row → 2 → 4:
// bf16 K = 8 41.6 → 38.4 → 36.2 and 42.0 → 37.9 → 35.5 (8 rows: 35.5, 35.6); K = 4 31.9 → 30.4
// → 31.6 and 31.8 → 30.4 → 31.6 (8 rows: 36.0, 37.2); K = 3 31.5 → 30.3 → 31.7. Four rows
// slowed bf16 K = 2 (30.1 → 31.3) and f32 K = 4 at 32×768×1024 (53.3 → 55.2). With the grid
// and halo of row_fwd_direct_grouped (v29), 4 rows at K = 3 and 4 again lost: 29.1–29.6 →
// 31.1–31.4 µs at both sizes.
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
// (f32, and 16-bit data at K ≤ 2): at 128×768×256 f32 the forward went 64.4–65.0 → 52.1–52.8
// µs at K = 2 and 4, 66.4–66.6 → 60.5 at K = 8, and bf16 at 64×768×512 K = 2 34.9–35.1 →
// 32.4; where it groups rows (16-bit from K = 3 on) that lost, K = 4 29.3–29.5 → 32.4 and
// K = 8 33.0–33.2 → 42.6 (bench/NOTES.md).
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
// bookkeeping, and at its end the dw and dbias partials. In the tensor-core backward at
// K = 8 that was 16% of the instructions with 8 spans per block, about 1.7 spans' worth
// (bench/NOTES.md, v17), which argues for few, long blocks; a last wave left partly empty
// argues against. The time is modelled as waves × (spans per block + kBlockCost) over 8 to
// 64 spans per block; the cheapest wins, the shorter blocks on a tie.
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
    // channel's rows (often all: no second kernel for the sums). At 128×768×256 bf16 K = 4,
    // fwd+bwd 93.5–93.8 µs against 96.3–97.1 with 8 (bench/NOTES.md, v30).
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
    plan.inner_last = plan.vec_x && plan.vec_y && inside_end >= right_halo ? (int)(last < INT32_MAX ? last : INT32_MAX) : -1;
    plan.whole_rows = plan.spans == 1 && plan.vec_x && plan.vec_y && a.L % V == 0 && !a.init.p;
    return plan;
}

// Tiles of kTileT steps; a block walks several of them (its weights and setup then serve more
// steps, and the backward leaves fewer partials to sum), as long as the grid keeps about
// 16384 blocks: some 8 waves on a 132-SM card, so the last, partly filled wave costs little.
// (With 2–3 waves, a third of the last one idle showed as 30% of the time.)
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
// a multiple of every chunk; stream_fwd_mma asks for whole tiles): on the short rows (8×1536×2048,
// 32×768×1024 bf16) 64 measured 14–16% faster forward+backward than 32, and 128 (with 512 at
// most) 2% slower than 64; the long rows did not move then (bench/NOTES.md, v16; the 16-bit
// forward at K ≤ 8 has since measured faster at 64, stream_forward_longest_segment). `out` is
// the kernel's output (out, or dx). most_across: stream_most_warps_across.
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
// than 256 (bf16 channel-last 16×1536×16384, forward µs, 256 → 128 → 64 steps: K = 8 435.3 →
// 430.1 → 405.8, fwd+bwd 1132.2 → 1103.1; K = 4 421.7 → 422.5 → 411.1; K = 2 418.2 → 418.3
// → 404.9; the short rows level; bench/NOTES.md, v41). The kernel's work grows (each segment
// loads its window's K − 1 steps, one round trip since v34); what shorter segments buy is in
// the memory system: a plain copy that walks a channel-last tensor the same way
// (bench/strided_copy.cu, blocks of 256 threads) measured 419.8 µs in segments of 64 steps
// against 431.0 in segments of 256 with 128-byte pieces per step, 406.4 against 417.0 with
// 256-byte ones, and 383.2 for the tensor's own copy. At 16-bit K = 16 (a thread's one
// channel, 15 window loads per segment; before those rows took stream_fwd_mma) 64 steps
// measured 520.3 → 591.6 µs and 128 541.7; f32
// at K = 8 821 → 831 (K = 4 813.5 → 811.0): they keep 256.
template <typename T, int KB> constexpr int64_t stream_forward_longest_segment()
{
    return sizeof(T) == 2 && KB <= 8 ? 64 : 256;
}

// The stream kernels copy x (and dout) in 16-byte pieces of channels and write whole channel
// words: channel-last tensors with 16-byte aligned steps and C a multiple of 16 bytes' worth,
// the common case. Other layouts take the tile kernels.
template <typename T, int CPT> bool streams_take(const conv_args &a, const tg_tensor *x, const tg_tensor *y, const tg_tensor *out)
{
    constexpr int V = vec_width<T>();
    return a.C % V == 0 && channels_vectorisable(x, V) && channels_vectorisable(y, V) && channels_vectorisable(out, CPT);
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

// The staged forward measured faster with fewer of its blocks resident: 408 against 411 µs
// (bf16, 16×1536×16384, K = 2 … 4; 406 against 409 at K = 8) with the shared memory carveout
// at half, which leaves room for 7 of its blocks per SM instead of 10 (reserving shared
// memory for 7 blocks gave the same at K ≤ 4). Why fewer blocks streaming rows at once pays
// is not established (bench/NOTES.md, v13). A hint to the driver, so a failure is ignored.
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

// 16-bit channel-last rows at K = 9 … 16 take the forward on tensor cores (stream_fwd_mma):
// bf16 16×1536×16384 K = 16 forward 519.9 µs in 137acaf's check, 445.3 (85.5% of the copy
// rate) in fb0c704's; 8×1536×2048 45.8–45.9 → 39.4 (bench/NOTES.md, v43).
template <typename T, int KB> constexpr bool forward_stream_on_tensor_cores() { return sizeof(T) == 2 && KB == 16; }

// stream_fwd_mma's plan: the stream plan of one channel per lane, with segments of 512 steps
// (4 tiles), halved down to 128 while the grid has fewer than about two and a half waves of
// blocks (two per SM). bf16 channel-last K = 16, forward µs by the longest segment, the grid
// halving below 2048 blocks (bench/NOTES.md, v43): 16×1536×16384 1024 steps 500.8–502.0,
// 512 440.5–442.1, 384 455.2–455.6, 256 472.0–472.4; 8×1536×2048 at 512 steps with no
// halving (384 blocks) 45.2, at 256 (768 blocks) 39.1–39.8, halved to 128 (one tile per
// segment) 45.7–45.8. What shorter segments cost is not their starts (the first tile's wait,
// the taps' operands): warps that walk several segments in turn, carrying both over,
// measured no faster (v43); nor is it what a plain copy of the same walk shows, which is
// faster in shorter segments (stream_forward_longest_segment). Not found.
template <typename T> stream_plan make_mma_stream_plan(const conv_args &a, const tg_tensor *out)
{
    const int64_t wanted_blocks = 5 * (int64_t)tg_cuda_multiprocessors();
    return make_stream_plan<T, 1>(a, out, stream_most_warps_across<false>(), 512, wanted_blocks, mma_stream_shape::TILE);
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
// group's too, which another warp or block reads at about the same time: 256 bytes measured
// level, none 22 µs slower in the bf16 16×1536×16384 K = 16 forward (bench/NOTES.md, v46).
bool channel_last_box_map(const t3 &t, const conv_args &a, CUtensorMap *map)
{
    using M = mma_backward_shape;
    static_assert(M::CHANNELS == mma_stream_shape::CHANNELS && M::TILE == mma_stream_shape::TILE &&
                      M::ROW == mma_stream_shape::ROW,
                  "the forward's tiles are the backward's");
    const int64_t step_bytes = t.s2 * 2, row_bytes = t.s0 * 2;
    PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
    if (!encode || t.s1 != 1 || (uintptr_t)t.p % 16 != 0 || step_bytes % 16 != 0 || row_bytes % 16 != 0 || step_bytes <= 0 ||
        row_bytes <= 0 || a.C > INT32_MAX || a.L > INT32_MAX - 2 * M::TILE || a.B > INT32_MAX)
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
// segment's walk takes one tile of g past its end, but longer segments gained far more than
// that tile's share: bf16 16×1536×16384 K = 16 fwd+bwd µs by the longest segment, one call
// (bench/NOTES.md, v44): 2048 1539.9–1540.0, 4096 1458.8–1461.6, 8192 1408.9–1411.8, 16384
// (a segment per row, 768 blocks) 1388.1–1393.6.
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

template <typename T, int KB>
tg_status forward_with(const tg_conv1d_args *in, tg_tensor *out, tg_tensor *final_states)
{
    const char *op = "tg_causal_conv1d";
    conv_args a = make_args(in, out, NULL, NULL);
    if (time_contiguous(in->x) && time_contiguous(out)) {
        const int threads = row_threads(a.L, row_ept<T>());
        constexpr bool kMayStage = forward_may_stage<T, KB>();
        bool staged = false;
        if constexpr (kMayStage)
            staged = (a.L >= kStagedForwardMinL || (forward_stages_full_blocks<T, KB>() && threads == kBlock)) &&
                     rows_aligned(in->x, vec_width<T>());
        if (staged) {
            using S = row_shape<T, KB>;
            row_plan plan = make_row_plan<T>(a, in->x, out, NULL, threads, row_ept<T>(), S::H, 0);
            if (!fits_row_grid(a, plan)) return too_large(a);
            if constexpr (kMayStage) {
                auto kernel = a.silu ? row_fwd_staged<T, KB, true> : row_fwd_staged<T, KB, false>;
                static bool carveout_set[2]; // forward_with is one per T, KB
                prefer_fewer_resident_blocks(kernel, carveout_set[a.silu]);
                kernel<<<(unsigned)(a.C * plan.chunks), threads>>>(a, plan);
            }
        } else if (const int rows = forward_rows_side_by_side<T, KB>(a, in->x)) {
            if constexpr (KB - 1 <= row_ept<T>()) {
                const int64_t groups = (a.B + rows - 1) / rows;
                const dim3 grid((unsigned)a.C, (unsigned)groups);
                row_fwd_side_by_side<T, KB><<<grid, row_threads(rows * a.L, row_ept<T>())>>>(a, rows,
                                                                                             rows_aligned(out, vec_width<T>()));
            }
        } else {
            row_plan plan = make_row_fwd_direct_plan<T>(a, in->x, out, threads);
            // Rows of one pass whose every thread loads whole vectors (row_fwd_direct_rows).
            constexpr int kRows = direct_forward_rows<T, KB>();
            const int64_t groups = (a.B + kRows - 1) / kRows; // the grid's y: at most 65535
            const bool by_rows = kRows > 1 && plan.chunks == 1 && plan.passes == 1 && plan.vec_x &&
                                 a.L % row_ept<T>() == 0 && groups <= 65535 && a.C <= INT32_MAX;
            if (!by_rows) {
                const int64_t blocks = a.B * a.C * plan.chunks;
                if (blocks > INT32_MAX) return too_large(a);
                row_fwd_direct<T, KB><<<(unsigned)blocks, threads>>>(a, plan);
            } else if constexpr (kRows > 1) { // compiled only where rows are grouped
                row_fwd_direct_grouped<T, KB, kRows><<<dim3((unsigned)a.C, (unsigned)groups), threads>>>(a, plan.vec_y);
            }
        }
    } else if (forward_stream_on_tensor_cores<T, KB>() && streams_take<T, 1>(a, in->x, NULL, out)) {
        if constexpr (forward_stream_on_tensor_cores<T, KB>()) {
            stream_plan plan = make_mma_stream_plan<T>(a, out);
            if (!fits_stream_grid(a, plan)) return too_large(a);
            auto kernel = a.silu ? stream_fwd_mma<T, true> : stream_fwd_mma<T, false>;
            static bool shared_set[2]; // forward_with is one per T, KB
            // Past the 48 KB a launch gets without asking (if refused, the launch fails and says so).
            set_attribute_once(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, mma_stream_shape::BLOCK_BYTES,
                               shared_set[a.silu]);
            // x's and y's tiles by the copy engine where their tensor maps can be made (rows of fewer
            // than 2^31 − 256 steps); else by every lane.
            CUtensorMap x_map = {}, y_map = {};
            const bool by_tensors = channel_last_box_map(a.x, a, &x_map) && channel_last_box_map(a.y, a, &y_map);
            kernel<<<stream_grid(a, plan), kBlock, mma_stream_shape::BLOCK_BYTES>>>(a, plan, x_map, y_map, by_tensors);
        }
    } else if (streams_take<T, stream_forward_cpt<T, KB>()>(a, in->x, NULL, out)) {
        if constexpr (!forward_stream_on_tensor_cores<T, KB>()) { // (those took the branch above)
            stream_plan plan = make_stream_plan<T, stream_forward_cpt<T, KB>()>(
                a, out, stream_most_warps_across<false>(), stream_forward_longest_segment<T, KB>());
            if (!fits_stream_grid(a, plan)) return too_large(a);
            stream_fwd<T, KB><<<stream_grid(a, plan), kBlock>>>(a, plan);
        }
    } else {
        tile_plan plan = make_tile_plan<T>(a, in->x, NULL, out);
        if (!fits_tile_grid(a, plan)) return too_large(a);
        tile_fwd<T, KB><<<tile_grid(a, plan), kBlock>>>(a, plan);
    }
    tg_status status = tg_cuda_check_launch(op);
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
// else 1. At 128×768×256 bf16 K = 4 fwd+bwd went 127.3–127.4 → 93.5–93.8 µs with this alone
// (the backward 82 → 48 µs). Rows of a warp or more measured faster one to a span: side by
// side, bf16 K = 3 went 75.1–75.2 → 76.1–76.4 µs at 64×768×512 and 74.1–74.3 → 74.6–74.8 at
// 32×768×1024, f32 K = 4 146.4 → 152.5 at 128×768×256 (bench/NOTES.md, v30).
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
// SM 8 warps. Measured in one call, two rounds each (bench/NOTES.md, v32), bf16 fwd+bwd µs:
//   - 32×768×1024 (768 blocks of two warps, 11.6 warps per SM): K = 2 74.0–74.5 → 72.3–72.6,
//     K = 3 74.2–74.7 → 71.1–71.5, K = 4 76.5–76.9 → 73.0; f32 K = 4 133.2–133.7 → 131.2–131.3;
//     24×768×1024 K = 4 64.5–64.7 → 56.8–57.1. Blocks of 16 spans there (two per channel, all
//     resident, the second kernel summing two parts) measured as 8: the second kernel, not
//     the partly filled last wave, was the cost.
//   - Fewer warps: 32×512×1024 (7.8 per SM) level, 32×384×1024 (5.8) 43.7 → 51.1 µs.
//   - More blocks than the GPU holds (16×1536×2048, 1536 blocks for 1056 places): 134.7–135.4
//     → 137.2–137.7 µs; f32 8×1536×2048 (two spans to a row) 134.0 → 137.6–138.6.
// `plan` is the one-row plan made without whole lists.
template <typename Kernel>
bool backward_takes_whole_lists(const conv_args &a, const row_plan &plan, Kernel kernel, int threads, size_t shared)
{
    constexpr int64_t kMaxSpans = 32, kMinWarpsPerMultiprocessor = 8;
    if (!plan.whole_rows || plan.chunks == 1 || plan.items > kMaxSpans) return false;
    if (a.C * (threads / 32) < kMinWarpsPerMultiprocessor * tg_cuda_multiprocessors()) return false;
    return a.C <= tg_cuda_resident_blocks(kernel, threads, shared);
}

template <typename T, int KB>
tg_status backward_kernels(const tg_conv1d_args *in, const tg_tensor *dout, const tg_tensor *dfinal, tg_tensor *dx,
                           tg_tensor *dweight, tg_tensor *dbias, tg_tensor *dinitial)
{
    conv_args a = make_args(in, dout, dx, dfinal);
    const bool rows = time_contiguous(in->x) && time_contiguous(dout) && time_contiguous(dx);
    const bool streams = !rows && streams_take<T, stream_backward_cpt<T, KB>()>(a, in->x, dout, dx);
    int64_t parts;
    // Rows shorter than one warp's pass of the tensor-core backward (1024 steps) would leave
    // most of its lanes idle: they take the float backward. bf16 K = 8 fwd+bwd, tensor cores
    // against float: 268.4–268.8 → 103.5–104.1 µs at 128×768×256, 137.4–137.8 → 100.1–100.5
    // at 64×768×512; at L = 1024 the tensor cores stay ahead, 81.8–82.0 against 96.5–96.7 µs
    // (32×768×1024; bench/NOTES.md, v30).
    const bool tensor_cores = backward_on_tensor_cores<T, KB>() && a.L >= 32 * kTensorCoreStepsPerThread;
    const int steps_per_thread = tensor_cores ? kTensorCoreStepsPerThread : row_ept<T>();
    const int span_stages = tensor_cores ? kTensorCoreStages : kStages;
    const int span_rows = tensor_cores ? 1 : rows_side_by_side<T, KB>(a, in->x, dout);
    const int threads = row_threads(span_rows * a.L, steps_per_thread);
    const int span_len = row_span_len(span_rows, a.L, threads, steps_per_thread);
    row_plan rplan = {};
    stream_plan splan = {};
    mma_backward_plan mplan = {};
    tile_plan tplan = {};
    // The streams' bf16 rows at K = 9–16 take the tensor cores, whose tiles come in by the copy
    // engine through tensor maps of x and dout; where a map cannot be made (rows of more than
    // 2^31 − 256 steps), the tile kernel (the float stream kernel is not built for them).
    CUtensorMap x_map = {}, d_map = {}, dx_map = {};
    const bool mma_streams = streams && backward_stream_on_tensor_cores<T, KB>() &&
                             channel_last_box_map(a.x, a, &x_map) && channel_last_box_map(a.y, a, &d_map);
    const bool float_streams = streams && !backward_stream_on_tensor_cores<T, KB>();
    void (*row_kernel)(conv_args, row_plan, float *) = NULL;
    const size_t row_shared = row_shape<T, KB>::backward_bytes(span_len, span_stages, span_rows); // span buffers
    if (rows) {
        if (span_rows > 1) row_kernel = a.silu ? row_bwd<T, KB, true, true> : row_bwd<T, KB, false, true>;
        else row_kernel = a.silu ? row_bwd<T, KB, true, false> : row_bwd<T, KB, false, false>;
        if constexpr (backward_on_tensor_cores<T, KB>())
            if (tensor_cores) row_kernel = a.silu ? row_bwd_tensor_cores<T, KB, true> : row_bwd_tensor_cores<T, KB, false>;
        // The tensor-core backward's blocks end with costly partial sums: its grid fills whole
        // waves with long blocks (K = 8, 512 steps per warp pass then: fwd+bwd 1177 → 1127 µs).
        // The float backward measured slower that way (bf16 K = 4 1002 → 1032 µs, f32 1948 →
        // 1975): 8 spans per block; except where it shares the slopes (f32 K = 9–16 with SiLU),
        // whose 17 sums per thread at a block's end were 9% of its instructions with 8 spans
        // per block (Nsight): whole waves there measured f32 16×1536×16384 K = 16 fwd+bwd
        // 2288–2304 → 2141–2212 µs, 8×1536×2048 163.0–163.3 → 159.6 (bench/NOTES.md, v40).
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
        // computes its first and last chunks with bounds tests, a larger share at K > 4.
        // bf16 16×1536×16384 fwd+bwd, 512 steps against 256: K = 8 1285 → 1259 µs, but
        // K = 4 1046 → 1080 and K = 3 1048 → 1072 (half the blocks: a larger last wave).
        // 1024 against 512: bf16 K = 8 1260 → 1249 µs, K = 16 1960 → 1933, but f32 K = 8
        // 2069 → 2081–2088 (bench/NOTES.md, v26). The blocks wanted fall as the segments grow
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
    // kernel, whose launch and 4 µs were a real share of short rows (8×1536×2048 bf16
    // fwd+bwd: K = 4 87.0 → 82.0 µs, K = 8 101.4 → 95.6 µs; bench/NOTES.md). The sum is the
    // one the second kernel made (x + 0). Whole lists of up to 64 rows measured level with the
    // kernels of v17 (32×768×1024 K = 4: 87.2–88.8 against 87.7–88.1 µs) and slower on tensor
    // cores (K = 8: 100.4 → 121.7 µs); since spans are staged as whole rows (v26) the float
    // backward gains where backward_takes_whole_lists says.
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
            status = launch_overlapped(op, kernel, stream_grid(a, mplan), dim3(kBlock), mma_backward_shape::BLOCK_BYTES, a,
                                       mplan, ws, x_map, d_map, dx_map);
        }
    } else if (float_streams) {
        if constexpr (!backward_stream_on_tensor_cores<T, KB>()) {
            auto kernel = a.silu ? stream_bwd<T, KB, true> : stream_bwd<T, KB, false>;
            // At K ≤ 4 its registers let five blocks onto an SM; four measured faster (bf16
            // channel-last K = 4 fwd+bwd 1052.5–1053.1 → 1045.9–1046.0 µs, K = 2 1039.1–1039.9 →
            // 1034.1–1035.4, f32 K = 4 2015.3–2016.8 → 2010.7–2011.0; K = 8, at four already,
            // level; bench/NOTES.md, v35): a carve-out for four blocks' rings keeps it there,
            // and leaves the rest of the SM's memory to L1.
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
        return K <= 2 ? Launch<float, 2>::run(in, args...) : K == 3 ? Launch<float, 3>::run(in, args...)
               : K == 4 ? Launch<float, 4>::run(in, args...) : K <= 8 ? Launch<float, 8>::run(in, args...)
                        : Launch<float, 16>::run(in, args...);
    case TG_BF16:
        return K <= 2 ? Launch<__nv_bfloat16, 2>::run(in, args...) : K == 3 ? Launch<__nv_bfloat16, 3>::run(in, args...)
               : K == 4 ? Launch<__nv_bfloat16, 4>::run(in, args...) : K <= 8 ? Launch<__nv_bfloat16, 8>::run(in, args...)
                        : Launch<__nv_bfloat16, 16>::run(in, args...);
    case TG_F16:
        return K <= 2 ? Launch<__half, 2>::run(in, args...) : K == 3 ? Launch<__half, 3>::run(in, args...)
               : K == 4 ? Launch<__half, 4>::run(in, args...) : K <= 8 ? Launch<__half, 8>::run(in, args...)
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
