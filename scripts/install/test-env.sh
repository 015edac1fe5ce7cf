# Sourced by scripts/test.sh and .ci/run: installs what the tests need, each into a cache under
# ~/.cache/ keyed by version (skipped when already there), and puts it on PATH:
#
#   * the pinned toolchain with rustfmt, clippy and the wasm32-wasip2 target (rustup, from
#     rust-toolchain.toml);
#   * a Python venv with componentize-py (builds the Python reward component), safetensors and
#     numpy (a test loads rollbox's batches the way a trainer does):
#     ${ROLLBOX_TEST_VENV:-~/.cache/rollbox/venv-test-<python>-<hash of the pins>};
#   * the default model (scripts/install/fetch-model.sh, ~/.cache/rollbox/models);
#   * the JavaScript component toolchain (componentize-js through jco, scripts/install/js-toolchain.sh,
#     ~/.cache/rollbox/js-<versions>), exported as ROLLBOX_JS_MODULES for tests/build.rs;
#   * a venv for the `rollbox` Python package's tests (maturin, numpy, pytest, ray):
#     ~/.cache/rollbox/venv-host-<python>-<hash of the pins>, exported as ROLLBOX_HOST_VENV;
#   * the C component toolchain (wit-bindgen, zig, wasm-tools, the preview1 adapter;
#     scripts/install/c-toolchain.sh, ~/.cache/rollbox/c-toolchain-<versions>; the first install
#     compiles wit-bindgen-cli, ~6 min), exported as ROLLBOX_C_TOOLS.
#
# Needs only rustup, python3 (with venv/ensurepip) and node with npm on the machine.

toolchain="$(sed -n 's/^channel = "\(.*\)"/\1/p' rust-toolchain.toml)"
libdir="$(rustup run "$toolchain" rustc --print target-libdir --target wasm32-wasip2 2>/dev/null || true)"
if [ -z "$libdir" ] || [ ! -d "$libdir" ] || ! rustup run "$toolchain" cargo clippy --version >/dev/null 2>&1; then
    rustup toolchain install "$toolchain" --profile minimal -c rustfmt -c clippy -t wasm32-wasip2
    rustup target add --toolchain "$toolchain" wasm32-wasip2
fi

source scripts/install/venv.sh

# Python packages the tests use, pinned.
test_packages=("componentize-py==0.25.1" "safetensors==0.8.0" "numpy==2.3.5")
ROLLBOX_TEST_VENV="${ROLLBOX_TEST_VENV:-$HOME/.cache/rollbox/venv-test-$(rollbox_venv_key "${test_packages[@]}")}"
rollbox_pinned_venv "$ROLLBOX_TEST_VENV" "${test_packages[@]}"
export ROLLBOX_TEST_VENV
export PATH="$ROLLBOX_TEST_VENV/bin:$PATH"

scripts/install/fetch-model.sh >/dev/null

ROLLBOX_JS_MODULES="$(scripts/install/js-toolchain.sh)"
export ROLLBOX_JS_MODULES
ROLLBOX_C_TOOLS="$(scripts/install/c-toolchain.sh)"
export ROLLBOX_C_TOOLS

# The `rollbox` Python package (python/, PyO3): built into this venv by scripts/test.sh.
host_packages=("maturin==1.16.0" "numpy==2.3.5" "pytest==8.4.2" "ray==2.60.0")
ROLLBOX_HOST_VENV="${ROLLBOX_HOST_VENV:-$HOME/.cache/rollbox/venv-host-$(rollbox_venv_key "${host_packages[@]}")}"
rollbox_pinned_venv "$ROLLBOX_HOST_VENV" "${host_packages[@]}"
export ROLLBOX_HOST_VENV
# The Python extension is built by cargo with the tests (scripts/test.sh): the interpreter PyO3
# configures for and no link to libpython, as maturin would set them. Exported for every cargo
# run, so the test build and the extension's build agree and neither rebuilds PyO3.
export PYO3_PYTHON="$ROLLBOX_HOST_VENV/bin/python"
export PYO3_BUILD_EXTENSION_MODULE=1

# Every guest component must be built here: tests/build.rs skips one whose toolchain is absent
# (so `cargo build` works with only rustup), and this turns such a skip into a build failure.
export ROLLBOX_REQUIRE_GUESTS=1
