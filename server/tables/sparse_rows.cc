#include "server/tables/sparse_rows.h"

#include <algorithm>
#include <cstring>

#include "common/cluster/partition.h"
#include "common/codec/half.h"

namespace shardps {

namespace {
constexpr size_t kChunkBytes = 1 << 20;  // a chunk holds up to 1 MiB of records (at least one)
constexpr uint32_t kMaxChunkRecords = 4096;
constexpr size_t kFirstIndex = 16;
}  // namespace

size_t SparseRows::RecordBytes(uint32_t dim, uint32_t state_width, DType dtype) {
  return (12 + static_cast<size_t>(state_width) * 4 + static_cast<size_t>(dim) * DTypeBytes(dtype) + 7) / 8 * 8;
}

SparseRows::SparseRows(uint32_t dim, uint32_t state_width, DType dtype)
    : dim_(dim), state_width_(state_width), dtype_(dtype) {
  values_off_ = 12 + static_cast<size_t>(state_width) * 4;
  record_ = RecordBytes(dim, state_width, dtype);
  // The largest power of two of records within kChunkBytes (at least one
  // record, at most kMaxChunkRecords).
  const size_t fit = std::clamp<size_t>(kChunkBytes / record_, 1, kMaxChunkRecords);
  chunk_records_ = 1;
  while (chunk_records_ * 2 <= fit) chunk_records_ *= 2;
  while ((kFirstChunk << doubling_) < chunk_records_) ++doubling_;
  doubled_ = kFirstChunk * ((1u << doubling_) - 1);
}


uint64_t SparseRows::Home(uint64_t id) const {
  // Partitions are chosen by Mix64(id) % P: hash again so that the index
  // position does not depend on that; then map onto [0, capacity) by the
  // high half of a 64x64 product (any capacity, no modulo).
  const uint64_t h = Mix64(id ^ 0x9e3779b97f4a7c15ull);
  return static_cast<uint64_t>((static_cast<unsigned __int128>(h) * index_.size()) >> 64);
}

uint32_t SparseRows::Find(uint64_t id) const {
  if (index_.empty()) return kNone;
  const size_t cap = index_.size();
  for (size_t i = Home(id);; i = i + 1 == cap ? 0 : i + 1) {
    const uint32_t s = index_[i];
    if (s == kEmpty) return kNone;
    if (this->id(s) == id) return s;
  }
}

void SparseRows::Place(uint32_t slot) {
  const size_t cap = index_.size();
  size_t i = Home(id(slot));
  while (index_[i] != kEmpty) i = i + 1 == cap ? 0 : i + 1;
  index_[i] = slot;
}

void SparseRows::GrowIndex() {
  const size_t cap = index_.empty() ? kFirstIndex : index_.size() + index_.size() / 2;
  std::vector<uint32_t> old;
  old.swap(index_);
  index_.assign(cap, kEmpty);
  for (uint32_t s : old)
    if (s != kEmpty) Place(s);
}

uint32_t SparseRows::Insert(uint64_t id, bool changed) {
  if ((size_ + 1) * 5 > index_.size() * 4) GrowIndex();  // at most 80 % full
  uint32_t slot;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
  } else {
    if (slots_ == capacity_) {
      const uint32_t n = ChunkRecords(chunks_.size());
      chunks_.emplace_back(new uint8_t[static_cast<size_t>(n) * record_]);
      capacity_ += n;
    }
    slot = slots_++;
    if (changed_bits_.size() * 64 < slots_) changed_bits_.resize(changed_bits_.size() + 64, 0);
  }
  uint8_t* r = Record(slot);
  std::memcpy(r, &id, 8);
  const uint32_t zero = 0;
  std::memcpy(r + 8, &zero, 4);
  Place(slot);
  ++size_;
  if (changed) MarkChanged(slot);
  return slot;
}

void SparseRows::set_raw(uint32_t slot, const uint8_t* bytes) {
  std::memcpy(Record(slot) + 8, bytes, record_ - 8);
}

void SparseRows::DropChanged() {
  changed_overflow_ = true;
  std::vector<uint64_t>().swap(changed_);
  std::fill(changed_bits_.begin(), changed_bits_.end(), 0);
}

bool SparseRows::TakeChanged(std::vector<uint64_t>* ids) {
  const bool ok = !changed_overflow_;
  ids->clear();
  if (ok) ids->swap(changed_);
  changed_.clear();
  changed_overflow_ = false;
  std::fill(changed_bits_.begin(), changed_bits_.end(), 0);
  return ok;
}

void SparseRows::Erase(uint32_t slot, bool changed) {
  const size_t cap = index_.size();
  size_t i = Home(id(slot));
  while (index_[i] != slot) i = i + 1 == cap ? 0 : i + 1;
  // Backward shift: move later members of the cluster into the hole when
  // their home does not lie (cyclically) in (hole, their position].
  size_t hole = i;
  for (size_t j = hole + 1 == cap ? 0 : hole + 1; index_[j] != kEmpty; j = j + 1 == cap ? 0 : j + 1) {
    const size_t home = Home(id(index_[j]));
    const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
    if (stays) continue;
    index_[hole] = index_[j];
    hole = j;
  }
  index_[hole] = kEmpty;
  if (changed) MarkChanged(slot);  // (its id, once) then free the bit for the slot's next row
  if (!changed_overflow_) changed_bits_[slot >> 6] &= ~(1ull << (slot & 63));
  WriteStamp(slot, kFreeStamp);
  free_.push_back(slot);
  --size_;
}

void SparseRows::LoadValues(uint32_t slot, float* out) const { LoadFrom(values(slot), out); }

void SparseRows::LoadFrom(const void* v, float* out) const {
  switch (dtype_) {
    case DType::kF32: std::memcpy(out, v, static_cast<size_t>(dim_) * 4); break;
    case DType::kBF16: Bf16ToFloat(static_cast<const uint16_t*>(v), out, dim_); break;
    case DType::kF16: F16ToFloat(static_cast<const uint16_t*>(v), out, dim_); break;
  }
}

void SparseRows::StoreValues(uint32_t slot, const float* in) {
  void* v = values(slot);
  switch (dtype_) {
    case DType::kF32: std::memcpy(v, in, static_cast<size_t>(dim_) * 4); break;
    case DType::kBF16: FloatToBf16(in, static_cast<uint16_t*>(v), dim_); break;
    case DType::kF16: FloatToF16(in, static_cast<uint16_t*>(v), dim_); break;
  }
}

void SparseRows::StoreUpdatedValues(uint32_t slot, const float* in) {
  if (dtype_ != DType::kBF16) return StoreValues(slot, in);
  FloatToBf16Stochastic(in, static_cast<uint16_t*>(values(slot)), dim_, &rounding_state_);
}

uint64_t SparseRows::bytes() const {
  return Capacity() * record_ + index_.capacity() * sizeof(uint32_t) + free_.capacity() * sizeof(uint32_t);
}

uint64_t SparseRows::BytesToAdd(uint64_t more) const {
  const uint64_t reused = std::min<uint64_t>(more, free_.size());
  const uint64_t fresh = more - reused;
  uint64_t room = Capacity() - slots_, records = 0;
  for (size_t k = chunks_.size(); room < fresh; ++k) {
    room += ChunkRecords(k);
    records += ChunkRecords(k);
  }
  uint64_t cap = index_.empty() ? 0 : index_.size();
  if (cap == 0 && size_ + more > 0) cap = kFirstIndex;
  while ((size_ + more) * 5 > cap * 4) cap += cap / 2;
  const uint64_t index_growth = cap > index_.size() ? (cap - index_.size()) * sizeof(uint32_t) : 0;
  return records * record_ + index_growth;
}

}  // namespace shardps
