// Built when the CUDA toolkit is absent: the CUDA backend is not there, and
// --device auto falls back to the CPU.
#include "worker/devices/device.h"

namespace shardps::worker {
std::unique_ptr<Device> MakeCudaDevice(std::string* why) {
  *why = "this build has no CUDA backend (nvcc was not found at build time)";
  return nullptr;
}
}  // namespace shardps::worker
