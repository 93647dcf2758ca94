// shardps/client.h: the client library a trainer embeds to talk to the
// parameter servers.
//
//   #include <shardps/client.h>
//
//   shardps::ClientOptions opt;
//   opt.coordinator = "tcp://127.0.0.1:5555";
//   std::unique_ptr<shardps::Client> ps;
//   shardps::Status s = shardps::Client::Connect(opt, &ps);  // joins as a worker
//   if (!s.ok()) { std::cerr << s.ToString() << "\n"; return 1; }
//
//   shardps::TableSpec spec;            // or ps->GetTable("w", &w) for a
//   spec.name = "w";                    // table the job file defines
//   spec.rows = 784; spec.cols = 10;
//   spec.optimizer = shardps::OptimizerKind::kSGD; spec.lr = 0.1f;
//   shardps::Table w;
//   s = ps->CreateTable(spec, &w);      // every worker may call it: same spec, same table
//
//   std::vector<float> params(w.size()), grads(w.size());
//   for (int step = 0; step < 100; ++step) {
//     s = ps->Pull(w, params).Wait();   // waits as the consistency model says
//     ... compute grads from params ...
//     s = ps->Push(w, grads).Wait();
//     s = ps->Clock();                  // end of this worker's iteration
//   }
//   ps->Close();
//
// Push and Pull return at once with a Request to Wait() on; a request for
// several servers is split and sent to all of them in parallel. Large value
// and key arrays are sent without copies (straight from your memory; a
// frame under 4 KiB is copied, and a push of keys of several servers is
// gathered into one copied frame per server): they must stay valid (and,
// for a push, unchanged) until Wait() returns OK; after an error, until
// Close().
//
// Thread-safety: a Client may be shared by any number of threads. One
// internal I/O thread owns the sockets.
#pragma once

#if __cplusplus < 202002L
#error "shardps/client.h needs C++20: compile with -std=c++20 (CMake: cxx_std_20, Meson: cpp_std=c++20)"
#endif

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shardps/export.h"
#include "shardps/status.h"
#include "shardps/types.h"

namespace shardps {

enum class ClientRole : uint8_t {
  kWorker = 0,  // has a rank and a clock; counted by the consistency model
  kObserver,    // tools, evaluators: never waited for, pulls never wait
};

struct ClientOptions {
  std::string coordinator;  // endpoint of shardps-coordinator, e.g. tcp://host:port
  ClientRole role = ClientRole::kWorker;
  int rank = -1;  // worker rank to claim; -1: the coordinator assigns one
  // How long Connect() waits for the coordinator and for every server to join.
  std::chrono::milliseconds connect_timeout{60000};
  // How long a request may go unanswered before it fails with Timeout. Under
  // bounded staleness a pull legitimately waits for slower workers.
  std::chrono::milliseconds request_timeout{120000};
  std::chrono::milliseconds heartbeat_interval{500};
  // A dense row range larger than this is sent as several messages (split at
  // partition boundaries), so a server applies one while the next is still
  // on the wire. A single partition's rows are never split.
  uint64_t max_message_bytes = 1 << 20;
  // Security (docs/security.md): a key file made by `shardps-keygen` (its
  // role decides what this client may do: worker.key, observer.key,
  // admin.key). Empty: the file named by $SHARDPS_KEY, if set; else no
  // security (plaintext; a job with security on refuses the connection).
  std::string key_file;
  // Workers under bounded staleness (s >= 1): rows of sparse tables pulled
  // by a keys Pull tagged clock c are kept (least recently used go first
  // past this many bytes) and served again to pulls tagged up to c + s
  // without asking the servers; such a row misses up to s clocks of
  // updates, this worker's own included (docs/embeddings.md). 0: off.
  // Never used under sync or async.
  uint64_t row_cache_bytes = 0;
  // Where this process serves Prometheus metrics of its own
  // ("http://host:port/metrics"), told to the coordinator with the
  // registration: `shardps-ctl status` shows it and the launcher's
  // RUN_DIR/prometheus-targets.json lists it (docs/operations.md).
  // shardps-worker serves one itself; a trainer of your own may serve one
  // (say, with Python's prometheus_client) and name it here. Empty: none.
  std::string metrics_url;
};

// How the row cache (ClientOptions::row_cache_bytes) did so far.
struct RowCacheStats {
  uint64_t lookups = 0;  // rows asked for by pulls that could use the cache
  uint64_t hits = 0;     // ... served from it
  uint64_t rows = 0, bytes = 0;  // held now
};

// A table as the client sees it.
struct Table {
  uint32_t id = 0;
  TableSpec spec;
  uint32_t cols() const { return spec.cols; }
  uint64_t rows() const { return spec.rows; }
  // Floats in the whole dense table (rows x cols).
  uint64_t size() const { return spec.rows * spec.cols; }
};

// Rows [begin, end) of a dense table.
struct RowRange {
  uint64_t begin = 0;
  uint64_t end = 0;
};

// Units [begin, end) of a shared work pool; empty when the pool is used up.
struct WorkRange {
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t pool = 0;    // the pool these units are of (per-clock: a dead worker's units of an earlier pool)
  bool wait = false;    // per-clock, empty: nothing this clock, but the pool is not finished: claim next clock
  uint64_t handed = 0;  // empty and finished: units of the pool handed out and not handed back
  bool empty() const { return begin >= end; }
  uint64_t size() const { return empty() ? 0 : end - begin; }
};

struct ClaimOptions {
  // Grants are whole multiples of this many units, but for the pool's last
  // (units = examples, granule = the batch: whole batches, and a last
  // partial one).
  uint32_t granule = 1;
  // Sync trainers: one grant of `max_units` per worker and clock(), cut for
  // every live worker in rank order at the clock's first claim (together,
  // the batch a single process would take), handed out exactly once: the
  // grant of a worker that dies before the servers counted its clock goes
  // to the next claimer. A claim repeated at the same clock gets the same
  // grant. An empty grant with `wait` set: tick an empty clock and claim
  // again.
  bool per_clock = false;
};

namespace detail {
struct Call;
class ClientImpl;
struct PulledFrames;
}  // namespace detail

// The values of a pull left in the buffers they arrived in, with no copy
// into an array of yours: contiguous pieces of rows, in row order. Read it
// once the pull's Wait() returned OK; it stays valid until it is destroyed
// or used for another pull.
class Client;
class SHARDPS_EXPORT PulledRows {
 public:
  PulledRows();
  ~PulledRows();
  PulledRows(PulledRows&&) noexcept;
  PulledRows& operator=(PulledRows&&) noexcept;
  // The pieces, in row order; together rows x cols floats.
  std::vector<std::span<const float>> pieces() const;
  uint64_t floats() const;
  // Copies everything into `out` (out.size() must be floats()).
  Status CopyTo(std::span<float> out) const;

 private:
  friend class Client;
  std::shared_ptr<detail::PulledFrames> frames_;
};

// Which version of a table's rows a pull read (each server's, see
// docs/consistency.md, "Stale gradients"): what a gradient computed on those
// values is based on. A push names it so the servers know how stale the
// gradient is. Empty: unknown (the gradient is taken as fresh).
class SHARDPS_EXPORT PullStamp {
 public:
  PullStamp() = default;
  bool empty() const { return !versions_; }
  // The updates the rows took between `earlier` (a pull of the same rows of
  // the same table) and this pull: the largest difference of a server's
  // version. -1 when not known: either stamp empty (a stamp is there once
  // the pull's Wait() returned OK), another table, or a server that
  // restarted in between or was not read by both. (Pulls of different rows
  // of one table are not told apart: a version counts the updates of the
  // partitions a pull read.)
  int64_t UpdatesSince(const PullStamp& earlier) const;

 private:
  friend class Request;
  friend class detail::ClientImpl;
  uint32_t table_ = 0;
  std::shared_ptr<const std::vector<uint64_t>> versions_;
};

// One optimizer step of a PushSteps: the gradient of one batch (same shape
// as a Push of the rows), and the pull its parameters came from.
struct PushStep {
  std::span<const float> grads;
  PullStamp based_on;
};

// An outstanding push, pull or tick. A default-constructed Request is
// complete and OK.
class SHARDPS_EXPORT Request {
 public:
  Request() = default;
  // Waits until every server answered or `timeout` passed. Returns the first
  // error a server reported, Timeout (saying what it waited for), or OK.
  Status Wait(std::chrono::milliseconds timeout);
  // Waits with the client's request_timeout.
  Status Wait();
  bool Done() const;
  // For a pull under a waiting consistency model: every live worker had
  // finished at least min_clock() clocks when the values were read (the
  // smallest over the servers that answered); max_clock() is the fastest.
  int64_t min_clock() const;
  int64_t max_clock() const;
  // For a pull whose Wait() returned OK: the versions of the rows it read,
  // for PushSteps. (Waiting on a pull also makes it the table's latest:
  // a plain Push is based on the latest-issued pull of its table that a
  // caller waited on.)
  PullStamp stamp() const;
  // For a push (bounded staleness, async): the largest staleness among its
  // steps as the servers measured it (updates its rows took between the
  // pull it was based on and the push; 0: fresh or not known).
  uint64_t staleness() const;

 private:
  friend class detail::ClientImpl;
  explicit Request(std::shared_ptr<detail::Call> c) : call_(std::move(c)) {}
  std::shared_ptr<detail::Call> call_;
};

// Client::HoldRequests's hold: while it lives, the client's requests (any
// thread's) wait; when it ends, they leave together. Move-only; it must end
// before its Client is destroyed.
class SHARDPS_EXPORT HeldRequests {
 public:
  HeldRequests() = default;
  ~HeldRequests() { Release(); }
  HeldRequests(HeldRequests&& o) noexcept : impl_(o.impl_) { o.impl_ = nullptr; }
  HeldRequests& operator=(HeldRequests&& o) noexcept;
  HeldRequests(const HeldRequests&) = delete;
  HeldRequests& operator=(const HeldRequests&) = delete;
  // Sends what was held now (the destructor does it otherwise). Idempotent.
  void Release();

 private:
  friend class Client;
  explicit HeldRequests(detail::ClientImpl* impl) : impl_(impl) {}
  detail::ClientImpl* impl_ = nullptr;
};

class SHARDPS_EXPORT Client {
 public:
  // Registers with the coordinator and waits until every server joined.
  static Status Connect(const ClientOptions& options, std::unique_ptr<Client>* out);
  ~Client();  // Close()s
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Looks up a table by name (asking the coordinator if it is not known yet).
  Status GetTable(std::string_view name, Table* out);
  // Defines a table, or returns the existing one of that name if `spec` has
  // the same shape; Conflict if it differs. Returns once every server holds it.
  Status CreateTable(const TableSpec& spec, Table* out);

  // Gradients for the whole dense table / a row range / a list of ids (dense
  // row ids or sparse ids). grads holds one row of `cols` floats per row/id.
  Request Push(const Table& t, std::span<const float> grads);
  Request Push(const Table& t, RowRange rows, std::span<const float> grads);
  Request Push(const Table& t, std::span<const uint64_t> keys, std::span<const float> grads);

  // The rows themselves, not gradients: the values of `keys` (sparse ids or
  // dense row ids, each once) or of `rows` (cols floats a row) replace what
  // the servers hold, their optimizer state restarts, and missing sparse
  // rows are made (admission aside). Applied at once under every
  // consistency model, as soon as a server takes it: load pretrained rows or
  // a checkpoint before training (or between clocks). Sent float32,
  // uncompressed (a 16-bit sparse table: in its dtype, rounded to nearest).
  Request Assign(const Table& t, std::span<const uint64_t> keys, std::span<const float> values);
  Request Assign(const Table& t, RowRange rows, std::span<const float> values);
  // Several batches' gradients in one push (bounded staleness and async),
  // each applied as its own optimizer step, in order: what k Pushes would
  // do, in one message per server. Each step names the pull it was computed
  // on. Under sync, InvalidArgument (a clock is one step).
  Request PushSteps(const Table& t, std::span<const PushStep> steps);
  Request PushSteps(const Table& t, RowRange rows, std::span<const PushStep> steps);
  // Parameters into `out`, same shapes as Push.
  Request Pull(const Table& t, std::span<float> out);
  Request Pull(const Table& t, RowRange rows, std::span<float> out);
  Request Pull(const Table& t, std::span<const uint64_t> keys, std::span<float> out);
  // Like Pull of a row range / the whole dense table, but the values stay in
  // the buffers they were received in (`out`), saving the copy into an
  // array: what a trainer that uploads parameters to a device, or reads them
  // once, wants for large tables.
  Request PullView(const Table& t, RowRange rows, PulledRows* out);
  Request PullView(const Table& t, PulledRows* out);
  // The whole dense table as the *next* iteration (clock() + 1) may read it,
  // issued before this iteration's tick so that it travels while the
  // caller computes. Each server handles a client's requests in the order
  // they were issued: a Prefetch issued after this iteration's Push of the
  // table reads the values with that push applied (pushing a layer, then
  // prefetching it, as backward goes); one issued before it may miss it
  // (under bounded staleness s >= 1 and async the bound allows that).
  // Under sync the answer waits for the end of this clock, like a Pull
  // after Clock() would.
  Request Prefetch(const Table& t, std::span<float> out);
  // The rows of `keys` (a sparse table, or rows of a dense one) as the next
  // iteration may read them: the same ordering and bound as the Prefetch
  // above, for a trainer that knows its next batch (its rows pulled while
  // this batch's backward runs). With the row cache on, the cache serves
  // what the next clock's bound allows.
  Request Prefetch(const Table& t, std::span<const uint64_t> keys, std::span<float> out);
  // The whole dense table's newest values, answered at once: a pull tagged
  // with the clock before clock() (the last one this worker has read at,
  // which the model already allowed). For extra work between two clocks —
  // while the next clock's pull is held back for the slowest worker — on
  // fresher parameters than the ones at hand. At clock 0 a plain Pull.
  // Answered at once when this worker has read at clock() - 1 already.
  // Waited on, it becomes the table's latest pull, the one a plain Push is
  // stamped with: to push a gradient computed on another pull's values,
  // use PushSteps with that pull's stamp().
  Request PullCurrent(const Table& t, std::span<float> out);

  // Holds the requests this client is given from now on (not those issued
  // before) until the hold ends, then sends them together: one message per
  // server, however many requests (an envelope
  // of them: docs/protocol.md, "Envelopes"). Each request costs a ZeroMQ
  // message otherwise, and on the small-request path the cost is per
  // message: hold around a step's burst of small requests (a model's dense
  // tables, every feature's rows, the pushes after backward). The requests
  // are the same, numbered and ordered as issued; only when they leave
  // changes. Holds nest (the last one's end sends) and hold every thread's
  // requests to servers: keep one short, and never Wait() inside it on a
  // request to a server issued inside it (it has not left: the wait times
  // out). Requests to the coordinator (ClaimWork, Barrier, ...) are not
  // held: a claim inside a hold is answered while the hold lasts.
  [[nodiscard]] HeldRequests HoldRequests();

  // Ends this worker's current iteration: tells every server (in order after
  // this worker's pushes) and advances clock() by one. Workers only.
  // `trained` false: this worker trained no batch in it (under sync the
  // clock's step is the mean over the workers that did).
  Status Clock(bool trained = true);
  // The same without waiting: clock() advances at once, the Request
  // completes when every server acknowledged the tick. Pulls issued after it
  // carry the new clock (and wait, at the server, as the model says).
  Request ClockAsync(bool trained = true);
  // Waits until every live worker reached the barrier. Workers only.
  Status Barrier(std::chrono::milliseconds timeout);
  // Counts `n` more training examples done by this worker (thread-safe, no
  // I/O): the total goes to the coordinator with each heartbeat and is
  // served there as shardps_worker_samples_total{worker} (the dashboards'
  // samples/s per worker). Workers only; a no-op elsewhere.
  void AddSamples(uint64_t n);
  // The examples counted so far by AddSamples (0 for an observer).
  uint64_t samples() const;
  // Dynamic work sharing: claims up to `max_units` consecutive units of the
  // job-wide pool `pool` (say, the batches of one epoch), which holds
  // `total_units` units in all. The coordinator hands every unit to exactly
  // one caller, so fast workers take more of the pool than slow ones; an
  // empty range means the pool is used up. Every claimer of a pool must
  // give the same total (Conflict otherwise). A worker's claim means it
  // finished its previous grant of that pool; if it is declared dead, its
  // last grant is handed out again (first) — at least once, not exactly
  // once, for those units. A worker that leaves (Close) finished its grants.
  Status ClaimWork(uint64_t pool, uint64_t total_units, uint32_t max_units, WorkRange* out);
  Status ClaimWork(uint64_t pool, uint64_t total_units, uint32_t max_units, const ClaimOptions& options,
                   WorkRange* out);

  // True once the job was asked to stop (`shardps-ctl stop`): a trainer
  // finishes its current step, Close()s and exits 0. Learned from the
  // heartbeat replies (within about a heartbeat interval). Workers only.
  bool StopRequested() const;

  int rank() const;         // worker rank (-1 for an observer)
  int64_t clock() const;    // iterations this worker finished
  Consistency consistency() const;
  uint32_t staleness() const;
  uint32_t num_servers() const;
  uint32_t num_workers() const;
  RowCacheStats row_cache_stats() const;

  // Leaves the job (a worker stops being waited for) and closes the sockets.
  // Outstanding requests fail with Unavailable. Idempotent.
  Status Close();

 private:
  explicit Client(std::unique_ptr<detail::ClientImpl> impl);
  std::unique_ptr<detail::ClientImpl> impl_;
};

}  // namespace shardps
