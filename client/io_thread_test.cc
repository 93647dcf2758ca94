// The I/O thread (io_thread.h) against peers of the test's own (ROUTER
// sockets on loopback, test_peer.h): reply routing, push numbering,
// timeouts, closing, heartbeats, a coordinator restart, a synchronous tick
// held behind the pushes before it. No processes.
#include "client/io_thread.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "client/test_peer.h"

namespace shardps::detail {
namespace {

using namespace std::chrono_literals;
using testing::TestPeer;

// Waits until `cond` holds (up to 10 s).
template <typename F>
bool Eventually(F cond) {
  for (auto end = Clock::now() + 10s; Clock::now() < end; std::this_thread::sleep_for(5ms))
    if (cond()) return true;
  return cond();
}

class IoThreadTest : public ::testing::Test {
 protected:
  IoThreadTest() : self_(ClientRole::kWorker) {}
  // Starts the I/O thread towards `coordinator`.
  void Start(const TestPeer& coordinator) {
    opts_.coordinator = coordinator.endpoint();
    opts_.heartbeat_interval = 20ms;
    io_ = std::make_unique<IoThread>(opts_, self_);
    ASSERT_TRUE(io_->Start(std::nullopt).ok());
  }
  // A request part to `target` under `call`.
  Outgoing Item(int target, const std::shared_ptr<Call>& call, Millis timeout = 10s) {
    Outgoing o;
    o.target = target;
    o.call = call;
    o.timeout = timeout;
    return o;
  }
  static std::shared_ptr<Call> NewCall(int parts, const char* op = "push") {
    auto c = std::make_shared<Call>();
    c->parts_left = parts;
    c->op = op;
    return c;
  }
  static wire::Fields Fields(wire::MsgType type) {
    wire::Fields f;
    f.type = type;
    return f;
  }

  ClientOptions opts_;
  Sender self_;
  flatbuffers::FlatBufferBuilder fbb_;
  std::unique_ptr<IoThread> io_;
};

TestPeer::Handler Silent() {
  return [](const wire::Header&, std::vector<zmq::message_t>&) { return std::vector<zmq::message_t>{}; };
}

TEST_F(IoThreadTest, ACoordinatorRequestGetsItsReplyHeader) {
  TestPeer coord([](const wire::Header& h, std::vector<zmq::message_t>&) {
    wire::Fields f;
    f.min_clock = 42;
    return h.type() == wire::MsgType::GetCluster ? TestPeer::Reply(h, f) : std::vector<zmq::message_t>{};
  });
  Start(coord);
  auto call = NewCall(1, "coordinator request");
  Outgoing o = Item(-1, call);
  o.request_id = io_->NextRequestId();
  wire::Fields f = Fields(wire::MsgType::GetCluster);
  f.request_id = o.request_id;
  o.frames.push_back(wire::EncodeSimple(fbb_, f));
  o.dest.keep_reply = true;
  io_->Enqueue(std::move(o));
  ASSERT_TRUE(MakeRequest(call).Wait(10s).ok());
  std::vector<uint64_t> scratch;
  const wire::Header* h = nullptr;
  ASSERT_TRUE(wire::ParseHeader(call->reply, scratch, &h).ok());
  EXPECT_EQ(h->request_id(), f.request_id);
  EXPECT_EQ(h->min_clock(), 42);
}

TEST_F(IoThreadTest, PullRepliesLandWhereTheirDestSays) {
  TestPeer coord(Silent());
  // Answers a pull of rows [b, e) of one column with the row ids as values.
  auto rows = [](const wire::Header& h, std::vector<zmq::message_t>&) {
    wire::Fields f;
    f.min_clock = 3;
    f.max_clock = 4;
    f.table_version = 77;
    auto out = TestPeer::Reply(h, f);
    std::vector<float> v;
    for (uint64_t r = h.row_begin(); r < h.row_end(); ++r) v.push_back(static_cast<float>(r));
    out.emplace_back(v.data(), v.size() * 4);
    return out;
  };
  TestPeer s0(rows), s1(rows);
  Start(coord);
  io_->ConnectServers({s0.endpoint(), s1.endpoint()});
  std::vector<float> out(10, -1.0f);
  auto call = NewCall(2, "pull");
  call->versions.assign(2, kNoVersion);
  for (int sv = 0; sv < 2; ++sv) {
    Outgoing o = Item(sv, call);
    o.dest.out = out.data() + 5 * sv;
    o.dest.floats = 5;
    o.dest.clocks = true;
    wire::Fields f = Fields(wire::MsgType::Pull);
    f.row_begin = 5 * sv;
    f.row_end = 5 * sv + 5;
    io_->EnqueueRequest(std::move(o), f, {}, false, fbb_);
  }
  Request r = MakeRequest(call);
  ASSERT_TRUE(r.Wait(10s).ok());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(out[i], static_cast<float>(i));
  EXPECT_EQ(r.min_clock(), 3);
  EXPECT_EQ(r.max_clock(), 4);
  EXPECT_EQ(call->versions, (std::vector<uint64_t>{77, 77}));

  // A reply of the wrong size fails the pull, naming the server.
  call = NewCall(1, "pull");
  Outgoing o = Item(1, call);
  o.dest.out = out.data();
  o.dest.floats = 4;  // the server sends 5
  wire::Fields f = Fields(wire::MsgType::Pull);
  f.row_begin = 0;
  f.row_end = 5;
  io_->EnqueueRequest(std::move(o), f, {}, false, fbb_);
  Status s = MakeRequest(call).Wait(10s);
  EXPECT_EQ(s.code(), Code::kBadMessage);
  EXPECT_NE(s.message().find("server 1 (" + s1.endpoint() + ") answered a pull with 20 bytes"), std::string::npos)
      << s.message();
}

TEST_F(IoThreadTest, AWorkersPushesAreNumberedPerServerInSendOrder) {
  TestPeer coord(Silent());
  std::mutex mu;
  std::vector<uint64_t> seqs[2];
  auto record = [&](int sv) {
    return [&, sv](const wire::Header& h, std::vector<zmq::message_t>&) {
      std::lock_guard<std::mutex> lock(mu);
      seqs[sv].push_back(h.seq());
      return TestPeer::Reply(h);
    };
  };
  TestPeer s0(record(0)), s1(record(1));
  Start(coord);
  io_->ConnectServers({s0.endpoint(), s1.endpoint()});
  auto call = NewCall(6);
  for (int target : {0, 1, 0, 0, 1}) io_->EnqueueRequest(Item(target, call), Fields(wire::MsgType::Push), {}, true, fbb_);
  io_->EnqueueRequest(Item(0, call), Fields(wire::MsgType::Pull), {}, false, fbb_);  // not numbered
  ASSERT_TRUE(MakeRequest(call).Wait(10s).ok());
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(seqs[0], (std::vector<uint64_t>{1, 2, 3, 0}));
  EXPECT_EQ(seqs[1], (std::vector<uint64_t>{1, 2}));
}

// Requests issued while held leave together when the hold ends: one
// message per server, an envelope of them (common/codec/envelope.h), each
// request still answered on its own; replies a server gathers in one
// envelope reach their own calls, values where each one's Dest says.
TEST_F(IoThreadTest, HeldRequestsLeaveInOneMessagePerServerAndEnvelopedRepliesLand) {
  TestPeer coord(Silent());
  // Answers a pull of rows [b, e) with the row ids plus 100 x the server.
  auto rows = [](float base) {
    return [base](const wire::Header& h, std::vector<zmq::message_t>&) {
      wire::Fields f;
      f.min_clock = static_cast<int64_t>(h.request_id());  // each reply its own
      auto out = TestPeer::Reply(h, f);
      std::vector<float> v;
      for (uint64_t r = h.row_begin(); r < h.row_end(); ++r) v.push_back(base + static_cast<float>(r));
      out.emplace_back(v.data(), v.size() * 4);
      return out;
    };
  };
  TestPeer s0(rows(0)), s1(rows(100));
  s1.EnvelopeReplies(true);
  Start(coord);
  io_->ConnectServers({s0.endpoint(), s1.endpoint()});
  std::vector<float> out(30, -1.0f);
  std::vector<std::shared_ptr<Call>> calls;
  io_->Hold();
  io_->Hold();  // (nested: the last release sends)
  for (int i = 0; i < 6; ++i) {
    auto call = NewCall(1, "pull");
    calls.push_back(call);
    Outgoing o = Item(i % 2, call);
    o.dest.out = out.data() + 5 * i;
    o.dest.floats = 5;
    o.dest.clocks = true;
    wire::Fields f = Fields(wire::MsgType::Pull);
    f.row_begin = 5 * i;
    f.row_end = 5 * i + 5;
    io_->EnqueueRequest(std::move(o), f, {}, false, fbb_);
  }
  io_->Release();
  io_->Release();
  for (auto& c : calls) ASSERT_TRUE(MakeRequest(c).Wait(10s).ok());
  for (int i = 0; i < 6; ++i)
    for (int k = 0; k < 5; ++k) EXPECT_EQ(out[5 * i + k], (i % 2 ? 100.0f : 0.0f) + 5 * i + k) << i << " " << k;
  // Three pulls to each server, in one message each; answered one by one
  // (server 0) and in one envelope (server 1), each call its own reply.
  EXPECT_EQ(s0.Messages(), 1);
  EXPECT_EQ(s1.Messages(), 1);
  EXPECT_EQ(s0.Count(wire::MsgType::Pull), 3);
  EXPECT_EQ(s1.Count(wire::MsgType::Pull), 3);
  auto ids = s1.Ids(wire::MsgType::Pull);
  for (int i = 1; i < 6; i += 2) EXPECT_EQ(MakeRequest(calls[i]).min_clock(), static_cast<int64_t>(ids[i / 2])) << i;

  // Closing while a hold is on sends or fails what is held: nothing waits
  // for a release that will not come.
  auto held = NewCall(1, "pull");
  io_->Hold();
  Outgoing o = Item(0, held);
  wire::Fields f = Fields(wire::MsgType::Pull);
  f.row_end = 1;
  o.dest.out = out.data();
  o.dest.floats = 1;
  io_->EnqueueRequest(std::move(o), f, {}, false, fbb_);
  io_->Stop();
  Status st = MakeRequest(held).Wait(10s);
  EXPECT_TRUE(st.ok() || st.code() == Code::kUnavailable) << st.ToString();
  io_->Release();
}

// A hold holds what is issued while it lives, not what was queued before
// it: waiting inside a hold on a request issued before it (a trainer's
// last tick) must not wait for the hold's end.
TEST_F(IoThreadTest, AHoldDoesNotHoldWhatWasQueuedBeforeIt) {
  TestPeer coord(Silent());
  TestPeer s0([](const wire::Header& h, std::vector<zmq::message_t>&) { return TestPeer::Reply(h); });
  Start(coord);
  io_->ConnectServers({s0.endpoint()});
  for (int i = 0; i < 20; ++i) {
    auto before = NewCall(1, "tick");
    io_->EnqueueRequest(Item(0, before), Fields(wire::MsgType::Tick), {}, false, fbb_);
    io_->Hold();  // (at once: the I/O thread has most likely not taken it yet)
    auto inside = NewCall(1, "pull");
    io_->EnqueueRequest(Item(0, inside), Fields(wire::MsgType::Pull), {}, false, fbb_);
    Status s = MakeRequest(before).Wait(5s);
    EXPECT_TRUE(s.ok()) << i << ": " << s.ToString();
    EXPECT_FALSE(MakeRequest(inside).Done());  // held
    io_->Release();
    ASSERT_TRUE(MakeRequest(inside).Wait(10s).ok());
    if (!s.ok()) break;
  }
}

// A hold gathers the data messages to servers: a request to the
// coordinator issued inside it (a work claim a trainer waits for while its
// tick is held) goes at once, and what is held stays held.
TEST_F(IoThreadTest, AHoldDoesNotHoldRequestsToTheCoordinator) {
  TestPeer coord([](const wire::Header& h, std::vector<zmq::message_t>&) {
    return h.type() == wire::MsgType::ClaimWork ? TestPeer::Reply(h) : std::vector<zmq::message_t>{};
  });
  TestPeer s0([](const wire::Header& h, std::vector<zmq::message_t>&) { return TestPeer::Reply(h); });
  Start(coord);
  io_->ConnectServers({s0.endpoint()});
  io_->Hold();
  auto tick = NewCall(1, "tick");
  io_->EnqueueRequest(Item(0, tick), Fields(wire::MsgType::Tick), {}, false, fbb_);
  auto claim = NewCall(1, "coordinator request");
  io_->EnqueueRequest(Item(-1, claim), Fields(wire::MsgType::ClaimWork), {}, false, fbb_);
  Status s = MakeRequest(claim).Wait(5s);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_FALSE(MakeRequest(tick).Done());  // still held
  EXPECT_EQ(s0.Count(wire::MsgType::Tick), 0);
  io_->Release();
  ASSERT_TRUE(MakeRequest(tick).Wait(10s).ok());
  EXPECT_EQ(coord.Count(wire::MsgType::ClaimWork), 1);
}

// A synchronous tick (after_pushes) leaves only once every push sent before
// it was answered (here: one server's push is never answered and times
// out), so a worker that dies between its ticks left its clock's pushes on
// every server; what is issued after the tick waits behind it; a push sent
// after the tick is not waited for.
TEST_F(IoThreadTest, ASyncTickLeavesOnlyOnceEveryEarlierPushWasAnswered) {
  TestPeer coord(Silent());
  std::mutex mu;
  std::shared_ptr<Call> push = NewCall(2, "push");
  std::vector<std::string> order;  // what server 1 got, in order
  int parts_left_at_tick = -1;
  std::shared_ptr<Call> watch;  // (later) the push whose parts are counted at each tick
  std::vector<int> watched_at_ticks;
  TestPeer s0([](const wire::Header& h, std::vector<zmq::message_t>&) {
    if (h.type() == wire::MsgType::Push) return std::vector<zmq::message_t>{};  // never answered
    return TestPeer::Reply(h);
  });
  TestPeer s1([&](const wire::Header& h, std::vector<zmq::message_t>&) {
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(wire::EnumNameMsgType(h.type()));
    if (h.type() == wire::MsgType::Tick) {
      std::lock_guard<std::mutex> pl(push->mu);
      parts_left_at_tick = push->parts_left;
      if (watch) {
        std::lock_guard<std::mutex> wl(watch->mu);
        watched_at_ticks.push_back(watch->parts_left);
      }
    }
    return TestPeer::Reply(h);
  });
  Start(coord);
  io_->ConnectServers({s0.endpoint(), s1.endpoint()});
  io_->EnqueueRequest(Item(0, push, 300ms), Fields(wire::MsgType::Push), {}, true, fbb_);
  io_->EnqueueRequest(Item(1, push, 300ms), Fields(wire::MsgType::Push), {}, true, fbb_);
  auto tick = NewCall(2, "clock tick");
  for (int sv = 0; sv < 2; ++sv) {
    Outgoing o = Item(sv, tick);
    o.after_pushes = true;
    io_->EnqueueRequest(std::move(o), Fields(wire::MsgType::Tick), {}, false, fbb_);
  }
  auto pull = NewCall(1, "pull");
  io_->EnqueueRequest(Item(1, pull), Fields(wire::MsgType::Pull), {}, false, fbb_);
  EXPECT_EQ(MakeRequest(push).Wait(10s).code(), Code::kTimeout);
  ASSERT_TRUE(MakeRequest(tick).Wait(10s).ok());
  ASSERT_TRUE(MakeRequest(pull).Wait(10s).ok());
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(parts_left_at_tick, 0) << "the tick left before server 0's push was answered (or timed out)";
    EXPECT_EQ(order, (std::vector<std::string>{"Push", "Tick", "Pull"}));
  }
  // A push issued after a tick does not hold that tick back.
  auto later_push = NewCall(1, "push");
  auto tick2 = NewCall(1, "clock tick");
  Outgoing o = Item(1, tick2);
  o.after_pushes = true;
  io_->EnqueueRequest(std::move(o), Fields(wire::MsgType::Tick), {}, false, fbb_);
  io_->EnqueueRequest(Item(0, later_push, 1s), Fields(wire::MsgType::Push), {}, true, fbb_);
  ASSERT_TRUE(MakeRequest(tick2).Wait(5s).ok());
  EXPECT_EQ(MakeRequest(later_push).Wait(10s).code(), Code::kTimeout);  // (server 0 answers no push)
  // Pipelined: push A, tick 0, push B, tick 1, all queued at once (server
  // 0 never answers a push): tick 1 waits for B too, sent after tick 0.
  auto pa = NewCall(1, "push"), pb = NewCall(1, "push"), t0 = NewCall(1, "clock tick"), t1 = NewCall(1, "clock tick");
  {
    std::lock_guard<std::mutex> lock(mu);
    watch = pb;
    watched_at_ticks.clear();
  }
  io_->EnqueueRequest(Item(0, pa, 300ms), Fields(wire::MsgType::Push), {}, true, fbb_);
  for (auto* t : {&t0, &t1}) {
    Outgoing o = Item(1, *t);
    o.after_pushes = true;
    io_->EnqueueRequest(std::move(o), Fields(wire::MsgType::Tick), {}, false, fbb_);
    if (t == &t0) io_->EnqueueRequest(Item(0, pb, 300ms), Fields(wire::MsgType::Push), {}, true, fbb_);
  }
  Status st1 = MakeRequest(t1).Wait(10s);
  ASSERT_TRUE(st1.ok()) << st1.ToString();
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(watched_at_ticks.size(), 2u);
  EXPECT_EQ(watched_at_ticks[1], 0) << "tick 1 left before push B (queued before it) was answered";
}

TEST_F(IoThreadTest, NumberingContinuesAcrossANewServerList) {
  TestPeer coord(Silent());
  std::atomic<uint64_t> last{0};
  TestPeer s0([&](const wire::Header& h, std::vector<zmq::message_t>&) {
    last = h.seq();
    return TestPeer::Reply(h);
  });
  Start(coord);
  io_->ConnectServers({s0.endpoint()});
  auto call = NewCall(1);
  io_->EnqueueRequest(Item(0, call), Fields(wire::MsgType::Push), {}, true, fbb_);
  ASSERT_TRUE(MakeRequest(call).Wait(10s).ok());
  io_->ConnectServers({s0.endpoint(), ""});
  call = NewCall(1);
  io_->EnqueueRequest(Item(0, call), Fields(wire::MsgType::Push), {}, true, fbb_);
  ASSERT_TRUE(MakeRequest(call).Wait(10s).ok());
  EXPECT_EQ(last.load(), 2u);
}

TEST_F(IoThreadTest, AnUnansweredRequestTimesOut) {
  TestPeer coord(Silent()), s0(Silent());
  Start(coord);
  io_->ConnectServers({s0.endpoint()});
  auto call = NewCall(1);
  io_->EnqueueRequest(Item(0, call, 100ms), Fields(wire::MsgType::Push), {}, true, fbb_);
  Status s = MakeRequest(call).Wait(10s);
  EXPECT_EQ(s.code(), Code::kTimeout);
  EXPECT_NE(s.message().find("push to server 0 (" + s0.endpoint() + ") got no answer in time"), std::string::npos)
      << s.message();
}

TEST_F(IoThreadTest, ARequestToAServerItHasNoSocketForFailsAtOnce) {
  TestPeer coord(Silent());
  Start(coord);
  auto call = NewCall(1);
  io_->EnqueueRequest(Item(3, call), Fields(wire::MsgType::Push), {}, true, fbb_);
  Status s = MakeRequest(call).Wait(10s);
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_EQ(s.message(), "not connected to server 3");
}

TEST_F(IoThreadTest, StopFailsWhatIsInFlightAndWhatComesAfter) {
  TestPeer coord(Silent()), s0(Silent());
  Start(coord);
  io_->ConnectServers({s0.endpoint()});
  auto in_flight = NewCall(1);
  io_->EnqueueRequest(Item(0, in_flight), Fields(wire::MsgType::Pull), {}, false, fbb_);
  ASSERT_TRUE(Eventually([&] { return s0.Count(wire::MsgType::Pull) == 1; }));
  io_->Stop();
  Status s = MakeRequest(in_flight).Wait(1s);
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_EQ(s.message(), "client is closed");
  auto later = NewCall(1);
  io_->EnqueueRequest(Item(0, later), Fields(wire::MsgType::Pull), {}, false, fbb_);
  EXPECT_TRUE(MakeRequest(later).Done());
  EXPECT_EQ(MakeRequest(later).Wait(1s).code(), Code::kUnavailable);
  io_->Stop();  // idempotent
}

TEST_F(IoThreadTest, AWorkerHeartbeatsWithItsRankAndClockOnceItHasARank) {
  std::atomic<int> rank{-2};
  std::atomic<int64_t> clock{-1};
  TestPeer coord([&](const wire::Header& h, std::vector<zmq::message_t>&) {
    if (h.type() != wire::MsgType::Heartbeat) return std::vector<zmq::message_t>{};
    rank = h.rank();
    clock = h.clock();
    wire::Fields f;
    f.stopping = h.clock() >= 6;
    return TestPeer::Reply(h, f);
  });
  Start(coord);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(coord.Count(wire::MsgType::Heartbeat), 0) << "no rank yet";
  self_.rank = 2;
  self_.clock = 5;
  ASSERT_TRUE(Eventually([&] { return rank == 2 && clock == 5; }));
  EXPECT_FALSE(io_->stop_requested());
  self_.clock = 6;
  EXPECT_TRUE(Eventually([&] { return io_->stop_requested(); })) << "the reply said the job is stopping";
}

// The loop reads a socket only when its ZMQ_FD fired or after it sent on
// it (a send can take in the command that announced a reply): a reply it
// missed would wait for the pass that slept its full 50 ms, which counts
// it. Two caller threads keep pushes, pulls and synchronous ticks going to
// two servers, in bursts and one at a time, with pauses in which the
// thread sleeps, while heartbeats and their answers cross them: every
// reply is read as soon as it comes.
TEST_F(IoThreadTest, NoReplyWaitsForThePassThatSleptItsFullTime) {
  auto answer = [](const wire::Header& h, std::vector<zmq::message_t>&) { return TestPeer::Reply(h); };
  TestPeer coord(answer), s0(answer), s1(answer);
  Start(coord);
  self_.rank = 0;  // heartbeats every 20 ms, answered
  io_->ConnectServers({s0.endpoint(), s1.endpoint()});
  std::mutex enqueue_mu;  // (EnqueueRequest's builder is the test's)
  auto caller = [&](int seed) {
    std::mt19937 rng(seed);
    for (int round = 0; round < 150; ++round) {
      const int burst = 1 + static_cast<int>(rng() % 16);
      std::vector<std::shared_ptr<Call>> calls;
      for (int i = 0; i < burst; ++i) {
        const int target = static_cast<int>(rng() % 2);
        const int kind = static_cast<int>(rng() % 4);
        auto call = NewCall(1, kind == 0 ? "pull" : kind == 1 ? "clock tick" : "push");
        Outgoing o = Item(target, call);
        o.after_pushes = kind == 1;
        {
          std::lock_guard<std::mutex> lock(enqueue_mu);
          io_->EnqueueRequest(std::move(o), Fields(kind == 0   ? wire::MsgType::Pull
                                                   : kind == 1 ? wire::MsgType::Tick
                                                               : wire::MsgType::Push),
                              {}, kind >= 2, fbb_);
        }
        calls.push_back(call);
        if (rng() % 3 == 0) {  // one at a time, now and then
          ASSERT_TRUE(MakeRequest(call).Wait(10s).ok());
        }
      }
      for (auto& c : calls) ASSERT_TRUE(MakeRequest(c).Wait(10s).ok());
      if (rng() % 8 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 70));  // it sleeps
    }
  };
  std::thread a(caller, 1), b(caller, 2);
  a.join();
  b.join();
  EXPECT_GT(coord.Count(wire::MsgType::Heartbeat), 0);
  // (One reply may land between the end of a full sleep and the read, if
  // it came 50 ms late on a loaded machine; a loop that misses wake-ups
  // misses many.)
  EXPECT_LE(io_->late_replies(), 1u) << "replies were read only by the pass that slept its full 50 ms";
}

// An observer heartbeats only while it waits for answers: a fail-over's
// map comes back with the heartbeat's reply, and the requests in flight go
// to the servers now serving their groups (its requests to a dead server
// would wait for their timeout otherwise).
TEST(IoThreadObserverTest, AnObserverHeartbeatsOnlyWhileItWaitsForAnswers) {
  TestPeer coord([](const wire::Header& h, std::vector<zmq::message_t>&) { return TestPeer::Reply(h); });
  TestPeer silent([](const wire::Header&, std::vector<zmq::message_t>&) { return std::vector<zmq::message_t>{}; });
  ClientOptions opts;
  opts.coordinator = coord.endpoint();
  opts.heartbeat_interval = 20ms;
  Sender observer(ClientRole::kObserver);
  IoThread io(opts, observer);
  ASSERT_TRUE(io.Start(std::nullopt).ok());
  io.ConnectServers({silent.endpoint()});
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(coord.Count(wire::MsgType::Heartbeat), 0) << "nothing in flight";
  auto call = std::make_shared<Call>();
  call->parts_left = 1;
  call->op = "pull";
  Outgoing o;
  o.target = 0;
  o.call = call;
  o.timeout = 10s;
  flatbuffers::FlatBufferBuilder fbb;
  wire::Fields f;
  f.type = wire::MsgType::Pull;
  io.EnqueueRequest(std::move(o), f, {}, false, fbb);
  ASSERT_TRUE(Eventually([&] { return coord.Count(wire::MsgType::Heartbeat) >= 2; })) << "a pull in flight";
  io.Stop();
}

TEST_F(IoThreadTest, CountsTheCoordinatorConnectionComingBack) {
  auto coord = std::make_unique<TestPeer>(Silent());
  const std::string endpoint = coord->endpoint();
  Start(*coord);
  self_.rank = 0;  // heartbeats make the connection's handshake observable from both sides
  ASSERT_TRUE(Eventually([&] { return coord->Count(wire::MsgType::Heartbeat) > 0; }));
  EXPECT_EQ(io_->coordinator_reconnects(), 0u);
  coord.reset();  // the coordinator restarts on the same endpoint
  coord = std::make_unique<TestPeer>(Silent(), endpoint);
  EXPECT_TRUE(Eventually([&] { return io_->coordinator_reconnects() == 1; }));
}

}  // namespace
}  // namespace shardps::detail
