// EtcdStateStore: the coordinator's state in etcd (--store
// etcd://HOST:PORT[,HOST:PORT...]/PREFIX; docs/fault-tolerance.md, "The
// coordinator's state in etcd"), so that it outlives the coordinator's
// machine and disk.
//
// The coordinator that opens the store becomes the job's leader: it puts
// PREFIX/leader (its id: host, pid and a random tag) under a lease of
// kLeaseSec seconds, with a create-if-absent transaction; while another
// coordinator holds the key it waits for the key to lapse (a killed
// leader's lease runs out within kLeaseSec), as long as StoreWait says. It
// renews the lease every 500 ms (Keep) and stops acting 500 ms before the
// lease may lapse unrenewed. A standby takes over within kLeaseSec of a
// leader's death. Every write of the state
// (PREFIX/state, the DurableState encoding) is a transaction fenced on
// PREFIX/leader holding its id: a deposed leader's writes fail.
//
// Thread: the coordinator's loop.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "server/coordinator/store/coordinator_state.h"
#include "server/coordinator/store/etcd_client.h"

namespace shardps {

class EtcdStateStore : public StateStore {
 public:
  static constexpr int64_t kLeaseSec = 2;

  // `url`: etcd://HOST:PORT[,HOST:PORT...]/PREFIX. Waits to lead (see
  // above); an error names the etcd members and what they said, or the
  // coordinator that still leads.
  static Status Open(const std::string& url, std::unique_ptr<StateStore>* out, const StoreWait& wait = {});
  ~EtcdStateStore() override;  // gives the lead up (revokes the lease)

  Status Load(const StateShape& job, DurableState* out, bool* found) override;
  bool Save(const DurableState& s) override;
  void Forget() override;
  Status Keep() override;

  const std::string& id() const { return id_; }

 private:
  using Clock = std::chrono::steady_clock;
  EtcdStateStore(std::vector<std::string> endpoints, std::string prefix);
  Status Campaign(const StoreWait& wait);
  // Just led: the job may have ended before (its `ended` mark).
  Status AfterTheEnd(bool standby, bool* ended);
  // One try: a lease if needed, then the leader key (*led), else who holds it.
  Status TryLead(std::string* leader, bool* led);
  Status Renew();

  EtcdClient etcd_;
  std::string prefix_, id_;
  int64_t lease_ = 0;
  Clock::time_point renewed_{}, lapses_{};  // last renewal; when the lease may lapse without one
  bool deposed_ = false;
};

// Splits etcd://HOST:PORT[,HOST:PORT...]/PREFIX; InvalidArgument saying
// what is wrong.
Status ParseEtcdUrl(const std::string& url, std::vector<std::string>* endpoints, std::string* prefix);

}  // namespace shardps
