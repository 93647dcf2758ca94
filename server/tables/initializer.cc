#include "server/tables/initializer.h"

#include <cmath>

#include "common/cluster/partition.h"

namespace shardps {

uint64_t TableStreamKey(const TableSpec& spec) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : spec.name) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return Mix64(h ^ Mix64(spec.seed + 0x9e3779b97f4a7c15ULL));
}

namespace {
// Uniform in (0, 1): 24 random bits, never 0 (log() below needs that).
inline float Unit(uint64_t bits) {
  return (static_cast<float>(bits >> 40) + 0.5f) * (1.0f / 16777216.0f);
}
}  // namespace

void InitRow(const TableSpec& spec, uint64_t row, float* out) {
  const uint32_t n = spec.cols;
  switch (spec.init) {
    case InitKind::kZeros:
      for (uint32_t j = 0; j < n; ++j) out[j] = 0.0f;
      return;
    case InitKind::kConstant:
      for (uint32_t j = 0; j < n; ++j) out[j] = spec.init_a;
      return;
    default:
      break;
  }
  const uint64_t key = Mix64(TableStreamKey(spec) ^ Mix64(row + 0x632be59bd9b4e019ULL));
  if (spec.init == InitKind::kUniform) {
    const float lo = spec.init_a, span = spec.init_b - spec.init_a;
    for (uint32_t j = 0; j < n; ++j) out[j] = lo + span * Unit(Mix64(key + j));
    return;
  }
  // Normal: Box-Muller, one pair of uniforms per column.
  const float mean = spec.init_a, sd = spec.init_b;
  for (uint32_t j = 0; j < n; ++j) {
    float u1 = Unit(Mix64(key + 2ull * j)), u2 = Unit(Mix64(key + 2ull * j + 1));
    float z = std::sqrt(-2.0f * std::log(u1)) * std::cos(6.28318530718f * u2);
    out[j] = mean + sd * z;
  }
}

}  // namespace shardps
