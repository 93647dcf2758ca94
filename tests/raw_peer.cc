#include "tests/raw_peer.h"

#include <algorithm>
#include <atomic>

#include "common/net/handshake.h"

namespace shardps::testing {

RawPeer::RawPeer(const std::string& endpoint, const KeyFile* key) : endpoint_(endpoint), key_(key) {
  static std::atomic<int> next{0};
  sock_ = zmq::socket_t(ctx_, zmq::socket_type::dealer);
  sock_.set(zmq::sockopt::linger, 0);
  if (key) MakeCurveClient(sock_, *key);
  monitor_ = WatchHandshakes(ctx_, sock_, "inproc://raw-peer-" + std::to_string(next++));
  sock_.connect(endpoint);
}

Status RawPeer::Exchange(std::vector<zmq::message_t> frames, std::chrono::milliseconds timeout) {
  reply_.clear();
  h_ = nullptr;
  Status s = RequestReply(sock_, monitor_, key_, frames, std::chrono::steady_clock::now() + timeout, endpoint_,
                          &reply_);
  if (!s.ok()) return s;
  const wire::Header* h = nullptr;
  if (Status p = wire::ParseHeader(reply_[0], scratch_, &h); !p.ok())
    return Status::BadMessage("unparseable reply from " + endpoint_ + ": " + p.ToString());
  h_ = h;
  return wire::ReplyStatus(h);
}

zmq::message_t RawPeer::Header(const wire::Fields& f) { return wire::EncodeSimple(fbb_, f); }

zmq::message_t RawPeer::Header(const wire::Fields& f, wire::Body type, flatbuffers::Offset<void> body) {
  return wire::Encode(fbb_, f, type, body);
}

Status RawWorker::Send(RawPeer& to, wire::Fields f, std::vector<zmq::message_t> after) {
  f.request_id = ++id_;
  f.role = wire::Role::Worker;
  f.rank = rank_;
  f.clock = clock;
  std::vector<zmq::message_t> frames;
  frames.push_back(to.Header(f));
  for (auto& m : after) frames.push_back(std::move(m));
  return to.Exchange(std::move(frames));
}

Status RawWorker::Send(RawPeer& to, wire::Fields f, wire::Body type, flatbuffers::Offset<void> body) {
  f.request_id = ++id_;
  f.role = wire::Role::Worker;
  f.rank = rank_;
  f.clock = clock;
  return to.Exchange(Frames(to.Header(f, type, body)));
}

Status RawWorker::Register(RawPeer& coordinator) {
  auto& fbb = coordinator.builder();
  fbb.Clear();
  auto req = wire::CreateRegisterRequest(fbb, wire::Role::Worker, rank_);
  wire::Fields f;
  f.type = wire::MsgType::Register;
  return Send(coordinator, f, wire::Body::RegisterRequest, req.Union());
}

Status RawWorker::Claim(RawPeer& coordinator, uint64_t pool, uint64_t total, uint32_t per, WorkRange* grant) {
  auto& fbb = coordinator.builder();
  fbb.Clear();
  auto c = wire::CreateWorkClaim(fbb, pool, total, per, 1, true);
  wire::Fields f;
  f.type = wire::MsgType::ClaimWork;
  Status s = Send(coordinator, f, wire::Body::WorkClaim, c.Union());
  if (!s.ok()) return s;
  const wire::WorkGrant* g = coordinator.reply()->body_as_WorkGrant();
  if (!g) return Status::BadMessage("a ClaimWork reply without a WorkGrant");
  *grant = WorkRange{g->begin(), g->end()};
  return s;
}

Status RawWorker::Push(RawPeer& server, uint32_t table, uint64_t rows, const float* grads, uint64_t seq) {
  wire::Fields f;
  f.type = wire::MsgType::Push;
  f.table = table;
  f.row_begin = 0;
  f.row_end = rows;
  f.seq = seq ? seq : ++seq_;
  return Send(server, f, Frames(zmq::message_t(grads, rows * sizeof(float))));
}

Status RawWorker::Tick(RawPeer& server) {
  wire::Fields f;
  f.type = wire::MsgType::Tick;
  return Send(server, f);
}

zmq::message_t Floats(size_t n, float value) {
  zmq::message_t m(n * sizeof(float));
  std::fill_n(static_cast<float*>(m.data()), n, value);
  return m;
}

zmq::message_t FloatsOf(const std::vector<float>& values) {
  return zmq::message_t(values.data(), values.size() * sizeof(float));
}

zmq::message_t Keys(const std::vector<uint64_t>& keys) {
  return zmq::message_t(keys.data(), keys.size() * sizeof(uint64_t));
}

}  // namespace shardps::testing
