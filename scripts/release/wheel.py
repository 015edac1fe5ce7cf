"""Assembles the `rollbox` wheel (PEP 427) from what one cargo build made: the native module and
the `rollbox` binary, linked in the same `cargo zigbuild` invocation so that their crates are
compiled once (maturin builds one crate per invocation, and the binary's features differ from
the module's: a second build compiled 114 crates again). The metadata is maturin's own
(`maturin pep517 write-dist-info`, from pyproject.toml); this adds the package's Python files
from `python/rollbox`, the module, the binary as the wheel's script, the platform tag and the
RECORD. Run by scripts/release/build.sh.

    python wheel.py --native lib_native.so --binary rollbox --metadata DIR/rollbox-V.dist-info \\
        --package python/rollbox --tag cp310-abi3-manylinux_2_28_x86_64 --out dist
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import stat
import subprocess
import zipfile
from pathlib import Path

# Files of the package directory a wheel never carries: the checkout's own build of the module
# (scripts/test.sh copies it there) and bytecode.
SKIP_SUFFIXES = (".so", ".pyc")
SKIP_DIRS = {"__pycache__"}
# Every entry gets this time (zip's earliest), so the same inputs give the same wheel.
EPOCH = (1980, 1, 1, 0, 0, 0)


def tracked(package: Path) -> set[Path] | None:
    """The files git tracks under `package` (None outside a repository, e.g. a source archive),
    so that nothing a developer left beside the package's files goes into the wheel."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--", "."], cwd=package, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return {package / name for name in out.decode().split("\0") if name}


def package_files(package: Path) -> list[tuple[str, bytes, int]]:
    """The package's files under `rollbox/`, links followed (areal_types.py is one): those git
    tracks, in a repository."""
    keep = tracked(package)
    out = []
    for path in sorted(package.rglob("*")):
        rel = path.relative_to(package)
        if SKIP_DIRS.intersection(rel.parts) or path.suffix in SKIP_SUFFIXES or path.is_dir():
            continue
        if keep is not None and path not in keep:
            continue
        out.append((f"{package.name}/{rel.as_posix()}", path.read_bytes(), 0o644))
    return out


def record_line(arcname: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--native", type=Path, required=True, help="the built lib_native.so")
    ap.add_argument("--binary", type=Path, required=True, help="the built rollbox binary")
    ap.add_argument("--metadata", type=Path, required=True, help="maturin's NAME-VERSION.dist-info")
    ap.add_argument("--package", type=Path, required=True, help="python/rollbox")
    ap.add_argument("--tag", required=True, help="e.g. cp310-abi3-manylinux_2_28_x86_64")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()

    dist_info = args.metadata.name
    if not dist_info.endswith(".dist-info"):
        raise SystemExit(f"--metadata {args.metadata}: not a NAME-VERSION.dist-info folder")
    name_version = dist_info.removesuffix(".dist-info")
    package = args.package.name
    files = package_files(args.package)
    if not any(a == f"{package}/__init__.py" for a, _, _ in files):
        raise SystemExit(f"--package {args.package}: no __init__.py")
    files.append((f"{package}/_native.abi3.so", args.native.read_bytes(), 0o755))
    files.append((f"{name_version}.data/scripts/rollbox", args.binary.read_bytes(), 0o755))

    wheel_file = None
    for path in sorted(args.metadata.iterdir()):
        if path.name == "RECORD" or path.is_dir():
            continue
        data = path.read_bytes()
        if path.name == "WHEEL":
            lines = [ln for ln in data.decode().splitlines() if not ln.startswith("Tag:")]
            lines.append(f"Tag: {args.tag}")
            data = ("\n".join(lines) + "\n").encode()
            wheel_file = data
        files.append((f"{dist_info}/{path.name}", data, 0o644))
    if wheel_file is None:
        raise SystemExit(f"--metadata {args.metadata}: no WHEEL file")

    record = "".join(record_line(a, d) + "\n" for a, d, _ in files)
    record += f"{dist_info}/RECORD,,\n"
    files.append((f"{dist_info}/RECORD", record.encode(), 0o644))

    args.out.mkdir(parents=True, exist_ok=True)
    wheel = args.out / f"{name_version}-{args.tag}.whl"
    tmp = wheel.with_suffix(".whl.part")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for arcname, data, mode in files:
            info = zipfile.ZipInfo(arcname, date_time=EPOCH)
            info.external_attr = (stat.S_IFREG | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data, compresslevel=9)
    os.replace(tmp, wheel)
    print(wheel)


if __name__ == "__main__":
    main()
