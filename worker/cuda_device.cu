// The CUDA backend: cuBLAS for matrix products, small kernels for the rest,
// everything on one stream.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <new>
#include <string>

#include "worker/device.h"

namespace shardps::worker {
namespace {

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "CUDA error in %s: %s\n", what, cudaGetErrorString(e));
    std::abort();
  }
}
void CheckBlas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "cuBLAS error %d in %s\n", static_cast<int>(s), what);
    std::abort();
  }
}

__global__ void AddBiasKernel(float* x, const float* bias, int rows, int cols) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < static_cast<size_t>(rows) * cols) x[i] += bias[i % cols];
}
__global__ void ReluKernel(float* x, size_t n) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
__global__ void ReluBackwardKernel(float* g, const float* act, size_t n) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n && !(act[i] > 0.0f)) g[i] = 0.0f;
}
__global__ void ExtrapolateKernel(float* w, float* prev, size_t n, float a) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float t = w[i];
  w[i] = t + a * (t - prev[i]);
  prev[i] = t;
}
// One thread per row: classes are few (10 for Fashion-MNIST).
__global__ void SoftmaxXentKernel(const float* logits, const float* labels, int rows, int cols, float* grad,
                                  float* stats) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float* z = logits + static_cast<size_t>(r) * cols;
  float* g = grad + static_cast<size_t>(r) * cols;
  const int y = static_cast<int>(labels[r]);
  const float inv = 1.0f / rows;
  int arg = 0;
  float mx = z[0];
  for (int j = 1; j < cols; ++j)
    if (z[j] > mx) mx = z[j], arg = j;
  float sum = 0;
  for (int j = 0; j < cols; ++j) sum += (g[j] = expf(z[j] - mx));
  const float isum = 1.0f / sum;
  for (int j = 0; j < cols; ++j) g[j] = g[j] * isum * inv;
  g[y] -= inv;
  atomicAdd(&stats[0], logf(sum) - (z[y] - mx));
  if (arg == y) atomicAdd(&stats[1], 1.0f);
}
__global__ void ColumnSumKernel(const float* x, int rows, int cols, float* out) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= cols) return;
  float s = 0;
  for (int r = 0; r < rows; ++r) s += x[static_cast<size_t>(r) * cols + j];
  out[j] = s;
}

unsigned Blocks(size_t n, unsigned threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

class CudaDevice final : public Device {
 public:
  CudaDevice(int dev, std::string name) : name_(std::move(name)) {
    Check(cudaSetDevice(dev), "cudaSetDevice");
    Check(cudaStreamCreate(&stream_), "cudaStreamCreate");
    CheckBlas(cublasCreate(&blas_), "cublasCreate");
    CheckBlas(cublasSetStream(blas_, stream_), "cublasSetStream");
  }
  ~CudaDevice() override {
    cublasDestroy(blas_);
    cudaStreamDestroy(stream_);
  }
  std::string name() const override { return name_; }
  float* Alloc(size_t n) override {
    void* p = nullptr;
    if (cudaMalloc(&p, (n ? n : 1) * sizeof(float)) != cudaSuccess) throw std::bad_alloc();
    return static_cast<float*>(p);
  }
  void Free(float* p) override { cudaFree(p); }
  float* AllocHost(size_t n) override {
    void* p = nullptr;
    if (cudaMallocHost(&p, (n ? n : 1) * sizeof(float)) != cudaSuccess) throw std::bad_alloc();
    return static_cast<float*>(p);
  }
  void FreeHost(float* p) override { cudaFreeHost(p); }
  void Upload(float* dst, const float* host, size_t n) override {
    Check(cudaMemcpyAsync(dst, host, n * sizeof(float), cudaMemcpyHostToDevice, stream_), "upload");
  }
  void Download(float* host, const float* src, size_t n) override {
    Check(cudaMemcpyAsync(host, src, n * sizeof(float), cudaMemcpyDeviceToHost, stream_), "download");
    Sync();
  }
  void Sync() override { Check(cudaStreamSynchronize(stream_), "sync"); }

  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
  void Gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, const float* b, float beta,
            float* c) override {
    CheckBlas(cublasSgemm(blas_, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b,
                          tb ? k : n, a, ta ? m : k, &beta, c, n),
              "sgemm");
  }
  void AddBias(float* x, const float* bias, int rows, int cols) override {
    size_t n = static_cast<size_t>(rows) * cols;
    AddBiasKernel<<<Blocks(n, 256), 256, 0, stream_>>>(x, bias, rows, cols);
  }
  void Relu(float* x, size_t n) override { ReluKernel<<<Blocks(n, 256), 256, 0, stream_>>>(x, n); }
  void ReluBackward(float* g, const float* act, size_t n) override {
    ReluBackwardKernel<<<Blocks(n, 256), 256, 0, stream_>>>(g, act, n);
  }
  void SoftmaxCrossEntropy(const float* logits, const float* labels, int rows, int cols, float* grad,
                           float* stats) override {
    SoftmaxXentKernel<<<Blocks(rows, 128), 128, 0, stream_>>>(logits, labels, rows, cols, grad, stats);
  }
  void ColumnSum(const float* x, int rows, int cols, float* out) override {
    ColumnSumKernel<<<Blocks(cols, 128), 128, 0, stream_>>>(x, rows, cols, out);
  }
  void Zero(float* x, size_t n) override {
    Check(cudaMemsetAsync(x, 0, n * sizeof(float), stream_), "memset");
  }
  void Extrapolate(float* w, float* prev, size_t n, float a) override {
    if (a == 0.0f)
      Check(cudaMemcpyAsync(prev, w, n * sizeof(float), cudaMemcpyDeviceToDevice, stream_), "copy");
    else
      ExtrapolateKernel<<<Blocks(n, 256), 256, 0, stream_>>>(w, prev, n, a);
  }

 private:
  std::string name_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
};

}  // namespace

std::unique_ptr<Device> MakeCudaDevice(std::string* why) {
  int count = 0;
  // Without a driver the runtime says "driver version is insufficient", not
  // "no device": any error means no usable GPU.
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    *why = e != cudaSuccess ? std::string("no usable GPU: ") + cudaGetErrorString(e) : "no GPU found";
    cudaGetLastError();  // clear
    return nullptr;
  }
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    *why = "cannot read the GPU's properties";
    return nullptr;
  }
  return std::make_unique<CudaDevice>(0, std::string("cuda:0 (") + prop.name + ")");
}

}  // namespace shardps::worker
