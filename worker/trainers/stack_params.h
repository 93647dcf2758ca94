// The parameters of a DenseStack (worker/models/dense_stack.h) on the servers: one
// table per layer's weights and one per its bias. Pulls land in host
// buffers and are uploaded to the stack; each layer's gradients are
// downloaded and pushed as Backward hands them over.
//
// Thread: one (the trainer's) owns it. The client's I/O thread writes a
// pull's values into the host buffers, and reads a push's gradients from
// them, between the request's issue and its Wait() (Await, AwaitPushes).
#pragma once

#include <string>
#include <vector>

#include "shardps/client.h"
#include "worker/devices/device.h"
#include "worker/models/dense_stack.h"

namespace shardps::worker {

// The tables of a stack of layer widths `dims`: "<prefix>.w<l>" (dims[l] x
// dims[l + 1]) and "<prefix>.b<l>" (1 x dims[l + 1]), both uniform in
// +-1/sqrt(dims[l]) (torch.nn.Linear's default), seeded by `seed` and the
// layer, with `optimizer` at `lr` (eps for Adagrad and Adam).
void StackTableSpecs(const std::string& prefix, const std::vector<int>& dims, OptimizerKind optimizer, float lr,
                     float eps, uint64_t seed, std::vector<TableSpec>* out);

class StackParams {
 public:
  StackParams(Client& ps, Device& dev, DenseStack& stack);
  // Waits for pulls still in flight (they write into its buffers).
  ~StackParams();
  StackParams(const StackParams&) = delete;
  StackParams& operator=(const StackParams&) = delete;

  // Looks up (or defines, from StackTableSpecs' `specs`) every layer's tables.
  Status Create(const std::vector<TableSpec>& specs);
  // Every layer's pull of the current clock (a round still in flight is
  // waited for first); Await() waits for them and uploads the values into
  // the stack.
  void Pull();
  Status Await();
  // Layer l's gradients (the stack's grad_weight/grad_bias, on the device)
  // to the servers; AwaitPushes() waits for every push since the last.
  void PushLayer(int l);
  Status AwaitPushes();

 private:
  void Drain();  // waits for the pulls in flight (errors dropped)

  Client& ps_;
  Device& dev_;
  DenseStack& stack_;
  std::vector<Table> w_, b_;
  std::vector<HostBuffer> wv_, bv_, wg_, bg_;  // pulled values, gradients
  std::vector<Request> pulls_, pushes_;
};

}  // namespace shardps::worker
