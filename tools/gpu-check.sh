#!/usr/bin/env bash
# gpu-check.sh: run on a GPU machine from the bundle tools/gpu-bundle.sh made.
# Runs the CUDA-vs-CPU agreement tests, the per-device step benchmark and a
# short training run on the GPU; everything also goes to $OUT (or ./gpu-out).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[[ -d $here/bin ]] || tar xJf "$here/bundle.tar.xz" -C "$here" || { echo "gpu-check: cannot unpack the bundle" >&2; exit 1; }
out=${OUT:-$here/gpu-out}; mkdir -p "$out"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi -L 2>&1 | tee "$out/gpu.txt"
"$here/bin/device_test" 2>&1 | tee "$out/device_test.txt"
"$here/bin/mlp_test" 2>&1 | tee "$out/mlp_test.txt"
"$here/bin/shardps-device-bench" --steps 500 2>&1 | tee "$out/device_bench.txt"
"$here/shardps-launch" --bin-dir "$here/bin" --servers 2 --workers 2 --timeout 300 -- \
  "$here/bin/shardps-worker" --coordinator {coordinator} --rank {rank} --device cuda \
  --data-dir "$here/data" --epochs 2 --progress-sec 5 2>&1 | tee "$out/train_cuda.txt"
