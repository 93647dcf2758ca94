#include "worker/models/dlrm.h"

#include <string>

namespace shardps::worker {

Status CheckDlrmOptions(const DlrmOptions& o) {
  auto positive = [](int v, const std::string& what) {
    return v > 0 ? Status::OK()
                 : Status::InvalidArgument("DLRM " + what + " must be positive, not " + std::to_string(v));
  };
  SHARDPS_RETURN_IF_ERROR(positive(o.dense_features, "dense features"));
  SHARDPS_RETURN_IF_ERROR(positive(o.dim, "embedding dimension"));
  SHARDPS_RETURN_IF_ERROR(positive(o.sparse_features, "sparse features"));
  for (int h : o.bottom_hidden) SHARDPS_RETURN_IF_ERROR(positive(h, "bottom layer sizes"));
  for (int h : o.top_hidden) SHARDPS_RETURN_IF_ERROR(positive(h, "top layer sizes"));
  return Status::OK();
}

std::vector<int> DlrmBottomDims(const DlrmOptions& o) {
  std::vector<int> d = {o.dense_features};
  d.insert(d.end(), o.bottom_hidden.begin(), o.bottom_hidden.end());
  d.push_back(o.dim);
  return d;
}

std::vector<int> DlrmTopDims(const DlrmOptions& o) {
  std::vector<int> d = {o.dim + PairCount(o.sparse_features + 1)};
  d.insert(d.end(), o.top_hidden.begin(), o.top_hidden.end());
  d.push_back(1);
  return d;
}

Dlrm::Dlrm(Device* dev, const DlrmOptions& o)
    : dev_(dev),
      o_(o),
      vectors_(o.sparse_features + 1),
      top_in_(o.dim + PairCount(vectors_)),
      bottom_(dev, DlrmBottomDims(o), /*relu_last=*/true),
      top_(dev, DlrmTopDims(o), /*relu_last=*/false) {}

size_t Dlrm::embedding_floats(int rows) const {
  return static_cast<size_t>(rows) * o_.sparse_features * o_.dim;
}

void Dlrm::EnsureRows(int rows) {
  if (rows <= rows_) return;
  const size_t r = static_cast<size_t>(rows);
  emb_ = DeviceBuffer(dev_, embedding_floats(rows));
  v_ = DeviceBuffer(dev_, r * vectors_ * o_.dim);
  top_x_ = DeviceBuffer(dev_, r * top_in_);
  rows_ = rows;
}

void Dlrm::EnsureBackwardRows(int rows) {
  if (rows <= backward_rows_) return;
  const size_t r = static_cast<size_t>(rows);
  dlogit_ = DeviceBuffer(dev_, r);
  dtop_x_ = DeviceBuffer(dev_, r * top_in_);
  dv_ = DeviceBuffer(dev_, r * vectors_ * o_.dim);
  demb_ = DeviceBuffer(dev_, embedding_floats(rows));
  dd_ = DeviceBuffer(dev_, r * o_.dim);
  backward_rows_ = rows;
}

const float* Dlrm::Forward(const float* x, const float* emb, int rows) {
  EnsureRows(rows);
  const int dim = o_.dim, row_v = vectors_ * dim, row_e = o_.sparse_features * dim;
  dev_->Upload(emb_.data(), emb, embedding_floats(rows));  // overlaps with the bottom MLP on a GPU
  const float* d = bottom_.Forward(x, rows);
  dev_->CopyColumns(d, dim, rows, dim, v_.data(), row_v, false);
  dev_->CopyColumns(emb_.data(), row_e, rows, row_e, v_.data() + dim, row_v, false);
  dev_->CopyColumns(d, dim, rows, dim, top_x_.data(), top_in_, false);
  dev_->PairwiseDot(v_.data(), rows, vectors_, dim, top_x_.data() + dim, top_in_);
  return top_.Forward(top_x_.data(), rows);
}

void Dlrm::Backward(const float* x, const float* labels, int rows, float* stats, float* emb_grad,
                    const std::function<void(DlrmPart, int)>& ready) {
  EnsureBackwardRows(rows);
  const int dim = o_.dim, row_v = vectors_ * dim, row_e = o_.sparse_features * dim;
  auto ready_in = [&ready](DlrmPart part) {
    return ready ? std::function<void(int)>([&ready, part](int l) { ready(part, l); }) : nullptr;
  };
  dev_->SigmoidBce(top_.output(), labels, rows, dlogit_.data(), stats);
  top_.Backward(top_x_.data(), dlogit_.data(), rows, dtop_x_.data(), ready_in(DlrmPart::kTop));
  dev_->PairwiseDotBackward(v_.data(), dtop_x_.data() + dim, top_in_, rows, vectors_, dim, dv_.data());
  dev_->CopyColumns(dv_.data() + dim, row_v, rows, row_e, demb_.data(), row_e, false);
  dev_->Download(emb_grad, demb_.data(), embedding_floats(rows));
  if (ready) ready(DlrmPart::kEmbeddings, 0);
  // d feeds the top MLP directly and V[:, 0] through z.
  dev_->CopyColumns(dtop_x_.data(), top_in_, rows, dim, dd_.data(), dim, false);
  dev_->CopyColumns(dv_.data(), row_v, rows, dim, dd_.data(), dim, true);
  bottom_.Backward(x, dd_.data(), rows, nullptr, ready_in(DlrmPart::kBottom));
}

void Dlrm::Evaluate(const float* x, const float* emb, const float* labels, int rows, float* stats) {
  dev_->SigmoidBce(Forward(x, emb, rows), labels, rows, nullptr, stats);
}

void Dlrm::Predict(const float* x, const float* emb, int rows, float* logits) {
  dev_->Download(logits, Forward(x, emb, rows), rows);
}

}  // namespace shardps::worker
