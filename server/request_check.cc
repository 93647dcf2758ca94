#include "server/request_check.h"

#include <algorithm>
#include <string>

#include "common/cluster/partition.h"
#include "common/codec/compress.h"
#include "common/codec/half.h"
#include "common/codec/wire.h"
#include "server/tables/table.h"
#include "server/tables/table_set.h"

namespace shardps {

Status RequestCheck::CheckGroup(const ServerTable& t, const wire::Header& h, const uint64_t* keys,
                                uint32_t group) const {
  if (!groups_ || groups_->empty()) return Status::OK();
  const uint32_t parts = static_cast<uint32_t>(groups_->size());
  const TableSpec& spec = t.spec();
  auto wrong = [&](uint32_t p) {
    return Status::WrongServer("partition " + std::to_string(p) + " of table '" + spec.name + "' is in group " +
                               std::to_string((*groups_)[p]) + ", not in group " + std::to_string(group) +
                               " this request names");
  };
  if (!keys) {  // groups are contiguous blocks: the first and last partitions tell
    const uint32_t first = PartitionOfRow(h.row_begin(), spec.rows, parts);
    const uint32_t last = PartitionOfRow(h.row_end() - 1, spec.rows, parts);
    for (uint32_t p : {first, last})
      if ((*groups_)[p] != group) return wrong(p);
    return Status::OK();
  }
  for (uint64_t i = 0; i < h.key_count(); ++i) {
    const uint32_t p = spec.kind == TableKind::kDense ? PartitionOfRow(keys[i], spec.rows, parts)
                                                      : PartitionOfId(keys[i], parts);
    if ((*groups_)[p] != group) return wrong(p);
  }
  return Status::OK();
}

Status RequestCheck::Check(const wire::Header& h, std::vector<zmq::message_t>& frames, bool push, ServerTable** t,
                           const uint64_t** keys, const float** values, uint32_t group, bool trusted) {
  if (!tables_.ready()) return Status::NotReady("server has no shard map yet");
  if (tables_.refused(h.table()))
    return Status::TooLarge("table id " + std::to_string(h.table()) + " is not held by server " +
                            std::to_string(tables_.rank()) + ": it was refused when defined (its memory budget, or its cold tier's "
                            "disk; the server's log says which)");
  ServerTable* table = tables_.get(h.table());
  if (!table)
    return Status::UnknownTable("table id " + std::to_string(h.table()) + " is not defined (" +
                                std::to_string(tables_.size()) + " tables exist)");
  const TableSpec& spec = table->spec();
  const bool by_keys = h.key_count() > 0;
  const uint32_t steps = push ? std::max<uint32_t>(1, h.steps()) : 0;
  if (!push && (h.steps() > 1 || h.base_versions()))
    return Status::BadMessage("a pull carries no steps or base versions");
  if (steps > kMaxPushSteps)
    return Status::TooLarge("a push of " + std::to_string(steps) + " steps (at most " +
                            std::to_string(kMaxPushSteps) + " gradients per push)");
  if (h.base_versions() && h.base_versions()->size() != steps)
    return Status::BadMessage("a push of " + std::to_string(steps) + " steps with " +
                              std::to_string(h.base_versions()->size()) + " base versions");
  const size_t want_frames = 2 + (by_keys ? 1 : 0) + steps;
  if (frames.size() != want_frames)
    return Status::BadMessage(std::string(push ? "push" : "pull") + " by " +
                              (by_keys ? "keys" : "row range") + (steps > 1 ? " of " + std::to_string(steps) + " steps" : "") +
                              " takes " + std::to_string(want_frames - 1) + " frames, got " +
                              std::to_string(frames.size() - 1));
  SHARDPS_RETURN_IF_ERROR(CheckValueKind(h, spec, push, by_keys));
  const auto comp = static_cast<Compression>(h.compress());
  const DType vtype = ValueType(*table, h);
  const uint64_t vbytes = DTypeBytes(vtype);
  uint64_t rows;
  const uint64_t max_rows = max_request_bytes_ / vbytes / spec.cols;
  if (by_keys) {
    rows = h.key_count();
    if (rows > max_rows)
      return Status::TooLarge(std::to_string(rows) + " keys exceed the request limit of " +
                              std::to_string(max_request_bytes_) + " bytes");
    Status s = wire::CheckFrameSize("keys", frames[2].size(), rows * 8);
    if (!s.ok()) return s;
    *keys = wire::ArrayView<uint64_t>(frames[2], key_scratch_);
    s = table->CheckKeys(*keys, rows);
    if (!s.ok()) return s;
    s = CheckGroup(*table, h, *keys, group);
    if (!s.ok()) return s;
    // Pushes create sparse rows; pulls never do.
    if (spec.kind == TableKind::kSparse && push && !trusted) {
      s = tables_.CheckSparseGrowth(*table, *keys, rows);
      if (!s.ok()) return s;
    }
  } else {
    if (h.row_end() <= h.row_begin())
      return Status::OutOfRange("empty or inverted row range [" + std::to_string(h.row_begin()) +
                                ", " + std::to_string(h.row_end()) + ")");
    rows = h.row_end() - h.row_begin();
    if (rows > max_rows)
      return Status::TooLarge(std::to_string(rows) + " rows exceed the request limit of " +
                              std::to_string(max_request_bytes_) + " bytes");
    *keys = nullptr;
    Status s = table->CheckRange(h.row_begin(), h.row_end());
    if (!s.ok()) return s;
    s = CheckGroup(*table, h, nullptr, group);
    if (!s.ok()) return s;
  }
  if (push) SHARDPS_RETURN_IF_ERROR(ReadPushValues(frames, steps, rows * spec.cols, vtype, comp, values));
  *t = table;
  return Status::OK();
}

Status RequestCheck::CheckValueKind(const wire::Header& h, const TableSpec& spec, bool push, bool by_keys) {
  if (h.dtype() > wire::DType::MAX) return Status::BadMessage("a request with an unknown value type");
  if (spec.kind == TableKind::kSparse && h.dtype() != wire::DType::F32)
    return Status::BadMessage("a request of sparse table '" + spec.name + "' names a value type (its values travel in " +
                              std::string(ToString(spec.dtype)) + ", the table's dtype)");
  if (h.compress() > wire::Compression::MAX) return Status::BadMessage("a push with an unknown compression");
  const auto comp = static_cast<Compression>(h.compress());
  if (comp != Compression::kNone &&
      (!push || spec.kind != TableKind::kDense || by_keys || h.dtype() != wire::DType::F32))
    return Status::BadMessage("compression (" + std::string(ToString(comp)) +
                              ") is for float32 pushes of a dense table's row range; this is a " +
                              (push ? "push" : "pull") + " of " + std::string(ToString(spec.kind)) + " table '" +
                              spec.name + "'" + (by_keys ? " by keys" : ""));
  return Status::OK();
}

Status RequestCheck::ReadPushValues(std::vector<zmq::message_t>& frames, uint32_t steps, uint64_t n, DType type,
                                    Compression comp, const float** values) {
  if (step_scratch_.size() < steps) step_scratch_.resize(steps);
  const size_t first = frames.size() - steps;
  for (uint32_t j = 0; j < steps; ++j) {
    zmq::message_t& f = frames[first + j];
    SHARDPS_RETURN_IF_ERROR(comp != Compression::kNone
                                ? compress::Check(comp, f.data(), f.size(), n)
                                : wire::CheckFrameSize("values", f.size(), n * DTypeBytes(type)));
    if (values) values[j] = AsFloat(type, comp, f, n, &step_scratch_[j]);
  }
  return Status::OK();
}

DType RequestCheck::ValueType(const ServerTable& t, const wire::Header& h) {
  return t.spec().kind == TableKind::kSparse ? t.spec().dtype : static_cast<DType>(h.dtype());
}

const float* RequestCheck::PushValues(const ServerTable& t, const wire::Header& h, zmq::message_t& frame,
                                      std::vector<float>* scratch) {
  const uint64_t rows = h.key_count() > 0 ? h.key_count() : h.row_end() - h.row_begin();
  return AsFloat(ValueType(t, h), static_cast<Compression>(h.compress()), frame, rows * t.spec().cols, scratch);
}

const float* RequestCheck::AsFloat(DType type, Compression comp, zmq::message_t& frame, uint64_t n,
                                   std::vector<float>* scratch) {
  if (comp != Compression::kNone) {
    scratch->resize(n);
    (void)compress::Decode(comp, frame.data(), frame.size(), n, scratch->data());  // checked on arrival
    return scratch->data();
  }
  if (type == DType::kF32) return wire::ArrayView<float>(frame, *scratch);
  scratch->resize(n);
  std::vector<uint16_t> aligned;
  const uint16_t* h = wire::ArrayView<uint16_t>(frame, aligned);
  if (type == DType::kBF16)
    Bf16ToFloat(h, scratch->data(), n);
  else
    F16ToFloat(h, scratch->data(), n);
  return scratch->data();
}

}  // namespace shardps
