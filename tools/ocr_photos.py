#!/usr/bin/env python3
"""Photos with text for the OCR tests (issue 36): words rendered with Debian's DejaVu fonts
(fonts-dejavu-core) onto the real wallpapers tools/fetch_photos.sh fetched, plus scikit-image's
page.png (a scanned page) and a photo with no text.

Covers several sizes and colours, a line tilted 10 degrees, a line upside down (for the line
classifier), a 4000 x 3000 JPEG (decoded at a DCT scale by clipfn) and a JPEG stored turned,
with EXIF orientation 6 to stand it upright.

  ocr_photos.py PHOTOS_DIR OUT_DIR

writes OUT_DIR/*.{jpg,png} and OUT_DIR/truth.json (strewn.png, 400 random words, and panorama.jpg,
16,000 x 1,000, are for the limits and stay out of it): {photo file: [line text, ...] in reading order,
or null where the truth is not known (page.png: the reference alone is the bar)}.
"""

import json
import random
import sys
from pathlib import Path

import skimage.data
from PIL import Image, ImageDraw, ImageFont

FONTS = Path("/usr/share/fonts/truetype/dejavu")


def font(name, size):
    return ImageFont.truetype(str(FONTS / name), size)


def wallpaper(photos, name, size=None):
    image = Image.open(photos / "wallpapers" / name).convert("RGB")
    return image.resize(size, Image.LANCZOS) if size else image


def draw_lines(image, lines):
    """Each line: (text, (x, y), font, fill, plate), plate a box colour behind it or None."""
    draw = ImageDraw.Draw(image)
    for text, xy, face, fill, plate in lines:
        if plate:
            left, top, right, bottom = draw.textbbox(xy, text, font=face)
            pad = face.size // 3
            draw.rectangle((left - pad, top - pad, right + pad, bottom + pad), fill=plate)
        draw.text(xy, text, font=face, fill=fill)
    return image


def turned_line(text, face, fill, plate, angle):
    """One line on its own plate, turned by `angle` degrees (counter-clockwise), transparent around."""
    probe = ImageDraw.Draw(Image.new("RGBA", (1, 1)))
    left, top, right, bottom = probe.textbbox((0, 0), text, font=face)
    pad = face.size // 3
    tile = Image.new("RGBA", (right - left + 2 * pad, bottom - top + 2 * pad), plate)
    ImageDraw.Draw(tile).text((pad - left, pad - top), text, font=face, fill=fill)
    return tile.rotate(angle, expand=True, resample=Image.BICUBIC)


def main(photos, out):
    out.mkdir(parents=True, exist_ok=True)
    truth = {}

    sign = wallpaper(photos, "mate_Dune.jpg")
    truth["sign.jpg"] = ["OPEN 24 HOURS", "Fresh bread daily"]
    draw_lines(sign, [
        ("OPEN 24 HOURS", (200, 180), font("DejaVuSans-Bold.ttf", 96), "white", (160, 20, 20)),
        ("Fresh bread daily", (220, 420), font("DejaVuSerif.ttf", 56), (20, 20, 60), (240, 230, 200)),
    ])
    sign.save(out / "sign.jpg", quality=92)

    colours = wallpaper(photos, "plasma_Kite.jpg", (1600, 1000))
    truth["colours.png"] = ["Platform 9", "Departures 14:05", "Exit to Station Road", "Menu of the day"]
    draw_lines(colours, [
        ("Platform 9", (80, 80), font("DejaVuSans-Bold.ttf", 72), (250, 220, 40), (20, 20, 20)),
        ("Departures 14:05", (80, 260), font("DejaVuSansMono.ttf", 40), (30, 220, 90), (10, 30, 10)),
        ("Exit to Station Road", (80, 420), font("DejaVuSansCondensed.ttf", 30), "white", (30, 60, 160)),
        ("Menu of the day", (80, 560), font("DejaVuSerif-Bold.ttf", 24), "black", (255, 255, 255)),
    ])
    colours.save(out / "colours.png")

    tilt = wallpaper(photos, "mate_Garden.jpg", (1600, 1000))
    truth["tilt.jpg"] = ["Garden Centre"]
    line = turned_line("Garden Centre", font("DejaVuSans-Bold.ttf", 80), (255, 255, 255), (0, 90, 40, 255), 10)
    tilt.paste(line, (300, 300), line)
    tilt.save(out / "tilt.jpg", quality=92)

    upside = wallpaper(photos, "mate_Storm.jpg", (1600, 1066))
    truth["upside.jpg"] = ["Keep this side up", "Handle with care"]
    draw_lines(upside, [("Keep this side up", (250, 200), font("DejaVuSans.ttf", 64), "black", (250, 250, 250))])
    line = turned_line("Handle with care", font("DejaVuSans-Bold.ttf", 64), (255, 255, 255), (170, 0, 0, 255), 180)
    upside.paste(line, (250, 600), line)
    upside.save(out / "upside.jpg", quality=92)

    big = wallpaper(photos, "mate_Wood.jpg", (4000, 3000))
    truth["big.jpg"] = ["Harbour Cafe", "Fish and chips 8.50"]
    draw_lines(big, [
        ("Harbour Cafe", (500, 600), font("DejaVuSerif-Bold.ttf", 240), (250, 240, 220), (40, 30, 20)),
        ("Fish and chips 8.50", (520, 1300), font("DejaVuSans.ttf", 140), (20, 20, 20), (250, 250, 240)),
    ])
    big.save(out / "big.jpg", quality=90)

    # Drawn upright, stored turned 90 degrees counter-clockwise: EXIF orientation 6 turns it back.
    turned = wallpaper(photos, "mate_GreenMeadow.jpg", (1000, 800))
    truth["exif.jpg"] = ["Turned by EXIF"]
    draw_lines(turned, [("Turned by EXIF", (150, 300), font("DejaVuSans-Bold.ttf", 72), "white", (30, 30, 120))])
    exif = Image.Exif()
    exif[0x0112] = 6
    turned.transpose(Image.ROTATE_90).save(out / "exif.jpg", quality=92, exif=exif.tobytes())

    Image.fromarray(skimage.data.page()).convert("RGB").save(out / "page.png")
    truth["page.png"] = None

    wallpaper(photos, "mate_LadyBird.jpg", (1600, 1000)).save(out / "notext.jpg", quality=92)
    truth["notext.jpg"] = []

    (out / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")

    # Photos that push OCR, beside the truth: hundreds of random words (lines to cap), and a
    # 16,000 px wide panorama with a sign on it (a detector view to cap).
    rng = random.Random(36)
    strewn = Image.new("RGB", (1200, 900), (235, 235, 225))
    letters = "abcdefghijklmnopqrstuvwxyz0123456789"
    words = [("".join(rng.choice(letters) for _ in range(rng.randint(3, 9))), (rng.randint(0, 1120), rng.randint(0, 880)),
              font("DejaVuSans.ttf", rng.randint(12, 22)), (20, 20, 20), None) for _ in range(400)]
    draw_lines(strewn, words)
    strewn.save(out / "strewn.png")
    panorama = wallpaper(photos, "mate_LadyBird.jpg", (16000, 1000))
    draw_lines(panorama, [("Summit 2,962 m", (7000, 400), font("DejaVuSans-Bold.ttf", 120), "white", (30, 30, 30))])
    panorama.save(out / "panorama.jpg", quality=90)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
