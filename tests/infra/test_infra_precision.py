"""infra/precision.py: the fp16/int8 variants of a model folder and their quality gates, on the
generated test model and a few real photos (the export script calls the same code)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from conftest import REPO, clipfn_env

sys.path.insert(0, str(REPO / "infra"))
import precision  # noqa: E402


@pytest.fixture
def fp32_folder(tmp_path):
    source = clipfn_env().get("CLIPFN_TEST_FOLDER")
    if not source or not Path(source).is_dir():
        pytest.skip("no generated test model folder: run tools/setup.sh")
    folder = tmp_path / "clip-test"
    (folder / "onnx").mkdir(parents=True)
    shutil.copy(Path(source) / "onnx/vision_model.onnx", folder / "onnx")
    shutil.copy(Path(source) / "preprocessor_config.json", folder)
    photos = sorted((Path(clipfn_env()["CLIPFN_PHOTOS_DIR"]) / "wallpapers").glob("*.jpg"))[:6]
    return folder, photos


def test_variants_that_pass_are_written_with_the_method_named(fp32_folder):
    folder, photos = fp32_folder
    report = precision.write_variants(folder, ["fp16", "int8"], photos, None)
    for name in ("fp16", "int8"):
        entry = report["variants"][name]
        assert entry["chosen"] and "fastest" in entry["why"], entry
        assert (folder / precision.FILES[name]).is_file()
    methods = {row["method"] for row in report["variants"]["int8"]["candidates"]}
    assert any(m.startswith("dynamic") for m in methods) and any(m.startswith("static") for m in methods)
    assert all(row["min_cosine"] >= 0.99 for row in report["variants"]["int8"]["candidates"] if row["passes"])


def test_a_variant_failing_its_gate_is_not_written(fp32_folder, monkeypatch):
    folder, photos = fp32_folder
    monkeypatch.setitem(precision.GATES, "int8", {"min_cosine": 1.000001, "top1": 1.0})
    report = precision.write_variants(folder, ["int8"], photos, None)
    assert report["variants"]["int8"]["chosen"] is None
    assert not (folder / precision.FILES["int8"]).exists()


def test_a_siglip_folder_is_gated_on_its_pooler_output(tmp_path):
    """SigLIP's vision file puts last_hidden_state first: the gates must read pooler_output."""
    source = clipfn_env().get("CLIPFN_TEST_SIGLIP2_FOLDER")
    if not source or not Path(source).is_dir():
        pytest.skip("no generated SigLIP test folder: run tools/setup.sh")
    folder = tmp_path / "siglip2-test"
    (folder / "onnx").mkdir(parents=True)
    shutil.copy(Path(source) / "onnx/vision_model.onnx", folder / "onnx")
    shutil.copy(Path(source) / "preprocessor_config.json", folder)
    photos = sorted((Path(clipfn_env()["CLIPFN_PHOTOS_DIR"]) / "wallpapers").glob("*.jpg"))[:4]
    session = precision.session(folder / "onnx/vision_model.onnx")
    assert precision.embedding_output(session) == "pooler_output"
    report = precision.write_variants(folder, ["fp16"], photos, None)
    assert report["variants"]["fp16"]["chosen"], report
