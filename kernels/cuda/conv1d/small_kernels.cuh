// kernels/cuda/conv1d/small_kernels.cuh: the small kernels of small_kernels.cu, for the launcher.
#ifndef TAPEGRAD_KERNELS_CUDA_CONV1D_SMALL_KERNELS_CUH
#define TAPEGRAD_KERNELS_CUDA_CONV1D_SMALL_KERNELS_CUH

#include "kernels/cuda/conv1d/common.cuh"

namespace tg_conv1d {

// The kernels of small_kernels.cu, as the launcher takes them. Each file keeps its kernels in
// an unnamed namespace (nvcc makes the launch stub of a kernel template internal to its file
// anyway), so X<…> here is a pointer to the kernel X<…> there, got from X_instance<…>(), which
// that file instantiates for each X<…> the launcher uses.
template <typename T> auto final_states_kernel_instance() -> void (*)(conv_args, t3);
template <typename T> inline const auto final_states_kernel = final_states_kernel_instance<T>();

template <typename T> auto initial_grad_kernel_instance() -> void (*)(conv_args, t3);
template <typename T> inline const auto initial_grad_kernel = initial_grad_kernel_instance<T>();

auto sum_partials_kernel_instance() -> void (*)(const float *, int64_t, int64_t, weight_grads);
inline const auto sum_partials_kernel = sum_partials_kernel_instance();

int64_t sum_partials_threads(int64_t parts, int64_t C, int KB);

} // namespace tg_conv1d

#endif
