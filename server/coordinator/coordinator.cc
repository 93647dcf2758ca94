#include "server/coordinator/coordinator.h"

#include "common/net/zap.h"

#include <poll.h>

#include <algorithm>

#include "common/base/file.h"
#include "common/base/log.h"
#include "common/codec/wire.h"

namespace shardps {

namespace {

Membership::Options MembershipOptions(const CoordinatorOptions& o) {
  Membership::Options m;
  m.num_servers = o.num_servers;
  m.num_workers = o.num_workers;
  m.max_workers = o.max_workers;
  m.heartbeat_timeout = o.heartbeat_timeout;
  m.join_timeout = o.join_timeout;
  m.replace_dead = o.replicas >= 2;
  return m;
}

SnapshotScheduler::Options SchedulerOptions(const CoordinatorOptions& o) {
  SnapshotScheduler::Options s;
  s.dir = o.snapshot_dir;
  s.every_clocks = o.snapshot_every_clocks;
  s.every_sec = o.snapshot_every_sec;
  s.keep = o.snapshots.keep;
  s.timeout = o.snapshots.timeout;
  return s;
}

static_assert(static_cast<uint8_t>(wire::GrantState::Granted) == Grant::kGranted &&
              static_cast<uint8_t>(wire::GrantState::WaitNextClock) == Grant::kWaitNextClock &&
              static_cast<uint8_t>(wire::GrantState::Finished) == Grant::kFinished);

}  // namespace

Coordinator::Coordinator(zmq::context_t& ctx, CoordinatorOptions opts)
    : ctx_(ctx),
      opts_(std::move(opts)),
      sock_(ctx_, zmq::socket_type::router),
      members_(MembershipOptions(opts_)),
      tables_(opts_.tables),
      snaps_(SchedulerOptions(opts_)),
      metrics_(opts_.metrics.registry, members_.worker_ranks()) {
  tables_.set_replicas(opts_.replicas, opts_.Groups());
}

Coordinator::~Coordinator() = default;

Status Coordinator::Bind(const std::atomic<bool>* stop) {
  // The store first: a coordinator that waits to lead (etcd) binds nothing
  // meanwhile, so that clients given every coordinator's endpoint reach the
  // leader only.
  if (!opts_.state_dir.empty())
    if (Status s = OpenState(&opened_.resumed, stop); !s.ok()) return s;
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
  if (Status s = AdvertisedEndpoint(sock_, opts_.published.advertise, "", &endpoint_); !s.ok()) return s;
  if (!opts_.state_dir.empty()) {
    if (opened_.resumed) {
      members_.AdoptServers();
      LOG_INFO << "resuming the job saved in " << opts_.state_dir << ": " << tables_.tables().size() << " tables, "
               << work_.size() << " work pools; servers and workers are taken back as they call";
    }
  }
  if (opts_.restore && !opened_.resumed) {
    Status s = PrepareRestore();
    if (!s.ok()) return s;
  }
  if (!opts_.published.endpoint_file.empty()) {
    Status s = WriteFileAtomic(opts_.published.endpoint_file, endpoint_ + "\n");
    if (!s.ok()) return s;
  }
  return Status::OK();
}

Status Coordinator::Run(const std::atomic<bool>& stop) {
  start_ = Clock::now();
  LOG_INFO << "coordinator on " << endpoint_ << ": " << opts_.num_servers << " servers, "
           << opts_.num_workers << " workers, " << ToString(opts_.consistency)
           << (opts_.consistency == Consistency::kBounded ? " s=" + std::to_string(opts_.staleness) : "");
  std::vector<zmq::message_t> frames;
  auto next_check = Clock::now();
  // Sleeps in poll(2) on the socket's ZMQ_FD, not in zmq_poll (it asks the
  // socket for ZMQ_EVENTS around the poll, two system calls more per
  // message). The ZMQ_FD signals new commands only, and a send may take in
  // the one that announced a request: the socket is read until empty after
  // every send before the loop sleeps (sends come from the handlers, read
  // on after them, and from the checks, read after them on the next pass).
  bool unread = true;
  while (!shutdown_ && !stop.load()) {
    if (!unread) {
      pollfd pfd{sock_.get(zmq::sockopt::fd), POLLIN, 0};
      const auto left = std::chrono::duration_cast<Millis>(next_check - Clock::now()).count();
      ::poll(&pfd, 1, static_cast<int>(std::clamp<int64_t>(left, 0, 100)));  // (EINTR: the loop comes back)
    }
    // Before anything is handled: a coordinator that was stopped past its
    // lease (etcd) learns it no longer leads, and answers nothing.
    if (Status s = KeepLead(); !s.ok()) return s;
    while (RecvMultipart(sock_, &frames)) {
      Handle(frames);
      Commit();
    }
    unread = false;
    if (Clock::now() >= next_check) {
      CheckTimeouts();
      CheckSnapshotTimers();
      Commit();
      next_check = Clock::now() + Millis(100);
      unread = true;
    }
  }
  if (!shutdown_ && stop.load()) {
    // Stopped by a signal: the job ends here, for every server that
    // belongs to it (the launcher's and any started by hand).
    LOG_INFO << "stopped by a signal: telling every server to exit";
    ShutdownJob();
  }
  Commit();
  // Let the last replies (Shutdown to the servers, a Stop's answer) leave.
  sock_.set(zmq::sockopt::linger, 1000);
  LOG_INFO << "coordinator stopped";
  return fatal_;
}

// ---- Dispatch

const Coordinator::Route Coordinator::kRoutes[] = {
    {wire::MsgType::Register, &Coordinator::HandleRegister, true},
    {wire::MsgType::Heartbeat, &Coordinator::HandleHeartbeat, false},
    {wire::MsgType::GetStatus, &Coordinator::HandleStatus, false},
    {wire::MsgType::Stop, &Coordinator::HandleStop, true},
    {wire::MsgType::GetCluster, &Coordinator::HandleGetCluster, false},
    {wire::MsgType::CreateTable, &Coordinator::HandleCreateTable, true},
    {wire::MsgType::Barrier, &Coordinator::HandleBarrier, false},
    {wire::MsgType::ClaimWork, &Coordinator::HandleClaimWork, true},
    {wire::MsgType::Leave, &Coordinator::HandleLeave, true},
    {wire::MsgType::Reply, &Coordinator::HandleReply, false},
    {wire::MsgType::SnapshotDone, &Coordinator::HandleSnapshotDone, true},
    {wire::MsgType::SnapshotNow, &Coordinator::HandleSnapshotNow, false},
    {wire::MsgType::Rollback, &Coordinator::HandleRollback, true},
    {wire::MsgType::DeclareDead, &Coordinator::HandleDeclareDead, true},
    {wire::MsgType::Filled, &Coordinator::HandleFilled, true},
    {wire::MsgType::DrainServer, &Coordinator::HandleDrainServer, true},
    {wire::MsgType::AddServer, &Coordinator::HandleAddServer, true},
    {wire::MsgType::Rebalance, &Coordinator::HandleRebalance, true},
    {wire::MsgType::MoveGroup, &Coordinator::HandleMoveGroup, true},
    {wire::MsgType::Shutdown, &Coordinator::HandleShutdown, false},
};

const Coordinator::Route* Coordinator::RouteOf(wire::MsgType type) {
  for (const Route& r : kRoutes)
    if (r.type == type) return &r;
  return nullptr;
}

void Coordinator::Handle(std::vector<zmq::message_t>& frames) {
  if (frames.size() < 2) return;  // no identity + header: nothing to answer
  const std::string from = frames[0].to_string();
  std::vector<uint64_t> scratch;
  const wire::Header* hp = nullptr;
  Status s = wire::ParseHeader(frames[1], scratch, &hp);
  if (!s.ok()) return ReplyError(from, 0, s);
  const wire::Header& h = *hp;
  if (Status a = Admit(frames[1], h); !a.ok()) {
    if (h.type() == wire::MsgType::Reply) return;  // nothing to answer
    return ReplyError(from, h.request_id(), a);
  }
  if (frames.size() != 2)
    return ReplyError(from, h.request_id(),
                      Status::BadMessage("coordinator messages have one frame, got " +
                                         std::to_string(frames.size() - 1)));
  const Route* route = RouteOf(h.type());
  if (route && route->changes_state) dirty_ = true;
  if (FenceDeadServer(from, h)) return;
  Hear(from, h);
  if (!route)
    return ReplyError(from, h.request_id(),
                      Status::InvalidArgument(std::string("the coordinator does not serve '") +
                                              wire::EnumNameMsgType(h.type()) + "' messages"));
  (this->*route->handle)(from, h);
}

Status Coordinator::Admit(const zmq::message_t& header_frame, const wire::Header& h) const {
  if (!opts_.security.enabled) return Status::OK();
  const auto role = PeerRole(header_frame);
  Status a = role ? Authorize(*role, h.type(), h.role())
                  : Status::PermissionDenied("the connection carries no key role");
  // A Register's role is in its body too (HandleRegister acts on that one).
  if (const auto* req = h.type() == wire::MsgType::Register ? h.body_as_RegisterRequest() : nullptr;
      a.ok() && req && req->role() != h.role())
    a = Authorize(*role, h.type(), req->role());
  return a;
}

void Coordinator::Hear(const std::string& from, const wire::Header& h) {
  const auto speaker = h.role() == wire::Role::Server   ? Membership::Speaker::kServer
                       : h.role() == wire::Role::Worker ? Membership::Speaker::kWorker
                                                        : Membership::Speaker::kOther;
  const auto heard = members_.Hear(from, speaker, h.rank(), h.type() == wire::MsgType::Register, Clock::now());
  if (heard.adopted) {
    dirty_ = true;
    MaybeCompleteMap();
  }
}

// ---- Replies and updates

void Coordinator::Reply(const std::string& to, zmq::message_t header) {
  std::vector<zmq::message_t> frames;
  frames.emplace_back(to.data(), to.size());
  frames.push_back(std::move(header));
  if (store_) {  // sent by Commit(), once the state they follow from is saved
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
  auto cluster = wire::BuildCluster(fbb_, View(true));
  wire::Fields f;
  f.type = wire::MsgType::Reply;
  f.request_id = request_id;
  f.rank = static_cast<int32_t>(rank);
  f.map_version = tables_.published().version;
  Reply(to, wire::Encode(fbb_, f, wire::Body::ClusterInfo, cluster.Union()));
}

void Coordinator::ReplyTableSpec(const Waiter& to, uint32_t table) {
  fbb_.Clear();
  auto body = wire::BuildTableSpec(fbb_, tables_.tables()[table]);
  wire::Fields f;
  f.request_id = to.request_id;
  f.table = table;
  Reply(to.routing_id, wire::Encode(fbb_, f, wire::Body::TableSpec, body.Union()));
}

void Coordinator::ReplyGrant(const std::string& to, uint64_t request_id, const Grant& g) {
  fbb_.Clear();
  auto body = wire::CreateWorkGrant(fbb_, g.pool, g.begin, g.end, static_cast<wire::GrantState>(g.state), g.handed);
  wire::Fields f;
  f.request_id = request_id;
  f.row_begin = g.begin;  // what clients before WorkGrant read
  f.row_end = g.end;
  Reply(to, wire::Encode(fbb_, f, wire::Body::WorkGrant, body.Union()));
}

ClusterView Coordinator::View(bool published) const {
  ClusterView v;
  v.consistency = opts_.consistency;
  v.staleness = opts_.staleness;
  v.num_servers = static_cast<uint32_t>(members_.servers().size());  // (ranks added while it runs included)
  v.num_workers = opts_.num_workers;
  v.max_workers = members_.worker_ranks();
  v.map = published ? tables_.published() : tables_.map();
  v.dead_servers = members_.DeadServers();
  for (const auto& s : members_.servers()) v.servers.push_back(s.endpoint);
  v.tables = tables_.tables();
  v.membership_version = members_.version();
  v.live_workers = members_.LiveWorkers();
  // A retiring worker is still waited for (until its last clock is decided).
  for (const auto& [rank, r] : retiring_) {
    v.retiring.push_back(rank);
    auto at = std::lower_bound(v.live_workers.begin(), v.live_workers.end(), rank);
    if (at == v.live_workers.end() || *at != rank) v.live_workers.insert(at, rank);
  }
  for (const auto& [rank, f] : retired_)
    if (!std::binary_search(v.live_workers.begin(), v.live_workers.end(), rank)) v.retired.push_back(f);
  v.snapshot_root = opts_.snapshot_dir;
  v.snapshot_every_clocks = opts_.snapshot_every_clocks;
  v.snapshot_full_every = opts_.snapshots.full_every;
  v.restore_from = snaps_.restore_dir();
  v.snapshot_clock_base = snaps_.clock_base();
  return v;
}

void Coordinator::BroadcastUpdate(uint64_t update_id) {
  ClusterView v = View();
  for (const auto& s : members_.servers()) {
    if (!s.registered) continue;
    fbb_.Clear();
    auto cluster = wire::BuildCluster(fbb_, v);
    wire::Fields f;
    f.type = wire::MsgType::ClusterUpdate;
    f.request_id = update_id;
    f.map_version = tables_.map().version;
    Reply(s.routing_id, wire::Encode(fbb_, f, wire::Body::ClusterInfo, cluster.Union()));
  }
}

void Coordinator::MembershipChanged() {
  members_.Changed();
  BroadcastUpdate(next_update_id_++);
  ReleaseBarrier();
}

void Coordinator::ReleaseBarrier() {
  for (const Waiter& w : barrier_.MaybeRelease(members_.LiveWorkers())) {
    wire::Fields f;
    f.request_id = w.request_id;
    Reply(w.routing_id, wire::EncodeSimple(fbb_, f));
  }
}

ShardMap Coordinator::JobMap() const {
  std::vector<std::string> hosts;
  for (const auto& s : members_.servers()) hosts.push_back(s.id.host);
  return ShardMap::Replicated(opts_.partitions, opts_.num_servers, opts_.replicas, hosts, 1, opts_.Groups());
}

void Coordinator::MaybeCompleteMap() {
  if (tables_.complete() || !members_.AllServersRegistered()) return;
  tables_.SetMap(tables_.FirstMap(JobMap()));
  LOG_INFO << "all " << opts_.num_servers << " servers registered: shard map v" << tables_.map().version << " with "
           << opts_.partitions
           << " partitions" << (opts_.Groups() != opts_.num_servers ? " in " + std::to_string(opts_.Groups()) + " groups" : "")
           << (opts_.replicas > 1 ? ", " + std::to_string(opts_.replicas) + " copies of each" : "");
  // The tables of the job file (or the snapshot) must fit the servers' budgets.
  const auto budgets = members_.Budgets();
  for (size_t i = 0; i < tables_.tables().size(); ++i)
    if (Status b = tables_.CheckBudget(tables_.tables()[i], i, budgets, opts_.partitions); !b.ok()) {
      LOG_ERROR << b.message();
      fatal_ = b;
      ShutdownJob();
      return;
    }
  // Clients are told the cluster is ready only once every server holds the
  // map and its tables (and finished restoring them): a client's first
  // request must not overtake the update on its way to a server.
  const uint64_t update = next_update_id_++;
  const auto registered = members_.RegisteredServers();  // (a resumed job after a fail-over: not the dead)
  tables_.AwaitMap(update, std::set<uint32_t>(registered.begin(), registered.end()));
  BroadcastUpdate(update);
  // A resumed coordinator knows of no move under way: a copy the previous
  // one told to leave a group takes its requests again.
  if (opened_.resumed)
    for (uint32_t r : registered) SendResume(r, -1);
  // A resumed job whose groups are short of copies (a fail-over, a fill
  // the previous coordinator did not see end): filled again.
  if (ShardMap next = tables_.map(); PlanFills(&next)) ChangeMapTo(std::move(next));
}

// ---- Membership, tables, barriers, work

void Coordinator::HandleRegister(const std::string& from, const wire::Header& h) {
  const auto* req = h.body_as_RegisterRequest();
  if (!req) return ReplyError(from, h.request_id(), Status::BadMessage("Register without a RegisterRequest body"));
  Registration r;
  r.requested_rank = req->requested_rank();
  if (req->host()) r.id.host = req->host()->str();
  if (req->metrics_url()) r.id.metrics_url = req->metrics_url()->str();
  r.id.pid = req->pid();
  if (req->endpoint()) r.endpoint = req->endpoint()->str();
  r.memory_budget = req->memory_budget();
  if (req->role() == wire::Role::Server) return RegisterServer(from, h, r);
  if (req->role() == wire::Role::Worker) return RegisterWorker(from, h, r);
  ReplyCluster(from, h.request_id(), 0);  // observer
}

void Coordinator::RegisterServer(const std::string& from, const wire::Header& h, const Registration& r) {
  int rank = -1;
  bool replaced = false;
  const bool again = members_.ServerRankOf(from) >= 0;
  if (Status s = members_.RegisterServer(from, r, Clock::now(), &rank, &replaced); !s.ok())
    return ReplyError(from, h.request_id(), s);
  ReplyCluster(from, h.request_id(), static_cast<uint32_t>(rank));
  if (!again && !replaced && rank >= static_cast<int>(opts_.num_servers) && tables_.complete()) {
    // A server in a rank opened by add-server: copies of groups move onto
    // it (the live servers learn its endpoint with the map).
    metrics_.Added();
    LOG_INFO << "server " << rank << " joined the running job at " << r.endpoint << ": groups move onto it";
    ShardMap next = tables_.map();
    if (!PlanRebalance(&next)) next.version = tables_.map().version + 1;
    ChangeMapTo(std::move(next));
    dirty_ = true;
  }
  if (replaced && tables_.complete()) {
    // A replacement of a dead server: the groups short of copies are
    // filled into it (the live servers learn its endpoint with the map).
    metrics_.Replaced();
    ShardMap next = tables_.map();
    if (!PlanFills(&next)) next.version = tables_.map().version + 1;
    ChangeMapTo(std::move(next));
  }
  MaybeCompleteMap();
}

void Coordinator::RegisterWorker(const std::string& from, const wire::Header& h, const Registration& r) {
  int rank = -1;
  Membership::Join how;
  // While a worker is retiring (its last clock being decided, a few
  // milliseconds) a registration that could take its rank waits: the
  // servers must see the old process gone before a new one has the rank.
  if (!retiring_.empty() && (r.requested_rank < 0 || retiring_.count(static_cast<uint32_t>(r.requested_rank))))
    return ReplyError(from, h.request_id(),
                      Status::NotReady("worker " + std::to_string(retiring_.begin()->first) +
                                       " is being retired (its last clock decided over the servers)"));
  if (Status s = members_.RegisterWorker(from, r, stop_.stopping, Clock::now(), &rank, &how); !s.ok())
    return ReplyError(from, h.request_id(), s);
  if (how != Membership::Join::kAgain) {
    work_.ForgetClaim(static_cast<uint32_t>(rank));
    metrics_.WorkerStarted(rank);  // a new process: its totals count from 0
  }
  retired_.erase(static_cast<uint32_t>(rank));  // a new process: what its predecessor left is settled
  if (how == Membership::Join::kJoinedRunning) MembershipChanged();
  ReplyCluster(from, h.request_id(), static_cast<uint32_t>(rank));
}

void Coordinator::HandleGetCluster(const std::string& from, const wire::Header& h) {
  if (tables_.AwaitReady({from, h.request_id()})) ReplyCluster(from, h.request_id(), 0);
}

void Coordinator::HandleCreateTable(const std::string& from, const wire::Header& h) {
  TableSpec spec;
  Status s = wire::DecodeTableSpec(h.body_as_TableSpec(), &spec);
  if (s.ok()) s = CheckReplicable(spec, opts_.replicas);
  if (!s.ok()) return ReplyError(from, h.request_id(), Status::InvalidArgument(s.message()));
  const Waiter asker{from, h.request_id()};
  const TableDirectory::Lookup found = tables_.Find(spec, asker, opened_.resumed);
  switch (found.kind) {
    case TableDirectory::Lookup::kRefused:
      return ReplyError(from, h.request_id(), found.error);
    case TableDirectory::Lookup::kWaits:
      return;
    case TableDirectory::Lookup::kAnswer:
      return ReplyTableSpec(asker, found.table);
    case TableDirectory::Lookup::kNew:
      break;
  }
  if (Status b = tables_.CheckBudget(spec, tables_.tables().size(), members_.Budgets(), opts_.partitions); !b.ok())
    return ReplyError(from, h.request_id(), b);
  const uint32_t id = tables_.Define(std::move(spec));
  const uint64_t update = next_update_id_++;
  std::set<uint32_t> confirming = members_.AnsweringServers();
  BroadcastUpdate(update);
  if (confirming.empty()) return ReplyTableSpec(asker, id);
  tables_.AwaitTable(id, asker, update, Clock::now() + opts_.ack_timeout, std::move(confirming));
}

void Coordinator::HandleAck(const std::string& from, const wire::Header& h) {
  const int rank = members_.ServerRankOf(from);
  if (rank < 0) return;
  if (!moves_.drain_acks.empty() && OnDrainAck(static_cast<uint32_t>(rank), h.request_id())) return;
  if (!moves_.leave_acks.empty() && OnLeaveAck(static_cast<uint32_t>(rank), h)) return;
  if (!retiring_.empty()) OnRetireAck(static_cast<uint32_t>(rank), h);
  const TableDirectory::Answers a = tables_.Ack(static_cast<uint32_t>(rank), h.request_id());
  for (const auto& w : a.clusters) ReplyCluster(w.routing_id, w.request_id, 0);
  for (const auto& [w, table] : a.tables) ReplyTableSpec(w, table);
  TellWorkersTheMap();
}

void Coordinator::HandleBarrier(const std::string& from, const wire::Header& h) {
  const int rank = h.rank();
  if (h.role() != wire::Role::Worker || rank < 0 || rank >= static_cast<int>(members_.worker_ranks()))
    return ReplyError(from, h.request_id(), Status::InvalidArgument("only workers take part in barriers"));
  auto st = members_.workers()[rank].state;
  if (st != WorkerState::kAlive && st != WorkerState::kPending)
    return ReplyError(from, h.request_id(),
                      Status::Unavailable("worker " + std::to_string(rank) + " is no longer live"));
  barrier_.Arrive(static_cast<uint32_t>(rank), {from, h.request_id()});
  ReleaseBarrier();
}

void Coordinator::HandleClaimWork(const std::string& from, const wire::Header& h) {
  const wire::WorkClaim* c = h.body_as_WorkClaim();
  if (!c) return ReplyError(from, h.request_id(), Status::BadMessage("ClaimWork without a WorkClaim body"));
  WorkClaim claim;
  if (h.role() == wire::Role::Worker && h.rank() >= 0 && h.rank() < static_cast<int>(members_.worker_ranks()))
    claim.rank = h.rank();
  claim.said_rank = h.rank();
  claim.alive = claim.rank >= 0 && members_.workers()[claim.rank].state == WorkerState::kAlive;
  claim.clock = h.clock();
  claim.seq = h.seq();
  claim.pool = c->pool();
  claim.total = c->total();
  claim.max = c->max();
  claim.granule = c->granule();
  claim.per_clock = c->per_clock();
  Grant g;
  if (Status s = work_.Claim(claim, members_.LiveWorkers(), snaps_.Cuts(), &g); !s.ok())
    return ReplyError(from, h.request_id(), s);
  ReplyGrant(from, h.request_id(), g);
}

void Coordinator::HandleLeave(const std::string& from, const wire::Header& h) {
  const int r = h.rank();
  if (h.role() != wire::Role::Worker || r < 0 || r >= static_cast<int>(members_.worker_ranks()))
    return ReplyError(from, h.request_id(), Status::InvalidArgument("only workers leave"));
  wire::Fields f;
  f.request_id = h.request_id();
  Reply(from, wire::EncodeSimple(fbb_, f));
  if (members_.Leave(r)) {
    work_.ForgetWorkOf(static_cast<uint32_t>(r), false, -1);
    MembershipChanged();
  }
}

void Coordinator::CheckTimeouts() {
  const auto now = Clock::now();
  bool changed = false;
  const bool retire = RetiresWorkers();
  for (uint32_t r = 0; r < members_.worker_ranks(); ++r)
    if (members_.ExpireWorker(r, now, start_)) {
      if (retire)
        StartRetirement(r, next_update_id_);  // (the update MembershipChanged sends below)
      else
        work_.ForgetWorkOf(r, true, members_.CountedClock(r));
      changed = true;
    }
  for (uint32_t r : members_.ExpireServers(now))
    if (opts_.replicas > 1)
      if (Status s = FailOver(r, "silent for more than " + std::to_string(opts_.heartbeat_timeout.count()) + " ms");
          !s.ok())
        LOG_ERROR << s.message();
  for (const auto& [w, s] : tables_.Expire(now)) ReplyError(w.routing_id, w.request_id, s);
  if (changed) {
    dirty_ = true;
    MembershipChanged();
  }
  if (!retiring_.empty()) FinishRetirements(now);
  metrics_.Publish(members_);
  MaybeFinishStop();
}

// ---- Durable state (the rest: coordinator_durable.cc)

void Coordinator::Commit() {
  if (store_ && shutdown_) {
    store_->Forget();  // the job ended: nothing to resume (cleared before the Shutdown messages leave)
  } else if (store_ && dirty_ && !store_->Save(Durable()) && !shutdown_) {
    // Its replies would promise what a restarted coordinator forgets: they
    // are dropped, and the job stops, saying why, unless this coordinator
    // no longer leads it (etcd): then it stops acting and the job goes on.
    outbox_.clear();
    if (!store_->Keep().ok()) {
      dirty_ = false;
      return;  // (KeepLead ends the loop)
    }
    fatal_ = Status::Internal("cannot save the coordinator's state in " + opts_.state_dir + ": the job stops");
    ShutdownJob();
    store_->Forget();
  }
  dirty_ = false;
  for (auto& frames : outbox_) {
    Status s = SendMultipart(sock_, frames);
    if (s.ok()) continue;
    // (At the job's end a server stopped with it may be gone already.)
    if (shutdown_)
      LOG_INFO << "message dropped at the job's end: " << s.ToString();
    else
      LOG_WARN << "reply dropped: " << s.ToString();
  }
  outbox_.clear();
}

}  // namespace shardps
