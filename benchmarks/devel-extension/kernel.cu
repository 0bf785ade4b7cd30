#include <cstdint>
#include <cuda_runtime.h>

__global__ void add_one_kernel(const float* in, float* out, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] + 1.0f;
}

void add_one_launch(const float* in, float* out, int64_t n, cudaStream_t stream) {
    add_one_kernel<<<(n + 255) / 256, 256, 0, stream>>>(in, out, n);
}
