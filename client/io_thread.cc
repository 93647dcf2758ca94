#include "client/io_thread.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <unordered_map>

#include "client/io_loop.h"
#include "common/base/log.h"
#include "common/net/handshake.h"
#include "common/net/net.h"

namespace shardps::detail {


// ---- IoThread: the callers' side ----

IoThread::IoThread(const ClientOptions& opts, const Sender& self) : opts_(opts), self_(self) {}

IoThread::~IoThread() {
  Stop();
  if (efd_ >= 0) ::close(efd_);
}

Status IoThread::Start(std::optional<KeyFile> key) {
  efd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (efd_ < 0) return Status::Internal("eventfd failed");
  loop_ = std::make_unique<IoLoop>(*this, std::move(key));
  if (Status s = loop_->ConnectCoordinator(); !s.ok()) return s;
  thread_ = std::thread([loop = loop_.get()] { loop->Run(); });
  return Status::OK();
}

void IoThread::Stop() {
  if (!thread_.joinable()) return;
  Outgoing o;
  o.kind = Outgoing::kStop;
  Enqueue(std::move(o));
  thread_.join();
}

// ---- IoLoop: the I/O thread ----


// The loop sleeps in poll(2) on the wake-up eventfd and the sockets'
// ZMQ_FDs, not in zmq_poll (it asks every socket for ZMQ_EVENTS around two
// poll(2) calls: docs/performance.md, "The small-request path"). A ZMQ_FD
// only signals new commands, and any operation on a socket may take in the
// one that announced a reply, so a socket whose ZMQ_FD fired or that was
// sent on (Check) is read until empty after the last send of the pass
// before the loop sleeps; the others are not read (two system calls each).
// A pass that slept its full time reads every socket and monitor.
void IoLoop::Run() {
  SetThreadLogName("client");
  std::deque<Outgoing> batch;
  std::vector<pollfd> fds;
  bool unread = false;  // a socket may still hold replies (ReceiveAll)
  auto next_hb = Clock::now();
  auto next_expiry = Clock::now();
  bool stop = false;
  CheckAll();
  while (!stop) {
    fds.clear();
    fds.push_back({io.efd_, POLLIN, 0});
    for (auto& m : monitors) fds.push_back({m.pair.get(zmq::sockopt::fd), POLLIN, 0});
    const size_t first_socket = fds.size();
    fds.push_back({coord.get(zmq::sockopt::fd), POLLIN, 0});
    for (auto& s : servers) fds.push_back({s.get(zmq::sockopt::fd), POLLIN, 0});
    const bool slept = !unread && io.PrepareToSleep();
    const int n = ::poll(fds.data(), fds.size(), slept ? 50 : 0);
    if (fds[0].revents & POLLIN) {
      uint64_t v;
      ssize_t r = ::read(io.efd_, &v, sizeof v);
      (void)r;
    }
    const bool all = slept && n == 0;  // (then every socket and monitor is read)
    for (size_t i = first_socket; i < fds.size(); ++i)
      if (fds[i].revents) Check(static_cast<int>(i - first_socket) - 1);
    for (size_t i = 0; i < monitors.size(); ++i)
      if (all || (fds[1 + i].revents & POLLIN)) OnMonitor(monitors[i]);
    if (all) {
      // Every socket is read, before anything is sent; a reply found while
      // its socket still does not signal was missed (late_replies).
      const bool quiet = ::poll(fds.data() + first_socket, fds.size() - first_socket, 0) == 0;
      CheckAll();
      uint64_t found = 0;
      unread = ReceiveAll(&found);
      if (quiet) io.late_replies_.fetch_add(found, std::memory_order_relaxed);
    }
    io.TakeQueued(&batch);
    SendHeldForCoordinator();
    RunQueued(batch, &stop);
    const auto now = Clock::now();
    // A worker heartbeats; an observer too while it waits for answers, so
    // that a fail-over's map reaches it with the heartbeat's reply.
    if (now >= next_hb && (self.worker() || !pending.empty())) {
      next_hb = now + opts.heartbeat_interval;
      Heartbeat();
    }
    if (now >= next_expiry) {
      next_expiry = now + Millis(100);
      ExpireRequests(now);
    }
    // Replies free deferred requests (a sync tick waits for the answers
    // of the pushes before it); what they send is read for again.
    for (;;) {
      unread = ReceiveAll();
      const uint64_t before = sends;
      SendDeferred();
      FlushOut();
      if (sends == before) break;
    }
  }
  Close();
}

void IoLoop::RunQueued(std::deque<Outgoing>& batch, bool* stop) {
  for (auto& o : batch) {
    if (o.kind == Outgoing::kStop) {
      *stop = true;
    } else if (o.kind == Outgoing::kConnect) {
      FlushOut();
      ConnectServers(o.endpoints);
    } else if (o.kind == Outgoing::kMap) {
      FlushOut();
      ApplyMap(std::move(o.map));
    } else if (o.after_pushes || (!deferred.empty() && o.target >= 0)) {
      // Behind the pushes sent so far (and a server's request behind what
      // waits already: the order requests were issued in is kept; the
      // coordinator's do not wait).
      deferred.push_back({std::move(o)});
      SendDeferred();
    } else {
      Send(o);
    }
  }
  batch.clear();
  FlushOut();
}

void IoLoop::SendDeferred() {
  while (!deferred.empty()) {
    Deferred& d = deferred.front();
    if (d.o.after_pushes && !d.armed) {
      // Every push queued before it went out: it waits for those sent so far.
      d.armed = true;
      d.after = sends;
    }
    const uint64_t after = d.after;
    if (after > 0 &&
        std::any_of(pending.begin(), pending.end(), [&](const auto& p) { return p.second.push && p.second.order <= after; }))
      break;
    Outgoing o = std::move(deferred.front().o);
    deferred.pop_front();
    Send(o);
  }
}

bool IoLoop::ReceiveAll(uint64_t* read) {
  uint64_t got = 0;
  check.resize(servers.size() + 1, 1);  // (a longer server list: its new sockets are read; a shorter: flags gone)
  if (check[0]) {
    for (; RecvMultipart(coord, &frames); ++got) OnReply(frames, -1);
    check[0] = 0;
  }
  for (size_t i = 0; i < servers.size(); ++i) {
    if (i + 1 >= check.size() || !check[i + 1]) continue;
    int k = 0;
    for (; k < 1024 && RecvMultipart(servers[i], &frames); ++k, ++got) OnReply(frames, static_cast<int>(i));
    // (Read to the end after any send by a reply; the others go before a
    // server's 1025th reply. A reply may have changed the server list.)
    if (k < 1024 && i + 1 < check.size()) check[i + 1] = 0;
  }
  if (read) *read = got;
  // A reply may have sent on a socket read before it.
  return std::find(check.begin(), check.end(), 1) != check.end();
}

void IoLoop::Close() {
  for (auto& [id, p] : pending) p.call->PartDone(Status::Unavailable("client is closed"), false, 0, 0);
  pending.clear();
  for (auto& d : deferred) d.o.call->PartDone(Status::Unavailable("client is closed"), false, 0, 0);
  deferred.clear();
  servers.clear();
  coord.close();
  monitors.clear();
}

void IoLoop::Secure(zmq::socket_t& s, int target) {
  if (key) MakeCurveClient(s, *key);
  const std::string ep = "inproc://shardps-client-monitor-" + std::to_string(reinterpret_cast<uintptr_t>(this)) +
                         "-" + std::to_string(monitor_seq++);
  monitors.push_back({WatchHandshakes(ctx, s, ep), target, 0, 0});
}

void IoLoop::OnMonitor(Monitor& m) {
  std::string why;
  for (Handshake h; (h = ReadHandshakeEvent(m.pair, key ? &*key : nullptr, &why)) != Handshake::kNone;) {
    if (h == Handshake::kSucceeded) {
      m.drops = 0;
      refused.erase(m.target);
      if (m.target < 0 && m.connected++ > 0) io.coord_reconnects_.fetch_add(1);
      continue;
    }
    if (h == Handshake::kDropped) {
      if (++m.drops < kDropsToRefuse) continue;
      why = DroppedHandshakesWhy(key ? &*key : nullptr);
    }
    const std::string msg = PeerName(m.target) + ": " + why;
    if (refused.emplace(m.target, msg).second) LOG_WARN << msg;
    FailPending(m.target, Status::PermissionDenied(msg));
  }
}

void IoLoop::FailPending(int target, const Status& s) {
  for (auto it = pending.begin(); it != pending.end();) {
    if (it->second.target != target) {
      ++it;
      continue;
    }
    it->second.call->PartDone(s, false, 0, 0);
    it = pending.erase(it);
  }
}

zmq::socket_t IoLoop::ServerSocket(int rank, const std::string& ep) {
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::sndhwm, 0);
  s.set(zmq::sockopt::rcvhwm, 0);
  Secure(s, rank);
  if (!ep.empty()) s.connect(ep);
  return s;
}

void IoLoop::ConnectServers(const std::vector<std::string>& eps) {
  if (!servers.empty() && eps.size() >= servers.size()) {
    // A server replaced (a new process under a dead one's rank) or ranks
    // added (shardps-ctl add-server): only their sockets are made; the
    // others keep what is in flight on them.
    for (size_t r = 0; r < eps.size(); ++r) {
      if (r >= servers.size()) {
        servers.push_back(ServerSocket(static_cast<int>(r), eps[r]));
        endpoints.push_back(eps[r]);
        if (!eps[r].empty()) LOG_INFO << "server " << r << " (added to the job) is at " << eps[r];
        continue;
      }
      if (eps[r] == endpoints[r] || eps[r].empty()) continue;
      std::erase_if(monitors, [&](const Monitor& m) { return m.target == static_cast<int>(r); });
      refused.erase(static_cast<int>(r));
      zmq::socket_t s = ServerSocket(static_cast<int>(r), eps[r]);
      servers[r].close();
      servers[r] = std::move(s);
      LOG_INFO << "server " << r << " is at " << eps[r] << " now (was " << (endpoints[r].empty() ? "none" : endpoints[r]) << ")";
      endpoints[r] = eps[r];
    }
    return;
  }
  // A new server list (first time, or fewer servers): reconnect all.
  servers.clear();
  std::erase_if(monitors, [](const Monitor& m) { return m.target >= 0; });
  std::erase_if(refused, [](const auto& r) { return r.first >= 0; });
  endpoints = eps;
  for (size_t r = 0; r < eps.size(); ++r) servers.push_back(ServerSocket(static_cast<int>(r), eps[r]));
}

bool IoLoop::ApplyMap(std::shared_ptr<const ShardMap> m) {
  if (!m || (map && m->version <= map->version)) return false;
  replicated |= m->ReplicaStride() > 1 || !m->joining.empty();
  const bool first = !map;
  std::shared_ptr<const ShardMap> old = std::move(map);
  map = std::move(m);
  if (first) return true;
  // A server that served a group and holds none now is dead (or drained):
  // its socket goes, and with it what was queued for it (a push's borrowed
  // gradients are the caller's again once every copy of them is released).
  // One that still holds copies (a move took its primaries) keeps its
  // socket: it may serve again.
  std::vector<uint8_t> serves(servers.size(), 0);
  for (uint32_t g = 0; g < map->groups(); ++g)
    if (map->Primary(g) < serves.size()) serves[map->Primary(g)] = 1;
  for (uint32_t g = 0; g < old->groups(); ++g) {
    const uint32_t r = old->Primary(g);
    if (r >= servers.size() || serves[r]) continue;
    serves[r] = 1;  // once
    if (map->Load(r) > 0) continue;
    servers[r].close();
    servers[r] = zmq::socket_t(ctx, zmq::socket_type::dealer);  // never connected: nothing goes there
    std::erase_if(monitors, [&](const Monitor& mon) { return mon.target == static_cast<int>(r); });
    LOG_INFO << "shard map v" << map->version << ": " << PeerName(static_cast<int>(r)) << " serves nothing any more";
    endpoints[r].clear();  // (a later view naming it connects it again: a server given copies again)
  }
  // The requests in flight to a group now served elsewhere, sent again there
  // in the order they were first sent.
  std::vector<std::pair<uint64_t, uint64_t>> moved;  // (order, request id)
  for (auto& [id, p] : pending)
    if (p.group >= 0 && static_cast<uint32_t>(p.group) < map->groups() &&
        map->Primary(static_cast<uint32_t>(p.group)) != static_cast<uint32_t>(p.target))
      moved.emplace_back(p.order, id);
  std::sort(moved.begin(), moved.end());
  size_t resent = 0;
  for (const auto& [order, id] : moved) {
    Pending& p = pending[id];
    const int to = static_cast<int>(map->Primary(static_cast<uint32_t>(p.group)));
    if (static_cast<size_t>(to) >= servers.size()) continue;
    if (p.frames.empty()) {  // (not kept: sent when no map had two copies)
      LOG_WARN << "request " << id << " to " << PeerName(p.target) << " was not kept: not sent again to " << PeerName(to);
      continue;
    }
    ++resent;
    std::vector<zmq::message_t> again;
    for (auto& f : p.frames) again.emplace_back().copy(f);
    p.target = to;
    Check(to);
    if (Status st = SendMultipart(servers[to], again); !st.ok())
      LOG_WARN << "request " << id << " not sent again to " << PeerName(to) << ": " << st.ToString();
  }
  if (resent > 0)
    LOG_INFO << "shard map v" << map->version << ": " << resent << " request(s) in flight sent again to the "
             << "servers now serving their groups";
  return true;
}

void IoLoop::OnClusterView(const wire::Header& h) {
  ClusterView v;
  if (Status s = wire::DecodeCluster(h.body_as_ClusterInfo(), &v); !s.ok()) {
    LOG_ERROR << "bad cluster view from the coordinator: " << s.ToString();
    return;
  }
  // (a server replaced, or ranks added: shardps-ctl add-server)
  if (!servers.empty() && v.servers.size() >= servers.size() && v.servers != endpoints) ConnectServers(v.servers);
  if (!ApplyMap(std::make_shared<const ShardMap>(v.map))) return;
  if (io.on_cluster_) io.on_cluster_(std::move(v));
}

void IoLoop::Send(Outgoing& o) {
  if (o.group >= 0 && map && static_cast<uint32_t>(o.group) < map->groups())
    o.target = static_cast<int>(map->Primary(static_cast<uint32_t>(o.group)));
  zmq::socket_t* s = nullptr;
  if (o.target < 0)
    s = &coord;
  else if (static_cast<size_t>(o.target) < servers.size())
    s = &servers[o.target];
  if (!s) {
    o.call->PartDone(Status::Unavailable("not connected to server " + std::to_string(o.target)), false, 0, 0);
    return;
  }
  if (auto r = refused.find(o.target); r != refused.end()) {
    o.call->PartDone(Status::PermissionDenied(r->second), false, 0, 0);
    return;
  }
  Pending& p = pending[o.request_id] = {o.call, std::move(o.dest), o.target, Clock::now() + o.timeout,
                                        o.group, ++sends, {}, o.push};
  if (o.group >= 0 && o.resendable && replicated)  // kept to be sent again after a fail-over
    for (auto& f : o.frames) p.frames.emplace_back().copy(f);
  if (o.target >= 0) {
    // Gathered with the server's other requests of this pass (FlushOut).
    out.resize(std::max(out.size(), servers.size()));
    Out& q = out[static_cast<size_t>(o.target)];
    if (!q.env.Fits(o.frames.size())) FlushOut();
    if (q.env.empty()) out_queued.push_back(o.target);
    q.env.Add(o.frames);
    q.ids.push_back(o.request_id);
    return;
  }
  Check(o.target);
  if (o.target < 0 && !coord_waiting.empty()) {  // (in order, after those held)
    coord_waiting.push_back(std::move(o.frames));
    return;
  }
  Status st = SendMultipart(*s, o.frames);
  if (!st.ok() && o.target < 0 && HoldForCoordinator(o.frames)) return;
  if (!st.ok()) SendFailed(o.target, st, {o.request_id});
}



void IoLoop::FlushOut() {
  for (int target : out_queued) {
    Out& q = out[static_cast<size_t>(target)];
    out_frames.clear();
    q.env.Take(env_fbb, &out_frames);
    Check(target);
    Status st = SendMultipart(servers[static_cast<size_t>(target)], out_frames);
    if (!st.ok()) SendFailed(target, st, q.ids);
    q.ids.clear();
  }
  out_queued.clear();
}

void IoLoop::SendFailed(int target, const Status& st, const std::vector<uint64_t>& ids) {
  zmq::socket_t& s = target < 0 ? coord : servers[static_cast<size_t>(target)];
  // A handshake that failed with a protocol error (a refused key, no key at
  // a job with security on) takes the socket's pipe away, so the send would
  // block; the monitor has the reason already, and it fails these requests
  // (and the target's others) with it.
  for (auto& m : monitors)
    if (m.target == target) OnMonitor(m);
  // Without a send limit (sndhwm 0), a socket that takes nothing has no
  // connection left to queue on.
  const std::string why = (s.get(zmq::sockopt::events) & ZMQ_POLLOUT) == 0
                              ? "no connection to send on (its handshake failed)"
                              : st.message();
  for (uint64_t id : ids) {
    auto it = pending.find(id);
    if (it == pending.end()) continue;
    it->second.call->PartDone(Status::Unavailable(PeerName(target) + ": " + why), false, 0, 0);
    pending.erase(it);
  }
}

void IoLoop::OnReply(std::vector<zmq::message_t>& frames, int from) {
  const wire::Header* h = nullptr;
  Status s = wire::ParseHeader(frames[0], scratch, &h);
  if (!s.ok()) {
    LOG_ERROR << "bad reply from " << PeerName(from) << ": " << s.ToString();
    return;
  }
  if (h->type() == wire::MsgType::Envelope) {  // a server's replies gathered: each as if it came alone
    std::vector<uint32_t> counts;
    if (s = wire::EnvelopeParts(*h, frames.size() - 1, &counts); !s.ok())
      LOG_ERROR << "bad reply from " << PeerName(from) << ": " << s.ToString();
    else
      wire::ForEachMessage(frames, 1, counts, nullptr, [&](auto& part) { OnReply(part, from); });
    return;
  }
  if (from < 0 && h->stopping()) io.stop_requested_.store(true, std::memory_order_relaxed);
  auto it = pending.find(h->request_id());
  if (it == pending.end() && from < 0 && h->body_type() == wire::Body::ClusterInfo) return OnClusterView(*h);
  if (it != pending.end() && from >= 0 && it->second.target != from) return;  // from a server no longer serving it
  if (it == pending.end()) {
    Status rs = wire::ReplyStatus(h);
    if (!rs.ok()) LOG_WARN << PeerName(from) << ": " << rs.ToString();
    return;
  }
  Pending p = std::move(it->second);
  pending.erase(it);
  s = wire::ReplyStatus(h);
  if (s.ok() && p.dest.wants_values()) s = PlaceValues(p.dest, frames, PeerName(from));
  if (p.dest.keep_reply) p.call->reply = std::move(frames[0]);
  // A pull's versions are its replica groups' (without replicas, the servers').
  p.call->PartDone(s, p.dest.clocks && s.ok(), h->min_clock(), h->max_clock(), p.group >= 0 ? p.group : from,
                   p.dest.clocks ? h->table_version() : h->staleness());
}

void IoLoop::Heartbeat() {
  const int rank = self.rank.load();
  if (rank < 0 && self.worker()) return;  // (not registered yet; an observer has no rank)
  wire::Fields f;
  f.type = wire::MsgType::Heartbeat;
  f.request_id = io.NextRequestId();
  f.role = self.wire_role();
  f.rank = rank;
  f.clock = self.clock.load(std::memory_order_relaxed);
  f.map_version = map ? map->version : 0;  // an older one than the coordinator's: the new view comes back
  const uint64_t samples = self.samples.load(std::memory_order_relaxed);
  Check(-1);
  if (!self.row_cache && samples == 0) {
    coord.send(wire::EncodeSimple(fbb, f), zmq::send_flags::dontwait);
    return;
  }
  const RowCache::Stats st = self.row_cache ? self.row_cache->stats() : RowCache::Stats{};
  fbb.Clear();
  auto body = wire::CreateWorkerStats(fbb, st.lookups, st.hits, samples);
  coord.send(wire::Encode(fbb, f, wire::Body::WorkerStats, body.Union()), zmq::send_flags::dontwait);
}

void IoLoop::ExpireRequests(Clock::time_point now) {
  for (auto it = pending.begin(); it != pending.end();) {
    if (now < it->second.deadline) {
      ++it;
      continue;
    }
    const Call& call = *it->second.call;
    it->second.call->PartDone(Status::Timeout(std::string(call.op) + " to " + PeerName(it->second.target) +
                                              " got no answer in time (request " + std::to_string(it->first) + ")"),
                              false, 0, 0);
    it = pending.erase(it);
  }
}

std::string IoLoop::PeerName(int target) const {
  if (target < 0) return "coordinator " + opts.coordinator;
  return "server " + std::to_string(target) +
         (static_cast<size_t>(target) < endpoints.size() ? " (" + endpoints[target] + ")" : "");
}

}  // namespace shardps::detail
