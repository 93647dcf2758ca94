// The coordinator's durable state (docs/fault-tolerance.md, "The
// coordinator"): membership, tables, work pools, snapshot history, as one
// plain struct (DurableState); its encoding, one FlatBuffers value
// (schema/shardps.fbs, CoordinatorState, format 1); and the store that
// holds it (StateStore): a RocksDB database under --state-dir, or etcd
// (--store etcd://..., etcd_state.h). The coordinator
// rewrites it after every message that changed it and before its replies
// leave (Coordinator::Commit); a coordinator started on a directory
// holding a state resumes that job.
//
// Thread: a StateStore is used by one thread at a time (the coordinator's
// Run() thread owns its store).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "server/coordinator/logic/membership.h"
#include "server/coordinator/logic/work_pools.h"
#include "shardps/status.h"
#include "shardps/types.h"

namespace rocksdb {
class DB;
}

namespace shardps {

struct DurableState {
  uint32_t num_servers = 0, num_workers = 0, partitions = 0;
  uint32_t groups = 0;               // replica groups ([job] groups; 0: num_servers)
  std::vector<TableSpec> tables;     // index = id
  std::vector<SavedServer> servers;  // one per server rank, added ones too (empty: none saved)
  std::vector<SavedWorker> workers;  // by worker rank, at most the job's ranks
  WorkPoolsData work;
  std::string restore_dir;           // the snapshot the job started from ("": none)
  int64_t clock_base = 0;            // its clock: snapshot labels are clock_base + clock
  std::string latest_snapshot_dir;
  int64_t latest_snapshot_clock = -1;
  uint32_t snapshots_taken = 0;
  uint64_t next_update_id = 0;
  uint64_t membership_version = 0;
  bool stopping = false;
  // The shard map after a fail-over: its version and each group's servers
  // (empty: the job's first map, which a resumed coordinator makes again).
  uint64_t map_version = 0;
  std::vector<std::vector<uint32_t>> map_replicas;
};

// The job a saved state must belong to.
struct StateShape {
  uint32_t num_servers = 0;
  uint32_t num_workers = 0;
  uint32_t worker_ranks = 0;  // max(num_workers, max_workers)
  uint32_t groups = 0;        // replica groups (0: num_servers)
  uint32_t Groups() const { return groups ? groups : num_servers; }
};

// The FlatBuffers CoordinatorState of `s`.
std::string EncodeState(const DurableState& s);
// Decodes and checks a saved value: it must verify, be format 1, be of
// the job `job` (Conflict otherwise), and every rank, range and clock in
// it must be one the job can hold (BadMessage naming what is not). On an
// error `*out` is left as it was.
Status DecodeState(std::string_view value, const StateShape& job, DurableState* out);

// How long Open may wait to lead a job whose state is in etcd: `campaign`
// (0: for ever), or until *stop turns true.
struct StoreWait {
  std::chrono::seconds campaign{30};
  const std::atomic<bool>* stop = nullptr;
  // A standby (etcd) that wins the lead of a job that already ended (its
  // leader cleared the state: Forget) gives the lead back, sets *ended and
  // fails Open: there is nothing to take over. A coordinator started
  // without --standby starts the job afresh instead.
  bool* ended = nullptr;
};

// Where the state is kept. Open picks the kind from `where`.
class StateStore {
 public:
  // `where`: a directory (the RocksDB database DIR/coordinator.db, made if
  // missing; InvalidArgument when it cannot be made or opened, as when
  // another coordinator holds it) or etcd://HOST:PORT[,HOST:PORT...]/PREFIX
  // (EtcdStateStore: this coordinator becomes the job's leader first).
  static Status Open(const std::string& where, std::unique_ptr<StateStore>* out, const StoreWait& wait = {});
  virtual ~StateStore();

  // The saved state: *found = false (OK) when there is none; an unreadable
  // or invalid one is an error naming the store, `*out` unchanged.
  virtual Status Load(const StateShape& job, DurableState* out, bool* found) = 0;
  // Writes `s`. False, logged, when it could not (etcd: also when this
  // coordinator no longer leads the job).
  virtual bool Save(const DurableState& s) = 0;
  // The job ended: its state is deleted, nothing to resume (etcd: the
  // job is marked ended, for its standbys: StoreWait::ended).
  virtual void Forget() = 0;
  // Called from the coordinator's loop every 100 ms: keeps what the store
  // needs alive (etcd: the leader's lease). An error: this coordinator
  // must stop acting for the job at once.
  virtual Status Keep() { return Status::OK(); }
  const std::string& path() const { return path_; }

 protected:
  std::string path_;
};

// The RocksDB store under --state-dir. Writes go through RocksDB's WAL (not
// fsync: a killed coordinator loses nothing, a crashed machine may lose the
// last change).
class LocalStateStore : public StateStore {
 public:
  static Status Open(const std::string& dir, std::unique_ptr<StateStore>* out);
  ~LocalStateStore() override;
  Status Load(const StateShape& job, DurableState* out, bool* found) override;
  bool Save(const DurableState& s) override;
  void Forget() override;

 private:
  LocalStateStore();
  std::unique_ptr<rocksdb::DB> db_;
};

}  // namespace shardps
