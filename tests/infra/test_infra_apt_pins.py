"""Debian package pins that survive security updates.

Every bookworm-security update of a package replaces its security revision (`+deb12u4` becomes
`+deb12u5`, `20250419~deb12u2` becomes `~deb12u3`) and the archive drops the one before, so an
`apt-get install` pinned to a revision written out in full stops building. A version glob keeps the
upstream version and the Debian revision and takes whatever security revision is current:
`libde265-dev=1.0.11-1+deb12u*` (apt picks the newest matching version; hadolint's DL3008 accepts
it). This check fails on a pin to a full `+debNNuN` / `~debNNuN` revision in any `apt-get install`
(or `apt install`) of the Dockerfiles or of a file under infra/ or tools/; tools/check-infra.sh runs
it with the rest of tests/infra.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import REPO

# A security revision written out in full: +deb12u4, ~deb12u2 (not +deb12u*).
FULL_REVISION = re.compile(r"[+~]deb\d+u\d+(?![\d*?\[])")
INSTALL = re.compile(r"\bapt(?:-get)?\s+(?:-\S+\s+)*install\b")
# Where a shell command ends: what follows is no longer apt-get's arguments.
COMMAND_END = re.compile(r"&&|\|\||[;|]|\$\(|`")
SKIP_DIRS = {"node_modules", "__pycache__", ".terraform"}


def scanned_files() -> list[Path]:
    """The Dockerfiles, and every text file under infra/ and tools/ that runs apt-get install."""
    files = [REPO / "Dockerfile", REPO / "Dockerfile.cuda"]
    for top in ("infra", "tools"):
        for path in sorted((REPO / top).rglob("*")):
            if not path.is_file() or SKIP_DIRS & set(path.relative_to(REPO).parts):
                continue
            if path.stat().st_size > 1 << 20:
                continue  # a model baked into infra/model/, not a script
            try:
                text = path.read_text()
            except (UnicodeDecodeError, OSError):
                continue
            if INSTALL.search(text):
                files.append(path)
    return files


def logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, line) with comment lines dropped and continuations joined: a trailing
    backslash, or the doubled one of a Dockerfile written from an unquoted shell heredoc."""
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("#"):
            continue  # comments, and the Dockerfile's comment lines inside a continued RUN
        if not pending:
            start = number
        stripped = line.rstrip()
        if stripped.endswith("\\"):
            pending += stripped.rstrip("\\") + " "
            continue
        out.append((start, pending + line))
        pending = ""
    if pending:
        out.append((start, pending))
    return out


def full_revision_pins(text: str) -> list[tuple[int, str]]:
    """(line number, package=version) for each apt install argument pinned to a full security revision."""
    found = []
    for number, line in logical_lines(text):
        for match in INSTALL.finditer(line):
            args = COMMAND_END.split(line[match.end():], maxsplit=1)[0]
            for word in args.split():
                word = word.strip("'\",()[]")
                name, eq, version = word.partition("=")
                if eq and name and not name.startswith("-") and FULL_REVISION.search(version):
                    found.append((number, word))
    return found


def test_the_check_reads_every_file_that_installs_debian_packages():
    names = {str(p.relative_to(REPO)) for p in scanned_files()}
    # The images' installs, and the host's (setup-formats.sh, image-check.sh's Rust base, check-infra.sh's shellcheck).
    assert {"Dockerfile", "Dockerfile.cuda", "tools/setup-formats.sh", "tools/image-check.sh", "tools/check-infra.sh"} <= names, names
    for dockerfile in ("Dockerfile", "Dockerfile.cuda"):
        pinned = [w for _, line in logical_lines((REPO / dockerfile).read_text()) if INSTALL.search(line)
                  for w in line.split() if "=" in w and not w.startswith("-")]
        assert len(pinned) >= 7, f"{dockerfile}: the parser sees only {pinned}"


@pytest.mark.parametrize("path", scanned_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_pin_to_a_full_security_revision(path):
    bad = full_revision_pins(path.read_text())
    assert not bad, (
        f"{path.relative_to(REPO)}: " + "; ".join(f"line {n}: {w}" for n, w in bad)
        + " pins a security revision that the next bookworm-security update removes from the archive:"
        " keep the upstream version and revision and glob the security one (pkg=1.0-1+deb12u*)"
    )


@pytest.mark.parametrize("dockerfile", ["Dockerfile", "Dockerfile.cuda"])
def test_the_security_revisions_are_globs(dockerfile):
    """The packages bookworm-security patches are pinned with a glob (and nothing else is)."""
    text = (REPO / dockerfile).read_text()
    for pin in ("'libde265-dev=1.0.11-1+deb12u*'", "'libdav1d-dev=1.0.0-2+deb12u*'", "'ca-certificates=20250419~deb12u*'"):
        assert pin in text, f"{dockerfile}: {pin}"
    for pin in ("cmake=3.25.1-1 ", "nasm=2.16.01-1 ", "pkg-config=1.8.1-1 ", "python3-pip=23.0.1+dfsg-1 "):
        assert pin in text, f"{dockerfile}: {pin} (pins without a security revision stay exact)"


BAD = {
    "dockerfile continued": (
        "RUN apt-get update \\\n    && apt-get install -y --no-install-recommends \\\n"
        "        cmake=3.25.1-1 \\\n        libde265-dev=1.0.11-1+deb12u4 \\\n    && rm -rf /var/lib/apt/lists/*\n",
        [(1, "libde265-dev=1.0.11-1+deb12u4")],
    ),
    "tilde revision, quoted": ("RUN apt-get install -y 'ca-certificates=20250419~deb12u2'\n", [(1, "ca-certificates=20250419~deb12u2")]),
    "comment inside a RUN": (
        "RUN apt-get install -y \\\n# the decoders\n        libdav1d-dev=1.0.0-2+deb12u1\n",
        [(1, "libdav1d-dev=1.0.0-2+deb12u1")],
    ),
    "shell script, apt": ('sudo apt install -y -qq "libde265-0=1.0.11-1+deb12u10" nasm\n', [(1, "libde265-0=1.0.11-1+deb12u10")]),
    "heredoc Dockerfile": (
        "cat >Dockerfile <<EOF\nRUN apt-get update \\\\\n    && apt-get install -y gcc libc6-dev=2.36-9+deb12u13 \\\\\n"
        "    && rm -rf /var/lib/apt/lists/*\nEOF\n",
        [(2, "libc6-dev=2.36-9+deb12u13")],
    ),
    "second of two installs": (
        "apt-get install -y nasm=2.16.01-1 && apt-get install -y libssl3=3.0.17-1~deb12u3\n",
        [(1, "libssl3=3.0.17-1~deb12u3")],
    ),
}

GOOD = {
    "glob pins": "RUN apt-get install -y 'libde265-dev=1.0.11-1+deb12u*' ca-certificates=20250419~deb12u*\n",
    "pins without a security revision": "RUN apt-get install -y cmake=3.25.1-1 python3-pip=23.0.1+dfsg-1\n",
    "unpinned": 'DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"\n',
    "a comment": "# libde265-dev=1.0.11-1+deb12u4 broke when deb12u5 came out\nRUN apt-get install -y 'libde265-dev=1.0.11-1+deb12u*'\n",
    "not apt's arguments": "RUN apt-get install -y nasm=2.16.01-1 && echo libx=1.0-1+deb12u1 > /tmp/versions\n",
    "apt-get download": "apt-get download -q libde265-dev=1.0.11-1+deb12u4\n",
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_the_check_fires_on_a_full_revision(name):
    text, expected = BAD[name]
    assert full_revision_pins(text) == expected


@pytest.mark.parametrize("name", sorted(GOOD))
def test_the_check_passes_globs_and_other_pins(name):
    assert full_revision_pins(GOOD[name]) == []


def test_the_check_fires_on_the_old_dockerfile_line(tmp_path):
    """The pins this check replaced, in a copy of the real Dockerfile."""
    text = (REPO / "Dockerfile").read_text()
    old = text.replace("'libde265-dev=1.0.11-1+deb12u*'", "libde265-dev=1.0.11-1+deb12u4")
    assert old != text
    assert [w for _, w in full_revision_pins(old)] == ["libde265-dev=1.0.11-1+deb12u4"]
