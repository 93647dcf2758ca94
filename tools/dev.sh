#!/usr/bin/env bash
# One entry point for a fresh Debian 12 machine (as root, or with sudo):
# installs the Debian packages shardps needs (idempotent, non-interactive),
# builds with Meson, then
#   tools/dev.sh demo   runs the main job: a local cluster training on real data
#   tools/dev.sh test   runs every test
#   tools/dev.sh build  only builds
#   tools/dev.sh bench  runs the benchmarks
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
what=${1:-}
case "$what" in demo|test|build|bench) ;; *)
  echo "usage: tools/dev.sh demo|test|build|bench" >&2; exit 2 ;;
esac

packages=(build-essential pkg-config meson ninja-build cmake
  libzmq3-dev cppzmq-dev flatbuffers-compiler libflatbuffers-dev librocksdb-dev
  libgtest-dev libopenblas-dev libcli11-dev libtomlplusplus-dev zlib1g-dev libxxhash-dev
  dataset-fashion-mnist gnuplot-nox libcpp-httplib-dev
  python3 python3-dev python3-pytest python3-prometheus-client pybind11-dev python3-numpy python3-torch
  iproute2 openssh-client openssh-server slurmctld slurmd slurm-client munge prometheus
  clang libclang-rt-14-dev universal-ctags etcd-server)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "dev.sh: installing ${missing[*]}"
  sudo=""; ((EUID == 0)) || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# nvcc lives outside PATH in NVIDIA's toolkit layout; the CUDA backend is
# built wherever it is found.
[[ -x /usr/local/cuda/bin/nvcc ]] && export PATH="$PATH:/usr/local/cuda/bin"
if [[ ! -f build/build.ninja ]]; then
  meson setup build >/dev/null
fi
t0=$SECONDS
ninja -C build || exit 1
echo "dev.sh: build/ built in $((SECONDS - t0)) s"

case "$what" in
  demo)
    # 2 servers + 2 workers training the MLP 784-256-128-10 on Fashion-MNIST,
    # synchronously; worker 0 reports the test accuracy after every epoch.
    exec tools/shardps-launch --servers 2 --workers 2 --consistency sync -- \
      build/worker/shardps-worker --coordinator {coordinator} --rank {rank} \
        --model mlp --hidden 256,128 --epochs 10 --batch 64 --optimizer adam --lr 0.001 ;;
  test)
    exec meson test -C build --print-errorlogs --num-processes 2 ;;
  bench)
    exec build/tools/shardps-bench ;;
  build) ;;
esac
