#!/usr/bin/env python3
"""Reference for the per-photo signals of clipfn's POST /v1/analyze (blur and pHash).

The measures are those of the photo-album app whose Python AI tier /v1/analyze replaces
(github 100-hours-a-week/5-yeosa-ongi-ai), re-implemented here from reading it:

* sharpness: app/utils/image_loader.py decode_image_cv2 decodes the bytes with
  cv2.imdecode(buf, cv2.IMREAD_GRAYSCALE) (OpenCV applies a JPEG's EXIF orientation itself);
  app/service/quality.py resize_for_laplacian scales it to 300 px on the LONG side with
  INTER_AREA, always (a smaller photo is scaled UP), at (int(w * s), int(h * s)), s = 300 / max(w, h);
  laplacian_filter then takes cv2.Laplacian(img, cv2.CV_64F).var() and calls the photo blurry
  ("shaky") when that is < 80 (THRESHOLD in app/service/quality_pipeline.py).
* phash: ImageHash's imagehash.phash (8x8 DCT hash of a 32x32 LANCZOS grey copy, bits above
  the median), str() = 16 hex digits. NB the app itself hashes with OpenCV contrib's
  cv2.img_hash.PHash on the same grey decode (app/service/duplicate.py) and groups photos by
  DBSCAN over Hamming distances (eps 10, min_samples 2); clipfn's definition is ImageHash's.

Subcommands (all deterministic; JSON on stdout):
  measure PATH...                 {"photos": [{path, phash, phash_raw, sharpness, blurry, width, height}
                                  | {path, error}]}
  blurred OUTDIR PHOTO...         <stem>_blur{0,1,2,3,5,8}.jpg (PIL GaussianBlur radius r, JPEG q90);
                                  prints the written paths as a list
  near_duplicates OUTDIR PHOTO... <stem>_small.jpg, _bright.jpg, _crop.jpg, .png, _soft.jpg;
                                  prints {"groups": [[original, variants...], ...]}
  copies OUTDIR PHOTO...          what a best shot must see through: <stem>_blur{1,2}.jpg (PIL
                                  GaussianBlur, q90), _scale{90,75,60,45,30}.jpg (LANCZOS, q90),
                                  _q{60,30,15}.jpg (full size re-encoded); prints {"groups":
                                  [[original, variants...], ...]}
"""
import json
import sys
from pathlib import Path

import cv2
import imagehash
import numpy as np
from PIL import Image, ImageEnhance, ImageFilter, ImageOps

LONG_SIDE = 300  # app/service/quality.py resize_for_laplacian(target_long_side=300)
BLUR_THRESHOLD = 80.0  # app/service/quality_pipeline.py THRESHOLD
BLUR_RADII = (0, 1, 2, 3, 5, 8)


def sharpness(data: bytes) -> float:
    """Variance of the Laplacian exactly as the album app computes it."""
    grey = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_GRAYSCALE)
    if grey is None:
        raise ValueError("OpenCV cannot decode this file (cv2.imdecode returned None)")
    h, w = grey.shape
    scale = LONG_SIDE / max(h, w)
    size = (int(w * scale), int(h * scale))  # truncation, as the app does
    if min(size) < 1:
        raise ValueError(f"{w}x{h} scales to {size[0]}x{size[1]}: the app's cv2.resize fails")
    small = cv2.resize(grey, size, interpolation=cv2.INTER_AREA)
    return float(cv2.Laplacian(small, cv2.CV_64F).var())


def measure_one(path: str) -> dict:
    try:
        data = Path(path).read_bytes()
        with Image.open(path) as im:
            im.load()
            # phash of the upright photo: clipfn answers for the photo as it is shown (EXIF
            # orientation applied, as its embeddings and OpenCV's decode above do), so a phone
            # photo and its rotated-pixel copy get the same hash. phash_raw: stored pixels.
            upright = ImageOps.exif_transpose(im)
            phash = str(imagehash.phash(upright))
            phash_raw = str(imagehash.phash(im))
            width, height = upright.size
        sharp = sharpness(data)
    except Exception as e:  # noqa: BLE001 - any failure is this file's answer
        return {"path": path, "error": f"{type(e).__name__}: {e}"}
    return {
        "path": path,
        "phash": phash,
        "phash_raw": phash_raw,
        "sharpness": sharp,
        "blurry": sharp < BLUR_THRESHOLD,
        "width": width,
        "height": height,
    }


def load_upright(path: str) -> Image.Image:
    """The photo upright, in a mode JPEG can hold (variants carry no EXIF orientation)."""
    with Image.open(path) as im:
        im = ImageOps.exif_transpose(im)
        return im.copy() if im.mode in ("L", "RGB") else im.convert("RGB")


def out_stems(outdir: str, photos: list[str]) -> list[tuple[str, Path]]:
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    stems = [Path(p).stem for p in photos]
    dup = sorted({s for s in stems if stems.count(s) > 1})
    if dup:
        raise SystemExit(f"photos share a file stem, their outputs would collide: {dup}")
    return [(p, out / s) for p, s in zip(photos, stems)]


def save_jpeg(im: Image.Image, path: Path, quality: int) -> str:
    im.save(path, "JPEG", quality=quality)
    return str(path)


def blurred(outdir: str, photos: list[str]) -> list[str]:
    written = []
    for photo, stem in out_stems(outdir, photos):
        im = load_upright(photo)
        for r in BLUR_RADII:
            img = im if r == 0 else im.filter(ImageFilter.GaussianBlur(r))
            written.append(save_jpeg(img, stem.with_name(f"{stem.name}_blur{r}.jpg"), 90))
    return written


def near_duplicates(outdir: str, photos: list[str]) -> dict:
    groups = []
    for photo, stem in out_stems(outdir, photos):
        im = load_upright(photo)
        w, h = im.size
        dx, dy = round(w * 0.03), round(h * 0.03)  # keep the central 94%
        name = stem.name
        group = [photo]
        small = im.resize((max(1, round(w * 0.6)), max(1, round(h * 0.6))), Image.Resampling.LANCZOS)
        group.append(save_jpeg(small, stem.with_name(f"{name}_small.jpg"), 75))
        bright = ImageEnhance.Brightness(im).enhance(1.1)
        group.append(save_jpeg(bright, stem.with_name(f"{name}_bright.jpg"), 90))
        group.append(save_jpeg(im.crop((dx, dy, w - dx, h - dy)), stem.with_name(f"{name}_crop.jpg"), 90))
        png = stem.with_name(f"{name}.png")
        im.save(png, "PNG")
        group.append(str(png))
        soft = im.filter(ImageFilter.GaussianBlur(1))
        group.append(save_jpeg(soft, stem.with_name(f"{name}_soft.jpg"), 90))
        groups.append(group)
    return {"groups": groups}


COPY_BLURS = (1, 2)
COPY_SCALES = (90, 75, 60, 45, 30)
COPY_QUALITIES = (60, 30, 15)


def copies(outdir: str, photos: list[str]) -> dict:
    groups = []
    for photo, stem in out_stems(outdir, photos):
        im = load_upright(photo)
        w, h = im.size
        group = [photo]
        for r in COPY_BLURS:
            group.append(save_jpeg(im.filter(ImageFilter.GaussianBlur(r)), stem.with_name(f"{stem.name}_blur{r}.jpg"), 90))
        for percent in COPY_SCALES:
            size = (max(1, round(w * percent / 100)), max(1, round(h * percent / 100)))
            small = im.resize(size, Image.Resampling.LANCZOS)
            group.append(save_jpeg(small, stem.with_name(f"{stem.name}_scale{percent}.jpg"), 90))
        for quality in COPY_QUALITIES:
            group.append(save_jpeg(im, stem.with_name(f"{stem.name}_q{quality}.jpg"), quality))
        groups.append(group)
    return {"groups": groups}


def main(argv: list[str]) -> int:
    usage = __doc__.split("Subcommands")[1]
    if len(argv) < 2 or argv[0] not in ("measure", "blurred", "near_duplicates", "copies"):
        print("usage: signals_reference.py SUBCOMMAND ..." + usage, file=sys.stderr)
        return 2
    cmd, args = argv[0], argv[1:]
    if cmd == "measure":
        result = {"photos": [measure_one(p) for p in args]}
    elif len(args) < 2:
        print(f"usage: signals_reference.py {cmd} OUTDIR PHOTO...", file=sys.stderr)
        return 2
    elif cmd == "blurred":
        result = blurred(args[0], args[1:])
    elif cmd == "copies":
        result = copies(args[0], args[1:])
    else:
        result = near_duplicates(args[0], args[1:])
    json.dump(result, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
