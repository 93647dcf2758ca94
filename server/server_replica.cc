// Replica groups (docs/fault-tolerance.md, "Replicas"): the shards a
// server holds as the shard map says, the stream from a primary to its
// backups (every input that changes the group's state, in the order taken),
// a backup applying it, and a backup taking its group over when the map
// makes it the primary.
#include <algorithm>

#include "common/base/log.h"
#include "common/codec/wire.h"
#include "common/net/security.h"
#include "server/server.h"
#include "server/tables/optimizer.h"

namespace shardps {

namespace {

// A frame sharing `m`'s bytes (ZeroMQ counts the references; small frames
// are copied).
zmq::message_t Share(zmq::message_t& m) {
  zmq::message_t c;
  c.copy(m);
  return c;
}

// The header of sh's next stream message (its fseq the next one).
wire::Fields StreamFields(Shard& sh, uint32_t rank, wire::RepKind kind) {
  wire::Fields f;
  f.type = wire::MsgType::Replicate;
  f.role = wire::Role::Server;
  f.rank = static_cast<int32_t>(rank);
  f.group = static_cast<int32_t>(sh.group);
  f.fseq = f.request_id = ++sh.sent;
  f.rep = kind;
  return f;
}

// The copy after / before `server` in group g's chain (the map's order,
// primary first); ShardMap::kNone when there is none.
uint32_t NextCopy(const ShardMap& m, uint32_t g, uint32_t server, int step) {
  if (g >= m.replicas.size()) return ShardMap::kNone;
  const auto& r = m.replicas[g];
  for (size_t i = 0; i < r.size(); ++i)
    if (r[i] == server) {
      const auto j = static_cast<std::ptrdiff_t>(i) + step;
      return j >= 0 && static_cast<size_t>(j) < r.size() ? r[static_cast<size_t>(j)] : ShardMap::kNone;
    }
  return ShardMap::kNone;
}

// The routing id of a server's stream connections: the receiver knows who
// feeds it (each copy takes the stream from the one before it).
const std::string kStreamIdPrefix = std::string("\x01stream-");

std::string StreamId(uint32_t rank) { return kStreamIdPrefix + std::to_string(rank); }

// The server a stream message came from: its connection's routing id, else
// the rank its header names.
int32_t StreamSender(const zmq::message_t& routing_id, const wire::Header& h) {
  const std::string_view id = routing_id.to_string_view();
  if (id.substr(0, kStreamIdPrefix.size()) != kStreamIdPrefix) return h.rank();
  int32_t r = 0;
  for (char c : id.substr(kStreamIdPrefix.size())) {
    if (c < '0' || c > '9' || r > 1000000) return -1;
    r = r * 10 + (c - '0');
  }
  return r;
}

}  // namespace

void Server::PlaceShards() {
  const ShardMap& m = view_.map;
  if (shards_.size() < m.groups()) shards_.resize(m.groups());
  // The group a request names is checked wherever a server holds more than
  // its own group (with replicas, also after a fail-over).
  bool several = m.ReplicaStride() > 1;
  for (uint32_t g = 0; g < m.groups(); ++g) several |= g != rank_ && m.Holds(rank_, g);
  check_.SetGroups(several ? &m.group : nullptr);
  std::set<uint32_t> fed;  // the servers this one streams to
  for (uint32_t g = 0; g < m.groups(); ++g) {
    auto& sh = shards_[g];
    if (!m.Holds(rank_, g)) {
      // Not held (any more): a copy left behind by a map change keeps its
      // rows until the server stops; nothing is served from it.
      if (sh) sh->primary = false, sh->left = true;
      continue;
    }
    const bool primary = m.Primary(g) == rank_;
    if (sh && sh->left) sh.reset();  // held again (filled anew): what was left behind is no copy
    if (!sh) {
      sh = std::make_unique<Shard>(g, tables_.all(), opts_.held_bytes, opts_.snapshot_write_delay, NewVersionTag());
      sh->cut.SetPartitions(m.OfGroup(g));
      sh->clocks.SetModel(view_.consistency, view_.staleness);
      sh->clocks.set_held_limit(primary ? opts_.held_bytes : UINT64_MAX);
      sh->primary = primary;
      sh->filled.done = m.IsCopy(rank_, g);
      if (!sh->filled.done)
        LOG_INFO << "filling a copy of group " << g << " (from server " << m.Feeder(g, rank_) << ", shard map v"
                 << m.version << ")";
      else if (!primary)
        LOG_INFO << "holding a copy of group " << g << " (its primary: server " << m.Primary(g) << ")";
    } else if (primary && !sh->primary) {
      // Its primary died: this copy has every input it acknowledged. The
      // cuts its primary took (or that were aborted with it) are not taken
      // again: cuts go on from the next one due.
      sh->primary = true;
      sh->clocks.set_held_limit(opts_.held_bytes);
      const int64_t at = sh->clocks.sync() ? sh->clocks.applied_clock() : sh->clocks.MinClock();
      const uint32_t every = view_.snapshot_every_clocks;
      sh->cut.SkipTo(every ? at / every * every : at);
      LOG_WARN << "taking over group " << g << " (shard map v" << m.version << "): " << sh->applied
               << " inputs applied from its primary, applied clock " << sh->clocks.applied_clock();
      // Its inputs continue the stream's numbering (the copies after it
      // have a prefix of what it applied); the hello came with the stream.
      sh->sent = sh->applied;
      sh->hello_sent = true;
      sh->upstream_id.clear();
    }
    if (const uint32_t next = PlaceInChain(*sh, m); next != ShardMap::kNone) fed.insert(next);
    if (sh->primary)
      ReleaseHeld(*sh);  // a dead backup is waited for no more
    else
      AckUpstream(*sh);  // the last copy now: it acknowledges what it applied
  }
  // Streams to servers no longer fed (dead) are closed: nothing queues for them.
  std::erase_if(peers_, [&](const auto& p) { return !fed.count(p.first); });
  // Replicates that came before this server knew its copies.
  std::deque<std::vector<zmq::message_t>> early;
  early.swap(early_.messages);
  early_.bytes = 0;
  for (auto& frames : early) HandleData(frames);
}

uint32_t Server::PlaceInChain(Shard& sh, const ShardMap& m) {
  // Every copy feeds the next one in the map's order: the primary its
  // first backup, that one the next, and so on (a chain); the last full
  // copy also feeds the copy being filled, if any (re-replication).
  // (ShardMap::kNone and Shard::kNoCopy are the same "none".)
  uint32_t next = NextCopy(m, sh.group, rank_, 1);
  const bool fill = next == Shard::kNoCopy && m.IsCopy(rank_, sh.group) && m.Joining(sh.group) != ShardMap::kNone;
  if (fill) next = m.Joining(sh.group);
  if (sh.fill.active && !fill) {
    if (next == sh.next)
      LOG_INFO << "group " << sh.group << ": server " << next << " holds a full copy now (shard map v" << m.version
               << "), " << sh.fill.sent << " parts, " << sh.fill.bytes << " bytes sent to fill it";
    else
      LOG_WARN << "group " << sh.group << ": the fill of server " << sh.next << " is over without it (shard map v"
               << m.version << ")";
    sh.fill.active = false;
    sh.fill.todo.clear();
    if (next != sh.next) sh.next = Shard::kNoCopy;  // (nothing it was sent is waited for)
  }
  const bool new_fill = fill && !(sh.fill.active && sh.next == next);
  // The copy it fed died (the map only loses copies): the next one had
  // what that one acknowledged (sh.next_acked carries over) and gets again
  // what it did not, skipping what it has. A copy being filled is filled
  // from the start instead.
  const bool replaced = sh.feeds() && next != sh.next && next != Shard::kNoCopy && !fill;
  if (!sh.feeds() || new_fill) sh.next_acked = 0;  // a first copy to feed: it has nothing yet
  sh.next = next;
  // It keeps what the copy it feeds has not acknowledged while that copy
  // feeds another — a full copy, or one being filled: the fed copy may
  // stop acknowledging at once (a fill ends and the copy waits for the new
  // one) and then die or be drained, its inputs lost to the next copy.
  const uint32_t after = NextCopy(m, sh.group, next, 1);
  const bool feeds_a_fill = m.Joining(sh.group) != ShardMap::kNone && m.Joining(sh.group) != next;
  sh.keep = sh.feeds() && !fill && (after != ShardMap::kNone || feeds_a_fill);
  if (!sh.feeds()) sh.kept.clear();
  if (new_fill) {
    StartFill(sh);
    return next;
  }
  if (sh.primary && sh.feeds() && !sh.hello_sent) SendHello(sh);
  if (replaced && !sh.kept.empty()) {
    LOG_WARN << "group " << sh.group << ": " << sh.kept.size() << " unacknowledged input(s) sent again to server " << next;
    for (auto& k : sh.kept) {
      std::vector<zmq::message_t> out;
      for (auto& f : k.frames) out.push_back(Share(f));
      SendToNext(sh, out);
    }
  }
  return next;
}

void Server::HandleInput(Shard& sh, const wire::Header& h, std::vector<zmq::message_t>& frames) {
  const bool stream = sh.feeds();
  std::vector<zmq::message_t> copy;  // header and payload, taken before a handler moves the frames
  if (stream)
    for (size_t i = 1; i < frames.size(); ++i) copy.push_back(Share(frames[i]));
  // A pull kept for delay compensation is an input too: the backups park
  // and keep it as the primary does.
  const ServerTable* t = tables_.get(h.table());
  const bool dc_pull = h.type() == wire::MsgType::Pull && h.role() == wire::Role::Worker && h.key_count() == 0 && t &&
                       EffectiveStalenessRule(t->spec()) == StalenessRule::kDelayCompensation;
  // A tick goes to the backups before it is handled: the clock it completes
  // is applied there while it is applied here (a tick the primary refuses,
  // they refuse too: the same clocks decide). Anything else goes once taken.
  const bool early = stream && h.type() == wire::MsgType::Tick;
  if (early) Forward(sh, wire::RepKind::Request, std::move(copy));
  input_.shard = &sh;
  input_.fseq = early ? sh.sent : sh.sent + 1;
  input_.changed = dc_pull;
  input_.refused = false;
  input_.request = h.request_id();
  input_.from = frames[0].to_string();
  input_.type = h.type();
  const auto arrived = Clock::now();
  switch (h.type()) {
    case wire::MsgType::Push:
      Push(sh, h, frames);
      m_.push_seconds.SingleWriterObserve(std::chrono::duration<double>(Clock::now() - arrived).count());
      break;
    case wire::MsgType::Pull: Pull(sh, h, frames, arrived); break;
    case wire::MsgType::Tick: Tick(sh, h, frames); break;
    case wire::MsgType::Join: Join(sh, h, frames); break;
    default: break;
  }
  input_.shard = nullptr;
  if (!stream) return;
  if (!early && input_.changed && !input_.refused) {
    Forward(sh, wire::RepKind::Request, std::move(copy));
  } else if (!early) {
    // Nothing to forward: its replies wait only for what came before.
    for (auto it = sh.held.rbegin(); it != sh.held.rend() && it->fseq > sh.sent; ++it) it->fseq = sh.sent;
  }
  ReleaseHeld(sh);
}

void Server::Send(std::vector<zmq::message_t>&& frames) {
  if (Shard* sh = input_.shard) {
    if (!sh->primary) return;  // a backup answers nobody: its primary did
    if (sh->feeds()) {
      // Follows from the input being handled (input_.fseq, its place in the
      // stream) and everything before it.
      sh->held.push_back({input_.fseq, std::move(frames)});
      return;
    }
  }
  SendReply(std::move(frames));
}

void Server::SendReply(std::vector<zmq::message_t>&& frames) {
  auto send = [this](std::vector<zmq::message_t>& out) { SendOut(out); };
  if (!outbox_.Add(frames, send)) SendOut(frames);
}

void Server::FlushReplies() {
  if (!outbox_.empty()) outbox_.Flush([this](std::vector<zmq::message_t>& out) { SendOut(out); });
}

void Server::SendOut(std::vector<zmq::message_t>& frames) {
  if (Status s = SendMultipart(Data(), frames); !s.ok()) LOG_WARN << "reply dropped: " << s.ToString();
}

zmq::socket_t& Server::Peer(uint32_t server) {
  const std::string endpoint = server < view_.servers.size() ? view_.servers[server] : std::string();
  auto it = peers_.find(server);
  if (it != peers_.end() && it->second.endpoint == endpoint) {
    it->second.check = true;  // (what is done on it may take in the command announcing an acknowledgement)
    return it->second.socket;
  }
  if (it != peers_.end()) peers_.erase(it);  // a new server under that rank (a replacement)
  zmq::socket_t s(ctx_, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::sndhwm, 0);  // held back by the replies it holds, not dropped
  s.set(zmq::sockopt::rcvhwm, 0);
  s.set(zmq::sockopt::routing_id, StreamId(rank_));  // the receiver knows who feeds it
  if (opts_.security.enabled) MakeCurveClient(s, opts_.security.key);
  try {
    if (server < view_.servers.size() && !view_.servers[server].empty()) s.connect(view_.servers[server]);
  } catch (const zmq::error_t& e) {  // (an endpoint the coordinator had from the server itself: not expected)
    LOG_ERROR << "cannot stream to server " << server << " at '" << view_.servers[server] << "': " << e.what();
  }
  LOG_INFO << "streaming to server " << server << " at "
           << (server < view_.servers.size() ? view_.servers[server] : std::string("?"));
  return peers_.emplace(server, PeerLink{std::move(s), endpoint}).first->second.socket;
}

void Server::SendHello(Shard& sh) {
  // The stream's first input: the version tag the group's versions carry.
  sh.hello_sent = true;
  wire::Fields f = StreamFields(sh, rank_, wire::RepKind::Hello);
  f.table_version = sh.version_tag;
  std::vector<zmq::message_t> out;
  out.push_back(wire::EncodeSimple(fbb_, f));
  Feed(sh, f.fseq, std::move(out));
}

void Server::Feed(Shard& sh, uint64_t fseq, std::vector<zmq::message_t> out) {
  if (sh.keep) {
    Shard::Kept k{fseq, {}};
    for (auto& m : out) k.frames.push_back(Share(m));
    sh.kept.push_back(std::move(k));
  }
  SendToNext(sh, out);
}

void Server::SendToNext(Shard& sh, std::vector<zmq::message_t>& out) {
  if (Status s = SendMultipart(Peer(sh.next), out); !s.ok()) LOG_WARN << "stream to server " << sh.next << ": " << s.ToString();
}

void Server::Forward(Shard& sh, wire::RepKind kind, std::vector<zmq::message_t> payload,
                     const ClusterView* membership) {
  const wire::Fields f = StreamFields(sh, rank_, kind);
  fbb_.Clear();
  std::vector<zmq::message_t> out;
  if (membership) {
    auto body = wire::BuildCluster(fbb_, *membership);
    out.push_back(wire::Encode(fbb_, f, wire::Body::ClusterInfo, body.Union()));
  } else {
    out.push_back(wire::Encode(fbb_, f));
  }
  for (auto& m : payload) out.push_back(std::move(m));
  Feed(sh, f.fseq, std::move(out));
}

WorkerClocks::Changes Server::ApplyMembership(Shard& sh) {
  input_.shard = &sh;  // pulls it releases follow from it: they wait for its place in the stream
  input_.fseq = sh.sent + 1;
  WorkerClocks::Changes changes =
      sh.clocks.SetMembership(view_.worker_ranks(), view_.live_workers, view_.retiring, view_.retired);
  Advance(sh);
  input_.shard = nullptr;
  // Forwarded when it changed (every cluster update brings the live workers).
  const bool changed = view_.membership_version != sh.membership_sent;
  sh.membership_sent = view_.membership_version;
  if (sh.feeds() && changed) {
    ClusterView live;  // what a backup's clocks need of the view
    live.consistency = view_.consistency;
    live.num_servers = view_.num_servers;
    live.num_workers = view_.num_workers;
    live.max_workers = view_.max_workers;
    live.membership_version = view_.membership_version;
    live.live_workers = view_.live_workers;
    live.retiring = view_.retiring;
    live.retired = view_.retired;
    Forward(sh, wire::RepKind::Membership, {}, &live);
  }
  ReleaseHeld(sh);
  return changes;
}

void Server::HandleReplicate(const wire::Header& h, std::vector<zmq::message_t>& frames) {
  const uint32_t g = h.group() >= 0 ? static_cast<uint32_t>(h.group()) : UINT32_MAX;
  Shard* sh = g < shards_.size() ? shards_[g].get() : nullptr;
  const int32_t sender = StreamSender(frames[0], h);
  const bool dead = std::find(view_.dead_servers.begin(), view_.dead_servers.end(),
                              static_cast<uint32_t>(sender)) != view_.dead_servers.end();
  if (!sh && (!view_.complete() || !dead) && KeepEarly(frames)) {
    // Before this server holds the map that makes it a copy of g (a backup,
    // or one being filled): kept until it does (the sender waits for the
    // acknowledgement meanwhile).
    return;
  }
  auto refuse = [&](const std::string& why) { RefuseStream(h, frames[0], why); };
  if (!sh) return refuse("server " + std::to_string(rank_) + " holds no copy of group " + std::to_string(g));
  if (MovedAway(*sh, h, sender, dead, frames)) return;
  if (sh->primary)
    return refuse("server " + std::to_string(rank_) + " is the primary of group " + std::to_string(g) +
                  " in shard map v" + std::to_string(view_.map.version) + ": the sender was declared dead");
  const uint32_t feeder = view_.map.Feeder(g, rank_);
  if (sender >= 0 && static_cast<uint32_t>(sender) != feeder && !dead && KeepEarly(frames)) {
    // A live server that feeds this copy in a map this server does not
    // hold yet (the one between them died, and the coordinator's update is
    // on its way here): kept until it does.
    return;
  }
  if (sender < 0 || static_cast<uint32_t>(sender) != feeder)
    return refuse("server " + std::to_string(sender) + " does not feed this copy of group " + std::to_string(g) +
                  " in shard map v" + std::to_string(view_.map.version) + " (server " + std::to_string(feeder) +
                  " does)");
  const uint64_t fseq = h.fseq();
  sh->upstream_id = frames[0].to_string();
  const bool fill = h.rep() == wire::RepKind::FillBegin || h.rep() == wire::RepKind::FillPart ||
                    h.rep() == wire::RepKind::FillEnd;
  if (sh->filled.failed && h.rep() != wire::RepKind::FillBegin) return;  // (told once; the next map ends it)
  if (fill) {
    if (Status s = ApplyFill(*sh, h, frames); !s.ok()) {
      sh->filled.failed = true;
      ReportFilled(*sh, s);
      return refuse(s.message());
    }
    return AckUpstream(*sh, true);
  }
  if (!sh->filled.done && !sh->filled.begun)
    return refuse("group " + std::to_string(g) + "'s copy here is being filled: input " + std::to_string(fseq) +
                  " came before its state");
  if (fseq <= sh->applied) {
    // Sent again by a copy that now feeds this one (the one between died):
    // applied already.
    sh->acked_up = 0;  // (acknowledged again to the new sender)
    AckUpstream(*sh);
    return;
  }
  if (fseq != sh->applied + 1)
    return refuse("input " + std::to_string(fseq) + " of group " + std::to_string(g) + " after input " +
                  std::to_string(sh->applied) + ": the stream lost inputs");
  // On down the chain first (as a primary does with a tick: the copies
  // apply it side by side), as it came.
  if (sh->feeds()) {
    std::vector<zmq::message_t> out;
    for (size_t i = 1; i < frames.size(); ++i) out.push_back(Share(frames[i]));
    Feed(*sh, fseq, std::move(out));
    sh->sent = fseq;
  }
  // Acknowledged as it is taken (the last copy; the others once every copy
  // after them has it), then applied: the primary need not wait for the
  // optimizer steps (the copies apply the same inputs in this order
  // whatever comes; a copy that dies has nothing to offer anyway).
  sh->applied = fseq;
  AckUpstream(*sh);
  ApplyReplicated(*sh, h, frames);
}

bool Server::MovedAway(Shard& sh, const wire::Header& h, int32_t sender, bool dead,
                       std::vector<zmq::message_t>& frames) {
  // A move (rebalance): this copy left the group, or the sender's did. Its
  // inputs are not lost: the copy before the one that left keeps what the
  // copies after it have not acknowledged, and sends it on in the new map.
  if (sh.left) {
    // (A fill into it again may come before the map that makes it a copy
    // again: kept until then, as for a server that never held the group.)
    const bool early_fill = h.rep() == wire::RepKind::FillBegin || sh.early_fill_from == sender;
    if (early_fill && !dead && KeepEarly(frames)) sh.early_fill_from = sender;
    return true;
  }
  return sender >= 0 && !dead && view_.complete() && !view_.map.Holds(static_cast<uint32_t>(sender), sh.group);
}

void Server::RefuseStream(const wire::Header& h, const zmq::message_t& from, const std::string& why) {
  LOG_ERROR << "stream of group " << h.group() << " from server " << h.rank() << " refused: " << why;
  wire::Fields f;
  f.request_id = h.request_id();
  f.group = h.group();
  f.fseq = h.fseq();
  f.error = wire::ErrorCode::WrongServer;
  f.message = why;
  std::vector<zmq::message_t> out;
  out.emplace_back(from.data(), from.size());
  out.push_back(wire::EncodeSimple(fbb_, f));
  (void)SendMultipart(Data(), out);
}

bool Server::KeepEarly(std::vector<zmq::message_t>& frames) {
  const uint64_t bytes = FramesBytes(frames);
  if (early_.messages.size() >= 65536 || early_.bytes + bytes > opts_.held_bytes) {
    LOG_ERROR << "a stream message that came before its shard map is refused: " << early_.messages.size()
              << " messages, " << early_.bytes << " bytes wait already (the held-bytes limit)";
    return false;
  }
  early_.bytes += bytes;
  early_.messages.push_back(std::move(frames));
  return true;
}

void Server::AckUpstream(Shard& sh, bool fill) {
  const uint64_t a = sh.Ackable();
  if (sh.primary || sh.upstream_id.empty() || (a <= sh.acked_up && !fill)) return;
  sh.acked_up = std::max(sh.acked_up, a);
  wire::Fields ack;
  ack.group = static_cast<int32_t>(sh.group);
  ack.fseq = a;
  ack.seq = sh.filled.parts;  // a copy being filled: the parts it installed
  ack.role = wire::Role::Server;
  ack.rank = static_cast<int32_t>(rank_);
  std::vector<zmq::message_t> out;
  out.emplace_back(sh.upstream_id.data(), sh.upstream_id.size());
  out.push_back(wire::EncodeSimple(fbb_, ack));
  if (Status s = SendMultipart(Data(), out); !s.ok()) LOG_WARN << "acknowledgement dropped: " << s.ToString();
}

void Server::ApplyReplicated(Shard& sh, const wire::Header& h, std::vector<zmq::message_t>& frames) {
  switch (h.rep()) {
    case wire::RepKind::Hello:
      sh.version_tag = h.table_version();
      return;
    case wire::RepKind::Membership: {
      ClusterView live;
      if (Status s = wire::DecodeCluster(h.body_as_ClusterInfo(), &live); !s.ok()) {
        LOG_ERROR << "group " << sh.group << ": bad live workers from the primary: " << s.ToString();
        return;
      }
      input_.shard = &sh;
      sh.clocks.SetMembership(live.worker_ranks(), live.live_workers, live.retiring, live.retired);
      Advance(sh);
      input_.shard = nullptr;
      return;
    }
    case wire::RepKind::Request: {
      // [primary's routing id][Replicate][the request's header][its frames]:
      // the request as the primary took it, its routing id the primary's.
      if (frames.size() < 3) return;
      std::vector<zmq::message_t> request;
      request.emplace_back(frames[0].data(), frames[0].size());
      for (size_t i = 2; i < frames.size(); ++i) request.push_back(std::move(frames[i]));
      std::vector<uint64_t> scratch;
      const wire::Header* in = nullptr;
      if (Status s = wire::ParseHeader(request[1], scratch, &in); !s.ok()) {
        LOG_ERROR << "group " << sh.group << ": bad request from the primary: " << s.ToString();
        return;
      }
      input_.shard = &sh;
      input_.request = in->request_id();
      input_.from = request[0].to_string();
      input_.type = in->type();
      switch (in->type()) {
        case wire::MsgType::Push: Push(sh, *in, request); break;
        case wire::MsgType::Pull: Pull(sh, *in, request, Clock::now()); break;
        case wire::MsgType::Tick: Tick(sh, *in, request); break;
        case wire::MsgType::Join: Join(sh, *in, request); break;
        default: LOG_ERROR << "group " << sh.group << ": the primary forwarded a '" << wire::EnumNameMsgType(in->type()) << "'";
      }
      input_.shard = nullptr;
      return;
    }
    default:  // (fills are applied by ApplyFill before this)
      LOG_ERROR << "group " << sh.group << ": a stream message of kind " << static_cast<int>(h.rep()) << " is not an input";
      return;
  }
}

bool Server::ReceiveAcks() {
  std::vector<zmq::message_t> frames;
  bool more = false;
  for (auto& [server, peer] : peers_) {
    if (!peer.check) continue;  // nothing announced, nothing sent since it was read to the end (Run)
    int i = 0;
    for (; i < 1024 && RecvMultipart(peer.socket, &frames); ++i) {
      const wire::Header* h = nullptr;
      if (frames.empty() || !wire::ParseHeader(frames[0], header_scratch_, &h).ok()) continue;
      const int g = h->group();
      Shard* sh = g >= 0 && static_cast<size_t>(g) < shards_.size() ? shards_[g].get() : nullptr;
      if (Status s = wire::ReplyStatus(h); !s.ok()) {
        if (sh && sh->fill.active && server == sh->next) {
          // The copy being filled refused its state (it says why, and tells
          // the coordinator): this copy goes on, the fill is over.
          LOG_ERROR << "group " << g << ": server " << server << " refused its fill: " << s.ToString();
          sh->fill.todo.clear();
          continue;
        }
        if (draining_ || (sh && (sh->leaving || sh->left))) {
          // Drained, or this copy moved away: the copy after it took its
          // place (its last inputs were for a map that no longer has it).
          LOG_INFO << "group " << g << ": server " << server << " no longer takes this server's stream (drained or moved): "
                   << s.message();
          continue;
        }
        // A backup that is the primary now: this server was declared dead
        // (it is fenced off); any other refusal: the copies differ.
        fatal_ = Status(s.code(), "server " + std::to_string(server) + " refused group " + std::to_string(g) +
                                      "'s stream: " + s.message());
        LOG_ERROR << fatal_.message() << "; this server stops";
        shutdown_ = true;
        return false;
      }
      if (!sh || server != sh->next) continue;  // (a late one from a copy no longer fed)
      sh->next_acked = std::max(sh->next_acked, h->fseq());
      while (!sh->kept.empty() && sh->kept.front().fseq <= sh->next_acked) sh->kept.pop_front();
      if (sh->fill.active) {
        sh->fill.acked = std::max(sh->fill.acked, h->seq());
        PumpFill(*sh);
      }
      if (sh->primary)
        ReleaseHeld(*sh);
      else
        AckUpstream(*sh);  // every copy after this one has it now
    }
    if (i < 1024) peer.check = false;  // read to the end after anything sent on it above
    more |= i == 1024;
  }
  return more;
}

void Server::ReleaseHeld(Shard& sh) {
  if (sh.held.empty()) return;
  std::vector<std::vector<zmq::message_t>> go;
  sh.TakeReleasable(&go);
  for (auto& frames : go) SendReply(std::move(frames));
}

}  // namespace shardps
