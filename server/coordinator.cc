#include "server/coordinator.h"

#include "common/zap.h"

#include <algorithm>

#include <unistd.h>

#include "common/log.h"
#include "common/metrics.h"
#include "common/wire.h"
#include "server/table.h"

namespace shardps {

Status CoordinatorOptions::Validate() const {
  if (num_servers == 0 || num_servers > 4096)
    return Status::InvalidArgument("servers must be in [1, 4096], got " + std::to_string(num_servers));
  if (num_workers > 65536)
    return Status::InvalidArgument("workers must be in [0, 65536], got " + std::to_string(num_workers));
  if (max_workers != 0 && (max_workers < num_workers || max_workers > 65536))
    return Status::InvalidArgument("max_workers must be 0 (= workers) or in [workers, 65536], got " +
                                   std::to_string(max_workers) + " with " + std::to_string(num_workers) + " workers");
  if (partitions < num_servers || partitions > (1u << 20))
    return Status::InvalidArgument("partitions must be in [servers, 2^20], got " +
                                   std::to_string(partitions));
  if (consistency == Consistency::kSync && staleness != 0)
    return Status::InvalidArgument("staleness applies to 'bounded' consistency only (sync is 0)");
  if (heartbeat_timeout.count() <= 0) return Status::InvalidArgument("heartbeat timeout must be > 0");
  if (snapshot_dir.empty() && (snapshot_every_clocks || snapshot_every_sec || restore))
    return Status::InvalidArgument("snapshot and restore options need --snapshot-dir");
  if (keep_snapshots == 0) return Status::InvalidArgument("keep_snapshots must be at least 1");
  std::set<std::string> names;
  for (const auto& t : tables) {
    Status s = t.Validate();
    if (!s.ok()) return s;
    if (!names.insert(t.name).second)
      return Status::InvalidArgument("table '" + t.name + "' is defined twice");
  }
  return Status::OK();
}

Status Coordinator::CheckBudget(const TableSpec& spec, size_t defined) const {
  if (spec.kind != TableKind::kDense) return Status::OK();  // sparse rows are counted as they are created
  const ShardMap map = map_.owner.empty() ? ShardMap::Contiguous(opts_.partitions, opts_.num_servers, 1) : map_;
  uint64_t total = 0;
  for (uint32_t r = 0; r < servers_.size(); ++r)
    total += ServerTable::DenseBytes(spec, map.partitions(), map.OwnedBy(r));
  for (uint32_t r = 0; r < servers_.size(); ++r) {
    const ServerSlot& s = servers_[r];
    if (!s.registered || s.budget == 0) continue;
    const auto owned = map.OwnedBy(r);
    uint64_t used = 0;
    for (size_t i = 0; i < defined && i < tables_.size(); ++i)
      used += ServerTable::DenseBytes(tables_[i], map.partitions(), owned);
    const uint64_t need = ServerTable::DenseBytes(spec, map.partitions(), owned);
    if (used + need > s.budget)
      return Status::TooLarge("table '" + spec.name + "' needs " + std::to_string(need) + " bytes on server " +
                              std::to_string(r) + " (" + std::to_string(total) + " in all), but server " +
                              std::to_string(r) + " has " + std::to_string(s.budget > used ? s.budget - used : 0) +
                              " of its " + std::to_string(s.budget) +
                              "-byte memory budget left; nothing was created");
  }
  return Status::OK();
}

Coordinator::Coordinator(zmq::context_t& ctx, CoordinatorOptions opts)
    : ctx_(ctx), opts_(std::move(opts)), sock_(ctx_, zmq::socket_type::router) {
  servers_.resize(opts_.num_servers);
  workers_.resize(std::max(opts_.num_workers, opts_.max_workers));
  for (uint32_t r = opts_.num_workers; r < workers_.size(); ++r) workers_[r].state = WorkerState::kVacant;
  for (size_t i = 0; i < opts_.tables.size(); ++i) {
    tables_.push_back(opts_.tables[i]);
    tables_.back().id = static_cast<uint32_t>(i);
  }
  if (metrics::Registry* m = opts_.metrics) {
    live_workers_gauge_ = &m->GetGauge("shardps_live_workers", "Workers alive (joined, not left, not declared dead)");
    live_servers_gauge_ = &m->GetGauge("shardps_live_servers", "Servers registered and answering heartbeats");
    min_clock_gauge_ = &m->GetGauge("shardps_min_worker_clock", "Clock of the slowest live worker (iterations finished)");
    max_clock_gauge_ = &m->GetGauge("shardps_max_worker_clock", "Clock of the fastest live worker (iterations finished)");
    for (uint32_t r = 0; r < workers_.size(); ++r)
      workers_[r].clock_gauge = &m->GetGauge("shardps_worker_clock", "Iterations each worker finished, from its heartbeats",
                                             {{"worker", std::to_string(r)}});
    snapshots_counter_ = &m->GetCounter("shardps_snapshots_total", "Snapshots completed (manifest written)");
    snapshot_failures_counter_ = &m->GetCounter("shardps_snapshot_failures_total", "Snapshots that failed");
    snapshot_seconds_ = &m->GetHistogram("shardps_snapshot_duration_seconds",
                                         "Time from starting a snapshot to its manifest",
                                         std::vector<double>{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300});
  }
}


Coordinator::~Coordinator() = default;

void Coordinator::PublishGauges() {
  if (!live_workers_gauge_) return;
  int64_t lo = -1, hi = -1;
  double live = 0;
  for (const auto& w : workers_) {
    if (w.clock_gauge && w.clock >= 0) w.clock_gauge->Set(static_cast<double>(w.clock));
    if (w.state != WorkerState::kAlive) continue;
    ++live;
    if (w.clock < 0) continue;
    lo = lo < 0 ? w.clock : std::min(lo, w.clock);
    hi = std::max(hi, w.clock);
  }
  live_workers_gauge_->Set(live);
  double servers = 0;
  for (const auto& s : servers_) servers += s.registered && s.alive;
  live_servers_gauge_->Set(servers);
  min_clock_gauge_->Set(static_cast<double>(lo));
  max_clock_gauge_->Set(static_cast<double>(hi));
}

Status Coordinator::Bind() {
  try {
    sock_.set(zmq::sockopt::router_mandatory, 1);
    sock_.set(zmq::sockopt::linger, 0);
    sock_.set(zmq::sockopt::maxmsgsize, int64_t{16} << 20);
    sock_.set(zmq::sockopt::sndhwm, 8192);  // per peer; past it a reply is dropped (logged)
    if (opts_.security.enabled) {
      zap_ = std::make_unique<ZapHandler>(ctx_, opts_.security.access);
      if (Status s = zap_->Start(); !s.ok()) return s;
      if (Status s = MakeCurveServer(sock_, opts_.security.key); !s.ok()) return s;
      zap_->Watch(sock_, "the coordinator");
    }
    sock_.bind(BindSpec(opts_.bind));
  } catch (const zmq::error_t& e) {
    return Status::InvalidArgument("coordinator cannot bind '" + opts_.bind + "': " + e.what());
  }
  if (Status s = AdvertisedEndpoint(sock_, opts_.advertise, "", &endpoint_); !s.ok()) return s;
  if (!opts_.state_dir.empty()) {
    if (Status s = OpenState(&resumed_); !s.ok()) return s;
    if (resumed_) {
      for (auto& srv : servers_) srv.adopt = !srv.endpoint.empty();
      LOG_INFO << "resuming the job saved in " << opts_.state_dir << ": " << tables_.size() << " tables, "
               << work_pools_.size() << " work pools; servers and workers are taken back as they call";
    }
  }
  if (opts_.restore && !resumed_) {
    Status s = PrepareRestore();
    if (!s.ok()) return s;
  }
  if (!opts_.endpoint_file.empty()) {
    Status s = WriteFileAtomic(opts_.endpoint_file, endpoint_ + "\n");
    if (!s.ok()) return s;
  }
  return Status::OK();
}

std::vector<uint32_t> Coordinator::LiveWorkers() const {
  std::vector<uint32_t> live;
  for (uint32_t r = 0; r < workers_.size(); ++r)
    if (workers_[r].state == WorkerState::kPending || workers_[r].state == WorkerState::kAlive)
      live.push_back(r);
  return live;
}

ClusterView Coordinator::View() const {
  ClusterView v;
  v.consistency = opts_.consistency;
  v.staleness = opts_.staleness;
  v.num_servers = opts_.num_servers;
  v.num_workers = opts_.num_workers;
  v.max_workers = static_cast<uint32_t>(workers_.size());
  v.map = map_;
  for (const auto& s : servers_) v.servers.push_back(s.endpoint);
  v.tables = tables_;
  v.membership_version = membership_version_;
  v.live_workers = LiveWorkers();
  v.snapshot_root = opts_.snapshot_dir;
  v.snapshot_every_clocks = opts_.snapshot_every_clocks;
  v.restore_from = restore_dir_;
  v.snapshot_clock_base = clock_base_;
  return v;
}

void Coordinator::Reply(const std::string& to, zmq::message_t header) {
  std::vector<zmq::message_t> frames;
  frames.emplace_back(to.data(), to.size());
  frames.push_back(std::move(header));
  if (state_) {  // sent by Commit(), once the state they follow from is saved
    outbox_.push_back(std::move(frames));
    return;
  }
  Status s = SendMultipart(sock_, frames);
  if (!s.ok()) LOG_WARN << "reply dropped: " << s.ToString();
}

void Coordinator::ReplyError(const std::string& to, uint64_t request_id, const Status& s) {
  LOG_WARN << "request " << request_id << " refused: " << s.ToString();
  Reply(to, wire::EncodeError(fbb_, request_id, s));
}

void Coordinator::ReplyCluster(const std::string& to, uint64_t request_id, uint32_t rank) {
  fbb_.Clear();
  auto cluster = wire::BuildCluster(fbb_, View());
  wire::Fields f;
  f.type = wire::MsgType::Reply;
  f.request_id = request_id;
  f.rank = static_cast<int32_t>(rank);
  f.map_version = map_.version;
  Reply(to, wire::Encode(fbb_, f, wire::Body::ClusterInfo, cluster.Union()));
}

void Coordinator::BroadcastUpdate(uint64_t update_id) {
  ClusterView v = View();
  for (uint32_t r = 0; r < servers_.size(); ++r) {
    if (!servers_[r].registered) continue;
    fbb_.Clear();
    auto cluster = wire::BuildCluster(fbb_, v);
    wire::Fields f;
    f.type = wire::MsgType::ClusterUpdate;
    f.request_id = update_id;
    f.map_version = map_.version;
    Reply(servers_[r].routing_id, wire::Encode(fbb_, f, wire::Body::ClusterInfo, cluster.Union()));
  }
}

void Coordinator::MembershipChanged() {
  ++membership_version_;
  auto live = LiveWorkers();
  std::string list;
  for (auto r : live) list += (list.empty() ? "" : ",") + std::to_string(r);
  LOG_INFO << "membership v" << membership_version_ << ": live workers [" << list << "]";
  BroadcastUpdate(next_update_id_++);
  MaybeReleaseBarrier();
}

int Coordinator::ServerRankOf(const std::string& routing_id) const {
  for (uint32_t r = 0; r < servers_.size(); ++r)
    if (servers_[r].registered && servers_[r].routing_id == routing_id) return static_cast<int>(r);
  return -1;
}

void Coordinator::MaybeCompleteMap() {
  if (!map_.owner.empty()) return;
  for (const auto& s : servers_)
    if (!s.registered) return;
  map_ = ShardMap::Contiguous(opts_.partitions, opts_.num_servers, 1);
  LOG_INFO << "all " << opts_.num_servers << " servers registered: shard map v1 with "
           << opts_.partitions << " partitions";
  // The tables of the job file (or the snapshot) must fit the servers' budgets.
  for (size_t i = 0; i < tables_.size(); ++i)
    if (Status b = CheckBudget(tables_[i], i); !b.ok()) {
      LOG_ERROR << b.message();
      fatal_ = b;
      ShutdownJob();
      return;
    }
  // Clients are told the cluster is ready only once every server holds the
  // map and its tables (and finished restoring them): a client's first
  // request must not overtake the update on its way to a server.
  map_update_id_ = next_update_id_++;
  for (uint32_t r = 0; r < servers_.size(); ++r) map_waiting_.insert(r);
  BroadcastUpdate(map_update_id_);
}

void Coordinator::MaybeReleaseBarrier() {
  if (barrier_arrived_.empty()) return;
  for (uint32_t r : LiveWorkers())
    if (!barrier_arrived_.count(r)) return;
  LOG_DEBUG << "barrier " << barrier_generation_ << " released";
  for (const auto& [rank, w] : barrier_arrived_) {
    wire::Fields f;
    f.request_id = w.request_id;
    Reply(w.routing_id, wire::EncodeSimple(fbb_, f));
  }
  barrier_arrived_.clear();
  ++barrier_generation_;
}

void Coordinator::HandleRegister(const std::string& from, const wire::Header& h) {
  const auto* req = h.body_as_RegisterRequest();
  if (!req) return ReplyError(from, h.request_id(), Status::BadMessage("Register without a RegisterRequest body"));
  const int requested = req->requested_rank();
  Identity id;
  if (req->host()) id.host = req->host()->str();
  if (req->metrics_url()) id.metrics_url = req->metrics_url()->str();
  id.pid = req->pid();
  if (req->role() == wire::Role::Server) {
    if (!req->endpoint() || req->endpoint()->size() == 0)
      return ReplyError(from, h.request_id(), Status::InvalidArgument("a server must give its endpoint"));
    int rank = requested;
    for (uint32_t r = 0; r < servers_.size() && rank < 0; ++r)  // its Register sent again
      if (servers_[r].registered && servers_[r].routing_id == from) rank = static_cast<int>(r);
    if (rank < 0) {
      for (uint32_t r = 0; r < servers_.size() && rank < 0; ++r)
        if (!servers_[r].registered) rank = static_cast<int>(r);
      if (rank < 0)
        return ReplyError(from, h.request_id(),
                          Status::Conflict("all " + std::to_string(servers_.size()) +
                                           " server ranks are taken"));
    }
    if (rank >= static_cast<int>(servers_.size()))
      return ReplyError(from, h.request_id(),
                        Status::InvalidArgument("server rank " + std::to_string(rank) +
                                                " but the job has " + std::to_string(servers_.size()) +
                                                " servers"));
    ServerSlot& slot = servers_[rank];
    if (slot.registered && slot.alive && slot.routing_id != from)
      return ReplyError(from, h.request_id(),
                        Status::Conflict("server rank " + std::to_string(rank) +
                                         " is held by a live server at " + slot.endpoint));
    const bool rejoin = slot.registered;
    slot.registered = true;
    slot.alive = true;
    slot.adopt = false;
    slot.routing_id = from;
    slot.endpoint = req->endpoint()->str();
    slot.last_seen = Clock::now();
    slot.id = id;
    slot.budget = req->memory_budget();
    slot.prev = slot.last = StatsSample{};
    LOG_INFO << "server " << rank << (rejoin ? " re-registered" : " registered") << " at " << slot.endpoint;
    ReplyCluster(from, h.request_id(), static_cast<uint32_t>(rank));
    MaybeCompleteMap();
    return;
  }
  if (req->role() == wire::Role::Worker) {
    if (stopping_)
      return ReplyError(from, h.request_id(),
                        Status::Unavailable("the job is stopping (shardps-ctl stop): no worker joins it now"));
    // A rank of its own choosing, else the first one not started, else the
    // first dead one (a restarted worker), else a vacant elastic rank.
    int rank = requested;
    for (uint32_t r = 0; r < workers_.size() && rank < 0; ++r)  // its Register sent again
      if (workers_[r].state == WorkerState::kAlive && workers_[r].routing_id == from) rank = static_cast<int>(r);
    for (WorkerState want : {WorkerState::kPending, WorkerState::kDead, WorkerState::kVacant})
      for (uint32_t r = 0; r < workers_.size() && rank < 0; ++r)
        if (workers_[r].state == want) rank = static_cast<int>(r);
    if (rank < 0)
      return ReplyError(from, h.request_id(),
                        Status::Conflict("all " + std::to_string(workers_.size()) +
                                         " worker ranks are taken (raise [job] max_workers to let more join)"));
    if (rank >= static_cast<int>(workers_.size()))
      return ReplyError(from, h.request_id(),
                        Status::InvalidArgument("worker rank " + std::to_string(rank) + " but the job has " +
                                                std::to_string(workers_.size()) + " worker ranks" +
                                                (workers_.size() > opts_.num_workers ? " (max_workers)" : "")));
    WorkerSlot& slot = workers_[rank];
    const bool same_process = slot.id.pid == id.pid && slot.id.host == id.host && id.pid != 0;
    if (slot.state == WorkerState::kAlive && (slot.routing_id == from || same_process)) {
      // The same process sent its Register again (the coordinator restarted
      // before it answered): the same answer.
      slot.routing_id = from;
      slot.last_seen = Clock::now();
      return ReplyCluster(from, h.request_id(), static_cast<uint32_t>(rank));
    }
    if (slot.state == WorkerState::kAlive)  // a restarted worker retries until the old one is declared dead
      return ReplyError(from, h.request_id(),
                        Status::NotReady("worker rank " + std::to_string(rank) + " is held by a live worker" +
                                         (slot.id.host.empty() ? "" : " on " + slot.id.host) +
                                         " (a dead one is declared dead after " +
                                         std::to_string(opts_.heartbeat_timeout.count()) + " ms of silence)"));
    if (slot.state == WorkerState::kLeft)
      return ReplyError(from, h.request_id(),
                        Status::Conflict("worker rank " + std::to_string(rank) + " finished and left the job"));
    // A dead or vacant rank joins the running job: the servers learn it is
    // live (the update goes out before this reply), and the worker asks each
    // server where its clock starts (Join).
    const bool joins_running = slot.state != WorkerState::kPending;
    slot.state = WorkerState::kAlive;
    slot.last_seen = Clock::now();
    slot.id = id;
    slot.routing_id = from;
    last_claims_.erase(static_cast<uint32_t>(rank));
    slot.clock = 0;
    LOG_INFO << "worker " << rank << (joins_running ? " joined the running job" : " joined")
             << (id.host.empty() ? "" : " from " + id.host);
    if (joins_running) MembershipChanged();
    ReplyCluster(from, h.request_id(), static_cast<uint32_t>(rank));
    return;
  }
  ReplyCluster(from, h.request_id(), 0);  // observer
}

void Coordinator::HandleCreateTable(const std::string& from, const wire::Header& h) {
  TableSpec spec;
  Status s = wire::DecodeTableSpec(h.body_as_TableSpec(), &spec);
  if (!s.ok()) return ReplyError(from, h.request_id(), Status::InvalidArgument(s.message()));
  const Waiter asker{from, h.request_id()};
  for (const auto& t : tables_) {
    if (t.name != spec.name) continue;
    if (!t.SameShape(spec))
      return ReplyError(from, h.request_id(),
                        Status::Conflict("table '" + spec.name +
                                         "' already exists with another shape, initializer or optimizer"));
    for (const auto& p : pending_tables_)
      if (p.table_id == t.id) {  // still being defined: answer with the first creator
        PendingTable extra = p;
        extra.creator = asker;
        pending_tables_.push_back(extra);
        return;
      }
    if (!cluster_ready_ && resumed_) {  // the servers may not hold it yet: answered once they all do
      table_waiters_.push_back({asker, t.id});
      return;
    }
    return ReplyTableSpec(asker, t.id);
  }
  if (Status b = CheckBudget(spec, tables_.size()); !b.ok()) return ReplyError(from, h.request_id(), b);
  spec.id = static_cast<uint32_t>(tables_.size());
  tables_.push_back(spec);
  LOG_INFO << "table '" << spec.name << "' (" << ToString(spec.kind) << ", id " << spec.id << ") defined";
  PendingTable p;
  p.table_id = spec.id;
  p.creator = asker;
  p.update_id = next_update_id_++;
  p.deadline = Clock::now() + opts_.ack_timeout;
  for (uint32_t r = 0; r < servers_.size(); ++r)
    if (servers_[r].registered && servers_[r].alive) p.waiting_for.insert(r);
  BroadcastUpdate(p.update_id);
  if (p.waiting_for.empty()) return ReplyTableSpec(asker, spec.id);
  pending_tables_.push_back(std::move(p));
}

void Coordinator::ReplyTableSpec(const Waiter& to, uint32_t table) {
  fbb_.Clear();
  auto body = wire::BuildTableSpec(fbb_, tables_[table]);
  wire::Fields f;
  f.request_id = to.request_id;
  f.table = table;
  Reply(to.routing_id, wire::Encode(fbb_, f, wire::Body::TableSpec, body.Union()));
}

void Coordinator::HandleAck(const std::string& from, const wire::Header& h) {
  int rank = ServerRankOf(from);
  if (rank < 0) return;
  if (!cluster_ready_ && map_update_id_ != 0 && h.request_id() >= map_update_id_) {
    map_waiting_.erase(static_cast<uint32_t>(rank));
    if (map_waiting_.empty()) {
      cluster_ready_ = true;
      LOG_INFO << "every server holds the shard map: the cluster is ready";
      for (const auto& w : cluster_waiters_) ReplyCluster(w.routing_id, w.request_id, 0);
      cluster_waiters_.clear();
      for (const auto& [w, table] : table_waiters_) ReplyTableSpec(w, table);  // resent to a resumed coordinator
      table_waiters_.clear();
    }
  }
  for (auto it = pending_tables_.begin(); it != pending_tables_.end();) {
    if (it->update_id <= h.request_id()) it->waiting_for.erase(static_cast<uint32_t>(rank));
    if (it->waiting_for.empty()) {
      ReplyTableSpec(it->creator, it->table_id);
      it = pending_tables_.erase(it);
    } else {
      ++it;
    }
  }
}

void Coordinator::HandleBarrier(const std::string& from, const wire::Header& h) {
  const int rank = h.rank();
  if (h.role() != wire::Role::Worker || rank < 0 || rank >= static_cast<int>(workers_.size()))
    return ReplyError(from, h.request_id(), Status::InvalidArgument("only workers take part in barriers"));
  auto st = workers_[rank].state;
  if (st != WorkerState::kAlive && st != WorkerState::kPending)
    return ReplyError(from, h.request_id(),
                      Status::Unavailable("worker " + std::to_string(rank) + " is no longer live"));
  barrier_arrived_[static_cast<uint32_t>(rank)] = {from, h.request_id()};
  MaybeReleaseBarrier();
}

uint64_t Coordinator::WorkPool::handed() const {
  uint64_t back = 0;
  for (const auto& [b, e] : returned) back += e - b;
  return next > back ? next - back : 0;
}

uint64_t Coordinator::WorkPool::FirstUndone() const {
  uint64_t pos = next;
  for (const auto& [rank, g] : last) pos = std::min(pos, g.first);
  for (const auto& r : returned) pos = std::min(pos, r.first);
  return pos;
}

std::pair<uint64_t, uint64_t> Coordinator::WorkPool::TakeReturned(uint64_t max) {
  if (returned.empty()) return {0, 0};
  auto& r = returned.front();
  const std::pair<uint64_t, uint64_t> g{r.first, std::min<uint64_t>(r.second, r.first + max)};
  r.first = g.second;
  if (r.first >= r.second) returned.pop_front();
  return g;
}

std::pair<uint64_t, uint64_t> Coordinator::WorkPool::Slot(const Block& b, size_t i) {
  const uint64_t begin = std::min<uint64_t>(b.begin + static_cast<uint64_t>(b.per) * i, b.end);
  return {begin, std::min<uint64_t>(begin + b.per, b.end)};
}

void Coordinator::ReplyGrant(const std::string& from, uint64_t request_id, uint64_t pool, uint64_t begin,
                             uint64_t end, uint8_t state, uint64_t handed) {
  fbb_.Clear();
  auto g = wire::CreateWorkGrant(fbb_, pool, begin, end, static_cast<wire::GrantState>(state), handed);
  wire::Fields f;
  f.request_id = request_id;
  f.row_begin = begin;  // what clients before WorkGrant read
  f.row_end = end;
  Reply(from, wire::Encode(fbb_, f, wire::Body::WorkGrant, g.Union()));
}

// Hands out consecutive units of a shared pool, each unit once. Near the
// end the grants shrink (at most a 1/(2 x live workers) share of what is
// left, in whole granules), so the last units spread over every worker
// instead of one. Per-clock claims: ClaimPerClock.
void Coordinator::HandleClaimWork(const std::string& from, const wire::Header& h) {
  const wire::WorkClaim* c = h.body_as_WorkClaim();
  if (!c) return ReplyError(from, h.request_id(), Status::BadMessage("ClaimWork without a WorkClaim body"));
  if (c->total() == 0 || c->max() == 0 || c->granule() == 0)
    return ReplyError(from, h.request_id(),
                      Status::InvalidArgument("ClaimWork: a pool needs total > 0 units, max > 0 and granule > 0 per "
                                              "claim (got total " + std::to_string(c->total()) + ", max " +
                                              std::to_string(c->max()) + ", granule " +
                                              std::to_string(c->granule()) + ")"));
  const int rank = h.role() == wire::Role::Worker && h.rank() >= 0 && h.rank() < static_cast<int>(workers_.size())
                       ? h.rank()
                       : -1;
  if (c->per_clock() && (rank < 0 || workers_[rank].state != WorkerState::kAlive))
    return ReplyError(from, h.request_id(),
                      Status::InvalidArgument("ClaimWork: per-clock claims are for live workers (rank " +
                                              std::to_string(h.rank()) + ")"));
  if (c->per_clock() && h.clock() < 0)
    return ReplyError(from, h.request_id(), Status::InvalidArgument("ClaimWork: a per-clock claim at a negative clock"));
  auto it = work_pools_.find(c->pool());
  if (it == work_pools_.end()) {
    constexpr size_t kMaxPools = 4096;
    if (work_pools_.size() >= kMaxPools) {
      // Forget the oldest finished pool; a job that keeps more open is refused.
      auto done = std::find_if(work_pools_.begin(), work_pools_.end(),
                               [](const auto& p) { return p.second.used_up() && p.second.blocks.empty(); });
      if (done == work_pools_.end())
        return ReplyError(from, h.request_id(),
                          Status::InvalidArgument("ClaimWork: more than " + std::to_string(kMaxPools) +
                                                  " unfinished work pools"));
      work_pools_.erase(done);
    }
    WorkPool fresh;
    fresh.total = c->total();
    if (c->pool() < resume_pool_)  // a restored job: trained before the snapshot
      fresh.next = fresh.total;
    else if (c->pool() == resume_pool_)
      fresh.next = std::min(resume_position_, fresh.total);
    it = work_pools_.emplace(c->pool(), std::move(fresh)).first;
  } else if (it->second.total != c->total()) {
    return ReplyError(from, h.request_id(),
                      Status::Conflict("ClaimWork: pool " + std::to_string(c->pool()) + " has " +
                                       std::to_string(it->second.total) + " units, this claim says " +
                                       std::to_string(c->total())));
  }
  WorkPool& p = it->second;
  if (c->per_clock()) return ClaimPerClock(from, h, c->pool(), p, c->max());
  if (rank >= 0) RecordPooledWorkAt(h.clock(), c->pool(), p);
  if (rank >= 0 && h.seq() != 0) {
    auto last = last_claims_.find(static_cast<uint32_t>(rank));
    if (last != last_claims_.end() && last->second.seq == h.seq() && last->second.pool == c->pool()) {
      const LastClaim& lc = last->second;  // sent again: the same answer
      return ReplyGrant(from, h.request_id(), lc.pool, lc.begin, lc.end,
                        static_cast<uint8_t>(lc.begin < lc.end ? wire::GrantState::Granted : wire::GrantState::Finished),
                        p.handed());
    }
  }
  uint64_t begin, end;
  if (!p.returned.empty()) {
    std::tie(begin, end) = p.TakeReturned(c->max());  // a dead worker's last grant first, at most `max` of it
  } else {
    const uint64_t left = p.total - p.next;
    const uint64_t live = std::max<uint64_t>(1, LiveWorkers().size());
    const uint64_t g = c->granule();
    const uint64_t share = std::max<uint64_t>(1, (left / (2 * live) + g - 1) / g) * g;
    begin = p.next;
    end = p.next + std::min<uint64_t>({left, c->max(), share});
    p.next = end;
  }
  if (rank >= 0) {
    if (begin < end)
      p.last[static_cast<uint32_t>(rank)] = {begin, end};
    else
      p.last.erase(static_cast<uint32_t>(rank));
    if (h.seq() != 0) last_claims_[static_cast<uint32_t>(rank)] = {h.seq(), c->pool(), begin, end};
  }
  ReplyGrant(from, h.request_id(), c->pool(), begin, end,
             static_cast<uint8_t>(begin < end ? wire::GrantState::Granted : wire::GrantState::Finished), p.handed());
}

// One grant per worker and clock (sync trainers: a clock's gradients are
// averaged into one step). The units of clock c are cut as one block at the
// first claim for c and handed out in rank order, `max` each, over the
// workers live then: together they are the batch a single process would
// take. A worker that joined after the cut takes fresh units. Units a dead
// worker never saw counted come first, from this pool or an earlier one.
// A claim repeated at the same clock (a lost reply) gets the same grant.
void Coordinator::ClaimPerClock(const std::string& from, const wire::Header& h, uint64_t pool_id, WorkPool& p,
                                uint32_t max) {
  const uint32_t rank = static_cast<uint32_t>(h.rank());
  const int64_t clock = h.clock();
  auto& mine = clock_grants_[rank];
  // The worker waited for every server to answer its tick of clock - 2
  // before it ticked clock - 1: grants up to clock - 2 were counted.
  while (!mine.empty() && mine.front().clock + 2 <= clock) mine.pop_front();
  for (const auto& g : mine)
    if (g.clock == clock)
      return ReplyGrant(from, h.request_id(), g.pool, g.begin, g.end, static_cast<uint8_t>(wire::GrantState::Granted), 0);
  auto grant = [&](uint64_t pool, uint64_t begin, uint64_t end) {
    mine.push_back({pool, clock, begin, end});
    ReplyGrant(from, h.request_id(), pool, begin, end, static_cast<uint8_t>(wire::GrantState::Granted), 0);
  };
  // Blocks of this and earlier pools older than a few clocks are done with:
  // a slot nobody took there goes back.
  for (auto& [id, q] : work_pools_) {
    if (id > pool_id) break;
    if (!q.blocks.empty()) ReturnSlots(q, clock - 4, -1);
  }
  for (auto& [id, q] : work_pools_) {
    if (id > pool_id) break;
    if (q.returned.empty()) continue;
    const auto [begin, end] = q.TakeReturned(max);
    // Served with these: its slot in this clock's block (if cut with it)
    // goes back for another worker.
    if (auto b = p.blocks.find(clock); b != p.blocks.end())
      for (size_t i = 0; i < b->second.ranks.size(); ++i)
        if (b->second.ranks[i] == rank && !b->second.taken[i]) {
          b->second.taken[i] = 1;
          const auto slot = WorkPool::Slot(b->second, i);
          if (slot.first < slot.second) p.returned.push_back(slot);
        }
    return grant(id, begin, end);
  }
  auto b = p.blocks.find(clock);
  if (b == p.blocks.end() && p.next < p.total) {
    WorkPool::Block blk;
    // Every live worker but those already served at this clock (a dead
    // worker's units).
    for (uint32_t r : LiveWorkers()) {
      auto held = clock_grants_.find(r);
      if (held == clock_grants_.end() ||
          std::none_of(held->second.begin(), held->second.end(), [&](const ClockGrant& g) { return g.clock == clock; }))
        blk.ranks.push_back(r);
    }
    blk.taken.assign(blk.ranks.size(), 0);
    blk.per = max;
    blk.begin = p.next;
    blk.end = std::min<uint64_t>(p.total, p.next + static_cast<uint64_t>(max) * blk.ranks.size());
    if (MayCutAt(clock)) RecordWorkAt(clock, pool_id, blk.begin);
    p.next = blk.end;
    if (p.next >= p.total) p.last_clock = clock;
    b = p.blocks.emplace(clock, std::move(blk)).first;
  }
  if (b != p.blocks.end()) {
    WorkPool::Block& blk = b->second;
    const auto at = std::find(blk.ranks.begin(), blk.ranks.end(), rank);
    const size_t i = static_cast<size_t>(at - blk.ranks.begin());
    if (at != blk.ranks.end() && !blk.taken[i]) {
      const auto [begin, end] = WorkPool::Slot(blk, i);
      blk.taken[i] = 1;
      if (begin < end) return grant(pool_id, begin, end);
    } else if (p.next < p.total) {  // joined after the cut (or its slot went back when it died)
      const uint64_t begin = p.next, end = std::min<uint64_t>(p.total, p.next + max);
      p.next = end;
      if (p.next >= p.total) p.last_clock = std::max(p.last_clock, clock);
      return grant(pool_id, begin, end);
    }
  }
  const bool finished = p.last_clock < clock && p.next >= p.total;
  ReplyGrant(from, h.request_id(), pool_id, 0, 0,
             static_cast<uint8_t>(finished ? wire::GrantState::Finished : wire::GrantState::WaitNextClock),
             p.handed());
}

bool Coordinator::MayCutAt(int64_t clock) const {
  if (opts_.snapshot_dir.empty()) return false;
  if (opts_.snapshot_every_clocks > 0 && clock > 0 && clock % opts_.snapshot_every_clocks == 0) return true;
  for (const auto& op : snap_ops_)
    if (!op.done && op.clock == clock) return true;
  return false;
}

void Coordinator::RecordPooledWorkAt(int64_t clock, uint64_t pool_id, const WorkPool& p) {
  if (opts_.snapshot_dir.empty() || clock <= 0) return;
  std::vector<int64_t> cuts;
  if (opts_.snapshot_every_clocks > 0) cuts.push_back(clock / opts_.snapshot_every_clocks * opts_.snapshot_every_clocks);
  for (const auto& op : snap_ops_)
    if (!op.done && op.clock > 0 && op.clock <= clock) cuts.push_back(op.clock);
  for (int64_t cut : cuts)
    if (cut > 0 && !work_at_.count(cut)) RecordWorkAt(cut, pool_id, p.FirstUndone());
}

void Coordinator::RecordWorkAt(int64_t clock, uint64_t pool_id, uint64_t position) {
  work_at_[clock] = {pool_id, position};
  while (work_at_.size() > 1024) work_at_.erase(work_at_.begin());  // a thousand cut clocks back
}

void Coordinator::ReturnSlots(WorkPool& p, int64_t before_clock, int rank) {
  for (auto it = p.blocks.begin(); it != p.blocks.end();) {
    WorkPool::Block& blk = it->second;
    const bool drop = it->first < before_clock;
    for (size_t i = 0; i < blk.ranks.size(); ++i) {
      if (blk.taken[i] || !(drop || static_cast<int>(blk.ranks[i]) == rank)) continue;
      const auto slot = WorkPool::Slot(blk, i);
      blk.taken[i] = 1;
      if (slot.first < slot.second) p.returned.push_back(slot);
    }
    it = drop ? p.blocks.erase(it) : std::next(it);
  }
}

void Coordinator::ForgetWorkOf(uint32_t rank, bool dead) {
  for (auto& [id, pool] : work_pools_) {
    if (dead) ReturnSlots(pool, INT64_MIN, static_cast<int>(rank));
    auto it = pool.last.find(rank);
    if (it == pool.last.end()) continue;
    if (dead) {
      LOG_INFO << "work pool " << id << ": units [" << it->second.first << ", " << it->second.second
               << ") of dead worker " << rank << " go to the others";
      pool.returned.push_back(it->second);
    }
    pool.last.erase(it);
  }
  last_claims_.erase(rank);  // a new process for this rank numbers its claims from 1
  auto cg = clock_grants_.find(rank);
  if (cg == clock_grants_.end()) return;
  if (dead) {
    // The clock the servers last counted for it (their heartbeats are
    // fresher than its silence): its grants of that clock and later were
    // dropped with its pushes, and go to the others.
    int64_t counted = INT64_MAX;
    for (const auto& s : servers_)
      if (s.registered) counted = std::min(counted, rank < s.waits.clocks.size() ? s.waits.clocks[rank] : int64_t{-1});
    if (counted == INT64_MAX) counted = -1;  // no server: none counted
    for (const auto& g : cg->second) {
      if (g.clock < counted) continue;
      auto p = work_pools_.find(g.pool);
      if (p == work_pools_.end()) continue;
      LOG_INFO << "work pool " << g.pool << ": units [" << g.begin << ", " << g.end << ") of dead worker " << rank
               << " (clock " << g.clock << ", not counted) go to the others";
      p->second.returned.emplace_back(g.begin, g.end);
    }
  }
  clock_grants_.erase(cg);
}

void Coordinator::Handle(std::vector<zmq::message_t>& frames) {
  if (frames.size() < 2) return;  // no identity + header: nothing to answer
  const std::string from = frames[0].to_string();
  std::vector<uint64_t> scratch;
  const wire::Header* hp = nullptr;
  Status s = wire::ParseHeader(frames[1], scratch, &hp);
  if (!s.ok()) return ReplyError(from, 0, s);
  const wire::Header& h = *hp;
  if (opts_.security.enabled) {
    const auto role = PeerRole(frames[1]);
    Status a = role ? Authorize(*role, h.type(), h.role())
                    : Status::PermissionDenied("the connection carries no key role");
    // A Register's role is in its body too (HandleRegister acts on that one).
    if (const auto* req = h.type() == wire::MsgType::Register ? h.body_as_RegisterRequest() : nullptr;
        a.ok() && req && req->role() != h.role())
      a = Authorize(*role, h.type(), req->role());
    if (!a.ok()) {
      if (h.type() == wire::MsgType::Reply) return;  // nothing to answer
      return ReplyError(from, h.request_id(), a);
    }
  }
  if (frames.size() != 2)
    return ReplyError(from, h.request_id(),
                      Status::BadMessage("coordinator messages have one frame, got " +
                                         std::to_string(frames.size() - 1)));
  switch (h.type()) {  // what changes the durable state
    case wire::MsgType::Register:
    case wire::MsgType::CreateTable:
    case wire::MsgType::ClaimWork:
    case wire::MsgType::Leave:
    case wire::MsgType::Stop:
    case wire::MsgType::Rollback:
    case wire::MsgType::SnapshotDone:
      dirty_ = true;
      break;
    default:
      break;
  }
  int srank = ServerRankOf(from);
  if (srank < 0 && h.role() == wire::Role::Server && h.rank() >= 0 && h.rank() < static_cast<int>(servers_.size()) &&
      servers_[h.rank()].adopt && h.type() != wire::MsgType::Register) {
    // A resumed coordinator: a server of the saved job, still serving (its
    // first message, a heartbeat or a snapshot report, brings it back).
    ServerSlot& s = servers_[h.rank()];
    s.adopt = false;
    s.registered = s.alive = true;
    s.routing_id = from;
    s.last_seen = Clock::now();
    srank = h.rank();
    dirty_ = true;
    LOG_INFO << "server " << srank << " at " << s.endpoint << " is back";
    MaybeCompleteMap();
  }
  // Any message from a known peer counts as a heartbeat.
  if (srank >= 0) {
    servers_[srank].last_seen = Clock::now();
    if (!servers_[srank].alive) {
      servers_[srank].alive = true;
      LOG_INFO << "server " << srank << " is answering again";
    }
  }
  if (h.role() == wire::Role::Worker && h.rank() >= 0 && h.rank() < static_cast<int>(workers_.size()))
    workers_[h.rank()].last_seen = Clock::now();

  switch (h.type()) {
    case wire::MsgType::Register:
      return HandleRegister(from, h);
    case wire::MsgType::Heartbeat:
      return HandleHeartbeat(from, h);
    case wire::MsgType::GetStatus:
      return HandleStatus(from, h);
    case wire::MsgType::Stop:
      return HandleStop(from, h);
    case wire::MsgType::GetCluster:
      if (!cluster_ready_) {
        cluster_waiters_.push_back({from, h.request_id()});
        return;
      }
      return ReplyCluster(from, h.request_id(), 0);
    case wire::MsgType::CreateTable:
      return HandleCreateTable(from, h);
    case wire::MsgType::Barrier:
      return HandleBarrier(from, h);
    case wire::MsgType::ClaimWork:
      return HandleClaimWork(from, h);
    case wire::MsgType::Leave: {
      const int r = h.rank();
      if (h.role() != wire::Role::Worker || r < 0 || r >= static_cast<int>(workers_.size()))
        return ReplyError(from, h.request_id(), Status::InvalidArgument("only workers leave"));
      wire::Fields f;
      f.request_id = h.request_id();
      Reply(from, wire::EncodeSimple(fbb_, f));
      if (workers_[r].state == WorkerState::kAlive || workers_[r].state == WorkerState::kPending) {
        workers_[r].state = WorkerState::kLeft;
        LOG_INFO << "worker " << r << " left";
        ForgetWorkOf(static_cast<uint32_t>(r), false);
        MembershipChanged();
      }
      return;
    }
    case wire::MsgType::Reply:
      if (HandleSnapshotReply(from, h)) return;
      return HandleAck(from, h);
    case wire::MsgType::SnapshotDone:
      return HandleSnapshotDone(from, h);
    case wire::MsgType::SnapshotNow: {
      if (opts_.snapshot_dir.empty())
        return ReplyError(from, h.request_id(),
                          Status::InvalidArgument("this job has no snapshot directory (--snapshot-dir)"));
      if (map_.owner.empty())
        return ReplyError(from, h.request_id(), Status::NotReady("not every server has registered yet"));
      Waiter w{from, h.request_id()};
      return StartOnDemandSnapshot(&w);
    }
    case wire::MsgType::Rollback:
      return HandleRollback(from, h);
    case wire::MsgType::Shutdown: {
      LOG_INFO << "shutdown requested";
      wire::Fields f;
      f.request_id = h.request_id();
      Reply(from, wire::EncodeSimple(fbb_, f));
      return ShutdownJob();
    }
    default:
      return ReplyError(from, h.request_id(),
                        Status::InvalidArgument(std::string("the coordinator does not serve '") +
                                                wire::EnumNameMsgType(h.type()) + "' messages"));
  }
}

void Coordinator::CheckTimeouts() {
  const auto now = Clock::now();
  bool changed = false;
  for (uint32_t r = 0; r < workers_.size(); ++r) {
    WorkerSlot& w = workers_[r];
    if (w.state == WorkerState::kAlive && now - w.last_seen > opts_.heartbeat_timeout) {
      w.state = WorkerState::kDead;
      LOG_WARN << "worker " << r << " silent for more than " << opts_.heartbeat_timeout.count()
               << " ms: declared dead";
      ForgetWorkOf(r, true);
      changed = true;
    } else if (w.state == WorkerState::kPending && now - start_ > opts_.join_timeout) {
      w.state = WorkerState::kDead;
      LOG_WARN << "worker " << r << " did not join within " << opts_.join_timeout.count()
               << " ms: declared dead";
      ForgetWorkOf(r, true);
      changed = true;
    }
  }
  for (uint32_t r = 0; r < servers_.size(); ++r) {
    ServerSlot& s = servers_[r];
    if (s.registered && s.alive && now - s.last_seen > opts_.heartbeat_timeout) {
      s.alive = false;
      LOG_WARN << "server " << r << " at " << s.endpoint << " silent for more than "
               << opts_.heartbeat_timeout.count() << " ms";
    }
  }
  for (auto it = pending_tables_.begin(); it != pending_tables_.end();) {
    if (now < it->deadline) {
      ++it;
      continue;
    }
    std::string missing;
    for (auto r : it->waiting_for) missing += (missing.empty() ? "" : ",") + std::to_string(r);
    ReplyError(it->creator.routing_id, it->creator.request_id,
               Status::Unavailable("servers [" + missing + "] did not confirm table '" +
                                   tables_[it->table_id].name + "' in time"));
    it = pending_tables_.erase(it);
  }
  if (changed) {
    dirty_ = true;
    MembershipChanged();
  }
  PublishGauges();
  MaybeFinishStop();
}

Status Coordinator::Run(const std::atomic<bool>& stop) {
  start_ = Clock::now();
  LOG_INFO << "coordinator on " << endpoint_ << ": " << opts_.num_servers << " servers, "
           << opts_.num_workers << " workers, " << ToString(opts_.consistency)
           << (opts_.consistency == Consistency::kBounded ? " s=" + std::to_string(opts_.staleness) : "");
  std::vector<zmq::message_t> frames;
  auto next_check = Clock::now();
  while (!shutdown_ && !stop.load()) {
    zmq::pollitem_t items[] = {{sock_.handle(), 0, ZMQ_POLLIN, 0}};
    Poll(items, 1, Millis(100));
    while (RecvMultipart(sock_, &frames)) {
      Handle(frames);
      Commit();
    }
    if (Clock::now() >= next_check) {
      CheckTimeouts();
      CheckSnapshotTimers();
      Commit();
      next_check = Clock::now() + Millis(100);
    }
  }
  Commit();
  // Let the last replies (Shutdown to the servers, a Stop's answer) leave.
  sock_.set(zmq::sockopt::linger, 1000);
  LOG_INFO << "coordinator stopped";
  return fatal_;
}

}  // namespace shardps
