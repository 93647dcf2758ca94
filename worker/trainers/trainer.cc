#include "worker/trainers/trainer.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <span>
#include <thread>

namespace shardps::worker {

FetchPlan FetchPlan::For(Consistency c, uint32_t staleness, const TrainerOptions& o) {
  FetchPlan p;
  p.ahead = o.prefetch != TrainerOptions::PrefetchMode::kLate &&
            (c == Consistency::kAsync || (c == Consistency::kBounded && staleness >= 1));
  p.predicting = o.predict > 0 && c != Consistency::kSync;
  return p;
}

FetchPlan::Step FetchPlan::ForStep(TrainerOptions::PrefetchMode mode, bool evaluator, bool last_of_epoch) const {
  Step s;
  s.ahead = ahead && !(evaluator && last_of_epoch);
  s.early = s.ahead && mode == TrainerOptions::PrefetchMode::kEarly;
  s.per_layer = s.ahead && mode == TrainerOptions::PrefetchMode::kPerLayer;
  return s;
}

Status ExamplesPerWorker(int rows, int world, bool pooled, int max_steps, int batch, uint64_t* out) {
  const uint64_t examples = static_cast<uint64_t>(pooled ? rows : rows / std::max(1, world));
  *out = CapToMaxSteps(examples, max_steps, batch, world, pooled);
  if (*out < static_cast<uint64_t>(batch))
    return Status::InvalidArgument(std::to_string(*out) + " examples per worker is less than one batch of " +
                                   std::to_string(batch));
  return Status::OK();
}

namespace {

FillOptions FillOptionsOf(const TrainerOptions& o) {
  FillOptions f;
  f.max_fill = o.max_fill;
  f.fill_when_held = o.fill_when_held;
  f.fill_fresh = o.fill_fresh;
  f.fill_at_once = o.fill_at_once;
  return f;
}

}  // namespace

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
      rank_(ps.rank()),
      batch_(dev, train, o.batch, o.seed, o.shuffle),
      pulls_(ps, dev, mlp, wt_, bt_),
      pushes_(ps, dev, mlp, wt_, bt_),
      params_(dev, mlp, o.predict),
      fills_(ps, dev, mlp, wt_, bt_, batch_, params_, pushes_, FillOptionsOf(o)),
      report_(ps.rank(), o.out) {}

Status MlpTrainer::Run(TrainResult* result) {
  uint64_t examples = 0;
  SHARDPS_RETURN_IF_ERROR(Prepare(&examples));
  EpochBatches batches(
      [this](uint64_t pool, uint64_t total, uint32_t max, const ClaimOptions& co, WorkRange* out) {
        return ps_.ClaimWork(pool, total, max, co, out);
      },
      [this] { return ps_.StopRequested(); }, source_, examples, o_.batch, o_.work_chunk);
  Progress progress(o_.progress_sec, o_.out);
  report_.Start();
  pulls_.IssueAll(LayerPulls::Kind::kPull);
  TrainResult r;
  for (int epoch = 1; epoch <= o_.epochs && !r.stopped; ++epoch)
    SHARDPS_RETURN_IF_ERROR(RunEpoch(epoch, batches, progress, &r));
  SHARDPS_RETURN_IF_ERROR(Finish(progress, &r));
  *result = r;
  return Status::OK();
}

Status MlpTrainer::Prepare(uint64_t* examples) {
  world_ = static_cast<int>(ps_.num_workers());
  if (o_.evaluator && !test_) return Status::InvalidArgument("the evaluating worker needs the test set");
  // Where the batches come from (EpochBatches): the epoch's pool shared
  // through the coordinator — one batch per clock under sync, a few at a
  // time under bounded staleness and async — or this rank's shard.
  source_ = ChooseBatchSource(ps_.consistency(), o_.static_shards);
  pooled_ = SharesBatches(source_);
  SHARDPS_RETURN_IF_ERROR(ExamplesPerWorker(train_.rows, world_, pooled_, o_.max_steps, o_.batch, examples));
  SHARDPS_RETURN_IF_ERROR(report_.Open(o_.evaluator ? o_.csv : ""));
  plan_ = FetchPlan::For(ps_.consistency(), ps_.staleness(), o_);
  params_.SetPredicting(plan_.predicting);
  return Status::OK();
}

// An epoch's batches, then (unless the job was asked to stop) its end.
Status MlpTrainer::RunEpoch(int epoch, EpochBatches& batches, Progress& progress, TrainResult* r) {
  batch_.StartEpoch(epoch, pooled_ ? 0 : rank_, pooled_ ? 1 : world_);
  EpochTotals t;
  SHARDPS_RETURN_IF_ERROR(batches.Run(
      epoch, [this] { return IdleStep(); },
      [&](const Batch& b) { return TrainBatch(b, epoch, batches, progress, &t); }));
  SHARDPS_RETURN_IF_ERROR(fills_.Flush());
  r->batches += t.trained;
  if (batches.stopped()) {
    report_.Stopped(epoch, t.trained);
    r->stopped = true;
    return Status::OK();
  }
  r->epochs_done = epoch;
  return EndEpoch(epoch, t, batches, r);
}

// One batch: an extra one while the bound holds the next parameters back
// (pooled, persistently held: ExtraBatches), else a step.
Status MlpTrainer::TrainBatch(const Batch& b, int epoch, const EpochBatches& batches, Progress& progress,
                              EpochTotals* t) {
  const double t0 = NowSeconds();
  batch_.Load(b);
  const bool held = source_ == BatchSource::kPool && have_params_ &&
                    HeldBack(ps_.consistency(), ps_.clock(), ps_.staleness(), last_min_clock_) && pulls_.Outstanding();
  const bool fill = fills_.policy().Decide(held, have_params_);
  double waited = 0;
  if (fill)
    SHARDPS_RETURN_IF_ERROR(fills_.Train());
  else
    SHARDPS_RETURN_IF_ERROR(Step(!pooled_ && b.first + static_cast<uint64_t>(b.n) >= batches.examples(), &waited));
  const double loss = batch_.MeanLoss();
  t->loss += loss;
  ++t->trained;
  if (o_.slowdown > 1.0) Straggle(t0, waited, fill);
  ps_.AddSamples(static_cast<uint64_t>(batch_.n()));
  progress.Step(rank_, epoch, static_cast<int>(b.first / o_.batch) + 1, batches.steps(), batch_.n(), loss, stale_);
  return Status::OK();
}

// A step on fresh parameters: wait for the pull, forward, (prefetch the
// next step's parameters), backward with each layer pushed as it is ready,
// tick.
Status MlpTrainer::Step(bool last_of_epoch, double* waited) {
  int64_t min_clock = INT64_MAX;
  SHARDPS_RETURN_IF_ERROR(AwaitParams(&min_clock, waited));
  mlp_.Forward(batch_.x(), batch_.n());
  const FetchPlan::Step fetch = plan_.ForStep(o_.prefetch, o_.evaluator, last_of_epoch);
  if (fetch.early) {
    // The parameters are on the device: fetch the next step's now, so they
    // travel while backward runs and the gradients are pushed.
    dev_.Sync();
    pulls_.IssueAll(LayerPulls::Kind::kPrefetch);
  }
  SHARDPS_RETURN_IF_ERROR(pushes_.Drain());  // the previous step's gradient buffers are free again
  if (fetch.per_layer) pulls_.Start();
  // The next clock's pull will likely be held back and an extra batch
  // trained: its fresh values go behind this step's pushes too.
  const bool fresh_ahead =
      fills_.fresh() && source_ == BatchSource::kPool &&
      fills_.policy().Expected(HeldBack(ps_.consistency(), ps_.clock() + 1, ps_.staleness(), min_clock));
  if (fresh_ahead) fills_.StartFresh();
  mlp_.Backward(batch_.x(), batch_.y(), batch_.n(), batch_.stats(), [&](int l) {
    dev_.Download(pushes_.gw(l).data(), mlp_.grad_weight(l).data(), pushes_.gw(l).size());
    dev_.Download(pushes_.gb(l).data(), mlp_.grad_bias(l).data(), pushes_.gb(l).size());
    PushLayer(l);
    // Behind the push on each server's connection: the values include this
    // step. (The downloads above waited for the device, which had long read
    // the pulled values this pull overwrites.)
    if (fetch.per_layer) pulls_.Issue(l, LayerPulls::Kind::kPrefetch);
    if (fresh_ahead) fills_.IssueFresh(l);
  });
  fills_.PendingPushed();
  // The tick and the pulls behind it leave together: one message per server.
  HeldRequests together = ps_.HoldRequests();
  SHARDPS_RETURN_IF_ERROR(pushes_.Tick(/*trained=*/true));
  // Otherwise fetch now, after this step's pushes and tick: the servers
  // answer when the model allows.
  if (!fetch.ahead) pulls_.IssueAll(LayerPulls::Kind::kPull);
  return Status::OK();
}

// The step's parameters: waits for their pull (*waited: how long), takes
// its clocks and loads them onto the device; a new clock begins.
Status MlpTrainer::AwaitParams(int64_t* min_clock, double* waited) {
  const double w0 = NowSeconds();
  SHARDPS_RETURN_IF_ERROR(fills_.DropFresh());
  SHARDPS_RETURN_IF_ERROR(pulls_.Wait(min_clock));
  *waited = NowSeconds() - w0;
  waits_.Add(*waited);
  stale_ = std::max<int64_t>(0, ps_.clock() - *min_clock);
  last_min_clock_ = *min_clock;
  params_.Load(pulls_, true, pushes_.staleness().tau());
  have_params_ = true;
  fills_.policy().NewClock();
  return Status::OK();
}

// Layer l's push: the extra batches not pushed yet (with-next), then this
// step's gradients, each an optimizer step based on the parameters it was
// computed on.
void MlpTrainer::PushLayer(int l) {
  // A plain push is stamped with the latest-issued pull waited on: after a
  // fill on fresh values that is the fill's pull, not the one this step's
  // parameters came from, so outside sync the stamp is given explicitly.
  if (fills_.pending() == 0 && ps_.consistency() == Consistency::kSync) {
    pushes_.Push(l);
    return;
  }
  std::vector<PushStep> sw, sb;
  fills_.AppendPending(l, &sw, &sb);
  const std::vector<PullStamp>& on = params_.on_device();
  sw.push_back({std::span<const float>(pushes_.gw(l).data(), pushes_.gw(l).size()), on[2 * l]});
  sb.push_back({std::span<const float>(pushes_.gb(l).data(), pushes_.gb(l).size()), on[2 * l + 1]});
  pushes_.PushSteps(l, sw, sb);
}

// Sync, and no batch for this worker at this clock (the epoch's last
// clock, when the examples left are fewer than the workers): the clock
// goes on without a gradient of this worker (the servers average those
// pushed).
Status MlpTrainer::IdleStep() {
  int64_t min_clock = INT64_MAX;
  SHARDPS_RETURN_IF_ERROR(pulls_.Wait(&min_clock));
  SHARDPS_RETURN_IF_ERROR(pushes_.Drain());
  HeldRequests together = ps_.HoldRequests();  // the tick and the pulls: one message per server
  SHARDPS_RETURN_IF_ERROR(pushes_.Tick(/*trained=*/false));
  pulls_.IssueAll(LayerPulls::Kind::kPull);
  return Status::OK();
}

// A straggler (--slowdown) sleeps its own share of the batch begun at t0
// times the slowdown less one (StragglerSleep).
void MlpTrainer::Straggle(double t0, double waited, bool fill) const {
  // (waits_ holds this step's wait too.)
  const double quickest = fill ? 0.0 : waits_.Quickest();
  std::this_thread::sleep_for(
      std::chrono::duration<double>(StragglerSleep(NowSeconds() - t0 - waited, quickest, o_.slowdown)));
}

Status MlpTrainer::EndEpoch(int epoch, const EpochTotals& t, const EpochBatches& batches, TrainResult* r) {
  // A worker that joined after this epoch's last batch trained none of it.
  if (!o_.evaluator || t.trained == 0) return Status::OK();
  if (pooled_ && ps_.consistency() != Consistency::kSync) {
    // The outstanding prefetch may predate this worker's last pushes: read
    // the end-of-epoch model afresh.
    SHARDPS_RETURN_IF_ERROR(pushes_.Drain());
    int64_t ignored = INT64_MAX;
    SHARDPS_RETURN_IF_ERROR(pulls_.Wait(&ignored));
    pulls_.IssueAll(LayerPulls::Kind::kPull);
  }
  // Evaluate with the parameters of the pull issued after this worker's
  // last step: the model as of the end of this epoch.
  int64_t mc = INT64_MAX;
  SHARDPS_RETURN_IF_ERROR(pulls_.Wait(&mc));
  // (An extra batch at hand before the next step is based on them.)
  params_.Load(pulls_, /*to_train=*/false, pushes_.staleness().tau());
  r->final_accuracy = TestAccuracy(dev_, mlp_, *test_);
  report_.EpochDone(epoch, TrainedWhat(pooled_, batches.handed(), batches.examples()), t.loss / std::max(1, t.trained),
                    r->final_accuracy);
  // The pulls were consumed: fetch again for the next step. (The model on
  // the device is the one just evaluated: a fill batch may use it.)
  pulls_.IssueAll(LayerPulls::Kind::kPull);
  return Status::OK();
}

// Waits for everything outstanding and reports the totals.
Status MlpTrainer::Finish(const Progress& progress, TrainResult* r) {
  SHARDPS_RETURN_IF_ERROR(pushes_.Drain());
  SHARDPS_RETURN_IF_ERROR(pushes_.WaitTick());
  SHARDPS_RETURN_IF_ERROR(fills_.DropFresh());
  int64_t mc = INT64_MAX;
  SHARDPS_RETURN_IF_ERROR(pulls_.Wait(&mc));
  r->seconds = report_.elapsed();
  r->examples = static_cast<uint64_t>(progress.samples());
  r->filled = fills_.policy().filled();
  r->push_staleness_max = pushes_.staleness().max();
  r->push_staleness_mean = pushes_.staleness().mean();
  r->prediction = params_.last_ahead();
  char predicted[64] = "";
  if (params_.predicting())
    std::snprintf(predicted, sizeof predicted, " | computed %.2f updates ahead", params_.last_ahead());
  std::fprintf(o_.out,
               "worker %d | finished %d epochs in %.1f s | %ld batches (%ld while the next parameters were held back) | "
               "%.0f samples/s | push staleness mean %.2f max %llu updates%s\n",
               rank_, r->epochs_done, r->seconds, r->batches, r->filled,
               static_cast<double>(progress.samples()) / std::max(1e-9, r->seconds), r->push_staleness_mean,
               static_cast<unsigned long long>(r->push_staleness_max), predicted);
  std::fflush(o_.out);
  return Status::OK();
}

Status MlpTrainer::SaveParams(const std::string& path) const {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  for (size_t l = 0; l < pulls_.w().size(); ++l) {
    f.write(reinterpret_cast<const char*>(pulls_.w()[l].data()), static_cast<std::streamsize>(pulls_.w()[l].size() * 4));
    f.write(reinterpret_cast<const char*>(pulls_.b()[l].data()), static_cast<std::streamsize>(pulls_.b()[l].size() * 4));
  }
  if (!f) return Status::InvalidArgument("cannot write --save-params '" + path + "'");
  return Status::OK();
}

}  // namespace shardps::worker
