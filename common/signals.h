// SIGINT / SIGTERM set a flag the event loops poll (every loop wakes at
// least every 100 ms), so processes stop cleanly.
#pragma once

#include <atomic>

namespace shardps {
// Installs the handlers; returns the flag they set.
const std::atomic<bool>& InstallStopSignals();
}  // namespace shardps
