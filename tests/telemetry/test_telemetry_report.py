"""The report shows what the GPUs spent: rounds measured on the simulator with its DCGM exporter give
the summary's telemetry rounds, a table with joules per output token and a power and utilization
chart that headless Chromium renders; a voided round says why."""

from __future__ import annotations

import base64
import shutil
import subprocess
import tempfile

from engine_rounds_helpers import one_round
from test_telemetry_sim import SHAPE, context, gpus
from tasks.load.plan import Shape
from tasks.report import write_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_the_report_shows_a_telemetry_chart_and_joules_per_token(sims, tmp_path):
    sim = sims("vllm", {"slots": 8, "itl_s": 0.01, "gpus": gpus(idle_power_w=90.0, energy_reset_after_requests=20)})
    ctx = context(sim.url, tmp_path)
    one_round(ctx, SHAPE, 12, round_=1)
    one_round(ctx, Shape(input_tokens=64, output_tokens=40, concurrency=8), 16, round_=2)  # the reset falls here
    built = write_report(ctx.run_dir, ctx.config)
    rounds = built["summary"].engines["eng"].telemetry_rounds
    assert [r.round for r in rounds] == [1, 2]
    assert rounds[0].energy_per_output_token_j is not None and rounds[0].why_missing is None
    assert rounds[1].energy_per_output_token_j is None and "reset" in rounds[1].why_missing
    assert rounds[1].readings[0][0] > rounds[0].readings[-1][0]  # one time axis over the run
    png = built["charts"]["telemetry"]
    assert png.startswith(PNG_MAGIC) and len(png) > 10_000
    page = built["page"]
    assert "GPU telemetry: power, utilization and energy per token" in page
    assert f"{rounds[0].energy_per_output_token_j:.4f} J" in page
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION of GPU-" in page  # the voided round's reason

    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    assert binary, "chromium is needed to render the report: apt-get install chromium"
    path = tmp_path / "report.html"
    path.write_text(page, encoding="utf-8")
    profile = tempfile.mkdtemp(prefix="dayone-chromium-")
    try:
        dom = subprocess.run([binary, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
                              "--dump-dom", path.as_uri()], capture_output=True, timeout=120, check=False)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    html = dom.stdout.decode()
    assert "id=\"telemetry\"" in html or "id='telemetry'" in html, "the telemetry section is missing from the DOM"
    shown = base64.b64encode(png).decode()[:200]
    assert shown in html, "the rendered page does not carry the telemetry chart"
