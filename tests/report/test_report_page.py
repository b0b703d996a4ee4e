"""report.html in a real browser: headless Chromium renders it, and the charts and tables are there."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

CHART_NAMES = ("throughput", "ttft", "decode_prefill", "long_context", "prefix_cache", "telemetry", "frontier")
# A forest plot per scenario compared: each engine against the base, ratio and interval
FOREST_NAMES = ("effects_short", "effects_prefill", "effects_decode")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _chromium(binary: str, *args: str) -> subprocess.CompletedProcess:
    profile = tempfile.mkdtemp(prefix="dayone-chromium-")
    try:
        return subprocess.run([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
                              capture_output=True, timeout=120, check=False)
    finally:
        shutil.rmtree(profile, ignore_errors=True)


class _Dom(HTMLParser):
    """The rendered DOM's images, tables (with their rows' text) and section ids."""

    def __init__(self) -> None:
        super().__init__()
        self.images: list[dict[str, str]] = []
        self.tables: list[list[str]] = []
        self.ids: set[str] = set()
        self._depth = 0
        self._row: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "img":
            self.images.append(a)
        elif tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self._row = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "tr" and self._row is not None and self.tables:
            self.tables[-1].append(" ".join(self._row))
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._row is not None and data.strip():
            self._row.append(data.strip())


@pytest.fixture(scope="module")
def report(sim_run):
    from tasks.report import write_report

    built = write_report(sim_run.run_dir(), sim_run.cfg())
    return sim_run.run_dir().path / "report.html", built


def test_chromium_renders_every_chart_and_table(report, chromium, tmp_path):
    page, built = report
    shot = tmp_path / "report.png"
    run = _chromium(chromium, f"--screenshot={shot}", "--window-size=1400,3000", "--hide-scrollbars",
                    page.as_uri())
    assert shot.exists(), run.stderr.decode(errors="replace")[-2000:]
    png = shot.read_bytes()
    assert png.startswith(PNG_MAGIC)
    assert len(png) > 100_000, f"screenshot of {len(png)} bytes: the page did not render"
    import matplotlib.image

    pixels = matplotlib.image.imread(str(shot))[:, :, :3]
    assert pixels.shape[:2] == (3000, 1400)
    colours = {tuple(p) for p in (pixels[::7, ::7] * 255).astype(int).reshape(-1, 3).tolist()}
    non_white = float((pixels.min(axis=2) < 0.9).mean())
    assert len(colours) > 200, f"only {len(colours)} colours: charts are missing from the screenshot"
    assert non_white > 0.05, f"the screenshot is {non_white:.1%} ink: mostly blank"
    if os.environ.get("DAYONE_REPORT_SCREENSHOT"):  # docs/report-screenshot.png is made this way
        shutil.copyfile(shot, os.environ["DAYONE_REPORT_SCREENSHOT"])
        # and its telemetry section, below the page's first 3000 pixels (docs/report-telemetry.png)
        section = Path(os.environ["DAYONE_REPORT_SCREENSHOT"]).with_name("report-telemetry.png")
        subprocess.run([sys.executable, "-c", SECTION_SHOT, chromium, page.as_uri(), "telemetry", str(section)],
                       check=True, timeout=120)

    dom_run = _chromium(chromium, "--dump-dom", page.as_uri())
    dom = _Dom()
    dom.feed(dom_run.stdout.decode())
    charts = [img for img in dom.images if img.get("src", "").startswith("data:image/png;base64,")]
    assert len(charts) == len(CHART_NAMES) + len(FOREST_NAMES) == len(built["charts"]), [i.get("alt") for i in dom.images]
    for img in charts:
        body = base64.b64decode(img["src"].split(",", 1)[1])
        assert body.startswith(PNG_MAGIC) and len(body) > 10_000, img.get("alt")
    assert not [i for i in dom.images if not i.get("src", "").startswith("data:")], "the page must be self-contained"
    for section in ("decision", "comparison", "effects", *CHART_NAMES, *FOREST_NAMES, "startup", "checks", "not-tested"):
        assert section in dom.ids, f"section {section} missing from the rendered page"
    text = {i: "\n".join(rows) for i, rows in enumerate(dom.tables)}
    everything = "\n".join(text.values())
    for engine in ("sim-sglang", "sim-vllm"):
        assert engine in everything
    assert any("completions_echo_false" in t and "fail" in t for t in text.values()), "functional checks table"
    assert any("fallback_backend" in t and "warning" in t for t in text.values()), "startup findings table"
    assert any("needle at 50%" in t for t in text.values()), "needle table"
    assert any("TTFT not published" in t for t in text.values()), "the unreliable engine's TTFT must be withheld"
    assert any("sim-down" in t and "wait_ready" in t for t in text.values()), "not-tested table with the failed step"
    effects = next(t for t in text.values() if t.startswith("scenario level figure engine ratio (95% CI)"))
    for c in built["summary"].comparisons:
        assert f"{c.scenario} {c.level}" in effects and c.interval() in effects, "the comparisons table"


def test_report_is_self_contained_and_deterministic(sim_run, report):
    from tasks.report import write_report

    page, built = report
    html = page.read_text(encoding="utf-8")
    for forbidden in ("<script", "src='http", 'src="http', "<link ", "url(", "@import"):
        assert forbidden not in html, f"{forbidden} in a report that must work offline"
    again = write_report(sim_run.run_dir(), sim_run.cfg())
    assert again["page"] == built["page"], "the same run must give the same bytes (write-once archive)"
    assert again["charts"] == built["charts"]
    for name in (*CHART_NAMES, *FOREST_NAMES):
        assert (sim_run.run_dir().path / "charts" / f"{name}.png").read_bytes() == built["charts"][name]


def test_forest_plot_is_drawn_from_the_summary_alone(report):
    from tasks.report import read_summary
    from tasks.report.charts import forest_chart, render_charts

    page, built = report
    summary = read_summary(built["summary"].model_dump(mode="json"))  # what an archived summary.json holds
    assert {c.scenario for c in summary.comparisons} == {"short", "prefill", "decode"}
    for name in FOREST_NAMES:
        png = forest_chart(summary, name.removeprefix("effects_"))
        assert png.startswith(PNG_MAGIC) and png == built["charts"][name]
        assert base64.b64encode(png).decode() in page.read_text(encoding="utf-8")
    assert not [n for n in render_charts(summary.model_copy(update={"comparisons": []})) if n.startswith("effects_")]


@pytest.mark.parametrize("name", ["report-screenshot.png", "report-telemetry.png"])
def test_screenshot_in_docs_is_small_and_a_png(name):
    shot = Path(__file__).resolve().parents[2] / "docs" / name
    assert shot.exists(), f"docs/{name}: run this file with DAYONE_REPORT_SCREENSHOT set to docs/report-screenshot.png"
    assert shot.read_bytes().startswith(PNG_MAGIC)
    assert shot.stat().st_size < 1_000_000


# One section of the page, from its heading to the end of its figure, through Playwright (in a process of
# its own: Playwright's sync loop must not outlive it in the test's worker).
SECTION_SHOT = """
import sys
from playwright.sync_api import sync_playwright
chromium, uri, section, out = sys.argv[1:]
with sync_playwright() as p:
    browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
    page = browser.new_page(viewport={"width": 1400, "height": 1200})
    page.goto(uri)
    top = page.locator("#" + section).bounding_box()
    end = page.locator("#" + section + " ~ figure").first.bounding_box()
    page.screenshot(path=out, full_page=True, clip={"x": 0, "y": top["y"] - 10, "width": 1400,
                                                     "height": end["y"] + end["height"] - top["y"] + 20})
    browser.close()
"""


# Words of the KV capacity table's cells that the browser broke across two lines (a word in one line
# has one client rect; one split by the layout has two).
BROKEN_WORDS = """
import json, sys
from playwright.sync_api import sync_playwright
chromium, uri, width = sys.argv[1], sys.argv[2], int(sys.argv[3])
JS = '''() => {
  const broken = [];
  for (const cell of document.querySelectorAll("table.kv-capacity td")) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const m of node.data.matchAll(/\\\\S+/g)) {
        const range = document.createRange();
        range.setStart(node, m.index); range.setEnd(node, m.index + m[0].length);
        const lines = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
        if (lines.size > 1) broken.push(m[0]);
      }
    }
  }
  return {cells: document.querySelectorAll("table.kv-capacity td").length, broken};
}'''
with sync_playwright() as p:
    browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
    page = browser.new_page(viewport={"width": width, "height": 1200})
    page.goto(uri)
    print(json.dumps(page.evaluate(JS)))
    browser.close()
"""


@pytest.mark.parametrize("width", [1400, 900])
def test_the_kv_capacity_table_breaks_no_word_across_lines(report, chromium, width):
    import json

    page, _ = report
    run = subprocess.run([sys.executable, "-c", BROKEN_WORDS, chromium, page.as_uri(), str(width)],
                         capture_output=True, text=True, timeout=120, check=True)
    found = json.loads(run.stdout.strip().splitlines()[-1])
    assert found["cells"] > 0, "the report has no KV capacity table to check"
    assert found["broken"] == [], f"words broken across lines at {width} px: {found['broken']}"
