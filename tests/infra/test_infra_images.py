"""tools/image-check.sh, the step that builds and runs the images: what can be checked without
running it (it runs in tools/test.sh, after these)."""

from __future__ import annotations

import importlib.util
import re

from conftest import REPO

SCRIPT = REPO / "tools" / "image-check.sh"


def _image_check():
    spec = importlib.util.spec_from_file_location("image_check", REPO / "tools" / "image_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_test_sh_runs_the_image_step():
    lines = [l.strip() for l in (REPO / "tools" / "test.sh").read_text().splitlines() if not l.lstrip().startswith("#")]
    assert "tools/image-check.sh" in lines, "tools/test.sh (README's test command, CI's .ci/run) must run the image step"


def test_the_real_dockerfiles_are_built_unchanged():
    text = SCRIPT.read_text()
    assert re.search(r"build clipfn-check:cpu -f Dockerfile;", text)
    for flavour in ("12", "13"):
        assert re.search(rf"build clipfn-check:cuda{flavour} -f Dockerfile.cuda --build-arg CUDA={flavour};", text)
    # Nothing rewrites a Dockerfile on the way: no sed or copy of them, the context is the repository.
    assert not re.search(r"\b(sed|cp|cat|mv)\b[^\n]*[\s'\"](Dockerfile|Dockerfile\.cuda)\b", text), "the Dockerfiles must be built as they are"
    assert '--secret "id=extra_ca,src=' in text, "the extra CAs go in as the build secret only"


def test_bases_are_made_from_debian():
    text = SCRIPT.read_text()
    assert "mmdebstrap --quiet --variant=minbase" in text and "bookworm" in text
    assert 'import' in text and "debian:bookworm-slim" in text and "rust:$RUST_VERSION-bookworm" in text
    assert re.search(r"^RUST_VERSION=1\.95\.0$", text, re.M), "the Rust base must be the Dockerfiles' rust:1.95.0"
    for dockerfile in ("Dockerfile", "Dockerfile.cuda"):
        assert "FROM rust:1.95.0-bookworm AS build" in (REPO / dockerfile).read_text()


def test_dockerd_is_stopped_by_its_pid_and_its_data_removed():
    text = SCRIPT.read_text()
    assert 'kill "$dockerd_pid"' in text and "trap cleanup EXIT" in text
    assert "--iptables=false --ip6tables=false --bridge=none --storage-driver=overlay2" in text
    assert "builder prune -af" in text and 'rm -rf "$DATA_ROOT"' in text


def test_sizes_are_recorded_in_deploy_md():
    module = _image_check()
    text = (REPO / "docs" / "deploy.md").read_text()
    rows = {m.group(1): (float(m.group(2)), float(m.group(3))) for m in module.SIZE_ROW.finditer(text)}
    assert set(rows) == set(module.IMAGES.values()), f"docs/deploy.md records sizes for {sorted(rows)}"
    for image, (raw, packed) in rows.items():
        assert 0 < packed <= raw, f"{image}: compressed {packed} GB must be positive and at most uncompressed {raw} GB"
    assert module.GROWTH_MAX == 1.10
