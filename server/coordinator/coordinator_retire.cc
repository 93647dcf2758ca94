// A worker declared dead under sync, retired so that every server counts it
// for the same clocks (docs/fault-tolerance.md, "A worker dies between its
// ticks"): the coordinator decides its last clock from what each server
// saw, and every server takes the ticks it missed up to that clock.
#include <algorithm>
#include <string>

#include "common/base/log.h"
#include "common/codec/wire.h"
#include "server/coordinator/coordinator.h"

namespace shardps {

bool Coordinator::RetiresWorkers() const {
  // One group has nothing to disagree with (its backups follow its primary).
  return opts_.consistency == Consistency::kSync && tables_.complete() && tables_.map().groups() > 1 &&
         !members_.AnsweringServers().empty();
}

void Coordinator::StartRetirement(uint32_t rank, uint64_t update) {
  Retirement& r = retiring_[rank];
  r.awaiting.clear();
  for (uint32_t s : members_.AnsweringServers()) r.awaiting[s] = update;
  r.deadline = Clock::now() + opts_.ack_timeout;
  r.last = {rank, WorkerFinal::kAllGroups, -1, false};
  LOG_INFO << "worker " << rank << " is retiring: asking " << r.awaiting.size()
           << " server(s) for the clock it reached on each group";
}

void Coordinator::OnRetireAck(uint32_t server, const wire::Header& h) {
  std::vector<WorkerFinal> finals;
  if (const auto* rep = h.body_as_RetireReport()) {
    if (Status s = wire::DecodeFinals(rep->finals(), members_.worker_ranks(), &finals); !s.ok()) {
      LOG_ERROR << "server " << server << "'s retire report is refused: " << s.ToString();
      return;  // (it stays awaited: the ack timeout settles it)
    }
  }
  for (auto& [rank, r] : retiring_) {
    auto it = r.awaiting.find(server);
    if (it == r.awaiting.end() || h.request_id() < it->second) continue;  // an update from before it was retiring
    for (const WorkerFinal& f : finals)
      if (f.rank == rank && f.clock > r.last.clock) r.last = {rank, WorkerFinal::kAllGroups, f.clock, f.trained};
    r.awaiting.erase(it);
  }
  FinishRetirements(Clock::now());
}

void Coordinator::RetireAgain(uint64_t update) {
  for (auto& [rank, r] : retiring_) {
    for (uint32_t s : members_.AnsweringServers()) r.awaiting[s] = update;
    r.deadline = Clock::now() + opts_.ack_timeout;
    LOG_INFO << "worker " << rank << " is retiring across a fail-over: the servers are asked again";
  }
}

void Coordinator::FinishRetirements(Clock::time_point now) {
  bool changed = false;
  for (auto it = retiring_.begin(); it != retiring_.end();) {
    Retirement& r = it->second;
    // A server that stopped answering (dead, failed over) is not waited for.
    const std::set<uint32_t> answering = members_.AnsweringServers();
    std::erase_if(r.awaiting, [&](const auto& a) { return !answering.count(a.first); });
    if (!r.awaiting.empty() && now < r.deadline) {
      ++it;
      continue;
    }
    const uint32_t rank = it->first;
    if (!r.awaiting.empty())
      LOG_WARN << "worker " << rank << " retired without the reports of " << r.awaiting.size()
               << " server(s) (no answer in " << opts_.ack_timeout.count() << " ms)";
    int64_t counted = r.last.clock;
    if (counted >= 0) {
      retired_[rank] = r.last;
      LOG_INFO << "worker " << rank << " retired at clock " << counted << ": every server counts its ticks up to it";
    } else {
      retired_.erase(rank);
      counted = members_.CountedClock(rank);
    }
    work_.ForgetWorkOf(rank, true, counted);
    it = retiring_.erase(it);
    changed = true;
  }
  if (changed) {
    dirty_ = true;
    MembershipChanged();
  }
}

}  // namespace shardps
