// The DLRM's training loop (worker/models/dlrm.h) on a Criteo-format click log
// (worker/data/criteo.h): the 26 categorical features' embeddings in one sparse
// table on the servers ("dlrm.emb", each feature in its own key space,
// CriteoKey), the bottom and top MLPs' layers in dense tables. Each batch
// reads its examples from disk, pulls the dense layers and the rows its ids
// touch (the client library sends each id once), runs forward and backward
// on the device, pushes each layer's gradients and the rows' (summed per id
// by the client) and ticks. The batches of an epoch are the log's lines in
// file order, shared through the epoch's pool (one batch per clock under
// sync, a few at a time under bounded staleness and async) or, with
// static shards, a contiguous block of lines per worker. The evaluating
// worker reports the test AUC and logloss after each epoch.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "shardps/client.h"
#include "worker/data/batches.h"
#include "worker/data/criteo.h"
#include "worker/models/dlrm.h"
#include "worker/trainers/progress.h"
#include "worker/trainers/stack_params.h"

namespace shardps::worker {

struct DlrmTrainOptions {
  DlrmOptions model;                 // layer sizes (sparse_features must be 26: the log's categories)
  std::string train_tsv, test_tsv;   // test_tsv: the evaluator's
  CriteoOptions read;                // skip_malformed
  uint64_t hash_rows = 0;            // rows per feature (0: a row per value; CriteoKey)
  int epochs = 1;
  int batch = 128;
  int max_steps = 0;                 // per epoch and worker, 0 = all
  bool static_shards = false;
  int work_chunk = 8;
  double progress_sec = 2.0;
  OptimizerKind optimizer = OptimizerKind::kAdagrad;
  float lr = 0.05f;
  float eps = 1e-10f;                // torch.optim.Adagrad's
  TableSpec embedding;               // the embedding table's options (dtype, admission, eviction)
  uint64_t seed = 1;
  bool evaluator = false;
  int eval_batch = 0;                // test examples per evaluation batch; 0: EvalBatch's choice
  std::string csv;                   // evaluator: (time, epoch, loss, auc, logloss) rows
  FILE* out = stdout;
};

// Test examples per evaluation batch: `requested`, or where that is 0, 8192
// but fewer for wide embeddings, so that a batch's pulled rows stay within
// 64 MiB (the model's buffers hold about four times that): dim 256 gives
// 2520. At least 64.
int EvalBatch(int requested, int sparse_features, int dim);

struct DlrmResult {
  int epochs_done = 0;
  bool stopped = false;
  double auc = -1, logloss = -1;  // evaluator: after the last epoch
  long samples = 0;               // trained by this worker
  uint64_t skipped = 0;           // malformed lines skipped (skip_malformed)
  double seconds = 0;
};

// Every table of the model: the embeddings first, then the bottom's and
// the top's layers (StackTableSpecs).
std::vector<TableSpec> DlrmTableSpecs(const DlrmTrainOptions& o);

// A batch's inputs from its examples: x (n x 13), labels (n), keys (n x 26,
// CriteoKey).
void DlrmInputs(const std::vector<CriteoExample>& ex, uint64_t hash_rows, std::vector<float>* x,
                std::vector<float>* labels, std::vector<uint64_t>* keys);

// The logs of `o`: the training log, and the test log when `with_test`.
// InvalidArgument naming a missing, unreadable or empty file. What a worker
// checks before it connects anywhere.
struct DlrmLogs {
  std::unique_ptr<CriteoFile> train, test;
};
Status OpenDlrmLogs(const DlrmTrainOptions& o, bool with_test, DlrmLogs* out);

// One batch's inputs on the host, and the pull of its embedding rows.
struct DlrmBatch {
  uint64_t first = 0;  // its first line in the log
  int lines = 0;       // 0: no batch
  std::vector<CriteoExample> examples;  // fewer than `lines` when malformed ones were skipped
  std::vector<float> x, labels, emb;    // emb: n x 26 x dim, as pulled
  std::vector<uint64_t> keys;
  Request rows;  // the pull into emb, issued ahead (the next batch) or by the step
};

// When the next batch is known (the rest of a pooled grant, a static
// shard), its lines are read and its rows prefetched (Client::Prefetch:
// stamped with the next clock, so the staleness bound holds) right behind
// this batch's embedding push: the servers answer a client's requests in
// order, so the rows hold this worker's update; they travel while the
// dense layers' backward and pushes run. Under sync with per-clock claims
// each clock's batch is only known at that clock.
//
// Thread: the caller of Run() owns every member; the client's I/O thread
// writes pulled rows into a DlrmBatch's emb and reads pushed ones from
// emb_grad_ between a request's issue and its Wait().
class DlrmTrainer {
 public:
  // `logs`: from OpenDlrmLogs (with the test log if o.evaluator).
  DlrmTrainer(Client& ps, Device& dev, const DlrmTrainOptions& o, DlrmLogs logs);
  DlrmTrainer(const DlrmTrainer&) = delete;
  DlrmTrainer& operator=(const DlrmTrainer&) = delete;

  // The evaluator's CSV log: InvalidArgument if it cannot be written.
  Status OpenCsv() { return csv_.Open(o_.evaluator ? o_.csv : ""); }
  // Defines the tables.
  Status CreateTables();
  // REQUIRES CreateTables() returned OK.
  Status Run(DlrmResult* result);

 private:
  struct EpochTotals {
    double loss = 0;  // summed over the examples trained
    long examples = 0;
  };
  Status RunEpoch(int epoch, DlrmResult* r);
  Status TrainBatch(const Batch& b, int epoch, const EpochBatches& batches, EpochTotals* t);
  // Reads batch `b`'s lines into *into and issues the pull of its rows
  // (`ahead`: as the next clock reads them, Client::Prefetch).
  Status ReadBatch(const Batch& b, bool ahead, DlrmBatch* into);
  // The next batch, read and pulled ahead (if PeekNext knows it).
  Status PullAhead(const EpochBatches& batches);
  void DropAhead();  // waits for a pull ahead no batch will use
  // Ends the clock: the tick and the next clock's dense pulls leave
  // together, one message per server (docs/protocol.md, "Envelopes"); the
  // tick is waited for at the next batch (WaitTick), so the next claim of
  // work travels while it does.
  void EndClock(bool trained);
  Status WaitTick();
  Status Step(const EpochBatches& batches, double* loss);
  Status Evaluate(double* auc, double* logloss);
  Status EndEpoch(int epoch, const EpochTotals& t, const EpochBatches& batches, DlrmResult* r);
  std::string CacheNote() const;  // " | row cache hits H% of N" (row_cache_stats), or ""

  Client& ps_;
  Device& dev_;
  const DlrmTrainOptions o_;
  const int rank_;
  int world_ = 1;
  BatchSource source_ = BatchSource::kShard;
  std::unique_ptr<CriteoFile> train_, test_;
  uint64_t shard_begin_ = 0, shard_size_ = 0;  // static shards: this worker's lines
  Dlrm model_;
  StackParams bottom_, top_;
  Table emb_table_;
  DlrmBatch now_, ahead_;      // the batch being trained, the next one pulled ahead
  Request tick_;               // the last clock's tick (EndClock), until WaitTick
  int64_t dense_ahead_ = -1;   // the clock the dense pulls in flight were issued for (-1: none)
  std::vector<float> emb_grad_;  // n x 26 x dim, host
  DeviceBuffer x_dev_, labels_dev_, stats_;
  Progress progress_;
  CsvLog csv_;
  double t_start_ = 0, eval_seconds_ = 0;
};

}  // namespace shardps::worker
