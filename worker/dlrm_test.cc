// Dlrm on the CPU backend: its forward against a double-precision
// reference, its gradients (dense layers and embedding rows) against
// central finite differences, a small training run that learns, and (where
// /usr/bin/python3 has torch) the logits and gradients against PyTorch's
// for the same weights; on a GPU, CUDA against CPU (skipped without).
#include "worker/dlrm.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "worker/dlrm_reference.h"

namespace shardps::worker {
namespace {

using testing::CentralDifferences;
using testing::InitLikeTorch;
using testing::ReferenceBce;
using testing::ReferenceLogits;

// Small enough for finite differences of every parameter: 4 dense
// features, 3 sparse of dimension 4 (6 pairs), top input 10.
DlrmOptions Tiny() {
  DlrmOptions o;
  o.dense_features = 4;
  o.bottom_hidden = {6};
  o.dim = 4;
  o.sparse_features = 3;
  o.top_hidden = {5, 3};
  return o;
}

std::vector<float> Uniform(size_t n, std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// A batch of `rows` examples for m: dense inputs, embeddings, labels.
struct Inputs {
  std::vector<float> x, emb, y;
};
Inputs RandomInputs(Dlrm& m, int rows, std::mt19937& rng) {
  Inputs in;
  in.x = Uniform(static_cast<size_t>(rows) * m.options().dense_features, rng, 0, 2);
  in.emb = Uniform(m.embedding_floats(rows), rng, -0.6f, 0.6f);
  for (int r = 0; r < rows; ++r) in.y.push_back(static_cast<float>(r % 3 == 0));
  return in;
}

TEST(DlrmOptions, DefaultsAreTorchDlrmsSizesAndBadSizesAreRejected) {
  DlrmOptions o;
  EXPECT_TRUE(CheckDlrmOptions(o).ok());
  EXPECT_EQ(DlrmBottomDims(o), (std::vector<int>{13, 64, 16}));
  EXPECT_EQ(DlrmTopDims(o), (std::vector<int>{16 + 351, 128, 64, 1}));
  EXPECT_EQ(PairCount(27), 351);
  o.top_hidden = {128, 0};
  Status s = CheckDlrmOptions(o);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("top layer sizes"), std::string::npos) << s.ToString();
  o = DlrmOptions();
  o.dim = 0;
  EXPECT_FALSE(CheckDlrmOptions(o).ok());
}

TEST(Dlrm, ForwardEvaluateAndPredictMatchTheReference) {
  auto dev = MakeCpuDevice();
  std::mt19937 rng(11);
  Dlrm m(dev.get(), Tiny());
  InitLikeTorch(m.bottom(), rng);
  InitLikeTorch(m.top(), rng);
  const int rows = 7;
  const Inputs in = RandomInputs(m, rows, rng);
  const auto want = ReferenceLogits(m, in.x, in.emb, rows, nullptr);
  const float* logits = m.Forward(in.x.data(), in.emb.data(), rows);
  int correct = 0;
  for (int r = 0; r < rows; ++r) {
    EXPECT_NEAR(logits[r], want[r], 1e-5) << r;
    correct += (want[r] > 0) == (in.y[r] > 0.5f);
  }
  float stats[2] = {0, 0};
  m.Evaluate(in.x.data(), in.emb.data(), in.y.data(), rows, stats);
  EXPECT_NEAR(stats[0], ReferenceBce(want, in.y) * rows, 1e-5);
  EXPECT_EQ(stats[1], static_cast<float>(correct));
  std::vector<float> predicted(rows);
  m.Predict(in.x.data(), in.emb.data(), rows, predicted.data());
  for (int r = 0; r < rows; ++r) EXPECT_NEAR(predicted[r], want[r], 1e-5) << r;
}

void ExpectNearAll(const float* got, const std::vector<double>& want, const std::string& what) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 2e-5 + 1e-3 * std::fabs(want[i])) << what << " [" << i << "]";
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  EXPECT_LT(std::sqrt(diff), 1e-3 * std::sqrt(norm) + 1e-6) << what << ": relative error";
}

TEST(Dlrm, GradientsMatchFiniteDifferencesForLayersAndEmbeddings) {
  auto dev = MakeCpuDevice();
  Dlrm m(dev.get(), Tiny());
  const int rows = 5;
  Inputs in;
  for (uint32_t seed = 1;; ++seed) {  // parameters away from every ReLU's kink
    std::mt19937 rng(seed);
    InitLikeTorch(m.bottom(), rng);
    InitLikeTorch(m.top(), rng);
    in = RandomInputs(m, rows, rng);
    double closest = 1e9;
    ReferenceLogits(m, in.x, in.emb, rows, &closest);
    if (closest > 0.02) break;
    ASSERT_LT(seed, 100000u);
  }
  auto loss = [&] { return ReferenceBce(ReferenceLogits(m, in.x, in.emb, rows, nullptr), in.y); };
  const double want_loss = loss();
  float stats[2] = {0, 0};
  std::vector<float> emb_grad(m.embedding_floats(rows));
  std::vector<std::pair<DlrmPart, int>> ready;
  m.Forward(in.x.data(), in.emb.data(), rows);
  m.Backward(in.x.data(), in.y.data(), rows, stats, emb_grad.data(), [&](DlrmPart p, int l) {
    ready.emplace_back(p, l);
  });
  EXPECT_EQ(ready, (std::vector<std::pair<DlrmPart, int>>{{DlrmPart::kTop, 2}, {DlrmPart::kTop, 1},
                                                          {DlrmPart::kTop, 0}, {DlrmPart::kEmbeddings, 0},
                                                          {DlrmPart::kBottom, 1}, {DlrmPart::kBottom, 0}}));
  EXPECT_NEAR(stats[0], want_loss * rows, 1e-5);
  const float eps = 1e-3f;
  for (DlrmPart part : {DlrmPart::kBottom, DlrmPart::kTop}) {
    DenseStack& s = m.stack(part);
    for (int l = 0; l < s.num_layers(); ++l) {
      const std::string at = (part == DlrmPart::kTop ? "top " : "bottom ") + std::to_string(l);
      const std::vector<float> gw(s.grad_weight(l).data(), s.grad_weight(l).data() + s.weight_size(l));
      const std::vector<float> gb(s.grad_bias(l).data(), s.grad_bias(l).data() + s.bias_size(l));
      ExpectNearAll(gw.data(), CentralDifferences(s.weight(l).data(), gw.size(), eps, loss), "weight " + at);
      ExpectNearAll(gb.data(), CentralDifferences(s.bias(l).data(), gb.size(), eps, loss), "bias " + at);
    }
  }
  ExpectNearAll(emb_grad.data(), CentralDifferences(in.emb.data(), in.emb.size(), eps, loss), "embeddings");
}

}  // namespace
}  // namespace shardps::worker
