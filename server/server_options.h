// ServerOptions: how a parameter server is run (shardps-server's flags).
// Plain data: a Server keeps its own copy (the limits left at 0 set to
// their defaults) and reads it on its event loop.
#pragma once

#include <cstdint>
#include <string>

#include "common/net/net.h"
#include "common/net/security.h"
#include "shardps/status.h"

namespace shardps {

struct ServerOptions {
  std::string coordinator;                 // e.g. tcp://127.0.0.1:5555
  std::string bind = "tcp://127.0.0.1:0";  // data endpoint; port 0 = any free port
  std::string advertise;                   // host clients dial ("" = by route to the coordinator)
  std::string metrics_url;                 // where registry() is served, told to the coordinator
  int rank = -1;                           // -1: the coordinator assigns one
  uint64_t max_request_bytes = 512ull << 20;
  Millis heartbeat_interval{500};
  Millis register_timeout{60000};
  // No message from the coordinator (it answers each heartbeat) for this
  // long: it is gone, and so is the job; the server says so and exits
  // non-zero (0: wait for ever). Longer than a coordinator's restart.
  Millis coordinator_timeout{60000};
  Millis snapshot_write_delay{0};  // fault-injection aid for tests: wait before writing
  // Limits (docs/operations.md, "Limits"). Tables this server holds may take
  // at most memory_budget bytes (0: half of this machine's memory); pulls
  // held for slower workers and synchronous pushes held for the end of
  // their clock at most held_bytes each (0: a quarter of the budget); a
  // held pull is answered Timeout after max_hold.
  uint64_t memory_budget = 0;
  uint64_t held_bytes = 0;
  Millis max_hold{600000};
  // The cold tier of tiered sparse tables (server/tables/cold_store.h) goes
  // in shardps-cold-RANK under this directory ("": the working directory).
  std::string cold_dir;
  SecurityOptions security;  // CURVE + roles (docs/security.md)

  Status Validate() const;
};

}  // namespace shardps
