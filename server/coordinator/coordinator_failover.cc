// Replicas: a dead server's groups served by their backups (docs/fault-
// tolerance.md, "Replicas"). The coordinator decides who serves what (a new
// shard map version), sends it to every live server, and tells clients
// (heartbeat replies, cluster answers) only once they all hold it, so a
// client never reaches a server that does not yet know it serves a group.
#include <string>
#include <vector>

#include "common/base/log.h"
#include "common/codec/wire.h"
#include "server/coordinator/coordinator.h"

namespace shardps {

Status Coordinator::FailOver(uint32_t rank, const std::string& why) {
  if (rank >= members_.servers().size()) return Status::OK();
  const ServerSlot& slot = members_.servers()[rank];
  if (!slot.registered && !slot.adopt) return Status::OK();  // not in the job (or dead already)
  if (opts_.replicas < 2)
    return Status::InvalidArgument("server " + std::to_string(rank) + " " + why +
                                   ": this job keeps one copy of each partition ([job] replicas = 1), so its "
                                   "partitions are lost; the job can only roll back to a snapshot");
  std::vector<uint32_t> lost;
  auto lost_every_copy = [&] {
    std::string holders;
    for (uint32_t g : lost) holders += (holders.empty() ? "" : "; ") + std::string("group ") + std::to_string(g);
    return Status::Unavailable("server " + std::to_string(rank) + " " + why + ": " + holders +
                               " lost every copy (replicas = " + std::to_string(opts_.replicas) +
                               ", the other copies died before); the job can only roll back to a snapshot");
  };
  if (!tables_.complete()) {
    // A resumed job whose servers are not all back: the map is made again
    // without it once they are.
    tables_.DropFromResumed(JobMap(), rank, &lost);
    if (!lost.empty()) return lost_every_copy();
    members_.DeclareServerDead(rank);
    LOG_WARN << "server " << rank << " " << why << ": declared dead; the map is made without it";
    metrics_.FailedOver();
    dirty_ = true;
    MaybeCompleteMap();
    return Status::OK();
  }
  ShardMap next = tables_.map().Without(rank, &lost);
  if (!lost.empty()) return lost_every_copy();
  members_.DeclareServerDead(rank);
  moves_.draining.erase(rank);
  moves_.drain_acks.erase(rank);
  // Moves from it (its copy went anyway) or into it (its fill is over).
  for (uint32_t g = 0; g < tables_.map().groups(); ++g) {
    const auto it = moves_.leaving.find(g);
    if (it != moves_.leaving.end() && (it->second == rank || tables_.map().Joining(g) == rank)) CancelMove(g);
  }
  // Its groups are filled into live servers that hold no copy of them
  // (re-replication), where there are such servers.
  PlanFills(&next);
  next.version = tables_.map().version + 1;
  std::string moved;
  for (uint32_t g = 0; g < next.groups(); ++g)
    if (tables_.map().Primary(g) == rank) moved += (moved.empty() ? "" : ", ") + std::string("group ") +
                                                     std::to_string(g) + " -> server " + std::to_string(next.Primary(g));
  LOG_WARN << "server " << rank << " " << why << ": declared dead; fail-over to shard map v" << next.version
           << (moved.empty() ? " (it was primary of no group)" : ": " + moved);
  const uint64_t update = next_update_id_++;
  std::set<uint32_t> live(members_.AnsweringServers());
  for (uint32_t r : members_.RegisteredServers()) live.insert(r);
  tables_.ChangeMap(std::move(next), update, live);
  for (const auto& [w, table] : tables_.ForgetServer(rank).tables) ReplyTableSpec(w, table);
  TellWorkersTheMap();  // (published at once when no live server has to acknowledge it)
  metrics_.FailedOver();
  // A snapshot under way had a part on the dead server: it fails (and the
  // next is taken by the servers serving its groups now).
  SnapshotScheduler::Effects e;
  snaps_.AbortAll(Status::Unavailable("server " + std::to_string(rank) + " died while the snapshot was taken"), &e);
  Apply(e);
  BroadcastUpdate(update);
  if (!retiring_.empty()) RetireAgain(update);
  dirty_ = true;
  return Status::OK();
}

void Coordinator::HandleDeclareDead(const std::string& from, const wire::Header& h) {
  const int rank = h.rank();
  if (rank < 0 || rank >= static_cast<int>(members_.servers().size()))
    return ReplyError(from, h.request_id(),
                      Status::InvalidArgument("declare-dead: server " + std::to_string(rank) + " is not a server of this job (0.." +
                                              std::to_string(members_.servers().size() - 1) + ")"));
  const ServerSlot& slot = members_.servers()[rank];
  std::string msg;
  if (slot.dead) {
    msg = "server " + std::to_string(rank) + " was declared dead before";
  } else if (!slot.registered && !slot.adopt) {
    return ReplyError(from, h.request_id(),
                      Status::InvalidArgument("declare-dead: server " + std::to_string(rank) +
                                              " has not joined this job: there is nothing to fail over"));
  } else {
    Status s = FailOver(static_cast<uint32_t>(rank), "was declared dead (its process ended)");
    if (!s.ok()) return ReplyError(from, h.request_id(), s);
    msg = "server " + std::to_string(rank) + " is dead; its groups are served by their backups (shard map v" +
          std::to_string(tables_.complete() ? tables_.map().version : 0) + ")";
  }
  wire::Fields f;
  f.request_id = h.request_id();
  f.map_version = tables_.map().version;
  f.message = msg;
  Reply(from, wire::EncodeSimple(fbb_, f));
}

void Coordinator::TellWorkersTheMap() {
  const uint64_t v = tables_.published().version;
  if (v <= map_told_) return;
  map_told_ = v;
  const ClusterView view = View(true);
  for (const auto& w : members_.workers()) {
    if (w.state != WorkerState::kAlive || w.routing_id.empty()) continue;
    fbb_.Clear();
    auto cluster = wire::BuildCluster(fbb_, view);
    wire::Fields f;
    f.map_version = v;  // request id 0: no request's answer
    Reply(w.routing_id, wire::Encode(fbb_, f, wire::Body::ClusterInfo, cluster.Union()));
  }
}

bool Coordinator::FenceDeadServer(const std::string& from, const wire::Header& h) {
  if (h.role() != wire::Role::Server || !members_.IsDeadServer(from)) return false;
  if (h.type() == wire::MsgType::Reply) return true;  // nothing to answer
  wire::Fields f;
  f.type = wire::MsgType::Shutdown;
  f.request_id = next_update_id_++;
  f.message = "this server was declared dead; its partitions are served by their backups";
  Reply(from, wire::EncodeSimple(fbb_, f));
  return true;
}

}  // namespace shardps
