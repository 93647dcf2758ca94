// ServerTable's sparse rows (server/tables/table.h): made by pushes (after
// admission), read without being made, stamped by updates and evicted when
// idle; values in the table's dtype, optimizer state in float32.
#include <algorithm>
#include <cstring>
#include <ctime>

#include "common/cluster/partition.h"
#include "common/codec/half.h"
#include "server/tables/cold_store.h"
#include "server/tables/initializer.h"
#include "server/tables/optimizer.h"
#include "server/tables/table.h"

namespace shardps {

ServerTable::SparsePart::SparsePart(const TableSpec& spec, uint32_t state_width)
    : rows(spec.cols, state_width, spec.dtype) {
  if (spec.admit_after > 1) admission = std::make_unique<AdmissionSketch>();
}

uint32_t RowStride(const TableSpec& spec) {
  const bool stamped = spec.kind == TableKind::kSparse && (spec.evict_after_clocks || spec.evict_after_sec);
  return spec.cols + static_cast<uint32_t>(OptimizerStateWidth(spec)) + (stamped ? 1 : 0);
}

uint64_t ServerTable::BudgetBytes(const TableSpec& spec, uint32_t partitions, const std::vector<uint32_t>& owned) {
  if (spec.kind == TableKind::kDense) return DenseBytes(spec, partitions, owned);
  if (spec.max_rows == 0 || partitions == 0 || spec.cold_tier) return 0;  // (a tiered table's hot tier: as it grows)
  const uint64_t share = static_cast<uint64_t>(
      (static_cast<unsigned __int128>(spec.max_rows) * owned.size() + partitions - 1) / partitions);
  const size_t record = SparseRows::RecordBytes(spec.cols, static_cast<uint32_t>(OptimizerStateWidth(spec)), spec.dtype);
  return share * (record + 8);
}

uint64_t ServerTable::sparse_record_bytes() const {
  for (const auto& p : sparse_)
    if (p) return p->rows.record_bytes();
  return 0;
}

uint32_t ServerTable::Stamp() const {
  if (spec_.evict_after_sec) return static_cast<uint32_t>(std::time(nullptr));
  // Clocks below 0 (none) and past the stamp's range are clamped; kFreeStamp
  // is never a stamp.
  return static_cast<uint32_t>(std::clamp<int64_t>(clock_, 0, SparseRows::kFreeStamp - 1));
}

void ServerTable::InitialValues(uint64_t id, float* out) const {
  InitRow(spec_, id, out);
  const size_t c = spec_.cols;
  if (spec_.dtype == DType::kBF16) {
    for (size_t j = 0; j < c; ++j) out[j] = Bf16BitsToFloat(FloatToBf16Bits(out[j]));
  } else if (spec_.dtype == DType::kF16) {
    for (size_t j = 0; j < c; ++j) out[j] = F16BitsToFloat(FloatToF16Bits(out[j]));
  }
}

void ServerTable::ReadKeysAs(const uint64_t* keys, size_t n, void* out, DType type) const {
  if (spec_.kind == TableKind::kDense && type != DType::kF32) {
    std::vector<float> rows(n * spec_.cols);
    ReadKeys(keys, n, rows.data());
    if (type == DType::kBF16)
      FloatToBf16(rows.data(), static_cast<uint16_t*>(out), rows.size());
    else
      FloatToF16(rows.data(), static_cast<uint16_t*>(out), rows.size());
    return;
  }
  if (spec_.kind == TableKind::kDense || spec_.dtype == DType::kF32)
    return ReadKeys(keys, n, static_cast<float*>(out));
  const size_t c = spec_.cols;
  auto* dst = static_cast<uint16_t*>(out);
  std::vector<float> init;  // an absent id's initial values
  for (size_t i = 0; i < n; ++i, dst += c) {
    PrefetchAhead(keys, n, i);
    const SparsePart& part = SparseOf(keys[i]);
    const uint32_t slot = part.rows.Find(keys[i]);
    if (slot != SparseRows::kNone) {
      std::memcpy(dst, part.rows.values(slot), c * sizeof(uint16_t));
      continue;
    }
    init.resize(c);
    if (tiered() && ColdRow(keys[i], tier_.raw.data())) {  // (not promoted: read where it is)
      part.rows.LoadRawValues(tier_.raw.data(), init.data());
      if (spec_.dtype == DType::kBF16)
        FloatToBf16(init.data(), dst, c);
      else
        FloatToF16(init.data(), dst, c);
      continue;
    }
    InitRow(spec_, keys[i], init.data());
    if (spec_.dtype == DType::kBF16)
      FloatToBf16(init.data(), dst, c);
    else
      FloatToF16(init.data(), dst, c);
  }
}

uint64_t ServerTable::CountCreated(const uint64_t* keys, size_t n, uint64_t* bytes) const {
  // Distinct absent ids, by partition: a repeated id is made once.
  std::vector<uint64_t> absent;
  for (size_t i = 0; i < n; ++i) {
    const SparsePart& part = SparseOf(keys[i]);
    if (part.rows.Find(keys[i]) != SparseRows::kNone) continue;
    if (part.admission && part.admission->Estimate(keys[i]) + 1 < spec_.admit_after) continue;
    if (tiered() && ColdRow(keys[i], tier_.raw.data())) continue;
    absent.push_back(keys[i]);
  }
  std::sort(absent.begin(), absent.end());
  absent.erase(std::unique(absent.begin(), absent.end()), absent.end());
  // Bytes per partition: its records' and index's growth.
  std::sort(absent.begin(), absent.end(), [&](uint64_t a, uint64_t b) { return PartitionOfKey(a) < PartitionOfKey(b); });
  *bytes = 0;
  for (size_t i = 0; i < absent.size();) {
    const uint32_t p = PartitionOfKey(absent[i]);
    size_t j = i;
    while (j < absent.size() && PartitionOfKey(absent[j]) == p) ++j;
    *bytes += sparse_[p]->rows.BytesToAdd(j - i);
    i = j;
  }
  return absent.size();
}

uint32_t ServerTable::SparseRowForUpdate(SparsePart& part, uint64_t id) {
  const uint32_t found = part.rows.Find(id);
  if (found != SparseRows::kNone) return found;
  if (part.admission && part.admission->Add(id) < spec_.admit_after) {
    ++counts_.not_admitted;
    return SparseRows::kNone;
  }
  return SparseRowInsert(part, id);
}

uint32_t ServerTable::SparseRowInsert(SparsePart& part, uint64_t id) {
  const uint64_t before = part.rows.bytes();
  const uint32_t slot = part.rows.Insert(id);
  bytes_ += part.rows.bytes() - before;
  ++sparse_rows_;
  ++counts_.created;
  float* w = row_scratch_.data();
  InitRow(spec_, id, w);
  part.rows.StoreValues(slot, w);
  InitOptimizerState(spec_, part.rows.state(slot), 1);
  if (tiered()) part.Use(slot);
  return slot;
}

void ServerTable::ApplySparseKeys(const uint64_t* keys, size_t n, const float* g, float scale, float lr_scale) {
  const size_t c = spec_.cols;
  const uint32_t stamp = Stamp();
  float* w = row_scratch_.data();
  for (size_t i = 0; i < n; ++i) {
    PrefetchAhead(keys, n, i);
    SparsePart& part = SparseOf(keys[i]);
    const uint32_t slot = SparseRowForUpdate(part, keys[i]);
    if (slot == SparseRows::kNone) continue;
    if (spec_.dtype == DType::kF32) {
      ApplyOptimizer(spec_, static_cast<float*>(part.rows.values(slot)), part.rows.state(slot), g + i * c, 1, scale,
                     lr_scale);
    } else {
      part.rows.LoadValues(slot, w);
      ApplyOptimizer(spec_, w, part.rows.state(slot), g + i * c, 1, scale, lr_scale);
      part.rows.StoreUpdatedValues(slot, w);
    }
    part.rows.set_stamp(slot, stamp);
  }
}

void ServerTable::AssignKeys(const uint64_t* keys, size_t n, const float* v) {
  CountKeys(keys, n);
  const size_t c = spec_.cols;
  if (spec_.kind == TableKind::kDense) {
    for (size_t i = 0; i < n; ++i) {
      float* state;
      float* w = DenseRow(keys[i], &state, true);
      std::copy_n(v + i * c, c, w);
      InitOptimizerState(spec_, state, 1);
    }
    return;
  }
  const uint32_t stamp = Stamp();
  for (size_t i = 0; i < n; ++i) {
    SparsePart& part = SparseOf(keys[i]);
    uint32_t slot = part.rows.Find(keys[i]);
    if (slot == SparseRows::kNone) slot = SparseRowInsert(part, keys[i]);
    part.rows.StoreValues(slot, v + i * c);
    InitOptimizerState(spec_, part.rows.state(slot), 1);
    part.rows.set_stamp(slot, stamp);
  }
}

uint64_t ServerTable::EvictSome(uint64_t max_slots) {
  const uint32_t limit = spec_.evict_after_clocks ? spec_.evict_after_clocks : spec_.evict_after_sec;
  if (spec_.kind != TableKind::kSparse || limit == 0 || partitions_ == 0) return 0;
  const uint32_t now = Stamp();
  uint64_t removed = 0, looked = 0;
  // From the partition the last call stopped in, each to its end before the
  // next (one not held hands on at once).
  for (uint32_t visited = 0; visited <= partitions_ && looked < max_slots; ++visited) {
    const uint32_t p = sweep_partition_;
    SparsePart* part = sparse_[p].get();
    if (part && part->sweep < part->rows.slots()) {
      const uint32_t slots = part->rows.slots();
      const uint64_t before = part->rows.bytes();
      for (; part->sweep < slots && looked < max_slots; ++part->sweep, ++looked) {
        if (!part->rows.live(part->sweep)) continue;
        const uint32_t s = part->rows.stamp(part->sweep);
        if (now > s && now - s >= limit) {
          part->rows.Erase(part->sweep);
          ++removed;
        }
      }
      bytes_ = bytes_ - before + part->rows.bytes();  // the free list may have grown
    }
    if (!part || part->sweep >= part->rows.slots()) {  // done with it: the next, from its start
      if (part) part->sweep = 0;
      sweep_partition_ = (p + 1) % partitions_;
    }
  }
  sparse_rows_ -= removed;
  counts_.evicted += removed;
  if (tiered()) removed += EvictCold(max_slots, limit, now);  // (counted there)
  return removed;
}

void ServerTable::EncodeSparseRow(const SparsePart& part, uint32_t slot, float* row) const {
  const uint32_t c = spec_.cols, sw = static_cast<uint32_t>(state_width_);
  part.rows.LoadValues(slot, row);
  std::memcpy(row + c, part.rows.state(slot), sw * sizeof(float));
  if (RowStride(spec_) > c + sw) {  // the stamp's 32 bits, as they are (not a number)
    const uint32_t stamp = part.rows.stamp(slot);
    std::memcpy(row + c + sw, &stamp, 4);
  }
}

void ServerTable::ExportSparse(uint32_t p, PartitionData* d) const {
  const SparsePart& part = *sparse_[p];
  const uint32_t stride = d->stride;
  // (id, slot) of the rows in memory; (id, kCold | k) of the k-th row read
  // from the cold tier, its raw record at cold[k * raw_bytes].
  constexpr uint64_t kCold = 1ull << 32;
  std::vector<std::pair<uint64_t, uint64_t>> ids;
  ids.reserve(part.rows.size() + part.cold_rows);
  for (uint32_t s = 0; s < part.rows.slots(); ++s)
    if (part.rows.live(s)) ids.emplace_back(part.rows.id(s), s);
  std::vector<uint8_t> cold;
  if (tiered() && part.cold_rows > 0) {
    const size_t rb = part.rows.raw_bytes();
    uint64_t k = 0;
    bool done = false;
    tier_.cold->Scan(spec_.id, p, 0, &done, [&](uint64_t id, std::string_view v) {
      if (v.size() != rb) return true;  // (not this table's record: never written so)
      cold.insert(cold.end(), v.begin(), v.end());
      ids.emplace_back(id, kCold | k++);
      return true;
    });
  }
  std::sort(ids.begin(), ids.end());
  d->rows.resize(ids.size());
  d->values.resize(ids.size() * stride);
  for (size_t i = 0; i < ids.size(); ++i) {
    d->rows[i] = ids[i].first;
    if (ids[i].second & kCold)
      EncodeRawRow(part, cold.data() + (ids[i].second & ~kCold) * part.rows.raw_bytes(), &d->values[i * stride]);
    else
      EncodeSparseRow(part, static_cast<uint32_t>(ids[i].second), &d->values[i * stride]);
  }
  if (part.admission) d->admission = part.admission->Serialize();
}

bool ServerTable::ExportSparseRow(uint64_t id, float* out) const {
  const SparsePart& part = SparseOf(id);
  const uint32_t slot = part.rows.Find(id);
  if (slot != SparseRows::kNone) {
    EncodeSparseRow(part, slot, out);
    return true;
  }
  if (!tiered() || !ColdRow(id, tier_.raw.data())) return false;
  EncodeRawRow(part, tier_.raw.data(), out);
  return true;
}

void ServerTable::SparseIds(uint32_t p, std::vector<uint64_t>* out) const {
  out->clear();
  const SparsePart& part = *sparse_[p];
  out->reserve(part.rows.size());
  for (uint32_t s = 0; s < part.rows.slots(); ++s)
    if (part.rows.live(s)) out->push_back(part.rows.id(s));
  CollectColdIds(p, out);
  std::sort(out->begin(), out->end());
}

bool ServerTable::TakeChanged(uint32_t p, std::vector<uint64_t>* ids) {
  if (spec_.kind != TableKind::kSparse || !sparse_[p]) return false;
  if (!sparse_[p]->rows.TakeChanged(ids)) return false;
  std::sort(ids->begin(), ids->end());
  ids->erase(std::unique(ids->begin(), ids->end()), ids->end());
  return true;
}

std::string ServerTable::AdmissionBytes(uint32_t p) const {
  if (spec_.kind != TableKind::kSparse || !sparse_[p] || !sparse_[p]->admission) return "";
  return sparse_[p]->admission->Serialize();
}

void ServerTable::EraseSparse(uint64_t id) {
  SparsePart& part = SparseOf(id);
  const uint32_t slot = part.rows.Find(id);
  if (slot == SparseRows::kNone) {
    if (!tiered() || !ColdRow(id, tier_.raw.data())) return;
    const uint32_t p = PartitionOfKey(id);
    tier_.cold->Delete(spec_.id, p, id);
    if (Status s = tier_.cold->Commit(); !s.ok()) return TierFailed(s.message());
    part.rows.MarkGone(id);
    --part.cold_rows;
    --tier_.counts.cold_rows;
    --sparse_rows_;
    return;
  }
  const uint64_t before = part.rows.bytes();
  part.rows.Erase(slot);
  bytes_ = bytes_ - before + part.rows.bytes();
  --sparse_rows_;
}

void ServerTable::ImportSparse(uint64_t id, const float* values) {
  SparsePart& part = SparseOf(id);
  uint32_t slot = part.rows.Find(id);
  if (slot == SparseRows::kNone && tiered() && part.cold_rows > 0 && ColdRow(id, tier_.raw.data())) {
    const uint32_t p = PartitionOfKey(id);  // (held in the cold tier: moved up, then overwritten)
    const uint64_t before = part.rows.bytes();
    slot = part.rows.Insert(id, /*changed=*/false);
    part.rows.set_raw(slot, tier_.raw.data());
    bytes_ += part.rows.bytes() - before;
    tier_.cold->Delete(spec_.id, p, id);
    if (Status s = tier_.cold->Commit(); !s.ok()) TierFailed(s.message());
    --part.cold_rows;
    --tier_.counts.cold_rows;
  }
  if (slot == SparseRows::kNone) {
    const uint64_t before = part.rows.bytes();
    slot = part.rows.Insert(id);
    bytes_ += part.rows.bytes() - before;
    ++sparse_rows_;
  }
  const size_t c = spec_.cols, sw = state_width_;
  part.rows.StoreValues(slot, values);
  std::memcpy(part.rows.state(slot), values + c, sw * sizeof(float));
  if (RowStride(spec_) > c + sw) {
    uint32_t stamp;
    std::memcpy(&stamp, values + c + sw, 4);
    part.rows.set_stamp(slot, stamp == SparseRows::kFreeStamp ? 0 : stamp);
  }
  // A restore or fill larger than the hot tier: rows go down as they come.
  if (tiered() && part.rows.size() > tier_.part_rows && tier_.error.empty())
    MoveDownPartition(PartitionOfKey(id), part.rows.size() - (tier_.part_rows - tier_.part_rows / 10));
}

bool ServerTable::ImportAdmission(uint32_t partition, const std::string& bytes) {
  if (spec_.kind != TableKind::kSparse || partition >= partitions_ || !sparse_[partition] ||
      !sparse_[partition]->admission)
    return false;
  AdmissionSketch& a = *sparse_[partition]->admission;
  const uint64_t before = a.bytes();
  if (!a.Deserialize(bytes)) return false;
  bytes_ += a.bytes() - before;
  return true;
}

}  // namespace shardps
