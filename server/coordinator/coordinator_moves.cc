// Moves (docs/fault-tolerance.md, "Moves: add-server and rebalance"): the
// coordinator opens server ranks for servers joining the running job, and
// moves copies of replica groups from the most to the least loaded servers.
// A move is a fill (coordinator_fill.cc, server/server_fill.cc) followed by
// the leave of the copy it replaces: that copy is told to take no more of
// the group's requests (a Drain naming the group), and once it acknowledges,
// the map goes on without it — the same steps as a drain, one group at a
// time, with the server staying in the job.
#include <algorithm>
#include <string>
#include <vector>

#include "common/base/log.h"
#include "common/codec/wire.h"
#include "server/coordinator/coordinator.h"

namespace shardps {

void Coordinator::HandleAddServer(const std::string& from, const wire::Header& h) {
  if (opts_.replicas < 2) return ReplyError(from, h.request_id(), OneCopyRefusal("add-server"));
  if (!tables_.complete()) return ReplyError(from, h.request_id(), Status::NotReady("the job has no shard map yet"));
  if (stop_.stopping) return ReplyError(from, h.request_id(), Status::Unavailable("the job is stopping"));
  if (members_.servers().size() >= 4096)
    return ReplyError(from, h.request_id(), Status::InvalidArgument("add-server: the job has 4096 server ranks already"));
  const uint32_t rank = members_.AddServer();
  dirty_ = true;
  wire::Fields f;
  f.request_id = h.request_id();
  f.rank = static_cast<int32_t>(rank);
  f.map_version = tables_.map().version;
  const std::string msg = "server rank " + std::to_string(rank) + " is open: start shardps-server --coordinator " +
                          endpoint_ + " (it takes rank " + std::to_string(rank) +
                          "); once it registers, copies of groups move onto it while the job runs";
  f.message = msg;
  Reply(from, wire::EncodeSimple(fbb_, f));
}

void Coordinator::HandleRebalance(const std::string& from, const wire::Header& h) {
  if (opts_.replicas < 2) return ReplyError(from, h.request_id(), OneCopyRefusal("rebalance"));
  if (!tables_.complete()) return ReplyError(from, h.request_id(), Status::NotReady("the job has no shard map yet"));
  ShardMap next = tables_.map();
  std::string said;
  const uint32_t moves = PlanRebalance(&next, &said);
  if (moves) ChangeMapTo(std::move(next));
  std::string msg;
  if (moves) {
    msg = "rebalance: " + std::to_string(moves) + " move(s): " + said;
  } else {
    uint32_t lo = UINT32_MAX, hi = 0;
    for (uint32_t s : members_.AnsweringServers()) {
      if (moves_.draining.count(s)) continue;
      lo = std::min(lo, tables_.map().Load(s));
      hi = std::max(hi, tables_.map().Load(s));
    }
    msg = "rebalance: nothing to move (each live server holds " + std::to_string(lo == UINT32_MAX ? 0 : lo) + "-" +
          std::to_string(hi) + " of the " + std::to_string(tables_.map().groups()) +
          " groups' copies, or no lighter server can take a group)";
  }
  wire::Fields f;
  f.request_id = h.request_id();
  f.map_version = tables_.map().version;
  f.message = msg;
  Reply(from, wire::EncodeSimple(fbb_, f));
}

void Coordinator::HandleMoveGroup(const std::string& from, const wire::Header& h) {
  auto refuse = [&](const std::string& why) {
    ReplyError(from, h.request_id(), Status::InvalidArgument("move-group: " + why));
  };
  const auto* mv = h.body_as_MoveRequest();
  if (!mv) return ReplyError(from, h.request_id(), Status::BadMessage("MoveGroup without a MoveRequest body"));
  if (opts_.replicas < 2) return ReplyError(from, h.request_id(), OneCopyRefusal("move-group"));
  if (!tables_.complete()) return ReplyError(from, h.request_id(), Status::NotReady("the job has no shard map yet"));
  const ShardMap& m = tables_.map();
  const uint32_t g = mv->group(), a = mv->from(), b = mv->to();
  const auto& servers = members_.servers();
  const std::string G = "group " + std::to_string(g), A = "server " + std::to_string(a), B = "server " + std::to_string(b);
  if (g >= m.groups()) return refuse(G + " is not a group of this job (0.." + std::to_string(m.groups() - 1) + ")");
  if (a >= servers.size() || !m.IsCopy(a, g)) return refuse(A + " holds no full copy of " + G);
  if (b >= servers.size() || !servers[b].registered || !servers[b].alive || moves_.draining.count(b))
    return refuse(B + " is not a live server of this job (or it is being drained)");
  if (m.Holds(b, g)) return refuse(B + " holds a copy of " + G + " already");
  if (m.Joining(g) != ShardMap::kNone || moves_.leaving.count(g))
    return refuse(G + " is being filled or moved already: one move of a group at a time");
  if (moves_.draining.count(a)) return refuse(A + " is being drained: its copies move already");
  if (!FitsBudget(m, b, g)) return refuse(G + " does not fit in " + B + "'s memory budget");
  ShardMap next = m.WithJoining(g, b);
  moves_.leaving[g] = a;
  const std::string msg = "moving " + G + ": " + B + " is filled with a copy from server " +
                          std::to_string(m.replicas[g].back()) + ", then " + A + "'s copy leaves" +
                          (m.Primary(g) == a ? " (server " + std::to_string(m.replicas[g].size() > 1 ? m.replicas[g][1] : b) +
                                                " serves it then)"
                                              : "");
  LOG_INFO << msg << " (move-group)";
  ChangeMapTo(std::move(next));
  wire::Fields f;
  f.request_id = h.request_id();
  f.map_version = tables_.map().version;
  f.message = msg;
  Reply(from, wire::EncodeSimple(fbb_, f));
}

uint32_t Coordinator::PlanRebalance(ShardMap* m, std::string* said) {
  if (opts_.replicas < 2 || m->owner.empty()) return 0;
  std::vector<uint32_t> live;
  for (uint32_t s : members_.AnsweringServers())
    if (!moves_.draining.count(s)) live.push_back(s);
  // A server's load: the groups it holds or is being filled with, less
  // those whose copy there leaves.
  std::map<uint32_t, int64_t> load;
  for (uint32_t s : live) load[s] = m->Load(s);
  for (const auto& [g, s] : moves_.leaving)
    if (load.count(s)) --load[s];
  uint32_t planned = 0;
  for (;;) {
    // The heaviest server with a group a server at least two lighter can
    // take (the lightest such first); a group whose copy there is not its
    // primary first (its clients keep their server).
    std::vector<uint32_t> by_load = live;
    std::sort(by_load.begin(), by_load.end(), [&](uint32_t a, uint32_t b) {
      return load[a] != load[b] ? load[a] > load[b] : a < b;
    });
    bool moved = false;
    for (size_t i = 0; i < by_load.size() && !moved; ++i) {
      const uint32_t from = by_load[i];
      for (size_t j = by_load.size(); j-- > i + 1 && !moved;) {
        const uint32_t to = by_load[j];
        if (load[from] - load[to] < 2) break;
        uint32_t pick = ShardMap::kNone;
        for (int pass = 0; pass < 2 && pick == ShardMap::kNone; ++pass)
          for (uint32_t g = 0; g < m->groups() && pick == ShardMap::kNone; ++g) {
            if (!m->IsCopy(from, g) || m->Holds(to, g) || m->Joining(g) != ShardMap::kNone || moves_.leaving.count(g))
              continue;
            if (pass == 0 && m->Primary(g) == from) continue;
            if (m->Copies(g) == 0 || moves_.fill_failed.count({g, to}) || !FitsBudget(*m, to, g)) continue;
            pick = g;
          }
        if (pick == ShardMap::kNone) continue;
        if (m->joining.size() < m->groups()) m->joining.resize(m->groups(), ShardMap::kNone);
        m->joining[pick] = to;
        moves_.leaving[pick] = from;
        --load[from];
        ++load[to];
        ++planned;
        moved = true;
        const std::string what = "group " + std::to_string(pick) + ": server " + std::to_string(from) + " -> server " +
                                 std::to_string(to);
        if (said) *said += (said->empty() ? "" : ", ") + what;
        LOG_INFO << "rebalance: " << what << " (filled from server " << m->replicas[pick].back()
                 << ", then the copy on server " << from << " leaves)";
      }
    }
    if (!moved) break;
  }
  if (planned) m->version = tables_.map().version + 1;
  return planned;
}

void Coordinator::StartLeave(uint32_t g) {
  const auto it = moves_.leaving.find(g);
  if (it == moves_.leaving.end()) return;
  const uint32_t server = it->second;
  const ShardMap& m = tables_.map();
  if (server >= members_.servers().size() || !members_.servers()[server].registered || !m.IsCopy(server, g) ||
      m.Copies(g) < 2) {
    moves_.leaving.erase(it);  // (gone meanwhile: nothing leaves)
    return;
  }
  const uint64_t id = next_update_id_++;
  moves_.leave_acks[g] = id;
  wire::Fields f;
  f.type = wire::MsgType::Drain;
  f.request_id = id;
  f.group = static_cast<int32_t>(g);
  Reply(members_.servers()[server].routing_id, wire::EncodeSimple(fbb_, f));
  LOG_INFO << "group " << g << ": its copy on server " << server << " leaves (it takes no more of its requests)";
}

bool Coordinator::OnLeaveAck(uint32_t server, const wire::Header& h) {
  if (h.group() < 0) return false;
  const auto g = static_cast<uint32_t>(h.group());
  const auto ack = moves_.leave_acks.find(g);
  if (ack == moves_.leave_acks.end() || ack->second != h.request_id()) return false;
  moves_.leave_acks.erase(ack);
  const auto it = moves_.leaving.find(g);
  if (it == moves_.leaving.end() || it->second != server) {  // called off meanwhile (Resume sent then)
    return true;
  }
  moves_.leaving.erase(it);
  const ShardMap& m = tables_.map();
  if (!m.IsCopy(server, g)) return true;
  if (m.Copies(g) < 2) {
    // The copy that was to take its place died: this one stays, and takes
    // the group's requests again.
    LOG_WARN << "group " << g << ": the move off server " << server << " is called off (no other copy is left)";
    SendResume(server, static_cast<int32_t>(g));
    return true;
  }
  const bool was_primary = m.Primary(g) == server;
  ShardMap next = m.WithoutCopy(g, server);
  std::string chain;
  for (uint32_t c : next.replicas[g]) chain += (chain.empty() ? "" : " -> ") + std::to_string(c);
  LOG_INFO << "group " << g << " moved off server " << server << ": its chain is servers " << chain << " (shard map v"
           << next.version << ")";
  PlanRebalance(&next);  // (what could not move while this group did)
  const uint64_t update = ChangeMapTo(std::move(next));
  metrics_.Moved();
  if (was_primary) {
    // A cut under way had its part of the group on the copy that left: it
    // fails, and the next is taken by the group's new primary.
    SnapshotScheduler::Effects e;
    snaps_.AbortAll(Status::Unavailable("group " + std::to_string(g) + " moved while the snapshot was taken"), &e);
    Apply(e);
    if (!retiring_.empty()) RetireAgain(update);
  }
  return true;
}

void Coordinator::CancelMove(uint32_t g) {
  if (const auto it = moves_.leaving.find(g); it != moves_.leaving.end()) {
    // Told to leave already (its acknowledgement not in): it takes the
    // group's requests again (the Resume comes after the Drain).
    if (moves_.leave_acks.count(g)) SendResume(it->second, static_cast<int32_t>(g));
    moves_.leaving.erase(it);
  }
  moves_.leave_acks.erase(g);
}

void Coordinator::SendResume(uint32_t server, int32_t group) {
  if (server >= members_.servers().size() || !members_.servers()[server].registered) return;
  wire::Fields f;
  f.type = wire::MsgType::Resume;
  f.request_id = next_update_id_++;
  f.group = group;
  Reply(members_.servers()[server].routing_id, wire::EncodeSimple(fbb_, f));
}

}  // namespace shardps
