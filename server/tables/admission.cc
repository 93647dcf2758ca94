#include "server/tables/admission.h"

#include <algorithm>
#include <cstring>

#include "common/cluster/partition.h"

namespace shardps {

namespace {
constexpr uint64_t kSeeds[AdmissionSketch::kDepth] = {0x243f6a8885a308d3ull, 0x13198a2e03707344ull,
                                                      0xa4093822299f31d0ull, 0x082efa98ec4e6c89ull};
constexpr char kMagic[4] = {'C', 'M', 'S', '1'};
}  // namespace

AdmissionSketch::AdmissionSketch(uint32_t width) : width_(std::max<uint32_t>(width, 1)) {
  counters_.assign(static_cast<size_t>(kDepth) * width_, 0);
}

uint32_t AdmissionSketch::Cell(int row, uint64_t id) const {
  const uint64_t h = Mix64(id ^ kSeeds[row]);
  return static_cast<uint32_t>(row) * width_ +
         static_cast<uint32_t>((static_cast<unsigned __int128>(h) * width_) >> 64);
}

uint32_t AdmissionSketch::Estimate(uint64_t id) const {
  uint32_t m = 255;
  for (int r = 0; r < kDepth; ++r) m = std::min<uint32_t>(m, counters_[Cell(r, id)]);
  return m;
}

uint32_t AdmissionSketch::Add(uint64_t id) {
  uint32_t cells[kDepth];
  uint32_t m = 255;
  for (int r = 0; r < kDepth; ++r) {
    cells[r] = Cell(r, id);
    m = std::min<uint32_t>(m, counters_[cells[r]]);
  }
  const uint32_t next = std::min<uint32_t>(m + 1, 255);
  for (uint32_t c : cells)
    if (counters_[c] < next) counters_[c] = static_cast<uint8_t>(next);  // conservative update
  if (++since_aged_ >= width_) {
    for (auto& c : counters_) c >>= 1;
    since_aged_ = 0;
  }
  return next;
}

std::string AdmissionSketch::Serialize() const {
  std::string out(kMagic, 4);
  out.append(reinterpret_cast<const char*>(&width_), 4);
  out.append(reinterpret_cast<const char*>(&since_aged_), 8);
  out.append(reinterpret_cast<const char*>(counters_.data()), counters_.size());
  return out;
}

bool AdmissionSketch::Deserialize(const std::string& bytes) {
  if (bytes.size() < 16 || std::memcmp(bytes.data(), kMagic, 4) != 0) return false;
  uint32_t width;
  std::memcpy(&width, bytes.data() + 4, 4);
  if (width == 0 || bytes.size() != 16 + static_cast<size_t>(kDepth) * width) return false;
  width_ = width;
  std::memcpy(&since_aged_, bytes.data() + 8, 8);
  counters_.assign(bytes.begin() + 16, bytes.end());
  return true;
}

}  // namespace shardps
