#!/usr/bin/env python3
"""Photos drawn for the face tests (issue 29), with the faces at known places, for the drawn-face
detectors (make_models.py --kind faces-scrfd-drawn / faces-yunet-drawn; tools/models/faces.py says
how they find a face: the moments of the pixels far from the grey background).

A face is a filled ellipse on a grey (DRAWN_GREY) background with a person's look drawn inside it:
skin, hair or a beard (chords of the ellipse), eyes on the ArcFace template's eye points, a nose
and a mouth. Each person looks alike wherever and however large it is drawn, so the recognizer's
crops of one person are alike and `album.people` must be the persons.

  draw_faces.py OUT_DIR   writes the photos into OUT_DIR and prints, as JSON, what was drawn:
      [{"file": name, "width": W, "height": H,
        "faces": [{"person": k, "box": [x1, y1, x2, y2], "landmarks": [[x, y] x 5]}, ...]}, ...]
      in pixels of the upright photo (EXIF orientation applied); a box is the detector's (DRAWN_BOX
      times the ellipse), not clipped: a face drawn against the photo's edge has one reaching out.
  draw_faces.py OUT_DIR twins   the same for one photo only, TWINS: two persons each drawn twice,
      for the people tests (two faces of one photo are never one person).

The photos: a PNG of four people; a 4000 x 3000 JPEG of the four (decoded at 1/4 of its size);
a portrait of three in each of the eight EXIF orientations (one against the top edge, whose crop
reaches above the canvas, and one against the right edge);
and a photo with no face.
"""
import json
import os
import sys

import numpy as np
from PIL import Image, ImageDraw

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models.faces import DRAWN_BOX, DRAWN_GREY, LANDMARKS_IN_BOX  # noqa: E402

# Every colour is far from the grey background (channels' distances summing over 70) and none is
# black (a channel over 30): the detector's mask counts the whole ellipse.
PERSONS = [
    {"skin": (230, 180, 140), "hair": ((90, 50, 20), 120, 260), "eyes": ((40, 80, 200), 0.12),
     "mouth": (200, 40, 40)},
    {"skin": (170, 110, 70), "hair": ((40, 160, 60), 230, 310), "eyes": ((240, 240, 90), 0.2),
     "mouth": (240, 120, 160)},
    {"skin": (190, 220, 250), "hair": ((240, 200, 40), 150, 390), "eyes": ((60, 60, 160), 0.09),
     "mouth": (160, 40, 120), "glasses": (60, 60, 160)},
    {"skin": (120, 80, 60), "hair": ((235, 235, 235), 200, 340), "eyes": ((235, 235, 235), 0.1),
     "mouth": (235, 235, 235), "beard": (60, 40, 30)},
]

# (file, upright size, [(person, centre x, centre y, semi-axis x, semi-axis y)]): in canvas pixels
# every face's semi-axes stay under 40 and the faces 80 + their sizes apart (tools/models/faces.py)
ROW = ("drawn-row.png", (1600, 1000), [(0, 250, 300, 60, 75), (1, 700, 350, 40, 50),
                                        (2, 1200, 400, 80, 95), (3, 500, 750, 50, 62)])
LARGE = ("drawn-large.jpg", (4000, 3000), [(1, 800, 900, 200, 240), (2, 2200, 1200, 150, 180),
                                            (3, 3300, 2200, 120, 150), (0, 1200, 2300, 180, 220)])
PORTRAIT = ((900, 1200), [(2, 250, 55, 45, 55), (3, 600, 750, 60, 70), (0, 845, 1000, 55, 68)])
EMPTY = ("drawn-empty.png", (800, 600), [])
TWINS = ("drawn-twins.png", (1600, 1000), [(0, 300, 300, 60, 75), (3, 1200, 300, 60, 75),
                                           (0, 450, 720, 70, 85), (3, 1150, 720, 55, 68)])
# what exif_transpose does for each orientation, undone: the stored pixels of an upright photo
UNDO_ORIENTATION = {2: Image.Transpose.FLIP_LEFT_RIGHT, 3: Image.Transpose.ROTATE_180,
                    4: Image.Transpose.FLIP_TOP_BOTTOM, 5: Image.Transpose.TRANSPOSE,
                    6: Image.Transpose.ROTATE_90, 7: Image.Transpose.TRANSVERSE,
                    8: Image.Transpose.ROTATE_270}


def draw_face(draw, person, cx, cy, a, b):
    """Draws one face; returns what the drawn-face detector should answer for it."""
    look = PERSONS[person]
    box = [cx - DRAWN_BOX * a, cy - DRAWN_BOX * b, cx + DRAWN_BOX * a, cy + DRAWN_BOX * b]
    points = (np.array([cx, cy]) + np.array([2 * DRAWN_BOX * a, 2 * DRAWN_BOX * b]) * LANDMARKS_IN_BOX.reshape(5, 2))
    ellipse = [cx - a, cy - b, cx + a - 1, cy + b - 1]  # Pillow's box is inclusive: pixels cx - a .. cx + a - 1
    draw.ellipse(ellipse, fill=look["skin"])
    colour, start, end = look["hair"]
    draw.chord(ellipse, start, end, fill=colour)
    if "beard" in look:
        draw.chord(ellipse, 30, 150, fill=look["beard"])
    colour, radius = look["eyes"]
    r = radius * a
    for x, y in points[:2]:
        draw.ellipse([x - r, y - r, x + r, y + r], fill=colour)
    if "glasses" in look:
        (x0, y0), (x1, _) = points[:2]
        draw.rectangle([x0, y0 - 0.03 * b, x1, y0 + 0.03 * b], fill=look["glasses"])
    x, y = points[2]
    draw.ellipse([x - 0.06 * a, y - 0.05 * b, x + 0.06 * a, y + 0.05 * b], fill=look["mouth"])
    draw.line([tuple(points[3]), tuple(points[4])], fill=look["mouth"], width=max(2, round(0.08 * b)))
    return {"person": person, "box": [float(v) for v in box], "landmarks": points.tolist()}


def draw_photo(size, faces):
    photo = Image.new("RGB", size, (DRAWN_GREY,) * 3)
    draw = ImageDraw.Draw(photo)
    return photo, [draw_face(draw, *face) for face in faces]


def save_plain(out, name, size, faces):
    photo, truth = draw_photo(size, faces)
    photo.save(os.path.join(out, name), quality=92)
    return {"file": name, "width": size[0], "height": size[1], "faces": truth}


def save_turned(out):
    """PORTRAIT stored in each of the eight EXIF orientations."""
    size, faces = PORTRAIT
    upright, truth = draw_photo(size, faces)
    drawn = []
    for orientation in range(1, 9):
        name = f"drawn-turned-{orientation}.jpg"
        stored = upright.transpose(UNDO_ORIENTATION[orientation]) if orientation > 1 else upright
        exif = Image.Exif()
        exif[0x0112] = orientation
        stored.save(os.path.join(out, name), quality=92, exif=exif)
        drawn.append({"file": name, "width": size[0], "height": size[1], "faces": truth})
    return drawn


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    if sys.argv[2:] == ["twins"]:
        drawn = [save_plain(out, *TWINS)]
    else:
        drawn = [save_plain(out, *photo) for photo in (ROW, LARGE, EMPTY)] + save_turned(out)
    json.dump(drawn, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    sys.exit(main())
