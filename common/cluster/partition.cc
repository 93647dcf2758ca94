#include "common/cluster/partition.h"

#include <algorithm>

namespace shardps {

ShardMap ShardMap::Contiguous(uint32_t partitions, uint32_t servers, uint64_t version) {
  return Replicated(partitions, servers, 1, {}, version);
}

ShardMap ShardMap::Replicated(uint32_t partitions, uint32_t servers, uint32_t copies,
                              const std::vector<std::string>& hosts, uint64_t version, uint32_t groups) {
  ShardMap m;
  m.version = version;
  if (groups < servers) groups = servers;
  m.group.resize(partitions);
  for (uint32_t p = 0; p < partitions; ++p)
    m.group[p] = static_cast<uint32_t>((static_cast<uint64_t>(p) * groups) / partitions);
  copies = std::clamp<uint32_t>(copies, 1, std::max<uint32_t>(servers, 1));
  auto host = [&](uint32_t s) { return s < hosts.size() && !hosts[s].empty() ? hosts[s] : "#" + std::to_string(s); };
  m.replicas.resize(groups);
  for (uint32_t g = 0; g < groups; ++g) {
    auto& r = m.replicas[g];
    const auto primary = static_cast<uint32_t>((static_cast<uint64_t>(g) * servers) / groups);
    r.push_back(primary);
    // The servers after g in ring order: first those on a host no copy is
    // on yet, then the rest.
    for (int pass = 0; pass < 2 && r.size() < copies; ++pass)
      for (uint32_t k = 1; k < servers && r.size() < copies; ++k) {
        const uint32_t s = (primary + k) % servers;
        if (std::find(r.begin(), r.end(), s) != r.end()) continue;
        const bool new_host = std::none_of(r.begin(), r.end(), [&](uint32_t c) { return host(c) == host(s); });
        if (pass == 1 || new_host) r.push_back(s);
      }
  }
  m.owner.resize(partitions);
  for (uint32_t p = 0; p < partitions; ++p) m.owner[p] = m.replicas[m.group[p]][0];
  return m;
}

std::vector<uint32_t> ShardMap::OwnedBy(uint32_t server) const {
  std::vector<uint32_t> out;
  for (uint32_t p = 0; p < owner.size(); ++p)
    if (owner[p] == server) out.push_back(p);
  return out;
}

uint32_t ShardMap::ReplicaStride() const {
  size_t n = 1;
  for (const auto& r : replicas) n = std::max(n, r.size());
  return static_cast<uint32_t>(n);
}

bool ShardMap::IsCopy(uint32_t server, uint32_t g) const {
  if (replicas.empty()) return g == server;
  return g < replicas.size() && std::find(replicas[g].begin(), replicas[g].end(), server) != replicas[g].end();
}

std::vector<uint32_t> ShardMap::HeldBy(uint32_t server) const {
  std::vector<uint32_t> out;
  for (uint32_t p = 0; p < owner.size(); ++p)
    if (Holds(server, GroupOf(p))) out.push_back(p);
  return out;
}

std::vector<uint32_t> ShardMap::OfGroup(uint32_t g) const {
  std::vector<uint32_t> out;
  for (uint32_t p = 0; p < owner.size(); ++p)
    if (GroupOf(p) == g) out.push_back(p);
  return out;
}

std::vector<uint32_t> ShardMap::Backups(uint32_t g) const {
  if (g >= replicas.size() || replicas[g].size() < 2) return {};
  return {replicas[g].begin() + 1, replicas[g].end()};
}

uint32_t ShardMap::Feeder(uint32_t g, uint32_t server) const {
  if (g >= replicas.size() || replicas[g].empty()) return kNone;
  const auto& r = replicas[g];
  if (Joining(g) == server) return r.back();
  for (size_t i = 1; i < r.size(); ++i)
    if (r[i] == server) return r[i - 1];
  return kNone;
}

ShardMap ShardMap::WithJoining(uint32_t g, uint32_t server) const {
  ShardMap m = *this;
  m.version = version + 1;
  if (m.joining.size() < m.replicas.size()) m.joining.resize(m.replicas.size(), kNone);
  m.joining[g] = server;
  if (std::none_of(m.joining.begin(), m.joining.end(), [](uint32_t s) { return s != kNone; })) m.joining.clear();
  return m;
}

ShardMap ShardMap::WithCopy(uint32_t g, uint32_t server) const {
  ShardMap m = *this;
  m.version = version + 1;
  if (g < m.joining.size() && m.joining[g] == server) m.joining[g] = kNone;
  if (std::none_of(m.joining.begin(), m.joining.end(), [](uint32_t s) { return s != kNone; })) m.joining.clear();
  if (g < m.replicas.size() && !IsCopy(server, g)) {
    if (!m.replicas[g].empty() && m.replicas[g][0] == kNone) m.replicas[g].clear();
    m.replicas[g].push_back(server);
  }
  for (uint32_t p = 0; p < m.owner.size(); ++p) m.owner[p] = m.replicas[m.GroupOf(p)][0];
  return m;
}

ShardMap ShardMap::Without(uint32_t server, std::vector<uint32_t>* lost) const {
  ShardMap m = *this;
  m.version = version + 1;
  if (m.group.empty()) m.group = owner;
  if (m.replicas.empty()) {
    m.replicas.resize(owner.empty() ? 0 : *std::max_element(owner.begin(), owner.end()) + 1);
    for (uint32_t g = 0; g < m.replicas.size(); ++g) m.replicas[g] = {g};
  }
  for (uint32_t g = 0; g < m.replicas.size(); ++g) {
    auto& r = m.replicas[g];
    const bool had = !r.empty() && r[0] != kNone;
    std::erase(r, server);
    if (r.empty()) {
      r.push_back(kNone);
      if (had && lost) lost->push_back(g);
    }
    if (r[0] == kNone && g < m.joining.size()) m.joining[g] = kNone;  // nothing to fill it from
  }
  for (auto& j : m.joining)
    if (j == server) j = kNone;
  if (std::none_of(m.joining.begin(), m.joining.end(), [](uint32_t s) { return s != kNone; })) m.joining.clear();
  for (uint32_t p = 0; p < m.owner.size(); ++p) m.owner[p] = m.replicas[m.group[p]][0];
  return m;
}

ShardMap ShardMap::WithoutCopy(uint32_t g, uint32_t server) const {
  ShardMap m = *this;
  m.version = version + 1;
  if (g >= m.replicas.size() || m.replicas[g].size() < 2) return m;
  std::erase(m.replicas[g], server);
  for (uint32_t p = 0; p < m.owner.size(); ++p) m.owner[p] = m.replicas[m.GroupOf(p)][0];
  return m;
}

uint32_t ShardMap::Load(uint32_t server) const {
  uint32_t n = 0;
  for (uint32_t g = 0; g < groups(); ++g) n += Holds(server, g);
  return n;
}

}  // namespace shardps
