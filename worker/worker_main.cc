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

namespace shardps::worker {
namespace {

using Sec = std::chrono::duration<double>;
double Now() { return Sec(std::chrono::steady_clock::now().time_since_epoch()).count(); }

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
  bool late_prefetch = false;  // bounded/async: pull after the pushes, not during backward
  double progress_sec = 2.0;
  std::string csv, save_params;
  double min_accuracy = -1;
  int eval_rank = 0;
  int max_steps = 0;  // per epoch, 0 = all
  bool static_shards = false;  // bounded/async: own shard instead of the shared pool
  int work_chunk = 8;          // batches per claim from the pool
  int max_fill = 2;            // batches per clock trained while the next parameters are on their way
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

// Writes (time, epoch, loss, accuracy) rows.
class CsvLog {
 public:
  explicit CsvLog(const std::string& path) {
    if (path.empty()) return;
    f_.open(path, std::ios::trunc);
    if (!f_) {
      std::fprintf(stderr, "error: cannot write --csv '%s'\n", path.c_str());
      std::exit(2);
    }
    f_ << "time_s,epoch,loss,test_accuracy\n";
  }
  void Row(double t, int epoch, double loss, double acc) {
    if (f_.is_open()) f_ << t << "," << epoch << "," << loss << "," << acc << std::endl;
  }

 private:
  std::ofstream f_;
};

// Progress line every `interval` seconds.
struct Progress {
  double interval, last = Now(), start = Now();
  long samples = 0, since_samples = 0;
  double loss_sum = 0;
  long loss_n = 0;
  int64_t max_stale = 0;
  void Step(int rank, int epoch, int step, int steps, long n, double loss, int64_t stale) {
    samples += n;
    since_samples += n;
    loss_sum += loss;
    loss_n += 1;
    max_stale = std::max(max_stale, stale);
    double now = Now();
    if (now - last >= interval) {
      std::printf("worker %d | epoch %d step %5d/%d | loss %.4f | %7.0f samples/s | staleness %lld\n", rank, epoch,
                  step, steps, loss_sum / std::max(1L, loss_n), since_samples / (now - last),
                  static_cast<long long>(max_stale));
      std::fflush(stdout);
      last = now;
      since_samples = 0;
      loss_sum = 0;
      loss_n = 0;
      max_stale = 0;
    }
  }
};

// Bounded and async workers share each epoch's batches through a work pool
// (docs/worker.md, "Stragglers"); sync keeps fixed shards, which its exact
// equivalence to one process needs.
bool SharesBatches(const Options& o, const Client& ps) {
  return ps.consistency() != Consistency::kSync && !o.static_shards;
}

// The batches this worker trains in one epoch, by their position in it:
// all `steps` of its own shard, or (pooled) those it claims from the
// epoch's pool of `steps` batches, `chunk` at a time.
class EpochBatches {
 public:
  EpochBatches(Client& ps, bool pooled, int steps, int chunk)
      : ps_(ps), pooled_(pooled), steps_(steps), chunk_(chunk) {}
  void Start(int epoch) {
    epoch_ = epoch;
    next_ = 0;
    grant_ = WorkRange{};
  }
  // The next batch of the epoch, or -1 when the epoch is done or the job
  // was asked to stop (stopped() says which).
  int Next() {
    if (ps_.StopRequested()) return -1;
    if (!pooled_) return next_ < steps_ ? next_++ : -1;
    if (grant_.empty()) {
      CHECK_OK(ps_.ClaimWork(static_cast<uint64_t>(epoch_), static_cast<uint64_t>(steps_),
                             static_cast<uint32_t>(chunk_), &grant_));
      if (grant_.empty()) return -1;
    }
    return static_cast<int>(grant_.begin++);
  }
  bool stopped() const { return ps_.StopRequested(); }

 private:
  Client& ps_;
  const bool pooled_;
  const int steps_, chunk_;
  int epoch_ = 0, next_ = 0;
  WorkRange grant_;
};

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
  const int rank = ps.rank(), world = static_cast<int>(ps.num_workers());
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

  // Host buffers: pulled parameters, gradients (borrowed by pushes until
  // they complete), the batch.
  // (Page-locked on a GPU, so uploads run asynchronously on the stream.)
  std::vector<HostBuffer> pw, pb, gw, gb;
  for (int l = 0; l < L; ++l) {
    pw.emplace_back(&dev, mlp.weight_size(l));
    pb.emplace_back(&dev, mlp.bias_size(l));
    gw.emplace_back(&dev, mlp.weight_size(l));
    gb.emplace_back(&dev, mlp.bias_size(l));
  }
  const int B = o.batch;
  HostBuffer hx(&dev, static_cast<size_t>(B) * train.cols), hy(&dev, B);
  DeviceBuffer dx(&dev, hx.size()), dy(&dev, B), dstats(&dev, 2);

  std::vector<Request> pulls, pushes;
  // ahead: for the next clock, issued before this clock's pushes.
  auto issue_pulls = [&](bool ahead) {
    pulls.clear();
    for (int l = 0; l < L; ++l) {
      std::span<float> w(pw[l].data(), pw[l].size()), b(pb[l].data(), pb[l].size());
      pulls.push_back(ahead ? ps.Prefetch(wt[l], w) : ps.Pull(wt[l], w));
      pulls.push_back(ahead ? ps.Prefetch(bt[l], b) : ps.Pull(bt[l], b));
    }
  };
  auto wait_all = [&](std::vector<Request>& rs, int64_t* min_clock) {
    for (auto& r : rs) {
      CHECK_OK(r.Wait());
      if (min_clock) *min_clock = std::min(*min_clock, r.min_clock());
    }
  };
  // Staleness of the pushes as the servers measured it (updates).
  uint64_t push_stale_max = 0, push_stale_sum = 0, push_stale_n = 0;
  auto drain_pushes = [&] {
    for (auto& r : pushes) {
      CHECK_OK(r.Wait());
      const uint64_t st = r.staleness();
      push_stale_max = std::max(push_stale_max, st);
      push_stale_sum += st;
      ++push_stale_n;
    }
    pushes.clear();
  };
  // The versions of the parameters on the device (per table: w0, b0, w1, ...),
  // what the gradients computed on them are based on.
  std::vector<PullStamp> on_device(2 * L);
  auto use_pulls = [&] {
    for (size_t i = 0; i < pulls.size(); ++i) on_device[i] = pulls[i].stamp();
  };

  // Where the batches come from. Sync: rank i of N takes every N-th example
  // of the epoch's permutation (its own shard; the N batches of step t are
  // the one batch of a single process, which sync relies on). Bounded and
  // async: the batches of the whole epoch form a work pool shared through
  // the coordinator, claimed a few at a time, so a fast worker trains more
  // of the epoch than a slow one (docs/worker.md, "Stragglers").
  const bool pooled = SharesBatches(o, ps);
  const uint32_t shard = static_cast<uint32_t>(pooled ? train.rows : train.rows / world);
  int steps = static_cast<int>(shard / B);
  if (o.max_steps > 0) steps = std::min(steps, o.max_steps * (pooled ? world : 1));
  if (steps == 0) {
    std::fprintf(stderr, "error: %u examples per worker is less than one batch of %d\n", shard, B);
    return 2;
  }
  EpochBatches epoch_batches(ps, pooled, steps, o.work_chunk);
  std::vector<uint32_t> order;

  CsvLog csv(evaluator ? o.csv : "");
  Progress progress{o.progress_sec};
  const double t_start = Now();
  double final_acc = -1;
  // Under bounded staleness (s >= 1) and async the next step's pull may be
  // sent before this step's pushes (Client::Prefetch); under sync it would
  // only be parked, and the evaluator wants the end-of-epoch model.
  const bool prefetch_early = !o.late_prefetch && (ps.consistency() == Consistency::kAsync ||
                                                   (ps.consistency() == Consistency::kBounded && ps.staleness() >= 1));
  // A straggler (--slowdown k): every step takes k times as long as this
  // worker's own share of it: its compute and pushes plus the quickest pull
  // it saw lately (what a pull costs when nobody holds it back).
  const bool slowed = o.slowdown > 1.0 && (o.slow_rank < 0 || o.slow_rank == rank);
  std::vector<double> recent_waits(32, 1e9);
  size_t wait_i = 0;
  long filled = 0;
  int fills_this_clock = 0;
  // Gradients of the batches trained while held back (fill_w[f][l], ...),
  // not pushed yet, and the parameters' versions each was computed on: they
  // go out with the next step's gradients as one push of several optimizer
  // steps (Client::PushSteps).
  const int max_fill = std::max(0, o.max_fill);
  std::vector<std::vector<HostBuffer>> fill_w(max_fill), fill_b(max_fill);
  std::vector<std::vector<PullStamp>> fill_based(max_fill);
  for (int f = 0; f < max_fill; ++f)
    for (int l = 0; l < L; ++l) {
      fill_w[f].emplace_back(&dev, mlp.weight_size(l));
      fill_b[f].emplace_back(&dev, mlp.bias_size(l));
    }
  int acc_batches = 0;
  const bool fill_at_once = o.fill_push == "at-once";
  // Layer l's push: the fills' gradients, then `gw`/`gb` (unless null).
  auto push_layer = [&](int l, const float* gwl, const float* gbl) {
    if (acc_batches == 0) {
      pushes.push_back(ps.Push(wt[l], std::span<const float>(gwl, gw[l].size())));
      pushes.push_back(ps.Push(bt[l], std::span<const float>(gbl, gb[l].size())));
      return;
    }
    std::vector<PushStep> sw, sb;
    for (int f = 0; f < acc_batches; ++f) {
      sw.push_back({std::span<const float>(fill_w[f][l].data(), fill_w[f][l].size()), fill_based[f][2 * l]});
      sb.push_back({std::span<const float>(fill_b[f][l].data(), fill_b[f][l].size()), fill_based[f][2 * l + 1]});
    }
    if (gwl) {
      sw.push_back({std::span<const float>(gwl, gw[l].size()), on_device[2 * l]});
      sb.push_back({std::span<const float>(gbl, gb[l].size()), on_device[2 * l + 1]});
    }
    pushes.push_back(ps.PushSteps(wt[l], sw));
    pushes.push_back(ps.PushSteps(bt[l], sb));
  };
  auto flush_acc = [&] {
    if (acc_batches == 0) return;
    drain_pushes();
    for (int l = 0; l < L; ++l) push_layer(l, nullptr, nullptr);
    acc_batches = 0;
  };
  bool have_params = false;
  int64_t stale = 0, last_min_clock = 0;
  Request tick;
  issue_pulls(false);
  int epochs_done = 0;
  for (int epoch = 1; epoch <= o.epochs; ++epoch) {
    order = EpochShard(static_cast<uint32_t>(train.rows), pooled ? 0 : rank, pooled ? 1 : world, o.seed, epoch,
                       !o.no_shuffle);
    epoch_batches.Start(epoch);
    double epoch_loss = 0;
    int trained = 0;  // batches of this epoch
    for (int step; (step = epoch_batches.Next()) >= 0;) {
      const double t0 = Now();
      for (int i = 0; i < B; ++i) {
        const uint32_t ex = order[static_cast<size_t>(step) * B + i];
        std::copy_n(&train.x[static_cast<size_t>(ex) * train.cols], train.cols, &hx[static_cast<size_t>(i) * train.cols]);
        hy[i] = train.y[ex];
      }
      dev.Upload(dx.data(), hx.data(), hx.size());
      dev.Upload(dy.data(), hy.data(), B);
      dev.Zero(dstats.data(), 2);
      // Pooled: rather than idle while the staleness bound holds the next
      // clock's parameters back (as of the last pull, the slowest worker was
      // too far behind for this clock's pull to go through), train this
      // batch on the parameters at hand, which the bound allowed for this
      // clock. Its gradients are added to the next step's push: for SGD the
      // same update as pushing them now, without the traffic and the
      // server's work. Each such batch is one the slower workers do not have
      // to train.
      const bool held_back = ps.consistency() == Consistency::kBounded &&
                             ps.clock() - static_cast<int64_t>(ps.staleness()) > last_min_clock;
      const bool fill = pooled && have_params && held_back && fills_this_clock < o.max_fill &&
                        std::any_of(pulls.begin(), pulls.end(), [](const Request& r) { return !r.Done(); });
      double waited = 0;
      if (fill) {
        ++fills_this_clock;
        ++filled;
        // The fill buffers of the previous clock's push must be free.
        drain_pushes();
        const int f = fills_this_clock - 1;
        fill_based[f] = on_device;
        mlp.Forward(dx.data(), B);
        mlp.Backward(dx.data(), dy.data(), B, dstats.data(), [&](int l) {
          dev.Download(fill_w[f][l].data(), mlp.grad_weight(l).data(), fill_w[f][l].size());
          dev.Download(fill_b[f][l].data(), mlp.grad_bias(l).data(), fill_b[f][l].size());
          if (fill_at_once) {
            const PushStep sw[] = {{std::span<const float>(fill_w[f][l].data(), fill_w[f][l].size()), on_device[2 * l]}};
            const PushStep sb[] = {{std::span<const float>(fill_b[f][l].data(), fill_b[f][l].size()), on_device[2 * l + 1]}};
            pushes.push_back(ps.PushSteps(wt[l], sw));
            pushes.push_back(ps.PushSteps(bt[l], sb));
          }
        });
        if (!fill_at_once) ++acc_batches;
      } else {
        int64_t min_clock = INT64_MAX;
        const double w0 = Now();
        wait_all(pulls, &min_clock);
        waited = Now() - w0;
        recent_waits[wait_i++ % recent_waits.size()] = waited;
        stale = std::max<int64_t>(0, ps.clock() - min_clock);
        last_min_clock = min_clock;
        use_pulls();
        for (int l = 0; l < L; ++l) {
          dev.Upload(mlp.weight(l).data(), pw[l].data(), pw[l].size());
          dev.Upload(mlp.bias(l).data(), pb[l].data(), pb[l].size());
        }
        have_params = true;
        fills_this_clock = 0;
        mlp.Forward(dx.data(), B);
        const bool last_of_epoch = !pooled && step + 1 == steps;
        if (prefetch_early && !(evaluator && last_of_epoch)) {
          // The parameters are on the device: fetch the next step's now, so
          // they travel while backward runs and the gradients are pushed.
          dev.Sync();
          issue_pulls(true);
        }
        drain_pushes();  // the previous step's gradient buffers are free again
        mlp.Backward(dx.data(), dy.data(), B, dstats.data(), [&](int l) {
          dev.Download(gw[l].data(), mlp.grad_weight(l).data(), gw[l].size());
          dev.Download(gb[l].data(), mlp.grad_bias(l).data(), gb[l].size());
          push_layer(l, gw[l].data(), gb[l].data());
        });
        acc_batches = 0;
        CHECK_OK(tick.Wait());  // the previous tick (long answered)
        tick = ps.ClockAsync();
        // Otherwise fetch now, after this step's pushes and tick: the servers
        // answer when the model allows.
        if (!prefetch_early || (evaluator && last_of_epoch)) issue_pulls(false);
      }
      float stats[2];
      dev.Download(stats, dstats.data(), 2);
      const double loss = stats[0] / B;
      epoch_loss += loss;
      ++trained;
      if (slowed) {
        const double own = Now() - t0 - waited;
        // (recent_waits holds this step's wait too.)
        const double pull = fill ? 0.0 : *std::min_element(recent_waits.begin(), recent_waits.end());
        std::this_thread::sleep_for(Sec((own + pull) * (o.slowdown - 1.0)));
      }
      progress.Step(rank, epoch, step + 1, steps, B, loss, stale);
    }
    flush_acc();
    if (epoch_batches.stopped()) {
      std::printf("worker %d | stopped on request in epoch %d after %d batches of it\n", rank, epoch, trained);
      break;
    }
    epochs_done = epoch;
    if (evaluator) {
      if (pooled) {
        // The outstanding prefetch may predate this worker's last pushes:
        // read the end-of-epoch model afresh.
        drain_pushes();
        int64_t ignored = INT64_MAX;
        wait_all(pulls, &ignored);
        issue_pulls(false);
      }
      // Evaluate with the parameters of the prefetched pull: the model as of
      // the end of this epoch.
      int64_t mc = INT64_MAX;
      wait_all(pulls, &mc);
      for (int l = 0; l < L; ++l) {
        dev.Upload(mlp.weight(l).data(), pw[l].data(), pw[l].size());
        dev.Upload(mlp.bias(l).data(), pb[l].data(), pb[l].size());
      }
      const int EB = 1000;
      DeviceBuffer ex(&dev, static_cast<size_t>(EB) * test.cols), ey(&dev, EB), es(&dev, 2);
      dev.Zero(es.data(), 2);
      for (int first = 0; first < test.rows; first += EB) {
        const int n = std::min(EB, test.rows - first);
        dev.Upload(ex.data(), &test.x[static_cast<size_t>(first) * test.cols], static_cast<size_t>(n) * test.cols);
        dev.Upload(ey.data(), &test.y[first], n);
        mlp.Evaluate(ex.data(), ey.data(), n, es.data());
      }
      float st[2];
      dev.Download(st, es.data(), 2);
      final_acc = st[1] / test.rows;
      const double mean_loss = epoch_loss / std::max(1, trained);
      std::printf("worker %d | epoch %d done | train loss %.4f | test accuracy %.2f%% | %.1f s\n", rank, epoch,
                  mean_loss, 100.0 * final_acc, Now() - t_start);
      std::fflush(stdout);
      csv.Row(Now() - t_start, epoch, mean_loss, final_acc);
      // The pulls were consumed: fetch again for the next step. (The model
      // on the device is the one just evaluated: a fill batch may use it.)
      issue_pulls(false);
    }
  }
  drain_pushes();
  CHECK_OK(tick.Wait());
  int64_t mc = INT64_MAX;
  wait_all(pulls, &mc);
  const double secs = Now() - t_start;
  std::printf("worker %d | finished %d epochs in %.1f s | %ld batches (%ld while the next parameters were held back) | "
              "%.0f samples/s | push staleness mean %.2f max %llu updates\n",
              rank, epochs_done, secs, progress.samples / B, filled, static_cast<double>(progress.samples) / secs,
              static_cast<double>(push_stale_sum) / std::max<uint64_t>(1, push_stale_n),
              static_cast<unsigned long long>(push_stale_max));
  if (!o.save_params.empty() && rank == o.eval_rank) {
    std::ofstream f(o.save_params, std::ios::binary | std::ios::trunc);
    for (int l = 0; l < L; ++l) {
      f.write(reinterpret_cast<const char*>(pw[l].data()), static_cast<std::streamsize>(pw[l].size() * 4));
      f.write(reinterpret_cast<const char*>(pb[l].data()), static_cast<std::streamsize>(pb[l].size() * 4));
    }
    if (!f) {
      std::fprintf(stderr, "error: cannot write --save-params '%s'\n", o.save_params.c_str());
      return 1;
    }
  }
  if (evaluator && o.min_accuracy >= 0 && final_acc < o.min_accuracy && !ps.StopRequested()) {
    std::fprintf(stderr, "error: test accuracy %.4f is below --min-accuracy %.4f\n", final_acc, o.min_accuracy);
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

  // Sync: this worker's examples are indices rank, rank + world, ...
  // Bounded and async: batches of the whole stream claimed from the epoch's
  // shared pool, as for the dense models.
  const bool pooled = SharesBatches(o, ps);
  const uint64_t mine = (o.examples - static_cast<uint64_t>(rank) + world - 1) / world;
  int steps = static_cast<int>(pooled ? o.examples / o.batch : std::min<uint64_t>(o.examples / world, mine) / o.batch);
  if (o.max_steps > 0) steps = std::min(steps, o.max_steps * (pooled ? world : 1));
  EpochBatches epoch_batches(ps, pooled, steps, o.work_chunk);
  Progress progress{o.progress_sec};
  CsvLog csv(rank == o.eval_rank ? o.csv : "");
  const double t_start = Now();
  std::vector<uint64_t> keys;
  std::vector<float> vals, grads;
  std::unordered_map<uint64_t, uint32_t> slot;
  ClickBatch batch, one;
  double final_acc = -1;
  for (int epoch = 1; epoch <= o.epochs; ++epoch) {
    double epoch_loss = 0;
    int trained = 0;  // batches of this epoch
    epoch_batches.Start(epoch);
    for (int step; (step = epoch_batches.Next()) >= 0;) {
      ++trained;
      batch.offsets.assign(1, 0);
      batch.ids.clear();
      batch.labels.clear();
      for (int i = 0; i < o.batch; ++i) {
        const uint64_t pos = static_cast<uint64_t>(step) * o.batch + i;
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
      const float inv = 1.0f / o.batch;
      for (int i = 0; i < o.batch; ++i) {
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
      epoch_loss += loss / o.batch;
      progress.Step(rank, epoch, step + 1, steps, o.batch, loss / o.batch, stale);
    }
    if (epoch_batches.stopped()) {
      std::printf("worker %d | stopped on request in epoch %d after %d batches of it\n", rank, epoch, trained);
      break;
    }
    if (rank == o.eval_rank) {
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
      std::printf("worker %d | epoch %d done | train loss %.4f | test accuracy %.2f%% (best possible %.2f%%) | %.1f s\n",
                  rank, epoch, epoch_loss / std::max(1, trained), 100 * final_acc, 100 * tb.bayes_accuracy, Now() - t_start);
      std::fflush(stdout);
      csv.Row(Now() - t_start, epoch, epoch_loss / std::max(1, trained), final_acc);
    }
  }
  const double secs = Now() - t_start;
  std::printf("worker %d | finished in %.1f s | %ld batches | %.0f samples/s\n", rank, secs, progress.samples / o.batch,
              progress.samples / secs);
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
  app.add_flag("--late-prefetch", o.late_prefetch, "bounded/async: send the next step's pull after this step's pushes, not during backward");
  app.add_option("--progress-sec", o.progress_sec, "seconds between progress lines")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--csv", o.csv, "the evaluating worker writes (time, epoch, loss, accuracy) here");
  app.add_option("--save-params", o.save_params, "the evaluating worker writes the final parameters (float32) here");
  app.add_option("--min-accuracy", o.min_accuracy, "exit 3 if the final test accuracy is lower (0..1)")->check(CLI::Range(0.0, 1.0));
  app.add_option("--eval-rank", o.eval_rank, "the worker that evaluates")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--max-steps", o.max_steps, "at most this many steps per epoch (per worker)")->check(CLI::NonNegativeNumber);
  app.add_flag("--static-shards", o.static_shards, "bounded/async: train only this rank's shard, not batches claimed from the epoch's shared pool");
  app.add_option("--work-chunk", o.work_chunk, "bounded/async: batches claimed from the pool at a time")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--staleness-rule", o.staleness_rule, "bounded/async: how the servers weigh a stale gradient: default, none, scale-lr (docs/consistency.md)")->capture_default_str();
  app.add_option("--dc-lambda", o.dc_lambda, "--staleness-rule dc: lambda of the delay compensation")->check(CLI::Range(0.0f, 1e6f))->capture_default_str();
  app.add_option("--fill-push", o.fill_push, "bounded: a batch trained while held back is pushed at once, or with the next step's gradients (as steps of one push)")->check(CLI::IsMember({"at-once", "with-next"}))->capture_default_str();
  app.add_option("--max-fill", o.max_fill, "bounded/async: batches per clock trained on the current parameters while the next ones are held back (0: wait); each is its own optimizer step, pushed with the next step's gradients")->check(CLI::Range(0, 63))->capture_default_str();
  app.add_option("--examples", o.examples, "sparse-lr: training examples")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--id-space", o.id_space, "sparse-lr: feature ids")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--ids-per-example", o.ids_per_example, "sparse-lr: features per example")->check(CLI::Range(1, 10000))->capture_default_str();
  app.add_option("--eval-examples", o.eval_examples, "sparse-lr: test examples")->check(CLI::Range(1, 10000000))->capture_default_str();
  CLI11_PARSE(app, argc, argv);
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
