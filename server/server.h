// The parameter server: holds its partitions of every table, applies pushed
// gradients with the table's optimizer and answers pulls under the job's
// consistency model (docs/consistency.md).
//
// One event-loop thread owns the tables and both sockets: a ROUTER for the
// data path (push, pull, tick) and a DEALER to the coordinator (register,
// heartbeats, cluster updates). Requests are applied in arrival order, so
// concurrent pushes and pulls from many workers are serialised without
// locks; pulls that must wait for slower workers are parked, never block the
// loop. Scale out by running more servers (one per core).
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <flatbuffers/flatbuffers.h>
#include <zmq.hpp>

#include "common/cluster.h"
#include "common/net.h"
#include "common/security.h"
#include "common/metrics.h"
#include "server/snapshot.h"
#include "server/table.h"
#include "shardps/status.h"

namespace shardps {

class ZapHandler;
namespace wire {
struct Header;
}

struct ServerOptions {
  std::string coordinator;                 // e.g. tcp://127.0.0.1:5555
  std::string bind = "tcp://127.0.0.1:0";  // data endpoint; port 0 = any free port
  std::string advertise;                   // host clients dial ("" = by route to the coordinator)
  std::string metrics_url;                 // where registry() is served, told to the coordinator
  int rank = -1;                           // -1: the coordinator assigns one
  uint64_t max_request_bytes = 512ull << 20;
  Millis heartbeat_interval{500};
  Millis register_timeout{60000};
  Millis snapshot_write_delay{0};  // fault-injection aid for tests: wait before writing
  // Limits (docs/operations.md, "Limits"). Tables this server holds may take
  // at most memory_budget bytes (0: half of this machine's memory); pulls
  // held for slower workers and synchronous pushes held for the end of
  // their clock at most held_bytes each (0: a quarter of the budget); a
  // held pull is answered Timeout after max_hold.
  uint64_t memory_budget = 0;
  uint64_t held_bytes = 0;
  Millis max_hold{600000};
  SecurityOptions security;  // CURVE + roles (docs/security.md)

  Status Validate() const;
};

class Server {
 public:
  Server(zmq::context_t& ctx, ServerOptions opts);
  ~Server();
  // Binds the data socket and registers with the coordinator (waits for its
  // reply, up to register_timeout).
  Status Start();
  // Serves until the coordinator says Shutdown or `stop` becomes true.
  Status Run(const std::atomic<bool>& stop);

  uint32_t rank() const { return rank_; }
  const std::string& endpoint() const { return endpoint_; }
  // The server's metrics (updated by Run's thread; render from any thread).
  metrics::Registry& registry() { return registry_; }
  void set_metrics_url(std::string url) { opts_.metrics_url = std::move(url); }

 private:
  friend class ServerFuzzAccess;  // tests/fuzz/fuzz_server.cc: drives HandleData directly
  struct Parked {  // a pull waiting for slower workers
    int64_t need_clock;
    int rank;
    std::vector<zmq::message_t> frames;
    Clock::time_point arrived;
    uint64_t bytes;
  };
  // Bytes of the tables held now, against opts_.memory_budget.
  uint64_t TableBytes() const;
  // A sparse request that would create rows: refused when past the table's
  // max_rows share or the memory budget.
  Status CheckSparseGrowth(const ServerTable& t, const uint64_t* keys, uint64_t n);
  void ExpireParked();
  void RecountAhead();  // ahead_bytes_ from buffered_
  static uint64_t FramesBytes(const std::vector<zmq::message_t>& frames);
  uint64_t parked_bytes_ = 0;
  uint64_t ahead_bytes_ = 0;        // sync pushes held for clocks after applied_clock_ (recounted by Advance)
  uint64_t owned_partitions_ = 0;   // partitions this server holds (the shard map)
  std::set<uint32_t> refused_tables_;  // over the budget: not held (requests get UnknownTable)
  // Everything the server counts, in registry_ (docs/operations.md).
  struct Metrics {
    explicit Metrics(metrics::Registry& r);
    metrics::Counter &pushes, &pulls, &push_bytes, &pull_bytes, &ticks, &errors, &push_steps, &dc_uncompensated,
        &stale_unknown;
    metrics::Histogram &push_seconds, &pull_seconds, &wait_seconds, &staleness;
    metrics::Gauge &parked, &buffered, &applied_clock, &min_clock;
  };
  void UpdateGauges();
  std::vector<std::pair<metrics::Gauge*, metrics::Gauge*>> table_gauges_;  // rows, bytes per table id
  struct Buffered {  // a synchronous push waiting for the end of its clock
    uint32_t rank;
    uint64_t arrival;
    uint32_t table;
    std::vector<zmq::message_t> frames;
  };

  void HandleData(std::vector<zmq::message_t>& frames);
  void HandleCoordinator(std::vector<zmq::message_t>& frames);
  void ApplyCluster(const ClusterView& v);
  // Validates a push/pull; on success *t is its table and keys/values point
  // at its frames (values: one per step of a push, kMaxPushSteps slots).
  Status CheckRequest(const wire::Header& h, std::vector<zmq::message_t>& frames, bool push,
                      ServerTable** t, const uint64_t** keys, const float** values);
  void Push(const wire::Header& h, std::vector<zmq::message_t>& frames);
  // `arrived`: when the request was received; `resumed`: it was parked.
  void Pull(const wire::Header& h, std::vector<zmq::message_t>& frames, Clock::time_point arrived,
            bool resumed = false);
  void Tick(const wire::Header& h, std::vector<zmq::message_t>& frames);
  // A worker (re)joining a running job: where its clock starts (Join).
  void Join(const wire::Header& h, std::vector<zmq::message_t>& frames);
  // Applies every synchronous clock all live workers finished, then answers
  // the parked pulls that may now go.
  void Advance();
  void AggregateClock(int64_t clock);
  int64_t MinClock() const;
  int64_t MaxClock() const;
  bool IsLive(int rank) const;
  void Reply(const zmq::message_t& to, zmq::message_t header);
  void ReplyError(const zmq::message_t& to, uint64_t request_id, const Status& s);
  void SendHeartbeat();

  // Snapshots (server_snapshot.cc). A cut copies every held partition in
  // the event loop; a writer thread writes it to RocksDB and the loop then
  // reports to the coordinator.
  struct CutJob {
    int64_t clock;
    std::vector<snapshot::PartitionData> parts;
    std::string root, dir;  // the snapshot root and this cut's directory
  };
  struct CutDone {
    int64_t clock;
    std::vector<snapshot::PartEntry> parts;
    uint64_t bytes = 0;
    uint64_t checksum = 0;  // of the whole file
    std::string error;
  };
  // A cut is copied partition by partition: between requests a few at a
  // time, and any partition a request is about to change first (copy on
  // write), so the cut stays exact while training pauses only briefly.
  void CopyCutPartition(uint32_t table, uint32_t partition);
  void CopySomeOfCut(double budget_ms);
  void FinishCut();
  void EnsureCopiedRange(uint32_t table, uint64_t begin, uint64_t end);
  void EnsureCopiedKeys(uint32_t table, const uint64_t* keys, uint64_t n);
  bool Quiescent() const;             // no live workers: nothing will change
  bool CutDue(int64_t clock) const;   // a cut at `clock` is scheduled or periodic
  void CutIfDue(int64_t clock);       // sync: called with applied_clock_
  void MaybeCut();                    // bounded/async and quiescent cuts
  void TakeCut(int64_t clock);
  void WriterLoop();
  void SendSnapshotReports();
  void HandleSnapshotControl(const wire::Header& h);
  Status RestoreTable(const TableSpec& spec);
  // True when the snapshot holds every row of dense table `spec` (so the
  // table need not be initialised before the restore overwrites it).
  bool RestoreCoversTable(const TableSpec& spec);

  metrics::Registry registry_;
  Metrics m_{registry_};
  zmq::context_t& ctx_;
  ServerOptions opts_;
  std::unique_ptr<ZapHandler> zap_;  // before the sockets: it outlives them
  zmq::socket_t data_, coord_;
  std::string endpoint_;
  uint32_t rank_ = 0;
  flatbuffers::FlatBufferBuilder fbb_;
  std::vector<uint64_t> header_scratch_;
  std::vector<uint64_t> key_scratch_;
  std::vector<float> value_scratch_;
  std::vector<std::vector<float>> step_scratch_;  // a push's gradients, when a frame is misaligned
  // Delay compensation (StalenessRule::kDelayCompensation): the values each
  // worker's last kDcKept pulls of a dense row range read, with their
  // version, so a push based on one of them knows w_then.
  static constexpr size_t kDcKept = 3;
  // The versions this server hands out carry its incarnation in the top 16
  // bits (random per start, never 0), so a stamp from before a restart is
  // recognised as unknown rather than compared with new counts.
  static constexpr int kVersionBits = 48;  // wire::kVersionCountBits (asserted in server.cc)
  const uint64_t version_tag_ = NewVersionTag();
  static uint64_t NewVersionTag();
  struct DcSlot {
    bool used = false;
    uint64_t version = 0, end = 0;
    std::vector<float> w;
  };
  struct DcRing {
    DcSlot slots[kDcKept];
    size_t next = 0;
  };
  std::map<std::tuple<int, uint32_t, uint64_t>, DcRing> dc_kept_;  // (worker, table, first row)
  std::vector<float> dc_now_, dc_grad_;
  void DcKeep(int rank, uint32_t table, const ServerTable& t, uint64_t begin, uint64_t end, uint64_t version);
  // g compensated for the rows' change since `base` (into dc_grad_), or null
  // when that pull's values are no longer kept.
  const float* DcCompensate(int rank, uint32_t table, const ServerTable& t, uint64_t begin, uint64_t end,
                            uint64_t base, const float* g);
  bool shutdown_ = false;
  Status fatal_;  // why the server stopped on its own (restore failure)
  uint64_t next_request_id_ = 1;

  ClusterView view_;
  std::vector<std::unique_ptr<ServerTable>> tables_;  // by table id
  std::vector<int64_t> clocks_;                       // per worker rank
  std::vector<uint8_t> live_;                         // per worker rank
  // Live again after the first membership (a restarted or new worker) and
  // not yet Joined: its clock is unknown, so it is waited for by nobody.
  std::vector<uint8_t> joining_;                      // per worker rank
  bool membership_known_ = false;                     // a first live set was applied
  std::vector<uint64_t> last_seq_;                    // per worker rank: push dedup
  int64_t applied_clock_ = 0;                         // sync: clocks < this are applied
  std::map<int64_t, std::vector<Buffered>> buffered_; // sync: by clock
  std::map<int64_t, uint32_t> trained_;               // sync: workers whose tick of a clock said they trained a batch
  uint64_t arrivals_ = 0;
  std::deque<Parked> parked_;

  std::set<int64_t> scheduled_cuts_;  // on-demand cut clocks
  bool cut_active_ = false;
  CutJob cut_job_;
  std::vector<std::vector<uint8_t>> cut_pending_;  // [table][partition]: still to copy
  size_t cut_remaining_ = 0;
  double cut_started_ms_ = 0;
  double cut_max_slice_ms_ = 0;
  int64_t last_cut_ = -1;
  std::thread writer_;
  std::mutex wmu_;  // guards jobs_, done_, writer_stop_
  std::condition_variable wcv_;
  std::deque<CutJob> jobs_;
  std::deque<CutDone> done_;
  bool writer_stop_ = false;
  snapshot::Manifest restore_manifest_;
  bool restore_loaded_ = false;
};

}  // namespace shardps
