// kernels/cuda/conv1d/small_kernels.cu: the final states, the history's gradient and the sum of
// the backward's dw and dbias partials.
#include "kernels/cuda/conv1d/small_kernels.cuh"

namespace {
using namespace tg_conv1d;

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
            for (int k = 0; k < a.K; k++)
                z += (float)tg_load_raw(a.w, a.dtype, c * a.ws0 + (a.K - 1 - k) * a.ws1) * x_at<T>(a, b, c, t - k);
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
    // A few parts (32×768×1024 bf16 K = 4 has 4) take a thread per output, which measured
    // faster: a warp per output left 28 of its lanes idle.
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

} // namespace

namespace tg_conv1d {

// Threads sum_partials_kernel takes for C channels' KB + 1 outputs.
int64_t sum_partials_threads(int64_t parts, int64_t C, int KB) { return (parts <= kFewParts ? 1 : 32) * C * (KB + 1); }

template <typename T> auto final_states_kernel_instance() -> void (*)(conv_args, t3)
{
    return ::final_states_kernel<T>;
}
template auto final_states_kernel_instance<float>() -> void (*)(conv_args, t3);
template auto final_states_kernel_instance<__nv_bfloat16>() -> void (*)(conv_args, t3);
template auto final_states_kernel_instance<__half>() -> void (*)(conv_args, t3);

template <typename T> auto initial_grad_kernel_instance() -> void (*)(conv_args, t3)
{
    return ::initial_grad_kernel<T>;
}
template auto initial_grad_kernel_instance<float>() -> void (*)(conv_args, t3);
template auto initial_grad_kernel_instance<__nv_bfloat16>() -> void (*)(conv_args, t3);
template auto initial_grad_kernel_instance<__half>() -> void (*)(conv_args, t3);

auto sum_partials_kernel_instance() -> void (*)(const float *, int64_t, int64_t, weight_grads)
{
    return ::sum_partials_kernel;
}

} // namespace tg_conv1d
