"""The generated face models (tools/models/faces.py) and their reference (tools/faces_reference.py):
the formats the Rust side relies on (names, shapes, row order), the properties the models were tuned
for on the camera photos (a few faces, none on the letterbox, landmarks in the box, distinct
scores, a resized copy's faces joining their originals), and the reference's own arithmetic
(letterbox sizes, decoding, NMS, alignment, DBSCAN) on hand-made inputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, clipfn_env

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("sklearn")
pytest.importorskip("skimage")
pytest.importorskip("cv2")

sys.path.insert(0, str(REPO / "tools"))
import faces_reference as fr  # noqa: E402
from models import faces  # noqa: E402

SEED = 20240601  # make_models.py's default


def folder(name: str) -> Path:
    path = clipfn_env().get(name)
    if not path or not (Path(path) / "detection" / "model.onnx").is_file():
        pytest.skip(f"no {name}: run tools/setup.sh")
    return Path(path)


def camera_photos(n: int) -> list[Path]:
    photos_dir = clipfn_env().get("CLIPFN_PHOTOS_DIR")
    photos = sorted((Path(photos_dir) / "wallpapers").glob("*.jpg")) if photos_dir else []
    if not photos:
        pytest.skip("no camera photos: run tools/setup.sh")
    return photos[:n]


def iou(a, b) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    return w * h / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - w * h)


# --------------------------------------------------------------------------------------------
# the models


def test_builds_are_deterministic():
    for fmt in ("scrfd", "yunet"):
        a, _ = faces.build_detector(fmt, SEED)
        b, _ = faces.build_detector(fmt, SEED)
        assert a.SerializeToString() == b.SerializeToString(), fmt
    assert faces.build_recognizer(SEED)[0].SerializeToString() == faces.build_recognizer(SEED)[0].SerializeToString()
    other, _ = faces.build_detector("scrfd", 1)
    assert faces.build_detector("scrfd", SEED)[0].SerializeToString() != other.SerializeToString()


def io(path: Path):
    sess = fr.session(str(path))
    return sess, [(i.name, i.shape) for i in sess.get_inputs()], [(o.name, o.shape) for o in sess.get_outputs()]


def test_model_files_have_the_real_models_names_and_shapes():
    scrfd, yunet = folder("CLIPFN_TEST_FACES_SCRFD"), folder("CLIPFN_TEST_FACES_YUNET")
    _, ins, outs = io(scrfd / "detection" / "model.onnx")
    assert ins == [("input.1", [1, 3, 640, 640])]
    assert outs == [(f"{k}_{s}", [1, (640 // s) ** 2 * 2, n]) for k, n in (("score", 1), ("bbox", 4), ("kps", 10))
                    for s in (8, 16, 32)]
    _, ins, outs = io(yunet / "detection" / "model.onnx")
    assert ins == [("input", [1, 3, 640, 640])]
    assert outs == [(f"{k}_{s}", [1, (640 // s) ** 2, n]) for k, n in (("cls", 1), ("obj", 1), ("bbox", 4), ("kps", 10))
                    for s in (8, 16, 32)]
    for f in (scrfd, yunet):
        _, ins, outs = io(f / "recognition" / "model.onnx")
        assert ins == [("input.1", ["N", 3, 112, 112])] and outs == [("683", ["N", 512])]
    assert (scrfd / "recognition" / "model.onnx").read_bytes() == (yunet / "recognition" / "model.onnx").read_bytes()
    env = clipfn_env()
    _, ins, outs = io(Path(env["CLIPFN_TEST_FACE_DETECTOR_BAD"]))
    assert ins == [("input.1", [1, 3, 640, 640])] and len(outs) == 7
    _, ins, outs = io(Path(env["CLIPFN_TEST_FACE_RECOGNIZER_BAD"]))
    assert ins == [("input.1", ["N", 3, 96, 96])] and outs == [("683", ["N", 512])]


def test_scrfd_rows_are_cells_row_major_with_two_anchors_each():
    """A bright square on a dark-grey canvas, cell by cell: the strongest stride-32 row is the
    square's cell (both anchors' rows look at the same cell)."""
    sess = fr.session(str(folder("CLIPFN_TEST_FACES_SCRFD") / "detection" / "model.onnx"))
    canvas = np.full((640, 640, 3), 60, np.uint8)
    y, x = 7, 12  # cell (row 7, column 12) of the 20 x 20 stride-32 grid
    canvas[y * 32 + 8:y * 32 + 24, x * 32 + 8:x * 32 + 24] = (250, 200, 40)
    inp = ((canvas.astype(np.float32) - 127.5) / 128).transpose(2, 0, 1)[None]
    score_32 = sess.run(["score_32"], {"input.1": np.ascontiguousarray(inp)})[0].reshape(20 * 20, 2)
    anchors = [int(np.argmax(score_32[:, a])) for a in range(2)]
    # the square's cell or a neighbour (each filter sees 2 x 2 cells around its own)
    for row in anchors:
        assert abs(row // 20 - y) <= 1 and abs(row % 20 - x) <= 1, (anchors, y, x)


# --------------------------------------------------------------------------------------------
# what the models were tuned for, through the reference


@pytest.fixture(scope="module")
def detections():
    photos = camera_photos(34)
    out = {}
    for name in ("CLIPFN_TEST_FACES_SCRFD", "CLIPFN_TEST_FACES_YUNET"):
        f = fr.Faces(str(folder(name)))
        out[name] = [(p, f.detect(p)) for p in photos]
    return out


@pytest.mark.parametrize("name", ["CLIPFN_TEST_FACES_SCRFD", "CLIPFN_TEST_FACES_YUNET"])
def test_a_few_faces_per_photo_none_on_the_letterbox(detections, name):
    counts = []
    for photo, answer in detections[name]:
        w, h = answer["width"], answer["height"]
        found = answer["faces"]
        counts.append(len(found))
        scores = [f["score"] for f in found]
        assert scores == sorted(scores, reverse=True) and len(set(scores)) == len(scores), (photo, scores)
        for face in found:
            x1, y1, x2, y2 = face["box"]
            cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
            assert 0 <= cx < w and 0 <= cy < h, (photo, face["box"])  # the photo, not the padding
            assert 0.7 <= face["score"] < 1
            if x1 == 0 or y1 == 0 or x2 == w or y2 == h:
                continue  # clipped to the photo: its size and landmarks are the detector's no more
            assert 20 / 640 * max(w, h) < x2 - x1 < 300 / 640 * max(w, h), (photo, face["box"])
            for lx, ly in face["landmarks"]:
                assert x1 <= lx <= x2 and y1 <= ly <= y2, (photo, face)
            (le, re, nose, lm, rm) = face["landmarks"]
            assert le[0] < re[0] and lm[0] < rm[0] and le[1] < nose[1] < lm[1], (photo, face)
            assert abs(np.linalg.norm(face["embedding"]) - 1) < 1e-5 and len(face["embedding"]) == 512
    counts = np.array(counts)
    assert (counts == 0).sum() >= 2, counts  # some photos with none
    assert ((counts >= 1) & (counts <= 8)).mean() >= 0.6, counts  # most with a few
    assert counts.max() <= 12, counts


def test_faces_of_a_photo_are_different_people(detections):
    cross = []
    for answers in detections.values():
        for _, answer in answers:
            e = np.array([f["embedding"] for f in answer["faces"]])
            if len(e) > 1:
                c = e @ e.T
                cross += list(c[np.triu_indices(len(e), 1)])
    assert np.median(cross) < 0.3 and np.mean(np.array(cross) > 0.5) < 0.1, np.quantile(cross, [0.5, 0.9])


def test_yunet_outputs_need_the_clamp():
    """cls goes below 0 on the letterbox and above 1 on strong faces: the decoder's clamp matters."""
    sess = fr.session(str(folder("CLIPFN_TEST_FACES_YUNET") / "detection" / "model.onnx"))
    lo, hi = 1.0, 0.0
    for photo in camera_photos(34)[:12]:
        canvas, _, _ = fr.letterbox(*fr.load_photo(photo))
        x = np.ascontiguousarray(canvas[:, :, ::-1].astype(np.float32).transpose(2, 0, 1)[None])
        cls = sess.run(["cls_8", "cls_16", "cls_32"], {"input": x})
        lo, hi = min(lo, min(float(c.min()) for c in cls)), max(hi, max(float(c.max()) for c in cls))
    assert lo < 0 and hi > 1, (lo, hi)


def test_a_resized_copys_faces_join_their_originals(tmp_path):
    """What tests/it/faces.rs asserts: the first camera photos and their 70% copies (Lanczos, JPEG q92),
    one DBSCAN over all faces; each original's best face shares its copy's best face's label."""
    from PIL import Image

    photos = camera_photos(4)
    copies = []
    for p in photos:
        im, _ = fr.load_photo(p)
        q = tmp_path / f"small-{p.name}"
        im.resize((im.width * 7 // 10, im.height * 7 // 10), Image.LANCZOS).save(q, quality=92)
        copies.append(q)
    for name in ("CLIPFN_TEST_FACES_SCRFD", "CLIPFN_TEST_FACES_YUNET"):
        f = fr.Faces(str(folder(name)))
        answers = [f.detect(p) for p in photos + copies]
        embeddings, first, photo_of_face = [], [], []
        for i, a in enumerate(answers):
            first.append(len(embeddings) if a["faces"] else None)
            embeddings += [face["embedding"] for face in a["faces"]]
            photo_of_face += [i] * len(a["faces"])
        assert len(embeddings) >= 4
        labels = fr.people(embeddings, photo_of_face, 0.5, 2)
        n = len(photos)
        for i in range(n):
            if first[i] is None:
                continue
            a, b = first[i], first[i + n]
            assert b is not None and labels[a] != -1 and labels[a] == labels[b], (name, photos[i], labels)
            sx = answers[i]["width"] / answers[i + n]["width"]
            box = [v * sx for v in answers[i + n]["faces"][0]["box"]]
            assert iou(answers[i]["faces"][0]["box"], box) > 0.7, (name, photos[i])


# --------------------------------------------------------------------------------------------
# the reference's arithmetic


def test_letterbox_sizes_and_scale():
    from PIL import Image

    for (w, h), (nw, nh) in {(1920, 1080): (640, 360), (1080, 1920): (360, 640), (400, 250): (640, 400),
                             (500, 500): (640, 640), (1000, 333): (640, 213)}.items():
        canvas, scale, _ = fr.letterbox(Image.new("RGB", (w, h), (255, 255, 255)), (w, h))
        assert canvas.shape == (640, 640, 3)
        filled = np.argwhere(canvas[:, :, 0] > 0)
        assert tuple(filled.max(axis=0) + 1) == (nh, nw), (w, h)
        assert scale == nh / h


def test_a_centred_letterbox_is_grey_with_the_odd_pixel_after():
    from PIL import Image

    for (w, h), offset in {(1200, 800): (0, 107), (853, 1280): (107, 0), (855, 1280): (106, 0)}.items():
        canvas, scale, at = fr.letterbox(Image.new("RGB", (w, h), (255, 255, 255)), (w, h), centred=True)
        filled = np.argwhere(canvas[:, :, 0] == 255)
        assert tuple(filled.min(axis=0)[::-1]) == offset == tuple(at), (w, h)
        assert canvas[0, 0].tolist() in ([114] * 3, [255] * 3) and canvas[639, 639].tolist() == [114] * 3


def test_yolov5_face_decoding_by_hand():
    rows = np.zeros((1, 6, 16), np.float32)
    rows[0, 2, :5] = [100, 50, 40, 60, 0.8]
    rows[0, 2, 5:15] = 90 + np.arange(10)
    rows[0, 2, 15] = 0.9
    rows[0, 4, 4], rows[0, 4, 15] = 0.95, 0.5  # objectness alone would pass: the score is the product
    scores, boxes, kps = fr.decode_yolov5_face(rows, 0.6)
    assert scores.tolist() == pytest.approx([0.72])
    assert boxes.tolist() == [[80, 20, 120, 80]]
    assert kps[0].tolist() == [[90 + 2 * j, 91 + 2 * j] for j in range(5)]


def test_scrfd_decoding_and_nms_by_hand():
    """One anchor above the threshold per stride: boxes and landmarks from the anchor's top-left
    centre, the stride-8 and stride-16 boxes overlapping (IoU > 0.4 with +1 areas) so one goes."""
    outs = []
    for kind, k in (("score", 1), ("bbox", 4), ("kps", 10)):
        for s in fr.STRIDES:
            outs.append(np.zeros((1, (640 // s) ** 2 * 2, k), np.float32))
    row8 = (3 * 80 + 5) * 2 + 1  # stride 8, cell (row 3, column 5), anchor 1: centre (40, 24)
    outs[0][0, row8] = 0.9
    outs[3][0, row8] = [1, 2, 3, 4]
    outs[6][0, row8] = np.arange(10) / 10
    row16 = (1 * 40 + 2) * 2  # stride 16, cell (1, 2), anchor 0: centre (32, 16)
    outs[1][0, row16] = 0.8
    outs[4][0, row16] = [1, 1, 1, 1]
    scores, boxes, kps = fr.decode_scrfd(outs, 0.7)
    assert scores.tolist() == pytest.approx([0.9, 0.8])
    assert boxes.tolist() == [[32, 8, 64, 56], [16, 0, 48, 32]]
    np.testing.assert_allclose(kps[0], [[40 + 0.8 * j, 24 + 0.8 * j + 0.8] for j in range(0, 10, 2)], rtol=1e-6)
    assert fr.nms(scores, boxes, 0.4, True) == [0, 1]  # IoU (17*25)/(33*49+33*33-17*25) = 0.19
    near = np.array([[0, 0, 9, 9], [1, 0, 10, 9], [50, 50, 60, 60]], np.float64)
    assert fr.nms(np.array([0.8, 0.9, 0.75]), near, 0.4, True) == [1, 2]
    # equal scores: decode order decides (stable)
    assert fr.nms(np.array([0.8, 0.8, 0.8]), near, 0.4, True) == [0, 2]


def test_yunet_decoding_by_hand():
    named = {}
    for s in fr.STRIDES:
        n = (640 // s) ** 2
        named.update({f"cls_{s}": np.zeros((1, n, 1), np.float32), f"obj_{s}": np.zeros((1, n, 1), np.float32),
                      f"bbox_{s}": np.zeros((1, n, 4), np.float32), f"kps_{s}": np.zeros((1, n, 10), np.float32)})
    idx = 4 * 20 + 7  # stride 32, row 4, column 7
    named["cls_32"][0, idx] = 1.3  # clamped to 1
    named["obj_32"][0, idx] = 0.64
    named["bbox_32"][0, idx] = [0.5, 0.25, np.log(2), 0]
    named["kps_32"][0, idx] = [0.5, 0.5] * 5
    named["cls_8"][0, 0], named["obj_8"][0, 0] = -0.5, -0.5  # a negative product: clamped to 0
    scores, boxes, kps = fr.decode_yunet(named, 0.7)
    assert scores.tolist() == pytest.approx([0.8])
    np.testing.assert_allclose(boxes, [[(7.5 - 1) * 32, (4.25 - 0.5) * 32, (7.5 + 1) * 32, (4.25 + 0.5) * 32]],
                               rtol=1e-6)
    np.testing.assert_allclose(kps[0], [[7.5 * 32, 4.5 * 32]] * 5, rtol=1e-6)


def test_alignment_maps_the_landmarks_onto_the_template():
    """Landmarks that are the template scaled by 2 and moved: the crop is the canvas region they
    span, shrunk by 2 (a gradient image, so the warp is checked pixel by pixel)."""
    yy, xx = np.mgrid[0:640, 0:640]
    canvas = np.stack([xx % 256, yy % 256, (xx + yy) % 256], axis=2).astype(np.uint8)
    lm = fr.ARCFACE_TEMPLATE * 2 + [100, 50]
    crop = fr.align(canvas, lm, fr.ARCFACE_TEMPLATE, 112)
    assert crop.shape == (112, 112, 3)
    # crop pixel (u, v) samples canvas (2u + 100, 2v + 50)
    for u, v in ((0, 0), (10, 90), (111, 111), (56, 30)):
        assert crop[v, u].tolist() == canvas[2 * v + 50, 2 * u + 100].tolist(), (u, v)


def test_chip_of_tells_arcface_from_dlib_by_side():
    template, normalize = fr.chip_of(112)
    np.testing.assert_array_equal(template, fr.ARCFACE_TEMPLATE)
    assert normalize(np.float64(255)) == 1.0
    template, normalize = fr.chip_of(150)
    assert template.shape == (5, 2) and np.all((template > 0) & (template < 150))
    assert normalize(np.float64(255)) == 255  # dlib's network takes raw RGB; its mean is inside the graph
    with pytest.raises(ValueError, match="neither"):
        fr.chip_of(128)


def run(*args, stdin=None):
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "faces_reference.py"), *args], input=stdin,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_people_cli_is_sklearn_dbscan_with_no_photo_twice():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal(512), rng.standard_normal(512)
    points = [a, a + 0.1 * rng.standard_normal(512), b, rng.standard_normal(512), b + 0.1 * rng.standard_normal(512),
              a + 0.1 * rng.standard_normal(512)]
    faces = {"embeddings": [p.tolist() for p in points], "photos": [0, 1, 2, 3, 4, 5]}
    out = run("people", "--eps", "0.5", "--min-samples", "2", stdin=json.dumps(faces))
    assert out == {"labels": [0, 0, 1, -1, 1, 0]}
    # Faces 0 and 5 (both near a) in one photo: the one farther from a's centre leaves, and alone.
    faces["photos"] = [0, 1, 2, 3, 4, 0]
    labels = run("people", "--eps", "0.5", "--min-samples", "2", stdin=json.dumps(faces))["labels"]
    centre = np.sum([points[i] for i in (0, 1, 5)], axis=0)
    leaver = 0 if points[0] @ centre < points[5] @ centre else 5
    assert labels[leaver] == -1 and labels[1] == labels[5 - leaver] != -1 and labels[2] == labels[4] != -1, labels
    assert run("people", stdin=json.dumps({"embeddings": [], "photos": []})) == {"labels": []}


def test_detect_cli_answers_one_entry_per_photo():
    photos = camera_photos(3)
    out = run("detect", str(folder("CLIPFN_TEST_FACES_SCRFD")), *map(str, photos[:2]), "--min-score", "0.7")
    assert len(out) == 2
    for answer, photo in zip(out, photos):
        assert set(answer) == {"width", "height", "faces"}
        for face in answer["faces"]:
            assert set(face) == {"box", "score", "landmarks", "embedding"}
            assert len(face["box"]) == 4 and len(face["landmarks"]) == 5 and len(face["embedding"]) == 512
