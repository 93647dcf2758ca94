// One Client shared by many threads (client.h: "a Client may be shared by
// any number of threads"), against a real coordinator and real servers on
// loopback. Meant to run under ThreadSanitizer too (tools/sanitize.sh
// thread): a race on the client's own state between two caller threads, or
// between a caller and the I/O thread, is reported there.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "shardps/client.h"
#include "tests/cluster.h"
#include "tests/table_spec.h"

namespace shardps {
namespace {

using namespace std::chrono_literals;
using testing::ClusterOptions;
using testing::LocalCluster;

class ClientThreadsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure()) cluster_.DumpLogs();
  }
  LocalCluster cluster_;
};

// In a job of one worker a barrier is released as soon as that worker
// arrives, so every one of many concurrent Barrier calls of its one client
// returns OK (each is its own coordinator request).
TEST_F(ClientThreadsTest, ManyThreadsCallBarrierOnOneClientOfAOneWorkerJob) {
  ClusterOptions o;
  o.servers = 1;
  o.workers = 1;
  ASSERT_TRUE(cluster_.Start(o).ok());
  auto c = testing::ConnectClient(cluster_, ClientRole::kWorker, 0);
  ASSERT_TRUE(c);
  constexpr int kThreads = 8, kRounds = 20;
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&] {
      for (int r = 0; r < kRounds; ++r) {
        Status s = c->Barrier(30s);
        EXPECT_TRUE(s.ok()) << s.ToString();
        ok += s.ok();
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), kThreads * kRounds);
  EXPECT_TRUE(c->Close().ok());
}

// Pushes of a row range over two servers and of scattered keys, from many
// threads at once: each push is applied exactly once (a worker's pushes to
// a server are numbered in the order they are sent, whichever thread issued
// them), so with SGD at lr 1 (no staleness rule: every gradient at the full
// lr) and gradients of -1 every row ends at the number of pushes that
// touched it.
TEST_F(ClientThreadsTest, ConcurrentPushesOfOneClientAreEachAppliedOnce) {
  ClusterOptions o;
  o.servers = 2;
  o.workers = 1;
  o.consistency = "async";
  ASSERT_TRUE(cluster_.Start(o).ok());
  auto c = testing::ConnectClient(cluster_, ClientRole::kWorker, 0);
  ASSERT_TRUE(c);
  Table w;
  ASSERT_TRUE(c->CreateTable(testing::Dense("threads.w", 1000, 2).Sgd(1.0f).Rule(StalenessRule::kNone), &w).ok());
  constexpr int kThreads = 6, kRounds = 25;
  // Keys 0, 7, 14, ...: rows of both servers, in one push.
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < w.rows(); k += 7) keys.push_back(k);
  const std::vector<float> all_grad(w.size(), -1.0f), key_grad(keys.size() * w.cols(), -1.0f);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] {
      std::vector<float> seen(w.size());
      for (int r = 0; r < kRounds; ++r) {
        Request push = (i + r) % 2 == 0 ? c->Push(w, all_grad) : c->Push(w, keys, key_grad);
        Status s = push.Wait();
        EXPECT_TRUE(s.ok()) << s.ToString();
        s = c->Pull(w, seen).Wait();
        EXPECT_TRUE(s.ok()) << s.ToString();
      }
    });
  for (auto& t : threads) t.join();
  int all_pushes = 0, key_pushes = 0;
  for (int i = 0; i < kThreads; ++i)
    for (int r = 0; r < kRounds; ++r) ((i + r) % 2 == 0 ? all_pushes : key_pushes)++;
  std::vector<float> final_values(w.size());
  ASSERT_TRUE(c->Pull(w, final_values).Wait().ok());
  for (uint64_t row = 0; row < w.rows(); ++row) {
    const float want = static_cast<float>(all_pushes + (row % 7 == 0 ? key_pushes : 0));
    for (uint32_t col = 0; col < w.cols(); ++col)
      ASSERT_EQ(final_values[row * w.cols() + col], want) << "row " << row << " col " << col;
  }
  EXPECT_TRUE(c->Close().ok());
}

}  // namespace
}  // namespace shardps
