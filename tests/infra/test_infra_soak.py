"""infra/soak.sh and infra/soak.py: what can be checked without a ten-minute soak or an image build
(the runs themselves are not CI; docs/reliability.md holds their figures)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess

import pytest

from conftest import REPO


def _soak():
    spec = importlib.util.spec_from_file_location("soak", REPO / "infra" / "soak.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("text,seconds", [("20m", 1200), ("1h", 3600), ("1h30m", 5400), ("90s", 90), ("45", 45), ("2.5m", 150)])
def test_duration(text, seconds):
    assert _soak().duration_s(text) == seconds


@pytest.mark.parametrize("text", ["", "20 m", "1d", "m20", "1h 30m"])
def test_duration_refuses(text):
    with pytest.raises(argparse.ArgumentTypeError):
        _soak().duration_s(text)


def test_image_mode_runs_under_image_check():
    """--image builds with tools/image-check.sh's own build (its dockerd, bases, tag) and runs the
    CPU image only."""
    text = (REPO / "infra" / "soak.sh").read_text()
    assert 'exec "$REPO/tools/image-check.sh" --then "$PY" "$REPO/infra/soak.py" "$@"' in text
    assert "export CLIPFN_IMAGES_ONLY=cpu" in text
    soak = (REPO / "infra" / "soak.py").read_text()
    assert 'default="clipfn-check:cpu"' in soak and '"--cpus", args.cpus' in soak and "memory=args.memory" in soak
    assert 'default="1h"' in soak and 'default="1g"' in soak


def test_image_check_refuses_an_unknown_argument():
    # The arguments are read before anything is installed or started.
    proc = subprocess.run([str(REPO / "tools" / "image-check.sh"), "--bogus"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and "unknown argument --bogus" in proc.stderr
    proc = subprocess.run([str(REPO / "tools" / "image-check.sh"), "--then"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and "--then needs a command" in proc.stderr


def test_process_soak_report_keeps_the_image_section(tmp_path):
    soak = _soak()
    path = tmp_path / "reliability.md"
    path.write_text(f"# old\n\n## 1. Soak\n\nold figures\n\n{soak.IMAGE_SECTION} under docker run\n\nimage figures\n")
    args = argparse.Namespace(bin=str(REPO / "target/debug/clipfn"), vus=2, minutes=2, stall_s=6, ocr=False,
                              fetch_timeout_ms=2000, request_timeout_ms=15000)
    s = dict(ok=True, requests=1, failed_requests=0, failed_checks=0, p50_s=1, p95_s=2, rss_warm_mib=1,
             rss_end_mib=1, rss_change=0, rss_max_mib=1)
    f = dict(ok=True, requests=1, injected={}, outcomes={}, slowest_s=1, problems=[])
    r = dict(ok=True, requests=1, failed=0)
    soak.report(args, s, f, r, path)
    text = path.read_text()
    assert "old figures" not in text and text.count(soak.IMAGE_SECTION) == 1 and text.endswith("image figures\n")
    soak.report(args, s, f, r, path)
    assert path.read_text() == text
    assert soak.IMAGE_SECTION in (REPO / "docs" / "reliability.md").read_text()


def _sample(t, rss_mib, cpu_s, oom=0, running=True):
    return {"t_s": t, "rss_kib": rss_mib * 1024, "anon_kib": rss_mib * 512, "hwm_kib": 300 * 1024, "cpu_s": cpu_s,
            "docker_stats_bytes": rss_mib * 2**20, "machine_busy": t * 200, "machine_total": t * 200,
            "loadavg": "2.00", "cgroup_usage": rss_mib * 2**20, "cgroup_rss": rss_mib * 2**19, "cgroup_cache": 0,
            "cgroup_peak": 400 * 2**20, "cgroup_oom_kill": oom, "cgroup_failcnt": 0, "cgroup_cpu_ns": cpu_s * 1e9,
            "running": running}


def _summary(samples, state, requests=None, item_errors=None):
    soak = _soak()
    args = argparse.Namespace(tag="clipfn-check:cpu", memory="1g", cpus="2", vus=4, duration=1200.0)
    metrics = {"http_reqs": {"values": {"count": 3}}, "embed_item_ok": {"values": {"passes": 120, "fails": 0}},
               "http_req_duration": {"values": {"med": 1500, "p(95)": 3000, "p(99)": 3500, "max": 4000}},
               "embed_item_errors": {"values": {"count": sum((item_errors or {}).values())}}}
    requests = requests if requests is not None else [(10, 1000, "200"), (700, 3000, "200"), (1100, 1500, "200")]
    model = str(REPO / "infra" / "soak.py")  # any file: only its name and size are reported
    return soak.summarise_image_soak(args, {"Id": "sha256:" + "0" * 64, "Size": 3e8}, model, ["a.jpg"] * 34,
                                     1.0, 1200, 0, metrics, requests, item_errors or {}, samples, state,
                                     "2026-12-02 00:00 UTC", 0), soak


def test_image_summary_passes_a_flat_run_and_renders():
    samples = [_sample(t, 100 + (t % 60) / 60, t * 0.5) for t in range(0, 1230, 30)] + [_sample(1235, 90, 615)]
    r, soak = _summary(samples, {"State": {"OOMKilled": False, "Running": True}})
    assert r["ok"], r
    assert r["photos_sent"] == 120 and r["latency_s"]["p95"] == 3.0 and r["cgroup_oom_kill"] == 0
    assert abs(r["cpu_cores"]["clipfn"] - 0.5) < 0.01 and abs(r["rss_change"]) < 0.02
    # Windows of a quarter of the run, those without a request left out.
    assert [(w["from_min"], w["requests"], w["p95_s"]) for w in r["p95_by_window"]] == [(0, 1, 1.0), (10, 1, 3.0), (15, 1, 1.5)]
    text = soak.image_soak_markdown(r)
    assert text.startswith("## Image soak") and "(pass)" in text and "| 0.0 |" in text


@pytest.mark.parametrize("case", ["oom_killed", "cgroup_oom_kill", "growth", "non_200", "photo_errors"])
def test_image_summary_fails(case):
    samples = [_sample(t, 100, t * 0.5) for t in range(0, 1230, 30)] + [_sample(1235, 90, 615)]
    state = {"State": {"OOMKilled": case == "oom_killed", "Running": case != "oom_killed"}}
    requests, item_errors = None, None
    if case == "cgroup_oom_kill":
        samples[-5]["cgroup_oom_kill"] = 1
    if case == "growth":
        for s in samples[-8:]:
            s["rss_kib"] = 150 * 1024
    if case == "non_200":
        requests = [(10, 1000, "200"), (700, 120000, "0")]
    if case == "photo_errors":
        item_errors = {"decode_failed": 2}
    r, _ = _summary(samples, state, requests, item_errors)
    assert not r["ok"], r
