#!/usr/bin/env bash
# Installs what scripts/release/build.sh builds with, once, into a venv cached under
# ~/.cache/rollbox (keyed by Python's version and the pins), and prints the venv's path:
#
#   * cargo-zigbuild, which builds the binary and the native module, linking with zig from
#     PyPI's ziglang against glibc 2.28's symbols, so both are manylinux_2_28;
#   * maturin, which writes the wheel's metadata from pyproject.toml;
#   * auditwheel, which checks the wheel's tag against the symbols it needs;
#   * componentize-py, which builds python-exec into both (host/setup/build.rs).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/install/venv.sh
release_packages=("maturin==1.16.0" "ziglang==0.15.2" "cargo-zigbuild==0.24.0" "auditwheel==6.8.2"
    "componentize-py==0.25.1")
dir="${ROLLBOX_RELEASE_VENV:-$HOME/.cache/rollbox/venv-release-$(rollbox_venv_key "${release_packages[@]}")}"
rollbox_pinned_venv "$dir" "${release_packages[@]}" >&2
echo "$dir"
