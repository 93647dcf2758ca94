// The coordinator's view of a running job for operators: heartbeats that
// carry each worker's clock and each server's totals, GetStatus (what
// `shardps-ctl status` prints), and Stop (`shardps-ctl stop`).
#include <unistd.h>

#include <algorithm>

#include "common/log.h"
#include "common/net.h"
#include "common/wire.h"
#include "server/coordinator.h"

namespace shardps {

void Coordinator::HandleHeartbeat(const std::string& from, const wire::Header& h) {
  const int rank = h.rank();
  if (h.role() == wire::Role::Worker && rank >= 0 && rank < static_cast<int>(workers_.size())) {
    WorkerSlot& w = workers_[rank];
    if (w.state != WorkerState::kAlive)
      return ReplyError(from, h.request_id(),
                        Status::Unavailable("worker " + std::to_string(rank) + " was declared dead or has left"));
    w.clock = std::max(w.clock, h.clock());
  }
  if (h.role() == wire::Role::Server) {
    const int srank = ServerRankOf(from);
    if (const wire::ServerStats* st = h.body_as_ServerStats(); st && srank >= 0) {
      ServerSlot& s = servers_[srank];
      s.prev = s.last;
      s.last = {st->sent_ms(), st->pushes(), st->pulls(), st->push_bytes(), st->pull_bytes()};
      s.parked_pulls = st->parked_pulls();
      s.waits.clocks.clear();
      s.waits.parked.clear();
      if (st->worker_clocks()) s.waits.clocks.assign(st->worker_clocks()->begin(), st->worker_clocks()->end());
      if (st->waiting())
        for (const auto* p : *st->waiting()) s.waits.parked.emplace_back(p->worker(), p->need());
    }
    return;  // servers expect no reply to a heartbeat
  }
  wire::Fields f;
  f.request_id = h.request_id();
  f.map_version = map_.version;
  f.seq = membership_version_;
  f.stopping = stopping_;
  Reply(from, wire::EncodeSimple(fbb_, f));
}

namespace {
const char* StateName(int s) {
  static const char* names[] = {"pending", "alive", "left", "dead", "vacant"};
  return names[s];
}
double PerSec(uint64_t a, uint64_t b, double secs) {
  return secs > 0 && b >= a ? static_cast<double>(b - a) / secs : 0.0;
}
}  // namespace

void Coordinator::HandleStatus(const std::string& from, const wire::Header& h) {
  const auto now = Clock::now();
  auto age_ms = [&](Clock::time_point t) {
    return t == Clock::time_point() ? int64_t{-1}
                                    : std::chrono::duration_cast<Millis>(now - t).count();
  };
  fbb_.Clear();
  std::vector<flatbuffers::Offset<wire::ProcessStatus>> procs;
  for (uint32_t r = 0; r < servers_.size(); ++r) {
    const ServerSlot& s = servers_[r];
    // Over the server's own clock, between its last two heartbeats; a
    // server not heard from for two intervals shows no rate.
    const bool fresh = s.registered && s.alive && now - s.last_seen < 4 * Millis(500);
    const double secs = fresh ? (s.last.at_ms - s.prev.at_ms) / 1000.0 : 0.0;
    auto host = fbb_.CreateString(s.id.host), url = fbb_.CreateString(s.id.metrics_url),
         ep = fbb_.CreateString(s.endpoint),
         state = fbb_.CreateString(!s.registered ? "pending" : s.alive ? "alive" : "silent");
    wire::ProcessStatusBuilder b(fbb_);
    b.add_role(wire::Role::Server);
    b.add_rank(static_cast<int32_t>(r));
    b.add_host(host);
    b.add_pid(s.id.pid);
    b.add_alive(s.registered && s.alive);
    b.add_state(state);
    b.add_heartbeat_age_ms(s.registered ? age_ms(s.last_seen) : -1);
    b.add_metrics_url(url);
    b.add_endpoint(ep);
    b.add_pushes_per_sec(PerSec(s.prev.pushes, s.last.pushes, secs));
    b.add_pulls_per_sec(PerSec(s.prev.pulls, s.last.pulls, secs));
    b.add_push_bytes_per_sec(PerSec(s.prev.push_bytes, s.last.push_bytes, secs));
    b.add_pull_bytes_per_sec(PerSec(s.prev.pull_bytes, s.last.pull_bytes, secs));
    b.add_pushes(s.last.pushes);
    b.add_pulls(s.last.pulls);
    b.add_parked_pulls(s.parked_pulls);
    procs.push_back(b.Finish());
  }
  for (uint32_t r = 0; r < workers_.size(); ++r) {
    const WorkerSlot& w = workers_[r];
    if (w.state == WorkerState::kVacant) continue;  // an elastic rank nobody took: not a process
    auto host = fbb_.CreateString(w.id.host), url = fbb_.CreateString(w.id.metrics_url),
         state = fbb_.CreateString(StateName(static_cast<int>(w.state)));
    wire::ProcessStatusBuilder b(fbb_);
    b.add_role(wire::Role::Worker);
    b.add_rank(static_cast<int32_t>(r));
    b.add_host(host);
    b.add_pid(w.id.pid);
    b.add_alive(w.state == WorkerState::kAlive);
    b.add_state(state);
    b.add_heartbeat_age_ms(w.state == WorkerState::kPending ? -1 : age_ms(w.last_seen));
    b.add_metrics_url(url);
    b.add_clock(w.clock);
    procs.push_back(b.Finish());
  }
  auto pv = fbb_.CreateVector(procs);
  std::vector<ServerWaitView> views;
  for (const auto& s : servers_)
    if (s.registered && s.alive) views.push_back(s.waits);
  std::vector<bool> live;
  for (const auto& w : workers_) live.push_back(w.state == WorkerState::kAlive);
  std::vector<wire::WaitInfo> waits;
  for (const auto& w : WhoWaitsOnWhom(opts_.staleness, views, live))
    waits.emplace_back(w.worker, w.clock, w.waits_for, w.their_clock);
  auto wv = fbb_.CreateVectorOfStructs(waits);
  auto host = fbb_.CreateString(HostName()), url = fbb_.CreateString(opts_.metrics_url),
       snapdir = fbb_.CreateString(opts_.snapshot_dir), latest = fbb_.CreateString(latest_snapshot_dir_);
  wire::JobStatusBuilder b(fbb_);
  b.add_consistency(static_cast<wire::Consistency>(opts_.consistency));
  b.add_staleness(opts_.staleness);
  b.add_num_servers(opts_.num_servers);
  b.add_num_workers(opts_.num_workers);
  b.add_host(host);
  b.add_pid(static_cast<uint32_t>(::getpid()));
  b.add_metrics_url(url);
  b.add_uptime_ms(std::chrono::duration_cast<Millis>(now - start_).count());
  b.add_ready(cluster_ready_);
  b.add_stopping(stopping_);
  b.add_processes(pv);
  b.add_snapshot_dir(snapdir);
  b.add_snapshots_taken(snapshots_taken_);
  b.add_latest_snapshot_clock(latest_snapshot_clock_);
  b.add_latest_snapshot(latest);
  b.add_latest_snapshot_ms(latest_snapshot_ms_);
  b.add_waits(wv);
  auto body = b.Finish();
  wire::Fields f;
  f.request_id = h.request_id();
  Reply(from, wire::Encode(fbb_, f, wire::Body::JobStatus, body.Union()));
}

void Coordinator::HandleStop(const std::string& from, const wire::Header& h) {
  if (!stopping_) {
    stopping_ = true;
    LOG_INFO << "stop requested: workers finish their step and leave"
             << (opts_.snapshot_dir.empty() ? "" : ", then a final snapshot");
  }
  stop_waiters_.push_back({from, h.request_id()});
  MaybeFinishStop();
}

void Coordinator::MaybeFinishStop() {
  if (!stopping_ || shutdown_) return;
  for (auto& w : workers_) {
    if (w.state == WorkerState::kAlive) return;  // still finishing its step
    if (w.state == WorkerState::kPending) w.state = WorkerState::kLeft;  // never to join now
  }
  if (!opts_.snapshot_dir.empty() && cluster_ready_) {
    if (!final_snapshot_started_) {
      final_snapshot_started_ = true;
      LOG_INFO << "every worker left: taking the final snapshot";
      StartOnDemandSnapshot(nullptr);
      for (auto& op : snap_ops_)
        if (op.on_demand && !op.done) op.final = true;
    }
    return;  // FinishSnapshot of the final one calls ShutdownJob
  }
  ShutdownJob();
}

void Coordinator::ShutdownJob() {
  if (shutdown_) return;
  for (const auto& s : servers_) {
    if (!s.registered) continue;
    wire::Fields f;
    f.type = wire::MsgType::Shutdown;
    Reply(s.routing_id, wire::EncodeSimple(fbb_, f));
  }
  for (const auto& w : stop_waiters_) {
    if (!final_snapshot_.ok()) {  // the processes exit all the same
      ReplyError(w.routing_id, w.request_id,
                 Status(final_snapshot_.code(), "the job stopped, but its final snapshot failed: " +
                                                    final_snapshot_.message()));
      continue;
    }
    wire::Fields f;
    f.request_id = w.request_id;
    f.clock = latest_snapshot_clock_;
    f.message = latest_snapshot_dir_;
    Reply(w.routing_id, wire::EncodeSimple(fbb_, f));
  }
  stop_waiters_.clear();
  shutdown_ = true;
}

}  // namespace shardps
