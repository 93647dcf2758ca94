#include "worker/worker_flags.h"

#include <cmath>
#include <cstdlib>
#include <sstream>

namespace shardps::worker {

Status ParseHidden(const std::string& s, std::vector<int>* out) {
  out->clear();
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    char* end;
    long v = std::strtol(item.c_str(), &end, 10);
    if (*end || v < 1 || v > 65536)
      return Status::InvalidArgument("--hidden: '" + item + "' is not a layer width in [1, 65536]");
    out->push_back(static_cast<int>(v));
  }
  return Status::OK();
}

TrainerOptions ToTrainerOptions(const WorkerFlags& f, int rank) {
  const bool evaluator = rank == f.eval.eval_rank;
  TrainerOptions to;
  to.epochs = f.loop.epochs;
  to.batch = f.loop.batch;
  to.max_steps = f.loop.max_steps;
  to.shuffle = !f.data.no_shuffle;
  to.seed = f.model.seed;
  to.static_shards = f.loop.static_shards;
  to.work_chunk = f.loop.work_chunk;
  to.max_fill = f.fill.max_fill;
  to.fill_when_held = f.fill.fill_when_held;
  to.fill_fresh = f.fill.fill_params == "fresh";
  to.fill_at_once = f.fill.fill_push == "at-once";
  to.prefetch = f.loop.prefetch == "early"  ? TrainerOptions::PrefetchMode::kEarly
                : f.loop.prefetch == "late" ? TrainerOptions::PrefetchMode::kLate
                                            : TrainerOptions::PrefetchMode::kPerLayer;
  // Delay compensation corrects the same drift on the servers: not both,
  // unless asked for.
  to.predict = f.model.staleness_rule == "dc" && !f.loop.predict_given ? 0.0 : f.loop.predict;
  to.slowdown = (f.loop.slow_rank < 0 || f.loop.slow_rank == rank) ? f.loop.slowdown : 1.0;
  to.progress_sec = f.loop.progress_sec;
  to.evaluator = evaluator;
  to.csv = evaluator ? f.eval.csv : "";
  return to;
}

Status ToSparseOptions(const WorkerFlags& f, bool evaluator, SparseLrOptions* out) {
  SparseLrOptions so;
  SHARDPS_RETURN_IF_ERROR(Parse(f.model.optimizer, &so.optimizer));
  so.epochs = f.loop.epochs;
  so.batch = f.loop.batch;
  so.max_steps = f.loop.max_steps;
  so.static_shards = f.loop.static_shards;
  so.work_chunk = f.loop.work_chunk;
  so.progress_sec = f.loop.progress_sec;
  so.lr = f.model.lr;
  so.clicks.id_space = f.sparse.id_space;
  so.clicks.ids_per_example = f.sparse.ids_per_example;
  so.clicks.seed = f.model.seed;
  so.examples = f.sparse.examples;
  so.eval_examples = f.sparse.eval_examples;
  so.evaluator = evaluator;
  so.csv = evaluator ? f.eval.csv : "";
  *out = so;
  return Status::OK();
}

Status ToDlrmOptions(const WorkerFlags& f, bool evaluator, DlrmTrainOptions* out) {
  const DlrmFlags& d = f.dlrm;
  DlrmTrainOptions o;
  if (d.train_tsv.empty()) return Status::InvalidArgument("--model dlrm needs --train-tsv FILE");
  if (evaluator && d.test_tsv.empty())
    return Status::InvalidArgument("--model dlrm: the evaluating worker needs --test-tsv FILE");
  if (d.hash_rows == 1) return Status::InvalidArgument("--hash-rows must be 0 (a row per value) or at least 2");
  o.train_tsv = d.train_tsv;
  o.test_tsv = d.test_tsv;
  o.read.skip_malformed = d.skip_malformed;
  o.hash_rows = d.hash_rows;
  o.model.dim = d.dim;
  Status s = ParseHidden(d.bottom, &o.model.bottom_hidden);
  if (!s.ok()) return Status::InvalidArgument("--bottom: " + s.message().substr(s.message().find(':') + 2));
  s = ParseHidden(d.top, &o.model.top_hidden);
  if (!s.ok()) return Status::InvalidArgument("--top: " + s.message().substr(s.message().find(':') + 2));
  SHARDPS_RETURN_IF_ERROR(CheckDlrmOptions(o.model));
  SHARDPS_RETURN_IF_ERROR(Parse(f.model.optimizer, &o.optimizer));
  o.lr = f.model.lr;
  o.embedding.kind = TableKind::kSparse;
  o.embedding.name = "dlrm.emb";
  o.embedding.cols = static_cast<uint32_t>(d.dim);
  SHARDPS_RETURN_IF_ERROR(Parse(d.emb_dtype, &o.embedding.dtype));
  o.embedding.admit_after = d.admit_after;
  o.embedding.evict_after_clocks = d.evict_after_clocks;
  o.embedding.evict_after_sec = d.evict_after_sec;
  o.embedding.max_rows = d.emb_max_rows;
  o.embedding.cold_tier = d.cold_tier;
  SHARDPS_RETURN_IF_ERROR(o.embedding.Validate());
  o.epochs = f.loop.epochs;
  o.batch = f.loop.batch;
  o.max_steps = f.loop.max_steps;
  o.static_shards = f.loop.static_shards;
  o.work_chunk = f.loop.work_chunk;
  o.progress_sec = f.loop.progress_sec;
  o.seed = f.model.seed;
  o.evaluator = evaluator;
  o.eval_batch = d.eval_batch;
  o.csv = evaluator ? f.eval.csv : "";
  *out = o;
  return Status::OK();
}

Status MlpTableSpecs(const ModelFlags& m, const std::vector<int>& dims, std::vector<TableSpec>* w,
                     std::vector<TableSpec>* b) {
  OptimizerKind opt;
  SHARDPS_RETURN_IF_ERROR(Parse(m.optimizer, &opt));
  StalenessRule rule;
  SHARDPS_RETURN_IF_ERROR(Parse(m.staleness_rule, &rule));
  WireOptions wire;
  if (!m.wire_dtype.empty()) SHARDPS_RETURN_IF_ERROR(Parse(m.wire_dtype, &wire.dtype));
  if (!m.compress.empty())
    if (Status s = ParseCompression(m.compress, &wire.compress, &wire.topk_fraction); !s.ok())
      return Status::InvalidArgument("--compress: " + s.message());
  const int L = static_cast<int>(dims.size()) - 1;
  w->assign(L, TableSpec());
  b->assign(L, TableSpec());
  for (int l = 0; l < L; ++l) {
    TableSpec& ws = (*w)[l];
    ws.name = m.model + ".w" + std::to_string(l);
    ws.rows = static_cast<uint64_t>(dims[l]);
    ws.cols = static_cast<uint32_t>(dims[l + 1]);
    ws.init = InitKind::kNormal;
    ws.init_b = std::sqrt((l + 1 < L ? 2.0f : 1.0f) / dims[l]);  // He for ReLU layers
    ws.seed = m.seed * 100 + static_cast<uint64_t>(l);
    ws.optimizer = opt;
    ws.lr = m.lr;
    ws.staleness_rule = rule;
    ws.dc_lambda = m.dc_lambda;
    ws.wire = wire;
    TableSpec& bs = (*b)[l];
    bs = ws;
    bs.name = m.model + ".b" + std::to_string(l);
    bs.rows = 1;
    bs.init = InitKind::kZeros;
  }
  return Status::OK();
}

}  // namespace shardps::worker
