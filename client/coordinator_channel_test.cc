// The coordinator channel (coordinator_channel.h) through a real I/O
// thread, against a coordinator of the test's own (test_peer.h): the resend
// after a coordinator restart, registration, work claims, barriers,
// leaving. No processes.
#include "client/coordinator_channel.h"

#include <gtest/gtest.h>

#include <memory>

#include "client/test_peer.h"

namespace shardps::detail {
namespace {

using namespace std::chrono_literals;
using testing::TestPeer;

class ChannelTest : public ::testing::Test {
 protected:
  void Start(const TestPeer& coordinator, ClientRole role = ClientRole::kWorker) {
    opts_.coordinator = coordinator.endpoint();
    opts_.role = role;
    opts_.connect_timeout = 10s;
    opts_.request_timeout = 10s;
    opts_.heartbeat_interval = 20ms;
    self_ = std::make_unique<Sender>(role);
    io_ = std::make_unique<IoThread>(opts_, *self_);
    ASSERT_TRUE(io_->Start(std::nullopt).ok());
    channel_ = std::make_unique<CoordinatorChannel>(opts_, *self_, *io_);
  }
  void TearDown() override {
    if (io_) io_->Stop();
  }

  ClientOptions opts_;
  std::unique_ptr<Sender> self_;
  std::unique_ptr<IoThread> io_;
  std::unique_ptr<CoordinatorChannel> channel_;
};

std::vector<zmq::message_t> Nothing() { return {}; }

// A reply to claim `h` granting units [begin, end) of `pool`.
std::vector<zmq::message_t> Grant(const wire::Header& h, uint64_t pool, uint64_t begin, uint64_t end) {
  flatbuffers::FlatBufferBuilder fbb;
  auto g = wire::CreateWorkGrant(fbb, pool, begin, end, wire::GrantState::Granted, 0);
  std::vector<zmq::message_t> out;
  wire::Fields f;
  f.request_id = h.request_id();
  out.push_back(wire::Encode(fbb, f, wire::Body::WorkGrant, g.Union()));
  return out;
}

TEST_F(ChannelTest, RegisterGivesAWorkerItsRank) {
  TestPeer coord([](const wire::Header& h, std::vector<zmq::message_t>&) {
    if (h.type() != wire::MsgType::Register) return Nothing();
    wire::Fields f;
    f.rank = 4;
    return TestPeer::Reply(h, f);
  });
  Start(coord);
  ASSERT_TRUE(channel_->Register().ok());
  EXPECT_EQ(self_->rank.load(), 4);
}

TEST_F(ChannelTest, AnObserverKeepsNoRank) {
  TestPeer coord([](const wire::Header& h, std::vector<zmq::message_t>&) {
    wire::Fields f;
    f.rank = 4;
    return TestPeer::Reply(h, f);
  });
  Start(coord, ClientRole::kObserver);
  ASSERT_TRUE(channel_->Register().ok());
  EXPECT_EQ(self_->rank.load(), -1);
}

TEST_F(ChannelTest, RegisterAsksAgainWhileTheCoordinatorSaysNotReady) {
  std::atomic<int> asked{0};
  TestPeer coord([&](const wire::Header& h, std::vector<zmq::message_t>&) {
    if (h.type() != wire::MsgType::Register) return Nothing();
    if (++asked < 3) return TestPeer::Error(h, Status::NotReady("rank 0 is still live"));
    wire::Fields f;
    f.rank = 0;
    return TestPeer::Reply(h, f);
  });
  Start(coord);
  ASSERT_TRUE(channel_->Register().ok());
  EXPECT_EQ(asked.load(), 3);
}

TEST_F(ChannelTest, RegisterSaysWhyItFailed) {
  TestPeer coord([](const wire::Header& h, std::vector<zmq::message_t>&) {
    return TestPeer::Error(h, Status::InvalidArgument("rank 9 is past the job's 2 workers"));
  });
  Start(coord);
  Status s = channel_->Register();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "registration refused: rank 9 is past the job's 2 workers");
}

TEST_F(ChannelTest, RegisterTimesOutNamingTheCoordinator) {
  TestPeer coord([](const wire::Header&, std::vector<zmq::message_t>&) { return Nothing(); });
  Start(coord);
  opts_.connect_timeout = 300ms;
  Status s = channel_->Register();
  EXPECT_EQ(s.code(), Code::kTimeout);
  EXPECT_EQ(s.message(), "no answer from coordinator " + coord.endpoint() + " within 300 ms");
}

// A coordinator that restarts loses the requests it had not answered: the
// channel sends each again, with its request id, once the connection is
// back, and the caller gets the new coordinator's answer.
TEST_F(ChannelTest, ARequestIsSentAgainWithItsIdAfterTheCoordinatorRestarts) {
  auto first = std::make_unique<TestPeer>([](const wire::Header&, std::vector<zmq::message_t>&) { return Nothing(); });
  const std::string endpoint = first->endpoint();
  Start(*first);
  self_->rank = 0;
  WorkRange got;
  Status result;
  std::thread caller([&] { result = channel_->ClaimWork(1, 100, 10, ClaimOptions{}, &got); });
  ASSERT_TRUE([&] {
    for (auto end = Clock::now() + 10s; Clock::now() < end; std::this_thread::sleep_for(5ms))
      if (first->Count(wire::MsgType::ClaimWork) == 1) return true;
    return false;
  }());
  const uint64_t id = first->Ids(wire::MsgType::ClaimWork)[0];
  first.reset();
  TestPeer second(
      [](const wire::Header& h, std::vector<zmq::message_t>&) {
        return h.type() == wire::MsgType::ClaimWork ? Grant(h, 1, 20, 30) : Nothing();
      },
      endpoint);
  caller.join();
  ASSERT_TRUE(result.ok()) << result.ToString();
  EXPECT_EQ(got.begin, 20u);
  EXPECT_EQ(got.end, 30u);
  EXPECT_EQ(second.Ids(wire::MsgType::ClaimWork), std::vector<uint64_t>{id});
}

TEST_F(ChannelTest, ClaimsAreNumberedAndTheirGrantsChecked) {
  std::mutex mu;
  std::vector<uint64_t> seqs;  // under mu
  std::atomic<uint64_t> end{10};
  TestPeer coord([&](const wire::Header& h, std::vector<zmq::message_t>&) {
    if (h.type() != wire::MsgType::ClaimWork) return Nothing();
    std::lock_guard<std::mutex> lock(mu);
    seqs.push_back(h.seq());
    return Grant(h, 3, 0, end);
  });
  Start(coord);
  WorkRange r;
  ASSERT_TRUE(channel_->ClaimWork(3, 100, 10, ClaimOptions{}, &r).ok());
  EXPECT_EQ(r.size(), 10u);
  EXPECT_EQ(r.pool, 3u);
  end = 11;  // more than the claim's max
  Status s = channel_->ClaimWork(3, 100, 10, ClaimOptions{}, &r);
  EXPECT_EQ(s.code(), Code::kInternal);
  EXPECT_EQ(s.message(),
            "ClaimWork: the coordinator granted [0, 11) of pool 3 for a claim of at most 10 units of pool 3 (100 units)");
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(seqs, (std::vector<uint64_t>{1, 2}));
}

TEST_F(ChannelTest, ClaimWorkRefusesWhatItCannotAsk) {
  TestPeer coord([](const wire::Header&, std::vector<zmq::message_t>&) { return Nothing(); });
  Start(coord, ClientRole::kObserver);
  WorkRange r;
  EXPECT_EQ(channel_->ClaimWork(1, 0, 10, ClaimOptions{}, &r).code(), Code::kInvalidArgument);
  EXPECT_EQ(channel_->ClaimWork(1, 10, 0, ClaimOptions{}, &r).code(), Code::kInvalidArgument);
  EXPECT_EQ(channel_->ClaimWork(1, 10, 1, ClaimOptions{.granule = 0}, &r).code(), Code::kInvalidArgument);
  EXPECT_EQ(channel_->ClaimWork(1, 10, 1, ClaimOptions{.per_clock = true}, &r).code(), Code::kInvalidArgument)
      << "per-clock claims are for workers";
  EXPECT_EQ(coord.Count(wire::MsgType::ClaimWork), 0);
}

TEST_F(ChannelTest, BarrierIsForWorkersAndSaysWhatItWaitedFor) {
  TestPeer coord([](const wire::Header&, std::vector<zmq::message_t>&) { return Nothing(); });
  Start(coord);
  Status s = channel_->Barrier(100ms);
  EXPECT_EQ(s.code(), Code::kTimeout);
  EXPECT_EQ(s.message(), "barrier: not every live worker arrived within 100 ms");
  EXPECT_EQ(coord.Count(wire::MsgType::Barrier), 1);
  Sender observer(ClientRole::kObserver);
  CoordinatorChannel observers(opts_, observer, *io_);
  EXPECT_EQ(observers.Barrier(1s).code(), Code::kInvalidArgument);
  EXPECT_EQ(coord.Count(wire::MsgType::Barrier), 1);
}

TEST_F(ChannelTest, LeaveSaysWhatFailed) {
  TestPeer coord([](const wire::Header& h, std::vector<zmq::message_t>&) {
    return TestPeer::Error(h, Status::Unavailable("worker 0 is no longer live"));
  });
  Start(coord);
  Status s = channel_->Leave();
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_EQ(s.message(), "leaving the job: worker 0 is no longer live");
}

}  // namespace
}  // namespace shardps::detail
