// Fuzz target: the coordinator's whole message handler (Coordinator::Handle,
// its dispatch table and, through it, every part of server/coordinator/coordinator.h:
// Register, Heartbeat with ServerStats, GetCluster, CreateTable, Barrier,
// ClaimWork, Leave, GetStatus, Stop, SnapshotNow, SnapshotDone with its
// report, replies to its own requests, Rollback, Shutdown, and with replicas DeclareDead, Filled, DrainServer, AddServer,
// Rebalance, MoveGroup). A Coordinator is built
// for each input (never bound: replies go to unknown peers and are
// dropped, ROUTER_MANDATORY as Bind() sets it) for a job of 2 servers and 2
// workers with one table and a snapshot directory in a temp dir, and the
// input's messages are handed to Handle() in order, each from one of four
// peers (so a peer that registered as a server can then report as one):
//
//   byte 0: consistency (bits 0-1: sync, bounded, async, async); bit 2:
//           replicas 2 (fail-overs, fills, drains and moves: AddServer,
//           Rebalance, MoveGroup); bit 3: 4 replica groups on the 2 servers
//   then operations, each [u8 op] then:
//     op % 4 in 0-2: [u8 peer % 4][u8 n % 4] n frames -> Handle
//     3: the periodic checks (timeouts, snapshot timers; nothing is old
//        enough to expire within an input)
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "common/base/log.h"
#include "common/metrics/metrics.h"
#include "server/coordinator/coordinator.h"
#include "tests/fuzz/fuzz_input.h"

namespace shardps {

class CoordinatorFuzzAccess {
 public:
  static void Run(const uint8_t* data, size_t size);
};

namespace {

zmq::context_t& Context() {
  static zmq::context_t ctx(1);
  return ctx;
}

}  // namespace

void CoordinatorFuzzAccess::Run(const uint8_t* data, size_t size) {
  fuzz::Reader in(data, size);
  metrics::Registry registry;
  CoordinatorOptions o;
  const uint8_t cfg = in.U8();
  const Consistency models[] = {Consistency::kSync, Consistency::kBounded, Consistency::kAsync, Consistency::kAsync};
  o.consistency = models[cfg & 3];
  o.staleness = o.consistency == Consistency::kBounded ? 1 : 0;
  o.num_servers = 2;
  o.num_workers = 2;
  o.partitions = 8;
  o.replicas = (cfg & 4) ? 2 : 1;
  o.groups = (cfg & 8) ? 4 : 0;
  o.metrics.registry = &registry;
  o.snapshot_dir = fuzz::TempDir("coordinator");
  o.heartbeat_timeout = Millis(3600 * 1000);
  o.join_timeout = Millis(3600 * 1000);
  o.ack_timeout = Millis(3600 * 1000);
  TableSpec t;
  t.name = "w";
  t.rows = 50;
  t.cols = 2;
  t.optimizer = OptimizerKind::kAdam;
  o.tables.push_back(t);
  Coordinator c(Context(), o);
  c.sock_.set(zmq::sockopt::router_mandatory, 1);
  c.sock_.set(zmq::sockopt::linger, 0);
  c.start_ = Clock::now();
  for (int ops = 0; !in.empty() && ops < 256 && !c.shutdown_; ++ops) {
    const uint8_t op = in.U8() % 4;
    if (op == 3) {
      c.CheckTimeouts();
      c.CheckSnapshotTimers();
      continue;
    }
    const std::string peer = "peer-" + std::to_string(in.U8() % 4);
    const size_t n = in.U8() % 4;
    std::vector<zmq::message_t> frames;
    frames.emplace_back(peer.data(), peer.size());
    for (size_t i = 0; i < n; ++i) {
      const std::string_view f = in.Frame();
      frames.emplace_back(f.data(), f.size());
    }
    c.Handle(frames);
  }
}

}  // namespace shardps

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    if (!getenv("SHARDPS_FUZZ_LOG")) shardps::SetLogLevel(static_cast<shardps::LogLevel>(static_cast<int>(shardps::LogLevel::kError) + 1));
    return true;
  }();
  (void)quiet;
  shardps::CoordinatorFuzzAccess::Run(data, size);
  return 0;
}
