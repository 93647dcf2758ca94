// For the client's unit tests: a peer the client talks to (a coordinator
// or a server) as a ROUTER socket on loopback, in a thread of the test
// process, answering each request with what the test's handler returns.
// It speaks the real protocol (common/codec/wire.h) over real ZeroMQ sockets,
// envelopes included (common/codec/envelope.h); only its answers are the
// test's.
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "common/codec/envelope.h"
#include "common/codec/wire.h"
#include "common/net/net.h"

namespace shardps::testing {

class TestPeer {
 public:
  // The request (its parsed header, and every frame: [0] is the header).
  // Returns the reply frames, or none to leave the request unanswered.
  using Handler = std::function<std::vector<zmq::message_t>(const wire::Header& h, std::vector<zmq::message_t>& frames)>;

  // Binds `endpoint` (port 0: any free port) and starts answering.
  explicit TestPeer(Handler handler, const std::string& endpoint = "tcp://127.0.0.1:0") : handler_(std::move(handler)) {
    sock_.set(zmq::sockopt::linger, 0);
    sock_.bind(BindSpec(endpoint));
    endpoint_ = sock_.get(zmq::sockopt::last_endpoint);
    thread_ = std::thread([this] { Run(); });
  }
  ~TestPeer() {
    stop_ = true;
    thread_.join();
  }
  TestPeer(const TestPeer&) = delete;
  TestPeer& operator=(const TestPeer&) = delete;

  const std::string& endpoint() const { return endpoint_; }
  // ZeroMQ messages that arrived: requests, or envelopes of several.
  int Messages() const { return messages_.load(); }
  // Answers the requests of one message (an envelope's) in one envelope,
  // as a server does to a client that sends envelopes.
  void EnvelopeReplies(bool on) { envelope_replies_ = on; }
  // How many requests of each type arrived so far (heartbeats included).
  int Count(wire::MsgType t) {
    std::lock_guard<std::mutex> lock(mu_);
    int n = 0;
    for (auto x : types_) n += x == t;
    return n;
  }
  // The request ids of requests of type `t`, in arrival order.
  std::vector<uint64_t> Ids(wire::MsgType t) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<uint64_t> out;
    for (size_t i = 0; i < types_.size(); ++i)
      if (types_[i] == t) out.push_back(ids_[i]);
    return out;
  }

  // A reply header to `h` with `f`'s fields (its request id set).
  static std::vector<zmq::message_t> Reply(const wire::Header& h, wire::Fields f = {}) {
    flatbuffers::FlatBufferBuilder fbb;
    f.request_id = h.request_id();
    std::vector<zmq::message_t> out;
    out.push_back(wire::EncodeSimple(fbb, f));
    return out;
  }
  static std::vector<zmq::message_t> Error(const wire::Header& h, const Status& s) {
    flatbuffers::FlatBufferBuilder fbb;
    std::vector<zmq::message_t> out;
    out.push_back(wire::EncodeError(fbb, h.request_id(), s));
    return out;
  }

 private:
  void Run() {
    std::vector<zmq::message_t> frames;
    std::vector<uint64_t> scratch;
    while (!stop_) {
      zmq::pollitem_t item{sock_.handle(), 0, ZMQ_POLLIN, 0};
      Poll(&item, 1, Millis(10));
      while (RecvMultipart(sock_, &frames)) {
        if (frames.size() < 2) continue;
        ++messages_;
        zmq::message_t routing_id = std::move(frames[0]);
        frames.erase(frames.begin());
        const wire::Header* h = nullptr;
        if (!wire::ParseHeader(frames[0], scratch, &h).ok()) continue;
        // An envelope's requests, each handled as if it came alone.
        std::vector<std::vector<zmq::message_t>> requests;
        if (h->type() == wire::MsgType::Envelope) {
          std::vector<uint32_t> counts;
          if (!wire::EnvelopeParts(*h, frames.size() - 1, &counts).ok()) continue;
          wire::ForEachMessage(frames, 1, counts, nullptr, [&](auto& part) { requests.push_back(std::move(part)); });
        } else {
          requests.push_back(std::move(frames));
        }
        wire::EnvelopeBuilder replies;
        for (auto& request : requests) {
          if (!wire::ParseHeader(request[0], scratch, &h).ok()) continue;
          {
            std::lock_guard<std::mutex> lock(mu_);
            types_.push_back(h->type());
            ids_.push_back(h->request_id());
          }
          std::vector<zmq::message_t> reply = handler_(*h, request);
          if (reply.empty()) continue;
          if (envelope_replies_) {
            replies.Add(reply);
            continue;
          }
          reply.insert(reply.begin(), zmq::message_t(routing_id.data(), routing_id.size()));
          (void)SendMultipart(sock_, reply);
        }
        if (replies.empty()) continue;
        std::vector<zmq::message_t> out;
        out.push_back(std::move(routing_id));
        replies.Take(fbb_, &out);
        (void)SendMultipart(sock_, out);
      }
    }
  }

  Handler handler_;
  zmq::context_t ctx_{1};
  zmq::socket_t sock_{ctx_, zmq::socket_type::router};  // the peer's thread only, once started
  std::string endpoint_;
  std::atomic<bool> stop_{false};
  std::atomic<int> messages_{0};
  std::atomic<bool> envelope_replies_{false};
  flatbuffers::FlatBufferBuilder fbb_;  // the peer's thread only
  std::mutex mu_;  // guards types_, ids_
  std::vector<wire::MsgType> types_;
  std::vector<uint64_t> ids_;
  std::thread thread_;
};

}  // namespace shardps::testing
