// An example trainer that embeds the shardps client library: linear
// regression on synthetic data, every worker training on its own shard.
//
// It uses only the public headers (<shardps/client.h>) and shows the whole
// life of a worker: connect, define the model's table, then pull -> compute
// the gradient -> push -> clock, and leave.
//
//   linear_trainer --coordinator tcp://127.0.0.1:5555 --steps 200 [--rank 0]
//
// Each worker draws its own shard of a data set whose true weights are
// known, so the printed loss must fall towards the noise floor.
#include <shardps/client.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace {

struct Args {
  std::string coordinator;
  int steps = 200;
  int batch = 64;
  int features = 512;
  float lr = 0.1f;
  int rank = -1;  // -1: the coordinator assigns one
  bool check = false;  // exit 3 unless |w - w_true| fell below 10% of its start
};

bool ParseArgs(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "--check") {
      a->check = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "error: %s needs a value\n", k.c_str());
      return false;
    }
    std::string v = argv[++i];
    char* end = nullptr;
    if (k == "--coordinator") a->coordinator = v;
    else if (k == "--steps") a->steps = static_cast<int>(std::strtol(v.c_str(), &end, 10));
    else if (k == "--batch") a->batch = static_cast<int>(std::strtol(v.c_str(), &end, 10));
    else if (k == "--features") a->features = static_cast<int>(std::strtol(v.c_str(), &end, 10));
    else if (k == "--lr") a->lr = std::strtof(v.c_str(), &end);
    else if (k == "--rank") a->rank = static_cast<int>(std::strtol(v.c_str(), &end, 10));
    else {
      std::fprintf(stderr, "error: unknown flag %s (flags: --coordinator --rank --steps --batch --features --lr --check)\n", k.c_str());
      return false;
    }
    if (end && *end) {
      std::fprintf(stderr, "error: %s: '%s' is not a number\n", k.c_str(), v.c_str());
      return false;
    }
  }
  if (a->coordinator.empty()) {
    std::fprintf(stderr, "error: --coordinator is required\n");
    return false;
  }
  if (a->steps < 1 || a->batch < 1 || a->features < 1 || !(a->lr > 0)) {
    std::fprintf(stderr, "error: --steps, --batch, --features and --lr must be positive\n");
    return false;
  }
  return true;
}

// Connects as a worker (the coordinator assigns a rank unless --rank).
std::unique_ptr<shardps::Client> Connect(const Args& args) {
  shardps::ClientOptions opt;
  opt.coordinator = args.coordinator;
  opt.rank = args.rank;
  std::unique_ptr<shardps::Client> ps;
  shardps::Status s = shardps::Client::Connect(opt, &ps);
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return nullptr;
  }
  return ps;
}

// The model: one dense table of `features` weights, plain SGD on the
// server. Every worker defines it; all get the same table.
bool DefineModel(shardps::Client& ps, const Args& args, shardps::Table* w) {
  shardps::TableSpec spec;
  spec.name = "linear.w";
  spec.rows = static_cast<uint64_t>(args.features);
  spec.cols = 1;
  spec.optimizer = shardps::OptimizerKind::kSGD;
  spec.lr = args.lr;
  shardps::Status s = ps.CreateTable(spec, w);
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return false;
  }
  return true;
}

// This worker's shard: samples drawn with a rank-specific seed around true
// weights every worker agrees on.
class Shard {
 public:
  Shard(int features, int rank) : w_true_(features), rng_(1000 + rank) {
    std::mt19937 truth_rng(12345);
    for (auto& v : w_true_) v = nd_(truth_rng);
  }
  const std::vector<float>& w_true() const { return w_true_; }
  // Fills x (batch x features) and y (batch) with fresh samples.
  void Draw(std::vector<float>* x, std::vector<float>* y) {
    const size_t features = w_true_.size();
    for (size_t i = 0; i < y->size(); ++i) {
      float dot = 0;
      for (size_t j = 0; j < features; ++j) {
        float v = nd_(rng_);
        (*x)[i * features + j] = v;
        dot += v * w_true_[j];
      }
      (*y)[i] = dot + 0.1f * nd_(rng_);
    }
  }

 private:
  std::normal_distribution<float> nd_{0.0f, 1.0f};
  std::vector<float> w_true_;
  std::mt19937 rng_;
};

// The loss 0.5 * mean (x.w - y)^2 over the batch; its gradient into *grad.
double LossAndGradient(const std::vector<float>& params, const std::vector<float>& x, const std::vector<float>& y,
                       std::vector<float>* grad) {
  const size_t batch = y.size(), features = params.size();
  std::fill(grad->begin(), grad->end(), 0.0f);
  double loss = 0;
  const float scale = 1.0f / static_cast<float>(batch);
  for (size_t i = 0; i < batch; ++i) {
    const float* xi = &x[i * features];
    float r = -y[i];
    for (size_t j = 0; j < features; ++j) r += xi[j] * params[j];
    loss += 0.5 * r * r * scale;
    for (size_t j = 0; j < features; ++j) (*grad)[j] += r * xi[j] * scale;
  }
  return loss;
}

// The worker's loop: pull -> compute the gradient -> push -> clock, `steps`
// times. *params: the last parameters pulled.
bool Train(shardps::Client& ps, const shardps::Table& w, const Args& args, Shard& shard, std::vector<float>* params) {
  std::vector<float> grad(w.size());
  std::vector<float> x(static_cast<size_t>(args.batch) * args.features), y(args.batch);
  for (int step = 0; step < args.steps; ++step) {
    shard.Draw(&x, &y);
    shardps::Status s = ps.Pull(w, *params).Wait();
    if (!s.ok()) {
      std::fprintf(stderr, "error: pull: %s\n", s.ToString().c_str());
      return false;
    }
    const double loss = LossAndGradient(*params, x, y, &grad);
    s = ps.Push(w, grad).Wait();
    if (s.ok()) s = ps.Clock();
    if (!s.ok()) {
      std::fprintf(stderr, "error: push: %s\n", s.ToString().c_str());
      return false;
    }
    if (step % 20 == 0 || step + 1 == args.steps)
      std::printf("worker %d step %4d loss %.5f\n", ps.rank(), step, loss);
  }
  return true;
}

// |a - b|
double Distance(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t j = 0; j < a.size(); ++j) d += (a[j] - b[j]) * (a[j] - b[j]);
  return std::sqrt(d);
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!ParseArgs(argc, argv, &args)) return 2;
  std::unique_ptr<shardps::Client> ps = Connect(args);
  if (!ps) return 1;
  shardps::Table w;
  if (!DefineModel(*ps, args, &w)) return 1;

  Shard shard(args.features, ps->rank());
  std::vector<float> params(w.size());
  const auto t0 = std::chrono::steady_clock::now();
  if (!Train(*ps, w, args, shard, &params)) return 1;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  const double err = Distance(params, shard.w_true());
  const double start = Distance(std::vector<float>(params.size(), 0.0f), shard.w_true());  // the table starts at zero
  std::printf("worker %d done: %d steps in %.2f s, |w - w_true| = %.4f (started at %.4f)\n", ps->rank(),
              args.steps, secs, err, start);
  shardps::Status s = ps->Close();
  if (!s.ok()) std::fprintf(stderr, "warning: %s\n", s.ToString().c_str());
  if (args.check && !(err < 0.1 * start)) {
    std::fprintf(stderr, "error: the model did not converge (|w - w_true| = %.4f)\n", err);
    return 3;
  }
  return 0;
}
