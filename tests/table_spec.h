// The one table-spec factory of the tests: a TableSpec in one expression.
//
//   TableSpec w = testing::Dense("w", 300, 3).Uniform(-0.1f, 0.1f).Seed(3).Sgd(0.5f);
//   TableSpec e = testing::Sparse("emb", 8).Adagrad(0.1f).MaxRows(1000);
//
// Defaults are TableSpec's own (zeros, SGD at lr 0.01); each call sets what
// it names and nothing else. Header-only: unit tests in server/ and worker/
// use it as well as the integration tests here.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "shardps/types.h"

namespace shardps::testing {

class Spec {
 public:
  explicit Spec(TableSpec t) : t_(std::move(t)) {}
  operator TableSpec() const { return t_; }  // NOLINT: converts where a TableSpec is wanted
  const TableSpec& spec() const { return t_; }

  Spec& Name(std::string name) { t_.name = std::move(name); return *this; }
  Spec& Zeros() { t_.init = InitKind::kZeros; return *this; }
  Spec& Constant(float v) { return Init(InitKind::kConstant, v, 0); }
  Spec& Uniform(float low, float high) { return Init(InitKind::kUniform, low, high); }
  Spec& Normal(float mean, float stddev) { return Init(InitKind::kNormal, mean, stddev); }
  Spec& Init(InitKind k, float a, float b) {
    t_.init = k;
    t_.init_a = a;
    t_.init_b = b;
    return *this;
  }
  Spec& Seed(uint64_t seed) { t_.seed = seed; return *this; }
  Spec& Optimizer(OptimizerKind k, float lr) {
    t_.optimizer = k;
    t_.lr = lr;
    return *this;
  }
  Spec& Sgd(float lr) { return Optimizer(OptimizerKind::kSGD, lr); }
  Spec& Momentum(float lr, float momentum) {
    t_.momentum = momentum;
    return Optimizer(OptimizerKind::kMomentum, lr);
  }
  Spec& Adagrad(float lr, float initial_accumulator = 0) {
    t_.initial_accumulator = initial_accumulator;
    return Optimizer(OptimizerKind::kAdagrad, lr);
  }
  Spec& Adam(float lr) { return Optimizer(OptimizerKind::kAdam, lr); }
  Spec& Betas(float beta1, float beta2) {
    t_.beta1 = beta1;
    t_.beta2 = beta2;
    return *this;
  }
  Spec& Eps(float eps) { t_.eps = eps; return *this; }
  Spec& MaxRows(uint64_t n) { t_.max_rows = n; return *this; }
  Spec& Type(DType d) { t_.dtype = d; return *this; }
  Spec& Wire(DType d) { t_.wire.dtype = d; return *this; }
  Spec& AdmitAfter(uint32_t k) { t_.admit_after = k; return *this; }
  Spec& EvictAfterClocks(uint32_t n) { t_.evict_after_clocks = n; return *this; }
  Spec& EvictAfterSec(uint32_t n) { t_.evict_after_sec = n; return *this; }
  Spec& ColdTier() { t_.cold_tier = true; return *this; }
  Spec& Rule(StalenessRule r, float dc_lambda = 0.04f) {
    t_.staleness_rule = r;
    t_.dc_lambda = dc_lambda;
    return *this;
  }

 private:
  TableSpec t_;
};

// A dense table of rows x cols.
inline Spec Dense(std::string name, uint64_t rows, uint32_t cols) {
  TableSpec t;
  t.name = std::move(name);
  t.kind = TableKind::kDense;
  t.rows = rows;
  t.cols = cols;
  return Spec(std::move(t));
}

// A sparse table of rows of `cols`, keyed by any uint64 id.
inline Spec Sparse(std::string name, uint32_t cols) {
  TableSpec t;
  t.name = std::move(name);
  t.kind = TableKind::kSparse;
  t.cols = cols;
  return Spec(std::move(t));
}

}  // namespace shardps::testing
