// The client's I/O thread, the callers' side: its queue (io_thread.h).
// The thread itself, IoLoop, is in io_thread.cc.
#include "client/io_thread.h"

#include <unistd.h>

#include <algorithm>

namespace shardps::detail {

template <typename Finish>
void IoThread::Enqueue(Outgoing&& o, Finish&& finish) {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    if (stopping_ && o.kind != Outgoing::kStop) {
      if (o.call) o.call->PartDone(Status::Unavailable("client is closed"), false, 0, 0);
      return;
    }
    if (o.kind == Outgoing::kStop) stopping_ = true;
    finish(o);
    // (Held: the release wakes it; the stop and requests to the
    // coordinator go at once.)
    const bool bypass = holds_ > 0 && ToCoordinator(o);
    if (bypass) ++bypass_;
    wake = asleep_ && (holds_ == 0 || stopping_ || bypass);
    if (wake) asleep_ = false;  // (one wake is enough: it drains the whole queue)
    queue_.push_back(std::move(o));
  }
  if (wake) {
    uint64_t one = 1;
    ssize_t n = ::write(efd_, &one, sizeof one);
    (void)n;
  }
}

void IoThread::Enqueue(Outgoing&& o) {
  Enqueue(std::move(o), [](Outgoing&) {});
}

void IoThread::EnqueueRequest(Outgoing&& o, wire::Fields f, std::vector<zmq::message_t> extra, bool numbered,
                              flatbuffers::FlatBufferBuilder& fbb) {
  o.request_id = f.request_id = next_id_.fetch_add(1, std::memory_order_relaxed);
  Enqueue(std::move(o), [&](Outgoing& q) {
    // Numbered per replica group: whichever server serves the group (a
    // backup that took it over has the group's last numbers) can tell a
    // push sent again after a fail-over.
    // (A group past the servers' count — [job] groups — is numbered too:
    // unnumbered, a push sent again would apply twice.)
    const int numbering = q.group >= 0 ? q.group : q.target;
    if (numbered && self_.worker() && numbering >= 0) {
      if (numbering >= static_cast<int>(seq_.size())) seq_.resize(numbering + 1, 0);
      f.seq = ++seq_[numbering];
    }
    // An observer's push has no number: sent again, it could apply twice.
    q.resendable = !numbered || self_.worker();
    q.push = numbered && self_.worker();
    q.frames.push_back(wire::EncodeSimple(fbb, f));
    for (auto& m : extra) q.frames.push_back(std::move(m));
  });
}

void IoThread::ConnectServers(std::vector<std::string> endpoints) {
  Outgoing o;
  o.kind = Outgoing::kConnect;
  o.endpoints = std::move(endpoints);
  Enqueue(std::move(o), [this](Outgoing& q) { seq_.resize(std::max(seq_.size(), q.endpoints.size()), 0); });
}

void IoThread::SetMap(std::shared_ptr<const ShardMap> map) {
  Outgoing o;
  o.kind = Outgoing::kMap;
  o.map = std::move(map);
  Enqueue(std::move(o));
}

void IoThread::TakeQueued(std::deque<Outgoing>* batch) {
  std::lock_guard<std::mutex> lock(queue_mu_);
  asleep_ = false;
  if (holds_ == 0 || stopping_) {
    batch->swap(queue_);
    return;
  }
  // Held: only what was queued before the hold began, and the requests to
  // the coordinator (a claim or a barrier waited for inside a hold must
  // not wait for its end: a hold gathers the data messages to servers).
  for (; unheld_ > 0 && !queue_.empty(); --unheld_) {
    batch->push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  unheld_ = 0;
  if (bypass_ == 0) return;
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (!ToCoordinator(*it)) {
      ++it;
      continue;
    }
    batch->push_back(std::move(*it));
    it = queue_.erase(it);
  }
  bypass_ = 0;
}

bool IoThread::PrepareToSleep() {
  std::lock_guard<std::mutex> lock(queue_mu_);
  if (!queue_.empty() && (holds_ == 0 || stopping_ || unheld_ > 0 || bypass_ > 0)) return false;
  asleep_ = true;
  return true;
}

void IoThread::Hold() {
  std::lock_guard<std::mutex> lock(queue_mu_);
  // What is queued already is not held (a request issued before the hold
  // may be waited for inside it).
  if (holds_++ == 0) unheld_ = queue_.size();
}

void IoThread::Release() {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    if (holds_ > 0) --holds_;
    if (holds_ == 0) bypass_ = 0;  // (everything goes now)
    wake = holds_ == 0 && asleep_ && !queue_.empty();
    if (wake) asleep_ = false;
  }
  if (wake) {
    uint64_t one = 1;
    ssize_t n = ::write(efd_, &one, sizeof one);
    (void)n;
  }
}

}  // namespace shardps::detail
