#include "common/base/signals.h"

#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>

namespace shardps {
namespace {
std::atomic<bool> g_stop{false};
extern "C" void OnSignal(int) { g_stop.store(true); }
}  // namespace

void DieWithParentIfAsked() {
  const char* v = std::getenv("SHARDPS_DIE_WITH_PARENT");
  if (!v || std::strcmp(v, "1") != 0) return;
  // Only for this process: a child it starts has another parent.
  unsetenv("SHARDPS_DIE_WITH_PARENT");
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() == 1) std::_Exit(143);  // orphaned before the line above: as if SIGTERMed
}

const std::atomic<bool>& InstallStopSignals() {
  DieWithParentIfAsked();
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  return g_stop;
}
}  // namespace shardps
