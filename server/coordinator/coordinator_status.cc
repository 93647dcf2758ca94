// The coordinator's view of a running job for operators: heartbeats that
// carry each worker's clock and each server's totals, GetStatus (what
// `shardps-ctl status` prints), Stop (`shardps-ctl stop`) and the job's
// shutdown.
#include <unistd.h>

#include <algorithm>

#include "common/base/log.h"
#include "common/codec/wire.h"
#include "common/net/net.h"
#include "server/coordinator/coordinator.h"

namespace shardps {

namespace {

using Offsets = std::vector<flatbuffers::Offset<wire::ProcessStatus>>;

double PerSec(uint64_t a, uint64_t b, double secs) {
  return secs > 0 && b >= a ? static_cast<double>(b - a) / secs : 0.0;
}

int64_t AgeMs(Clock::time_point now, Clock::time_point t) {
  return t == Clock::time_point() ? int64_t{-1} : std::chrono::duration_cast<Millis>(now - t).count();
}

ServerReport ReportOf(const wire::ServerStats& st) {
  ServerReport r;
  r.sample = {st.sent_ms(), st.pushes(), st.pulls(), st.push_bytes(), st.pull_bytes()};
  r.parked_pulls = st.parked_pulls();
  if (const wire::ColdTierStats* c = st.cold())
    r.cold = {true, c->hot_rows(), c->cold_rows(), c->hits(), c->reads(), c->moved_down(), c->bytes_read(),
              c->bytes_written()};
  if (st.worker_clocks()) r.waits.clocks.assign(st.worker_clocks()->begin(), st.worker_clocks()->end());
  if (st.waiting())
    for (const auto* p : *st.waiting()) r.waits.parked.emplace_back(p->worker(), p->need());
  return r;
}

void AddServers(flatbuffers::FlatBufferBuilder& fbb, const std::vector<ServerSlot>& servers, Clock::time_point now,
                Offsets* procs) {
  for (uint32_t r = 0; r < servers.size(); ++r) {
    const ServerSlot& s = servers[r];
    // Over the server's own clock, between its last two heartbeats; a
    // server not heard from for two intervals shows no rate.
    const bool fresh = s.registered && s.alive && now - s.last_seen < 4 * Millis(500);
    const double secs = fresh ? (s.last.at_ms - s.prev.at_ms) / 1000.0 : 0.0;
    auto host = fbb.CreateString(s.id.host), url = fbb.CreateString(s.id.metrics_url),
         ep = fbb.CreateString(s.endpoint),
         state = fbb.CreateString(s.drained ? "drained" : s.dead ? "dead" : !s.registered ? "pending" : s.alive ? "alive" : "silent");
    wire::ProcessStatusBuilder b(fbb);
    b.add_role(wire::Role::Server);
    b.add_rank(static_cast<int32_t>(r));
    b.add_host(host);
    b.add_pid(s.id.pid);
    b.add_alive(s.registered && s.alive);
    b.add_state(state);
    b.add_heartbeat_age_ms(s.registered ? AgeMs(now, s.last_seen) : -1);
    b.add_metrics_url(url);
    b.add_endpoint(ep);
    b.add_pushes_per_sec(PerSec(s.prev.pushes, s.last.pushes, secs));
    b.add_pulls_per_sec(PerSec(s.prev.pulls, s.last.pulls, secs));
    b.add_push_bytes_per_sec(PerSec(s.prev.push_bytes, s.last.push_bytes, secs));
    b.add_pull_bytes_per_sec(PerSec(s.prev.pull_bytes, s.last.pull_bytes, secs));
    b.add_pushes(s.last.pushes);
    b.add_pulls(s.last.pulls);
    b.add_parked_pulls(s.parked_pulls);
    if (s.cold.tiered) {
      const wire::ColdTierStats c(s.cold.hot_rows, s.cold.cold_rows, s.cold.hits, s.cold.reads, s.cold.moved_down,
                                  s.cold.bytes_read, s.cold.bytes_written);
      b.add_cold(&c);
    }
    procs->push_back(b.Finish());
  }
}

void AddWorkers(flatbuffers::FlatBufferBuilder& fbb, const std::vector<WorkerSlot>& workers, Clock::time_point now,
                Offsets* procs) {
  for (uint32_t r = 0; r < workers.size(); ++r) {
    const WorkerSlot& w = workers[r];
    if (w.state == WorkerState::kVacant) continue;  // an elastic rank nobody took: not a process
    auto host = fbb.CreateString(w.id.host), url = fbb.CreateString(w.id.metrics_url),
         state = fbb.CreateString(WorkerStateName(w.state));
    wire::ProcessStatusBuilder b(fbb);
    b.add_role(wire::Role::Worker);
    b.add_rank(static_cast<int32_t>(r));
    b.add_host(host);
    b.add_pid(w.id.pid);
    b.add_alive(w.state == WorkerState::kAlive);
    b.add_state(state);
    b.add_heartbeat_age_ms(w.state == WorkerState::kPending ? -1 : AgeMs(now, w.last_seen));
    b.add_metrics_url(url);
    b.add_clock(w.clock);
    procs->push_back(b.Finish());
  }
}

// Who waits on whom, from the live servers' newest heartbeats.
flatbuffers::Offset<flatbuffers::Vector<const wire::WaitInfo*>> AddWaits(flatbuffers::FlatBufferBuilder& fbb,
                                                                          const Membership& m, uint32_t staleness) {
  std::vector<ServerWaitView> views;
  for (const auto& s : m.servers())
    if (s.registered && s.alive) views.push_back(s.waits);
  std::vector<bool> live;
  for (const auto& w : m.workers()) live.push_back(w.state == WorkerState::kAlive);
  std::vector<wire::WaitInfo> waits;
  for (const auto& w : WhoWaitsOnWhom(staleness, views, live))
    waits.emplace_back(w.worker, w.clock, w.waits_for, w.their_clock);
  return fbb.CreateVectorOfStructs(waits);
}

}  // namespace

void Coordinator::HandleHeartbeat(const std::string& from, const wire::Header& h) {
  const int rank = h.rank();
  if (h.role() == wire::Role::Worker && rank >= 0 && rank < static_cast<int>(members_.worker_ranks())) {
    if (Status s = members_.WorkerHeartbeat(rank, h.clock()); !s.ok())
      return ReplyError(from, h.request_id(), s);
    if (const wire::WorkerStats* ws = h.body_as_WorkerStats())
      metrics_.WorkerStats(rank, ws->row_cache_lookups(), ws->row_cache_hits(), ws->samples());
  }
  if (h.role() == wire::Role::Server) {
    const int srank = members_.ServerRankOf(from);
    if (const wire::ServerStats* st = h.body_as_ServerStats(); st && srank >= 0)
      members_.ServerHeartbeat(srank, ReportOf(*st));
    // An empty answer: the server knows the coordinator is there (it stops
    // after --coordinator-timeout-sec of silence).
    wire::Fields f;
    f.request_id = h.request_id();
    return Reply(from, wire::EncodeSimple(fbb_, f));
  }
  wire::Fields f;
  f.request_id = h.request_id();
  f.map_version = tables_.published().version;
  f.seq = members_.version();
  f.stopping = stop_.stopping;
  // A client behind the published map (a fail-over) gets the new view with
  // its heartbeat's answer.
  if (h.map_version() != 0 && h.map_version() < f.map_version && tables_.ready()) {
    fbb_.Clear();
    auto cluster = wire::BuildCluster(fbb_, View(true));
    return Reply(from, wire::Encode(fbb_, f, wire::Body::ClusterInfo, cluster.Union()));
  }
  Reply(from, wire::EncodeSimple(fbb_, f));
}

void Coordinator::HandleStatus(const std::string& from, const wire::Header& h) {
  const auto now = Clock::now();
  fbb_.Clear();
  Offsets procs;
  AddServers(fbb_, members_.servers(), now, &procs);
  AddWorkers(fbb_, members_.workers(), now, &procs);
  auto pv = fbb_.CreateVector(procs);
  auto wv = AddWaits(fbb_, members_, opts_.staleness);
  const SnapshotScheduler::History& snaps = snaps_.history();
  const ShardMap& map = tables_.published();
  const uint32_t stride = map.ReplicaStride();
  std::vector<uint32_t> groups;
  for (const auto& r : map.replicas)
    for (uint32_t k = 0; k < stride; ++k) groups.push_back(k < r.size() ? r[k] : ShardMap::kNone);
  auto gv = fbb_.CreateVector(groups);
  flatbuffers::Offset<flatbuffers::Vector<uint32_t>> jv, dv;
  if (!map.joining.empty()) jv = fbb_.CreateVector(map.joining);
  if (!moves_.draining.empty())
    dv = fbb_.CreateVector(std::vector<uint32_t>(moves_.draining.begin(), moves_.draining.end()));
  flatbuffers::Offset<flatbuffers::Vector<uint32_t>> lv;
  if (!moves_.leaving.empty()) {
    std::vector<uint32_t> leaving(map.groups(), ShardMap::kNone);
    for (const auto& [g, s] : moves_.leaving)
      if (g < leaving.size()) leaving[g] = s;
    lv = fbb_.CreateVector(leaving);
  }
  auto host = fbb_.CreateString(HostName()), url = fbb_.CreateString(opts_.metrics.url),
       snapdir = fbb_.CreateString(opts_.snapshot_dir), latest = fbb_.CreateString(snaps.latest_dir),
       self = fbb_.CreateString(endpoint_);
  wire::JobStatusBuilder b(fbb_);
  b.add_consistency(static_cast<wire::Consistency>(opts_.consistency));
  b.add_staleness(opts_.staleness);
  b.add_num_servers(static_cast<uint32_t>(members_.servers().size()));  // (ranks added while it runs included)
  b.add_num_groups(map.groups());
  b.add_num_workers(opts_.num_workers);
  b.add_host(host);
  b.add_pid(static_cast<uint32_t>(::getpid()));
  b.add_metrics_url(url);
  b.add_endpoint(self);
  b.add_uptime_ms(std::chrono::duration_cast<Millis>(now - start_).count());
  b.add_ready(tables_.ready());
  b.add_stopping(stop_.stopping);
  b.add_processes(pv);
  b.add_snapshot_dir(snapdir);
  b.add_snapshots_taken(snaps.taken);
  b.add_latest_snapshot_clock(snaps.latest_clock);
  b.add_latest_snapshot(latest);
  b.add_latest_snapshot_ms(snaps.latest_ms);
  b.add_waits(wv);
  b.add_map_version(map.version);
  b.add_replicas(opts_.replicas);
  b.add_group_replicas(gv);
  if (!map.joining.empty()) b.add_group_joining(jv);
  if (!moves_.draining.empty()) b.add_draining(dv);
  if (!moves_.leaving.empty()) b.add_group_leaving(lv);
  auto body = b.Finish();
  wire::Fields f;
  f.request_id = h.request_id();
  Reply(from, wire::Encode(fbb_, f, wire::Body::JobStatus, body.Union()));
}

void Coordinator::HandleStop(const std::string& from, const wire::Header& h) {
  if (!stop_.stopping) {
    stop_.stopping = true;
    LOG_INFO << "stop requested: workers finish their step and leave"
             << (opts_.snapshot_dir.empty() ? "" : ", then a final snapshot");
  }
  stop_.waiters.push_back({from, h.request_id()});
  MaybeFinishStop();
}

void Coordinator::MaybeFinishStop() {
  if (!stop_.stopping || shutdown_) return;
  bool pending_left = false;
  const bool none_alive = members_.NoWorkerAlive(&pending_left);
  // Workers that had not joined (yet: after a rollback, the restarted ones)
  // never will: the servers stop waiting for their clocks, or the final
  // snapshot's cut would wait for them (seen: a stop right after a rollback
  // hung until the snapshot timeout).
  if (pending_left) MembershipChanged();
  if (!none_alive) return;  // one is still finishing its step
  if (!opts_.snapshot_dir.empty() && tables_.ready()) {
    if (!stop_.final_snapshot_started) {
      stop_.final_snapshot_started = true;
      LOG_INFO << "every worker left: taking the final snapshot";
      SnapshotScheduler::Effects e;
      snaps_.StartFinal(SnapshotTargets(), Clock::now(), &e);
      Apply(e);
    }
    return;  // FinishSnapshot of the final one calls ShutdownJob
  }
  ShutdownJob();
}

void Coordinator::HandleShutdown(const std::string& from, const wire::Header& h) {
  LOG_INFO << "shutdown requested";
  wire::Fields f;
  f.request_id = h.request_id();
  Reply(from, wire::EncodeSimple(fbb_, f));
  ShutdownJob();
}

void Coordinator::ShutdownJob() {
  if (shutdown_) return;
  for (const auto& s : members_.servers()) {
    if (!s.registered) continue;
    wire::Fields f;
    f.type = wire::MsgType::Shutdown;
    Reply(s.routing_id, wire::EncodeSimple(fbb_, f));
  }
  const SnapshotScheduler::History& snaps = snaps_.history();
  for (const auto& w : stop_.waiters) {
    if (!stop_.final_snapshot.ok()) {  // the processes exit all the same
      ReplyError(w.routing_id, w.request_id,
                 Status(stop_.final_snapshot.code(), "the job stopped, but its final snapshot failed: " +
                                                         stop_.final_snapshot.message()));
      continue;
    }
    wire::Fields f;
    f.request_id = w.request_id;
    f.clock = snaps.latest_clock;
    f.message = snaps.latest_dir;
    Reply(w.routing_id, wire::EncodeSimple(fbb_, f));
  }
  stop_.waiters.clear();
  shutdown_ = true;
}

}  // namespace shardps
