#include "server/server_start.h"

#include <gtest/gtest.h>

#include <functional>
#include <thread>
#include <vector>

#include "common/codec/wire.h"
#include "common/net/net.h"
#include "common/net/zap.h"

namespace shardps {
namespace {

// A coordinator's ROUTER on this machine, answering each Register it
// receives with what `answer` returns (nothing: no reply), on its own thread.
class FakeCoordinator {
 public:
  using Answer = std::function<bool(int n, uint64_t id, flatbuffers::FlatBufferBuilder& fbb, zmq::message_t* reply)>;
  FakeCoordinator(zmq::context_t& ctx, int expect, Answer answer) : sock_(ctx, zmq::socket_type::router) {
    sock_.set(zmq::sockopt::linger, 0);
    sock_.bind("tcp://127.0.0.1:*");
    endpoint_ = LastEndpoint(sock_);
    thread_ = std::thread([this, expect, answer] {
      flatbuffers::FlatBufferBuilder fbb;
      std::vector<uint64_t> scratch;
      std::vector<zmq::message_t> frames;
      const auto deadline = Clock::now() + std::chrono::seconds(20);
      while (static_cast<int>(requests.size()) < expect && Clock::now() < deadline) {
        zmq::pollitem_t items[] = {{sock_.handle(), 0, ZMQ_POLLIN, 0}};
        Poll(items, 1, Millis(50));
        if (!RecvMultipart(sock_, &frames)) continue;
        const wire::Header* h = nullptr;
        if (frames.size() != 2 || !wire::ParseHeader(frames[1], scratch, &h).ok()) continue;
        const auto* body = h->body_as_RegisterRequest();
        requests.push_back({h->type(), h->role(), h->request_id(), body && body->endpoint() ? body->endpoint()->str() : ""});
        zmq::message_t reply;
        if (!answer(static_cast<int>(requests.size()), h->request_id(), fbb, &reply)) continue;
        std::vector<zmq::message_t> out;
        out.push_back(std::move(frames[0]));
        out.push_back(std::move(reply));
        (void)SendMultipart(sock_, out);
      }
    });
  }
  ~FakeCoordinator() { Join(); }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  const std::string& endpoint() const { return endpoint_; }

  struct Request {
    wire::MsgType type;
    wire::Role role;
    uint64_t id;
    std::string endpoint;
  };
  std::vector<Request> requests;  // the coordinator's thread's until Join

 private:
  zmq::socket_t sock_;
  std::string endpoint_;
  std::thread thread_;
};

zmq::message_t Accept(flatbuffers::FlatBufferBuilder& fbb, uint64_t id, int32_t rank) {
  ClusterView v;
  v.consistency = Consistency::kBounded;
  v.staleness = 2;
  v.num_servers = 4;
  v.num_workers = 3;
  fbb.Clear();
  auto info = wire::BuildCluster(fbb, v);
  wire::Fields f;
  f.type = wire::MsgType::Reply;
  f.request_id = id;
  f.rank = rank;
  return wire::Encode(fbb, f, wire::Body::ClusterInfo, info.Union());
}

class ServerStartTest : public ::testing::Test {
 protected:
  ServerStartTest() : data_(ctx_, zmq::socket_type::router), coord_(ctx_, zmq::socket_type::dealer) {
    opts_.bind = "tcp://127.0.0.1:0";
  }
  zmq::context_t ctx_{1};
  ServerOptions opts_;
  zmq::socket_t data_, coord_;
  std::unique_ptr<ZapHandler> zap_;
  std::string endpoint_;
};

TEST_F(ServerStartTest, RegistersAndLearnsItsRankAndTheCluster) {
  FakeCoordinator c(ctx_, 1, [](int, uint64_t id, flatbuffers::FlatBufferBuilder& fbb, zmq::message_t* reply) {
    *reply = Accept(fbb, id, 3);
    return true;
  });
  opts_.coordinator = c.endpoint();
  opts_.register_timeout = Millis(10000);
  ServerStart start(ctx_, opts_, data_, coord_);
  ASSERT_TRUE(start.Open(&zap_, &endpoint_).ok());
  EXPECT_EQ(zap_, nullptr);  // security off
  EXPECT_EQ(endpoint_.rfind("tcp://127.0.0.1:", 0), 0u) << endpoint_;
  EXPECT_NE(endpoint_, "tcp://127.0.0.1:0");  // the port bound
  uint32_t rank = 0;
  ClusterView v;
  Status s = start.Register(endpoint_, 17, &rank, &v);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(rank, 3u);
  EXPECT_EQ(v.consistency, Consistency::kBounded);
  EXPECT_EQ(v.staleness, 2u);
  EXPECT_EQ(v.num_servers, 4u);
  c.Join();
  ASSERT_EQ(c.requests.size(), 1u);
  EXPECT_EQ(c.requests[0].type, wire::MsgType::Register);
  EXPECT_EQ(c.requests[0].role, wire::Role::Server);
  EXPECT_EQ(c.requests[0].id, 17u);
  EXPECT_EQ(c.requests[0].endpoint, endpoint_);
}

TEST_F(ServerStartTest, AnUnansweredRegistrationIsSentAgain) {
  // A coordinator that lost the first (it restarted) answers the second.
  FakeCoordinator c(ctx_, 2, [](int n, uint64_t id, flatbuffers::FlatBufferBuilder& fbb, zmq::message_t* reply) {
    if (n < 2) return false;
    *reply = Accept(fbb, id, 1);
    return true;
  });
  opts_.coordinator = c.endpoint();
  opts_.register_timeout = Millis(10000);
  ServerStart start(ctx_, opts_, data_, coord_);
  ASSERT_TRUE(start.Open(&zap_, &endpoint_).ok());
  uint32_t rank = 0;
  ClusterView v;
  const auto t0 = Clock::now();
  Status s = start.Register(endpoint_, 5, &rank, &v);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_GE(Clock::now() - t0, Millis(1900));  // sent again after 2 s
  EXPECT_EQ(rank, 1u);
  c.Join();
  ASSERT_EQ(c.requests.size(), 2u);
  EXPECT_EQ(c.requests[1].id, 5u);  // the same request
}

TEST_F(ServerStartTest, ARefusedRegistrationFailsWithTheCoordinatorsReason) {
  FakeCoordinator c(ctx_, 1, [](int, uint64_t id, flatbuffers::FlatBufferBuilder& fbb, zmq::message_t* reply) {
    *reply = wire::EncodeError(fbb, id, Status::Conflict("server rank 2 is live already"));
    return true;
  });
  opts_.coordinator = c.endpoint();
  ServerStart start(ctx_, opts_, data_, coord_);
  ASSERT_TRUE(start.Open(&zap_, &endpoint_).ok());
  uint32_t rank = 0;
  ClusterView v;
  Status s = start.Register(endpoint_, 1, &rank, &v);
  EXPECT_EQ(s.code(), Code::kConflict);
  EXPECT_EQ(s.message(), "coordinator refused registration: server rank 2 is live already");
}

TEST_F(ServerStartTest, NoAnswerTimesOut) {
  {
    zmq::socket_t probe(ctx_, zmq::socket_type::router);  // a port nobody listens on afterwards
    probe.bind("tcp://127.0.0.1:*");
    opts_.coordinator = LastEndpoint(probe);
  }
  opts_.register_timeout = Millis(300);
  ServerStart start(ctx_, opts_, data_, coord_);
  ASSERT_TRUE(start.Open(&zap_, &endpoint_).ok());
  uint32_t rank = 0;
  ClusterView v;
  Status s = start.Register(endpoint_, 1, &rank, &v);
  EXPECT_EQ(s.code(), Code::kTimeout);
  EXPECT_EQ(s.message(), "no answer from coordinator " + opts_.coordinator + " within 300 ms");
}

TEST_F(ServerStartTest, AnEndpointThatCannotBeBoundFailsTheStart) {
  opts_.coordinator = "tcp://127.0.0.1:1";
  opts_.bind = "nonsense://x";
  ServerStart start(ctx_, opts_, data_, coord_);
  Status s = start.Open(&zap_, &endpoint_);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("server cannot bind 'nonsense://x' or reach coordinator 'tcp://127.0.0.1:1': ", 0), 0u)
      << s.message();
}

}  // namespace
}  // namespace shardps
