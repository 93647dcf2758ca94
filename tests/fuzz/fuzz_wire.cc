// Fuzz target: every wire decoder a process runs on a received message
// (common/codec/wire.h): ParseHeader / VerifyHeader (aligned, unaligned, as a
// zmq frame), ReplyStatus, every body the coordinator, servers, clients and
// shardps-ctl read (DecodeCluster, DecodeTableSpec and the fields of
// RegisterRequest, ServerStats, SnapshotReport, WorkClaim, MembershipInfo,
// JobStatus, ...), and CheckFrameSize / ArrayView on the key and value
// frames the header announces.
//
// Input: a multipart message, frames as [u32 length][bytes] (fuzz_input.h);
// frame 0 is the header. A decoded ClusterInfo / TableSpec is encoded again
// and decoded again: the round trip must give the same thing.
#include <cstdlib>
#include <string>
#include <vector>

#include "common/codec/wire.h"
#include "tests/fuzz/fuzz_input.h"

namespace shardps {
namespace {

// Touches every byte a reader of the body would: strings and vectors are
// summed so the reads cannot be optimised away.
uint64_t g_sink = 0;
void Touch(const flatbuffers::String* s) {
  if (s)
    for (char c : s->string_view()) g_sink += static_cast<uint8_t>(c);
}
template <typename V>
void TouchVec(const V* v) {
  if (v)
    for (auto x : *v) g_sink += static_cast<uint64_t>(x);
}

void CheckSameSpec(const TableSpec& a, const TableSpec& b) {
  if (!a.SameShape(b) || a.name != b.name || a.id != b.id || a.max_rows != b.max_rows) std::abort();
}

void Cluster(const wire::ClusterInfo* in) {
  ClusterView v;
  if (!wire::DecodeCluster(in, &v).ok()) return;
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(wire::BuildCluster(fbb, v));
  ClusterView again;
  // What was decoded once must encode and decode to the same view.
  flatbuffers::Verifier verifier(fbb.GetBufferPointer(), fbb.GetSize());
  if (!verifier.VerifyBuffer<wire::ClusterInfo>(nullptr)) std::abort();
  if (!wire::DecodeCluster(flatbuffers::GetRoot<wire::ClusterInfo>(fbb.GetBufferPointer()), &again).ok()) std::abort();
  if (again.num_servers != v.num_servers || again.num_workers != v.num_workers || again.map.owner != v.map.owner ||
      again.servers != v.servers || again.tables.size() != v.tables.size() || again.live_workers != v.live_workers ||
      again.snapshot_root != v.snapshot_root || again.restore_from != v.restore_from)
    std::abort();
  for (size_t i = 0; i < v.tables.size(); ++i) CheckSameSpec(v.tables[i], again.tables[i]);
}

void Spec(const wire::TableSpec* in) {
  TableSpec t;
  if (!wire::DecodeTableSpec(in, &t).ok()) return;
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(wire::BuildTableSpec(fbb, t));
  TableSpec again;
  if (!wire::DecodeTableSpec(flatbuffers::GetRoot<wire::TableSpec>(fbb.GetBufferPointer()), &again).ok()) std::abort();
  CheckSameSpec(t, again);
}

void Body(const wire::Header* h) {
  switch (h->body_type()) {
    case wire::Body::ClusterInfo:
      return Cluster(h->body_as_ClusterInfo());
    case wire::Body::TableSpec:
      return Spec(h->body_as_TableSpec());
    case wire::Body::RegisterReply:
      if (const auto* r = h->body_as_RegisterReply()) {
        g_sink += r->rank();
        Cluster(r->cluster());
      }
      return;
    case wire::Body::RegisterRequest:
      if (const auto* r = h->body_as_RegisterRequest()) {
        Touch(r->endpoint());
        Touch(r->host());
        Touch(r->metrics_url());
        g_sink += static_cast<uint64_t>(r->requested_rank()) + r->pid() + r->memory_budget() +
                  static_cast<uint64_t>(r->role());
      }
      return;
    case wire::Body::MembershipInfo:
      if (const auto* m = h->body_as_MembershipInfo()) TouchVec(m->live_workers());
      return;
    case wire::Body::BarrierRequest:
      g_sink += h->body_as_BarrierRequest() != nullptr;  // no fields left (generation is deprecated)
      return;
    case wire::Body::SnapshotReport:
      if (const auto* r = h->body_as_SnapshotReport()) {
        Touch(r->error());
        if (r->files())
          for (const auto* f : *r->files()) {
            Touch(f->name());
            g_sink += f->server() + f->bytes();
          }
        if (r->parts())
          for (const auto* p : *r->parts()) g_sink += p->table() + p->partition() + p->server() + p->rows() + p->checksum();
      }
      return;
    case wire::Body::WorkClaim:
      if (const auto* c = h->body_as_WorkClaim()) g_sink += c->pool() + c->total() + c->max();
      return;
    case wire::Body::ServerStats:
      if (const auto* s = h->body_as_ServerStats()) {
        TouchVec(s->worker_clocks());
        if (s->waiting())
          for (const auto* p : *s->waiting()) g_sink += static_cast<uint64_t>(p->worker()) + static_cast<uint64_t>(p->need());
        g_sink += s->pushes() + s->pulls() + s->parked_pulls() + static_cast<uint64_t>(s->sent_ms());
      }
      return;
    case wire::Body::WorkerStats:
      if (const auto* w = h->body_as_WorkerStats()) g_sink += w->row_cache_lookups() + w->row_cache_hits();
      return;
    case wire::Body::JobStatus:  // what shardps-ctl status prints
      if (const auto* j = h->body_as_JobStatus()) {
        Touch(j->host());
        Touch(j->metrics_url());
        Touch(j->snapshot_dir());
        Touch(j->latest_snapshot());
        if (j->processes())
          for (const auto* p : *j->processes()) {
            Touch(p->host());
            Touch(p->state());
            Touch(p->metrics_url());
            Touch(p->endpoint());
            g_sink += wire::EnumNameRole(p->role())[0] + static_cast<uint64_t>(p->rank()) + static_cast<uint64_t>(p->clock()) + p->pushes();
          }
        if (j->waits())
          for (const auto* w : *j->waits()) g_sink += static_cast<uint64_t>(w->worker()) + static_cast<uint64_t>(w->waits_for()) + static_cast<uint64_t>(w->clock());
      }
      return;
    default:
      return;
  }
}

void OneMessage(const std::vector<std::string_view>& frames) {
  if (frames.empty()) return;
  const std::string_view hb = frames[0];
  // As a received frame (ZeroMQ keeps small frames inside the message,
  // possibly unaligned: ParseHeader realigns).
  zmq::message_t frame(hb.data(), hb.size());
  std::vector<uint64_t> scratch;
  const wire::Header* h = nullptr;
  Status s = wire::ParseHeader(frame, scratch, &h);
  // Directly, deliberately misaligned: refused, never read unaligned.
  if (!hb.empty()) {
    std::vector<uint64_t> buf(hb.size() / 8 + 2);
    auto* odd = reinterpret_cast<char*>(buf.data()) + 1;
    std::memcpy(odd, hb.data(), hb.size());
    const wire::Header* h2 = nullptr;
    if (wire::VerifyHeader(odd, hb.size(), &h2).ok()) std::abort();
  }
  if (!s.ok()) return;
  // A frame that verified once verifies again, wherever it lies.
  {
    std::vector<uint64_t> buf(hb.size() / 8 + 1);
    std::memcpy(buf.data(), hb.data(), hb.size());
    const wire::Header* h2 = nullptr;
    if (!wire::VerifyHeader(buf.data(), hb.size(), &h2).ok()) std::abort();
  }
  g_sink += wire::EnumNameMsgType(h->type())[0];
  Status reply = wire::ReplyStatus(h);
  g_sink += reply.message().size();
  Touch(h->message());
  Body(h);

  // Key and value frames as the server checks them (the row count is
  // bounded first there; here a product that overflows must not matter).
  std::vector<uint64_t> key_scratch;
  std::vector<float> value_scratch;
  std::vector<zmq::message_t> msgs;
  for (size_t i = 1; i < frames.size(); ++i) msgs.emplace_back(frames[i].data(), frames[i].size());
  const uint64_t n = h->key_count();
  size_t next = 0;
  if (n > 0 && next < msgs.size() && n <= (1ull << 40)) {
    if (wire::CheckFrameSize("keys", msgs[next].size(), n * 8).ok()) {
      const uint64_t* keys = wire::ArrayView<uint64_t>(msgs[next], key_scratch);
      for (uint64_t i = 0; i < n; ++i) g_sink += keys[i];
    }
    ++next;
  }
  for (; next < msgs.size(); ++next) {
    const float* v = wire::ArrayView<float>(msgs[next], value_scratch);
    for (size_t i = 0; i < msgs[next].size() / sizeof(float); ++i) g_sink += static_cast<uint64_t>(v[i] == v[i]);
  }
}

}  // namespace
}  // namespace shardps

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  shardps::fuzz::Reader in(data, size);
  std::vector<std::string_view> frames;
  while (!in.empty() && frames.size() < 8) frames.push_back(in.Frame());
  shardps::OneMessage(frames);
  return 0;
}
