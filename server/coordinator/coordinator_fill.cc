// Re-replication and drains (docs/fault-tolerance.md, "Re-replication and
// drains"): the coordinator decides which server is filled with a copy of
// which group (a group with fewer copies than [job] replicas, or one held
// by a server being drained), makes it a full copy once it says it is
// filled, and lets a drained server go once its groups are held elsewhere.
// The servers do the copying (server/server_fill.cc).
#include <algorithm>
#include <string>
#include <vector>

#include "common/base/log.h"
#include "common/codec/wire.h"
#include "server/coordinator/coordinator.h"
#include "server/tables/table.h"

namespace shardps {

Status Coordinator::OneCopyRefusal(const std::string& command) {
  return Status::InvalidArgument(command + ": this job keeps one copy of each partition ([job] replicas = 1): its "
                                 "partitions cannot be moved while it runs (clients send again what was unanswered "
                                 "only in a job with replicas)");
}

uint64_t Coordinator::ChangeMapTo(ShardMap next) {
  const uint64_t update = next_update_id_++;
  std::set<uint32_t> live(members_.AnsweringServers());
  for (uint32_t r : members_.RegisteredServers()) live.insert(r);
  tables_.ChangeMap(std::move(next), update, live);
  TellWorkersTheMap();  // (published at once when no live server has to acknowledge it)
  BroadcastUpdate(update);
  dirty_ = true;
  return update;
}

bool Coordinator::FitsBudget(const ShardMap& m, uint32_t server, uint32_t g) const {
  const auto budgets = members_.Budgets();
  if (server >= budgets.size() || budgets[server] == 0) return true;  // (unknown: the server checks)
  auto held = m.HeldBy(server);
  for (uint32_t p : m.OfGroup(g)) held.push_back(p);
  uint64_t need = 0;
  for (const auto& spec : tables_.tables()) need += ServerTable::BudgetBytes(spec, m.partitions(), held);
  return need <= budgets[server];
}

uint32_t Coordinator::FillTarget(const ShardMap& m, uint32_t g) const {
  const auto& servers = members_.servers();
  auto host = [&](uint32_t s) { return servers[s].id.host.empty() ? "#" + std::to_string(s) : servers[s].id.host; };
  uint32_t best = ShardMap::kNone;
  size_t best_load = 0;
  bool best_new_host = false;
  for (uint32_t s : members_.AnsweringServers()) {
    if (m.Holds(s, g) || moves_.draining.count(s) || moves_.fill_failed.count({g, s}) || !FitsBudget(m, s, g)) continue;
    size_t load = 0;  // the groups it holds or is being filled with
    for (uint32_t k = 0; k < m.groups(); ++k) load += m.Holds(s, k);
    const bool new_host = g < m.replicas.size() && std::none_of(m.replicas[g].begin(), m.replicas[g].end(), [&](uint32_t c) {
                            return c != ShardMap::kNone && c < servers.size() && host(c) == host(s);
                          });
    // Another host than the copies first, then the least loaded.
    if (best == ShardMap::kNone || (new_host && !best_new_host) || (new_host == best_new_host && load < best_load)) {
      best = s;
      best_load = load;
      best_new_host = new_host;
    }
  }
  return best;
}

uint32_t Coordinator::CopiesKept(const ShardMap& m, uint32_t g) const {
  if (g >= m.replicas.size()) return 0;
  uint32_t n = 0;
  const auto leaving = moves_.leaving.find(g);
  for (uint32_t s : m.replicas[g])
    n += s != ShardMap::kNone && !moves_.draining.count(s) && !(leaving != moves_.leaving.end() && leaving->second == s);
  return n;
}

bool Coordinator::PlanFills(ShardMap* m) {
  if (opts_.replicas < 2 || m->owner.empty()) return false;
  bool changed = false;
  for (uint32_t g = 0; g < m->groups(); ++g) {
    if (m->Joining(g) != ShardMap::kNone || m->Copies(g) == 0) continue;  // one fill at a time; lost: nothing to copy
    if (CopiesKept(*m, g) >= opts_.replicas) continue;
    const uint32_t s = FillTarget(*m, g);
    if (s == ShardMap::kNone) continue;  // no server can take it now (a replacement or a drain's end will)
    if (m->joining.size() < m->groups()) m->joining.resize(m->groups(), ShardMap::kNone);
    m->joining[g] = s;
    changed = true;
    LOG_INFO << "group " << g << " has " << CopiesKept(*m, g) << " of " << opts_.replicas
             << " copies: server " << s << " is filled with one from server " << m->replicas[g].back();
  }
  if (changed) m->version = tables_.map().version + 1;
  return changed;
}

void Coordinator::HandleFilled(const std::string& from, const wire::Header& h) {
  const int rank = members_.ServerRankOf(from);
  if (rank < 0 || h.group() < 0) return;
  const auto g = static_cast<uint32_t>(h.group());
  const ShardMap& m = tables_.map();
  if (g >= m.groups() || m.Joining(g) != static_cast<uint32_t>(rank)) {
    LOG_INFO << "server " << rank << " filled group " << h.group() << " for a map that no longer fills it there";
    return;
  }
  ShardMap next;
  if (Status s = wire::ReplyStatus(&h); !s.ok()) {
    LOG_ERROR << "server " << rank << " could not be filled with group " << g << ": " << s.ToString()
              << "; it is not filled with it again";
    moves_.fill_failed.insert({g, static_cast<uint32_t>(rank)});
    CancelMove(g);
    next = m.WithJoining(g, ShardMap::kNone);
  } else {
    next = m.WithCopy(g, static_cast<uint32_t>(rank));
    metrics_.Filled();
    std::string chain;
    for (uint32_t c : next.replicas[g]) chain += (chain.empty() ? "" : " -> ") + std::to_string(c);
    LOG_INFO << "group " << g << ": server " << rank << " holds a full copy; its chain: servers " << chain
             << " (shard map v" << next.version << ")";
  }
  PlanFills(&next);
  ChangeMapTo(std::move(next));
  if (moves_.leaving.count(g)) StartLeave(g);
  MaybeDrain();
}

void Coordinator::HandleDrainServer(const std::string& from, const wire::Header& h) {
  const int rank = h.rank();
  auto refuse = [&](const std::string& why) {
    ReplyError(from, h.request_id(), Status::InvalidArgument("drain-server " + std::to_string(rank) + ": " + why));
  };
  if (rank < 0 || rank >= static_cast<int>(members_.servers().size()))
    return refuse("not a server of this job (0.." + std::to_string(members_.servers().size() - 1) + ")");
  const auto r = static_cast<uint32_t>(rank);
  if (opts_.replicas < 2)
    return ReplyError(from, h.request_id(), OneCopyRefusal("drain-server " + std::to_string(rank)));
  if (!tables_.complete()) return ReplyError(from, h.request_id(), Status::NotReady("the job has no shard map yet"));
  const ServerSlot& slot = members_.servers()[r];
  if (!slot.registered || !slot.alive) return refuse("it is not a live server of this job");
  if (moves_.draining.count(r)) return refuse("it is being drained already");
  // Every group it holds must keep a copy: one elsewhere, or a server that
  // can be filled with one.
  moves_.draining.insert(r);
  ShardMap next = tables_.map();
  for (uint32_t g = 0; g < next.groups(); ++g)
    if (next.IsCopy(r, g) && CopiesKept(next, g) == 0 && FillTarget(next, g) == ShardMap::kNone) {
      moves_.draining.erase(r);
      return refuse("group " + std::to_string(g) + " has no other copy and no server can take one");
    }
  // A fill into it is over.
  for (uint32_t g = 0; g < next.groups(); ++g)
    if (next.Joining(g) == r) next = next.WithJoining(g, ShardMap::kNone);
  const bool planned = PlanFills(&next);  // (always run: it plans the fills)
  const bool changed = planned || next.version != tables_.map().version;
  uint32_t groups = 0, fills = 0;
  for (uint32_t g = 0; g < next.groups(); ++g) {
    groups += next.IsCopy(r, g);
    fills += next.IsCopy(r, g) && next.Joining(g) != ShardMap::kNone;
  }
  LOG_WARN << "draining server " << r << ": " << groups << " groups held there, " << fills
           << " filled elsewhere first";
  if (changed) ChangeMapTo(std::move(next));
  wire::Fields f;
  f.request_id = h.request_id();
  f.map_version = tables_.map().version;
  const std::string msg = "draining server " + std::to_string(r) + ": " + std::to_string(groups) + " groups held there, " +
                          std::to_string(fills) + " being copied to other servers; it exits once they are held elsewhere";
  f.message = msg;
  Reply(from, wire::EncodeSimple(fbb_, f));
  dirty_ = true;
  MaybeDrain();
}

void Coordinator::MaybeDrain() {
  const ShardMap& m = tables_.map();
  for (uint32_t r : moves_.draining) {
    if (moves_.drain_acks.count(r)) continue;  // told already
    bool ready = true;
    for (uint32_t g = 0; g < m.groups() && ready; ++g) {
      if (!m.IsCopy(r, g)) continue;
      // Wait while a copy is being made; then go with what there is (at
      // least one other copy: checked when the drain was asked for).
      ready = m.Joining(g) == ShardMap::kNone && CopiesKept(m, g) >= 1;
    }
    if (!ready) continue;
    const ServerSlot& slot = members_.servers()[r];
    if (!slot.registered) continue;  // (dead meanwhile: failed over)
    const uint64_t id = next_update_id_++;
    moves_.drain_acks[r] = id;
    wire::Fields f;
    f.type = wire::MsgType::Drain;
    f.request_id = id;
    Reply(slot.routing_id, wire::EncodeSimple(fbb_, f));
    LOG_INFO << "server " << r << ": every group it holds has its copies elsewhere; it takes no more requests";
  }
}

bool Coordinator::OnDrainAck(uint32_t server, uint64_t request_id) {
  auto it = moves_.drain_acks.find(server);
  if (it == moves_.drain_acks.end() || it->second != request_id) return false;
  moves_.drain_acks.erase(it);
  moves_.draining.erase(server);
  const std::string routing_id = members_.servers()[server].routing_id;
  if (Status s = FailOver(server, "was drained"); !s.ok()) {
    LOG_ERROR << "server " << server << " could not be drained: " << s.ToString();
    return true;
  }
  metrics_.Drained();
  members_.MarkDrained(server);
  // Its groups are served by their other copies now: it exits.
  wire::Fields f;
  f.type = wire::MsgType::Shutdown;
  f.request_id = next_update_id_++;
  f.message = "drained: its groups are held by other servers";
  Reply(routing_id, wire::EncodeSimple(fbb_, f));
  LOG_INFO << "server " << server << " is drained and told to exit";
  return true;
}

}  // namespace shardps
