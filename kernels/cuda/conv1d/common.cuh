// kernels/cuda/conv1d/common.cuh: what every file of the causal conv1d kernels shares: the
// kernels' arguments, loads, taps and activation, copies into shared memory, 16-bit packing.
#ifndef TAPEGRAD_KERNELS_CUDA_CONV1D_COMMON_CUH
#define TAPEGRAD_KERNELS_CUDA_CONV1D_COMMON_CUH

#include "kernels/conv1d.h"
#include "kernels/cuda/common.cuh"

#include <cudaTypedefs.h> // the tensor maps' encoder (no link to the driver library: found at run time)
#include <type_traits>

namespace tg_conv1d {

constexpr int kBlock = 128; // threads per block
constexpr int kMaxK = 16;   // the largest kernel width the GPU path takes
constexpr int kTileC = 64;  // tile kernels: channels per tile (a warp covers 32 of them)
constexpr int kTileT = 64;  // tile kernels: steps per tile

// A rank-3 tensor for the kernels: element pointer and element strides.
struct t3 {
    char *p;
    int64_t s0, s1, s2;
};

// Where the backward's dw and dbias go (either may be NULL): partial sum i of channel c is
// dw[c, K − 1 − i] for i < K, dbias[c] for i = KB; the sums for K ≤ i < KB are not stored.
struct weight_grads {
    char *dw, *db;
    int64_t dws0, dws1, dbs0;
    int dtype, K, KB;
    __device__ bool wanted(int i) const { return i == KB ? db != NULL : i < K && dw != NULL; }
    __device__ void store(int64_t c, int i, float sum) const
    {
        if (i == KB)
            tg_store_raw(db, dtype, c * dbs0, sum);
        else
            tg_store_raw(dw, dtype, c * dws0 + (K - 1 - i) * dws1, sum);
    }
};

struct conv_args {
    int64_t B, C, L;
    int K;
    int dtype; // storage dtype of every tensor (the op checks they agree)
    bool silu;
    t3 x, y;   // forward: x in, y = out; backward: x in, y = dout
    t3 dx;     // backward only
    t3 init;   // (B, C, K−1) or p == NULL
    t3 dfinal; // backward only, or p == NULL
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
    // short-row blocks' setup, and of the stream kernels' (docs/benchmarks.md).
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
// which a 16-bit dx, dw or dbias is stored (the tests hold dx to one storage step). It takes
// instructions off the stream backward's chunk, which measured faster at K = 8 and 16
// (docs/benchmarks.md). Float32 storage keeps the slope to float32
// accuracy. Scaling by 1/2 is exact, so the 16-bit taps and bias lose nothing either.
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;
template <typename T> __host__ __device__ constexpr float tap_scale() { return sizeof(T) == 2 ? 0.5f : -kLog2e; }
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
// a pass takes tens of microseconds). A kernel allows the next one from its start
// (next_kernel_may_start), and touches no global memory before after_previous_kernels, which
// returns once the kernels before it have finished and their writes are visible (at once
// without the attribute). The main backward launched so measured faster forward+backward on
// the short rows, the same on the long ones. The forwards are launched plainly: a wait at the
// start of every block measured slower (the short-row forward's blocks live a few
// microseconds each), and letting the backward's blocks in from the forward's start slowed
// the forward (docs/benchmarks.md).
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
    asm volatile(
        "mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n"
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%2], [%3, {%4, %5, %6}], [%0];\n" ::
            "r"(shared_address(barrier)),
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
    if (written)
        asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
    else
        asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
#endif
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
        return make_uint4(pack2(v[0], v[1], T()), pack2(v[2], v[3], T()), pack2(v[4], v[5], T()),
                          pack2(v[6], v[7], T()));
}

// The last K−1 steps also get the final states' gradient: dfinal[j] is x[L − (K−1) + j]'s.
__device__ inline int64_t final_states_from(const conv_args &a) { return a.dfinal.p ? a.L - (a.K - 1) : a.L; }

} // namespace tg_conv1d

#endif
