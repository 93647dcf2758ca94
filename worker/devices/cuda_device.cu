// The CUDA backend: cuBLAS for matrix products, small kernels for the rest,
// everything on one stream.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <new>
#include <string>

#include "worker/devices/device.h"

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

// One thread per row; a warp sums its rows' loss and correct count before
// one atomic add each. REQUIRES blockDim.x a multiple of 32.
__global__ void SigmoidBceKernel(const float* logits, const float* labels, int rows, float* grad, float* stats) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  float loss = 0.0f, correct = 0.0f;
  if (r < rows) {
    const float z = logits[r], y = labels[r];
    const float e = expf(-fabsf(z));
    loss = fmaxf(z, 0.0f) - z * y + log1pf(e);
    correct = (z > 0.0f) == (y > 0.5f) ? 1.0f : 0.0f;
    if (grad) grad[r] = ((z >= 0.0f ? 1.0f : e) / (1.0f + e) - y) / rows;
  }
  for (int off = 16; off > 0; off /= 2) {
    loss += __shfl_down_sync(0xffffffffu, loss, off);
    correct += __shfl_down_sync(0xffffffffu, correct, off);
  }
  if ((threadIdx.x & 31) == 0 && r < rows) {
    atomicAdd(&stats[0], loss);
    atomicAdd(&stats[1], correct);
  }
}
// The index of pair (a, b), a < b, in row-major upper-triangle order.
__device__ int PairIndex(int a, int b, int n) { return a * (2 * n - a - 1) / 2 + (b - a - 1); }
// One thread per (row, pair).
__global__ void PairwiseDotKernel(const float* v, int rows, int n, int dim, float* out, int out_stride) {
  const int pairs = n * (n - 1) / 2;
  const size_t t = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (t >= static_cast<size_t>(rows) * pairs) return;
  const size_t r = t / pairs;
  const int p = static_cast<int>(t % pairs);
  int i = 0, first = 0;  // first: the index of pair (i, i + 1)
  while (p >= first + n - 1 - i) first += n - 1 - i, ++i;
  const int j = i + 1 + (p - first);
  const float* a = v + (r * n + i) * dim;
  const float* b = v + (r * n + j) * dim;
  float s = 0.0f;
  for (int k = 0; k < dim; ++k) s += a[k] * b[k];
  out[r * out_stride + p] = s;
}
// One thread per element of dv: (row, vector i, component k).
__global__ void PairwiseDotBackwardKernel(const float* v, const float* dz, int dz_stride, int rows, int n, int dim,
                                          float* dv) {
  const size_t t = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (t >= static_cast<size_t>(rows) * n * dim) return;
  const int k = static_cast<int>(t % dim);
  const int i = static_cast<int>(t / dim % n);
  const size_t r = t / dim / n;
  const float* vr = v + r * n * dim;
  const float* g = dz + r * dz_stride;
  float s = 0.0f;
  for (int j = 0; j < n; ++j)
    if (j != i) s += g[j < i ? PairIndex(j, i, n) : PairIndex(i, j, n)] * vr[j * dim + k];
  dv[t] = s;
}
__global__ void CopyColumnsKernel(const float* src, int src_stride, int rows, int cols, float* dst, int dst_stride,
                                  bool accumulate) {
  const size_t t = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (t >= static_cast<size_t>(rows) * cols) return;
  const size_t r = t / cols, j = t % cols;
  const float x = src[r * src_stride + j];
  float* d = dst + r * dst_stride + j;
  *d = accumulate ? *d + x : x;
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
  void SigmoidBce(const float* logits, const float* labels, int rows, float* grad, float* stats) override {
    if (rows > 0) SigmoidBceKernel<<<Blocks(rows, 128), 128, 0, stream_>>>(logits, labels, rows, grad, stats);
  }
  void PairwiseDot(const float* v, int rows, int n, int dim, float* out, int out_stride) override {
    const size_t total = static_cast<size_t>(rows) * (n * (n - 1) / 2);
    if (total) PairwiseDotKernel<<<Blocks(total, 128), 128, 0, stream_>>>(v, rows, n, dim, out, out_stride);
  }
  void PairwiseDotBackward(const float* v, const float* dz, int dz_stride, int rows, int n, int dim,
                           float* dv) override {
    const size_t total = static_cast<size_t>(rows) * n * dim;
    if (total)
      PairwiseDotBackwardKernel<<<Blocks(total, 128), 128, 0, stream_>>>(v, dz, dz_stride, rows, n, dim, dv);
  }
  void CopyColumns(const float* src, int src_stride, int rows, int cols, float* dst, int dst_stride,
                   bool accumulate) override {
    const size_t total = static_cast<size_t>(rows) * cols;
    if (total)
      CopyColumnsKernel<<<Blocks(total, 256), 256, 0, stream_>>>(src, src_stride, rows, cols, dst, dst_stride,
                                                                 accumulate);
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
