// Extra batches (bounded staleness, pooled; docs/consistency.md): rather
// than idle while the bound holds the next clock's parameters back, a
// worker trains the batch at hand on the newest values the servers hold
// (--fill-params fresh: Client::PullCurrent, usually sent ahead behind the
// last pushes) or on the parameters at hand, as an optimizer step of its
// own based on the pull its parameters came from; each such batch is one
// the slower workers do not have to train. Its gradients are pushed at once
// or with the next step's (--fill-push with-next: steps of one push).
#pragma once

#include <memory>
#include <vector>

#include "shardps/client.h"
#include "worker/dense_step/device_batch.h"
#include "worker/dense_step/layer_pulls.h"
#include "worker/dense_step/param_loader.h"
#include "worker/dense_step/pushes.h"
#include "worker/dense_step/step_policy.h"
#include "worker/models/mlp.h"

namespace shardps::worker {

struct FillOptions {
  int max_fill = 2;            // batches per clock trained while held back
  double fill_when_held = 0.5;  // ... once at least this fraction of the last 16 clocks were held back
  bool fill_fresh = true;      // ... on the newest values (Client::PullCurrent), not the ones at hand
  bool fill_at_once = true;    // push each at once (else with the next step, PushSteps)
};

// Thread: one (the trainer's) owns every member; the client's I/O thread
// writes fresh pulls' values (fresh_) and reads the extra batches'
// gradients (fill_w_, fill_b_) until their requests are answered (see
// LayerPulls and GradientPushes).
class ExtraBatches {
 public:
  // The parts it trains with (all outlive it): the model and its tables,
  // the batch on the device, the parameter loader and the pushes.
  ExtraBatches(Client& ps, Device& dev, Mlp& mlp, const std::vector<Table>& wt, const std::vector<Table>& bt,
               DeviceBatch& batch, ParamLoader& params, GradientPushes& pushes, const FillOptions& o);
  ExtraBatches(const ExtraBatches&) = delete;
  ExtraBatches& operator=(const ExtraBatches&) = delete;

  FillPolicy& policy() { return policy_; }
  const FillPolicy& policy() const { return policy_; }

  // Trains the loaded batch as an extra one. REQUIRES: policy().Decide()
  // said so. The first error of the client.
  Status Train();
  // Layer l's optimizer steps of the extra batches not pushed yet
  // (with-next), appended to w/b.
  void AppendPending(int l, std::vector<PushStep>* w, std::vector<PushStep>* b) const;
  int pending() const { return pending_; }
  // The step that took the pending batches along was pushed.
  void PendingPushed() { pending_ = 0; }
  // Pushes the pending batches on their own (at an epoch's end).
  Status Flush();

  // The next clock's fresh values, sent ahead layer by layer behind a
  // step's pushes (fill_fresh): StartFresh(), then IssueFresh(l) per layer.
  // REQUIRES: fill_fresh and max_fill > 0.
  void StartFresh() { fresh_->Start(); }
  void IssueFresh(int l) { fresh_->Issue(l, LayerPulls::Kind::kCurrent); }
  // Fresh values sent ahead for an extra batch that did not come: they are
  // old by now, and their buffers are about to be written again.
  Status DropFresh() { return fresh_ ? fresh_->Drop() : Status::OK(); }
  bool fresh() const { return fresh_ != nullptr; }

 private:
  Status LoadFresh();

  Mlp& mlp_;
  DeviceBatch& batch_;
  ParamLoader& params_;
  GradientPushes& pushes_;
  Device& dev_;
  const FillOptions o_;
  FillPolicy policy_;
  // The extra batches' gradients (fill_w_[f][l]), and the versions they
  // were computed on (as ParamLoader::on_device).
  std::vector<std::vector<HostBuffer>> fill_w_, fill_b_;
  std::vector<std::vector<PullStamp>> fill_based_;
  int pending_ = 0;                    // with-next: extra batches not pushed yet
  std::unique_ptr<LayerPulls> fresh_;  // fill_fresh: the newest parameters and their pulls
};

}  // namespace shardps::worker
