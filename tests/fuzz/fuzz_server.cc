// Fuzz target: the server's whole request handler on real tables, not only
// the parser. A Server is built for each input (never started: its ROUTER
// is not bound, so every reply goes to an unknown peer and is dropped, as
// ROUTER_MANDATORY makes it fail quietly), given a cluster view with three
// tables (dense Adam, sparse Adagrad with a row limit, dense momentum), and
// then the input's operations are applied in order through
// Server::HandleData and friends, exactly as the event loop would:
//
//   byte 0: the job: bits 0-1 consistency (sync, bounded, async, async),
//           bits 2-3 staleness (bounded), bit 4 two servers (this one holds
//           half the partitions), bit 5 three workers (else two),
//           bits 6-7 both set: snapshot cuts every 2 clocks into a temp dir
//   then operations, each [u8 op] then:
//     op % 8 in 0-2: a data message: [u8 n % 6] n frames (header, keys,
//                    values) from client "fuzz" -> HandleData
//     3: [u8 k % 4] an envelope of k + 1 messages, each [u8 n % 3] n + 1
//        frames -> HandleData
//     4: Advance()                       5: every parked pull expires
//     6: [u8 mask] the live workers change (a cluster update)
//     7: [u8 n % 4] a message of n frames from the coordinator (n > 0): a ClusterUpdate is
//        decoded and applied (snapshot paths kept as configured: the input
//        must not choose where files go), anything else -> HandleCoordinator
//
// After every operation the server's accounting is checked (held bytes,
// table bytes within the memory budget); after the input, Advance(), every
// parked pull expired, gauges, a heartbeat, any cut finished.
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "common/base/log.h"
#include "common/codec/envelope.h"
#include "common/codec/wire.h"
#include "server/server.h"
#include "tests/fuzz/fuzz_input.h"

namespace shardps {

class ServerFuzzAccess {
 public:
  static void Run(const uint8_t* data, size_t size);
};

namespace {

zmq::context_t& Context() {
  static zmq::context_t ctx(1);
  return ctx;
}

TableSpec Table(uint32_t id, std::string name, TableKind kind, uint64_t rows, uint32_t cols, InitKind init,
                OptimizerKind opt) {
  TableSpec t;
  t.id = id;
  t.name = std::move(name);
  t.kind = kind;
  t.rows = rows;
  t.cols = cols;
  t.init = init;
  t.init_a = -0.1f;
  t.init_b = 0.1f;
  t.seed = 7;
  t.optimizer = opt;
  return t;
}

ClusterView BaseView(uint8_t cfg) {
  ClusterView v;
  const Consistency models[] = {Consistency::kSync, Consistency::kBounded, Consistency::kAsync, Consistency::kAsync};
  v.consistency = models[cfg & 3];
  v.staleness = v.consistency == Consistency::kBounded ? (cfg >> 2) & 3 : 0;
  v.num_servers = (cfg & 0x10) ? 2 : 1;
  v.num_workers = (cfg & 0x20) ? 3 : 2;
  v.map = ShardMap::Contiguous(8, v.num_servers, 1);
  for (uint32_t r = 0; r < v.num_servers; ++r) v.servers.push_back("tcp://127.0.0.1:" + std::to_string(7000 + r));
  v.tables.push_back(Table(0, "dense", TableKind::kDense, 100, 4, InitKind::kNormal, OptimizerKind::kAdam));
  TableSpec sparse = Table(1, "sparse", TableKind::kSparse, 0, 3, InitKind::kUniform, OptimizerKind::kAdagrad);
  sparse.max_rows = 64;
  v.tables.push_back(sparse);
  v.tables.push_back(Table(2, "small", TableKind::kDense, 10, 1, InitKind::kZeros, OptimizerKind::kMomentum));
  v.membership_version = 1;
  for (uint32_t r = 0; r < v.num_workers; ++r) v.live_workers.push_back(r);
  if ((cfg & 0xc0) == 0xc0) {
    v.snapshot_root = fuzz::TempDir("server");
    v.snapshot_every_clocks = 2;
  }
  return v;
}

std::vector<zmq::message_t> Frames(fuzz::Reader& in, size_t n, bool with_peer) {
  std::vector<zmq::message_t> frames;
  if (with_peer) frames.emplace_back("fuzz", 4);
  for (size_t i = 0; i < n; ++i) {
    const std::string_view f = in.Frame();
    frames.emplace_back(f.data(), f.size());
  }
  return frames;
}

}  // namespace

void ServerFuzzAccess::Run(const uint8_t* data, size_t size) {
  fuzz::Reader in(data, size);
  const ClusterView base = BaseView(in.U8());
  ServerOptions o;
  o.coordinator = "inproc://shardps-fuzz-nobody";
  o.memory_budget = 8ull << 20;
  o.held_bytes = 256ull << 10;
  o.max_request_bytes = 64ull << 10;
  o.max_hold = Millis(3600 * 1000);
  Server s(Context(), o);
  s.data_.set(zmq::sockopt::router_mandatory, 1);  // as Start() sets it
  s.data_.set(zmq::sockopt::linger, 0);
  s.coord_.set(zmq::sockopt::linger, 0);
  s.rank_ = 0;
  s.ApplyCluster(base);

  // Every replica group this server holds (one: its own, unless a fuzzed
  // map gives it more).
  auto each = [&](auto&& fn) {
    for (auto& sh : s.shards_)
      if (sh) fn(*sh);
  };
  auto check = [&] {
    each([&](Shard& sh) {
      uint64_t parked = 0;
      for (const auto& p : sh.clocks.parked()) parked += p.bytes;
      if (parked != sh.clocks.parked_bytes() || sh.clocks.parked_bytes() > s.opts_.held_bytes) std::abort();
      if (s.view_.consistency == Consistency::kSync) {
        const uint64_t counted = sh.clocks.ahead_bytes();
        sh.clocks.RecountAhead();
        if (counted != sh.clocks.ahead_bytes() || sh.clocks.ahead_bytes() > s.opts_.held_bytes) std::abort();
      }
    });
    if (s.TableBytes() > s.opts_.memory_budget) std::abort();
  };
  auto expire_all = [&] {
    const Millis keep = s.opts_.max_hold;
    s.opts_.max_hold = Millis(-1);
    each([&](Shard& sh) {
      if (sh.primary) s.ExpireParked(sh);
    });
    s.opts_.max_hold = keep;
  };
  auto advance = [&] {
    each([&](Shard& sh) {
      if (sh.primary) s.Advance(sh);
    });
  };

  for (int ops = 0; !in.empty() && ops < 256 && !s.shutdown_; ++ops) {
    const uint8_t op = in.U8() % 8;
    if (op < 3) {
      auto frames = Frames(in, in.U8() % 6, true);
      s.HandleData(frames);
      s.FlushReplies();
      each([](Shard& sh) { sh.cut.CopySome(0); });  // one partition of a cut in progress, as between requests
    } else if (op == 3) {
      // An envelope of 1-4 messages of 1-3 frames each.
      wire::EnvelopeBuilder env;
      for (int k = in.U8() % 4; k >= 0; --k) {
        auto part = Frames(in, 1 + in.U8() % 3, false);
        env.Add(part);
      }
      std::vector<zmq::message_t> frames;
      frames.emplace_back("fuzz", 4);
      flatbuffers::FlatBufferBuilder fbb;
      env.Take(fbb, &frames);
      s.HandleData(frames);
      s.FlushReplies();
      each([](Shard& sh) { sh.cut.CopySome(0); });  // one partition of a cut in progress, as between requests
    } else if (op == 4) {
      advance();
    } else if (op == 5) {
      expire_all();
    } else if (op == 6) {
      const uint8_t mask = in.U8();
      ClusterView v = s.view_;
      v.live_workers.clear();
      for (uint32_t r = 0; r < v.num_workers && r < 8; ++r)
        if (mask & (1u << r)) v.live_workers.push_back(r);
      ++v.membership_version;
      s.ApplyCluster(v);
    } else {
      auto frames = Frames(in, in.U8() % 4, false);
      if (frames.empty()) continue;  // a message has at least one frame
      const wire::Header* h = nullptr;
      std::vector<uint64_t> scratch;
      if (wire::ParseHeader(frames[0], scratch, &h).ok() && h->type() == wire::MsgType::ClusterUpdate) {
        ClusterView v;
        if (wire::DecodeCluster(h->body_as_ClusterInfo(), &v).ok()) {
          v.snapshot_root = base.snapshot_root;
          v.restore_from.clear();
          s.ApplyCluster(v);
        }
      } else {
        s.HandleCoordinator(frames);
      }
    }
    check();
  }
  advance();
  expire_all();
  check();
  s.UpdateGauges();
  s.SendHeartbeat();
  each([](Shard& sh) {
    if (sh.cut.active()) sh.cut.Finish();
  });
}

}  // namespace shardps

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    // Every refused request logs a warning: far too many to print.
    if (!getenv("SHARDPS_FUZZ_LOG")) shardps::SetLogLevel(static_cast<shardps::LogLevel>(static_cast<int>(shardps::LogLevel::kError) + 1));
    return true;
  }();
  (void)quiet;
  shardps::ServerFuzzAccess::Run(data, size);
  return 0;
}
