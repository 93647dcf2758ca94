#include "server/tables/optimizer.h"

#include <cmath>

namespace shardps {

size_t OptimizerStateWidth(const TableSpec& spec) {
  switch (spec.optimizer) {
    case OptimizerKind::kSGD: return 0;
    case OptimizerKind::kMomentum: return spec.cols;
    case OptimizerKind::kAdagrad: return spec.cols;
    case OptimizerKind::kAdam: return 2ull * spec.cols + 1;
  }
  return 0;
}

void InitOptimizerState(const TableSpec& spec, float* state, size_t rows) {
  const size_t n = rows * OptimizerStateWidth(spec);
  const float v = spec.optimizer == OptimizerKind::kAdagrad ? spec.initial_accumulator : 0.0f;
  for (size_t i = 0; i < n; ++i) state[i] = v;
}

namespace {

void Sgd(float* __restrict w, const float* __restrict g, size_t n, float step) {
  for (size_t i = 0; i < n; ++i) w[i] -= step * g[i];
}

void Momentum(float* __restrict w, float* __restrict v, const float* __restrict g, size_t n,
              float lr, float mu, float scale) {
  for (size_t i = 0; i < n; ++i) {
    v[i] = mu * v[i] + scale * g[i];
    w[i] -= lr * v[i];
  }
}

void Adagrad(float* __restrict w, float* __restrict a, const float* __restrict g, size_t n,
             float lr, float eps, float scale) {
  for (size_t i = 0; i < n; ++i) {
    float gi = scale * g[i];
    a[i] += gi * gi;
    w[i] -= lr * gi / (std::sqrt(a[i]) + eps);
  }
}

void AdamRow(const TableSpec& s, float* __restrict w, float* __restrict st,
             const float* __restrict g, float scale, float lr_scale) {
  const uint32_t n = s.cols;
  float* __restrict m = st;
  float* __restrict v = st + n;
  float& t = st[2 * n];
  t += 1.0f;
  const float bc1 = 1.0f - std::pow(s.beta1, t);
  const float bc2 = 1.0f - std::pow(s.beta2, t);
  const float b1 = s.beta1, b2 = s.beta2, lr = s.lr * lr_scale, eps = s.eps;
  const float inv_bc1 = 1.0f / bc1, inv_bc2 = 1.0f / bc2;
  for (uint32_t i = 0; i < n; ++i) {
    float gi = scale * g[i];
    m[i] = b1 * m[i] + (1.0f - b1) * gi;
    v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
    w[i] -= lr * (m[i] * inv_bc1) / (std::sqrt(v[i] * inv_bc2) + eps);
  }
}

}  // namespace

void ApplyOptimizer(const TableSpec& spec, float* __restrict w, float* __restrict state,
                    const float* __restrict g, size_t rows, float scale, float lr_scale) {
  const size_t n = rows * spec.cols;
  switch (spec.optimizer) {
    case OptimizerKind::kSGD:
      Sgd(w, g, n, spec.lr * scale * lr_scale);
      return;
    case OptimizerKind::kMomentum:
      Momentum(w, state, g, n, spec.lr, spec.momentum, scale * lr_scale);
      return;
    case OptimizerKind::kAdagrad:
      Adagrad(w, state, g, n, spec.lr * lr_scale, spec.eps, scale);
      return;
    case OptimizerKind::kAdam: {
      const size_t sw = OptimizerStateWidth(spec);
      for (size_t r = 0; r < rows; ++r)
        AdamRow(spec, w + r * spec.cols, state + r * sw, g + r * spec.cols, scale, lr_scale);
      return;
    }
  }
}

StalenessRule EffectiveStalenessRule(const TableSpec& spec) {
  return spec.staleness_rule == StalenessRule::kDefault ? StalenessRule::kScaleLr : spec.staleness_rule;
}

float StalenessLrScale(StalenessRule rule, uint64_t staleness) {
  if (rule != StalenessRule::kScaleLr || staleness <= 1) return 1.0f;
  return 1.0f / static_cast<float>(staleness);
}

}  // namespace shardps
