// The pulls of a model's parameters, layer by layer, each into host
// buffers of its own (page-locked on a GPU): requests()[2l] and [2l + 1]
// read layer l's weights and bias into w()[l] and b()[l].
#pragma once

#include <vector>

#include "shardps/client.h"
#include "worker/devices/device.h"
#include "worker/models/mlp.h"

namespace shardps::worker {

// Thread: one (the trainer's) owns every member. The client's I/O thread
// writes a pull's values into w()/b() between its issue and its Wait(): read
// them only after Wait() (the Request hands them over; no lock here).
class LayerPulls {
 public:
  enum class Kind {
    kPull,      // Client::Pull: the values the consistency model allows
    kPrefetch,  // Client::Prefetch: the same, sent ahead of this step's pushes
    kCurrent,   // Client::PullCurrent: the newest values, at the clock already read
  };
  // `wt`/`bt`: each layer's tables, shaped as `mlp`'s layers (both outlive it).
  LayerPulls(Client& ps, Device& dev, const Mlp& mlp, const std::vector<Table>& wt, const std::vector<Table>& bt);
  LayerPulls(const LayerPulls&) = delete;
  LayerPulls& operator=(const LayerPulls&) = delete;

  // A round of pulls, issued layer by layer with Issue().
  void Start() { reqs_.assign(2 * wt_.size(), Request()); }
  // REQUIRES: Start() since the last Clear().
  void Issue(int l, Kind k);
  // Start() and Issue() for every layer.
  void IssueAll(Kind k);
  // Waits for the round; *min_clock (unless null) takes the smallest
  // min_clock() of its answers. The first error.
  Status Wait(int64_t* min_clock);
  // Waits for the round and forgets it (its values are not wanted: the
  // buffers may be written again).
  Status Drop();
  void Clear() { reqs_.clear(); }
  bool empty() const { return reqs_.empty(); }
  // Some pull of the round is not answered yet.
  bool Outstanding() const;

  const std::vector<Request>& requests() const { return reqs_; }
  const std::vector<HostBuffer>& w() const { return w_; }
  const std::vector<HostBuffer>& b() const { return b_; }

 private:
  Client& ps_;
  const std::vector<Table>& wt_;
  const std::vector<Table>& bt_;
  std::vector<HostBuffer> w_, b_;
  std::vector<Request> reqs_;
};

}  // namespace shardps::worker
