// kernels/cuda/optim.cu: the optimizer updates and the gradient-norm helpers on the device.
//
// A step is two launches and never waits for the device: the first (with the norm's
// partial sums before it when clipping) works out the step's scalars on the device from
// the optimizer's counters (tg_optim_prepare), the second updates every parameter. The
// update reads its learning rates, gradient scale and bias corrections from the device
// scalars, and does nothing when the step is skipped.
//
// Update: one launch over the whole store. Block b takes ranges b, b + gridDim.x, ... of
// the group table (kernels/optim.h); a range is at most TG_OPTIM_CHUNK elements of one
// group, so each block reads its group's learning rate and decay once per range and its
// threads stride through the range's elements (coalesced). Maths in float for f32, bf16
// and f16 stores (with the f32 master for the last two), in double for f64.
//
// Sum of squares: the number of blocks and each block's slice depend on n alone; each
// thread sums its elements in double in index order, a block adds its threads' sums in a
// fixed tree, and one block adds the blocks' partial sums in a fixed tree. The same
// gradients give the same norm on every run; no atomics.
#include "kernels/optim.h"
#include "kernels/cuda/common.cuh"

// ---- the compute type ---------------------------------------------------------------------------

__device__ inline float widen(float x) { return x; }
__device__ inline float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ inline float widen(__half x) { return __half2float(x); }
__device__ inline double widen(double x) { return x; }

template <typename T> __device__ inline T narrow(float x) { return tg_from_float<T>(x); }
template <> __device__ inline double narrow<double>(float x) { return x; } // (the master path, never taken for f64)
template <typename T> __device__ inline T narrow(double x);
template <> __device__ inline double narrow<double>(double x) { return x; }

// The parameter's value: the master when there is one (bf16/f16 stores), else the store.
template <typename P, typename C> __device__ inline C load_param(const tg_optim_update &u, const P *param, int64_t i)
{
    return u.master ? (C)u.master[i] : (C)widen(param[i]);
}

template <typename P, typename C> __device__ inline void store_param(const tg_optim_update &u, P *param, int64_t i, C p)
{
    if (u.master) {
        u.master[i] = (float)p;
        param[i] = narrow<P>((float)p);
    } else {
        param[i] = narrow<P>(p);
    }
}

// ---- AdamW and SGD ------------------------------------------------------------------------------------
//
// Every multiply-add is written out as one fused operation (fused) or as a rounded product
// (product), never left to the compiler: it fuses a product with the add after it where it
// sees fit, and did so differently in different instantiations (the bf16 update fused the
// decay's product into the step's subtraction, the f32 one did not), so that a bf16 store's
// master could differ from an f32 store's parameters by an ulp, and then round to another
// bf16. Written out, every store dtype takes the same roundings.
__device__ inline float fused(float a, float b, float c) { return fmaf(a, b, c); }
__device__ inline double fused(double a, double b, double c) { return fma(a, b, c); }
__device__ inline float product(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double product(double a, double b) { return __dmul_rn(a, b); }

// p ← p·(1 − lr·wd); m ← β1·m + (1 − β1)·g; v ← β2·v + (1 − β2)·g²;
// p ← p − lr · (m / (1 − β1^t)) / (√(v / (1 − β2^t)) + eps)
template <typename P, typename C> __global__ void adamw_kernel(tg_optim_update u)
{
    const tg_optim_scalars *s = u.scalars;
    if (s->skip) return;
    P *param = (P *)u.param;
    const P *grad = (const P *)u.grad;
    C *m = (C *)u.state0, *v = (C *)u.state1;
    const C beta1 = (C)s->beta1, beta2 = (C)s->beta2, eps = (C)u.eps, scale = (C)s->grad_scale;
    const C bc1 = (C)s->bias_correction1, bc2 = (C)s->bias_correction2;
    for (int64_t r = blockIdx.x; r < u.n_ranges; r += gridDim.x) {
        const tg_optim_range range = u.ranges[r];
        const C lr = (C)s->lr[range.group];
        const C decay = (C)(1.0 - s->lr[range.group] * s->weight_decay[range.group]);
        for (int64_t i = range.begin + threadIdx.x; i < range.begin + range.length; i += blockDim.x) {
            const C g = product(scale, (C)widen(grad[i]));
            const C mi = fused(beta1, m[i], product(1 - beta1, g));
            const C vi = fused(beta2, v[i], product(product(1 - beta2, g), g));
            m[i] = mi;
            v[i] = vi;
            const C step = product(lr, mi / bc1) / (tg_sqrt(vi / bc2) + eps);
            store_param<P, C>(u, param, i, product(load_param<P, C>(u, param, i), decay) - step);
        }
    }
}

// g ← grad + wd·p; buf ← μ·buf + g; p ← p − lr·(nesterov ? g + μ·buf : buf) (buf = g when μ = 0)
template <typename P, typename C> __global__ void sgd_kernel(tg_optim_update u)
{
    const tg_optim_scalars *s = u.scalars;
    if (s->skip) return;
    P *param = (P *)u.param;
    const P *grad = (const P *)u.grad;
    C *buffer = (C *)u.state0;
    const C momentum = (C)u.momentum, scale = (C)s->grad_scale;
    for (int64_t r = blockIdx.x; r < u.n_ranges; r += gridDim.x) {
        const tg_optim_range range = u.ranges[r];
        const C lr = (C)s->lr[range.group], wd = (C)s->weight_decay[range.group];
        for (int64_t i = range.begin + threadIdx.x; i < range.begin + range.length; i += blockDim.x) {
            const C p = load_param<P, C>(u, param, i);
            C g = fused(scale, (C)widen(grad[i]), product(wd, p)), d = g;
            if (buffer) {
                const C b = fused(momentum, buffer[i], g);
                buffer[i] = b;
                d = u.nesterov ? fused(momentum, b, g) : b;
            }
            store_param<P, C>(u, param, i, fused(-lr, d, p));
        }
    }
}

static unsigned update_blocks(int64_t n_ranges) { return (unsigned)(n_ranges < 65536 ? n_ranges : 65536); }

template <template <typename, typename> class Launch> static tg_status by_dtype(const tg_optim_update *u)
{
    switch (u->param_dtype) {
    case TG_F32: return Launch<float, float>::run(*u);
    case TG_BF16: return Launch<__nv_bfloat16, float>::run(*u);
    case TG_F16: return Launch<__half, float>::run(*u);
    case TG_F64: return Launch<double, double>::run(*u);
    default: return tg_set_error(TG_ERR_DTYPE, "tg_optim_step: parameters of dtype %s", tg_dtype_name(u->param_dtype));
    }
}

template <typename P, typename C> struct adamw_launch {
    static tg_status run(const tg_optim_update &u)
    {
        adamw_kernel<P, C><<<update_blocks(u.n_ranges), TG_THREADS>>>(u);
        return tg_cuda_check_launch("tg_optim_step (adamw)");
    }
};

template <typename P, typename C> struct sgd_launch {
    static tg_status run(const tg_optim_update &u)
    {
        sgd_kernel<P, C><<<update_blocks(u.n_ranges), TG_THREADS>>>(u);
        return tg_cuda_check_launch("tg_optim_step (sgd)");
    }
};

extern "C" tg_status tg_cuda_adamw(const tg_optim_update *u) { return u->n_ranges ? by_dtype<adamw_launch>(u) : TG_OK; }

extern "C" tg_status tg_cuda_sgd(const tg_optim_update *u) { return u->n_ranges ? by_dtype<sgd_launch>(u) : TG_OK; }

// ---- sum of squares ------------------------------------------------------------------------------------------

#define NORM_MAX_BLOCKS TG_OPTIM_NORM_BLOCKS
#define NORM_PER_THREAD 16

// Adds the block's values in a fixed tree; thread 0 gets the total.
__device__ inline double block_sum(double value, double *shared)
{
    shared[threadIdx.x] = value;
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) shared[threadIdx.x] += shared[threadIdx.x + half];
        __syncthreads();
    }
    return shared[0];
}

__global__ void sum_squares_partial(const char *x, int dtype, int64_t n, int64_t slice, double *partial)
{
    __shared__ double shared[TG_THREADS];
    int64_t begin = blockIdx.x * slice, end = begin + slice < n ? begin + slice : n;
    double sum = 0.0;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
        double v = tg_load_raw(x, dtype, i);
        sum += v * v;
    }
    sum = block_sum(sum, shared);
    if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

__global__ void sum_partials(const double *partial, int blocks, double *out)
{
    __shared__ double shared[NORM_MAX_BLOCKS];
    double total = block_sum(threadIdx.x < (unsigned)blocks ? partial[threadIdx.x] : 0.0, shared);
    if (threadIdx.x == 0) *out = total;
}

// The blocks of the partial sums, and each block's slice: fixed by n alone.
static int64_t norm_blocks(int64_t n, int64_t *slice)
{
    int64_t per_block = (int64_t)TG_THREADS * NORM_PER_THREAD;
    int64_t blocks = (n + per_block - 1) / per_block;
    if (blocks > NORM_MAX_BLOCKS) blocks = NORM_MAX_BLOCKS;
    if (blocks < 1) blocks = 1;
    *slice = (n + blocks - 1) / blocks;
    return blocks;
}

extern "C" tg_status tg_cuda_sum_squares(const void *x, tg_dtype dtype, int64_t n, double *out)
{
    *out = 0.0;
    if (n == 0) return TG_OK;
    int64_t slice, blocks = norm_blocks(n, &slice);
    double *scratch = NULL; // blocks partial sums, then the total
    size_t bytes = (size_t)(blocks + 1) * sizeof(double);
    tg_status status = tg_device_alloc(TG_DEVICE_CUDA, bytes, (void **)&scratch);
    if (status != TG_OK) return status;
    sum_squares_partial<<<(unsigned)blocks, TG_THREADS>>>((const char *)x, (int)dtype, n, slice, scratch);
    status = tg_cuda_check_launch("sum of squares");
    if (status == TG_OK) {
        sum_partials<<<1, NORM_MAX_BLOCKS>>>(scratch, (int)blocks, scratch + blocks);
        status = tg_cuda_check_launch("sum of squares");
    }
    if (status == TG_OK) status = tg_cuda_memcpy(out, scratch + blocks, sizeof(double), TG_COPY_DEVICE_TO_HOST);
    tg_device_free(TG_DEVICE_CUDA, scratch, bytes);
    return status;
}

// ---- the step's scalars ----------------------------------------------------------------------------------

// Adds the partial sums (as sum_partials does) and prepares the step in thread 0.
__global__ void prepare_kernel(tg_optim_scalars *scalars, const double *partial, int blocks, int micro_batches,
                               bool clip, int n_groups, const tg_bad_input *bad)
{
    __shared__ double shared[NORM_MAX_BLOCKS];
    double total = clip ? block_sum(threadIdx.x < (unsigned)blocks ? partial[threadIdx.x] : 0.0, shared) : 0.0;
    if (threadIdx.x == 0)
        tg_optim_prepare(scalars, total, micro_batches, clip, bad->kind != TG_BAD_INPUT_NONE, n_groups);
}

extern "C" tg_status tg_cuda_optim_prepare(tg_optim_scalars *scalars, const void *grad, tg_dtype dtype, int64_t n,
                                           int micro_batches, bool clip, int n_groups, double *partials)
{
    const tg_bad_input *bad = tg_cuda_bad_input_record();
    if (!bad) return TG_ERR_DEVICE;
    int64_t slice = 0, blocks = clip && n > 0 ? norm_blocks(n, &slice) : 0;
    if (blocks) {
        sum_squares_partial<<<(unsigned)blocks, TG_THREADS>>>((const char *)grad, (int)dtype, n, slice, partials);
        tg_status status = tg_cuda_check_launch("tg_optim_step (gradient norm)");
        if (status != TG_OK) return status;
    }
    prepare_kernel<<<1, NORM_MAX_BLOCKS>>>(scalars, partials, (int)blocks, micro_batches, clip, n_groups, bad);
    return tg_cuda_check_launch("tg_optim_step (scalars)");
}

// ---- scaling and conversion ------------------------------------------------------------------------------

__global__ void scale_kernel(char *x, int dtype, int64_t n, double scale)
{
    for (int64_t i = tg_global_index(); i < n; i += tg_global_stride())
        tg_store_raw(x, dtype, i, scale * tg_load_raw(x, dtype, i));
}

__global__ void convert_kernel(char *dst, int dst_dtype, const char *src, int src_dtype, int64_t n)
{
    for (int64_t i = tg_global_index(); i < n; i += tg_global_stride())
        tg_store_raw(dst, dst_dtype, i, tg_load_raw(src, src_dtype, i));
}

extern "C" tg_status tg_cuda_scale(void *x, tg_dtype dtype, int64_t n, double scale)
{
    if (n == 0) return TG_OK;
    scale_kernel<<<tg_blocks_for(n), TG_THREADS>>>((char *)x, (int)dtype, n, scale);
    return tg_cuda_check_launch("tg_params_clip_grad_norm");
}

extern "C" tg_status tg_cuda_convert(void *dst, tg_dtype dst_dtype, const void *src, tg_dtype src_dtype, int64_t n)
{
    if (n == 0) return TG_OK;
    convert_kernel<<<tg_blocks_for(n), TG_THREADS>>>((char *)dst, (int)dst_dtype, (const char *)src, (int)src_dtype, n);
    return tg_cuda_check_launch("tg_optim_sync_master");
}
