"""The HTML report: self-contained (inline CSS, embedded PNG plots, no network), checked as text and, where
Chromium is installed, rendered headless and checked in the DOM it builds."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import test_report_support as S  # noqa: E402

from instance_factory.report import build_report, render_html  # noqa: E402

pytest.importorskip("matplotlib", reason="the HTML report's plots need matplotlib (pip install .[report])")

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
                 if shutil.which(n)), None)


@pytest.fixture(scope="module", autouse=True)
def fake_family():
    S.register_fake()
    yield
    S.unregister_fake()


def _report(tmp_path, tuned: bool):
    reg = S.make_registry(tmp_path, data={"ndims": (2, 3)}, weight={"dtypes": ("fp16", "bf16_fp32w")})
    ev = tmp_path / "evidence"
    S.write_jsonl(ev / "interpreter.jsonl", S.INTERP_META, [S.ev_row(reg, S.inst_name())])
    S.write_jsonl(ev / "gpu" / "h100.jsonl", S.GPU_META, [S.ev_row(reg, S.inst_name(), kernel_hash=None)])
    db = tmp_path / "db"
    db.mkdir()
    if tuned:
        rows = []
        for i, n in enumerate((2, 4, 8, 16)):
            p = f"2d-g1-n{n}-k64-c64-f3x3-i28x28-s1x1-d1x1-l1x1-r1x1"
            rows.append(S.tuning_row(reg, S.inst_name(), p, 0.1 * n, 0.12 * n * (1 + 0.1 * i)))
            rows.append(S.tuning_row(reg, S.inst_name(op="conv_bwd_weight", dtype="bf16_fp32w"), p, 0.2 * n,
                                     0.15 * n))
        # a problem of a shipped problem set (quickstart 2d_3x3_s1) is grouped under its set's name
        rows.append(S.tuning_row(reg, S.inst_name(), "2d-g1-n2-k16-c8-f3x3-i6x6-s1x1-d1x1-l1x1-r1x1", 0.01, 0.02))
        S.write_db(db, rows)
    return build_report(reg, ev, db)


def _assert_self_contained(page: str):
    assert "<style>" in page
    assert not re.search(r"(?i)<script|<link|@import|url\(|https?://", page), "the page must not load anything"
    for src in re.findall(r'src="([^"]*)"', page):
        assert src.startswith("data:image/png;base64,"), src


def test_html_content_without_tuning_data(tmp_path):
    page = render_html(_report(tmp_path, tuned=False))
    _assert_self_contained(page)
    assert "<h2 id='table-conv_bwd_data'>Backward data (<code>conv_bwd_data</code>)</h2>" in page
    assert "NHWGC/GKYXC/NHWGK" in page and "bf16 (fp32 for weight)" in page
    assert 'class="tok ev-gpu"' in page and ">2Dᴵᴳ<" in page  # interpreter + GPU
    assert 'class="tok ev-declared"' in page and ">3Dᴰ<" in page  # declared only: its own style
    assert 'id="no-tuning-data"' in page and "No tuning data yet" in page
    assert "data:image/png" not in page
    assert "Compared with CK" in page and "CK supports, we lack" in page


def test_html_plots_with_tuning_data(tmp_path):
    page = render_html(_report(tmp_path, tuned=True))
    _assert_self_contained(page)
    assert 'id="plot-speedup"' in page and 'id="plot-roofline"' in page
    assert page.count("data:image/png;base64,") == 2
    assert "No tuning data yet" not in page
    assert "ᵀ" in page and "×" in page


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (apt-get install chromium); "
                                             "the text checks above still run")
def test_html_renders_in_headless_chromium(tmp_path):
    page = render_html(_report(tmp_path, tuned=True))
    # test-only probe: after load, record whether every embedded PNG decoded, where --dump-dom shows it
    probe = ("<script>window.addEventListener('load', () => { const imgs = [...document.images]; "
             "document.body.setAttribute('data-images', imgs.length + ':' + "
             "imgs.filter(i => i.complete && i.naturalWidth > 0).length); });</script>")
    path = tmp_path / "report.html"
    path.write_text(page.replace("</body>", probe + "</body>"), encoding="utf-8")
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--virtual-time-budget=5000", "--dump-dom", path.as_uri()],
            capture_output=True, text=True, timeout=120)
    dom = proc.stdout
    assert proc.returncode == 0 and "<table>" in dom, proc.stderr[-2000:]
    assert 'data-images="2:2"' in dom, "both plots must decode: " + re.findall(r"data-images=\"[^\"]*\"", dom).__repr__()
    assert "Backward weight" in dom and "NGCHW/GKCYX/NGKHW" in dom and "2Dᴵᴳᵀ" in dom
    assert "Speedup vs cuDNN per problem set" in dom and "TFLOP/s against the roofline" in dom
