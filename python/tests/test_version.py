"""`rollbox.__version__` and `rollbox.build_info()` (issue 55): the package version, the commit,
the WIT package components target and the wasmtime with rollbox's patches."""

import pathlib
import re
import subprocess

import rollbox

ROOT = pathlib.Path(__file__).resolve().parents[2]


def workspace_version() -> str:
    text = (ROOT / "Cargo.toml").read_text()
    section = text.split("[workspace.package]", 1)[1]
    return re.search(r'^version = "([^"]+)"', section, re.M).group(1)


def test_version_is_the_packages():
    assert rollbox.__version__ == workspace_version()


def test_build_info_names_each_part():
    info = rollbox.build_info()
    assert info["version"] == rollbox.__version__
    wit = re.search(r'package (rollbox:workflow@[0-9.]+);', (ROOT / "wit/types.wit").read_text())
    assert info["wit"] == wit.group(1)
    assert info["wasmtime"] == "48.0.8"
    patches = sorted(p.stem for p in (ROOT / "vendor/wasmtime/patches").glob("*.patch"))
    assert info["wasmtime_patches"] == patches
    head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT,
                          capture_output=True, text=True)
    if head.returncode == 0:
        assert info["commit"] == head.stdout.strip()
    assert info["line"] == (
        f"{info['version']} (commit {info['commit']}, WIT {info['wit']}, wasmtime 48.0.8 "
        "with patches " + " ".join(p.split("-")[0] for p in patches) + ")"
    )
