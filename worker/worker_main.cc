// shardps-worker: a training worker. Pulls the parameters it needs, runs
// forward and backward on its own shard of the data, pushes gradients layer
// by layer as backward produces them, and ticks its clock.
//
//   shardps-worker --coordinator tcp://127.0.0.1:5555 --model mlp --hidden 256,128 --epochs 10
#include <CLI/CLI.hpp>
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/net.h"
#include "common/signals.h"
#include "shardps/client.h"
#include "worker/data.h"
#include "worker/device.h"
#include "worker/mlp.h"
#include "worker/trainer.h"

namespace shardps::worker {
namespace {


struct Options {
  std::string coordinator;
  std::string key_file;  // security: worker.key (docs/security.md)
  int rank = -1;
  std::string model = "mlp";
  std::string hidden = "256,128";
  int epochs = 10;
  int batch = 64;
  float lr = 0.001f;
  std::string optimizer = "adam";
  std::string device = "auto";
  std::string data_dir = kFashionMnistDir;
  int train_limit = 0, test_limit = 0;
  bool no_shuffle = false;
  uint64_t seed = 1;
  double slowdown = 1.0;
  int slow_rank = -1;  // -1: every worker is slowed down
  double predict = 2.0;  // bounded/async: weight prediction's lookahead (TrainerOptions)
  bool predict_given = false;
  std::string prefetch = "per-layer";  // bounded/async: when the next step's pulls go (TrainerOptions)
  double progress_sec = 2.0;
  std::string csv, save_params;
  double min_accuracy = -1;
  int eval_rank = 0;
  int max_steps = 0;  // per epoch, 0 = all
  bool static_shards = false;  // bounded/async: own shard instead of the shared pool
  int work_chunk = 8;          // batches per claim from the pool
  int max_fill = 2;            // batches per clock trained while the next parameters are on their way
  double fill_when_held = 0.5;  // ... once held back at this fraction of the last 16 clocks
  std::string fill_params = "fresh";  // ... on the newest values, or "at-hand"
  std::string staleness_rule = "default";
  float dc_lambda = 0.04f;
  std::string fill_push = "at-once";  // or "with-next"
  // sparse-lr
  uint64_t examples = 1'000'000, id_space = 10'000'000;
  int ids_per_example = 20, eval_examples = 20000;
};

#define CHECK_OK(expr)                                                  \
  do {                                                                  \
    Status _s = (expr);                                                 \
    if (!_s.ok()) {                                                     \
      std::fprintf(stderr, "error: %s\n", _s.ToString().c_str());      \
      std::exit(1);                                                     \
    }                                                                   \
  } while (0)

std::vector<int> ParseHidden(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    char* end;
    long v = std::strtol(item.c_str(), &end, 10);
    if (*end || v < 1 || v > 65536) {
      std::fprintf(stderr, "error: --hidden: '%s' is not a layer width in [1, 65536]\n", item.c_str());
      std::exit(2);
    }
    out.push_back(static_cast<int>(v));
  }
  return out;
}

int RunMlp(const Options& o, Client& ps, Device& dev) {
  const int rank = ps.rank();
  Dataset train, test;
  CHECK_OK(LoadFashionMnist(o.data_dir, true, &train, o.train_limit));
  const bool evaluator = rank == o.eval_rank;
  if (evaluator) CHECK_OK(LoadFashionMnist(o.data_dir, false, &test, o.test_limit));

  std::vector<int> dims = {train.cols};
  if (o.model == "mlp")
    for (int h : ParseHidden(o.hidden)) dims.push_back(h);
  dims.push_back(train.classes);
  Mlp mlp(&dev, dims);
  const int L = mlp.num_layers();

  OptimizerKind opt;
  CHECK_OK(Parse(o.optimizer, &opt));
  StalenessRule rule;
  CHECK_OK(Parse(o.staleness_rule, &rule));
  std::vector<Table> wt(L), bt(L);
  for (int l = 0; l < L; ++l) {
    TableSpec w;
    w.name = o.model + ".w" + std::to_string(l);
    w.rows = static_cast<uint64_t>(dims[l]);
    w.cols = static_cast<uint32_t>(dims[l + 1]);
    w.init = InitKind::kNormal;
    w.init_b = std::sqrt((l + 1 < L ? 2.0f : 1.0f) / dims[l]);  // He for ReLU layers
    w.seed = o.seed * 100 + static_cast<uint64_t>(l);
    w.optimizer = opt;
    w.lr = o.lr;
    w.staleness_rule = rule;
    w.dc_lambda = o.dc_lambda;
    TableSpec b = w;
    b.name = o.model + ".b" + std::to_string(l);
    b.rows = 1;
    b.init = InitKind::kZeros;
    CHECK_OK(ps.CreateTable(w, &wt[l]));
    CHECK_OK(ps.CreateTable(b, &bt[l]));
  }

  TrainerOptions to;
  to.epochs = o.epochs;
  to.batch = o.batch;
  to.max_steps = o.max_steps;
  to.shuffle = !o.no_shuffle;
  to.seed = o.seed;
  to.static_shards = o.static_shards;
  to.work_chunk = o.work_chunk;
  to.max_fill = o.max_fill;
  to.fill_when_held = o.fill_when_held;
  to.fill_fresh = o.fill_params == "fresh";
  to.fill_at_once = o.fill_push == "at-once";
  to.prefetch = o.prefetch == "early"  ? TrainerOptions::PrefetchMode::kEarly
                : o.prefetch == "late" ? TrainerOptions::PrefetchMode::kLate
                                       : TrainerOptions::PrefetchMode::kPerLayer;
  // Delay compensation corrects the same drift on the servers: not both,
  // unless asked for.
  to.predict = o.staleness_rule == "dc" && !o.predict_given ? 0.0 : o.predict;
  to.slowdown = (o.slow_rank < 0 || o.slow_rank == rank) ? o.slowdown : 1.0;
  to.progress_sec = o.progress_sec;
  to.evaluator = evaluator;
  to.csv = evaluator ? o.csv : "";
  MlpTrainer trainer(ps, dev, mlp, wt, bt, train, evaluator ? &test : nullptr, to);
  TrainResult r;
  Status s = trainer.Run(&r);
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return s.code() == Code::kInvalidArgument ? 2 : 1;
  }
  if (!o.save_params.empty() && evaluator) {
    s = trainer.SaveParams(o.save_params);
    if (!s.ok()) {
      std::fprintf(stderr, "error: %s\n", s.message().c_str());
      return 1;
    }
  }
  if (evaluator && o.min_accuracy >= 0 && r.final_accuracy < o.min_accuracy && !ps.StopRequested()) {
    std::fprintf(stderr, "error: test accuracy %.4f is below --min-accuracy %.4f\n", r.final_accuracy, o.min_accuracy);
    return 3;
  }
  return 0;
}

// Sparse logistic regression over hashed click features: the worker pulls
// only the rows its batch touches.
int RunSparseLr(const Options& o, Client& ps) {
  const int rank = ps.rank(), world = static_cast<int>(ps.num_workers());
  ClickLogOptions co;
  co.id_space = o.id_space;
  co.ids_per_example = o.ids_per_example;
  co.seed = o.seed;
  OptimizerKind opt;
  CHECK_OK(Parse(o.optimizer, &opt));
  TableSpec spec;
  spec.name = "sparse_lr.w";
  spec.kind = TableKind::kSparse;
  spec.cols = 1;
  spec.optimizer = opt;
  spec.lr = o.lr;
  spec.initial_accumulator = 0.1f;
  Table w;
  CHECK_OK(ps.CreateTable(spec, &w));
  const uint64_t kBias = ~0ull;
  const float feature_scale = 1.0f / std::sqrt(static_cast<float>(o.ids_per_example));

  // The batches of each epoch come from its pool (one per clock under sync,
  // a few at a time under bounded staleness and async), or with
  // --static-shards this worker's examples are indices rank, rank + world, ...
  const BatchSource source = ChooseBatchSource(ps.consistency(), o.static_shards);
  const bool pooled = SharesBatches(source);
  const uint64_t mine = (o.examples - static_cast<uint64_t>(rank) + world - 1) / world;
  uint64_t examples = pooled ? o.examples : std::min<uint64_t>(o.examples / world, mine);
  if (o.max_steps > 0)
    examples = std::min<uint64_t>(examples, static_cast<uint64_t>(o.max_steps) * o.batch * (pooled ? world : 1));
  EpochBatches epoch_batches(
      [&ps](uint64_t pool, uint64_t total, uint32_t max, const ClaimOptions& co, WorkRange* out) {
        return ps.ClaimWork(pool, total, max, co, out);
      },
      [&ps] { return ps.StopRequested(); }, source, examples, o.batch, o.work_chunk);
  Progress progress(o.progress_sec);
  CsvLog csv;
  if (Status s = csv.Open(rank == o.eval_rank ? o.csv : ""); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.message().c_str());
    return 2;
  }
  const double t_start = NowSeconds();
  std::vector<uint64_t> keys;
  std::vector<float> vals, grads;
  std::unordered_map<uint64_t, uint32_t> slot;
  ClickBatch batch, one;
  double final_acc = -1;
  for (int epoch = 1; epoch <= o.epochs; ++epoch) {
    double epoch_loss = 0;
    int trained = 0;  // batches of this epoch
    epoch_batches.Start(epoch);
    for (;;) {
      Batch b;
      CHECK_OK(epoch_batches.Next(&b));
      if (b.idle) {  // sync: no batch for this worker at this clock
        CHECK_OK(ps.Clock(/*trained=*/false));
        continue;
      }
      if (b.n == 0) break;
      ++trained;
      batch.offsets.assign(1, 0);
      batch.ids.clear();
      batch.labels.clear();
      for (int i = 0; i < b.n; ++i) {
        const uint64_t pos = b.first + static_cast<uint64_t>(i);
        const uint64_t index = pooled ? pos : static_cast<uint64_t>(rank) + static_cast<uint64_t>(world) * pos;
        GenerateClicks(co, 0, index, 1, &one);
        batch.ids.insert(batch.ids.end(), one.ids.begin(), one.ids.end());
        batch.labels.push_back(one.labels[0]);
        batch.offsets.push_back(static_cast<uint32_t>(batch.ids.size()));
      }
      keys.assign(1, kBias);
      slot.clear();
      slot[kBias] = 0;
      for (uint64_t id : batch.ids)
        if (slot.try_emplace(id, static_cast<uint32_t>(keys.size())).second) keys.push_back(id);
      vals.resize(keys.size());
      Request pull = ps.Pull(w, keys, vals);
      CHECK_OK(pull.Wait());
      const int64_t stale = std::max<int64_t>(0, ps.clock() - pull.min_clock());
      grads.assign(keys.size(), 0.0f);
      double loss = 0;
      const float inv = 1.0f / b.n;
      for (int i = 0; i < b.n; ++i) {
        float z = vals[0];
        for (uint32_t k = batch.offsets[i]; k < batch.offsets[i + 1]; ++k) z += vals[slot[batch.ids[k]]] * feature_scale;
        const float p = 1.0f / (1.0f + std::exp(-z));
        const float y = batch.labels[i];
        loss -= y * std::log(std::max(p, 1e-7f)) + (1 - y) * std::log(std::max(1 - p, 1e-7f));
        const float d = (p - y) * inv;
        grads[0] += d;
        for (uint32_t k = batch.offsets[i]; k < batch.offsets[i + 1]; ++k) grads[slot[batch.ids[k]]] += d * feature_scale;
      }
      CHECK_OK(ps.Push(w, keys, grads).Wait());
      CHECK_OK(ps.Clock());
      epoch_loss += loss / b.n;
      progress.Step(rank, epoch, static_cast<int>(b.first / o.batch) + 1, epoch_batches.steps(), b.n, loss / b.n,
                    stale);
    }
    if (epoch_batches.stopped()) {
      std::printf("worker %d | stopped on request in epoch %d after %d batches of it\n", rank, epoch, trained);
      break;
    }
    if (rank == o.eval_rank && trained > 0) {
      ClickBatch tb;
      GenerateClicks(co, 1, 0, static_cast<uint32_t>(o.eval_examples), &tb);
      std::vector<uint64_t> tk(tb.ids);
      tk.push_back(kBias);
      std::sort(tk.begin(), tk.end());
      tk.erase(std::unique(tk.begin(), tk.end()), tk.end());
      std::vector<float> tv(tk.size());
      CHECK_OK(ps.Pull(w, tk, tv).Wait());
      std::unordered_map<uint64_t, float> wmap;
      for (size_t i = 0; i < tk.size(); ++i) wmap[tk[i]] = tv[i];
      int correct = 0;
      for (int i = 0; i < o.eval_examples; ++i) {
        float z = wmap[kBias];
        for (uint32_t k = tb.offsets[i]; k < tb.offsets[i + 1]; ++k) z += wmap[tb.ids[k]] * feature_scale;
        correct += (z > 0) == (tb.labels[i] > 0.5f);
      }
      final_acc = static_cast<double>(correct) / o.eval_examples;
      std::printf("worker %d | epoch %d done | %llu %s %llu examples | train loss %.4f | test accuracy %.2f%% (best "
                  "possible %.2f%%) | %.1f s\n",
                  rank, epoch, static_cast<unsigned long long>(epoch_batches.handed()), pooled ? "of" : "of its shard's",
                  static_cast<unsigned long long>(epoch_batches.examples()), epoch_loss / std::max(1, trained), 100 * final_acc, 100 * tb.bayes_accuracy, NowSeconds() - t_start);
      std::fflush(stdout);
      csv.Row(NowSeconds() - t_start, epoch, epoch_loss / std::max(1, trained), final_acc);
    }
  }
  const double secs = NowSeconds() - t_start;
  std::printf("worker %d | finished in %.1f s | %ld batches | %.0f samples/s\n", rank, secs, progress.samples() / o.batch,
              progress.samples() / secs);
  if (rank == o.eval_rank && o.min_accuracy >= 0 && final_acc < o.min_accuracy && !ps.StopRequested()) {
    std::fprintf(stderr, "error: test accuracy %.4f is below --min-accuracy %.4f\n", final_acc, o.min_accuracy);
    return 3;
  }
  return 0;
}

}  // namespace
}  // namespace shardps::worker

int main(int argc, char** argv) {
  using namespace shardps;
  using namespace shardps::worker;
  CLI::App app{"shardps training worker"};
  Options o;
  app.add_option("--coordinator", o.coordinator, "coordinator endpoint")->required();
  app.add_option("--key", o.key_file, "security on: the job's worker key (shardps-keygen DIR makes DIR/worker.key)")->envname("SHARDPS_KEY");
  app.add_option("--rank", o.rank, "worker rank (default: assigned)")->check(CLI::Range(-1, 65535));
  app.add_option("--model", o.model, "softmax | mlp | sparse-lr")->check(CLI::IsMember({"softmax", "mlp", "sparse-lr"}))->capture_default_str();
  app.add_option("--hidden", o.hidden, "MLP hidden layer widths, comma-separated")->capture_default_str();
  app.add_option("--epochs", o.epochs)->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_option("--batch", o.batch, "examples per step per worker")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--lr", o.lr, "learning rate of the server-side optimizer")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--optimizer", o.optimizer, "sgd | momentum | adagrad | adam")->check(CLI::IsMember({"sgd", "momentum", "adagrad", "adam"}))->capture_default_str();
  app.add_option("--device", o.device, "auto | cpu | cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}))->capture_default_str();
  app.add_option("--data-dir", o.data_dir, "Fashion-MNIST IDX files")->capture_default_str();
  app.add_option("--train-limit", o.train_limit, "use only the first N training examples")->check(CLI::NonNegativeNumber);
  app.add_option("--test-limit", o.test_limit, "use only the first N test examples")->check(CLI::NonNegativeNumber);
  app.add_flag("--no-shuffle", o.no_shuffle, "keep the data order (no per-epoch shuffle)");
  app.add_option("--seed", o.seed)->capture_default_str();
  app.add_option("--slowdown", o.slowdown, "run this many times slower (a straggler), e.g. 2")->check(CLI::Range(1.0, 1000.0))->capture_default_str();
  app.add_option("--slow-rank", o.slow_rank, "only this worker is slowed down (default: all)")->check(CLI::Range(-1, 65535));
  app.add_option("--prefetch", o.prefetch, "bounded/async: when the next step's parameters are pulled: per-layer (each layer's pull right after its push, during backward), early (after forward, before the pushes: the values miss this worker's own step), late (after the pushes and the tick)")->check(CLI::IsMember({"per-layer", "early", "late"}))->capture_default_str();
  app.add_option("--predict", o.predict, "bounded/async: compute each gradient on the parameters extrapolated along their drift to where they are expected when its push is applied, this many times that far (1: the expected position; 2 learned best; 0: on the values pulled; with --staleness-rule dc the default is 0)")->check(CLI::Range(0.0, 8.0))->capture_default_str();
  app.add_option("--progress-sec", o.progress_sec, "seconds between progress lines")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--csv", o.csv, "the evaluating worker writes (time, epoch, loss, accuracy) here");
  app.add_option("--save-params", o.save_params, "the evaluating worker writes the final parameters (float32) here");
  app.add_option("--min-accuracy", o.min_accuracy, "exit 3 if the final test accuracy is lower (0..1)")->check(CLI::Range(0.0, 1.0));
  app.add_option("--eval-rank", o.eval_rank, "the worker that evaluates")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--max-steps", o.max_steps, "at most this many steps per epoch (per worker)")->check(CLI::NonNegativeNumber);
  app.add_flag("--static-shards", o.static_shards, "bounded/async: train only this rank's shard, not batches claimed from the epoch's shared pool");
  app.add_option("--work-chunk", o.work_chunk, "bounded/async: batches claimed from the pool at a time")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--staleness-rule", o.staleness_rule, "bounded/async: how the servers weigh a stale gradient: default (scale-lr), none, scale-lr, dc (delay compensation; makes --predict default to 0) (docs/consistency.md)")->capture_default_str();
  app.add_option("--dc-lambda", o.dc_lambda, "--staleness-rule dc: lambda of the delay compensation")->check(CLI::Range(0.0f, 1e6f))->capture_default_str();
  app.add_option("--fill-push", o.fill_push, "bounded: a batch trained while held back is pushed at once, or with the next step's gradients (as steps of one push)")->check(CLI::IsMember({"at-once", "with-next"}))->capture_default_str();
  app.add_option("--max-fill", o.max_fill, "bounded: batches per clock trained while the next parameters are held back (0: wait); each is its own optimizer step (--fill-params, --fill-push, --fill-when-held)")->check(CLI::Range(0, 63))->capture_default_str();
  app.add_option("--fill-when-held", o.fill_when_held, "bounded: train such batches only while held back at least this fraction of the last 16 clocks (a persistent straggler; 0: whenever held back)")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app.add_option("--fill-params", o.fill_params, "bounded: such a batch trains on the newest values the servers hold (fresh: one pull at the clock already read, answered at once) or on the parameters at hand")->check(CLI::IsMember({"fresh", "at-hand"}))->capture_default_str();
  app.add_option("--examples", o.examples, "sparse-lr: training examples")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--id-space", o.id_space, "sparse-lr: feature ids")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--ids-per-example", o.ids_per_example, "sparse-lr: features per example")->check(CLI::Range(1, 10000))->capture_default_str();
  app.add_option("--eval-examples", o.eval_examples, "sparse-lr: test examples")->check(CLI::Range(1, 10000000))->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  o.predict_given = app.count("--predict") > 0;
  if (o.model == "mlp") (void)ParseHidden(o.hidden);  // a bad --hidden is refused before connecting

  DieWithParentIfAsked();
  TuneAllocatorForLargeMessages();
  openblas_set_num_threads(1);  // one core per worker; the servers need theirs
  ClientOptions co;
  co.coordinator = o.coordinator;
  co.rank = o.rank;
  co.key_file = o.key_file;
  std::unique_ptr<Client> ps;
  Status s = Client::Connect(co, &ps);
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return 1;
  }
  int rc;
  if (o.model == "sparse-lr") {
    std::printf("worker %d | sparse logistic regression | %s consistency\n", ps->rank(), std::string(ToString(ps->consistency())).c_str());
    rc = RunSparseLr(o, *ps);
  } else {
    DeviceKind kind;
    CHECK_OK(ParseDeviceKind(o.device, &kind));
    std::unique_ptr<Device> dev;
    std::string why;
    CHECK_OK(MakeDevice(kind, &dev, &why));
    std::printf("worker %d | %s | device %s | %s consistency\n", ps->rank(), o.model.c_str(), why.c_str(),
                std::string(ToString(ps->consistency())).c_str());
    std::fflush(stdout);
    rc = RunMlp(o, *ps, *dev);
  }
  s = ps->Close();
  if (!s.ok()) std::fprintf(stderr, "warning: %s\n", s.ToString().c_str());
  return rc;
}
