#include "worker/trainer.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <thread>

namespace shardps::worker {


double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool HeldBack(Consistency c, int64_t clock, uint32_t staleness, int64_t last_min_clock) {
  return c == Consistency::kBounded && clock - static_cast<int64_t>(staleness) > last_min_clock;
}

void HoldHistory::Add(bool held) {
  bits_ = ((bits_ << 1) | (held ? 1u : 0u)) & ((1u << kWindow) - 1);
  n_ = std::min(n_ + 1, kWindow);
}

bool HoldHistory::Persistent() const {
  if (min_fraction_ <= 0) return true;
  return n_ == kWindow && std::popcount(bits_) >= min_fraction_ * kWindow;
}

double PredictionFactor(double k, double tau, int64_t between) {
  if (k <= 0 || tau <= 0 || between <= 0) return 0.0;
  return std::min(k, k * tau / static_cast<double>(between));
}

double StragglerSleep(double own, double quickest_pull, double slowdown) {
  if (slowdown <= 1.0) return 0.0;
  return std::max(0.0, own + quickest_pull) * (slowdown - 1.0);
}

// ---- EpochBatches

BatchSource ChooseBatchSource(Consistency c, bool static_shards) {
  if (static_shards) return BatchSource::kShard;
  return c == Consistency::kSync ? BatchSource::kPerClock : BatchSource::kPool;
}

EpochBatches::EpochBatches(ClaimFn claim, StopFn stop, BatchSource source, uint64_t examples, int batch, int chunk)
    : claim_(std::move(claim)),
      stop_(std::move(stop)),
      source_(source),
      // A shard trains whole batches only (every worker the same number of
      // steps); a pool's last batch may be partial.
      examples_(source == BatchSource::kShard ? examples / batch * batch : examples),
      batch_(batch),
      chunk_(std::max(1, chunk)) {}

void EpochBatches::Start(int epoch) {
  epoch_ = epoch;
  next_ = 0;
  handed_ = 0;
  grant_ = WorkRange{};
}

Status EpochBatches::Next(Batch* b) {
  *b = Batch{};
  if (stop_()) return Status::OK();
  b->epoch = epoch_;
  if (source_ == BatchSource::kShard) {
    if (next_ >= examples_) return Status::OK();
    b->first = next_;
    b->n = batch_;
    next_ += batch_;
    handed_ = next_;
    return Status::OK();
  }
  if (source_ == BatchSource::kPerClock) {
    ClaimOptions o;
    o.per_clock = true;
    WorkRange g;
    SHARDPS_RETURN_IF_ERROR(claim_(static_cast<uint64_t>(epoch_), examples_, static_cast<uint32_t>(batch_), o, &g));
    if (g.empty()) {
      b->idle = g.wait;
      if (!g.wait) handed_ = g.handed;
      return Status::OK();
    }
    if (g.end > examples_ || g.pool == 0 || g.pool > static_cast<uint64_t>(epoch_))
      return Status::Internal("the coordinator granted examples [" + std::to_string(g.begin) + ", " +
                              std::to_string(g.end) + ") of epoch " + std::to_string(g.pool) + " to a worker in epoch " +
                              std::to_string(epoch_) + " of " + std::to_string(examples_) + " examples");
    b->epoch = static_cast<int>(g.pool);
    b->first = g.begin;
    b->n = static_cast<int>(g.size());
    return Status::OK();
  }
  if (grant_.empty()) {
    ClaimOptions o;
    o.granule = static_cast<uint32_t>(batch_);
    SHARDPS_RETURN_IF_ERROR(claim_(static_cast<uint64_t>(epoch_), examples_,
                           static_cast<uint32_t>(std::min<uint64_t>(UINT32_MAX, uint64_t{1} * chunk_ * batch_)), o,
                           &grant_));
    if (grant_.empty()) {
      handed_ = grant_.handed;
      return Status::OK();
    }
  }
  b->first = grant_.begin;
  b->n = static_cast<int>(std::min<uint64_t>(batch_, grant_.size()));
  grant_.begin += b->n;
  return Status::OK();
}

// ---- CsvLog

Status CsvLog::Open(const std::string& path) {
  if (path.empty()) return Status::OK();
  f_.open(path, std::ios::trunc);
  if (!f_) return Status::InvalidArgument("cannot write --csv '" + path + "'");
  f_ << "time_s,epoch,loss,test_accuracy\n";
  return Status::OK();
}

void CsvLog::Row(double t, int epoch, double loss, double accuracy) {
  if (f_.is_open()) f_ << t << "," << epoch << "," << loss << "," << accuracy << std::endl;
}

// ---- Progress

void Progress::Step(int rank, int epoch, int step, int steps, long n, double loss, int64_t stale) {
  samples_ += n;
  since_samples_ += n;
  loss_sum_ += loss;
  loss_n_ += 1;
  max_stale_ = std::max(max_stale_, stale);
  const double now = NowSeconds();
  if (now - last_ < interval_) return;
  std::fprintf(out_, "worker %d | epoch %d step %5d/%d | loss %.4f | %7.0f samples/s | staleness %lld\n", rank, epoch,
               step, steps, loss_sum_ / std::max(1L, loss_n_), since_samples_ / std::max(1e-9, now - last_),
               static_cast<long long>(max_stale_));
  std::fflush(out_);
  last_ = now;
  since_samples_ = 0;
  loss_sum_ = 0;
  loss_n_ = 0;
  max_stale_ = 0;
}

// ---- MlpTrainer

MlpTrainer::MlpTrainer(Client& ps, Device& dev, Mlp& mlp, std::vector<Table> wt, std::vector<Table> bt,
                       const Dataset& train, const Dataset* test, const TrainerOptions& o)
    : ps_(ps),
      dev_(dev),
      mlp_(mlp),
      wt_(std::move(wt)),
      bt_(std::move(bt)),
      train_(train),
      test_(test),
      o_(o),
      L_(mlp.num_layers()),
      B_(o.batch),
      rank_(ps.rank()),
      hx_(&dev, static_cast<size_t>(o.batch) * train.cols),
      hy_(&dev, o.batch),
      dx_(&dev, static_cast<size_t>(o.batch) * train.cols),
      dy_(&dev, o.batch),
      dstats_(&dev, 2),
      on_device_(2 * mlp.num_layers()),
      holds_(o.fill_when_held),
      recent_waits_(32, 1e9) {
  // Host buffers (page-locked on a GPU, so uploads run asynchronously).
  for (int l = 0; l < L_; ++l) {
    pw_.emplace_back(&dev, mlp.weight_size(l));
    pb_.emplace_back(&dev, mlp.bias_size(l));
    gw_.emplace_back(&dev, mlp.weight_size(l));
    gb_.emplace_back(&dev, mlp.bias_size(l));
  }
  const int max_fill = std::max(0, o.max_fill);
  if (max_fill > 0 && o.fill_fresh)
    for (int l = 0; l < L_; ++l) {
      fpw_.emplace_back(&dev, mlp.weight_size(l));
      fpb_.emplace_back(&dev, mlp.bias_size(l));
    }
  fill_w_.resize(max_fill);
  fill_b_.resize(max_fill);
  fill_based_.resize(max_fill);
  for (int f = 0; f < max_fill; ++f)
    for (int l = 0; l < L_; ++l) {
      fill_w_[f].emplace_back(&dev, mlp.weight_size(l));
      fill_b_[f].emplace_back(&dev, mlp.bias_size(l));
    }
}

// pulls_[2l], pulls_[2l + 1]: layer l's weights and bias.
void MlpTrainer::IssueLayerPulls(int l, bool ahead) {
  std::span<float> w(pw_[l].data(), pw_[l].size()), b(pb_[l].data(), pb_[l].size());
  pulls_[2 * l] = ahead ? ps_.Prefetch(wt_[l], w) : ps_.Pull(wt_[l], w);
  pulls_[2 * l + 1] = ahead ? ps_.Prefetch(bt_[l], b) : ps_.Pull(bt_[l], b);
}

// fill_fresh: layer l's newest values for an extra batch (Client::PullCurrent).
void MlpTrainer::IssueFreshLayer(int l) {
  fresh_[2 * l] = ps_.PullCurrent(wt_[l], std::span<float>(fpw_[l].data(), fpw_[l].size()));
  fresh_[2 * l + 1] = ps_.PullCurrent(bt_[l], std::span<float>(fpb_[l].data(), fpb_[l].size()));
}

// Fresh values sent ahead for an extra batch that did not come: they are
// old by now, and their buffers are about to be written again.
Status MlpTrainer::DropFresh() {
  for (auto& r : fresh_) SHARDPS_RETURN_IF_ERROR(r.Wait());
  fresh_.clear();
  return Status::OK();
}

void MlpTrainer::IssuePulls(bool ahead) {
  pulls_.assign(2 * L_, Request());
  for (int l = 0; l < L_; ++l) IssueLayerPulls(l, ahead);
}

Status MlpTrainer::WaitPulls(int64_t* min_clock) {
  for (auto& r : pulls_) {
    SHARDPS_RETURN_IF_ERROR(r.Wait());
    if (min_clock) *min_clock = std::min(*min_clock, r.min_clock());
  }
  return Status::OK();
}

Status MlpTrainer::DrainPushes() {
  for (auto& r : pushes_) {
    SHARDPS_RETURN_IF_ERROR(r.Wait());
    const uint64_t st = r.staleness();
    stale_max_ = std::max(stale_max_, st);
    stale_sum_ += st;
    tau_.Add(st);
    ++stale_n_;
  }
  pushes_.clear();
  return Status::OK();
}

void MlpTrainer::LoadBatch(const Batch& b) {
  const std::vector<uint32_t>* order = &order_;
  if (b.epoch != order_epoch_) {  // a dead worker's batch of an earlier epoch
    if (b.epoch != other_epoch_) {
      other_order_ = EpochShard(static_cast<uint32_t>(train_.rows), 0, 1, o_.seed, b.epoch, o_.shuffle);
      other_epoch_ = b.epoch;
    }
    order = &other_order_;
  }
  const int cols = train_.cols;
  n_ = b.n;
  for (int i = 0; i < n_; ++i) {
    const uint32_t ex = (*order)[b.first + static_cast<uint64_t>(i)];
    std::copy_n(&train_.x[static_cast<size_t>(ex) * cols], cols, &hx_[static_cast<size_t>(i) * cols]);
    hy_[i] = train_.y[ex];
  }
  dev_.Upload(dx_.data(), hx_.data(), static_cast<size_t>(n_) * cols);
  dev_.Upload(dy_.data(), hy_.data(), n_);
  dev_.Zero(dstats_.data(), 2);
}

// The parameters that the (answered) pulls `from` read into `w`/`b` onto
// the device, with their stamps: what the next batch is computed on
// (to_train: extrapolated when predicting; the evaluation takes them as read).
void MlpTrainer::LoadParams(const std::vector<Request>& from, const std::vector<HostBuffer>& w,
                            const std::vector<HostBuffer>& b, bool to_train) {
  for (size_t i = 0; i < from.size(); ++i) on_device_[i] = from[i].stamp();
  const bool predict = to_train && predicting_;
  for (int l = 0; l < L_; ++l) {
    dev_.Upload(mlp_.weight(l).data(), w[l].data(), w[l].size());
    dev_.Upload(mlp_.bias(l).data(), b[l].data(), b[l].size());
    if (!predict) continue;
    // Each table by its own drift (the first load, with nothing to
    // extrapolate from, only keeps the values: a = 0).
    float a[2];
    for (int k = 0; k < 2; ++k) {
      const int64_t between = on_device_[2 * l + k].UpdatesSince(prev_stamps_[2 * l + k]);
      a[k] = static_cast<float>(PredictionFactor(o_.predict, tau_.mean(), between));
      if (l == 0 && k == 0) last_ahead_ = a[k] * static_cast<double>(std::max<int64_t>(0, between));
    }
    dev_.Extrapolate(mlp_.weight(l).data(), prev_w_[l].data(), w[l].size(), a[0]);
    dev_.Extrapolate(mlp_.bias(l).data(), prev_b_[l].data(), b[l].size(), a[1]);
  }
  if (predict) prev_stamps_ = on_device_;
}

// Layer l's push: the fills not pushed yet (with-next), then gw/gb (unless
// null), each an optimizer step based on the parameters it was computed on.
void MlpTrainer::PushLayer(int l, const float* gwl, const float* gbl) {
  // A plain push is stamped with the latest-issued pull waited on: after a
  // fill on fresh values that is the fill's pull, not the one this step's
  // parameters came from, so outside sync the stamp is given explicitly.
  if (pending_fills_ == 0 && ps_.consistency() == Consistency::kSync) {
    pushes_.push_back(ps_.Push(wt_[l], std::span<const float>(gwl, gw_[l].size())));
    pushes_.push_back(ps_.Push(bt_[l], std::span<const float>(gbl, gb_[l].size())));
    return;
  }
  std::vector<PushStep> sw, sb;
  for (int f = 0; f < pending_fills_; ++f) {
    sw.push_back({std::span<const float>(fill_w_[f][l].data(), fill_w_[f][l].size()), fill_based_[f][2 * l]});
    sb.push_back({std::span<const float>(fill_b_[f][l].data(), fill_b_[f][l].size()), fill_based_[f][2 * l + 1]});
  }
  if (gwl) {
    sw.push_back({std::span<const float>(gwl, gw_[l].size()), on_device_[2 * l]});
    sb.push_back({std::span<const float>(gbl, gb_[l].size()), on_device_[2 * l + 1]});
  }
  pushes_.push_back(ps_.PushSteps(wt_[l], sw));
  pushes_.push_back(ps_.PushSteps(bt_[l], sb));
}

Status MlpTrainer::FlushFills() {
  if (pending_fills_ == 0) return Status::OK();
  SHARDPS_RETURN_IF_ERROR(DrainPushes());
  for (int l = 0; l < L_; ++l) PushLayer(l, nullptr, nullptr);
  pending_fills_ = 0;
  return Status::OK();
}

// Pooled, held back: rather than idle while the bound holds the next
// clock's parameters back, train this batch on the newest values (or, with
// fill_fresh off, the parameters at hand: the ones the bound allowed for
// this clock). It is an optimizer step of its own, based on the pull its
// parameters came from; each such batch is one the slower workers do not
// have to train.
Status MlpTrainer::FillStep() {
  ++fills_this_clock_;
  ++filled_;
  SHARDPS_RETURN_IF_ERROR(DrainPushes());  // the fill buffers of earlier pushes must be free
  // The buffers of the fills not pushed yet (with-next) are taken; pushed
  // ones (at once, or flushed at an epoch's end) are free again.
  const int f = pending_fills_;
  if (o_.fill_fresh) {
    // The newest values the servers hold, at the clock already read (no
    // wait for the slowest): the batch's gradient is then about as stale as
    // a step's, not 2-4 updates (the parameters at hand miss this worker's
    // last step and everything since its last pull). Usually sent ahead,
    // layer by layer behind the last pushes (below and in Step).
    if (fresh_.empty()) {
      fresh_.assign(2 * L_, Request());
      for (int l = 0; l < L_; ++l) IssueFreshLayer(l);
    }
    for (auto& r : fresh_) SHARDPS_RETURN_IF_ERROR(r.Wait());
    LoadParams(fresh_, fpw_, fpb_, true);
    fresh_.clear();
  }
  // Another extra batch may follow: its values go behind this one's pushes.
  const bool fresh_ahead = o_.fill_fresh && o_.fill_at_once && fills_this_clock_ < o_.max_fill;
  if (fresh_ahead) fresh_.assign(2 * L_, Request());
  fill_based_[f] = on_device_;
  mlp_.Forward(dx_.data(), n_);
  mlp_.Backward(dx_.data(), dy_.data(), n_, dstats_.data(), [&](int l) {
    dev_.Download(fill_w_[f][l].data(), mlp_.grad_weight(l).data(), fill_w_[f][l].size());
    dev_.Download(fill_b_[f][l].data(), mlp_.grad_bias(l).data(), fill_b_[f][l].size());
    if (o_.fill_at_once) {
      const PushStep sw[] = {{std::span<const float>(fill_w_[f][l].data(), fill_w_[f][l].size()), on_device_[2 * l]}};
      const PushStep sb[] = {
          {std::span<const float>(fill_b_[f][l].data(), fill_b_[f][l].size()), on_device_[2 * l + 1]}};
      pushes_.push_back(ps_.PushSteps(wt_[l], sw));
      pushes_.push_back(ps_.PushSteps(bt_[l], sb));
    }
    if (fresh_ahead) IssueFreshLayer(l);  // (the download above waited for the device)
  });
  if (!o_.fill_at_once) ++pending_fills_;
  return Status::OK();
}

// A step on fresh parameters: wait for the pull, forward, (prefetch the
// next step's parameters), backward with each layer pushed as it is ready,
// tick.
Status MlpTrainer::Step(bool last_of_epoch, double* waited) {
  int64_t min_clock = INT64_MAX;
  const double w0 = NowSeconds();
  SHARDPS_RETURN_IF_ERROR(DropFresh());
  SHARDPS_RETURN_IF_ERROR(WaitPulls(&min_clock));
  *waited = NowSeconds() - w0;
  recent_waits_[wait_i_++ % recent_waits_.size()] = *waited;
  stale_ = std::max<int64_t>(0, ps_.clock() - min_clock);
  last_min_clock_ = min_clock;
  LoadParams(pulls_, pw_, pb_, true);
  have_params_ = true;
  fills_this_clock_ = 0;
  mlp_.Forward(dx_.data(), n_);
  const bool ahead = prefetch_ahead_ && !(o_.evaluator && last_of_epoch);
  const bool early = ahead && o_.prefetch == TrainerOptions::PrefetchMode::kEarly;
  const bool per_layer = ahead && o_.prefetch == TrainerOptions::PrefetchMode::kPerLayer;
  if (early) {
    // The parameters are on the device: fetch the next step's now, so they
    // travel while backward runs and the gradients are pushed.
    dev_.Sync();
    IssuePulls(true);
  }
  SHARDPS_RETURN_IF_ERROR(DrainPushes());  // the previous step's gradient buffers are free again
  if (per_layer) pulls_.assign(2 * L_, Request());
  // The next clock's pull will likely be held back and an extra batch
  // trained: its fresh values go behind this step's pushes too.
  const bool fresh_ahead = o_.fill_fresh && o_.max_fill > 0 && source_ == BatchSource::kPool &&
                           HeldBack(ps_.consistency(), ps_.clock() + 1, ps_.staleness(), min_clock) &&
                           holds_.Persistent();
  if (fresh_ahead) fresh_.assign(2 * L_, Request());
  mlp_.Backward(dx_.data(), dy_.data(), n_, dstats_.data(), [&](int l) {
    dev_.Download(gw_[l].data(), mlp_.grad_weight(l).data(), gw_[l].size());
    dev_.Download(gb_[l].data(), mlp_.grad_bias(l).data(), gb_[l].size());
    PushLayer(l, gw_[l].data(), gb_[l].data());
    // Behind the push on each server's connection: the values include this
    // step. (The downloads above waited for the device, which had long read
    // the pulled values this pull overwrites.)
    if (per_layer) IssueLayerPulls(l, true);
    if (fresh_ahead) IssueFreshLayer(l);
  });
  pending_fills_ = 0;
  SHARDPS_RETURN_IF_ERROR(tick_.Wait());  // the previous tick (long answered)
  tick_ = ps_.ClockAsync();
  // Otherwise fetch now, after this step's pushes and tick: the servers
  // answer when the model allows.
  if (!ahead) IssuePulls(false);
  return Status::OK();
}

// Sync, and no batch for this worker at this clock (the epoch's last
// clock, when the examples left are fewer than the workers): the clock
// goes on without a gradient of this worker (the servers average those
// pushed).
Status MlpTrainer::IdleStep() {
  int64_t min_clock = INT64_MAX;
  SHARDPS_RETURN_IF_ERROR(WaitPulls(&min_clock));
  SHARDPS_RETURN_IF_ERROR(DrainPushes());
  SHARDPS_RETURN_IF_ERROR(tick_.Wait());
  tick_ = ps_.ClockAsync(/*trained=*/false);
  IssuePulls(false);
  return Status::OK();
}

double MlpTrainer::Evaluate() {
  const Dataset& test = *test_;
  const int EB = 1000;
  DeviceBuffer ex(&dev_, static_cast<size_t>(EB) * test.cols), ey(&dev_, EB), es(&dev_, 2);
  dev_.Zero(es.data(), 2);
  for (int first = 0; first < test.rows; first += EB) {
    const int n = std::min(EB, test.rows - first);
    dev_.Upload(ex.data(), &test.x[static_cast<size_t>(first) * test.cols], static_cast<size_t>(n) * test.cols);
    dev_.Upload(ey.data(), &test.y[first], n);
    mlp_.Evaluate(ex.data(), ey.data(), n, es.data());
  }
  float st[2];
  dev_.Download(st, es.data(), 2);
  return static_cast<double>(st[1]) / test.rows;
}

Status MlpTrainer::EndEpoch(int epoch, double epoch_loss, int trained, const EpochBatches& batches,
                            TrainResult* r) {
  // A worker that joined after this epoch's last batch trained none of it.
  if (!o_.evaluator || trained == 0) return Status::OK();
  if (pooled_ && ps_.consistency() != Consistency::kSync) {
    // The outstanding prefetch may predate this worker's last pushes: read
    // the end-of-epoch model afresh.
    SHARDPS_RETURN_IF_ERROR(DrainPushes());
    int64_t ignored = INT64_MAX;
    SHARDPS_RETURN_IF_ERROR(WaitPulls(&ignored));
    IssuePulls(false);
  }
  // Evaluate with the parameters of the pull issued after this worker's
  // last step: the model as of the end of this epoch.
  int64_t mc = INT64_MAX;
  SHARDPS_RETURN_IF_ERROR(WaitPulls(&mc));
  LoadParams(pulls_, pw_, pb_, false);  // (an extra batch at hand before the next step is based on them)
  r->final_accuracy = Evaluate();
  const double mean_loss = epoch_loss / std::max(1, trained);
  // How much of the epoch was trained: the examples its pool handed out
  // (and no dead worker handed back), or this worker's shard.
  char trained_what[96];
  if (pooled_)
    std::snprintf(trained_what, sizeof trained_what, "%llu of %llu examples",
                  static_cast<unsigned long long>(batches.handed()), static_cast<unsigned long long>(batches.examples()));
  else
    std::snprintf(trained_what, sizeof trained_what, "%llu examples of its shard",
                  static_cast<unsigned long long>(batches.handed()));
  std::fprintf(o_.out, "worker %d | epoch %d done | %s | train loss %.4f | test accuracy %.2f%% | %.1f s\n", rank_,
               epoch, trained_what, mean_loss, 100.0 * r->final_accuracy, NowSeconds() - t_start_);
  std::fflush(o_.out);
  csv_.Row(NowSeconds() - t_start_, epoch, mean_loss, r->final_accuracy);
  // The pulls were consumed: fetch again for the next step. (The model on
  // the device is the one just evaluated: a fill batch may use it.)
  IssuePulls(false);
  return Status::OK();
}

Status MlpTrainer::Run(TrainResult* result) {
  TrainResult r;
  const int world = static_cast<int>(ps_.num_workers());
  if (o_.evaluator && !test_) return Status::InvalidArgument("the evaluating worker needs the test set");
  // Where the batches come from (EpochBatches): the epoch's pool shared
  // through the coordinator — one batch per clock under sync, a few at a
  // time under bounded staleness and async — or this rank's shard.
  source_ = ChooseBatchSource(ps_.consistency(), o_.static_shards);
  pooled_ = SharesBatches(source_);
  uint64_t examples = static_cast<uint64_t>(pooled_ ? train_.rows : train_.rows / std::max(1, world));
  if (o_.max_steps > 0)
    examples = std::min<uint64_t>(examples, static_cast<uint64_t>(o_.max_steps) * B_ * (pooled_ ? world : 1));
  if (examples < static_cast<uint64_t>(B_))
    return Status::InvalidArgument(std::to_string(examples) + " examples per worker is less than one batch of " +
                                   std::to_string(B_));
  SHARDPS_RETURN_IF_ERROR(csv_.Open(o_.evaluator ? o_.csv : ""));
  // Under bounded staleness (s >= 1) and async the next step's pull may be
  // sent before this step's pushes (Client::Prefetch); under sync it would
  // only be parked, and the evaluator wants the end-of-epoch model.
  prefetch_ahead_ = o_.prefetch != TrainerOptions::PrefetchMode::kLate &&
                   (ps_.consistency() == Consistency::kAsync ||
                    (ps_.consistency() == Consistency::kBounded && ps_.staleness() >= 1));
  // Weight prediction wherever a push may be stale: bounded (any s: the
  // other workers' pushes of the same clock land in between) and async.
  predicting_ = o_.predict > 0 && ps_.consistency() != Consistency::kSync;
  if (predicting_ && prev_w_.empty()) {
    prev_stamps_.assign(2 * L_, PullStamp());
    for (int l = 0; l < L_; ++l) {
      prev_w_.emplace_back(&dev_, mlp_.weight_size(l));
      prev_b_.emplace_back(&dev_, mlp_.bias_size(l));
    }
  }
  EpochBatches batches(
      [this](uint64_t pool, uint64_t total, uint32_t max, const ClaimOptions& co, WorkRange* out) {
        return ps_.ClaimWork(pool, total, max, co, out);
      },
      [this] { return ps_.StopRequested(); }, source_, examples, B_, o_.work_chunk);
  Progress progress(o_.progress_sec, o_.out);
  t_start_ = NowSeconds();
  IssuePulls(false);
  for (int epoch = 1; epoch <= o_.epochs; ++epoch) {
    order_ = EpochShard(static_cast<uint32_t>(train_.rows), pooled_ ? 0 : rank_, pooled_ ? 1 : world, o_.seed, epoch,
                        o_.shuffle);
    order_epoch_ = epoch;
    batches.Start(epoch);
    double epoch_loss = 0;
    int trained = 0;
    for (;;) {
      Batch b;
      SHARDPS_RETURN_IF_ERROR(batches.Next(&b));
      if (b.idle) {
        SHARDPS_RETURN_IF_ERROR(IdleStep());
        continue;
      }
      if (b.n == 0) break;
      const double t0 = NowSeconds();
      LoadBatch(b);
      const bool held = source_ == BatchSource::kPool && have_params_ &&
                        HeldBack(ps_.consistency(), ps_.clock(), ps_.staleness(), last_min_clock_) &&
                        std::any_of(pulls_.begin(), pulls_.end(), [](const Request& q) { return !q.Done(); });
      if (fills_this_clock_ == 0 && have_params_) holds_.Add(held);  // once per clock
      const bool fill = held && fills_this_clock_ < o_.max_fill && holds_.Persistent();
      double waited = 0;
      if (fill)
        SHARDPS_RETURN_IF_ERROR(FillStep());
      else
        SHARDPS_RETURN_IF_ERROR(Step(!pooled_ && b.first + static_cast<uint64_t>(b.n) >= batches.examples(), &waited));
      float stats[2];
      dev_.Download(stats, dstats_.data(), 2);
      const double loss = stats[0] / n_;
      epoch_loss += loss;
      ++trained;
      if (o_.slowdown > 1.0) {
        // (recent_waits_ holds this step's wait too.)
        const double quickest = fill ? 0.0 : *std::min_element(recent_waits_.begin(), recent_waits_.end());
        std::this_thread::sleep_for(
            std::chrono::duration<double>(StragglerSleep(NowSeconds() - t0 - waited, quickest, o_.slowdown)));
      }
      progress.Step(rank_, epoch, static_cast<int>(b.first / B_) + 1, batches.steps(), n_, loss, stale_);
    }
    SHARDPS_RETURN_IF_ERROR(FlushFills());
    r.batches += trained;
    if (batches.stopped()) {
      std::fprintf(o_.out, "worker %d | stopped on request in epoch %d after %d batches of it\n", rank_, epoch,
                   trained);
      r.stopped = true;
      break;
    }
    r.epochs_done = epoch;
    SHARDPS_RETURN_IF_ERROR(EndEpoch(epoch, epoch_loss, trained, batches, &r));
  }
  SHARDPS_RETURN_IF_ERROR(DrainPushes());
  SHARDPS_RETURN_IF_ERROR(tick_.Wait());
  SHARDPS_RETURN_IF_ERROR(DropFresh());
  int64_t mc = INT64_MAX;
  SHARDPS_RETURN_IF_ERROR(WaitPulls(&mc));
  r.seconds = NowSeconds() - t_start_;
  r.examples = static_cast<uint64_t>(progress.samples());
  r.filled = filled_;
  r.push_staleness_max = stale_max_;
  r.push_staleness_mean = static_cast<double>(stale_sum_) / std::max<uint64_t>(1, stale_n_);
  r.prediction = last_ahead_;
  char predicted[64] = "";
  if (predicting_) std::snprintf(predicted, sizeof predicted, " | computed %.2f updates ahead", last_ahead_);
  std::fprintf(o_.out,
               "worker %d | finished %d epochs in %.1f s | %ld batches (%ld while the next parameters were held back) | "
               "%.0f samples/s | push staleness mean %.2f max %llu updates%s\n",
               rank_, r.epochs_done, r.seconds, r.batches, r.filled,
               static_cast<double>(progress.samples()) / std::max(1e-9, r.seconds), r.push_staleness_mean,
               static_cast<unsigned long long>(r.push_staleness_max), predicted);
  std::fflush(o_.out);
  *result = r;
  return Status::OK();
}

Status MlpTrainer::SaveParams(const std::string& path) const {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  for (int l = 0; l < L_; ++l) {
    f.write(reinterpret_cast<const char*>(pw_[l].data()), static_cast<std::streamsize>(pw_[l].size() * 4));
    f.write(reinterpret_cast<const char*>(pb_[l].data()), static_cast<std::streamsize>(pb_[l].size() * 4));
  }
  if (!f) return Status::InvalidArgument("cannot write --save-params '" + path + "'");
  return Status::OK();
}

}  // namespace shardps::worker
