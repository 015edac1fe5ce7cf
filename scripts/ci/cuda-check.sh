#!/usr/bin/env bash
# The CUDA build, checked without a GPU: `cargo check --features cuda` of rollbox-tensor (and
# the CLI on top of it) with the CUDA compiler from PyPI (nvidia-cuda-nvcc, which has nvcc, and
# nvidia-cuda-runtime and nvidia-cuda-cccl, which have the headers), so the feature cannot rot. candle's kernels are
# compiled by nvcc in candle-kernels' build script (PTX, and the static MoE/quantized kernels);
# nothing is linked, so no driver or CUDA library is needed. Every package is pinned: nvcc's own
# dependencies (crt, nvvm) left to pip come newer than its ptxas and emit PTX it cannot read.
#
#   scripts/ci/cuda-check.sh            # installs into ~/.cache/rollbox/cuda-<version>, then checks
#
# The target folder is cached next to the toolkit (the kernels take minutes to compile).
# scripts/ci/gpu-check.sh builds and runs on a machine with a GPU.
set -euo pipefail
cd "$(dirname "$0")/../.."
version="13.0.88"
runtime="13.0.96"
cccl="13.0.85"
cache="${ROLLBOX_CACHE_ROOT:-$HOME/.cache/rollbox}/cuda-$version-$runtime-$cccl"
if [ ! -x "$cache/venv/bin/python" ] || [ ! -e "$cache/.complete" ]; then
    rm -rf "$cache"
    python3 -m venv "$cache/venv"
    "$cache/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        "nvidia-cuda-nvcc==$version" "nvidia-cuda-crt==$version" "nvidia-nvvm==$version" \
        "nvidia-cuda-runtime==$runtime" "nvidia-cuda-cccl==$cccl"
    touch "$cache/.complete"
fi
root="$(echo "$cache"/venv/lib/python3*/site-packages/nvidia/cu13)"
if [ ! -x "$root/bin/nvcc" ]; then
    echo "$0: no nvcc under $root" >&2
    exit 1
fi
export CUDA_HOME="$root" CUDA_PATH="$root" CUDA_ROOT="$root"
export PATH="$root/bin:$PATH"
# No GPU to ask: Hopper (H100/H200), as the device checks use.
export CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}"
nvcc --version | tail -2
CARGO_TARGET_DIR="$cache/target" cargo check --quiet -p rollbox-tensor -p rollbox --features rollbox-tensor/cuda,rollbox/cuda
echo "cuda-check: rollbox-tensor and rollbox compile with --features cuda (CUDA $version, compute capability $CUDA_COMPUTE_CAP)"
