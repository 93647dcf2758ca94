// Starting helper processes (tests, benchmarks, tools).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace shardps {

// Starts argv[0] with `argv`, stdout and stderr into `log` (truncated).
// Returns the pid, or -1 if it could not be started.
pid_t SpawnProcess(const std::vector<std::string>& argv, const std::string& log);

// The running program's path (/proc/self/exe); "" if unknown.
std::string SelfPath();
// Where the build puts shardps-server and shardps-coordinator, seen from a
// program in another folder of the same build (build/tools -> build/server).
std::string SiblingServerDir();

// The first line of `path` once the file exists and has one, polling every
// 10 ms for at most `seconds`; "" if it never did.
std::string WaitForFileLine(const std::string& path, double seconds);

}  // namespace shardps
