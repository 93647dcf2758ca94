// The compute device a worker trains on: a small set of dense operations
// with two backends, CPU (OpenBLAS + vectorisable loops) and CUDA (cuBLAS
// + kernels of our own). Matrices are row-major float32.
//
// Buffers live on the device: DeviceBuffer owns device memory (host memory
// for the CPU backend); Upload/Download move data to and from host arrays.
// The CUDA backend runs every operation on one stream; Download and Sync
// wait for it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "shardps/status.h"

namespace shardps::worker {

class Device;

// Device memory of `size` floats. Movable, not copyable.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Device* d, size_t size);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  float* data() const { return data_; }
  size_t size() const { return size_; }
  // Grows (never shrinks) to at least `size` floats; contents are lost.
  void Reserve(size_t size);

 private:
  Device* dev_ = nullptr;
  float* data_ = nullptr;
  size_t size_ = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;

  virtual float* Alloc(size_t floats) = 0;
  virtual void Free(float* p) = 0;
  // Host memory the device copies to and from fastest (page-locked for
  // CUDA, so Upload is asynchronous and overlaps with compute).
  virtual float* AllocHost(size_t floats) = 0;
  virtual void FreeHost(float* p) = 0;
  virtual void Upload(float* dst, const float* host, size_t n) = 0;
  virtual void Download(float* host, const float* src, size_t n) = 0;
  virtual void Sync() = 0;

  // C = alpha * op(A) * op(B) + beta * C, op(X) = X or X^T;
  // op(A) is m x k, op(B) is k x n, C is m x n (row-major).
  virtual void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                    const float* b, float beta, float* c) = 0;
  // x[r][j] += bias[j] for every row r of a rows x cols matrix.
  virtual void AddBias(float* x, const float* bias, int rows, int cols) = 0;
  // x = max(x, 0).
  virtual void Relu(float* x, size_t n) = 0;
  // grad[i] = 0 where activation[i] <= 0 (activation is the ReLU output).
  virtual void ReluBackward(float* grad, const float* activation, size_t n) = 0;
  // Row-wise softmax of logits (rows x cols) against integer labels (given
  // as floats): writes d(mean cross-entropy)/d(logits) into grad (scaled by
  // 1/rows), and adds the summed loss and number of correct argmax
  // predictions into stats[0] and stats[1] (device memory, 2 floats).
  virtual void SoftmaxCrossEntropy(const float* logits, const float* labels, int rows, int cols, float* grad,
                                   float* stats) = 0;
  // out[j] = sum over rows of x[r][j].
  virtual void ColumnSum(const float* x, int rows, int cols, float* out) = 0;
  // out[j] = 0 for j < n.
  virtual void Zero(float* x, size_t n) = 0;
  // Parameters extrapolated along their drift (weight prediction, the
  // worker's --predict): for each i < n, t = w[i]; w[i] = t + a * (t - prev[i]);
  // prev[i] = t. With a = 0, w is unchanged and prev takes it (prev is not
  // read: it may hold anything, NaN included).
  virtual void Extrapolate(float* w, float* prev, size_t n, float a) = 0;

  // The operations of a DLRM (worker/models/dlrm.h). A "row" of a strided matrix
  // starts at ptr + r * stride; a pointer into a wider matrix (ptr + column)
  // reads or writes only those columns.
  //
  // Binary cross-entropy with logits against labels (0 or 1), for r < rows
  // with z = logits[r], y = labels[r]: loss = max(z, 0) - z y + log(1 +
  // exp(-|z|)) (never overflows); grad[r] = (sigmoid(z) - y) / rows, the
  // gradient of the mean loss (grad may be null: statistics only). Adds the
  // summed loss and the number of correct predictions, (z > 0) == (y > 0.5),
  // into stats[0] and stats[1] (device memory, 2 floats).
  virtual void SigmoidBce(const float* logits, const float* labels, int rows, float* grad, float* stats) = 0;
  // The pairwise dot products of n vectors: v is rows x n x dim (row-major,
  // contiguous); out row r (out + r * out_stride) gets the n (n - 1) / 2
  // values <v[r][i], v[r][j]> for i < j in row-major upper-triangle order
  // (0,1), (0,2) .. (0,n-1), (1,2) .. (n-2,n-1): torch.triu_indices(n, n, 1).
  virtual void PairwiseDot(const float* v, int rows, int n, int dim, float* out, int out_stride) = 0;
  // PairwiseDot's backward: given dz (row r at dz + r * dz_stride, in
  // PairwiseDot's pair order), dv[r][i] = sum over j != i of dz[r][pair(i,
  // j)] v[r][j]; dv (rows x n x dim, contiguous) is overwritten.
  virtual void PairwiseDotBackward(const float* v, const float* dz, int dz_stride, int rows, int n, int dim,
                                   float* dv) = 0;
  // For r < rows and j < cols: dst[r * dst_stride + j] = src[r * src_stride
  // + j], or += with `accumulate`. src and dst do not overlap.
  virtual void CopyColumns(const float* src, int src_stride, int rows, int cols, float* dst, int dst_stride,
                           bool accumulate) = 0;
};

// The number of pairs i < j of n vectors: PairwiseDot's output columns.
inline int PairCount(int n) { return n * (n - 1) / 2; }

// Host memory from Device::AllocHost, `size` floats. Movable.
class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(Device* d, size_t size);
  ~HostBuffer();
  HostBuffer(HostBuffer&& o) noexcept;
  HostBuffer& operator=(HostBuffer&& o) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  float* data() const { return data_; }
  size_t size() const { return size_; }
  float& operator[](size_t i) const { return data_[i]; }

 private:
  Device* dev_ = nullptr;
  float* data_ = nullptr;
  size_t size_ = 0;
};

enum class DeviceKind { kAuto, kCpu, kCuda };
Status ParseDeviceKind(const std::string& s, DeviceKind* out);

// kCuda fails with Unavailable when no GPU answers; kAuto falls back to the
// CPU (and `why` says which it took and why).
Status MakeDevice(DeviceKind kind, std::unique_ptr<Device>* out, std::string* why);

std::unique_ptr<Device> MakeCpuDevice();
// Returns null (and sets *why) when CUDA is not compiled in or no GPU answers.
std::unique_ptr<Device> MakeCudaDevice(std::string* why);

}  // namespace shardps::worker
