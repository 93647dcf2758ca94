// Starting helper processes (tests, benchmarks, tools).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace shardps {

// Starts argv[0] with `argv`, stdout and stderr into `log` (truncated).
// Returns the pid, or -1 if it could not be started.
pid_t SpawnProcess(const std::vector<std::string>& argv, const std::string& log);

}  // namespace shardps
