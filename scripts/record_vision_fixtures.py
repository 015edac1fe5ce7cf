"""Record Qwen2-VL image-processor fixtures with transformers' own processors.

Run in AReaL 1.0.4's venv (transformers 5.3, torch, torchvision, Pillow; `scripts/areal-venv.sh`
prints its python):

    $(scripts/areal-venv.sh) scripts/record_vision_fixtures.py

For each image and setting it runs `Qwen2VLImageProcessor` (PIL, AReaL's `use_fast=False`) and
`Qwen2VLImageProcessorFast` (torchvision, AReaL's default) and writes
`tests/fixtures/vision/qwen2vl.json`: the resized size, `image_grid_thw`, the sha256 of
`pixel_values` (float32, little-endian, row-major), its first values, and the sha256 of the
resized RGB bytes recovered from `pixel_values` (undoing the normalisation, which is exact to
well under half a level), so a mismatch can be told apart as resize or normalisation.

Images are procedural (the generator below, mirrored in `host/vision/tests/parity.rs`) or small
files written here into `tests/fixtures/vision/images/` (PNG modes, JPEG) so decoding and RGB
conversion are covered too.
"""

import hashlib
import io
import json
import os
import sys

import numpy as np
import torch
import transformers
from PIL import Image
from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
from transformers.models.qwen2_vl.image_processing_qwen2_vl_fast import Qwen2VLImageProcessorFast

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "vision")
MEAN = [0.48145466, 0.4578275, 0.40821073]
STD = [0.26862954, 0.26130258, 0.27577711]
M32 = 0xFFFFFFFF


def noise(w, h, seed):
    """A 32-bit integer hash of (x, y, channel, seed), low byte: the same in Rust."""
    x = np.arange(w, dtype=np.uint64)[None, :, None]
    y = np.arange(h, dtype=np.uint64)[:, None, None]
    c = np.arange(4, dtype=np.uint64)[None, None, :]
    v = (x * 374761393 + y * 668265263 + c * 2246822519 + np.uint64(seed) * 3266489917) & M32
    v = ((v ^ (v >> np.uint64(13))) * 1274126177) & M32
    v = v ^ (v >> np.uint64(16))
    return (v & 255).astype(np.uint8)


def procedural(spec):
    kind, w, h = spec["kind"], spec["w"], spec["h"]
    if kind == "noise":
        return noise(w, h, spec["seed"])[:, :, :3]
    x = np.arange(w, dtype=np.int64)[None, :]
    y = np.arange(h, dtype=np.int64)[:, None]
    if kind == "flat":
        return np.broadcast_to(np.array(spec["rgb"], dtype=np.uint8), (h, w, 3)).copy()
    if kind == "gradient":
        r = (x * 255) // max(w - 1, 1) + 0 * y
        g = (y * 255) // max(h - 1, 1) + 0 * x
        b = ((x + y) * 255) // max(w + h - 2, 1)
        return np.stack([r, g, b], axis=-1).astype(np.uint8)
    if kind == "text":
        ink = (((x % 9) < 2) & (((y // 5) % 3) == 0)) | (((y % 11) == 0) & ((x % 7) < 5))
        v = np.where(ink, 0, 255).astype(np.uint8)
        return np.stack([v, v, v], axis=-1)
    if kind == "checker":
        k = spec["k"]
        v = (((x // k + y // k) % 2) * 255).astype(np.uint8)
        return np.stack([v, v, v], axis=-1)
    raise ValueError(kind)


def files():
    """Small files for decoding and RGB conversion: (name, bytes)."""
    base = noise(40, 30, 7)
    out = []

    def save(name, img, fmt, **kw):
        buf = io.BytesIO()
        img.save(buf, format=fmt, **kw)
        out.append((name, buf.getvalue()))

    save("rgb.png", Image.fromarray(base[:, :, :3], "RGB"), "PNG")
    save("gray.png", Image.fromarray(base[:, :, 0], "L"), "PNG")
    save("gray-alpha.png", Image.fromarray(base[:, :, :2], "LA"), "PNG")
    save("rgba.png", Image.fromarray(base, "RGBA"), "PNG")
    pal = Image.fromarray(procedural({"kind": "gradient", "w": 40, "h": 30}), "RGB").quantize(16)
    save("palette.png", pal, "PNG")
    pal_t = pal.copy()
    pal_t.info["transparency"] = 3
    save("palette-transparent.png", pal_t, "PNG", transparency=3)
    save("rgb.jpg", Image.fromarray(procedural({"kind": "gradient", "w": 64, "h": 48}), "RGB"), "JPEG", quality=90)
    save("gray.jpg", Image.fromarray(procedural({"kind": "text", "w": 64, "h": 48})[:, :, 0], "L"), "JPEG", quality=85)
    return out


def cases():
    noise_spec = lambda w, h, seed=1: {"kind": "noise", "w": w, "h": h, "seed": seed}  # noqa: E731
    images = [
        ("noise-203x97", noise_spec(203, 97)),
        ("noise-448x448", noise_spec(448, 448, 2)),
        ("noise-1024x768", noise_spec(1024, 768, 3)),
        ("noise-640x480", noise_spec(640, 480, 4)),
        ("noise-333x1000", noise_spec(333, 1000, 5)),
        ("flat-100x80", {"kind": "flat", "w": 100, "h": 80, "rgb": [200, 30, 90]}),
        ("flat-white-56x56", {"kind": "flat", "w": 56, "h": 56, "rgb": [255, 255, 255]}),
        ("gradient-300x200", {"kind": "gradient", "w": 300, "h": 200}),
        ("gradient-57x1234", {"kind": "gradient", "w": 57, "h": 1234}),
        ("text-512x384", {"kind": "text", "w": 512, "h": 384}),
        ("checker-1-256x256", {"kind": "checker", "k": 1, "w": 256, "h": 256}),
        ("checker-3-181x123", {"kind": "checker", "k": 3, "w": 181, "h": 123}),
        ("tiny-1x1", noise_spec(1, 1, 6)),
        ("tiny-2x3", noise_spec(2, 3, 7)),
        ("tiny-7x5", noise_spec(7, 5, 8)),
        ("tiny-13x27", noise_spec(13, 27, 9)),
        ("tiny-27x27", noise_spec(27, 27, 10)),
        ("small-28x28", noise_spec(28, 28, 11)),
        ("huge-4000x3000", {"kind": "gradient", "w": 4000, "h": 3000}),
        ("huge-noise-2500x1900", noise_spec(2500, 1900, 12)),
        ("wide-3000x20", noise_spec(3000, 20, 13)),
        ("tall-16x3000", noise_spec(16, 3000, 14)),
        ("ratio-199-1990x10", noise_spec(1990, 10, 15)),
        ("ratio-201-2010x10", noise_spec(2010, 10, 16)),
    ]
    for name, _ in files():
        images.append((name, {"file": "images/" + name}))
    settings = [
        ("default", {}),
        ("max-16-tokens", {"min_pixels": 28 * 28 * 4, "max_pixels": 28 * 28 * 16}),
        ("min-256-tokens", {"min_pixels": 28 * 28 * 256, "max_pixels": 28 * 28 * 1280}),
    ]
    return images, settings


def load(spec):
    if "file" in spec:
        return Image.open(os.path.join(OUT, spec["file"]))
    return Image.fromarray(procedural(spec), "RGB")


def record(proc, img):
    try:
        out = proc(images=[img], return_tensors="pt")
    except ValueError as e:
        return {"error": str(e)}
    pv = out["pixel_values"].numpy().astype("<f4")
    grid = out["image_grid_thw"].numpy().tolist()[0]
    t, gh, gw = grid
    # Undo patchify and normalisation: the resized RGB bytes the processor saw.
    p, m = 14, 2
    x = pv.reshape(gh // m, gw // m, m, m, 3, 2, p, p)[:, :, :, :, :, 0]
    x = x.transpose(4, 0, 2, 5, 1, 3, 6).reshape(3, gh * p, gw * p).astype(np.float64)
    mean = np.array(MEAN)[:, None, None]
    std = np.array(STD)[:, None, None]
    rgb = (x * std + mean) * 255.0
    rounded = np.rint(rgb)
    assert np.abs(rgb - rounded).max() < 0.01, np.abs(rgb - rounded).max()
    rgb = rounded.astype(np.uint8).transpose(1, 2, 0)
    return {
        "resized": [gh * p, gw * p],
        "grid_thw": grid,
        "pixel_values_shape": list(pv.shape),
        "pixel_values_sha256": hashlib.sha256(pv.tobytes()).hexdigest(),
        "head": [float(v) for v in pv.reshape(-1)[:8]],
        "resized_rgb_sha256": hashlib.sha256(np.ascontiguousarray(rgb).tobytes()).hexdigest(),
    }


def main():
    torch.set_num_threads(1)
    os.makedirs(os.path.join(OUT, "images"), exist_ok=True)
    for name, data in files():
        with open(os.path.join(OUT, "images", name), "wb") as f:
            f.write(data)
        if name.endswith(".jpg"):
            # Pillow's (libjpeg-turbo's) decoding, losslessly: the processing is checked on
            # these pixels, the decoder against them.
            decoded = Image.open(io.BytesIO(data)).convert("RGB")
            decoded.save(os.path.join(OUT, "images", name + ".pillow.png"), format="PNG")
    images, settings = cases()
    out = []
    for setting, kw in settings:
        processors = {
            "pil": Qwen2VLImageProcessor(**kw),
            "torchvision": Qwen2VLImageProcessorFast(**kw),
        }
        for backend, proc in processors.items():
            for name, spec in images:
                if setting != "default" and name.startswith(("huge", "ratio")):
                    continue
                img = load(spec)
                rgb = np.asarray(img.convert("RGB")) if "file" in spec else None
                case = {
                    "name": name,
                    "source": spec,
                    "backend": backend,
                    "setting": setting,
                    "min_pixels": proc.size["shortest_edge"],
                    "max_pixels": proc.size["longest_edge"],
                    "expect": record(proc, img),
                }
                if rgb is not None:
                    case["decoded_mode"] = img.mode
                    case["decoded_rgb_sha256"] = hashlib.sha256(np.ascontiguousarray(rgb).tobytes()).hexdigest()
                out.append(case)
                print(backend, setting, name, case["expect"].get("grid_thw", case["expect"].get("error")), file=sys.stderr)
    doc = {
        "source": f"transformers {transformers.__version__}, torch {torch.__version__}, Pillow {Image.__version__}: Qwen2VLImageProcessor (pil) and Qwen2VLImageProcessorFast (torchvision), scripts/record_vision_fixtures.py",
        "cases": out,
    }
    with open(os.path.join(OUT, "qwen2vl.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
