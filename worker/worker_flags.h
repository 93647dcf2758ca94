// shardps-worker's flags, grouped by what they set, and what they build:
// the options of the trainers (worker/trainers/trainer.h, worker/trainers/sparse_trainer.h)
// and the tables of the dense models. worker_main.cc declares the flags
// into a WorkerFlags; everything here is plain values, tested without a
// cluster (worker/worker_flags_test.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shardps/status.h"
#include "shardps/types.h"
#include "worker/data/data.h"
#include "worker/trainers/dlrm_trainer.h"
#include "worker/trainers/sparse_trainer.h"
#include "worker/trainers/trainer.h"

namespace shardps::worker {

struct ConnectFlags {
  std::string coordinator;
  std::string key_file;  // security: worker.key (docs/security.md)
  int rank = -1;
  // Where /metrics is served (worker/worker_metrics.h): port 0 a free one;
  // address "" the one on the route to the coordinator.
  int metrics_port = 0;
  std::string metrics_address;
  bool no_metrics = false;
};

// The model and its tables' optimizer.
struct ModelFlags {
  std::string model = "mlp";  // softmax | mlp | sparse-lr
  std::string hidden = "256,128";
  float lr = 0.001f;
  std::string optimizer = "adam";
  std::string staleness_rule = "default";
  float dc_lambda = 0.04f;
  uint64_t seed = 1;
  // The dense tables' pulls and pushes on the wire (TableSpec::wire.dtype)
  // and their pushes' compression (none, topk:F, sign: wire.compress) for
  // this worker's requests; "": the table's own (f32 and none unless the
  // job file or the first definer said otherwise).
  std::string wire_dtype;
  std::string compress;
};

struct DataFlags {
  std::string device = "auto";
  std::string data_dir = kFashionMnistDir;
  int train_limit = 0, test_limit = 0;
  bool no_shuffle = false;
};

// The step loop.
struct LoopFlags {
  int epochs = 10;
  int batch = 64;
  int max_steps = 0;  // per epoch, 0 = all
  bool static_shards = false;  // bounded/async: own shard instead of the shared pool
  int work_chunk = 8;          // batches per claim from the pool
  double slowdown = 1.0;
  int slow_rank = -1;  // -1: every worker is slowed down
  double predict = 2.0;  // bounded/async: weight prediction's lookahead (TrainerOptions)
  bool predict_given = false;
  std::string prefetch = "per-layer";  // bounded/async: when the next step's pulls go (TrainerOptions)
  double progress_sec = 2.0;
};

// Bounded staleness: batches trained while held back.
struct FillFlags {
  int max_fill = 2;            // batches per clock trained while the next parameters are on their way
  double fill_when_held = 0.5;  // ... once held back at this fraction of the last 16 clocks
  std::string fill_params = "fresh";  // ... on the newest values, or "at-hand"
  std::string fill_push = "at-once";  // or "with-next"
};

struct EvalFlags {
  std::string csv, save_params;
  double min_accuracy = -1;
  int eval_rank = 0;
};

struct SparseFlags {
  uint64_t examples = 1'000'000, id_space = 10'000'000;
  int ids_per_example = 20, eval_examples = 20000;
};

// The DLRM on a Criteo-format click log (worker/trainers/dlrm_trainer.h).
struct DlrmFlags {
  std::string train_tsv, test_tsv;
  bool skip_malformed = false;
  uint64_t hash_rows = 0;  // rows per feature (0: a row per value)
  int dim = 16;
  std::string bottom = "64", top = "128,64";  // hidden layer widths
  std::string emb_dtype = "f32";
  uint32_t admit_after = 0, evict_after_clocks = 0, evict_after_sec = 0;
  uint64_t emb_max_rows = 0;  // the embedding table's max_rows (0: only the servers' budgets)
  bool cold_tier = false;     // the embedding table's cold_tier (rows past the servers' budgets on their disks)
  uint64_t row_cache_mb = 0;  // ClientOptions::row_cache_bytes (bounded staleness)
  int eval_batch = 0;
};

struct WorkerFlags {
  ConnectFlags connect;
  ModelFlags model;
  DataFlags data;
  LoopFlags loop;
  FillFlags fill;
  EvalFlags eval;
  SparseFlags sparse;
  DlrmFlags dlrm;
};

// --hidden: comma-separated layer widths in [1, 65536] (empty items are
// skipped). InvalidArgument naming the first bad one.
Status ParseHidden(const std::string& s, std::vector<int>* out);

// The MLP trainer's options for the worker of `rank`.
TrainerOptions ToTrainerOptions(const WorkerFlags& f, int rank);

// The sparse trainer's options (`evaluator`: this worker evaluates). The
// error of a bad --optimizer.
Status ToSparseOptions(const WorkerFlags& f, bool evaluator, SparseLrOptions* out);

// The DLRM trainer's options (`evaluator`: this worker evaluates): the
// error of a bad --optimizer, --emb-dtype, --bottom, --top, a missing
// --train-tsv (or, for the evaluator, --test-tsv), or embedding options
// the table refuses.
Status ToDlrmOptions(const WorkerFlags& f, bool evaluator, DlrmTrainOptions* out);

// The tables of a dense model of layer widths `dims` (dims[0] inputs, the
// last the classes): layer l's weights "<model>.w<l>" (dims[l] x dims[l + 1],
// normal, He-scaled for ReLU layers, seed --seed * 100 + l) and bias
// "<model>.b<l>" (1 x dims[l + 1], zeros). The error of a bad --optimizer
// or --staleness-rule.
Status MlpTableSpecs(const ModelFlags& m, const std::vector<int>& dims, std::vector<TableSpec>* w,
                     std::vector<TableSpec>* b);

}  // namespace shardps::worker
