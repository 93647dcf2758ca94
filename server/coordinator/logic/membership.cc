#include "server/coordinator/logic/membership.h"

#include <algorithm>
#include <climits>

#include "common/base/log.h"

namespace shardps {

const char* WorkerStateName(WorkerState s) {
  static const char* names[] = {"pending", "alive", "left", "dead", "vacant"};
  return names[static_cast<int>(s)];
}

Membership::Membership(const Options& o) : opts_(o) {
  servers_.resize(opts_.num_servers);
  workers_.resize(std::max(opts_.num_workers, opts_.max_workers));
  for (uint32_t r = opts_.num_workers; r < workers_.size(); ++r) workers_[r].state = WorkerState::kVacant;
}

Status Membership::RegisterServer(const std::string& from, const Registration& req, Clock::time_point now,
                                  int* out, bool* replaced) {
  if (replaced) *replaced = false;
  if (IsDeadServer(from)) return Status::Conflict("this server was declared dead: it does not come back in this job");
  if (req.endpoint.empty()) return Status::InvalidArgument("a server must give its endpoint");
  int rank = req.requested_rank;
  for (uint32_t r = 0; r < servers_.size() && rank < 0; ++r)  // its Register sent again
    if (servers_[r].registered && servers_[r].routing_id == from) rank = static_cast<int>(r);
  if (rank < 0) {
    for (uint32_t r = 0; r < servers_.size() && rank < 0; ++r)
      if (!servers_[r].registered) rank = static_cast<int>(r);
    if (rank < 0)
      return Status::Conflict("all " + std::to_string(servers_.size()) +
                              " server ranks are taken (shardps-ctl add-server opens one more while the job runs)");
  }
  if (rank >= static_cast<int>(servers_.size()))
    return Status::InvalidArgument("server rank " + std::to_string(rank) + " but the job has " +
                                   std::to_string(servers_.size()) + " servers");
  ServerSlot& slot = servers_[rank];
  if (slot.dead && !opts_.replace_dead)
    return Status::Conflict("server rank " + std::to_string(rank) +
                            " was declared dead and its partitions failed over to their backups; it does not "
                            "come back in this job");
  if (slot.dead) {
    // A replacement: a new server under the dead one's rank (filled with
    // copies by the coordinator); the dead one stays fenced off.
    if (!slot.routing_id.empty()) fenced_.push_back(slot.routing_id);
    slot.dead = false;
    slot.registered = false;
    if (replaced) *replaced = true;
    LOG_WARN << "server " << rank << " was declared dead: a new server at " << req.endpoint << " replaces it";
  }
  if (slot.registered && slot.alive && slot.routing_id != from)
    return Status::Conflict("server rank " + std::to_string(rank) + " is held by a live server at " + slot.endpoint);
  const bool rejoin = slot.registered;
  slot.registered = true;
  slot.alive = true;
  slot.adopt = false;
  slot.routing_id = from;
  slot.endpoint = req.endpoint;
  slot.last_seen = now;
  slot.id = req.id;
  slot.budget = req.memory_budget;
  slot.prev = slot.last = StatsSample{};
  LOG_INFO << "server " << rank << (rejoin ? " re-registered" : " registered") << " at " << slot.endpoint;
  *out = rank;
  return Status::OK();
}

Status Membership::RegisterWorker(const std::string& from, const Registration& req, bool stopping,
                                  Clock::time_point now, int* out, Join* how) {
  if (stopping) return Status::Unavailable("the job is stopping (shardps-ctl stop): no worker joins it now");
  int rank = req.requested_rank;
  for (uint32_t r = 0; r < workers_.size() && rank < 0; ++r)  // its Register sent again
    if (workers_[r].state == WorkerState::kAlive && workers_[r].routing_id == from) rank = static_cast<int>(r);
  for (WorkerState want : {WorkerState::kPending, WorkerState::kDead, WorkerState::kVacant})
    for (uint32_t r = 0; r < workers_.size() && rank < 0; ++r)
      if (workers_[r].state == want) rank = static_cast<int>(r);
  if (rank < 0)
    return Status::Conflict("all " + std::to_string(workers_.size()) +
                            " worker ranks are taken (raise [job] max_workers to let more join)");
  if (rank >= static_cast<int>(workers_.size()))
    return Status::InvalidArgument("worker rank " + std::to_string(rank) + " but the job has " +
                                   std::to_string(workers_.size()) + " worker ranks" +
                                   (workers_.size() > opts_.num_workers ? " (max_workers)" : ""));
  WorkerSlot& slot = workers_[rank];
  const Identity& id = req.id;
  const bool same_process = slot.id.pid == id.pid && slot.id.host == id.host && id.pid != 0;
  *out = rank;
  if (slot.state == WorkerState::kAlive && (slot.routing_id == from || same_process)) {
    // The same process sent its Register again (the coordinator restarted
    // before it answered): the same answer.
    slot.routing_id = from;
    slot.last_seen = now;
    *how = Join::kAgain;
    return Status::OK();
  }
  if (slot.state == WorkerState::kAlive)  // a restarted worker retries until the old one is declared dead
    return Status::NotReady("worker rank " + std::to_string(rank) + " is held by a live worker" +
                            (slot.id.host.empty() ? "" : " on " + slot.id.host) +
                            " (a dead one is declared dead after " + std::to_string(opts_.heartbeat_timeout.count()) +
                            " ms of silence)");
  if (slot.state == WorkerState::kLeft)
    return Status::Conflict("worker rank " + std::to_string(rank) + " finished and left the job");
  // A dead or vacant rank joins the running job: the servers learn it is
  // live (the update goes out before the reply), and the worker asks each
  // server where its clock starts (Join).
  const bool joins_running = slot.state != WorkerState::kPending;
  slot.state = WorkerState::kAlive;
  slot.last_seen = now;
  slot.id = id;
  slot.routing_id = from;
  slot.clock = 0;
  LOG_INFO << "worker " << rank << (joins_running ? " joined the running job" : " joined")
           << (id.host.empty() ? "" : " from " + id.host);
  *how = joins_running ? Join::kJoinedRunning : Join::kJoined;
  return Status::OK();
}

Membership::Heard Membership::Hear(const std::string& from, Speaker speaker, int rank, bool is_register,
                                   Clock::time_point now) {
  Heard heard;
  heard.server = ServerRankOf(from);
  if (heard.server < 0 && speaker == Speaker::kServer && rank >= 0 && rank < static_cast<int>(servers_.size()) &&
      servers_[rank].adopt && !is_register) {
    // A resumed coordinator: a server of the saved job, still serving (its
    // first message, a heartbeat or a snapshot report, brings it back).
    ServerSlot& s = servers_[rank];
    s.adopt = false;
    s.registered = s.alive = true;
    s.routing_id = from;
    s.last_seen = now;
    heard.server = rank;
    heard.adopted = true;
    LOG_INFO << "server " << rank << " at " << s.endpoint << " is back";
  }
  if (heard.server >= 0) {
    ServerSlot& s = servers_[heard.server];
    s.last_seen = now;
    if (!s.alive) {
      s.alive = true;
      LOG_INFO << "server " << heard.server << " is answering again";
    }
  }
  if (speaker == Speaker::kWorker && rank >= 0 && rank < static_cast<int>(workers_.size()))
    workers_[rank].last_seen = now;
  return heard;
}

Status Membership::WorkerHeartbeat(int rank, int64_t clock) {
  WorkerSlot& w = workers_[rank];
  if (w.state != WorkerState::kAlive)
    return Status::Unavailable("worker " + std::to_string(rank) + " was declared dead or has left");
  w.clock = std::max(w.clock, clock);
  return Status::OK();
}

void Membership::ServerHeartbeat(int server, const ServerReport& r) {
  ServerSlot& s = servers_[server];
  s.prev = s.last;
  s.last = r.sample;
  s.parked_pulls = r.parked_pulls;
  s.cold = r.cold;
  s.waits = r.waits;
}

bool Membership::Leave(int rank) {
  WorkerSlot& w = workers_[rank];
  if (w.state != WorkerState::kAlive && w.state != WorkerState::kPending) return false;
  w.state = WorkerState::kLeft;
  LOG_INFO << "worker " << rank << " left";
  return true;
}

bool Membership::ExpireWorker(uint32_t r, Clock::time_point now, Clock::time_point start) {
  WorkerSlot& w = workers_[r];
  if (w.state == WorkerState::kAlive && now - w.last_seen > opts_.heartbeat_timeout) {
    w.state = WorkerState::kDead;
    LOG_WARN << "worker " << r << " silent for more than " << opts_.heartbeat_timeout.count() << " ms: declared dead";
    return true;
  }
  if (w.state == WorkerState::kPending && now - start > opts_.join_timeout) {
    w.state = WorkerState::kDead;
    LOG_WARN << "worker " << r << " did not join within " << opts_.join_timeout.count() << " ms: declared dead";
    return true;
  }
  return false;
}

std::vector<uint32_t> Membership::ExpireServers(Clock::time_point now) {
  std::vector<uint32_t> silent;
  for (uint32_t r = 0; r < servers_.size(); ++r) {
    ServerSlot& s = servers_[r];
    if (s.registered && s.alive && now - s.last_seen > opts_.heartbeat_timeout) {
      s.alive = false;
      silent.push_back(r);
      LOG_WARN << "server " << r << " at " << s.endpoint << " silent for more than "
               << opts_.heartbeat_timeout.count() << " ms";
    }
  }
  return silent;
}

void Membership::MarkDrained(uint32_t rank) {
  if (rank < servers_.size() && servers_[rank].dead) servers_[rank].drained = true;
}

bool Membership::DeclareServerDead(uint32_t rank) {
  if (rank >= servers_.size() || (!servers_[rank].registered && !servers_[rank].adopt)) return false;
  ServerSlot& s = servers_[rank];
  s.registered = s.alive = s.adopt = false;
  s.dead = true;
  s.waits = ServerWaitView{};
  return true;
}

bool Membership::IsDeadServer(const std::string& routing_id) const {
  return std::any_of(servers_.begin(), servers_.end(),
                     [&](const ServerSlot& s) { return s.dead && s.routing_id == routing_id; }) ||
         std::find(fenced_.begin(), fenced_.end(), routing_id) != fenced_.end();
}

std::vector<uint32_t> Membership::DeadServers() const {
  std::vector<uint32_t> out;
  for (uint32_t r = 0; r < servers_.size(); ++r)
    if (servers_[r].dead) out.push_back(r);
  return out;
}

bool Membership::NoWorkerAlive(bool* changed) {
  if (changed) *changed = false;
  bool alive = false;
  for (auto& w : workers_) {
    alive |= w.state == WorkerState::kAlive;  // still finishing its step
    if (w.state == WorkerState::kPending) {   // never to join now
      w.state = WorkerState::kLeft;
      if (changed) *changed = true;
    }
  }
  return !alive;
}

void Membership::Changed() {
  ++version_;
  std::string list;
  for (auto r : LiveWorkers()) list += (list.empty() ? "" : ",") + std::to_string(r);
  LOG_INFO << "membership v" << version_ << ": live workers [" << list << "]";
}

void Membership::RollBack() {
  // (ranks added while the job ran are not the job's: it starts again on its own servers)
  servers_.resize(opts_.num_servers);
  for (auto& srv : servers_) {
    srv.registered = srv.alive = srv.adopt = srv.dead = false;
    srv.routing_id.clear();
    srv.waits = ServerWaitView{};
  }
  for (uint32_t r = 0; r < workers_.size(); ++r) {
    workers_[r].state = r < opts_.num_workers ? WorkerState::kPending : WorkerState::kVacant;
    workers_[r].clock = -1;
  }
  ++version_;
}

void Membership::AdoptServers() {
  for (auto& srv : servers_) srv.adopt = !srv.endpoint.empty() && !srv.dead;
}

int Membership::ServerRankOf(const std::string& routing_id) const {
  for (uint32_t r = 0; r < servers_.size(); ++r)
    if (servers_[r].registered && servers_[r].routing_id == routing_id) return static_cast<int>(r);
  return -1;
}

bool Membership::AllServersRegistered() const {
  for (uint32_t r = 0; r < servers_.size(); ++r) {
    const ServerSlot& s = servers_[r];
    // (a rank added while the job ran that no server took yet is not waited for)
    if (!s.registered && !s.dead && !(r >= opts_.num_servers && s.endpoint.empty())) return false;
  }
  return true;
}

uint32_t Membership::AddServer() {
  servers_.emplace_back();
  LOG_INFO << "server rank " << servers_.size() - 1 << " opened (add-server): the next server to register takes it";
  return static_cast<uint32_t>(servers_.size() - 1);
}

std::vector<uint32_t> Membership::RegisteredServers() const {
  std::vector<uint32_t> out;
  for (uint32_t r = 0; r < servers_.size(); ++r)
    if (servers_[r].registered) out.push_back(r);
  return out;
}

std::set<uint32_t> Membership::AnsweringServers() const {
  std::set<uint32_t> out;
  for (uint32_t r = 0; r < servers_.size(); ++r)
    if (servers_[r].registered && servers_[r].alive) out.insert(r);
  return out;
}

std::vector<uint64_t> Membership::Budgets() const {
  std::vector<uint64_t> out;
  for (const auto& s : servers_) out.push_back(s.registered ? s.budget : 0);
  return out;
}

std::vector<uint32_t> Membership::LiveWorkers() const {
  std::vector<uint32_t> live;
  for (uint32_t r = 0; r < workers_.size(); ++r)
    if (workers_[r].state == WorkerState::kPending || workers_[r].state == WorkerState::kAlive) live.push_back(r);
  return live;
}

int64_t Membership::CountedClock(uint32_t rank) const {
  int64_t counted = INT64_MAX;
  for (const auto& s : servers_)
    if (s.registered) counted = std::min(counted, rank < s.waits.clocks.size() ? s.waits.clocks[rank] : int64_t{-1});
  return counted == INT64_MAX ? -1 : counted;  // no server: none counted
}

int64_t Membership::FurthestClock() const {
  int64_t furthest = -1;
  for (const auto& w : workers_) furthest = std::max(furthest, w.clock);
  return furthest;
}

std::vector<SavedServer> Membership::SavedServers() const {
  std::vector<SavedServer> out;
  for (const auto& s : servers_) out.push_back({s.endpoint, s.budget, s.id.host, s.dead});
  return out;
}

std::vector<SavedWorker> Membership::SavedWorkers() const {
  std::vector<SavedWorker> out;
  for (const auto& w : workers_) out.push_back({w.state, w.id.host, w.id.pid});
  return out;
}

void Membership::Restore(const std::vector<SavedServer>& servers, const std::vector<SavedWorker>& workers,
                         uint64_t saved_version, Clock::time_point now) {
  if (servers.size() > servers_.size()) servers_.resize(servers.size());  // ranks added while it ran
  for (uint32_t r = 0; r < servers.size(); ++r) {
    servers_[r].endpoint = servers[r].endpoint;
    servers_[r].budget = servers[r].budget;
    servers_[r].id.host = servers[r].host;
    servers_[r].dead = servers[r].dead;
  }
  for (uint32_t r = 0; r < workers.size() && r < workers_.size(); ++r) {
    workers_[r].state = workers[r].state;
    workers_[r].id.host = workers[r].host;
    workers_[r].id.pid = workers[r].pid;
    workers_[r].last_seen = now;  // a live one has a heartbeat deadline to show up in
  }
  version_ = std::max(version_, saved_version) + 1;
}

}  // namespace shardps
