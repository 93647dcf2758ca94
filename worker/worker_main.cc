// shardps-worker: a training worker. Pulls the parameters it needs, runs
// forward and backward on its own shard of the data, pushes gradients layer
// by layer as backward produces them, and ticks its clock.
//
//   shardps-worker --coordinator tcp://127.0.0.1:5555 --model mlp --hidden 256,128 --epochs 10
//
// This file declares the flags (worker/worker_flags.h), connects, defines
// the dense models' tables, runs a trainer (worker/trainers/trainer.h,
// worker/trainers/sparse_trainer.h) and maps its Status to a message and an exit
// code: 1 an error of the client, the data or the device, 2 bad input
// (flags, too little data for a batch, an unwritable --csv), 3 a final
// test accuracy below --min-accuracy.
#include <CLI/CLI.hpp>
#include <cblas.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "common/base/signals.h"
#include "common/net/net.h"
#include "shardps/client.h"
#include "worker/data/data.h"
#include "worker/devices/device.h"
#include "worker/models/mlp.h"
#include "worker/trainers/dlrm_trainer.h"
#include "worker/trainers/sparse_trainer.h"
#include "worker/trainers/trainer.h"
#include "worker/worker_flags.h"
#include "worker/worker_metrics.h"

namespace shardps::worker {
namespace {

// How the worker ends: its exit code, and whether it leaves the job first
// (Client::Close tells the coordinator) or exits at once, as it always has
// on an error of the client, the data or the device outside the dense
// trainer's loop (the coordinator then finds the worker gone by itself).
struct Exit {
  int code = 0;
  bool leave = true;
};

// "error: <status>" on stderr.
Exit Fail(const Status& s, int code, bool leave) {
  std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
  return {code, leave};
}

// The evaluator's final accuracy against --min-accuracy (unless the job was
// asked to stop): exit 3 when below.
Exit CheckAccuracy(const EvalFlags& e, bool evaluator, double accuracy, const Client& ps) {
  if (evaluator && e.min_accuracy >= 0 && accuracy < e.min_accuracy && !ps.StopRequested()) {
    std::fprintf(stderr, "error: test accuracy %.4f is below --min-accuracy %.4f\n", accuracy, e.min_accuracy);
    return {3, true};
  }
  return {};
}

// Defines the tables of a dense model of layer widths `dims`.
Status CreateMlpTables(Client& ps, const ModelFlags& m, const std::vector<int>& dims, std::vector<Table>* wt,
                       std::vector<Table>* bt) {
  std::vector<TableSpec> ws, bs;
  SHARDPS_RETURN_IF_ERROR(MlpTableSpecs(m, dims, &ws, &bs));
  wt->assign(ws.size(), Table());
  bt->assign(bs.size(), Table());
  for (size_t l = 0; l < ws.size(); ++l) {
    SHARDPS_RETURN_IF_ERROR(ps.CreateTable(ws[l], &(*wt)[l]));
    SHARDPS_RETURN_IF_ERROR(ps.CreateTable(bs[l], &(*bt)[l]));
    // This worker's requests travel in its --wire-dtype, whatever the
    // table's default (set by whoever defined it first).
    for (auto* h : {&(*wt)[l], &(*bt)[l]}) {
      if (!m.wire_dtype.empty()) h->spec.wire.dtype = ws[l].wire.dtype;
      if (!m.compress.empty()) {
        h->spec.wire.compress = ws[l].wire.compress;
        h->spec.wire.topk_fraction = ws[l].wire.topk_fraction;
      }
    }
  }
  return Status::OK();
}

// Fashion-MNIST, read before connecting (a missing or corrupt file is
// reported at once, not after the coordinator was waited for): the training
// set, and the test set when this worker is known to evaluate (its --rank
// given) — else once the coordinator assigned its rank.
struct MlpData {
  Dataset train, test;
};

Status LoadMlpData(const WorkerFlags& f, int rank, MlpData* d) {
  if (!d->train.loaded)
    SHARDPS_RETURN_IF_ERROR(LoadFashionMnist(f.data.data_dir, true, &d->train, f.data.train_limit));
  if (rank == f.eval.eval_rank && !d->test.loaded)
    SHARDPS_RETURN_IF_ERROR(LoadFashionMnist(f.data.data_dir, false, &d->test, f.data.test_limit));
  return Status::OK();
}

// Softmax regression (no hidden layers) or the MLP on Fashion-MNIST.
Exit RunMlp(const WorkerFlags& f, const std::vector<int>& hidden, MlpData& data, Client& ps, Device& dev) {
  const int rank = ps.rank();
  const bool evaluator = rank == f.eval.eval_rank;
  if (Status s = LoadMlpData(f, rank, &data); !s.ok()) return Fail(s, 1, false);
  const Dataset& train = data.train;
  Dataset& test = data.test;
  std::vector<int> dims = {train.cols};
  dims.insert(dims.end(), hidden.begin(), hidden.end());
  dims.push_back(train.classes);
  Mlp mlp(&dev, dims);
  std::vector<Table> wt, bt;
  if (Status s = CreateMlpTables(ps, f.model, dims, &wt, &bt); !s.ok()) return Fail(s, 1, false);
  MlpTrainer trainer(ps, dev, mlp, wt, bt, train, evaluator ? &test : nullptr, ToTrainerOptions(f, rank));
  TrainResult r;
  if (Status s = trainer.Run(&r); !s.ok()) return Fail(s, s.code() == Code::kInvalidArgument ? 2 : 1, true);
  if (!f.eval.save_params.empty() && evaluator) {
    if (Status s = trainer.SaveParams(f.eval.save_params); !s.ok()) {
      std::fprintf(stderr, "error: %s\n", s.message().c_str());
      return {1, true};
    }
  }
  return CheckAccuracy(f.eval, evaluator, r.final_accuracy, ps);
}

// Sparse logistic regression over hashed click features: the worker pulls
// only the rows its batch touches.
Exit RunSparseLr(const WorkerFlags& f, Client& ps) {
  const bool evaluator = ps.rank() == f.eval.eval_rank;
  SparseLrOptions so;
  if (Status s = ToSparseOptions(f, evaluator, &so); !s.ok()) return Fail(s, 1, false);
  SparseLrTrainer trainer(ps, so);
  if (Status s = trainer.CreateTable(); !s.ok()) return Fail(s, 1, false);
  if (Status s = trainer.OpenCsv(); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.message().c_str());
    return {2, true};
  }
  SparseLrResult r;
  if (Status s = trainer.Run(&r); !s.ok()) return Fail(s, 1, false);
  return CheckAccuracy(f.eval, evaluator, r.final_accuracy, ps);
}

// The DLRM on a click log (`logs` opened before connecting).
Exit RunDlrm(const WorkerFlags& f, DlrmLogs logs, Client& ps, Device& dev) {
  const bool evaluator = ps.rank() == f.eval.eval_rank;
  DlrmTrainOptions o;
  if (Status s = ToDlrmOptions(f, evaluator, &o); !s.ok()) return Fail(s, 2, true);
  if (evaluator && !logs.test) {  // the rank was assigned: its test log is opened now
    DlrmLogs with_test;
    if (Status s = OpenDlrmLogs(o, true, &with_test); !s.ok()) return Fail(s, 1, true);
    logs.test = std::move(with_test.test);
  }
  DlrmTrainer trainer(ps, dev, o, std::move(logs));
  if (Status s = trainer.OpenCsv(); !s.ok()) return Fail(s, 2, true);
  if (Status s = trainer.CreateTables(); !s.ok()) return Fail(s, 1, true);
  DlrmResult r;
  if (Status s = trainer.Run(&r); !s.ok()) return Fail(s, 1, true);
  if (r.skipped) std::printf("worker %d | %llu malformed lines skipped\n", ps.rank(), static_cast<unsigned long long>(r.skipped));
  return {};
}

// The model's device and its line ("worker R | model | device D | C consistency"), then RunMlp or RunDlrm.
Exit RunDense(const WorkerFlags& f, const std::vector<int>& hidden, DlrmLogs logs, MlpData& data, Client& ps) {
  DeviceKind kind;
  if (Status s = ParseDeviceKind(f.data.device, &kind); !s.ok()) return Fail(s, 1, false);
  std::unique_ptr<Device> dev;
  std::string why;
  if (Status s = MakeDevice(kind, &dev, &why); !s.ok()) return Fail(s, 1, false);
  std::printf("worker %d | %s | device %s | %s consistency\n", ps.rank(), f.model.model.c_str(), why.c_str(),
              std::string(ToString(ps.consistency())).c_str());
  std::fflush(stdout);
  if (f.model.model == "dlrm") return RunDlrm(f, std::move(logs), ps, *dev);
  return RunMlp(f, hidden, data, ps, *dev);
}

// --model dlrm: the flags and the logs, checked before connecting (the
// evaluator's test log too when the rank is given, or --test-tsv is).
Status CheckDlrmInputs(const WorkerFlags& f, DlrmLogs* logs) {
  const bool evaluator = f.connect.rank == f.eval.eval_rank;
  DlrmTrainOptions o;
  SHARDPS_RETURN_IF_ERROR(ToDlrmOptions(f, evaluator, &o));
  return OpenDlrmLogs(o, evaluator || !f.dlrm.test_tsv.empty(), logs);
}

// --csv and --save-params name files the evaluator writes later: their
// folders must be there and writable now, before anything is trained.
Status CheckOutputPath(const char* flag, const std::string& path) {
  if (path.empty()) return Status::OK();
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return Status::InvalidArgument(std::string(flag) + " '" + path + "': there is no folder '" + dir + "'");
  if (access(dir.c_str(), W_OK | X_OK) != 0)
    return Status::InvalidArgument(std::string(flag) + " '" + path + "': cannot write into '" + dir + "'");
  return Status::OK();
}

// Everything after the flags: the worker's exit code.
int RunWorker(const WorkerFlags& f) {
  std::vector<int> hidden;  // a bad --hidden is refused before connecting
  if (f.model.model == "mlp")
    if (Status s = ParseHidden(f.model.hidden, &hidden); !s.ok()) {
      std::fprintf(stderr, "error: %s\n", s.message().c_str());
      return 2;
    }
  for (const auto& [flag, path] : {std::pair<const char*, const std::string&>{"--csv", f.eval.csv},
                                   {"--save-params", f.eval.save_params}})
    if (Status s = CheckOutputPath(flag, path); !s.ok()) {
      std::fprintf(stderr, "error: %s\n", s.message().c_str());
      return 2;
    }
  DlrmLogs logs;
  if (f.model.model == "dlrm")
    if (Status s = CheckDlrmInputs(f, &logs); !s.ok()) {
      std::fprintf(stderr, "error: %s\n", s.message().c_str());
      return 2;
    }
  MlpData data;
  if (f.model.model == "mlp" || f.model.model == "softmax")
    if (Status s = LoadMlpData(f, f.connect.rank, &data); !s.ok()) {
      std::fprintf(stderr, "error: %s\n", s.message().c_str());
      return 1;
    }
  DieWithParentIfAsked();
  TuneAllocatorForLargeMessages();
  openblas_set_num_threads(1);  // one core per worker; the servers need theirs
  std::unique_ptr<Client> ps;
  WorkerMetrics metrics;  // declared after ps: stopped before ps goes
  if (!f.connect.no_metrics)
    if (Status s = metrics.Start(f.connect.coordinator, f.connect.metrics_address, f.connect.metrics_port); !s.ok()) {
      std::fprintf(stderr, "error: --metrics-port/--metrics-address: %s\n", s.message().c_str());
      return 2;
    }
  ClientOptions co;
  co.coordinator = f.connect.coordinator;
  co.rank = f.connect.rank;
  co.key_file = f.connect.key_file;
  co.row_cache_bytes = f.dlrm.row_cache_mb << 20;
  co.metrics_url = metrics.url();
  if (Status s = Client::Connect(co, &ps); !s.ok()) {
    // A worker started (or started again after a rollback) as the job is
    // being stopped has nothing to train: the job ends without it, and that
    // is no failure (the coordinator's words, server/coordinator/logic/membership.cc).
    if (s.code() == Code::kUnavailable && s.message().find("the job is stopping") != std::string::npos) {
      std::printf("worker: the job is stopping (shardps-ctl stop): nothing to train\n");
      return 0;
    }
    return Fail(s, 1, false).code;
  }
  metrics.Watch(ps.get());
  Exit e;
  if (f.model.model == "sparse-lr") {
    std::printf("worker %d | sparse logistic regression | %s consistency\n", ps->rank(),
                std::string(ToString(ps->consistency())).c_str());
    e = RunSparseLr(f, *ps);
  } else {
    e = RunDense(f, hidden, std::move(logs), data, *ps);
  }
  if (!e.leave) {  // without Client::Close (Exit)
    metrics.Stop();
    std::exit(e.code);
  }
  if (Status s = ps->Close(); !s.ok()) std::fprintf(stderr, "warning: %s\n", s.ToString().c_str());
  return e.code;
}

}  // namespace
}  // namespace shardps::worker

int main(int argc, char** argv) {
  using namespace shardps;
  using namespace shardps::worker;
  CLI::App app{"shardps training worker"};
  WorkerFlags f;
  app.add_option("--coordinator", f.connect.coordinator, "coordinator endpoint (a leader and its standbys: tcp://A:P,tcp://B:Q)")->required();
  app.add_option("--key", f.connect.key_file, "security on: the job's worker key (shardps-keygen DIR makes DIR/worker.key)")->envname("SHARDPS_KEY");
  app.add_option("--rank", f.connect.rank, "worker rank (default: assigned)")->check(CLI::Range(-1, 65535));
  app.add_option("--metrics-port", f.connect.metrics_port, "serve Prometheus /metrics on this port (0: a free port)")->check(CLI::Range(0, 65535))->capture_default_str();
  app.add_option("--metrics-address", f.connect.metrics_address, "address /metrics binds to (default: this host's address on the route to the coordinator)");
  app.add_flag("--no-metrics", f.connect.no_metrics, "serve no /metrics");
  app.add_option("--model", f.model.model, "softmax | mlp | sparse-lr | dlrm")->check(CLI::IsMember({"softmax", "mlp", "sparse-lr", "dlrm"}))->capture_default_str();
  app.add_option("--hidden", f.model.hidden, "MLP hidden layer widths, comma-separated")->capture_default_str();
  app.add_option("--epochs", f.loop.epochs)->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_option("--batch", f.loop.batch, "examples per step per worker")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--lr", f.model.lr, "learning rate of the server-side optimizer")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--optimizer", f.model.optimizer, "sgd | momentum | adagrad | adam")->check(CLI::IsMember({"sgd", "momentum", "adagrad", "adam"}))->capture_default_str();
  app.add_option("--device", f.data.device, "auto | cpu | cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}))->capture_default_str();
  app.add_option("--data-dir", f.data.data_dir, "Fashion-MNIST IDX files")->capture_default_str();
  app.add_option("--train-limit", f.data.train_limit, "use only the first N training examples")->check(CLI::NonNegativeNumber);
  app.add_option("--test-limit", f.data.test_limit, "use only the first N test examples")->check(CLI::NonNegativeNumber);
  app.add_flag("--no-shuffle", f.data.no_shuffle, "keep the data order (no per-epoch shuffle)");
  app.add_option("--seed", f.model.seed)->capture_default_str();
  app.add_option("--slowdown", f.loop.slowdown, "run this many times slower (a straggler), e.g. 2")->check(CLI::Range(1.0, 1000.0))->capture_default_str();
  app.add_option("--slow-rank", f.loop.slow_rank, "only this worker is slowed down (default: all)")->check(CLI::Range(-1, 65535));
  app.add_option("--prefetch", f.loop.prefetch, "bounded/async: when the next step's parameters are pulled: per-layer (each layer's pull right after its push, during backward), early (after forward, before the pushes: the values miss this worker's own step), late (after the pushes and the tick)")->check(CLI::IsMember({"per-layer", "early", "late"}))->capture_default_str();
  app.add_option("--predict", f.loop.predict, "bounded/async: compute each gradient on the parameters extrapolated along their drift to where they are expected when its push is applied, this many times that far (1: the expected position; 2 learned best; 0: on the values pulled; with --staleness-rule dc the default is 0)")->check(CLI::Range(0.0, 8.0))->capture_default_str();
  app.add_option("--progress-sec", f.loop.progress_sec, "seconds between progress lines")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--csv", f.eval.csv, "the evaluating worker writes (time, epoch, loss, accuracy) here");
  app.add_option("--save-params", f.eval.save_params, "the evaluating worker writes the final parameters (float32) here");
  app.add_option("--min-accuracy", f.eval.min_accuracy, "exit 3 if the final test accuracy is lower (0..1)")->check(CLI::Range(0.0, 1.0));
  app.add_option("--eval-rank", f.eval.eval_rank, "the worker that evaluates")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--max-steps", f.loop.max_steps, "at most this many steps per epoch (per worker)")->check(CLI::NonNegativeNumber);
  app.add_flag("--static-shards", f.loop.static_shards, "bounded/async: train only this rank's shard, not batches claimed from the epoch's shared pool");
  app.add_option("--work-chunk", f.loop.work_chunk, "bounded/async: batches claimed from the pool at a time")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--staleness-rule", f.model.staleness_rule, "bounded/async: how the servers weigh a stale gradient: default (scale-lr), none, scale-lr, dc (delay compensation; makes --predict default to 0) (docs/consistency.md)")->capture_default_str();
  app.add_option("--wire-dtype", f.model.wire_dtype, "softmax/mlp: this worker's pulled values and pushed gradients of the dense tables on the wire: f32, bf16, f16 (the servers keep float32; docs/compression.md); default: the tables' own (the job file's wire_dtype, else f32)")->check(CLI::IsMember({"f32", "bf16", "f16"}));
  app.add_option("--compress", f.model.compress, "softmax/mlp: compress this worker's pushed gradients of the dense tables, with error feedback: none, topk:F (the fraction F of each part's entries largest in magnitude, e.g. topk:0.01), sign (one bit each and a scale) (docs/compression.md); default: the tables' own (the job file's compress, else none)")->check([](const std::string& s) {
    Compression c;
    float fraction;
    const Status st = ParseCompression(s, &c, &fraction);
    return st.ok() ? std::string() : st.message();
  });
  app.add_option("--dc-lambda", f.model.dc_lambda, "--staleness-rule dc: lambda of the delay compensation")->check(CLI::Range(0.0f, 1e6f))->capture_default_str();
  app.add_option("--fill-push", f.fill.fill_push, "bounded: a batch trained while held back is pushed at once, or with the next step's gradients (as steps of one push)")->check(CLI::IsMember({"at-once", "with-next"}))->capture_default_str();
  app.add_option("--max-fill", f.fill.max_fill, "bounded: batches per clock trained while the next parameters are held back (0: wait); each is its own optimizer step (--fill-params, --fill-push, --fill-when-held)")->check(CLI::Range(0, 63))->capture_default_str();
  app.add_option("--fill-when-held", f.fill.fill_when_held, "bounded: train such batches only while held back at least this fraction of the last 16 clocks (a persistent straggler; 0: whenever held back)")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app.add_option("--fill-params", f.fill.fill_params, "bounded: such a batch trains on the newest values the servers hold (fresh: one pull at the clock already read, answered at once) or on the parameters at hand")->check(CLI::IsMember({"fresh", "at-hand"}))->capture_default_str();
  app.add_option("--examples", f.sparse.examples, "sparse-lr: training examples")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--id-space", f.sparse.id_space, "sparse-lr: feature ids")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--ids-per-example", f.sparse.ids_per_example, "sparse-lr: features per example")->check(CLI::Range(1, 10000))->capture_default_str();
  app.add_option("--eval-examples", f.sparse.eval_examples, "sparse-lr: test examples")->check(CLI::Range(1, 10000000))->capture_default_str();
  app.add_option("--train-tsv", f.dlrm.train_tsv, "dlrm: the training click log (Criteo TSV: label, 13 integers, 26 hex categories)");
  app.add_option("--test-tsv", f.dlrm.test_tsv, "dlrm: the test click log (the evaluating worker's)");
  app.add_flag("--skip-malformed", f.dlrm.skip_malformed, "dlrm: skip and count a malformed line instead of failing on it");
  app.add_option("--hash-rows", f.dlrm.hash_rows, "dlrm: hash each feature's categories into this many rows (row 0: missing); 0: a row per value")->capture_default_str();
  app.add_option("--dim", f.dlrm.dim, "dlrm: embedding width")->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("--bottom", f.dlrm.bottom, "dlrm: the bottom MLP's hidden widths, comma-separated")->capture_default_str();
  app.add_option("--top", f.dlrm.top, "dlrm: the top MLP's hidden widths, comma-separated")->capture_default_str();
  app.add_option("--emb-dtype", f.dlrm.emb_dtype, "dlrm: the embeddings' values on the servers and the wire: f32, bf16, f16")->check(CLI::IsMember({"f32", "bf16", "f16"}))->capture_default_str();
  app.add_option("--admit-after", f.dlrm.admit_after, "dlrm: an id gets a row at its k-th push (0: the first)")->check(CLI::Range(0, 255))->capture_default_str();
  app.add_option("--evict-after-clocks", f.dlrm.evict_after_clocks, "dlrm: rows not updated for this many clocks are removed (0: never)")->capture_default_str();
  app.add_flag("--cold-tier", f.dlrm.cold_tier, "dlrm: the embedding table's rows past the servers' memory budgets live on their disks (cold_tier; servers' --cold-dir)");
  app.add_option("--evict-after-sec", f.dlrm.evict_after_sec, "dlrm: rows not updated for this many seconds are removed (0: never)")->capture_default_str();
  app.add_option("--emb-max-rows", f.dlrm.emb_max_rows, "dlrm: at most this many embedding rows (each server checks its share against its memory budget when the table is made; 0: only the budgets limit it)")->capture_default_str();
  app.add_option("--row-cache-mb", f.dlrm.row_cache_mb, "bounded staleness: keep pulled embedding rows (this many MiB) and reuse each for up to s clocks without asking the servers (it then misses those clocks' updates, this worker's own included); 0: off")->capture_default_str();
  app.add_option("--eval-batch", f.dlrm.eval_batch, "dlrm: test examples per evaluation batch (0: 8192, fewer for wide embeddings: at most 64 MiB of rows)")->check(CLI::Range(0, 1 << 20))->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  f.loop.predict_given = app.count("--predict") > 0;
  return RunWorker(f);
}
