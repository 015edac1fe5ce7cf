#!/usr/bin/env bash
# Checks the release artifacts in DIST (default dist/, from scripts/release/build.sh) as users
# install them, never the checkout:
#
#   * SHA256SUMS holds;
#   * the wheel installs offline into a fresh venv (`pip install --no-index`, numpy from a
#     cached wheelhouse) under a PATH with no cargo, rustc or componentize-py, and there the
#     `rollbox` script runs the main job (`rollbox rollout`) and check_installed.py runs
#     rollbox.verl, rollbox.trl and `rollbox serve` through the installed package;
#   * the release binary runs the main job with HOME an empty folder (it fetches the model).
#
# Prints the figures docs/performance.md quotes: sizes, the install's wall time, import time.
#
#     scripts/release/check.sh [DIST]
set -euo pipefail
cd "$(dirname "$0")/../.."
dist="$(cd "${1:-dist}" && pwd)"
root="$PWD"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)"
wheel="$(ls "$dist"/rollbox-"$version"-*.whl)"
binary="$dist/rollbox-$version-x86_64-linux-gnu"
(cd "$dist" && sha256sum --quiet -c SHA256SUMS)
echo "check: SHA256SUMS holds"

# numpy (the package's one dependency) as a wheel, fetched once.
numpy="numpy==2.3.5"
wheelhouse="$HOME/.cache/rollbox/wheelhouse-$(echo "$numpy" | tr '=' '-')"
if [ ! -f "$wheelhouse/.complete" ]; then
    rm -rf "$wheelhouse"
    python3 -m pip download --quiet --disable-pip-version-check --only-binary :all: \
        --dest "$wheelhouse" "$numpy"
    touch "$wheelhouse/.complete"
fi

# STATS WHAT: the main job's stats.json must count its 64 episodes (16 rows, 4 samples each).
episodes() {
    python3 - "$1" "$2" <<'PY'
import json, sys
stats = json.load(open(sys.argv[1]))
n = sum(stats["episodes"].values())
if n != 64:
    sys.exit(f"check: {sys.argv[2]}: {n} episodes, want 64 ({stats})")
print(f"check: {sys.argv[2]}: 64 episodes {stats['episodes']}")
PY
}

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The wheel's tags: pip takes it for CPython 3.10 and later on glibc 2.28 and later, and
# refuses it elsewhere with its own message, at install rather than at import.
tags() { # ACCEPT|REFUSE PIP-DOWNLOAD-ARGS...
    local want="$1"
    shift
    if python3 -m pip download --quiet --disable-pip-version-check --no-deps --no-index \
        --find-links "$dist" --only-binary :all: --dest "$work/tags" "$@" "rollbox==$version" \
        >/dev/null 2>&1; then got=ACCEPT; else got=REFUSE; fi
    [ "$got" = "$want" ] || {
        echo "check: pip download $* rollbox: got $got, want $want" >&2
        exit 1
    }
}
tags ACCEPT --python-version 3.10 --platform manylinux_2_28_x86_64
tags ACCEPT --python-version 3.13 --platform manylinux_2_28_x86_64
tags REFUSE --python-version 3.9 --platform manylinux_2_28_x86_64
tags REFUSE --python-version 3.12 --platform manylinux_2_27_x86_64
tags REFUSE --python-version 3.12 --platform musllinux_1_2_x86_64
tags REFUSE --python-version 3.12 --platform manylinux_2_28_aarch64
echo "check: pip takes the wheel for CPython >= 3.10 on glibc >= 2.28 x86_64 only"
mkdir "$work/home" "$work/wheel-home" "$work/job" "$work/binary-job"
python3 -m venv "$work/venv"
# The user's shell: the venv's bin and the system's, nothing of the checkout or its toolchains;
# a HOME of its own (so the compile cache starts empty), the model from the test setup's cache.
scripts/install/fetch-model.sh >/dev/null
models="${ROLLBOX_MODEL_DIR:-$HOME/.cache/rollbox/models}"
clean=(env -i "HOME=$work/wheel-home" "ROLLBOX_MODEL_DIR=$models"
    "PATH=$work/venv/bin:/usr/local/bin:/usr/bin:/bin" "LANG=C.UTF-8" "TMPDIR=${TMPDIR:-/tmp}")
for tool in cargo rustc componentize-py; do
    if "${clean[@]}" sh -c "command -v $tool" >/dev/null; then
        echo "check: $tool is on the clean PATH ($("${clean[@]}" sh -c "command -v $tool")); the check needs a PATH without it" >&2
        exit 1
    fi
done
t0=$(date +%s.%N)
"${clean[@]}" "$work/venv/bin/pip" install --quiet --disable-pip-version-check --no-index \
    --find-links "$wheelhouse" "$wheel"
t1=$(date +%s.%N)
echo "check: pip install of the wheel took $(echo "$t1 - $t0" | bc) s"
for _ in 1 2 3; do
    "${clean[@]}" "$work/venv/bin/python" -X importtime -c "import rollbox" 2>&1 | tail -n 1
done | sed 's/^/check: import time (us, self | cumulative): /'
echo "check: wheel $(du -k "$wheel" | cut -f1) KiB, installed $(du -sk "$work/venv/lib" | cut -f1) KiB (venv with numpy), binary $(du -k "$binary" | cut -f1) KiB"

# The main job through the wheel's `rollbox` script.
(cd "$work/job" && "${clean[@]}" rollbox rollout --out out >log 2>&1) || {
    cat "$work/job/log" >&2
    exit 1
}
episodes "$work/job/out/stats.json" "the main job through the wheel's rollbox"
(cd "$work" && "${clean[@]}" "$work/venv/bin/python" "$root/scripts/release/check_installed.py" "$work/job")

# The release binary on a machine that has seen nothing: HOME empty, so the model is fetched.
(cd "$work/binary-job" && env -i "HOME=$work/home" "PATH=/usr/bin:/bin" "$binary" rollout --out out >log 2>&1) || {
    cat "$work/binary-job/log" >&2
    exit 1
}
episodes "$work/binary-job/out/stats.json" "the release binary with an empty HOME"
echo "check: all passed"
