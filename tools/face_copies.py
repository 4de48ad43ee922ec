#!/usr/bin/env python3
"""Copies of labelled face photos, as an album holds them: mirrored, at half size, recompressed at
JPEG quality 30, and cropped to the middle 80%. Each copy is named `<photo>-<how>.jpg`, so its
person is its original's (tests/it/faces_real.rs labels by the name before the first digit, `_` or
`-`). Pillow only; deterministic.

Usage: face_copies.py OUT_DIR PHOTO...
  (prints the copies' names as a JSON list)
"""
import json
import sys
from pathlib import Path

from PIL import Image, ImageOps

out, photos = Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]]
out.mkdir(parents=True, exist_ok=True)


def crop(image: Image.Image) -> Image.Image:
    w, h = image.size
    return image.crop((w // 10, h // 10, w - w // 10, h - h // 10))


COPIES = {
    "mirror": (ImageOps.mirror, 92),
    "half": (lambda image: image.resize((image.width // 2, image.height // 2), Image.LANCZOS), 92),
    "q30": (lambda image: image, 30),
    "crop": (crop, 92),
}

names = []
for photo in photos:
    image = ImageOps.exif_transpose(Image.open(photo)).convert("RGB")
    for how, (make, quality) in COPIES.items():
        name = f"{photo.stem}-{how}.jpg"
        make(image).save(out / name, quality=quality)
        names.append(name)
print(json.dumps(names))
