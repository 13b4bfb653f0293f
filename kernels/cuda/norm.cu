// kernels/cuda/norm.cu: RMS normalisation on the GPU (a row is x's last dimension; any
// strides), with an optional residual add before it (the sum written out, rounded to its
// dtype, and normalised as stored; its gradient added to dx in the backward). Contiguous
// f32, bf16 and f16 rows of up to 1024 take a warp per row both ways (the section "contiguous
// rows" below); otherwise the forward takes a warp per row up to 512 elements and a block per
// row beyond, the backward a block per row. Row statistics are reductions in a fixed order in
// float (double for f64). The weight gradient is summed without atomics: each block adds
// its rows' terms into its own row of a partial-sum matrix, in the order it meets them,
// and a second kernel adds the blocks' partial sums column by column in a fixed order,
// so two runs on one device give the same bits.
#include "kernels/cuda/rows.cuh"
#include "kernels/norm.h"

// r = 1 / sqrt(mean(x²) + eps) over the row of n elements starting at `start`.
template <typename Acc>
__device__ Acc inverse_rms(const tg_cuda_view &x, int64_t start, int64_t n, Acc eps, Acc *shared)
{
    int64_t step = row_step(x);
    Acc sum_sq = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        Acc v = row_load<Acc>(x, start + j * step);
        sum_sq += v * v;
    }
    return (Acc)1 / tg_sqrt(block_sum(sum_sq, shared) / (Acc)n + eps);
}

// The fused add's inputs: x + residual goes to sum, which the norm then reads (each
// thread reads back the elements it wrote, so no barrier is needed).
struct residual_add {
    tg_cuda_view residual, sum;
    bool on;
};

// sum = x + residual over one row's elements first, first + stride, ...
template <typename Acc>
__device__ void add_row(const tg_cuda_view &x, int64_t row, const residual_add &add, int64_t n, int64_t first,
                        int64_t stride)
{
    int64_t xo = row_start(x, row), ro = row_start(add.residual, row), so = row_start(add.sum, row);
    int64_t xs = row_step(x), rs = row_step(add.residual), ss = row_step(add.sum);
    for (int64_t j = first; j < n; j += stride)
        row_store(add.sum, so + j * ss, row_load<Acc>(x, xo + j * xs) + row_load<Acc>(add.residual, ro + j * rs));
}

// y = s · r · w, row by row, with s = x or the fused add's sum.
template <typename Acc>
__global__ void rmsnorm_fwd_kernel(tg_cuda_view x, residual_add add, tg_cuda_view w, tg_cuda_view y, int64_t rows,
                                   Acc eps)
{
    __shared__ Acc shared[33];
    const tg_cuda_view &s = add.on ? add.sum : x;
    int64_t n = x.shape[x.ndim - 1], ss = row_step(s), ws = w.strides[0], ys = row_step(y);
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        if (add.on) add_row<Acc>(x, row, add, n, threadIdx.x, blockDim.x);
        int64_t so = row_start(s, row), yo = row_start(y, row);
        Acc r = inverse_rms(s, so, n, eps, shared);
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
            row_store(y, yo + j * ys, row_load<Acc>(s, so + j * ss) * r * row_load<Acc>(w, j * ws));
    }
}

// The same with one warp per row, for rows of up to kWarpRowMax elements (the d_model of a
// small model): a block per row would spend its time on barriers and block launches. The
// row's sum of squares is a warp reduction in a fixed order.
constexpr int64_t kWarpRowMax = 512;

template <typename Acc>
__global__ void rmsnorm_fwd_warp_kernel(tg_cuda_view x, residual_add add, tg_cuda_view w, tg_cuda_view y, int64_t rows,
                                        Acc eps)
{
    const int lane = threadIdx.x & 31;
    const int64_t first = tg_global_index() >> 5, warps = tg_global_stride() >> 5;
    const tg_cuda_view &s = add.on ? add.sum : x;
    int64_t n = x.shape[x.ndim - 1], ss = row_step(s), ws = w.strides[0], ys = row_step(y);
    for (int64_t row = first; row < rows; row += warps) { // the same row for the whole warp
        if (add.on) add_row<Acc>(x, row, add, n, lane, 32);
        int64_t so = row_start(s, row), yo = row_start(y, row);
        Acc sum_sq = 0;
        for (int64_t j = lane; j < n; j += 32) {
            Acc v = row_load<Acc>(s, so + j * ss);
            sum_sq += v * v;
        }
        Acc r = (Acc)1 / tg_sqrt(warp_reduce<sum_op>(sum_sq) / (Acc)n + eps);
        for (int64_t j = lane; j < n; j += 32)
            row_store(y, yo + j * ys, row_load<Acc>(s, so + j * ss) * r * row_load<Acc>(w, j * ws));
    }
}

// Per row, with g = dy·w: dx = r·(g − x·r²·mean(g·x)) (+ dsum when add_dsum) when want_dx,
// and, when dw_partial
// is given, the block's sum of dy_j·x_j·r over its rows into dw_partial[block][j]. Thread
// t owns columns t, t + blockDim.x, ...: it sums the first kOwnedColumns of them in
// registers and writes them once at the end, and adds any further ones (rows of more
// than kOwnedColumns·blockDim.x) straight into its partial row; no two threads share a
// column. dx removes g's component along x; where g lies almost along x (always, for rows
// of one element, where dx = r·g·eps/(x² + eps)) the result is a small difference of
// float terms and keeps fewer correct digits than the CPU's double, about 1e-7·x²/eps
// relative.
constexpr int kOwnedColumns = 4;

template <typename Acc>
__global__ void rmsnorm_bwd_kernel(tg_cuda_view x, tg_cuda_view w, tg_cuda_view dy, tg_cuda_view dsum, bool add_dsum,
                                   tg_cuda_view dx, bool want_dx, double *dw_partial, int64_t rows, Acc eps)
{
    __shared__ Acc shared[33];
    int64_t n = x.shape[x.ndim - 1], xs = row_step(x), ws = w.strides[0], gs = row_step(dy), dxs = row_step(dx);
    int64_t dss = row_step(dsum);
    double *dw_row = dw_partial ? dw_partial + (int64_t)blockIdx.x * n : nullptr;
    double dw_owned[kOwnedColumns] = {};
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        int64_t xo = row_start(x, row), go = row_start(dy, row);
        Acc r = inverse_rms(x, xo, n, eps, shared);
        Acc sum_gx = 0;
#pragma unroll
        for (int k = 0; k < kOwnedColumns; k++) { // constant k: dw_owned stays in registers
            int64_t j = threadIdx.x + (int64_t)k * blockDim.x;
            if (j >= n) break;
            Acc xv = row_load<Acc>(x, xo + j * xs), dyv = row_load<Acc>(dy, go + j * gs);
            sum_gx += dyv * row_load<Acc>(w, j * ws) * xv;
            dw_owned[k] += (double)(dyv * xv * r);
        }
        for (int64_t j = threadIdx.x + (int64_t)kOwnedColumns * blockDim.x; j < n; j += blockDim.x) {
            Acc xv = row_load<Acc>(x, xo + j * xs), dyv = row_load<Acc>(dy, go + j * gs);
            sum_gx += dyv * row_load<Acc>(w, j * ws) * xv;
            if (dw_row) dw_row[j] += (double)(dyv * xv * r);
        }
        if (!want_dx) continue; // the same for the whole block: no thread skips a barrier alone
        Acc c = r * r * block_sum(sum_gx, shared) / (Acc)n;
        int64_t dxo = row_start(dx, row), dso = row_start(dsum, row);
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
            Acc g = row_load<Acc>(dy, go + j * gs) * row_load<Acc>(w, j * ws);
            Acc v = r * (g - row_load<Acc>(x, xo + j * xs) * c);
            if (add_dsum) v += row_load<Acc>(dsum, dso + j * dss);
            row_store(dx, dxo + j * dxs, v);
        }
    }
    if (!dw_row) return;
#pragma unroll
    for (int k = 0; k < kOwnedColumns; k++) {
        int64_t j = threadIdx.x + (int64_t)k * blockDim.x;
        if (j < n) dw_row[j] += dw_owned[k];
    }
}

// out[j] = Σ_b partial[b][j] over the n_parts partial rows, one warp per column j: lane l
// adds the rows b ≡ l (mod 32) in order, then the lanes' sums meet in a fixed tree.
__global__ void sum_partials_kernel(const double *partial, int64_t n_parts, int64_t n, tg_cuda_view out)
{
    const int lane = threadIdx.x & 31;
    for (int64_t j = tg_global_index() >> 5; j < n; j += tg_global_stride() >> 5) {
        double sum = 0;
        for (int64_t b = lane; b < n_parts; b += 32) sum += partial[b * n + j];
        sum = warp_reduce<sum_op>(sum);
        if (lane == 0) tg_store_any(out, j * out.strides[0], sum);
    }
}

// ---- contiguous rows of f32, bf16 or f16: the training step's case ------------------------------
// One warp per row, typed loads and stores (no per-element dtype switch), float math. Lane l
// takes the row's groups of W values l, l + 32, l + 64, ...: W values of 16 bytes (one
// vector access) when the row length is a multiple of them and the tensors start 16-byte
// aligned, else W = 1. The backward keeps a row's x and dy in registers (kGroups groups per
// lane: rows of up to 32·kGroups·W), and each warp sums its rows' dw terms in registers; a
// block adds its warps' sums in a fixed order into its own row of the partial-sum matrix,
// which sum_partials_kernel reduces.
constexpr int64_t kFastRowMax = 1024;
constexpr int kFastWarps = 8; // warps per block

// The W values at p as floats (p 16-byte aligned when W > 1), and back.
template <typename T, int W> __device__ inline void load_group(const T *p, float (&v)[W])
{
    if constexpr (W == 1) {
        v[0] = tg_to_float(*p);
    } else {
        static_assert(W * sizeof(T) == 16, "a group of W > 1 values is one 16-byte vector");
        const uint4 q = *(const uint4 *)p;
        const T *e = reinterpret_cast<const T *>(&q);
#pragma unroll
        for (int k = 0; k < W; k++) v[k] = tg_to_float(e[k]);
    }
}

template <typename T, int W> __device__ inline void store_group(T *p, const float (&v)[W])
{
    if constexpr (W == 1) {
        *p = tg_from_float<T>(v[0]);
    } else {
        uint4 q;
        T *e = reinterpret_cast<T *>(&q);
#pragma unroll
        for (int k = 0; k < W; k++) e[k] = tg_from_float<T>(v[k]);
        *(uint4 *)p = q;
    }
}

template <typename T, int W>
__global__ void rmsnorm_fwd_rows_kernel(const T *x, const T *residual, T *sum, const T *w, T *y, int64_t rows,
                                        int64_t n, float eps)
{
    const int lane = threadIdx.x & 31;
    const int64_t groups = n / W;
    for (int64_t row = tg_global_index() >> 5; row < rows; row += tg_global_stride() >> 5) {
        const T *s = x + row * n;
        if (residual) { // sum = x + residual, rounded, then normalised as stored
            T *out = sum + row * n;
            for (int64_t g = lane; g < groups; g += 32) {
                float a[W], b[W];
                load_group<T, W>(s + g * W, a);
                load_group<T, W>(residual + row * n + g * W, b);
#pragma unroll
                for (int k = 0; k < W; k++) a[k] += b[k];
                store_group<T, W>(out + g * W, a);
            }
            s = out;
        }
        float sum_sq = 0;
        for (int64_t g = lane; g < groups; g += 32) {
            float v[W];
            load_group<T, W>(s + g * W, v);
#pragma unroll
            for (int k = 0; k < W; k++) sum_sq += v[k] * v[k];
        }
        const float r = 1.0f / sqrtf(warp_reduce<sum_op>(sum_sq) / (float)n + eps);
        for (int64_t g = lane; g < groups; g += 32) {
            float v[W], wv[W];
            load_group<T, W>(s + g * W, v);
            load_group<T, W>(w + g * W, wv);
#pragma unroll
            for (int k = 0; k < W; k++) v[k] = v[k] * r * wv[k];
            store_group<T, W>(y + row * n + g * W, v);
        }
    }
}

template <typename T, int W, int kGroups>
__global__ void rmsnorm_bwd_rows_kernel(const T *x, const T *w, const T *dy, const T *dsum, T *dx, double *dw_partial,
                                        int64_t rows, int64_t n, float eps)
{
    __shared__ float warp_dw[kFastWarps][32 * kGroups * W];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t groups = n / W;
    float dw[kGroups][W] = {}, xv[kGroups][W], gv[kGroups][W];
    for (int64_t row = tg_global_index() >> 5; row < rows; row += tg_global_stride() >> 5) {
        float sum_sq = 0, sum_gx = 0;
#pragma unroll
        for (int k = 0; k < kGroups; k++) {
            const int64_t g = lane + 32 * k;
            if (g >= groups) break;
            float wv[W]; // w is read per row (from cache): kept, it would cost registers
            load_group<T, W>(x + row * n + g * W, xv[k]);
            load_group<T, W>(dy + row * n + g * W, gv[k]);
            load_group<T, W>(w + g * W, wv);
#pragma unroll
            for (int e = 0; e < W; e++) {
                sum_sq += xv[k][e] * xv[k][e];
                sum_gx += gv[k][e] * wv[e] * xv[k][e];
            }
        }
        const float r = 1.0f / sqrtf(warp_reduce<sum_op>(sum_sq) / (float)n + eps);
        const float c = r * r * warp_reduce<sum_op>(sum_gx) / (float)n;
#pragma unroll
        for (int k = 0; k < kGroups; k++) {
            const int64_t g = lane + 32 * k;
            if (g >= groups) break;
            float v[W], ds[W], wv[W];
            load_group<T, W>(w + g * W, wv);
#pragma unroll
            for (int e = 0; e < W; e++) {
                dw[k][e] += gv[k][e] * xv[k][e] * r;
                v[e] = r * (gv[k][e] * wv[e] - xv[k][e] * c);
            }
            if (!dx) continue;
            if (dsum) {
                load_group<T, W>(dsum + row * n + g * W, ds);
#pragma unroll
                for (int e = 0; e < W; e++) v[e] += ds[e];
            }
            store_group<T, W>(dx + row * n + g * W, v);
        }
    }
    if (!dw_partial) return;
#pragma unroll
    for (int k = 0; k < kGroups; k++)
#pragma unroll
        for (int e = 0; e < W; e++) warp_dw[warp][(lane + 32 * k) * W + e] = dw[k][e];
    __syncthreads();
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        double total = 0;
        for (int v = 0; v < kFastWarps; v++) total += (double)warp_dw[v][j];
        dw_partial[(int64_t)blockIdx.x * n + j] = total;
    }
}

// Whether the fast kernels take these tensors: f32, bf16 or f16, every row contiguous and
// the rows packed, rows of at most kFastRowMax.
static bool fast_rows(const tg_tensor *x, const tg_tensor *const *others, int count)
{
    if (x->dtype == TG_F64 || x->shape[x->ndim - 1] > kFastRowMax || !tg_is_contiguous(x)) return false;
    for (int i = 0; i < count; i++)
        if (others[i] && !tg_is_contiguous(others[i])) return false;
    return true;
}

// Whether the fast kernels may go in 16-byte groups: the row length a multiple of a group
// and every tensor 16-byte aligned (then so is every row).
static bool rows_in_vectors(const tg_tensor *x, const tg_tensor *const *others, int count)
{
    const int64_t n = x->shape[x->ndim - 1], per_vector = 16 / (int64_t)tg_dtype_size(x->dtype);
    if (n % per_vector || (uintptr_t)tg_view_of(x).data % 16) return false;
    for (int i = 0; i < count; i++)
        if (others[i] && (uintptr_t)tg_view_of(others[i]).data % 16) return false;
    return true;
}

template <typename T> static T *typed(const tg_tensor *t) { return t ? (T *)tg_view_of(t).data : nullptr; }

template <typename T>
static void launch_fwd_rows(const tg_tensor *x, const tg_tensor *residual, const tg_tensor *weight, double eps,
                            tg_tensor *y, tg_tensor *sum, int64_t rows, bool vectors)
{
    const int64_t n = x->shape[x->ndim - 1];
    const unsigned blocks = tg_blocks_for(rows * 32);
    if (vectors)
        rmsnorm_fwd_rows_kernel<T, 16 / sizeof(T)><<<blocks, TG_THREADS>>>(
            typed<T>(x), typed<T>(residual), typed<T>(sum), typed<T>(weight), typed<T>(y), rows, n, (float)eps);
    else
        rmsnorm_fwd_rows_kernel<T, 1><<<blocks, TG_THREADS>>>(typed<T>(x), typed<T>(residual), typed<T>(sum),
                                                              typed<T>(weight), typed<T>(y), rows, n, (float)eps);
}

template <typename T, int W, int kGroups>
static void launch_bwd_rows(const tg_tensor *x, const tg_tensor *weight, double eps, const tg_tensor *dy,
                            const tg_tensor *dsum, tg_tensor *dx, double *partial, unsigned blocks, int64_t rows)
{
    static_assert(32 * kGroups * W <= kFastRowMax, "more groups than the longest fast row needs");
    rmsnorm_bwd_rows_kernel<T, W, kGroups><<<blocks, 32 * kFastWarps>>>(typed<T>(x), typed<T>(weight), typed<T>(dy),
                                                                        typed<T>(dsum), typed<T>(dx), partial, rows,
                                                                        x->shape[x->ndim - 1], (float)eps);
}

// The backward with groups of W values and the fewest groups per lane that hold a row
// (among a few counts; 3, 6 and 24 fit d_model 768 in bf16, f32 and single values).
template <typename T, int W>
static void launch_bwd_rows_for(const tg_tensor *x, const tg_tensor *weight, double eps, const tg_tensor *dy,
                                const tg_tensor *dsum, tg_tensor *dx, double *partial, unsigned blocks, int64_t rows)
{
    const int64_t per_lane = (x->shape[x->ndim - 1] / W + 31) / 32;
#define TG_BWD_ROWS(K) return launch_bwd_rows<T, W, K>(x, weight, eps, dy, dsum, dx, partial, blocks, rows)
    if constexpr (W == 1) {
        if (per_lane <= 2) TG_BWD_ROWS(2);
        if (per_lane <= 4) TG_BWD_ROWS(4);
        if (per_lane <= 8) TG_BWD_ROWS(8);
        if (per_lane <= 16) TG_BWD_ROWS(16);
        if (per_lane <= 24) TG_BWD_ROWS(24);
        TG_BWD_ROWS(32);
    } else if constexpr (W == 4) {
        if (per_lane <= 1) TG_BWD_ROWS(1);
        if (per_lane <= 2) TG_BWD_ROWS(2);
        if (per_lane <= 4) TG_BWD_ROWS(4);
        if (per_lane <= 6) TG_BWD_ROWS(6);
        TG_BWD_ROWS(8);
    } else {
        if (per_lane <= 1) TG_BWD_ROWS(1);
        if (per_lane <= 2) TG_BWD_ROWS(2);
        if (per_lane <= 3) TG_BWD_ROWS(3);
        TG_BWD_ROWS(4);
    }
#undef TG_BWD_ROWS
}

template <typename T>
static void launch_bwd_rows_any(const tg_tensor *x, const tg_tensor *weight, double eps, const tg_tensor *dy,
                                const tg_tensor *dsum, tg_tensor *dx, double *partial, unsigned blocks, int64_t rows,
                                bool vectors)
{
    if (vectors)
        launch_bwd_rows_for<T, 16 / sizeof(T)>(x, weight, eps, dy, dsum, dx, partial, blocks, rows);
    else
        launch_bwd_rows_for<T, 1>(x, weight, eps, dy, dsum, dx, partial, blocks, rows);
}

static int64_t row_count(const tg_tensor *x)
{
    int64_t n = x->shape[x->ndim - 1];
    return n > 0 ? tg_numel(x) / n : 0;
}

extern "C" tg_status tg_cuda_rmsnorm_fwd(const tg_tensor *x, const tg_tensor *residual, const tg_tensor *weight,
                                         double eps, tg_tensor *y, tg_tensor *sum)
{
    int64_t rows = row_count(x);
    if (rows == 0) return TG_OK;
    const int64_t n = x->shape[x->ndim - 1];
    const char *op = residual ? "tg_add_rmsnorm" : "tg_rmsnorm";
    const tg_tensor *others[4] = {residual, weight, y, sum};
    if (fast_rows(x, others, 4)) {
        const bool vectors = rows_in_vectors(x, others, 4);
        if (x->dtype == TG_F32)
            launch_fwd_rows<float>(x, residual, weight, eps, y, sum, rows, vectors);
        else if (x->dtype == TG_BF16)
            launch_fwd_rows<__nv_bfloat16>(x, residual, weight, eps, y, sum, rows, vectors);
        else
            launch_fwd_rows<__half>(x, residual, weight, eps, y, sum, rows, vectors);
        return tg_cuda_check_launch(op);
    }
    tg_cuda_view xv = tg_view_of(x), wv = tg_view_of(weight), yv = tg_view_of(y);
    // Without the add, its views are x's, never read.
    residual_add add = {tg_view_of(residual ? residual : x), tg_view_of(residual ? sum : x), residual != NULL};
    if (n <= kWarpRowMax) {
        unsigned blocks = tg_blocks_for(rows * 32);
        if (x->dtype == TG_F64)
            rmsnorm_fwd_warp_kernel<double><<<blocks, TG_THREADS>>>(xv, add, wv, yv, rows, eps);
        else
            rmsnorm_fwd_warp_kernel<float><<<blocks, TG_THREADS>>>(xv, add, wv, yv, rows, (float)eps);
        return tg_cuda_check_launch(op);
    }
    unsigned threads = row_threads(n), blocks = row_blocks(rows);
    if (x->dtype == TG_F64)
        rmsnorm_fwd_kernel<double><<<blocks, threads>>>(xv, add, wv, yv, rows, eps);
    else
        rmsnorm_fwd_kernel<float><<<blocks, threads>>>(xv, add, wv, yv, rows, (float)eps);
    return tg_cuda_check_launch(op);
}

// The partial-sum matrix of dw: one row of n doubles per block (zeroed when asked).
static tg_status alloc_partials(unsigned blocks, int64_t n, bool zeroed, double **partial, size_t *bytes_out)
{
    int64_t count, bytes;
    if (tg_mul_overflows((int64_t)blocks, n, &count) || tg_mul_overflows(count, (int64_t)sizeof(double), &bytes))
        return tg_set_error(TG_ERR_OVERFLOW, "tg_rmsnorm backward: %u x %lld partial sums are too many", blocks,
                            (long long)n);
    *bytes_out = (size_t)bytes;
    tg_status status = tg_device_alloc(TG_DEVICE_CUDA, *bytes_out, (void **)partial);
    if (status == TG_OK && zeroed) status = tg_device_zero(TG_DEVICE_CUDA, *partial, *bytes_out);
    if (status != TG_OK) tg_device_free(TG_DEVICE_CUDA, *partial, *bytes_out);
    return status;
}

extern "C" tg_status tg_cuda_rmsnorm_bwd(const tg_tensor *x, const tg_tensor *weight, double eps, const tg_tensor *dy,
                                         const tg_tensor *dsum, tg_tensor *dx, tg_tensor *dw)
{
    int64_t rows = row_count(x), n = x->shape[x->ndim - 1];
    if (rows == 0) return dw ? tg_cuda_fill(dw, 0.0) : TG_OK; // a sum over no rows
    const tg_tensor *others[4] = {weight, dy, dsum, dx};
    const bool fast = fast_rows(x, others, 4);
    // One partial row of dw per block, so the blocks loop over many rows: as many blocks as
    // fill the device. The count depends only on the row length and the device, so the
    // order of the sums is the same from run to run.
    unsigned threads = fast ? 32 * kFastWarps : row_threads(n), blocks;
    if (fast) {
        const int64_t wanted = (rows + kFastWarps - 1) / kFastWarps, cap = 4 * (int64_t)tg_cuda_multiprocessors();
        blocks = (unsigned)(wanted < cap ? wanted : cap);
    } else {
        const int64_t cap = (int64_t)tg_cuda_multiprocessors() * (2048 / threads);
        blocks = row_blocks(rows);
        if (dw && blocks > cap) blocks = (unsigned)cap;
    }
    double *partial = NULL;
    size_t partial_bytes = 0;
    if (dw) { // the fast kernel writes every entry of its row; the other adds into zeros
        tg_status status = alloc_partials(blocks, n, !fast, &partial, &partial_bytes);
        if (status != TG_OK) return status;
    }
    const bool vectors = fast && rows_in_vectors(x, others, 4);
    if (fast && x->dtype == TG_F32)
        launch_bwd_rows_any<float>(x, weight, eps, dy, dsum, dx, partial, blocks, rows, vectors);
    else if (fast && x->dtype == TG_BF16)
        launch_bwd_rows_any<__nv_bfloat16>(x, weight, eps, dy, dsum, dx, partial, blocks, rows, vectors);
    else if (fast)
        launch_bwd_rows_any<__half>(x, weight, eps, dy, dsum, dx, partial, blocks, rows, vectors);
    else {
        // Without dx its view is x's, never written (want_dx is false); without dsum, dy's, never read.
        tg_cuda_view xv = tg_view_of(x), wv = tg_view_of(weight), gv = tg_view_of(dy), dxv = tg_view_of(dx ? dx : x);
        tg_cuda_view dsv = tg_view_of(dsum ? dsum : dy);
        if (x->dtype == TG_F64)
            rmsnorm_bwd_kernel<double>
                <<<blocks, threads>>>(xv, wv, gv, dsv, dsum != NULL, dxv, dx != NULL, partial, rows, eps);
        else
            rmsnorm_bwd_kernel<float>
                <<<blocks, threads>>>(xv, wv, gv, dsv, dsum != NULL, dxv, dx != NULL, partial, rows, (float)eps);
    }
    tg_status status = tg_cuda_check_launch("tg_rmsnorm backward");
    if (status == TG_OK && dw) {
        sum_partials_kernel<<<tg_blocks_for(32 * n), TG_THREADS>>>(partial, (int64_t)blocks, n, tg_view_of(dw));
        status = tg_cuda_check_launch("tg_rmsnorm backward");
    }
    tg_device_free(TG_DEVICE_CUDA, partial, partial_bytes); // queued work finishes first: one stream
    return status;
}
