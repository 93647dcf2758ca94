// For the tests of worker/models/dense_stack.h and worker/models/dlrm.h: the same models
// written as plain double-precision loops on the host, reading the
// parameters of a CPU-backend DenseStack/Dlrm (whose device memory is host
// memory), and the helpers the tests share.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "worker/models/dense_stack.h"
#include "worker/models/dlrm.h"

namespace shardps::worker::testing {

// s's output for x (rows x s.in_dim()). Lowers *closest (if non-null) to
// the smallest |pre-activation| of a unit followed by a ReLU: finite
// differences are meaningful only away from its kink.
inline std::vector<double> ReferenceStack(DenseStack& s, const std::vector<double>& x, int rows, double* closest) {
  std::vector<double> in = x, out;
  for (int l = 0; l < s.num_layers(); ++l) {
    const int n = s.dims()[l], m = s.dims()[l + 1];
    const float* w = s.weight(l).data();
    const float* b = s.bias(l).data();
    const bool relu = l + 1 < s.num_layers() || s.relu_last();
    out.assign(static_cast<size_t>(rows) * m, 0.0);
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < m; ++j) {
        double z = b[j];
        for (int i = 0; i < n; ++i) z += in[static_cast<size_t>(r) * n + i] * w[static_cast<size_t>(i) * m + j];
        if (relu && closest) *closest = std::min(*closest, std::fabs(z));
        out[static_cast<size_t>(r) * m + j] = relu ? std::max(z, 0.0) : z;
      }
    in = out;
  }
  return out;
}

// The logits of m for x (rows x dense_features) and emb (rows x F x dim).
inline std::vector<double> ReferenceLogits(Dlrm& m, const std::vector<float>& x, const std::vector<float>& emb,
                                           int rows, double* closest) {
  const DlrmOptions& o = m.options();
  const int n = o.sparse_features + 1, dim = o.dim, cols = dim + PairCount(n);
  const std::vector<double> d = ReferenceStack(m.bottom(), std::vector<double>(x.begin(), x.end()), rows, closest);
  std::vector<double> top(static_cast<size_t>(rows) * cols), v(static_cast<size_t>(n) * dim);
  for (int r = 0; r < rows; ++r) {
    for (int k = 0; k < dim; ++k) v[k] = d[static_cast<size_t>(r) * dim + k];
    for (int k = 0; k < (n - 1) * dim; ++k) v[dim + k] = emb[static_cast<size_t>(r) * (n - 1) * dim + k];
    double* t = &top[static_cast<size_t>(r) * cols];
    std::copy_n(v.begin(), dim, t);
    int p = dim;
    for (int i = 0; i < n; ++i)
      for (int j = i + 1; j < n; ++j, ++p) {
        double s = 0;
        for (int k = 0; k < dim; ++k) s += v[i * dim + k] * v[j * dim + k];
        t[p] = s;
      }
  }
  return ReferenceStack(m.top(), top, rows, closest);
}

// The mean binary cross-entropy of logits against 0/1 labels.
inline double ReferenceBce(const std::vector<double>& logits, const std::vector<float>& labels) {
  double sum = 0;
  for (size_t r = 0; r < logits.size(); ++r) {
    const double z = logits[r];
    sum += std::max(z, 0.0) - z * labels[r] + std::log1p(std::exp(-std::fabs(z)));
  }
  return sum / static_cast<double>(logits.size());
}

// Every layer as torch.nn.Linear initialises it: weight and bias uniform in
// +-1/sqrt(inputs). CPU backend only.
inline void InitLikeTorch(DenseStack& s, std::mt19937& rng) {
  for (int l = 0; l < s.num_layers(); ++l) {
    const float a = 1.0f / std::sqrt(static_cast<float>(s.dims()[l]));
    std::uniform_real_distribution<float> u(-a, a);
    for (size_t i = 0; i < s.weight_size(l); ++i) s.weight(l).data()[i] = u(rng);
    for (size_t i = 0; i < s.bias_size(l); ++i) s.bias(l).data()[i] = u(rng);
  }
}

// Both of m's stacks so. CPU backend only.
inline void InitLikeTorch(Dlrm& m, std::mt19937& rng) {
  InitLikeTorch(m.bottom(), rng);
  InitLikeTorch(m.top(), rng);
}

// The central difference (f(p + eps) - f(p - eps)) / (the step p took), for
// each of p's n values in turn (restored after).
template <typename Loss>
std::vector<double> CentralDifferences(float* p, size_t n, float eps, const Loss& loss) {
  std::vector<double> g(n);
  for (size_t i = 0; i < n; ++i) {
    const float keep = p[i];
    const float up = keep + eps, down = keep - eps;
    p[i] = up;
    const double lu = loss();
    p[i] = down;
    const double ld = loss();
    p[i] = keep;
    g[i] = (lu - ld) / (static_cast<double>(up) - static_cast<double>(down));
  }
  return g;
}

}  // namespace shardps::worker::testing
