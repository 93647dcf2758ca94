#!/usr/bin/env bash
# gpu-bundle.sh: prepare the GPU checks for a lent GPU machine that has CUDA
# but none of shardps's Debian libraries (docs/performance.md, "GPU").
# Builds here, then copies into .gpu/ (git-ignored): the binaries the checks
# run, every shared library they need except glibc's and CUDA's own, and
# gpu-check.sh, packed (xz) to stay under the 64 MiB a device call carries.
# Carry `.gpu` to the machine and run `bash .gpu/gpu-check.sh`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tools/dev.sh build >/dev/null
rm -rf .gpu && mkdir -p .gpu/bin .gpu/lib .gpu/data
bins=(build/worker/devices/device_test build/worker/models/mlp_test build/tools/shardps-device-bench build/worker/shardps-worker
      build/server/shardps-server build/server/shardps-coordinator)
cp "${bins[@]}" .gpu/bin/
cp tools/shardps-launch tools/gpu-check.sh .gpu/
for b in "${bins[@]}"; do
  ldd "$b" | awk '/=> \// {print $3}' | grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux)[.-]|/libcu|/libnv|/cuda' || true
done | sort -u | while read -r lib; do cp -L "$lib" .gpu/lib/; done
# The carry limit is 64 MiB: train on the 10k test images (copied under both names).
for f in images-idx3-ubyte labels-idx1-ubyte; do
  cp "/usr/share/datasets/fashion-mnist/t10k-$f.gz" ".gpu/data/t10k-$f.gz"
  cp "/usr/share/datasets/fashion-mnist/t10k-$f.gz" ".gpu/data/train-$f.gz"
done
(cd .gpu && tar cJf bundle.tar.xz bin lib data && rm -rf bin lib data)
du -sh .gpu
