// Starting helper processes (tests, benchmarks, tools).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "shardps/status.h"

namespace shardps {

// Starts argv[0] with `argv`, stdout and stderr into `log` (truncated).
// Returns the pid, or -1 if it could not be started. The pid is remembered
// (up to 256 at a time) for StopSpawnedOnSignal until ReapSpawned.
// The child gets SHARDPS_DIE_WITH_PARENT=1: a shardps binary then ends when
// this process dies, however it dies (a test aborted by a sanitizer, a
// SIGKILL), so nothing it started is left behind. Call it from the thread
// that lives as long as the child should (PR_SET_PDEATHSIG follows the
// spawning thread).
pid_t SpawnProcess(const std::vector<std::string>& argv, const std::string& log);
// SIGTERMs a spawned process (if `term`), waits for it and forgets it.
void ReapSpawned(pid_t pid, bool term = true);
// On SIGINT or SIGTERM, SIGTERM every spawned process not reaped yet, then
// die of the signal: a benchmark stopped with Ctrl-C leaves no servers behind.
void StopSpawnedOnSignal();

// The running program's path (/proc/self/exe); "" if unknown.
std::string SelfPath();
// Where the build puts shardps-server and shardps-coordinator, seen from a
// program in another folder of the same build (build/tools -> build/server).
std::string SiblingServerDir();

// Pins the calling thread — and so every thread it starts afterwards, such
// as a ZeroMQ context's I/O thread — to the CPUs of `list`: "3", "0,2",
// "0-3,8". InvalidArgument for a malformed list or a CPU this process may
// not use.
Status PinToCpus(const std::string& list);

// The first line of `path` once the file exists and has one, polling every
// 10 ms for at most `seconds`; "" if it never did.
std::string WaitForFileLine(const std::string& path, double seconds);

}  // namespace shardps
