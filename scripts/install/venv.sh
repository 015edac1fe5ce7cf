# Sourced by scripts/install/test-env.sh and scripts/install/release-env.sh: cached venvs of
# pinned packages under ~/.cache/rollbox, named by Python's version and the pins' hash.

# A venv at $1 (unless already complete) with the pinned packages that follow.
rollbox_pinned_venv() {
    local dir="$1"
    shift
    if [ ! -f "$dir/.complete" ]; then
        rm -rf "$dir"
        python3 -m venv "$dir"
        "$dir/bin/python" -m pip install --quiet --disable-pip-version-check "$@"
        touch "$dir/.complete"
    fi
}
# The cache name of a venv for the pinned packages given: Python's version and their hash, so
# the name changes when the list changes.
rollbox_venv_key() {
    echo "$(python3 -c 'import sys; print("py%d%d" % sys.version_info[:2])')-$(printf '%s\n' "$@" | sha256sum | cut -c1-12)"
}
