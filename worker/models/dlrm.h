// The dense part of a DLRM click model (Naumov et al. 2019), computed as
// ../shared/bench/torch_dlrm.py computes it; the embedding rows live on the
// parameter servers, and the caller pulls a batch's rows and pushes their
// gradients. For a batch of b examples:
//   x: b x dense_features (the reader's log(1 + max(x, 0)));
//   d = bottom(x): b x dim, ReLU after every layer, the last included;
//   e: b x sparse_features x dim, the pulled embedding rows;
//   V = [d, e_1 .. e_F]: b x (F + 1) x dim;
//   z = <V_i, V_j> for i < j in torch.triu_indices(F + 1, F + 1, 1) order;
//   logit = top([d, z]): ReLU after the hidden layers, none after the last;
//   loss = mean binary cross-entropy of the logits against 0/1 labels.
//
// The trainer uploads pulled dense parameters into bottom()/top()'s
// weight(l)/bias(l), runs Forward and Backward per batch, and pushes each
// layer's gradients and the embedding rows' gradients as Backward hands them
// over. Host<->device traffic per batch: one upload of the embeddings in
// Forward, one download of their gradients in Backward (x and the labels are
// the caller's to upload, as worker/dense_step/device_batch.h does).
#pragma once

#include <functional>
#include <vector>

#include "shardps/status.h"
#include "worker/devices/device.h"
#include "worker/models/dense_stack.h"

namespace shardps::worker {

// The layer sizes; the defaults are torch_dlrm.py's model on Criteo.
struct DlrmOptions {
  int dense_features = 13;                 // x's columns
  std::vector<int> bottom_hidden = {64};   // the bottom MLP's hidden layers
  int dim = 16;                            // embedding width = the bottom MLP's output
  int sparse_features = 26;                // embedding rows per example
  std::vector<int> top_hidden = {128, 64}; // the top MLP's hidden layers (its output is 1 logit)
};

// InvalidArgument naming the first size that is not positive.
Status CheckDlrmOptions(const DlrmOptions& o);
// {dense_features, bottom_hidden..., dim}.
std::vector<int> DlrmBottomDims(const DlrmOptions& o);
// {dim + PairCount(sparse_features + 1), top_hidden..., 1}: 367, 128, 64, 1 by default.
std::vector<int> DlrmTopDims(const DlrmOptions& o);

// Which parameters a Backward callback is about.
enum class DlrmPart { kTop, kEmbeddings, kBottom };

// Thread: one (the trainer's); every member is its.
class Dlrm {
 public:
  // REQUIRES: CheckDlrmOptions(o) is OK.
  Dlrm(Device* dev, const DlrmOptions& o);
  Dlrm(const Dlrm&) = delete;
  Dlrm& operator=(const Dlrm&) = delete;

  const DlrmOptions& options() const { return o_; }
  DenseStack& bottom() { return bottom_; }
  DenseStack& top() { return top_; }
  DenseStack& stack(DlrmPart p) { return p == DlrmPart::kBottom ? bottom_ : top_; }  // REQUIRES p != kEmbeddings
  // Floats of a batch's embeddings (and of their gradients): rows x F x dim.
  size_t embedding_floats(int rows) const;

  // x: rows x dense_features on the device, unchanged until Backward. emb:
  // the rows' embeddings, rows x sparse_features x dim on the host; when it
  // is page-locked (a HostBuffer) the upload is asynchronous, so keep it
  // unchanged until Backward, Evaluate, Predict or Sync returns. Returns the
  // logits (rows floats on the device, valid until the next Forward).
  const float* Forward(const float* x, const float* emb, int rows);
  // After Forward(x, emb, rows): the gradients of the mean loss against
  // `labels` (rows floats on the device). Calls ready(part, l) (may be
  // empty) as soon as each part's gradients are complete, in this order:
  // (kTop, l) for l = top().num_layers() - 1 .. 0, once top().grad_*(l) hold
  // layer l's; (kEmbeddings, 0) once emb_grad (host, rows x sparse_features
  // x dim) holds the gradient w.r.t. each example's embeddings (one per
  // occurrence: a repeated row is not summed); (kBottom, l) for l =
  // bottom().num_layers() - 1 .. 0. Adds the summed loss and the number of
  // correct predictions (logit > 0 == label) into stats (2 floats, device).
  void Backward(const float* x, const float* labels, int rows, float* stats, float* emb_grad,
                const std::function<void(DlrmPart, int)>& ready);
  // Forward, then the summed loss and correct count only, into stats.
  void Evaluate(const float* x, const float* emb, const float* labels, int rows, float* stats);
  // Forward, then the logits into `logits` (rows floats, host); the click
  // probability is 1 / (1 + exp(-logit)).
  void Predict(const float* x, const float* emb, int rows, float* logits);

 private:
  void EnsureRows(int rows);          // the forward pass's buffers
  void EnsureBackwardRows(int rows);  // the backward pass's (not made by evaluation)
  Device* dev_;
  const DlrmOptions o_;
  const int vectors_;  // F + 1: d and the embeddings
  const int top_in_;   // the top MLP's input: dim + PairCount(vectors_)
  DenseStack bottom_, top_;
  // Per-batch buffers (device), sized for rows_ examples (the forward
  // pass's: emb_, v_, top_x_) and backward_rows_ (the rest).
  DeviceBuffer emb_;      // rows x F x dim: the uploaded embeddings
  DeviceBuffer v_;        // rows x vectors_ x dim: V
  DeviceBuffer top_x_;    // rows x top_in_: [d, z]
  DeviceBuffer dlogit_;   // rows: d(mean loss)/d(logit)
  DeviceBuffer dtop_x_;   // rows x top_in_: the gradient w.r.t. [d, z]
  DeviceBuffer dv_;       // rows x vectors_ x dim: the gradient w.r.t. V through z
  DeviceBuffer demb_;     // rows x F x dim: the embeddings' part of dv_
  DeviceBuffer dd_;       // rows x dim: the gradient w.r.t. d (both paths)
  int rows_ = 0, backward_rows_ = 0;
};

}  // namespace shardps::worker
