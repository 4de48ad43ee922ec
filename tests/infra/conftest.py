"""Shared setup for the infrastructure tests (tests/infra)."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))


def clipfn_env() -> dict[str, str]:
    """Variables from .cache/clipfn.env (written by tools/setup.sh), if it exists."""
    path = REPO / ".cache" / "clipfn.env"
    values: dict[str, str] = {}
    if not path.is_file():
        return values
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export "):]
        name, sep, raw = line.partition("=")
        if not sep:
            continue
        try:
            parts = shlex.split(raw)
        except ValueError:
            continue
        values[name.strip()] = parts[0] if parts else ""
    return values


def find_tool(env_var: str, name: str) -> str | None:
    """A tool's path: $ENV_VAR, then .cache/clipfn.env, then the running venv and .venv/bin, then PATH."""
    for candidate in (os.environ.get(env_var), clipfn_env().get(env_var)):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    # The interpreter's own bin/ (a venv used without activating it), then the repo's .venv.
    for folder in (Path(sys.executable).parent, REPO / ".venv" / "bin"):
        candidate = folder / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which(name)


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def tf():
    import infra_tf

    return infra_tf.load()
