#include "worker/trainers/dlrm_trainer.h"

#include <algorithm>
#include <cmath>

#include "worker/models/click_metrics.h"
#include "worker/trainers/epoch_report.h"

namespace shardps::worker {

std::vector<TableSpec> DlrmTableSpecs(const DlrmTrainOptions& o) {
  std::vector<TableSpec> out;
  TableSpec e = o.embedding;
  e.name = "dlrm.emb";
  e.kind = TableKind::kSparse;
  e.rows = 0;
  e.cols = static_cast<uint32_t>(o.model.dim);
  e.init = InitKind::kUniform;  // torch_dlrm.py's
  e.init_a = -0.05f;
  e.init_b = 0.05f;
  e.seed = o.seed;
  e.optimizer = o.optimizer;
  e.lr = o.lr;
  e.eps = o.eps;
  out.push_back(e);
  std::vector<TableSpec> layers;
  StackTableSpecs("dlrm.bottom", DlrmBottomDims(o.model), o.optimizer, o.lr, o.eps, o.seed, &layers);
  out.insert(out.end(), layers.begin(), layers.end());
  StackTableSpecs("dlrm.top", DlrmTopDims(o.model), o.optimizer, o.lr, o.eps, o.seed + 1, &layers);
  out.insert(out.end(), layers.begin(), layers.end());
  return out;
}

void DlrmInputs(const std::vector<CriteoExample>& ex, uint64_t hash_rows, std::vector<float>* x,
                std::vector<float>* labels, std::vector<uint64_t>* keys) {
  const size_t n = ex.size();
  x->resize(n * kCriteoIntegers);
  labels->resize(n);
  keys->resize(n * kCriteoCategories);
  for (size_t i = 0; i < n; ++i) {
    std::copy(ex[i].dense, ex[i].dense + kCriteoIntegers, x->data() + i * kCriteoIntegers);
    (*labels)[i] = ex[i].label;
    for (int f = 0; f < kCriteoCategories; ++f) (*keys)[i * kCriteoCategories + f] = CriteoKey(ex[i], f, hash_rows);
  }
}

Status OpenDlrmLogs(const DlrmTrainOptions& o, bool with_test, DlrmLogs* out) {
  if (o.model.dense_features != kCriteoIntegers || o.model.sparse_features != kCriteoCategories)
    return Status::InvalidArgument("a Criteo-format log has 13 integer and 26 categorical features");
  SHARDPS_RETURN_IF_ERROR(CriteoFile::Open(o.train_tsv, o.read, &out->train));
  if (out->train->examples() == 0) return Status::InvalidArgument("click log '" + o.train_tsv + "' has no examples");
  if (with_test) {
    SHARDPS_RETURN_IF_ERROR(CriteoFile::Open(o.test_tsv, o.read, &out->test));
    if (out->test->examples() == 0) return Status::InvalidArgument("click log '" + o.test_tsv + "' has no examples");
  }
  return Status::OK();
}

DlrmTrainer::DlrmTrainer(Client& ps, Device& dev, const DlrmTrainOptions& o, DlrmLogs logs)
    : ps_(ps),
      dev_(dev),
      o_(o),
      rank_(ps.rank()),
      train_(std::move(logs.train)),
      test_(std::move(logs.test)),
      model_(&dev, o.model),
      bottom_(ps, dev, model_.bottom()),
      top_(ps, dev, model_.top()),
      x_dev_(&dev, 0),
      labels_dev_(&dev, 0),
      stats_(&dev, 2),
      progress_(o.progress_sec, o.out) {}

int EvalBatch(int requested, int sparse_features, int dim) {
  if (requested > 0) return requested;
  const int64_t row_bytes = int64_t{sparse_features} * dim * static_cast<int64_t>(sizeof(float));
  return static_cast<int>(std::clamp<int64_t>((int64_t{64} << 20) / std::max<int64_t>(row_bytes, 1), 64, 8192));
}

Status DlrmTrainer::CreateTables() {
  const std::vector<TableSpec> specs = DlrmTableSpecs(o_);
  SHARDPS_RETURN_IF_ERROR(ps_.CreateTable(specs[0], &emb_table_));
  const size_t nb = 2 * static_cast<size_t>(model_.bottom().num_layers());
  SHARDPS_RETURN_IF_ERROR(bottom_.Create({specs.begin() + 1, specs.begin() + 1 + nb}));
  return top_.Create({specs.begin() + 1 + nb, specs.end()});
}

Status DlrmTrainer::Run(DlrmResult* r) {
  *r = DlrmResult{};
  world_ = static_cast<int>(std::max<uint32_t>(1, ps_.num_workers()));
  source_ = ChooseBatchSource(ps_.consistency(), o_.static_shards);
  const uint64_t n = train_->examples();
  shard_begin_ = n * static_cast<uint64_t>(rank_) / world_;
  shard_size_ = n * static_cast<uint64_t>(rank_ + 1) / world_ - shard_begin_;
  t_start_ = NowSeconds();
  for (int epoch = 1; epoch <= o_.epochs && !r->stopped; ++epoch) SHARDPS_RETURN_IF_ERROR(RunEpoch(epoch, r));
  r->samples = progress_.samples();
  r->skipped = train_->skipped();
  r->seconds = NowSeconds() - t_start_;
  const double training = r->seconds - eval_seconds_;  // samples/s of the training alone
  std::fprintf(o_.out, "worker %d | finished %d epochs in %.1f s | %.1f s training | %ld samples | %.0f samples/s%s\n",
               rank_, r->epochs_done, r->seconds, training, r->samples, training > 0 ? r->samples / training : 0.0,
               CacheNote().c_str());
  std::fflush(o_.out);
  return Status::OK();
}

Status DlrmTrainer::RunEpoch(int epoch, DlrmResult* r) {
  const bool pooled = SharesBatches(source_);
  const uint64_t examples =
      CapToMaxSteps(pooled ? train_->examples() : shard_size_, o_.max_steps, o_.batch, world_, pooled);
  EpochBatches batches(
      [&](uint64_t pool, uint64_t total, uint32_t max, const ClaimOptions& co, WorkRange* out) {
        return ps_.ClaimWork(pool, total, max, co, out);
      },
      [&] { return ps_.StopRequested(); }, source_, examples, o_.batch, o_.work_chunk);
  EpochTotals t;
  Status s = batches.Run(
      epoch,
      [&] {
        SHARDPS_RETURN_IF_ERROR(WaitTick());
        return ps_.Clock(false);
      },
      [&](const Batch& b) { return TrainBatch(b, epoch, batches, &t); });
  DropAhead();
  if (Status ts = WaitTick(); s.ok()) s = ts;
  SHARDPS_RETURN_IF_ERROR(s);
  if (batches.stopped()) {
    r->stopped = true;
    std::fprintf(o_.out, "worker %d | stopped on request in epoch %d\n", rank_, epoch);
    return Status::OK();
  }
  return EndEpoch(epoch, t, batches, r);
}

Status DlrmTrainer::ReadBatch(const Batch& b, bool ahead, DlrmBatch* into) {
  into->examples.clear();
  into->first = SharesBatches(source_) ? b.first : shard_begin_ + b.first;
  into->lines = b.n;
  SHARDPS_RETURN_IF_ERROR(train_->Read(into->first, into->first + static_cast<uint64_t>(b.n), &into->examples));
  DlrmInputs(into->examples, o_.hash_rows, &into->x, &into->labels, &into->keys);
  into->emb.resize(model_.embedding_floats(static_cast<int>(into->examples.size())));
  if (into->examples.empty())
    into->rows = Request();
  else
    into->rows = ahead ? ps_.Prefetch(emb_table_, into->keys, into->emb) : ps_.Pull(emb_table_, into->keys, into->emb);
  return Status::OK();
}

Status DlrmTrainer::PullAhead(const EpochBatches& batches) {
  Batch next;
  if (!batches.PeekNext(&next) || next.n == 0) return Status::OK();
  return ReadBatch(next, true, &ahead_);
}

void DlrmTrainer::DropAhead() {
  if (ahead_.lines == 0) return;
  (void)ahead_.rows.Wait();  // its buffers must outlive the pull
  ahead_.lines = 0;
}

void DlrmTrainer::EndClock(bool trained) {
  HeldRequests together = ps_.HoldRequests();
  tick_ = ps_.ClockAsync(trained);
  // What the next step would pull (they carry the new clock, and wait at the
  // servers as its own pulls would): the same values, a message earlier.
  bottom_.Pull();
  top_.Pull();
  dense_ahead_ = ps_.clock();
}

Status DlrmTrainer::WaitTick() {
  Status s = tick_.Wait();
  tick_ = Request();
  return s;
}

Status DlrmTrainer::TrainBatch(const Batch& b, int epoch, const EpochBatches& batches, EpochTotals* t) {
  SHARDPS_RETURN_IF_ERROR(WaitTick());
  const uint64_t first = SharesBatches(source_) ? b.first : shard_begin_ + b.first;
  if (ahead_.lines > 0 && ahead_.first == first && ahead_.lines == b.n) {
    std::swap(now_, ahead_);  // read and pulled already
    ahead_.lines = 0;
  } else {
    DropAhead();
    SHARDPS_RETURN_IF_ERROR(ReadBatch(b, false, &now_));
  }
  const int n = static_cast<int>(now_.examples.size());  // fewer than b.n when malformed lines were skipped
  double loss = 0;
  if (n > 0) SHARDPS_RETURN_IF_ERROR(Step(batches, &loss));
  EndClock(n > 0);
  t->loss += loss;
  t->examples += n;
  ps_.AddSamples(static_cast<uint64_t>(n));
  progress_.Step(rank_, epoch, static_cast<int>(b.first / o_.batch) + 1, batches.steps(), n, n ? loss / n : 0, 0,
                 [&] { return CacheNote(); });
  return Status::OK();
}

std::string DlrmTrainer::CacheNote() const {
  const RowCacheStats s = ps_.row_cache_stats();
  if (s.lookups == 0) return "";
  char note[96];
  std::snprintf(note, sizeof note, " | row cache hits %.1f%% of %llu", 100.0 * s.hits / s.lookups,
                static_cast<unsigned long long>(s.lookups));
  return note;
}

Status DlrmTrainer::Step(const EpochBatches& batches, double* loss) {
  const int n = static_cast<int>(now_.examples.size());
  x_dev_.Reserve(now_.x.size());
  labels_dev_.Reserve(now_.labels.size());
  dev_.Upload(x_dev_.data(), now_.x.data(), now_.x.size());
  dev_.Upload(labels_dev_.data(), now_.labels.data(), now_.labels.size());
  emb_grad_.resize(now_.emb.size());
  if (dense_ahead_ != ps_.clock()) {
    // Every dense table's pull in one message per server (docs/protocol.md,
    // "Envelopes"): ten small tables, a message each otherwise. (Pulls
    // issued for another clock, by EndClock before an idle one, are
    // waited for and pulled again.)
    HeldRequests together = ps_.HoldRequests();
    bottom_.Pull();
    top_.Pull();
  }
  dense_ahead_ = -1;
  SHARDPS_RETURN_IF_ERROR(now_.rows.Wait());
  SHARDPS_RETURN_IF_ERROR(bottom_.Await());
  SHARDPS_RETURN_IF_ERROR(top_.Await());
  model_.Forward(x_dev_.data(), now_.emb.data(), n);
  dev_.Zero(stats_.data(), 2);
  Request rows_pushed;
  Status ahead;
  // The step's pushes leave together as backward ends, one message per
  // server: on a CPU the layers' backward is microseconds apart, and each
  // push its own message cost more than sending it early saved.
  HeldRequests pushes = ps_.HoldRequests();
  model_.Backward(x_dev_.data(), labels_dev_.data(), n, stats_.data(), emb_grad_.data(), [&](DlrmPart part, int l) {
    if (part == DlrmPart::kTop) top_.PushLayer(l);
    if (part == DlrmPart::kBottom) bottom_.PushLayer(l);
    if (part == DlrmPart::kEmbeddings) {
      rows_pushed = ps_.Push(emb_table_, now_.keys, emb_grad_);
      ahead = PullAhead(batches);  // behind the push: the next rows hold it (and leave with it)
    }
  });
  pushes.Release();  // (the bottom MLP's pushes come after the embeddings')
  float stats[2];
  dev_.Download(stats, stats_.data(), 2);
  *loss = stats[0];
  Status s = rows_pushed.Wait();
  Status sb = bottom_.AwaitPushes(), st = top_.AwaitPushes();
  if (s.ok()) s = sb.ok() ? st : sb;
  return s.ok() ? ahead : s;
}

Status DlrmTrainer::Evaluate(double* auc, double* logloss) {
  dense_ahead_ = -1;  // (its pulls land in the buffers the pulls ahead use)
  bottom_.Pull();
  top_.Pull();
  SHARDPS_RETURN_IF_ERROR(bottom_.Await());
  SHARDPS_RETURN_IF_ERROR(top_.Await());
  std::vector<float> logits, labels, chunk_logits;
  std::vector<CriteoExample> ex;
  std::vector<float> x, y, emb;
  std::vector<uint64_t> keys;
  const uint64_t n = test_->examples();
  const auto batch = static_cast<uint64_t>(EvalBatch(o_.eval_batch, o_.model.sparse_features, o_.model.dim));
  for (uint64_t i = 0; i < n; i += batch) {
    ex.clear();
    SHARDPS_RETURN_IF_ERROR(test_->Read(i, std::min(n, i + batch), &ex));
    if (ex.empty()) continue;
    DlrmInputs(ex, o_.hash_rows, &x, &y, &keys);
    const int rows = static_cast<int>(ex.size());
    emb.resize(model_.embedding_floats(rows));
    SHARDPS_RETURN_IF_ERROR(ps_.Pull(emb_table_, keys, emb).Wait());
    x_dev_.Reserve(x.size());
    dev_.Upload(x_dev_.data(), x.data(), x.size());
    chunk_logits.resize(rows);
    model_.Predict(x_dev_.data(), emb.data(), rows, chunk_logits.data());
    logits.insert(logits.end(), chunk_logits.begin(), chunk_logits.end());
    labels.insert(labels.end(), y.begin(), y.end());
  }
  *auc = Auc(logits, labels);
  *logloss = LogLoss(logits, labels);
  return Status::OK();
}

Status DlrmTrainer::EndEpoch(int epoch, const EpochTotals& t, const EpochBatches& batches, DlrmResult* r) {
  r->epochs_done = epoch;
  const std::string trained = TrainedWhat(SharesBatches(source_), batches.handed(), batches.examples());
  const double mean_loss = t.examples ? t.loss / static_cast<double>(t.examples) : 0;
  if (!o_.evaluator) {
    std::fprintf(o_.out, "worker %d | epoch %d done | %s | train loss %.4f | %.1f s\n", rank_, epoch,
                 trained.c_str(), mean_loss, NowSeconds() - t_start_);
    std::fflush(o_.out);
    return Status::OK();
  }
  const double t0 = NowSeconds();
  SHARDPS_RETURN_IF_ERROR(Evaluate(&r->auc, &r->logloss));
  eval_seconds_ += NowSeconds() - t0;
  std::fprintf(o_.out, "worker %d | epoch %d done | %s | train loss %.4f | test AUC %.4f | logloss %.4f | %.1f s\n",
               rank_, epoch, trained.c_str(), mean_loss, r->auc, r->logloss, NowSeconds() - t_start_);
  std::fflush(o_.out);
  csv_.Row(NowSeconds() - t_start_, epoch, mean_loss, r->auc);
  return Status::OK();
}

}  // namespace shardps::worker
