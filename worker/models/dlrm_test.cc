// Dlrm on the CPU backend: its forward against a double-precision
// reference, its gradients (dense layers and embedding rows) against
// central finite differences, a small training run that learns, and (where
// /usr/bin/python3 has torch) the logits and gradients against PyTorch's
// for the same weights; on a GPU, CUDA against CPU (skipped without).
#include "worker/models/dlrm.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "worker/models/dlrm_reference.h"

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
  InitLikeTorch(m, rng);
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
  for (int n : {3, 12, 5}) {  // smaller and larger batches after it
    const Inputs other = RandomInputs(m, n, rng);
    const auto expected = ReferenceLogits(m, other.x, other.emb, n, nullptr);
    logits = m.Forward(other.x.data(), other.emb.data(), n);
    for (int r = 0; r < n; ++r) EXPECT_NEAR(logits[r], expected[r], 1e-5) << n << " " << r;
  }
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
    InitLikeTorch(m, rng);
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

// A click log whose label depends on every sparse feature: the sign of
// the sum of a score per (feature, row) and of the first dense feature's
// distance from 1. The model has to learn the embedding rows to beat the
// base rate.
struct Clicks {
  std::vector<float> x, y;    // n x dense_features; n labels
  std::vector<uint32_t> ids;  // n x sparse_features
};
Clicks MakeClicks(const DlrmOptions& o, int n, int table_rows, const std::vector<float>& score, std::mt19937& rng) {
  Clicks c;
  c.x = Uniform(static_cast<size_t>(n) * o.dense_features, rng, 0, 2);
  std::uniform_int_distribution<uint32_t> id(0, table_rows - 1);
  for (int i = 0; i < n; ++i) {
    float s = 1.5f * (c.x[static_cast<size_t>(i) * o.dense_features] - 1);
    for (int f = 0; f < o.sparse_features; ++f) {
      c.ids.push_back(id(rng));
      s += score[f * table_rows + c.ids.back()];
    }
    c.y.push_back(s > 0 ? 1.0f : 0.0f);
  }
  return c;
}

// The host's embedding tables (one per feature, table_rows x dim each) and
// plain SGD on them and on the model's layers.
class HostSgd {
 public:
  HostSgd(const DlrmOptions& o, int table_rows, std::mt19937& rng)
      : o_(o), rows_(table_rows), table_(Uniform(static_cast<size_t>(o.sparse_features) * table_rows * o.dim, rng,
                                                 -0.1f, 0.1f)) {}
  // The embeddings of examples [first, first + n) of c: n x F x dim.
  void Gather(const Clicks& c, int first, int n, std::vector<float>* emb) const {
    emb->clear();
    for (int i = first; i < first + n; ++i)
      for (int f = 0; f < o_.sparse_features; ++f) {
        const float* row = Row(f, c.ids[static_cast<size_t>(i) * o_.sparse_features + f]);
        emb->insert(emb->end(), row, row + o_.dim);
      }
  }
  // One step with the gradients of examples [first, first + n): emb_grad
  // from Backward (a repeated row's gradients add up), the layers' in m.
  void Step(Dlrm& m, const Clicks& c, int first, int n, const std::vector<float>& emb_grad, float lr) {
    for (int i = 0; i < n; ++i)
      for (int f = 0; f < o_.sparse_features; ++f) {
        float* row = Row(f, c.ids[static_cast<size_t>(first + i) * o_.sparse_features + f]);
        const float* g = &emb_grad[(static_cast<size_t>(i) * o_.sparse_features + f) * o_.dim];
        for (int k = 0; k < o_.dim; ++k) row[k] -= lr * g[k];
      }
    for (DlrmPart part : {DlrmPart::kBottom, DlrmPart::kTop}) {
      DenseStack& s = m.stack(part);
      for (int l = 0; l < s.num_layers(); ++l) {
        for (size_t i = 0; i < s.weight_size(l); ++i) s.weight(l).data()[i] -= lr * s.grad_weight(l).data()[i];
        for (size_t i = 0; i < s.bias_size(l); ++i) s.bias(l).data()[i] -= lr * s.grad_bias(l).data()[i];
      }
    }
  }

 private:
  float* Row(int f, uint32_t id) { return &table_[(static_cast<size_t>(f) * rows_ + id) * o_.dim]; }
  const float* Row(int f, uint32_t id) const { return &table_[(static_cast<size_t>(f) * rows_ + id) * o_.dim]; }
  const DlrmOptions o_;
  const int rows_;
  std::vector<float> table_;
};

// The mean loss and the accuracy of m on all of c.
std::pair<double, double> Score(Dlrm& m, const HostSgd& sgd, const Clicks& c) {
  const int n = static_cast<int>(c.y.size());
  std::vector<float> emb;
  sgd.Gather(c, 0, n, &emb);
  float stats[2] = {0, 0};
  m.Evaluate(c.x.data(), emb.data(), c.y.data(), n, stats);
  return {stats[0] / n, stats[1] / n};
}

TEST(Dlrm, PlainSgdLearnsASyntheticClickLog) {
  auto dev = MakeCpuDevice();
  std::mt19937 rng(21);
  DlrmOptions o = Tiny();  // wider: robust to the seed (Tiny() gets stuck on some)
  o.bottom_hidden = {16};
  o.dim = 8;
  o.top_hidden = {16, 8};
  const int table_rows = 6, batch = 16;
  std::vector<float> score(static_cast<size_t>(o.sparse_features) * table_rows);
  std::normal_distribution<float> nd(0, 1);
  for (auto& v : score) v = nd(rng);
  const Clicks train = MakeClicks(o, 1024, table_rows, score, rng), test = MakeClicks(o, 1024, table_rows, score, rng);
  Dlrm m(dev.get(), o);
  InitLikeTorch(m, rng);
  HostSgd sgd(o, table_rows, rng);
  const auto [loss0, acc0] = Score(m, sgd, test);
  std::vector<float> emb, emb_grad(m.embedding_floats(batch));
  for (int epoch = 0; epoch < 60; ++epoch)
    for (int first = 0; first + batch <= static_cast<int>(train.y.size()); first += batch) {
      sgd.Gather(train, first, batch, &emb);
      const float* x = &train.x[static_cast<size_t>(first) * o.dense_features];
      float stats[2] = {0, 0};
      m.Forward(x, emb.data(), batch);
      m.Backward(x, &train.y[first], batch, stats, emb_grad.data(), nullptr);
      sgd.Step(m, train, first, batch, emb_grad, 0.1f);
    }
  const auto [loss, acc] = Score(m, sgd, test);
  double positive = 0;
  for (float y : test.y) positive += y;
  const double base = std::max(positive, test.y.size() - positive) / test.y.size();
  std::printf("held-out loss %.4f -> %.4f, accuracy %.3f -> %.3f (base rate %.3f)\n", loss0, loss, acc0, acc, base);
  EXPECT_LT(loss, 0.5 * loss0);
  EXPECT_GT(acc, base + 0.2);
}

// The model as ../shared/bench/torch_dlrm.py's DLRM.forward computes it,
// for any sizes: reads shape.txt (rows dense dim sparse; the bottom dims;
// the top dims) and in.bin (each layer's weight, in x out, and bias, bottom
// then top; x; the embeddings; the labels), writes out.bin (the logits, the
// mean loss, each layer's weight and bias gradients in the same order, the
// embeddings' gradient).
constexpr char kTorchScript[] = R"py(
import os, sys
os.environ.setdefault("OMP_NUM_THREADS", "1")
import numpy as np
import torch
torch.set_num_threads(1)
d = sys.argv[1]
lines = open(os.path.join(d, "shape.txt")).read().split("\n")
rows, dense, dim, nf = map(int, lines[0].split())
bdims, tdims = list(map(int, lines[1].split())), list(map(int, lines[2].split()))
flat, at = np.fromfile(os.path.join(d, "in.bin"), dtype=np.float32), 0
def take(n):
    global at
    at += n
    return torch.from_numpy(flat[at - n:at].copy())
def stack(dims, relu_last):
    mods = []
    for l in range(len(dims) - 1):
        lin = torch.nn.Linear(dims[l], dims[l + 1])
        with torch.no_grad():
            lin.weight.copy_(take(dims[l] * dims[l + 1]).reshape(dims[l], dims[l + 1]).t())
            lin.bias.copy_(take(dims[l + 1]))
        mods += [lin] + ([torch.nn.ReLU()] if l + 2 < len(dims) or relu_last else [])
    return torch.nn.Sequential(*mods)
bottom, top = stack(bdims, True), stack(tdims, False)
x = take(rows * dense).reshape(rows, dense)
e = take(rows * nf * dim).reshape(rows, nf, dim).requires_grad_()
y = take(rows)
dd = bottom(x)
v = torch.stack([dd] + [e[:, i] for i in range(nf)], dim=1)
iu = torch.triu_indices(nf + 1, nf + 1, 1)
z = torch.bmm(v, v.transpose(1, 2))[:, iu[0], iu[1]]
logits = top(torch.cat([dd, z], dim=1)).squeeze(1)
loss = torch.nn.BCEWithLogitsLoss()(logits, y)
loss.backward()
out = [logits.detach(), loss.detach().reshape(1)]
for m in list(bottom) + list(top):
    if isinstance(m, torch.nn.Linear):
        out += [m.weight.grad.t().reshape(-1), m.bias.grad]
out.append(e.grad.reshape(-1))
torch.cat([t.reshape(-1) for t in out]).numpy().astype(np.float32).tofile(os.path.join(d, "out.bin"))
)py";

void WriteFloats(std::ofstream& f, const float* p, size_t n) {
  f.write(reinterpret_cast<const char*>(p), static_cast<std::streamsize>(n * sizeof(float)));
}

// Writes kTorchScript's inputs for m and `in` into dir.
void WriteTorchInputs(const std::string& dir, Dlrm& m, const Inputs& in, int rows) {
  const DlrmOptions& o = m.options();
  std::ofstream shape(dir + "/shape.txt"), bin(dir + "/in.bin", std::ios::binary);
  shape << rows << " " << o.dense_features << " " << o.dim << " " << o.sparse_features << "\n";
  for (DlrmPart part : {DlrmPart::kBottom, DlrmPart::kTop}) {
    DenseStack& s = m.stack(part);
    for (int v : s.dims()) shape << v << " ";
    shape << "\n";
    for (int l = 0; l < s.num_layers(); ++l) {
      WriteFloats(bin, s.weight(l).data(), s.weight_size(l));
      WriteFloats(bin, s.bias(l).data(), s.bias_size(l));
    }
  }
  for (const auto* v : {&in.x, &in.emb, &in.y}) WriteFloats(bin, v->data(), v->size());
  std::ofstream(dir + "/dlrm.py") << kTorchScript;
}

// Runs kTorchScript on dir's inputs: its out.bin, empty on failure.
std::vector<float> RunTorch(const std::string& dir) {
  if (std::system(("/usr/bin/python3 " + dir + "/dlrm.py " + dir).c_str()) != 0) return {};
  std::ifstream f(dir + "/out.bin", std::ios::binary | std::ios::ate);
  std::vector<float> out(static_cast<size_t>(f.tellg()) / sizeof(float));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size() * sizeof(float)));
  return out;
}

// Compares n floats at got with want[*at ..], advancing *at.
void ExpectMatchesTorch(const float* got, size_t n, const std::vector<float>& want, size_t* at,
                        const std::string& what) {
  ASSERT_LE(*at + n, want.size()) << what;
  for (size_t i = 0; i < n; ++i)
    EXPECT_NEAR(got[i], want[*at + i], 1e-5 + 1e-3 * std::fabs(want[*at + i])) << what << " [" << i << "]";
  *at += n;
}

// Default sizes (torch_dlrm.py's model), a batch of 4.
TEST(Dlrm, MatchesPyTorchOnTheSameWeights) {
  if (std::system("/usr/bin/python3 -c 'import numpy, torch' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "/usr/bin/python3 cannot import torch and numpy (Debian: python3-torch python3-numpy)";
  auto dev = MakeCpuDevice();
  std::mt19937 rng(31);
  Dlrm m(dev.get(), DlrmOptions());
  InitLikeTorch(m, rng);
  const int rows = 4;
  const Inputs in = RandomInputs(m, rows, rng);
  std::string dir = ::testing::TempDir() + "dlrm_torch_XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  WriteTorchInputs(dir, m, in, rows);
  const std::vector<float> want = RunTorch(dir);
  std::filesystem::remove_all(dir);
  ASSERT_FALSE(want.empty()) << "the PyTorch script failed";

  float stats[2] = {0, 0};
  std::vector<float> emb_grad(m.embedding_floats(rows));
  size_t at = 0;
  ExpectMatchesTorch(m.Forward(in.x.data(), in.emb.data(), rows), rows, want, &at, "logits");
  m.Backward(in.x.data(), in.y.data(), rows, stats, emb_grad.data(), nullptr);
  const float mean_loss = stats[0] / rows;
  ExpectMatchesTorch(&mean_loss, 1, want, &at, "loss");
  for (DlrmPart part : {DlrmPart::kBottom, DlrmPart::kTop}) {
    DenseStack& s = m.stack(part);
    for (int l = 0; l < s.num_layers(); ++l) {
      const std::string layer = (part == DlrmPart::kTop ? " of top " : " of bottom ") + std::to_string(l);
      ExpectMatchesTorch(s.grad_weight(l).data(), s.weight_size(l), want, &at, "weight gradient" + layer);
      ExpectMatchesTorch(s.grad_bias(l).data(), s.bias_size(l), want, &at, "bias gradient" + layer);
    }
  }
  ExpectMatchesTorch(emb_grad.data(), emb_grad.size(), want, &at, "embedding gradient");
  EXPECT_EQ(at, want.size());
}

void ExpectNearDevice(Device* gpu, const float* got, const float* want, size_t n, float tol, const std::string& what) {
  std::vector<float> g(n);
  gpu->Download(g.data(), got, n);
  for (size_t i = 0; i < n; ++i) ASSERT_NEAR(g[i], want[i], tol * (1 + std::fabs(want[i]))) << what << " [" << i << "]";
}

// A step of the default model on both backends, the embeddings uploaded
// from page-locked memory as a trainer's would be.
TEST(Dlrm, CudaMatchesCpu) {
  std::string why;
  auto gpu = MakeCudaDevice(&why);
  if (!gpu) GTEST_SKIP() << "no GPU: " << why;
  auto cpu = MakeCpuDevice();
  Dlrm a(cpu.get(), DlrmOptions()), b(gpu.get(), DlrmOptions());
  std::mt19937 rng(41);
  InitLikeTorch(a, rng);
  for (DlrmPart part : {DlrmPart::kBottom, DlrmPart::kTop})
    for (int l = 0; l < a.stack(part).num_layers(); ++l) {
      gpu->Upload(b.stack(part).weight(l).data(), a.stack(part).weight(l).data(), a.stack(part).weight_size(l));
      gpu->Upload(b.stack(part).bias(l).data(), a.stack(part).bias(l).data(), a.stack(part).bias_size(l));
    }
  const int rows = 100;
  const Inputs in = RandomInputs(a, rows, rng);
  HostBuffer emb(gpu.get(), in.emb.size()), emb_grad(gpu.get(), in.emb.size());
  std::copy(in.emb.begin(), in.emb.end(), emb.data());
  DeviceBuffer x(gpu.get(), in.x.size()), y(gpu.get(), rows), stats(gpu.get(), 2);
  gpu->Upload(x.data(), in.x.data(), in.x.size());
  gpu->Upload(y.data(), in.y.data(), rows);
  gpu->Zero(stats.data(), 2);
  float cpu_stats[2] = {0, 0};
  std::vector<float> cpu_emb_grad(in.emb.size());
  const float* want = a.Forward(in.x.data(), in.emb.data(), rows);
  ExpectNearDevice(gpu.get(), b.Forward(x.data(), emb.data(), rows), want, rows, 1e-4f, "logits");
  a.Backward(in.x.data(), in.y.data(), rows, cpu_stats, cpu_emb_grad.data(), nullptr);
  int calls = 0;
  b.Backward(x.data(), y.data(), rows, stats.data(), emb_grad.data(), [&](DlrmPart, int) { ++calls; });
  EXPECT_EQ(calls, 3 + 1 + 2);
  ExpectNearDevice(gpu.get(), stats.data(), cpu_stats, 2, 1e-4f, "stats");
  for (size_t i = 0; i < cpu_emb_grad.size(); ++i) ASSERT_NEAR(emb_grad[i], cpu_emb_grad[i], 1e-5f) << i;
  for (DlrmPart part : {DlrmPart::kBottom, DlrmPart::kTop})
    for (int l = 0; l < a.stack(part).num_layers(); ++l) {
      DenseStack &s = a.stack(part), &t = b.stack(part);
      ExpectNearDevice(gpu.get(), t.grad_weight(l).data(), s.grad_weight(l).data(), s.weight_size(l), 1e-3f, "weight");
      ExpectNearDevice(gpu.get(), t.grad_bias(l).data(), s.grad_bias(l).data(), s.bias_size(l), 1e-3f, "bias");
    }
  std::vector<float> logits(rows), cpu_logits(rows);
  b.Predict(x.data(), emb.data(), rows, logits.data());
  a.Predict(in.x.data(), in.emb.data(), rows, cpu_logits.data());
  for (int r = 0; r < rows; ++r) EXPECT_NEAR(logits[r], cpu_logits[r], 1e-4f * (1 + std::fabs(cpu_logits[r])));
}

}  // namespace
}  // namespace shardps::worker
