#include "client/coordinator_channel.h"

#include <unistd.h>

#include <algorithm>
#include <string>
#include <thread>

#include "common/base/log.h"
#include "common/base/wait_note.h"

namespace shardps::detail {

Status CoordinatorChannel::Ask(flatbuffers::FlatBufferBuilder& fbb, wire::Fields f, wire::Body body_type,
                               flatbuffers::Offset<void> body, Millis timeout, Reply* r, std::string_view what) {
  auto call = std::make_shared<Call>();
  call->parts_left = 1;
  call->op = "coordinator request";
  Outgoing o;
  o.target = -1;
  o.request_id = f.request_id = io_.NextRequestId();
  f.role = self_.wire_role();
  f.rank = self_.rank;
  o.frames.push_back(wire::Encode(fbb, f, body_type, body));
  zmq::message_t copy;
  copy.copy(o.frames.back());
  o.call = call;
  o.dest.keep_reply = true;
  o.timeout = timeout;
  const uint64_t id = o.request_id;
  uint64_t gen = io_.coordinator_reconnects();
  io_.Enqueue(std::move(o));
  Request request = MakeRequest(call);
  const auto start = Clock::now(), deadline = start + timeout + Millis(1000);
  WaitNote note("coordinator", opts_.coordinator, what, start, deadline);
  Status s;
  for (;;) {
    const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
    s = request.Wait(std::clamp(left, Millis(1), Millis(200)));
    if (s.code() != Code::kTimeout) break;
    if (request.Done()) {
      // Answered just after that wait gave up: its status, not the wait's.
      s = request.Wait(Millis(1));
      break;
    }
    if (Clock::now() >= deadline) break;
    note.Check();
    if (io_.coordinator_reconnects() == gen) continue;
    gen = io_.coordinator_reconnects();
    Outgoing again;
    again.target = -1;
    again.request_id = id;
    again.frames.emplace_back();
    again.frames.back().copy(copy);
    again.call = call;
    again.dest.keep_reply = true;
    again.timeout = std::chrono::duration_cast<Millis>(deadline - Clock::now());
    LOG_INFO << "coordinator connection re-established: request " << id << " sent again";
    io_.Enqueue(std::move(again));
  }
  if (!s.ok()) return s;
  r->msg = std::move(call->reply);
  return wire::ParseHeader(r->msg, r->scratch, &r->h);
}

Status CoordinatorChannel::Register() {
  Reply reply;
  const auto deadline = Clock::now() + opts_.connect_timeout;
  Status s;
  for (bool said = false;; said = true) {
    flatbuffers::FlatBufferBuilder fbb;
    auto host = fbb.CreateString(HostName());
    auto url = fbb.CreateString(opts_.metrics_url);
    auto req = wire::CreateRegisterRequest(fbb, self_.wire_role(), self_.worker() ? opts_.rank : -1, 0, host,
                                           static_cast<uint32_t>(::getpid()), url);
    wire::Fields f;
    f.type = wire::MsgType::Register;
    const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
    s = Ask(fbb, f, wire::Body::RegisterRequest, req.Union(), std::max(left, Millis(1)), &reply, "the registration");
    if (s.code() != Code::kNotReady || Clock::now() + Millis(200) >= deadline) break;
    if (!said) {
      LOG_INFO << s.message() << ": waiting";
    }
    std::this_thread::sleep_for(Millis(200));
  }
  if (!s.ok()) {
    if (s.code() == Code::kTimeout)
      return Status::Timeout("no answer from coordinator " + opts_.coordinator + " within " +
                             std::to_string(opts_.connect_timeout.count()) + " ms");
    return Status(s.code(), "registration refused: " + s.message());
  }
  if (self_.worker()) self_.rank = reply.h->rank();
  return Status::OK();
}

Status CoordinatorChannel::GetCluster(Millis timeout, ClusterView* out) {
  flatbuffers::FlatBufferBuilder fbb;
  wire::Fields f;
  f.type = wire::MsgType::GetCluster;
  Reply reply;
  Status s = Ask(fbb, f, wire::Body::NONE, {}, timeout, &reply, "a cluster update");
  if (!s.ok()) {
    if (s.code() == Code::kTimeout)
      return Status::Timeout("the cluster did not become ready (every server registered and holding the map) within " +
                             std::to_string(timeout.count()) + " ms");
    return s;
  }
  return wire::DecodeCluster(reply.h->body_as_ClusterInfo(), out);
}

Status CoordinatorChannel::CreateTable(const TableSpec& spec, TableSpec* out) {
  flatbuffers::FlatBufferBuilder fbb;
  auto body = wire::BuildTableSpec(fbb, spec);
  wire::Fields f;
  f.type = wire::MsgType::CreateTable;
  Reply reply;
  Status s = Ask(fbb, f, wire::Body::TableSpec, body.Union(), opts_.request_timeout, &reply, "a table's creation");
  if (!s.ok()) return s;
  return wire::DecodeTableSpec(reply.h->body_as_TableSpec(), out);
}

Status CoordinatorChannel::Barrier(Millis timeout) {
  if (!self_.worker()) return Status::InvalidArgument("Barrier() is for workers only");
  // An empty BarrierRequest: the coordinator counts a barrier's arrivals by
  // rank and keeps its own generation.
  flatbuffers::FlatBufferBuilder fbb;
  auto body = wire::CreateBarrierRequest(fbb);
  wire::Fields f;
  f.type = wire::MsgType::Barrier;
  Reply reply;
  Status s = Ask(fbb, f, wire::Body::BarrierRequest, body.Union(), timeout, &reply,
                 "the barrier (once every live worker reached it)");
  if (s.code() == Code::kTimeout)
    return Status::Timeout("barrier: not every live worker arrived within " + std::to_string(timeout.count()) +
                           " ms");
  return s;
}

Status CoordinatorChannel::ClaimWork(uint64_t pool, uint64_t total, uint32_t max, const ClaimOptions& o,
                                     WorkRange* out) {
  *out = WorkRange{};
  if (total == 0 || max == 0 || o.granule == 0)
    return Status::InvalidArgument("ClaimWork: total_units, max_units and granule must be > 0");
  if (o.per_clock && !self_.worker()) return Status::InvalidArgument("ClaimWork: per-clock claims are for workers");
  flatbuffers::FlatBufferBuilder fbb;
  auto body = wire::CreateWorkClaim(fbb, pool, total, max, o.granule, o.per_clock);
  wire::Fields f;
  f.type = wire::MsgType::ClaimWork;
  f.clock = self_.clock.load();
  f.seq = claim_seq_.fetch_add(1) + 1;
  Reply reply;
  Status s = Ask(fbb, f, wire::Body::WorkClaim, body.Union(), opts_.request_timeout, &reply, "a work claim");
  if (!s.ok()) return Status(s.code(), "claiming work from pool " + std::to_string(pool) + ": " + s.message());
  const wire::WorkGrant* g = reply.h->body_as_WorkGrant();
  if (!g) return Status::BadMessage("ClaimWork: the coordinator's answer has no WorkGrant");
  // A dead worker's units may be of an earlier pool (per-clock), of the
  // same size then.
  if (g->end() < g->begin() || (g->pool() == pool && g->end() > total) || g->pool() > pool ||
      g->end() - g->begin() > max)
    return Status::Internal("ClaimWork: the coordinator granted [" + std::to_string(g->begin()) + ", " +
                            std::to_string(g->end()) + ") of pool " + std::to_string(g->pool()) +
                            " for a claim of at most " + std::to_string(max) + " units of pool " +
                            std::to_string(pool) + " (" + std::to_string(total) + " units)");
  out->begin = g->begin();
  out->end = g->end();
  out->pool = g->pool();
  out->wait = g->state() == wire::GrantState::WaitNextClock;
  out->handed = g->handed();
  return Status::OK();
}

Status CoordinatorChannel::Leave() {
  flatbuffers::FlatBufferBuilder fbb;
  wire::Fields f;
  f.type = wire::MsgType::Leave;
  Reply reply;
  Status s = Ask(fbb, f, wire::Body::NONE, {}, std::min(opts_.request_timeout, Millis(10000)), &reply, "leaving");
  if (!s.ok()) return Status(s.code(), "leaving the job: " + s.message());
  return s;
}

}  // namespace shardps::detail
