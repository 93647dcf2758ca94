// 16-bit transfer and gradient compression of dense tables
// (TableSpec::wire, docs/compression.md) end to end, against real servers
// on loopback: a push in
// bf16 or f16 applies exactly the update of its float32 gradient rounded to
// that type (the servers keep float32 values and optimizer state); a pull
// in it reads the float32 values rounded to it, whole-range, PullView and
// by row ids alike; under sync the held 16-bit pushes of a clock are summed
// as their float32 values. A compressed push applies what it sent, and the
// residual it kept arrives with the next pushes, to the last bit; under
// sync every worker reads the same model. Requests held and sent together
// (Client::HoldRequests) go in one message per server, an envelope
// (docs/protocol.md, "Envelopes"), and read what single requests read; a
// server answers each request of an envelope on its own, and refuses an
// envelope whose frames do not add up or that holds another.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/codec/envelope.h"
#include "common/codec/half.h"
#include "common/codec/wire.h"
#include "shardps/client.h"
#include "tests/cluster.h"
#include "tests/raw_peer.h"
#include "tests/table_spec.h"

namespace shardps {
namespace {

using testing::ClusterOptions;
using testing::LocalCluster;

float Round(DType d, float x) {
  return d == DType::kBF16 ? Bf16BitsToFloat(FloatToBf16Bits(x)) : F16BitsToFloat(FloatToF16Bits(x));
}

class TransferTest : public ::testing::Test {
 protected:
  void Start(const std::string& consistency, int workers) {
    ClusterOptions o;
    o.servers = 2;
    o.workers = workers;
    o.consistency = consistency;
    ASSERT_TRUE(cluster_.Start(o).ok());
    for (int r = 0; r < workers; ++r) {
      w_.push_back(testing::ConnectClient(cluster_, ClientRole::kWorker, r));
      ASSERT_TRUE(w_.back());
    }
  }
  void TearDown() override {
    if (HasFailure()) cluster_.DumpLogs();
  }
  Table Make(const TableSpec& spec, int rank = 0) {
    Table t;
    Status s = w_[rank]->CreateTable(spec, &t);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return t;
  }
  std::vector<float> PullAll(const Table& t, int rank = 0) {
    std::vector<float> out(t.size());
    Status s = w_[rank]->Pull(t, out).Wait();
    EXPECT_TRUE(s.ok()) << s.ToString();
    return out;
  }
  // `t` as a handle that pulls exact float32 values.
  static Table Exact(Table t) {
    t.spec.wire.dtype = DType::kF32;
    return t;
  }
  LocalCluster cluster_;
  std::vector<std::unique_ptr<Client>> w_;
};

// Gradients across magnitudes: some under f16's normal range (subnormal
// there), some that round differently in each type.
std::vector<float> Gradients(size_t n, int salt) {
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) {
    const float mag = std::ldexp(1.0f, static_cast<int>(i % 23) - 18);  // 2^-18 .. 2^4
    g[i] = mag * (1.0f + 0.001953f * static_cast<float>((i * 7 + salt) % 97)) * ((i + salt) % 3 ? 1.0f : -1.0f);
  }
  return g;
}

TEST_F(TransferTest, A16BitPushAppliesItsGradientRoundedAndPullsReadTheValuesRounded) {
  Start("async", 1);
  for (DType d : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(std::string(ToString(d)));
    const std::string n(ToString(d));
    // Adam is not linear in the gradient: a gradient changed by anything
    // but the rounding would show in the values.
    const Table a = Make(testing::Dense("a" + n, 300, 3).Constant(0.25f).Adam(0.01f).Wire(d));
    const Table b = Make(testing::Dense("b" + n, 300, 3).Constant(0.25f).Adam(0.01f));
    EXPECT_EQ(a.spec.wire.dtype, d);
    EXPECT_EQ(b.spec.wire.dtype, DType::kF32);
    for (int step = 0; step < 3; ++step) {
      const std::vector<float> g = Gradients(a.size(), step);
      std::vector<float> rounded(g.size());
      for (size_t i = 0; i < g.size(); ++i) rounded[i] = Round(d, g[i]);
      ASSERT_TRUE(w_[0]->Push(a, g).Wait().ok());
      ASSERT_TRUE(w_[0]->Push(b, rounded).Wait().ok());
    }
    const std::vector<float> exact = PullAll(Exact(a)), want = PullAll(b);
    ASSERT_EQ(0, std::memcmp(exact.data(), want.data(), exact.size() * sizeof(float)));
    EXPECT_NE(exact[0], 0.25f);  // updated
    // Pulls in the wire type: the values rounded, as a whole range, a
    // PullView and a list of row ids (a row twice).
    const std::vector<float> got = PullAll(a);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], Round(d, exact[i])) << i;
    PulledRows view;
    ASSERT_TRUE(w_[0]->PullView(a, &view).Wait().ok());
    std::vector<float> viewed(a.size());
    ASSERT_TRUE(view.CopyTo(viewed).ok());
    EXPECT_EQ(viewed, got);
    const std::vector<uint64_t> ids = {299, 0, 150, 0};
    std::vector<float> rows(ids.size() * 3);
    ASSERT_TRUE(w_[0]->Pull(a, ids, rows).Wait().ok());
    for (size_t k = 0; k < ids.size(); ++k)
      for (int j = 0; j < 3; ++j) EXPECT_EQ(rows[k * 3 + j], got[ids[k] * 3 + j]) << "id " << ids[k];
    // A push by row ids in the wire type too.
    std::vector<float> gk(ids.size() * 3, 0.3333f);
    ASSERT_TRUE(w_[0]->Push(a, ids, gk).Wait().ok());
    // Specials both ways (SGD at lr 1 from zeros: the values are minus the
    // gradients): infinities, NaN, a float32 subnormal, the largest floats.
    const Table c = Make(testing::Dense("c" + n, 1, 6).Sgd(1.0f).Rule(StalenessRule::kNone).Wire(d));
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<float> sg = {inf, -inf, std::nanf(""), 1e-40f, 3e38f, -6e4f};
    ASSERT_TRUE(w_[0]->Push(c, sg).Wait().ok());
    const std::vector<float> cv = PullAll(c), ce = PullAll(Exact(c));
    EXPECT_EQ(cv[0], -inf);
    EXPECT_EQ(cv[1], inf);
    EXPECT_TRUE(std::isnan(cv[2]) && std::isnan(ce[2]));
    for (int j : {3, 4, 5}) {
      EXPECT_EQ(ce[j], -Round(d, sg[j])) << j;  // the gradient rounded, applied in float32
      EXPECT_EQ(cv[j], Round(d, ce[j])) << j;   // read back rounded again
    }
  }
  // f16 is IEEE half: a gradient past 65504 arrives as infinity.
  EXPECT_TRUE(std::isinf(Round(DType::kF16, 70000.0f)));
}

TEST_F(TransferTest, UnderSyncAClocksHeld16BitPushesAreSummedAsTheirFloat32) {
  Start("sync", 2);
  const Table a0 = Make(testing::Dense("a", 200, 4).Constant(0.5f).Momentum(0.1f, 0.9f).Wire(DType::kBF16));
  const Table b0 = Make(testing::Dense("b", 200, 4).Constant(0.5f).Momentum(0.1f, 0.9f));
  const Table a1 = Make(testing::Dense("a", 200, 4).Constant(0.5f).Momentum(0.1f, 0.9f).Wire(DType::kBF16), 1);
  const Table b1 = Make(testing::Dense("b", 200, 4).Constant(0.5f).Momentum(0.1f, 0.9f), 1);
  for (int clock = 0; clock < 3; ++clock) {
    for (int r = 0; r < 2; ++r) {
      const std::vector<float> g = Gradients(a0.size(), 10 * clock + r);
      std::vector<float> rounded(g.size());
      for (size_t i = 0; i < g.size(); ++i) rounded[i] = Round(DType::kBF16, g[i]);
      ASSERT_TRUE(w_[r]->Push(r ? a1 : a0, g).Wait().ok());
      ASSERT_TRUE(w_[r]->Push(r ? b1 : b0, rounded).Wait().ok());
    }
    for (int r = 0; r < 2; ++r) ASSERT_TRUE(w_[r]->ClockAsync().Wait().ok());
  }
  // Two gradients per clock: their sum is the same in either order.
  const std::vector<float> exact = PullAll(Exact(a0)), want = PullAll(b0);
  ASSERT_EQ(0, std::memcmp(exact.data(), want.data(), exact.size() * sizeof(float)));
  // Both workers read the same model.
  EXPECT_EQ(PullAll(a0, 0), PullAll(a1, 1));
}


// Top-k with error feedback, SGD at lr 1 from zeros: the values are minus
// what was sent. One push sends each part's k largest entries exactly;
// pushes of zero gradients then send the residual, k at a time, until the
// whole gradient has arrived: nothing lost, nothing sent twice.
TEST_F(TransferTest, TopKSendsTheLargestEntriesAndTheResidualArrivesLater) {
  Start("async", 1);
  // (No staleness rule: the pushes after the first pull would be stale.)
  Table t = Make(testing::Dense("t", 300, 3).Sgd(1.0f).Rule(StalenessRule::kNone));
  t.spec.wire.compress = Compression::kTopK;
  t.spec.wire.topk_fraction = 0.05f;
  std::vector<float> g(t.size());
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>((i * 7919) % 1000 + 1) * (i % 2 ? 1e-3f : -1e-3f);
  ASSERT_TRUE(w_[0]->Push(t, g).Wait().ok());
  std::vector<float> w = PullAll(t);
  size_t sent = 0;
  for (size_t i = 0; i < w.size(); ++i)
    if (w[i] != 0.0f) {
      ++sent;
      ASSERT_EQ(w[i], -g[i]) << i;
    }
  // Two parts of 450 values (one per server), 23 entries each.
  EXPECT_EQ(sent, 46u);
  const std::vector<float> zeros(t.size(), 0.0f);
  for (int push = 1; push < 20; ++push) ASSERT_TRUE(w_[0]->Push(t, zeros).Wait().ok());
  w = PullAll(t);
  for (size_t i = 0; i < w.size(); ++i) ASSERT_EQ(w[i], -g[i]) << i;
  // A handle's options are checked at each request: a bad one is refused,
  // nothing is sent.
  Table bad = t;
  bad.spec.wire.topk_fraction = std::nanf("");
  Status s = w_[0]->Push(bad, zeros).Wait();
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  bad = t;
  bad.spec.wire.dtype = static_cast<DType>(7);
  s = w_[0]->Pull(bad, std::span<float>(w)).Wait();
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  // A pull is not compressed; a range of rows is, against its own residual.
  ASSERT_TRUE(w_[0]->Push(t, RowRange{10, 20}, std::vector<float>(30, 1.0f)).Wait().ok());
  // Server 0 counted the compressed bytes (what travelled): 20 pushes of
  // 23 entries of 8 bytes and a header of 4, and the range's 2 entries.
  // (The servers publish their series with each heartbeat: wait for one.)
  const double want = 20.0 * (4 + 23 * 8) + (4 + 2 * 8);
  double bytes = 0;
  testing::WaitFor(
      [&] {
        bytes = testing::MetricValue(testing::ServerMetrics(cluster_), "shardps_push_bytes_total");
        return bytes == want;
      },
      std::chrono::seconds(30));
  EXPECT_EQ(bytes, want);
}

TEST_F(TransferTest, UnderSyncCompressedPushesKeepEveryWorkersModelEqual) {
  Start("sync", 2);
  for (Compression c : {Compression::kTopK, Compression::kSign}) {
    SCOPED_TRACE(std::string(ToString(c)));
    const std::string name = "c" + std::string(ToString(c));
    Table a[2] = {Make(testing::Dense(name, 200, 4).Constant(0.5f).Momentum(0.1f, 0.9f), 0),
                  Make(testing::Dense(name, 200, 4).Constant(0.5f).Momentum(0.1f, 0.9f), 1)};
    for (Table& t : a) t.spec.wire.compress = c;
    for (int clock = 0; clock < 4; ++clock) {
      for (int r = 0; r < 2; ++r) ASSERT_TRUE(w_[r]->Push(a[r], Gradients(a[r].size(), 10 * clock + r)).Wait().ok());
      for (int r = 0; r < 2; ++r) ASSERT_TRUE(w_[r]->ClockAsync().Wait().ok());
    }
    const std::vector<float> m0 = PullAll(a[0], 0), m1 = PullAll(a[1], 1);
    ASSERT_EQ(m0, m1);
    size_t moved = 0;
    for (float v : m0) moved += v != 0.5f;
    EXPECT_GT(moved, 0u);
  }
}

TEST_F(TransferTest, HeldRequestsGoInOneMessagePerServerAndReadWhatSingleOnesRead) {
  Start("async", 1);
  std::vector<Table> ts;
  for (int i = 0; i < 6; ++i)
    ts.push_back(Make(testing::Dense("held" + std::to_string(i), 300 + 50 * i, 3).Uniform(-1, 1).Seed(i + 1).Sgd(0.5f)));
  Table emb = Make(testing::Sparse("held_emb", 4).Uniform(-1, 1).Seed(9).Sgd(0.5f));
  const std::vector<uint64_t> keys = {1, 77, 1ull << 40, 5, 123456789, 6};
  // A step's pushes, held and sent together.
  std::vector<std::vector<float>> grads;
  for (size_t i = 0; i < ts.size(); ++i) grads.push_back(Gradients(ts[i].size(), static_cast<int>(i)));
  const std::vector<float> emb_grads = Gradients(keys.size() * 4, 99);
  std::vector<Request> pushes;
  {
    HeldRequests together = w_[0]->HoldRequests();
    for (size_t i = 0; i < ts.size(); ++i) pushes.push_back(w_[0]->Push(ts[i], grads[i]));
    pushes.push_back(w_[0]->Push(emb, keys, emb_grads));
  }
  for (auto& r : pushes) ASSERT_TRUE(r.Wait().ok());
  // What single pulls read...
  std::vector<std::vector<float>> single;
  for (const Table& t : ts) single.push_back(PullAll(t));
  std::vector<float> single_emb(keys.size() * 4);
  ASSERT_TRUE(w_[0]->Pull(emb, keys, single_emb).Wait().ok());
  // ... held pulls read too, in one message to server 0 (every table has
  // rows there).
  const std::string before = testing::ServerMetrics(cluster_);
  std::vector<std::vector<float>> held(ts.size());
  std::vector<float> held_emb(keys.size() * 4);
  std::vector<Request> pulls;
  HeldRequests together = w_[0]->HoldRequests();
  for (size_t i = 0; i < ts.size(); ++i) {
    held[i].resize(ts[i].size());
    pulls.push_back(w_[0]->Pull(ts[i], held[i]));
  }
  pulls.push_back(w_[0]->Pull(emb, keys, held_emb));
  together.Release();
  for (auto& r : pulls) ASSERT_TRUE(r.Wait().ok());
  EXPECT_EQ(held, single);
  EXPECT_EQ(held_emb, single_emb);
  const std::string after = testing::ServerMetrics(cluster_);
  const char* msgs = "shardps_data_messages_total";
  const char* reqs = "shardps_pull_requests_total";
  EXPECT_EQ(testing::MetricValue(after, msgs) - testing::MetricValue(before, msgs), 1) << before << after;
  EXPECT_GE(testing::MetricValue(after, reqs) - testing::MetricValue(before, reqs), 6) << before << after;
}

TEST_F(TransferTest, AnEnvelopesRequestsAreAnsweredEachOnItsOwn) {
  Start("async", 1);
  Table t = Make(testing::Dense("env", 100, 2).Constant(0.25f).Sgd(0.1f));
  testing::RawPeer raw(cluster_.ServerEndpoint(0));
  flatbuffers::FlatBufferBuilder fbb;
  auto pull = [&](uint64_t id, uint32_t table, uint64_t end) {
    wire::Fields f;
    f.type = wire::MsgType::Pull;
    f.request_id = id;
    f.table = table;
    f.row_end = end;
    return testing::Frames(raw.Header(f));
  };
  // (Row 0 is server 0's.)
  ASSERT_TRUE(raw.Exchange(pull(1, t.id, 1)).ok());
  // A good pull, one of no table, one past the rows: three replies in one
  // envelope, in order, each with its own status.
  wire::EnvelopeBuilder env;
  auto add = [&](wire::EnvelopeBuilder& to, std::vector<zmq::message_t> m) { to.Add(m); };
  add(env, pull(2, t.id, 1));
  add(env, pull(3, 999, 1));
  add(env, pull(4, t.id, 1000));
  std::vector<zmq::message_t> out;
  env.Take(fbb, &out);
  ASSERT_TRUE(raw.Exchange(std::move(out)).ok());
  ASSERT_EQ(raw.reply()->type(), wire::MsgType::Envelope);
  std::vector<zmq::message_t>& got = raw.reply_frames();
  std::vector<uint32_t> counts;
  ASSERT_TRUE(wire::EnvelopeParts(*raw.reply(), got.size() - 1, &counts).ok());
  ASSERT_EQ(counts, (std::vector<uint32_t>{2, 1, 1}));
  std::vector<uint64_t> scratch;
  const wire::Header* h = nullptr;
  const Code want[] = {Code::kOk, Code::kUnknownTable, Code::kOutOfRange};
  for (size_t i = 0, at = 1; i < 3; at += counts[i], ++i) {
    ASSERT_TRUE(wire::ParseHeader(got[at], scratch, &h).ok());
    EXPECT_EQ(h->request_id(), 2 + i);
    EXPECT_EQ(wire::ReplyStatus(h).code(), want[i]) << wire::ReplyStatus(h).ToString();
  }
  ASSERT_EQ(got[2].size(), 2 * sizeof(float));
  EXPECT_EQ(got[2].data<float>()[0], 0.25f);

  // Frames that do not add up: the envelope is refused, naming why.
  add(env, pull(5, t.id, 1));
  add(env, pull(6, t.id, 1));
  out.clear();
  env.Take(fbb, &out);
  out.pop_back();
  Status s = raw.Exchange(std::move(out));
  EXPECT_EQ(s.code(), Code::kBadMessage) << s.ToString();
  EXPECT_NE(s.message().find("have 2 frames, followed by 1"), std::string::npos) << s.ToString();

  // An envelope inside one: refused; the request beside it answered.
  wire::EnvelopeBuilder inner;
  add(inner, pull(7, t.id, 1));
  add(inner, pull(8, t.id, 1));
  std::vector<zmq::message_t> nested;
  inner.Take(fbb, &nested);
  add(env, pull(9, t.id, 1));
  env.Add(nested);
  out.clear();
  env.Take(fbb, &out);
  ASSERT_TRUE(raw.Exchange(std::move(out)).ok());
  ASSERT_EQ(raw.reply()->type(), wire::MsgType::Envelope);
  ASSERT_TRUE(wire::EnvelopeParts(*raw.reply(), raw.reply_frames().size() - 1, &counts).ok());
  ASSERT_EQ(counts, (std::vector<uint32_t>{2, 1}));
  ASSERT_TRUE(wire::ParseHeader(raw.reply_frames()[1], scratch, &h).ok());
  EXPECT_EQ(h->request_id(), 9u);
  EXPECT_TRUE(wire::ReplyStatus(h).ok());
  ASSERT_TRUE(wire::ParseHeader(raw.reply_frames()[3], scratch, &h).ok());
  EXPECT_EQ(wire::ReplyStatus(h).code(), Code::kBadMessage);
  EXPECT_NE(wire::ReplyStatus(h).message().find("an envelope inside an envelope"), std::string::npos);
}

}  // namespace
}  // namespace shardps
