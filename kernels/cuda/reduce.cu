// kernels/cuda/reduce.cu: sums over one axis (or over everything) on the device,
// accumulated in double and deterministic: every sum is taken in an order fixed by the
// shapes alone, never by scheduling, and no atomics are used.
//
// x is seen as (outputs o, reduced r): offset(o, r) = kept(o) + reduced(r). A sum too
// long for one worker is cut into chunks of equal length; each chunk's partial sum goes
// to scratch and a second pass adds an output's partials in a fixed tree. One worker is
// a warp when the reduced elements sit next to each other in memory (the lanes read
// them together), else a thread (neighbouring threads read neighbouring outputs): when
// the outputs are contiguous and their rows 16-byte aligned (the batch sums of per-batch
// weight gradients, a bias's sum over rows), a thread takes as many adjacent outputs as
// one 16-byte load per row holds.
#include "kernels/reduce.h"
#include "kernels/cuda/strided.cuh"

#define WARP 32

struct sum_plan {
    tg_strided<1> kept;    // the output index space over x (kept dimensions, merged)
    tg_strided<1> reduced; // the summed index space over x (merged)
    int64_t n_out, count;  // outputs; elements summed into each
    int64_t chunks, chunk_length;
};

__device__ inline int64_t kept_offset(const sum_plan &p, int64_t o)
{
    int64_t at;
    tg_strided_offsets(p.kept, o, &at);
    return at;
}

__device__ inline int64_t reduced_offset(const sum_plan &p, int64_t r)
{
    if (p.reduced.ndim == 1) return r * p.reduced.strides[0][0];
    int64_t at;
    tg_strided_offsets(p.reduced, r, &at);
    return at;
}

// Σ over one chunk of output o, as seen by `lane` of `lanes` workers sharing it.
__device__ inline double chunk_sum(const sum_plan &p, int64_t o, int64_t chunk, int lane, int lanes)
{
    const char *x = p.kept.data[0];
    const int dtype = p.kept.dtype[0];
    int64_t base = kept_offset(p, o), begin = chunk * p.chunk_length;
    int64_t end = begin + p.chunk_length < p.count ? begin + p.chunk_length : p.count;
    double sum = 0.0;
    for (int64_t r = begin + lane; r < end; r += lanes) sum += tg_load_raw(x, dtype, base + reduced_offset(p, r));
    return sum;
}

// The sum of a warp's 32 values, in a fixed butterfly order; lane 0's result is used.
__device__ inline double warp_sum(double v)
{
    for (int step = WARP / 2; step > 0; step /= 2) v += __shfl_xor_sync(0xffffffffu, v, step);
    return v;
}

// Unit u = chunk · n_out + o. With one chunk the unit writes out[o] itself.
__device__ inline void emit(const sum_plan &p, int64_t u, double sum, double scale, double *partial, char *out,
                            int out_dtype)
{
    if (p.chunks == 1)
        tg_store_raw(out, out_dtype, u, scale * sum);
    else
        partial[u] = sum;
}

__global__ void sum_by_thread(sum_plan p, double scale, double *partial, char *out, int out_dtype)
{
    const int64_t units = p.n_out * p.chunks;
    for (int64_t u = tg_global_index(); u < units; u += tg_global_stride()) {
        int64_t chunk = u / p.n_out, o = u - chunk * p.n_out;
        emit(p, u, chunk_sum(p, o, chunk, 0, 1), scale, partial, out, out_dtype);
    }
}

// The loop bound depends only on the warp's index, so all 32 lanes take part in every
// shuffle.
__global__ void sum_by_warp(sum_plan p, double scale, double *partial, char *out, int out_dtype)
{
    const int64_t units = p.n_out * p.chunks, warps = tg_global_stride() / WARP;
    const int lane = (int)(threadIdx.x % WARP);
    for (int64_t u = tg_global_index() / WARP; u < units; u += warps) {
        int64_t chunk = u / p.n_out, o = u - chunk * p.n_out;
        double sum = warp_sum(chunk_sum(p, o, chunk, lane, WARP));
        if (lane == 0) emit(p, u, sum, scale, partial, out, out_dtype);
    }
}

// Sums down the columns of a matrix of contiguous rows (an outer axis summed over inner
// ones that lie side by side): a thread takes a group of adjacent outputs that one 16-byte
// load per row reaches, and adds the rows in order, so each output gets the same sum as in
// sum_by_thread. The last group may be short; it loads element by element.
template <typename T>
__global__ void sum_columns_by_group(sum_plan p, double scale, double *partial, char *out, int out_dtype)
{
    constexpr int GROUP = 16 / sizeof(T);
    const T *x = (const T *)p.kept.data[0];
    const int64_t row_stride = p.reduced.strides[0][0], groups = (p.n_out + GROUP - 1) / GROUP;
    for (int64_t u = tg_global_index(); u < groups * p.chunks; u += tg_global_stride()) {
        int64_t chunk = u / groups, first = (u - chunk * groups) * GROUP, begin = chunk * p.chunk_length;
        int64_t end = begin + p.chunk_length < p.count ? begin + p.chunk_length : p.count;
        int width = p.n_out - first < GROUP ? (int)(p.n_out - first) : GROUP;
        double sum[GROUP] = {};
        if (width == GROUP) {
#pragma unroll 8
            for (int64_t r = begin; r < end; r++) {
                uint4 raw = __ldg((const uint4 *)(x + r * row_stride + first));
                const T *v = (const T *)&raw;
#pragma unroll
                for (int i = 0; i < GROUP; i++) sum[i] += tg_to_double(v[i]);
            }
        } else {
            for (int64_t r = begin; r < end; r++)
#pragma unroll
                for (int i = 0; i < GROUP; i++)
                    if (i < width) sum[i] += tg_to_double(x[r * row_stride + first + i]);
        }
#pragma unroll
        for (int i = 0; i < GROUP; i++)
            if (i < width) emit(p, chunk * p.n_out + first + i, sum[i], scale, partial, out, out_dtype);
    }
}

// Second pass: out[o] = scale · Σ_chunk partial[chunk · n_out + o], one warp per output.
__global__ void sum_partials(const double *partial, int64_t n_out, int64_t chunks, double scale, char *out,
                             int out_dtype)
{
    const int64_t warps = tg_global_stride() / WARP;
    const int lane = (int)(threadIdx.x % WARP);
    for (int64_t o = tg_global_index() / WARP; o < n_out; o += warps) {
        double sum = 0.0;
        for (int64_t c = lane; c < chunks; c += WARP) sum += partial[c * n_out + o];
        sum = warp_sum(sum);
        if (lane == 0) tg_store_raw(out, out_dtype, o, scale * sum);
    }
}

// ---- host side ------------------------------------------------------------------------------

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static int64_t smallest_stride(const tg_strided<1> &s)
{
    int64_t best = INT64_MAX;
    for (int d = 0; d < s.ndim; d++) {
        int64_t stride = s.strides[0][d] < 0 ? -s.strides[0][d] : s.strides[0][d];
        if (s.shape[d] > 1 && stride < best) best = stride;
    }
    return best;
}

// x's dimensions split into kept and reduced ones (axis, or all for TG_AXIS_ALL).
static sum_plan plan_sum(const tg_tensor *x, int axis)
{
    int64_t kept_shape[TG_MAX_DIMS], kept_strides[TG_MAX_DIMS], red_shape[TG_MAX_DIMS], red_strides[TG_MAX_DIMS];
    int n_kept = 0, n_red = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (axis == TG_AXIS_ALL || d == axis) {
            red_shape[n_red] = x->shape[d];
            red_strides[n_red++] = x->strides[d];
        } else {
            kept_shape[n_kept] = x->shape[d];
            kept_strides[n_kept++] = x->strides[d];
        }
    }
    const int64_t *kept_s[1] = {kept_strides}, *red_s[1] = {red_strides};
    sum_plan p = {};
    p.kept = tg_strided_plan<1>(n_kept, kept_shape, kept_s);
    p.reduced = tg_strided_plan<1>(n_red, red_shape, red_s);
    tg_strided_bind(p.kept, 0, x);
    tg_strided_bind(p.reduced, 0, x);
    tg_shape_numel(n_kept, kept_shape, &p.n_out);
    tg_shape_numel(n_red, red_shape, &p.count);
    return p;
}

// Chunks so that about `target` units share the work, none shorter than min_length.
static void choose_chunks(sum_plan &p, int64_t target, int64_t min_length)
{
    int64_t chunks = 1;
    if (p.n_out < target && p.count > min_length) {
        chunks = ceil_div(p.count, min_length);
        if (chunks > ceil_div(target, p.n_out)) chunks = ceil_div(target, p.n_out);
    }
    p.chunk_length = p.count > 0 ? ceil_div(p.count, chunks) : 0;
    p.chunks = p.count > 0 ? ceil_div(p.count, p.chunk_length) : 1; // no empty chunk
}

// Launches sum_columns_by_group when x's kept elements are one contiguous run per
// reduced index and every row starts on a 16-byte boundary; false when they are not.
static bool launch_columns_by_group(const sum_plan &p, tg_dtype dtype, double scale, double *partial, tg_tensor *out)
{
    size_t size = tg_dtype_size(dtype);
    int64_t row_stride = p.reduced.strides[0][0];
    bool fits = p.kept.ndim == 1 && p.kept.strides[0][0] == 1 && p.reduced.ndim == 1 && row_stride > 0 &&
                (row_stride * (int64_t)size) % 16 == 0 && (uintptr_t)p.kept.data[0] % 16 == 0;
    if (!fits) return false;
    int64_t groups = (p.n_out + (int64_t)(16 / size) - 1) / (int64_t)(16 / size), units = groups * p.chunks;
    char *o = tg_bytes(out);
    int od = (int)out->dtype;
    switch (dtype) {
    case TG_F32: sum_columns_by_group<float><<<tg_blocks_for(units), TG_THREADS>>>(p, scale, partial, o, od); break;
    case TG_F64: sum_columns_by_group<double><<<tg_blocks_for(units), TG_THREADS>>>(p, scale, partial, o, od); break;
    case TG_BF16:
        sum_columns_by_group<__nv_bfloat16><<<tg_blocks_for(units), TG_THREADS>>>(p, scale, partial, o, od);
        break;
    case TG_F16: sum_columns_by_group<__half><<<tg_blocks_for(units), TG_THREADS>>>(p, scale, partial, o, od); break;
    default: return false;
    }
    return true;
}

extern "C" tg_status tg_cuda_sum_axis(const tg_tensor *x, int axis, double scale, tg_tensor *out)
{
    sum_plan p = plan_sum(x, axis);
    if (p.n_out == 0) return TG_OK;
    const char *op = axis == TG_AXIS_ALL ? "tg_sum_all" : "tg_sum";
    // Warps when the summed elements are adjacent (or outputs too few to keep threads
    // busy, unless the outputs are the adjacent ones); threads otherwise.
    bool by_warp =
        p.count >= WARP && (smallest_stride(p.reduced) == 1 || (smallest_stride(p.kept) != 1 && p.n_out < 8192));
    if (by_warp)
        choose_chunks(p, 8192, 1024);
    else
        choose_chunks(p, (int64_t)1 << 18, 256);
    double *partial = NULL;
    size_t partial_bytes = p.chunks > 1 ? (size_t)(p.n_out * p.chunks) * sizeof(double) : 0;
    if (partial_bytes) {
        tg_status status = tg_device_alloc(TG_DEVICE_CUDA, partial_bytes, (void **)&partial);
        if (status != TG_OK) return status;
    }
    int64_t units = p.n_out * p.chunks;
    if (by_warp)
        sum_by_warp<<<tg_blocks_for(units * WARP), TG_THREADS>>>(p, scale, partial, tg_bytes(out), (int)out->dtype);
    else if (!launch_columns_by_group(p, x->dtype, scale, partial, out))
        sum_by_thread<<<tg_blocks_for(units), TG_THREADS>>>(p, scale, partial, tg_bytes(out), (int)out->dtype);
    tg_status status = tg_cuda_check_launch(op);
    if (status == TG_OK && partial) {
        sum_partials<<<tg_blocks_for(p.n_out * WARP), TG_THREADS>>>(partial, p.n_out, p.chunks, scale, tg_bytes(out),
                                                                    (int)out->dtype);
        status = tg_cuda_check_launch(op);
    }
    tg_device_free(TG_DEVICE_CUDA, partial, partial_bytes); // queued work finishes before reuse
    return status;
}

// dx[i] = scale · dy[j(i)]: plan operands (dx, dy), dy's strides 0 along the axis.
__global__ void broadcast_back(tg_strided<2> plan, double scale, int64_t n)
{
    for (int64_t i = tg_global_index(); i < n; i += tg_global_stride()) {
        int64_t at[2];
        tg_strided_offsets(plan, i, at);
        tg_store_raw(plan.data[0], plan.dtype[0], at[0], scale * tg_load_raw(plan.data[1], plan.dtype[1], at[1]));
    }
}

extern "C" tg_status tg_cuda_sum_axis_bwd(const tg_tensor *dy, int axis, double scale, tg_tensor *dx)
{
    int64_t n = tg_numel(dx);
    if (n == 0) return TG_OK;
    // dy's strides in dx's index space: dy's dimensions are dx's without the axis (a
    // 1-D x gives a dy of shape (1), and TG_AXIS_ALL a single element: all strides 0).
    int64_t dy_strides[TG_MAX_DIMS] = {0};
    for (int d = 0, k = 0; axis != TG_AXIS_ALL && d < dx->ndim; d++)
        if (d != axis && k < dy->ndim && k < dx->ndim - 1) dy_strides[d] = dy->strides[k++];
    const int64_t *strides[2] = {dx->strides, dy_strides};
    tg_strided<2> plan = tg_strided_plan<2>(dx->ndim, dx->shape, strides);
    tg_strided_bind(plan, 0, dx);
    tg_strided_bind(plan, 1, dy);
    broadcast_back<<<tg_blocks_for(n), TG_THREADS>>>(plan, scale, n);
    return tg_cuda_check_launch(axis == TG_AXIS_ALL ? "tg_sum_all" : "tg_sum");
}
