// kernels/cuda/softmax.cu: softmax and log-softmax over the last dimension on the GPU,
// one block per row (any strides), with the row maximum subtracted before exp and the
// row sums formed as block reductions in float (double for f64).
#include "kernels/cuda/rows.cuh"
#include "kernels/softmax.h"

// y = exp(x − lse) or, with log, y = x − lse, formed as (x − max) − log_sum.
template <typename Acc> __global__ void softmax_fwd_kernel(tg_cuda_view x, tg_cuda_view y, int64_t rows, bool log)
{
    __shared__ Acc shared[33];
    int64_t n = x.shape[x.ndim - 1], xs = row_step(x), ys = row_step(y);
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        int64_t xo = row_start(x, row), yo = row_start(y, row);
        row_lse<Acc> lse = row_logsumexp<Acc>(x, xo, n, shared);
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
            Acc log_p = (row_load<Acc>(x, xo + j * xs) - lse.max) - lse.log_sum;
            row_store(y, yo + j * ys, log ? log_p : tg_exp(log_p));
        }
    }
}

// From the output y: softmax dx = y·(dy − Σ dy·y); log-softmax dx = dy − exp(y)·Σ dy.
template <typename Acc>
__global__ void softmax_bwd_kernel(tg_cuda_view y, tg_cuda_view dy, tg_cuda_view dx, int64_t rows, bool log)
{
    __shared__ Acc shared[33];
    int64_t n = y.shape[y.ndim - 1], ys = row_step(y), gs = row_step(dy), dxs = row_step(dx);
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        int64_t yo = row_start(y, row), go = row_start(dy, row), dxo = row_start(dx, row);
        Acc sum = 0;
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
            Acc g = row_load<Acc>(dy, go + j * gs);
            sum += log ? g : g * row_load<Acc>(y, yo + j * ys);
        }
        sum = block_sum(sum, shared);
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
            Acc yv = row_load<Acc>(y, yo + j * ys), g = row_load<Acc>(dy, go + j * gs);
            row_store(dx, dxo + j * dxs, log ? g - tg_exp(yv) * sum : yv * (g - sum));
        }
    }
}

static int64_t row_count(const tg_tensor *t)
{
    int64_t n = t->shape[t->ndim - 1];
    return n > 0 ? tg_numel(t) / n : 0;
}

extern "C" tg_status tg_cuda_softmax_fwd(const tg_tensor *x, bool log, tg_tensor *y)
{
    int64_t rows = row_count(x);
    if (rows == 0) return TG_OK;
    unsigned threads = row_threads(x->shape[x->ndim - 1]), blocks = row_blocks(rows);
    if (x->dtype == TG_F64)
        softmax_fwd_kernel<double><<<blocks, threads>>>(tg_view_of(x), tg_view_of(y), rows, log);
    else
        softmax_fwd_kernel<float><<<blocks, threads>>>(tg_view_of(x), tg_view_of(y), rows, log);
    return tg_cuda_check_launch(log ? "tg_log_softmax" : "tg_softmax");
}

extern "C" tg_status tg_cuda_softmax_bwd(const tg_tensor *y, const tg_tensor *dy, bool log, tg_tensor *dx)
{
    int64_t rows = row_count(y);
    if (rows == 0) return TG_OK;
    unsigned threads = row_threads(y->shape[y->ndim - 1]), blocks = row_blocks(rows);
    if (y->dtype == TG_F64)
        softmax_bwd_kernel<double><<<blocks, threads>>>(tg_view_of(y), tg_view_of(dy), tg_view_of(dx), rows, log);
    else
        softmax_bwd_kernel<float><<<blocks, threads>>>(tg_view_of(y), tg_view_of(dy), tg_view_of(dx), rows, log);
    return tg_cuda_check_launch(log ? "tg_log_softmax backward" : "tg_softmax backward");
}
