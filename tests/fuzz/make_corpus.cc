// Writes the fuzz targets' seed corpus: valid inputs made with the real
// encoders (wire::Encode, BuildCluster, BuildTableSpec, the snapshot
// writer), in each target's input framing (fuzz_input.h and the comment at
// the top of each fuzz_<name>.cc). The committed corpus under
// tests/fuzz/corpus/ is this program's output; to regenerate it:
//
//   ninja -C build tests/fuzz/make_corpus
//   rm -r tests/fuzz/corpus && build/tests/fuzz/make_corpus tests/fuzz/corpus docs/examples
//
// Deterministic, except inside the SST files (RocksDB writes a session id
// and creation times into their properties).
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <dirent.h>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "common/cluster/partition.h"
#include "common/codec/wire.h"
#include "server/consistency/dc_kept.h"
#include "server/consistency/worker_clocks.h"
#include "server/snapshot/snapshot.h"
#include "server/tables/optimizer.h"
#include "server/tables/table.h"
#include "tests/fuzz/fuzz_input.h"

namespace shardps {
namespace {

using fuzz::Writer;
std::string g_out;

void Save(const std::string& target, const std::string& name, const std::string& bytes) {
  const std::string dir = g_out + "/" + target;
  mkdir(g_out.c_str(), 0755);
  mkdir(dir.c_str(), 0755);
  std::ofstream f(dir + "/" + name, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) {
    std::fprintf(stderr, "cannot write %s/%s\n", dir.c_str(), name.c_str());
    std::exit(1);
  }
}

std::string Str(const zmq::message_t& m) { return std::string(static_cast<const char*>(m.data()), m.size()); }

template <typename T>
std::string Bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

std::string Header(const wire::Fields& f) {
  flatbuffers::FlatBufferBuilder fbb;
  return Str(wire::EncodeSimple(fbb, f));
}

wire::Fields Fields(wire::MsgType type, uint64_t id, wire::Role role = wire::Role::Worker, int rank = 0) {
  wire::Fields f;
  f.type = type;
  f.request_id = id;
  f.role = role;
  f.rank = rank;
  return f;
}

TableSpec Spec(uint32_t id, std::string name, TableKind kind, uint64_t rows, uint32_t cols, OptimizerKind opt) {
  TableSpec t;
  t.id = id;
  t.name = std::move(name);
  t.kind = kind;
  t.rows = rows;
  t.cols = cols;
  t.init = InitKind::kUniform;
  t.init_a = -0.1f;
  t.init_b = 0.1f;
  t.optimizer = opt;
  return t;
}

ClusterView View(uint32_t servers, uint32_t workers) {
  ClusterView v;
  v.consistency = Consistency::kBounded;
  v.staleness = 1;
  v.num_servers = servers;
  v.num_workers = workers;
  v.map = ShardMap::Contiguous(8, servers, 1);
  for (uint32_t r = 0; r < servers; ++r) v.servers.push_back("tcp://127.0.0.1:" + std::to_string(7000 + r));
  v.tables.push_back(Spec(0, "dense", TableKind::kDense, 100, 4, OptimizerKind::kAdam));
  v.tables.push_back(Spec(1, "sparse", TableKind::kSparse, 0, 3, OptimizerKind::kAdagrad));
  v.membership_version = 3;
  for (uint32_t r = 0; r < workers; ++r) v.live_workers.push_back(r);
  return v;
}

std::string ClusterMessage(wire::MsgType type, const ClusterView& v, uint64_t id) {
  flatbuffers::FlatBufferBuilder fbb;
  auto body = wire::BuildCluster(fbb, v);
  wire::Fields f = Fields(type, id, wire::Role::Coordinator, 0);
  return Str(wire::Encode(fbb, f, wire::Body::ClusterInfo, body.Union()));
}

// ---- wire: one multipart message per file ----
void WireCorpus() {
  flatbuffers::FlatBufferBuilder fbb;
  auto one = [&](const std::string& name, std::vector<std::string> frames) {
    Writer w;
    for (const auto& f : frames) w.Frame(f);
    Save("wire", name, w.str());
  };
  one("cluster_update", {ClusterMessage(wire::MsgType::ClusterUpdate, View(2, 2), 4)});
  {
    fbb.Clear();
    auto body = wire::BuildTableSpec(fbb, Spec(0, "emb", TableKind::kSparse, 0, 16, OptimizerKind::kAdam));
    one("create_table", {Str(wire::Encode(fbb, Fields(wire::MsgType::CreateTable, 5), wire::Body::TableSpec, body.Union()))});
  }
  {
    fbb.Clear();
    auto req = wire::CreateRegisterRequest(fbb, wire::Role::Server, -1, fbb.CreateString("tcp://10.0.0.1:7000"),
                                           fbb.CreateString("node1"), 1234, fbb.CreateString("http://10.0.0.1:9100/metrics"),
                                           1ull << 30);
    one("register_server", {Str(wire::Encode(fbb, Fields(wire::MsgType::Register, 1, wire::Role::Server, -1),
                                             wire::Body::RegisterRequest, req.Union()))});
  }
  {
    fbb.Clear();
    auto cluster = wire::BuildCluster(fbb, View(1, 1));
    auto rep = wire::CreateRegisterReply(fbb, 0, cluster);
    one("register_reply", {Str(wire::Encode(fbb, Fields(wire::MsgType::Reply, 1), wire::Body::RegisterReply, rep.Union()))});
  }
  {
    fbb.Clear();
    auto m = wire::CreateMembershipInfo(fbb, 7, fbb.CreateVector(std::vector<uint32_t>{0, 2}));
    one("membership", {Str(wire::Encode(fbb, Fields(wire::MsgType::ClusterUpdate, 9), wire::Body::MembershipInfo, m.Union()))});
  }
  {
    fbb.Clear();
    auto b = wire::CreateBarrierRequest(fbb);
    one("barrier", {Str(wire::Encode(fbb, Fields(wire::MsgType::Barrier, 10), wire::Body::BarrierRequest, b.Union()))});
  }
  {
    fbb.Clear();
    std::vector<flatbuffers::Offset<wire::SnapshotFile>> files{wire::CreateSnapshotFile(fbb, 0, fbb.CreateString("server-0.sst"), 4096)};
    std::vector<flatbuffers::Offset<wire::SnapshotPart>> parts{wire::CreateSnapshotPart(fbb, 0, 1, 0, 12, 0x1234)};
    auto r = wire::CreateSnapshotReport(fbb, 4, fbb.CreateVector(files), fbb.CreateVector(parts));
    wire::Fields f = Fields(wire::MsgType::SnapshotDone, 11, wire::Role::Server, 0);
    f.clock = 4;
    one("snapshot_done", {Str(wire::Encode(fbb, f, wire::Body::SnapshotReport, r.Union()))});
  }
  {
    fbb.Clear();
    auto c = wire::CreateWorkClaim(fbb, 1, 600, 8);
    one("claim_work", {Str(wire::Encode(fbb, Fields(wire::MsgType::ClaimWork, 12), wire::Body::WorkClaim, c.Union()))});
  }
  {
    fbb.Clear();
    std::vector<wire::ParkedPull> waiting{{1, 5}};
    auto waits = fbb.CreateVectorOfStructs(waiting);
    auto clocks = fbb.CreateVector(std::vector<int64_t>{4, 6});
    auto st = wire::CreateServerStats(fbb, 10, 20, 4000, 8000, 4, 4, 1, clocks, waits, 123456);
    one("server_stats", {Str(wire::Encode(fbb, Fields(wire::MsgType::Heartbeat, 13, wire::Role::Server, 0),
                                          wire::Body::ServerStats, st.Union()))});
  }
  {
    fbb.Clear();
    std::vector<flatbuffers::Offset<wire::ProcessStatus>> procs{wire::CreateProcessStatusDirect(
        fbb, wire::Role::Worker, 0, "node1", 99, true, "alive", 12, "", "", 40, 1.5, 2.5, 100, 200, 10, 20, 0)};
    std::vector<wire::WaitInfo> waits{{0, 5, 1, 3}};
    auto js = wire::CreateJobStatusDirect(fbb, wire::Consistency::Bounded, 1, 1, 2, "node0", 42, "http://x/metrics",
                                          1000, true, false, &procs, "/tmp/snaps", 1, 4, "/tmp/snaps/snap-000000000004",
                                          12.5, &waits);
    one("job_status", {Str(wire::Encode(fbb, Fields(wire::MsgType::Reply, 14), wire::Body::JobStatus, js.Union()))});
  }
  {
    wire::Fields f = Fields(wire::MsgType::Push, 15);
    f.key_count = 3;
    f.clock = 2;
    f.seq = 9;
    one("push_keys", {Header(f), Bytes(std::vector<uint64_t>{5, 99, 1ull << 40}), Bytes(std::vector<float>(9, 0.5f))});
    wire::Fields p = Fields(wire::MsgType::Pull, 16);
    p.row_begin = 10;
    p.row_end = 12;
    one("pull_range", {Header(p)});
  }
  {
    flatbuffers::FlatBufferBuilder e;
    one("error_reply", {Str(wire::EncodeError(e, 17, Status::TooLarge("request of 9 bytes exceeds the limit")))});
  }
}

// ---- server: [cfg] then operations ----
struct ServerOps {
  Writer w;
  explicit ServerOps(uint8_t cfg) { w.U8(cfg); }
  ServerOps& Data(std::vector<std::string> frames) {
    w.U8(0).U8(static_cast<uint8_t>(frames.size()));
    for (const auto& f : frames) w.Frame(f);
    return *this;
  }
  ServerOps& Advance() {
    w.U8(4);
    return *this;
  }
  ServerOps& Expire() {
    w.U8(5);
    return *this;
  }
  ServerOps& Live(uint8_t mask) {
    w.U8(6).U8(mask);
    return *this;
  }
  ServerOps& Coordinator(const std::string& frame) {
    w.U8(7).U8(1).Frame(frame);
    return *this;
  }
};

std::string PushRange(int rank, int64_t clock, uint32_t table, uint64_t b, uint64_t e, uint32_t cols, uint64_t seq) {
  wire::Fields f = Fields(wire::MsgType::Push, 100 + seq, wire::Role::Worker, rank);
  f.table = table;
  f.clock = clock;
  f.seq = seq;
  f.row_begin = b;
  f.row_end = e;
  return Header(f);
}

// A push of rows [b, e) whose values are in `d` or compressed as `c`
// (docs/compression.md).
std::string PushRangeAs(int rank, uint64_t b, uint64_t e, uint64_t seq, wire::DType d, wire::Compression c) {
  wire::Fields f = Fields(wire::MsgType::Push, 300 + seq, wire::Role::Worker, rank);
  f.seq = seq;
  f.row_begin = b;
  f.row_end = e;
  f.values = {d, c};
  return Header(f);
}

std::string PullHeader(int rank, int64_t clock, uint32_t table, uint64_t keys, uint64_t b = 0, uint64_t e = 0,
                       wire::Role role = wire::Role::Worker) {
  wire::Fields f = Fields(wire::MsgType::Pull, 500 + static_cast<uint64_t>(clock), role, rank);
  f.table = table;
  f.clock = clock;
  f.key_count = keys;
  f.row_begin = b;
  f.row_end = e;
  return Header(f);
}

std::string PushKeys(int rank, int64_t clock, uint32_t table, uint64_t n, uint64_t seq) {
  wire::Fields f = Fields(wire::MsgType::Push, 200 + seq, wire::Role::Worker, rank);
  f.table = table;
  f.clock = clock;
  f.seq = seq;
  f.key_count = n;
  return Header(f);
}

std::string Tick(int rank, int64_t clock) {
  wire::Fields f = Fields(wire::MsgType::Tick, 900 + static_cast<uint64_t>(clock), wire::Role::Worker, rank);
  f.clock = clock;
  return Header(f);
}

void ServerCorpus() {
  const std::string keys3 = Bytes(std::vector<uint64_t>{3, 77, 12345});
  const std::string dense_keys = Bytes(std::vector<uint64_t>{0, 42, 99});
  // Async: pushes and pulls on every table, by range and by keys.
  {
    ServerOps o(2);
    o.Data({PushRange(0, 0, 0, 0, 10, 4, 1), Bytes(std::vector<float>(40, 0.25f))})
        .Data({PullHeader(0, 0, 0, 0, 0, 100)})
        .Data({PullHeader(1, 0, 0, 3), dense_keys})
        .Data({PushKeys(1, 0, 1, 3, 1), keys3, Bytes(std::vector<float>(9, -1.0f))})
        .Data({PullHeader(1, 0, 1, 3), keys3})
        .Data({PullHeader(0, 0, 1, 3, 0, 0, wire::Role::Observer), Bytes(std::vector<uint64_t>{8, 9, 10})})
        .Data({PushRange(0, 0, 2, 2, 8, 1, 2), Bytes(std::vector<float>(6, 1.0f))})
        .Data({PullHeader(0, 0, 2, 0, 0, 10)});
    Save("server", "async_push_pull", o.w.str());
  }
  // 16-bit values and compressed pushes of table 0 (4 columns): a bf16
  // push and pull, an f16 push, a top-k push (2 of 40 values) and a sign
  // push (40 bits and a scale).
  {
    ServerOps o(2);
    wire::Fields pull16 = Fields(wire::MsgType::Pull, 600, wire::Role::Worker, 0);
    pull16.row_end = 100;
    pull16.values.dtype = wire::DType::BF16;
    std::vector<uint8_t> topk(4 + 16);
    const uint32_t k = 2, idx[2] = {3, 17};
    const float val[2] = {0.5f, -1.0f};
    std::memcpy(topk.data(), &k, 4);
    std::memcpy(topk.data() + 4, idx, 8);
    std::memcpy(topk.data() + 12, val, 8);
    std::vector<uint8_t> sign(4 + 5, 0xa5);
    const float scale = 0.125f;
    std::memcpy(sign.data(), &scale, 4);
    o.Data({PushRangeAs(0, 0, 10, 1, wire::DType::BF16, wire::Compression::None),
            Bytes(std::vector<uint16_t>(40, 0x3f80))})
        .Data({Header(pull16)})
        .Data({PushRangeAs(0, 10, 20, 2, wire::DType::F16, wire::Compression::None),
               Bytes(std::vector<uint16_t>(40, 0xbc00))})
        .Data({PushRangeAs(1, 0, 10, 1, wire::DType::F32, wire::Compression::TopK), Bytes(topk)})
        .Data({PushRangeAs(1, 20, 30, 2, wire::DType::F32, wire::Compression::Sign), Bytes(sign)});
    Save("server", "wire_types", o.w.str());
  }
  // Sync, two workers: pushes held until both tick; a pull for the next
  // clock parked until then; a pull ahead refused; a push for a later clock.
  {
    ServerOps o(0);
    o.Data({PushRange(0, 0, 0, 0, 4, 4, 1), Bytes(std::vector<float>(16, 1.0f))})
        .Data({PushKeys(1, 0, 1, 3, 1), keys3, Bytes(std::vector<float>(9, 2.0f))})
        .Data({PushRange(1, 1, 0, 0, 4, 4, 2), Bytes(std::vector<float>(16, 3.0f))})
        .Data({Tick(0, 0)})
        .Data({PullHeader(0, 1, 0, 0, 0, 50)})
        .Data({PullHeader(0, 9, 0, 0, 0, 50)})
        .Data({Tick(1, 0)})
        .Advance()
        .Data({PullHeader(1, 1, 1, 3), keys3})
        .Expire();
    Save("server", "sync_two_workers", o.w.str());
  }
  // Bounded staleness 1: a pull two clocks ahead parks, then expires; a
  // worker leaves with pushes held.
  {
    ServerOps o(1 | (1 << 2));
    o.Data({Tick(0, 0)})
        .Data({Tick(0, 1)})
        .Data({PullHeader(0, 2, 0, 0, 10, 20)})
        .Expire()
        .Data({PullHeader(0, 2, 2, 0, 0, 10)})
        .Live(0x1)
        .Advance();
    Save("server", "bounded_parked", o.w.str());
  }
  // Sync, membership: worker 1 leaves with a push held; 3 workers.
  {
    ServerOps o(0 | 0x20);
    o.Data({PushRange(1, 0, 2, 0, 10, 1, 1), Bytes(std::vector<float>(10, 1.0f))})
        .Live(0x5)
        .Data({Tick(0, 0)})
        .Data({Tick(2, 0)})
        .Advance()
        .Data({PullHeader(0, 1, 2, 0, 0, 10)});
    Save("server", "sync_worker_leaves", o.w.str());
  }
  // Two servers: this one holds half the partitions; requests for the
  // other half are refused (WrongServer).
  {
    ServerOps o(2 | 0x10);
    o.Data({PullHeader(0, 0, 0, 0, 0, 100)})
        .Data({PullHeader(0, 0, 0, 0, 0, 40)})
        .Data({PushKeys(0, 0, 1, 3, 1), keys3, Bytes(std::vector<float>(9, 1.0f))});
    Save("server", "two_servers", o.w.str());
  }
  // Sync with snapshot cuts every 2 clocks, a cluster update adding a
  // table, and a SnapshotAt from the coordinator.
  {
    ServerOps o(0 | 0xc0);
    ClusterView v = View(1, 2);
    v.consistency = Consistency::kSync;
    v.staleness = 0;
    v.tables[0] = Spec(0, "dense", TableKind::kDense, 100, 4, OptimizerKind::kAdam);
    v.tables[0].init = InitKind::kNormal;
    v.tables[0].seed = 7;
    v.tables[1].max_rows = 64;
    v.tables.push_back(Spec(2, "small", TableKind::kDense, 10, 1, OptimizerKind::kMomentum));
    v.tables.push_back(Spec(3, "late", TableKind::kSparse, 0, 2, OptimizerKind::kSGD));
    wire::Fields at = Fields(wire::MsgType::SnapshotAt, 77, wire::Role::Coordinator, 0);
    at.clock = 1;
    o.Coordinator(ClusterMessage(wire::MsgType::ClusterUpdate, v, 40))
        .Coordinator(Header(at));
    for (int c = 0; c < 3; ++c)
      o.Data({PushRange(0, c, 0, 0, 100, 4, 1 + c), Bytes(std::vector<float>(400, 0.5f))})
          .Data({PushKeys(1, c, 3, 3, 1 + c), keys3, Bytes(std::vector<float>(6, 0.5f))})
          .Data({Tick(0, c)})
          .Data({Tick(1, c)});
    o.Advance();
    Save("server", "sync_snapshots", o.w.str());
  }
  // Refusals: no header, a bad header, wrong frame counts, an unknown table.
  {
    ServerOps o(2);
    wire::Fields bad = Fields(wire::MsgType::Pull, 3);
    bad.table = 9;
    bad.row_begin = 0;
    bad.row_end = 1;
    o.Data({})
        .Data({"not a header"})
        .Data({Header(bad)})
        .Data({PushRange(0, 0, 0, 0, 10, 4, 1)})
        .Data({PullHeader(0, 0, 0, 2), dense_keys})
        .Data({Header(Fields(wire::MsgType::Register, 4))});
    Save("server", "refusals", o.w.str());
  }
}

// ---- coordinator: [cfg] then operations ----
struct CoordOps {
  Writer w;
  explicit CoordOps(uint8_t cfg) { w.U8(cfg); }
  CoordOps& Msg(uint8_t peer, const std::string& frame) {
    w.U8(0).U8(peer).U8(1).Frame(frame);
    return *this;
  }
  CoordOps& Checks() {
    w.U8(3);
    return *this;
  }
};

std::string Register(wire::Role role, int rank, uint64_t id) {
  flatbuffers::FlatBufferBuilder fbb;
  auto req = wire::CreateRegisterRequest(fbb, role, rank,
                                         role == wire::Role::Server ? fbb.CreateString("tcp://127.0.0.1:" + std::to_string(7000 + rank)) : 0,
                                         fbb.CreateString("node"), 100 + static_cast<uint32_t>(rank), 0, 64ull << 20);
  return Str(wire::Encode(fbb, Fields(wire::MsgType::Register, id, role, -1), wire::Body::RegisterRequest, req.Union()));
}

// Both servers register and acknowledge the first map (update 1).
void TwoServersReady(CoordOps& o) {
  o.Msg(0, Register(wire::Role::Server, 0, 1)).Msg(1, Register(wire::Role::Server, 1, 2));
  wire::Fields ack = Fields(wire::MsgType::Reply, 1, wire::Role::Server, 0);
  o.Msg(0, Header(ack));
  ack.rank = 1;
  o.Msg(1, Header(ack));
}

void CoordinatorCorpus() {
  // A whole job: two servers register (the map is complete), both ack it,
  // two workers join, a table is created and acked, heartbeats with stats,
  // a barrier, work claims, status, a snapshot, a stop.
  CoordOps o(0);
  TwoServersReady(o);
  wire::Fields ack = Fields(wire::MsgType::Reply, 1, wire::Role::Server, 1);
  o.Msg(2, Register(wire::Role::Worker, 0, 3)).Msg(3, Register(wire::Role::Worker, 1, 4));
  o.Msg(2, Header(Fields(wire::MsgType::GetCluster, 5)));
  {
    flatbuffers::FlatBufferBuilder fbb;
    auto body = wire::BuildTableSpec(fbb, Spec(0, "emb", TableKind::kSparse, 0, 8, OptimizerKind::kAdagrad));
    o.Msg(2, Str(wire::Encode(fbb, Fields(wire::MsgType::CreateTable, 6), wire::Body::TableSpec, body.Union())));
    ack.request_id = 2;
    ack.rank = 0;
    o.Msg(0, Header(ack));
    ack.rank = 1;
    o.Msg(1, Header(ack));
  }
  {
    flatbuffers::FlatBufferBuilder fbb;
    std::vector<wire::ParkedPull> waiting{{1, 3}};
    auto waits = fbb.CreateVectorOfStructs(waiting);
    auto clocks = fbb.CreateVector(std::vector<int64_t>{2, 3});
    auto st = wire::CreateServerStats(fbb, 10, 20, 4000, 8000, 2, 2, 1, clocks, waits, 5000);
    o.Msg(0, Str(wire::Encode(fbb, Fields(wire::MsgType::Heartbeat, 7, wire::Role::Server, 0), wire::Body::ServerStats,
                              st.Union())));
  }
  wire::Fields hb = Fields(wire::MsgType::Heartbeat, 8, wire::Role::Worker, 0);
  hb.clock = 3;
  o.Msg(2, Header(hb));
  {
    flatbuffers::FlatBufferBuilder fbb;
    auto b = wire::CreateBarrierRequest(fbb);
    o.Msg(2, Str(wire::Encode(fbb, Fields(wire::MsgType::Barrier, 9, wire::Role::Worker, 0), wire::Body::BarrierRequest, b.Union())));
    fbb.Clear();
    b = wire::CreateBarrierRequest(fbb);
    o.Msg(3, Str(wire::Encode(fbb, Fields(wire::MsgType::Barrier, 10, wire::Role::Worker, 1), wire::Body::BarrierRequest, b.Union())));
  }
  for (uint64_t i = 0; i < 3; ++i) {
    flatbuffers::FlatBufferBuilder fbb;
    auto c = wire::CreateWorkClaim(fbb, 1, 10, 4);
    o.Msg(static_cast<uint8_t>(2 + i % 2), Str(wire::Encode(fbb, Fields(wire::MsgType::ClaimWork, 11 + i, wire::Role::Worker,
                                                                        static_cast<int>(i % 2)),
                                                            wire::Body::WorkClaim, c.Union())));
  }
  o.Msg(3, Header(Fields(wire::MsgType::GetStatus, 20, wire::Role::Observer, -1)));
  o.Msg(3, Header(Fields(wire::MsgType::SnapshotNow, 21, wire::Role::Observer, -1)));
  o.Checks();
  Save("coordinator", "whole_job", o.w.str());

  // The servers answer the snapshot's clock query, accept the cut and
  // report it done (request ids continue from the updates above).
  CoordOps s(2);
  TwoServersReady(s);
  s.Msg(2, Header(Fields(wire::MsgType::SnapshotNow, 30, wire::Role::Observer, -1)));
  for (uint64_t id = 2; id <= 5; ++id) {
    wire::Fields r = Fields(wire::MsgType::Reply, id, wire::Role::Server, static_cast<int>(id % 2));
    r.min_clock = 0;
    s.Msg(static_cast<uint8_t>(id % 2), Header(r));
  }
  for (uint32_t srv = 0; srv < 2; ++srv) {
    flatbuffers::FlatBufferBuilder fbb;
    std::vector<flatbuffers::Offset<wire::SnapshotFile>> files{
        wire::CreateSnapshotFile(fbb, srv, fbb.CreateString(snapshot::ServerFileName(srv)), 1000)};
    std::vector<flatbuffers::Offset<wire::SnapshotPart>> parts{wire::CreateSnapshotPart(fbb, 0, srv * 4, srv, 6, 0x99)};
    auto r = wire::CreateSnapshotReport(fbb, 4, fbb.CreateVector(files), fbb.CreateVector(parts));
    wire::Fields f = Fields(wire::MsgType::SnapshotDone, 40 + srv, wire::Role::Server, static_cast<int>(srv));
    f.clock = 4;
    s.Msg(static_cast<uint8_t>(srv), Str(wire::Encode(fbb, f, wire::Body::SnapshotReport, r.Union())));
  }
  wire::Fields leave = Fields(wire::MsgType::Leave, 50, wire::Role::Worker, 0);
  s.Msg(2, Register(wire::Role::Worker, 0, 49)).Msg(2, Header(leave));
  s.Msg(3, Header(Fields(wire::MsgType::Stop, 51, wire::Role::Observer, -1)));
  s.Msg(3, Header(Fields(wire::MsgType::Shutdown, 52, wire::Role::Observer, -1)));
  Save("coordinator", "snapshot_and_stop", s.w.str());

  // Moves (replicas 2, 4 groups on 2 servers): a rank added, a third
  // server registering into it (the rebalance fills it with groups 2 and 0),
  // its fills reported, the leaving copies' acknowledgements, a rebalance
  // and a move by name.
  CoordOps m(4 | 8);
  TwoServersReady(m);
  m.Msg(3, Header(Fields(wire::MsgType::AddServer, 60, wire::Role::Observer, -1)));
  m.Msg(2, Register(wire::Role::Server, -1, 61));
  for (int g : {2, 0}) {
    wire::Fields filled = Fields(wire::MsgType::Filled, 62 + g, wire::Role::Server, 2);
    filled.group = g;
    m.Msg(2, Header(filled));
  }
  for (uint64_t id = 2; id <= 8; ++id) {
    wire::Fields r = Fields(wire::MsgType::Reply, id, wire::Role::Server, static_cast<int>(id % 2));
    r.group = id % 2 ? 0 : 2;
    m.Msg(static_cast<uint8_t>(id % 2), Header(r));
  }
  m.Msg(3, Header(Fields(wire::MsgType::Rebalance, 70, wire::Role::Observer, -1)));
  {
    flatbuffers::FlatBufferBuilder fbb;
    auto mv = wire::CreateMoveRequest(fbb, 1, 0, 2);
    m.Msg(3, Str(wire::Encode(fbb, Fields(wire::MsgType::MoveGroup, 71, wire::Role::Observer, -1), wire::Body::MoveRequest,
                              mv.Union())));
  }
  m.Msg(3, Header(Fields(wire::MsgType::GetStatus, 72, wire::Role::Observer, -1)));
  m.Checks();
  Save("coordinator", "moves", m.w.str());
}

// ---- job_config: TOML text, NUL, --set values ----
void JobConfigCorpus(const std::string& examples) {
  Save("job_config", "tables_and_sets",
       std::string("[job]\nservers = 2\nworkers = 3\npartitions = 16\nconsistency = \"bounded\"\nstaleness = 2\n"
                   "server_memory_mb = 512\nsnapshot_dir = \"/tmp/snaps\"\nsnapshot_every_clocks = 10\n\n"
                   "[[table]]\nname = \"w\"\nrows = 3000\ncols = 8\ninit = \"uniform\"\nlow = -0.5\nhigh = 0.5\n"
                   "optimizer = \"adam\"\nlr = 0.01\n\n[[table]]\nname = \"emb\"\nkind = \"sparse\"\ncols = 16\n"
                   "init = \"normal\"\nstddev = 0.1\noptimizer = \"adagrad\"\nmax_rows = 100000\n\n[metrics]\nport = 0\n") +
           std::string("\0job.workers=4\0launch.mode=ssh\0metrics.port=9100", 48));
  Save("job_config", "launch_hosts",
       "[job]\nservers = 2\nworkers = 2\n[launch]\nmode = \"ssh\"\n"
       "hosts = [\"node1\", { name = \"node2\", servers = 1, workers = 2 }]\n"
       "worker_command = [\"shardps-worker\", \"--coordinator\", \"{coordinator}\", \"--rank\", \"{rank}\"]\n"
       "env = { OMP_NUM_THREADS = \"1\" }\n");
  if (DIR* d = opendir(examples.c_str())) {
    std::vector<std::string> names;
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 5 && n.compare(n.size() - 5, 5, ".toml") == 0) names.push_back(n);
    }
    closedir(d);
    for (const auto& n : names) {
      std::ifstream f(examples + "/" + n, std::ios::binary);
      Save("job_config", "example_" + n.substr(0, n.size() - 5),
           std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>()));
    }
  }
}

// ---- snapshot: [cfg][MANIFEST][server-0.sst][server-1.sst] ----
std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void SnapshotCorpus() {
  char tmpl[] = "/tmp/shardps-make-corpus-XXXXXX";
  if (!mkdtemp(tmpl)) std::exit(1);
  const std::string dir = tmpl;
  // Two tables over 8 partitions on 2 servers (partitions 0-3 and 4-7).
  TableSpec dense = Spec(0, "dense", TableKind::kDense, 16, 2, OptimizerKind::kAdagrad);
  TableSpec sparse = Spec(1, "sparse", TableKind::kSparse, 0, 1, OptimizerKind::kSGD);
  const ShardMap map = ShardMap::Contiguous(8, 2, 1);
  snapshot::Manifest m;
  m.clock = 5;
  m.unix_time_ms = 1700000000000;
  m.consistency = Consistency::kAsync;
  m.num_servers = 2;
  m.partitions = 8;
  m.owner = map.owner;
  m.tables = {dense, sparse};
  // Per server: the rows, also written in the structured form.
  std::string structured[2];
  for (uint32_t srv = 0; srv < 2; ++srv) {
    std::vector<PartitionData> parts;
    Writer rows;
    for (uint32_t p : map.OwnedBy(srv)) {
      PartitionData d;
      d.table = 0;
      d.partition = p;
      d.stride = dense.cols + static_cast<uint32_t>(OptimizerStateWidth(dense));
      for (uint64_t r = PartitionRowBegin(p, dense.rows, 8); r < PartitionRowBegin(p + 1, dense.rows, 8); ++r) {
        d.rows.push_back(r);
        for (uint32_t i = 0; i < d.stride; ++i) d.values.push_back(static_cast<float>(r) + 0.25f * static_cast<float>(i));
      }
      parts.push_back(d);
    }
    // Sparse ids whose partition this server owns.
    PartitionData sp;
    sp.table = 1;
    sp.stride = sparse.cols + static_cast<uint32_t>(OptimizerStateWidth(sparse));
    std::map<uint32_t, PartitionData> by_part;
    for (uint64_t id = 1; id < 40; id += 3) {
      const uint32_t p = PartitionOfId(id, 8);
      if (map.owner[p] != srv) continue;
      auto& d = by_part[p];
      d.table = 1;
      d.partition = p;
      d.stride = sp.stride;
      d.rows.push_back(id);
      d.values.push_back(static_cast<float>(id));
    }
    for (auto& [p, d] : by_part) parts.push_back(d);
    for (const auto& d : parts)
      for (size_t i = 0; i < d.rows.size(); ++i) {
        rows.U8(static_cast<uint8_t>(d.table)).U8(static_cast<uint8_t>(d.partition));
        for (int b = 0; b < 8; ++b) rows.U8(static_cast<uint8_t>(d.rows[i] >> (8 * b)));
        rows.U8(static_cast<uint8_t>(d.stride));
        rows.Raw(std::string(reinterpret_cast<const char*>(d.values.data() + i * d.stride), d.stride * sizeof(float)));
      }
    structured[srv] = rows.str();
    std::vector<snapshot::PartEntry> entries;
    uint64_t bytes = 0, sum = 0;
    if (!snapshot::WriteServerFile(dir + "/" + snapshot::ServerFileName(srv), srv, parts, &entries, &bytes, &sum).ok())
      std::exit(1);
    m.parts.insert(m.parts.end(), entries.begin(), entries.end());
    m.files.push_back({srv, snapshot::ServerFileName(srv), bytes, sum});
  }
  if (!snapshot::WriteManifest(dir, m).ok()) std::exit(1);
  const std::string manifest = ReadAll(dir + "/MANIFEST");
  const std::string sst0 = ReadAll(dir + "/" + snapshot::ServerFileName(0));
  const std::string sst1 = ReadAll(dir + "/" + snapshot::ServerFileName(1));
  // The files as written, restored onto 2 servers and onto 1.
  Save("snapshot", "raw_two_servers",
       Writer().U8(1 | 4).Frame(manifest).Frame(std::string(1, '\0') + sst0).Frame(std::string(1, '\0') + sst1).str());
  Save("snapshot", "raw_one_server",
       Writer().U8(1).Frame(manifest).Frame(std::string(1, '\0') + sst0).Frame(std::string(1, '\0') + sst1).str());
  // The same rows in the structured form, the manifest fixed up.
  Save("snapshot", "structured",
       Writer().U8(1 | 2 | 4).Frame(manifest).Frame("\1" + structured[0]).Frame("\1" + structured[1]).str());
  // No manifest: an incomplete snapshot.
  Save("snapshot", "incomplete", Writer().U8(0).Frame("").Frame(std::string(1, '\0') + sst0).str());
  for (const char* f : {"MANIFEST", "server-0.sst", "server-1.sst"}) unlink((dir + "/" + f).c_str());
  rmdir(dir.c_str());
}

// Criteo TSV lines (fuzz_criteo.cc reads the file as it is): label, 13
// integers (I2 = -2; `empty_i`: I5 empty), 26 categories (`empty_c`: C3 empty).
std::string CriteoLine(int label, int i0, int salt, bool empty_c = false, bool empty_i = false, bool crlf = false) {
  std::string s = std::to_string(label);
  for (int i = 0; i < 13; ++i) s += "\t" + (i == 4 && empty_i ? "" : i == 1 ? "-2" : std::to_string(i0 + i));
  for (int f = 0; f < 26; ++f) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "%08x", f * 0x1000 + salt);
    s += "\t" + (f == 2 && empty_c ? std::string() : std::string(hex));
  }
  return s + (crlf ? "\r\n" : "\n");
}

void CriteoCorpus() {
  Save("criteo", "two_lines", CriteoLine(1, 3, 7) + CriteoLine(0, 0, 1, true, true));
  Save("criteo", "crlf", CriteoLine(0, 5, 9, false, false, true) + CriteoLine(1, 1, 1, false, false, true));
  Save("criteo", "malformed", CriteoLine(1, 0, 0) + "1\t2\n" + CriteoLine(0, 0, 2) + "x" + CriteoLine(1, 1, 1).substr(1));
  const std::string last = CriteoLine(0, 2, 4);
  Save("criteo", "no_final_newline", CriteoLine(1, 2, 3) + last.substr(0, last.size() - 1));
}

// A fill's state (fuzz_fill_state.cc): worker clocks with held pushes and
// parked pulls, and delay compensation's kept pulls, as a source saves them.
void FillStateCorpus() {
  auto frames = [](const std::string& who) {
    std::vector<zmq::message_t> f;
    f.emplace_back(who.data(), who.size());
    f.emplace_back("header", 6);
    return f;
  };
  for (bool sync : {true, false}) {
    WorkerClocks w(1 << 20);
    w.SetModel(sync ? Consistency::kSync : Consistency::kBounded, 1);
    w.SetMembership(3, {0, 1, 2});
    (void)w.Tick(true, 0, 0, false);
    if (sync) {
      auto f = frames("w1");
      const uint64_t bytes = FramesBytes(f);
      if (w.CheckHold(1, 0, 1, bytes).ok()) w.Hold(1, 0, 2, std::move(f), bytes);
    }
    (void)w.IsRetry(2, 5);
    (void)w.Park(1, 2, frames("p2"), Clock::now());
    std::string saved;
    w.Save(&saved, [](const WorkerClocks::Parked&) { return true; });
    Save("fill_state", sync ? "clocks_sync" : "clocks_bounded", std::string(1, sync ? '\2' : '\0') + saved);
  }
  TableSpec spec;
  spec.name = "w";
  spec.rows = 8;
  spec.cols = 2;
  ServerTable t(spec, 2, {0, 1});
  DcKept d;
  d.Keep(0, 0, t, 0, 4, 1);
  d.Keep(1, 0, t, 4, 8, 2);
  std::string saved;
  d.Save(&saved);
  Save("fill_state", "kept_pulls", "\1" + saved);
}

}  // namespace
}  // namespace shardps

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: make_corpus OUTDIR [EXAMPLES_DIR]\n");
    return 2;
  }
  shardps::g_out = argv[1];
  shardps::WireCorpus();
  shardps::ServerCorpus();
  shardps::CoordinatorCorpus();
  shardps::JobConfigCorpus(argc > 2 ? argv[2] : "docs/examples");
  shardps::SnapshotCorpus();
  shardps::CriteoCorpus();
  shardps::FillStateCorpus();
  std::printf("seed corpus written to %s\n", argv[1]);
  return 0;
}
