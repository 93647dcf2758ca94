// Every bad input, sent over a real socket to real processes: each gets an
// error reply naming the problem, and the server keeps serving with its
// state unchanged.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include <zmq.hpp>

#include "common/codec/wire.h"
#include "shardps/client.h"
#include "tests/cluster.h"
#include "tests/raw_peer.h"
#include "tests/table_spec.h"

namespace shardps {
namespace {

using namespace std::chrono_literals;
using testing::ClusterOptions;
using testing::Floats;
using testing::Frames;
using testing::Keys;
using testing::LocalCluster;

class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ClusterOptions o;
    o.servers = 2;
    o.workers = 0;
    o.consistency = "async";
    o.server_args = {"--max-request-mb", "1"};
    ASSERT_TRUE(cluster_.Start(o).ok());
    ClientOptions co;
    co.coordinator = cluster_.coordinator();
    co.role = ClientRole::kObserver;
    co.request_timeout = 30s;
    ASSERT_TRUE(Client::Connect(co, &client_).ok());
    ASSERT_TRUE(client_->CreateTable(testing::Dense("w", 1000, 4).Normal(0, 1), &table_).ok());
    before_.resize(table_.size());
    ASSERT_TRUE(client_->Pull(table_, before_).Wait().ok());
    server0_ = cluster_.ServerEndpoint(0);
    ASSERT_FALSE(server0_.empty());
    server_ = std::make_unique<testing::RawPeer>(server0_);
  }
  void TearDown() override {
    if (HasFailure()) cluster_.DumpLogs();
    // Whatever was sent, the table is unchanged and still served.
    if (client_) {
      std::vector<float> after(table_.size());
      EXPECT_TRUE(client_->Pull(table_, after).Wait().ok());
      EXPECT_EQ(after, before_);
    }
  }

  // Sends raw frames to server 0, returns the status of the reply.
  Status Exchange(std::vector<zmq::message_t> frames) { return server_->Exchange(std::move(frames)); }

  zmq::message_t Header(wire::MsgType type, uint32_t table, uint64_t keys, uint64_t b, uint64_t e) {
    wire::Fields f;
    f.type = type;
    f.request_id = 42;
    f.table = table;
    f.key_count = keys;
    f.row_begin = b;
    f.row_end = e;
    return server_->Header(f);
  }
  // Rows of `table_` that server 0 holds: the first half (contiguous map).
  static constexpr uint64_t kRowsOnServer0 = 500;

  LocalCluster cluster_;
  std::unique_ptr<Client> client_;
  Table table_;
  std::vector<float> before_;
  std::string server0_;
  std::unique_ptr<testing::RawPeer> server_;
};

void ExpectError(const Status& s, Code code, const std::string& words) {
  EXPECT_EQ(s.code(), code) << s.ToString();
  EXPECT_NE(s.message().find(words), std::string::npos) << s.ToString();
}

TEST_F(BadInputTest, GarbageHeader) {
  ExpectError(Exchange(Frames(zmq::message_t(std::string("not a flatbuffer at all, really")))),
              Code::kBadMessage, "not a valid shardps header");
}

TEST_F(BadInputTest, TruncatedHeader) {
  zmq::message_t full = Header(wire::MsgType::Pull, table_.id, 0, 0, 10);
  zmq::message_t cut(full.data(), full.size() / 2);
  ExpectError(Exchange(Frames(std::move(cut))), Code::kBadMessage, "header");
}

TEST_F(BadInputTest, EmptyHeaderFrame) {
  ExpectError(Exchange(Frames(zmq::message_t())), Code::kBadMessage, "empty header");
}

TEST_F(BadInputTest, WrongProtocolVersion) {
  flatbuffers::FlatBufferBuilder fbb;
  wire::HeaderBuilder b(fbb);
  b.add_version(wire::kProtocolVersion + 6);
  b.add_type(wire::MsgType::Pull);
  fbb.Finish(b.Finish());
  ExpectError(Exchange(Frames(zmq::message_t(fbb.GetBufferPointer(), fbb.GetSize()))),
              Code::kVersionMismatch, "protocol version 7");
}

TEST_F(BadInputTest, UnknownTable) {
  ExpectError(Exchange(Frames(Header(wire::MsgType::Pull, 99, 0, 0, 10))), Code::kUnknownTable,
              "table id 99");
}

TEST_F(BadInputTest, ValuesDoNotMatchKeys) {
  ExpectError(Exchange(Frames(Header(wire::MsgType::Push, table_.id, 2, 0, 0), Keys({1, 2}), Floats(7))),
              Code::kSizeMismatch, "values frame has 28 bytes, the header announces 32");
}

TEST_F(BadInputTest, KeysFrameDoesNotMatchKeyCount) {
  ExpectError(Exchange(Frames(Header(wire::MsgType::Push, table_.id, 3, 0, 0), Keys({1, 2}), Floats(12))),
              Code::kSizeMismatch, "keys frame");
}

TEST_F(BadInputTest, RangeValuesDoNotMatchRows) {
  ExpectError(Exchange(Frames(Header(wire::MsgType::Push, table_.id, 0, 0, 10), Floats(39))),
              Code::kSizeMismatch, "values");
}

TEST_F(BadInputTest, IdOutOfDenseRange) {
  ExpectError(Exchange(Frames(Header(wire::MsgType::Push, table_.id, 2, 0, 0), Keys({3, 5000}), Floats(8))),
              Code::kOutOfRange, "row id 5000");
  ExpectError(Exchange(Frames(Header(wire::MsgType::Pull, table_.id, 0, 990, 1200))), Code::kOutOfRange,
              "rows [990, 1200)");
}

TEST_F(BadInputTest, RowsHeldByAnotherServer) {
  // Server 0 holds the first half of the table; the second half lives on server 1.
  ExpectError(Exchange(Frames(Header(wire::MsgType::Pull, table_.id, 0, 0, 1000))), Code::kWrongServer,
              "not held by this server");
  EXPECT_TRUE(Exchange(Frames(Header(wire::MsgType::Pull, table_.id, 0, 0, kRowsOnServer0))).ok());
}

TEST_F(BadInputTest, WrongNumberOfFrames) {
  ExpectError(Exchange(Frames(Header(wire::MsgType::Push, table_.id, 0, 0, 10))), Code::kBadMessage,
              "takes 2 frames, got 1");
  ExpectError(Exchange(Frames(Header(wire::MsgType::Pull, table_.id, 0, 0, 10), Floats(40))),
              Code::kBadMessage, "takes 1 frames, got 2");
}

TEST_F(BadInputTest, OversizedMessage) {
  // The servers run with --max-request-mb 1.
  ExpectError(Exchange(Frames(Header(wire::MsgType::Push, table_.id, 0, 0, 10), Floats(600000))),
              Code::kTooLarge, "exceeds this server's limit");
}

TEST_F(BadInputTest, MessageTypeNotServedByServers) {
  ExpectError(Exchange(Frames(Header(wire::MsgType::CreateTable, 0, 0, 0, 0))), Code::kInvalidArgument,
              "does not serve 'CreateTable'");
}

TEST_F(BadInputTest, TickFromANonWorker) {
  ExpectError(Exchange(Frames(Header(wire::MsgType::Tick, 0, 0, 0, 0))), Code::kInvalidArgument, "tick");
}

TEST_F(BadInputTest, CoordinatorRefusesGarbageAndBadTables) {
  testing::RawPeer c(cluster_.coordinator());
  ExpectError(c.Exchange(Frames(zmq::message_t(std::string("\x01\x02\x03garbage")))), Code::kBadMessage, "header");
  // A table that exists with another shape.
  flatbuffers::FlatBufferBuilder& fbb = c.builder();
  fbb.Clear();
  TableSpec t = table_.spec;
  t.rows = 7;
  auto body = wire::BuildTableSpec(fbb, t);
  wire::Fields f;
  f.type = wire::MsgType::CreateTable;
  ExpectError(c.Exchange(Frames(c.Header(f, wire::Body::TableSpec, body.Union()))), Code::kConflict,
              "already exists");
  // An invalid one.
  fbb.Clear();
  t.name = "bad";
  t.cols = 0;
  body = wire::BuildTableSpec(fbb, t);
  ExpectError(c.Exchange(Frames(c.Header(f, wire::Body::TableSpec, body.Union()))), Code::kInvalidArgument,
              "cols must be > 0");
  // Work claims: without their body, and for an empty pool.
  wire::Fields claim;
  claim.type = wire::MsgType::ClaimWork;
  ExpectError(c.Exchange(Frames(c.Header(claim))), Code::kBadMessage, "without a WorkClaim body");
  fbb.Clear();
  auto wc = wire::CreateWorkClaim(fbb, 1, 0, 4);
  ExpectError(c.Exchange(Frames(c.Header(claim, wire::Body::WorkClaim, wc.Union()))), Code::kInvalidArgument,
              "total > 0");
}

TEST_F(BadInputTest, ClientRefusesBadArgumentsBeforeSending) {
  std::vector<float> small(3);
  ExpectError(client_->Push(table_, small).Wait(), Code::kSizeMismatch, "array has 3 floats");
  std::vector<uint64_t> ids = {1, 1000};
  std::vector<float> out(8);
  ExpectError(client_->Pull(table_, ids, out).Wait(), Code::kOutOfRange, "row id 1000");
  Table fake = table_;
  fake.spec.name = "nope";
  ExpectError(client_->Pull(fake, out).Wait(), Code::kUnknownTable, "'nope'");
  Table missing;
  ExpectError(client_->GetTable("nope", &missing), Code::kUnknownTable, "known: 'w'");
}

TEST_F(BadInputTest, BadCommandLinesAreRefusedAtStart) {
  std::string out;
  EXPECT_NE(testing::RunCommand({testing::BinaryPath("SHARDPS_SERVER")}, &out), 0);
  EXPECT_NE(out.find("--coordinator is required"), std::string::npos) << out;
  EXPECT_NE(testing::RunCommand({testing::BinaryPath("SHARDPS_SERVER"), "--coordinator", "tcp://127.0.0.1:1",
                                 "--max-request-mb", "0"}, &out), 0);
  EXPECT_NE(out.find("max-request-mb"), std::string::npos) << out;
  EXPECT_NE(testing::RunCommand({testing::BinaryPath("SHARDPS_COORDINATOR"), "--consistency", "eventual"}, &out), 0);
  EXPECT_NE(out.find("unknown consistency 'eventual'"), std::string::npos) << out;
  EXPECT_NE(testing::RunCommand({testing::BinaryPath("SHARDPS_COORDINATOR"), "--servers", "4",
                                 "--partitions", "2"}, &out), 0);
  EXPECT_NE(out.find("partitions"), std::string::npos) << out;
  EXPECT_NE(testing::RunCommand({testing::BinaryPath("SHARDPS_COORDINATOR"), "--config", "/no/such/job.toml"}, &out), 0);
  EXPECT_NE(out.find("/no/such/job.toml"), std::string::npos) << out;
  EXPECT_NE(testing::RunCommand({testing::BinaryPath("SHARDPS_SERVER"), "--coordinator", "tcp://127.0.0.1:1",
                                 "--bind", "nonsense://x"}, &out), 0);
  EXPECT_NE(out.find("cannot bind"), std::string::npos) << out;
  EXPECT_EQ(testing::RunCommand({testing::BinaryPath("SHARDPS_SERVER"), "--coordinator", "tcp://127.0.0.1:1",
                                 "--cpus", "0-x"}, &out), 2);
  EXPECT_NE(out.find("'0-x' is not a CPU range"), std::string::npos) << out;
  EXPECT_EQ(testing::RunCommand({testing::BinaryPath("SHARDPS_SERVER"), "--coordinator", "tcp://127.0.0.1:1",
                                 "--cpus", "100000"}, &out), 2);
  EXPECT_NE(out.find("--cpus"), std::string::npos) << out;
}

// A server that cannot reach its coordinator says what it waits for and
// until when, and SIGTERM ends the wait at once (exit 0: it never served).
TEST_F(BadInputTest, AServerWaitingForItsCoordinatorSaysSoAndStopsOnSigterm) {
  const std::string cmd = "sh -c 'echo $$; exec \"$0\" --coordinator tcp://127.0.0.1:1 2>&1' " +
                          testing::BinaryPath("SHARDPS_SERVER");
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char line[1024];
  ASSERT_NE(fgets(line, sizeof line, p), nullptr);
  const pid_t pid = static_cast<pid_t>(std::atol(line));
  ASSERT_GT(pid, 0);
  // Its own 60 s registration timeout bounds this read.
  std::string out;
  while (out.find("waiting for coordinator") == std::string::npos && fgets(line, sizeof line, p)) out += line;
  EXPECT_NE(out.find("waiting for coordinator tcp://127.0.0.1:1 to answer this server's registration: no answer for "
                     "3 s; giving up in "),
            std::string::npos)
      << out;
  kill(pid, SIGTERM);
  while (fgets(line, sizeof line, p)) out += line;
  const int status = pclose(p);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << ": " << out;
  EXPECT_NE(out.find("stopped (SIGINT or SIGTERM) while waiting for coordinator tcp://127.0.0.1:1"), std::string::npos)
      << out;
}

}  // namespace
}  // namespace shardps
