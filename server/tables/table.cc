#include "server/tables/table.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

#include "common/cluster/partition.h"
#include "common/codec/half.h"
#include "server/tables/cold_store.h"
#include "server/tables/initializer.h"
#include "server/tables/optimizer.h"

namespace shardps {

ServerTable::ServerTable(const TableSpec& spec, uint32_t partitions,
                         const std::vector<uint32_t>& owned, bool initialize)
    : spec_(spec), partitions_(partitions), state_width_(OptimizerStateWidth(spec)),
      versions_(partitions, 0), counted_in_(partitions, 0) {
  if (spec_.kind == TableKind::kDense)
    dense_.resize(partitions);
  else
    sparse_.resize(partitions);
  if (spec_.kind == TableKind::kSparse) row_scratch_.resize(spec_.cols);
  AddPartitions(owned, initialize);
}

void ServerTable::AddPartitions(const std::vector<uint32_t>& owned, bool initialize) {
  if (spec_.kind == TableKind::kDense) {
    std::vector<uint32_t> held;
    for (uint32_t p : owned)
      if (p < partitions_ && !dense_[p]) held.push_back(p);
    std::sort(held.begin(), held.end());
    held.erase(std::unique(held.begin(), held.end()), held.end());
    bytes_ += DenseBytes(spec_, partitions_, held);
    const size_t c = spec_.cols;
    const uint32_t partitions = partitions_;
    auto rows_of = [&](uint32_t p) {
      return PartitionRowBegin(p + 1, spec_.rows, partitions) - PartitionRowBegin(p, spec_.rows, partitions);
    };
    // Group runs of consecutive partitions into extents of <= kExtentBytes.
    size_t i = 0;
    while (i < held.size()) {
      size_t j = i, floats = 0;
      do {
        const uint64_t n = rows_of(held[j]);
        if (j > i && (held[j] != held[j - 1] + 1 || (floats + n * c) * sizeof(float) > kExtentBytes)) break;
        floats += n * c;
        ++j;
      } while (j < held.size());
      auto ext = std::make_unique<Extent>();
      ext->w = std::make_shared<FloatArray>(floats);
      size_t off = 0;
      for (size_t k = i; k < j; ++k) {
        auto part = std::make_unique<DensePart>();
        part->begin = PartitionRowBegin(held[k], spec_.rows, partitions);
        const uint64_t n = rows_of(held[k]);
        part->end = part->begin + n;
        part->ext = ext.get();
        part->off = off;
        off += n * c;
        part->state.resize(n * state_width_);
        if (initialize) {
          for (uint64_t r = 0; r < n; ++r) InitRow(spec_, part->begin + r, part->w() + r * c);
          InitOptimizerState(spec_, part->state.data(), n);
        }
        dense_[held[k]] = std::move(part);
        Renew(held[k]);
      }
      extents_.push_back(std::move(ext));
      i = j;
    }
  } else {
    for (uint32_t p : owned) {
      if (p >= partitions_ || sparse_[p]) continue;
      sparse_[p] = std::make_unique<SparsePart>(spec_, static_cast<uint32_t>(state_width_));
      bytes_ += sparse_[p]->rows.bytes() + (sparse_[p]->admission ? sparse_[p]->admission->bytes() : 0);
      Renew(p);
    }
  }
}

void ServerTable::ClearSparsePartition(uint32_t p) {
  if (spec_.kind != TableKind::kSparse || p >= partitions_ || !sparse_[p]) return;
  auto& part = sparse_[p];
  bytes_ -= part->rows.bytes() + (part->admission ? part->admission->bytes() : 0);
  sparse_rows_ -= part->rows.size() + part->cold_rows;
  if (tiered()) {  // (always: a copy a failed write left behind goes too)
    if (Status s = tier_.cold->DropPartition(spec_.id, p); !s.ok()) TierFailed(s.message());
    tier_.counts.cold_rows -= part->cold_rows;
  }
  part = std::make_unique<SparsePart>(spec_, static_cast<uint32_t>(state_width_));
  bytes_ += part->rows.bytes() + (part->admission ? part->admission->bytes() : 0);
  Renew(p);
}

Status ServerTable::CheckRange(uint64_t begin, uint64_t end) const {
  if (spec_.kind != TableKind::kDense)
    return Status::InvalidArgument("table '" + spec_.name +
                                   "' is sparse: address it by ids, not a row range");
  if (begin >= end || end > spec_.rows)
    return Status::OutOfRange("rows [" + std::to_string(begin) + ", " + std::to_string(end) +
                              ") of table '" + spec_.name + "' with " +
                              std::to_string(spec_.rows) + " rows");
  for (uint32_t p = PartitionOfRow(begin, spec_.rows, partitions_);
       p < partitions_ && PartitionRowBegin(p, spec_.rows, partitions_) < end; ++p) {
    if (PartitionRowBegin(p, spec_.rows, partitions_) == PartitionRowBegin(p + 1, spec_.rows, partitions_))
      continue;  // empty partition
    if (!dense_[p])
      return Status::WrongServer("partition " + std::to_string(p) + " of table '" + spec_.name +
                                 "' is not held by this server");
  }
  return Status::OK();
}

Status ServerTable::CheckKeys(const uint64_t* keys, size_t n) const {
  for (size_t i = 0; i < n; ++i) {
    const uint64_t k = keys[i];
    uint32_t p;
    if (spec_.kind == TableKind::kDense) {
      if (k >= spec_.rows)
        return Status::OutOfRange("row id " + std::to_string(k) + " (key " + std::to_string(i) +
                                  ") is outside table '" + spec_.name + "' with " +
                                  std::to_string(spec_.rows) + " rows");
      p = PartitionOfRow(k, spec_.rows, partitions_);
      if (!dense_[p])
        return Status::WrongServer("row " + std::to_string(k) + " of table '" + spec_.name +
                                   "' is not held by this server");
    } else {
      p = PartitionOfId(k, partitions_);
      if (!sparse_[p])
        return Status::WrongServer("id " + std::to_string(k) + " of table '" + spec_.name +
                                   "' is not held by this server");
    }
  }
  return Status::OK();
}

template <typename Fn>
void ServerTable::ForEachSegment(uint64_t begin, uint64_t end, Fn&& fn) const {
  uint64_t row = begin;
  while (row < end) {
    DensePart& part = *dense_[PartitionOfRow(row, spec_.rows, partitions_)];
    const uint64_t stop = std::min(end, part.end);
    fn(part, row - part.begin, stop - row, row - begin);
    row = stop;
  }
}

void ServerTable::ReadRange(uint64_t begin, uint64_t end, float* out) const {
  const size_t c = spec_.cols;
  ForEachSegment(begin, end, [&](DensePart& part, uint64_t first, uint64_t n, uint64_t off) {
    std::memcpy(out + off * c, part.w() + first * c, n * c * sizeof(float));
  });
}

void ServerTable::ReadRangeAs(uint64_t begin, uint64_t end, DType type, void* out) const {
  if (type == DType::kF32) return ReadRange(begin, end, static_cast<float*>(out));
  const size_t c = spec_.cols;
  auto* dst = static_cast<uint16_t*>(out);
  ForEachSegment(begin, end, [&](DensePart& part, uint64_t first, uint64_t n, uint64_t off) {
    if (type == DType::kBF16)
      FloatToBf16(part.w() + first * c, dst + off * c, n * c);
    else
      FloatToF16(part.w() + first * c, dst + off * c, n * c);
  });
}

namespace {
void ReleaseRows(void*, void* hint) { delete static_cast<std::shared_ptr<FloatArray>*>(hint); }
}  // namespace

void ServerTable::Own(DensePart& part) {
  // Only the event loop adds references; ZeroMQ's thread only drops them.
  // So a count of 1 means no frame is using the rows, and none can start to.
  Extent& e = *part.ext;
  if (e.w.use_count() > 1) e.w = std::make_shared<FloatArray>(*e.w);
  std::atomic_thread_fence(std::memory_order_acquire);
}

void ServerTable::ReadRangeFrames(uint64_t begin, uint64_t end, std::vector<zmq::message_t>* frames) const {
  // Runs this large are sent in place; neighbouring smaller ones are copied
  // into one frame (a frame per tiny run costs more than the copy).
  constexpr size_t kInPlaceBytes = 256 << 10;
  const size_t c = spec_.cols;
  // Runs of rows that are contiguous in one extent.
  struct Run {
    Extent* ext;
    const float* ptr;
    size_t floats;
  };
  std::vector<Run> runs;
  ForEachSegment(begin, end, [&](DensePart& part, uint64_t first, uint64_t n, uint64_t) {
    const float* p = part.w() + first * c;
    if (!runs.empty() && runs.back().ext == part.ext && runs.back().ptr + runs.back().floats == p)
      runs.back().floats += n * c;
    else
      runs.push_back({part.ext, p, n * c});
  });
  size_t i = 0;
  while (i < runs.size()) {
    if (runs[i].floats * sizeof(float) >= kInPlaceBytes) {
      frames->emplace_back(const_cast<float*>(runs[i].ptr), runs[i].floats * sizeof(float), &ReleaseRows,
                           new std::shared_ptr<FloatArray>(runs[i].ext->w));
      ++i;
      continue;
    }
    size_t j = i, bytes = 0;
    while (j < runs.size() && runs[j].floats * sizeof(float) < kInPlaceBytes) bytes += runs[j++].floats * sizeof(float);
    zmq::message_t m(bytes);
    auto* dst = static_cast<uint8_t*>(m.data());
    for (; i < j; ++i) {
      std::memcpy(dst, runs[i].ptr, runs[i].floats * sizeof(float));
      dst += runs[i].floats * sizeof(float);
    }
    frames->push_back(std::move(m));
  }
}

void ServerTable::ApplyRange(uint64_t begin, uint64_t end, const float* g, float scale, float lr_scale) {
  const size_t c = spec_.cols, sw = state_width_;
  ForEachSegment(begin, end, [&](DensePart& part, uint64_t first, uint64_t n, uint64_t off) {
    Own(part);
    ApplyOptimizer(spec_, part.w() + first * c, part.state.data() + first * sw,
                   g + off * c, n, scale, lr_scale);
  });
  const auto [first, last] = PartitionSpan(begin, end);
  for (uint32_t p = first; p <= last; ++p) ++versions_[p];
}

void ServerTable::AssignRange(uint64_t begin, uint64_t end, const float* v) {
  const size_t c = spec_.cols;
  ForEachSegment(begin, end, [&](DensePart& part, uint64_t first, uint64_t n, uint64_t off) {
    Own(part);
    std::copy_n(v + off * c, n * c, part.w() + first * c);
    InitOptimizerState(spec_, part.state.data() + first * state_width_, n);
  });
  const auto [first, last] = PartitionSpan(begin, end);
  for (uint32_t p = first; p <= last; ++p) ++versions_[p];
}

std::pair<uint32_t, uint32_t> ServerTable::PartitionSpan(uint64_t begin, uint64_t end) const {
  return {PartitionOfRow(begin, spec_.rows, partitions_), PartitionOfRow(end - 1, spec_.rows, partitions_)};
}

uint64_t ServerTable::RangeVersion(uint64_t begin, uint64_t end) const {
  const auto [first, last] = PartitionSpan(begin, end);
  return *std::max_element(versions_.begin() + first, versions_.begin() + last + 1);
}

uint32_t ServerTable::PartitionOfKey(uint64_t key) const {
  return spec_.kind == TableKind::kDense ? PartitionOfRow(key, spec_.rows, partitions_) : PartitionOfId(key, partitions_);
}

uint64_t ServerTable::KeysVersion(const uint64_t* keys, size_t n) const {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v = std::max(v, versions_[PartitionOfKey(keys[i])]);
  return v;
}

void ServerTable::CountKeys(const uint64_t* keys, size_t n) {
  ++calls_;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t p = PartitionOfKey(keys[i]);
    if (counted_in_[p] != calls_) {
      counted_in_[p] = calls_;
      ++versions_[p];
    }
  }
}

void ServerTable::AccumulateRange(uint64_t begin, uint64_t end, const float* g) {
  const size_t c = spec_.cols;
  dense_acc_dirty_ = true;
  ForEachSegment(begin, end, [&](DensePart& part, uint64_t first, uint64_t n, uint64_t off) {
    if (part.acc.empty()) {
      part.acc.resize((part.end - part.begin) * c);
      part.touched.assign(part.end - part.begin, 0);
    }
    const float* src = g + off * c;
    float* dst = part.acc.data() + first * c;
    for (uint64_t r = 0; r < n; ++r, src += c, dst += c) {
      if (part.touched[first + r]) {
        for (size_t j = 0; j < c; ++j) dst[j] += src[j];
      } else {
        std::memcpy(dst, src, c * sizeof(float));
        part.touched[first + r] = 1;
      }
    }
  });
}

ServerTable::DensePart& ServerTable::DenseOf(uint64_t row) const {
  return *dense_[PartitionOfRow(row, spec_.rows, partitions_)];
}

float* ServerTable::DenseRow(uint64_t row, float** state, bool write) const {
  DensePart& part = DenseOf(row);
  if (write) Own(part);
  const uint64_t r = row - part.begin;
  *state = part.state.data() + r * state_width_;
  return part.w() + r * spec_.cols;
}

void ServerTable::ReadKeys(const uint64_t* keys, size_t n, float* out) const {
  const size_t c = spec_.cols;
  if (spec_.kind == TableKind::kSparse) {
    for (size_t i = 0; i < n; ++i) {
      PrefetchAhead(keys, n, i);
      const SparsePart& part = SparseOf(keys[i]);
      const uint32_t slot = part.rows.Find(keys[i]);
      if (slot != SparseRows::kNone)
        part.rows.LoadValues(slot, out + i * c);
      else if (tiered() && ColdRow(keys[i], tier_.raw.data()))  // (not promoted: read where it is)
        part.rows.LoadRawValues(tier_.raw.data(), out + i * c);
      else
        InitialValues(keys[i], out + i * c);
    }
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    float* state;
    std::memcpy(out + i * c, DenseRow(keys[i], &state, false), c * sizeof(float));
  }
}

uint64_t ServerTable::DenseBytes(const TableSpec& spec, uint32_t partitions, const std::vector<uint32_t>& owned) {
  if (spec.kind != TableKind::kDense) return 0;
  uint64_t rows = 0;
  for (uint32_t p : owned) rows += PartitionRowBegin(p + 1, spec.rows, partitions) - PartitionRowBegin(p, spec.rows, partitions);
  return rows * (spec.cols + OptimizerStateWidth(spec)) * sizeof(float);
}

void ServerTable::ApplyKeys(const uint64_t* keys, size_t n, const float* g, float scale, float lr_scale) {
  CountKeys(keys, n);
  if (spec_.kind == TableKind::kSparse) return ApplySparseKeys(keys, n, g, scale, lr_scale);
  const size_t c = spec_.cols;
  for (size_t i = 0; i < n; ++i) {
    float* state;
    float* w = DenseRow(keys[i], &state, true);
    ApplyOptimizer(spec_, w, state, g + i * c, 1, scale, lr_scale);
  }
}

void ServerTable::AccumulateKeys(const uint64_t* keys, size_t n, const float* g) {
  const size_t c = spec_.cols;
  if (tiered()) (void)Promote(keys, n);  // (a failure stops the server: ApplyAccumulated then applies nothing)
  for (size_t i = 0; i < n; ++i) {
    auto [it, inserted] = acc_index_.try_emplace(keys[i], static_cast<uint32_t>(acc_keys_.size()));
    const float* src = g + i * c;
    if (inserted) {
      acc_keys_.push_back(keys[i]);
      acc_.insert(acc_.end(), src, src + c);
    } else {
      float* dst = acc_.data() + static_cast<size_t>(it->second) * c;
      for (size_t j = 0; j < c; ++j) dst[j] += src[j];
    }
  }
}

void ServerTable::ApplyAccumulated(float scale) {
  const size_t c = spec_.cols, sw = state_width_;
  if (dense_acc_dirty_) {
    for (auto& pp : dense_) {
      if (!pp || pp->acc.empty()) continue;
      DensePart& part = *pp;
      const uint64_t rows = part.end - part.begin;
      uint64_t r = 0;
      bool counted = false;
      while (r < rows) {
        if (!part.touched[r]) {
          ++r;
          continue;
        }
        if (!counted) ++versions_[PartitionOfRow(part.begin, spec_.rows, partitions_)];
        counted = true;
        uint64_t s = r;
        while (r < rows && part.touched[r]) part.touched[r++] = 0;
        Own(part);
        ApplyOptimizer(spec_, part.w() + s * c, part.state.data() + s * sw,
                       part.acc.data() + s * c, r - s, scale);
      }
    }
    dense_acc_dirty_ = false;
  }
  if (!acc_keys_.empty()) {
    // (Rows come up as they are summed, and again here: whatever happened
    // between, no row summed into is made again from its initial values.
    // A cold tier that failed applies nothing: the server stops.)
    const bool failed = tiered() && !tier_.cold->failure().empty();
    if (!failed && Promote(acc_keys_.data(), acc_keys_.size(), /*count=*/false).ok())
      ApplyKeys(acc_keys_.data(), acc_keys_.size(), acc_.data(), scale);
    acc_keys_.clear();
    acc_index_.clear();
    acc_.clear();
  }
}

uint64_t ServerTable::rows_held() const {
  uint64_t n = 0;
  for (const auto& p : dense_)
    if (p) n += p->end - p->begin;
  return n + sparse_rows_;
}

}  // namespace shardps

namespace shardps {

void ServerTable::Export(uint32_t table_id, std::vector<PartitionData>* out) const {
  for (uint32_t p = 0; p < partitions_; ++p)
    if (Holds(p)) ExportPartition(table_id, p, out);
}

void ServerTable::ExportPartition(uint32_t table_id, uint32_t p, std::vector<PartitionData>* out) const {
  const uint32_t c = spec_.cols, sw = static_cast<uint32_t>(state_width_), stride = RowStride(spec_);
  PartitionData d;
  d.table = table_id;
  d.partition = p;
  d.stride = stride;
  if (spec_.kind == TableKind::kDense) {
    const DensePart& part = *dense_[p];
    const uint64_t n = part.end - part.begin;
    d.rows.resize(n);
    d.values.resize(n * stride);
    for (uint64_t r = 0; r < n; ++r) {
      d.rows[r] = part.begin + r;
      std::memcpy(&d.values[r * stride], part.w() + r * c, c * sizeof(float));
      if (sw) std::memcpy(&d.values[r * stride + c], &part.state[r * sw], sw * sizeof(float));
    }
  } else {
    ExportSparse(p, &d);
  }
  out->push_back(std::move(d));
}

void ServerTable::Import(uint64_t row, const float* values) {
  if (spec_.kind == TableKind::kSparse) return ImportSparse(row, values);
  float* state;
  float* w = DenseRow(row, &state, true);
  std::memcpy(w, values, spec_.cols * sizeof(float));
  if (state_width_) std::memcpy(state, values + spec_.cols, state_width_ * sizeof(float));
}

uint64_t ServerTable::RoundingState(uint32_t p) const {
  return spec_.kind == TableKind::kSparse && p < partitions_ && sparse_[p] ? sparse_[p]->rows.rounding_state() : 0;
}

void ServerTable::SetRoundingState(uint32_t p, uint64_t s) {
  if (spec_.kind == TableKind::kSparse && p < partitions_ && sparse_[p]) sparse_[p]->rows.set_rounding_state(s);
}

}  // namespace shardps
