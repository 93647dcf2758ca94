#include "server/server.h"

#include <poll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "common/base/log.h"
#include "common/codec/wire.h"
#include "common/net/security.h"
#include "common/net/zap.h"
#include "server/server_start.h"
#include "server/snapshot/snapshot_rows.h"

namespace shardps {

Status ServerOptions::Validate() const {
  if (coordinator.empty()) return Status::InvalidArgument("--coordinator is required");
  if (max_request_bytes < 1024)
    return Status::InvalidArgument("max request size must be at least 1 KiB");
  if (heartbeat_interval.count() <= 0) return Status::InvalidArgument("heartbeat interval must be > 0");
  if (max_hold.count() <= 0) return Status::InvalidArgument("the longest hold of a pull must be > 0");
  return Status::OK();
}

namespace {

uint64_t DefaultMemoryBudget() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) / 2 : (8ull << 30);
}

ServerOptions WithDefaultLimits(ServerOptions o) {
  if (o.memory_budget == 0) o.memory_budget = DefaultMemoryBudget();
  if (o.held_bytes == 0) o.held_bytes = std::max<uint64_t>(o.memory_budget / 4, 64ull << 20);
  return o;
}

}  // namespace

Server::Server(zmq::context_t& ctx, ServerOptions opts)
    : ctx_(ctx),
      opts_(WithDefaultLimits(std::move(opts))),
      data_(ctx_, zmq::socket_type::router),
      coord_(ctx_, zmq::socket_type::dealer) {}

Server::~Server() = default;

uint64_t Server::NewVersionTag() {
  static_assert(kVersionBits == wire::kVersionCountBits, "clients read the count below the tag");
  std::random_device rd;
  uint64_t t = 0;
  while (t == 0) t = rd() & 0xffff;
  return t << kVersionBits;
}

Status Server::Start(const std::atomic<bool>* stop) {
  ServerStart start(ctx_, opts_, data_, coord_);  // watches the coordinator's handshakes until Start returns
  if (Status s = start.Open(&zap_, &endpoint_); !s.ok()) return s;
  ClusterView v;
  if (Status s = start.Register(endpoint_, coord_link_.next_request_id++, &rank_, &v, stop); !s.ok()) return s;
  SetLogName("server " + std::to_string(rank_));
  tables_.set_rank(rank_);
  tables_.SetColdDir(ColdDirOf(opts_.cold_dir, rank_));
  LOG_INFO << "registered as server " << rank_ << ", serving on " << endpoint_;
  ApplyCluster(v);
  return fatal_;
}

void Server::ApplyCluster(const ClusterView& v) {
  const uint64_t had = view_.complete() ? view_.map.version : 0;
  if (had && v.complete() && v.map.version < had) {
    LOG_WARN << "ignoring shard map v" << v.map.version << ", older than v" << had << " held";
    return;
  }
  view_ = v;
  if (view_.complete()) {
    if (!view_.restore_from.empty() && !tables_.restoring())
      tables_.RestoreFrom(std::make_unique<snapshot::SnapshotRows>(view_.restore_from));
    if (Status rs = tables_.Define(view_, view_.map.HeldBy(rank_)); !rs.ok()) {
      LOG_ERROR << "cannot hold the partitions of shard map v" << view_.map.version << ", stopping: " << rs.ToString();
      fatal_ = Status(rs.code(), (v.restore_from.empty() ? "cannot hold its partitions: " : "restore failed: ") + rs.message());
      shutdown_ = true;
      return;
    }
    PlaceShards();
  }
  // A worker that left or joins: said once for all the groups served here.
  std::map<uint32_t, std::pair<int64_t, size_t>> left;  // rank -> the lowest clock, the pushes dropped
  std::set<uint32_t> joining;
  for (Shard* sh : Primaries()) {
    sh->clocks.SetModel(view_.consistency, view_.staleness);
    const WorkerClocks::Changes c = ApplyMembership(*sh);  // (applies what completes, releases what may go)
    for (const auto& l : c.left) {
      const auto it = left.try_emplace(l.rank, l.clock, 0).first;
      it->second.first = std::min(it->second.first, l.clock);
      it->second.second += l.dropped;
    }
    joining.insert(c.joining.begin(), c.joining.end());
  }
  for (const auto& [rank, at] : left)
    LOG_INFO << "worker " << rank << " is no longer live (at clock " << at.first << ")"
             << (at.second ? ", dropped " + std::to_string(at.second) + " unfinished pushes" : "");
  for (uint32_t rank : joining) LOG_INFO << "worker " << rank << " is joining";
}

void Server::Reply(const zmq::message_t& to, zmq::message_t header) {
  std::vector<zmq::message_t> frames;
  frames.emplace_back(to.data(), to.size());
  frames.push_back(std::move(header));
  Send(std::move(frames));
}

void Server::ReplyError(const zmq::message_t& to, uint64_t request_id, const Status& s) {
  const bool own = input_.shard && request_id == input_.request && to.to_string_view() == input_.from;
  if (own) input_.refused = true;  // the input being handled (not a pull it released)
  if (input_.shard && !input_.shard->primary) {
    // A backup's copy refusing what its primary took: a tick refused there
    // too is no harm; anything else makes the copies differ.
    if (own && input_.type == wire::MsgType::Tick)
      LOG_WARN << "group " << input_.shard->group << " (a backup copy): tick " << request_id << " refused, as by "
               << "its primary: " << s.ToString();
    else
      LOG_ERROR << "group " << input_.shard->group << " (a backup copy): input " << request_id << " its primary "
                << "took is refused here, the copies differ now: " << s.ToString();
    return;
  }
  LOG_WARN << "request " << request_id << " refused: " << s.ToString();
  m_.errors.SingleWriterInc();
  Reply(to, wire::EncodeError(fbb_, request_id, s));
}

// A request has at most 3 + kMaxPushSteps frames (identity, header, keys,
// one values frame per step), a primary's Replicate one more; an envelope
// up to wire::kMaxEnvelopeFrames after its header.
constexpr size_t kMaxRequestFrames = 4 + kMaxPushSteps;

void Server::HandleData(std::vector<zmq::message_t>& frames, bool enveloped) {
  if (frames.size() < 2) {
    if (!frames.empty())
      ReplyError(frames[0], 0, Status::BadMessage("message without a header frame"));
    return;
  }
  const wire::Header* h = nullptr;
  Status s = wire::ParseHeader(frames[1], header_scratch_, &h);
  if (!s.ok()) return ReplyError(frames[0], 0, s);
  if (opts_.security.enabled) {
    const auto role = PeerRole(frames[1]);
    Status a = role ? Authorize(*role, h->type(), h->role())
                    : Status::PermissionDenied("the connection carries no key role");
    if (!a.ok()) return ReplyError(frames[0], h->request_id(), a);
  }
  if (h->type() == wire::MsgType::Envelope) {
    if (enveloped) return ReplyError(frames[0], 0, Status::BadMessage("an envelope inside an envelope"));
    return HandleEnvelope(*h, frames);
  }
  if (frames.size() > kMaxRequestFrames)
    return ReplyError(frames[0], h->request_id(),
                      Status::BadMessage("a request has at most " + std::to_string(kMaxRequestFrames - 2) +
                                         " frames (header, keys, a push's values per step), got " +
                                         std::to_string(frames.size() - 1)));
  uint64_t total = 0;  // (a Replicate's own header aside: its request was within the primary's limit)
  for (size_t i = h->type() == wire::MsgType::Replicate ? 2 : 1; i < frames.size(); ++i) total += frames[i].size();
  if (total > opts_.max_request_bytes)
    return ReplyError(frames[0], h->request_id(),
                      Status::TooLarge("request of " + std::to_string(total) +
                                       " bytes exceeds this server's limit of " +
                                       std::to_string(opts_.max_request_bytes) + " bytes"));
  switch (h->type()) {
    case wire::MsgType::Push:
    case wire::MsgType::Pull:
    case wire::MsgType::Tick:
    case wire::MsgType::Join:
      // Drained: dropped, unanswered (the clients send it again to the copy
      // that serves the group in the coordinator's next map).
      if (draining_) return;
      if (Shard* sh = ServingShard(*h, frames[0])) HandleInput(*sh, *h, frames);
      return;
    case wire::MsgType::Replicate:
      return HandleReplicate(*h, frames);
    default:
      return ReplyError(frames[0], h->request_id(),
                        Status::InvalidArgument(std::string("a server does not serve '") +
                                                wire::EnumNameMsgType(h->type()) + "' messages"));
  }
}

void Server::HandleEnvelope(const wire::Header& h, std::vector<zmq::message_t>& frames) {
  std::vector<uint32_t> counts;
  if (Status s = wire::EnvelopeParts(h, frames.size() - 2, &counts); !s.ok()) return ReplyError(frames[0], 0, s);
  // (h points into frames[1] or header_scratch_: not read past here.)
  outbox_.Remember(frames[0]);  // a client that sends envelopes gets its replies in them
  wire::ForEachMessage(frames, 2, counts, &frames[0], [&](auto& part) { HandleData(part, true); });
}

void Server::HandleDrain(const wire::Header& h) {
  if (h.type() == wire::MsgType::Resume) {
    // A move called off after this copy was told to leave (the copy that
    // was to take its place died), or a resumed coordinator that knows of
    // no move: the group's requests are taken again.
    for (auto& sh : shards_)
      if (sh && sh->leaving && (h.group() < 0 || sh->group == static_cast<uint32_t>(h.group()))) {
        sh->leaving = false;
        LOG_INFO << "group " << sh->group << ": its move was called off: taking its requests again";
      }
    return;
  }
  // shardps-ctl drain-server: every group held here has its copies
  // elsewhere now; requests taken so far are answered as their copies
  // acknowledge them, new ones are left to the copies taking over. With a
  // group: only this server's copy of it leaves (a move).
  wire::Fields ack;
  ack.type = wire::MsgType::Reply;
  ack.request_id = h.request_id();
  ack.role = wire::Role::Server;
  ack.rank = static_cast<int32_t>(rank_);
  if (h.group() >= 0) {
    const auto g = static_cast<uint32_t>(h.group());
    if (g < shards_.size() && shards_[g] && !shards_[g]->left) {
      shards_[g]->leaving = true;
      LOG_INFO << "group " << g << ": this copy leaves (moved to another server): taking no more of its requests";
    }
    ack.group = h.group();
  } else {
    LOG_INFO << "drained: taking no more requests (the coordinator moves this server's groups to their other copies)";
    draining_ = true;
  }
  Coord().send(wire::EncodeSimple(fbb_, ack), zmq::send_flags::dontwait);
}

Shard* Server::ServingShard(const wire::Header& h, const zmq::message_t& from) {
  const uint32_t g = h.group() >= 0 ? static_cast<uint32_t>(h.group()) : rank_;
  Shard* sh = g < shards_.size() ? shards_[g].get() : nullptr;
  if (sh && sh->primary && !sh->leaving) return sh;
  if (sh && sh->leaving) return nullptr;  // dropped: sent again to the group's next primary
  if (!view_.complete())
    ReplyError(from, h.request_id(), Status::NotReady("server has no shard map yet"));
  else
    ReplyError(from, h.request_id(),
               Status::WrongServer("group " + std::to_string(g) + " is not served by server " + std::to_string(rank_) +
                                   " in shard map v" + std::to_string(view_.map.version) +
                                   (g < view_.map.groups() ? " (its primary is server " +
                                                                 std::to_string(view_.map.Primary(g)) + ")"
                                                           : "")));
  return nullptr;
}

std::vector<Shard*> Server::Primaries() {
  std::vector<Shard*> out;
  for (auto& sh : shards_)
    if (sh && sh->primary) out.push_back(sh.get());
  return out;
}

void Server::HandleCoordinator(std::vector<zmq::message_t>& frames) {
  coord_link_.heard = Clock::now();
  const wire::Header* h = nullptr;
  Status s = wire::ParseHeader(frames[0], header_scratch_, &h);
  if (!s.ok()) {
    LOG_ERROR << "bad message from the coordinator: " << s.ToString();
    return;
  }
  switch (h->type()) {
    case wire::MsgType::ClusterUpdate: {
      ClusterView v;
      s = wire::DecodeCluster(h->body_as_ClusterInfo(), &v);
      if (!s.ok()) {
        LOG_ERROR << "bad cluster update: " << s.ToString();
        return;
      }
      const uint64_t id = h->request_id();
      ApplyCluster(v);
      if (!fatal_.ok()) return;  // not ready, and never will be: no ack
      wire::Fields ack;
      ack.type = wire::MsgType::Reply;
      ack.request_id = id;
      ack.role = wire::Role::Server;
      ack.rank = static_cast<int32_t>(rank_);
      if (v.retiring.empty()) {
        Coord().send(wire::EncodeSimple(fbb_, ack), zmq::send_flags::dontwait);
        return;
      }
      // Workers being retired: where each is on every group served here
      // (their requests are refused from now on, so this is final).
      std::vector<WorkerFinal> finals;
      for (Shard* sh : Primaries())
        for (uint32_t r : v.retiring)
          if (r < sh->clocks.ranks()) finals.push_back(sh->clocks.Final(r, sh->group));
      fbb_.Clear();
      auto body = wire::CreateRetireReport(fbb_, wire::BuildFinals(fbb_, finals));
      Coord().send(wire::Encode(fbb_, ack, wire::Body::RetireReport, body.Union()), zmq::send_flags::dontwait);
      return;
    }
    case wire::MsgType::ClockQuery:
    case wire::MsgType::SnapshotAt:
    case wire::MsgType::SnapshotCancel:
      return HandleSnapshotControl(*h);
    case wire::MsgType::Shutdown:
      LOG_INFO << "coordinator asked to shut down" << (draining_ ? " (drained: its copies are held by others)" : "");
      shutdown_ = true;
      return;
    case wire::MsgType::Drain:
    case wire::MsgType::Resume:
      return HandleDrain(*h);
    case wire::MsgType::Reply:
      s = wire::ReplyStatus(h);
      if (!s.ok()) LOG_WARN << "coordinator: " << s.ToString();
      return;
    default:
      LOG_WARN << "unexpected '" << wire::EnumNameMsgType(h->type()) << "' from the coordinator";
  }
}

void Server::UpdateGauges() {
  // Over the groups this server serves (one without replicas).
  double parked = 0, buffered = 0, applied = 0, min_clock = 0;
  bool first = true;
  for (Shard* sh : Primaries()) {
    parked += static_cast<double>(sh->clocks.parked().size());
    buffered += static_cast<double>(sh->clocks.held_pushes());
    const auto a = static_cast<double>(sh->clocks.applied_clock()), m = static_cast<double>(sh->clocks.MinClock());
    applied = first ? a : std::min(applied, a);
    min_clock = first ? m : std::min(min_clock, m);
    first = false;
  }
  m_.parked.Set(parked);
  m_.buffered.Set(buffered);
  m_.applied_clock.Set(applied);
  m_.min_clock.Set(min_clock);
  m_.SetTables(tables_.all());
  if (const ColdStore* tier = tables_.cold()) m_.SetColdBytes(tier->bytes_read(), tier->bytes_written());
  // Replicas: a server holding more than its own group's copy.
  if (std::count_if(shards_.begin(), shards_.end(), [](const auto& sh) { return sh != nullptr; }) > 1)
    for (auto& sh : shards_)
      if (sh) m_.SetGroup(sh->group, sh->primary, sh->primary ? sh->sent : 0, sh->primary ? sh->sent - sh->AckedByAll() : 0);
}

void Server::SendHeartbeat() {
  UpdateGauges();
  fbb_.Clear();
  // Over the groups this server serves: who waits (per worker, the largest
  // clock its held pulls need), each worker's clock (the lowest any group
  // counted), the applied clock (the lowest).
  std::map<int, int64_t> need;
  std::vector<int64_t> counted;
  int64_t applied = INT64_MAX, min_clock = INT64_MAX;
  uint32_t parked_pulls = 0;
  for (Shard* sh : Primaries()) {
    for (const auto& p : sh->clocks.parked())
      need[p.rank] = std::max(need.count(p.rank) ? need[p.rank] : INT64_MIN, p.need_clock);
    const auto& c = sh->clocks.clocks();
    if (counted.empty()) counted = c;
    for (size_t r = 0; r < c.size() && r < counted.size(); ++r) counted[r] = std::min(counted[r], c[r]);
    applied = std::min(applied, sh->clocks.applied_clock());
    min_clock = std::min(min_clock, sh->clocks.MinClock());
    parked_pulls += static_cast<uint32_t>(sh->clocks.parked().size());
  }
  std::vector<wire::ParkedPull> parked;
  for (const auto& [rank, n] : need) parked.emplace_back(rank, n);
  auto waiting = fbb_.CreateVectorOfStructs(parked);
  auto clocks = fbb_.CreateVector(counted);
  const ColdStore* tier = tables_.cold();
  wire::ColdTierStats cold;
  if (tier) {
    const TableSet::TierTotals s = tables_.Totals();
    cold = wire::ColdTierStats(s.hot_rows, s.cold_rows, s.hits, s.reads, s.moved_down, tier->bytes_read(),
                               tier->bytes_written());
  }
  wire::ServerStatsBuilder b(fbb_);
  if (tier) b.add_cold(&cold);
  b.add_pushes(m_.pushes.Value());
  b.add_pulls(m_.pulls.Value());
  b.add_push_bytes(m_.push_bytes.Value());
  b.add_pull_bytes(m_.pull_bytes.Value());
  b.add_applied_clock(applied == INT64_MAX ? 0 : applied);
  b.add_min_clock(min_clock == INT64_MAX ? 0 : min_clock);
  b.add_parked_pulls(parked_pulls);
  b.add_sent_ms(std::chrono::duration_cast<Millis>(Clock::now().time_since_epoch()).count());
  b.add_worker_clocks(clocks);
  b.add_waiting(waiting);
  auto body = b.Finish();
  wire::Fields f;
  f.type = wire::MsgType::Heartbeat;
  f.request_id = coord_link_.next_request_id++;
  f.role = wire::Role::Server;
  f.rank = static_cast<int32_t>(rank_);
  Coord().send(wire::Encode(fbb_, f, wire::Body::ServerStats, body.Union()), zmq::send_flags::dontwait);
}

bool Server::ReadData(std::vector<zmq::message_t>& frames) {
  // Frames past an envelope's most are dropped as they are read, and the
  // message refused (HandleData refuses a request of more than its most).
  size_t dropped = 0;
  int received = 0;
  bool backlog = false;
  for (; unread_.data && received < 256 && RecvMultipart(data_, &frames, true, 2 + wire::kMaxEnvelopeFrames, &dropped);
       ++received) {
    m_.messages.SingleWriterInc();
    if (dropped && frames.size() >= 2) {
      const wire::Header* h = nullptr;
      const uint64_t id = wire::ParseHeader(frames[1], header_scratch_, &h).ok() ? h->request_id() : 0;
      ReplyError(frames[0], id, Status::BadMessage("a message has at most " + std::to_string(1 + wire::kMaxEnvelopeFrames) +
                                                   " frames (an envelope's header and its messages'), got " +
                                                   std::to_string(frames.size() - 1 + dropped)));
    } else {
      HandleData(frames);
      if (!peers_.empty()) backlog |= ReceiveAcks();  // held replies go as soon as the backups have what they wait for
    }
    FlushReplies();
  }
  // Read to the end after every reply sent in the loop; the rest of a
  // burst of more than 256 on the next pass.
  if (received < 256) unread_.data = false;
  return backlog || received == 256;
}

// The loop sleeps in poll(2) on the sockets' ZMQ_FDs, not in zmq_poll,
// which asks each socket for ZMQ_EVENTS around two poll(2) calls (a system
// call each on a socket with no command waiting): twice the calls of this
// on a small request (docs/performance.md, "The small-request path"). A
// ZMQ_FD only signals new commands, and any operation on a socket may take
// in the command that announced a message, so a socket is read until it
// has nothing when its ZMQ_FD fired or after anything was sent on it
// (unread_ and PeerLink::check, set by Data(), Coord() and Peer()), and the loop sleeps
// only when no socket is left to read. A socket with nothing to read and
// nothing sent on it is not read: that would cost two system calls. A
// sleep that ran its full time reads every socket, whatever happened.
Status Server::Run(const std::atomic<bool>& stop) {
  std::vector<zmq::message_t> frames;
  std::vector<pollfd> fds;
  auto next_hb = Clock::now();
  unread_ = Unread{};
  for (auto& [rank, peer] : peers_) peer.check = true;
  bool backlog = false;  // a socket had more than a pass reads: the others' signals are looked at anyway
  bool moving = false;   // tiered tables past their hot tier: rows to move down
  coord_link_.heard = Clock::now();
  while (!shutdown_ && !stop.load()) {
    const auto now = Clock::now();
    if (now >= next_hb) {
      SendHeartbeat();
      next_hb = now + opts_.heartbeat_interval;
      if (opts_.coordinator_timeout.count() > 0 && now - coord_link_.heard > opts_.coordinator_timeout) {
        // The coordinator answers every heartbeat: it is gone (and its
        // standbys), so is the job this server belongs to.
        const auto secs = std::chrono::duration_cast<std::chrono::seconds>(now - coord_link_.heard).count();
        fatal_ = Status::Unavailable("lost the coordinator " + opts_.coordinator + ": nothing from it for " +
                                     std::to_string(secs) + " s (--coordinator-timeout-sec " +
                                     std::to_string(opts_.coordinator_timeout.count() / 1000) +
                                     "), its job is gone; this server stops");
        LOG_ERROR << fatal_.message();
        break;
      }
    }
    // A cut with rows to hand over keeps the loop from sleeping; one waiting
    // for its writer to catch up looks again within 2 ms.
    bool copying = false, cut_waits = false;
    for (auto& sh : shards_) {
      copying |= sh && sh->cut.busy();
      cut_waits |= sh && sh->cut.active() && !sh->cut.busy();
    }
    bool any = unread_.data || unread_.coord;
    for (auto& [rank, peer] : peers_) any |= peer.check;
    if (!any || backlog) {
      const auto wait = std::min<Millis>(cut_waits ? Millis(2) : Millis(100),
                                         std::chrono::duration_cast<Millis>(next_hb - now));
      fds.clear();
      fds.push_back({data_.get(zmq::sockopt::fd), POLLIN, 0});
      fds.push_back({coord_.get(zmq::sockopt::fd), POLLIN, 0});
      for (auto& [rank, peer] : peers_) fds.push_back({peer.socket.get(zmq::sockopt::fd), POLLIN, 0});
      const bool sleep = !any && !copying && !moving;
      const int n = ::poll(fds.data(), fds.size(), sleep ? static_cast<int>(std::max(wait, Millis(1)).count()) : 0);
      const bool all = n == 0 && sleep;  // (EINTR: nothing marked, the loop comes back)
      unread_.data |= all || fds[0].revents;
      unread_.coord |= all || fds[1].revents;
      size_t i = 2;
      for (auto& [rank, peer] : peers_) peer.check |= all || fds[i++].revents;
    }
    if (unread_.coord) {  // cluster updates first
      while (RecvMultipart(coord_, &frames)) HandleCoordinator(frames);
      unread_.coord = false;  // (read after anything a handler sent on it)
    }
    backlog = ReceiveAcks();
    backlog |= ReadData(frames);
    if (!BetweenRequests(&moving)) break;
    SendSnapshotReports();
    FlushReplies();  // (what the coordinator's messages, acknowledgements and expiries answered)
  }
  FlushReplies();
  LogStopped();
  return fatal_;
}

bool Server::BetweenRequests(bool* moving) {
  bool cutting = false;
  for (auto& sh : shards_)
    if (sh) {
      sh->cut.CopySome(2.0);
      cutting |= sh->cut.active();
      if (sh->primary) ExpireParked(*sh);
    }
  // Idle sparse rows go a few thousand at a time, between requests; not
  // while a cut is being copied (it reads the rows as they were).
  if (!cutting) tables_.EvictSome(4096);
  // Tiered tables past their hot tier: rows go down 16 384 at a time
  // (a few ms), the loop not sleeping until they are within it.
  *moving = tables_.Balance(16384);
  if (Status f = tables_.ColdTierFailure(); !f.ok()) {
    fatal_ = Status::Internal(f.message() + "; this server stops (its replicas, if any, take over)");
    LOG_ERROR << fatal_.message();
    return false;
  }
  return true;
}

void Server::LogStopped() const {
  uint64_t rows = 0;
  for (const auto& t : tables_.all()) rows += t && t->spec().kind == TableKind::kSparse ? t->rows_held() : 0;
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  LOG_INFO << "server stopped: held " << tables_.all().size() << " tables, " << rows << " sparse rows, "
           << tables_.Bytes() << " table bytes; peak resident " << ru.ru_maxrss / 1024 << " MiB; "
           << m_.pushes.Value() + m_.pulls.Value() + m_.ticks.Value() << " pushes, pulls and ticks in "
           << m_.messages.Value() << " messages";
  if (const ColdStore* cold = tables_.cold()) {
    const TableSet::TierTotals s = tables_.Totals();
    const uint64_t looked = s.hits + s.reads;
    LOG_INFO << "cold tier: " << s.cold_rows << " rows on disk at the end; hit rate "
             << (looked ? 100.0 * static_cast<double>(s.hits) / static_cast<double>(looked) : 0.0) << " %, "
             << s.reads << " rows read up, " << s.moved_down << " moved down; " << cold->bytes_read()
             << " bytes read, " << cold->bytes_written() << " written";
  }
}

}  // namespace shardps
