#include "common/partition.h"

namespace shardps {

ShardMap ShardMap::Contiguous(uint32_t partitions, uint32_t servers, uint64_t version) {
  ShardMap m;
  m.version = version;
  m.owner.resize(partitions);
  for (uint32_t p = 0; p < partitions; ++p)
    m.owner[p] = static_cast<uint32_t>((static_cast<uint64_t>(p) * servers) / partitions);
  return m;
}

std::vector<uint32_t> ShardMap::OwnedBy(uint32_t server) const {
  std::vector<uint32_t> out;
  for (uint32_t p = 0; p < owner.size(); ++p)
    if (owner[p] == server) out.push_back(p);
  return out;
}

}  // namespace shardps
