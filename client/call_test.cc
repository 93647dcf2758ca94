// The request book (call.h): a Call's parts and borrowed frames, what
// Request and PullStamp make of it, the stamp book, and where a pull's
// reply values go. No sockets: the I/O thread's side is played by calling
// PartDone / FrameFreed directly.
#include "client/call.h"

#include <gtest/gtest.h>

#include <thread>

#include "common/codec/wire.h"

namespace shardps::detail {
namespace {

using namespace std::chrono_literals;

std::shared_ptr<Call> PullCall(uint32_t table, uint32_t servers, uint64_t issued,
                               const std::shared_ptr<StampBook>& book) {
  auto c = std::make_shared<Call>();
  c->op = "pull";
  c->versions.assign(servers, kNoVersion);
  c->table = table;
  c->issued = issued;
  c->book = book;
  return c;
}

// A pull of `table` whose servers read `versions` (kNoVersion: not read),
// waited on: its stamp.
PullStamp StampOf(uint32_t table, const std::vector<uint64_t>& versions) {
  auto book = std::make_shared<StampBook>();
  auto c = PullCall(table, static_cast<uint32_t>(versions.size()), 1, book);
  c->parts_left = static_cast<int>(versions.size());
  Request r = MakeRequest(c);
  for (size_t i = 0; i < versions.size(); ++i)
    c->PartDone(Status::OK(), versions[i] != kNoVersion, 0, 0, static_cast<int>(i), versions[i]);
  EXPECT_TRUE(r.Wait(1s).ok());
  return r.stamp();
}

constexpr uint64_t kTag = 5ull << wire::kVersionCountBits;  // a server incarnation

TEST(Call, DoneWhenEveryPartAnsweredKeepingTheFirstError) {
  auto c = std::make_shared<Call>();
  c->op = "push";
  c->parts_left = 3;
  Request r = MakeRequest(c);
  EXPECT_FALSE(r.Done());
  c->PartDone(Status::OK(), false, 0, 0, 0, 2);
  c->PartDone(Status::NotReady("first"), false, 0, 0);
  EXPECT_FALSE(r.Done());
  c->PartDone(Status::Unavailable("second"), false, 0, 0, 2, 7);
  EXPECT_TRUE(r.Done());
  Status s = r.Wait(1s);
  EXPECT_EQ(s.code(), Code::kNotReady);
  EXPECT_EQ(s.message(), "first");
  EXPECT_EQ(r.staleness(), 2u) << "the largest staleness of the parts that succeeded";
}

TEST(Call, BorrowedFramesKeepASuccessfulCallOpenButNotAFailedOne) {
  auto c = std::make_shared<Call>();
  c->parts_left = 1;
  std::vector<float> big(kBorrowThreshold / 4), small(4);
  zmq::message_t copied = Borrow(small.data(), small.size() * 4, c);
  EXPECT_NE(copied.data(), small.data());
  zmq::message_t borrowed = Borrow(big.data(), big.size() * 4, c);
  EXPECT_EQ(borrowed.data(), big.data());
  Request r = MakeRequest(c);
  c->PartDone(Status::OK(), false, 0, 0);
  EXPECT_FALSE(r.Done()) << "the sockets still read the caller's array";
  borrowed = zmq::message_t();  // ZeroMQ lets go of the frame
  EXPECT_TRUE(r.Done());

  auto failed = std::make_shared<Call>();
  failed->parts_left = 1;
  zmq::message_t held = Borrow(big.data(), big.size() * 4, failed);
  failed->PartDone(Status::Timeout("t"), false, 0, 0);
  EXPECT_TRUE(MakeRequest(failed).Done()) << "after an error the array must stay valid until Close()";
}

TEST(Call, APullGathersClocksAndEachServersLargestVersion) {
  auto book = std::make_shared<StampBook>();
  auto c = PullCall(3, 2, 1, book);
  c->parts_left = 3;
  Request r = MakeRequest(c);
  c->PartDone(Status::OK(), true, 4, 6, 1, kTag | 10);
  c->PartDone(Status::OK(), true, 2, 5, 1, kTag | 12);
  c->PartDone(Status::OK(), true, 3, 9, 0, kTag | 1);
  ASSERT_TRUE(r.Wait(1s).ok());
  EXPECT_EQ(r.min_clock(), 2);
  EXPECT_EQ(r.max_clock(), 9);
  EXPECT_EQ(r.staleness(), 0u) << "a pull reports no staleness";
  ASSERT_FALSE(r.stamp().empty());
  auto latest = book->Get(3);
  ASSERT_TRUE(latest);
  EXPECT_EQ(*latest, (std::vector<uint64_t>{kTag | 1, kTag | 12}));
}

TEST(Request, WaitTimesOutSayingWhatIsOutstanding) {
  auto c = std::make_shared<Call>();
  c->op = "push";
  c->parts_left = 2;
  Status s = MakeRequest(c).Wait(10ms);
  EXPECT_EQ(s.code(), Code::kTimeout);
  EXPECT_EQ(s.message(), "push not answered within 10 ms (2 server replies outstanding)");
}

TEST(Request, WaitWakesWhenTheLastPartArrivesFromAnotherThread) {
  auto c = std::make_shared<Call>();
  c->parts_left = 1;
  std::thread io([c] {
    std::this_thread::sleep_for(20ms);
    c->PartDone(Status::OK(), false, 0, 0);
  });
  EXPECT_TRUE(MakeRequest(c).Wait(10s).ok());
  io.join();
}

TEST(Request, ADefaultRequestIsDoneAndOk) {
  Request r;
  EXPECT_TRUE(r.Done());
  EXPECT_TRUE(r.Wait().ok());
  EXPECT_TRUE(r.stamp().empty());
  EXPECT_EQ(r.staleness(), 0u);
}

TEST(StampBook, TheLatestIssuedPullWinsWhateverTheOrderOfWaits) {
  auto book = std::make_shared<StampBook>();
  auto later = PullCall(1, 1, 2, book), earlier = PullCall(1, 1, 1, book);
  later->parts_left = earlier->parts_left = 1;
  later->PartDone(Status::OK(), true, 0, 0, 0, kTag | 20);
  earlier->PartDone(Status::OK(), true, 0, 0, 0, kTag | 10);
  ASSERT_TRUE(MakeRequest(later).Wait(1s).ok());
  ASSERT_TRUE(MakeRequest(earlier).Wait(1s).ok());
  EXPECT_EQ(*book->Get(1), std::vector<uint64_t>{kTag | 20});
  EXPECT_EQ(book->Get(2), nullptr);
}

TEST(StampBook, AFailedPullIsNoStamp) {
  auto book = std::make_shared<StampBook>();
  auto c = PullCall(1, 1, 1, book);
  c->parts_left = 1;
  c->PartDone(Status::Unavailable("gone"), false, 0, 0);
  Request r = MakeRequest(c);
  EXPECT_FALSE(r.Wait(1s).ok());
  EXPECT_TRUE(r.stamp().empty());
  EXPECT_EQ(book->Get(1), nullptr);
}

TEST(PullStamp, UpdatesSinceIsTheLargestDifferenceOfAServersCount) {
  const PullStamp then = StampOf(1, {kTag | 5, kTag | 7, kNoVersion});
  const PullStamp now = StampOf(1, {kTag | 9, kTag | 8, kNoVersion});
  EXPECT_EQ(now.UpdatesSince(then), 4);
  EXPECT_EQ(then.UpdatesSince(then), 0);
  EXPECT_EQ(then.UpdatesSince(now), -1) << "`earlier` is the later one";
  EXPECT_EQ(StampOf(2, {kTag | 9, kTag | 8, kNoVersion}).UpdatesSince(then), -1) << "another table";
  const uint64_t restarted = (6ull << wire::kVersionCountBits) | 9;
  EXPECT_EQ(StampOf(1, {restarted, kTag | 8, kNoVersion}).UpdatesSince(then), -1) << "a server restarted";
  EXPECT_EQ(StampOf(1, {kTag | 9, kTag | 8, kTag | 1}).UpdatesSince(then), -1) << "a server read by one only";
  EXPECT_EQ(StampOf(1, {kTag | 9, kTag | 8}).UpdatesSince(then), -1) << "another number of servers";
  EXPECT_EQ(PullStamp().UpdatesSince(then), -1);
}

TEST(PlaceValues, CopiesContiguousFramesInOrder) {
  std::vector<float> out(4, 0.0f);
  Dest d;
  d.out = out.data();
  d.floats = 4;
  const float a[] = {1, 2, 3}, b[] = {4};
  std::vector<zmq::message_t> frames;
  frames.emplace_back(0);
  frames.emplace_back(a, sizeof a);
  frames.emplace_back(b, sizeof b);
  ASSERT_TRUE(PlaceValues(d, frames, "server 0").ok());
  EXPECT_EQ(out, (std::vector<float>{1, 2, 3, 4}));
}

TEST(PlaceValues, ScattersRowsToTheirPositions) {
  std::vector<float> out(6, 0.0f);
  Dest d;
  d.out = out.data();
  d.positions = {2, 0};
  d.cols = 2;
  const float rows[] = {5, 6, 1, 2};
  std::vector<zmq::message_t> frames;
  frames.emplace_back(0);
  frames.emplace_back(rows, sizeof rows);
  ASSERT_TRUE(PlaceValues(d, frames, "server 0").ok());
  EXPECT_EQ(out, (std::vector<float>{1, 2, 0, 0, 5, 6}));
}

TEST(PlaceValues, KeepsTheFramesOfAViewAtTheirOffset) {
  Dest d;
  d.view = std::make_shared<PulledFrames>();
  d.view_offset = 40;
  d.floats = 2;
  const float v[] = {7, 8};
  std::vector<zmq::message_t> frames;
  frames.emplace_back(0);
  frames.emplace_back(v, sizeof v);
  ASSERT_TRUE(PlaceValues(d, frames, "server 0").ok());
  ASSERT_EQ(d.view->parts.count(40), 1u);
  ASSERT_EQ(d.view->parts[40].size(), 1u);
  EXPECT_EQ(static_cast<const float*>(d.view->parts[40][0].data())[1], 8.0f);
}

TEST(PlaceValues, RefusesARepliesOfAnotherSize) {
  std::vector<float> out(4);
  Dest d;
  d.out = out.data();
  d.floats = 4;
  const float a[] = {1, 2, 3};
  std::vector<zmq::message_t> frames;
  frames.emplace_back(0);
  frames.emplace_back(a, sizeof a);
  Status s = PlaceValues(d, frames, "server 1 (tcp://x:1)");
  EXPECT_EQ(s.code(), Code::kBadMessage);
  EXPECT_EQ(s.message(), "server 1 (tcp://x:1) answered a pull with 12 bytes of values in 1 frames, expected 16");
  frames.resize(1);
  EXPECT_EQ(PlaceValues(d, frames, "s").code(), Code::kBadMessage) << "no values at all";
  // Scattered rows come in one frame.
  d.positions = {0, 1};
  d.cols = 1;
  const float x[] = {1}, y[] = {2};
  frames.emplace_back(x, sizeof x);
  frames.emplace_back(y, sizeof y);
  EXPECT_EQ(PlaceValues(d, frames, "s").code(), Code::kBadMessage);
}

}  // namespace
}  // namespace shardps::detail
