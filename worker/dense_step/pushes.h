// A step's way back to the servers: each layer's gradients pushed from
// host buffers of their own (page-locked on a GPU), the outstanding pushes
// and clock tick, and the staleness the servers measured for the pushes.
#pragma once

#include <span>
#include <vector>

#include "shardps/client.h"
#include "worker/dense_step/step_policy.h"
#include "worker/devices/device.h"
#include "worker/models/mlp.h"

namespace shardps::worker {

// Thread: one (the trainer's) owns every member. The client's I/O thread
// reads a push's gradients (gw()/gb(), or the spans given to PushSteps)
// until Drain() returned: they are not written again before (the Request
// hands them back; no lock here).
class GradientPushes {
 public:
  // `wt`/`bt`: each layer's tables, shaped as `mlp`'s layers (both outlive it).
  GradientPushes(Client& ps, Device& dev, const Mlp& mlp, const std::vector<Table>& wt, const std::vector<Table>& bt);
  GradientPushes(const GradientPushes&) = delete;
  GradientPushes& operator=(const GradientPushes&) = delete;

  // Layer l's gradient buffers (host), for Push.
  HostBuffer& gw(int l) { return gw_[l]; }
  HostBuffer& gb(int l) { return gb_[l]; }
  // Layer l's gradients from gw(l)/gb(l) as one plain push each (based on
  // the latest-issued pull of its table that was waited on).
  void Push(int l);
  // Layer l's weights' and bias' optimizer steps, each based on the pull it names.
  void PushSteps(int l, std::span<const PushStep> w, std::span<const PushStep> b);
  // Waits for every outstanding push and takes their staleness. The first error.
  Status Drain();
  // Waits for the previous tick (long answered), then ticks this worker's clock.
  Status Tick(bool trained);
  Status WaitTick() { return tick_.Wait(); }
  const PushStaleness& staleness() const { return staleness_; }

 private:
  Client& ps_;
  const std::vector<Table>& wt_;
  const std::vector<Table>& bt_;
  std::vector<HostBuffer> gw_, gb_;  // borrowed by the pushes until Drain()
  std::vector<Request> pushes_;
  Request tick_;
  PushStaleness staleness_;
};

}  // namespace shardps::worker
