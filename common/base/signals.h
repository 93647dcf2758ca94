// SIGINT / SIGTERM set a flag the event loops poll (every loop wakes at
// least every 100 ms), so processes stop cleanly.
#pragma once

#include <atomic>

namespace shardps {
// Installs the handlers; returns the flag they set. Also DieWithParentIfAsked().
const std::atomic<bool>& InstallStopSignals();
// With SHARDPS_DIE_WITH_PARENT=1 in the environment (the launcher sets it),
// the process gets SIGTERM when its parent dies (PR_SET_PDEATHSIG), so a
// killed launcher leaves no server or worker behind; if the parent is
// already gone, the process exits at once.
void DieWithParentIfAsked();
}  // namespace shardps
