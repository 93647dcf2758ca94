// Admission of new ids into a sparse table (TableSpec::admit_after = k):
// an id gets a row only at its k-th push; before that its gradients are
// dropped (and counted by the caller). How often an id was pushed is kept
// in bounded memory, per partition, by a count-min sketch: `kDepth` rows of
// `width` saturating 8-bit counters, each id counted in one counter of
// every row (by a hash per row) and estimated by the smallest of them.
// Updates are conservative (only counters at the minimum grow), so an
// estimate is never below the true count and rarely above it: a rare id
// may be admitted early, never late.
//
// Counts age: once the sketch has counted `width` pushes since it last
// aged, every counter is halved. So a counter holds about one push on
// average and a rare id is seldom admitted early (false admissions need
// every one of its kDepth counters at k - 1), and an id must come back k
// times within a window of roughly `width` to 2 x `width` pushes to the
// partition: admission is a frequency filter over the recent stream, as
// in Monolith's, not a count since the job began (docs/embeddings.md).
//
// Thread-safety: none; the server's event loop owns it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardps {

class AdmissionSketch {
 public:
  static constexpr int kDepth = 4;
  static constexpr uint32_t kDefaultWidth = 1 << 14;  // 64 KiB per partition

  explicit AdmissionSketch(uint32_t width = kDefaultWidth);

  // Counts one push of `id` and returns its estimated pushes so far
  // (including this one), at most 255.
  uint32_t Add(uint64_t id);
  // The estimate without counting.
  uint32_t Estimate(uint64_t id) const;

  uint32_t width() const { return width_; }
  uint64_t bytes() const { return counters_.size(); }

  // The counters and the ageing count as bytes (snapshots), and back;
  // false when `bytes` is not a sketch of this shape.
  std::string Serialize() const;
  bool Deserialize(const std::string& bytes);

 private:
  uint32_t Cell(int row, uint64_t id) const;
  uint32_t width_;
  std::vector<uint8_t> counters_;  // kDepth x width_
  uint64_t since_aged_ = 0;        // pushes counted since the last halving
};

}  // namespace shardps
