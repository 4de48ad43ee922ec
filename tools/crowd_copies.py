#!/usr/bin/env python3
"""Copies of one group photo, as a crowd album holds them (a wedding's, a class's): each rescaled by
a factor from 0.85 to 1.15, shifted on a grey canvas by up to 40 px each way, and re-encoded as a
baseline JPEG at quality 70 to 95. Seeded, so a run is repeatable (Pillow only).

Each copy maps a point (x, y) of the original to (scale * x + left, scale * y + top): the manifest
gives `scale`, `left` and `top` per copy, so a face found in a copy can be traced back to the
original's face (tests/it/faces_real.rs labels the crowd's faces that way).

Usage: crowd_copies.py OUT_DIR PHOTO COUNT [SEED]
  (prints the manifest: a JSON list of {"name", "scale", "left", "top", "quality"})
"""
import json
import random
import sys
from pathlib import Path

from PIL import Image, ImageOps

out, photo, count = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
rng = random.Random(int(sys.argv[4]) if len(sys.argv) > 4 else 48)
out.mkdir(parents=True, exist_ok=True)
original = ImageOps.exif_transpose(Image.open(photo))
original = original.convert("L" if original.mode == "L" else "RGB")  # a grey photo stays grey
MARGIN = 40

manifest = []
for i in range(count):
    scale = rng.uniform(0.85, 1.15)
    dx, dy = rng.randint(-MARGIN, MARGIN), rng.randint(-MARGIN, MARGIN)
    quality = rng.randint(70, 95)
    width, height = round(original.width * scale), round(original.height * scale)
    resized = original.resize((width, height), Image.LANCZOS)
    canvas = Image.new(original.mode, (width + 2 * MARGIN, height + 2 * MARGIN), 128)
    left, top = MARGIN + dx, MARGIN + dy
    canvas.paste(resized, (left, top))
    name = f"{photo.stem}-copy{i:03d}.jpg"
    canvas.save(out / name, quality=quality)
    # Pillow's resize maps pixel centres: x' = (x + 0.5) * w' / w - 0.5, near enough scale * x.
    manifest.append({"name": name, "scale": width / original.width, "left": left, "top": top, "quality": quality})
print(json.dumps(manifest))
