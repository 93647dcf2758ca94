// SparseRows: the rows of one sparse partition, keyed by any uint64 id, in
// as little memory as the rows themselves allow.
//
// A row is one fixed-size record in a chunk of records (chunks of 16
// records, then 32, 64, ... up to 4096 or 1 MiB, then all of that size, so
// a partition with few rows allocates little):
//   [u64 id][u32 stamp][f32 state x state_width][value x dim][pad to 8]
// with values stored as float32, bfloat16 or IEEE half (DType) and the
// optimizer state always float32. `stamp` is the owner's: when the row was
// last updated (eviction reads it). Records never move while they are
// live; a removed row's slot goes on a free list and is reused first.
//
// The index is open addressing with linear probing over a flat array of
// uint32 slot numbers (no node per row), hashed by Mix64 of the id
// (rehashed so that it is independent of the id's partition), grown by
// half when it is 80 % full, shrunk never; removal shifts the cluster back
// (no tombstones). Per row that is the record's padding plus 5 to 7.5
// bytes of index on top of the id, values and state (docs/embeddings.md).
//
// Thread-safety: none; the server's event loop owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "shardps/types.h"

namespace shardps {

class SparseRows {
 public:
  static constexpr uint32_t kNone = ~0u;
  static constexpr uint32_t kFreeStamp = ~0u;  // the stamp of a slot on the free list

  SparseRows(uint32_t dim, uint32_t state_width, DType dtype);
  SparseRows(const SparseRows&) = delete;
  SparseRows& operator=(const SparseRows&) = delete;

  uint32_t dim() const { return dim_; }
  uint32_t state_width() const { return state_width_; }
  DType dtype() const { return dtype_; }
  // Bytes of one record (id, stamp, state, values, padding).
  size_t record_bytes() const { return record_; }
  static size_t RecordBytes(uint32_t dim, uint32_t state_width, DType dtype);

  // The slot holding `id`, or kNone.
  uint32_t Find(uint64_t id) const;
  // Memory hints for a run of lookups, a few ids ahead of Find (they change
  // nothing): the index entry `id` hashes to, and then, once that entry is
  // near, the record it names (every cache line of it). A lookup is two
  // dependent misses (the index, then the record's id); issued ahead, the
  // misses of several ids overlap.
  void PrefetchIndex(uint64_t id) const {
    if (!index_.empty()) __builtin_prefetch(&index_[Home(id)]);
  }
  void PrefetchRecord(uint64_t id) const {
    if (index_.empty()) return;
    const uint32_t s = index_[Home(id)];
    if (s == kEmpty) return;
    const uint8_t* r = Record(s);
    for (size_t off = 0; off < record_; off += 64) __builtin_prefetch(r + off);
  }
  // A new row for `id` (REQUIRES Find(id) == kNone), its stamp 0, its state
  // and values unset (the caller initialises both). Reuses a free slot
  // before it allocates.
  // `changed` = false: a row moved in from a cold tier, not a change
  // (TakeChanged does not list it).
  uint32_t Insert(uint64_t id, bool changed = true);
  // Removes the row in `slot` (REQUIRES live); the slot goes on the free
  // list. `changed` = false: a row moved out to a cold tier.
  void Erase(uint32_t slot, bool changed = true);
  // A row's record past its id (stamp, state, values: raw_bytes() of
  // them), as a cold tier keeps it; set_raw writes one back (no change).
  size_t raw_bytes() const { return record_ - 8; }
  const uint8_t* raw(uint32_t slot) const { return Record(slot) + 8; }
  void set_raw(uint32_t slot, const uint8_t* bytes);
  // A raw record's parts: its stamp, optimizer state and values as float32.
  static uint32_t RawStamp(const uint8_t* raw) {
    uint32_t s;
    __builtin_memcpy(&s, raw, 4);
    return s;
  }
  const uint8_t* RawState(const uint8_t* raw) const { return raw + 4; }
  void LoadRawValues(const uint8_t* raw, float* out) const { LoadFrom(raw + values_off_ - 8, out); }
  // Records `id` (a row not held here, removed from a cold tier) as changed.
  void MarkGone(uint64_t id) {
    if (changed_overflow_) return;
    changed_.push_back(id);
    if (changed_.size() > 2 * (size_ + elsewhere_) + 65536) DropChanged();
  }
  // Rows held elsewhere (a cold tier) that tracking of changes must allow
  // for: more of them may change between two TakeChanged calls.
  void set_rows_elsewhere(uint64_t n) { elsewhere_ = n; }

  uint64_t id(uint32_t slot) const { return *reinterpret_cast<const uint64_t*>(Record(slot)); }
  uint32_t stamp(uint32_t slot) const { return *reinterpret_cast<const uint32_t*>(Record(slot) + 8); }
  // Sets the row's stamp: every update of a row sets it, so this also
  // records the row as changed (TakeChanged).
  void set_stamp(uint32_t slot, uint32_t s) {
    WriteStamp(slot, s);
    MarkChanged(slot);
  }
  float* state(uint32_t slot) { return reinterpret_cast<float*>(Record(slot) + 12); }
  const float* state(uint32_t slot) const { return reinterpret_cast<const float*>(Record(slot) + 12); }
  // The row's values in their stored type (dim of them).
  void* values(uint32_t slot) { return Record(slot) + values_off_; }
  const void* values(uint32_t slot) const { return Record(slot) + values_off_; }
  // The values as float32 (converted from the stored type) / from float32
  // (rounded to nearest even into a 16-bit type).
  void LoadValues(uint32_t slot, float* out) const;
  void StoreValues(uint32_t slot, const float* in);
  // StoreValues for values just updated by the optimizer: bf16 rounds
  // stochastically (common/codec/half.h: small updates are kept on average, not
  // lost), from this partition's own random state; f32 and f16 as
  // StoreValues.
  void StoreUpdatedValues(uint32_t slot, const float* in);
  bool live(uint32_t slot) const { return slot < slots_ && stamp(slot) != kFreeStamp; }

  // StoreUpdatedValues' random state (a copy filled from another carries it).
  uint64_t rounding_state() const { return rounding_state_; }
  void set_rounding_state(uint64_t s) { rounding_state_ = s ? s : 0x9E3779B97F4A7C15ull; }
  // The ids of the rows inserted, updated (set_stamp) or erased since the
  // last call (snapshots of what changed, docs/snapshots.md), each at least
  // once, in no order; tracking starts again from here. False, with *ids
  // cleared, when more ids changed than tracking keeps (2 x the rows held
  // + 65 536: churn of evicted and re-made rows): then every row must be
  // taken as changed.
  bool TakeChanged(std::vector<uint64_t>* ids);
  // Drops what was tracked: the next TakeChanged says every row changed.
  void ForgetChanges() { DropChanged(); }
  // Rows held.
  uint64_t size() const { return size_; }
  // Slots ever allocated (live rows and free slots): every live slot is
  // below this.
  uint32_t slots() const { return slots_; }
  // Bytes held: record chunks and the index.
  uint64_t bytes() const;
  // What bytes() grows by if `more` rows are inserted now (free slots and
  // the last chunk's room first; chunks and index growth as they come).
  uint64_t BytesToAdd(uint64_t more) const;

 private:
  static constexpr uint32_t kEmpty = ~0u;
  static constexpr uint32_t kFirstChunk = 16;  // records in the first chunk
  uint8_t* Record(uint32_t slot) const {
    uint32_t chunk, off;
    Locate(slot, &chunk, &off);
    return chunks_[chunk].get() + static_cast<size_t>(off) * record_;
  }
  // Chunk k holds kFirstChunk << k records while that is below
  // chunk_records_ (the doubling chunks, `doubling_` of them, `doubled_`
  // slots in all), then chunk_records_ each.
  void Locate(uint32_t slot, uint32_t* chunk, uint32_t* off) const {
    if (slot < doubled_) {
      const uint32_t k = 31 - static_cast<uint32_t>(__builtin_clz(slot / kFirstChunk + 1));
      *chunk = k;
      *off = slot - kFirstChunk * ((1u << k) - 1);
    } else {
      *chunk = doubling_ + (slot - doubled_) / chunk_records_;
      *off = (slot - doubled_) % chunk_records_;
    }
  }
  uint32_t ChunkRecords(size_t chunk) const {
    return chunk < doubling_ ? kFirstChunk << chunk : chunk_records_;
  }
  // Slots the allocated chunks hold.
  uint64_t Capacity() const { return capacity_; }
  uint64_t Home(uint64_t id) const;  // the index position an id hashes to
  void GrowIndex();
  void WriteStamp(uint32_t slot, uint32_t s) { *reinterpret_cast<uint32_t*>(Record(slot) + 8) = s; }
  // Records the row in `slot` as changed (its id once until TakeChanged).
  void MarkChanged(uint32_t slot) {
    if (changed_overflow_) return;
    uint64_t& word = changed_bits_[slot >> 6];
    const uint64_t bit = 1ull << (slot & 63);
    if (word & bit) return;
    word |= bit;
    changed_.push_back(id(slot));
    if (changed_.size() > 2 * (size_ + elsewhere_) + 65536) DropChanged();
  }
  void DropChanged();
  void LoadFrom(const void* v, float* out) const;  // values in the stored type -> float32
  void Place(uint32_t slot);  // puts `slot` (its id) into the index

  uint32_t dim_, state_width_;
  DType dtype_;
  size_t record_ = 0, values_off_ = 0;
  uint32_t chunk_records_ = 0;  // records in a full-size chunk (a power of two)
  uint32_t doubling_ = 0, doubled_ = 0;
  uint64_t capacity_ = 0;  // slots of the chunks allocated
  std::vector<std::unique_ptr<uint8_t[]>> chunks_;
  uint32_t slots_ = 0;             // slots handed out so far (live or free)
  std::vector<uint32_t> free_;     // slots of erased rows, reused first
  std::vector<uint32_t> index_;    // slot or kEmpty; size is the capacity
  uint64_t size_ = 0;
  uint64_t elsewhere_ = 0;  // set_rows_elsewhere
  uint64_t rounding_state_ = 0x9E3779B97F4A7C15ull;  // StoreUpdatedValues' random bits (xorshift64)
  // Changed rows since TakeChanged: a bit per slot (its id is in changed_;
  // cleared when the slot is freed, so a new row in it is recorded too).
  std::vector<uint64_t> changed_bits_;
  std::vector<uint64_t> changed_;
  bool changed_overflow_ = false;  // too many: every row counts as changed
};

}  // namespace shardps
