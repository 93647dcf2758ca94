// Handshake watching and RequestReply (common/net/handshake.h), over real
// sockets on loopback inside this process: a reply, no reply, and both
// ways a CURVE handshake can mismatch.
#include "common/net/handshake.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "common/net/net.h"
#include "common/net/security.h"

namespace shardps {
namespace {

using namespace std::chrono_literals;

KeyFile NewKey(KeyRole role, const std::string& server_public) {
  KeyFile k;
  k.role = role;
  EXPECT_TRUE(GenerateKeyPair(&k.public_key, &k.secret_key).ok());
  k.server_key = server_public.empty() ? k.public_key : server_public;
  return k;
}

// A ROUTER on a free loopback port; answers every request with its frames
// reversed (after the routing id) when `echo`, else never.
class Peer {
 public:
  Peer(zmq::context_t& ctx, bool echo, const KeyFile* curve_server = nullptr) : sock_(ctx, zmq::socket_type::router) {
    sock_.set(zmq::sockopt::linger, 0);
    if (curve_server) {
      sock_.set(zmq::sockopt::curve_server, 1);
      sock_.set(zmq::sockopt::curve_secretkey, curve_server->secret_key);
    }
    sock_.bind("tcp://127.0.0.1:*");
    endpoint_ = sock_.get(zmq::sockopt::last_endpoint);
    thread_ = std::thread([this, echo] {
      std::vector<zmq::message_t> frames;
      while (!stop_) {
        zmq::pollitem_t items[] = {{sock_.handle(), 0, ZMQ_POLLIN, 0}};
        if (Poll(items, 1, 20ms) <= 0 || !RecvMultipart(sock_, &frames)) continue;
        if (!echo) continue;
        std::vector<zmq::message_t> out;
        out.push_back(std::move(frames[0]));
        for (size_t i = frames.size(); i-- > 1;) out.push_back(std::move(frames[i]));
        (void)SendMultipart(sock_, out);
      }
    });
  }
  ~Peer() {
    stop_ = true;
    thread_.join();
  }
  const std::string& endpoint() const { return endpoint_; }

 private:
  zmq::socket_t sock_;
  std::string endpoint_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

struct Dialer {
  Dialer(zmq::context_t& ctx, const std::string& endpoint, const KeyFile* key) : sock(ctx, zmq::socket_type::dealer) {
    sock.set(zmq::sockopt::linger, 0);
    if (key) MakeCurveClient(sock, *key);
    static std::atomic<int> n{0};
    monitor = WatchHandshakes(ctx, sock, "inproc://handshake-test-" + std::to_string(n++));
    sock.connect(endpoint);
  }
  zmq::socket_t sock, monitor;
};

std::vector<zmq::message_t> Message(std::initializer_list<std::string> parts) {
  std::vector<zmq::message_t> v;
  for (const auto& p : parts) v.emplace_back(p.data(), p.size());
  return v;
}

TEST(RequestReply, SendsEveryFrameAndReturnsEveryFrameOfTheReply) {
  zmq::context_t ctx(1);
  Peer peer(ctx, /*echo=*/true);
  Dialer d(ctx, peer.endpoint(), nullptr);
  auto request = Message({"a", "bb", "ccc"});
  std::vector<zmq::message_t> reply;
  Status s = RequestReply(d.sock, d.monitor, nullptr, request, Clock::now() + 10s, "peer", &reply);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(reply.size(), 3u);
  EXPECT_EQ(reply[0].to_string(), "ccc");
  EXPECT_EQ(reply[2].to_string(), "a");
  // The one-frame form.
  zmq::message_t one("x", 1), back;
  ASSERT_TRUE(RequestReply(d.sock, d.monitor, nullptr, one, Clock::now() + 10s, "peer", &back).ok());
  EXPECT_EQ(back.to_string(), "x");
}

TEST(RequestReply, NoAnswerIsATimeoutNamingThePeer) {
  zmq::context_t ctx(1);
  Peer peer(ctx, /*echo=*/false);
  Dialer d(ctx, peer.endpoint(), nullptr);
  auto request = Message({"hello"});
  std::vector<zmq::message_t> reply;
  Status s = RequestReply(d.sock, d.monitor, nullptr, request, Clock::now() + 300ms, "the silent peer", &reply);
  EXPECT_EQ(s.code(), Code::kTimeout) << s.ToString();
  EXPECT_NE(s.message().find("no answer from the silent peer"), std::string::npos) << s.ToString();
}

TEST(RequestReply, AKeyAtAPeerWithoutSecurityIsRefusedWithTheReason) {
  zmq::context_t ctx(1);
  Peer peer(ctx, /*echo=*/true);
  const KeyFile server = NewKey(KeyRole::kServer, "");
  const KeyFile worker = NewKey(KeyRole::kWorker, server.public_key);
  Dialer d(ctx, peer.endpoint(), &worker);
  auto request = Message({"hello"});
  std::vector<zmq::message_t> reply;
  Status s = RequestReply(d.sock, d.monitor, &worker, request, Clock::now() + 30s, "peer", &reply);
  EXPECT_EQ(s.code(), Code::kPermissionDenied) << s.ToString();
  EXPECT_NE(s.message().find("security is off there"), std::string::npos) << s.ToString();
}

TEST(RequestReply, NoKeyAtAPeerWithSecurityIsRefusedWithTheReason) {
  zmq::context_t ctx(1);
  const KeyFile server = NewKey(KeyRole::kServer, "");
  Peer peer(ctx, /*echo=*/true, &server);
  Dialer d(ctx, peer.endpoint(), nullptr);
  auto request = Message({"hello"});
  std::vector<zmq::message_t> reply;
  Status s = RequestReply(d.sock, d.monitor, nullptr, request, Clock::now() + 30s, "peer", &reply);
  EXPECT_EQ(s.code(), Code::kPermissionDenied) << s.ToString();
  // Either the mismatch itself or, when the peer hangs up before its
  // greeting is read, the dropped handshakes in a row: both name the cause.
  EXPECT_NE(s.message().find("no key"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace shardps
