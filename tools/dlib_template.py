#!/usr/bin/env python3
"""The five-point alignment template of dlib's face chips, for a detector's five landmarks (SCRFD,
YuNet, YOLOv5-face: eye centres, nose tip, mouth corners), derived from dlib's own mean face.

dlib's recognizer (dlib_face_recognition_resnet_model_v1) was trained on chips from
get_face_chip_details(shape, 150, 0.25) (dlib/image_transforms/interpolation.h, read at davisking/dlib
c1fbfb59fa7ee82752b792f5cde4def4aec75a85): with a 68-point shape it maps the mean face's points 27-54
(no eyebrows, no lower lip; in [0, 1] face units) to the chip as (p + padding) / (1 + 2 padding) * size.
The five points below are that mean face's: each eye the mean of its six points (36-41, 42-47), the
nose tip point 30, the mouth corners 48 and 54; mapped the same way.

Usage: dlib_template.py [--size 150] [--padding 0.25] [--json]
"""
import argparse
import json

import numpy as np

# dlib's mean_face_shape_x / _y (get_face_chip_details), the points this template needs, by index
MEAN_FACE = {
    30: (0.490127, 0.515625),
    36: (0.121737, 0.216423), 37: (0.187122, 0.178758), 38: (0.265825, 0.179852),
    39: (0.334606, 0.231733), 40: (0.260918, 0.245099), 41: (0.182743, 0.244077),
    42: (0.645647, 0.231733), 43: (0.714428, 0.179852), 44: (0.793132, 0.178758),
    45: (0.858516, 0.216423), 46: (0.79751, 0.244077), 47: (0.719335, 0.245099),
    48: (0.254149, 0.780233), 54: (0.726104, 0.780233),
}
NAMES = ["left eye (image left)", "right eye", "nose tip", "left mouth corner", "right mouth corner"]


def template(size=150, padding=0.25):
    """[5, 2] float64: the five points in chip pixels, in the detectors' order."""
    p = {i: np.array(v) for i, v in MEAN_FACE.items()}
    face = [np.mean([p[i] for i in range(36, 42)], axis=0), np.mean([p[i] for i in range(42, 48)], axis=0),
            p[30], p[48], p[54]]
    return (np.array(face) + padding) / (1 + 2 * padding) * size


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=150)
    ap.add_argument("--padding", type=float, default=0.25)
    ap.add_argument("--json", action="store_true", help="print [[x, y] x 5] only")
    a = ap.parse_args()
    t = template(a.size, a.padding)
    if a.json:
        print(json.dumps([[round(float(x), 4), round(float(y), 4)] for x, y in t]))
        return
    print(f"dlib chip template: size {a.size}, padding {a.padding}")
    for n, (x, y) in zip(NAMES, t):
        print(f"  {n:22s} ({x:.4f}, {y:.4f})")


if __name__ == "__main__":
    main()
