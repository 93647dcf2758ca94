// The parameter server: holds its partitions of every table, applies pushed
// gradients with the table's optimizer and answers pulls under the job's
// consistency model (docs/consistency.md).
//
// Threads. One event-loop thread (the one that calls Start and then Run)
// owns the tables and both sockets: a ROUTER for the data path (push, pull,
// tick) and a DEALER to the coordinator (register, heartbeats, cluster
// updates). Requests are applied in arrival order, so concurrent pushes and
// pulls from many workers are serialised without locks; pulls that must
// wait for slower workers are parked, never block the loop. A second
// thread, the snapshot writer, writes finished cuts to disk; it shares
// nothing with the loop but the queues of SnapshotCut's CutWriter (under
// its mutex). The metrics registry is rendered by the metrics HTTP thread.
// Scale out by running more servers (one per core).
//
// Server is the front end: it decodes each message and hands each concern
// to a part (LevelDB's DBImpl is the model):
//   server_start.h   start-up: sockets, CURVE, registration
//   table_set.h      the tables held, within the memory budget; restore
//   request_check.h  a push or pull validated before anything changes
//   worker_clocks.h  the consistency model: clocks, membership, held sync
//                    pushes, parked pulls (no sockets)
//   dc_kept.h        delay compensation's kept pulls
//   snapshot_cut.h   the copy-on-write cut and the writer thread
//   server_metrics.h the series it counts
// and its own request handlers live in server_push.cc, server_pull.cc,
// server_clock.cc (tick, join, applying complete clocks) and
// server_snapshot.cc (when to cut, reports, the coordinator's snapshot
// control).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <flatbuffers/flatbuffers.h>
#include <zmq.hpp>

#include "common/cluster.h"
#include "common/metrics.h"
#include "common/net.h"
#include "server/dc_kept.h"
#include "server/request_check.h"
#include "server/server_metrics.h"
#include "server/server_options.h"
#include "server/snapshot_cut.h"
#include "server/table_set.h"
#include "server/worker_clocks.h"
#include "shardps/status.h"

namespace shardps {

class ZapHandler;
namespace wire {
struct Header;
}

class Server {
 public:
  Server(zmq::context_t& ctx, ServerOptions opts);
  ~Server();
  // Binds the data socket and registers with the coordinator (waits for its
  // reply, up to register_timeout).
  Status Start(const std::atomic<bool>* stop = nullptr);  // gives up when *stop is set
  // Serves until the coordinator says Shutdown or `stop` becomes true.
  Status Run(const std::atomic<bool>& stop);

  uint32_t rank() const { return rank_; }
  const std::string& endpoint() const { return endpoint_; }
  // The server's metrics (updated by Run's thread; render from any thread).
  metrics::Registry& registry() { return registry_; }
  void set_metrics_url(std::string url) { opts_.metrics_url = std::move(url); }

 private:
  friend class ServerFuzzAccess;  // tests/fuzz/fuzz_{server,snapshot}.cc: drive the handlers directly

  // Every member function runs on the event loop.
  uint64_t TableBytes() const { return tables_.Bytes(); }  // (the fuzz targets check it against the budget)
  void HandleData(std::vector<zmq::message_t>& frames);
  void HandleCoordinator(std::vector<zmq::message_t>& frames);
  void ApplyCluster(const ClusterView& v);
  void Reply(const zmq::message_t& to, zmq::message_t header);
  void ReplyError(const zmq::message_t& to, uint64_t request_id, const Status& s);
  void UpdateGauges();
  void SendHeartbeat();

  // server_push.cc
  void Push(const wire::Header& h, std::vector<zmq::message_t>& frames);
  // A push applied now (bounded staleness, async, observers): each of its
  // steps one optimizer step, weighed by its staleness.
  void ApplyPush(const wire::Header& h, std::vector<zmq::message_t>& frames, ServerTable* t, const uint64_t* keys,
                 const float* const* values);
  // server_pull.cc. `arrived`: when the request was received; `resumed`: it was parked.
  void Pull(const wire::Header& h, std::vector<zmq::message_t>& frames, Clock::time_point arrived,
            bool resumed = false);
  void ExpireParked();  // answers the pulls parked past max_hold with Timeout
  // server_clock.cc
  void Tick(const wire::Header& h, std::vector<zmq::message_t>& frames);
  // A worker (re)joining a running job: where its clock starts (Join).
  void Join(const wire::Header& h, std::vector<zmq::message_t>& frames);
  // Applies every synchronous clock all live workers finished, then answers
  // the parked pulls that may now go.
  void Advance();
  void ApplyClock(WorkerClocks::CompleteClock& c);  // its held pushes, one averaged step
  // server_snapshot.cc
  bool CutDue(int64_t clock) const;  // a cut at `clock` is scheduled or periodic
  void CutIfDue(int64_t clock);      // sync: called with the applied clock
  void MaybeCut();                   // bounded/async and quiescent cuts
  void TakeCut(int64_t clock);
  void SendSnapshotReports();
  void HandleSnapshotControl(const wire::Header& h);

  // The versions this server hands out carry its incarnation in the top 16
  // bits (random per start, never 0), so a stamp from before a restart is
  // recognised as unknown rather than compared with new counts.
  static constexpr int kVersionBits = 48;  // wire::kVersionCountBits (asserted in server.cc)
  static uint64_t NewVersionTag();

  // State: the event loop's (registry_ is also read by the metrics thread;
  // cut_'s writer has its own thread).
  metrics::Registry registry_;
  ServerMetrics m_{registry_};
  zmq::context_t& ctx_;
  ServerOptions opts_;               // limits set at construction (0: defaults)
  std::unique_ptr<ZapHandler> zap_;  // before the sockets: it outlives them
  zmq::socket_t data_, coord_;
  std::string endpoint_;
  uint32_t rank_ = 0;
  flatbuffers::FlatBufferBuilder fbb_;
  std::vector<uint64_t> header_scratch_;
  std::vector<uint64_t> key_scratch_;  // a held push's keys, when misaligned
  std::vector<float> value_scratch_;   // a held push's values, when misaligned
  const uint64_t version_tag_ = NewVersionTag();
  bool shutdown_ = false;
  Status fatal_;  // why the server stopped on its own (restore failure)
  uint64_t next_request_id_ = 1;

  ClusterView view_;
  TableSet tables_{opts_.memory_budget};
  RequestCheck check_{tables_, opts_.max_request_bytes};
  WorkerClocks clocks_{opts_.held_bytes};
  DcKept dc_;
  SnapshotCut cut_{tables_.all(), opts_.snapshot_write_delay};
};

}  // namespace shardps
