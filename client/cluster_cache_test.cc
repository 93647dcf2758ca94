// The cluster cache (cluster_cache.h): when a new view means reconnecting,
// which tables resolve, the shared shard map; and GetTable / CreateTable
// against a coordinator of the test's own (test_peer.h). No processes.
#include "client/cluster_cache.h"

#include <gtest/gtest.h>

#include <memory>

#include "client/test_peer.h"
#include "tests/table_spec.h"

namespace shardps::detail {
namespace {

using namespace std::chrono_literals;
using testing::TestPeer;

ClusterView View(std::vector<std::string> servers, std::vector<TableSpec> tables) {
  ClusterView v;
  v.consistency = Consistency::kBounded;
  v.staleness = 2;
  v.num_servers = static_cast<uint32_t>(servers.size());
  v.num_workers = 3;
  v.map = ShardMap::Contiguous(8, v.num_servers, 1);
  v.servers = std::move(servers);
  for (size_t i = 0; i < tables.size(); ++i) tables[i].id = static_cast<uint32_t>(i);
  v.tables = std::move(tables);
  return v;
}

// A cache whose coordinator channel and I/O thread are real but not
// started: what is tested here never sends.
class ClusterCacheTest : public ::testing::Test {
 protected:
  ClusterCacheTest() : self_(ClientRole::kWorker), io_(opts_, self_), channel_(opts_, self_, io_), cache_(opts_, channel_, io_) {}
  ClientOptions opts_;
  Sender self_;
  IoThread io_;
  CoordinatorChannel channel_;
  ClusterCache cache_;
};

TEST_F(ClusterCacheTest, ReconnectsOnTheFirstViewAndWhenAServerMoved) {
  auto eps = cache_.Update(View({"tcp://a:1", "tcp://b:2"}, {}));
  ASSERT_TRUE(eps);
  EXPECT_EQ(*eps, (std::vector<std::string>{"tcp://a:1", "tcp://b:2"}));
  EXPECT_FALSE(cache_.Update(View({"tcp://a:1", "tcp://b:2"}, {testing::Dense("w", 10, 1)})))
      << "the same servers: no reconnect";
  eps = cache_.Update(View({"tcp://a:1", "tcp://c:3"}, {}));
  ASSERT_TRUE(eps);
  EXPECT_EQ((*eps)[1], "tcp://c:3");
  EXPECT_EQ(cache_.num_servers(), 2u);
  EXPECT_EQ(cache_.num_workers(), 3u);
  EXPECT_EQ(cache_.staleness(), 2u);
  EXPECT_EQ(cache_.consistency(), Consistency::kBounded);
}

TEST_F(ClusterCacheTest, ResolvesOnlyTheJobsTablesAndSharesTheMap) {
  cache_.Update(View({"tcp://a:1", "tcp://b:2"}, {testing::Dense("w", 10, 1), testing::Sparse("e", 4)}));
  Table w;
  ASSERT_TRUE(cache_.Find("w", &w));
  EXPECT_EQ(w.id, 0u);
  EXPECT_EQ(w.rows(), 10u);
  Table e;
  ASSERT_TRUE(cache_.Find("e", &e));
  EXPECT_EQ(e.id, 1u);
  EXPECT_FALSE(cache_.Find("x", &e));

  std::shared_ptr<const ShardMap> map1, map2;
  uint32_t servers = 0;
  ASSERT_TRUE(cache_.Resolve(w, &map1, &servers).ok());
  EXPECT_EQ(servers, 2u);
  EXPECT_EQ(map1->partitions(), 8u);
  ASSERT_TRUE(cache_.Resolve(e, &map2, &servers).ok());
  EXPECT_EQ(map1.get(), map2.get()) << "shared, not copied";

  Table stranger = w;
  stranger.id = 5;
  Status s = cache_.Resolve(stranger, &map2, &servers);
  EXPECT_EQ(s.code(), Code::kUnknownTable);
  EXPECT_EQ(s.message(), "table 'w' (id 5) is not a table of this job");
  stranger.id = 1;  // another table's id
  EXPECT_EQ(cache_.Resolve(stranger, &map2, &servers).code(), Code::kUnknownTable);

  // A new view brings a new map; the one handed out stays as it was.
  cache_.Update(View({"tcp://a:1"}, {testing::Dense("w", 10, 1)}));
  ASSERT_TRUE(cache_.Resolve(w, &map2, &servers).ok());
  EXPECT_NE(map1.get(), map2.get());
  EXPECT_EQ(map1->owner, ShardMap::Contiguous(8, 2, 1).owner);
  EXPECT_EQ(servers, 1u);
}

TEST_F(ClusterCacheTest, AddedTablesResolve) {
  cache_.Update(View({"tcp://a:1"}, {}));
  TableSpec t = testing::Dense("late", 4, 2);
  t.id = 3;
  cache_.AddTable(t);
  Table late;
  ASSERT_TRUE(cache_.Find("late", &late));
  EXPECT_EQ(late.id, 3u);
  std::shared_ptr<const ShardMap> map;
  uint32_t servers;
  EXPECT_TRUE(cache_.Resolve(late, &map, &servers).ok());
}

// Against a coordinator: what GetCluster answers is what the test sets.
class ClusterCacheWithCoordinatorTest : public ::testing::Test {
 protected:
  ClusterCacheWithCoordinatorTest()
      : coord_([this](const wire::Header& h, std::vector<zmq::message_t>& frames) { return Answer(h, frames); }),
        self_(ClientRole::kObserver) {
    opts_.coordinator = coord_.endpoint();
    opts_.role = ClientRole::kObserver;
    opts_.request_timeout = 10s;
    io_ = std::make_unique<IoThread>(opts_, self_);
    EXPECT_TRUE(io_->Start(std::nullopt).ok());
    channel_ = std::make_unique<CoordinatorChannel>(opts_, self_, *io_);
    cache_ = std::make_unique<ClusterCache>(opts_, *channel_, *io_);
  }
  ~ClusterCacheWithCoordinatorTest() override { io_->Stop(); }

  std::vector<zmq::message_t> Answer(const wire::Header& h, std::vector<zmq::message_t>&) {
    std::lock_guard<std::mutex> lock(mu_);
    flatbuffers::FlatBufferBuilder fbb;
    std::vector<zmq::message_t> out;
    wire::Fields f;
    f.request_id = h.request_id();
    if (h.type() == wire::MsgType::GetCluster) {
      out.push_back(wire::Encode(fbb, f, wire::Body::ClusterInfo, wire::BuildCluster(fbb, view_).Union()));
    } else if (h.type() == wire::MsgType::CreateTable) {
      TableSpec t;
      if (!wire::DecodeTableSpec(h.body_as_TableSpec(), &t).ok()) return out;
      t.id = static_cast<uint32_t>(view_.tables.size());
      view_.tables.push_back(t);
      out.push_back(wire::Encode(fbb, f, wire::Body::TableSpec, wire::BuildTableSpec(fbb, t).Union()));
    }
    return out;
  }

  std::mutex mu_;  // guards view_
  ClusterView view_ = View({""}, {testing::Dense("w", 10, 1)});
  TestPeer coord_;
  ClientOptions opts_;
  Sender self_;
  std::unique_ptr<IoThread> io_;
  std::unique_ptr<CoordinatorChannel> channel_;
  std::unique_ptr<ClusterCache> cache_;
};

TEST_F(ClusterCacheWithCoordinatorTest, GetTableAsksTheCoordinatorOnceForATableItDoesNotKnow) {
  ASSERT_TRUE(cache_->Refresh(10s).ok());
  EXPECT_EQ(coord_.Count(wire::MsgType::GetCluster), 1);
  {
    std::lock_guard<std::mutex> lock(mu_);
    view_.tables.push_back(testing::Sparse("e", 4));
    view_.tables.back().id = 1;
  }
  Table t;
  ASSERT_TRUE(cache_->GetTable("w", &t).ok());
  EXPECT_EQ(coord_.Count(wire::MsgType::GetCluster), 1) << "known: no request";
  ASSERT_TRUE(cache_->GetTable("e", &t).ok());
  EXPECT_EQ(t.id, 1u);
  EXPECT_EQ(coord_.Count(wire::MsgType::GetCluster), 2);
  Status s = cache_->GetTable("nope", &t);
  EXPECT_EQ(s.code(), Code::kUnknownTable);
  EXPECT_EQ(s.message(), "table 'nope' is not defined (known: 'w', 'e')");
  EXPECT_EQ(coord_.Count(wire::MsgType::GetCluster), 3);
}

TEST_F(ClusterCacheWithCoordinatorTest, CreateTableValidatesThenKnowsTheNewTable) {
  ASSERT_TRUE(cache_->Refresh(10s).ok());
  Table t;
  EXPECT_EQ(cache_->CreateTable(testing::Dense("", 10, 1), &t).code(), Code::kInvalidArgument);
  EXPECT_EQ(coord_.Count(wire::MsgType::CreateTable), 0);
  ASSERT_TRUE(cache_->CreateTable(testing::Dense("v", 6, 2), &t).ok());
  EXPECT_EQ(t.id, 1u);
  EXPECT_EQ(t.cols(), 2u);
  Table found;
  ASSERT_TRUE(cache_->Find("v", &found));
  std::shared_ptr<const ShardMap> map;
  uint32_t servers;
  EXPECT_TRUE(cache_->Resolve(found, &map, &servers).ok());
}

}  // namespace
}  // namespace shardps::detail
