// shardps-ctl --run-dir: the coordinator's endpoint and the job's keys,
// read from the run directory shardps-launch writes (RUN_DIR/job.json,
// docs/operations.md), so an operator's commands need no other flag.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "shardps/status.h"

namespace shardps {

struct RunDirJob {
  std::string coordinator;  // "" while the job has not started listening
  std::string keys;         // the job's key directory; "" with security off
  std::string state;        // "running", "completed", ...
};

// Reads `dir`/job.json (or `dir` itself when it names a file). Errors name
// the file and what is wrong with it; a job that has no coordinator yet
// (starting) is not one: `coordinator` is then "".
Status ReadRunDir(const std::string& dir, RunDirJob* out);

// The positional arguments of a command that takes numbers after the
// coordinator, "[COORDINATOR] N...", one name and largest value a number
// in `numbers`: the coordinator may be left out (--run-dir gives it).
// Fills `coordinator` (when given) and `values`; "" or what is wrong.
std::string NumbersAfterCoordinator(const std::vector<std::string>& args,
                                    const std::vector<std::pair<std::string, long>>& numbers, std::string* coordinator,
                                    std::vector<long>* values);

// The key file a command needs from the job's key directory: admin.key
// for what changes the job (`admin`), else observer.key.
std::string RunDirKey(const RunDirJob& job, bool admin);

}  // namespace shardps
