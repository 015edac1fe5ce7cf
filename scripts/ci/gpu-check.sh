#!/usr/bin/env bash
# The CUDA build on a machine with an NVIDIA GPU and the CUDA toolkit (nvcc on PATH, or
# CUDA_HOME): the tensor tests with --features cuda (every test runs on the CPU and on GPU 0),
# then `rollbox-bench concat` (512 RLVR dicts) built with CUDA (tensors on GPU 0) and without
# (CPU), and AReaL's concat_padded_tensors on CUDA torch in the same run when a Python with
# torch and AReaL is given (ROLLBOX_TORCH_PYTHON, default ~/.cache/rollbox/areal-venv/bin/python).
#
#   scripts/ci/gpu-check.sh
#
# Without a GPU, scripts/ci/cuda-check.sh checks that the feature compiles.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! nvidia-smi -L; then
    echo "$0: no GPU (nvidia-smi failed); scripts/ci/cuda-check.sh checks the build without one" >&2
    exit 2
fi
export CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)}"
cargo test --release -p rollbox-tensor --features cuda
cargo build --release -p rollbox-bench --target-dir target/cpu
cargo build --release -p rollbox-bench --features rollbox/cuda --target-dir target/cuda
python="${ROLLBOX_TORCH_PYTHON:-$HOME/.cache/rollbox/areal-venv/bin/python}"
for round in 1 2; do
    echo "== round $round: GPU build"
    target/cuda/release/rollbox-bench concat --python "$python"
    echo "== round $round: CPU build"
    target/cpu/release/rollbox-bench concat --python "$python"
    if [ -x "$python" ]; then
        echo "== round $round: AReaL concat_padded_tensors on CUDA torch"
        ROLLBOX_TORCH_DEVICE=cuda "$python" scripts/baselines/concat_baseline.py | tail -4
    fi
done
