#include "worker/trainers/sparse_trainer.h"

#include <algorithm>
#include <cmath>

namespace shardps::worker {

TableSpec SparseLrTableSpec(OptimizerKind optimizer, float lr) {
  TableSpec spec;
  spec.name = "sparse_lr.w";
  spec.kind = TableKind::kSparse;
  spec.cols = 1;
  spec.optimizer = optimizer;
  spec.lr = lr;
  spec.initial_accumulator = 0.1f;
  return spec;
}

void GatherClicks(const ClickLogOptions& co, const Batch& b, bool pooled, int rank, int world, ClickBatch* out) {
  out->offsets.assign(1, 0);
  out->ids.clear();
  out->labels.clear();
  ClickBatch one;
  for (int i = 0; i < b.n; ++i) {
    const uint64_t pos = b.first + static_cast<uint64_t>(i);
    const uint64_t index = pooled ? pos : static_cast<uint64_t>(rank) + static_cast<uint64_t>(world) * pos;
    GenerateClicks(co, 0, index, 1, &one);
    out->ids.insert(out->ids.end(), one.ids.begin(), one.ids.end());
    out->labels.push_back(one.labels[0]);
    out->offsets.push_back(static_cast<uint32_t>(out->ids.size()));
  }
}

void BatchKeys(const ClickBatch& batch, std::vector<uint64_t>* keys, std::unordered_map<uint64_t, uint32_t>* slot) {
  keys->assign(1, kSparseBias);
  slot->clear();
  (*slot)[kSparseBias] = 0;
  for (uint64_t id : batch.ids)
    if (slot->try_emplace(id, static_cast<uint32_t>(keys->size())).second) keys->push_back(id);
}

double LogisticGradient(const ClickBatch& batch, const std::unordered_map<uint64_t, uint32_t>& slot,
                        const std::vector<float>& vals, float feature_scale, std::vector<float>* grads) {
  const int n = static_cast<int>(batch.labels.size());
  grads->assign(vals.size(), 0.0f);
  double loss = 0;
  const float inv = 1.0f / n;
  for (int i = 0; i < n; ++i) {
    float z = vals[0];
    for (uint32_t k = batch.offsets[i]; k < batch.offsets[i + 1]; ++k) z += vals[slot.at(batch.ids[k])] * feature_scale;
    const float p = 1.0f / (1.0f + std::exp(-z));
    const float y = batch.labels[i];
    loss -= y * std::log(std::max(p, 1e-7f)) + (1 - y) * std::log(std::max(1 - p, 1e-7f));
    const float d = (p - y) * inv;
    (*grads)[0] += d;
    for (uint32_t k = batch.offsets[i]; k < batch.offsets[i + 1]; ++k)
      (*grads)[slot.at(batch.ids[k])] += d * feature_scale;
  }
  return loss;
}

std::vector<uint64_t> TestKeys(const ClickBatch& test) {
  std::vector<uint64_t> keys(test.ids);
  keys.push_back(kSparseBias);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

double ClickAccuracy(const ClickBatch& test, const std::unordered_map<uint64_t, float>& w, float feature_scale) {
  const int n = static_cast<int>(test.labels.size());
  int correct = 0;
  for (int i = 0; i < n; ++i) {
    float z = w.at(kSparseBias);
    for (uint32_t k = test.offsets[i]; k < test.offsets[i + 1]; ++k) z += w.at(test.ids[k]) * feature_scale;
    correct += (z > 0) == (test.labels[i] > 0.5f);
  }
  return static_cast<double>(correct) / n;
}

SparseLrTrainer::SparseLrTrainer(Client& ps, const SparseLrOptions& o)
    : ps_(ps),
      o_(o),
      rank_(ps.rank()),
      world_(static_cast<int>(ps.num_workers())),
      feature_scale_(1.0f / std::sqrt(static_cast<float>(o.clicks.ids_per_example))),
      // The batches of each epoch come from its pool (one per clock under
      // sync, a few at a time under bounded staleness and async), or with
      // --static-shards this worker's examples are indices rank, rank +
      // world, ...
      pooled_(SharesBatches(ChooseBatchSource(ps.consistency(), o.static_shards))),
      report_(ps.rank(), o.out) {}

Status SparseLrTrainer::CreateTable() { return ps_.CreateTable(SparseLrTableSpec(o_.optimizer, o_.lr), &w_); }

Status SparseLrTrainer::Run(SparseLrResult* result) {
  const uint64_t mine = (o_.examples - static_cast<uint64_t>(rank_) + world_ - 1) / world_;
  const uint64_t examples = CapToMaxSteps(pooled_ ? o_.examples : std::min<uint64_t>(o_.examples / world_, mine),
                                          o_.max_steps, o_.batch, world_, pooled_);
  EpochBatches batches(
      [this](uint64_t pool, uint64_t total, uint32_t max, const ClaimOptions& co, WorkRange* out) {
        return ps_.ClaimWork(pool, total, max, co, out);
      },
      [this] { return ps_.StopRequested(); }, ChooseBatchSource(ps_.consistency(), o_.static_shards), examples,
      o_.batch, o_.work_chunk);
  Progress progress(o_.progress_sec, o_.out);
  report_.Start();
  SparseLrResult r;
  for (int epoch = 1; epoch <= o_.epochs && !r.stopped; ++epoch)
    SHARDPS_RETURN_IF_ERROR(RunEpoch(epoch, batches, progress, &r));
  r.seconds = report_.elapsed();
  r.samples = progress.samples();
  std::fprintf(o_.out, "worker %d | finished in %.1f s | %ld batches | %.0f samples/s\n", rank_, r.seconds,
               r.samples / o_.batch, r.samples / r.seconds);
  *result = r;
  return Status::OK();
}

Status SparseLrTrainer::RunEpoch(int epoch, EpochBatches& batches, Progress& progress, SparseLrResult* r) {
  EpochTotals t;
  SHARDPS_RETURN_IF_ERROR(batches.Run(
      epoch, [this] { return ps_.Clock(/*trained=*/false); },  // sync: no batch for this worker at this clock
      [&](const Batch& b) { return TrainBatch(b, epoch, batches, progress, &t); }));
  if (batches.stopped()) {
    report_.Stopped(epoch, t.trained);
    r->stopped = true;
    return Status::OK();
  }
  r->epochs_done = epoch;
  return EndEpoch(epoch, t, batches, r);
}

// Pulls the rows the batch touches, pushes their gradients, ticks.
Status SparseLrTrainer::TrainBatch(const Batch& b, int epoch, const EpochBatches& batches, Progress& progress,
                                   EpochTotals* t) {
  ++t->trained;
  GatherClicks(o_.clicks, b, pooled_, rank_, world_, &batch_);
  BatchKeys(batch_, &keys_, &slot_);
  vals_.resize(keys_.size());
  Request pull = ps_.Pull(w_, keys_, vals_);
  SHARDPS_RETURN_IF_ERROR(pull.Wait());
  const int64_t stale = std::max<int64_t>(0, ps_.clock() - pull.min_clock());
  const double loss = LogisticGradient(batch_, slot_, vals_, feature_scale_, &grads_);
  SHARDPS_RETURN_IF_ERROR(ps_.Push(w_, keys_, grads_).Wait());
  SHARDPS_RETURN_IF_ERROR(ps_.Clock());
  t->loss += loss / b.n;
  ps_.AddSamples(static_cast<uint64_t>(b.n));
  progress.Step(rank_, epoch, static_cast<int>(b.first / o_.batch) + 1, batches.steps(), b.n, loss / b.n, stale);
  return Status::OK();
}

// The evaluator tests the model as the servers hold it on the test stream.
Status SparseLrTrainer::EndEpoch(int epoch, const EpochTotals& t, const EpochBatches& batches, SparseLrResult* r) {
  if (!o_.evaluator || t.trained == 0) return Status::OK();
  ClickBatch test;
  GenerateClicks(o_.clicks, 1, 0, static_cast<uint32_t>(o_.eval_examples), &test);
  const std::vector<uint64_t> keys = TestKeys(test);
  std::vector<float> vals(keys.size());
  SHARDPS_RETURN_IF_ERROR(ps_.Pull(w_, keys, vals).Wait());
  std::unordered_map<uint64_t, float> w;
  for (size_t i = 0; i < keys.size(); ++i) w[keys[i]] = vals[i];
  r->final_accuracy = ClickAccuracy(test, w, feature_scale_);
  char trained[96], best[48];
  std::snprintf(trained, sizeof trained, "%llu %s %llu examples", static_cast<unsigned long long>(batches.handed()),
                pooled_ ? "of" : "of its shard's", static_cast<unsigned long long>(batches.examples()));
  std::snprintf(best, sizeof best, " (best possible %.2f%%)", 100 * test.bayes_accuracy);
  report_.EpochDone(epoch, trained, t.loss / std::max(1, t.trained), r->final_accuracy, best);
  return Status::OK();
}

}  // namespace shardps::worker
