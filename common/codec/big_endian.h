// Big-endian integers in byte strings: keys whose byte order (RocksDB's)
// is their numeric order (snapshot files, the cold tier).
#pragma once

#include <cstdint>

namespace shardps {

inline void PutBE32(char* p, uint32_t v) {
  for (int i = 3; i >= 0; --i, v >>= 8) p[i] = static_cast<char>(v & 0xFF);
}
inline void PutBE64(char* p, uint64_t v) {
  for (int i = 7; i >= 0; --i, v >>= 8) p[i] = static_cast<char>(v & 0xFF);
}
inline uint64_t GetBE64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = v << 8 | static_cast<uint8_t>(p[i]);
  return v;
}

}  // namespace shardps
