// shardps-device-bench: the worker's training step on each compute device
// this machine has (CPU always, CUDA when a GPU answers): MLP
// 784-256-128-10, upload the batch and parameters, forward, backward,
// download the gradients — what one worker step costs without the network.
//
//   shardps-device-bench [--steps N] [--quick]
#include <CLI/CLI.hpp>
#include <cblas.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "worker/devices/device.h"
#include "worker/models/mlp.h"

int main(int argc, char** argv) {
  using namespace shardps::worker;
  CLI::App app{"shardps device benchmark: one worker training step per device"};
  int steps = 200;
  bool quick = false;
  app.add_option("--steps", steps, "steps timed per batch size")->check(CLI::Range(1, 1000000))->capture_default_str();
  app.add_flag("--quick", quick, "a few steps (checks that it works)");
  CLI11_PARSE(app, argc, argv);
  if (quick) steps = 3;
  openblas_set_num_threads(1);
  std::vector<std::unique_ptr<Device>> devices;
  devices.push_back(MakeCpuDevice());
  std::string why;
  if (auto gpu = MakeCudaDevice(&why)) devices.push_back(std::move(gpu));
  else std::printf("CUDA: skipped (%s)\n", why.c_str());
  const std::vector<int> dims = {784, 256, 128, 10};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-0.05f, 0.05f);
  std::printf("%-40s %6s %12s %14s\n", "device", "batch", "ms/step", "samples/s");
  for (auto& dev : devices) {
    Mlp mlp(dev.get(), dims);
    std::vector<HostBuffer> w, b, gw, gb;
    for (int l = 0; l < 3; ++l) {
      w.emplace_back(dev.get(), mlp.weight_size(l));
      b.emplace_back(dev.get(), mlp.bias_size(l));
      gw.emplace_back(dev.get(), mlp.weight_size(l));
      gb.emplace_back(dev.get(), mlp.bias_size(l));
      for (size_t i = 0; i < w[l].size(); ++i) w[l][i] = u(rng);
      for (size_t i = 0; i < b[l].size(); ++i) b[l][i] = 0;
    }
    for (int batch : {64, 256, 1024}) {
      HostBuffer hx(dev.get(), static_cast<size_t>(batch) * 784), hy(dev.get(), batch);
      for (size_t i = 0; i < hx.size(); ++i) hx[i] = (u(rng) + 0.05f) * 10;
      for (int i = 0; i < batch; ++i) hy[i] = static_cast<float>(i % 10);
      DeviceBuffer dx(dev.get(), hx.size()), dy(dev.get(), batch), ds(dev.get(), 2);
      auto step = [&] {
        dev->Upload(dx.data(), hx.data(), hx.size());
        dev->Upload(dy.data(), hy.data(), batch);
        for (int l = 0; l < 3; ++l) {
          dev->Upload(mlp.weight(l).data(), w[l].data(), w[l].size());
          dev->Upload(mlp.bias(l).data(), b[l].data(), b[l].size());
        }
        dev->Zero(ds.data(), 2);
        mlp.Forward(dx.data(), batch);
        mlp.Backward(dx.data(), dy.data(), batch, ds.data(), [&](int l) {
          dev->Download(gw[l].data(), mlp.grad_weight(l).data(), gw[l].size());
          dev->Download(gb[l].data(), mlp.grad_bias(l).data(), gb[l].size());
        });
        dev->Sync();
      };
      step();  // warm up
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < steps; ++i) step();
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
      std::printf("%-40s %6d %12.3f %14.0f\n", dev->name().c_str(), batch, s * 1000, batch / s);
    }
  }
  return 0;
}
