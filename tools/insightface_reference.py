"""InsightFace's own face pipeline as the reference for the real detector (issue 35).

Loads `insightface/model_zoo/scrfd.py` and `insightface/utils/face_align.py` by path from the
`insightface` 0.7.3 sdist (tools/setup-real-faces.sh fetches it; the package itself, with its
compiled parts and its dependencies, is never installed), runs `SCRFD.detect` on each photo at
full size (640 canvas, clipfn's default minimum score 0.7, InsightFace's NMS), cuts each face's
ArcFace chip from the full-size photo with `norm_crop`, and embeds the chips with an ArcFace-format
recognizer as InsightFace's `ArcFaceONNX` feeds it (RGB, (p - 127.5) / 127.5).

    insightface_reference.py [--at LANDMARKS.json] SDIST_DIR DETECTOR.onnx RECOGNIZER.onnx PHOTO... > faces.json

Prints {photo file name: {"width", "height", "faces": [{"box", "score", "landmarks",
"embedding"}]}}, the embedding of unit length. With `--at`, a file of {photo file name: [five
landmarks of each face, in full-size pixels]} (another pipeline's faces), each photo also gets
"at": [the embedding of `norm_crop`'s chip at each of those faces' landmarks]: the full-size chips
with the landmarks held equal, so that chips are compared apart from where the detectors put them.
"""

import importlib.util
import json
import sys
import warnings
from pathlib import Path

import cv2
import numpy as np
import onnxruntime
from PIL import Image, ImageOps

MIN_SCORE = 0.7


def load(sdist: Path, relative: str):
    spec = importlib.util.spec_from_file_location(Path(relative).stem, sdist / "insightface" / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def upright_bgr(path: str) -> np.ndarray:
    rgb = np.asarray(ImageOps.exif_transpose(Image.open(path)).convert("RGB"))
    return np.ascontiguousarray(rgb[:, :, ::-1])


def main(*args: str) -> None:
    at = {}
    if args[0] == "--at":
        at = json.loads(Path(args[1]).read_text())
        args = args[2:]
    sdist, detector, recognizer, *photos = args
    # face_align's SimilarityTransform.estimate is deprecated in scikit-image 0.26, not changed.
    warnings.filterwarnings("ignore", category=FutureWarning)
    scrfd = load(Path(sdist), "model_zoo/scrfd.py").SCRFD(detector)
    scrfd.prepare(-1, det_thresh=MIN_SCORE)  # its input size is the graph's: 640
    norm_crop = load(Path(sdist), "utils/face_align.py").norm_crop
    rec = onnxruntime.InferenceSession(recognizer, providers=["CPUExecutionProvider"])
    answer = {}
    for path in photos:
        image = upright_bgr(path)
        boxes, points = scrfd.detect(image)
        def embed(kps):
            chip = norm_crop(image, np.asarray(kps, np.float32), 112)
            x = (chip[:, :, ::-1].astype(np.float32) - 127.5) / 127.5
            (y,) = rec.run(None, {rec.get_inputs()[0].name: np.ascontiguousarray(x.transpose(2, 0, 1)[None])})
            return (y[0] / np.linalg.norm(y[0])).tolist()

        faces = [{"box": [float(v) for v in box[:4]], "score": float(box[4]), "landmarks": kps.tolist(),
                  "embedding": embed(kps)} for box, kps in zip(boxes, points)]
        height, width = image.shape[:2]
        name = Path(path).name
        answer[name] = {"width": width, "height": height, "faces": faces}
        if name in at:
            answer[name]["at"] = [embed(kps) for kps in at[name]]
    json.dump(answer, sys.stdout)


if __name__ == "__main__":
    main(*sys.argv[1:])
