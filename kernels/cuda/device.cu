// kernels/cuda/device.cu: what the C core asks of the CUDA runtime. Only extern "C"
// entry points leave this directory.
#include <cuda_runtime.h>

extern "C" int tg_cuda_device_count(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError(); // clear the sticky "no device" error
        return 0;
    }
    return count;
}
