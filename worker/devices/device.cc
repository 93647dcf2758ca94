#include "worker/devices/device.h"

#include <utility>

namespace shardps::worker {

DeviceBuffer::DeviceBuffer(Device* d, size_t size) : dev_(d) { Reserve(size); }
DeviceBuffer::~DeviceBuffer() {
  if (data_) dev_->Free(data_);
}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : dev_(o.dev_), data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (data_) dev_->Free(data_);
    dev_ = o.dev_;
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}
void DeviceBuffer::Reserve(size_t size) {
  if (size <= size_) return;
  if (data_) dev_->Free(data_);
  data_ = dev_->Alloc(size);
  size_ = size;
}

HostBuffer::HostBuffer(Device* d, size_t size) : dev_(d), data_(d->AllocHost(size)), size_(size) {}
HostBuffer::~HostBuffer() {
  if (data_) dev_->FreeHost(data_);
}
HostBuffer::HostBuffer(HostBuffer&& o) noexcept
    : dev_(o.dev_), data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
HostBuffer& HostBuffer::operator=(HostBuffer&& o) noexcept {
  if (this != &o) {
    if (data_) dev_->FreeHost(data_);
    dev_ = o.dev_;
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

Status ParseDeviceKind(const std::string& s, DeviceKind* out) {
  if (s == "auto") *out = DeviceKind::kAuto;
  else if (s == "cpu") *out = DeviceKind::kCpu;
  else if (s == "cuda") *out = DeviceKind::kCuda;
  else return Status::InvalidArgument("unknown device '" + s + "' (valid: auto, cpu, cuda)");
  return Status::OK();
}

Status MakeDevice(DeviceKind kind, std::unique_ptr<Device>* out, std::string* why) {
  if (kind == DeviceKind::kCpu) {
    *out = MakeCpuDevice();
    *why = "cpu (asked for)";
    return Status::OK();
  }
  std::string reason;
  auto cuda = MakeCudaDevice(&reason);
  if (cuda) {
    *why = cuda->name() + (kind == DeviceKind::kAuto ? " (auto: a GPU answered)" : " (asked for)");
    *out = std::move(cuda);
    return Status::OK();
  }
  if (kind == DeviceKind::kCuda) return Status::Unavailable("--device cuda: " + reason);
  *out = MakeCpuDevice();
  *why = "cpu (auto: " + reason + ")";
  return Status::OK();
}

}  // namespace shardps::worker
