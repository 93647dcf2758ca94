// The CPU backend: OpenBLAS for matrix products, plain loops (which the
// compiler vectorises) for the rest.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include "worker/devices/device.h"
#include "worker/devices/pairwise_dot.h"

namespace shardps::worker {
namespace {

class CpuDevice final : public Device {
 public:
  std::string name() const override { return "cpu"; }
  float* Alloc(size_t n) override {
    void* p = nullptr;
    if (posix_memalign(&p, 64, std::max<size_t>(n, 1) * sizeof(float)) != 0) throw std::bad_alloc();
    return static_cast<float*>(p);
  }
  void Free(float* p) override { std::free(p); }
  float* AllocHost(size_t n) override { return Alloc(n); }
  void FreeHost(float* p) override { Free(p); }
  void Upload(float* dst, const float* host, size_t n) override {
    if (dst != host) std::memcpy(dst, host, n * sizeof(float));
  }
  void Download(float* host, const float* src, size_t n) override {
    if (host != src) std::memcpy(host, src, n * sizeof(float));
  }
  void Sync() override {}

  void Gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, const float* b, float beta,
            float* c) override {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a,
                ta ? m : k, b, tb ? k : n, beta, c, n);
  }
  void AddBias(float* x, const float* bias, int rows, int cols) override {
    for (int r = 0; r < rows; ++r) {
      float* row = x + static_cast<size_t>(r) * cols;
      for (int j = 0; j < cols; ++j) row[j] += bias[j];
    }
  }
  void Relu(float* x, size_t n) override {
    for (size_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
  }
  void ReluBackward(float* g, const float* act, size_t n) override {
    for (size_t i = 0; i < n; ++i) g[i] = act[i] > 0.0f ? g[i] : 0.0f;
  }
  void SoftmaxCrossEntropy(const float* logits, const float* labels, int rows, int cols, float* grad,
                           float* stats) override {
    const float inv = 1.0f / static_cast<float>(rows);
    double loss = 0;
    int correct = 0;
    for (int r = 0; r < rows; ++r) {
      const float* z = logits + static_cast<size_t>(r) * cols;
      float* g = grad + static_cast<size_t>(r) * cols;
      const int y = static_cast<int>(labels[r]);
      int arg = 0;
      float mx = z[0];
      for (int j = 1; j < cols; ++j)
        if (z[j] > mx) mx = z[j], arg = j;
      float sum = 0;
      for (int j = 0; j < cols; ++j) sum += (g[j] = std::exp(z[j] - mx));
      const float isum = 1.0f / sum;
      for (int j = 0; j < cols; ++j) g[j] = g[j] * isum * inv;
      g[y] -= inv;
      loss += std::log(sum) - (z[y] - mx);
      correct += arg == y;
    }
    stats[0] += static_cast<float>(loss);
    stats[1] += static_cast<float>(correct);
  }
  void ColumnSum(const float* x, int rows, int cols, float* out) override {
    std::fill(out, out + cols, 0.0f);
    for (int r = 0; r < rows; ++r) {
      const float* row = x + static_cast<size_t>(r) * cols;
      for (int j = 0; j < cols; ++j) out[j] += row[j];
    }
  }
  void Zero(float* x, size_t n) override { std::fill(x, x + n, 0.0f); }
  void Extrapolate(float* w, float* prev, size_t n, float a) override {
    if (a == 0.0f) {
      std::copy_n(w, n, prev);
      return;
    }
    for (size_t i = 0; i < n; ++i) {
      const float t = w[i];
      w[i] = t + a * (t - prev[i]);
      prev[i] = t;
    }
  }
  void SigmoidBce(const float* logits, const float* labels, int rows, float* grad, float* stats) override {
    const float inv = 1.0f / static_cast<float>(rows);
    double loss = 0;
    int correct = 0;
    for (int r = 0; r < rows; ++r) {
      const float z = logits[r], y = labels[r];
      const float e = std::exp(-std::fabs(z));  // in (0, 1]: never overflows
      loss += std::max(z, 0.0f) - z * y + std::log1p(e);
      correct += (z > 0.0f) == (y > 0.5f);
      if (grad) grad[r] = ((z >= 0.0f ? 1.0f : e) / (1.0f + e) - y) * inv;
    }
    stats[0] += static_cast<float>(loss);
    stats[1] += static_cast<float>(correct);
  }
  void PairwiseDot(const float* v, int rows, int n, int dim, float* out, int out_stride) override {
    PairwiseDotCpu(v, rows, n, dim, out, out_stride);
  }
  void PairwiseDotBackward(const float* v, const float* dz, int dz_stride, int rows, int n, int dim,
                           float* dv) override {
    PairwiseDotBackwardCpu(v, dz, dz_stride, rows, n, dim, dv);
  }
  void CopyColumns(const float* src, int src_stride, int rows, int cols, float* dst, int dst_stride,
                   bool accumulate) override {
    for (int r = 0; r < rows; ++r) {
      const float* s = src + static_cast<size_t>(r) * src_stride;
      float* d = dst + static_cast<size_t>(r) * dst_stride;
      if (accumulate)
        for (int j = 0; j < cols; ++j) d[j] += s[j];
      else
        std::copy_n(s, cols, d);
    }
  }
};

}  // namespace

std::unique_ptr<Device> MakeCpuDevice() { return std::make_unique<CpuDevice>(); }

}  // namespace shardps::worker
